#!/usr/bin/env bash
# The scaffold's conformance test: build the learner as a shared library, list it in a plugins
# config, and hold it to `nenyax plugin-check learner __NAME__` (a golden batch on builtin:guess).
# NENYAX is the nenyax binary (default: on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
go build -buildmode=c-shared -o lib__NAME__.so .
config="$(pwd)/plugins.toml"
printf '[[plugin]]\nname = "__NAME__"\nkind = "learner"\nlibrary = "%s"\n' "$(pwd)/lib__NAME__.so" > "$config"
NENYAX_PLUGINS="$config" "$nenyax" plugin-check learner __NAME__
