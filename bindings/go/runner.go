package nenyax

/*
#include "nenyax.h"
#include "shims.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/cgo"
)

// Runner runs batches of episodes in parallel on its own pool of worker threads.
type Runner struct {
	h *handle[*C.nenyax_runner_t]
}

// NewRunner makes a runner with threads workers (0: one per core, or NENYAX_NUM_THREADS).
func NewRunner(threads int) (*Runner, error) {
	if threads < 0 {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewRunner: threads must be >= 0"}
	}
	var out *C.nenyax_runner_t
	if err := takeError(C.nenyax_runner_new(C.size_t(threads), &out)); err != nil {
		return nil, err
	}
	return &Runner{h: newHandle("Runner", out, func(p *C.nenyax_runner_t) { C.nenyax_runner_free(p) })}, nil
}

// Close frees the runner and its threads. It is safe to call more than once.
func (r *Runner) Close() error {
	if r == nil {
		return nil
	}
	return r.h.Close()
}

func (r *Runner) handle() (*C.nenyax_runner_t, error) {
	if r == nil {
		return nil, closedError("Runner")
	}
	return r.h.get("Runner")
}

// Threads returns the number of worker threads (0 once closed).
func (r *Runner) Threads() int {
	h, err := r.handle()
	if err != nil {
		return 0
	}
	n := int(C.nenyax_runner_threads(h))
	runtime.KeepAlive(r)
	return n
}

// Run plays a batch of episodes in parallel and passes each trajectory to fn, in job order,
// on the calling goroutine. A non-nil error from fn stops the batch: Run then returns a
// *Error with StatusCallback that wraps it (errors.Is works). A panic in fn stops the batch
// too and is re-raised here once the library has returned. opts may be nil.
//
// Environments step on the runner's threads; a Go policy's function runs on the calling
// goroutine's thread, which serves the workers while it waits (see the package
// documentation).
//
// With a Go policy, stopping does not return non-zero to the library: libnenyax 0.1.0
// deadlocks when a sink stops a batch while episodes that call a non-thread-safe policy are
// still in flight. Instead the remaining episodes fail at once without calling the Go
// function, and their trajectories are discarded; fn is not called again either way.
func (r *Runner) Run(env *Env, policy *Policy, opts *RunOptions, fn func(i int, t Trajectory) error) error {
	if fn == nil {
		_, err := r.RunAll(env, policy, opts)
		return err
	}
	st := &runState{fn: fn}
	if policy != nil {
		st.host = policy.host
	}
	h := cgo.NewHandle(st)
	defer h.Delete()
	err := r.run(env, policy, opts, C.uintptr_t(h), nil)
	if st.panicked {
		panic(st.panicVal)
	}
	if st.stopped {
		if err == nil { // the Go-policy route: the library finished the (discarded) batch
			err = &Error{Status: StatusCallback, Message: fmt.Sprintf(
				"the trajectory function returned an error at job %d; the batch was stopped", st.stopAt)}
		}
		if IsStatus(err, StatusCallback) {
			err.(*Error).Err = st.err
		}
	}
	return err
}

// RunAll plays a batch like Run and returns every trajectory, in job order.
func (r *Runner) RunAll(env *Env, policy *Policy, opts *RunOptions) ([]Trajectory, error) {
	var out C.nenyax_string_t
	if err := r.run(env, policy, opts, 0, &out); err != nil {
		return nil, err
	}
	var raws []json.RawMessage
	if err := decode("trajectories", takeBytes(&out), &raws); err != nil {
		return nil, err
	}
	ts := make([]Trajectory, len(raws))
	for i, raw := range raws {
		t, err := decodeTrajectory(raw)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return ts, nil
}

func (r *Runner) run(env *Env, policy *Policy, opts *RunOptions, sink C.uintptr_t, out *C.nenyax_string_t) error {
	rh, err := r.handle()
	if err != nil {
		return err
	}
	eh, err := env.handle()
	if err != nil {
		return err
	}
	js, err := optJSON(opts)
	if err != nil {
		return err
	}
	ph, unlock, err := policy.acquire()
	if err != nil {
		return err
	}
	defer unlock()
	if policy.host != nil {
		policy.host.stopped.Store(false)
		defer policy.host.stopped.Store(false)
	}
	p, n := optInput(js)
	err = takeError(C.nenyax_go_runner_run(rh, eh, ph, p, n, sink, out))
	runtime.KeepAlive(r)
	runtime.KeepAlive(env)
	runtime.KeepAlive(policy)
	return err
}
