package nenyax

/*
#include "nenyax.h"
#include "shims.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// The constants of nenyax.h, taken from the header by cgo.
const (
	// VtableVersion is NENYAX_VTABLE_VERSION, the version of the callback tables.
	VtableVersion = C.NENYAX_VTABLE_VERSION
	// ThreadSafe is NENYAX_THREAD_SAFE, the flag of callbacks that may run on any thread.
	ThreadSafe = C.NENYAX_THREAD_SAFE
	// MaxThreads is NENYAX_MAX_THREADS, the most worker threads a runner may have.
	MaxThreads = C.NENYAX_MAX_THREADS
	// HeaderVersionMajor, Minor and Patch are the parts of HeaderVersion.
	HeaderVersionMajor = C.NENYAX_VERSION_MAJOR
	HeaderVersionMinor = C.NENYAX_VERSION_MINOR
	HeaderVersionPatch = C.NENYAX_VERSION_PATCH
	// PGStatsLen is NENYAX_PG_STATS_LEN: how many float64 the CUDA losses write to statsDevice.
	PGStatsLen = C.NENYAX_PG_STATS_LEN
	// The bits of the last stats value of a CUDA loss: a NaN on a valid token (or advantage).
	PGBadLogp       = C.NENYAX_PG_BAD_LOGP
	PGBadOldLogp    = C.NENYAX_PG_BAD_OLD_LOGP
	PGBadRefLogp    = C.NENYAX_PG_BAD_REF_LOGP
	PGBadEntropy    = C.NENYAX_PG_BAD_ENTROPY
	PGBadAdvantages = C.NENYAX_PG_BAD_ADVANTAGES
	// The fields of nenyax_pg_batch_t (PGLossBatch): its version, dtype, memory and device.
	PGBatchVersion = C.NENYAX_PG_BATCH_VERSION
	DTypeF32       = C.NENYAX_DTYPE_F32
	DTypeF64       = C.NENYAX_DTYPE_F64
	MemoryHost     = C.NENYAX_MEMORY_HOST
	MemoryCUDA     = C.NENYAX_MEMORY_CUDA
	DeviceCPU      = C.NENYAX_DEVICE_CPU
	DeviceCUDA     = C.NENYAX_DEVICE_CUDA
)

// Float is the element type of the learners' host buffers.
type Float interface{ float32 | float64 }

// PGStats is what a policy-loss call returns besides the gradients (nenyax_pg_stats_t).
type PGStats struct {
	Loss, LossPG, KL, Entropy, ClipFraction, ApproxKL, MeanRatio, Tokens, Rows float64
}

// PGInputs are the host inputs of a policy loss over Rows x Width tokens (row-major). RefLogp
// is needed with a KL term and Entropy with an entropy bonus (nil otherwise); Advantages holds
// one value per row or one per token; Mask is 1 for valid tokens.
type PGInputs[T Float] struct {
	Logp, OldLogp, RefLogp, Entropy []T
	Mask                            []uint8
	Advantages                      []T
	Rows, Width                     int
}

// PGResult is a policy loss with its gradients (GradEntropy only with Entropy).
type PGResult[T Float] struct {
	Stats       PGStats
	GradLogp    []T
	GradEntropy []T
}

// ptr passes a Go slice to C (nil for an empty one); C only uses it during the call.
func ptr[P any, E any](s []E) *P {
	if len(s) == 0 {
		return nil
	}
	return (*P)(unsafe.Pointer(unsafe.SliceData(s)))
}

func badLen(what string, got, want int) error {
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("%s has %d values, expected %d", what, got, want)}
}

// needLen checks a buffer the C call reads or writes without knowing its length.
func needLen(what string, got, want int, optional bool) error {
	if (optional && got == 0) || got == want {
		return nil
	}
	return badLen(what, got, want)
}

func (in *PGInputs[T]) check() error {
	if in.Rows < 0 || in.Width < 0 {
		return &Error{Status: StatusInvalidArgument, Message: "Rows and Width must be >= 0"}
	}
	n := in.Rows * in.Width
	for _, c := range []struct {
		what     string
		got      int
		optional bool
	}{{"Logp", len(in.Logp), false}, {"OldLogp", len(in.OldLogp), false},
		{"RefLogp", len(in.RefLogp), true}, {"Entropy", len(in.Entropy), true}, {"Mask", len(in.Mask), false}} {
		if err := needLen(c.what, c.got, n, c.optional); err != nil {
			return err
		}
	}
	if len(in.Advantages) != in.Rows && len(in.Advantages) != n {
		return badLen("Advantages", len(in.Advantages), in.Rows)
	}
	return nil
}

func (in *PGInputs[T]) result() PGResult[T] {
	r := PGResult[T]{GradLogp: make([]T, in.Rows*in.Width)}
	if len(in.Entropy) > 0 {
		r.GradEntropy = make([]T, in.Rows*in.Width)
	}
	return r
}

func statsOf(s *C.nenyax_pg_stats_t) PGStats {
	return PGStats{float64(s.loss), float64(s.loss_pg), float64(s.kl), float64(s.entropy),
		float64(s.clip_fraction), float64(s.approx_kl), float64(s.mean_ratio), float64(s.tokens), float64(s.rows)}
}

// PGLoss computes a policy-gradient loss on the CPU, in float64 or float32 (per-token maths in
// float64). configJSON: the JSON of docs/c-api.md, or a named learner such as {"learner": "dapo"}.
func PGLoss[T Float](in PGInputs[T], configJSON string) (PGResult[T], error) {
	if err := in.check(); err != nil {
		return PGResult[T]{}, err
	}
	r := in.result()
	var st C.nenyax_pg_stats_t
	cp, cn := input(configJSON)
	var e *C.nenyax_error_t
	var zero T
	switch any(zero).(type) {
	case float64:
		e = C.nenyax_pg_loss(ptr[C.double](in.Logp), ptr[C.double](in.OldLogp), ptr[C.double](in.RefLogp),
			ptr[C.double](in.Entropy), ptr[C.uint8_t](in.Mask), ptr[C.double](in.Advantages),
			C.size_t(len(in.Advantages)), C.size_t(in.Rows), C.size_t(in.Width), cp, cn,
			ptr[C.double](r.GradLogp), ptr[C.double](r.GradEntropy), &st)
	default:
		e = C.nenyax_pg_loss_f32(ptr[C.float](in.Logp), ptr[C.float](in.OldLogp), ptr[C.float](in.RefLogp),
			ptr[C.float](in.Entropy), ptr[C.uint8_t](in.Mask), ptr[C.float](in.Advantages),
			C.size_t(len(in.Advantages)), C.size_t(in.Rows), C.size_t(in.Width), cp, cn,
			ptr[C.float](r.GradLogp), ptr[C.float](r.GradEntropy), &st)
	}
	if err := takeError(e); err != nil {
		return PGResult[T]{}, err
	}
	r.Stats = statsOf(&st)
	return r, nil
}

// PGLossCUDAHost runs the fused GPU loss from host memory (float32): it copies in, runs,
// copies back and synchronises. StatusCudaUnavailable says why there is no GPU.
func PGLossCUDAHost(in PGInputs[float32], configJSON string) (PGResult[float32], error) {
	if err := in.check(); err != nil {
		return PGResult[float32]{}, err
	}
	r := in.result()
	var st C.nenyax_pg_stats_t
	cp, cn := input(configJSON)
	if err := takeError(C.nenyax_pg_loss_cuda_host_f32(ptr[C.float](in.Logp), ptr[C.float](in.OldLogp),
		ptr[C.float](in.RefLogp), ptr[C.float](in.Entropy), ptr[C.uint8_t](in.Mask), ptr[C.float](in.Advantages),
		C.size_t(len(in.Advantages)), C.size_t(in.Rows), C.size_t(in.Width), cp, cn,
		ptr[C.float](r.GradLogp), ptr[C.float](r.GradEntropy), &st)); err != nil {
		return PGResult[float32]{}, err
	}
	r.Stats = statsOf(&st)
	return r, nil
}

// PGDeviceInputs are device pointers (CUDA memory in the device's primary context; nil where
// not needed) for PGLossCUDA. AdvantagesLen is Rows, or Rows*Width for one per token.
type PGDeviceInputs struct {
	Logp, OldLogp, RefLogp, Entropy, Mask, Advantages unsafe.Pointer
	AdvantagesLen, Rows, Width                        int
}

// PGLossCUDA queues the fused loss over device arrays of float32 (f64 false) or float64 (f64
// true) on stream (a CUstream; nil: the default stream) without synchronising. gradLogp and
// gradEntropy are device arrays of the same type; statsDevice receives PGStatsLen float64 in
// device memory, the last one holding PGBad* bits.
func PGLossCUDA(in PGDeviceInputs, f64 bool, configJSON string, gradLogp, gradEntropy, statsDevice, stream unsafe.Pointer) error {
	cp, cn := input(configJSON)
	n, rows, width := C.size_t(in.AdvantagesLen), C.size_t(in.Rows), C.size_t(in.Width)
	if f64 {
		return takeError(C.nenyax_pg_loss_cuda_f64((*C.double)(in.Logp), (*C.double)(in.OldLogp),
			(*C.double)(in.RefLogp), (*C.double)(in.Entropy), (*C.uint8_t)(in.Mask), (*C.double)(in.Advantages),
			n, rows, width, cp, cn, (*C.double)(gradLogp), (*C.double)(gradEntropy), (*C.double)(statsDevice), stream))
	}
	return takeError(C.nenyax_pg_loss_cuda_f32((*C.float)(in.Logp), (*C.float)(in.OldLogp),
		(*C.float)(in.RefLogp), (*C.float)(in.Entropy), (*C.uint8_t)(in.Mask), (*C.float)(in.Advantages),
		n, rows, width, cp, cn, (*C.float)(gradLogp), (*C.float)(gradEntropy), (*C.double)(statsDevice), stream))
}

// CUDADevice returns the GPU the CUDA entry points use, as JSON {"ordinal", "name",
// "compute_capability"}; StatusCudaUnavailable says why there is none.
func CUDADevice() (string, error) {
	var out C.nenyax_string_t
	if err := takeError(C.nenyax_cuda_device(&out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// LearnerJSON returns the full JSON of a named learner with any overrides applied, e.g.
// {"learner": "dapo", "clip_high": 0.3}.
func LearnerJSON(configJSON string) (string, error) {
	var out C.nenyax_string_t
	p, n := input(configJSON)
	if err := takeError(C.nenyax_learner_json(p, n, &out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// Advantages returns one advantage per sequence. optionsJSON ("" for the defaults):
// {"estimator": "grpo_verl" | "grpo_trl" | "grpo" | "dr_grpo" | "rloo" | "reinforce", "eps",
// "singleton", "std_scope"}; groupIDs label the rollouts of one task.
func Advantages(rewards []float64, groupIDs []int64, optionsJSON string) ([]float64, error) {
	if len(groupIDs) != len(rewards) {
		return nil, badLen("groupIDs", len(groupIDs), len(rewards))
	}
	out := make([]float64, len(rewards))
	p, n := optInput(optionsJSON)
	if err := takeError(C.nenyax_advantages(ptr[C.double](rewards), ptr[C.int64_t](groupIDs),
		C.size_t(len(rewards)), p, n, ptr[C.double](out))); err != nil {
		return nil, err
	}
	return out, nil
}

// DAPOKeep is DAPO's dynamic-sampling filter: false for rows whose group has all-equal rewards.
func DAPOKeep(rewards []float64, groupIDs []int64) ([]bool, error) {
	if len(groupIDs) != len(rewards) {
		return nil, badLen("groupIDs", len(groupIDs), len(rewards))
	}
	keep := make([]uint8, len(rewards))
	if err := takeError(C.nenyax_dapo_keep(ptr[C.double](rewards), ptr[C.int64_t](groupIDs),
		C.size_t(len(rewards)), ptr[C.uint8_t](keep))); err != nil {
		return nil, err
	}
	out := make([]bool, len(keep))
	for i, k := range keep {
		out[i] = k != 0
	}
	return out, nil
}

// ReinforcePP returns REINFORCE++ token advantages and the discounted returns (Rows x Width,
// row-major) for one reward per row. With groupIDs (nil for none) the group mean is subtracted
// before whitening.
func ReinforcePP(rewards []float64, groupIDs []int64, mask []uint8, rows, width int, gamma float64) (adv, returns []float64, err error) {
	if rows < 0 || width < 0 {
		return nil, nil, &Error{Status: StatusInvalidArgument, Message: "rows and width must be >= 0"}
	}
	if err := needLen("rewards", len(rewards), rows, false); err != nil {
		return nil, nil, err
	}
	if err := needLen("groupIDs", len(groupIDs), rows, true); err != nil {
		return nil, nil, err
	}
	if err := needLen("mask", len(mask), rows*width, false); err != nil {
		return nil, nil, err
	}
	adv, returns = make([]float64, rows*width), make([]float64, rows*width)
	if err := takeError(C.nenyax_reinforce_pp(ptr[C.double](rewards), ptr[C.int64_t](groupIDs), ptr[C.uint8_t](mask),
		C.size_t(rows), C.size_t(width), C.double(gamma), ptr[C.double](adv), ptr[C.double](returns))); err != nil {
		return nil, nil, err
	}
	return adv, returns, nil
}

// DPOResult is what DPOLoss returns.
type DPOResult struct {
	Loss     float64
	GradLogp []float64 // Rows x Width, 0 for rows in no pair
	Pairs    int
}

// DPOLoss is DPO (sigmoid) on each group's best-vs-worst pair (one reward and group id per
// row); sequence log-probs are sums over valid tokens.
func DPOLoss(rewards []float64, groupIDs []int64, logp, refLogp []float64, mask []uint8, rows, width int, beta float64) (DPOResult, error) {
	if rows < 0 || width < 0 {
		return DPOResult{}, &Error{Status: StatusInvalidArgument, Message: "rows and width must be >= 0"}
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{{"rewards", len(rewards), rows}, {"groupIDs", len(groupIDs), rows}, {"logp", len(logp), rows * width},
		{"refLogp", len(refLogp), rows * width}, {"mask", len(mask), rows * width}} {
		if err := needLen(c.what, c.got, c.want, false); err != nil {
			return DPOResult{}, err
		}
	}
	r := DPOResult{GradLogp: make([]float64, rows*width)}
	var loss C.double
	var pairs C.size_t
	if err := takeError(C.nenyax_dpo_loss(ptr[C.double](rewards), ptr[C.int64_t](groupIDs), ptr[C.double](logp),
		ptr[C.double](refLogp), ptr[C.uint8_t](mask), C.size_t(rows), C.size_t(width), C.double(beta), &loss,
		ptr[C.double](r.GradLogp), &pairs)); err != nil {
		return DPOResult{}, err
	}
	r.Loss, r.Pairs = float64(loss), int(pairs)
	return r, nil
}

// PGLossBatch computes the loss through the one batch entry point, nenyax_pg_loss_batch: on
// the CPU, or with cuda on the GPU from host memory (copied in and back). The results are
// those of PGLoss and PGLossCUDAHost.
func PGLossBatch[T Float](in PGInputs[T], configJSON string, cuda bool) (PGResult[T], error) {
	if err := in.check(); err != nil {
		return PGResult[T]{}, err
	}
	r := in.result()
	var b C.nenyax_pg_batch_t
	b.version, b.memory, b.device = C.NENYAX_PG_BATCH_VERSION, C.NENYAX_MEMORY_HOST, C.NENYAX_DEVICE_CPU
	if cuda {
		b.device = C.NENYAX_DEVICE_CUDA
	}
	var zero T
	b.dtype = C.NENYAX_DTYPE_F32
	if _, ok := any(zero).(float64); ok {
		b.dtype = C.NENYAX_DTYPE_F64
	}
	// The struct lives in Go memory and holds pointers to Go slices: cgo allows that only for
	// pinned memory.
	var pin runtime.Pinner
	defer pin.Unpin()
	at := func(s []T) unsafe.Pointer {
		if len(s) == 0 {
			return nil
		}
		pin.Pin(unsafe.SliceData(s))
		return unsafe.Pointer(unsafe.SliceData(s))
	}
	b.logp, b.old_logp, b.ref_logp, b.entropy = at(in.Logp), at(in.OldLogp), at(in.RefLogp), at(in.Entropy)
	b.advantages, b.grad_logp, b.grad_entropy = at(in.Advantages), at(r.GradLogp), at(r.GradEntropy)
	if len(in.Mask) > 0 {
		pin.Pin(unsafe.SliceData(in.Mask))
		b.mask = ptr[C.uint8_t](in.Mask)
	}
	b.advantages_len, b.rows, b.width = C.size_t(len(in.Advantages)), C.size_t(in.Rows), C.size_t(in.Width)
	var st C.nenyax_pg_stats_t
	cp, cn := input(configJSON)
	if err := takeError(C.nenyax_go_pg_loss_batch(&b, cp, cn, &st)); err != nil {
		return PGResult[T]{}, err
	}
	r.Stats = statsOf(&st)
	return r, nil
}
