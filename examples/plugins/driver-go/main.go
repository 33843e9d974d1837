// nenyax-driver-gosums: a Nenyax driver written in Go, as an executable that speaks the
// bridge's JSON-lines protocol (docs/bridge.md, version 1) on stdin and stdout.
//
// Installed on PATH as `nenyax-driver-gosums`, it makes the URI scheme `gosums:`:
//
//	nenyax check gosums:sums --require audited
//	nenyax run gosums:sums?size=50 --policy oracle -n 100
//
// Its one target, `sums`, is a set of small addition problems ("What is 12 + 7 + 30?"); the
// reply is graded exactly. Parameters: `size` (tasks, default 20), `seed` (default 0) and, for
// tests of crash recovery, `crash_task`, `hang_task` and `garbage_task` (a task id whose step
// kills the process, never answers, or answers with a line that is not JSON).
//
// Standard library only: one JSON object per line in, one per line out.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// protocol is the bridge protocol version this driver speaks; Nenyax refuses any other.
const protocol = 1

// version is this driver's own version, reported in the handshake.
const version = "0.1.0"

// request is every field any op reads; absent ones stay at their zero value.
type request struct {
	ID            json.RawMessage        `json:"id"`
	Op            string                 `json:"op"`
	Driver        string                 `json:"driver"`
	Target        string                 `json:"target"`
	Params        map[string]interface{} `json:"params"`
	Limit         *int                   `json:"limit"`
	TaskID        interface{}            `json:"task_id"`
	Seed          *int64                 `json:"seed"`
	WithReference bool                   `json:"with_reference"`
	WantTask      *bool                  `json:"want_task"`
	Action        json.RawMessage        `json:"action"`
}

// bridgeError is a failed op: its kind is one of docs/bridge.md's (UnknownTarget,
// UnknownParameter, InvalidParameter, InvalidAction, EnvironmentError, ProtocolError).
type bridgeError struct {
	Kind    string
	Message string
	Extra   map[string]interface{}
}

func (e *bridgeError) Error() string { return e.Message }

func fail(kind, format string, args ...interface{}) *bridgeError {
	return &bridgeError{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// task is one addition problem.
type task struct {
	id     string
	terms  []int64
	answer int64
}

func (t task) prompt() string {
	parts := make([]string, len(t.terms))
	for i, x := range t.terms {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "What is " + strings.Join(parts, " + ") + "? Reply with the number only."
}

func (t task) ref() map[string]interface{} {
	return map[string]interface{}{
		"id":       t.id,
		"split":    nil,
		"prompt":   t.prompt(),
		"metadata": map[string]interface{}{"answer": strconv.FormatInt(t.answer, 10)},
	}
}

// splitmix64 makes each task from (seed, index) alone, so every worker process builds the
// same tasks and episodes reproduce across processes.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func makeTask(seed int64, i int) task {
	state := splitmix64(uint64(seed)*1_000_003 + uint64(i))
	next := func(n uint64) int64 {
		state = splitmix64(state)
		return int64(state % n)
	}
	t := task{id: strconv.Itoa(i)}
	for k := int64(0); k < 2+next(3); k++ {
		x := 1 + next(99)
		t.terms = append(t.terms, x)
		t.answer += x
	}
	return t
}

// driver is the loaded environment and the one live episode of this process.
type driver struct {
	tasks       []task
	crashTask   string
	hangTask    string
	garbageTask string
	current     *task
	done        bool
	score       float64
	got         interface{}
}

func (d *driver) load(r *request) (interface{}, error) {
	if r.Target != "sums" {
		return nil, fail("UnknownTarget", "unknown target %q; this driver has one target: sums", r.Target)
	}
	size, seed := int64(20), int64(0)
	accepted := []interface{}{"size", "seed", "crash_task", "hang_task", "garbage_task"}
	for k, v := range r.Params {
		switch k {
		case "size", "seed":
			n, ok := asInt(v)
			if !ok || (k == "size" && (n < 1 || n > 100000)) {
				return nil, fail("InvalidParameter", "%s must be an integer%s, got %v", k,
					map[bool]string{true: " from 1 to 100000", false: ""}[k == "size"], v)
			}
			if k == "size" {
				size = n
			} else {
				seed = n
			}
		case "crash_task":
			d.crashTask = fmt.Sprint(v)
		case "hang_task":
			d.hangTask = fmt.Sprint(v)
		case "garbage_task":
			d.garbageTask = fmt.Sprint(v)
		default:
			e := fail("UnknownParameter", "unknown parameter %q for gosums:sums; accepted: size, seed, crash_task, hang_task, garbage_task", k)
			e.Extra = map[string]interface{}{"param": k, "accepted": accepted, "driver": "gosums"}
			return nil, e
		}
	}
	d.tasks = make([]task, size)
	for i := range d.tasks {
		d.tasks[i] = makeTask(seed, i)
	}
	d.current = nil
	return map[string]interface{}{
		"name":               "sums",
		"version":            version,
		"description":        "small addition problems, graded exactly (a Go driver over the bridge protocol)",
		"num_tasks":          size,
		"text":               true,
		"reward_timing":      "terminal",
		"max_steps":          1,
		"action_schema":      map[string]interface{}{"type": "string", "description": "the sum, as digits"},
		"observation_schema": map[string]interface{}{"type": "string"},
		"extra":              map[string]interface{}{"seed": seed, "language": "go"},
		"has_reference":      true,
		// What a policy that answers nothing replies; the audit checks it scores below the reference.
		"null_action": "",
	}, nil
}

func (d *driver) needLoaded() error {
	if d.tasks == nil {
		return fail("ProtocolError", "no environment loaded; send load first")
	}
	return nil
}

func (d *driver) listTasks(r *request) (interface{}, error) {
	if err := d.needLoaded(); err != nil {
		return nil, err
	}
	n := len(d.tasks)
	if r.Limit != nil && *r.Limit >= 0 && *r.Limit < n {
		n = *r.Limit
	}
	out := make([]interface{}, n)
	for i := 0; i < n; i++ {
		out[i] = d.tasks[i].ref()
	}
	return out, nil
}

func (d *driver) reset(r *request) (interface{}, error) {
	if err := d.needLoaded(); err != nil {
		return nil, err
	}
	idx := 0
	switch id := r.TaskID.(type) {
	case nil:
		if r.Seed != nil {
			idx = int(((*r.Seed % int64(len(d.tasks))) + int64(len(d.tasks))) % int64(len(d.tasks)))
		}
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(id))
		if err != nil || n < 0 || n >= len(d.tasks) {
			return nil, fail("InvalidParameter", "task_id %q is not a task: expected 0 to %d", id, len(d.tasks)-1)
		}
		idx = n
	default:
		return nil, fail("InvalidParameter", "task_id must be a string or null, got %v", id)
	}
	t := d.tasks[idx]
	d.current, d.done, d.score, d.got = &t, false, 0, nil
	out := map[string]interface{}{
		"observation": map[string]interface{}{
			"data":     nil,
			"text":     t.prompt(),
			"messages": []interface{}{map[string]interface{}{"role": "user", "content": t.prompt()}},
			// The host's reference policy finds its answer by this id.
			"info": map[string]interface{}{"task_id": t.id},
		},
		"task": nil,
	}
	if r.WantTask == nil || *r.WantTask {
		out["task"] = t.ref()
	}
	if r.WithReference {
		out["reference"] = strconv.FormatInt(t.answer, 10)
	}
	return out, nil
}

func (d *driver) step(r *request) (interface{}, error) {
	if err := d.needLoaded(); err != nil {
		return nil, err
	}
	if d.current == nil || d.done {
		return nil, fail("EnvironmentError", "no episode in progress (one step per task); send reset first")
	}
	if d.crashTask != "" && d.current.id == d.crashTask {
		// For crash-recovery tests: die the hardest way, as a segfault or the OOM killer would.
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if d.hangTask != "" && d.current.id == d.hangTask {
		for { // stuck: the host's timeout_s must end it
			time.Sleep(time.Hour)
		}
	}
	if d.garbageTask != "" && d.current.id == d.garbageTask {
		os.Stdout.WriteString("panic: this is not JSON\n")
		for { // whatever comes next, the host has stopped listening
			time.Sleep(time.Hour)
		}
	}
	var action interface{}
	if err := json.Unmarshal(r.Action, &action); err != nil || r.Action == nil {
		return nil, fail("ProtocolError", "step: missing or malformed 'action'")
	}
	var reply string
	switch a := action.(type) {
	case string:
		reply = a
	case float64:
		reply = strconv.FormatFloat(a, 'f', -1, 64)
	default:
		e := fail("InvalidAction", "expected the sum as a string or a number, got %s", string(r.Action))
		e.Extra = map[string]interface{}{"action": string(r.Action)}
		return nil, e
	}
	n, err := strconv.ParseInt(strings.TrimSpace(reply), 10, 64)
	d.score = 0
	if err == nil && n == d.current.answer {
		d.score = 1
	}
	d.done, d.got = true, reply
	return map[string]interface{}{
		"observation": map[string]interface{}{"data": nil, "text": nil, "messages": nil,
			"info": map[string]interface{}{"task_id": d.current.id}},
		"reward":     d.score,
		"terminated": true,
		"truncated":  false,
		// The process that served the step, so tests can see replacement workers.
		"info": map[string]interface{}{"pid": os.Getpid()},
	}, nil
}

func (d *driver) judge() (interface{}, error) {
	if d.current == nil {
		return nil, fail("EnvironmentError", "no episode to judge; send reset and step first")
	}
	return map[string]interface{}{
		"score":      d.score,
		"passed":     d.score >= 1,
		"components": map[string]interface{}{},
		"source":     "verifier",
		"judge":      "gosums.exact",
		"details":    map[string]interface{}{"expected": strconv.FormatInt(d.current.answer, 10), "got": d.got},
	}, nil
}

func (d *driver) reference() (interface{}, error) {
	if d.current == nil {
		return nil, fail("EnvironmentError", "no episode in progress; send reset first")
	}
	return map[string]interface{}{"action": strconv.FormatInt(d.current.answer, 10)}, nil
}

func randomAction(r *request) (interface{}, error) {
	var s uint64
	if r.Seed != nil {
		s = uint64(*r.Seed)
	}
	return map[string]interface{}{"action": strconv.FormatUint(splitmix64(s)%300, 10)}, nil
}

func asInt(v interface{}) (int64, bool) {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return int64(x), true
		}
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// handle runs one request; it returns the result or a *bridgeError.
func (d *driver) handle(r *request) (interface{}, error) {
	switch r.Op {
	case "probe":
		return map[string]interface{}{"language": "go", "version": version, "versions": map[string]interface{}{}}, nil
	case "load":
		return d.load(r)
	case "tasks":
		return d.listTasks(r)
	case "reset":
		return d.reset(r)
	case "step":
		return d.step(r)
	case "judge":
		return d.judge()
	case "reference":
		return d.reference()
	case "random_action":
		return randomAction(r)
	case "close":
		// Nothing to release; main exits after the reply.
		return map[string]interface{}{}, nil
	}
	return nil, fail("ProtocolError", "unknown op %q; known: probe, load, tasks, reset, step, judge, reference, random_action, close", r.Op)
}

// handshake is the first line a worker sends (an in-process instance returns it from open).
func handshake() []byte {
	line, _ := json.Marshal(map[string]interface{}{"nenyax_bridge": protocol, "version": version, "language": "go", "pid": os.Getpid()})
	return line
}

// serve answers one request line; stop is true after `close`. The executable and the
// in-process library (lib.go) share it, so the driver is the same code either way.
func (d *driver) serve(line []byte) (reply []byte, stop bool) {
	var r request
	var msg map[string]interface{}
	if jerr := json.Unmarshal(line, &r); jerr != nil {
		msg = map[string]interface{}{"id": nil, "ok": false,
			"error": map[string]interface{}{"kind": "ProtocolError", "message": "request is not valid JSON: " + jerr.Error()}}
	} else {
		res, herr := d.handle(&r)
		stop = r.Op == "close"
		msg = map[string]interface{}{"id": r.ID}
		if herr != nil {
			be, ok := herr.(*bridgeError)
			if !ok {
				be = fail("EnvironmentError", "%v", herr)
			}
			e := map[string]interface{}{"kind": be.Kind, "message": be.Message}
			for k, v := range be.Extra {
				e[k] = v
			}
			msg["ok"], msg["error"] = false, e
		} else {
			msg["ok"], msg["result"] = true, res
		}
	}
	reply, err := json.Marshal(msg)
	if err != nil {
		reply, _ = json.Marshal(map[string]interface{}{"ok": false,
			"error": map[string]interface{}{"kind": "EnvironmentError", "message": err.Error()}})
	}
	return reply, stop
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := bufio.NewWriter(os.Stdout)
	send := func(line []byte) {
		out.Write(append(line, '\n'))
		out.Flush()
	}
	// The handshake comes first, before any request.
	send(handshake())
	d := &driver{}
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			reply, stop := d.serve(line)
			send(reply)
			if stop {
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "nenyax-driver-gosums: reading stdin:", err)
			os.Exit(1)
		}
	}
}
