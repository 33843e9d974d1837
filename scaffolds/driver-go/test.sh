#!/usr/bin/env bash
# The scaffold's conformance test: build the driver, then `nenyax check` must reach AUDITED.
# NENYAX is the nenyax binary to use (default: the one on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nenyax="${NENYAX:-nenyax}"
mkdir -p bin
go build -o bin/nenyax-driver-__NAME__ .
PATH="$(pwd)/bin:$PATH" "$nenyax" check "__NAME__:sums?size=12" --require audited
