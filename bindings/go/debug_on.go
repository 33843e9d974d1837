//go:build nenyax_debug

package nenyax

import "runtime"

// debugGC runs a collection before every use of a handle (-tags nenyax_debug), so that a
// missing runtime.KeepAlive or a finalizer that runs too early shows up as a crash in tests.
func debugGC() { runtime.GC() }
