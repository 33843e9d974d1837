package nenyax

/*
#include "nenyax.h"
#include "shims.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"sync/atomic"
)

// Policy chooses actions: a Go function, an endpoint, or an environment's own policy.
type Policy struct {
	h *handle[*C.nenyax_policy_t]
	// host policies (Go callbacks, registered without NENYAX_THREAD_SAFE) serve one call at
	// a time: the library binds their callbacks to one calling thread per call.
	host  *hostPolicy
	calls sync.Mutex
}

func newPolicy(p *C.nenyax_policy_t, host *hostPolicy) *Policy {
	return &Policy{h: newHandle("Policy", p, func(p *C.nenyax_policy_t) { C.nenyax_policy_free(p) }), host: host}
}

// Close frees the policy. It is safe to call more than once. The Go function of a Go policy
// is released when the library no longer uses it.
func (p *Policy) Close() error {
	if p == nil {
		return nil
	}
	return p.h.Close()
}

// acquire returns the C handle for one call and, for Go policies, takes the policy's turn.
func (p *Policy) acquire() (*C.nenyax_policy_t, func(), error) {
	if p == nil {
		return nil, nil, closedError("Policy")
	}
	h, err := p.h.get("Policy")
	if err != nil {
		return nil, nil, err
	}
	return h, p.turn(), nil
}

// turn takes a Go policy's turn (a no-op for other policies) and returns its release. It
// needs no open handle: a Learner holds the library's own reference to its policy, so a
// Train may still use a Go policy whose Policy was closed, and must still take turns with it.
func (p *Policy) turn() func() {
	if p.host == nil {
		return func() {}
	}
	p.calls.Lock()
	return p.calls.Unlock
}

// hostPolicy is what a Go policy's cgo.Handle refers to.
type hostPolicy struct {
	act         func(observationJSON []byte) ([]byte, error)
	chat        func(messagesJSON []byte) (string, error)
	actEpisode  func(ep Episode, observationJSON []byte) ([]byte, *Record, error)
	chatEpisode func(ep Episode, messagesJSON []byte) (string, *Record, error)
	// stopped is set when a Runner.Run function stops the batch: the remaining episodes then
	// fail at once instead of calling the Go function (see Runner.Run).
	stopped atomic.Bool
}

func newHostPolicy(hp *hostPolicy) (*Policy, error) {
	h := cgo.NewHandle(hp)
	chat := C.int(0)
	if hp.chat != nil {
		chat = 1
	}
	var out *C.nenyax_policy_t
	// The library owns the handle from here on, also when the call fails: it calls the
	// free_user_data trampoline, which deletes it.
	if err := takeError(C.nenyax_go_policy_new(chat, C.uintptr_t(h), &out)); err != nil {
		return nil, err
	}
	return newPolicy(out, hp), nil
}

// NewActionPolicy makes a policy from a Go function that reads the observation (JSON:
// {data, text, messages, info}) and returns the action as JSON (e.g. `"<answer>4</answer>"`
// for a text action, or `42`). Returning an error, or panicking, fails that episode only,
// with the message in the trajectory's Error.
//
// The function is called only on the goroutine that called Rollout or Runner.Run, one call
// at a time (see the package documentation).
func NewActionPolicy(act func(observationJSON []byte) ([]byte, error)) (*Policy, error) {
	if act == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewActionPolicy: the function is nil"}
	}
	return newHostPolicy(&hostPolicy{act: act})
}

// NewChatPolicy makes a policy from a Go chat function: it reads the conversation (a JSON
// array of OpenAI-shaped messages) and returns the assistant's reply text (plain text, not
// JSON). Errors and panics fail that episode only, as with NewActionPolicy.
func NewChatPolicy(chat func(messagesJSON []byte) (string, error)) (*Policy, error) {
	if chat == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewChatPolicy: the function is nil"}
	}
	return newHostPolicy(&hostPolicy{chat: chat})
}

// NewEndpointPolicy makes a policy backed by an OpenAI-compatible chat endpoint. Nothing is
// contacted until an episode runs; connection failures fail episodes, not this call.
func NewEndpointPolicy(spec EndpointSpec) (*Policy, error) {
	js, err := optJSON(spec)
	if err != nil {
		return nil, err
	}
	var out *C.nenyax_policy_t
	p, n := input(js)
	if err := takeError(C.nenyax_policy_endpoint(p, n, &out)); err != nil {
		return nil, err
	}
	return newPolicy(out, nil), nil
}
