#!/bin/bash
# Run from / so that `import statkit` finds the installed (editable) package, not a copy.
cd /
python3 -m pytest -p no:cacheprovider -rA /tests/test_statkit.py
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
