#!/usr/bin/env bash
# The scaffold's conformance test: build the library, list it in a plugins config, and hold it
# to `nenyax sandbox-check __NAME__` (every promise of the process isolation level it declares,
# the file contract and fork isolation). NENYAX is the nenyax binary (default: on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
cargo build --release --quiet
lib="$(pwd)/target/release/lib__NAME__.so"
config="$(pwd)/target/plugins.toml"
printf '[[plugin]]\nname = "__NAME__"\nkind = "sandbox"\nlibrary = "%s"\n' "$lib" > "$config"
NENYAX_PLUGINS="$config" "$nenyax" sandbox-check __NAME__
