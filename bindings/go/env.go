package nenyax

/*
#include "nenyax.h"
*/
import "C"

import (
	"runtime"
)

// Env is a loaded environment. Its methods may be called from several goroutines at once;
// Close must not race with them.
type Env struct {
	h *handle[*C.nenyax_env_t]
}

func newEnv(p *C.nenyax_env_t) *Env {
	return &Env{h: newHandle("Env", p, func(p *C.nenyax_env_t) { C.nenyax_env_free(p) })}
}

// Close frees the environment. It is safe to call more than once. Policies and sessions
// made from it stay valid.
func (e *Env) Close() error {
	if e == nil {
		return nil
	}
	return e.h.Close()
}

func (e *Env) handle() (*C.nenyax_env_t, error) {
	if e == nil {
		return nil, closedError("Env")
	}
	return e.h.get("Env")
}

// Load loads an environment by URI, e.g. "builtin:arithmetic?size=100".
func Load(uri string) (*Env, error) {
	var out *C.nenyax_env_t
	p, n := input(uri)
	if err := takeError(C.nenyax_env_load(p, n, &out)); err != nil {
		return nil, err
	}
	return newEnv(out), nil
}

// Define defines an environment from a JSON spec: the fields of a define: file, with tasks
// as an array of objects, e.g.
//
//	{"name": "caps", "judge": {"type": "contains"},
//	 "tasks": [{"prompt": "Capital of Kenya?", "answer": "Nairobi"}]}
//
// A tasks_file is read relative to the working directory.
func Define(specJSON string) (*Env, error) {
	var out *C.nenyax_env_t
	p, n := input(specJSON)
	if err := takeError(C.nenyax_env_define(p, n, &out)); err != nil {
		return nil, err
	}
	return newEnv(out), nil
}

// Manifest returns the environment's manifest as JSON.
func (e *Env) Manifest() (string, error) {
	h, err := e.handle()
	if err != nil {
		return "", err
	}
	var out C.nenyax_string_t
	err = takeError(C.nenyax_env_manifest(h, &out))
	runtime.KeepAlive(e)
	if err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// ManifestInfo returns the manifest decoded into its common fields.
func (e *Env) ManifestInfo() (Manifest, error) {
	s, err := e.Manifest()
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := decode("manifest", []byte(s), &m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Tasks lists up to limit tasks (0: all).
func (e *Env) Tasks(limit int) ([]TaskRef, error) {
	h, err := e.handle()
	if err != nil {
		return nil, err
	}
	if limit < 0 {
		limit = 0
	}
	var out C.nenyax_string_t
	err = takeError(C.nenyax_env_tasks(h, C.size_t(limit), &out))
	runtime.KeepAlive(e)
	if err != nil {
		return nil, err
	}
	var tasks []TaskRef
	if err := decode("tasks", takeBytes(&out), &tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}

// ReferencePolicy returns the environment's reference (oracle) policy; StatusUnsupported
// when it has none.
func (e *Env) ReferencePolicy() (*Policy, error) {
	h, err := e.handle()
	if err != nil {
		return nil, err
	}
	var out *C.nenyax_policy_t
	err = takeError(C.nenyax_env_reference_policy(h, &out))
	runtime.KeepAlive(e)
	if err != nil {
		return nil, err
	}
	return newPolicy(out, nil), nil
}

// NullPolicy returns the environment's null policy; StatusUnsupported when it has none.
func (e *Env) NullPolicy() (*Policy, error) {
	h, err := e.handle()
	if err != nil {
		return nil, err
	}
	var out *C.nenyax_policy_t
	err = takeError(C.nenyax_env_null_policy(h, &out))
	runtime.KeepAlive(e)
	if err != nil {
		return nil, err
	}
	return newPolicy(out, nil), nil
}

// WithJudge returns a new environment whose episodes are re-judged by the judge the JSON
// spec describes, e.g. {"type":"exact","extract":"answer_tag"}; e itself is unchanged.
func (e *Env) WithJudge(judgeJSON string) (*Env, error) {
	h, err := e.handle()
	if err != nil {
		return nil, err
	}
	var out *C.nenyax_env_t
	p, n := input(judgeJSON)
	err = takeError(C.nenyax_env_with_judge(h, p, n, &out))
	runtime.KeepAlive(e)
	if err != nil {
		return nil, err
	}
	return newEnv(out), nil
}

// Rollout plays one episode on the calling goroutine. A failed episode is not an error: the
// trajectory carries it in Error. opts may be nil.
func (e *Env) Rollout(policy *Policy, opts *RolloutOptions) (Trajectory, error) {
	h, err := e.handle()
	if err != nil {
		return Trajectory{}, err
	}
	js, err := optJSON(opts)
	if err != nil {
		return Trajectory{}, err
	}
	ph, unlock, err := policy.acquire()
	if err != nil {
		return Trajectory{}, err
	}
	defer unlock()
	var out C.nenyax_string_t
	p, n := optInput(js)
	err = takeError(C.nenyax_env_rollout(h, ph, p, n, &out))
	runtime.KeepAlive(e)
	runtime.KeepAlive(policy)
	if err != nil {
		return Trajectory{}, err
	}
	return decodeTrajectory(takeBytes(&out))
}

// Check runs the conformance suite on the environment. The fresh instance the
// reproducible_fresh check needs is rebuilt the way the handle was made (URI, spec or
// callbacks), so the tier matches CheckURI's. opts may be nil.
func (e *Env) Check(opts *CheckOptions) (Report, error) {
	h, err := e.handle()
	if err != nil {
		return Report{}, err
	}
	js, err := optJSON(opts)
	if err != nil {
		return Report{}, err
	}
	var out C.nenyax_string_t
	p, n := optInput(js)
	err = takeError(C.nenyax_env_check(h, p, n, &out))
	runtime.KeepAlive(e)
	if err != nil {
		return Report{}, err
	}
	return decodeReport(takeBytes(&out))
}

// CheckURI loads uri and runs the full conformance suite, fresh instances included.
// opts may be nil.
func CheckURI(uri string, opts *CheckOptions) (Report, error) {
	js, err := optJSON(opts)
	if err != nil {
		return Report{}, err
	}
	var out C.nenyax_string_t
	up, un := input(uri)
	p, n := optInput(js)
	if err := takeError(C.nenyax_check_uri(up, un, p, n, &out)); err != nil {
		return Report{}, err
	}
	return decodeReport(takeBytes(&out))
}
