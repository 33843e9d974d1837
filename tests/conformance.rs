//! Conformance must fail what is broken: each check is shown failing (or skipping) on an
//! environment with exactly that defect, and the tier stops where it should.

use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nenyax::conformance::{check, CheckOptions, Report, Status, Tier};
use nenyax::define::{stateful, TaskEnvBuilder};
use nenyax::{load, Environment, Episode, JsonMap, Manifest, Mode, TaskRef};

fn rows(n: usize, tag: &str) -> Vec<JsonMap> {
    (0..n)
        .map(|i| {
            json!({"prompt": format!("{tag} question {i}"), "answer": i.to_string()})
                .as_object()
                .unwrap()
                .clone()
        })
        .collect()
}

fn status(r: &Report, name: &str) -> (Status, String) {
    let c = r
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {}", r.render()));
    (c.status, c.detail.clone())
}

/// An environment's episodes under a different manifest (and without its policies).
struct WithManifest(Arc<dyn Environment>, Manifest);

impl Environment for WithManifest {
    fn manifest(&self) -> &Manifest {
        &self.1
    }
    fn open(&self, t: Option<&TaskRef>, s: Option<i64>) -> nenyax::Result<Box<dyn Episode>> {
        self.0.open(t, s)
    }
}

fn opts() -> CheckOptions {
    CheckOptions {
        samples: 4,
        ..CheckOptions::default()
    }
}

#[test]
fn a_score_that_drifts_between_runs_is_not_reproducible() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let env = TaskEnvBuilder::new("drift", rows(4, "q"), move |_, _| {
        // The first pass over the tasks scores 1, every later episode 0.
        Ok(if c.fetch_add(1, Ordering::SeqCst) < 4 {
            1.0
        } else {
            0.0
        })
    })
    .build()
    .unwrap();
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "reproducible");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(detail.contains("scored"), "{detail}");
    assert_eq!(r.tier, Tier::Evaluable, "{}", r.render());
    // Without a factory the fresh-instance check cannot run: a skip, not a pass.
    assert_eq!(status(&r, "reproducible_fresh").0, Status::Skip);
}

#[test]
fn tasks_that_change_with_each_instance_fail_reproducible_fresh() {
    static INSTANCES: AtomicUsize = AtomicUsize::new(0);
    let make = || -> nenyax::Result<Arc<dyn Environment>> {
        let n = INSTANCES.fetch_add(1, Ordering::SeqCst);
        TaskEnvBuilder::new("nonce", rows(4, &format!("instance {n}")), |_, _| Ok(1.0)).build()
    };
    let env = make().unwrap();
    let r = check(&env, Some(&make), &opts());
    assert_eq!(status(&r, "reproducible").0, Status::Pass, "{}", r.render());
    let (s, detail) = status(&r, "reproducible_fresh");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(detail.contains("different initial observation"), "{detail}");
    assert_eq!(r.tier, Tier::Evaluable);
}

#[test]
fn judgments_that_depend_on_the_thread_fail_parallel_consistency() {
    let env = TaskEnvBuilder::new("threads", rows(4, "q"), |_, _| {
        let on_pool = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("nenyax-rollout"));
        Ok(if on_pool { 0.0 } else { 1.0 })
    })
    .build()
    .unwrap();
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "parallel_consistent");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(
        detail.contains("scored 0 in parallel but 1 serially"),
        "{detail}"
    );
}

#[test]
fn a_verifier_that_rewards_everything_is_not_audited() {
    let env = TaskEnvBuilder::new("lenient", rows(4, "q"), |_, _| Ok(1.0))
        .reference(|r| r["answer"].as_str().map(str::to_string))
        .build()
        .unwrap();
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "verifier_discriminates");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(
        detail.contains("did not beat every null policy on episodes 0, 1, 2, 3"),
        "{detail}"
    );
    assert_eq!(status(&r, "reproducible_fresh").0, Status::Skip);
    assert_eq!(
        r.tier,
        Tier::Evaluable,
        "the fresh-instance skip blocks trainable"
    );
}

#[test]
fn an_environment_without_any_probe_stops_at_connectable() {
    // Non-text, no reference policy: nothing can drive it, so the episode checks are skipped.
    let env = stateful(
        "opaque",
        |_| Ok(json!(0)),
        |s| Ok(json!({"x": s})),
        |_, _| Ok((0.0, true)),
        3,
    );
    let mut m = env.manifest().clone();
    m.capabilities.text = false;
    let env: Arc<dyn Environment> = Arc::new(WithManifest(env, m));
    let r = check(&env, None, &opts());
    assert_eq!(
        status(&r, "rollout_completes").0,
        Status::Skip,
        "{}",
        r.render()
    );
    assert_eq!(r.tier, Tier::Connectable);
}

#[test]
fn a_panic_while_opening_is_a_failed_check_not_a_crash() {
    struct Broken(Manifest);
    impl Environment for Broken {
        fn manifest(&self) -> &Manifest {
            &self.0
        }
        fn open(&self, _: Option<&TaskRef>, _: Option<i64>) -> nenyax::Result<Box<dyn Episode>> {
            panic!("driver bug while opening")
        }
    }
    let mut m = Manifest::new("test:broken", "broken", "test", Mode::Step);
    m.capabilities.text = true;
    let env: Arc<dyn Environment> = Arc::new(Broken(m));
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "session_opens");
    assert_eq!(s, Status::Fail);
    assert!(detail.contains("driver bug while opening"), "{detail}");
    assert_eq!(r.tier, Tier::None);
    let (s, detail) = status(&r, "rollout_completes");
    assert_eq!(s, Status::Fail);
    assert!(detail.contains("episode 0"), "{detail}");
}

#[test]
fn an_invalid_manifest_fails() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let mut m = env.manifest().clone();
    m.protocol = "1.0".into();
    let env: Arc<dyn Environment> = Arc::new(WithManifest(env, m));
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "manifest");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(
        detail.contains("protocol 1.0 is not compatible"),
        "{detail}"
    );
    assert_eq!(r.tier, Tier::None);
}

#[test]
fn json_report_has_the_reference_shape() {
    let r = nenyax::check_uri("builtin:arithmetic?size=10", &opts());
    let v = r.to_json();
    assert_eq!(v["env_id"], "builtin:arithmetic?size=10");
    assert_eq!(v["tier"], "audited");
    let c = &v["checks"][0];
    for key in ["name", "tier", "status", "detail", "duration_s"] {
        assert!(c.get(key).is_some(), "{key} missing: {c}");
    }
    let r = nenyax::check_uri("builtin:nope", &opts());
    assert_eq!(r.tier, Tier::None);
    assert!(
        r.checks[0].detail.starts_with("UnknownTarget"),
        "{}",
        r.render()
    );
}

fn data(name: &str) -> String {
    format!(
        "{}/tests/data/conformance/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn an_empty_or_blank_prompt_fails_session_opens() {
    for file in ["empty-prompt.toml", "blank-prompt.toml"] {
        let r = nenyax::check_uri(&format!("define:{}", data(file)), &opts());
        let (s, detail) = status(&r, "session_opens");
        assert_eq!(s, Status::Fail, "{file}: {}", r.render());
        assert!(detail.contains("empty"), "{file}: {detail}");
        assert_eq!(r.tier, Tier::None, "{file}: {}", r.render());
    }
}

#[test]
fn lenient_judges_are_not_audited() {
    // `contains` on one-letter answers and `numeric` with a 1e12 tolerance reward replies that
    // do not answer: the null policies in the expected format must expose both.
    for (file, null) in [
        ("lenient-contains.toml", "non-answer"),
        ("lenient-numeric.toml", "wrong answer"),
    ] {
        let r = nenyax::check_uri(&format!("define:{}", data(file)), &opts());
        let (s, detail) = status(&r, "verifier_discriminates");
        assert_eq!(s, Status::Fail, "{file}: {}", r.render());
        assert!(detail.contains(null), "{file}: {detail}");
        assert_eq!(r.tier, Tier::Trainable, "{file}: {}", r.render());
    }
}

#[test]
fn strict_judges_stay_audited_against_every_null_policy() {
    for uri in ["builtin:arithmetic?size=20", "builtin:guess?size=8"] {
        let r = nenyax::check_uri(uri, &opts());
        assert_eq!(r.tier, Tier::Audited, "{}", r.render());
        let (_, detail) = status(&r, "verifier_discriminates");
        assert!(detail.contains("null policies"), "{detail}");
    }
    let r = nenyax::check_uri(&format!("define:{}", data("one-task.toml")), &opts());
    assert_eq!(r.tier, Tier::Audited, "{}", r.render());
}

#[test]
fn a_one_task_file_runs_every_requested_episode() {
    // The judge counts what it is shown: with --samples 8 each episode check must play the one
    // task 8 times (distinct seeds), not once.
    let (nulls, refs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, r) = (nulls.clone(), refs.clone());
    let env = TaskEnvBuilder::new("one", rows(1, "q"), move |row, reply| {
        let right = reply == row["answer"].as_str().unwrap_or_default();
        if right { &r } else { &n }.fetch_add(1, Ordering::SeqCst);
        Ok(if right { 1.0 } else { 0.0 })
    })
    .reference(|r| r["answer"].as_str().map(str::to_string))
    .build()
    .unwrap();
    let eight = CheckOptions {
        samples: 8,
        ..CheckOptions::default()
    };
    let report = check(&env, None, &eight);
    for name in ["rollout_completes", "reproducible", "parallel_consistent"] {
        let (_, detail) = status(&report, name);
        assert!(detail.starts_with("8 episodes"), "{name}: {detail}");
    }
    let (s, detail) = status(&report, "verifier_discriminates");
    assert_eq!(s, Status::Pass, "{}", report.render());
    assert!(detail.contains("8 episodes"), "{detail}");
    // rollout_completes, reproducible, parallel_consistent and the audit's reference: 4 x 8.
    assert!(refs.load(Ordering::SeqCst) >= 32, "{}", report.render());
    // The audit's null policies: at least the empty reply on each of the 8 episodes.
    assert!(nulls.load(Ordering::SeqCst) >= 8, "{}", report.render());
}

#[test]
fn steps_that_differ_between_runs_are_not_reproducible() {
    // Same seed, same policy, same score (0) every time: only the recorded steps differ.
    static NONCE: AtomicUsize = AtomicUsize::new(0);
    let env = stateful(
        "nonce-steps",
        |seed| Ok(json!({"seed": seed, "turn": 0, "nonce": 0})),
        |s| {
            Ok(json!(format!(
                "seed {} turn {} nonce {}",
                s["seed"], s["turn"], s["nonce"]
            )))
        },
        |s, _| {
            s["turn"] = json!(s["turn"].as_u64().unwrap_or(0) + 1);
            s["nonce"] = json!(NONCE.fetch_add(1, Ordering::SeqCst));
            Ok((0.0, s["turn"] == 2))
        },
        4,
    );
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "reproducible");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(detail.contains("step 0"), "{detail}");
}

#[test]
fn a_verifier_that_flips_a_coin_is_not_reproducible_in_task_mode() {
    if nenyax::sandbox::BackendKind::Jail.ready().is_err() {
        eprintln!("skipped: the harbor driver needs the jail backend");
        return;
    }
    let r = nenyax::check_uri(
        &format!("harbor:{}?backend=jail", data("harbor-coin-flip")),
        &opts(),
    );
    let (s, detail) = status(&r, "reproducible");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(detail.contains("scored"), "{detail}");
    assert_eq!(r.tier, Tier::Evaluable, "{}", r.render());
}

/// A rollout-mode environment that asks the model `calls` times per episode and records only
/// the first call in the trajectory, as an environment that talks to the model off the record.
struct OffTheRecord(Manifest, usize);

impl Environment for OffTheRecord {
    fn manifest(&self) -> &Manifest {
        &self.0
    }
    fn drive(
        &self,
        policy: &nenyax::Policy,
        _: &nenyax::RolloutOptions,
        traj: &mut nenyax::Trajectory,
    ) -> nenyax::Result<()> {
        let nenyax::Policy::Chat(model) = policy else {
            return Err(nenyax::Error::PolicyMismatch("needs a chat model".into()));
        };
        let ask = [nenyax::Message::user("What is 2 + 2?")];
        let (_, recorded) = model.complete_recorded(&ask);
        traj.model_calls.push(recorded);
        for _ in 1..self.1 {
            model.complete(&ask)?;
        }
        traj.judgment = Some(nenyax::Judgment::new(
            0.0,
            nenyax::JudgeSource::Env,
            "off-the-record",
        )?);
        Ok(())
    }
}

fn rollout_env(calls: usize) -> Arc<dyn Environment> {
    let m = Manifest::new("test:off-the-record", "off", "test", Mode::Rollout);
    Arc::new(OffTheRecord(m, calls))
}

#[test]
fn model_calls_made_off_the_record_fail_learning_signal() {
    let r = check(&rollout_env(3), None, &opts());
    let (s, detail) = status(&r, "learning_signal");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(
        detail.contains("3 model calls") && detail.contains("records 1"),
        "{detail}"
    );
    assert_eq!(r.tier, Tier::Evaluable, "{}", r.render());
    // The same environment recording every call it makes passes.
    let r = check(&rollout_env(1), None, &opts());
    assert_eq!(
        status(&r, "learning_signal").0,
        Status::Pass,
        "{}",
        r.render()
    );
}

/// An action environment that plays the policy three times per episode but records only the
/// last transition (its sessions, stepped from outside, are honest).
struct HiddenSteps(Manifest);

struct OneStep(nenyax::Observation);

impl Episode for OneStep {
    fn observation(&self) -> &nenyax::Observation {
        &self.0
    }
    fn act(&mut self, action: &serde_json::Value) -> nenyax::Result<nenyax::Step> {
        Ok(nenyax::Step {
            action: action.clone(),
            observation: self.0.clone(),
            reward: 1.0,
            terminated: true,
            truncated: false,
            info: Default::default(),
        })
    }
}

fn vector_observation() -> nenyax::Observation {
    nenyax::Observation {
        data: json!([0.0, 1.0]),
        ..Default::default()
    }
}

impl Environment for HiddenSteps {
    fn manifest(&self) -> &Manifest {
        &self.0
    }
    fn open(&self, _: Option<&TaskRef>, _: Option<i64>) -> nenyax::Result<Box<dyn Episode>> {
        Ok(Box::new(OneStep(vector_observation())))
    }
    fn reference_policy(&self, _: Option<&TaskRef>) -> Option<nenyax::Policy> {
        Some(nenyax::Policy::constant(json!(1)))
    }
    fn drive(
        &self,
        policy: &nenyax::Policy,
        _: &nenyax::RolloutOptions,
        traj: &mut nenyax::Trajectory,
    ) -> nenyax::Result<()> {
        let nenyax::Policy::Action(act) = policy else {
            return Err(nenyax::Error::PolicyMismatch(
                "needs an action policy".into(),
            ));
        };
        let obs = vector_observation();
        let mut last = json!(null);
        for _ in 0..3 {
            last = act(&obs)?;
        }
        traj.initial_observation = Some(obs.clone());
        traj.steps.push(nenyax::Step {
            action: last,
            observation: obs,
            reward: 1.0,
            terminated: true,
            truncated: false,
            info: Default::default(),
        });
        traj.judgment = Some(nenyax::Judgment::new(
            1.0,
            nenyax::JudgeSource::Env,
            "hidden",
        )?);
        Ok(())
    }
}

#[test]
fn actions_without_recorded_steps_fail_learning_signal() {
    let m = Manifest::new("test:hidden-steps", "hidden", "test", Mode::Step);
    let env: Arc<dyn Environment> = Arc::new(HiddenSteps(m));
    let r = check(&env, None, &opts());
    let (s, detail) = status(&r, "learning_signal");
    assert_eq!(s, Status::Fail, "{}", r.render());
    assert!(
        detail.contains("acted 3 times") && detail.contains("1 step"),
        "{detail}"
    );
}

#[test]
fn check_json_prints_a_report_when_the_environment_does_not_load() {
    // A typo'd target and a define: file that does not exist: stdout still holds a JSON report
    // (tier none, the load error as a failed check), stderr the error, and the status says so.
    for uri in ["builtin:arithmetc", "define:/nonexistent/conformance.toml"] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .args(["check", uri, "--json"])
            .output()
            .expect("the nenyax binary runs");
        let out = String::from_utf8_lossy(&o.stdout);
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{uri}: stdout is not a JSON report ({e}): {out:?}"));
        assert_eq!(v["env_id"], uri);
        assert_eq!(v["tier"], "none", "{v}");
        let c = &v["checks"][0];
        assert_eq!((&c["name"], &c["status"]), (&json!("load"), &json!("fail")));
        let kind = if uri.starts_with("builtin") {
            "UnknownTarget"
        } else {
            "DefineError"
        };
        assert!(c["detail"].as_str().unwrap().starts_with(kind), "{c}");
        assert_eq!(
            o.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains(kind));
    }
}
