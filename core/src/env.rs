//! The environment API: one universal call, `rollout`, and `session` where stepping from
//! outside is true.
//!
//! Drivers implement [`Environment`] (and, for step mode, [`Episode`]); callers use
//! [`Environment::rollout`], which never panics and never loses an episode: whatever fails
//! (the environment, the policy, a judge, a panic in any of them) is recorded in the returned
//! [`Trajectory`]'s `error`.

use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crate::contract::{
    JudgeSource, Judgment, Manifest, Mode, Observation, Step, TaskRef, Trajectory,
};
use crate::error::{panic_message, Error, Result};
use crate::policy::{CallLog, ChatPolicy, EpisodeContext, Policy};

/// One live step-mode episode, as a driver implements it.
pub trait Episode: Send {
    /// The current observation.
    fn observation(&self) -> &Observation;

    /// Apply `action` and return the transition.
    fn act(&mut self, action: &Value) -> Result<Step>;

    /// The episode's verdict; the default is the summed reward, on the environment's authority.
    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        let total: f64 = steps.iter().map(|s| s.reward).sum();
        Judgment::new(total, JudgeSource::Env, "env.return")
    }

    /// The task being played, when known (lets judges find the expected answer).
    fn task(&self) -> Option<TaskRef> {
        None
    }

    /// Release resources; called once.
    fn close(&mut self) {}
}

/// Where and how to roll out one episode; in JSON (the C ABI's rollout and session options)
/// {"task": TaskRef, "seed": int, "max_steps": int, "context": EpisodeContext}, every field
/// optional.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutOptions {
    /// The task; `None` lets the environment pick one from the seed.
    pub task: Option<TaskRef>,
    /// The seed.
    pub seed: Option<i64>,
    /// Step limit; `None` uses the environment's default.
    pub max_steps: Option<usize>,
    /// Which episode this is, for per-episode policies; `None`: a plain run of this task and
    /// seed ([`EpisodeContext::plain`]). When given it is recorded in `metadata.episode`.
    pub context: Option<EpisodeContext>,
}

impl RolloutOptions {
    /// Options for a given task and seed.
    pub fn new(task: Option<TaskRef>, seed: Option<i64>) -> Self {
        RolloutOptions {
            task,
            seed,
            max_steps: None,
            context: None,
        }
    }

    /// The episode's context: the given one, or a plain run's.
    pub fn episode(&self) -> EpisodeContext {
        self.context.clone().unwrap_or_else(|| {
            EpisodeContext::plain(self.task.as_ref().map(|t| t.id.clone()), self.seed)
        })
    }
}

/// A loaded environment of any format.
pub trait Environment: Send + Sync {
    /// Identity and capabilities.
    fn manifest(&self) -> &Manifest;

    /// Enumerable tasks, at most `limit`; empty when the environment has none.
    fn tasks(&self, _limit: Option<usize>) -> Result<Vec<TaskRef>> {
        Ok(Vec::new())
    }

    /// Start a step-mode episode. Only step-mode environments implement it.
    fn open(&self, _task: Option<&TaskRef>, _seed: Option<i64>) -> Result<Box<dyn Episode>> {
        Err(self.unsupported("be stepped from outside; use rollout() instead"))
    }

    /// Run one episode into `traj`. The default drives [`Environment::open`] with the policy;
    /// rollout- and task-mode drivers override it. Errors are recorded by the caller.
    fn drive(&self, policy: &Policy, opts: &RolloutOptions, traj: &mut Trajectory) -> Result<()> {
        drive_steps(self, policy, opts, traj)
    }

    /// A policy expected to succeed (an oracle), used by audits.
    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        None
    }

    /// A policy expected to fail (does nothing useful), used by audits.
    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        None
    }

    /// A cheap policy that exercises the plumbing without needing to be good.
    fn probe_policy(&self) -> Option<Policy> {
        None
    }

    /// Step limit when the caller gives none.
    fn default_max_steps(&self) -> usize {
        1000
    }

    /// The environment id (its canonical URI).
    fn id(&self) -> &str {
        &self.manifest().id
    }

    /// The mode.
    fn mode(&self) -> Mode {
        self.manifest().mode
    }

    /// Open a step-mode session; other modes give `UnsupportedCapability`.
    fn session(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Session> {
        if self.mode() != Mode::Step {
            return Err(self.unsupported(&format!(
                "be stepped from outside: it runs in {} mode; use rollout() instead",
                self.mode()
            )));
        }
        let env_id = self.id().to_string();
        let episode = guard(|| self.open(task, seed))?;
        Ok(Session::new(env_id, episode))
    }

    /// Run one episode and return its judged trajectory. Never panics: failures, panics
    /// included, are recorded in the trajectory's `error`.
    fn rollout(&self, policy: &Policy, opts: &RolloutOptions) -> Trajectory {
        let mut traj = Trajectory::start(self.id(), self.mode(), opts.task.clone(), opts.seed);
        let t0 = Instant::now();
        if let Some(ctx) = &opts.context {
            traj.metadata.insert("episode".into(), ctx.to_json());
        }
        let result = match policy {
            Policy::PerEpisode(_) => {
                let log = CallLog::default();
                let r = guard(|| {
                    let p = policy.for_episode(&opts.episode(), &log)?;
                    self.drive(&p, opts, &mut traj)
                });
                // What the policy recorded is kept, also when the episode failed part-way.
                traj.model_calls.extend(log.take());
                r
            }
            _ => guard(|| self.drive(policy, opts, &mut traj)),
        };
        if let Err(e) = result {
            traj.fail(&e);
        }
        traj.duration_s = Some(t0.elapsed().as_secs_f64());
        traj
    }

    /// The typed error for a capability this environment lacks.
    fn unsupported(&self, what: &str) -> Error {
        Error::UnsupportedCapability {
            env: self.id().to_string(),
            what: what.to_string(),
        }
    }
}

/// Which of `n` indexed tasks an episode plays: the given task's index, else `seed mod n`.
/// A task id that is not an index in range is a typed error naming the valid range.
pub fn task_index(env_id: &str, n: u64, task: Option<&TaskRef>, seed: Option<i64>) -> Result<u64> {
    match task {
        Some(t) => {
            t.id.parse::<u64>()
                .ok()
                .filter(|i| *i < n)
                .ok_or_else(|| Error::InvalidParameter {
                    driver: env_id.to_string(),
                    param: "task.id".into(),
                    value: t.id.clone(),
                    expected: format!("a task index from 0 to {}", n.saturating_sub(1)),
                })
        }
        None => Ok(seed.unwrap_or(0).rem_euclid(n.max(1) as i64) as u64),
    }
}

/// Run `f`, turning a panic into an error so nothing unwinds into callers (or across the C ABI).
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(Error::Environment(format!(
            "panicked: {}",
            panic_message(p.as_ref())
        )))
    })
}

/// Resolve a policy into something that acts on observations, for a step-mode environment.
enum Actor<'a> {
    Action(&'a crate::policy::ActionFn),
    Chat(ChatPolicy),
}

impl Actor<'_> {
    fn act(&mut self, obs: &Observation) -> Result<Value> {
        let out = catch_unwind(AssertUnwindSafe(|| match self {
            Actor::Action(f) => f(obs),
            Actor::Chat(c) => c.act(obs),
        }));
        match out {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e @ (Error::Policy(_) | Error::Endpoint { .. } | Error::Protocol(_)))) => Err(e),
            Ok(Err(e)) => Err(Error::Policy(format!("policy failed: {}: {e}", e.kind()))),
            Err(p) => Err(Error::Policy(format!(
                "policy panicked: {}",
                panic_message(p.as_ref())
            ))),
        }
    }
}

/// The step loop behind every step-mode rollout: open, act until done or the step limit, judge.
pub fn drive_steps<E: Environment + ?Sized>(
    env: &E,
    policy: &Policy,
    opts: &RolloutOptions,
    traj: &mut Trajectory,
) -> Result<()> {
    let manifest = env.manifest();
    let mut actor = match policy {
        Policy::Action(f) => Actor::Action(f.as_ref()),
        Policy::Chat(model) => {
            if !manifest.capabilities.text {
                return Err(Error::PolicyMismatch(format!(
                    "{} has non-text observations; pass an action policy, not a chat model",
                    manifest.id
                )));
            }
            Actor::Chat(ChatPolicy::new(model.clone(), None))
        }
        Policy::Native(name) => {
            return Err(Error::PolicyMismatch(format!(
            "{} is a step environment; native agent `{name}` drives task-mode environments only",
            manifest.id
        )))
        }
        Policy::PerEpisode(_) => {
            let ctx = opts.episode();
            return drive_steps(
                env,
                &policy.for_episode(&ctx, &CallLog::default())?,
                opts,
                traj,
            );
        }
    };
    crate::limits::check_max_steps(opts.max_steps)?;
    let limit = opts
        .max_steps
        .unwrap_or_else(|| env.default_max_steps())
        .max(1);
    let mut session = env.session(opts.task.as_ref(), opts.seed)?;
    // A caller may name a task by id alone, while judges need its prompt and expected answer:
    // keep what the caller gave and complete it from the environment's own view.
    traj.task = match (traj.task.take(), session.task()) {
        (Some(mut given), Some(full)) => {
            given.split = given.split.or(full.split);
            given.prompt = given.prompt.or(full.prompt);
            for (k, v) in full.metadata {
                given.metadata.entry(k).or_insert(v);
            }
            Some(given)
        }
        (given, full) => given.or(full),
    };
    traj.initial_observation = Some(session.observation().clone());
    let result = (|| {
        while !session.done() {
            if session.steps.len() >= limit {
                if let Some(last) = session.steps.last_mut() {
                    last.truncated = true;
                }
                break;
            }
            let action = actor.act(session.observation())?;
            session.advance(action)?;
        }
        traj.judgment = Some(session.judgment()?);
        Ok(())
    })();
    // Whatever the episode reached is kept, also when it failed part-way.
    traj.steps = std::mem::take(&mut session.steps);
    session.close();
    if let Actor::Chat(chat) = actor {
        traj.messages = chat.history;
        traj.model_calls = chat.calls;
    }
    result
}

/// A live step-mode episode, as callers use it: the contract's rules (finite rewards, no acting
/// after the end) are enforced here for every driver.
pub struct Session {
    env_id: String,
    episode: Box<dyn Episode>,
    steps: Vec<Step>,
    done: bool,
    closed: bool,
}

impl Session {
    fn new(env_id: String, episode: Box<dyn Episode>) -> Self {
        Session {
            env_id,
            episode,
            steps: Vec::new(),
            done: false,
            closed: false,
        }
    }

    /// The current observation.
    pub fn observation(&self) -> &Observation {
        self.episode.observation()
    }

    /// The task being played, when known.
    pub fn task(&self) -> Option<TaskRef> {
        self.episode.task()
    }

    /// True once a step terminated or truncated the episode.
    pub fn done(&self) -> bool {
        self.done
    }

    /// The transitions so far.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Apply an action. Acting after the end, or a non-finite reward, is a typed error.
    pub fn act(&mut self, action: Value) -> Result<Step> {
        self.advance(action)?;
        Ok(self.steps.last().expect("advance pushed a step").clone())
    }

    /// `act` without handing back a copy of the step (the rollout loop's hot path).
    fn advance(&mut self, action: Value) -> Result<()> {
        if self.done {
            return Err(Error::Environment(format!(
                "{}: the episode is over; open a new session",
                self.env_id
            )));
        }
        let step = guard(|| self.episode.act(&action))?;
        if !step.reward.is_finite() {
            return Err(Error::Environment(format!(
                "{} returned a non-finite reward ({}) for action {}",
                self.env_id, step.reward, action
            )));
        }
        self.done = step.done();
        self.steps.push(step);
        Ok(())
    }

    /// The judgment of the episode so far.
    pub fn judgment(&self) -> Result<Judgment> {
        guard(|| self.episode.judge(&self.steps))
    }

    /// Release the episode's resources (also done on drop).
    pub fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let _ = guard(|| {
                self.episode.close();
                Ok(())
            });
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}
