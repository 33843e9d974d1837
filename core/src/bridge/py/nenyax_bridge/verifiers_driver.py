"""The Verifiers driver (rollout mode). Prime Intellect `verifiers` environments run their own
agent loop, so this driver does not step: `rollout` runs one whole rollout of a task against an
OpenAI-compatible endpoint (the host's recording server) and reports the transcript, reward and
metrics. Two APIs, one module each: verifiers_classic (verifiers 0.3.x) and verifiers_v1
(verifiers >= 0.4.0, also in 0.3.1 as `verifiers.v1`). verifiers is imported lazily; nothing
here runs at import time except definitions."""

import json
import os
import sys
import traceback

from .protocol import BridgeError, jsonable, missing_package, want_int
from .verifiers_classic import ClassicApi
from .verifiers_v1 import V1Api
from .verifiers_wire import (
    VERIFIERS_DEFAULT_RETRIES,
    VERIFIERS_DUMMY_KEY,
    VERIFIERS_KEY_VAR,
    VERIFIERS_REQUIREMENT,
    StdinShield,
    vf_get,
    vf_last_user_text,
    vf_messages,
)


class VerifiersDriver(ClassicApi, V1Api):
    name = "verifiers"

    def __init__(self):
        self.api = None
        self.vf = None  # the API module: `verifiers` (classic) or `verifiers.v1`
        self.env = None  # classic Environment
        self.taskset = None  # v1 Taskset
        self.rows = []  # classic: dataset rows (dicts); v1: Task objects
        self.target = None
        self.split = "eval"
        self.version = None
        self.module_name = None
        self.harness_id = None
        self.reward_names = []
        self.loop = None
        self.clients = {}  # classic: base_url/retries/timeout -> verifiers Client (lives in self.loop)
        self.agent = None  # v1: (key, Agent, AsyncExitStack)
        self.rollouts = 0
        self.v1_prepared = False

    # -----------------------------------------------------------------------------------------
    # load

    @staticmethod
    def _import():
        try:
            import verifiers
        except ImportError as e:
            raise missing_package("verifiers", VERIFIERS_REQUIREMENT, "verifiers", e) from e
        return verifiers

    @staticmethod
    def _paths(value):
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        out = []
        for p in items:
            if not isinstance(p, str) or not p:
                raise BridgeError("InvalidParameter", f"path must be a directory or a list of directories, got {json.dumps(jsonable(value))}")
            ap = os.path.abspath(os.path.expanduser(p))
            if not os.path.isdir(ap):
                raise BridgeError("InvalidParameter", f"path entry {json.dumps(p)} is not a directory (resolved to {ap})")
            out.append(ap)
        return out

    @staticmethod
    def _has_spec(name):
        import importlib.util

        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def load(self, target, params):
        import importlib
        import importlib.metadata as md

        params = dict(params or {})
        if not isinstance(target, str) or not target.strip():
            raise BridgeError("UnknownTarget", "verifiers target must be an environment id, e.g. 'nx-arith' or 'owner/name'")
        target = target.strip()
        api = params.pop("api", "auto")
        if api is None:
            api = "auto"
        if api not in ("auto", "classic", "v1"):
            raise BridgeError("InvalidParameter", f"api must be 'auto', 'classic' or 'v1', got {json.dumps(jsonable(api))}")
        split = params.pop("split", "eval")
        if split is None:
            split = "eval"
        if split not in ("eval", "train"):
            raise BridgeError("InvalidParameter", f"split must be 'eval' or 'train', got {json.dumps(jsonable(split))}")
        paths = self._paths(params.pop("path", None))
        for p in reversed(paths):
            if p in sys.path:
                sys.path.remove(p)
            sys.path.insert(0, p)
        importlib.invalidate_caches()
        env_args = params

        vfroot = self._import()
        try:
            version = md.version("verifiers")
        except Exception:
            version = getattr(vfroot, "__version__", None)
        self.version = version
        has_classic = self._has_spec("verifiers.legacy")
        has_v1 = self._has_spec("verifiers.v1")

        base = target.rsplit("/", 1)[-1].split("@", 1)[0]
        classic_name = base.replace("-", "_")
        v1_name = classic_name.lower()
        builtin_v1 = f"verifiers.v1.tasksets.{v1_name}"

        # Which module, and which API.
        chosen = None
        if api in ("auto", "v1") and has_v1 and self._has_spec(builtin_v1):
            chosen = ("v1", builtin_v1)
        else:
            candidates = [classic_name] if api == "classic" else list(dict.fromkeys([classic_name, v1_name]))
            found = next((c for c in candidates if self._has_spec(c)), None)
            if found is None:
                tried = " or ".join(repr(c) for c in candidates)
                where = [p for p in sys.path if p]
                builtin = f" (nor is there a built-in taskset {builtin_v1!r})" if has_v1 and api != "classic" else ""
                raise BridgeError(
                    "UnknownTarget",
                    f"unknown verifiers environment '{target}': resolved to module {tried} (the part after the "
                    f"last '/', without '@version', '-' -> '_'), which is not importable{builtin}. "
                    f"Install the environment package or pass params.path; sys.path searched: {where}",
                    target=target,
                    module=candidates[0],
                    searched=where,
                )
            chosen = (None, found)
        module_name = chosen[1]
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            hint = ""
            if not has_classic and self._defines_load_environment(module_name):
                hint = "; it looks like a classic environment (load_environment), which needs verifiers 0.3.x"
            raise BridgeError(
                "EnvironmentError",
                f"importing verifiers environment module '{module_name}' failed: {type(e).__name__}: {e} "
                f"(verifiers {version}; classic API {'present' if has_classic else 'absent'}, "
                f"v1 API {'present' if has_v1 else 'absent'}){hint}",
            ) from e
        kind = chosen[0]
        if kind is None:
            exports_taskset = has_v1 and self._exports_taskset(module)
            has_load = callable(getattr(module, "load_environment", None))
            if api == "v1" or (api == "auto" and exports_taskset):
                kind = "v1"
            elif api == "classic" or has_load:
                kind = "classic"
            else:
                raise BridgeError(
                    "UnknownTarget",
                    f"module '{module_name}' (for '{target}') is not a verifiers environment: it has no "
                    f"load_environment() (classic API) and exports no Taskset subclass in __all__ (v1 API)",
                )
        if kind == "classic" and not callable(getattr(module, "load_environment", None)):
            raise BridgeError("UnknownTarget", f"module '{module_name}' (for '{target}') has no load_environment() (classic API)")
        if kind == "classic" and not has_classic:
            raise BridgeError(
                "EnvironmentError",
                f"'{target}' is a classic verifiers environment (load_environment), but verifiers {version} "
                f"has no classic API (removed in 0.4.0); install verifiers 0.3.x",
            )
        if kind == "v1" and not has_v1:
            raise BridgeError("EnvironmentError", f"'{target}' needs the verifiers v1 API, absent from verifiers {version}")

        self.close()
        self.target, self.split, self.module_name, self.api = target, split, module_name, kind
        if kind == "classic":
            info = self._load_classic(target, module, env_args)
        else:
            info = self._load_v1(target, module, env_args)
        return info

    @staticmethod
    def _defines_load_environment(module_name):
        import importlib.util

        try:
            spec = importlib.util.find_spec(module_name)
            with open(spec.origin, encoding="utf-8") as f:
                return "def load_environment" in f.read()
        except Exception:
            return False

    @staticmethod
    def _exports_taskset(module):
        try:
            from verifiers.v1.taskset import Taskset
        except Exception:
            return False
        for n in getattr(module, "__all__", None) or []:
            obj = getattr(module, n, None)
            if isinstance(obj, type) and issubclass(obj, Taskset) and obj is not Taskset:
                return True
        return False

    # -----------------------------------------------------------------------------------------
    # tasks

    def _need_loaded(self):
        if self.api is None:
            raise BridgeError("ProtocolError", "no environment loaded; send load first")

    def _task_ref(self, idx):
        if self.api == "classic":
            row = self.rows[idx]
            prompt = vf_messages(row.get("prompt"))
            info = row.get("info")
            if isinstance(info, str):
                try:
                    info = json.loads(info)
                except ValueError:
                    pass
            meta = {
                "answer": row.get("answer"),
                "info": info if info is not None else {},
                "example_id": row.get("example_id", idx),
                "prompt_messages": prompt,
            }
            if row.get("task") is not None:
                meta["task"] = row.get("task")
        else:
            data = self.rows[idx].data
            prompt = []
            if vf_get(data, "system_prompt"):
                prompt.append({"role": "system", "content": data.system_prompt})
            prompt += vf_messages(vf_get(data, "prompt"))
            try:
                dump = data.model_dump(mode="json", exclude_none=True)
            except Exception:
                dump = {}
            for k in ("prompt", "system_prompt", "answer", "idx"):
                dump.pop(k, None)
            meta = {
                "answer": getattr(data, "answer", None),
                "info": dump,
                "example_id": vf_get(data, "id") if vf_get(data, "id") is not None else idx,
                "prompt_messages": prompt,
            }
        return {"id": str(idx), "split": self.split, "prompt": vf_last_user_text(prompt), "metadata": jsonable(meta)}

    def tasks(self, limit):
        self._need_loaded()
        n = len(self.rows) if limit is None else max(0, min(int(limit), len(self.rows)))
        return [self._task_ref(i) for i in range(n)]

    def _index(self, task_id):
        if task_id is None:
            raise BridgeError("InvalidParameter", "rollout: task_id is required (a row index as a string)")
        try:
            idx = int(str(task_id).strip())
        except ValueError:
            raise BridgeError("InvalidParameter", f"task_id must be an integer string, got {json.dumps(jsonable(task_id))}") from None
        if not 0 <= idx < len(self.rows):
            raise BridgeError("InvalidParameter", f"task_id {idx} out of range: expected 0 <= task_id < {len(self.rows)}")
        return idx

    # -----------------------------------------------------------------------------------------
    # rollout

    def _loop(self):
        import asyncio

        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        return self.loop

    def rollout(self, req):
        import time

        self._need_loaded()
        idx = self._index(req.get("task_id"))
        base_url = req.get("base_url")
        if not isinstance(base_url, str) or not base_url:
            raise BridgeError("InvalidParameter", "rollout: base_url (the OpenAI-compatible endpoint, ending in /v1) is required")
        model = req.get("model")
        if not isinstance(model, str) or not model:
            raise BridgeError("InvalidParameter", "rollout: model (a non-empty string) is required")
        sampling = req.get("sampling") or {}
        if not isinstance(sampling, dict):
            raise BridgeError("InvalidParameter", "rollout: sampling must be an object")
        sampling = dict(sampling)
        seed = want_int(req, "seed", None, "seed")
        if seed is not None:
            sampling.setdefault("seed", seed)
        retries = want_int(req, "max_retries", VERIFIERS_DEFAULT_RETRIES, "max_retries")
        timeout = req.get("timeout_s")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise BridgeError("InvalidParameter", "rollout: timeout_s must be a positive number")
        if not os.environ.get(VERIFIERS_KEY_VAR):
            os.environ[VERIFIERS_KEY_VAR] = VERIFIERS_DUMMY_KEY
        loop = self._loop()
        t0 = time.perf_counter()
        if self.api == "v1" and not self.v1_prepared:
            self.v1_prepared = True
            with StdinShield():
                self._v1_prepare_offline()
        if self.api == "classic":
            coro = self._rollout_classic(idx, base_url, model, sampling, retries, timeout)
        else:
            coro = self._rollout_v1(idx, base_url, model, sampling, retries, timeout)
        with StdinShield():
            try:
                result = loop.run_until_complete(coro)
            except BridgeError:
                raise
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                raise BridgeError("EnvironmentError", f"verifiers rollout of task {idx} failed: {type(e).__name__}: {e}") from e
        self.rollouts += 1
        result["info"]["elapsed_s"] = time.perf_counter() - t0
        result["info"]["rollout_index_in_process"] = self.rollouts
        return jsonable(result)


    # -----------------------------------------------------------------------------------------
    # The stepping ops: a verifiers environment runs its own loop (use `rollout`).

    def _rollout_only(self, op):
        raise BridgeError(
            "ProtocolError",
            f"the verifiers driver runs whole rollouts (op 'rollout' with task_id, base_url, model); '{op}' is not supported",
        )

    def reset(self, task_id, seed, want_task=True):
        self._rollout_only("reset")

    def step(self, action):
        self._rollout_only("step")

    def judge(self):
        self._rollout_only("judge")

    def reference(self):
        self._need_loaded()
        return {"action": None}

    def random_action(self, seed):
        return {"action": ""}

    def close(self):
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                with StdinShield():

                    async def shutdown():
                        await self._close_agent()
                        for c in list(self.clients.values()):
                            await self._close_client(c)
                        self.clients.clear()

                    loop.run_until_complete(shutdown())
                    loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:
                traceback.print_exc(file=sys.stderr)
            try:
                loop.close()
            except Exception:
                pass
        self.loop = None
        self.agent = None
        self.clients = {}
        env = self.env
        self.env = None
        if env is not None:
            # Environment teardown handlers (sandboxes, servers) when the env has them.
            fn = getattr(env, "_teardown", None)
            if fn is not None:
                try:
                    import asyncio

                    asyncio.run(fn())
                except Exception:
                    pass

