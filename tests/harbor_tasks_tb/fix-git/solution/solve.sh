#!/bin/bash
set -euo pipefail
cd /app/repo
lost=$(git log -g --format='%H %s' HEAD | awk '$2 == "important" && $3 == "fix" { print $1; exit }')
git merge --ff-only "$lost"
