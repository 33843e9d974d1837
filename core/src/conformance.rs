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
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::contract::{preview, Manifest, Mode, ModelCall, TaskRef, Trajectory, PROTOCOL_VERSION};
use crate::env::{guard, Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::limits::count;
use crate::policy::{FunctionModel, Policy};
use crate::runner::{Job, Runner};

mod calls;
mod compare;
mod nulls;

use calls::{counted, Calls};
use compare::{empty_observation, same_situation, score_text};

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
    let t0 = Instant::now();
    try_check_uri(uri, opts).unwrap_or_else(|e| load_failed(uri, &e, t0.elapsed().as_secs_f64()))
}

/// Load `uri` and check it; a load failure is returned as the error.
pub fn try_check_uri(uri: &str, opts: &CheckOptions) -> Result<Report> {
    // Workers of instances the check drops (the fresh one) may serve the first instance's
    // parallel check instead of starting another interpreter.
    #[cfg(feature = "python")]
    let _recycling = crate::bridge::Recycling::start();
    std::thread::scope(|s| {
        // The fresh instance for `reproducible_fresh` loads beside the first, so that two slow
        // loads (Python interpreters importing their framework) overlap instead of queueing.
        let fresh = s.spawn(|| crate::router::Registry::with_plugins().load(uri));
        let registry = crate::router::Registry::with_plugins();
        let env = registry.load(uri)?;
        let fresh = Mutex::new(Some(fresh));
        let factory = || -> Result<Arc<dyn Environment>> {
            let handle = fresh.lock().unwrap_or_else(|p| p.into_inner()).take();
            match handle {
                Some(h) => h.join().unwrap_or_else(|p| {
                    Err(Error::Environment(format!(
                        "loading a fresh instance panicked: {}",
                        crate::error::panic_message(p.as_ref())
                    )))
                }),
                None => registry.load(uri),
            }
        };
        Ok(check(&env, Some(&factory), opts))
    })
}

/// The report of an environment that did not load: tier NONE and one failed `load` check
/// naming the error.
pub fn load_failed(uri: &str, e: &Error, duration_s: f64) -> Report {
    let mut r = Report::new(uri, Mode::Step);
    r.checks.push(Check {
        name: "load".into(),
        tier: Tier::Connectable,
        status: Status::Fail,
        detail: format!("{}: {e}", e.kind()),
        duration_s,
    });
    r.finish()
}

fn chat_probe() -> Policy {
    Policy::chat(FunctionModel::new("probe", |_| {
        Ok("I don't know.".to_string())
    }))
}

fn default_probe(env: &dyn Environment) -> Option<Policy> {
    env.reference_policy(None)
        .or_else(|| env.probe_policy())
        .or_else(|| (env.manifest().capabilities.text || env.mode() != Mode::Step).then(chat_probe))
}

/// A check's verdict when it ran: `Ok(note)` passes, `Err(why)` fails.
type Outcome = std::result::Result<String, String>;

fn pass() -> Result<Outcome> {
    Ok(Ok(String::new()))
}

fn fail(why: impl Into<String>) -> Result<Outcome> {
    Ok(Err(why.into()))
}

/// Roll the chosen episodes out again on `on` and compare each with the first run.
fn replay(
    on: &dyn Environment,
    probe: &Policy,
    chosen: &[Option<TaskRef>],
    first: &[Trajectory],
    what: &str,
) -> Result<Outcome> {
    for (i, task) in chosen.iter().enumerate() {
        let again = on.rollout(probe, &RolloutOptions::new(task.clone(), Some(i as i64)));
        if let Some(why) = same_situation(&first[i], &again) {
            return fail(format!("episode {i}: {why} ({what} expected)"));
        }
    }
    Ok(Ok(format!("{} {what}", count(chosen.len(), "episode"))))
}

/// Play each null policy once in the same situation; at once on threads unless the caller's
/// thread must serve the episodes (the C ABI's host callbacks), so a slow environment's audit
/// takes one episode's time per situation rather than one per null policy.
fn play_all(
    env: &dyn Environment,
    nulls: &[nulls::Null],
    o: &RolloutOptions,
    threads: bool,
) -> Vec<Trajectory> {
    if !threads {
        return nulls.iter().map(|n| env.rollout(&n.policy, o)).collect();
    }
    std::thread::scope(|s| {
        let running: Vec<_> = nulls
            .iter()
            .map(|n| s.spawn(|| env.rollout(&n.policy, o)))
            .collect();
        running
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|p| {
                    let mut t = Trajectory::start(env.id(), env.mode(), o.task.clone(), o.seed);
                    t.fail(&Error::Environment(format!(
                        "panicked: {}",
                        crate::error::panic_message(p.as_ref())
                    )));
                    t
                })
            })
            .collect()
    })
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
            // Where a driver says which sandbox runs it and why (harbor:), the report shows it.
            let sandbox = m.extra.get("sandbox").and_then(|s| s.get("note"));
            Ok(Ok(sandbox
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()))
        }
    });

    let listed = env.tasks(Some(samples));
    let task_list = listed.as_ref().cloned().unwrap_or_default();
    // Always `samples` episodes, each with its own seed: with fewer tasks than samples the
    // tasks repeat, so a property claimed over episodes is measured over that many.
    let chosen: Vec<Option<TaskRef>> = if task_list.is_empty() {
        vec![None; samples]
    } else {
        (0..samples)
            .map(|i| Some(task_list[i % task_list.len()].clone()))
            .collect()
    };

    if env.mode() == Mode::Step {
        record("session_opens", Tier::Connectable, None, &mut || {
            let s = env.session(chosen[0].as_ref(), Some(0))?;
            match empty_observation(s.observation()) {
                Some(why) => fail(why),
                None => pass(),
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
                Ok(t) => Ok(Ok(format!("{} sampled", count(t.len(), "task")))),
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
            replay(env.as_ref(), probe, &chosen, &first, "replayed identically")
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
                        "episode {i}: scored {} in parallel but {} serially",
                        score_text(b),
                        score_text(a)
                    ));
                }
            }
            Ok(Ok(format!(
                "{} on {} threads matched serial",
                count(par.len(), "episode"),
                runner.threads()
            )))
        },
    );
    record(
        "learning_signal",
        Tier::Trainable,
        blocked.clone(),
        &mut || {
            // Step environments are driven by the probe; the others run their own loop and
            // call a model, so a chat model plays them.
            let base = if env.mode() == Mode::Step {
                probe_ref.clone().expect("not skipped")
            } else {
                env.probe_policy().unwrap_or_else(chat_probe)
            };
            let calls = Arc::new(Calls::default());
            let counting = counted(&base, &calls);
            let policy = counting.clone().unwrap_or(base);
            let (mut steps, mut model_calls) = (0, 0);
            for (i, task) in chosen.iter().enumerate() {
                calls.take();
                let t = env.rollout(&policy, &RolloutOptions::new(task.clone(), Some(i as i64)));
                if let Some(e) = &t.error {
                    return fail(format!("episode {i}: {e}"));
                }
                let (asked, acted) = calls.take();
                let recorded: Vec<&ModelCall> =
                    t.model_calls.iter().filter(|c| !c.is_action()).collect();
                if let Some(k) = recorded
                    .iter()
                    .position(|c| c.request.is_empty() || c.response.is_none())
                {
                    return fail(format!(
                        "episode {i}: model call {k} was recorded without its request or reply"
                    ));
                }
                if counting.is_some() && recorded.len() != asked {
                    return fail(format!(
                        "episode {i}: the policy answered {} but the trajectory records {}; a \
                         call made off the record cannot be learned from",
                        count(asked, "model call"),
                        recorded.len()
                    ));
                }
                if env.mode() == Mode::Step {
                    if t.steps.is_empty() {
                        return fail(format!("episode {i} recorded no steps"));
                    }
                    if let Some(s) = t.steps.iter().find(|s| !s.reward.is_finite()) {
                        return fail(format!("episode {i} has a non-finite reward {}", s.reward));
                    }
                    // An action policy's every action is one step. A chat model's reply is at
                    // least one: an environment running its own tool loop records a step per
                    // tool call and a last one for the final answer.
                    let acted = asked + acted;
                    let short = if asked == 0 {
                        t.steps.len() != acted
                    } else {
                        t.steps.len() < acted
                    };
                    if counting.is_some() && short {
                        return fail(format!(
                            "episode {i}: the policy acted {} but {} {} recorded; every action \
                             needs its step and reward",
                            count(acted, "time"),
                            count(t.steps.len(), "step"),
                            if t.steps.len() == 1 { "was" } else { "were" }
                        ));
                    }
                } else if recorded.is_empty() {
                    return fail(format!(
                        "episode {i}: no model calls recorded; the environment bypassed the \
                         endpoint"
                    ));
                }
                steps += t.steps.len();
                model_calls += recorded.len();
            }
            Ok(Ok(format!(
                "{}, {}, {}: every call and action on the record",
                count(chosen.len(), "episode"),
                count(steps, "step"),
                count(model_calls, "model call")
            )))
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
            let mut kinds = std::collections::BTreeSet::new();
            for (i, task) in chosen.iter().enumerate() {
                let o = RolloutOptions::new(task.clone(), Some(i as i64));
                let (Some(rp), Some(np)) = (reference(task.as_ref()), null(task.as_ref())) else {
                    return fail(format!("no reference/null policy for episode {i}"));
                };
                let r = env.rollout(&rp, &o);
                if let Some(e) = &r.error {
                    return fail(format!("episode {i}: the reference policy failed: {e}"));
                }
                let rscore = r.score().unwrap_or(0.0);
                let declared = nulls::Null {
                    name: "null policy",
                    reply: String::new(),
                    policy: np,
                };
                let nulls: Vec<nulls::Null> = std::iter::once(declared)
                    .chain(nulls::derived(&rp, &r, i))
                    .collect();
                let played = play_all(env.as_ref(), &nulls, &o, opts.caller.is_none());
                let mut best = f64::NEG_INFINITY;
                for (n, t) in nulls.iter().zip(played) {
                    kinds.insert(n.name);
                    let nscore = match &t.error {
                        // The environment's own null must run; a made-up reply it refuses
                        // (not a number, say) has simply not scored.
                        Some(e) if n.name == "null policy" => {
                            return fail(format!("episode {i}: the null policy failed: {e}"))
                        }
                        Some(_) => 0.0,
                        None => t.score().unwrap_or(0.0),
                    };
                    best = best.max(nscore);
                    if nscore >= rscore {
                        let reply = if n.reply.is_empty() {
                            String::new()
                        } else {
                            format!(" {}", preview(&json!(n.reply)))
                        };
                        bad.push((
                            i,
                            format!(
                                "episode {i}: the {}{reply} scored {nscore:.3}, the reference \
                                 {rscore:.3}",
                                n.name
                            ),
                        ));
                    }
                }
                rs.push(rscore);
                ns.push(best);
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            if bad.is_empty() {
                Ok(Ok(format!(
                    "reference {:.3} > best null {:.3} in each of {} ({})",
                    mean(&rs),
                    mean(&ns),
                    count(rs.len(), "episode"),
                    match kinds.len() {
                        1 => "1 null policy".to_string(),
                        k => format!("{k} null policies"),
                    }
                )))
            } else {
                let episodes: std::collections::BTreeSet<usize> =
                    bad.iter().map(|(i, _)| *i).collect();
                let episodes: Vec<String> = episodes.iter().map(usize::to_string).collect();
                let more = bad.len().saturating_sub(3);
                bad.truncate(3);
                let shown: Vec<String> = bad.into_iter().map(|(_, why)| why).collect();
                fail(format!(
                    "the reference did not beat every null policy on episodes {}: {}{}",
                    episodes.join(", "),
                    shown.join("; "),
                    if more > 0 {
                        format!("; and {more} more")
                    } else {
                        String::new()
                    }
                ))
            }
        },
    );
    report.finish()
}
