//! [`with_judge`]: any environment with its rollouts and sessions re-judged.

use serde_json::{json, Value};
use std::sync::Arc;

use super::base::Judge;
use crate::contract::{Judgment, Manifest, TaskRef, Trajectory};
use crate::env::{guard, Environment, Episode, RolloutOptions};
use crate::error::Result;
use crate::policy::Policy;

/// A step-mode episode of a judged environment: sessions are re-judged like rollouts.
struct JudgedEpisode {
    inner: Box<dyn Episode>,
    judge: Arc<dyn Judge>,
    env_id: String,
}

impl Episode for JudgedEpisode {
    fn observation(&self) -> &crate::contract::Observation {
        self.inner.observation()
    }

    fn act(&mut self, action: &Value) -> Result<crate::contract::Step> {
        self.inner.act(action)
    }

    fn judge(&self, steps: &[crate::contract::Step]) -> Result<Judgment> {
        let mut traj = Trajectory::start(
            &self.env_id,
            crate::contract::Mode::Step,
            self.inner.task(),
            None,
        );
        traj.steps = steps.to_vec();
        traj.judgment = Some(self.inner.judge(steps)?);
        rejudge(self.judge.as_ref(), &mut traj)?;
        Ok(traj.judgment.expect("rejudge sets it"))
    }

    fn task(&self) -> Option<TaskRef> {
        self.inner.task()
    }

    fn close(&mut self) {
        self.inner.close();
    }
}

/// Replace `traj`'s judgment with `judge`'s verdict, keeping the environment's own verdict as
/// the `env` component and in `details.env_judgment` (or in metadata when the judge fails).
fn rejudge(judge: &dyn Judge, traj: &mut Trajectory) -> Result<()> {
    let env_judgment = traj.judgment.clone();
    let mut judged = guard(|| judge.judge(traj)).inspect_err(|_| {
        traj.judgment = None;
        traj.metadata
            .insert("env_judgment".into(), json!(env_judgment));
    })?;
    if let Some(env_j) = &env_judgment {
        judged.components.entry("env").or_insert(json!(env_j.score));
        judged.details.insert("env_judgment".into(), json!(env_j));
    }
    traj.judgment = Some(judged);
    Ok(())
}

/// An environment whose rollouts are re-judged by `judge`; everything else is delegated.
pub struct JudgedEnvironment {
    inner: Arc<dyn Environment>,
    judge: Arc<dyn Judge>,
    manifest: Manifest,
}

/// Wrap `env` so that `judge` scores its episodes, without touching the environment.
pub fn with_judge(env: Arc<dyn Environment>, judge: Arc<dyn Judge>) -> Arc<dyn Environment> {
    let mut manifest = env.manifest().clone();
    manifest.id = format!("{}+judge", manifest.id);
    manifest
        .extra
        .insert("judge".into(), Value::String(judge.id()));
    Arc::new(JudgedEnvironment {
        inner: env,
        judge,
        manifest,
    })
}

impl Environment for JudgedEnvironment {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        self.inner.tasks(limit)
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        Ok(Box::new(JudgedEpisode {
            inner: self.inner.open(task, seed)?,
            judge: self.judge.clone(),
            env_id: self.manifest.id.clone(),
        }))
    }

    fn drive(&self, policy: &Policy, opts: &RolloutOptions, traj: &mut Trajectory) -> Result<()> {
        let inner = self.inner.rollout(policy, opts);
        let env_id = std::mem::take(&mut traj.env_id);
        *traj = inner;
        traj.env_id = env_id;
        if traj.error.is_some() {
            return Ok(());
        }
        rejudge(self.judge.as_ref(), traj)
    }

    fn reference_policy(&self, task: Option<&TaskRef>) -> Option<Policy> {
        self.inner.reference_policy(task)
    }

    fn null_policy(&self, task: Option<&TaskRef>) -> Option<Policy> {
        self.inner.null_policy(task)
    }

    fn probe_policy(&self) -> Option<Policy> {
        self.inner.probe_policy()
    }

    fn default_max_steps(&self) -> usize {
        self.inner.default_max_steps()
    }
}
