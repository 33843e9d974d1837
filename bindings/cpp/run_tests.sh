#!/usr/bin/env bash
# Build libnenyax (debug), build and test the C++ wrapper, run the example. Works from any cwd.
#
#   bindings/cpp/run_tests.sh
#
# Build tree: target/cpp-build (at the repository root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/target/cpp-build"
jobs="$(nproc 2>/dev/null || echo 2)"

echo "== cargo build -p nenyax-ffi (debug)"
(cd "$root" && cargo build -p nenyax-ffi)

echo "== cmake configure + build ($build)"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DNENYAX_LIB_DIR="$root/target/debug"
cmake --build "$build" --parallel "$jobs"

echo "== ctest"
ctest --test-dir "$build" --output-on-failure --parallel "$jobs"

echo "== example_trainer"
"$build/example_trainer"
echo "== C++ bindings: OK"
