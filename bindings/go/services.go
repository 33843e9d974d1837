package nenyax

/*
#include "nenyax.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Sandbox runs commands in isolation (the process or jail backend). Its methods serialise
// themselves: the library runs one command at a time per sandbox.
type Sandbox struct {
	mu sync.Mutex
	h  *handle[*C.nenyax_sandbox_t]
}

func newSandbox(p *C.nenyax_sandbox_t) *Sandbox {
	return &Sandbox{h: newHandle("Sandbox", p, func(p *C.nenyax_sandbox_t) { C.nenyax_sandbox_free(p) })}
}

// NewSandbox creates a sandbox. optionsJSON ("" for the defaults): {"backend": "process"|"jail"|"container",
// "cpu_s", "memory_bytes", "open_files", "processes", "file_size_bytes", "wall_s",
// "output_bytes", "network", "workdir", "root", "env": {..}, "extra_dirs": [..]}.
func NewSandbox(optionsJSON string) (*Sandbox, error) {
	var out *C.nenyax_sandbox_t
	p, n := optInput(optionsJSON)
	if err := takeError(C.nenyax_sandbox_new(p, n, &out)); err != nil {
		return nil, err
	}
	return newSandbox(out), nil
}

// Close kills what is left in the sandbox, removes its files and frees it. It is safe to call
// more than once.
func (s *Sandbox) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.Close()
}

// call runs f with the C handle under the sandbox's lock.
func (s *Sandbox) call(f func(*C.nenyax_sandbox_t) *C.nenyax_error_t) error {
	if s == nil {
		return closedError("Sandbox")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.h.get("Sandbox")
	if err != nil {
		return err
	}
	err = takeError(f(h))
	runtime.KeepAlive(s)
	return err
}

// Exec runs a command, {"argv": [..]} or {"shell": "..."} plus optional "cwd", "env", "stdin",
// "timeout_s", and returns the result as JSON (exit_code, signal, stdout, stderr,
// dropped_bytes, duration_s, killed). A command that fails or is killed is not an error.
func (s *Sandbox) Exec(execJSON string) (string, error) {
	var out C.nenyax_string_t
	p, n := input(execJSON)
	if err := s.call(func(h *C.nenyax_sandbox_t) *C.nenyax_error_t {
		return C.nenyax_sandbox_exec(h, p, n, &out)
	}); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// ExecResult is the decoded result of a command (Sandbox.Run).
type ExecResult struct {
	ExitCode     *int    `json:"exit_code"`
	Signal       *int    `json:"signal"`
	Stdout       string  `json:"stdout"`
	Stderr       string  `json:"stderr"`
	DroppedBytes uint64  `json:"dropped_bytes"`
	DurationS    float64 `json:"duration_s"`
	Killed       *string `json:"killed"`
}

// Run runs argv (no shell) and decodes the result.
func (s *Sandbox) Run(argv ...string) (ExecResult, error) {
	js, err := optJSON(map[string]any{"argv": argv})
	if err != nil {
		return ExecResult{}, err
	}
	out, err := s.Exec(js)
	if err != nil {
		return ExecResult{}, err
	}
	var r ExecResult
	err = decode("exec result", []byte(out), &r)
	return r, err
}

// Put writes data to a sandbox path (parents created) with Unix mode mode (e.g. 0o644).
func (s *Sandbox) Put(path string, data []byte, mode uint32) error {
	p, n := input(path)
	var d *C.uint8_t
	if len(data) > 0 {
		d = (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(data)))
	}
	return s.call(func(h *C.nenyax_sandbox_t) *C.nenyax_error_t {
		return C.nenyax_sandbox_put(h, p, n, d, C.size_t(len(data)), C.uint32_t(mode))
	})
}

// Get reads a sandbox file.
func (s *Sandbox) Get(path string) ([]byte, error) {
	var out C.nenyax_string_t
	p, n := input(path)
	if err := s.call(func(h *C.nenyax_sandbox_t) *C.nenyax_error_t {
		return C.nenyax_sandbox_get(h, p, n, &out)
	}); err != nil {
		return nil, err
	}
	return takeBytes(&out), nil
}

// List lists a sandbox directory as JSON: [{"name", "dir", "size"}], sorted by name.
func (s *Sandbox) List(path string) (string, error) {
	var out C.nenyax_string_t
	p, n := input(path)
	if err := s.call(func(h *C.nenyax_sandbox_t) *C.nenyax_error_t {
		return C.nenyax_sandbox_list(h, p, n, &out)
	}); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// Fork returns a new sandbox with the same configuration and a copy of this one's files.
func (s *Sandbox) Fork() (*Sandbox, error) {
	var out *C.nenyax_sandbox_t
	if err := s.call(func(h *C.nenyax_sandbox_t) *C.nenyax_error_t {
		return C.nenyax_sandbox_fork(h, &out)
	}); err != nil {
		return nil, err
	}
	return newSandbox(out), nil
}

// Recording is an OpenAI base URL of its own on the process's model server, answered by a chat
// policy, whose calls are kept: for a host that runs its own agent loop.
type Recording struct {
	h      *handle[*C.nenyax_recording_t]
	policy *Policy // the Go function behind it stays reachable while the recording answers
}

// NewRecording starts a recording answered by policy: an endpoint, or a Go function made with
// NewConcurrentChatPolicy (the server calls it from its own threads).
func NewRecording(policy *Policy) (*Recording, error) {
	if policy != nil && policy.host != nil {
		// The header requires NENYAX_THREAD_SAFE of a recording's callbacks (the server calls
		// them from its own threads), which libnenyax 0.1 does not check.
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewRecording: a Go policy must be made with NewConcurrentChatPolicy"}
	}
	ph, unlock, err := policy.acquire()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out *C.nenyax_recording_t
	err = takeError(C.nenyax_recording_new(ph, &out))
	runtime.KeepAlive(policy)
	if err != nil {
		return nil, err
	}
	return &Recording{h: newHandle("Recording", out, func(p *C.nenyax_recording_t) { C.nenyax_recording_free(p) }), policy: policy}, nil
}

// Close ends the recording (its URL stops answering). It is safe to call more than once.
func (r *Recording) Close() error {
	if r == nil {
		return nil
	}
	return r.h.Close()
}

func (r *Recording) str(f func(*C.nenyax_recording_t, *C.nenyax_string_t) *C.nenyax_error_t) (string, error) {
	if r == nil {
		return "", closedError("Recording")
	}
	h, err := r.h.get("Recording")
	if err != nil {
		return "", err
	}
	var out C.nenyax_string_t
	err = takeError(f(h, &out))
	runtime.KeepAlive(r)
	if err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// BaseURL returns the recording's OpenAI base URL (http://127.0.0.1:<port>/r/<id>/v1).
func (r *Recording) BaseURL() (string, error) {
	return r.str(func(h *C.nenyax_recording_t, out *C.nenyax_string_t) *C.nenyax_error_t {
		return C.nenyax_recording_base_url(h, out)
	})
}

// Calls returns the calls made so far; with drain they are removed from the recording.
func (r *Recording) Calls(drain bool) ([]ModelCall, error) {
	d := C.int32_t(0)
	if drain {
		d = 1
	}
	s, err := r.str(func(h *C.nenyax_recording_t, out *C.nenyax_string_t) *C.nenyax_error_t {
		return C.nenyax_recording_calls(h, d, out)
	})
	if err != nil {
		return nil, err
	}
	var calls []ModelCall
	err = decode("model calls", []byte(s), &calls)
	return calls, err
}

// Server is an OpenEnv server serving one step-mode environment on background threads.
type Server struct {
	h *handle[*C.nenyax_server_t]
}

// Serve starts an OpenEnv server for env. optionsJSON ("" for the defaults): {"host", "port"
// (0: any free port), "max_sessions", "idle_timeout_s", "max_message_bytes",
// "max_connections", "ping_interval_s"}. The environment's callbacks run on the server's
// threads (Go-defined environments are registered for that).
func Serve(env *Env, optionsJSON string) (*Server, error) {
	eh, err := env.handle()
	if err != nil {
		return nil, err
	}
	var out *C.nenyax_server_t
	p, n := optInput(optionsJSON)
	err = takeError(C.nenyax_serve_start(eh, p, n, &out))
	runtime.KeepAlive(env)
	if err != nil {
		return nil, err
	}
	return &Server{h: newHandle("Server", out, func(p *C.nenyax_server_t) { C.nenyax_server_stop(p) })}, nil
}

// Close stops the server (every connection and session is closed). It is safe to call more
// than once.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	return s.h.Close()
}

// URL returns the server's base URL, e.g. http://127.0.0.1:8000 (OpenEnv clients append /ws).
func (s *Server) URL() (string, error) {
	if s == nil {
		return "", closedError("Server")
	}
	h, err := s.h.get("Server")
	if err != nil {
		return "", err
	}
	var out C.nenyax_string_t
	err = takeError(C.nenyax_server_url(h, &out))
	runtime.KeepAlive(s)
	if err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}
