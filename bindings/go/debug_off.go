//go:build !nenyax_debug

package nenyax

func debugGC() {}
