package nenyax

import (
	"runtime"
	"sync"
)

// handle owns one C handle (P is its pointer type: cgo's opaque structs cannot be type arguments) for one Go object (Env, Policy, Runner, Session, Sandbox,
// Recording, Server). Close frees it once (later calls are no-ops); a finalizer frees a handle
// that was never closed; get refuses a closed one with StatusInvalidArgument instead of passing
// NULL or a freed pointer to C. The owning object keeps the handle reachable, so the
// runtime.KeepAlive(owner) after each C call also keeps the finalizer from running mid-call.
type handle[P comparable] struct {
	mu   sync.Mutex // guards ptr against a double Close
	ptr  P
	free func(P)
	what string // the owning type's name, for errors
}

func newHandle[P comparable](what string, ptr P, free func(P)) *handle[P] {
	h := &handle[P]{ptr: ptr, free: free, what: what}
	runtime.SetFinalizer(h, (*handle[P]).Close)
	return h
}

// Close frees the C handle; a nil or closed handle is a no-op.
func (h *handle[P]) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var none P
	if h.ptr != none {
		h.free(h.ptr)
		h.ptr = none
		runtime.SetFinalizer(h, nil)
	}
	return nil
}

// get returns the C handle for one call, or an error once closed.
func (h *handle[P]) get(what string) (P, error) {
	var none P
	if h == nil {
		return none, closedError(what)
	}
	debugGC()
	h.mu.Lock()
	p := h.ptr
	h.mu.Unlock()
	if p == none {
		return none, closedError(h.what)
	}
	return p, nil
}
