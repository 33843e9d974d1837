#!/usr/bin/env bash
# The harbor: driver runs task test scripts offline: `uvx ... pytest` becomes the system
# python's `python3 -m pytest` (inside the jail, which sees the host's /usr read-only). Make sure
# that pytest is there; on Debian/Ubuntu it comes from apt's python3-pytest.
set -euo pipefail
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if python3 -m pytest --version >/dev/null 2>&1; then
    exit 0
fi
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y python3-pytest >/dev/null || { apt-get update >/dev/null && apt-get install -y python3-pytest >/dev/null; }
    python3 -m pytest --version
else
    echo "setup_harbor.sh: the system python3 has no pytest; install python3-pytest (as root)" >&2
    exit 1
fi
