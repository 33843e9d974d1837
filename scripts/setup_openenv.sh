#!/usr/bin/env bash
# Creates what the OpenEnv tests (tests/openenv.rs) and benches/openenv_compare.sh need:
#   .venv-openenv                 openenv==0.10.0 from PyPI (server framework, Python client,
#                                 `openenv init` and `openenv validate`)
#   target/openenv/echo_peer      the scaffold environment `openenv init echo_peer` writes
#                                 (a plain echo env served by the real framework)
# The terminating test environment lives in tests/openenv_envs/countdown.py (committed).
# Idempotent: a venv whose stamp file (.nenyax-complete) names the same requirement is kept.
# Installs from the package registries only.
#
# Env: PYTHON (default python3.11), NENYAX_OPENENV_FORCE=1 to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
VENV="$ROOT/.venv-openenv"
REQ="openenv==0.10.0"
STAMP="$VENV/.nenyax-complete"
SCAFFOLD_DIR="$ROOT/target/openenv"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup_openenv: $PYTHON not found on PATH (openenv 0.10 needs Python >= 3.10)" >&2
    exit 1
fi

t0=$(date +%s)
if [ -n "${NENYAX_OPENENV_FORCE:-}" ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$REQ" ]; then
    echo "setup_openenv: creating $VENV with $REQ"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$REQ"
    "$VENV/bin/python" -c "import importlib.metadata as m; print('openenv', m.version('openenv'))"
    echo "$REQ" > "$STAMP"
    echo "setup_openenv: pip install took $(( $(date +%s) - t0 )) s"
else
    echo "setup_openenv: $VENV is complete (stamp), skipping"
fi

# The scaffold of `openenv init`: written once per venv version, into target/ (not committed:
# it is the package's own output, so it always matches the installed version).
if [ ! -f "$SCAFFOLD_DIR/echo_peer/server/app.py" ] || [ "$STAMP" -nt "$SCAFFOLD_DIR/echo_peer/server/app.py" ]; then
    rm -rf "$SCAFFOLD_DIR/echo_peer"
    mkdir -p "$SCAFFOLD_DIR"
    (cd "$SCAFFOLD_DIR" && "$VENV/bin/openenv" init echo_peer >/dev/null 2>&1) || {
        echo "setup_openenv: \`openenv init echo_peer\` failed" >&2
        (cd "$SCAFFOLD_DIR" && "$VENV/bin/openenv" init echo_peer) || true
        exit 1
    }
    echo "setup_openenv: wrote the scaffold to $SCAFFOLD_DIR/echo_peer"
fi
test -f "$SCAFFOLD_DIR/echo_peer/server/app.py"
echo "setup_openenv: done in $(( $(date +%s) - t0 )) s"
