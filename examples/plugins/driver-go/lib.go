//go:build nenyax_lib

// The same driver as an in-process library plugin: `go build -buildmode=c-shared -tags
// nenyax_lib -o libgosums.so .` exports nenyax_plugin_entry (lib.c) with a
// nenyax_driver_vtable_t whose instances are the executable's `driver` values, answering the
// same protocol lines through `serve`. Nothing else changes: that is the point of the vtable.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../../include
#include <stdint.h>
#include <stdlib.h>
#include "nenyax.h"
void gosums_write(const nenyax_plugin_out_t *out, const char *ptr, size_t len);
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

func write(out *C.nenyax_plugin_out_t, b []byte) {
	if len(b) > 0 {
		C.gosums_write(out, (*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b)))
	}
}

// goOpen makes one instance (one worker's worth of state) and writes its handshake. The
// instance handle is a cgo.Handle: C may hold it, but never a Go pointer.
//
//export goOpen
func goOpen(instance *C.uintptr_t, out *C.nenyax_plugin_out_t) C.int32_t {
	*instance = C.uintptr_t(cgo.NewHandle(&driver{}))
	write(out, handshake())
	return 0
}

// goCall answers one request line of an instance.
//
//export goCall
func goCall(instance C.uintptr_t, req *C.char, n C.size_t, out *C.nenyax_plugin_out_t) C.int32_t {
	d, ok := cgo.Handle(instance).Value().(*driver)
	if !ok {
		write(out, []byte("not an instance of this driver"))
		return 1
	}
	reply, _ := d.serve(C.GoBytes(unsafe.Pointer(req), C.int(n)))
	write(out, reply)
	return 0
}

// goClose frees an instance.
//
//export goClose
func goClose(instance C.uintptr_t) {
	cgo.Handle(instance).Delete()
}
