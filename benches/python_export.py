"""The Python reference's side of benches/export_compare.sh, and the input both sides read.

    python_export.py make N PATH      # N chat trajectories, 4 attempts per task, varied scores
    python_export.py ref PATH ROWS OUT  # the reference (nenyax==0.1.0a1): read, to_rows, to_parquet

`ref` prints one JSON line: {"rows", "seconds"} (reading the JSONL included, as on the Rust side).
"""

import json
import sys
import time


def make(n: int, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            task, attempt = divmod(i, 4)
            answer = str(task + (0 if attempt % 2 == 0 else 1))
            t = {
                "env_id": "builtin:arithmetic",
                "mode": "step",
                "protocol": "0.1",
                "task": {"id": f"t{task}"},
                "seed": i,
                "messages": [
                    {"role": "system", "content": "Solve the problem. Answer inside <answer></answer>."},
                    {"role": "user", "content": f"What is {task} + 0? Think step by step." * 3},
                    {"role": "assistant", "content": f"Let me think. {task} plus zero is {answer}. <answer>{answer}</answer>" * 2},
                ],
                "judgment": {"score": 1.0 if attempt % 2 == 0 else 0.25 * attempt, "source": "verifier", "judge": "exact"},
                "started_at": 1.7e9 + i,
                "duration_s": 0.01,
            }
            f.write(json.dumps(t) + "\n")


def ref(path: str, rows: str, out: str) -> None:
    from nenyax import Trajectory
    from nenyax.integrations.export import to_parquet, to_rows

    t0 = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        trajs = [Trajectory.model_validate_json(line) for line in f if line.strip()]
    made = to_rows(trajs, rows, min_score=1.0)
    to_parquet(made, out)
    print(json.dumps({"rows": len(made), "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(int(sys.argv[2]), sys.argv[3])
    else:
        ref(sys.argv[2], sys.argv[3], sys.argv[4])
