package nenyax

// The Go ends of the C trampolines in shims.c. Each receives the runtime/cgo.Handle that was
// registered as user_data. None lets a Go panic unwind into C (that would crash the process):
// policy trampolines turn it into the callback's error message, so only that episode fails;
// the sink trampoline records it, and Runner.Run re-panics once C has returned.

/*
#include "nenyax.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// goBytes copies (ptr, n) from C into Go memory.
func goBytes(ptr *C.char, n C.size_t) []byte {
	b := make([]byte, int(n))
	if n > 0 {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(ptr)), int(n)))
	}
	return b
}

// setReply copies b into the reply slot (the library copies it again before returning).
func setReply(reply *C.nenyax_reply_t, b []byte) {
	var p *C.char
	if len(b) > 0 {
		p = (*C.char)(unsafe.Pointer(unsafe.SliceData(b)))
	}
	C.nenyax_reply_set(reply, p, C.size_t(len(b)))
}

func panicMessage(r any) string {
	return fmt.Sprintf("Go callback panicked: %v", r)
}

//export nenyaxGoAct
func nenyaxGoAct(h C.uintptr_t, obs *C.char, n C.size_t, reply *C.nenyax_reply_t) (rc C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			setReply(reply, []byte(panicMessage(r)))
			rc = 1
		}
	}()
	hp := cgo.Handle(h).Value().(*hostPolicy)
	if hp.stopped.Load() {
		setReply(reply, []byte(stoppedMessage))
		return 1
	}
	action, err := hp.act(goBytes(obs, n))
	if err != nil {
		setReply(reply, []byte(err.Error()))
		return 1
	}
	setReply(reply, action)
	return 0
}

//export nenyaxGoChat
func nenyaxGoChat(h C.uintptr_t, messages *C.char, n C.size_t, reply *C.nenyax_reply_t) (rc C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			setReply(reply, []byte(panicMessage(r)))
			rc = 1
		}
	}()
	hp := cgo.Handle(h).Value().(*hostPolicy)
	if hp.stopped.Load() {
		setReply(reply, []byte(stoppedMessage))
		return 1
	}
	text, err := hp.chat(goBytes(messages, n))
	if err != nil {
		setReply(reply, []byte(err.Error()))
		return 1
	}
	setReply(reply, []byte(text))
	return 0
}

//export nenyaxGoFree
func nenyaxGoFree(h C.uintptr_t) {
	cgo.Handle(h).Delete()
}

const stoppedMessage = "the batch was stopped by its trajectory function"

// runState is what a Runner.Run sink's cgo.Handle refers to.
type runState struct {
	fn func(i int, t Trajectory) error
	// host is the batch's Go policy, if any: then the sink never returns non-zero (see
	// Runner.Run) but sets host.stopped and discards the rest of the batch.
	host     *hostPolicy
	stopped  bool
	stopAt   int
	err      error // why the sink stopped the batch
	panicked bool
	panicVal any
}

// stop records that the batch must stop at job i and says what to return to the library.
func (st *runState) stop(i int) C.int32_t {
	st.stopped, st.stopAt = true, i
	if st.host != nil {
		st.host.stopped.Store(true)
		return 0
	}
	return 1
}

//export nenyaxGoSink
func nenyaxGoSink(h C.uintptr_t, index C.size_t, data *C.char, n C.size_t) (rc C.int32_t) {
	st := cgo.Handle(h).Value().(*runState)
	if st.stopped {
		return 0 // discarding the rest of a batch with a Go policy
	}
	defer func() {
		if r := recover(); r != nil {
			st.panicked, st.panicVal = true, r
			rc = st.stop(int(index))
		}
	}()
	t, err := decodeTrajectory(goBytes(data, n))
	if err == nil {
		err = st.fn(int(index), t)
	}
	if err != nil {
		st.err = err
		return st.stop(int(index))
	}
	return 0
}
