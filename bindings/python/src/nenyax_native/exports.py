"""Exports: trajectories as raw, SFT, DPO or token rows in JSONL, Parquet or a Hugging Face
dataset folder, through ``nenyax_export``."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Optional, Union

from ._native import call_json, dumps, ffi, lib

Trajectories = Union[str, bytes, Iterable[Any]]


def _jsonl(trajectories: Trajectories) -> bytes:
    if isinstance(trajectories, bytes):
        return trajectories
    if isinstance(trajectories, str):
        return trajectories.encode("utf-8")
    lines = []
    for t in trajectories:
        if hasattr(t, "to_json_bytes"):
            lines.append(t.to_json_bytes())
        elif isinstance(t, (bytes, str)):
            lines.append(t if isinstance(t, bytes) else t.encode("utf-8"))
        else:
            lines.append(dumps(t))
    return b"".join(line.rstrip(b"\n") + b"\n" for line in lines)


def export(
    trajectories: Optional[Trajectories] = None,
    *,
    input: Optional[Union[str, os.PathLike]] = None,
    to: str = "jsonl",
    rows: str = "raw",
    min_score: float = 1.0,
    out: Optional[Union[str, os.PathLike]] = None,
    push_to_hub: Optional[str] = None,
) -> Dict[str, Any]:
    """Write ``rows`` ("raw", "sft", "dpo" or "tokens") as ``to`` ("jsonl", "parquet" or "hf").

    The trajectories are JSONL text, an iterable of Trajectory / dict / JSON lines, or the file
    ``input``; ``out`` is required unless ``input`` is given. Returns the summary
    ``{"rows", "trajectories", "skipped", "out", "pushed"}``.
    """
    options: Dict[str, Any] = {"to": to, "rows": rows, "min_score": min_score}
    if input is not None:
        options["input"] = os.fspath(input)
    if out is not None:
        options["out"] = os.fspath(out)
    if push_to_hub is not None:
        options["push_to_hub"] = push_to_hub
    opts = dumps(options)
    if trajectories is None:
        return call_json(lib.nenyax_export, ffi.NULL, 0, opts, len(opts))
    data = _jsonl(trajectories)
    return call_json(lib.nenyax_export, data, len(data), opts, len(opts))
