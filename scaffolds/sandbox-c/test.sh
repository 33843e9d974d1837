#!/usr/bin/env bash
# The scaffold's conformance test: build the library, list it in a plugins config, and hold it
# to `nenyax sandbox-check __NAME__` (every promise of its level). NENYAX is the nenyax binary
# (default: on PATH). A jail needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
make --quiet
config="$(pwd)/plugins.toml"
printf '[[plugin]]\nname = "__NAME__"\nkind = "sandbox"\nlibrary = "%s"\n' "$(pwd)/lib__NAME__.so" > "$config"
NENYAX_PLUGINS="$config" "$nenyax" sandbox-check __NAME__
