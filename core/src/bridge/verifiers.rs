//! `verifiers:` environments in rollout mode: the environment runs its own loop in a bridge
//! worker and calls the model itself, at the base URL of a
//! [`Recording`](crate::recorder::Recording) on the process's recording server, so every call
//! lands in this rollout's trajectory.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

use super::json::{number, parse};
use super::Pool;
use crate::contract::{
    JudgeSource, Judgment, Manifest, Message, Mode, Observation, RewardTiming, Role, TaskRef,
    Trajectory,
};
use crate::env::{Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::policy::{FunctionModel, Policy};
use crate::recorder::{Backend, ModelServer};

/// A Verifiers environment held by a pool of bridge workers.
pub struct VerifiersEnv {
    manifest: Manifest,
    pool: Arc<Pool>,
    has_reference: bool,
}

impl VerifiersEnv {
    pub(crate) fn new(id: &str, pool: Arc<Pool>, info: &Value) -> Result<Self> {
        let s = |k: &str| info.get(k).and_then(Value::as_str).map(str::to_string);
        let mut m = Manifest::new(
            id,
            s("name").unwrap_or_else(|| id.into()),
            "verifiers",
            Mode::Rollout,
        );
        m.version = s("version");
        m.description = s("description");
        m.num_tasks = info.get("num_tasks").and_then(Value::as_u64);
        m.capabilities.text = true;
        m.capabilities.reward_timing = RewardTiming::Terminal;
        if let Some(extra) = info.get("extra").and_then(Value::as_object) {
            m.extra = extra.clone();
        }
        Ok(VerifiersEnv {
            manifest: m,
            pool,
            has_reference: info
                .get("has_reference")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// The row a rollout runs: the given task, else the seed's row, else the first.
    fn task_id(&self, opts: &RolloutOptions) -> String {
        if let Some(t) = &opts.task {
            return t.id.clone();
        }
        let n = self.manifest.num_tasks.unwrap_or(1).max(1);
        let seed = opts.seed.unwrap_or(0).rem_euclid(n as i64);
        seed.to_string()
    }
}

/// The last user turn's text: what a row's prompt is keyed by.
fn last_user(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .and_then(Message::text)
        .unwrap_or_default()
}

impl Environment for VerifiersEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        let v = self
            .pool
            .checkout()?
            .call("tasks", json!({"limit": limit}))?;
        parse("tasks", v)
    }

    fn drive(&self, policy: &Policy, opts: &RolloutOptions, traj: &mut Trajectory) -> Result<()> {
        let model = match policy {
            Policy::Chat(m) => m.clone(),
            other => {
                return Err(Error::PolicyMismatch(format!(
                    "{} runs its own loop and calls a chat model itself, so it cannot be driven \
                     by this policy ({}); pass a chat model (an Endpoint or a FunctionModel)",
                    self.manifest.id,
                    other.kind()
                )))
            }
        };
        let recording = ModelServer::global()?.record(Backend::for_model(model.clone()));
        let task_id = self.task_id(opts);
        let mut lease = self.pool.checkout()?;
        let outcome = lease.call(
            "rollout",
            json!({
                "task_id": task_id,
                "base_url": recording.base_url(),
                "model": model.name(),
                "seed": opts.seed,
            }),
        );
        drop(lease);
        // Every call made, even by a rollout that then failed.
        traj.model_calls = recording.take();
        let r = outcome?;
        let messages = |k: &str| -> Vec<Message> {
            r.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|m| Message::from_openai(m).ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        traj.messages = messages("prompt");
        // The prompt as the environment set it, before any policy turn: what tells a trace
        // (train::trace) few-shot turns from sampled ones even when the first call is missing.
        traj.initial_observation = Some(Observation {
            text: Some(last_user(&traj.messages)),
            messages: Some(traj.messages.clone()),
            ..Observation::default()
        });
        traj.messages.extend(messages("completion"));
        let mut components = Map::new();
        for k in ["components", "metrics"] {
            if let Some(m) = r.get(k).and_then(Value::as_object) {
                components.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let reward = number(r.get("reward").unwrap_or(&Value::Null));
        let mut j = Judgment::new(
            if reward.is_finite() { reward } else { 0.0 },
            JudgeSource::Rubric,
            "verifiers.rubric",
        )?;
        j.components = components;
        if let Some(sc) = r.get("stop_condition").filter(|v| !v.is_null()) {
            j.details.insert("stop_condition".into(), sc.clone());
        }
        if !reward.is_finite() {
            j.details.insert(
                "raw_reward".into(),
                r.get("reward").cloned().unwrap_or(Value::Null),
            );
        }
        traj.judgment = Some(j);
        if let Some(info) = r.get("info").and_then(Value::as_object) {
            traj.metadata
                .insert("verifiers".into(), Value::Object(info.clone()));
        }
        if traj.task.is_none() {
            traj.task = Some(TaskRef::new(task_id));
        }
        match r.get("error").and_then(Value::as_str) {
            Some(e) if !e.is_empty() => Err(Error::Environment(format!("verifiers rollout: {e}"))),
            _ => Ok(()),
        }
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        if !self.has_reference {
            return None;
        }
        // Each row's answer, found by the question the environment asks.
        let tasks = self.tasks(None).ok()?;
        let answers: HashMap<String, String> = tasks
            .iter()
            .filter_map(|t| {
                let answer = t.metadata.get("answer")?;
                let answer = answer
                    .as_str()
                    .map_or_else(|| answer.to_string(), str::to_string);
                Some((t.prompt.clone()?, answer))
            })
            .collect();
        Some(Policy::chat(FunctionModel::new(
            "reference",
            move |messages| {
                let q = last_user(messages);
                answers.get(&q).cloned().ok_or_else(|| {
                    Error::Policy(format!("no reference answer for the question {q:?}"))
                })
            },
        )))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        // A reply that answers nothing. Not an empty one: verifiers 0.3 rejects an empty reply
        // as an EmptyModelResponseError, which would test its error path, not its rubric.
        Some(Policy::chat(FunctionModel::new("null", |_| {
            Ok("I don't know.".to_string())
        })))
    }

    fn probe_policy(&self) -> Option<Policy> {
        self.null_policy(None)
    }
}
