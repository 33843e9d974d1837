#!/bin/bash
ok=1
hello | grep -q "Hello, world!" || { echo "hello is not installed"; ok=0; }
/usr/games/cowsay moo 2>/dev/null | grep -q "moo" || { echo "cowsay is not installed"; ok=0; }
# The run must really be offline: the packages have to come from /opt/debs.
if command -v curl >/dev/null && curl -sS --max-time 5 -o /dev/null http://deb.debian.org/; then
  echo "the container has a network; this task must run without one"; ok=0
fi
if getent hosts deb.debian.org >/dev/null 2>&1; then
  echo "deb.debian.org resolves; this task must run without a network"; ok=0
fi
echo "$ok" > /logs/verifier/reward.txt
