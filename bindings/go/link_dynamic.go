//go:build nenyax_dynamic && !nenyax_pkgconfig

package nenyax

// -tags nenyax_dynamic: link libnenyax.so built by cargo in this repository (release first,
// then debug) and record both directories as an rpath, in the same order, so the binary finds
// the library without LD_LIBRARY_PATH as long as the checkout does not move.

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: -L${SRCDIR}/../../target/release -L${SRCDIR}/../../target/debug -lnenyax
// #cgo linux LDFLAGS: -Wl,-rpath,${SRCDIR}/../../target/release -Wl,-rpath,${SRCDIR}/../../target/debug
import "C"
