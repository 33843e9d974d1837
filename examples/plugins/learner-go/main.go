// gotab: a learner plugin for Nenyax written in Go, built with `go build -buildmode=c-shared`.
//
// It plays builtin:guess (find a secret number from higher/lower feedback) with a tabular
// softmax policy: one row of preferences per state (the feasible range low..high and the
// guesses left), one column per guess in that range. `update` is REINFORCE with each group's
// mean score as the baseline, so guesses that found the secret more often than their group's
// average become more likely in the states where they were made. Held-out scores rise as it
// learns to bisect. Nenyax calls it through include/nenyax.h's nenyax_learner_plugin_vtable_t
// (see plugin.c); it never calls nenyax_* itself.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../../include
#include <stdint.h>
#include <stdlib.h>
#include "nenyax.h"
void gotab_write(const nenyax_plugin_out_t *out, const char *ptr, size_t len);
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"unsafe"
)

// pluginName is what `--learner` and `use = "..."` pick; -ldflags "-X main.pluginName=..."
// renames a copy.
var pluginName = "gotab"

// learningRate is the REINFORCE step on the preferences.
const learningRate = 1.0

// table maps a state key to the preferences of its guesses low..high.
type table map[string][]float64

var (
	prefs       = table{}
	saved       table
	cname       *C.char
	corrupt     = false // a broken build (-X main.corruptFlag=yes): restore forgets the snapshot
	corruptFlag string
)

func main() {}

//export goName
func goName() *C.char {
	if cname == nil {
		cname = C.CString(pluginName)
		corrupt = corruptFlag == "yes"
	}
	return cname
}

// write sends text to Nenyax through the out handle.
func write(out *C.nenyax_plugin_out_t, s string) {
	if len(s) == 0 {
		return
	}
	p := C.CString(s)
	defer C.free(unsafe.Pointer(p))
	C.gotab_write(out, p, C.size_t(len(s)))
}

// fail writes an error message and returns the non-zero code Nenyax reports.
func fail(out *C.nenyax_plugin_out_t, format string, args ...any) C.int32_t {
	write(out, fmt.Sprintf(format, args...))
	return 1
}

type guessObs struct {
	Low         *int64 `json:"low"`
	High        *int64 `json:"high"`
	GuessesLeft int64  `json:"guesses_left"`
}

type observation struct {
	Data json.RawMessage `json:"data"`
}

func state(o observation) (key string, low, high int64, err error) {
	var g guessObs
	if err = json.Unmarshal(o.Data, &g); err != nil || g.Low == nil || g.High == nil {
		return "", 0, 0, fmt.Errorf("the observation is not builtin:guess's {low, high, guesses_left}: %s", string(o.Data))
	}
	low, high = *g.Low, *g.High
	if high < low {
		high = low
	}
	return fmt.Sprintf("%d-%d-%d", low, high, g.GuessesLeft), low, high, nil
}

// row is the state's preferences, created at zero (a uniform policy) on first sight.
func row(key string, width int) []float64 {
	r, ok := prefs[key]
	if !ok || len(r) != width {
		r = make([]float64, width)
		prefs[key] = r
	}
	return r
}

func softmax(r []float64) []float64 {
	m := math.Inf(-1)
	for _, x := range r {
		m = math.Max(m, x)
	}
	p := make([]float64, len(r))
	sum := 0.0
	for i, x := range r {
		p[i] = math.Exp(x - m)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

type actRequest struct {
	Observation observation `json:"observation"`
	Seed        uint64      `json:"seed"`
}

//export goAct
func goAct(ud unsafe.Pointer, in *C.char, n C.size_t, out *C.nenyax_plugin_out_t) C.int32_t {
	var req actRequest
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(in), C.int(n)), &req); err != nil {
		return fail(out, "gotab: act: bad request: %v", err)
	}
	key, low, high, err := state(req.Observation)
	if err != nil {
		return fail(out, "gotab: %v", err)
	}
	p := softmax(row(key, int(high-low+1)))
	// Sample from this call's own seed, so runs are reproducible whatever the threads.
	u := rand.New(rand.NewSource(int64(req.Seed))).Float64()
	pick := len(p) - 1
	acc := 0.0
	for i, x := range p {
		acc += x
		if u < acc {
			pick = i
			break
		}
	}
	write(out, fmt.Sprintf("%d", low+int64(pick)))
	return 0
}

type step struct {
	Action      json.RawMessage `json:"action"`
	Observation observation     `json:"observation"`
}

type trajectory struct {
	Initial  *observation `json:"initial_observation"`
	Steps    []step       `json:"steps"`
	Judgment *struct {
		Score float64 `json:"score"`
	} `json:"judgment"`
	Error *string `json:"error"`
}

type group struct {
	Trajectories []trajectory `json:"trajectories"`
}

//export goUpdate
func goUpdate(ud unsafe.Pointer, in *C.char, n C.size_t, out *C.nenyax_plugin_out_t) C.int32_t {
	var groups []group
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(in), C.int(n)), &groups); err != nil {
		return fail(out, "gotab: update: the groups are not a JSON array of {trajectories}: %v", err)
	}
	steps, used := 0, 0
	absAdv := 0.0
	for gi, g := range groups {
		var scores []float64
		for _, t := range g.Trajectories {
			if t.Error == nil && t.Judgment != nil {
				scores = append(scores, t.Judgment.Score)
			}
		}
		if len(scores) == 0 {
			continue
		}
		mean := 0.0
		for _, s := range scores {
			mean += s
		}
		mean /= float64(len(scores))
		for ti, t := range g.Trajectories {
			if t.Error != nil || t.Judgment == nil {
				continue
			}
			if t.Initial == nil {
				return fail(out, "gotab: update: group %d trajectory %d has no initial_observation", gi, ti)
			}
			adv := t.Judgment.Score - mean
			used++
			absAdv += math.Abs(adv)
			before := *t.Initial
			for si, s := range t.Steps {
				key, low, high, err := state(before)
				if err != nil {
					return fail(out, "gotab: update: group %d trajectory %d step %d: %v", gi, ti, si, err)
				}
				var a int64
				if err := json.Unmarshal(s.Action, &a); err != nil {
					return fail(out, "gotab: update: group %d trajectory %d step %d: the action %s is not a whole number", gi, ti, si, string(s.Action))
				}
				r := row(key, int(high-low+1))
				if a >= low && a <= high && adv != 0 {
					p := softmax(r)
					for i := range r {
						ind := 0.0
						if int64(i) == a-low {
							ind = 1
						}
						r[i] += learningRate * adv * (ind - p[i])
					}
				}
				steps++
				before = s.Observation
			}
		}
	}
	meanAdv := 0.0
	if used > 0 {
		meanAdv = absAdv / float64(used)
	}
	reply, _ := json.Marshal(map[string]any{
		"metrics": map[string]float64{
			"steps":              float64(steps),
			"trajectories":       float64(used),
			"mean_abs_advantage": meanAdv,
			"states":             float64(len(prefs)),
		},
		"skipped": steps == 0 || meanAdv == 0,
	})
	write(out, string(reply))
	return 0
}

func clone(t table) table {
	c := make(table, len(t))
	for k, v := range t {
		c[k] = append([]float64(nil), v...)
	}
	return c
}

//export goSnapshot
func goSnapshot(ud unsafe.Pointer, out *C.nenyax_plugin_out_t) C.int32_t {
	saved = clone(prefs)
	write(out, "{}")
	return 0
}

//export goRestore
func goRestore(ud unsafe.Pointer, out *C.nenyax_plugin_out_t) C.int32_t {
	if saved == nil {
		return fail(out, "gotab: restore before any snapshot")
	}
	if !corrupt {
		prefs = clone(saved)
	}
	return 0
}
