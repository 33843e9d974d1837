#!/usr/bin/env bash
# The scaffold's conformance test: the driver reaches AUDITED under `nenyax check`.
# NENYAX is the nenyax binary to use (default: the one on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
PATH="$(pwd):$PATH" "$nenyax" check "__NAME__:sums?size=12" --require audited
