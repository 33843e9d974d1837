#!/usr/bin/env bash
# Parquet export, Rust vs the Python reference, side by side in one run: the same N chat
# trajectories (benches/python_export.py make) exported as raw, sft and dpo rows by
# `target/release/nenyax export --to parquet` and by the reference's to_rows + to_parquet
# (nenyax==0.1.0a1 with datasets), each timed end to end from reading the JSONL, best of 3.
#
#   NENYAX_REFERENCE_PYTHON=/path/to/python benches/export_compare.sh   # N=20000 by default
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py="${NENYAX_REFERENCE_PYTHON:-.venv-python-binding/bin/python}"
n="${N:-20000}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cargo build --release --quiet --bin nenyax
"$py" benches/python_export.py make "$n" "$dir/runs.jsonl"
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $n trajectories, $(du -h "$dir/runs.jsonl" | cut -f1) JSONL"
printf '| rows | rows written | nenyax (s) | reference (s) | speed-up |\n|---|---|---|---|---|\n'
for rows in raw sft dpo; do
    best_rs=999999; best_py=999999; count=0
    for _ in 1 2 3; do
        t0=$(date +%s.%N)
        target/release/nenyax export "$dir/runs.jsonl" --to parquet --rows "$rows" -o "$dir/rs.parquet" >/dev/null
        t=$(echo "$(date +%s.%N) - $t0" | bc)
        best_rs=$(echo "if ($t < $best_rs) $t else $best_rs" | bc)
        line=$("$py" benches/python_export.py ref "$dir/runs.jsonl" "$rows" "$dir/py.parquet" 2>/dev/null | tail -1)
        t=$(echo "$line" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
        count=$(echo "$line" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["rows"])')
        best_py=$(echo "if ($t < $best_py) $t else $best_py" | bc)
    done
    printf '| %s | %s | %.3f | %.3f | %.1fx |\n' "$rows" "$count" "$best_rs" "$best_py" "$(echo "$best_py / $best_rs" | bc -l)"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
