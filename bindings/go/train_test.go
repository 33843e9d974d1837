package nenyax_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

const guessURI = "builtin:guess?high=16&max_guesses=4&size=64"

func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// guessPolicy guesses uniformly within the bounds the observation shows, from the episode's
// sample seed, and records its prompt (100+low, 200+high) and guess (guess-1).
type guessPolicy struct {
	calls  int
	phases map[nenyax.Phase]int
	last   nenyax.Episode
	digest uint64
}

func (g *guessPolicy) act(ep nenyax.Episode, obs []byte) ([]byte, *nenyax.Record, error) {
	var o struct {
		Data struct{ Low, High int64 } `json:"data"`
	}
	if err := json.Unmarshal(obs, &o); err != nil {
		return nil, nil, err
	}
	lo, hi := o.Data.Low, o.Data.High
	if lo < 1 || hi < lo {
		return nil, nil, fmt.Errorf("bounds %d..%d", lo, hi)
	}
	n := hi - lo + 1
	guess := lo + int64(mix(ep.SampleSeed)%uint64(n))
	g.calls++
	if g.phases == nil {
		g.phases = map[nenyax.Phase]int{}
	}
	g.phases[ep.Phase]++
	g.last = ep
	g.digest += mix(ep.SampleSeed ^ uint64(ep.Phase)<<60 ^ uint64(ep.Round)<<40 ^ uint64(ep.Group)<<20 ^
		uint64(ep.Member)<<10 ^ ep.Step ^ uint64(guess))
	rec := &nenyax.Record{
		PromptTokenIDs:     []int64{100 + lo, 200 + hi},
		CompletionTokenIDs: []int64{guess - 1},
		CompletionLogprobs: []float64{-math.Log(float64(n))},
	}
	return []byte(fmt.Sprint(guess)), rec, nil
}

// uniformTrainer reports the guess policy's exact log-probs and checks what it is given.
type uniformTrainer struct {
	logprobs, reference, applies, snapshots, restores int
	bad                                               []string
	failAfter                                         int // Logprobs fails once this many applies happened (0: never)
}

func (u *uniformTrainer) Logprobs(b *nenyax.TraceBatch, reference bool, out []float64) error {
	u.logprobs++
	if reference {
		u.reference++
	}
	if u.failAfter > 0 && u.applies >= u.failAfter {
		return errors.New("simulated trainer failure")
	}
	if len(b.RowInfo) != b.Rows || len(out) != b.Rows*b.Width {
		u.bad = append(u.bad, "shape")
	}
	for r := 0; r < b.Rows; r++ {
		for t := 0; t < b.Width; t++ {
			at := b.At(r, t)
			if b.Mask[at] == 0 {
				continue
			}
			c := int(b.ContextStart[at])
			lo, hi := b.Tokens[b.At(r, c)]-100, b.Tokens[b.At(r, c+1)]-200
			if c+2 != t || lo < 1 || hi < lo {
				u.bad = append(u.bad, fmt.Sprintf("layout at %d,%d", r, t))
				continue
			}
			out[at] = -math.Log(float64(hi - lo + 1))
			if math.Abs(out[at]-b.SampledLogp[at]) > 1e-12 {
				u.bad = append(u.bad, "sampled logp")
			}
		}
		// The policy records its prompt tokens, so the observation is not repeated.
		for _, s := range b.RowInfo[r].Segments {
			if s.Observation != nil {
				u.bad = append(u.bad, "an observation beside recorded prompt tokens")
			}
		}
	}
	return nil
}

func (u *uniformTrainer) Apply(b *nenyax.TraceBatch, grad []float64) error {
	u.applies++
	for i, g := range grad {
		if math.IsNaN(g) || (b.Mask[i] == 0 && g != 0) {
			u.bad = append(u.bad, "gradient off the mask")
			break
		}
	}
	return nil
}

func (u *uniformTrainer) Snapshot() error { u.snapshots++; return nil }
func (u *uniformTrainer) Restore() error  { u.restores++; return nil }

func trainGuess(t *testing.T, env *nenyax.Env, g *guessPolicy, u nenyax.Trainer, opts *nenyax.TrainOptions) *nenyax.TrainReport {
	t.Helper()
	policy := must(nenyax.NewEpisodeActionPolicy(g.act))(t)
	closeLater(t, policy)
	learner := must(nenyax.NewLearner("grpo", env, policy, u))(t)
	closeLater(t, learner)
	return must(nenyax.Train(env, learner, opts))(t)
}

func failedRounds(r *nenyax.TrainReport) int {
	n := 0
	for _, round := range r.Rounds {
		if round.Outcome == "failed" {
			n++
		}
	}
	return n
}

func TestTrainWithAGoTrainer(t *testing.T) {
	env := load(t, guessURI)
	opts := func(concurrency int) *nenyax.TrainOptions {
		return &nenyax.TrainOptions{Rounds: 3, GroupSize: 4, Batch: 3, EvalTasks: nenyax.Ptr(8), Seed: 7, Concurrency: concurrency}
	}
	g1, u1 := &guessPolicy{}, &uniformTrainer{}
	r1 := trainGuess(t, env, g1, u1, opts(1))
	g3, u3 := &guessPolicy{}, &uniformTrainer{}
	r3 := trainGuess(t, env, g3, u3, opts(3))
	if failedRounds(r1) != 0 || len(r1.Rounds) != 4 {
		t.Fatalf("rounds: %s", r1.Text)
	}
	// The episodes' sample seeds make the draws the same on 1 and 3 threads.
	if g1.calls == 0 || g1.calls != g3.calls || g1.digest != g3.digest {
		t.Errorf("draws differ: %d calls (%x) vs %d (%x)", g1.calls, g1.digest, g3.calls, g3.digest)
	}
	for i := range r1.Rounds {
		a, b := r1.Rounds[i].TrainScore, r3.Rounds[i].TrainScore
		if (a == nil) != (b == nil) || (a != nil && *a != *b) {
			t.Errorf("round %d: train scores differ", i)
		}
	}
	if g3.phases[nenyax.PhaseTrain] == 0 || g3.phases[nenyax.PhaseEval] == 0 || g3.last.Seed == nil {
		t.Errorf("phases %v, last episode %+v", g3.phases, g3.last)
	}
	if u3.applies != 3 || u3.reference != 3 || u3.snapshots != 3 || len(u3.bad) != 0 {
		t.Errorf("trainer: %+v", u3)
	}
	if !strings.HasPrefix(r3.Text, "train builtin:guess") || r3.OverheadFraction <= 0 {
		t.Errorf("report text %q, overhead %v", r3.Text, r3.OverheadFraction)
	}
}

func TestTrainerErrorFailsItsRound(t *testing.T) {
	env := load(t, guessURI)
	u := &uniformTrainer{failAfter: 1}
	r := trainGuess(t, env, &guessPolicy{}, u, &nenyax.TrainOptions{Rounds: 2, GroupSize: 4, Batch: 3, EvalTasks: nenyax.Ptr(4)})
	if r.Rounds[1].Outcome != "kept" || r.Rounds[2].Outcome != "failed" {
		t.Fatalf("outcomes: %s", r.Text)
	}
	if e := r.Rounds[2].Error; e == nil || !strings.Contains(*e, "TrainingError") || !strings.Contains(*e, "simulated trainer failure") {
		t.Errorf("error: %v", r.Rounds[2].Error)
	}
	if u.restores != 1 {
		t.Errorf("restores: %d", u.restores)
	}
}

type recorder struct {
	updates, trajectories, snapshots int
}

func (r *recorder) Update(groups []nenyax.Group) (map[string]float64, error) {
	r.updates++
	n := 0
	for _, g := range groups {
		n += len(g.Trajectories)
	}
	r.trajectories += n
	return map[string]float64{"seen": float64(n)}, nil
}
func (r *recorder) Snapshot() error { r.snapshots++; return nil }
func (r *recorder) Restore() error  { return nil }

func TestCustomLearner(t *testing.T) {
	env := load(t, guessURI)
	policy := must(env.ReferencePolicy())(t)
	closeLater(t, policy)
	rec := &recorder{}
	learner := must(nenyax.NewCustomLearner("recorder", rec, policy))(t)
	closeLater(t, learner)
	r := must(nenyax.Train(env, learner, &nenyax.TrainOptions{Rounds: 2, GroupSize: 2, Batch: 3, EvalTasks: nenyax.Ptr(4)}))(t)
	if rec.updates != 2 || rec.trajectories != 12 || rec.snapshots != 2 {
		t.Errorf("recorder: %+v", rec)
	}
	if u := r.Rounds[1].Update; u == nil || u.Metrics["seen"] != 6 {
		t.Errorf("round 1 update: %+v", r.Rounds[1].Update)
	}
	if !strings.Contains(string(r.Learner), `"recorder"`) {
		t.Errorf("learner: %s", r.Learner)
	}
}

func TestTrainingErrors(t *testing.T) {
	env := load(t, guessURI)
	builtin := must(nenyax.NewLearner(`{"use": "reinforce"}`, env, nil, nil))(t)
	closeLater(t, builtin)
	r := must(nenyax.Train(env, builtin, &nenyax.TrainOptions{Rounds: 1, GroupSize: 2, Batch: 2, EvalTasks: nenyax.Ptr(2)}))(t)
	if failedRounds(r) != 0 || !strings.Contains(string(r.Learner), "softmax-linear") {
		t.Errorf("builtin: %s", r.Raw)
	}
	_, err := nenyax.NewLearner("grpoo", env, nil, nil)
	if e := wantStatus(t, err, nenyax.StatusConfig); e != nil && !strings.Contains(e.Message, "grpo") {
		t.Errorf("message: %s", e.Message)
	}
	policy := must(nenyax.NewEpisodeActionPolicy((&guessPolicy{}).act))(t)
	closeLater(t, policy)
	_, err = nenyax.NewLearner("grpo", env, policy, nil)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	_, err = nenyax.Train(env, builtin, &nenyax.TrainOptions{Rounds: 1, GateTolerance: nenyax.Ptr(-1.0)})
	wantStatus(t, err, nenyax.StatusConfig)
	_, err = nenyax.NewEpisodeActionPolicy(nil)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
	builtin.Close()
	_, err = nenyax.Train(env, builtin, nil)
	wantStatus(t, err, nenyax.StatusInvalidArgument)
}

func TestEpisodeChatPolicyRecordsTokens(t *testing.T) {
	env := load(t, guessURI)
	policy := must(nenyax.NewEpisodeChatPolicy(func(ep nenyax.Episode, messages []byte) (string, *nenyax.Record, error) {
		var msgs []map[string]any
		if err := json.Unmarshal(messages, &msgs); err != nil {
			return "", nil, err
		}
		rec := &nenyax.Record{PromptTokenIDs: []int64{int64(len(msgs))}, CompletionTokenIDs: []int64{int64(ep.Step)}}
		return fmt.Sprint(1 + ep.SampleSeed%16), rec, nil
	}))(t)
	closeLater(t, policy)
	tr := must(env.Rollout(policy, &nenyax.RolloutOptions{Seed: nenyax.Ptr[int64](4),
		Context: &nenyax.EpisodeContext{Phase: "train", Round: 2, Member: 1}}))(t)
	if !tr.OK() || len(tr.ModelCalls) == 0 {
		t.Fatalf("trajectory: %s", tr.Raw)
	}
	if ep, _ := tr.Metadata["episode"].(map[string]any); ep["phase"] != "train" || ep["round"] != 2.0 || ep["member"] != 1.0 {
		t.Errorf("episode: %v", tr.Metadata["episode"])
	}
	c := tr.ModelCalls[0]
	if len(c.PromptTokenIDs) != 1 || c.PromptTokenIDs[0] < 1 || len(c.CompletionTokenIDs) != 1 || c.CompletionTokenIDs[0] != 0 {
		t.Errorf("first call's tokens: %v %v", c.PromptTokenIDs, c.CompletionTokenIDs)
	}
}

// noSnapshots hides a trainer's Snapshotter, so the library cannot gate it.
type noSnapshots struct{ nenyax.Trainer }

func TestTrainReportsGating(t *testing.T) {
	env := load(t, guessURI)
	opts := &nenyax.TrainOptions{Rounds: 2, GroupSize: 4, Batch: 2, EvalTasks: nenyax.Ptr(4),
		GateTolerance: nenyax.Ptr(0.5), GateSigma: nenyax.Ptr(0.0)}
	r := trainGuess(t, env, &guessPolicy{}, &uniformTrainer{}, opts)
	var ran struct {
		Rounds        int     `json:"rounds"`
		GateSigma     float64 `json:"gate_sigma"`
		GateTolerance float64 `json:"gate_tolerance"`
		EvalRepeats   int     `json:"eval_repeats"`
	}
	if err := json.Unmarshal(r.Options, &ran); err != nil || ran.Rounds != 2 || ran.GateSigma != 0 || ran.GateTolerance != 0.5 || ran.EvalRepeats != 1 {
		t.Errorf("options as run: %s (%v)", r.Options, err)
	}
	// With GateSigma 0 the bar is the current held-out score less the tolerance, exactly; the
	// uniform policy never changes, so every update is kept and the current score stays the
	// baseline.
	for _, round := range r.Rounds[1:] {
		if round.Outcome != "kept" || round.Ungated || round.GateBar == nil || *round.GateBar != r.Baseline-0.5 ||
			round.EvalSE == nil || *round.EvalSE < 0 || round.EvalFailed != 0 {
			t.Errorf("round %d: %s, ungated %v, bar %v (baseline %v), se %v", round.Round, round.Outcome,
				round.Ungated, round.GateBar, r.Baseline, round.EvalSE)
		}
	}
	policy := must(nenyax.NewEpisodeActionPolicy((&guessPolicy{}).act))(t)
	closeLater(t, policy)
	learner := must(nenyax.NewLearner("grpo", env, policy, noSnapshots{&uniformTrainer{}}))(t)
	closeLater(t, learner)
	r = must(nenyax.Train(env, learner, opts))(t)
	if r.Gated || !r.Rounds[1].Ungated || !strings.Contains(r.Text, "no gating") {
		t.Errorf("a trainer without Snapshot: gated %v, round 1 ungated %v\n%s", r.Gated, r.Rounds[1].Ungated, r.Text)
	}
}

// A Learner keeps the library's reference to its policy, so closing the Go Policy early (a
// natural defer order) must not stop training.
func TestTrainAfterPolicyClose(t *testing.T) {
	env := load(t, guessURI)
	g := &guessPolicy{}
	policy := must(nenyax.NewEpisodeActionPolicy(g.act))(t)
	learner := must(nenyax.NewLearner("grpo", env, policy, &uniformTrainer{}))(t)
	closeLater(t, learner)
	policy.Close()
	r := must(nenyax.Train(env, learner, &nenyax.TrainOptions{Rounds: 1, GroupSize: 2, Batch: 2, EvalTasks: nenyax.Ptr(2)}))(t)
	if failedRounds(r) != 0 || g.phases[nenyax.PhaseTrain] == 0 {
		t.Errorf("rounds: %s; policy phases %v", r.Text, g.phases)
	}
	if _, err := env.Rollout(policy, nil); !nenyax.IsStatus(err, nenyax.StatusInvalidArgument) {
		t.Errorf("Rollout with the closed Policy: %v", err)
	}
}

// forgetful is a trainer whose Logprobs writes nothing (the slice starts as NaN), and whose
// Apply panics: two mistakes a Go trainer can make, each of which must fail its round only.
type forgetful struct {
	uniformTrainer
	panicInApply bool
}

func (f *forgetful) Logprobs(b *nenyax.TraceBatch, reference bool, out []float64) error {
	if f.panicInApply {
		return f.uniformTrainer.Logprobs(b, reference, out)
	}
	return nil
}

func (f *forgetful) Apply(b *nenyax.TraceBatch, grad []float64) error {
	if f.panicInApply {
		panic("index out of range in the backward pass")
	}
	return f.uniformTrainer.Apply(b, grad)
}

func TestTrainerMistakesFailTheirRound(t *testing.T) {
	env := load(t, guessURI)
	opts := &nenyax.TrainOptions{Rounds: 2, GroupSize: 4, Batch: 2, EvalTasks: nenyax.Ptr(2)}
	for _, c := range []struct {
		panicInApply bool
		want         string
	}{
		{false, "NaN"},
		{true, "index out of range in the backward pass"},
	} {
		f := &forgetful{panicInApply: c.panicInApply}
		r := trainGuess(t, env, &guessPolicy{}, f, opts)
		for _, round := range r.Rounds[1:] {
			if round.Outcome != "failed" || round.Error == nil || !strings.HasPrefix(*round.Error, "TrainingError") ||
				!strings.Contains(*round.Error, c.want) {
				t.Errorf("panic in Apply %v, round %d: %s, %v", c.panicInApply, round.Round, round.Outcome, round.Error)
			}
		}
		// Each failed round goes back to the snapshot taken before it.
		if f.snapshots != 2 || f.restores != 2 {
			t.Errorf("panic in Apply %v: %d snapshots, %d restores", c.panicInApply, f.snapshots, f.restores)
		}
		if round := r.Rounds[1]; round.Error != nil {
			t.Logf("%s", *round.Error)
		}
	}
}
