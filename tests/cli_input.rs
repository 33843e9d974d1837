//! The `nenyax` binary fed hostile or careless input (issue 16, items 7, 9, 19-22): every bad
//! number is refused by name with exit status 2, nothing panics, a closed stdout ends a command
//! quietly, model flags mean a model, and the run summary tells errors from scores.

use serde_json::{json, Value};
use std::io::Read;
use std::process::{Command, Stdio};

#[path = "support/cli_run.rs"]
mod cli_run;
use cli_run::{nenyax, stderr, stdout, temp_file};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `args` must fail with exit status 2, no panic, and every one of `needles` in stderr.
fn refused(args: &[&str], needles: &[&str]) {
    let o = nenyax(args);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}{}", stdout(&o));
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` missing from: {err}");
    }
}

/// An OpenAI-compatible server on a free port that answers with `reply(prompt)`: `Some(text)`
/// is a completion, `None` a 500. Returns its base URL and how many chat calls it got.
fn model_server(reply: fn(&str) -> Option<String>) -> (String, Arc<AtomicUsize>) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            let _ = req.as_reader().read_to_string(&mut body);
            seen.fetch_add(1, Ordering::SeqCst);
            let prompt = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| {
                    v["messages"].as_array()?.last()?["content"]
                        .as_str()
                        .map(String::from)
                })
                .unwrap_or_default();
            let resp = match reply(&prompt) {
                Some(text) => tiny_http::Response::from_string(
                    json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
                        "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})
                    .to_string(),
                ),
                None => tiny_http::Response::from_string("{\"error\": \"down\"}").with_status_code(500),
            };
            let _ = req.respond(resp);
        }
    });
    (format!("http://127.0.0.1:{port}/v1"), calls)
}

// ---- item 7: panics on user input ----

#[test]
fn a_multibyte_character_after_a_percent_sign_is_an_invalid_uri() {
    refused(
        &["info", "builtin:arithmetic?size=%€"],
        &["InvalidUri", "bad percent escape at `%€`"],
    );
    refused(&["info", "builtin:ari%€thmetic"], &["InvalidUri"]);
}

#[test]
fn huge_or_non_finite_seconds_are_refused_by_name() {
    for value in ["1e20", "NaN", "inf", "-1", "0"] {
        refused(
            &[
                "serve",
                "builtin:guess",
                "--port",
                "0",
                "--idle-timeout",
                value,
            ],
            &["--idle-timeout", "seconds"],
        );
        for cmd in ["run", "try"] {
            refused(
                &[
                    cmd,
                    "builtin:arithmetic",
                    "--base-url",
                    "http://127.0.0.1:9/v1",
                    "--model",
                    "m",
                    "--timeout",
                    value,
                ],
                &["--timeout", "seconds"],
            );
        }
    }
    // A URI's timeout is checked by the driver before it is used.
    let (_dir, data) = temp_file(
        "d.jsonl",
        "{\"responses_create_params\": {\"input\": \"hi\"}}\n",
    );
    let uri = format!(
        "nemo_gym:http://127.0.0.1:9?data={}&timeout_s=1e20",
        data.display()
    );
    refused(
        &["info", &uri],
        &["InvalidParameter", "timeout_s", "at most"],
    );
}

#[test]
fn an_endpoint_spec_with_huge_seconds_is_a_typed_error() {
    for field in ["timeout_s", "backoff_s", "max_backoff_s"] {
        let spec: nenyax::policy::EndpointSpec = serde_json::from_value(
            json!({"base_url": "http://127.0.0.1:9/v1", "model": "m", field: 1e20}),
        )
        .unwrap();
        let Err(e) = spec.build() else {
            panic!("{field} = 1e20 seconds was accepted");
        };
        assert_eq!(e.kind(), "ConfigError", "{e}");
        assert!(e.to_string().contains(field), "{e}");
    }
}

/// A server that tells the client to retry after 1e20 seconds must not crash it.
#[test]
fn a_huge_retry_after_from_the_server_fails_the_episode_not_the_process() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    std::thread::spawn(move || {
        for req in server.incoming_requests() {
            let h = tiny_http::Header::from_bytes("Retry-After", "1e20").unwrap();
            let _ = req.respond(
                tiny_http::Response::from_string("busy")
                    .with_status_code(429)
                    .with_header(h),
            );
        }
    });
    let base = format!("http://127.0.0.1:{port}/v1");
    let t0 = Instant::now();
    let o = nenyax(&[
        "try",
        "builtin:arithmetic",
        "--base-url",
        &base,
        "--model",
        "m",
        "--retries",
        "1",
    ]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("429"), "{}", stdout(&o));
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "the wait is capped"
    );
}

/// The command writes into a pipe whose reading end is already closed (`nenyax ... | true`).
fn with_closed_stdout(args: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(status.code(), Some(0), "{args:?}: {err}");
    assert!(err.is_empty(), "{args:?} ends quietly: {err}");
}

/// An error message written into a closed pipe (`nenyax ... 2>&1 | true`) still exits 2.
#[test]
fn a_closed_stderr_does_not_turn_an_error_into_a_panic() {
    for args in [&["info", "nosuch:x"][..], &["train", "nosuch:x"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        drop(child.stderr.take());
        assert_eq!(child.wait().unwrap().code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    with_closed_stdout(&["info", "builtin:guess"]);
    with_closed_stdout(&["try", "builtin:guess", "-n", "3"]);
    with_closed_stdout(&["drivers"]);
    with_closed_stdout(&["drivers", "--json"]);
    with_closed_stdout(&["check", "builtin:guess", "--samples", "2"]);
    with_closed_stdout(&["run", "builtin:guess", "-n", "2", "--episodes"]);
}

// ---- item 9: numeric options in range ----

#[test]
fn thread_counts_above_the_maximum_are_refused_at_once() {
    let t0 = Instant::now();
    refused(
        &["run", "builtin:arithmetic", "--concurrency", "10000"],
        &["--concurrency", "at most 1024"],
    );
    refused(
        &["check", "builtin:arithmetic", "--threads", "10000"],
        &["--threads", "at most 1024"],
    );
    refused(
        &["check", "builtin:arithmetic", "--threads", "0"],
        &["--threads"],
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let help = stdout(&nenyax(&["run", "--help"]));
    assert!(help.contains("at most 1024"), "{help}");
}

#[test]
fn endpoint_numbers_out_of_range_are_refused_before_any_call() {
    let (base, calls) = model_server(|_| Some("<answer>0</answer>".into()));
    let run_with = |flag: &str, value: &str, needles: &[&str]| {
        let args = [
            "run",
            "builtin:arithmetic",
            "--base-url",
            &base,
            "--model",
            "m",
        ];
        refused(&[&args[..], &[flag, value]].concat(), needles);
    };
    for t in ["NaN", "inf", "-0.5"] {
        run_with("--temperature", t, &["--temperature", "finite number >= 0"]);
    }
    run_with("--max-tokens", "0", &["--max-tokens"]);
    run_with("--retries", "4000000000", &["--retries", "at most"]);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing reached the model");
}

#[test]
fn counts_and_seeds_out_of_range_are_refused() {
    refused(
        &["run", "builtin:arithmetic", "--max-steps", "0"],
        &["--max-steps", "at least 1"],
    );
    refused(
        &["check", "builtin:arithmetic", "--samples", "0"],
        &["--samples", "at least 1"],
    );
    let max = i64::MAX.to_string();
    refused(
        &["run", "builtin:arithmetic", "--seed", &max, "-n", "2"],
        &["seed", "9223372036854775807"],
    );
    refused(
        &["try", "builtin:guess", "--seed", &max, "-n", "2"],
        &["seed"],
    );
    for cmd in ["run", "try"] {
        refused(
            &[cmd, "builtin:guess", "-n", "100000000000"],
            &["-n", "at most 10000000"],
        );
    }
    refused(
        &["serve", "builtin:guess", "--max-sessions", "0"],
        &["--max-sessions"],
    );
    refused(
        &["serve", "builtin:guess", "--max-message-bytes", "0"],
        &["--max-message-bytes"],
    );
    for flag in [["--seed", max.as_str()], ["--temperature", "NaN"]] {
        refused(
            &[
                "train",
                "builtin:arithmetic",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                flag[0],
                flag[1],
            ],
            &[flag[0].trim_start_matches('-')],
        );
    }
    // The last seed that fits still runs.
    let o = nenyax(&["run", "builtin:guess", "--seed", &max, "-n", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn the_library_refuses_the_same_values() {
    let env = nenyax::load("builtin:arithmetic?size=4").unwrap();
    let e = nenyax::plan(env.as_ref(), 2, i64::MAX).unwrap_err();
    assert_eq!(e.kind(), "ConfigError", "{e}");
    let e = nenyax::plan(env.as_ref(), 100_000_000_000, 0).unwrap_err();
    assert!(e.to_string().contains("at most 10000000"), "{e}");
    let opts: nenyax::runner::RunOptions =
        serde_json::from_value(json!({"n": 2, "max_steps": 0})).unwrap();
    let e = opts.jobs(env.as_ref()).unwrap_err();
    assert!(e.to_string().contains("max_steps"), "{e}");
    let e = nenyax::Runner::new(10_000).err().unwrap();
    assert!(e.to_string().contains("at most 1024"), "{e}");
    let oracle = env.reference_policy(None).unwrap();
    let jobs = nenyax::plan(env.as_ref(), 1, 0).unwrap();
    let e = nenyax::Runner::new(1)
        .unwrap()
        .collect(&env, &oracle, jobs, Some(0))
        .unwrap_err();
    assert!(e.to_string().contains("max_steps"), "{e}");
    // One rollout records the refusal instead of playing a step.
    let t = env.rollout(
        &oracle,
        &nenyax::RolloutOptions {
            max_steps: Some(0),
            ..Default::default()
        },
    );
    assert!(t.steps.is_empty(), "no step was played");
    assert!(t
        .error
        .as_deref()
        .unwrap_or_default()
        .contains("max_steps must be at least 1"));
}

// ---- item 19: model flags mean a model ----

#[test]
fn model_flags_imply_the_endpoint_policy() {
    let (base, calls) = model_server(|_| Some("<answer>12345</answer>".into()));
    let o = nenyax(&[
        "try",
        "builtin:arithmetic",
        "--base-url",
        &base,
        "--model",
        "m",
    ]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the model was called: {}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("12345"), "{}", stdout(&o));
    let o = nenyax(&[
        "run",
        "builtin:arithmetic",
        "--base-url",
        &base,
        "--model",
        "m",
        "-n",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // A provider without a model names what is missing instead of using the oracle.
    refused(
        &["try", "builtin:arithmetic", "--provider", "ollama"],
        &["--model"],
    );
    refused(
        &["try", "builtin:arithmetic", "--model", "qwen3"],
        &["--provider", "--base-url"],
    );
    for policy in ["oracle", "null", "reference"] {
        refused(
            &[
                "try",
                "builtin:arithmetic",
                "--policy",
                policy,
                "--provider",
                "ollama",
                "--model",
                "q",
            ],
            &["--provider", "--policy endpoint"],
        );
    }
    refused(
        &[
            "run",
            "builtin:arithmetic",
            "--policy",
            "null",
            "--temperature",
            "0.5",
        ],
        &["--temperature", "--policy endpoint"],
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

// ---- item 20: an honest run summary ----

#[test]
fn the_run_summary_counts_errors_and_scores_them_as_zero() {
    // Prompts with "ok" get the right answer, the others a server error: 2 of 4 episodes fail.
    let (base, _) = model_server(|p| p.contains("ok").then(|| "x".to_string()));
    let (_dir, file) = temp_file(
        "mixed.toml",
        "[judge]\ntype = \"contains\"\n\
         [[tasks]]\nprompt = \"ok 1\"\nanswer = \"x\"\n\
         [[tasks]]\nprompt = \"down 2\"\nanswer = \"x\"\n\
         [[tasks]]\nprompt = \"ok 3\"\nanswer = \"x\"\n\
         [[tasks]]\nprompt = \"down 4\"\nanswer = \"x\"\n",
    );
    let uri = format!("define:{}", file.display());
    let args = [
        "run",
        uri.as_str(),
        "-n",
        "4",
        "--base-url",
        &base,
        "--model",
        "m",
        "--retries",
        "0",
    ];
    let o = nenyax(&args);
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "some episodes completed: {out}{}",
        stderr(&o)
    );
    for part in [
        "4 episodes",
        "2 errors",
        "mean score 0.500 over all 4 (errors count as 0)",
        "1.000 over the 2 completed",
    ] {
        assert!(out.contains(part), "`{part}` missing from: {out}");
    }
    // This judge gives scores only: no pass counts are made up for it.
    assert!(!out.contains("passed"), "{out}");

    let mut strict = args.to_vec();
    strict.push("--fail-on-error");
    let o = nenyax(&strict);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("2 of 4 episodes failed"),
        "{}",
        stderr(&o)
    );

    let mut verbose = args.to_vec();
    verbose.push("--episodes");
    let out = stdout(&nenyax(&verbose));
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("episode ")).collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "episode 0: task 0, seed 0, score 1.000", "{out}");
    assert!(
        lines[1].starts_with("episode 1: task 1, seed 1, error: EndpointError"),
        "{out}"
    );
}

#[test]
fn pass_counts_appear_where_the_judge_decides_pass_or_fail() {
    for (policy, want, line) in [
        ("oracle", "3 passed, 0 not passed", "score 1.000, passed"),
        ("null", "0 passed, 3 not passed", "score 0.000, not passed"),
    ] {
        let o = nenyax(&[
            "run",
            "builtin:arithmetic",
            "--policy",
            policy,
            "-n",
            "3",
            "--episodes",
        ]);
        let out = stdout(&o);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(out.contains(want), "{policy}: {out}");
        assert!(
            out.lines().next().unwrap().ends_with(line),
            "{policy}: {out}"
        );
    }
}

#[test]
fn a_judge_without_pass_fail_is_not_reported_as_failing() {
    let (_dir, file) = temp_file(
        "fmt.toml",
        "[judge]\ntype = \"regex\"\npattern = \"x\"\n[[tasks]]\nprompt = \"say x\"\n",
    );
    let (base, _) = model_server(|_| Some("x".into()));
    let uri = format!("define:{}", file.display());
    let o = nenyax(&["run", &uri, "-n", "2", "--base-url", &base, "--model", "m"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        out.contains("0 errors") && out.contains("mean score 1.000"),
        "{out}"
    );
    assert!(!out.contains("0 passed"), "{out}");
}

// ---- item 21: random and reference policies ----

#[test]
fn reference_is_the_oracle_and_random_samples_the_declared_action_space() {
    let a = nenyax(&[
        "try",
        "builtin:guess",
        "--policy",
        "reference",
        "--seed",
        "2",
    ]);
    let b = nenyax(&["try", "builtin:guess", "--policy", "oracle", "--seed", "2"]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(stdout(&a), stdout(&b));

    let dir = tempfile::tempdir().unwrap();
    let actions = |name: &str, seed: &str| -> Vec<Vec<i64>> {
        let out = dir.path().join(name);
        let o = nenyax(&[
            "run",
            "builtin:guess?high=1000",
            "--policy",
            "random",
            "-n",
            "6",
            "--seed",
            seed,
            "--concurrency",
            "2",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| {
                let t = nenyax::Trajectory::from_json(l).unwrap();
                assert!(t.error.is_none(), "{:?}", t.error);
                t.steps
                    .iter()
                    .map(|s| s.action.as_i64().expect("an integer action"))
                    .collect()
            })
            .collect()
    };
    let first = actions("a.jsonl", "0");
    assert!(
        first.iter().flatten().all(|a| (1..=1000).contains(a)),
        "{first:?}"
    );
    assert_eq!(first, actions("b.jsonl", "0"), "seeded by the episode seed");
    assert_ne!(
        first,
        actions("c.jsonl", "100"),
        "other seeds, other actions"
    );
    let distinct: std::collections::BTreeSet<_> = first.iter().flatten().collect();
    assert!(distinct.len() > 10, "spread over the space: {first:?}");

    refused(
        &["run", "builtin:arithmetic", "--policy", "random"],
        &["random", "action space", "builtin:arithmetic"],
    );
}

#[test]
fn random_samples_gymnasium_discrete_and_box_spaces() {
    let python = std::env::var("NENYAX_PYTHON").expect(
        "NENYAX_PYTHON is not set: run scripts/test.sh, which installs gymnasium into .venv",
    );
    let dir = tempfile::tempdir().unwrap();
    for (uri, check) in [
        (
            "gymnasium:CartPole-v1",
            (|a: &Value| matches!(a.as_i64(), Some(0 | 1))) as fn(&Value) -> bool,
        ),
        ("gymnasium:Pendulum-v1", |a: &Value| {
            a.as_array().is_some_and(|v| {
                v.len() == 1 && v[0].as_f64().is_some_and(|x| (-2.0..=2.0).contains(&x))
            })
        }),
    ] {
        let out = dir.path().join("t.jsonl");
        let o = Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .args([
                "run",
                uri,
                "--policy",
                "random",
                "-n",
                "2",
                "--max-steps",
                "20",
            ])
            .args(["--out", out.to_str().unwrap()])
            .env("NENYAX_PYTHON", &python)
            .output()
            .unwrap();
        assert!(o.status.success(), "{uri}: {}", stderr(&o));
        for line in std::fs::read_to_string(&out).unwrap().lines() {
            let t = nenyax::Trajectory::from_json(line).unwrap();
            assert!(t.error.is_none(), "{uri}: {:?}", t.error);
            assert!(!t.steps.is_empty());
            for s in &t.steps {
                assert!(check(&s.action), "{uri}: action {}", s.action);
            }
        }
    }
}

// ---- item 22: plain words and numbers ----

#[test]
fn messages_hold_no_rust_debug_text() {
    let o = nenyax(&["run", "builtin:guess", "-n", "1"]);
    let out = stdout(&o);
    assert!(
        out.contains("1 episode,") || out.contains("1 episode "),
        "{out}"
    );
    assert!(!out.contains("1 episodes"), "{out}");
    let o = nenyax(&["info", "builtin:arithmetic?size=1e20"]);
    let err = stderr(&o);
    assert!(err.contains("`1e20`") && !err.contains("1e+20"), "{err}");
    // A learner setting that is not text, or not one of the names, is named as the user gave it.
    for (set, shown) in [
        ("learner.agg=\"mean\"", "`agg` is \"mean\""),
        ("learner.agg=3", "`agg` is missing or not a string"),
    ] {
        let o = nenyax(&[
            "train",
            "builtin:guess",
            "--learner",
            "grpo",
            "--set",
            set,
            "--dry-run",
        ]);
        let err = stderr(&o);
        assert!(err.contains(shown) && !err.contains("Some("), "{err}");
    }
    for o in [o, nenyax(&["check", "builtin:guess", "--samples", "1"])] {
        let text = stdout(&o) + &stderr(&o);
        assert!(!text.contains("Some(") && !text.contains("None"), "{text}");
    }
    let o = nenyax(&["check", "builtin:guess", "--samples", "1"]);
    let out = stdout(&o);
    assert!(out.contains("1 episode, mean score 1.000"), "{out}");
    assert!(out.contains("1 episode replayed identically"), "{out}");
    assert!(
        !out.contains("1 episodes") && !out.contains("1 tasks"),
        "{out}"
    );
}
