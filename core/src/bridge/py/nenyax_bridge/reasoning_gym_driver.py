"""The reasoning-gym driver (step mode, one step per task): a dataset (or a '+' composite) as
tasks, the reply's last <answer> block graded by the dataset's own scorer."""

import dataclasses
import json
import math
import re
import sys
import traceback

from .protocol import BridgeError, first_paragraph, jsonable, missing_package, short, suggest, want_int

REASONING_GYM_REQUIREMENT = "reasoning-gym==0.1.25"

ANSWER_INSTRUCTION = "Give your final answer inside <answer></answer> tags."
SYSTEM_PROMPT = (
    "Think the problem through step by step, then give your final answer inside "
    "<answer></answer> tags, e.g. <answer>42</answer>. Only the last <answer> block is graded."
)

# Answer-less reasoning-gym datasets whose metadata ships an example solution (upstream doc, section 2).
META_ORACLES = {
    "graph_color": "possible_answer",
    "propositional_logic": "example_answer",
    "rubiks_cube": "example_correct_answer",
}

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
            import reasoning_gym.factory
        except ImportError as e:
            raise missing_package("reasoning-gym", REASONING_GYM_REQUIREMENT, "reasoning-gym", e) from e
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
                raise BridgeError("InvalidParameter", f"invalid configuration for '{target}': {type(e).__name__}: {e}") from e
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
                raise BridgeError("InvalidParameter", f"invalid composite '{target}': {type(e).__name__}: {e}") from e
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
                raise BridgeError("InvalidParameter", f"task_id must be an integer string, got {json.dumps(task_id)}") from None
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
            raise BridgeError("InvalidAction", f"expected the reply text as a JSON string, got {short(action)}")
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

