//! Exports: trajectories (JSONL) as raw, SFT, DPO or token rows in JSONL, Parquet or a Hugging
//! Face dataset folder.

use std::ffi::c_char;
use std::path::PathBuf;

use nenyax_core::export::{export_file, export_reader, ExportOptions};

use crate::args::{json_object_arg, json_out, need_out, nenyax_string_t, opt_str_arg};
use crate::error::{boundary, invalid, nenyax_error_t, out_param};

/// Export trajectories: the JSONL text `jsonl` (`jsonl_len` bytes) or, when `jsonl` is NULL,
/// the file named by the option "input". Options: {"input": path, "to": "jsonl" | "parquet" |
/// "hf", "rows": "raw" | "sft" | "dpo" | "tokens", "min_score": 1.0, "out": path (required for
/// in-memory JSONL; by default next to "input"), "push_to_hub": "owner/name" (needs HF_TOKEN)}.
/// `summary_out` gets {"rows", "trajectories", "skipped": {reason: count}, "out", "pushed"};
/// free it with nenyax_string_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_export(
    jsonl: *const c_char,
    jsonl_len: usize,
    options_json: *const c_char,
    options_len: usize,
    summary_out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        need_out(summary_out)?;
        let mut v = json_object_arg(options_json, options_len, "options_json")?;
        let input = match v.as_object_mut().and_then(|o| o.remove("input")) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(PathBuf::from(s)),
            Some(_) => {
                return Err(invalid(
                    "options_json \"input\" must be a path string".into(),
                ))
            }
        };
        let opts = ExportOptions::from_json(&v)?;
        let text = if jsonl.is_null() {
            None
        } else {
            Some(opt_str_arg(jsonl, jsonl_len, "jsonl")?.unwrap_or(""))
        };
        let summary =
            match (text, input) {
                (Some(_), Some(_)) => return Err(invalid(
                    "give the trajectories either as jsonl or as the option \"input\", not both"
                        .into(),
                )),
                (None, None) => {
                    return Err(invalid(
                        "no trajectories: pass jsonl or the option \"input\" (a JSONL file)".into(),
                    ))
                }
                (None, Some(path)) => export_file(&path, &opts)?,
                (Some(text), None) => {
                    let out = opts.out.clone().ok_or_else(|| {
                        invalid("exporting in-memory jsonl needs the option \"out\"".into())
                    })?;
                    export_reader(text.as_bytes(), "jsonl", &out, &opts)?
                }
            };
        out_param(summary_out, json_out(&summary))
    })
}
