package nenyax_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

// A run config is read and checked as `nenyax train --config` does: normalised JSON with
// overrides by dotted key, and a typo named with its file, line and the knob it meant.
func TestConfigLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "run.toml")
	if err := os.WriteFile(good, []byte("[env]\nuri = \"builtin:guess\"\n[learner]\nuse = \"grpo\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := nenyax.ConfigLoad(good, `{"train.rounds": 3}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"uri":"builtin:guess"`, `"use":"grpo"`, `"rounds":3`} {
		if !strings.Contains(run, want) {
			t.Errorf("ConfigLoad: %s lacks %s", run, want)
		}
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[env]\nuri = \"builtin:guess\"\n[train]\nrouns = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = nenyax.ConfigLoad(bad, "")
	var ne *nenyax.Error
	if !errors.As(err, &ne) || ne.Status != nenyax.StatusConfig || !strings.Contains(err.Error(), ":4:") ||
		!strings.Contains(err.Error(), "rounds") {
		t.Fatalf("a typo: %v", err)
	}
}
