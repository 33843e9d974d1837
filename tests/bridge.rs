//! The Python bridge and its drivers against the real reasoning-gym 0.1.25 and Gymnasium 1.4.0.
//!
//! `scripts/test.sh` installs both into `.venv` and points `NENYAX_PYTHON` at it; without that
//! variable these tests fail with a message saying so (they never skip).

use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

use nenyax::conformance::{check_uri, CheckOptions, Status, Tier};
use nenyax::{load, plan, Policy, RolloutOptions, Runner};

/// The worker-killing test picks its victim among this process's Python children, so it must
/// not run while other tests here have workers of their own: it takes this lock alone, the
/// others share it.
static WORKERS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn require_python() -> std::sync::RwLockReadGuard<'static, ()> {
    assert_python();
    WORKERS.read().unwrap_or_else(|p| p.into_inner())
}

fn require_python_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    assert_python();
    WORKERS.write().unwrap_or_else(|p| p.into_inner())
}

fn assert_python() {
    assert!(
        std::env::var_os("NENYAX_PYTHON").is_some(),
        "NENYAX_PYTHON is not set: run scripts/test.sh, which installs reasoning-gym and \
         gymnasium into .venv and points NENYAX_PYTHON at it"
    );
}

fn opts() -> CheckOptions {
    CheckOptions {
        samples: 8,
        ..CheckOptions::default()
    }
}

#[test]
fn reasoning_gym_basic_arithmetic_is_audited() {
    let _shared = require_python();
    let r = check_uri("reasoning_gym:basic_arithmetic?size=20&workers=2", &opts());
    assert_eq!(r.tier, Tier::Audited, "{}", r.render());
}

#[test]
fn cartpole_frozenlake_and_taxi_are_trainable_and_no_more() {
    let _shared = require_python();
    for id in ["CartPole-v1", "FrozenLake-v1", "Taxi-v4"] {
        let r = check_uri(&format!("gymnasium:{id}?workers=2"), &opts());
        assert_eq!(r.tier, Tier::Trainable, "{}", r.render());
        let audit = r
            .checks
            .iter()
            .find(|c| c.name == "verifier_discriminates")
            .unwrap();
        assert_eq!(
            audit.status,
            Status::Skip,
            "Gymnasium has no oracle: {}",
            r.render()
        );
    }
}

#[test]
fn gymnasium_sessions_are_seeded_and_text_envs_render_without_escapes() {
    let _shared = require_python();
    let env = load("gymnasium:CartPole-v1?workers=1").unwrap();
    let a = env.session(None, Some(7)).unwrap().observation().clone();
    let b = env.session(None, Some(7)).unwrap().observation().clone();
    assert_eq!(a.data, b.data, "same seed, same first observation");
    let mut s = env.session(None, Some(7)).unwrap();
    let step = s.act(json!(0)).unwrap();
    assert_eq!(step.reward, 1.0);
    let e = s.act(json!("left")).unwrap_err();
    assert_eq!(e.kind(), "InvalidAction", "{e}");

    let lake = load("gymnasium:FrozenLake-v1?is_slippery=false&workers=1").unwrap();
    assert!(lake.manifest().capabilities.text);
    let s = lake.session(None, Some(0)).unwrap();
    let text = s.observation().text.clone().unwrap();
    assert!(!text.contains('\u{1b}'), "escape codes left in {text:?}");
    assert!(text.contains('F'), "{text}");
}

#[test]
fn bad_reasoning_gym_input_is_named() {
    let _shared = require_python();
    let e = load("reasoning_gym:basic_arithmetc?workers=1")
        .err()
        .unwrap();
    assert_eq!(e.kind(), "UnknownTarget", "{e}");
    assert!(
        e.to_string().contains("did you mean 'basic_arithmetic'"),
        "{e}"
    );
    let e = load("reasoning_gym:basic_arithmetic?min_terms=5&max_terms=2&workers=1")
        .err()
        .unwrap();
    assert_eq!(e.kind(), "ConfigError", "{e}");
    assert!(
        e.to_string().contains("max_terms must be >= min_terms"),
        "{e}"
    );
    let e = load("reasoning_gym:basic_arithmetic?max_term=3&workers=1")
        .err()
        .unwrap();
    assert_eq!(e.kind(), "UnknownParameter", "{e}");
    assert!(
        e.to_string().contains("max_terms"),
        "accepted keys listed: {e}"
    );
}

#[test]
fn killing_a_worker_mid_batch_loses_exactly_its_rollout() {
    let _alone = require_python_alone();
    let env = load("reasoning_gym:basic_arithmetic?size=40&workers=2").unwrap();
    let oracle = env.reference_policy(None).unwrap();
    // Slow the policy down so that a worker is always mid-episode when it is killed.
    let slow = Policy::action(move |obs| {
        std::thread::sleep(Duration::from_millis(60));
        match &oracle {
            Policy::Action(f) => f(obs),
            _ => unreachable!(),
        }
    });
    let me = std::process::id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        let victim = bridge_children(me)
            .into_iter()
            .next()
            .expect("a bridge worker is running");
        let _ = Command::new("kill")
            .args(["-9", &victim.to_string()])
            .status();
        victim
    });
    let runner = Runner::new(2).unwrap().progress(false);
    let t0 = Instant::now();
    let out = runner
        .collect(&env, &slow, plan(env.as_ref(), 40, 0).unwrap(), None)
        .unwrap();
    let victim = killer.join().unwrap();
    assert_eq!(out.len(), 40, "the batch completes");
    let failed: Vec<_> = out.iter().filter(|t| t.error.is_some()).collect();
    assert_eq!(
        failed.len(),
        1,
        "exactly one rollout is lost: {:?}",
        failed.iter().map(|t| &t.error).collect::<Vec<_>>()
    );
    let err = failed[0].error.as_deref().unwrap();
    assert!(
        err.contains(&format!("pid {victim}")) && err.contains("replaced"),
        "{err}"
    );
    assert!(out
        .iter()
        .filter(|t| t.error.is_none())
        .all(|t| t.score() == Some(1.0)));
    assert!(t0.elapsed() < Duration::from_secs(120));
}

/// Python children of `parent` (the bridge workers).
fn bridge_children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name (which may contain spaces) start after the last ')'.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let ppid: u32 = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == parent && stat.contains("python") {
            out.push(pid);
        }
    }
    out
}

#[test]
fn a_missing_package_names_it_the_interpreter_and_the_fix() {
    let _shared = require_python();
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("bare");
    let ok = Command::new("python3")
        .args(["-m", "venv", "--without-pip", venv.to_str().unwrap()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "python3 -m venv works");
    let python = venv.join("bin/python");
    let o = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(["info", "gymnasium:CartPole-v1"])
        .env("NENYAX_PYTHON", &python)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("DriverUnavailable"), "{err}");
    assert!(
        err.contains("gymnasium==1.4.0"),
        "names the pinned version: {err}"
    );
    assert!(
        err.contains(python.to_str().unwrap()),
        "names the interpreter: {err}"
    );
    assert!(err.contains("nenyax setup"), "gives the fix: {err}");
}

#[test]
fn a_single_rollout_through_the_bridge_is_judged_by_the_dataset() {
    let _shared = require_python();
    let env = load("reasoning_gym:basic_arithmetic?size=5&seed=3&workers=1").unwrap();
    assert_eq!(env.manifest().num_tasks, Some(5));
    let tasks = env.tasks(None).unwrap();
    assert_eq!(tasks.len(), 5);
    assert!(tasks[0].metadata.contains_key("answer"));
    let oracle = env.reference_policy(None).unwrap();
    let t = env.rollout(&oracle, &RolloutOptions::new(Some(tasks[2].clone()), None));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    assert_eq!(t.judgment.as_ref().unwrap().passed, Some(true));
    let null = env.null_policy(None).unwrap();
    let t = env.rollout(&null, &RolloutOptions::new(Some(tasks[2].clone()), None));
    assert_eq!(t.score(), Some(0.0), "{:?}", t.error);
}

#[test]
fn a_bridge_traceback_names_the_package_files() {
    let _shared = require_python();
    use nenyax::bridge::{BridgeConfig, Worker};
    let config = BridgeConfig {
        python: std::env::var("NENYAX_PYTHON").unwrap(),
        command: None,
        library: None,
        timeout: Duration::from_secs(120),
        workers: 1,
    };
    let mut w = Worker::spawn(&config).unwrap();
    // FrozenLake's constructor looks the map up in a dict: an unexpected error, reported with
    // its traceback on the worker's stderr.
    let e = w
        .call(
            "load",
            json!({"driver": "gymnasium", "target": "FrozenLake-v1", "params": {"map_name": "no-such-map"}}),
        )
        .unwrap_err();
    assert!(e.to_string().contains("KeyError"), "{e}");
    assert!(!w.is_dead(), "an error reply keeps the worker");
    // The stderr tail is filled by a reader thread: give it a moment.
    let t0 = Instant::now();
    let mut tail = w.stderr_tail();
    while !tail.contains("KeyError") && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        tail = w.stderr_tail();
    }
    for file in [
        "nenyax_bridge/dispatch.py",
        "nenyax_bridge/gymnasium_driver.py",
    ] {
        assert!(
            tail.contains(&format!("{file}\", line ")),
            "{file} in {tail}"
        );
    }
    assert!(!tail.contains("<string>"), "{tail}");
}
