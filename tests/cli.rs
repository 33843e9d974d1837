//! The `nenyax` binary as a user runs it.

use serde_json::Value;
use std::process::Command;

#[path = "support/cli_run.rs"]
mod cli_run;
use cli_run::{nenyax, stderr, stdout, temp_file};

#[test]
fn check_prints_an_audited_report_for_the_builtin_default() {
    let o = nenyax(&["check", "builtin:arithmetic"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("builtin:arithmetic  [step]  →  tier: AUDITED"),
        "{out}"
    );
    for name in [
        "manifest",
        "session_opens",
        "rollout_completes",
        "reproducible",
        "reproducible_fresh",
        "parallel_consistent",
        "learning_signal",
        "verifier_discriminates",
    ] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!(" {name} ")) && l.contains('✔')),
            "{name}: {out}"
        );
    }
}

#[test]
fn check_json_and_require() {
    let o = nenyax(&[
        "check",
        "builtin:guess?high=50",
        "--json",
        "--samples",
        "5",
        "--require",
        "audited",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tier"], "audited");
    assert_eq!(v["mode"], "step");
    assert_eq!(v["checks"].as_array().unwrap().len(), 8);
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["status"] == "pass"));
    assert!(v["checks"][2]["detail"]
        .as_str()
        .unwrap()
        .starts_with("5 episodes"));

    // A define file whose judge has no oracle cannot be audited: --require says so by exit code.
    let (_dir, path) = temp_file(
        "fmt.toml",
        "[judge]\ntype = \"regex\"\npattern = \"x\"\n[[tasks]]\nprompt = \"say x\"\n",
    );
    let uri = format!("define:{}", path.display());
    let o = nenyax(&["check", &uri, "--require", "audited"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("tier: TRAINABLE"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("required tier audited not reached"),
        "{}",
        stderr(&o)
    );
    let o = nenyax(&["check", &uri, "--require", "trainable"]);
    assert!(o.status.success());
}

#[test]
fn run_writes_a_thousand_judged_trajectories() {
    let dir = tempfile::tempdir().unwrap();
    for (policy, want) in [("oracle", 1.0), ("null", 0.0)] {
        let out = dir.path().join(format!("{policy}.jsonl"));
        let o = nenyax(&[
            "run",
            "builtin:arithmetic",
            "--policy",
            policy,
            "-n",
            "1000",
            "--concurrency",
            "2",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("1000 episodes"), "{}", stdout(&o));
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1000);
        for (i, line) in lines.iter().enumerate() {
            let t = nenyax::Trajectory::from_json(line).unwrap();
            assert_eq!(t.score(), Some(want), "line {i}: {line}");
            assert_eq!(t.seed, Some(i as i64), "written in task order");
            assert!(t.error.is_none());
        }
    }
}

#[test]
fn run_appends_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.jsonl");
    let p = out.to_str().unwrap();
    for _ in 0..2 {
        assert!(nenyax(&["run", "builtin:guess", "-n", "3", "--out", p])
            .status
            .success());
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 3);
    assert!(
        nenyax(&["run", "builtin:guess", "-n", "3", "--out", p, "--append"])
            .status
            .success()
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 6);
}

#[test]
fn bad_input_gets_a_typed_message_and_exit_code_2() {
    for (args, needle) in [
        (
            vec!["info", "nosuch:thing"],
            "UnknownScheme: unknown scheme `nosuch`",
        ),
        (
            vec!["info", "builtin:arithmetic?seeed=1"],
            "did you mean `seed`",
        ),
        (
            vec!["check", "builtin:arithmetic?size=-3"],
            "InvalidParameter",
        ),
        (
            vec!["run", "define:/no/such/file.toml"],
            "DefineError: /no/such/file.toml",
        ),
        (
            vec!["run", "builtin:arithmetic", "--policy", "endpoint"],
            "needs --provider (e.g. vllm, openai) or --base-url",
        ),
        (
            vec!["run", "builtin:arithmetic", "--out", "/no/such/dir/t.jsonl"],
            "cannot open --out",
        ),
    ] {
        let o = nenyax(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
    // clap's own usage errors also exit 2.
    let o = nenyax(&["check", "builtin:arithmetic", "--require", "perfect"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown tier `perfect`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn an_unreachable_endpoint_fails_every_episode_but_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.jsonl");
    let o = nenyax(&[
        "run",
        "builtin:arithmetic",
        "--policy",
        "endpoint",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--retries",
        "0",
        "-n",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "all episodes failed: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("EndpointError"), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let trajs: Vec<_> = text
        .lines()
        .map(|l| nenyax::Trajectory::from_json(l).unwrap())
        .collect();
    assert_eq!(trajs.len(), 3);
    assert!(trajs
        .iter()
        .all(|t| t.error.as_deref().unwrap().starts_with("EndpointError")));
}

#[test]
fn drivers_lists_readiness_and_what_is_missing() {
    let o = nenyax(&["drivers", "--json"]);
    assert!(o.status.success());
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let list = v.as_array().unwrap();
    let builtin = list.iter().find(|d| d["scheme"] == "builtin").unwrap();
    assert_eq!(builtin["readiness"]["status"], "ready");
    let harbor = list.iter().find(|d| d["scheme"] == "harbor").unwrap();
    match nenyax::sandbox::BackendKind::Jail.ready() {
        Ok(()) => assert_eq!(harbor["readiness"]["status"], "ready"),
        Err(_) => assert!(harbor["readiness"]["missing"]
            .as_str()
            .unwrap()
            .contains("jail")),
    }
    let text = stdout(&nenyax(&["drivers"]));
    assert!(text.contains("builtin") && text.contains("ready"), "{text}");
}

#[test]
fn info_and_try() {
    let o = nenyax(&["info", "builtin:arithmetic?size=7&digits=3"]);
    assert!(o.status.success());
    let m: nenyax::Manifest = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(m.num_tasks, Some(7));
    assert_eq!(m.protocol, nenyax::PROTOCOL_VERSION);
    let o = nenyax(&["try", "builtin:guess", "--seed", "2"]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(
        out.starts_with("━━ builtin:guess [step] task=0 seed=2"),
        "{out}"
    );
    assert!(out.contains("judged │ score=1 passed=true"), "{out}");
    let o = nenyax(&["try", "builtin:arithmetic", "--policy", "null"]);
    assert!(
        stdout(&o).contains("score=0 passed=false"),
        "{}",
        stdout(&o)
    );
}

/// `nenyax integrations` says which providers are ready: a hosted one once its key variable is
/// set, a local one once a server answers at its (overridden) base URL; and `--provider` drives
/// a run through that server.
#[test]
fn integrations_report_readiness_and_provider_drives_a_run() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    std::thread::spawn(move || {
        for req in server.incoming_requests() {
            let body = if req.url().ends_with("/models") {
                r#"{"object":"list","data":[]}"#.to_string()
            } else {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"<answer>0</answer>"}}]}"#.to_string()
            };
            let _ = req.respond(tiny_http::Response::from_string(body));
        }
    });
    let base = format!("http://127.0.0.1:{port}/v1");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .args(args)
            .env("NENYAX_VLLM_BASE_URL", &base)
            .env("GROQ_API_KEY", "gsk-test")
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap()
    };
    let out = run(&["integrations", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(row("vllm")["ready"], true, "{}", row("vllm"));
    assert_eq!(row("vllm")["base_url"], base.as_str());
    assert_eq!(row("groq")["ready"], true);
    assert_eq!(row("openai")["ready"], false);
    assert!(row("openai")["needs"]
        .as_str()
        .unwrap()
        .contains("OPENAI_API_KEY"));
    let text = stdout(&run(&["integrations"]));
    assert!(text.contains("needs: export OPENAI_API_KEY"), "{text}");

    let out = run(&[
        "run",
        "builtin:arithmetic?size=3",
        "--policy",
        "endpoint",
        "--provider",
        "vllm",
        "--model",
        "m",
        "-n",
        "3",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    let out = run(&[
        "run",
        "builtin:arithmetic",
        "--policy",
        "endpoint",
        "--provider",
        "opnai",
        "--model",
        "m",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("did you mean `openai`"),
        "{}",
        stderr(&out)
    );
}
