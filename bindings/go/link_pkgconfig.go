//go:build nenyax_pkgconfig

package nenyax

// -tags nenyax_pkgconfig: compile and link flags come from pkg-config (nenyax.pc, written by
// scripts/nenyax.pc.sh or an installer). The library is found at run time the usual way:
// a system library directory, or LD_LIBRARY_PATH.

// #cgo pkg-config: nenyax
import "C"
