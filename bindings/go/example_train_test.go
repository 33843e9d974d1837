package nenyax_test

import (
	"encoding/json"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"strconv"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

// guessN is the range of builtin:guess?high=8: the secret is a number from 1 to 8, and the
// policy's guess k (0-based) is the number k+1.
const guessN = 8

// The policy's vocabulary, as Nenyax traces it: the guesses are tokens 0..guessN-1, and the
// prompt is two tokens, "low=L" and "high=H".
func lowToken(low int) int64   { return int64(guessN + low - 1) }
func highToken(high int) int64 { return int64(2*guessN + high - 1) }

// table holds one number per (bound, guess); row 0 is unused so bounds index it directly.
type table [(guessN + 1) * guessN]float64

// params are the policy's weights: the logit of guess k in state (low, high) is
// A[low][k] + B[high][k]. A sum of a part of low and a part of high can express bisection
// (-(k - (L+H)/2)^2 = kL + kH - k^2 - L^2/4 - H^2/4 - LH/2, and the last terms do not depend
// on k), so the best policy is within reach of a model this small.
type params struct{ a, b table }

func (w *params) logSoftmax(low, high int) [guessN]float64 {
	var z [guessN]float64
	m := math.Inf(-1)
	for k := range z {
		z[k] = w.a[low*guessN+k] + w.b[high*guessN+k]
		m = math.Max(m, z[k])
	}
	s := 0.0
	for _, v := range z {
		s += math.Exp(v - m)
	}
	lse := m + math.Log(s)
	for k := range z {
		z[k] -= lse
	}
	return z
}

// adamState is everything an update changes, so that a snapshot is one value copy.
type adamState struct {
	w, m, v params
	t       int
}

// softmaxGuesser is a Go-owned policy for builtin:guess and its nenyax.Trainer: it samples
// (act), scores what it sampled (Logprobs) and takes Adam steps on the gradient Nenyax's
// learner hands back (Apply). Nenyax never sees the weights.
type softmaxGuesser struct {
	cur, saved adamState
	ref        params // frozen initial weights, for the learner's KL term
	lr         float64
	// ascend flips the update's sign, for a control run that climbs the loss instead.
	ascend bool
}

// act guesses in the state the observation shows, drawing from the episode's sample seed so
// that a run draws the same guesses whichever thread steps the episode.
func (s *softmaxGuesser) act(ep nenyax.Episode, obs []byte) ([]byte, *nenyax.Record, error) {
	var o struct {
		Data struct{ Low, High int } `json:"data"`
	}
	if err := json.Unmarshal(obs, &o); err != nil {
		return nil, nil, err
	}
	low, high := o.Data.Low, o.Data.High
	if low < 1 || high > guessN || low > high {
		return nil, nil, fmt.Errorf("bounds %d..%d are outside 1..%d", low, high, guessN)
	}
	lp := s.cur.w.logSoftmax(low, high)
	u := rand.New(rand.NewPCG(ep.SampleSeed, 0)).Float64()
	k := guessN - 1 // if rounding leaves u above the last cumulative sum
	for j, acc := 0, 0.0; j < guessN; j++ {
		if acc += math.Exp(lp[j]); u < acc {
			k = j
			break
		}
	}
	rec := &nenyax.Record{
		PromptTokenIDs:     []int64{lowToken(low), highToken(high)},
		CompletionTokenIDs: []int64{int64(k)},
		CompletionLogprobs: []float64{lp[k]},
	}
	return []byte(strconv.Itoa(k + 1)), rec, nil
}

// position reads back the state and guess of a sampled token: its context is the two prompt
// tokens act recorded, and the sampled token comes right after them.
func position(b *nenyax.TraceBatch, r, t int) (low, high, k int, err error) {
	c := int(b.ContextStart[b.At(r, t)])
	low = int(b.Tokens[b.At(r, c)]-lowToken(1)) + 1
	high = int(b.Tokens[b.At(r, c+1)]-highToken(1)) + 1
	k = int(b.Tokens[b.At(r, t)])
	if c+2 != t || low < 1 || high > guessN || low > high || k < 0 || k >= guessN {
		return 0, 0, 0, fmt.Errorf("row %d position %d is not a token this policy wrote", r, t)
	}
	return low, high, k, nil
}

func (s *softmaxGuesser) Logprobs(b *nenyax.TraceBatch, reference bool, out []float64) error {
	w := &s.cur.w
	if reference {
		w = &s.ref
	}
	for r := 0; r < b.Rows; r++ {
		for t := 0; t < b.Width; t++ {
			if b.Mask[b.At(r, t)] == 0 {
				continue
			}
			low, high, k, err := position(b, r, t)
			if err != nil {
				return err
			}
			out[b.At(r, t)] = w.logSoftmax(low, high)[k]
		}
	}
	return nil
}

// Apply is the backward pass: dL/dlogit[j] = dL/dlogp[k] * ([j == k] - p[j]), and each
// logit is A[low][j] + B[high][j], so both tables get it.
func (s *softmaxGuesser) Apply(b *nenyax.TraceBatch, gradLogp []float64) error {
	var g params
	for r := 0; r < b.Rows; r++ {
		for t := 0; t < b.Width; t++ {
			gl := gradLogp[b.At(r, t)]
			if b.Mask[b.At(r, t)] == 0 || gl == 0 {
				continue
			}
			low, high, k, err := position(b, r, t)
			if err != nil {
				return err
			}
			lp := s.cur.w.logSoftmax(low, high)
			for j := range lp {
				d := -math.Exp(lp[j])
				if j == k {
					d++
				}
				g.a[low*guessN+j] += gl * d
				g.b[high*guessN+j] += gl * d
			}
		}
	}
	s.step(&g)
	return nil
}

// step is one Adam step down the loss (up it when ascending).
func (s *softmaxGuesser) step(g *params) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	sign := 1.0
	if s.ascend {
		sign = -1
	}
	st := &s.cur
	st.t++
	c1, c2 := 1-math.Pow(b1, float64(st.t)), 1-math.Pow(b2, float64(st.t))
	update := func(w, m, v, g *table) {
		for i := range w {
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			w[i] -= sign * s.lr * (m[i] / c1) / (math.Sqrt(v[i]/c2) + eps)
		}
	}
	update(&st.w.a, &st.m.a, &st.v.a, &g.a)
	update(&st.w.b, &st.m.b, &st.v.b, &g.b)
}

// Snapshot and Restore make gating possible: Nenyax reverts an update that lowered the
// held-out score.
func (s *softmaxGuesser) Snapshot() error { s.saved = s.cur; return nil }
func (s *softmaxGuesser) Restore() error  { s.cur = s.saved; return nil }

// firstGuess is the most likely opening guess, to show what was learned (bisection: 4 or 5).
func (s *softmaxGuesser) firstGuess() int {
	lp := s.cur.w.logSoftmax(1, guessN)
	best := 0
	for k := range lp {
		if lp[k] > lp[best] {
			best = k
		}
	}
	return best + 1
}

// guessURI8 is the game the model plays: a number from 1 to 8 in 3 guesses. Guessing at
// random finds it a third of the time (1 - (7/8)^3); bisection 7 times in 8.
const guessURI8 = "builtin:guess?high=8&max_guesses=3&size=400"

// guessTrainOptions are small enough for go test (about 3 s against a debug libnenyax, 0.6 s
// against a release one; every policy call is served by the one goroutine that called Train)
// and large enough for a clear result: 12 rounds of 16 groups x 8, judged on 32 held-out
// tasks x 4 episodes, whose mean has a standard error of about 0.04.
func guessTrainOptions(seed int64) *nenyax.TrainOptions {
	return &nenyax.TrainOptions{
		Rounds: 12, GroupSize: 8, Batch: 16, EvalTasks: nenyax.Ptr(32), EvalRepeats: 4,
		Seed: seed, Concurrency: 2,
		// Revert an update only when held-out falls clearly (noise allowance plus 0.03).
		GateTolerance: nenyax.Ptr(0.03),
	}
}

// trainGuesser trains a fresh softmaxGuesser with grpo (2 epochs of 2 minibatches per round)
// and returns it with the report.
func trainGuesser(env *nenyax.Env, ascend bool, opts *nenyax.TrainOptions) (*softmaxGuesser, *nenyax.TrainReport, error) {
	model := &softmaxGuesser{lr: 0.2, ascend: ascend}
	policy, err := nenyax.NewEpisodeActionPolicy(model.act)
	if err != nil {
		return nil, nil, err
	}
	defer policy.Close()
	learner, err := nenyax.NewLearner(`{"use": "grpo", "epochs": 2, "minibatches": 2}`, env, policy, model)
	if err != nil {
		return nil, nil, err
	}
	defer learner.Close()
	report, err := nenyax.Train(env, learner, opts)
	return model, report, err
}

// A Go softmax policy learns builtin:guess through Nenyax's grpo learner: Nenyax rolls out,
// judges, and computes the loss and its dL/dlogp; the Go model samples, scores its samples and
// takes its own gradient step. TestGoSoftmaxPolicyLearnsGuess runs this same training and
// checks its result (held-out about 0.34 -> 0.61), so the example is compiled, not run twice.
func ExampleTrain() {
	env, err := nenyax.Load(guessURI8)
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	model, report, err := trainGuesser(env, false, guessTrainOptions(1))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(report.Text)
	fmt.Printf("held-out %.2f -> %.2f; first guess %d\n", report.Baseline, report.FinalEval, model.firstGuess())
}
