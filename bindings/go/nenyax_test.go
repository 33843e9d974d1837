package nenyax_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

// solve answers an arithmetic observation ({"data": {"expression": "46 + 12"}, ...}).
func solve(obs []byte) (int, error) {
	var o struct {
		Data struct {
			Expression string `json:"expression"`
		} `json:"data"`
	}
	if err := json.Unmarshal(obs, &o); err != nil {
		return 0, err
	}
	var a, b int
	var op string
	if _, err := fmt.Sscanf(o.Data.Expression, "%d %s %d", &a, &op, &b); err != nil {
		return 0, fmt.Errorf("cannot read %q: %v", o.Data.Expression, err)
	}
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	}
	return 0, fmt.Errorf("unknown operator %q", op)
}

func answer(obs []byte) ([]byte, error) {
	x, err := solve(obs)
	if err != nil {
		return nil, err
	}
	return json.Marshal(fmt.Sprintf("<answer>%d</answer>", x))
}

func load(t *testing.T, uri string) *nenyax.Env {
	t.Helper()
	env, err := nenyax.Load(uri)
	if err != nil {
		t.Fatalf("Load(%q): %v", uri, err)
	}
	t.Cleanup(func() { env.Close() })
	return env
}

// must(f())(t) returns f's value, or fails the test with f's error.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func closeLater(t *testing.T, c interface{ Close() error }) {
	t.Cleanup(func() { c.Close() })
}

func wantStatus(t *testing.T, err error, status nenyax.Status) *nenyax.Error {
	t.Helper()
	var e *nenyax.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *nenyax.Error with status %v, got %v", status, err)
	}
	if e.Status != status {
		t.Fatalf("want status %v, got %v: %s", status, e.Status, e.Message)
	}
	if !nenyax.IsStatus(err, status) {
		t.Fatalf("IsStatus(%v) is false", status)
	}
	return e
}

func TestVersion(t *testing.T) {
	if v := nenyax.Version(); v != nenyax.HeaderVersion {
		t.Fatalf("library %s, header %s", v, nenyax.HeaderVersion)
	}
	if nenyax.VersionNumber() != 1000 && nenyax.Version() == "0.1.0" {
		t.Fatalf("VersionNumber() = %d for 0.1.0", nenyax.VersionNumber())
	}
	if p := nenyax.ProtocolVersion(); p != "0.1" {
		t.Fatalf("protocol %q", p)
	}
	if s := nenyax.StatusUnknownParameter.String(); s != "UnknownParameter" {
		t.Fatalf("String() = %q", s)
	}
	if s := nenyax.StatusPanic.String(); s != "Panic" || nenyax.StatusPanic != 21 {
		t.Fatalf("StatusPanic = %d %q", nenyax.StatusPanic, s)
	}
}

func TestManifestAndTasks(t *testing.T) {
	env := load(t, "builtin:arithmetic?size=20")
	js := must(env.Manifest())(t)
	var raw map[string]any
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		t.Fatalf("manifest is not JSON: %v", err)
	}
	m := must(env.ManifestInfo())(t)
	if m.ID != "builtin:arithmetic?size=20" && !strings.HasPrefix(m.ID, "builtin:arithmetic") {
		t.Fatalf("id %q", m.ID)
	}
	if m.Name != "arithmetic" || m.Mode != "step" || m.Protocol != "0.1" || !m.Capabilities.Text {
		t.Fatalf("manifest %+v", m)
	}
	if m.NumTasks == nil || *m.NumTasks != 20 {
		t.Fatalf("num_tasks %v", m.NumTasks)
	}
	tasks := must(env.Tasks(3))(t)
	if len(tasks) != 3 || tasks[1].ID != "1" || tasks[1].Prompt == nil || tasks[1].Metadata["answer"] == nil {
		t.Fatalf("tasks %+v", tasks)
	}
	if all := must(env.Tasks(0))(t); len(all) != 20 {
		t.Fatalf("Tasks(0) gave %d tasks", len(all))
	}
}

// The acceptance test: 64 episodes in parallel with a Go policy, every one solved, and the Go
// function only ever entered on the thread that called Run.
func TestRunParallelGoPolicy(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	var calls atomic.Int64
	var mu sync.Mutex
	tids := map[int]int{}
	policy := must(nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
		calls.Add(1)
		mu.Lock()
		tids[gettid()]++
		mu.Unlock()
		return answer(obs)
	}))(t)
	closeLater(t, policy)
	runner := must(nenyax.NewRunner(4))(t)
	closeLater(t, runner)
	if runner.Threads() != 4 {
		t.Fatalf("Threads() = %d", runner.Threads())
	}
	var sinkTid = -2
	next := 0
	err := runner.Run(env, policy, &nenyax.RunOptions{N: 64}, func(i int, tr nenyax.Trajectory) error {
		if i != next {
			return fmt.Errorf("trajectory %d arrived, want %d (job order)", i, next)
		}
		next++
		if sinkTid == -2 {
			sinkTid = gettid()
		} else if g := gettid(); g != sinkTid {
			return fmt.Errorf("sink moved threads: %d then %d", sinkTid, g)
		}
		score, ok := tr.Score()
		if !ok || score != 1.0 || !tr.OK() {
			return fmt.Errorf("episode %d: score %v (judged %v), error %q", i, score, ok, tr.Err())
		}
		if len(tr.Raw) == 0 || tr.EnvID != "builtin:arithmetic" || len(tr.Steps) != 1 {
			return fmt.Errorf("episode %d: %s", i, tr.Raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != 64 || calls.Load() != 64 {
		t.Fatalf("%d trajectories, %d policy calls; want 64 and 64", next, calls.Load())
	}
	if len(tids) != 1 {
		t.Fatalf("the Go policy ran on %d OS threads (%v); want exactly one", len(tids), tids)
	}
	for tid := range tids {
		if tid != sinkTid {
			t.Fatalf("policy ran on thread %d, sink on %d; want the calling thread for both", tid, sinkTid)
		}
	}
}

func TestRunAllAndOptions(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	policy := must(nenyax.NewActionPolicy(answer))(t)
	closeLater(t, policy)
	runner := must(nenyax.NewRunner(2))(t)
	closeLater(t, runner)
	tasks := must(env.Tasks(2))(t)
	ts := must(runner.RunAll(env, policy, &nenyax.RunOptions{N: 5, Seed: 100, Tasks: tasks}))(t)
	if len(ts) != 5 {
		t.Fatalf("%d trajectories", len(ts))
	}
	for i, tr := range ts {
		if tr.Task == nil || tr.Task.ID != tasks[i%2].ID || tr.Seed == nil || *tr.Seed != int64(100+i) {
			t.Fatalf("trajectory %d: task %+v seed %v", i, tr.Task, tr.Seed)
		}
		if s, _ := tr.Score(); s != 1 {
			t.Fatalf("trajectory %d: %s", i, tr.Raw)
		}
	}
	// Run with a nil function is RunAll without the result.
	if err := runner.Run(env, policy, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Env.Rollout with a chosen task and seed.
	tr := must(env.Rollout(policy, &nenyax.RolloutOptions{Task: &tasks[1], Seed: nenyax.Ptr[int64](7)}))(t)
	if tr.Task.ID != "1" || *tr.Seed != 7 || !tr.OK() {
		t.Fatalf("rollout: %s", tr.Raw)
	}
	// Unknown option fields are refused by the library.
	_, err := runner.RunAll(env, policy, &nenyax.RunOptions{MaxSteps: 1})
	if err != nil {
		t.Fatalf("max_steps: %v", err)
	}
}

func TestReferenceAndNullPolicies(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	ref := must(env.ReferencePolicy())(t)
	closeLater(t, ref)
	null := must(env.NullPolicy())(t)
	closeLater(t, null)
	if tr := must(env.Rollout(ref, nil))(t); !tr.OK() || tr.Judgment.Score != 1 {
		t.Fatalf("reference: %s", tr.Raw)
	}
	if tr := must(env.Rollout(null, nil))(t); tr.Judgment == nil || tr.Judgment.Score != 0 {
		t.Fatalf("null: %s", tr.Raw)
	}
}

func TestChatPolicy(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	policy := must(nenyax.NewChatPolicy(func(messages []byte) (string, error) {
		var msgs []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(messages, &msgs); err != nil {
			return "", err
		}
		var a, b int
		var op string
		last := msgs[len(msgs)-1].Content
		if _, err := fmt.Sscanf(strings.TrimPrefix(last, "What is "), "%d %s %d", &a, &op, &b); err != nil {
			return "", fmt.Errorf("cannot read %q: %v", last, err)
		}
		x := map[string]int{"+": a + b, "-": a - b, "*": a * b}[op]
		return fmt.Sprintf("It is <answer>%d</answer>.", x), nil
	}))(t)
	closeLater(t, policy)
	runner := must(nenyax.NewRunner(2))(t)
	closeLater(t, runner)
	ts := must(runner.RunAll(env, policy, &nenyax.RunOptions{N: 8}))(t)
	for _, tr := range ts {
		if !tr.OK() || tr.Judgment.Score != 1 {
			t.Fatalf("chat episode: %s", tr.Raw)
		}
	}
}

func TestCheck(t *testing.T) {
	r := must(nenyax.CheckURI("builtin:arithmetic", nil))(t)
	if r.Tier != "audited" {
		t.Fatalf("CheckURI tier %q: %s", r.Tier, r.Raw)
	}
	if len(r.Checks) == 0 || r.EnvID != "builtin:arithmetic" || r.Mode != "step" {
		t.Fatalf("report %s", r.Raw)
	}
	for _, c := range r.Checks {
		if c.Status != "pass" {
			t.Fatalf("check %+v", c)
		}
	}
	// A handle rebuilds its fresh instance the way it was made, so it reaches audited too.
	env := load(t, "builtin:arithmetic")
	r = must(env.Check(&nenyax.CheckOptions{Samples: 4, Threads: 2}))(t)
	if r.Tier != "audited" {
		t.Fatalf("Env.Check tier %q: %s", r.Tier, r.Raw)
	}
	for _, c := range r.Checks {
		if c.Name == "reproducible_fresh" && c.Status != "pass" {
			t.Fatalf("reproducible_fresh did not pass: %s", r.Raw)
		}
	}
	_, err := nenyax.CheckURI("builtin:nothing", nil)
	wantStatus(t, err, nenyax.StatusUnknownTarget)
}

func TestErrors(t *testing.T) {
	cases := []struct {
		uri    string
		status nenyax.Status
		words  string
	}{
		{"nope", nenyax.StatusInvalidURI, "no scheme"},
		{"", nenyax.StatusInvalidURI, ""},
		{"warp:drive", nenyax.StatusUnknownScheme, "warp"},
		{"builtin:nothing", nenyax.StatusUnknownTarget, "nothing"},
		{"builtin:arithmetic?sise=3", nenyax.StatusUnknownParameter, "did you mean `size`"},
		{"builtin:arithmetic?size=-3", nenyax.StatusInvalidParameter, "size"},
	}
	for _, c := range cases {
		env, err := nenyax.Load(c.uri)
		if env != nil {
			t.Fatalf("Load(%q) gave an env", c.uri)
		}
		e := wantStatus(t, err, c.status)
		if !strings.Contains(e.Message, c.words) || !strings.HasPrefix(err.Error(), "nenyax: ") {
			t.Fatalf("Load(%q): message %q lacks %q", c.uri, err.Error(), c.words)
		}
	}
	env := load(t, "builtin:arithmetic")
	policy := must(nenyax.NewActionPolicy(answer))(t)
	closeLater(t, policy)
	runner := must(nenyax.NewRunner(1))(t)
	closeLater(t, runner)
	// An unknown task: an error when opening a session, a failed episode in a rollout or batch.
	nosuch := []nenyax.TaskRef{{ID: "no-such-task"}}
	_, err := env.Session(&nenyax.SessionOptions{Task: &nosuch[0]})
	wantStatus(t, err, nenyax.StatusInvalidParameter)
	tr := must(env.Rollout(policy, &nenyax.RolloutOptions{Task: &nosuch[0]}))(t)
	if !strings.HasPrefix(tr.Err(), "InvalidParameter") || tr.OK() {
		t.Fatalf("rollout on an unknown task: %s", tr.Raw)
	}
	ts := must(runner.RunAll(env, policy, &nenyax.RunOptions{N: 2, Tasks: nosuch}))(t)
	if len(ts) != 2 || !strings.Contains(ts[1].Err(), "no-such-task") {
		t.Fatalf("batch on an unknown task: %v", ts)
	}
	_, err = nenyax.NewRunner(-1)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	_, err = nenyax.NewActionPolicy(nil)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestPanickingPolicyFailsOnlyItsEpisode(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	policy := must(nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
		var o struct {
			Info struct {
				TaskID string `json:"task_id"`
			} `json:"info"`
		}
		_ = json.Unmarshal(obs, &o)
		switch o.Info.TaskID {
		case "3":
			panic("boom at task 3")
		case "5":
			return nil, errors.New("no answer for task 5")
		case "6":
			return []byte("not json"), nil
		}
		return answer(obs)
	}))(t)
	closeLater(t, policy)
	runner := must(nenyax.NewRunner(3))(t)
	closeLater(t, runner)
	ts := must(runner.RunAll(env, policy, &nenyax.RunOptions{N: 10}))(t)
	for i, tr := range ts {
		switch i {
		case 3, 5, 6:
			want := map[int]string{3: "Go callback panicked: boom at task 3", 5: "no answer for task 5", 6: "invalid JSON"}[i]
			if tr.Error == nil || !strings.Contains(*tr.Error, want) {
				t.Fatalf("episode %d: want an error with %q, got %s", i, want, tr.Raw)
			}
			if !strings.HasPrefix(*tr.Error, "PolicyError") || tr.Metadata["error_kind"] != "PolicyError" {
				t.Fatalf("episode %d: error %q, metadata %v", i, *tr.Error, tr.Metadata)
			}
		default:
			if !tr.OK() || tr.Judgment.Score != 1 {
				t.Fatalf("episode %d should pass: %s", i, tr.Raw)
			}
		}
	}
	// The same through Env.Rollout on the calling thread.
	tasks := must(env.Tasks(4))(t)
	tr := must(env.Rollout(policy, &nenyax.RolloutOptions{Task: &tasks[3]}))(t)
	if !strings.Contains(tr.Err(), "boom at task 3") {
		t.Fatalf("rollout: %s", tr.Raw)
	}
}

var errStop = errors.New("enough")

// runWithin fails the test when f does not return within d (a deadlock would hang it).
func runWithin(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("no return within %v: deadlock?", d)
	}
}

// Stopping a batch from its trajectory function, with a library policy and with a Go policy
// (libnenyax 0.1.0 deadlocks on the latter if the sink returns non-zero; the binding avoids it).
func TestSinkErrorStopsBatch(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	ref := must(env.ReferencePolicy())(t)
	closeLater(t, ref)
	var goCalls atomic.Int32
	goPolicy := must(nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
		goCalls.Add(1)
		return answer(obs)
	}))(t)
	closeLater(t, goPolicy)
	runner := must(nenyax.NewRunner(2))(t)
	closeLater(t, runner)
	for name, policy := range map[string]*nenyax.Policy{"reference": ref, "go": goPolicy} {
		seen := 0
		var err error
		runWithin(t, 20*time.Second, func() {
			err = runner.Run(env, policy, &nenyax.RunOptions{N: 200}, func(i int, tr nenyax.Trajectory) error {
				seen++
				if !tr.OK() {
					return fmt.Errorf("episode %d failed: %s", i, tr.Err())
				}
				if i == 5 {
					return errStop
				}
				return nil
			})
		})
		e := wantStatus(t, err, nenyax.StatusCallback)
		if !errors.Is(err, errStop) || e.Err != errStop {
			t.Fatalf("%s: the sink's error is not wrapped: %v", name, err)
		}
		if !strings.Contains(err.Error(), "enough") || !strings.Contains(e.Message, "job 5") {
			t.Fatalf("%s: message %q", name, err.Error())
		}
		if seen != 6 {
			t.Fatalf("%s: the sink saw %d trajectories after stopping at job 5", name, seen)
		}
		// The runner and the policy still work after a stopped batch.
		if ts := must(runner.RunAll(env, policy, &nenyax.RunOptions{N: 3}))(t); len(ts) != 3 || !ts[2].OK() {
			t.Fatalf("%s: after a stopped batch: %v", name, ts)
		}
	}
	if n := goCalls.Load(); n >= 200+3 {
		t.Fatalf("the Go policy was called %d times: the stop did not cut the batch short", n)
	}
}

func TestSinkPanicIsReraised(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	ref := must(env.ReferencePolicy())(t)
	closeLater(t, ref)
	goPolicy := must(nenyax.NewActionPolicy(answer))(t)
	closeLater(t, goPolicy)
	runner := must(nenyax.NewRunner(2))(t)
	closeLater(t, runner)
	for name, policy := range map[string]*nenyax.Policy{"reference": ref, "go": goPolicy} {
		seen := 0
		runWithin(t, 20*time.Second, func() {
			defer func() {
				if r := recover(); r != "sink exploded" {
					t.Errorf("%s: recovered %v", name, r)
				}
			}()
			_ = runner.Run(env, policy, &nenyax.RunOptions{N: 100}, func(i int, tr nenyax.Trajectory) error {
				seen++
				if i == 2 {
					panic("sink exploded")
				}
				return nil
			})
			t.Errorf("%s: Run returned instead of panicking", name)
		})
		if seen != 3 {
			t.Fatalf("%s: the sink saw %d trajectories", name, seen)
		}
	}
}

func TestSessions(t *testing.T) {
	env := load(t, "builtin:guess")
	s := must(env.Session(&nenyax.SessionOptions{Seed: nenyax.Ptr[int64](1)}))(t)
	closeLater(t, s)
	obs := must(s.Observation())(t)
	if obs.Text == nil || !strings.Contains(*obs.Text, "guess") {
		t.Fatalf("observation %+v", obs)
	}
	lo, hi := 1, 100
	steps := 0
	for !s.Done() {
		g := (lo + hi) / 2
		st := must(s.Act(fmt.Sprint(g)))(t)
		steps++
		if string(st.Action) != fmt.Sprint(g) {
			t.Fatalf("action %s", st.Action)
		}
		var data struct {
			Low  int `json:"low"`
			High int `json:"high"`
		}
		_ = json.Unmarshal(st.Observation.Data, &data)
		if st.Done() {
			break
		}
		lo, hi = data.Low, data.High
		if steps > 10 {
			t.Fatal("no end")
		}
	}
	if !s.Done() {
		t.Fatal("Done() is false after a final step")
	}
	j := must(s.Judgment())(t)
	if j.Score != 1 || j.Passed == nil || !*j.Passed {
		t.Fatalf("judgment %+v", j)
	}
	// Acting after the end is an error, not a crash.
	_, err := s.Act("50")
	wantStatus(t, err, nenyax.StatusEnvironment)
	if _, err := s.Act("not json"); !nenyax.IsStatus(err, nenyax.StatusInvalidArgument) {
		t.Fatalf("bad action JSON: %v", err)
	}
	// A one-turn arithmetic episode played by hand.
	a := load(t, "builtin:arithmetic")
	s2 := must(a.Session(nil))(t)
	closeLater(t, s2)
	_, err = s2.Act("42") // arithmetic wants the reply text, a JSON string
	wantStatus(t, err, nenyax.StatusInvalidAction)
	obsJSON := must(s2.ObservationJSON())(t)
	act := must(answer(obsJSON))(t)
	st := must(s2.Act(string(act)))(t)
	if !st.Done() || st.Reward != 1 || !s2.Done() {
		t.Fatalf("step %+v", st)
	}
	s2.Close()
	if !s2.Done() {
		t.Fatal("a closed session is not done")
	}
	_, err = s2.Observation()
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestDefineFromJSON(t *testing.T) {
	spec := `{"name": "caps", "description": "capitals", "judge": {"type": "contains"},
	  "tasks": [{"prompt": "Capital of Kenya?", "answer": "Nairobi"},
	            {"prompt": "Capital of Peru?", "answer": "Lima"}]}`
	env := must(nenyax.Define(spec))(t)
	closeLater(t, env)
	m := must(env.ManifestInfo())(t)
	if m.ID != "defined:caps" || m.Description != "capitals" {
		t.Fatalf("manifest %+v", m)
	}
	ref := must(env.ReferencePolicy())(t)
	closeLater(t, ref)
	runner := must(nenyax.NewRunner(2))(t)
	closeLater(t, runner)
	for _, tr := range must(runner.RunAll(env, ref, &nenyax.RunOptions{N: 4}))(t) {
		if !tr.OK() || tr.Judgment.Score != 1 {
			t.Fatalf("reference: %s", tr.Raw)
		}
	}
	chat := must(nenyax.NewChatPolicy(func(messages []byte) (string, error) {
		if strings.Contains(string(messages), "Kenya") {
			return "It is Nairobi.", nil
		}
		return "No idea.", nil
	}))(t)
	closeLater(t, chat)
	ts := must(runner.RunAll(env, chat, &nenyax.RunOptions{N: 2}))(t)
	if s, _ := ts[0].Score(); s != 1 {
		t.Fatalf("Kenya: %s", ts[0].Raw)
	}
	if s, _ := ts[1].Score(); s != 0 {
		t.Fatalf("Peru: %s", ts[1].Raw)
	}
	_, err := nenyax.Define(`{"name": "x", "taks": []}`)
	e := wantStatus(t, err, nenyax.StatusDefine)
	if !strings.Contains(e.Message, "taks") {
		t.Fatalf("message %q", e.Message)
	}
	_, err = nenyax.Define(`{"tasks": [{"prompt": "q"}]}`)
	wantStatus(t, err, nenyax.StatusDefine)
	// Malformed JSON is a bad argument; well-formed JSON of the wrong shape is a Define error.
	_, err = nenyax.Define(`not json`)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	_, err = nenyax.Define(`[1, 2]`)
	wantStatus(t, err, nenyax.StatusDefine)
}

func TestWithJudge(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	// Replies without <answer> tags: the builtin judge scores 0, a last_number judge 1.
	bare := must(nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
		x, err := solve(obs)
		if err != nil {
			return nil, err
		}
		return json.Marshal(fmt.Sprintf("I think it is %d", x))
	}))(t)
	closeLater(t, bare)
	judged := must(env.WithJudge(`{"type": "numeric", "extract": "last_number"}`))(t)
	closeLater(t, judged)
	if m := must(judged.ManifestInfo())(t); m.ID != "builtin:arithmetic+judge" {
		t.Fatalf("judged id %q", m.ID)
	}
	if tr := must(env.Rollout(bare, nil))(t); tr.Judgment == nil || tr.Judgment.Score != 0 {
		t.Fatalf("builtin judge: %s", tr.Raw)
	}
	if tr := must(judged.Rollout(bare, nil))(t); !tr.OK() || tr.Judgment.Score != 1 {
		t.Fatalf("numeric judge: %s", tr.Raw)
	}
	// The original environment is unchanged.
	if m := must(env.ManifestInfo())(t); m.ID != "builtin:arithmetic" {
		t.Fatalf("id %q", m.ID)
	}
	_, err := env.WithJudge(`{"type": "telepathy"}`)
	wantStatus(t, err, nenyax.StatusConfig)
	_, err = env.WithJudge(`{"type": "exact", "extrct": "whole"}`)
	wantStatus(t, err, nenyax.StatusConfig)
}

func TestEndpointPolicy(t *testing.T) {
	_, err := nenyax.NewEndpointPolicy(nenyax.EndpointSpec{
		BaseURL: "http://127.0.0.1:9/v1", Model: "m", APIKeyEnv: "NENYAX_GO_TEST_NO_SUCH_KEY",
	})
	wantStatus(t, err, nenyax.StatusConfig)
	_, err = nenyax.NewEndpointPolicy(nenyax.EndpointSpec{BaseURL: "http://x/v1", Model: "m", TimeoutS: nenyax.Ptr(-1.0)})
	wantStatus(t, err, nenyax.StatusConfig)
	p := must(nenyax.NewEndpointPolicy(nenyax.EndpointSpec{
		BaseURL: "http://127.0.0.1:9/v1", Model: "m", Retries: nenyax.Ptr[uint32](0), TimeoutS: nenyax.Ptr(5.0),
		Params: map[string]any{"temperature": 0},
	}))(t)
	closeLater(t, p)
	env := load(t, "builtin:arithmetic")
	tr := must(env.Rollout(p, nil))(t)
	if tr.Error == nil || !strings.HasPrefix(*tr.Error, "EndpointError") || len(tr.ModelCalls) != 1 {
		t.Fatalf("unreachable endpoint: %s", tr.Raw)
	}
	if tr.ModelCalls[0].Request["temperature"] != 0.0 {
		t.Fatalf("params were not sent: %v", tr.ModelCalls[0].Request)
	}
}

// Two goroutines share one Go policy: the binding lets them take turns, and each batch's
// calls stay on that batch's calling thread.
func TestConcurrentRunsShareAPolicy(t *testing.T) {
	env := load(t, "builtin:arithmetic")
	var active, maxActive atomic.Int32
	policy := must(nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			m := maxActive.Load()
			if n <= m || maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		return answer(obs)
	}))(t)
	closeLater(t, policy)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runner, err := nenyax.NewRunner(2)
			if err != nil {
				errs <- err
				return
			}
			defer runner.Close()
			errs <- runner.Run(env, policy, &nenyax.RunOptions{N: 16}, func(i int, tr nenyax.Trajectory) error {
				if s, _ := tr.Score(); s != 1 {
					return fmt.Errorf("episode %d: %s", i, tr.Raw)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if maxActive.Load() != 1 {
		t.Fatalf("the Go policy ran %d calls at once", maxActive.Load())
	}
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	env := must(nenyax.Load("builtin:arithmetic"))(t)
	policy := must(nenyax.NewActionPolicy(answer))(t)
	ref := must(env.ReferencePolicy())(t)
	runner := must(nenyax.NewRunner(1))(t)
	sess := must(env.Session(nil))(t)
	judged := must(env.WithJudge(`{"type": "exact"}`))(t)
	// Children outlive their parent: close the environment first.
	for i := 0; i < 2; i++ {
		for _, c := range []interface{ Close() error }{env, policy, judged} {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := sess.Observation(); err != nil {
		t.Fatalf("a session outlives its environment: %v", err)
	}
	e2 := load(t, "builtin:arithmetic")
	if tr := must(e2.Rollout(ref, nil))(t); !tr.OK() {
		t.Fatalf("a reference policy outlives its environment: %s", tr.Raw)
	}
	for i := 0; i < 2; i++ {
		for _, c := range []interface{ Close() error }{ref, runner, sess} {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err := env.Manifest()
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	_, err = e2.Rollout(policy, nil)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	_, err = runner.RunAll(e2, ref, nil)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	if runner.Threads() != 0 {
		t.Fatal("Threads() of a closed runner")
	}
	var nilEnv *nenyax.Env
	_, err = nilEnv.Tasks(1)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	if err := nilEnv.Close(); err != nil {
		t.Fatal(err)
	}
}

// Objects that are never closed are freed by their finalizers, and a Go policy's function is
// released (its cgo.Handle deleted by the free_user_data trampoline) once the library drops it.
func TestFinalizers(t *testing.T) {
	var released atomic.Int32
	func() {
		for i := 0; i < 20; i++ {
			env, err := nenyax.Load("builtin:arithmetic?size=5")
			if err != nil {
				t.Fatal(err)
			}
			sentinel := new([64]byte)
			runtime.SetFinalizer(sentinel, func(*[64]byte) { released.Add(1) })
			policy, err := nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
				_ = sentinel[0]
				return answer(obs)
			})
			if err != nil {
				t.Fatal(err)
			}
			runner, _ := nenyax.NewRunner(1)
			sess, _ := env.Session(nil)
			ref, _ := env.ReferencePolicy()
			if _, err := runner.RunAll(env, policy, &nenyax.RunOptions{N: 2}); err != nil {
				t.Fatal(err)
			}
			_, _, _ = sess, ref, runner
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for released.Load() < 20 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if released.Load() < 20 {
		t.Fatalf("only %d of 20 Go policy functions were released", released.Load())
	}
}

func TestNonFiniteOptionsAreRefused(t *testing.T) {
	_, err := nenyax.NewEndpointPolicy(nenyax.EndpointSpec{BaseURL: "http://x/v1", Model: "m", BackoffS: nenyax.Ptr(math.Inf(1))})
	wantStatus(t, err, nenyax.StatusInvalidArgument) // encoding/json refuses +Inf before C sees it
}

// ---------------------------------------------------------------------------------------------
// the areas added with the whole-header wrapper: learners, sandboxes, recordings, servers, and
// environments defined by Go functions

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestLearners(t *testing.T) {
	// RLOO, hand-checked: each reward minus the mean of the others in its group.
	rewards, groups := []float64{1, 0, 1, 1}, []int64{0, 0, 1, 1}
	adv := must(nenyax.Advantages(rewards, groups, `{"estimator": "rloo"}`))(t)
	if len(adv) != 4 || !near(adv[0], 1, 1e-9) || !near(adv[1], -1, 1e-9) || !near(adv[2], 0, 1e-9) {
		t.Fatalf("rloo advantages %v", adv)
	}
	keep := must(nenyax.DAPOKeep(rewards, groups))(t)
	if fmt.Sprint(keep) != "[true true false false]" {
		t.Fatalf("DAPOKeep %v", keep)
	}
	_, err := nenyax.Advantages(rewards, groups[:1], "")
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	_, err = nenyax.Advantages(rewards, groups, `{"estimator": "nope"}`)
	wantStatus(t, err, nenyax.StatusConfig)
	if js := must(nenyax.LearnerJSON(`{"learner": "dapo"}`))(t); !strings.Contains(js, `"clip_high"`) {
		t.Fatalf("LearnerJSON: %s", js)
	}

	// Ratio 1, nothing clipped: the policy term is -mean(A) = -1.
	logp, mask := []float64{-1, -2, -0.5, -9}, []uint8{1, 1, 1, 0}
	in := nenyax.PGInputs[float64]{Logp: logp, OldLogp: logp, Mask: mask, Advantages: []float64{1, 1}, Rows: 2, Width: 2}
	r := must(nenyax.PGLoss(in, `{"learner": "dapo"}`))(t)
	if !near(r.Stats.Tokens, 3, 0) || !near(r.Stats.LossPG, -1, 1e-9) || !near(r.Stats.MeanRatio, 1, 1e-12) ||
		r.GradLogp[0] >= 0 || r.GradLogp[3] != 0 || r.GradEntropy != nil {
		t.Fatalf("PGLoss f64: %+v", r)
	}
	logp32 := []float32{-1, -2, -0.5, -9}
	in32 := nenyax.PGInputs[float32]{Logp: logp32, OldLogp: logp32, Mask: mask, Advantages: []float32{1, 1}, Rows: 2, Width: 2}
	r32 := must(nenyax.PGLoss(in32, `{"learner": "dapo"}`))(t)
	for i := range r32.GradLogp {
		if !near(float64(r32.GradLogp[i]), r.GradLogp[i], 1e-6) {
			t.Fatalf("f32 gradient %v vs f64 %v", r32.GradLogp, r.GradLogp)
		}
	}
	in.Mask = mask[:3]
	_, err = nenyax.PGLoss(in, `{"learner": "dapo"}`)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	if _, err := nenyax.CUDADevice(); err != nil {
		wantStatus(t, err, nenyax.StatusCudaUnavailable)
		_, err = nenyax.PGLossCUDAHost(in32, `{"learner": "dapo"}`)
		wantStatus(t, err, nenyax.StatusCudaUnavailable)
	} else if g := must(nenyax.PGLossCUDAHost(in32, `{"learner": "dapo"}`))(t); !near(g.Stats.Loss, r.Stats.Loss, 1e-5) {
		t.Fatalf("CUDA loss %v, CPU %v", g.Stats.Loss, r.Stats.Loss)
	}

	// REINFORCE++ with gamma 1: every valid token's return is its row's reward.
	advs, returns, err := nenyax.ReinforcePP([]float64{2, 0}, nil, mask, 2, 2, 1)
	if err != nil || !near(returns[0], 2, 1e-12) || !near(returns[1], 2, 1e-12) || returns[3] != 0 || advs[0] <= 0 || advs[2] >= 0 {
		t.Fatalf("ReinforcePP: %v %v %v", advs, returns, err)
	}
	// DPO on one pair with logp == ref_logp: loss log 2, gradient -beta/2 on the chosen row.
	same := []float64{-1, -1, -1, -1}
	d := must(nenyax.DPOLoss([]float64{2, 0}, []int64{0, 0}, same, same, mask, 2, 2, 0.1))(t)
	if d.Pairs != 1 || !near(d.Loss, math.Log(2), 1e-9) || !near(d.GradLogp[0], -0.05, 1e-9) || !near(d.GradLogp[2], 0.05, 1e-9) {
		t.Fatalf("DPOLoss: %+v", d)
	}
}

func TestSandbox(t *testing.T) {
	sb := must(nenyax.NewSandbox(`{"backend": "process"}`))(t)
	closeLater(t, sb)
	r := must(sb.Run("echo", "hi"))(t)
	if r.Stdout != "hi\n" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("echo hi: %+v", r)
	}
	if err := sb.Put("dir/a.txt", []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := string(must(sb.Get("dir/a.txt"))(t)); got != "hello" {
		t.Fatalf("Get: %q", got)
	}
	if ls := must(sb.List("dir"))(t); !strings.Contains(ls, `"name":"a.txt"`) {
		t.Fatalf("List: %s", ls)
	}
	fork := must(sb.Fork())(t)
	if got := string(must(fork.Get("dir/a.txt"))(t)); got != "hello" {
		t.Fatalf("forked Get: %q", got)
	}
	fork.Close()
	fork.Close()
	_, err := fork.Get("dir/a.txt")
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestRecording(t *testing.T) {
	model := must(nenyax.NewConcurrentChatPolicy(func([]byte) (string, error) { return "pong", nil }))(t)
	closeLater(t, model)
	rec := must(nenyax.NewRecording(model))(t)
	closeLater(t, rec)
	url := must(rec.BaseURL())(t)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.Contains(url, "/r/") {
		t.Fatalf("BaseURL %q", url)
	}
	resp, err := http.Post(url+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"ping"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(body.Choices) != 1 || body.Choices[0].Message.Content != "pong" {
		t.Fatalf("chat completion: %d %+v %v", resp.StatusCode, body, err)
	}
	if calls := must(rec.Calls(true))(t); len(calls) != 1 {
		t.Fatalf("%d calls recorded", len(calls))
	}
	if calls := must(rec.Calls(false))(t); len(calls) != 0 {
		t.Fatalf("%d calls after draining", len(calls))
	}
	// A Go policy served only on the calling thread cannot answer a server's threads.
	host := must(nenyax.NewChatPolicy(func([]byte) (string, error) { return "x", nil }))(t)
	closeLater(t, host)
	_, err = nenyax.NewRecording(host)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestServer(t *testing.T) {
	env := load(t, "builtin:arithmetic?size=10")
	srv := must(nenyax.Serve(env, `{"port": 0}`))(t)
	url := must(srv.URL())(t)
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /health: %d", resp.StatusCode)
	}
	srv.Close()
	srv.Close()
	if _, err := http.Get(url + "/health"); err == nil {
		t.Fatal("the server still answers after Close")
	}
	_, err = srv.URL()
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestDefineWithGoFunctions(t *testing.T) {
	var scored atomic.Int32
	tasks, err := nenyax.DefineTasks("sums", `[{"prompt": "2+2?", "answer": "4"}, {"prompt": "3+3?", "answer": "6"}]`,
		nenyax.TaskFuncs{
			Score: func(task []byte, reply string) (float64, error) {
				scored.Add(1)
				var row struct{ Answer string }
				if err := json.Unmarshal(task, &row); err != nil {
					return 0, err
				}
				if strings.TrimSpace(reply) == row.Answer {
					return 1, nil
				}
				return 0, nil
			},
			Reference: func(task []byte) (string, error) {
				var row struct{ Answer string }
				err := json.Unmarshal(task, &row)
				return row.Answer, err
			},
		})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, tasks)
	ref := must(tasks.ReferencePolicy())(t)
	closeLater(t, ref)
	runner := must(nenyax.NewRunner(2))(t)
	closeLater(t, runner)
	ts := must(runner.RunAll(tasks, ref, &nenyax.RunOptions{N: 8}))(t)
	for _, tr := range ts {
		if s, ok := tr.Score(); !ok || s != 1 {
			t.Fatalf("reference episode: %s", tr.Raw)
		}
	}
	if scored.Load() != 8 {
		t.Fatalf("Score called %d times for 8 episodes", scored.Load())
	}

	// A counter: the state is a number, each action adds to it, the episode ends at 3.
	counter, err := nenyax.DefineStateful("counter", nenyax.StateFuncs{
		Reset:   func(seed int64) ([]byte, error) { return []byte("0"), nil },
		Observe: func(state []byte) ([]byte, error) { return state, nil },
		Step: func(state, action []byte) ([]byte, float64, bool, error) {
			var s, a int
			if err := json.Unmarshal(state, &s); err != nil {
				return nil, 0, false, err
			}
			if err := json.Unmarshal(action, &a); err != nil {
				return nil, 0, false, err
			}
			if a < 0 {
				panic("negative step")
			}
			s += a
			return []byte(fmt.Sprint(s)), 1, s >= 3, nil
		},
	}, 10)
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, counter)
	one := must(nenyax.NewActionPolicy(func([]byte) ([]byte, error) { return []byte("1"), nil }))(t)
	closeLater(t, one)
	tr := must(counter.Rollout(one, nil))(t)
	if len(tr.Steps) != 3 || tr.Err() != "" {
		t.Fatalf("counter episode: %s", tr.Raw)
	}
	minus := must(nenyax.NewActionPolicy(func([]byte) ([]byte, error) { return []byte("-1"), nil }))(t)
	closeLater(t, minus)
	tr = must(counter.Rollout(minus, nil))(t)
	if !strings.Contains(tr.Err(), "negative step") {
		t.Fatalf("a panicking Step must fail its episode with the panic: %s", tr.Raw)
	}
	_, err = nenyax.DefineStateful("bad", nenyax.StateFuncs{}, 1)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestPGLossBatch(t *testing.T) {
	// The batch entry point gives what the per-case functions give.
	logp, old, mask := []float64{-1, -2, -0.5, -9}, []float64{-1.1, -1.9, -0.5, -9}, []uint8{1, 1, 1, 0}
	in := nenyax.PGInputs[float64]{Logp: logp, OldLogp: old, Mask: mask, Advantages: []float64{1, -0.5}, Rows: 2, Width: 2}
	want := must(nenyax.PGLoss(in, `{"learner": "dapo"}`))(t)
	got := must(nenyax.PGLossBatch(in, `{"learner": "dapo"}`, false))(t)
	if !near(got.Stats.Loss, want.Stats.Loss, 1e-12) || fmt.Sprint(got.GradLogp) != fmt.Sprint(want.GradLogp) {
		t.Fatalf("batch %+v, per-case %+v", got, want)
	}
	in32 := nenyax.PGInputs[float32]{Logp: []float32{-1, -2, -0.5, -9}, OldLogp: []float32{-1.1, -1.9, -0.5, -9},
		Mask: mask, Advantages: []float32{1, -0.5}, Rows: 2, Width: 2}
	got32 := must(nenyax.PGLossBatch(in32, `{"learner": "dapo"}`, false))(t)
	if !near(got32.Stats.Loss, want.Stats.Loss, 1e-5) {
		t.Fatalf("f32 batch loss %v, f64 %v", got32.Stats.Loss, want.Stats.Loss)
	}
	if _, err := nenyax.CUDADevice(); err != nil {
		_, err = nenyax.PGLossBatch(in32, `{"learner": "dapo"}`, true)
		wantStatus(t, err, nenyax.StatusCudaUnavailable)
	}
}
