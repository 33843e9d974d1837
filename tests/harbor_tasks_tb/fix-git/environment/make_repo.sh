#!/bin/bash
# A repository whose last commit was made on a detached HEAD and then left behind.
set -euo pipefail
git config --global user.email dev@example.com
git config --global user.name dev
git config --global init.defaultBranch main
mkdir -p /app/repo
cd /app/repo
git init -q
printf 'version 1\n' > notes.txt
printf 'def add(a, b):\n    return a + b\n' > calc.py
git add .
git commit -qm "initial"
printf 'version 2\n' > notes.txt
git commit -qam "bump version"
git checkout -q --detach
printf 'def sub(a, b):\n    return a - b\n' >> calc.py
printf 'important fix: sub() added\n' >> notes.txt
git commit -qam "important fix"
git checkout -q main
