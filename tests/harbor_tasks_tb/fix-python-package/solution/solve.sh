#!/bin/bash
set -euo pipefail
cat > /app/statkit/statkit/core.py <<'PY'
def mean(xs):
    """The arithmetic mean of xs."""
    if not xs:
        raise ValueError("mean of an empty list")
    return sum(xs) / len(xs)


def variance(xs):
    """The population variance of xs."""
    if not xs:
        raise ValueError("variance of an empty list")
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)
PY
