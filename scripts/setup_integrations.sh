#!/usr/bin/env bash
# Creates .venv-NAME from tests/requirements/NAME.txt: the real services and readers that the
# integration tests talk to (an OTLP-receiving Phoenix server, an MLflow server, the W&B SDK,
# pyarrow and `datasets`). One venv per requirements file, so that heavy servers with
# conflicting pins never share one.
#
# Idempotent: a venv whose stamp (.nenyax-complete) holds the requirements file's hash is kept;
# otherwise it is rebuilt. Installs from the package registries only.
#
# Usage: scripts/setup_integrations.sh NAME...   (no NAME: every tests/requirements/*.txt)
# Env:   PYTHON (default python3.11).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    shopt -s nullglob
    for f in "$ROOT"/tests/requirements/*.txt; do names+=("$(basename "$f" .txt)"); done
fi
for name in "${names[@]}"; do
    req="$ROOT/tests/requirements/$name.txt"
    venv="$ROOT/.venv-$name"
    if [ ! -f "$req" ]; then
        echo "setup_integrations: no $req (the names are the files in tests/requirements/)" >&2
        exit 1
    fi
    hash="$(sha256sum "$req" | cut -c1-16)"
    if [ -f "$venv/.nenyax-complete" ] && [ "$(cat "$venv/.nenyax-complete")" = "$hash" ] \
        && "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
        echo "integrations: $venv is complete (stamp), skipping"
        continue
    fi
    t0=$(date +%s)
    echo "integrations: creating $venv from tests/requirements/$name.txt"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    echo "$hash" > "$venv/.nenyax-complete"
    echo "integrations: $name done in $(( $(date +%s) - t0 )) s"
done
