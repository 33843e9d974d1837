# nenyax Python bridge: the Verifiers driver (rollout mode). Appended to bridge.py at build time
# (see SCRIPT in core/src/bridge/mod.rs), so everything bridge.py defines is in scope here.
#
# Prime Intellect `verifiers` environments run their own agent loop, so this driver does not
# step: `rollout` runs one whole rollout of a task against an OpenAI-compatible endpoint (the
# host's recording server) and reports the transcript, reward and metrics. Two APIs:
#   classic (verifiers 0.3.x, `import verifiers as vf`): a module with `load_environment(**args)`
#       returning a vf.Environment; rollouts through `env.run_rollout`.
#   v1 (verifiers >= 0.4.0, also in 0.3.1 as `verifiers.v1`): a package exporting one
#       `vf.Taskset` subclass; rollouts through `vf.make_agent(...).run(task)` with the `null`
#       harness (plain chat) in the `subprocess` runtime, unless the taskset exports its own
#       Harness.
# verifiers is imported lazily; nothing here runs at import time except definitions.

VERIFIERS_REQUIREMENT = "verifiers>=0.3.1,<0.5"
# The environment variable the verifiers clients read the API key from. The host's recording
# server needs no key; a dummy is set when the variable is unset (never a real key).
VERIFIERS_KEY_VAR = "NENYAX_RECORDER_KEY"
VERIFIERS_DUMMY_KEY = "nenyax-no-key"
VERIFIERS_RESERVED = ("path", "api", "split")
# max_steps reported for an environment without a turn limit (integer expected by the host).
VERIFIERS_UNLIMITED_STEPS = 10000
# Retries of one model request inside the classic client (ClientConfig.max_retries defaults to
# 10, which makes a dead endpoint take minutes); 2 is the OpenAI SDK's default, which is also
# what the v1 harness program uses (not settable from here). A rollout request may set
# `max_retries` (classic API only).
VERIFIERS_DEFAULT_RETRIES = 2


def _vf_text(content):
    """Plain text of an OpenAI-style message content (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        out = []
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    out.append(p["text"])
            else:
                t = getattr(p, "text", None)
                if isinstance(t, str):
                    out.append(t)
        return "\n".join(out)
    t = getattr(content, "text", None)
    return t if isinstance(t, str) else str(content)


def _vf_message(m):
    """One message as an OpenAI-style JSON dict ({role, content, tool_calls?, ...})."""
    if isinstance(m, dict):
        d = dict(m)
    elif hasattr(m, "model_dump"):
        try:
            d = m.model_dump(mode="json", exclude_none=True)
        except Exception:
            d = m.model_dump()
    elif dataclasses.is_dataclass(m) and not isinstance(m, type):
        d = dataclasses.asdict(m)
    else:
        d = {"role": getattr(m, "role", None), "content": getattr(m, "content", str(m))}
    d = {k: v for k, v in d.items() if v is not None or k == "content"}
    d.setdefault("content", None)
    # Normalize tool calls to the OpenAI chat wire shape.
    calls = d.get("tool_calls")
    if calls:
        fixed = []
        for c in calls:
            c = c if isinstance(c, dict) else (c.model_dump(mode="json") if hasattr(c, "model_dump") else {"value": str(c)})
            if "function" not in c and "name" in c:
                c = {
                    "id": c.get("id"),
                    "type": c.get("type") or "function",
                    "function": {"name": c.get("name"), "arguments": c.get("arguments", "")},
                }
            fixed.append(c)
        d["tool_calls"] = fixed
    return jsonable(d)


def _vf_messages(ms):
    if ms is None:
        return []
    if isinstance(ms, str):
        return [{"role": "user", "content": ms}]
    return [_vf_message(m) for m in ms]


def _vf_last_user_text(messages):
    for m in reversed(messages):
        if m.get("role") == "user":
            return _vf_text(m.get("content"))
    return _vf_text(messages[-1].get("content")) if messages else ""


def _vf_error_text(err):
    """A rollout's recorded error as one string (or None)."""
    if err is None or err == "" or err == [] or err == {}:
        return None
    if isinstance(err, BaseException):
        return f"{type(err).__name__}: {err}"
    if isinstance(err, dict):
        # classic verifiers: {error, message, error_chain_repr, error_chain_str}; the chain
        # names the cause (e.g. "ModelError() -> InternalServerError('Error code: 500 ...')").
        kind = err.get("error") or err.get("type") or err.get("error_type") or "Error"
        msg = err.get("message") or ""
        chain = err.get("error_chain_repr") or err.get("error_chain_str")
        if chain and ("->" in str(chain) or not msg or msg == kind):
            return str(chain)
        return f"{kind}: {msg}" if msg else str(kind)
    if isinstance(err, (list, tuple)):
        parts = [_vf_error_text(e) for e in err]
        return "; ".join(p for p in parts if p) or None
    t, m = getattr(err, "type", None), getattr(err, "message", None)
    if t is not None or m is not None:
        return f"{t}: {m}"
    return str(err)


def _vf_float(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else jsonable(f)


def _vf_get(obj, name, default=None):
    """getattr that also swallows property errors: the v1 API changes between releases."""
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def _vf_dump(obj):
    if obj is None:
        return None
    if hasattr(obj, "model_dump"):
        try:
            return obj.model_dump(mode="json", exclude_none=True)
        except Exception:
            pass
    return obj


def _vf_duration(span):
    start, end = _vf_get(span, "start"), _vf_get(span, "end")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end:
        return end - start
    return None


class _StdinShield:
    """Points fd 0 at /dev/null while a rollout runs. The verifiers runtimes start programs
    (uv, the harness script) that would otherwise inherit the protocol's stdin pipe and might
    read requests meant for this process. Requests that arrive meanwhile wait in the pipe."""

    def __enter__(self):
        self.saved = None
        try:
            self.saved = os.dup(0)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            os.dup2(self.saved, 0)
            os.close(self.saved)
        return False


def _vf_missing_uv():
    exe = sys.executable
    return BridgeError(
        "MissingPackage",
        f"verifiers v1 environments run their harness with 'uv', which is neither next to {exe} "
        f"nor on PATH. Install it with: {exe} -m pip install uv  (or run: nenyax setup verifiers)",
        package="uv",
        requirement="uv",
        executable=exe,
    )


class VerifiersDriver:
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
            raise missing_package("verifiers", VERIFIERS_REQUIREMENT, "verifiers", e)
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
            )
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

    def _load_classic(self, target, module, env_args):
        import inspect

        import verifiers as vf

        fn = module.load_environment
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            ps = sig.parameters.values()
            accepted = [p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            try:
                sig.bind(**env_args)
            except TypeError as e:
                unknown = [k for k in env_args if k not in accepted]
                raise BridgeError(
                    "InvalidParameter",
                    f"load_environment() of '{target}' rejected the arguments: {e}; accepted: {', '.join(accepted) or '(none)'}",
                    param=unknown[0] if unknown else None,
                    accepted=accepted,
                )
        try:
            env = fn(**env_args)
        except (TypeError, ValueError) as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("InvalidParameter", f"load_environment() of '{target}' failed: {type(e).__name__}: {e}")
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"load_environment() of '{target}' failed: {type(e).__name__}: {e}")
        if not isinstance(env, vf.Environment):
            raise BridgeError("EnvironmentError", f"load_environment() of '{target}' returned {type(env).__name__}, not a verifiers Environment")
        # As vf.load_environment does.
        try:
            env.env_id = getattr(env, "env_id", None) or target
            env.env_args = getattr(env, "env_args", None) or dict(env_args)
        except Exception:
            pass
        try:
            ds = env.get_eval_dataset() if self.split == "eval" else env.get_dataset()
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"'{target}' has no {self.split} dataset: {type(e).__name__}: {e}")
        rows = ds.to_list() if hasattr(ds, "to_list") else list(ds)
        self.env, self.vf, self.rows = env, vf, rows

        rubric = env.rubric
        try:
            names = list(rubric._get_reward_func_names())
            weights = list(rubric._get_reward_weights())
        except Exception:
            names = [getattr(f, "__name__", repr(f)) for f in getattr(rubric, "funcs", [])]
            weights = list(getattr(rubric, "weights", [1.0] * len(names)))
        weights += [1.0] * (len(names) - len(weights))
        reward_fns = [{"name": n, "weight": float(w)} for n, w in zip(names, weights) if w]
        metrics = [n for n, w in zip(names, weights) if not w]
        self.reward_names = [f["name"] for f in reward_fns]
        tools = []
        for t in getattr(env, "tool_defs", None) or []:
            tools.append(jsonable(t.model_dump(mode="json", exclude_none=True) if hasattr(t, "model_dump") else t))
        max_turns = getattr(env, "max_turns", 1)
        max_turns = max_turns if isinstance(max_turns, int) and not isinstance(max_turns, bool) else None
        max_steps = max_turns if max_turns and max_turns > 0 else VERIFIERS_UNLIMITED_STEPS
        description = (
            first_paragraph(module.__doc__)
            or first_paragraph(type(env).__doc__)
            or f"verifiers environment {target}"
        )
        has_ref = any(r.get("answer") not in (None, "") for r in rows[:1])
        return {
            "name": target,
            "version": self.version,
            "description": description,
            "num_tasks": len(rows),
            "text": True,
            "mode": "rollout",
            "reward_timing": "terminal",
            "max_steps": max_steps,
            "action_schema": None,
            "observation_schema": None,
            "extra": {
                "api": "classic",
                "module": module.__name__,
                "env_class": type(env).__name__,
                "split": self.split,
                "reward_functions": reward_fns,
                "metrics": metrics,
                "tools": tools,
                "env_args": jsonable(dict(env_args)),
                "max_turns": max_turns,
                "system_prompt": getattr(env, "system_prompt", None),
                "sampling_args": jsonable(getattr(env, "sampling_args", None)),
            },
            "has_reference": has_ref,
        }

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
            raise _vf_missing_uv()

    def _load_v1(self, target, module, env_args):
        import verifiers.v1 as vf
        from verifiers.v1.utils.loaders import _plugin_class, harness_class
        from verifiers.v1.taskset import Taskset

        try:
            ts_cls = _plugin_class(module, Taskset, "taskset")
        except (AttributeError, TypeError, ValueError) as e:
            raise BridgeError("UnknownTarget", f"'{target}' (module '{module.__name__}'): {e}")
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
            )
        try:
            taskset = ts_cls(cfg)
        except (TypeError, ValueError) as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("InvalidParameter", f"taskset '{target}' rejected its config: {type(e).__name__}: {e}")
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"taskset '{target}' failed to load: {type(e).__name__}: {e}")
        if not getattr(taskset, "bounded", not getattr(taskset, "INFINITE", False)):
            raise BridgeError("EnvironmentError", f"taskset '{target}' is infinite; bounded tasksets only")
        try:
            tasks = list(taskset)
        except (TypeError, ValueError) as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("InvalidParameter", f"taskset '{target}' failed to load its tasks: {type(e).__name__}: {e}")
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"taskset '{target}' failed to load its tasks: {type(e).__name__}: {e}")
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
            raise BridgeError("EnvironmentError", f"verifiers harness '{harness_id}' is unavailable: {e}")
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

    # -----------------------------------------------------------------------------------------
    # tasks

    def _need_loaded(self):
        if self.api is None:
            raise BridgeError("ProtocolError", "no environment loaded; send load first")

    def _task_ref(self, idx):
        if self.api == "classic":
            row = self.rows[idx]
            prompt = _vf_messages(row.get("prompt"))
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
            if _vf_get(data, "system_prompt"):
                prompt.append({"role": "system", "content": data.system_prompt})
            prompt += _vf_messages(_vf_get(data, "prompt"))
            try:
                dump = data.model_dump(mode="json", exclude_none=True)
            except Exception:
                dump = {}
            for k in ("prompt", "system_prompt", "answer", "idx"):
                dump.pop(k, None)
            meta = {
                "answer": getattr(data, "answer", None),
                "info": dump,
                "example_id": _vf_get(data, "id") if _vf_get(data, "id") is not None else idx,
                "prompt_messages": prompt,
            }
        return {"id": str(idx), "split": self.split, "prompt": _vf_last_user_text(prompt), "metadata": jsonable(meta)}

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
            raise BridgeError("InvalidParameter", f"task_id must be an integer string, got {json.dumps(jsonable(task_id))}")
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
            with _StdinShield():
                self._v1_prepare_offline()
        if self.api == "classic":
            coro = self._rollout_classic(idx, base_url, model, sampling, retries, timeout)
        else:
            coro = self._rollout_v1(idx, base_url, model, sampling, retries, timeout)
        with _StdinShield():
            try:
                result = loop.run_until_complete(coro)
            except BridgeError:
                raise
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                raise BridgeError("EnvironmentError", f"verifiers rollout of task {idx} failed: {type(e).__name__}: {e}")
        self.rollouts += 1
        result["info"]["elapsed_s"] = time.perf_counter() - t0
        result["info"]["rollout_index_in_process"] = self.rollouts
        return jsonable(result)

    def _split_metrics(self, metrics):
        components, rest = {}, {}
        for k, v in (metrics or {}).items():
            (components if k in self.reward_names else rest)[k] = _vf_float(v) if not isinstance(v, (dict, list)) else v
        return components, rest

    async def _classic_client(self, base_url, retries, timeout):
        from verifiers.types import ClientConfig
        from verifiers.clients import resolve_client

        key = (base_url, retries, timeout)
        client = self.clients.get(key)
        if client is None:
            kw = {"api_base_url": base_url, "api_key_var": VERIFIERS_KEY_VAR, "max_retries": retries}
            if timeout is not None:
                kw["timeout"] = float(timeout)
            # Created inside the driver's one event loop, which every rollout reuses.
            client = resolve_client(ClientConfig(**kw))
            if len(self.clients) >= 8:
                old_key = next(iter(self.clients))
                await self._close_client(self.clients.pop(old_key))
            self.clients[key] = client
        return client

    @staticmethod
    async def _close_client(client):
        for name in ("close", "aclose"):
            fn = getattr(client, name, None)
            if fn is None:
                continue
            try:
                r = fn()
                if hasattr(r, "__await__"):
                    await r
            except Exception:
                pass
            return

    async def _rollout_classic(self, idx, base_url, model, sampling, retries, timeout):
        import copy

        client = await self._classic_client(base_url, retries, timeout)
        row = copy.deepcopy(self.rows[idx])
        # As env.generate/evaluate do: the environment's own sampling args, then the request's.
        merged = copy.deepcopy(getattr(self.env, "sampling_args", None) or {})
        merged.update(sampling)
        out = await self.env.run_rollout(row, client, model, merged, max_retries=0)
        out = dict(out)
        metrics = out.get("metrics") or {}
        components, rest = self._split_metrics(metrics)
        for n in self.reward_names:
            if n not in components and n in out:
                components[n] = _vf_float(out[n])
        info = {
            "api": "classic",
            "example_id": out.get("example_id"),
            "is_completed": out.get("is_completed"),
            "is_truncated": out.get("is_truncated"),
            "timing": out.get("timing"),
            "token_usage": out.get("token_usage"),
            "answer": out.get("answer"),
            "info": out.get("info"),
        }
        if out.get("tool_defs"):
            info["tool_defs"] = out.get("tool_defs")
        reward = _vf_float(out.get("reward"))
        return {
            "prompt": _vf_messages(out.get("prompt")),
            "completion": _vf_messages(out.get("completion")),
            "reward": 0.0 if reward is None else reward,
            "components": components,
            "metrics": rest,
            "stop_condition": out.get("stop_condition"),
            "error": _vf_error_text(out.get("error")),
            "info": info,
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
                return _vf_message(message_to_wire(m))
            except Exception:
                return _vf_message(m)

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
            if _vf_get(data, "system_prompt"):
                prompt.append({"role": "system", "content": data.system_prompt})
            prompt += _vf_messages(_vf_get(data, "prompt"))
        components = {}
        weights = {}
        for k, r in (_vf_get(trace, "rewards") or {}).items():
            components[k] = None if r is None else _vf_float(_vf_get(r, "score", r))
            weights[k] = None if r is None else _vf_float(_vf_get(r, "weight", 1.0))
        metrics = {k: (None if v is None else _vf_float(v)) for k, v in (_vf_get(trace, "metrics") or {}).items()}
        errors = [e.model_dump(mode="json", exclude_none=True) for e in (_vf_get(trace, "errors") or [])]
        error = _vf_error_text(trace.errors) if errors else (None if _vf_get(trace, "ok", True) else "rollout did not complete")
        usage = None
        try:
            usage = jsonable(_vf_dump(_vf_get(trace, "usage")))
        except Exception:
            pass
        calls = []
        for c in _vf_get(trace, "calls") or []:
            calls.append(
                {
                    "model": _vf_get(c, "model"),
                    "finish_reason": _vf_get(c, "finish_reason"),
                    "usage": jsonable(_vf_dump(_vf_get(c, "usage"))),
                    "duration_s": _vf_duration(_vf_get(c, "time")),
                    "error": _vf_error_text(_vf_get(c, "error")),
                }
            )
        info = {
            "api": "v1",
            "trace_id": _vf_get(trace, "id"),
            "ok": _vf_get(trace, "ok"),
            "is_completed": _vf_get(trace, "is_completed"),
            "is_truncated": _vf_get(trace, "is_truncated"),
            "is_timeout": _vf_get(trace, "is_timeout"),
            "num_turns": _vf_get(trace, "num_turns"),
            "last_reply": _vf_get(trace, "last_reply"),
            "reward_weights": weights,
            "token_usage": usage,
            "calls": calls,
            "errors": errors,
            "timing": jsonable(_vf_dump(_vf_get(trace, "timing"))),
            "harness": self.harness_id,
            "info": jsonable(_vf_get(trace, "info")),
        }
        if _vf_get(trace, "tools"):
            info["tools"] = [jsonable(_vf_dump(t)) for t in trace.tools]
        return {
            "prompt": prompt,
            "completion": completion,
            "reward": _vf_float(_vf_get(trace, "reward")) or 0.0,
            "components": components,
            "metrics": metrics,
            "stop_condition": _vf_get(trace, "stop_condition"),
            "error": error,
            "info": info,
        }

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
                with _StdinShield():

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


def op_rollout(req):
    return need_driver().rollout(req)


DRIVERS["verifiers"] = VerifiersDriver
OPS["rollout"] = op_rollout
