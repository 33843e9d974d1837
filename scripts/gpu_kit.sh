#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs on a GPU machine that has no Rust toolchain: the release
# libnenyax.so, the golden-case test binary (tests/pg_golden.rs) and the C golden test, stripped,
# under target/gpu-kit (well under 64 MiB). Copy that folder, scripts/gpu_check.sh and
# benches/pg_cuda.py to the GPU machine, or run scripts/gpu_check.sh there with cargo installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kit=target/gpu-kit
rm -rf "$kit" && mkdir -p "$kit"
cargo build -q --release -p nenyax-ffi
test_bin=$(cargo test -q --release --no-run --test pg_golden --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "pg_golden":
        print(m["executable"])')
cp target/release/libnenyax.so "$kit/"
cp "$test_bin" "$kit/pg_golden"
cc -std=c11 -O2 -Iinclude -Iffi/tests/c ffi/tests/c/test_pg_golden.c -o "$kit/test_pg_golden" \
    -L"$kit" -lnenyax -lm -Wl,-rpath,'$ORIGIN'
strip "$kit/libnenyax.so" "$kit/pg_golden" "$kit/test_pg_golden"
du -sh "$kit"
