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
    assert!(detail.contains("differs from serial"), "{detail}");
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
        detail.contains("reference did not beat null on tasks [0, 1, 2, 3]"),
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
