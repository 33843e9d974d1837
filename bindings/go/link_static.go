//go:build !nenyax_pkgconfig && !nenyax_dynamic

package nenyax

// Default route: link libnenyax.a built by cargo in this repository (release first, then
// debug), so the binary needs no LD_LIBRARY_PATH. -lpthread -ldl -lm are what Rust's standard
// library needs from the system when linked statically on glibc. On other systems (untested)
// the plain -lnenyax fallback links whichever library the linker prefers.

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo linux LDFLAGS: -L${SRCDIR}/../../target/release -L${SRCDIR}/../../target/debug -l:libnenyax.a -lpthread -ldl -lm
// #cgo !linux LDFLAGS: -L${SRCDIR}/../../target/release -L${SRCDIR}/../../target/debug -lnenyax
import "C"
