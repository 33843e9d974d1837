# nenyax Python bridge, protocol version 1 (see docs/bridge.md).
#
# Started by the library as `python3 -u -c <this file>`; speaks one JSON object per line on
# stdin/stdout. Standard library only at top level: gymnasium, reasoning_gym and numpy are
# imported lazily by the drivers that need them.
import os
import sys

# Keep the protocol channel private before anything else can print: replies go to a duplicate
# of the real stdout, and fd 1 / sys.stdout now point at stderr (bf, codeio and friends print).
_PROTO_FD = os.dup(1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import dataclasses  # noqa: E402
import difflib  # noqa: E402
import enum  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import traceback  # noqa: E402

BRIDGE_VERSION = 1

GYMNASIUM_REQUIREMENT = "gymnasium==1.4.0"
REASONING_GYM_REQUIREMENT = "reasoning-gym==0.1.25"

ANSWER_INSTRUCTION = "Give your final answer inside <answer></answer> tags."
SYSTEM_PROMPT = (
    "Think the problem through step by step, then give your final answer inside "
    "<answer></answer> tags, e.g. <answer>42</answer>. Only the last <answer> block is graded."
)

# Mark background-highlighted spans of an ANSI render (the agent in FrozenLake, the taxi in
# Taxi) with brackets, since stripping the escape codes alone would erase them.
MARK_ANSI_HIGHLIGHT = True

# Answer-less reasoning-gym datasets whose metadata ships an example solution (upstream doc, section 2).
META_ORACLES = {
    "graph_color": "possible_answer",
    "propositional_logic": "example_answer",
    "rubiks_cube": "example_correct_answer",
}


class BridgeError(Exception):
    """An error with a protocol kind and optional extra fields."""

    def __init__(self, kind, message, **fields):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fields = fields


# ---------------------------------------------------------------------------------------------
# JSON encoding


def jsonable(o):
    """Convert to plain JSON values: numpy -> Python, tuples/sets -> lists, non-finite floats ->
    strings. Never raises; unknown objects become their str()."""
    if o is None or isinstance(o, (bool, str)):
        return o
    if isinstance(o, int):
        return int(o)
    if isinstance(o, float):
        if math.isfinite(o):
            return float(o)
        return "nan" if o != o else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {(k if isinstance(k, str) else str(jsonable(k))): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    if isinstance(o, (set, frozenset)):
        items = [jsonable(v) for v in o]
        try:
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        except Exception:
            pass
        return items
    mod = type(o).__module__ or ""
    if mod == "numpy" or mod.startswith("numpy."):
        # Observations are mostly arrays: skip the element-wise walk when no element needs it.
        kind = getattr(getattr(o, "dtype", None), "kind", None)
        if kind in ("i", "u", "b") and hasattr(o, "tolist"):
            return o.tolist()
        if kind == "f" and hasattr(o, "tolist"):
            try:
                import numpy as np

                if bool(np.isfinite(o).all()):
                    return o.tolist()
            except Exception:
                pass
        tolist = getattr(o, "tolist", None)
        if tolist is not None:
            try:
                return jsonable(tolist())
            except Exception:
                pass
    if isinstance(o, enum.Enum):
        return jsonable(o.value)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        try:
            return {f.name: jsonable(getattr(o, f.name)) for f in dataclasses.fields(o)}
        except Exception:
            pass
    if isinstance(o, (bytes, bytearray)):
        return bytes(o).decode("utf-8", "replace")
    try:
        return str(o)
    except Exception:
        return repr(type(o))


_OUT = os.fdopen(_PROTO_FD, "wb", buffering=0)


def send(obj):
    try:
        line = json.dumps(obj, allow_nan=False)
    except Exception:
        line = json.dumps(jsonable(obj), allow_nan=False)
    _OUT.write(line.encode("utf-8") + b"\n")


def error_reply(rid, kind, message, **fields):
    err = {"kind": kind, "message": message}
    err.update(jsonable(fields))
    return {"id": rid, "ok": False, "error": err}


def first_paragraph(doc, limit=500):
    if not doc:
        return None
    for para in re.split(r"\n\s*\n", doc.strip()):
        text = " ".join(para.split())
        if text and not text.startswith("#"):
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return None


def missing_package(package, requirement, name, exc):
    exe = sys.executable
    return BridgeError(
        "MissingPackage",
        f"Python package '{package}' is not importable by {exe} ({type(exc).__name__}: {exc}). "
        f"Install it with: {exe} -m pip install '{requirement}'  (or run: nenyax setup {name})",
        package=package,
        requirement=requirement,
        executable=exe,
    )


def suggest(word, choices):
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def want_int(args, key, default=None, name=None):
    v = args.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise BridgeError("InvalidParameter", f"{name or key} must be an integer, got {json.dumps(jsonable(v))}")
    return v


# ---------------------------------------------------------------------------------------------
# Gymnasium driver

_ANSI_RE = re.compile(r"\x1b\[([0-9;]*)m(.*?)(?=\x1b\[|$)", re.DOTALL)
_ANSI_ANY = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text):
    if not MARK_ANSI_HIGHLIGHT:
        return _ANSI_ANY.sub("", text)

    def mark(m):
        codes = [c for c in m.group(1).split(";") if c]
        body = m.group(2)
        highlighted = any(c.isdigit() and (40 <= int(c) <= 47 or 100 <= int(c) <= 107 or c == "7") for c in codes)
        return f"[{body}]" if highlighted and body else body

    return _ANSI_ANY.sub("", _ANSI_RE.sub(mark, text))


def space_schema(space):
    import numpy as np
    from gymnasium import spaces as S

    desc = repr(space)
    if isinstance(space, S.Discrete):
        start = int(space.start)
        return {"type": "integer", "minimum": start, "maximum": start + int(space.n) - 1, "description": desc}
    if isinstance(space, S.Box):
        return {
            "type": "array",
            "shape": [int(d) for d in space.shape],
            "dtype": str(space.dtype),
            "low": jsonable(np.asarray(space.low, dtype=np.float64).tolist()),
            "high": jsonable(np.asarray(space.high, dtype=np.float64).tolist()),
            "description": desc,
        }
    if isinstance(space, S.MultiDiscrete):
        start = np.asarray(getattr(space, "start", np.zeros_like(space.nvec)))
        return {
            "type": "array",
            "shape": [int(d) for d in space.shape],
            "dtype": str(space.dtype),
            "nvec": jsonable(space.nvec),
            "minimum": jsonable(start),
            "maximum": jsonable(start + np.asarray(space.nvec) - 1),
            "description": desc,
        }
    if isinstance(space, S.MultiBinary):
        return {
            "type": "array",
            "shape": [int(d) for d in space.shape],
            "dtype": str(space.dtype),
            "items": {"type": "integer", "minimum": 0, "maximum": 1},
            "description": desc,
        }
    if isinstance(space, S.Dict):
        return {
            "type": "object",
            "properties": {str(k): space_schema(v) for k, v in space.spaces.items()},
            "required": [str(k) for k in space.spaces],
            "description": desc,
        }
    if isinstance(space, S.Tuple):
        items = [space_schema(s) for s in space.spaces]
        return {"type": "array", "items": items, "minItems": len(items), "maxItems": len(items), "description": desc}
    if isinstance(space, S.Text):
        charset = getattr(space, "character_set", None)
        return {
            "type": "string",
            "minLength": int(space.min_length),
            "maxLength": int(space.max_length),
            "charset": "".join(sorted(charset)) if charset is not None else None,
            "description": desc,
        }
    return {"description": desc}


class GymnasiumDriver:
    name = "gymnasium"

    def __init__(self):
        self.env = None
        self.id = None
        self.ansi = False
        self.episode = False
        self.done = False
        self.total = 0.0
        self.steps = 0

    @staticmethod
    def _import():
        try:
            import gymnasium
            import numpy  # noqa: F401
        except ImportError as e:
            raise missing_package("gymnasium", GYMNASIUM_REQUIREMENT, "gymnasium", e)
        return gymnasium

    def load(self, target, params):
        gym = self._import()
        import inspect

        from gymnasium import error as gerr

        if not isinstance(target, str) or not target:
            raise BridgeError("UnknownTarget", "gymnasium target must be a non-empty environment id")
        try:
            spec = gym.spec(target)
        except (gerr.DeprecatedEnv,) as e:
            raise BridgeError("UnknownTarget", f"gymnasium environment '{target}' is deprecated: {e}")
        except (gerr.NameNotFound, gerr.VersionNotFound, gerr.NamespaceNotFound, gerr.Error) as e:
            raise BridgeError(
                "UnknownTarget",
                f"unknown gymnasium environment '{target}'{suggest(target, gym.envs.registry.keys())}: {e}",
            )
        kwargs = dict(params or {})
        # Find the env class, for its metadata (render modes) and its constructor parameters.
        creator = None
        try:
            ep = spec.entry_point
            creator = gym.envs.registration.load_env_creator(ep) if isinstance(ep, str) else ep
        except Exception:
            creator = None
        if creator is not None:
            try:
                sig = inspect.signature(creator)
                ps = sig.parameters.values()
                if not any(p.kind == p.VAR_KEYWORD for p in ps):
                    accepted = [p.name for p in ps if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
                    accepted += ["max_episode_steps", "disable_env_checker", "autoreset", "apply_api_compatibility"]
                    accepted = list(dict.fromkeys(accepted))
                    for k in kwargs:
                        if k not in accepted:
                            raise BridgeError(
                                "UnknownParameter",
                                f"unknown parameter '{k}' for {target}{suggest(k, accepted)}; accepted: {', '.join(accepted)}",
                                param=k,
                                accepted=accepted,
                            )
            except (TypeError, ValueError):
                pass
        if "render_mode" not in kwargs:
            modes = list((getattr(creator, "metadata", None) or {}).get("render_modes", []) or [])
            if "ansi" in modes:
                kwargs["render_mode"] = "ansi"
        if self.env is not None:
            self._close_env()
        try:
            env = gym.make(target, **kwargs)
        except gerr.DependencyNotInstalled as e:
            raise BridgeError("EnvironmentError", f"DependencyNotInstalled: {e}")
        except TypeError as e:
            raise BridgeError("InvalidParameter", f"gymnasium.make('{target}') rejected the parameters: {e}")
        self.env, self.id, self.episode, self.done = env, target, False, False
        self.ansi = env.render_mode == "ansi" and "ansi" in (env.metadata.get("render_modes") or [])
        from gymnasium import spaces as S

        extra_spec = None
        try:
            extra_spec = json.loads(env.spec.to_json()) if env.spec is not None else None
        except Exception:
            extra_spec = None
        max_steps = getattr(env.spec, "max_episode_steps", None) if env.spec is not None else None
        return {
            "name": target,
            "version": getattr(gym, "__version__", None),
            "description": first_paragraph(type(env.unwrapped).__doc__) or f"Gymnasium environment {target}",
            "num_tasks": None,
            "text": bool(self.ansi and isinstance(env.action_space, S.Discrete)),
            "reward_timing": "per_step",
            "max_steps": int(max_steps) if max_steps else 10000,
            "action_schema": space_schema(env.action_space),
            "observation_schema": space_schema(env.observation_space),
            "extra": {"spec": jsonable(extra_spec), "kwargs": jsonable(kwargs)},
            "has_reference": False,
        }

    def _close_env(self):
        try:
            self.env.close()
        except Exception:
            traceback.print_exc(file=sys.stderr)
        self.env = None

    def _need_env(self):
        if self.env is None:
            raise BridgeError("ProtocolError", "no environment loaded; send load first")

    def _text(self):
        if not self.ansi:
            return None
        try:
            r = self.env.render()
        except Exception:
            traceback.print_exc(file=sys.stderr)
            return None
        if r is None:
            return None
        if not isinstance(r, str):
            r = r.getvalue() if hasattr(r, "getvalue") else str(r)
        return strip_ansi(r)

    def _obs(self, obs, info):
        # Arrays go out as plain lists; should one hold a non-finite float, send() falls back
        # to jsonable(), which spells it out. Walking every element here would cost more than
        # the step itself.
        data = obs.tolist() if hasattr(obs, "dtype") and hasattr(obs, "tolist") else jsonable(obs)
        return {"data": data, "text": self._text(), "messages": None, "info": jsonable(info) if info else {}}

    def tasks(self, limit):
        return []

    def reset(self, task_id, seed, want_task=True):
        self._need_env()
        obs, info = self.env.reset(seed=seed) if seed is not None else self.env.reset()
        self.episode, self.done, self.total, self.steps = True, False, 0.0, 0
        return {"observation": self._obs(obs, info), "task": None}

    def _convert(self, space, action):
        import numpy as np
        from gymnasium import spaces as S

        def bad(why):
            return BridgeError("InvalidAction", f"invalid action {_short(action)} for {space!r}: {why}")

        if isinstance(space, S.Discrete):
            a = action
            if isinstance(a, str):
                nums = re.findall(r"-?\d+", a)
                if not nums:
                    raise bad("no integer found in the text")
                a = int(nums[-1])
            elif isinstance(a, bool):
                a = int(a)
            elif isinstance(a, float) and a.is_integer():
                a = int(a)
            elif isinstance(a, list) and len(a) == 1 and isinstance(a[0], int) and not isinstance(a[0], bool):
                a = a[0]
            if not isinstance(a, int):
                raise bad("expected an integer")
            lo = int(space.start)
            if not lo <= a < lo + int(space.n):
                raise bad(f"expected an integer in [{lo}, {lo + int(space.n) - 1}]")
            return a
        if isinstance(space, S.Text):
            if not isinstance(action, str) or not space.contains(action):
                raise bad("expected a string within the space's length and character set")
            return action
        if isinstance(action, str):
            try:
                action = json.loads(action)
            except ValueError:
                raise bad("expected JSON")
        if isinstance(space, (S.Box, S.MultiDiscrete, S.MultiBinary)):
            try:
                if isinstance(space, S.Box):
                    action = [_nonfinite(v) for v in action] if isinstance(action, list) else _nonfinite(action)
                a = np.asarray(action, dtype=space.dtype).reshape(space.shape)
            except Exception as e:
                raise bad(f"{type(e).__name__}: {e}")
            if not space.contains(a):
                raise bad("value outside the space")
            return a
        if isinstance(space, S.Dict):
            if not isinstance(action, dict):
                raise bad("expected an object")
            missing = [k for k in space.spaces if k not in action]
            unknown = [k for k in action if k not in space.spaces]
            if missing or unknown:
                raise bad(f"missing keys {missing}, unknown keys {unknown}")
            return {k: self._convert(s, action[k]) for k, s in space.spaces.items()}
        if isinstance(space, S.Tuple):
            if not isinstance(action, list) or len(action) != len(space.spaces):
                raise bad(f"expected an array of {len(space.spaces)} items")
            return tuple(self._convert(s, a) for s, a in zip(space.spaces, action))
        # Other spaces (Sequence, Graph, OneOf): hand the JSON value over as is.
        return action

    def step(self, action):
        self._need_env()
        if not self.episode:
            raise BridgeError("EnvironmentError", "no episode in progress; send reset first")
        if self.done:
            raise BridgeError("EnvironmentError", "the episode is over; send reset first")
        a = self._convert(self.env.action_space, action)
        obs, reward, terminated, truncated, info = self.env.step(a)
        reward = float(reward)
        self.total += reward
        self.steps += 1
        self.done = bool(terminated) or bool(truncated)
        observation = self._obs(obs, info)
        return {
            "observation": observation,
            "reward": reward,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": observation["info"],
        }

    def judge(self):
        self._need_env()
        if not self.episode:
            raise BridgeError("EnvironmentError", "no episode to judge; send reset first")
        return {
            "score": jsonable(self.total),
            "passed": None,
            "components": {},
            "source": "env",
            "judge": "gymnasium.return",
            "details": {"steps": self.steps},
        }

    def reference(self):
        return {"action": None}

    def random_action(self, seed):
        self._need_env()
        space = self.env.action_space
        if seed is not None:
            space.seed(seed)
        return {"action": jsonable(space.sample())}

    def close(self):
        if self.env is not None:
            self._close_env()


def _nonfinite(v):
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return v


def _short(v, limit=200):
    try:
        s = json.dumps(jsonable(v))
    except Exception:
        s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# reasoning-gym driver

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def extract_answer(text):
    found = _ANSWER_RE.findall(text)
    return found[-1].strip() if found else None


class ReasoningGymDriver:
    name = "reasoning_gym"

    def __init__(self):
        self.ds = None
        self.target = None
        self.size = 0
        self.entry = None
        self.index = None
        self.done = False
        self.score = 0.0
        self.extracted = None

    @staticmethod
    def _import():
        try:
            import reasoning_gym
            import reasoning_gym.factory  # noqa: F401
        except ImportError as e:
            raise missing_package("reasoning-gym", REASONING_GYM_REQUIREMENT, "reasoning-gym", e)
        return reasoning_gym

    def load(self, target, params):
        rg = self._import()
        import importlib.metadata as md

        from reasoning_gym.factory import DATASETS

        params = dict(params or {})
        if not isinstance(target, str) or not target:
            raise BridgeError("UnknownTarget", "reasoning_gym target must be a dataset name")
        size = want_int(params, "size", 100)
        seed = want_int(params, "seed", 0)
        if size is None or size < 1:
            raise BridgeError("InvalidParameter", f"size must be a positive integer, got {size}")
        params["size"], params["seed"] = size, seed
        names = [n.strip() for n in target.split("+")] if "+" in target else [target]
        for n in names:
            if n not in DATASETS or n == "composite":
                raise BridgeError(
                    "UnknownTarget",
                    f"unknown reasoning-gym dataset '{n}'{suggest(n, [d for d in DATASETS if d != 'composite'])}; "
                    f"{len(DATASETS) - 1} datasets are registered (combine several with '+', e.g. 'leg_counting+chain_sum')",
                )
        if len(names) == 1:
            ds_cls, cfg_cls = DATASETS[target]
            accepted = [f.name for f in dataclasses.fields(cfg_cls)]
            for k in params:
                if k not in accepted:
                    raise BridgeError(
                        "UnknownParameter",
                        f"unknown parameter '{k}' for reasoning-gym dataset '{target}'{suggest(k, accepted)}; "
                        f"accepted: {', '.join(accepted)}",
                        param=k,
                        accepted=accepted,
                    )
            try:
                cfg = cfg_cls(**params)
                ds = ds_cls(cfg)
            except (AssertionError, TypeError, ValueError) as e:
                raise BridgeError("InvalidParameter", f"invalid configuration for '{target}': {type(e).__name__}: {e}")
            description = first_paragraph(ds_cls.__doc__)
        else:
            from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

            accepted = ["size", "seed"]
            for k in params:
                if k not in accepted:
                    raise BridgeError(
                        "UnknownParameter",
                        f"unknown parameter '{k}' for composite '{target}'; accepted: size, seed",
                        param=k,
                        accepted=accepted,
                    )
            if len(set(names)) != len(names):
                raise BridgeError("UnknownTarget", f"composite '{target}' names a dataset twice")
            try:
                cfg = CompositeConfig(size=size, seed=seed, datasets=[DatasetSpec(n, 1.0, {}) for n in names])
                ds = CompositeDataset(cfg)
            except (AssertionError, TypeError, ValueError) as e:
                raise BridgeError("InvalidParameter", f"invalid composite '{target}': {type(e).__name__}: {e}")
            description = f"reasoning-gym composite of {', '.join(names)} (equal weights)"
        self.ds, self.target, self.size = ds, target, size
        self.entry, self.index, self.done = None, None, False
        try:
            version = md.version("reasoning-gym")
        except Exception:
            version = getattr(rg, "__version__", None)
        return {
            "name": target,
            "version": version,
            "description": description or f"reasoning-gym dataset {target}",
            "num_tasks": size,
            "text": True,
            "reward_timing": "terminal",
            "max_steps": 1,
            "action_schema": {"type": "string", "description": "reply text; the last <answer>...</answer> block is graded"},
            "observation_schema": {"type": "string"},
            "extra": {"config": jsonable(cfg)},
            # An oracle exists when entries carry an answer or a metadata example solution
            # (boxnet and rush_hour have neither); judged on the first entry.
            "has_reference": self._has_oracle(ds[0]),
        }

    @staticmethod
    def _has_oracle(entry):
        if entry.get("answer") is not None:
            return True
        meta = entry.get("metadata") or {}
        key = META_ORACLES.get(meta.get("source_dataset"))
        return key is not None and meta.get(key) is not None

    def _need_ds(self):
        if self.ds is None:
            raise BridgeError("ProtocolError", "no dataset loaded; send load first")

    def _task(self, idx, entry):
        meta = {"answer": entry.get("answer")}
        for k, v in (entry.get("metadata") or {}).items():
            if k != "answer":
                meta[k] = v
        return {"id": str(idx), "split": None, "prompt": entry["question"], "metadata": jsonable(meta)}

    def tasks(self, limit):
        self._need_ds()
        n = self.size if limit is None else max(0, min(int(limit), self.size))
        return [self._task(i, self.ds[i]) for i in range(n)]

    def reset(self, task_id, seed, want_task=True):
        self._need_ds()
        if task_id is not None:
            try:
                idx = int(str(task_id).strip())
            except ValueError:
                raise BridgeError("InvalidParameter", f"task_id must be an integer string, got {json.dumps(task_id)}")
            if not 0 <= idx < self.size:
                raise BridgeError("InvalidParameter", f"task_id {idx} out of range: expected 0 <= task_id < {self.size}")
        elif seed is not None:
            idx = int(seed) % self.size
        else:
            idx = 0
        entry = self.ds[idx]
        self.entry, self.index, self.done, self.score, self.extracted = entry, idx, False, 0.0, None
        q = entry["question"]
        obs = {
            "data": None,
            "text": f"{q}\n\n{ANSWER_INSTRUCTION}",
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}],
            "info": {"task_id": str(idx)},
        }
        # A host that already holds the full task (from `tasks`) need not get it back.
        return {"observation": obs, "task": self._task(idx, entry) if want_task else None}

    def _need_episode(self):
        self._need_ds()
        if self.entry is None:
            raise BridgeError("EnvironmentError", "no episode in progress; send reset first")

    def step(self, action):
        self._need_episode()
        if self.done:
            raise BridgeError("EnvironmentError", "the episode is over (one step per task); send reset first")
        if not isinstance(action, str):
            raise BridgeError("InvalidAction", f"expected the reply text as a JSON string, got {_short(action)}")
        extracted = extract_answer(action)
        try:
            score = float(self.ds.score_answer(extracted, self.entry))
        except Exception:
            traceback.print_exc(file=sys.stderr)
            score = 0.0
        if not math.isfinite(score):
            score = 0.0
        score = min(1.0, max(0.0, score))
        self.done, self.score, self.extracted = True, score, extracted
        return {
            "observation": {"data": None, "text": None, "messages": None, "info": {"task_id": str(self.index)}},
            "reward": score,
            "terminated": True,
            "truncated": False,
            "info": {"extracted": extracted},
        }

    def judge(self):
        self._need_episode()
        return {
            "score": self.score,
            "passed": self.score >= 1.0,
            "components": {},
            "source": "verifier",
            "judge": f"reasoning_gym:{self.target}",
            "details": {"extracted": self.extracted, "expected": jsonable(self.entry.get("answer"))},
        }

    def reference(self):
        self._need_episode()
        answer = self.entry.get("answer")
        if answer is None:
            meta = self.entry.get("metadata") or {}
            key = META_ORACLES.get(meta.get("source_dataset"))
            if key is None or meta.get(key) is None:
                return {"action": None}
            answer = meta[key]
            if not isinstance(answer, str):
                answer = json.dumps(jsonable(answer))
        return {"action": f"<answer>{answer}</answer>"}

    def random_action(self, seed):
        return {"action": ""}

    def close(self):
        pass


# ---------------------------------------------------------------------------------------------
# Dispatch

DRIVERS = {"gymnasium": GymnasiumDriver, "reasoning_gym": ReasoningGymDriver}
STATE = {"driver": None}


def need_driver():
    d = STATE["driver"]
    if d is None:
        raise BridgeError("ProtocolError", "no environment loaded; send load first")
    return d


def op_probe(req):
    import importlib.metadata as md

    pkgs = req.get("packages") or []
    if not isinstance(pkgs, list):
        raise BridgeError("ProtocolError", "probe: packages must be a list of names")
    versions = {}
    for p in pkgs:
        try:
            versions[str(p)] = md.version(str(p))
        except Exception:
            versions[str(p)] = None
    return {"python": platform.python_version(), "executable": sys.executable, "versions": versions}


def op_targets(req):
    """The environments a driver can load, sorted (for registry-wide conformance runs)."""
    name = req.get("driver")
    if name == "reasoning_gym":
        rg = ReasoningGymDriver._import()
        return sorted(n for n in rg.factory.DATASETS if n != "composite")
    if name == "gymnasium":
        return sorted(GymnasiumDriver._import().envs.registry)
    raise BridgeError("UnknownTarget", f"unknown bridge driver {json.dumps(name)}; known: {', '.join(DRIVERS)}")


def op_load(req):
    name = req.get("driver")
    if name not in DRIVERS:
        raise BridgeError("UnknownTarget", f"unknown bridge driver {json.dumps(name)}; known: {', '.join(DRIVERS)}")
    params = req.get("params") or {}
    if not isinstance(params, dict):
        raise BridgeError("ProtocolError", "load: params must be an object")
    old = STATE["driver"]
    if old is not None:
        old.close()
        STATE["driver"] = None
    d = DRIVERS[name]()
    result = d.load(req.get("target"), params)
    STATE["driver"] = d
    return result


def op_tasks(req):
    limit = want_int(req, "limit", None, "limit")
    return need_driver().tasks(limit)


def op_reset(req):
    task_id = req.get("task_id")
    if task_id is not None and not isinstance(task_id, (str, int)):
        raise BridgeError("InvalidParameter", "task_id must be a string or null")
    driver = need_driver()
    result = driver.reset(task_id, want_int(req, "seed", None, "seed"), req.get("want_task", True) is not False)
    if req.get("with_reference"):
        # Saves the host a round trip per episode; the host keeps it out of the observation.
        result["reference"] = driver.reference().get("action")
    return result


def op_step(req):
    if "action" not in req:
        raise BridgeError("ProtocolError", "step: missing 'action'")
    return need_driver().step(req["action"])


def op_judge(req):
    return need_driver().judge()


def op_reference(req):
    return need_driver().reference()


def op_random_action(req):
    return need_driver().random_action(want_int(req, "seed", None, "seed"))


OPS = {
    "probe": op_probe,
    "targets": op_targets,
    "load": op_load,
    "tasks": op_tasks,
    "reset": op_reset,
    "step": op_step,
    "judge": op_judge,
    "reference": op_reference,
    "random_action": op_random_action,
}


def handle(line):
    """Returns (reply, exit_after)."""
    try:
        req = json.loads(line)
    except ValueError as e:
        return error_reply(None, "ProtocolError", f"request is not valid JSON: {e}"), False
    if not isinstance(req, dict):
        return error_reply(None, "ProtocolError", "request must be a JSON object"), False
    rid = req.get("id")
    op = req.get("op")
    if op == "close":
        d = STATE["driver"]
        if d is not None:
            try:
                d.close()
            except Exception:
                traceback.print_exc(file=sys.stderr)
        return {"id": rid, "ok": True, "result": {}}, True
    fn = OPS.get(op)
    if fn is None:
        return error_reply(rid, "ProtocolError", f"unknown op {json.dumps(op)}; known: {', '.join(list(OPS) + ['close'])}"), False
    try:
        # send() falls back to jsonable() when json.dumps refuses the result.
        return {"id": rid, "ok": True, "result": fn(req)}, False
    except BridgeError as e:
        return error_reply(rid, e.kind, e.message, **e.fields), False
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        return error_reply(rid, "EnvironmentError", f"{type(e).__name__}: {e}"), False


# Poll stdin this long before sleeping in select(): waking a halted vCPU costs more than a whole
# small step (see core/src/bridge/lines.rs), and a busy trainer sends the next request sooner.
# The host passes its setting (NENYAX_BRIDGE_SPIN_US, 0 turns it off).
SPIN_S = int(os.environ.get("NENYAX_BRIDGE_SPIN_US", "200") or 0) * 1e-6


def requests():
    """Request lines from stdin, read without Python's buffered reader so that the wait can
    spin briefly before it sleeps."""
    import select

    fd = sys.stdin.fileno()
    # Without a spin, a plain blocking read is one system call and no exception per request.
    os.set_blocking(fd, SPIN_S <= 0)
    pending = b""
    clock = __import__("time").perf_counter
    while True:
        nl = pending.find(b"\n")
        if nl >= 0:
            line, pending = pending[:nl], pending[nl + 1 :]
            yield line
            continue
        t0 = clock()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
                break
            except BlockingIOError:
                if clock() - t0 > SPIN_S:
                    select.select([fd], [], [])
                else:
                    # Let anything runnable on this core (the host, another worker) go first.
                    os.sched_yield()
        if not chunk:
            if pending.strip():
                yield pending
            return
        pending += chunk


def main():
    send({"nenyax_bridge": BRIDGE_VERSION, "python": platform.python_version(), "pid": os.getpid()})
    for line in requests():
        if not line.strip():
            continue
        reply, stop = handle(line.decode("utf-8", "replace"))
        try:
            send(reply)
        except Exception as e:
            send(error_reply(reply.get("id"), "EnvironmentError", f"reply not encodable: {type(e).__name__}: {e}"))
        if stop:
            break
    sys.exit(0)

