"""The Gymnasium driver (step mode): any registered environment, its spaces as JSON schemas,
ANSI renders as text. gymnasium and numpy are imported when an environment is loaded."""

import json
import re
import sys
import traceback

from .protocol import BridgeError, first_paragraph, jsonable, missing_package, short, suggest

GYMNASIUM_REQUIREMENT = "gymnasium==1.4.0"

# Mark background-highlighted spans of an ANSI render (the agent in FrozenLake, the taxi in
# Taxi) with brackets, since stripping the escape codes alone would erase them.
MARK_ANSI_HIGHLIGHT = True

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
            raise missing_package("gymnasium", GYMNASIUM_REQUIREMENT, "gymnasium", e) from e
        return gymnasium

    def load(self, target, params):
        gym = self._import()
        import inspect

        from gymnasium import error as gerr

        if not isinstance(target, str) or not target:
            raise BridgeError("UnknownTarget", "gymnasium target must be a non-empty environment id")
        try:
            spec = gym.spec(target)
        except gerr.DeprecatedEnv as e:
            raise BridgeError("UnknownTarget", f"gymnasium environment '{target}' is deprecated: {e}") from e
        except (gerr.NameNotFound, gerr.VersionNotFound, gerr.NamespaceNotFound, gerr.Error) as e:
            raise BridgeError(
                "UnknownTarget",
                f"unknown gymnasium environment '{target}'{suggest(target, gym.envs.registry.keys())}: {e}",
            ) from e
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
            raise BridgeError("EnvironmentError", f"DependencyNotInstalled: {e}") from e
        except TypeError as e:
            raise BridgeError("InvalidParameter", f"gymnasium.make('{target}') rejected the parameters: {e}") from e
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
            return BridgeError("InvalidAction", f"invalid action {short(action)} for {space!r}: {why}")

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
                raise bad("expected JSON") from None
        if isinstance(space, (S.Box, S.MultiDiscrete, S.MultiBinary)):
            try:
                if isinstance(space, S.Box):
                    action = [_nonfinite(v) for v in action] if isinstance(action, list) else _nonfinite(action)
                a = np.asarray(action, dtype=space.dtype).reshape(space.shape)
            except Exception as e:
                raise bad(f"{type(e).__name__}: {e}") from e
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
            return tuple(self._convert(s, a) for s, a in zip(space.spaces, action, strict=True))
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
