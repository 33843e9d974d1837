"""The judged record of one episode, as a plain Python object.

The JSON is the contract's (docs/protocol.md), which is also the Python reference's, so a
Trajectory goes to and from the reference's ``nenyax.Trajectory`` through its JSON.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

FIELDS = (
    "env_id",
    "mode",
    "protocol",
    "task",
    "seed",
    "initial_observation",
    "steps",
    "messages",
    "model_calls",
    "judgment",
    "error",
    "started_at",
    "duration_s",
    "metadata",
)


class Trajectory:
    """One episode: what was seen, done and said, every model call, and the verdict."""

    __slots__ = FIELDS + ("_extra",)

    env_id: str
    mode: str
    protocol: str
    task: Optional[Dict[str, Any]]
    seed: Optional[int]
    initial_observation: Any
    steps: List[Dict[str, Any]]
    messages: List[Dict[str, Any]]
    model_calls: List[Dict[str, Any]]
    judgment: Optional[Dict[str, Any]]
    error: Optional[str]
    started_at: Any
    duration_s: float
    metadata: Dict[str, Any]

    def __init__(self, data: Dict[str, Any]) -> None:
        for name in FIELDS:
            object.__setattr__(self, name, data.get(name))
        for name, empty in (("steps", list), ("messages", list), ("model_calls", list), ("metadata", dict)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, empty())
        self._extra = {k: v for k, v in data.items() if k not in FIELDS}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Trajectory":
        """A Trajectory from its contract dict."""
        return cls(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trajectory":
        """A Trajectory from its contract JSON."""
        return cls(json.loads(text))

    def to_dict(self) -> Dict[str, Any]:
        """The contract dict (unknown fields kept)."""
        out = {name: getattr(self, name) for name in FIELDS}
        out.update(self._extra)
        return out

    def to_json(self) -> str:
        """The contract JSON."""
        return json.dumps(self.to_dict())

    def to_reference(self) -> Any:
        """This trajectory as the Python reference's ``nenyax.Trajectory`` (validated by it)."""
        try:
            from nenyax import Trajectory as Reference
        except ImportError as exc:
            raise ImportError("to_reference needs the Python reference: pip install nenyax") from exc
        return Reference.model_validate_json(self.to_json())

    @classmethod
    def from_reference(cls, obj: Any) -> "Trajectory":
        """A Trajectory from the reference's ``nenyax.Trajectory`` (or anything with ``model_dump_json``)."""
        if not hasattr(obj, "model_dump_json"):
            raise TypeError(f"from_reference takes a nenyax.Trajectory (pydantic), not {type(obj).__name__}")
        return cls.from_json(obj.model_dump_json())

    @property
    def score(self) -> Optional[float]:
        """The judgment's score; None when the episode failed or was not judged."""
        if self.error is not None or not self.judgment:
            return None
        return self.judgment.get("score")

    @property
    def ok(self) -> bool:
        """No error and a judgment."""
        return self.error is None and bool(self.judgment)

    @property
    def task_id(self) -> Optional[str]:
        """The task's id, if the episode played a listed task."""
        return (self.task or {}).get("id")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trajectory) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error else f"score={self.score!r}"
        return f"Trajectory(env_id={self.env_id!r}, task={self.task_id!r}, {state}, steps={len(self.steps)})"
