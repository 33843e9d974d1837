//! `nenyax train` as a user runs it: every example config checked, the CartPole demonstrations
//! with the built-in policy (Gymnasium through the bridge; `scripts/test.sh` sets
//! `NENYAX_PYTHON`, and without it these tests fail saying so), in-context learning against a
//! local scripted OpenAI-compatible server, and the errors a user meets.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nenyax::train::RunConfig;

fn nenyax(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .output()
        .expect("the nenyax binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn python() -> String {
    std::env::var("NENYAX_PYTHON").unwrap_or_else(|_| {
        panic!(
            "NENYAX_PYTHON is not set: run scripts/test.sh, which installs gymnasium into .venv \
             and points NENYAX_PYTHON at it"
        )
    })
}

fn configs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn config(name: &str) -> String {
    format!("{}/examples/configs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Every file in examples/configs loads through the library and through `--dry-run`, and says
/// what each of its knobs is for; a new example is checked without touching this test.
#[test]
fn every_example_config_loads_and_validates() {
    let files = configs();
    assert!(files.len() >= 4, "{files:?}");
    for f in &files {
        let c = RunConfig::load(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let j = c.to_json();
        assert!(j["env"]["uri"].is_string(), "{}: {j}", f.display());
        assert!(j["learner"]["use"].is_string(), "{}: {j}", f.display());
        let o = nenyax(&["train", "--config", f.to_str().unwrap(), "--dry-run"]);
        assert!(o.status.success(), "{}: {}", f.display(), text(&o.stderr));
        let printed: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(printed, j, "{}", f.display());
        // Commented: more comment lines than the file has sections.
        let body = std::fs::read_to_string(f).unwrap();
        let comments = body.lines().filter(|l| l.trim().starts_with('#')).count();
        let sections = body.lines().filter(|l| l.starts_with('[')).count();
        assert!(comments > sections, "{}: explain the knobs", f.display());
    }
}

/// The report's per-round scores, which a rerun with the same seed must reproduce exactly.
fn curve(report: &Value) -> Vec<(Value, Value, Value)> {
    report["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["train_score"].clone(),
                r["eval_score"].clone(),
                r["outcome"].clone(),
            )
        })
        .collect()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Spawn `nenyax train ...` with the bridge's interpreter.
fn spawn_train(args: &[String]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .arg("train")
        .args(args)
        .env("NENYAX_PYTHON", python())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(name: &str, child: std::process::Child) -> Output {
    let o = child.wait_with_output().unwrap();
    eprintln!("--- {name}\n{}", text(&o.stdout));
    assert!(
        o.status.success(),
        "{name}: {}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// The README's command: GRPO with the built-in softmax policy takes CartPole-v1 from a random
/// policy's return past Gymnasium's solved threshold (195), with every knob at its default. The example config describes the same run and, with the
/// same seed, gives the same numbers on one thread (a flag over the file's 2) as the plain
/// command on one per core.
#[test]
fn cartpole_grpo_from_the_plain_command_solves_and_its_config_reproduces_it() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("plain"), dir.path().join("config"));
    let plain = spawn_train(&[
        "gymnasium:CartPole-v1".into(),
        "--learner".into(),
        "grpo".into(),
        "--out".into(),
        a.display().to_string(),
        "--plot".into(),
    ]);
    let from_file = spawn_train(&[
        "--config".into(),
        config("cartpole-grpo.toml"),
        "--concurrency".into(),
        "1".into(),
        "--out".into(),
        b.display().to_string(),
    ]);
    let o = finish("plain", plain);
    finish("config", from_file);
    // One progress line per round (and the baseline) on stderr, as the rounds finish.
    let err = text(&o.stderr);
    assert_eq!(
        err.lines().filter(|l| l.starts_with("round ")).count(),
        20,
        "{err}"
    );
    assert!(err.lines().any(|l| l.starts_with("baseline")), "{err}");
    let report = read_json(&a.join("report.json"));
    let (start, end, best) = (
        report["baseline"].as_f64().unwrap(),
        report["final_eval"].as_f64().unwrap(),
        report["best"].as_f64().unwrap(),
    );
    eprintln!("grpo: held-out {start:.1} -> {end:.1} (best {best:.1})");
    assert!(
        end >= 5.0 * start,
        "held-out {start} -> {end}: less than 5x"
    );
    assert!(end >= 195.0, "held-out {start} -> {end}: not solved (195)");
    assert!(std::fs::read_to_string(a.join("curve.svg"))
        .unwrap()
        .starts_with("<svg"));
    assert!(std::fs::read_to_string(a.join("report.txt"))
        .unwrap()
        .contains("held-out"));
    let again = read_json(&b.join("report.json"));
    assert_eq!(curve(&again), curve(&report), "same seed, other numbers");
    assert_eq!(again["options"]["concurrency"], 1);
    assert_eq!(report["options"]["concurrency"], 0);
}

/// REINFORCE (batch-mean baseline) and RLOO (leave-one-out) on the same environment, with the
/// same command but the learner's name and 12 rounds (REINFORCE's episodes reach CartPole's
/// 500-step limit by then, the costly part; seed 0 gives 24 -> 500 and 24 -> 131).
#[test]
fn reinforce_and_rloo_raise_cartpole_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<(&str, std::process::Child)> = ["reinforce", "rloo"]
        .iter()
        .map(|l| {
            let out = dir.path().join(l).display().to_string();
            let args: Vec<String> = [
                "gymnasium:CartPole-v1",
                "--learner",
                l,
                "--rounds",
                "12",
                "--group-size",
                "8",
                "--out",
                &out,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            (*l, spawn_train(&args))
        })
        .collect();
    for (l, child) in runs {
        finish(l, child);
        let r = read_json(&dir.path().join(l).join("report.json"));
        let (start, end) = (
            r["baseline"].as_f64().unwrap(),
            r["final_eval"].as_f64().unwrap(),
        );
        eprintln!("{l}: held-out {start:.1} -> {end:.1}");
        assert!(end >= 4.0 * start, "{l}: held-out {start} -> {end}");
    }
}

/// A scripted OpenAI-compatible model that knows addition but gets subtraction and
/// multiplication wrong unless its prompt holds worked examples (an earlier assistant turn):
/// what in-context learning should fix.
fn scripted_model() -> (String, Arc<AtomicUsize>) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", server.server_addr().to_ip().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            seen.fetch_add(1, Ordering::SeqCst);
            let msgs = body["messages"].as_array().cloned().unwrap_or_default();
            let shown = msgs.iter().any(|m| m["role"] == "assistant");
            let q = msgs
                .last()
                .and_then(|m| m["content"].as_str())
                .unwrap_or("");
            let expr = q.trim_start_matches("What is ").split('?').next().unwrap();
            let p: Vec<&str> = expr.split(' ').collect();
            let (a, b): (i64, i64) = (p[0].parse().unwrap(), p[2].parse().unwrap());
            let answer = match p[1] {
                "+" => a + b,
                "-" if shown => a - b,
                "*" if shown => a * b,
                // Without examples it adds whatever the operator.
                _ => a + b,
            };
            let reply = json!({
                "id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message":
                    {"role": "assistant", "content": format!("<answer>{answer}</answer>")}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
            });
            let _ = req.respond(tiny_http::Response::from_string(reply.to_string()));
        }
    });
    (url, calls)
}

/// The in-context example config, pointed at the scripted model: the held-out score starts
/// where addition alone gets it and rises once worked examples are in the prompt.
#[test]
fn the_incontext_example_improves_a_model_that_learns_from_examples() {
    let (url, calls) = scripted_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let o = nenyax(&[
        "train",
        "--config",
        &config("incontext-local.toml"),
        "--set",
        &format!("model.base_url={url}"),
        "--rounds",
        "2",
        "--out",
        &out,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let (start, end) = (
        r["baseline"].as_f64().unwrap(),
        r["final_eval"].as_f64().unwrap(),
    );
    eprintln!("incontext: held-out {start:.3} -> {end:.3}");
    assert!(start > 0.0 && start < 0.7, "baseline {start}");
    assert_eq!(end, 1.0, "{}", r["rounds"]);
    assert!(
        r["rounds"][1]["update"]["metrics"]["banked"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    assert!(calls.load(Ordering::SeqCst) > 0);
    // The config asks for the trajectories and the curve.
    let lines = std::fs::read_to_string(dir.path().join("trajectories.jsonl")).unwrap();
    assert!(
        lines.lines().count() >= 2 * 8 * 4,
        "{}",
        lines.lines().count()
    );
    assert!(dir.path().join("curve.svg").exists());
}

/// The errors a user meets, each with the status for what went wrong: 2 for what they wrote.
#[test]
fn usage_errors_say_what_to_change_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[env]\nuri = \"builtin:arithmetic\"\n\n[learner]\nuse = \"grpo\"\nepocs = 2\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (
            vec![
                "builtin:arithmetic".into(),
                "--learner".into(),
                "gpro".into(),
            ],
            vec![
                "unknown learner `gpro`".into(),
                "did you mean `grpo`".into(),
            ],
        ),
        (
            vec!["--config".into(), bad.display().to_string()],
            vec![
                format!("{}:6:", bad.display()),
                "`epocs`".into(),
                "did you mean `epochs`".into(),
            ],
        ),
        (
            vec![
                "gymnasium:CartPole-v1".into(),
                "--learner".into(),
                "grpo".into(),
                "--group-size".into(),
                "1".into(),
            ],
            vec!["group_size is 1".into(), "`reinforce`".into()],
        ),
        (
            vec![
                "builtin:arithmetic".into(),
                "--learner".into(),
                "incontext".into(),
            ],
            vec!["needs a chat model".into(), "--provider".into()],
        ),
        (
            vec!["builtin:arithmetic".into(), "--plot".into()],
            vec!["--out DIR".into()],
        ),
        (vec![], vec!["give an environment URI".into()]),
        (
            vec!["--config".into(), config("cpp-trainer.toml")],
            vec!["trainer = \"host\"".into(), "libnenyax".into()],
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["train".to_string()];
        all.extend(args.iter().cloned());
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = nenyax(&refs);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for w in want {
            assert!(err.contains(&w), "{args:?}: no {w:?} in {err}");
        }
    }
    // A run that cannot start (no server where the model should be) is status 1.
    let o = nenyax(&[
        "train",
        "builtin:arithmetic?size=8",
        "--learner",
        "incontext",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--set",
        "model.retries=0",
        "--rounds",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
}

/// `nenyax integrations` lists the learners after the providers, tinker as not available with
/// the registry's reason, without changing the providers' rows.
#[test]
fn integrations_list_the_learners() {
    let o = nenyax(&["integrations", "--json"]);
    assert!(o.status.success());
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let learner = |n: &str| {
        rows.iter()
            .find(|r| r["name"] == n && r["kind"] == "learner")
            .unwrap_or_else(|| panic!("no learner {n}"))
            .clone()
    };
    assert_eq!(learner("grpo")["ready"], true);
    assert_eq!(learner("incontext")["ready"], true);
    assert_eq!(learner("tinker")["ready"], false);
    assert!(learner("tinker")["needs"]
        .as_str()
        .unwrap()
        .contains("not available"));
    assert!(rows
        .iter()
        .any(|r| r["name"] == "vllm" && r["kind"] == "local"));
    let t = text(&nenyax(&["integrations"]).stdout);
    assert!(t.contains("learners (use: nenyax train"), "{t}");
}
