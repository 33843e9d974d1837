//! Exports (`nenyax::export`, `nenyax export`): rows checked by hand (DPO, SFT), every row kind
//! written as Parquet and read back by the real pyarrow, the hf folder loaded by the real
//! `datasets.load_dataset`, token rows from a recorded rollout, and bad input.
//!
//! pyarrow and datasets come from .venv-export (`scripts/setup_integrations.sh export`, named by
//! NENYAX_EXPORT_PYTHON); without it those tests skip locally and fail in CI.

#[path = "support/integrations.rs"]
mod integrations;
#[path = "support/token_model.rs"]
mod token_model;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use nenyax::export::{export_file, to_rows, Col, ExportOptions, Format, RowKind};
use nenyax::train::trace::{trace, Turns};
use nenyax::{
    load, Endpoint, Error, JudgeSource, Judgment, Message, Mode, Policy, RolloutOptions, TaskRef,
    Trajectory,
};
use token_model::{History, Reply, TokenModel};

fn traj(task: Option<&str>, seed: Option<i64>, answer: &str, score: Option<f64>) -> Trajectory {
    let mut t = Trajectory::start(
        "builtin:arithmetic",
        Mode::Step,
        task.map(TaskRef::new),
        seed,
    );
    t.messages = vec![
        Message::system("Answer with a number."),
        Message::user(format!("task {task:?} seed {seed:?}")),
        Message::assistant(answer),
    ];
    t.judgment = score.map(|s| {
        Judgment::new(s, JudgeSource::Verifier, "exact")
            .unwrap()
            .with_passed(s >= 1.0)
    });
    t.duration_s = Some(0.25);
    t
}

/// Two tasks with distinct scores, one tied task, a seed-only group, a failed and an unjudged
/// episode.
fn batch() -> Vec<Trajectory> {
    let mut failed = traj(Some("t1"), Some(9), "boom", None);
    failed.error = Some("EnvironmentError: crashed".into());
    vec![
        traj(Some("t1"), Some(1), "3", Some(0.5)),
        traj(Some("t1"), Some(2), "4", Some(1.0)),
        traj(Some("t1"), Some(3), "5", Some(0.0)),
        traj(Some("t1"), Some(4), "four", Some(1.0)),
        failed,
        traj(Some("t2"), Some(5), "7", Some(1.0)),
        traj(Some("t2"), Some(6), "7", Some(1.0)),
        traj(None, Some(7), "x", Some(0.2)),
        traj(None, Some(7), "y", Some(0.8)),
        traj(None, None, "lost", Some(1.0)),
    ]
}

fn jsonl(ts: &[Trajectory]) -> String {
    ts.iter().map(|t| t.to_json() + "\n").collect()
}

fn msgs(task: Option<&str>, seed: i64) -> Value {
    json!([
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": format!("task {task:?} seed {:?}", Some(seed))},
    ])
}

#[test]
fn dpo_rows_pair_each_groups_best_and_worst() {
    let rows = to_rows(batch(), RowKind::Dpo, 1.0).unwrap();
    let expected = vec![
        // t1: 1.0 first reached by seed 2 (seed 4 ties later), worst 0.0 by seed 3; the failed
        // episode is left out. The prompt is the chosen one's messages before its answer.
        json!({
            "env_id": "builtin:arithmetic", "task_id": "t1", "seed": null,
            "prompt": msgs(Some("t1"), 2),
            "chosen": [{"role": "assistant", "content": "4"}],
            "rejected": [{"role": "assistant", "content": "5"}],
            "score_chosen": 1.0, "score_rejected": 0.0,
        }),
        // t2 is tied (no pair); seed 7 has no task, so it is grouped by seed.
        json!({
            "env_id": "builtin:arithmetic", "task_id": null, "seed": 7,
            "prompt": msgs(None, 7),
            "chosen": [{"role": "assistant", "content": "y"}],
            "rejected": [{"role": "assistant", "content": "x"}],
            "score_chosen": 0.8, "score_rejected": 0.2,
        }),
    ];
    let got: Vec<Value> = rows.into_iter().map(Value::Object).collect();
    assert_eq!(got, expected);

    // The same through a file, with what was left out counted.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("runs.jsonl");
    std::fs::write(&input, jsonl(&batch())).unwrap();
    let opts = ExportOptions {
        rows: RowKind::Dpo,
        ..ExportOptions::default()
    };
    let s = export_file(&input, &opts).unwrap();
    assert_eq!((s.rows, s.trajectories), (2, 10));
    assert_eq!(
        s.out,
        dir.path().join("runs.dpo.jsonl").display().to_string()
    );
    let skipped: Vec<(&str, usize)> = s.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        skipped,
        [
            ("failed", 1),
            ("group_without_score_difference", 1),
            ("no_task_or_seed", 1)
        ]
    );
    let written: Vec<Value> = read_jsonl(Path::new(&s.out));
    assert_eq!(written, expected);
}

#[test]
fn sft_keeps_successful_trajectories_at_or_above_the_score() {
    let answers = |min: f64| -> Vec<String> {
        to_rows(batch(), RowKind::Sft, min)
            .unwrap()
            .iter()
            .map(|r| r["messages"][2]["content"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(answers(1.0), ["4", "four", "7", "7", "lost"]);
    assert_eq!(answers(0.5), ["3", "4", "four", "7", "7", "y", "lost"]);
    let r = &to_rows(batch(), RowKind::Sft, 1.0).unwrap()[0];
    assert_eq!(
        Value::Object(r.clone()),
        json!({"env_id": "builtin:arithmetic", "task_id": "t1", "seed": 2, "score": 1.0,
               "messages": [{"role": "system", "content": "Answer with a number."},
                            {"role": "user", "content": "task Some(\"t1\") seed Some(2)"},
                            {"role": "assistant", "content": "4"}]})
    );
    // Raw keeps every trajectory, failed ones included.
    let raw = to_rows(batch(), RowKind::Raw, 1.0).unwrap();
    assert_eq!(raw.len(), 10);
    assert_eq!(raw[4]["ok"], json!(false));
    assert_eq!(raw[4]["error"], json!("EnvironmentError: crashed"));
    assert_eq!(
        (raw[1]["passed"].clone(), raw[1]["n_messages"].clone()),
        (json!(true), json!(3))
    );
}

fn read_jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What pyarrow reads from a Parquet file: its rows and each column's Arrow type.
fn pyarrow_read(python: &str, path: &Path) -> (Vec<Value>, Value) {
    let script = r#"
import json, math, sys
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
fix = lambda v: None if isinstance(v, float) and math.isnan(v) else v
rows = [{k: ([fix(x) for x in v] if isinstance(v, list) else fix(v)) for k, v in r.items()}
        for r in t.to_pylist()]
print(json.dumps({"rows": rows, "types": {f.name: str(f.type) for f in t.schema}}))
"#;
    let v = integrations::python_json(python, script, &[path.to_str().unwrap()]);
    (v["rows"].as_array().unwrap().clone(), v["types"].clone())
}

/// A row as Parquet holds it, back in the JSONL shape: JSON columns' text parsed, and messages
/// without their null fields and with their tool calls parsed.
fn parsed(kind: RowKind, mut row: serde_json::Map<String, Value>) -> Value {
    let text = |v: &Value| serde_json::from_str::<Value>(v.as_str().unwrap()).unwrap();
    for (name, col) in kind.columns() {
        let Some(v) = row.get_mut(*name) else {
            continue;
        };
        match col {
            Col::Json if !v.is_null() => *v = text(v),
            Col::Messages => {
                for m in v.as_array_mut().unwrap() {
                    let m = m.as_object_mut().unwrap();
                    // `content` is always there in the OpenAI shape, null or not.
                    m.retain(|k, f| k == "content" || !f.is_null());
                    if let Some(calls) = m.get_mut("tool_calls") {
                        *calls = text(calls);
                    }
                }
            }
            _ => {}
        }
    }
    Value::Object(row)
}

/// A rollout of builtin:arithmetic by a chat model that returns token ids and logprobs (the
/// vLLM-shaped upstream of tests/traces.rs, through the real Endpoint).
fn token_trajectories() -> Vec<Trajectory> {
    let up = TokenModel::start(History::Keep, |_msgs: &[Value]| Reply::text("42"));
    let policy = Policy::chat(Endpoint::new(&up.base_url, "token-model").capture_tokens(true));
    let env = load("builtin:arithmetic?size=5").unwrap();
    (0..3)
        .map(|seed| {
            env.rollout(
                &policy,
                &RolloutOptions {
                    seed: Some(seed),
                    ..RolloutOptions::default()
                },
            )
        })
        .collect()
}

/// A solved task with a tool call (null content, JSON arguments) and the tool's answer.
fn tool_trajectory() -> Trajectory {
    let mut t = traj(Some("t3"), Some(11), "2", Some(1.0));
    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
        "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 1}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "call_1", "content": "2"});
    let extra: Vec<Message> = [call, result]
        .into_iter()
        .map(|m| serde_json::from_value(m).unwrap())
        .collect();
    t.messages.splice(2..2, extra);
    t
}

fn all_kinds_input(dir: &Path) -> (std::path::PathBuf, Vec<Trajectory>) {
    let mut ts = batch();
    ts.push(tool_trajectory());
    ts.extend(token_trajectories());
    let input = dir.join("runs.jsonl");
    std::fs::write(&input, jsonl(&ts)).unwrap();
    (input, ts)
}

#[test]
fn every_row_kind_round_trips_through_pyarrow() {
    let Some(python) = integrations::python("export") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (input, ts) = all_kinds_input(dir.path());
    for kind in [RowKind::Raw, RowKind::Sft, RowKind::Dpo, RowKind::Tokens] {
        let opts = |to| ExportOptions {
            to,
            rows: kind,
            ..ExportOptions::default()
        };
        let pq = export_file(&input, &opts(Format::Parquet)).unwrap();
        let js = export_file(&input, &opts(Format::Jsonl)).unwrap();
        assert_eq!(pq.rows, js.rows);
        let expected = to_rows(ts.clone(), kind, 1.0).unwrap();
        assert_eq!(expected.len(), pq.rows, "{kind:?}");
        assert!(pq.rows > 0, "{kind:?} wrote no rows");
        let want: Vec<Value> = expected.into_iter().map(Value::Object).collect();
        assert_eq!(read_jsonl(Path::new(&js.out)), want, "{kind:?} JSONL");
        let (rows, types) = pyarrow_read(&python, Path::new(&pq.out));
        let got: Vec<Value> = rows
            .into_iter()
            .map(|r| parsed(kind, r.as_object().unwrap().clone()))
            .collect();
        assert_eq!(got, want, "{kind:?} Parquet read by pyarrow");
        for (name, col) in kind.columns() {
            let arrow = match col {
                Col::Str | Col::Json => "string",
                Col::Int => "int64",
                Col::Float => "double",
                Col::Bool => "bool",
                Col::Ints => "list<element: int64>",
                Col::Floats => "list<element: double>",
                Col::Bools => "list<element: bool>",
                Col::Messages => {
                    "list<element: struct<role: string, content: string, tool_calls: string, \
                     tool_call_id: string> not null>"
                }
            };
            assert_eq!(types[*name], json!(arrow), "{kind:?} column {name}");
        }
    }
}

#[test]
fn token_rows_are_the_training_traces() {
    let ts = token_trajectories();
    let rows = to_rows(ts.clone(), RowKind::Tokens, 1.0).unwrap();
    assert_eq!(rows.len(), 3);
    for (i, (row, t)) in rows.iter().zip(&ts).enumerate() {
        let trace = &trace(t, Turns::Join).unwrap()[0];
        assert!(!trace.is_empty() && trace.sampled() > 0);
        assert_eq!(row["trajectory"], json!(i));
        assert_eq!(row["tokens"], json!(trace.tokens));
        let mask: Vec<bool> = trace.mask.iter().map(|&m| m == 1).collect();
        assert_eq!(row["loss_mask"], json!(mask));
        let logp: Vec<Value> = trace.sampled_logp.iter().map(|&l| Value::from(l)).collect();
        assert_eq!(row["logprobs"], Value::Array(logp));
        // Logprobs exactly where the loss counts.
        let lp = row["logprobs"].as_array().unwrap();
        assert!(mask.iter().zip(lp).all(|(m, l)| *m == l.is_number()));
        assert_eq!(
            row["segment_completion_start"],
            json!([t.model_calls[0].prompt_token_ids.as_ref().unwrap().len()])
        );
    }
    // Trajectories without token ids are left out with the trace's reason.
    let mut maker = nenyax::export::RowMaker::new(RowKind::Tokens, 1.0).unwrap();
    for t in batch() {
        assert!(maker.push(t).is_empty());
    }
    assert_eq!(maker.skipped["no_calls"], 9);
    assert_eq!(maker.skipped["episode_failed"], 1);
}

#[test]
fn the_hf_folder_loads_with_datasets() {
    let Some(python) = integrations::python("export") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (input, ts) = all_kinds_input(dir.path());
    let out = dir.path().join("ds");
    let st = nenyax(&[
        "export",
        input.to_str().unwrap(),
        "--to",
        "hf",
        "--rows",
        "sft",
        "--min-score",
        "0.5",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let line = String::from_utf8_lossy(&st.stdout);
    assert!(
        line.starts_with(&format!(
            "wrote 8 sft rows from {} trajectories to ",
            ts.len()
        )),
        "{line}"
    );
    assert!(out.join("data/train-00000-of-00001.parquet").is_file());
    let script = r#"
import json, sys
import datasets
ds = datasets.load_dataset(sys.argv[1])
print(json.dumps({"splits": list(ds), "rows": list(ds["train"]),
                  "features": {k: str(v) for k, v in ds["train"].features.items()}}))
"#;
    let o = Command::new(&python)
        .args(["-c", script])
        .arg(&out)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf-home"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["splits"], json!(["train"]));
    let want: Vec<Value> = to_rows(ts, RowKind::Sft, 0.5)
        .unwrap()
        .into_iter()
        .map(Value::Object)
        .collect();
    let got: Vec<Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| parsed(RowKind::Sft, r.as_object().unwrap().clone()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(v["features"]["score"], json!("Value('float64')"));
    // Messages are a list of structs, the shape chat templates read.
    assert!(
        v["features"]["messages"]
            .as_str()
            .unwrap()
            .starts_with("List({'role': Value('string'), 'content': Value('string')"),
        "{}",
        v["features"]["messages"]
    );
}

fn nenyax(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .env_remove("HF_TOKEN")
        .output()
        .unwrap()
}

/// The CLI fails with one line on stderr, exit status 2, naming `what`.
fn fails_with(o: &std::process::Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(what), "{err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("runs.jsonl");
    std::fs::write(&input, jsonl(&batch()[..2]) + "not json\n").unwrap();
    let p = input.to_str().unwrap();
    let e = export_file(&input, &ExportOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("runs.jsonl line 3 is not a trajectory"),
        "{e}"
    );
    // Nothing half-written is left behind.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1);

    fails_with(&nenyax(&["export", p]), "line 3 is not a trajectory");
    fails_with(
        &nenyax(&["export", p, "--rows", "ppo"]),
        "ConfigError: unknown rows `ppo`: use one of raw, sft, dpo, tokens",
    );
    fails_with(
        &nenyax(&["export", p, "--to", "csv"]),
        "unknown export format `csv`",
    );
    fails_with(
        &nenyax(&["export", p, "--to", "atif", "--rows", "sft"]),
        "ConfigError: ATIF documents are whole trajectories, not sft rows",
    );
    fails_with(
        &nenyax(&["export", "/nonexistent/runs.jsonl"]),
        "IoError: reading /nonexistent/runs.jsonl",
    );
    fails_with(
        &nenyax(&["export", p, "--min-score", "nan", "--rows", "sft"]),
        "min_score must be a finite number",
    );
    fails_with(
        &nenyax(&["export", p, "--to", "hf", "--push-to-hub", "me/ds"]),
        "ConfigError: pushing to the Hugging Face Hub needs a token: set HF_TOKEN",
    );
    fails_with(
        &nenyax(&["export", p, "--push-to-hub", "me/ds"]),
        "use it with --to hf",
    );
    let opts = serde_json::from_str(r#"{"to": "parquet", "rowz": "raw"}"#).unwrap();
    let e = ExportOptions::from_json(&opts).unwrap_err();
    assert!(
        e.to_string().contains("unknown export option `rowz`"),
        "{e}"
    );
}

/// The upload goes through huggingface_hub; this machine cannot reach the Hub, so only the
/// unreachable case is tested (HF_ENDPOINT at a closed local port).
#[test]
fn push_to_an_unreachable_hub_is_one_line() {
    let Some(python) = integrations::python("export") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("runs.jsonl");
    std::fs::write(&input, jsonl(&batch())).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(["export", input.to_str().unwrap(), "--to", "hf"])
        .args(["--push-to-hub", "nenyax-test/ds"])
        .env("HF_TOKEN", "hf_not_a_real_token")
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("HF_HUB_ETAG_TIMEOUT", "2")
        .env("NENYAX_PYTHON", &python)
        .output()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/datasets/nenyax-test/ds");
    fails_with(
        &o,
        &format!("EndpointError: endpoint {url}: upload failed: "),
    );
    // The folder was still written before the upload was tried.
    assert!(dir.path().join("runs.raw/README.md").is_file());
}

/// More rows than one row group holds (16,384): the file has two groups and every row.
#[test]
fn large_exports_span_row_groups() {
    let Some(python) = integrations::python("export") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ts: Vec<Trajectory> = (0..16_500)
        .map(|i| traj(Some(&format!("t{i}")), Some(i), &i.to_string(), Some(1.0)))
        .collect();
    let input = dir.path().join("runs.jsonl");
    std::fs::write(&input, jsonl(&ts)).unwrap();
    let opts = ExportOptions {
        to: Format::Parquet,
        rows: RowKind::Sft,
        ..ExportOptions::default()
    };
    let s = export_file(&input, &opts).unwrap();
    assert_eq!(s.rows, 16_500);
    let script = r#"
import json, sys
import pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1])
t = f.read()
print(json.dumps({"groups": f.num_row_groups, "rows": t.num_rows,
                  "seeds": t.column("seed").to_pylist(),
                  "last": t.column("messages")[-1].as_py()[-1]["content"]}))
"#;
    let o = Command::new(&python)
        .args(["-c", script, &s.out])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["groups"].clone(), v["rows"].clone()),
        (json!(2), json!(16_500))
    );
    let seeds: Vec<i64> = (0..16_500).collect();
    assert_eq!(v["seeds"], json!(seeds));
    assert_eq!(v["last"], json!("16499"));
}

/// `--to atif` writes NeMo Gym's layout (one document per trajectory and a manifest), and
/// `nenyax import atif` reads the folder back into the same conversations and scores.
#[test]
fn atif_export_round_trips_through_import() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("runs.jsonl");
    let trajs = batch();
    std::fs::write(&input, jsonl(&trajs)).unwrap();
    let out = dir.path().join("runs.atif");
    let o = nenyax(&["export", input.to_str().unwrap(), "--to", "atif"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains(&format!("wrote {} ATIF documents", trajs.len())));
    let manifest = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap();
    assert_eq!(manifest.lines().count(), trajs.len());
    let back = dir.path().join("back.jsonl");
    let o = nenyax(&[
        "import",
        "atif",
        out.to_str().unwrap(),
        "-o",
        back.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let back: Vec<Trajectory> = std::fs::read_to_string(&back)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(back.len(), trajs.len());
    for (a, b) in trajs.iter().zip(&back) {
        assert_eq!(a.score(), b.score());
        let text = |t: &Trajectory| -> Vec<String> {
            t.messages
                .iter()
                .map(|m| m.text().unwrap_or_default())
                .collect()
        };
        assert_eq!(text(a), text(b));
    }
}

/// Real step-mode rollouts exported as ATIF and imported with `--rejudge`: the environment's
/// own judge, replaying the recorded actions, agrees with the recorded scores, and an answer
/// changed in the file is judged wrong.
#[test]
fn atif_of_real_rollouts_is_rejudged_by_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (runs, atif) = (dir.path().join("runs.jsonl"), dir.path().join("runs.atif"));
    let uri = "builtin:arithmetic?size=20";
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    ok(nenyax(&[
        "run",
        uri,
        "-n",
        "4",
        "--out",
        runs.to_str().unwrap(),
    ]));
    ok(nenyax(&["export", runs.to_str().unwrap(), "--to", "atif"]));
    let back = dir.path().join("back.jsonl");
    let said = ok(nenyax(&[
        "import",
        "atif",
        atif.to_str().unwrap(),
        "-o",
        back.to_str().unwrap(),
        "--rejudge",
        uri,
    ]));
    assert!(said.contains("4 judged, mean score 1.000"), "{said}");
    let first = atif.join("0-0.json");
    let doc = std::fs::read_to_string(&first).unwrap();
    // The recorded answer, changed to a wrong number everywhere the document holds it.
    // (The agent's message is the one that starts with the tag; the prompt only mentions it.)
    let start = doc.find("\"<answer>").unwrap() + "\"<answer>".len();
    let right = &doc[start..start + doc[start..].find('<').unwrap()];
    let wrong_answer = (right.parse::<i64>().unwrap() + 1).to_string();
    let wrong = dir.path().join("wrong.json");
    let tampered = doc.replace(
        &format!("<answer>{right}</answer>"),
        &format!("<answer>{wrong_answer}</answer>"),
    );
    assert_ne!(tampered, doc);
    std::fs::write(&wrong, tampered).unwrap();
    let said = ok(nenyax(&[
        "import",
        "atif",
        wrong.to_str().unwrap(),
        "-o",
        "-",
        "--rejudge",
        uri,
    ]));
    assert!(said.contains("1 judged, mean score 0.000"), "{said}");
}
