//! Conformance: measure how far an environment really gets, instead of claiming plug-and-play.
//!
//! Tiers are cumulative: an environment reaches a tier only if every check at that tier and
//! below passes. A check that cannot run is a skip, and a skip blocks its tier: an unverifiable
//! verifier is not an audited one.
//!
//! | tier | checks |
//! |---|---|
//! | connectable | `manifest`, `session_opens` (step) or `tasks_listed` (other modes) |
//! | evaluable | `rollout_completes` |
//! | trainable | `reproducible`, `reproducible_fresh`, `parallel_consistent`, `learning_signal` |
//! | audited | `verifier_discriminates` |

use serde::Serialize;
use serde_json::json;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use crate::contract::{Manifest, Mode, TaskRef, Trajectory, PROTOCOL_VERSION};
use crate::env::{guard, Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::limits::count;
use crate::policy::{FunctionModel, Policy};
use crate::runner::{Job, Runner};

/// Conformance tiers, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Nothing reached.
    None,
    /// Loads, the manifest is valid, an episode can start.
    Connectable,
    /// A full episode completes with a finite judgment.
    Evaluable,
    /// Episodes are reproducible and carry a learning signal.
    Trainable,
    /// The verifier discriminates: a reference policy beats a null policy.
    Audited,
}

impl Tier {
    /// The lowercase label.
    pub fn label(self) -> &'static str {
        match self {
            Tier::None => "none",
            Tier::Connectable => "connectable",
            Tier::Evaluable => "evaluable",
            Tier::Trainable => "trainable",
            Tier::Audited => "audited",
        }
    }

    /// Parse a label.
    pub fn parse(s: &str) -> Result<Tier> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" => Tier::None,
            "connectable" => Tier::Connectable,
            "evaluable" => Tier::Evaluable,
            "trainable" => Tier::Trainable,
            "audited" => Tier::Audited,
            other => {
                return Err(Error::Config(format!(
                    "unknown tier `{other}`; use connectable, evaluable, trainable or audited"
                )))
            }
        })
    }
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It ran and held.
    Pass,
    /// It ran and did not hold.
    Fail,
    /// It could not run; blocks its tier.
    Skip,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Check name.
    pub name: String,
    /// Tier it belongs to.
    pub tier: Tier,
    /// Outcome.
    pub status: Status,
    /// Why it failed or was skipped, or what it measured.
    pub detail: String,
    /// Wall time.
    pub duration_s: f64,
}

/// The conformance report of one environment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Environment id.
    pub env_id: String,
    /// Its mode.
    pub mode: Mode,
    /// Highest tier reached.
    pub tier: Tier,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
}

impl Report {
    fn new(env_id: &str, mode: Mode) -> Self {
        Report {
            env_id: env_id.to_string(),
            mode,
            tier: Tier::None,
            checks: Vec::new(),
        }
    }

    fn finish(mut self) -> Self {
        let mut reached = Tier::None;
        for tier in [
            Tier::Connectable,
            Tier::Evaluable,
            Tier::Trainable,
            Tier::Audited,
        ] {
            let mut at = self.checks.iter().filter(|c| c.tier == tier).peekable();
            if at.peek().is_some() && at.all(|c| c.status == Status::Pass) {
                reached = tier;
            } else {
                break;
            }
        }
        self.tier = reached;
        self
    }

    /// The readable report: a header, then one line per check.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{}  [{}]  →  tier: {}\n",
            self.env_id,
            self.mode,
            self.tier.label().to_uppercase()
        );
        for c in &self.checks {
            let icon = match c.status {
                Status::Pass => "✔",
                Status::Fail => "✘",
                Status::Skip => "–",
            };
            let _ = writeln!(
                out,
                "  {icon} {:<11} {:<26} {:6.2}s  {}",
                c.tier.label(),
                c.name,
                c.duration_s,
                c.detail
            );
        }
        out
    }

    /// The JSON form: `{env_id, mode, tier, checks: [{name, tier, status, detail, duration_s}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("report serialises")
    }
}

/// What to run the checks with. From JSON (the C ABI's check options) only the numbers are
/// read: {"samples": 8, "threads": 2}.
#[derive(Clone, serde::Deserialize)]
#[serde(from = "CheckJson")]
pub struct CheckOptions {
    /// Tasks sampled per check.
    pub samples: usize,
    /// Threads for the parallel-consistency check.
    pub threads: usize,
    /// Policy used to exercise the environment; defaults to the reference policy.
    pub probe: Option<Policy>,
    /// Reference (oracle) policy override.
    pub reference: Option<Policy>,
    /// Null policy override.
    pub null: Option<Policy>,
    /// Tasks to run on the calling thread while the parallel check waits (see
    /// [`Runner::serve_caller`]).
    pub caller: Option<crossbeam_channel::Receiver<crate::runner::CallerTask>>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            samples: 8,
            threads: 2,
            probe: None,
            reference: None,
            null: None,
            caller: None,
        }
    }
}

/// The JSON form of [`CheckOptions`]: absent or null fields keep the defaults.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckJson {
    #[serde(default)]
    samples: Option<usize>,
    #[serde(default)]
    threads: Option<usize>,
}

impl From<CheckJson> for CheckOptions {
    fn from(o: CheckJson) -> Self {
        let d = CheckOptions::default();
        CheckOptions {
            samples: o.samples.unwrap_or(d.samples),
            threads: o.threads.unwrap_or(d.threads),
            ..d
        }
    }
}

/// A way to build a fresh instance of the environment (for cross-instance reproducibility).
pub type Factory<'a> = &'a dyn Fn() -> Result<Arc<dyn Environment>>;

/// Load `uri` and check it; a load failure is reported as a failed `load` check.
pub fn check_uri(uri: &str, opts: &CheckOptions) -> Report {
    let registry = crate::router::Registry::with_builtins();
    let t0 = Instant::now();
    match registry.load(uri) {
        Ok(env) => {
            let factory = || registry.load(uri);
            check(&env, Some(&factory), opts)
        }
        Err(e) => {
            let mut r = Report::new(uri, Mode::Step);
            r.checks.push(Check {
                name: "load".into(),
                tier: Tier::Connectable,
                status: Status::Fail,
                detail: format!("{}: {e}", e.kind()),
                duration_s: t0.elapsed().as_secs_f64(),
            });
            r.finish()
        }
    }
}

fn default_probe(env: &dyn Environment) -> Option<Policy> {
    env.reference_policy(None)
        .or_else(|| env.probe_policy())
        .or_else(|| {
            (env.manifest().capabilities.text || env.mode() != Mode::Step).then(|| {
                Policy::chat(FunctionModel::new("probe", |_| {
                    Ok("I don't know.".to_string())
                }))
            })
        })
}

/// A check's verdict when it ran: `Ok(note)` passes, `Err(why)` fails.
type Outcome = std::result::Result<String, String>;

fn pass() -> Result<Outcome> {
    Ok(Ok(String::new()))
}

fn fail(why: impl Into<String>) -> Result<Outcome> {
    Ok(Err(why.into()))
}

/// Compare two rollouts of the same situation; `None` when they agree.
fn same_situation(env: &dyn Environment, a: &Trajectory, b: &Trajectory) -> Option<String> {
    let (ia, ib) = (&a.initial_observation, &b.initial_observation);
    if let (Some(x), Some(y)) = (ia, ib) {
        if x.data != y.data || x.text != y.text {
            return Some("the same seed produced a different initial observation".into());
        }
    }
    if env.mode() == Mode::Step && a.score() != b.score() {
        return Some(format!(
            "the same seed and policy scored {} then {}",
            a.score().map_or("nothing".into(), |s| s.to_string()),
            b.score().map_or("nothing".into(), |s| s.to_string())
        ));
    }
    None
}

/// Roll the chosen episodes out again on `on` and compare each with the first run.
fn replay(
    env: &dyn Environment,
    on: &dyn Environment,
    probe: &Policy,
    chosen: &[Option<TaskRef>],
    first: &[Trajectory],
    what: &str,
) -> Result<Outcome> {
    for (i, task) in chosen.iter().enumerate() {
        let again = on.rollout(probe, &RolloutOptions::new(task.clone(), Some(i as i64)));
        if let Some(why) = same_situation(env, &first[i], &again) {
            return fail(format!("episode {i}: {why} ({what} expected)"));
        }
    }
    Ok(Ok(format!("{} {what}", count(chosen.len(), "episode"))))
}

/// Run the conformance suite against `env`. `factory`, when given, builds fresh instances for
/// the cross-instance reproducibility check (skipped without one).
pub fn check(env: &Arc<dyn Environment>, factory: Option<Factory>, opts: &CheckOptions) -> Report {
    let mut report = Report::new(env.id(), env.mode());
    let samples = opts.samples.max(1);
    let mut record =
        |name: &str, tier: Tier, skip: Option<String>, f: &mut dyn FnMut() -> Result<Outcome>| {
            let t0 = Instant::now();
            let (status, detail) = match skip {
                Some(why) => (Status::Skip, why),
                None => match guard(f) {
                    Ok(Ok(note)) => (Status::Pass, note),
                    Ok(Err(why)) => (Status::Fail, why),
                    Err(e) => (Status::Fail, format!("{}: {e}", e.kind())),
                },
            };
            report.checks.push(Check {
                name: name.to_string(),
                tier,
                status,
                detail,
                duration_s: t0.elapsed().as_secs_f64(),
            });
            status
        };

    // connectable ---------------------------------------------------------------------------
    record("manifest", Tier::Connectable, None, &mut || {
        let m = env.manifest();
        let back: Manifest = serde_json::from_value(json!(m))
            .map_err(|e| Error::Protocol(format!("manifest does not round-trip: {e}")))?;
        if back != *m {
            fail("manifest changes when written and read back")
        } else if m.id.is_empty() || m.name.is_empty() || m.source_format.is_empty() {
            fail("manifest has an empty id, name or source_format")
        } else if m.protocol.split('.').next() != PROTOCOL_VERSION.split('.').next() {
            fail(format!(
                "protocol {} is not compatible with {PROTOCOL_VERSION}",
                m.protocol
            ))
        } else {
            pass()
        }
    });

    let listed = env.tasks(Some(samples));
    let task_list = listed.as_ref().cloned().unwrap_or_default();
    let chosen: Vec<Option<TaskRef>> = if task_list.is_empty() {
        vec![None; samples]
    } else {
        task_list.iter().take(samples).cloned().map(Some).collect()
    };

    if env.mode() == Mode::Step {
        record("session_opens", Tier::Connectable, None, &mut || {
            let s = env.session(chosen[0].as_ref(), Some(0))?;
            let o = s.observation();
            if o.data.is_null() && o.text.is_none() && o.messages.is_none() {
                fail("the session's first observation is empty")
            } else {
                pass()
            }
        });
    } else {
        record(
            "tasks_listed",
            Tier::Connectable,
            None,
            &mut || match &listed {
                Err(e) => fail(format!("tasks() failed: {}: {e}", e.kind())),
                Ok(t) if t.is_empty() && env.manifest().num_tasks == Some(0) => {
                    fail("the environment has no tasks")
                }
                Ok(t) if t.is_empty() => {
                    Ok(Ok("no enumerable tasks; episodes are chosen by seed".into()))
                }
                Ok(t) => Ok(Ok(format!("{} tasks sampled", t.len()))),
            },
        );
    }

    // evaluable -----------------------------------------------------------------------------
    let probe = opts.probe.clone().or_else(|| default_probe(env.as_ref()));
    let mut first: Vec<Trajectory> = Vec::new();
    let ev = record(
        "rollout_completes",
        Tier::Evaluable,
        probe.is_none().then(|| {
            "no probe policy: the environment has no reference policy and is not text-driven"
                .to_string()
        }),
        &mut || {
            let probe = probe.as_ref().expect("not skipped");
            for (i, task) in chosen.iter().enumerate() {
                let t = env.rollout(probe, &RolloutOptions::new(task.clone(), Some(i as i64)));
                let err = t.error.clone();
                let judged = t.judgment.is_some();
                first.push(t);
                if let Some(e) = err {
                    return fail(format!("episode {i}: {e}"));
                }
                if !judged {
                    return fail(format!("episode {i} produced no judgment"));
                }
            }
            let mean = first.iter().filter_map(Trajectory::score).sum::<f64>() / first.len() as f64;
            Ok(Ok(format!(
                "{}, mean score {mean:.3}",
                count(first.len(), "episode")
            )))
        },
    );

    // trainable -----------------------------------------------------------------------------
    let blocked = (ev != Status::Pass).then(|| "rollouts did not complete".to_string());
    let not_resettable = (!env.manifest().capabilities.resettable)
        .then(|| "the environment does not declare seeded reset".to_string());
    let probe_ref = probe.clone();
    record(
        "reproducible",
        Tier::Trainable,
        blocked.clone().or(not_resettable.clone()),
        &mut || {
            let probe = probe_ref.as_ref().expect("not skipped");
            replay(
                env.as_ref(),
                env.as_ref(),
                probe,
                &chosen,
                &first,
                "replayed identically",
            )
        },
    );
    record(
        "reproducible_fresh",
        Tier::Trainable,
        blocked.clone().or(not_resettable.clone()).or_else(|| {
            factory
                .is_none()
                .then(|| "no way to build a fresh instance (check by URI)".to_string())
        }),
        &mut || {
            let fresh = (factory.expect("not skipped"))()?;
            let probe = probe_ref.as_ref().expect("not skipped");
            replay(
                env.as_ref(),
                fresh.as_ref(),
                probe,
                &chosen,
                &first,
                "matched on a fresh instance",
            )
        },
    );
    record(
        "parallel_consistent",
        Tier::Trainable,
        blocked.clone(),
        &mut || {
            let probe = probe_ref.as_ref().expect("not skipped");
            let mut runner = Runner::new(opts.threads.max(2))?.progress(false);
            if let Some(rx) = &opts.caller {
                runner = runner.serve_caller(rx.clone());
            }
            let jobs = chosen
                .iter()
                .enumerate()
                .map(|(i, t)| Job {
                    task: t.clone().map(Arc::new),
                    seed: Some(i as i64),
                    context: None,
                })
                .collect();
            let par = runner.collect(env, probe, jobs, None)?;
            for (i, (a, b)) in first.iter().zip(&par).enumerate() {
                if let Some(e) = &b.error {
                    return fail(format!("episode {i} failed in parallel: {e}"));
                }
                let (ja, jb) = (&a.judgment, &b.judgment);
                let differs = match (ja, jb) {
                    (Some(x), Some(y)) => x.score != y.score || x.passed != y.passed,
                    _ => true,
                };
                if differs && env.manifest().capabilities.resettable {
                    return fail(format!(
                        "episode {i}: parallel judgment {} differs from serial {}",
                        b.score().map_or("none".into(), |s| s.to_string()),
                        a.score().map_or("none".into(), |s| s.to_string())
                    ));
                }
            }
            Ok(Ok(format!(
                "{} on {} matched serial",
                count(par.len(), "episode"),
                count(runner.threads(), "thread")
            )))
        },
    );
    record(
        "learning_signal",
        Tier::Trainable,
        blocked.clone(),
        &mut || {
            if env.mode() == Mode::Step {
                for (i, t) in first.iter().enumerate() {
                    if t.steps.is_empty() {
                        return fail(format!("episode {i} recorded no steps"));
                    }
                    if let Some(s) = t.steps.iter().find(|s| !s.reward.is_finite()) {
                        return fail(format!("episode {i} has a non-finite reward {}", s.reward));
                    }
                }
                let steps: usize = first.iter().map(|t| t.steps.len()).sum();
                return Ok(Ok(format!(
                    "{}, {}, finite rewards and judgments",
                    count(first.len(), "episode"),
                    count(steps, "step")
                )));
            }
            let model_probe = env.probe_policy().unwrap_or_else(|| {
                Policy::chat(FunctionModel::new("probe", |_| Ok("I don't know.".into())))
            });
            let t = env.rollout(
                &model_probe,
                &RolloutOptions::new(chosen[0].clone(), Some(0)),
            );
            if let Some(e) = t.error {
                fail(e)
            } else if t.model_calls.is_empty() {
                fail("no model calls recorded; the environment bypassed the endpoint")
            } else if t.model_calls.iter().all(|c| c.response.is_none()) {
                fail("model calls were recorded without responses")
            } else {
                pass()
            }
        },
    );

    // audited -------------------------------------------------------------------------------
    let reference =
        |t: Option<&TaskRef>| opts.reference.clone().or_else(|| env.reference_policy(t));
    let null = |t: Option<&TaskRef>| opts.null.clone().or_else(|| env.null_policy(t));
    let have_both = reference(chosen[0].as_ref()).is_some() && null(chosen[0].as_ref()).is_some();
    record(
        "verifier_discriminates",
        Tier::Audited,
        blocked.or_else(|| {
            (!have_both).then(|| "no reference/null policy to test the verifier".to_string())
        }),
        &mut || {
            let mut bad = Vec::new();
            let (mut rs, mut ns) = (Vec::new(), Vec::new());
            for (i, task) in chosen.iter().enumerate() {
                let o = RolloutOptions::new(task.clone(), Some(i as i64));
                let (Some(rp), Some(np)) = (reference(task.as_ref()), null(task.as_ref())) else {
                    return fail(format!("no reference/null policy for task {i}"));
                };
                let r = env.rollout(&rp, &o);
                let n = env.rollout(&np, &o);
                if let Some(e) = r.error.as_ref().or(n.error.as_ref()) {
                    return fail(format!("task {i}: {e}"));
                }
                let (r, n) = (r.score().unwrap_or(0.0), n.score().unwrap_or(0.0));
                if r <= n {
                    bad.push(i);
                }
                rs.push(r);
                ns.push(n);
            }
            if bad.is_empty() {
                let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
                Ok(Ok(format!(
                    "reference {:.3} > null {:.3} on all {}",
                    mean(&rs),
                    mean(&ns),
                    count(rs.len(), "task")
                )))
            } else {
                fail(format!(
                    "reference did not beat null on tasks {bad:?} (ref={rs:?}, null={ns:?})"
                ))
            }
        },
    );
    report.finish()
}
