#!/bin/bash
# 1 when main carries the "important fix" commit on top of its old history and the tree is clean.
cd /app/repo || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
[ "$(git rev-parse --abbrev-ref HEAD)" = main ] || { echo "not on main"; ok=0; }
git log --format=%s main | grep -qx "important fix" || { echo "main lacks the important fix"; ok=0; }
git log --format=%s main | grep -qx "bump version" || { echo "main lost its history"; ok=0; }
grep -q "def sub" calc.py || { echo "calc.py has no sub()"; ok=0; }
[ -z "$(git status --porcelain)" ] || { echo "the working tree is not clean"; ok=0; }
echo "$ok" > /logs/verifier/reward.txt
