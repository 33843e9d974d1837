#!/usr/bin/env bash
# The scaffold's conformance test: build the library, list it in a plugins config, and hold it
# to `nenyax plugin-check telemetry __NAME__`. NENYAX is the nenyax binary (default: on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
cargo build --release --quiet
lib="$(pwd)/target/release/lib__NAME__.so"
config="$(pwd)/target/plugins.toml"
printf '[[plugin]]\nname = "__NAME__"\nkind = "telemetry"\nlibrary = "%s"\n' "$lib" > "$config"
# The check's events land here (the sink appends one JSON line per event).
NENYAX_SINK_FILE="$(pwd)/target/events.jsonl" NENYAX_PLUGINS="$config" \
  "$nenyax" plugin-check telemetry __NAME__
