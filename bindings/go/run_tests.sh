#!/usr/bin/env bash
# Build libnenyax and run the Go binding's checks; works from any directory.
#
#   bindings/go/run_tests.sh                 # debug profile (the default)
#   NENYAX_PROFILE=release bindings/go/run_tests.sh
#   NENYAX_GO_RACE=0 bindings/go/run_tests.sh   # skip the -race run
#   NENYAX_GO_CGOCHECK2=1 bindings/go/run_tests.sh   # add a GOEXPERIMENT=cgocheck2 run (slow:
#                                                    # it rebuilds the runtime)
#
# Steps: cargo build -p nenyax-ffi; go vet; go test -v (static libnenyax.a, the default link
# route); the same under GODEBUG=cgocheck=1 GOGC=1 with -tags nenyax_debug (a GC before every
# handle use); go test -race; and a short run through each other link route (-tags
# nenyax_dynamic with an rpath, -tags nenyax_pkgconfig with target/<profile>/nenyax.pc and
# LD_LIBRARY_PATH). The last line is "go tests: N passed, M failed".
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
profile="${NENYAX_PROFILE:-debug}"
case "$profile" in
    debug) cargo_flags=() ;;
    release) cargo_flags=(--release) ;;
    *) echo "run_tests.sh: NENYAX_PROFILE must be debug or release, not $profile" >&2; exit 2 ;;
esac
libdir="$root/target/$profile"

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
fi

echo "== cargo build -p nenyax-ffi ${cargo_flags[*]:-}" >&2
(cd "$root" && cargo build -p nenyax-ffi "${cargo_flags[@]}")

cd "$here"
export CGO_ENABLED=1
# Put the chosen profile's directory first, so a stale build of the other profile is never
# linked (the package's own flags list target/release before target/debug).
export CGO_LDFLAGS="-L$libdir"

passed=0
failed=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# gotest NAME ARGS...: run go test -v, echo its output, count its results.
gotest() {
    local name="$1"
    shift
    echo "== $name: go test $*" >&2
    local rc=0
    go test -count=1 -v "$@" ./... >"$log" 2>&1 || rc=$?
    cat "$log"
    local p f
    p=$(grep -c -- '^--- PASS' "$log" || true)
    f=$(grep -c -- '^--- FAIL' "$log" || true)
    passed=$((passed + p))
    failed=$((failed + f))
    echo "== $name: $p passed, $f failed" >&2
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        failed=$((failed + 1)) # a build failure or a crash outside any test
    fi
    return 0
}

echo "== go vet ./..." >&2
go vet ./...
go vet -tags nenyax_debug ./...

gotest "static" 
GODEBUG=cgocheck=1 GOGC=1 gotest "cgocheck+GOGC=1" -tags nenyax_debug \
    -run 'TestRunParallelGoPolicy|TestPanicking|TestSink|TestSessions|TestCloseTwice|TestFinalizers|TestConcurrent'
if [ "${NENYAX_GO_RACE:-1}" != 0 ]; then
    gotest "race" -race
fi
if [ "${NENYAX_GO_CGOCHECK2:-0}" != 0 ]; then
    GOEXPERIMENT=cgocheck2 gotest "cgocheck2"
fi
CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir" gotest "dynamic" -tags nenyax_dynamic \
    -run 'TestVersion|TestRunParallelGoPolicy|TestFinalizers'
"$root/scripts/nenyax.pc.sh" "$profile" >/dev/null
CGO_LDFLAGS="" PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    gotest "pkg-config" -tags nenyax_pkgconfig -run 'TestVersion|TestRunParallelGoPolicy|TestCheck'

echo "go tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
