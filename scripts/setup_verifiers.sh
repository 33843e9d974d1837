#!/usr/bin/env bash
# Creates the Python virtual environments the verifiers bridge tests use:
#   .venv-verifiers-0.3.1  verifiers==0.3.1 (classic API)
#   .venv-verifiers-0.4.0  verifiers==0.4.0 (v1 API) + uv, with uv's cache pre-warmed with
#                          the dependencies of the null harness script.
# Idempotent: a venv whose stamp file (.nenyax-complete) names the same requirement is skipped;
# an incomplete one is deleted and rebuilt. Installs from the package registries only.
#
# Usage: scripts/setup_verifiers.sh [0.3.1] [0.4.0]     (default: both)
# Env:   PYTHON (default python3.11), NENYAX_VERIFIERS_FORCE=1 to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
VERSIONS=("$@")
[ ${#VERSIONS[@]} -eq 0 ] && VERSIONS=(0.3.1 0.4.0)

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup_verifiers: $PYTHON not found on PATH (verifiers needs Python >= 3.11)" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 14) else 1)'; then
    echo "setup_verifiers: $PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); verifiers 0.3.1 needs >= 3.11, < 3.14" >&2
    exit 1
fi

now() { date +%s; }
T_ALL=$(now)

# The null harness of verifiers 0.4.0 is a PEP 723 script that the subprocess runtime prepares
# with `uv sync --script` (then runs with the uv-made interpreter). On a cold machine that step
# downloads the script's dependencies (openai, mcp, httpx, ...) from PyPI. Doing it here, through
# verifiers' own runtime code (same script, same digest, same uv cache), makes the first rollout
# of a test find everything cached. Best effort: a failure only warns.
prewarm_uv() {
    local venv="$1"
    local marker="$venv/.nenyax-prewarmed"
    # The uv cache lives outside the venv (~/.cache/uv): re-check it even for a complete venv.
    if [ -f "$marker" ] && [ -x "$(head -n1 "$marker")" ]; then
        echo "  uv pre-warm: cached ($(head -n1 "$marker"))"
        return 0
    fi
    rm -f "$marker"
    if ! NENYAX_PREWARM_MARKER="$marker" PATH="$venv/bin:$PATH" "$venv/bin/python" - <<'EOF'
import asyncio, os
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

async def main():
    rt = SubprocessRuntime(SubprocessConfig(), name=f"nenyax-prewarm-{os.getpid()}")
    await rt.start()
    try:
        argv = await rt.prepare_uv_script(CHAT_PROGRAM_SOURCE, {})
        interpreter = argv[-2] if len(argv) > 1 else argv[0]
        print("  uv pre-warm: chat harness interpreter", interpreter)
        with open(os.environ["NENYAX_PREWARM_MARKER"], "w") as f:
            f.write(interpreter + "\n")
    finally:
        await rt.stop()

asyncio.run(main())
EOF
    then
        echo "  warning: uv pre-warm failed; the first v1 rollout will download the harness dependencies" >&2
    fi
}

setup_one() {
    local ver="$1"
    local venv="$ROOT/.venv-verifiers-$ver"
    local stamp="$venv/.nenyax-complete"
    local req
    case "$ver" in
        0.3.1) req="verifiers==0.3.1" ;;
        0.4.0) req="verifiers==0.4.0 uv" ;;
        *) echo "setup_verifiers: unsupported version $ver (0.3.1 or 0.4.0)" >&2; return 1 ;;
    esac
    if [ -z "${NENYAX_VERIFIERS_FORCE:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$req" ]; then
        echo "verifiers $ver: $venv is complete (stamp), skipping"
        [ "$ver" = "0.4.0" ] && prewarm_uv "$venv"
        return 0
    fi
    local t0
    t0=$(now)
    echo "verifiers $ver: creating $venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --quiet $req
    local t1
    t1=$(now)
    echo "verifiers $ver: pip install took $((t1 - t0)) s"
    "$venv/bin/python" -c "import importlib.metadata as m; print('verifiers', m.version('verifiers'))"
    if [ "$ver" = "0.4.0" ]; then
        prewarm_uv "$venv"
        echo "verifiers $ver: uv pre-warm took $(( $(now) - t1 )) s"
    fi
    echo "$req" > "$stamp"
    echo "verifiers $ver: done in $(( $(now) - t0 )) s"
}

for v in "${VERSIONS[@]}"; do
    setup_one "$v"
done
echo "setup_verifiers: total $(( $(now) - T_ALL )) s"
