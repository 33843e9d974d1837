"""Validate JSON written by the Rust implementation with the Python reference models.

Usage: read_rust.py TRAJECTORIES.jsonl [MANIFESTS.jsonl]

Prints one JSON summary on stdout. For every line: whether the reference model accepts it
(`valid`, else `invalid` holds pydantic's message) and `diffs`, the paths where the reference's
own re-serialisation differs from what Rust wrote (Python compares 1 == 1.0 as equal). Fields
the reference does not have (`ModelCall.started_at`, newer than 0.1.0a1) are expected to drop
out, and only those.
"""

import json
import re
import sys

import nenyax
from nenyax.types import Manifest, Trajectory

assert nenyax.__version__ == "0.1.0a1", f"expected nenyax 0.1.0a1, found {nenyax.__version__}"


# Paths (list indices as [*]) of fields newer than the reference, which it ignores on reading.
NEWER = {"$.model_calls[*].started_at"}


def diffs(a, b, path="$"):
    if b == "<absent>" and re.sub(r"\[\d+\]", "[*]", path) in NEWER:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(a.keys() | b.keys())
                for d in diffs(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in diffs(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: rust {json.dumps(a)} != python {json.dumps(b)}"]


def read(path, model, describe):
    out = []
    with open(path) as f:
        for line in f:
            try:
                obj = model.model_validate_json(line)
            except ValueError as e:  # pydantic.ValidationError is a ValueError
                out.append({"valid": False, "invalid": str(e)})
                continue
            again = json.loads(obj.model_dump_json())
            out.append({"valid": True, "diffs": diffs(json.loads(line), again), **describe(obj)})
    return out


trajectories = read(sys.argv[1], Trajectory, lambda t: {
    "case": t.metadata.get("case"), "env_id": t.env_id, "score": t.score, "ok": t.ok,
    "error": t.error, "steps": len(t.steps), "messages": [m.role for m in t.messages],
    "model_calls": len(t.model_calls),
})
manifests = read(sys.argv[2], Manifest, lambda m: {"id": m.id, "mode": m.mode.value}) \
    if len(sys.argv) > 2 else []
print(json.dumps({"count": len(trajectories), "trajectories": trajectories,
                  "manifests": manifests}))
