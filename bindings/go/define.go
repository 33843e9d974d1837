package nenyax

/*
#include <stdbool.h>
#include "nenyax.h"
#include "shims.h"
*/
import "C"

import (
	"errors"
	"runtime/cgo"
)

// The environments a Go program defines with functions. They are registered with
// NENYAX_THREAD_SAFE: the library calls the functions from its worker threads (and a server's),
// concurrently, so they must be safe for concurrent use, like an http.Handler. cgo runs a Go
// function called from a thread Go did not create; that is what makes a Go-defined environment
// parallel in Runner.Run and servable with Serve. A panic fails that call (its episode), with
// the panic's message, and never unwinds into C. The functions are reached through a
// runtime/cgo.Handle the library owns: it is deleted when the last C handle using them (the
// Env, an Env made from it by WithJudge, its reference policy, a session) is freed.

// TaskFuncs are the functions of a one-turn environment (DefineTasks).
type TaskFuncs struct {
	// Score scores a reply (plain text) for a task row (JSON object); the score must be finite.
	Score func(taskJSON []byte, reply string) (float64, error)
	// Reference, optional, gives the reply an oracle gives for a task row.
	Reference func(taskJSON []byte) (string, error)
}

// StateFuncs are the functions of a multi-turn environment over a JSON state (DefineStateful).
type StateFuncs struct {
	// Reset returns the initial state (JSON) for a seed.
	Reset func(seed int64) ([]byte, error)
	// Observe returns what the policy sees (JSON; a JSON string becomes text) for a state.
	Observe func(stateJSON []byte) ([]byte, error)
	// Step applies an action (JSON) to a state: the next state (JSON), the reward, and whether
	// the episode ended.
	Step func(stateJSON, actionJSON []byte) (next []byte, reward float64, done bool, err error)
}

// DefineTasks defines a one-turn environment from task rows (a JSON array of objects, each with
// a string "prompt") scored by Go functions.
func DefineTasks(name, tasksJSON string, funcs TaskFuncs) (*Env, error) {
	if funcs.Score == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "DefineTasks: Score is nil"}
	}
	h := cgo.NewHandle(&funcs)
	ref := C.int(0)
	if funcs.Reference != nil {
		ref = 1
	}
	var out *C.nenyax_env_t
	np, nn := input(name)
	tp, tn := input(tasksJSON)
	// The library owns the handle from here on, also when the call fails (go_free deletes it).
	if err := takeError(C.nenyax_go_define_tasks(np, nn, tp, tn, C.uintptr_t(h), ref, &out)); err != nil {
		return nil, err
	}
	return newEnv(out), nil
}

// DefineStateful defines a multi-turn environment from Go functions over a JSON state; episodes
// end when Step says done or after maxSteps steps.
func DefineStateful(name string, funcs StateFuncs, maxSteps int) (*Env, error) {
	if funcs.Reset == nil || funcs.Observe == nil || funcs.Step == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "DefineStateful: Reset, Observe and Step are all needed"}
	}
	if maxSteps < 0 {
		return nil, &Error{Status: StatusInvalidArgument, Message: "DefineStateful: maxSteps must be >= 0"}
	}
	h := cgo.NewHandle(&funcs)
	var out *C.nenyax_env_t
	np, nn := input(name)
	if err := takeError(C.nenyax_go_define_stateful(np, nn, C.uintptr_t(h), C.size_t(maxSteps), &out)); err != nil {
		return nil, err
	}
	return newEnv(out), nil
}

// NewConcurrentChatPolicy is NewChatPolicy registered with NENYAX_THREAD_SAFE: chat is called
// from the library's threads, concurrently, so it must be safe for that. It is the kind of Go
// policy a Recording (whose model server calls it from its own threads) accepts.
func NewConcurrentChatPolicy(chat func(messagesJSON []byte) (string, error)) (*Policy, error) {
	if chat == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewConcurrentChatPolicy: the function is nil"}
	}
	h := cgo.NewHandle(&hostPolicy{chat: chat})
	var out *C.nenyax_policy_t
	if err := takeError(C.nenyax_go_policy_new_flags(1, C.uintptr_t(h), C.NENYAX_THREAD_SAFE, &out)); err != nil {
		return nil, err
	}
	// No host: calls need no turn-taking, and a stopped batch is stopped by the library.
	return newPolicy(out, nil), nil
}

// callback runs fn, turning an error or a panic into the callback's message and a non-zero
// return; reply receives what fn returns.
func callback(reply *C.nenyax_reply_t, fn func() ([]byte, error)) (rc C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			setReply(reply, []byte(panicMessage(r)))
			rc = 1
		}
	}()
	out, err := fn()
	if err != nil {
		setReply(reply, []byte(err.Error()))
		return 1
	}
	setReply(reply, out)
	return 0
}

//export nenyaxGoScore
func nenyaxGoScore(h C.uintptr_t, task *C.char, taskLen C.size_t, reply *C.char, replyLen C.size_t,
	score *C.double, errOut *C.nenyax_reply_t) C.int32_t {
	f := cgo.Handle(h).Value().(*TaskFuncs)
	return callback(errOut, func() ([]byte, error) {
		s, err := f.Score(goBytes(task, taskLen), string(goBytes(reply, replyLen)))
		if err == nil {
			*score = C.double(s)
		}
		return nil, err
	})
}

//export nenyaxGoReference
func nenyaxGoReference(h C.uintptr_t, task *C.char, n C.size_t, reply *C.nenyax_reply_t) C.int32_t {
	f := cgo.Handle(h).Value().(*TaskFuncs)
	return callback(reply, func() ([]byte, error) {
		s, err := f.Reference(goBytes(task, n))
		return []byte(s), err
	})
}

//export nenyaxGoReset
func nenyaxGoReset(h C.uintptr_t, seed C.int64_t, state *C.nenyax_reply_t) C.int32_t {
	f := cgo.Handle(h).Value().(*StateFuncs)
	return callback(state, func() ([]byte, error) { return f.Reset(int64(seed)) })
}

//export nenyaxGoObserve
func nenyaxGoObserve(h C.uintptr_t, state *C.char, n C.size_t, obs *C.nenyax_reply_t) C.int32_t {
	f := cgo.Handle(h).Value().(*StateFuncs)
	return callback(obs, func() ([]byte, error) { return f.Observe(goBytes(state, n)) })
}

//export nenyaxGoStep
func nenyaxGoStep(h C.uintptr_t, state *C.char, stateLen C.size_t, action *C.char, actionLen C.size_t,
	next *C.nenyax_reply_t, reward *C.double, done *C.bool) C.int32_t {
	f := cgo.Handle(h).Value().(*StateFuncs)
	return callback(next, func() ([]byte, error) {
		s, r, d, err := f.Step(goBytes(state, stateLen), goBytes(action, actionLen))
		if err == nil {
			if s == nil {
				return nil, errors.New("Step returned no state")
			}
			*reward, *done = C.double(r), C.bool(d)
		}
		return s, err
	})
}
