package nenyax

/*
#include "nenyax.h"
*/
import "C"

import (
	"runtime"
	"sync"
)

// Session is a live step-mode episode: read the observation, act, repeat until Done. Its
// methods serialise themselves, so a session may be shared between goroutines, but the
// steps of one episode only make sense in one order.
type Session struct {
	mu sync.Mutex // held for every call and by Close: a session needs exclusive access
	h  *handle[*C.nenyax_session_t]
}

// Session opens a step-mode episode. Rollout- and task-mode environments give
// StatusUnsupported. opts may be nil.
func (e *Env) Session(opts *SessionOptions) (*Session, error) {
	h, err := e.handle()
	if err != nil {
		return nil, err
	}
	js, err := optJSON(opts)
	if err != nil {
		return nil, err
	}
	var out *C.nenyax_session_t
	p, n := optInput(js)
	err = takeError(C.nenyax_session_open(h, p, n, &out))
	runtime.KeepAlive(e)
	if err != nil {
		return nil, err
	}
	return &Session{h: newHandle("Session", out, func(p *C.nenyax_session_t) { C.nenyax_session_free(p) })}, nil
}

// Close ends and frees the session. It is safe to call more than once.
func (s *Session) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.Close()
}

// lock takes the session for one call; the caller unlocks s.mu.
func (s *Session) lock() (*C.nenyax_session_t, error) {
	if s == nil {
		return nil, closedError("Session")
	}
	s.mu.Lock()
	p, err := s.h.get("Session")
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// ObservationJSON returns the current observation as JSON.
func (s *Session) ObservationJSON() ([]byte, error) {
	h, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out C.nenyax_string_t
	err = takeError(C.nenyax_session_observation(h, &out))
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	return takeBytes(&out), nil
}

// Observation returns the current observation.
func (s *Session) Observation() (Observation, error) {
	b, err := s.ObservationJSON()
	if err != nil {
		return Observation{}, err
	}
	var o Observation
	err = decode("observation", b, &o)
	return o, err
}

// Act applies an action, given as JSON (e.g. `"<answer>4</answer>"` or `42`), and returns
// the step.
func (s *Session) Act(actionJSON string) (Step, error) {
	h, err := s.lock()
	if err != nil {
		return Step{}, err
	}
	defer s.mu.Unlock()
	var out C.nenyax_string_t
	p, n := input(actionJSON)
	err = takeError(C.nenyax_session_act(h, p, n, &out))
	runtime.KeepAlive(s)
	if err != nil {
		return Step{}, err
	}
	var st Step
	err = decode("step", takeBytes(&out), &st)
	return st, err
}

// Done reports whether the episode terminated or was truncated (true once closed).
func (s *Session) Done() bool {
	h, err := s.lock()
	if err != nil {
		return true
	}
	defer s.mu.Unlock()
	done := bool(C.nenyax_session_done(h))
	runtime.KeepAlive(s)
	return done
}

// Judgment returns the episode's judgment so far.
func (s *Session) Judgment() (Judgment, error) {
	h, err := s.lock()
	if err != nil {
		return Judgment{}, err
	}
	defer s.mu.Unlock()
	var out C.nenyax_string_t
	err = takeError(C.nenyax_session_judgment(h, &out))
	runtime.KeepAlive(s)
	if err != nil {
		return Judgment{}, err
	}
	var j Judgment
	err = decode("judgment", takeBytes(&out), &j)
	return j, err
}
