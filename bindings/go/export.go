package nenyax

/*
#include "nenyax.h"
*/
import "C"

// ExportJSONL turns trajectories (JSONL text) into training rows. optionsJSON as
// nenyax_export's: {"to": "jsonl" | "parquet" | "hf", "rows": "raw" | "sft" | "dpo" | "tokens",
// "min_score", "out" (required), "push_to_hub"}. It returns the summary JSON
// ({"rows", "trajectories", "skipped", "out", "pushed"}).
func ExportJSONL(jsonl, optionsJSON string) (string, error) {
	var out C.nenyax_string_t
	p, n := input(jsonl)
	op, on := input(optionsJSON)
	if err := takeError(C.nenyax_export(p, n, op, on, &out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// ExportFile exports the JSONL file named by the option "input" (the output goes next to it
// unless "out" says otherwise); it returns the summary JSON.
func ExportFile(optionsJSON string) (string, error) {
	var out C.nenyax_string_t
	op, on := input(optionsJSON)
	if err := takeError(C.nenyax_export(nil, 0, op, on, &out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}
