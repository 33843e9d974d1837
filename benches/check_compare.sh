#!/usr/bin/env bash
# Wall time of `nenyax check` on a bridged environment, the Rust CLI next to the Python
# reference's CLI, from one invocation: the two alternate, N runs each, and the medians are
# compared. Both import the framework in Python (reasoning-gym takes about 1.2-1.6 s), so this
# measures how many interpreters each side starts and how well it overlaps them.
#
#   benches/check_compare.sh                          # N=5, reasoning_gym:basic_arithmetic
#   N=9 URI=reasoning_gym:leg_counting benches/check_compare.sh
#
# Python: $NENYAX_PYTHON, else .venv/bin/python; it must have the reference package `nenyax`
# (0.1.0a1) and reasoning-gym installed, and it is also the bridge's interpreter. Raw times go to
# target/compare/check.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${NENYAX_PYTHON:-$PWD/.venv/bin/python}
export NENYAX_PYTHON=$PY
N=${N:-5}
URI=${URI:-reasoning_gym:basic_arithmetic}
OUT=target/compare
mkdir -p "$OUT"

cargo build -q --release --bin nenyax
RUST=(target/release/nenyax check "$URI")
# The reference's console script, run by this interpreter (its shebang may name another venv).
REF=("$PY" -c 'import sys; from nenyax.cli import main; sys.argv[0] = "nenyax"; sys.exit(main())' check "$URI")

echo "== machine"
echo "nproc: $(nproc); rustc: $(rustc --version); python: $("$PY" --version 2>&1)"
echo "reference: nenyax $("$PY" -c 'import nenyax; print(nenyax.__version__)')"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '{ if ($1 > 0.5) print "warning: load average " $1 " > 0.5; the figures will be noisy" }' /proc/loadavg

# Wall seconds of one run; a failed check (or a tier below audited) stops the benchmark.
wall() {
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$("$@" 2>&1) || { echo "$out" >&2; return 1; }
    t1=$(date +%s.%N)
    grep -q 'tier: AUDITED' <<<"$out" || { echo "$out" >&2; echo "not audited: $*" >&2; return 1; }
    echo "$t1 - $t0" | bc
}

: >"$OUT/check.tsv"
for i in $(seq 1 "$N"); do
    # Alternate, so that a change in the machine's load hits both sides alike.
    r=$(wall "${RUST[@]}")
    p=$(wall "${REF[@]}")
    printf 'rust\t%s\npython\t%s\n' "$r" "$p" >>"$OUT/check.tsv"
    printf 'run %d: rust %.2f s, python reference %.2f s\n' "$i" "$r" "$p"
done

median() { awk -v who="$1" '$1 == who { print $2 }' "$OUT/check.tsv" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mr=$(median rust)
mp=$(median python)
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| \`nenyax check $URI\` | median of $N (s) |"
echo "|---|---|"
printf '| Rust CLI (release) | %.2f |\n' "$mr"
printf '| Python reference CLI | %.2f |\n' "$mp"
printf '| ratio Rust / Python | %.2f |\n' "$(echo "$mr / $mp" | bc -l)"
