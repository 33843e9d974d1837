"""The v1 verifiers API (verifiers >= 0.4.0, also in 0.3.1 as `verifiers.v1`): a package
exporting one `vf.Taskset` subclass; rollouts through `vf.make_agent(...).run(task)` with the
`null` harness (plain chat) in the `subprocess` runtime, unless the taskset exports its own
Harness."""

import json
import os
import sys
import traceback

from .protocol import BridgeError, first_paragraph, jsonable
from .verifiers_wire import (
    VERIFIERS_KEY_VAR,
    VERIFIERS_UNLIMITED_STEPS,
    missing_uv,
    vf_dump,
    vf_duration,
    vf_error_text,
    vf_float,
    vf_get,
    vf_message,
    vf_messages,
)


class V1Api:
    """The v1 half of VerifiersDriver (which holds the state these methods use)."""

    @staticmethod
    def _ensure_uv():
        """The v1 harness programs run with `uv`. Put the interpreter's own bin directory (the
        venv's, where `pip install uv` puts it) first on PATH for the runtime's children: the
        host starts this interpreter without activating its venv, and without uv on PATH
        verifiers falls back to `pip install --user uv` or a download."""
        import shutil

        bindir = os.path.dirname(sys.executable)
        path = os.environ.get("PATH", "")
        if os.path.isfile(os.path.join(bindir, "uv")) and bindir not in path.split(os.pathsep):
            os.environ["PATH"] = bindir + (os.pathsep + path if path else "")
            path = os.environ["PATH"]
        local = os.path.join(os.path.expanduser("~"), ".local", "bin")
        if shutil.which("uv", path=path + os.pathsep + local) is None:
            raise missing_uv()

    def _load_v1(self, target, module, env_args):
        import verifiers.v1 as vf
        from verifiers.v1.taskset import Taskset
        from verifiers.v1.utils.loaders import _plugin_class, harness_class

        try:
            ts_cls = _plugin_class(module, Taskset, "taskset")
        except (AttributeError, TypeError, ValueError) as e:
            raise BridgeError("UnknownTarget", f"'{target}' (module '{module.__name__}'): {e}") from e
        # The taskset's config class (as vf.taskset_config_type resolves it): env args are its fields.
        try:
            from verifiers.v1.utils.generic import concrete_type

            cfg_cls = concrete_type(ts_cls, vf.TasksetConfig, origin=Taskset) or vf.TasksetConfig
        except Exception:
            cfg_cls = vf.TasksetConfig
        try:
            cfg = cfg_cls(**{"id": module.__name__.rsplit(".", 1)[-1], **env_args})
        except Exception as e:
            accepted = [k for k in getattr(cfg_cls, "model_fields", {}) if k != "id"]
            raise BridgeError(
                "InvalidParameter",
                f"taskset config of '{target}' rejected the arguments: {type(e).__name__}: {e}; "
                f"accepted: {', '.join(accepted)}",
                accepted=accepted,
            ) from e
        try:
            taskset = ts_cls(cfg)
        except (TypeError, ValueError) as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("InvalidParameter", f"taskset '{target}' rejected its config: {type(e).__name__}: {e}") from e
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"taskset '{target}' failed to load: {type(e).__name__}: {e}") from e
        if not getattr(taskset, "bounded", not getattr(taskset, "INFINITE", False)):
            raise BridgeError("EnvironmentError", f"taskset '{target}' is infinite; bounded tasksets only")
        try:
            tasks = list(taskset)
        except (TypeError, ValueError) as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("InvalidParameter", f"taskset '{target}' failed to load its tasks: {type(e).__name__}: {e}") from e
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"taskset '{target}' failed to load its tasks: {type(e).__name__}: {e}") from e
        # The taskset's own harness when its package exports one, else plain chat.
        harness_id = "null"
        try:
            from verifiers.v1.harness import Harness

            _plugin_class(module, Harness, "harness")
            harness_id = module.__name__.rsplit(".", 1)[-1]
        except Exception:
            pass
        try:
            harness_class(harness_id)
        except Exception as e:
            raise BridgeError("EnvironmentError", f"verifiers harness '{harness_id}' is unavailable: {e}") from e
        self._ensure_uv()
        self.vf, self.taskset, self.rows, self.harness_id = vf, taskset, tasks, harness_id

        reward_fns, metrics, tools = [], [], []
        if tasks:
            t0 = tasks[0]
            try:
                reward_fns = [{"name": f.__name__, "weight": float(getattr(f, "_vf_weight", 1.0))} for f in t0.hooks("reward")]
                for j in t0.plugged_judges():
                    reward_fns.append({"name": j.reward_name, "weight": float(j.config.weight)})
                metrics = [f.__name__ for f in t0.hooks("metric")]
            except Exception:
                traceback.print_exc(file=sys.stderr)
            try:
                sets = list(ts_cls.toolsets(cfg)) + list(type(t0).toolsets(t0.config))
                tools = [getattr(getattr(s, "config", None), "id", None) or type(s).__name__ for s in sets]
            except Exception:
                traceback.print_exc(file=sys.stderr)
        self.reward_names = [f["name"] for f in reward_fns]
        has_ref = bool(tasks) and getattr(tasks[0].data, "answer", None) not in (None, "")
        description = first_paragraph(module.__doc__) or first_paragraph(ts_cls.__doc__) or f"verifiers taskset {target}"
        chat_only = harness_id == "null" and not tools
        return {
            "name": target,
            "version": self.version,
            "description": description,
            "num_tasks": len(tasks),
            "text": True,
            "mode": "rollout",
            "reward_timing": "terminal",
            "max_steps": 1 if chat_only else VERIFIERS_UNLIMITED_STEPS,
            "action_schema": None,
            "observation_schema": None,
            "extra": {
                "api": "v1",
                "module": module.__name__,
                "taskset_class": ts_cls.__name__,
                "harness": harness_id,
                "runtime": "subprocess",
                "split": self.split,
                "reward_functions": reward_fns,
                "metrics": metrics,
                "tools": tools,
                "env_args": jsonable(dict(env_args)),
                "max_turns": 1 if chat_only else None,
            },
            "has_reference": has_ref,
        }


    def _v1_prepare_offline(self):
        """Once per process, before the first v1 rollout: prepare the null harness's PEP 723
        script environment from uv's cache alone, and hand verifiers the interpreter.

        verifiers' subprocess runtime prepares the script on a process's first rollout with
        `uv sync --script` under UV_OFFLINE=false, which queries PyPI even when uv's cache holds
        everything (observed: with PyPI unreachable the rollout fails with a HarnessError after
        about 6 s of retries, however warm the cache). Resolving offline here, into the same
        script path and uv environment, and recording the result in the runtime's
        interpreter table (the one verifiers fills itself) skips that. Anything unexpected
        (another verifiers layout, a cold cache) leaves verifiers to do it its own way."""
        if self.harness_id != "null":
            return
        import hashlib
        import shutil
        import subprocess

        try:
            from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
            from verifiers.v1.runtimes.subprocess import SubprocessRuntime
        except Exception:
            return
        table = getattr(SubprocessRuntime, "_interpreters", None)
        scripts_dir = getattr(SubprocessRuntime, "scripts_dir", None)
        uv = shutil.which("uv")
        if not isinstance(table, dict) or not isinstance(scripts_dir, str) or uv is None:
            return
        data = CHAT_PROGRAM_SOURCE.encode() if isinstance(CHAT_PROGRAM_SOURCE, str) else CHAT_PROGRAM_SOURCE
        path = f"{scripts_dir}/{hashlib.sha256(data).hexdigest()}.py"
        if path in table:
            return
        try:
            os.makedirs(scripts_dir, exist_ok=True)
            current = None
            if os.path.exists(path):
                with open(path, "rb") as f:
                    current = f.read()
            if current != data:
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            env = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
            env["UV_OFFLINE"] = "1"
            run = lambda args: subprocess.run(  # noqa: E731
                [uv, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
            )
            sync = run(["sync", "--script", path, "-q", "--no-config", "--offline"])
            if sync.returncode != 0:
                print(f"nenyax: offline uv sync of the harness script failed, verifiers will retry online: {sync.stderr.strip()[-500:]}", file=sys.stderr)
                return
            found = run(["python", "find", "--script", path, "--no-config", "--offline"])
            lines = found.stdout.strip().splitlines()
            if found.returncode == 0 and lines and os.path.exists(lines[-1]):
                table[path] = lines[-1]
        except Exception:
            traceback.print_exc(file=sys.stderr)

    async def _v1_agent(self, base_url, model, sampling, retries, timeout):
        from contextlib import AsyncExitStack

        vf = self.vf
        key = json.dumps([base_url, model, sampling, retries, timeout], sort_keys=True, default=str)
        if self.agent is not None and self.agent[0] == key:
            return self.agent[1]
        await self._close_agent()
        client_kw = {"base_url": base_url, "api_key_var": VERIFIERS_KEY_VAR}
        if timeout is not None:
            client_kw["timeout"] = {"read": float(timeout)}
        cfg = vf.AgentConfig(
            model=model,
            client=vf.EvalClientConfig(**client_kw),
            harness={"id": self.harness_id},
            runtime=vf.SubprocessConfig(),
            sampling=vf.SamplingConfig(**sampling) if sampling else None,
        )
        stack = AsyncExitStack()
        agent = await stack.enter_async_context(vf.make_agent(cfg))
        self.agent = (key, agent, stack)
        return agent

    async def _close_agent(self):
        if self.agent is not None:
            _, _, stack = self.agent
            self.agent = None
            try:
                await stack.aclose()
            except Exception:
                traceback.print_exc(file=sys.stderr)

    async def _rollout_v1(self, idx, base_url, model, sampling, retries, timeout):
        agent = await self._v1_agent(base_url, model, sampling, retries, timeout)
        trace = await agent.run(self.rows[idx])
        from verifiers.v1.dialects.chat import message_to_wire

        def wire(m):
            try:
                return vf_message(message_to_wire(m))
            except Exception:
                return vf_message(m)

        branches = []
        try:
            branches = trace.branches or []
        except Exception:
            traceback.print_exc(file=sys.stderr)
        prompt, completion = [], []
        if branches:
            nodes = branches[-1].nodes
            first = next((i for i, n in enumerate(nodes) if n.sampled), len(nodes))
            prompt = [wire(n.message) for n in nodes[:first]]
            completion = [wire(n.message) for n in nodes[first:]]
        else:
            data = self.rows[idx].data
            if vf_get(data, "system_prompt"):
                prompt.append({"role": "system", "content": data.system_prompt})
            prompt += vf_messages(vf_get(data, "prompt"))
        components = {}
        weights = {}
        for k, r in (vf_get(trace, "rewards") or {}).items():
            components[k] = None if r is None else vf_float(vf_get(r, "score", r))
            weights[k] = None if r is None else vf_float(vf_get(r, "weight", 1.0))
        metrics = {k: (None if v is None else vf_float(v)) for k, v in (vf_get(trace, "metrics") or {}).items()}
        errors = [e.model_dump(mode="json", exclude_none=True) for e in (vf_get(trace, "errors") or [])]
        error = vf_error_text(trace.errors) if errors else (None if vf_get(trace, "ok", True) else "rollout did not complete")
        usage = None
        try:
            usage = jsonable(vf_dump(vf_get(trace, "usage")))
        except Exception:
            pass
        calls = []
        for c in vf_get(trace, "calls") or []:
            calls.append(
                {
                    "model": vf_get(c, "model"),
                    "finish_reason": vf_get(c, "finish_reason"),
                    "usage": jsonable(vf_dump(vf_get(c, "usage"))),
                    "duration_s": vf_duration(vf_get(c, "time")),
                    "error": vf_error_text(vf_get(c, "error")),
                }
            )
        info = {
            "api": "v1",
            "trace_id": vf_get(trace, "id"),
            "ok": vf_get(trace, "ok"),
            "is_completed": vf_get(trace, "is_completed"),
            "is_truncated": vf_get(trace, "is_truncated"),
            "is_timeout": vf_get(trace, "is_timeout"),
            "num_turns": vf_get(trace, "num_turns"),
            "last_reply": vf_get(trace, "last_reply"),
            "reward_weights": weights,
            "token_usage": usage,
            "calls": calls,
            "errors": errors,
            "timing": jsonable(vf_dump(vf_get(trace, "timing"))),
            "harness": self.harness_id,
            "info": jsonable(vf_get(trace, "info")),
        }
        if vf_get(trace, "tools"):
            info["tools"] = [jsonable(vf_dump(t)) for t in trace.tools]
        return {
            "prompt": prompt,
            "completion": completion,
            "reward": vf_float(vf_get(trace, "reward")) or 0.0,
            "components": components,
            "metrics": metrics,
            "stop_condition": vf_get(trace, "stop_condition"),
            "error": error,
            "info": info,
        }

