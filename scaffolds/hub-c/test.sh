#!/usr/bin/env bash
# The scaffold's conformance test: build the library, list it in a plugins config, and hold it
# to `nenyax plugin-check hub __NAME__`. NENYAX is the nenyax binary (default: on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
make --quiet
config="$(pwd)/plugins.toml"
printf '[[plugin]]\nname = "__NAME__"\nkind = "hub"\nlibrary = "%s"\n' "$(pwd)/lib__NAME__.so" > "$config"
NENYAX_PLUGINS="$config" "$nenyax" plugin-check hub __NAME__
