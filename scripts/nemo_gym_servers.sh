#!/usr/bin/env bash
# Starts and stops real NeMo Gym 0.7.0 resources servers from .venv-nemo-gym (made by
# scripts/setup_nemo_gym.sh), without NeMo Gym's launcher: each server reads its config from
# NEMO_GYM_CONFIG_PATH / NEMO_GYM_CONFIG_DICT and runs its own app.py (docs/nemo-gym.md).
#
#   scripts/nemo_gym_servers.sh start [name...]   default: mcqa reasoning_gym
#                                                 example_single_tool_call example_session_state_mgmt
#   scripts/nemo_gym_servers.sh url <name>        prints http://127.0.0.1:<port>
#   scripts/nemo_gym_servers.sh data <name>       prints the server's shipped data/example.jsonl
#   scripts/nemo_gym_servers.sh stop              stops every server this script started
#
# State (port, pid, log per server) lives in target/nemo-gym-servers/. A server is ready when
# GET / answers {"status":"ok"}; start waits for that (90 s at most) and fails with the log's
# tail otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${NENYAX_NEMO_GYM_VENV:-$ROOT/.venv-nemo-gym}"
PY="$VENV/bin/python"
STATE="$ROOT/target/nemo-gym-servers"
DEFAULT=(mcqa reasoning_gym example_single_tool_call example_session_state_mgmt)

servers_dir() {
    "$PY" -c 'import resources_servers; print(list(resources_servers.__path__)[0])'
}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_one() {
    local name="$1" dir port pid
    dir="$(servers_dir)/$name"
    [ -f "$dir/app.py" ] || { echo "nemo_gym_servers: no resources server $name in $dir" >&2; return 1; }
    if [ -f "$STATE/$name.pid" ] && kill -0 "$(cat "$STATE/$name.pid")" 2>/dev/null; then
        echo "$name: already running at http://127.0.0.1:$(cat "$STATE/$name.port")"
        return 0
    fi
    port="$(free_port)"
    (
        cd "$dir"
        NEMO_GYM_CONFIG_PATH="$name" NEMO_GYM_CONFIG_DICT="head_server: {host: 127.0.0.1, port: 11000}
dry_run: false
$name:
  resources_servers:
    $name: {entrypoint: app.py, host: 127.0.0.1, port: $port}" \
            exec "$PY" app.py
    ) >"$STATE/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$STATE/$name.pid"
    echo "$port" >"$STATE/$name.port"
    for _ in $(seq 1 180); do
        if "$PY" -c "import sys, urllib.request, json
sys.exit(0 if json.load(urllib.request.urlopen('http://127.0.0.1:$port/', timeout=2)).get('status') == 'ok' else 1)" 2>/dev/null; then
            echo "$name: ready at http://127.0.0.1:$port (pid $pid)"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "nemo_gym_servers: $name exited during startup; its log ends:" >&2
            tail -n 20 "$STATE/$name.log" >&2
            return 1
        fi
        sleep 0.5
    done
    echo "nemo_gym_servers: $name not ready after 90 s; its log ends:" >&2
    tail -n 20 "$STATE/$name.log" >&2
    return 1
}

cmd="${1:-}"
shift || true
case "$cmd" in
    start)
        [ -x "$PY" ] || { echo "nemo_gym_servers: $PY missing; run scripts/setup_nemo_gym.sh" >&2; exit 1; }
        mkdir -p "$STATE"
        names=("$@")
        [ ${#names[@]} -eq 0 ] && names=("${DEFAULT[@]}")
        for n in "${names[@]}"; do start_one "$n"; done
        ;;
    url)
        echo "http://127.0.0.1:$(cat "$STATE/$1.port")"
        ;;
    data)
        echo "$(servers_dir)/$1/data/example.jsonl"
        ;;
    stop)
        for f in "$STATE"/*.pid; do
            [ -e "$f" ] || continue
            pid="$(cat "$f")"
            kill "$pid" 2>/dev/null && echo "stopped $(basename "$f" .pid) (pid $pid)" || true
            rm -f "$f"
        done
        ;;
    *)
        echo "usage: scripts/nemo_gym_servers.sh start [name...] | url <name> | data <name> | stop" >&2
        exit 2
        ;;
esac
