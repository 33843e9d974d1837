#!/usr/bin/env bash
# `nenyax serve` next to the Python OpenEnv servers on the same environment logic (the echo of
# `openenv init`'s scaffold), from one invocation, same machine, same load client:
#   - nenyax serve builtin:echo                          (this repository, release build)
#   - the real OpenEnv server: the scaffold's EchoPeerEnvironment via openenv 0.10.0's
#     create_app under uvicorn (benches/openenv_python_servers.py scaffold)
#   - the Python reference's `nenyax serve` (nenyax==0.1.0a1 export.openenv) of the same echo
#     (benches/openenv_python_servers.py reference)
# The load client (benches/openenv_load.rs, Rust, tungstenite) holds N WebSocket sessions, each
# playing episodes of reset + STEPS steps for SECONDS; it reports episodes/s and p50/p99 step
# latency. Each server is measured alone, at 1 and 16 concurrent sessions.
#
#   benches/openenv_compare.sh            # about 1.5 minutes after the build
#   SECONDS_PER_RUN=20 benches/openenv_compare.sh
#
# Needs .venv-openenv (scripts/setup_openenv.sh); installs nenyax==0.1.0a1 into it (--no-deps:
# it needs only pydantic, already there) for the reference server. Raw outputs go to
# target/compare-openenv/.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=$PWD/.venv-openenv/bin/python
OUT=target/compare-openenv
RUN_S=${SECONDS_PER_RUN:-8}
STEPS=10
mkdir -p "$OUT"
scripts/setup_openenv.sh >/dev/null
if ! "$PY" -c 'import nenyax, sys; sys.exit(nenyax.__version__ != "0.1.0a1")' 2>/dev/null; then
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps "nenyax==0.1.0a1"
fi
cargo build -q --release --bin nenyax --bench openenv_load
LOAD=$(ls -t target/release/deps/openenv_load-* | grep -v '\.d$' | head -n1)

echo "== machine"
{
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "rustc: $(rustc --version)"
    echo "python: $("$PY" --version 2>&1); $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("openenv", "nenyax", "fastapi", "uvicorn", "websockets", "pydantic")))')"
    echo "commit: $(git rev-parse --short HEAD)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

PID=
stop() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi; PID=; }
trap stop EXIT
wait_up() {
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.1; done
    echo "server on port $1 did not come up" >&2
    return 1
}

measure() { # name port action
    local name=$1 port=$2 action=$3
    wait_up "$port"
    "$LOAD" --url "http://127.0.0.1:$port" --sessions 1 --seconds 2 --steps $STEPS --action "$action" >/dev/null # warm-up
    for n in 1 16; do
        "$LOAD" --url "http://127.0.0.1:$port" --sessions $n --seconds "$RUN_S" --steps $STEPS --action "$action" |
            tee "$OUT/$name-$n.json"
    done
    stop
}

echo "== nenyax serve builtin:echo"
target/release/nenyax serve builtin:echo --port 28701 --max-sessions 64 >/dev/null &
PID=$!
measure nenyax 28701 '{"value":"hello"}'

echo "== OpenEnv 0.10.0 scaffold server (uvicorn, 1 worker)"
"$PY" benches/openenv_python_servers.py scaffold target/openenv/echo_peer 28702 &
PID=$!
measure openenv 28702 '{"message":"hello"}'

echo "== Python reference nenyax serve (0.1.0a1, uvicorn, 1 worker)"
"$PY" benches/openenv_python_servers.py reference 28703 &
PID=$!
measure reference 28703 '{"value":"hello"}'

echo "== ratios (nenyax / other), $STEPS steps per episode"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
r = {(s, n): json.load(open(f"{out}/{s}-{n}.json")) for s in ("nenyax", "openenv", "reference") for n in (1, 16)}
print(f"{'server':<10} {'sessions':>8} {'episodes/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
for (s, n), v in r.items():
    print(f"{s:<10} {n:>8} {v['episodes_per_s']:>11.0f} {v['p50_ms']:>8.3f} {v['p99_ms']:>8.3f} {v['errors']:>6}")
for other in ("openenv", "reference"):
    for n in (1, 16):
        a, b = r[("nenyax", n)], r[(other, n)]
        print(f"nenyax vs {other:<9} at {n:>2} sessions: throughput x{a['episodes_per_s'] / b['episodes_per_s']:.1f}, "
              f"p50 latency /{b['p50_ms'] / a['p50_ms']:.1f}, p99 latency /{b['p99_ms'] / a['p99_ms']:.1f}")
PYEOF
