package nenyax

/*
#include "nenyax.h"
#include "shims.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"math"
	"runtime/cgo"
)

// Phase says which part of a run an episode belongs to (nenyax_episode_t.phase).
type Phase uint32

// The phases.
const (
	// PhaseRun is a plain batch, check or single rollout.
	PhaseRun Phase = C.NENYAX_PHASE_RUN
	// PhaseTrain is a training rollout, which a learner will update from.
	PhaseTrain Phase = C.NENYAX_PHASE_TRAIN
	// PhaseEval is a held-out evaluation episode.
	PhaseEval Phase = C.NENYAX_PHASE_EVAL
)

// The versions of the training structs of nenyax.h.
const (
	// PolicyVtableVersion is NENYAX_POLICY_VTABLE_VERSION, the policy vtable with per-episode
	// callbacks.
	PolicyVtableVersion = C.NENYAX_POLICY_VTABLE_VERSION
	// EpisodeVersion is NENYAX_EPISODE_VERSION.
	EpisodeVersion = C.NENYAX_EPISODE_VERSION
	// TraceBatchVersion is NENYAX_TRACE_BATCH_VERSION.
	TraceBatchVersion = C.NENYAX_TRACE_BATCH_VERSION
	// TrainerVtableVersion is NENYAX_TRAINER_VTABLE_VERSION.
	TrainerVtableVersion = C.NENYAX_TRAINER_VTABLE_VERSION
	// LearnerVtableVersion is NENYAX_LEARNER_VTABLE_VERSION.
	LearnerVtableVersion = C.NENYAX_LEARNER_VTABLE_VERSION
)

func (p Phase) String() string {
	switch p {
	case PhaseRun:
		return "run"
	case PhaseTrain:
		return "train"
	case PhaseEval:
		return "eval"
	}
	return "Phase(?)"
}

// Episode says which episode and which call a per-episode policy serves, so that it can seed
// its sampling per call (the same draws whatever thread runs the episode) and tell the
// members of a group apart.
type Episode struct {
	Phase  Phase
	Round  uint32 // training round (0 before training)
	Group  uint32 // group within the round (evaluation: the held-out task)
	Member uint32 // member within the group (evaluation: the repeat)
	Step   uint64 // this call's index within the episode, from 0
	Seed   *int64 // the environment seed, if any
	TaskID string // "" when the episode plays no listed task
	// SampleSeed seeds this call's sampling: the same episode and step always get the same.
	SampleSeed uint64
}

// Record is what a per-episode policy sampled in one call, so that its episodes can be
// trained on: the prompt's token ids (optional for action policies, needed for chat calls),
// the sampled token ids, and their log-probabilities (optional; one per token).
type Record struct {
	PromptTokenIDs     []int64   `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int64   `json:"completion_token_ids"`
	CompletionLogprobs []float64 `json:"completion_logprobs,omitempty"`
}

func (r *Record) encode() ([]byte, error) {
	if len(r.CompletionTokenIDs) == 0 {
		return nil, nil
	}
	if len(r.CompletionLogprobs) != 0 && len(r.CompletionLogprobs) != len(r.CompletionTokenIDs) {
		return nil, errors.New("Record: CompletionLogprobs must be empty or one per completion token")
	}
	for _, l := range r.CompletionLogprobs {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return nil, errors.New("Record: a completion log-prob is not finite")
		}
	}
	return json.Marshal(r)
}

// NewEpisodeActionPolicy makes a policy from a Go function that is told its episode: it reads
// the observation (JSON) and returns the action (JSON) and, optionally, a Record of what it
// sampled (nil: nothing recorded, so its episodes cannot be trained on by weight learners).
// Sample with ep.SampleSeed so a run is reproducible. Errors and panics fail that episode
// only. Like NewActionPolicy, act runs only on the goroutine that called into nenyax.
func NewEpisodeActionPolicy(act func(ep Episode, observationJSON []byte) (action []byte, rec *Record, err error)) (*Policy, error) {
	if act == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewEpisodeActionPolicy: the function is nil"}
	}
	return newEpisodePolicy(&hostPolicy{actEpisode: act}, 0)
}

// NewEpisodeChatPolicy makes a chat policy from a Go function that is told its episode: it
// reads the conversation (JSON messages) and returns the reply text and, optionally, a
// Record of the call's prompt and completion token ids (both needed for chat calls to be
// trained on).
func NewEpisodeChatPolicy(chat func(ep Episode, messagesJSON []byte) (reply string, rec *Record, err error)) (*Policy, error) {
	if chat == nil {
		return nil, &Error{Status: StatusInvalidArgument, Message: "NewEpisodeChatPolicy: the function is nil"}
	}
	return newEpisodePolicy(&hostPolicy{chatEpisode: chat}, 1)
}

func newEpisodePolicy(hp *hostPolicy, chat C.int) (*Policy, error) {
	h := cgo.NewHandle(hp)
	var out *C.nenyax_policy_t
	// The library owns the handle from here on, also when the call fails.
	if err := takeError(C.nenyax_go_episode_policy_new(chat, C.uintptr_t(h), 0, &out)); err != nil {
		return nil, err
	}
	return newPolicy(out, hp), nil
}

func episodeOf(e *C.nenyax_episode_t) Episode {
	ep := Episode{
		Phase:      Phase(e.phase),
		Round:      uint32(e.round),
		Group:      uint32(e.group),
		Member:     uint32(e.member),
		Step:       uint64(e.step),
		SampleSeed: uint64(e.sample_seed),
	}
	if e.has_seed {
		s := int64(e.seed)
		ep.Seed = &s
	}
	if e.task_id != nil {
		ep.TaskID = string(goBytes(e.task_id, e.task_id_len))
	}
	return ep
}

// episodeCallback runs a per-episode function: its output to reply, its record to record.
func episodeCallback(hp *hostPolicy, reply, record *C.nenyax_reply_t, fn func() ([]byte, *Record, error)) (rc C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			setReply(reply, []byte(panicMessage(r)))
			rc = 1
		}
	}()
	if hp.stopped.Load() {
		setReply(reply, []byte(stoppedMessage))
		return 1
	}
	out, rec, err := fn()
	if err == nil && rec != nil {
		var b []byte
		if b, err = rec.encode(); err == nil && b != nil {
			setReply(record, b)
		}
	}
	if err != nil {
		setReply(reply, []byte(err.Error()))
		return 1
	}
	setReply(reply, out)
	return 0
}

//export nenyaxGoActEpisode
func nenyaxGoActEpisode(h C.uintptr_t, ep *C.nenyax_episode_t, obs *C.char, n C.size_t,
	reply, record *C.nenyax_reply_t) C.int32_t {
	hp := cgo.Handle(h).Value().(*hostPolicy)
	return episodeCallback(hp, reply, record, func() ([]byte, *Record, error) {
		return hp.actEpisode(episodeOf(ep), goBytes(obs, n))
	})
}

//export nenyaxGoChatEpisode
func nenyaxGoChatEpisode(h C.uintptr_t, ep *C.nenyax_episode_t, messages *C.char, n C.size_t,
	reply, record *C.nenyax_reply_t) C.int32_t {
	hp := cgo.Handle(h).Value().(*hostPolicy)
	return episodeCallback(hp, reply, record, func() ([]byte, *Record, error) {
		text, rec, err := hp.chatEpisode(episodeOf(ep), goBytes(messages, n))
		return []byte(text), rec, err
	})
}
