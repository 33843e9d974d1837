#!/usr/bin/env bash
# The C ABI tests (ffi/tests/c/*.c) under AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer.
#
# libnenyax itself is an ordinary (non-instrumented) Rust cdylib; the C programs are compiled
# with -fsanitize=address,undefined, so ASan's allocator replaces malloc for the whole process.
# Rust's allocator is the system malloc, so LeakSanitizer sees every allocation the library makes
# and still holds at exit (a string, error or handle the library forgot to free, or one the
# tests forgot to free). Out-of-bounds reads and writes are caught in the C code and in libc calls
# (memcpy, strlen, ...) made on the library's buffers.
#
# Usage: scripts/test_c_asan.sh [--valgrind] [test_name ...]   (default: every ffi/tests/c/*.c)
#   --valgrind  also run each (non-instrumented) program under
#               valgrind --leak-check=full --error-exitcode=1 (slow; needs valgrind)
#
# Suppressions: ffi/tests/c/lsan.supp is used when it exists. None is needed today: the rollout
# threads a runner starts are joined or still referenced at exit, and std's one-time
# allocations stay reachable, so LeakSanitizer reports nothing that the library did not leak.
# A real leak in the library must be fixed, not suppressed.
#
# Exit status: 0 when every program passed with no sanitizer (or valgrind) report; 1 when any
# sanitizer or valgrind reported an error or a leak; 2 when everything was clean but some
# programs failed their own checks (a library bug their test shows; see their output).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"

use_valgrind=0
names=()
for arg in "$@"; do
    case "$arg" in
        --valgrind) use_valgrind=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) names+=("${arg%.c}") ;;
    esac
done
if [ "${#names[@]}" -eq 0 ]; then
    for f in ffi/tests/c/*.c; do
        names+=("$(basename "$f" .c)")
    done
fi

cc="${CC:-cc}"
target="${CARGO_TARGET_DIR:-$root/target}"
lib="$target/debug"
out="$target/c-asan"
supp="$root/ffi/tests/c/lsan.supp"
mkdir -p "$out"

echo "== building libnenyax (debug)"
cargo build --quiet -p nenyax-ffi --lib || exit 1

warnings=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
san=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g -O1 "-DNENYAX_TEST_ROOT=\"$root\"")

# halt on the first error; detect leaks at exit; full stacks through the Rust frames (which have
# no frame pointers) so a leak report names the Rust function that allocated.
# CI requires the container backend: the C sandbox test then drives a real container under ASan.
if [ "${NENYAX_REQUIRE_CONTAINER:-}" = 1 ]; then
    export NENYAX_TEST_CONTAINER=${NENYAX_TEST_CONTAINER:-1}
fi
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:fast_unwind_on_malloc=0:malloc_context_size=40"
LSAN_OPTIONS="report_objects=1:print_suppressions=0"
if [ -f "$supp" ]; then
    LSAN_OPTIONS="$LSAN_OPTIONS:suppressions=$supp"
fi
export LSAN_OPTIONS
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

sanitizer_failures=()
test_failures=()
passed=0
for name in "${names[@]}"; do
    src="ffi/tests/c/$name.c"
    if [ ! -f "$src" ]; then
        echo "no such test: $src" >&2
        exit 1
    fi
    exe="$out/$name"
    if ! "$cc" "${warnings[@]}" "${san[@]}" -pthread -Iinclude -Iffi/tests/c "$src" -o "$exe" \
        -L"$lib" -lnenyax -lm; then
        echo "== $name: does not compile" >&2
        sanitizer_failures+=("$name (compile)")
        continue
    fi
    work="$out/$name.run"
    rm -rf "$work" && mkdir -p "$work"
    (cd "$work" && timeout 600 "$exe" >stdout.txt 2>stderr.txt)
    rc=$?
    if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer" \
        "$work/stderr.txt"; then
        echo "== $name: SANITIZER REPORT (exit $rc)"
        cat "$work/stderr.txt"
        sanitizer_failures+=("$name")
    elif [ "$rc" -ne 0 ]; then
        echo "== $name: its checks failed (exit $rc), sanitizers clean"
        grep -E "CHECK failed|stopping|did not" "$work/stderr.txt" | sed 's/^/   /'
        test_failures+=("$name")
    else
        echo "== $name: ok ($(tail -n 1 "$work/stdout.txt"))"
        passed=$((passed + 1))
    fi

    if [ "$use_valgrind" -eq 1 ]; then
        plain="$out/$name.plain"
        "$cc" "${warnings[@]}" -g -pthread -Iinclude -Iffi/tests/c "$src" -o "$plain" \
            -L"$lib" -lnenyax -lm || { sanitizer_failures+=("$name (valgrind build)"); continue; }
        (cd "$work" && ASAN_OPTIONS= timeout 1800 valgrind --quiet --leak-check=full \
            --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
            --error-exitcode=99 --trace-children=no "$plain" >valgrind.stdout 2>valgrind.stderr)
        vrc=$?
        if [ "$vrc" -eq 99 ]; then
            echo "== $name: VALGRIND REPORT"
            cat "$work/valgrind.stderr"
            sanitizer_failures+=("$name (valgrind)")
        else
            echo "   valgrind: clean (exit $vrc)"
        fi
    fi
done

echo
echo "summary: ${#names[@]} programs, $passed passed, ${#test_failures[@]} failed their checks," \
    "${#sanitizer_failures[@]} with sanitizer reports"
if [ "${#sanitizer_failures[@]}" -gt 0 ]; then
    echo "sanitizer reports: ${sanitizer_failures[*]}"
    exit 1
fi
if [ "${#test_failures[@]}" -gt 0 ]; then
    echo "failed their checks (no sanitizer report): ${test_failures[*]}"
    exit 2
fi
echo "clean"
