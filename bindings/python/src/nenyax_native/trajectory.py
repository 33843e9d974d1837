"""The judged record of one episode, as a plain Python object.

The JSON is the contract's (docs/protocol.md), which is also the Python reference's, so a
Trajectory goes to and from the reference's ``nenyax.Trajectory`` through its JSON.

A Trajectory from the library keeps its JSON bytes and parses them on first field access (with
orjson when installed, ``pip install nenyax-native[fast]``): parsing costs about as much as the
rollout itself, and a caller that only writes trajectories out never pays it.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional

from ._native import loads as _loads

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
_LAZY = frozenset(FIELDS + ("_extra",))
_EMPTY: Dict[str, Callable[[], Any]] = {"steps": list, "messages": list, "model_calls": list, "metadata": dict}


class Trajectory:
    """One episode: what was seen, done and said, every model call, and the verdict."""

    # ``_raw``: the library's JSON bytes while the fields are not parsed yet (then None).
    __slots__ = FIELDS + ("_extra", "_raw")

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
        object.__setattr__(self, "_raw", None)
        self._fill(data)

    def _fill(self, data: Dict[str, Any]) -> None:
        for name in FIELDS:
            value = data.get(name)
            if value is None and name in _EMPTY:
                value = _EMPTY[name]()
            object.__setattr__(self, name, value)
        unknown = data.keys() - _LAZY
        object.__setattr__(self, "_extra", {k: v for k, v in data.items() if k not in _LAZY} if unknown else {})

    @classmethod
    def _lazy(cls, raw: bytes) -> "Trajectory":
        """A Trajectory over the library's JSON bytes (valid by construction), parsed on first field access."""
        self = cls.__new__(cls)
        object.__setattr__(self, "_raw", raw)
        return self

    def _parse(self) -> None:
        raw = self._raw
        if raw is not None:
            self._fill(_loads(raw))
            object.__setattr__(self, "_raw", None)

    def __getattr__(self, name: str) -> Any:
        # Only reached for a slot not set yet: a field of a Trajectory not parsed yet.
        if name in _LAZY and object.__getattribute__(self, "_raw") is not None:
            self._parse()
            return object.__getattribute__(self, name)
        raise AttributeError(f"'Trajectory' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self._parse()
        object.__setattr__(self, name, value)

    def __reduce__(self) -> Any:
        return (type(self)._lazy, (self.to_json_bytes(),))

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Trajectory":
        """A Trajectory from its contract dict."""
        return cls(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trajectory":
        """A Trajectory from its contract JSON."""
        return cls(_loads(text))

    def to_dict(self) -> Dict[str, Any]:
        """The contract dict (unknown fields kept)."""
        out = {name: getattr(self, name) for name in FIELDS}
        out.update(self._extra)
        return out

    def to_json(self) -> str:
        """The contract JSON: the library's own text while no field was read (it could have been changed in place)."""
        raw = self._raw
        return raw.decode("utf-8") if raw is not None else json.dumps(self.to_dict())

    def to_json_bytes(self) -> bytes:
        """``to_json`` as UTF-8 bytes (the library's bytes themselves while no field was read)."""
        raw = self._raw
        return raw if raw is not None else json.dumps(self.to_dict()).encode("utf-8")

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
        if not isinstance(other, Trajectory):
            return False
        if self._raw is not None and self._raw == other._raw:
            return True
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error else f"score={self.score!r}"
        return f"Trajectory(env_id={self.env_id!r}, task={self.task_id!r}, {state}, steps={len(self.steps)})"
