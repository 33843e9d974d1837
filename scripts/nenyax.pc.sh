#!/usr/bin/env bash
# Write a pkg-config file for libnenyax built in this checkout:
#   scripts/nenyax.pc.sh [debug|release]        -> target/<profile>/nenyax.pc
# Then, e.g.:
#   PKG_CONFIG_PATH=target/release pkg-config --cflags --libs nenyax
#   PKG_CONFIG_PATH=target/release pkg-config --static --libs nenyax   # adds Libs.private
#   go test -tags nenyax_pkgconfig ./...   (in bindings/go; LD_LIBRARY_PATH=target/release to run)
# For an installed layout set PREFIX (and optionally LIBDIR, INCLUDEDIR, OUT):
#   PREFIX=/usr/local OUT=/usr/local/lib/pkgconfig/nenyax.pc scripts/nenyax.pc.sh release
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile="${1:-release}"
case "$profile" in
    debug | release) ;;
    *) echo "usage: $0 [debug|release]" >&2; exit 2 ;;
esac

version="$(sed -n 's/^#define NENYAX_VERSION_STRING "\(.*\)"$/\1/p' "$root/include/nenyax.h")"
[ -n "$version" ] || { echo "$0: no NENYAX_VERSION_STRING in include/nenyax.h" >&2; exit 1; }

if [ -n "${PREFIX:-}" ]; then
    prefix="$PREFIX"
    libdir="${LIBDIR:-\${prefix\}/lib}"
    includedir="${INCLUDEDIR:-\${prefix\}/include}"
else
    # In-tree: the library stays where cargo put it, the header where it is committed.
    prefix="$root"
    libdir="${LIBDIR:-\${prefix\}/target/$profile}"
    includedir="${INCLUDEDIR:-\${prefix\}/include}"
fi
out="${OUT:-$root/target/$profile/nenyax.pc}"
mkdir -p "$(dirname "$out")"

# Libs.private: what Rust's standard library needs from the system when libnenyax.a is linked
# statically on Linux/glibc (libgcc_s and libc come with the C compiler driver).
case "$(uname -s)" in
    Darwin) private="-lSystem -lc -lm" ;; # untested: what rustc lists for macOS std
    *) private="-lpthread -ldl -lm" ;;
esac

cat >"$out" <<PC
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: nenyax
Description: Nenyax C ABI: one contract for every RL environment
URL: https://github.com/nenyax/nenyax
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lnenyax
Libs.private: $private
PC
echo "$out"
