#!/bin/bash
set -euo pipefail
mkdir -p /app/out
jq -R -r 'fromjson? | [.user, .bytes] | @tsv' /app/data/events.jsonl \
    | awk -F'\t' '{ n[$1]++; b[$1] += $2 } END { for (u in n) printf "%s\t%d\t%d\n", u, n[u], b[u] }' \
    | LC_ALL=C sort > /app/out/summary.tsv
