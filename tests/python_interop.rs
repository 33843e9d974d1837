//! The contract's JSON is interchangeable with the Python reference implementation
//! (`nenyax==0.1.0a1`): Rust reads what Python writes, Python reads what Rust writes, and
//! environments defined the same way on both sides produce the same trajectories.
//!
//! These tests run the real reference package through the interpreter named by
//! `NENYAX_TEST_PYTHON`; `scripts/test.sh` creates one (`.venv`) and sets the variable.
//! The Python halves live in `tests/python/`.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nenyax::define::{stateful, TaskEnvBuilder};
use nenyax::{
    load, FunctionModel, JsonMap, JudgeSource, Judgment, Manifest, Message, Policy, Role,
    RolloutOptions, TaskRef, ToolCall, Trajectory,
};

// ---------------------------------------------------------------------------------------------
// helpers

/// The interpreter with the reference package; a missing variable fails the test, never skips it.
fn python() -> PathBuf {
    match std::env::var_os("NENYAX_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "NENYAX_TEST_PYTHON is not set. These tests check JSON interchange with the Python \
             reference implementation (nenyax==0.1.0a1): run `scripts/test.sh`, which creates \
             .venv with it and sets the variable, or point NENYAX_TEST_PYTHON at a python that \
             can `import nenyax`."
        ),
    }
}

/// Run `tests/python/<script>` with `args` and return its stdout; failure shows its stderr.
fn run_python(script: &str, args: &[&Path]) -> String {
    let py = python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(&py)
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (NENYAX_TEST_PYTHON): {e}", py.display()));
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}",
        py.display(),
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_jsonl<T: Serialize>(path: &Path, items: &[T]) {
    let text: String = items
        .iter()
        .map(|t| serde_json::to_string(t).expect("serialises") + "\n")
        .collect();
    std::fs::write(path, text).expect("write jsonl");
}

/// Where two JSON values differ. Numbers compare by value, so `1` equals `1.0` and floats may
/// differ by the last bit or two of formatting (serde_json's parser is not always
/// correctly rounded without its `float_roundtrip` feature).
fn json_diffs(path: &str, rust: &Value, python: &Value, out: &mut Vec<String>) {
    match (rust, python) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => json_diffs(&format!("{path}.{k}"), x, y, out),
                    (x, y) => out.push(format!("{path}.{k}: rust {x:?}, python {y:?}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                json_diffs(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let same = match (x.as_i64(), y.as_i64()) {
                (Some(a), Some(b)) => a == b,
                _ => {
                    let (a, b) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                    a == b || (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs())
                }
            };
            if !same {
                out.push(format!("{path}: rust {x}, python {y}"));
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: rust {a}, python {b}")),
    }
}

fn assert_same_json(what: &str, rust: &Value, python: &Value) {
    let mut diffs = Vec::new();
    json_diffs("$", rust, python, &mut diffs);
    assert!(
        diffs.is_empty(),
        "{what}: Rust and Python JSON differ:\n  {}\nrust:   {rust}\npython: {python}",
        diffs.join("\n  ")
    );
}

/// Parse `python` as `T` and check that serialising it again gives the same JSON.
fn round_trip<T: DeserializeOwned + Serialize>(what: &str, python: &Value) -> T {
    let parsed: T = serde_json::from_value(python.clone())
        .unwrap_or_else(|e| panic!("{what}: Rust cannot read Python's JSON: {e}\n{python}"));
    assert_same_json(what, &serde_json::to_value(&parsed).unwrap(), python);
    parsed
}

fn roles(messages: &[Message]) -> Vec<Role> {
    messages.iter().map(|m| m.role).collect()
}

fn obj(v: Value) -> JsonMap {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// Drop the fields that depend on when and how fast an episode ran.
fn untimed(t: &Trajectory) -> Value {
    let mut v = serde_json::to_value(t).unwrap();
    let m = v.as_object_mut().unwrap();
    for k in ["started_at", "duration_s", "metadata"] {
        m.remove(k);
    }
    v
}

// ---------------------------------------------------------------------------------------------
// a. Python writes, Rust reads

struct Reference {
    trajectories: BTreeMap<String, (Trajectory, Value)>,
    manifests: Vec<(Manifest, Value)>,
    pairs: Vec<Value>,
}

fn python_reference() -> Reference {
    let dir = tempfile::tempdir().unwrap();
    run_python("write_reference.py", &[dir.path()]);
    let mut trajectories = BTreeMap::new();
    for line in lines(&dir.path().join("trajectories.jsonl")) {
        let t = Trajectory::from_json(&line)
            .unwrap_or_else(|e| panic!("Rust cannot read a Python trajectory: {e}\n{line}"));
        let v: Value = serde_json::from_str(&line).unwrap();
        let case = t.metadata["case"].as_str().expect("case").to_string();
        // Re-serialising from Rust, then parsing, gives back what Python wrote.
        let again: Value = serde_json::from_str(&t.to_json()).unwrap();
        assert_same_json(&format!("trajectory `{case}`"), &again, &v);
        trajectories.insert(case, (t, v));
    }
    let manifests = lines(&dir.path().join("manifests.jsonl"))
        .iter()
        .map(|line| {
            let m: Manifest = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("Rust cannot read a Python manifest: {e}\n{line}"));
            let v: Value = serde_json::from_str(line).unwrap();
            assert_same_json(
                &format!("manifest {}", m.id),
                &serde_json::to_value(&m).unwrap(),
                &v,
            );
            (m, v)
        })
        .collect();
    let pairs = lines(&dir.path().join("pairs.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Reference {
        trajectories,
        manifests,
        pairs,
    }
}

#[test]
fn python_trajectories_read_in_rust_and_round_trip() {
    let r = python_reference();
    let t = |case: &str| &r.trajectories[case].0;
    assert_eq!(r.trajectories.len(), 8, "{:?}", r.trajectories.keys());

    let single = t("single_action");
    assert!(single.ok());
    assert_eq!(single.score(), Some(1.0));
    assert_eq!(single.steps[0].action, json!("Paris"));
    let task = single.task.as_ref().unwrap();
    assert_eq!(
        (task.id.as_str(), task.split.as_deref()),
        ("0", Some("test"))
    );
    assert_eq!(task.metadata["answer"], "Paris");
    let j = single.judgment.as_ref().unwrap();
    assert_eq!(
        (j.source, j.judge.as_deref()),
        (JudgeSource::Verifier, Some("capitals.score"))
    );
    assert_eq!(t("single_null").score(), Some(0.0));

    let chat = t("single_chat");
    assert_eq!(chat.score(), Some(1.0));
    assert_eq!(roles(&chat.messages), [Role::User, Role::Assistant]);
    assert_eq!(chat.final_text(), "It is Paris (1)");
    assert_eq!(chat.model_calls.len(), 1);
    let resp = chat.model_calls[0].response.as_ref().unwrap();
    assert_eq!(resp["choices"][0]["message"]["content"], "It is Paris (1)");

    // A model that replied with tool calls in both shapes plus a non-standard field.
    let tools = t("tool_calls");
    assert_eq!(roles(&tools.messages), [Role::User, Role::Assistant]);
    let reply = &tools.messages[1];
    assert!(reply.content.is_null());
    assert_eq!(reply.extra["reasoning_content"], "I should look it up.");
    let calls = reply.tool_calls.as_ref().unwrap();
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["lookup", "note"]);
    assert_eq!(calls[0].id.as_deref(), Some("call_1"));
    assert_eq!(calls[0].arguments, json!("{\"city\": \"Paris\"}"));
    assert_eq!(calls[1].id, None);
    assert_eq!(
        calls[1].arguments,
        json!({"text": "contract shape", "n": 2})
    );
    assert_eq!(tools.model_calls.len(), 1);
    // The recorded response keeps OpenAI's wire shape, which Rust's ToolCall also reads.
    let wire = &tools.model_calls[0].response.as_ref().unwrap()["choices"][0]["message"];
    let wire: Vec<ToolCall> = serde_json::from_value(wire["tool_calls"].clone()).unwrap();
    assert_eq!(wire[0], calls[0]);
    assert_eq!(wire[1].name, "note");
    assert_eq!(
        wire[1].arguments,
        json!("{\"text\": \"contract shape\", \"n\": 2}")
    );

    let multi = t("multi_turn");
    assert_eq!(multi.score(), Some(1.0));
    let rewards: Vec<f64> = multi.steps.iter().map(|s| s.reward).collect();
    assert_eq!(rewards, [0.0, 0.0, 1.0]);
    assert!(multi.steps[2].terminated);
    assert_eq!(multi.steps[0].observation.data, json!({"n": 1}));
    assert_eq!(
        multi.steps[1].observation.text.as_deref(),
        Some("The count is 2.")
    );
    assert_eq!(multi.judgment.as_ref().unwrap().source, JudgeSource::Env);

    let multi_chat = t("multi_turn_chat");
    assert_eq!(multi_chat.score(), Some(1.0));
    assert_eq!(multi_chat.steps.len(), 4);
    assert_eq!(multi_chat.model_calls.len(), 4);
    assert_eq!(
        roles(&multi_chat.messages),
        [Role::User, Role::Assistant].repeat(4)
    );
    assert_eq!(multi_chat.messages[2].text().as_deref(), Some("{\"n\": 1}"));

    let raised = t("raised");
    assert!(!raised.ok());
    assert_eq!(
        raised.error.as_deref(),
        Some("ValueError: the counter exploded")
    );
    assert!(raised.judgment.is_none());
    assert_eq!(raised.score(), None);
    assert_eq!(raised.steps.len(), 1);
    assert!(raised.metadata["traceback"]
        .as_str()
        .unwrap()
        .contains("ValueError"));

    let j = t("judged").judgment.as_ref().unwrap();
    assert_eq!(
        (j.score, j.passed, j.source),
        (0.75, Some(true), JudgeSource::Rubric)
    );
    assert_eq!(j.judge.as_deref(), Some("rubric:v1"));
    assert_eq!(
        Value::Object(j.components.clone()),
        json!({"answer": 1.0, "format": 0.5, "length": -0.25})
    );
    assert_eq!(j.details["nested"], json!({"none": null, "n": 3}));
}

#[test]
fn python_manifests_read_in_rust_and_round_trip() {
    use nenyax::{Isolation, Mode, Requirement, RewardTiming, Risk, TokenCapture};
    let r = python_reference();
    let ids: Vec<&str> = r.manifests.iter().map(|(m, _)| m.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "defined:capitals",
            "defined:counter",
            "example:full?level=2",
            "example:loop"
        ]
    );
    let (capitals, counter) = (&r.manifests[0].0, &r.manifests[1].0);
    assert_eq!((capitals.mode, capitals.num_tasks), (Mode::Step, Some(2)));
    assert_eq!(capitals.capabilities.reward_timing, RewardTiming::Terminal);
    assert_eq!(counter.capabilities.reward_timing, RewardTiming::PerStep);

    let full = &r.manifests[2].0;
    let c = &full.capabilities;
    assert_eq!(full.mode, Mode::Task);
    assert!(!c.resettable && c.branchable && c.real_world && c.text);
    assert_eq!((c.max_parallel, c.participants), (Some(4), 2));
    assert_eq!(c.risk, Risk::Irreversible);
    assert_eq!(
        (c.isolation, c.token_capture),
        (Isolation::Microvm, TokenCapture::Proxy)
    );
    assert_eq!(
        c.requires,
        [
            Requirement::Docker,
            Requirement::Network,
            Requirement::Gpu,
            Requirement::ModelEndpoint,
            Requirement::ApiKey
        ]
    );
    assert_eq!(full.extra["weights"], json!([0.5, 1]));
    assert_eq!(r.manifests[3].0.mode, Mode::Rollout);
}

/// Hand-written inputs (OpenAI wire shapes, missing optional fields, integer scores): Rust must
/// read each one into the same contract value that the reference model makes of it.
#[test]
fn raw_inputs_normalise_the_same_way_in_rust_and_python() {
    fn both<T: DeserializeOwned + Serialize>(what: &str, raw: &Value, python: &Value) {
        let from_raw: T = serde_json::from_value(raw.clone())
            .unwrap_or_else(|e| panic!("{what}: Rust rejects input Python accepts: {e}\n{raw}"));
        assert_same_json(what, &serde_json::to_value(&from_raw).unwrap(), python);
        round_trip::<T>(what, python);
    }
    let r = python_reference();
    assert_eq!(r.pairs.len(), 12);
    for p in &r.pairs {
        let what = format!(
            "{} `{}`",
            p["type"].as_str().unwrap(),
            p["case"].as_str().unwrap()
        );
        let (raw, py) = (&p["raw"], &p["python"]);
        match p["type"].as_str().unwrap() {
            "Message" => both::<Message>(&what, raw, py),
            "Judgment" => both::<Judgment>(&what, raw, py),
            "Manifest" => both::<Manifest>(&what, raw, py),
            "TaskRef" => both::<TaskRef>(&what, raw, py),
            "Trajectory" => both::<Trajectory>(&what, raw, py),
            other => panic!("unknown type {other}"),
        }
    }
    let wire: Message = serde_json::from_value(r.pairs[0]["raw"].clone()).unwrap();
    let calls = wire.tool_calls.unwrap();
    assert_eq!(
        (calls[0].name.as_str(), calls[1].name.as_str()),
        ("add", "noargs")
    );
    assert_eq!(wire.extra["token_ids"], json!([1, 2]));
}

/// The same environment, defined with each implementation's `define`, plays the same episode.
#[test]
fn environments_defined_alike_play_alike() {
    let r = python_reference();
    let rows = vec![
        obj(json!({"prompt": "Capital of France?", "answer": "Paris"})),
        obj(json!({"prompt": "Capital of Kenya?", "answer": "Nairobi"})),
    ];
    let capitals = TaskEnvBuilder::new("capitals", rows, |row, reply| {
        let answer = row["answer"].as_str().unwrap_or_default().to_lowercase();
        Ok(if reply.to_lowercase().contains(&answer) {
            1.0
        } else {
            0.0
        })
    })
    .reference(|row| row["answer"].as_str().map(str::to_string))
    .build()
    .unwrap();
    assert_same_json(
        "manifest of define(\"capitals\")",
        &serde_json::to_value(capitals.manifest()).unwrap(),
        &r.manifests[0].1,
    );

    let (py, _) = &r.trajectories["single_action"];
    let opts = RolloutOptions::new(py.task.clone(), py.seed);
    let rs = capitals.rollout(&capitals.reference_policy(None).unwrap(), &opts);
    assert_same_json("single-turn oracle rollout", &untimed(&rs), &untimed(py));

    // A chat model: the same conversation (the recorded calls' bodies are each side's own).
    let (py, _) = &r.trajectories["single_chat"];
    let model = FunctionModel::new("m", |msgs| Ok(format!("It is Paris ({})", msgs.len())));
    let mut rs = capitals.rollout(
        &Policy::chat(model),
        &RolloutOptions::new(py.task.clone(), py.seed),
    );
    assert_eq!(rs.model_calls.len(), py.model_calls.len());
    rs.model_calls.clone_from(&py.model_calls);
    assert_same_json("single-turn chat rollout", &untimed(&rs), &untimed(py));

    let counter = stateful(
        "counter",
        |seed| Ok(json!({"n": 0, "target": 3 + seed.rem_euclid(2)})),
        |s| {
            let n = s["n"].as_i64().unwrap();
            Ok(if n % 2 == 0 {
                json!(format!("The count is {n}."))
            } else {
                json!({"n": n})
            })
        },
        |s, _action| {
            let n = s["n"].as_i64().unwrap() + 1;
            s["n"] = json!(n);
            let target = s["target"].as_i64().unwrap();
            Ok((if n == target { 1.0 } else { 0.0 }, n >= target))
        },
        10,
    );
    assert_same_json(
        "manifest of define(\"counter\")",
        &serde_json::to_value(counter.manifest()).unwrap(),
        &r.manifests[1].1,
    );
    let (py, _) = &r.trajectories["multi_turn"];
    let rs = counter.rollout(
        &Policy::constant(json!("inc")),
        &RolloutOptions::new(None, py.seed),
    );
    let (mut rs, mut py) = (untimed(&rs), untimed(py));
    // Known divergence, not a wire incompatibility: the default judgment of a multi-turn
    // episode names its judge "env.return" in Rust and leaves it null in Python.
    rs["judgment"]["judge"] = Value::Null;
    py["judgment"]["judge"] = Value::Null;
    assert_same_json("multi-turn rollout", &rs, &py);
}

// ---------------------------------------------------------------------------------------------
// b. Rust writes, Python reads

/// Run `read_rust.py` on the files and return its summary.
fn python_reads(trajectories: &Path, manifests: Option<&Path>) -> Value {
    let mut args = vec![trajectories];
    args.extend(manifests);
    let out = run_python("read_rust.py", &args);
    let summary: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("read_rust.py printed no JSON summary ({e}):\n{out}"));
    for entry in summary["trajectories"]
        .as_array()
        .unwrap()
        .iter()
        .chain(summary["manifests"].as_array().unwrap())
    {
        assert_eq!(
            entry["valid"], true,
            "the reference rejects what Rust wrote: {entry}"
        );
        assert_eq!(
            entry["diffs"],
            json!([]),
            "the reference re-serialises differently: {entry}"
        );
    }
    summary
}

/// A chat model that actually does the sums in `builtin:arithmetic` prompts.
fn calculator() -> FunctionModel {
    FunctionModel::new("calculator", |msgs| {
        let prompt = msgs.last().and_then(Message::text).unwrap_or_default();
        let expr = prompt
            .strip_prefix("What is ")
            .and_then(|s| s.split('?').next())
            .ok_or_else(|| nenyax::Error::Policy(format!("not a sum: {prompt}")))?;
        let parts: Vec<&str> = expr.split(' ').collect();
        let (a, b): (i64, i64) = (parts[0].parse().unwrap(), parts[2].parse().unwrap());
        let answer = match parts[1] {
            "+" => a + b,
            "-" => a - b,
            _ => a * b,
        };
        Ok(format!("Let me think. <answer>{answer}</answer>"))
    })
}

#[test]
fn rust_trajectories_and_manifests_validate_in_python() {
    let arithmetic = load("builtin:arithmetic?size=20").unwrap();
    let guess = load("builtin:guess?size=10&high=100").unwrap();
    let mut trajectories = Vec::new();
    let mut add = |case: &str, mut t: Trajectory| {
        t.metadata.insert("case".into(), json!(case));
        trajectories.push(t);
    };
    let (oracle, null) = (
        arithmetic.reference_policy(None).unwrap(),
        arithmetic.null_policy(None).unwrap(),
    );
    for seed in 0..5 {
        let opts = RolloutOptions::new(None, Some(seed));
        add("arithmetic_oracle", arithmetic.rollout(&oracle, &opts));
        add("arithmetic_null", arithmetic.rollout(&null, &opts));
    }
    let (oracle, null) = (
        guess.reference_policy(None).unwrap(),
        guess.null_policy(None).unwrap(),
    );
    for seed in 0..3 {
        let opts = RolloutOptions::new(None, Some(seed));
        add("guess_oracle", guess.rollout(&oracle, &opts));
        add("guess_null", guess.rollout(&null, &opts));
    }
    let chat = arithmetic.rollout(
        &Policy::chat(calculator()),
        &RolloutOptions::new(None, Some(7)),
    );
    assert!(chat.ok(), "{:?}", chat.error);
    add("arithmetic_chat", chat.clone());
    // A number where the reply text should be: InvalidAction, recorded, not raised.
    let failed = arithmetic.rollout(
        &Policy::constant(json!(42)),
        &RolloutOptions::new(None, Some(1)),
    );
    assert!(failed
        .error
        .as_deref()
        .unwrap()
        .starts_with("InvalidAction: "));
    add("arithmetic_invalid_action", failed);
    // Everything a chat transcript can hold, in the contract's shapes.
    let mut rich = chat;
    let mut call = Message::assistant("");
    call.content = Value::Null;
    call.extra
        .insert("reasoning_content".into(), json!("use the tool"));
    call.tool_calls = Some(vec![
        ToolCall {
            id: Some("call_1".into()),
            name: "add".into(),
            arguments: json!({"a": 1}),
        },
        ToolCall {
            id: None,
            name: "raw".into(),
            arguments: json!("{\"a\": 1}"),
        },
    ]);
    let mut result = Message::new(Role::Tool, "2");
    result.tool_call_id = Some("call_1".into());
    rich.messages.extend([call, result]);
    let mut j = Judgment::new(0.5, JudgeSource::Rubric, "rubric:v1")
        .unwrap()
        .with_passed(false);
    j.components.insert("format".into(), json!(1.0));
    j.components.insert("answer".into(), json!(0.0));
    rich.judgment = Some(j.with_detail("nested", json!({"a": [1, null]})));
    add("rich", rich);

    let manifests: Vec<Manifest> = [
        "builtin:arithmetic",
        "builtin:arithmetic?size=5&digits=3&ops=%2B",
        "builtin:guess",
        "builtin:guess?high=7&max_guesses=3",
    ]
    .iter()
    .map(|uri| load(uri).unwrap().manifest().clone())
    .collect();

    let dir = tempfile::tempdir().unwrap();
    let (tpath, mpath) = (dir.path().join("t.jsonl"), dir.path().join("m.jsonl"));
    write_jsonl(&tpath, &trajectories);
    write_jsonl(&mpath, &manifests);
    let summary = python_reads(&tpath, Some(&mpath));

    assert_eq!(summary["count"], trajectories.len());
    let mut by_case: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for e in summary["trajectories"].as_array().unwrap() {
        by_case
            .entry(e["case"].as_str().unwrap())
            .or_default()
            .push(e);
    }
    let scores =
        |case: &str| -> Vec<Value> { by_case[case].iter().map(|e| e["score"].clone()).collect() };
    let oks = |case: &str| by_case[case].iter().all(|e| e["ok"] == true);
    assert_eq!(scores("arithmetic_oracle"), vec![json!(1.0); 5]);
    assert_eq!(scores("arithmetic_null"), vec![json!(0.0); 5]);
    assert_eq!(scores("guess_oracle"), vec![json!(1.0); 3]);
    assert_eq!(scores("guess_null"), vec![json!(0.0); 3]);
    assert!(
        oks("arithmetic_oracle")
            && oks("arithmetic_null")
            && oks("guess_oracle")
            && oks("guess_null")
    );
    assert!(by_case["guess_null"].iter().all(|e| e["steps"] == 10));

    let chat = by_case["arithmetic_chat"][0];
    assert_eq!(
        (chat["score"].clone(), chat["ok"].clone()),
        (json!(1.0), json!(true))
    );
    assert_eq!(chat["messages"], json!(["user", "assistant"]));
    assert_eq!(chat["model_calls"], 1);

    let failed = by_case["arithmetic_invalid_action"][0];
    assert_eq!(
        (failed["ok"].clone(), failed["score"].clone()),
        (json!(false), Value::Null)
    );
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .starts_with("InvalidAction: "),
        "{failed}"
    );

    let rich = by_case["rich"][0];
    assert_eq!(
        rich["messages"],
        json!(["user", "assistant", "assistant", "tool"])
    );
    assert_eq!(rich["score"], 0.5);

    let ids: Vec<Value> = summary["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    let want: Vec<Value> = manifests.iter().map(|m| json!(m.id)).collect();
    assert_eq!(ids, want);
}

// ---------------------------------------------------------------------------------------------
// c. The CLI's output

fn cli_run_validates_in_python(policy: &str, score: f64) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.jsonl");
    let run = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args([
            "run",
            "builtin:arithmetic",
            "--policy",
            policy,
            "-n",
            "1000",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("the nenyax binary runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary = python_reads(&out, None);
    assert_eq!(summary["count"], 1000);
    for e in summary["trajectories"].as_array().unwrap() {
        assert_eq!(e["score"], score, "{e}");
        assert_eq!(e["ok"], true, "{e}");
        assert_eq!(e["env_id"], "builtin:arithmetic", "{e}");
    }
}

#[test]
fn cli_oracle_run_validates_in_python() {
    cli_run_validates_in_python("oracle", 1.0);
}

#[test]
fn cli_null_run_validates_in_python() {
    cli_run_validates_in_python("null", 0.0);
}
