#!/usr/bin/env bash
# The project's one test command: every Rust test in the workspace, the C programs against the
# C ABI, the C++, Go and Python bindings' tests, and the interop tests
# against the Python reference implementation (tests/python_interop.rs), which need
# nenyax==0.1.0a1. This script keeps it in .venv at the repository root and points the tests at
# it through NENYAX_TEST_PYTHON. Extra arguments go to `cargo test`, e.g.
#   scripts/test.sh --test python_interop -- --nocapture
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
venv="$root/.venv"
python="$venv/bin/python"
reference="nenyax==0.1.0a1"
# The frameworks the bridge drivers are tested against (pinned as in the drivers' messages).
frameworks=("reasoning-gym==0.1.25" "gymnasium==1.4.0")

# A missing or broken venv (e.g. copied from another machine) is (re)created.
if ! "$python" -c 'import sys' >/dev/null 2>&1; then
    echo "scripts/test.sh: creating $venv" >&2
    python3 -m venv --clear "$venv"
fi
if ! "$python" -c 'import sys, nenyax; sys.exit(nenyax.__version__ != "0.1.0a1")' >/dev/null 2>&1; then
    echo "scripts/test.sh: installing $reference into $venv" >&2
    "$python" -m pip install --quiet --disable-pip-version-check "$reference"
fi

# The official OpenAI client, run against the recording model server (tests/openai_client.rs).
openai_client="openai==3.57.0"
if ! "$python" -c 'import sys, openai; sys.exit(openai.__version__ != "3.57.0")' >/dev/null 2>&1; then
    echo "scripts/test.sh: installing $openai_client into $venv" >&2
    "$python" -m pip install --quiet --disable-pip-version-check "$openai_client"
fi

if ! "$python" -c 'import reasoning_gym, gymnasium' >/dev/null 2>&1; then
    echo "scripts/test.sh: installing ${frameworks[*]} into $venv (reasoning-gym builds pycosat: ~2 min)" >&2
    "$python" -m pip install --quiet --disable-pip-version-check "${frameworks[@]}"
fi

# Verifiers 0.3.1 (classic API) and 0.4.0 (v1 API) each in their own venv (tests/verifiers.rs,
# and tests/traces.rs, which turns their recorded rollouts into training traces).
scripts/setup_verifiers.sh
export NENYAX_VERIFIERS_031_PYTHON="$root/.venv-verifiers-0.3.1/bin/python"
export NENYAX_VERIFIERS_040_PYTHON="$root/.venv-verifiers-0.4.0/bin/python"

# NeMo Gym 0.7.0's resources servers in their own venv (tests/nemo_gym.rs, tests/traces.rs,
# tests/atif.rs (its own ATIF exporter too) and tests/telemetry_otel.rs start real servers from
# it, traces.rs also its vllm_model server); with NENYAX_REQUIRE_NEMO_GYM
# set, a missing interpreter fails rather than skips.
scripts/setup_nemo_gym.sh
export NENYAX_NEMO_GYM_PYTHON="$root/.venv-nemo-gym/bin/python"
export NENYAX_REQUIRE_NEMO_GYM=1

# The harbor: driver's offline test mode needs pytest in the system python (tests/harbor.rs).
scripts/setup_harbor.sh

# NVRTC from PyPI (no GPU needed), so tests/kernels.rs compiles the CUDA kernels here too.
# The library finds it by name, so its folder goes on LD_LIBRARY_PATH before cargo starts.
nvrtc_venv="$root/.venv-nvrtc"
nvrtc_dir() { ls -d "$nvrtc_venv"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib 2>/dev/null | head -n 1 || true; }
nvrtc_lib="$(nvrtc_dir)"
if [ ! -e "$nvrtc_lib/libnvrtc.so.12" ]; then
    echo "scripts/test.sh: installing nvidia-cuda-nvrtc-cu12 into $nvrtc_venv" >&2
    python3 -m venv --clear "$nvrtc_venv"
    "$nvrtc_venv/bin/python" -m pip install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc-cu12==12.9.86"
    nvrtc_lib="$(nvrtc_dir)"
fi
export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NENYAX_REQUIRE_NVRTC=1

# OpenEnv 0.10.0 in its own venv, plus the `openenv init` scaffold (tests/openenv.rs).
scripts/setup_openenv.sh
export NENYAX_OPENENV_PYTHON="$root/.venv-openenv/bin/python"
export NENYAX_OPENENV_SCAFFOLD="$root/target/openenv/echo_peer"

# The services and readers of the integration tests (Phoenix, MLflow, W&B, pyarrow, datasets),
# one venv per tests/requirements/NAME.txt, each named to the tests as NENYAX_<NAME>_PYTHON.
scripts/setup_integrations.sh
shopt -s nullglob
for req in tests/requirements/*.txt; do
    name="$(basename "$req" .txt)"
    var="NENYAX_$(echo "$name" | tr 'a-z-' 'A-Z_')_PYTHON"
    export "$var=$root/.venv-$name/bin/python"
done
shopt -u nullglob
export NENYAX_REQUIRE_INTEGRATIONS=1

# The plugin tests build a Go external driver (tests/external_driver.rs) and every scaffold of
# `nenyax new-plugin` in its language (tests/scaffolds.rs: python3, go, g++, cargo); here a
# missing toolchain fails rather than skips.
export NENYAX_REQUIRE_GO=1
export NENYAX_REQUIRE_SCAFFOLDS=1
# CI runs as root, so the C jail plugin (tests/library_sandbox.rs) must run, not skip.
export NENYAX_REQUIRE_SANDBOX_PLUGIN=1

export NENYAX_TEST_PYTHON="$python"
# The bridge drivers' interpreter (tests/bridge.rs).
export NENYAX_PYTHON="$python"
# --no-fail-fast: one failing test binary must not hide what the others would report.
cargo test --workspace --all-targets --no-fail-fast "$@"
# With no arguments, the whole suite: doctests (which --all-targets leaves out) and the
# C++, Go and Python bindings against the C ABI. The C programs in ffi/tests/c run under cargo
# test. The Python binding's tests run against its installed wheel, in .venv-python-binding
# with torch, TRL and Ray (scripts/test_python.sh).
if [ "$#" -eq 0 ]; then
    cargo test --workspace --doc
    bindings/cpp/run_tests.sh
    bindings/go/run_tests.sh
    scripts/test_python.sh
fi
