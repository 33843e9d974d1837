#!/usr/bin/env bash
# The Python binding's tests against the INSTALLED wheel: builds the wheel (cargo build --release
# -p nenyax-ffi, bundled by bindings/python/setup.py; NENYAX_LIBRARY=<path> bundles a prebuilt
# library instead), installs it with bindings/python/requirements-test.txt (torch, the TRL stack,
# Ray, the Python reference nenyax==0.1.0a1 side by side, reasoning-gym) into
# .venv-python-binding, and runs pytest over bindings/python/tests from outside the source tree.
# Extra arguments go to pytest, e.g. scripts/test_python.sh -k trl -x
#
# The venv is reused only while it was made from the same requirements file by the same Python;
# otherwise it is made afresh (the cold install downloads torch with its CUDA libraries, ~3 GB).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
venv="$root/.venv-python-binding"
python="$venv/bin/python"
requirements="$root/bindings/python/requirements-test.txt"
wheels="$root/target/wheels"
pip=(-m pip --disable-pip-version-check --quiet)

want="$( (sha256sum "$requirements" | cut -d' ' -f1; python3 --version) | tr '\n' ' ')"
stamp="$venv/.nenyax-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$python" -c 'import sys' >/dev/null 2>&1; then
    echo "scripts/test_python.sh: making $venv from $requirements" >&2
    t0=$SECONDS
    python3 -m venv --clear "$venv"
    "$python" "${pip[@]}" install -r "$requirements"
    echo "$want" >"$stamp"
    echo "scripts/test_python.sh: test requirements installed in $((SECONDS - t0)) s" >&2
fi

# The wheel, built as a user would (an isolated build with setuptools, wheel and cffi).
rm -f "$wheels"/nenyax_native-*.whl
"$python" "${pip[@]}" wheel --no-deps -w "$wheels" ./bindings/python
wheel=("$wheels"/nenyax_native-*.whl)
"$python" "${pip[@]}" install --force-reinstall --no-deps "${wheel[0]}"
# The build leaves build/ under bindings/python (ignored by git); the tests must not see it.
rm -rf bindings/python/build

export NENYAX_REQUIRE_TRL=1 NENYAX_REQUIRE_RAY=1
# The bridge drivers' interpreter (reasoning-gym is in this venv), and TRL's experimental-API notice off.
export NENYAX_PYTHON="$python" TRL_EXPERIMENTAL_SILENCE=1
# The TRL example builds its model and tokenizer locally: nothing may reach for the Hugging Face Hub.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
unset NENYAX_LIBRARY NENYAX_HEADER
# From a directory outside the tree, so `import nenyax_native` can only be the installed wheel.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
"$python" - "$venv" <<'EOF'
import sys, nenyax_native
where = nenyax_native.LIBRARY_PATH
if not str(where).startswith(sys.argv[1]):
    sys.exit(f"scripts/test_python.sh: nenyax_native loaded {where}, not the installed wheel")
print(f"nenyax_native {nenyax_native.__version__}, libnenyax {nenyax_native.version()} from {where}")
EOF
"$python" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests" "$@"
