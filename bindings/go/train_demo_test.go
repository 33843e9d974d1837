package nenyax_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

// withoutClocks is a report with everything that measures time removed (and the thread
// count, which must not matter): what a rerun with the same seed must reproduce byte for byte.
func withoutClocks(t *testing.T, r *nenyax.TrainReport) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(r.Raw, &v); err != nil {
		t.Fatal(err)
	}
	var strip func(any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range []string{"times", "wall_s", "trainer_s", "overhead_fraction", "text", "concurrency"} {
				delete(v, k)
			}
			for _, x := range v {
				strip(x)
			}
		case []any:
			for _, x := range v {
				strip(x)
			}
		}
	}
	strip(v)
	b, err := json.Marshal(v) // map keys sorted, so equal reports give equal bytes
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// around is the text of b near byte i.
func around(b []byte, i int) string {
	return string(b[max(i-120, 0):min(i+120, len(b))])
}

// TestGoSoftmaxPolicyLearnsGuess is the training loop from Go end to end: the Go model of
// example_train_test.go (its own weights, its own backward pass and Adam step) learns
// builtin:guess from the dL/dlogp Nenyax's grpo learner hands to Apply. Three runs: training,
// a rerun with the same seed on one thread instead of two (the same report, clocks aside), and
// a control whose Apply climbs the loss instead, ungated, which must end below where it started,
// so the improvement comes from the gradient, not from the loop's gating or selection.
func TestGoSoftmaxPolicyLearnsGuess(t *testing.T) {
	env := load(t, guessURI8)
	train := func(ascend bool, opts *nenyax.TrainOptions) (*softmaxGuesser, *nenyax.TrainReport, time.Duration) {
		t.Helper()
		start := time.Now()
		model, r, err := trainGuesser(env, ascend, opts)
		if err != nil {
			t.Fatal(err)
		}
		return model, r, time.Since(start)
	}

	model, r, wall := train(false, guessTrainOptions(1))
	t.Logf("grpo: held-out %.3f -> %.3f (%+.3f), first guess %d, %.1fs\n%s",
		r.Baseline, r.FinalEval, r.FinalEval-r.Baseline, model.firstGuess(), wall.Seconds(), r.Text)
	if len(r.Rounds) != 13 {
		t.Fatalf("%d rounds reported, want the baseline and 12", len(r.Rounds))
	}
	for _, round := range r.Rounds[1:] {
		if round.Outcome == "failed" || round.Update == nil || round.Update.Tokens == 0 {
			t.Fatalf("round %d did not train: outcome %s, error %v", round.Round, round.Outcome, round.Error)
		}
		// The sampler's log-probs (recorded by act) and the trainer's (Logprobs) are the same
		// model's, so the learner must see no gap between them.
		if gap := round.Update.Metrics["sampler_logp_gap"]; math.Abs(gap) > 1e-9 {
			t.Errorf("round %d: act and Logprobs disagree by %g", round.Round, gap)
		}
	}
	// Random guessing scores about 1/3; the evaluation's standard error is about 0.04, so a
	// rise of 0.2 is some five of them (seeds 1-5 rise by 0.27-0.39).
	if r.FinalEval < r.Baseline+0.2 {
		t.Errorf("held-out rose from %.3f to %.3f, want at least +0.2", r.Baseline, r.FinalEval)
	}

	rerunOpts := guessTrainOptions(1)
	rerunOpts.Concurrency = 1
	_, rerun, rerunWall := train(false, rerunOpts)
	if a, b := withoutClocks(t, r), withoutClocks(t, rerun); !bytes.Equal(a, b) {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		t.Errorf("the same seed gave different reports, first at byte %d:\n%s\n%s", i, around(a, i), around(b, i))
	}

	controlOpts := guessTrainOptions(1)
	controlOpts.Gate = nenyax.Ptr(false)
	_, c, controlWall := train(true, controlOpts)
	t.Logf("control (gradient ascent, ungated): held-out %.3f -> %.3f (%+.3f), %.1fs; rerun %.1fs",
		c.Baseline, c.FinalEval, c.FinalEval-c.Baseline, controlWall.Seconds(), rerunWall.Seconds())
	if c.Baseline != r.Baseline {
		t.Errorf("control baseline %.3f, training baseline %.3f: the same untrained model on the same held-out episodes",
			c.Baseline, r.Baseline)
	}
	for _, round := range c.Rounds[1:] {
		if round.Outcome != "kept" {
			t.Errorf("control round %d: %s, want every update kept (no gating)", round.Round, round.Outcome)
		}
	}
	if c.FinalEval > c.Baseline-0.05 {
		t.Errorf("control: held-out went from %.3f to %.3f, want it to end below where it started", c.Baseline, c.FinalEval)
	}
	// With NENYAX_DEMO_OUT set, keep both reports for `nenyax plot` (docs/learning.md).
	if dir := os.Getenv("NENYAX_DEMO_OUT"); dir != "" {
		for name, rep := range map[string]*nenyax.TrainReport{"go-grpo.json": r, "go-control.json": c} {
			if err := os.WriteFile(filepath.Join(dir, name), rep.Raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
