//! train(): the loop, gating, reproducibility, the learners and every bad input, on the
//! built-in environments (no Python, no server).

use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nenyax::train::{
    learner, Group, LearnerParts, PgLearner, PgOptions, SoftmaxOptions, SoftmaxPolicy, TraceBatch,
    Trainer, Weights,
};
use nenyax::{load, train, EpisodeContext, Error, Learner, Phase, Policy, Result, TrainOptions};

#[path = "support/scripted_model.rs"]
mod scripted_model;
use scripted_model::scripted;

fn opts(rounds: usize, group_size: usize, batch: usize) -> TrainOptions {
    TrainOptions {
        rounds,
        group_size,
        batch,
        concurrency: 2,
        progress: false,
        ..TrainOptions::default()
    }
}

/// With NENYAX_DEMO_OUT set, keep a report for `nenyax plot` (docs/learning.md's curves).
fn keep(name: &str, r: &nenyax::TrainReport) {
    if let Ok(dir) = std::env::var("NENYAX_DEMO_OUT") {
        let path = std::path::Path::new(&dir).join(name);
        std::fs::write(path, r.to_json().to_string()).unwrap();
    }
}

fn incontext(spoilt: bool) -> Box<dyn Learner> {
    learner(
        &json!({"use": "incontext", "shots": 2}),
        LearnerParts {
            model: Some(Arc::new(scripted(spoilt))),
            ..LearnerParts::default()
        },
    )
    .unwrap()
}

#[test]
fn incontext_learns_from_its_own_best_episodes() {
    let env = load("builtin:arithmetic?size=200").unwrap();
    let mut l = incontext(false);
    let r = train(&env, l.as_mut(), &opts(2, 2, 8)).unwrap();
    keep("incontext.json", &r);
    assert!(r.baseline < 0.5, "{}", r.render());
    assert!(r.final_eval > 0.95, "{}", r.render());
    assert_eq!(r.rounds[1].outcome, "kept");
    let u = r.rounds[1].update.as_ref().unwrap();
    assert!(u.metrics["banked"] >= 1.0, "{u:?}");
    // The examples never include the held-out question itself: eval prompts are other tasks.
    assert_eq!(r.held_out, 50);
}

#[test]
fn an_update_that_makes_held_out_worse_is_reverted() {
    let env = load("builtin:arithmetic?size=200").unwrap();
    let mut l = incontext(true);
    let r = train(&env, l.as_mut(), &opts(2, 2, 8)).unwrap();
    keep("incontext-gated.json", &r);
    println!("{}", r.render());
    assert!(r.baseline > 0.5, "{}", r.render());
    assert_eq!(r.rounds[1].outcome, "reverted", "{}", r.render());
    assert!(r.rounds[1].eval_score.unwrap() < r.baseline);
    // Reverted: the run ends with the policy it started with.
    assert_eq!(r.final_eval, r.baseline);
    assert!(r.render().contains("reverted"));
    // Without the gate the same update is kept and the run ends worse: the gate did the work.
    let mut l = incontext(true);
    let ungated = TrainOptions {
        gate: false,
        ..opts(1, 2, 8)
    };
    let r = train(&env, l.as_mut(), &ungated).unwrap();
    assert_eq!(r.rounds[1].outcome, "kept");
    assert!(r.final_eval < r.baseline, "{}", r.render());
}

fn builtin_grpo(env: &Arc<dyn nenyax::Environment>) -> Box<dyn Learner> {
    learner(
        &json!({"use": "grpo", "epochs": 2, "minibatches": 2, "trainer": {"lr": 0.02}}),
        LearnerParts {
            env: Some(env.clone()),
            ..LearnerParts::default()
        },
    )
    .unwrap()
}

#[test]
fn sampling_is_reproducible_whatever_the_threads() {
    let env = load("builtin:guess?high=16&max_guesses=4&size=100").unwrap();
    let run = |threads: usize| {
        let mut l = builtin_grpo(&env);
        let o = TrainOptions {
            concurrency: threads,
            ..opts(3, 4, 8)
        };
        let r = train(&env, l.as_mut(), &o).unwrap();
        r.rounds
            .iter()
            .map(|r| {
                (
                    r.train_score,
                    r.eval_score,
                    r.update.as_ref().map(|u| u.metrics.get("loss").copied()),
                )
            })
            .collect::<Vec<_>>()
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(4));
    // And it samples: a different seed gives a different run.
    let mut l = builtin_grpo(&env);
    let other = train(
        &env,
        l.as_mut(),
        &TrainOptions {
            seed: 1,
            ..opts(3, 4, 8)
        },
    )
    .unwrap();
    assert_ne!(Some(other.rounds[1].train_score), one.get(1).map(|r| r.0));
}

#[test]
fn every_policy_call_knows_its_episode() {
    // A learner whose policy records the context of every episode it serves.
    struct Probe(Arc<Mutex<Vec<EpisodeContext>>>);
    impl Learner for Probe {
        fn name(&self) -> String {
            "probe".into()
        }
        fn policy(&mut self) -> Result<Policy> {
            let seen = self.0.clone();
            Ok(Policy::per_episode(move |ctx, _| {
                seen.lock().unwrap().push(ctx.clone());
                Ok(Policy::constant(json!(1)))
            }))
        }
        fn update(&mut self, groups: &[Group]) -> Result<nenyax::train::UpdateReport> {
            for g in groups {
                // Members of a group play one task with one seed, in member order.
                let ctx: Vec<_> = g
                    .trajectories
                    .iter()
                    .map(|t| t.metadata["episode"].clone())
                    .collect();
                assert!(ctx.iter().all(|c| c["task_id"] == ctx[0]["task_id"]));
                assert!(g.trajectories.iter().all(|t| t.seed == g.seed));
                for (m, c) in ctx.iter().enumerate() {
                    assert_eq!(c["member"], m);
                    assert_eq!(c["group"], g.index);
                    assert_eq!(c["phase"], "train");
                }
            }
            Ok(Default::default())
        }
    }
    let env = load("builtin:guess?size=40").unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut l = Probe(seen.clone());
    let r = train(&env, &mut l, &opts(2, 3, 4)).unwrap();
    assert_eq!(r.failed_rounds(), 0, "{}", r.render());
    let seen = seen.lock().unwrap();
    let train: Vec<_> = seen.iter().filter(|c| c.phase == Phase::Train).collect();
    assert_eq!(train.len(), 2 * 3 * 4);
    let mut seeds: Vec<u64> = train.iter().map(|c| c.sample_seed).collect();
    seeds.sort();
    seeds.dedup();
    assert_eq!(
        seeds.len(),
        train.len(),
        "every member samples with its own seed"
    );
    // Evaluations reuse the same sampling seeds each time (round 0 and after each round).
    let evals: Vec<_> = seen.iter().filter(|c| c.phase == Phase::Eval).collect();
    assert_eq!(evals.len(), 3 * 10);
    let first: Vec<u64> = evals
        .iter()
        .filter(|c| c.round == 0)
        .map(|c| c.sample_seed)
        .collect();
    let later: Vec<u64> = evals
        .iter()
        .filter(|c| c.round == 2)
        .map(|c| c.sample_seed)
        .collect();
    let (mut a, mut b) = (first.clone(), later.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // The report says this learner cannot be gated.
    assert!(
        !r.gated && r.render().contains("no gating"),
        "{}",
        r.render()
    );
}

#[test]
fn bad_input_is_a_typed_error_before_anything_runs() {
    let env = load("builtin:guess?size=40").unwrap();
    let parts = || LearnerParts {
        env: Some(env.clone()),
        ..LearnerParts::default()
    };
    let e = learner(&json!("grpoo"), parts()).err().unwrap();
    assert_eq!(e.kind(), "ConfigError");
    assert!(e.to_string().contains("did you mean `grpo`"), "{e}");
    let e = learner(&json!({"use": "dapo", "clip_hi": 0.3}), parts())
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("`clip_hi`") && e.to_string().contains("clip_high"),
        "{e}"
    );
    let e = learner(
        &json!({"use": "grpo", "trainer": {"lr": 0.1, "hiden": 8}}),
        parts(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("hiden"), "{e}");
    let e = learner(&json!("incontext"), parts()).err().unwrap();
    assert!(e.to_string().contains("needs a chat model"), "{e}");
    let e = learner(&json!("tinker"), parts()).err().unwrap();
    assert!(e.to_string().contains("not available"), "{e}");
    // A group of one cannot carry a group-relative signal.
    let mut l = builtin_grpo(&env);
    let e = train(&env, l.as_mut(), &opts(1, 1, 4)).unwrap_err();
    assert_eq!(e.kind(), "ConfigError");
    assert!(e.to_string().contains("group_size is 1"), "{e}");
    // The built-in policy needs a discrete action space.
    let text = load("builtin:arithmetic").unwrap();
    let e = SoftmaxPolicy::for_env(text.as_ref(), SoftmaxOptions::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("discrete action space"), "{e}");
}

/// The built-in policy behind a switch that makes it fail, or report NaN, from a given call on.
struct Flaky {
    inner: SoftmaxPolicy,
    calls: Arc<AtomicUsize>,
    fail_from: usize,
    nan: bool,
}

impl Trainer for Flaky {
    fn name(&self) -> String {
        "flaky".into()
    }
    fn policy(&mut self) -> Result<Policy> {
        self.inner.policy()
    }
    fn logprobs(&mut self, batch: &TraceBatch<'_>, w: Weights) -> Result<Vec<f64>> {
        let mut v = self.inner.logprobs(batch, w)?;
        if self.calls.fetch_add(1, Ordering::SeqCst) >= self.fail_from {
            if !self.nan {
                return Err(Error::Training("the GPU fell over".into()));
            }
            let k = batch.padded.mask.iter().position(|&m| m != 0).unwrap();
            v[k] = f64::NAN;
        }
        Ok(v)
    }
    fn apply(&mut self, batch: &TraceBatch<'_>, grad: &[f64]) -> Result<()> {
        self.inner.apply(batch, grad)
    }
    fn snapshot(&mut self) -> Result<bool> {
        self.inner.snapshot()
    }
    fn restore(&mut self) -> Result<()> {
        self.inner.restore()
    }
}

fn flaky(env: &Arc<dyn nenyax::Environment>, fail_from: usize, nan: bool) -> PgLearner {
    let alg = nenyax::learn::Algorithm::preset("rloo").unwrap();
    let inner = SoftmaxPolicy::for_env(env.as_ref(), SoftmaxOptions::default()).unwrap();
    PgLearner::new(
        "rloo",
        nenyax::train::Objective::Pg(alg),
        PgOptions::default(),
        Box::new(Flaky {
            inner,
            calls: Arc::new(AtomicUsize::new(0)),
            fail_from,
            nan,
        }),
    )
    .unwrap()
}

#[test]
fn a_failing_or_nan_trainer_fails_its_round_and_keeps_the_others() {
    let env = load("builtin:guess?high=16&max_guesses=4&size=100").unwrap();
    for nan in [false, true] {
        // rloo with one epoch asks for log-probs once per round (the old policy's, reused as
        // the current one's before the only step): the second call is round 2's.
        let mut l = flaky(&env, 1, nan);
        let r = train(&env, &mut l, &opts(3, 4, 8)).unwrap();
        let outcomes: Vec<&str> = r.rounds.iter().map(|r| r.outcome.as_str()).collect();
        assert_eq!(outcomes[0], "baseline");
        assert_ne!(outcomes[1], "failed", "{}", r.render());
        assert_eq!(outcomes[2], "failed", "{}", r.render());
        let err = r.rounds[2].error.as_deref().unwrap();
        assert!(err.starts_with("TrainingError: "), "{err}");
        if nan {
            assert!(err.contains("NaN at row 0"), "{err}");
        } else {
            assert!(err.contains("the GPU fell over"), "{err}");
        }
        // The round after a failure runs (and fails again here, the trainer being broken).
        assert_eq!(r.rounds.len(), 4);
        assert_eq!(r.failed_rounds(), 2);
        assert!(r.render().contains("failed"));
    }
}

#[test]
fn an_all_masked_batch_fails_the_round_with_the_reasons() {
    // A trainer whose policy records nothing: no trace can say what was sampled.
    struct Silent(SoftmaxPolicy);
    impl Trainer for Silent {
        fn name(&self) -> String {
            "silent".into()
        }
        fn policy(&mut self) -> Result<Policy> {
            // Members guess differently (so groups carry signal) and record nothing.
            Ok(Policy::per_episode(|ctx, _| {
                Ok(Policy::constant(json!(ctx.member * 5 + 1)))
            }))
        }
        fn logprobs(&mut self, b: &TraceBatch<'_>, w: Weights) -> Result<Vec<f64>> {
            self.0.logprobs(b, w)
        }
        fn apply(&mut self, b: &TraceBatch<'_>, g: &[f64]) -> Result<()> {
            self.0.apply(b, g)
        }
    }
    let env = load("builtin:guess?high=16&max_guesses=4&size=100").unwrap();
    let inner = SoftmaxPolicy::for_env(env.as_ref(), SoftmaxOptions::default()).unwrap();
    let mut l = PgLearner::new(
        "reinforce",
        nenyax::train::Objective::Pg(nenyax::learn::Algorithm::preset("reinforce").unwrap()),
        PgOptions::default(),
        Box::new(Silent(inner)),
    )
    .unwrap();
    let r = train(&env, &mut l, &opts(1, 4, 16)).unwrap();
    assert!(r.rounds[1].signal > 0.0, "{}", r.render());
    let err = r.rounds[1].error.as_deref().unwrap();
    assert!(
        err.contains("every trace of this round was masked"),
        "{err}"
    );
    assert!(err.contains("no_calls"), "{err}");
}

#[test]
fn rft_and_dpo_train_the_builtin_policy() {
    let env = load("builtin:guess?high=16&max_guesses=4&size=200").unwrap();
    for (cfg, metric) in [
        (json!({"use": "rft", "epochs": 2}), "targets"),
        (json!({"use": "dpo", "beta": 0.5, "epochs": 2}), "pairs"),
        (json!({"use": "reinforce_pp"}), "loss"),
        (json!({"use": "gspo"}), "loss"),
        (json!({"use": "dr_grpo"}), "loss"),
        (json!({"use": "grpo_trl"}), "kl"),
        (json!({"use": "rloo"}), "loss"),
        (json!({"use": "dapo"}), "dapo_filtered"),
        (
            json!({"use": "pg", "estimator": "rloo", "loss": "reinforce", "agg": "token-mean"}),
            "loss",
        ),
    ] {
        let mut l = learner(
            &cfg,
            LearnerParts {
                env: Some(env.clone()),
                ..LearnerParts::default()
            },
        )
        .unwrap();
        let r = train(&env, l.as_mut(), &opts(2, 4, 8)).unwrap();
        assert_eq!(r.failed_rounds(), 0, "{cfg}: {}", r.render());
        let u = r.rounds[1].update.as_ref().unwrap();
        assert!(u.metrics.contains_key(metric), "{cfg}: {u:?}");
        assert!(u.sequences > 0 || u.skipped, "{cfg}: {u:?}");
    }
}
