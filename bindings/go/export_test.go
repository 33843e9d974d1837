package nenyax_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

// Two attempts at one task scoring 1 and 0: one DPO pair, and one SFT row at the default
// min_score.
const exportRuns = `{"env_id":"e","mode":"step","task":{"id":"t"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"judgment":{"score":1.0}}
{"env_id":"e","mode":"step","task":{"id":"t"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"b"}],"judgment":{"score":0.0}}
`

func TestExport(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "pairs.jsonl")
	opts, _ := json.Marshal(map[string]any{"rows": "dpo", "out": out})
	summary := must(nenyax.ExportJSONL(exportRuns, string(opts)))(t)
	if !strings.Contains(summary, `"rows":1`) || !strings.Contains(summary, `"trajectories":2`) {
		t.Fatalf("summary: %s", summary)
	}
	line := string(must(os.ReadFile(out))(t))
	if !strings.Contains(line, `"chosen":[{"content":"a","role":"assistant"}]`) ||
		!strings.Contains(line, `"rejected":[{"content":"b","role":"assistant"}]`) {
		t.Fatalf("DPO row: %s", line)
	}

	in := filepath.Join(dir, "runs.jsonl")
	if err := os.WriteFile(in, []byte(exportRuns), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, _ = json.Marshal(map[string]any{"input": in, "to": "parquet", "rows": "sft"})
	summary = must(nenyax.ExportFile(string(opts)))(t)
	pq := filepath.Join(dir, "runs.sft.parquet")
	if !strings.Contains(summary, `"rows":1`) || !strings.Contains(summary, pq) {
		t.Fatalf("summary: %s", summary)
	}
	if b := must(os.ReadFile(pq))(t); len(b) < 8 || string(b[:4]) != "PAR1" {
		t.Fatalf("not Parquet: %q", b[:min(len(b), 8)])
	}

	_, err := nenyax.ExportJSONL("not json\n", string(must(json.Marshal(map[string]any{"out": out}))(t)))
	wantStatus(t, err, nenyax.StatusProtocol)
	_, err = nenyax.ExportJSONL(exportRuns, `{"rows": "ppo", "out": "x"}`)
	wantStatus(t, err, nenyax.StatusConfig)
	_, err = nenyax.ExportFile(`{"input": "/nonexistent/runs.jsonl"}`)
	wantStatus(t, err, nenyax.StatusIO)
}
