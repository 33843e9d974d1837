//! The `verifiers:` driver against the real packages: verifiers 0.3.1 (classic API) and 0.4.0
//! (v1 API: null harness, subprocess runtime, streamed calls), each in its own venv made by
//! `scripts/setup_verifiers.sh`, with the test environment in `tests/verifiers_envs/`.
//!
//! `scripts/test.sh` sets `NENYAX_VERIFIERS_031_PYTHON` and `NENYAX_VERIFIERS_040_PYTHON`;
//! without them these tests fail and say so (they never skip).

use std::sync::Arc;

use nenyax::conformance::{check_uri, CheckOptions, Tier};
use nenyax::train::{learner, LearnerParts};
use nenyax::{load, train, FunctionModel, Policy, RolloutOptions, Runner, TrainOptions};

#[path = "support/scripted_model.rs"]
mod scripted_model;

fn python(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run scripts/test.sh, which makes the verifiers venvs with \
             scripts/setup_verifiers.sh and points {var} at their interpreter"
        )
    })
}

fn uri(var: &str, env: &str, extra: &str) -> String {
    let envs = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verifiers_envs");
    format!(
        "verifiers:{env}?path={envs}&python={}&workers=2{extra}",
        python(var)
    )
}

fn audited(var: &str, env: &str) {
    let u = uri(var, env, "");
    let r = check_uri(
        &u,
        &CheckOptions {
            samples: 4,
            ..CheckOptions::default()
        },
    );
    assert_eq!(r.tier, Tier::Audited, "{}", r.render());
}

fn every_rollout_records_its_calls(var: &str, env: &str) {
    let env = load(&uri(var, env, "")).unwrap();
    let oracle = env.reference_policy(None).expect("rows carry answers");
    let jobs = nenyax::plan(env.as_ref(), 6, 0).unwrap();
    let trajs = Runner::new(2)
        .unwrap()
        .progress(false)
        .collect(&env, &oracle, jobs, None)
        .unwrap();
    assert_eq!(trajs.len(), 6);
    for t in &trajs {
        assert!(t.error.is_none(), "{:?}", t.error);
        assert!(!t.model_calls.is_empty(), "no model call recorded");
        assert!(t
            .model_calls
            .iter()
            .all(|c| c.error.is_none() && c.response.is_some()));
        let judgment = t.judgment.as_ref().unwrap();
        assert_eq!(judgment.score, 1.0);
        assert!(
            judgment.components.contains_key("exact_match"),
            "{judgment:?}"
        );
        // The reply the model gave is the conversation's last turn and the recorded answer.
        let asked = t.task.as_ref().unwrap().prompt.clone().unwrap();
        let call = &t.model_calls[0];
        assert!(call.request.to_string_lossy().contains(&asked), "{asked}");
    }

    // A model that fails: the rollout still yields a trajectory, with the failed call in it.
    let broken = Policy::chat(FunctionModel::new("broken", |_| {
        Err(nenyax::Error::Policy("the model is down".into()))
    }));
    let t = env.rollout(&broken, &RolloutOptions::new(None, Some(1)));
    assert!(!t.model_calls.is_empty(), "{t:?}");
    assert!(t.model_calls[0]
        .error
        .as_deref()
        .unwrap_or("")
        .contains("the model is down"));
    assert_eq!(t.judgment.as_ref().map_or(0.0, |j| j.score), 0.0);

    // An action policy cannot drive an environment that calls a chat model itself.
    let t = env.rollout(
        &Policy::constant(serde_json::json!("5")),
        &RolloutOptions::new(None, Some(0)),
    );
    assert!(
        t.error
            .as_deref()
            .unwrap()
            .contains("calls a chat model itself"),
        "{:?}",
        t.error
    );
    let _ = Arc::strong_count(&env);
}

trait Lossy {
    fn to_string_lossy(&self) -> String;
}

impl Lossy for nenyax::JsonMap {
    fn to_string_lossy(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[test]
fn classic_0_3_1_is_audited() {
    audited("NENYAX_VERIFIERS_031_PYTHON", "nx-arith-v0");
}

#[test]
fn classic_0_3_1_records_every_call() {
    every_rollout_records_its_calls("NENYAX_VERIFIERS_031_PYTHON", "nx-arith-v0");
}

#[test]
fn v1_0_4_0_is_audited() {
    audited("NENYAX_VERIFIERS_040_PYTHON", "nx_arith");
}

#[test]
fn v1_0_4_0_records_every_call() {
    every_rollout_records_its_calls("NENYAX_VERIFIERS_040_PYTHON", "nx_arith");
}

#[test]
fn an_unknown_environment_names_itself_and_where_it_looked() {
    let u = uri("NENYAX_VERIFIERS_040_PYTHON", "nx-arithh", "");
    let e = load(&u).err().expect("no such environment").to_string();
    assert!(e.contains("nx-arithh") || e.contains("nx_arithh"), "{e}");
}

/// train() drives a rollout-mode environment: the in-context learner's chat model answers
/// through the recording server inside Verifiers' own loop, and every round completes.
#[test]
fn incontext_trains_on_a_rollout_mode_environment() {
    let env = load(&uri("NENYAX_VERIFIERS_040_PYTHON", "nx_arith", "")).unwrap();
    let mut l = learner(
        &serde_json::json!("incontext"),
        LearnerParts {
            model: Some(Arc::new(scripted_model::scripted(false))),
            ..LearnerParts::default()
        },
    )
    .unwrap();
    let opts = TrainOptions {
        rounds: 1,
        group_size: 2,
        batch: 3,
        concurrency: 2,
        progress: false,
        ..TrainOptions::default()
    };
    let r = train(&env, l.as_mut(), &opts).unwrap();
    assert_eq!(r.failed_rounds(), 0, "{}", r.render());
    assert_eq!((r.train_tasks, r.held_out), (5, 1));
    for round in &r.rounds[1..] {
        assert_eq!(round.episodes, 6);
        assert_eq!(round.failed_episodes, 0, "{}", r.render());
    }
}
