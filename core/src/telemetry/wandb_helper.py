"""The Python side of nenyax's `wandb` telemetry sink (embedded in libnenyax).

Reads one JSON command a line on stdin (init, log, save, finish) and answers each with one JSON
line on stdout: {"ok": true, ...} or {"error": "..."}. Everything the wandb SDK prints goes to
stderr, so the reply channel stays clean.
"""

import base64
import json
import os
import sys


def serve(replies):
    run = None
    disabled = False
    step_keys = set()
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        reply = {"ok": True}
        try:
            if op == "init":
                import wandb

                run = wandb.init(
                    project=cmd["project"],
                    entity=cmd.get("entity"),
                    name=cmd.get("name"),
                    group=cmd.get("group"),
                    tags=cmd.get("tags"),
                    job_type=cmd.get("job_type"),
                    config=cmd.get("config") or {},
                    dir=cmd.get("dir"),
                    mode=cmd["mode"],
                )
                disabled = cmd["mode"] == "disabled"
                # Episodes and training steps count separately, each on its own x-axis.
                run.define_metric("episode")
                run.define_metric("episode/*", step_metric="episode")
                run.define_metric("step")
                reply.update(
                    id=run.id,
                    dir=os.path.dirname(run.dir),
                    url=run.url if cmd["mode"] == "online" else None,
                    version=wandb.__version__,
                )
            elif run is None:
                raise RuntimeError(f"{op!r} before init")
            elif op == "log":
                data = dict(cmd["data"])
                if "episode" in cmd:
                    data["episode"] = cmd["episode"]
                else:
                    for key in data.keys() - step_keys:
                        run.define_metric(key, step_metric="step")
                        step_keys.add(key)
                    data["step"] = cmd["step"]
                run.log(data)
            elif op == "save" and disabled:
                pass  # a disabled run has no directory worth writing into
            elif op == "save":
                path = os.path.join(run.dir, cmd["name"])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(base64.b64decode(cmd["data"]))
                run.save(path, base_path=run.dir, policy="now")
            elif op == "finish":
                run.finish(exit_code=0 if cmd.get("ok", True) else 1)
                run = None
            else:
                raise ValueError(f"unknown command {op!r}")
        except Exception as e:  # the sink reports it; the helper keeps serving
            reply = {"error": f"{type(e).__name__}: {e}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if op == "finish" and "error" not in reply:
            return


if __name__ == "__main__":
    replies = sys.stdout
    sys.stdout = sys.stderr
    serve(replies)
