package nenyax

/*
#include "nenyax.h"
*/
import "C"

// ConfigLoad reads and checks a run config file (TOML: [env], [model], [learner], [train],
// [output]) as `nenyax train --config` does and returns it normalised as JSON: {"file", "env":
// {"uri", "judge"}, "model", "learner", "train", "output"}, so a Go trainer can pass "learner"
// to NewLearner and "train" to Train. overridesJSON ("" for none) sets dotted keys first, e.g.
// {"train.gate": false}. Errors name the file, the line and the key.
func ConfigLoad(path, overridesJSON string) (string, error) {
	var out C.nenyax_string_t
	p, n := input(path)
	o, m := optInput(overridesJSON)
	if err := takeError(C.nenyax_config_load(p, n, o, m, &out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}
