#!/usr/bin/env bash
# Creates .venv-nemo-gym: NeMo Gym 0.7.0's resources servers on CPython 3.11, for the nemo_gym
# driver's tests (tests/nemo_gym.rs) and CI's `nenyax check` steps (scripts/nemo_gym_servers.sh).
#
# nemo-gym 0.5.0+ declares Requires-Python >= 3.13.14, but the core and the simple resources
# servers run on 3.11. `pip install --ignore-requires-python nemo-gym` in one step fails (the flag
# also applies to the dependencies and pip picks an sdist-only scipy), so this installs in two
# steps: the wheel alone, then its own non-extra requirements resolved normally for 3.11, plus
# what the reasoning_gym and math_with_judge servers need.
#
# Idempotent: a venv whose stamp file (.nenyax-complete) names the same requirement is skipped;
# an incomplete one is deleted and rebuilt. Installs from the package registries only.
#
# Usage: scripts/setup_nemo_gym.sh
# Env:   PYTHON (default python3.11), NENYAX_NEMO_GYM_FORCE=1 to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
VENV="$ROOT/.venv-nemo-gym"
REQ="nemo-gym==0.7.0"
EXTRA=("reasoning-gym>=0.1.19" "math-verify==0.8.0")
STAMP="$VENV/.nenyax-complete"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup_nemo_gym: $PYTHON not found on PATH (set PYTHON to a CPython 3.11+ interpreter)" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)'; then
    echo "setup_nemo_gym: $PYTHON is too old; nemo-gym 0.7.0's servers need Python >= 3.11" >&2
    exit 1
fi
if [ -z "${NENYAX_NEMO_GYM_FORCE:-}" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQ" ]; then
    echo "nemo-gym: $VENV is complete (stamp), skipping"
    exit 0
fi

t0=$(date +%s)
echo "nemo-gym: creating $VENV (about 3 minutes on 2 cores)"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --quiet --disable-pip-version-check "$@"; }
pip install --upgrade pip
pip install --no-deps --ignore-requires-python "$REQ"
deps="$VENV/nemo-gym-deps.txt"
"$VENV/bin/python" - > "$deps" <<'PY'
from importlib.metadata import requires
print("\n".join(r for r in requires("nemo-gym") if "extra ==" not in r))
PY
pip install -r "$deps" "${EXTRA[@]}"
"$VENV/bin/python" -c 'import importlib.metadata as m, nemo_gym, resources_servers; print("nemo-gym", m.version("nemo-gym"))'
echo "$REQ" > "$STAMP"
echo "nemo-gym: done in $(( $(date +%s) - t0 )) s"
