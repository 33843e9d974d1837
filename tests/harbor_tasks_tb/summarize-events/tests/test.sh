#!/bin/bash
python3 - <<'PY'
import json

want = {}
for line in open("/app/data/events.jsonl"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    n, b = want.get(e["user"], (0, 0))
    want[e["user"]] = (n + 1, b + e["bytes"])
expected = "".join(f"{u}\t{n}\t{b}\n" for u, (n, b) in sorted(want.items()))
try:
    got = open("/app/out/summary.tsv").read()
except OSError as e:
    print("no summary:", e)
    got = None
ok = got == expected
if got is not None and not ok:
    print("expected:\n" + expected + "got:\n" + got)
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
