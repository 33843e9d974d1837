package nenyax

/*
#include "nenyax.h"
#include "shims.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"
)

// TraceBatch is what a Trainer scores and learns from: Rows x Width positions, row-major,
// copied from the library (safe to keep). Index a position with At.
type TraceBatch struct {
	Rows, Width int
	// Token ids; 0 in padding.
	Tokens []int64
	// 1 where the policy sampled the token (the loss counts it), else 0.
	Mask []uint8
	// The sampler's log-prob of each sampled token; NaN where unknown or not sampled.
	SampledLogp []float64
	// Where each position's conditioning context begins in its row (0 for joined chat turns;
	// an action call's own prompt start).
	ContextStart []int64
	// Each row's length before padding.
	Lengths []int64
	// Where each row came from.
	RowInfo []TraceRow
}

// At is the index of (row, position t) in the batch's arrays.
func (b *TraceBatch) At(row, t int) int { return row*b.Width + t }

// TraceRow says where a traced row came from.
type TraceRow struct {
	Trajectory int            `json:"trajectory"` // index of its trajectory in this batch
	Group      int            `json:"group"`
	Member     int            `json:"member"`
	Reward     float64        `json:"reward"`
	Segments   []TraceSegment `json:"segments"`
}

// TraceSegment is one model call's place in a row.
type TraceSegment struct {
	Call            int          `json:"call"` // index in the trajectory's ModelCalls
	ContextStart    int          `json:"context_start"`
	CompletionStart int          `json:"completion_start"`
	CompletionLen   int          `json:"completion_len"`
	Observation     *Observation `json:"observation"` // action calls: what the policy saw
}

// Trainer is a model whose weights a weight learner (grpo, dapo, rloo, rft, dpo, ...) trains.
// Its methods run on the goroutine that called Train, between rollouts, never concurrently.
// An error (or a panic) fails the round, with its message in the report. Implement Snapshotter
// too, so that an update that lowers the held-out score can be reverted.
type Trainer interface {
	// Logprobs writes log p(token | its context) for every sampled position into out
	// (Rows*Width; other positions are not read); with reference, under the frozen reference
	// weights (for KL penalties and DPO; return an error if there are none).
	Logprobs(batch *TraceBatch, reference bool, out []float64) error
	// Apply backpropagates gradLogp (dLoss/dlogp, Rows*Width, 0 off the sampled tokens) and
	// takes one optimiser step that lowers the loss.
	Apply(batch *TraceBatch, gradLogp []float64) error
}

// Snapshotter is the optional part of a Trainer or HostLearner that makes gating possible:
// Snapshot saves the state in one slot, Restore goes back to it.
type Snapshotter interface {
	Snapshot() error
	Restore() error
}

// Group is one round's rollouts of one task and seed, as a HostLearner receives them.
type Group struct {
	Index        int          `json:"index"`
	Task         *TaskRef     `json:"task"`
	Seed         *int64       `json:"seed"`
	Trajectories []Trajectory `json:"trajectories"`
}

// HostLearner is a whole learner written in Go (the learner contract): it rolls out with the
// policy given to NewCustomLearner and learns from each round's groups. Update returns named
// figures for the report (may be nil). Implement Snapshotter too for gating.
type HostLearner interface {
	Update(groups []Group) (metrics map[string]float64, err error)
}

// Learner is what Train improves: a named learner (NewLearner) or a HostLearner
// (NewCustomLearner). One Train at a time may use it.
type Learner struct {
	h      *handle[*C.nenyax_learner_t]
	policy *Policy // the host policy its rollouts call, if any
	mu     sync.Mutex
}

// NewLearner makes a named learner from a config: a name ("grpo") or JSON ({"use": "grpo",
// "epochs": 2, ...}). With a trainer, weight learners train it and roll out with policy (the
// policy that samples with the trainer's weights, e.g. NewEpisodeActionPolicy); with trainer
// nil they train the built-in softmax policy, sized from env (policy must then be nil).
// "incontext" improves a chat policy and takes no trainer. Unknown learners and knobs are
// StatusConfig errors naming them.
func NewLearner(config string, env *Env, policy *Policy, trainer Trainer) (*Learner, error) {
	var eh *C.nenyax_env_t
	var ph *C.nenyax_policy_t
	var err error
	if env != nil {
		if eh, err = env.handle(); err != nil {
			return nil, err
		}
	}
	if policy != nil {
		if ph, err = policy.h.get("Policy"); err != nil {
			return nil, err
		}
	}
	var th C.uintptr_t
	snapshots := C.int(0)
	if trainer != nil {
		if _, ok := trainer.(Snapshotter); ok {
			snapshots = 1
		}
		th = C.uintptr_t(cgo.NewHandle(&gated{trainer: trainer}))
	}
	var out *C.nenyax_learner_t
	p, n := input(config)
	// The library owns the trainer's handle from here on, also when the call fails.
	err = takeError(C.nenyax_go_learner_new(p, n, eh, ph, th, snapshots, &out))
	runtime.KeepAlive(env)
	runtime.KeepAlive(policy)
	if err != nil {
		return nil, err
	}
	return newLearner(out, policy), nil
}

// NewCustomLearner makes a learner from a HostLearner, named name in reports, rolling out with
// policy.
func NewCustomLearner(name string, learner HostLearner, policy *Policy) (*Learner, error) {
	if learner == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewCustomLearner: the learner is nil"}
	}
	if policy == nil {
		return nil, closedError("Policy")
	}
	ph, err := policy.h.get("Policy")
	if err != nil {
		return nil, err
	}
	snapshots := C.int(0)
	if _, ok := learner.(Snapshotter); ok {
		snapshots = 1
	}
	h := cgo.NewHandle(&gated{learner: learner})
	var out *C.nenyax_learner_t
	p, n := input(name)
	err = takeError(C.nenyax_go_learner_custom(p, n, C.uintptr_t(h), snapshots, ph, &out))
	runtime.KeepAlive(policy)
	if err != nil {
		return nil, err
	}
	return newLearner(out, policy), nil
}

func newLearner(p *C.nenyax_learner_t, policy *Policy) *Learner {
	return &Learner{
		h:      newHandle("Learner", p, func(p *C.nenyax_learner_t) { C.nenyax_learner_free(p) }),
		policy: policy,
	}
}

// Close frees the learner (and releases its Trainer or HostLearner). It is safe to call more
// than once.
func (l *Learner) Close() error {
	if l == nil {
		return nil
	}
	return l.h.Close()
}

// TrainOptions are the options of Train; zero fields (nil pointers) mean the library's
// defaults. The pointer fields are those whose zero is a setting of its own.
type TrainOptions struct {
	Rounds      int   `json:"rounds,omitempty"`     // default 20
	GroupSize   int   `json:"group_size,omitempty"` // rollouts per group (default 8)
	Batch       int   `json:"batch,omitempty"`      // groups per round (default 8)
	EvalTasks   *int  `json:"eval_tasks,omitempty"` // held-out tasks (default: a quarter, 1..64)
	EvalRepeats int   `json:"eval_repeats,omitempty"`
	Tasks       *int  `json:"tasks,omitempty"` // use at most this many tasks
	Seed        int64 `json:"seed"`
	Concurrency int   `json:"concurrency,omitempty"` // parallel rollouts (default: one per core)
	MaxSteps    *int  `json:"max_steps,omitempty"`
	Gate        *bool `json:"gate,omitempty"` // revert updates that lower held-out (default true)
	// An update is reverted when its held-out score falls below the current policy's by more
	// than GateTolerance (default 0) plus GateSigma (default 1) standard errors of the
	// difference of the two evaluations; GateSigma 0 lets evaluation noise revert updates.
	GateTolerance *float64 `json:"gate_tolerance,omitempty"`
	GateSigma     *float64 `json:"gate_sigma,omitempty"`
	// Write every trajectory to this JSONL file.
	Trajectories string `json:"trajectories,omitempty"`
	// One line per round on stderr (when it is a terminal).
	Progress bool `json:"progress,omitempty"`
}

// TrainReport is what Train returns (the common fields; Raw holds the whole JSON).
type TrainReport struct {
	Env              string          `json:"env"`
	Learner          json.RawMessage `json:"learner"`
	TrainTasks       int             `json:"train_tasks"`
	HeldOut          int             `json:"held_out"`
	Baseline         float64         `json:"baseline"`
	Best             float64         `json:"best"`
	FinalEval        float64         `json:"final_eval"`
	Gated            bool            `json:"gated"`
	Options          json.RawMessage `json:"options"` // every option as it ran, defaults filled in
	Rounds           []RoundReport   `json:"rounds"`
	WallS            float64         `json:"wall_s"`
	OverheadFraction float64         `json:"overhead_fraction"` // the loop's own share of round time
	Text             string          `json:"text"`              // the report for people

	Raw json.RawMessage `json:"-"`
}

// RoundReport is one round of a TrainReport (round 0 is the baseline evaluation).
type RoundReport struct {
	Round      int      `json:"round"`
	Outcome    string   `json:"outcome"` // "baseline", "kept", "reverted" or "failed"
	Error      *string  `json:"error"`
	TrainScore *float64 `json:"train_score"`
	EvalScore  *float64 `json:"eval_score"` // failed held-out episodes count 0
	EvalSE     *float64 `json:"eval_se"`    // the standard error of EvalScore
	EvalFailed int      `json:"eval_failed"`
	// The held-out score below which the gate reverts this update (also computed, and
	// ignored, when Gate is false).
	GateBar *float64 `json:"gate_bar"`
	// Kept without a gate, because the learner cannot snapshot.
	Ungated        bool       `json:"ungated"`
	Episodes       int        `json:"episodes"`
	FailedEpisodes int        `json:"failed_episodes"`
	Signal         float64    `json:"signal"`
	SampledTokens  int        `json:"sampled_tokens"`
	Times          RoundTimes `json:"times"`
	Update         *struct {
		Metrics   map[string]float64 `json:"metrics"`
		Sequences int                `json:"sequences"`
		Tokens    int                `json:"tokens"`
		Masked    map[string]int     `json:"masked"`
		Skipped   bool               `json:"skipped"`
	} `json:"update"`
}

// RoundTimes are a round's seconds per phase.
type RoundTimes struct {
	WallS     float64 `json:"wall_s"`
	RolloutS  float64 `json:"rollout_s"`
	UpdateS   float64 `json:"update_s"`
	TrainerS  float64 `json:"trainer_s"`
	EvalS     float64 `json:"eval_s"`
	GateS     float64 `json:"gate_s"`
	OverheadS float64 `json:"overhead_s"`
}

// Train improves learner on env: rounds of grouped rollouts, an update, a held-out
// evaluation and gating. A round that fails (a Trainer or HostLearner error included) is in
// the report, not an error; only bad options or setup are errors. Go policy, trainer and
// learner functions run on this goroutine while the environments step in parallel.
func Train(env *Env, learner *Learner, opts *TrainOptions) (*TrainReport, error) {
	eh, err := env.handle()
	if err != nil {
		return nil, err
	}
	if learner == nil {
		return nil, closedError("Learner")
	}
	lh, err := learner.h.get("Learner")
	if err != nil {
		return nil, err
	}
	js, err := optJSON(opts)
	if err != nil {
		return nil, err
	}
	learner.mu.Lock()
	defer learner.mu.Unlock()
	// A Go policy serves one call at a time (see the package documentation). The learner
	// keeps the policy alive inside the library, so a closed Policy is no error here.
	if learner.policy != nil {
		defer learner.policy.turn()()
	}
	var out C.nenyax_string_t
	p, n := optInput(js)
	err = takeError(C.nenyax_train(eh, lh, p, n, &out))
	runtime.KeepAlive(env)
	runtime.KeepAlive(learner)
	if err != nil {
		return nil, err
	}
	raw := takeBytes(&out)
	var r TrainReport
	if err := decode("train report", raw, &r); err != nil {
		return nil, err
	}
	r.Raw = raw
	return &r, nil
}

// gated is what a trainer's or host learner's cgo.Handle refers to.
type gated struct {
	trainer Trainer
	learner HostLearner
}

func (g *gated) snapshotter() Snapshotter {
	if s, ok := g.trainer.(Snapshotter); ok {
		return s
	}
	s, _ := g.learner.(Snapshotter)
	return s
}

func traceBatch(b *C.nenyax_trace_batch_t) (*TraceBatch, error) {
	rows, width := int(b.rows), int(b.width)
	n := rows * width
	tb := &TraceBatch{
		Rows:         rows,
		Width:        width,
		Tokens:       append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(b.tokens)), n)...),
		Mask:         append([]uint8(nil), unsafe.Slice((*uint8)(unsafe.Pointer(b.mask)), n)...),
		SampledLogp:  append([]float64(nil), unsafe.Slice((*float64)(unsafe.Pointer(b.sampled_logp)), n)...),
		ContextStart: append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(b.context_start)), n)...),
		Lengths:      append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(b.lengths)), rows)...),
	}
	if err := json.Unmarshal(goBytes(b.rows_json, b.rows_json_len), &tb.RowInfo); err != nil {
		return nil, fmt.Errorf("the trace batch's rows JSON does not decode: %v", err)
	}
	return tb, nil
}

// gatedCall runs fn for a trainer or learner callback, turning an error or a panic into its
// message and a non-zero return.
func gatedCall(errOut *C.nenyax_reply_t, fn func() error) (rc C.int32_t) {
	return callback(errOut, func() ([]byte, error) { return nil, fn() })
}

//export nenyaxGoTrainerLogprobs
func nenyaxGoTrainerLogprobs(h C.uintptr_t, b *C.nenyax_trace_batch_t, reference C.bool, out *C.double,
	errOut *C.nenyax_reply_t) C.int32_t {
	g := cgo.Handle(h).Value().(*gated)
	return gatedCall(errOut, func() error {
		tb, err := traceBatch(b)
		if err != nil {
			return err
		}
		// A Go slice for the trainer (it may keep it); copied to the library's buffer after.
		lp := make([]float64, tb.Rows*tb.Width)
		for i := range lp {
			lp[i] = math.NaN()
		}
		if err := g.trainer.Logprobs(tb, bool(reference), lp); err != nil {
			return err
		}
		copy(unsafe.Slice((*float64)(unsafe.Pointer(out)), len(lp)), lp)
		return nil
	})
}

//export nenyaxGoTrainerApply
func nenyaxGoTrainerApply(h C.uintptr_t, b *C.nenyax_trace_batch_t, grad *C.double, errOut *C.nenyax_reply_t) C.int32_t {
	g := cgo.Handle(h).Value().(*gated)
	return gatedCall(errOut, func() error {
		tb, err := traceBatch(b)
		if err != nil {
			return err
		}
		gr := append([]float64(nil), unsafe.Slice((*float64)(unsafe.Pointer(grad)), tb.Rows*tb.Width)...)
		return g.trainer.Apply(tb, gr)
	})
}

//export nenyaxGoSnapshot
func nenyaxGoSnapshot(h C.uintptr_t, errOut *C.nenyax_reply_t) C.int32_t {
	g := cgo.Handle(h).Value().(*gated)
	return gatedCall(errOut, func() error {
		s := g.snapshotter()
		if s == nil {
			return errors.New("no Snapshotter")
		}
		return s.Snapshot()
	})
}

//export nenyaxGoRestore
func nenyaxGoRestore(h C.uintptr_t, errOut *C.nenyax_reply_t) C.int32_t {
	g := cgo.Handle(h).Value().(*gated)
	return gatedCall(errOut, func() error {
		s := g.snapshotter()
		if s == nil {
			return errors.New("no Snapshotter")
		}
		return s.Restore()
	})
}

//export nenyaxGoLearnerUpdate
func nenyaxGoLearnerUpdate(h C.uintptr_t, groups *C.char, n C.size_t, report *C.nenyax_reply_t) C.int32_t {
	g := cgo.Handle(h).Value().(*gated)
	return callback(report, func() ([]byte, error) {
		var gs []Group
		if err := json.Unmarshal(goBytes(groups, n), &gs); err != nil {
			return nil, fmt.Errorf("the groups JSON does not decode: %v", err)
		}
		metrics, err := g.learner.Update(gs)
		if err != nil {
			return nil, err
		}
		if metrics == nil {
			return nil, nil
		}
		return json.Marshal(map[string]any{"metrics": metrics})
	})
}
