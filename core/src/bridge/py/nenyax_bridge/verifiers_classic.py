"""The classic verifiers API (verifiers 0.3.x, `import verifiers as vf`): a module with
`load_environment(**args)` returning a vf.Environment; rollouts through `env.run_rollout`."""

import sys
import traceback

from .protocol import BridgeError, first_paragraph, jsonable
from .verifiers_wire import (
    VERIFIERS_KEY_VAR,
    VERIFIERS_UNLIMITED_STEPS,
    vf_error_text,
    vf_float,
    vf_messages,
)


class ClassicApi:
    """The classic half of VerifiersDriver (which holds the state these methods use)."""

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
                ) from e
        try:
            env = fn(**env_args)
        except (TypeError, ValueError) as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("InvalidParameter", f"load_environment() of '{target}' failed: {type(e).__name__}: {e}") from e
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise BridgeError("EnvironmentError", f"load_environment() of '{target}' failed: {type(e).__name__}: {e}") from e
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
            raise BridgeError("EnvironmentError", f"'{target}' has no {self.split} dataset: {type(e).__name__}: {e}") from e
        rows = ds.to_list() if hasattr(ds, "to_list") else list(ds)
        self.env, self.vf, self.rows = env, vf, rows

        rubric = env.rubric
        try:
            names = list(rubric._get_reward_func_names())
            weights = list(rubric._get_reward_weights())
        except Exception:
            names = [getattr(f, "__name__", repr(f)) for f in getattr(rubric, "funcs", [])]
            weights = list(getattr(rubric, "weights", [1.0] * len(names)))
        # A rubric may list more weights than functions: zip stops at the functions.
        weights += [1.0] * (len(names) - len(weights))
        reward_fns = [{"name": n, "weight": float(w)} for n, w in zip(names, weights, strict=False) if w]
        metrics = [n for n, w in zip(names, weights, strict=False) if not w]
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

    def _split_metrics(self, metrics):
        components, rest = {}, {}
        for k, v in (metrics or {}).items():
            (components if k in self.reward_names else rest)[k] = vf_float(v) if not isinstance(v, (dict, list)) else v
        return components, rest

    async def _classic_client(self, base_url, retries, timeout):
        from verifiers.clients import resolve_client
        from verifiers.types import ClientConfig

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
                components[n] = vf_float(out[n])
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
        reward = vf_float(out.get("reward"))
        return {
            "prompt": vf_messages(out.get("prompt")),
            "completion": vf_messages(out.get("completion")),
            "reward": 0.0 if reward is None else reward,
            "components": components,
            "metrics": rest,
            "stop_condition": out.get("stop_condition"),
            "error": vf_error_text(out.get("error")),
            "info": info,
        }

