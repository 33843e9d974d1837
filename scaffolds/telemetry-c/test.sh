#!/usr/bin/env bash
# The scaffold's conformance test: build the library, list it in a plugins config, and hold it
# to `nenyax plugin-check telemetry __NAME__`. NENYAX is the nenyax binary (default: on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
make --quiet
config="$(pwd)/plugins.toml"
printf '[[plugin]]\nname = "__NAME__"\nkind = "telemetry"\nlibrary = "%s"\n' "$(pwd)/lib__NAME__.so" > "$config"
# The check's events land here (the sink appends one JSON line per event).
NENYAX_EXAMPLE_SINK_FILE="$(pwd)/events.jsonl" NENYAX_PLUGINS="$config" \
  "$nenyax" plugin-check telemetry __NAME__
