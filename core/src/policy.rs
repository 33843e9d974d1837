//! Policies: exactly two kinds, because environments consume exactly two kinds.
//!
//! - an action policy maps an [`Observation`] to a native action (JSON);
//! - a [`ChatModel`] maps a conversation to a reply: a [`FunctionModel`] (a closure) or an
//!   [`Endpoint`] (any OpenAI-compatible `/v1/chat/completions` server).
//!
//! A chat model drives a text step environment directly through [`ChatPolicy`]: each
//! observation becomes a user turn and the reply text becomes the action.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};

use crate::contract::{Message, ModelCall, Observation};
use crate::error::{Error, Result};
use crate::rng::splitmix64;

// The chat models live in `models`; these names stay here for the public paths.
pub use crate::models::{ChatModel, Endpoint, EndpointSpec, FunctionModel};

/// The function type behind an action policy.
pub type ActionFn = dyn Fn(&Observation) -> Result<Value> + Send + Sync;

/// The function type behind a per-episode policy: told which episode it serves (and given the
/// episode's call log, where it may record what it sampled), it returns the policy that acts.
pub type EpisodeFn = dyn Fn(&EpisodeContext, &CallLog) -> Result<Policy> + Send + Sync;

/// Who acts in an episode.
#[derive(Clone)]
pub enum Policy {
    /// Observation -> native action.
    Action(Arc<ActionFn>),
    /// Conversation -> reply.
    Chat(Arc<dyn ChatModel>),
    /// A format's own agent, by name (e.g. Harbor's `oracle`, `nop`).
    Native(String),
    /// A policy made for each episode from its [`EpisodeContext`], so that a learner can sample
    /// reproducibly and tell group members apart whatever thread runs the episode.
    PerEpisode(Arc<EpisodeFn>),
}

/// Which part of a run an episode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// A plain batch (`run`, `check`, one rollout).
    #[default]
    Run,
    /// A training rollout, whose trajectory a learner will update from.
    Train,
    /// A held-out evaluation episode.
    Eval,
}

impl Phase {
    /// Stable number, for the C ABI and seeds.
    pub fn code(self) -> u32 {
        match self {
            Phase::Run => 0,
            Phase::Train => 1,
            Phase::Eval => 2,
        }
    }
}

/// Which episode a policy call serves: passed to per-episode policies (and through the C ABI to
/// host callbacks) so that sampling can be seeded per episode and group members told apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpisodeContext {
    /// The task's id, when the episode plays a listed task.
    pub task_id: Option<String>,
    /// The environment seed.
    pub seed: Option<i64>,
    /// Training round (0: before training, and every evaluation's sampling seeds).
    pub round: u32,
    /// Group index within the round (evaluation: the held-out task's index).
    pub group: u32,
    /// Member index within the group (evaluation: the repeat).
    pub member: u32,
    /// Train, eval or a plain run.
    pub phase: Phase,
    /// Seed for this episode's sampling, derived from everything above and the run's seed; use
    /// [`EpisodeContext::step_seed`] per call so that every draw is fixed whatever the threads.
    pub sample_seed: u64,
}

impl EpisodeContext {
    /// The context of one episode of a run seeded with `run_seed`; `sample_seed` is derived.
    pub fn new(
        run_seed: i64,
        phase: Phase,
        round: u32,
        group: u32,
        member: u32,
        task_id: Option<String>,
        seed: Option<i64>,
    ) -> Self {
        let mut h = splitmix64(run_seed as u64);
        for x in [
            u64::from(phase.code()),
            u64::from(round),
            u64::from(group),
            u64::from(member),
        ] {
            h = splitmix64(h ^ x);
        }
        EpisodeContext {
            task_id,
            seed,
            round,
            group,
            member,
            phase,
            sample_seed: h,
        }
    }

    /// The default context of a rollout given only a task and a seed: a plain run, group 0.
    pub fn plain(task_id: Option<String>, seed: Option<i64>) -> Self {
        EpisodeContext::new(seed.unwrap_or(0), Phase::Run, 0, 0, 0, task_id, seed)
    }

    /// The sampling seed of the episode's `step`-th policy call (0-based).
    pub fn step_seed(&self, step: u64) -> u64 {
        splitmix64(self.sample_seed ^ splitmix64(step.wrapping_add(1)))
    }

    /// As JSON, recorded in the trajectory's `metadata.episode`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Where a per-episode policy records its calls (what it saw, sampled and how likely it was);
/// the rollout moves them into the trajectory's `model_calls`, so that action policies leave
/// training-ready traces as chat models do.
#[derive(Clone, Default)]
pub struct CallLog(Arc<Mutex<Vec<ModelCall>>>);

impl CallLog {
    /// Record one call.
    pub fn push(&self, call: ModelCall) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(call);
    }

    /// Take every call recorded so far.
    pub fn take(&self) -> Vec<ModelCall> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl ModelCall {
    /// The record of one action-policy choice: `{"model", "kind": "action"}` as the request,
    /// the action as the response, the action's token id(s) as the completion with their
    /// log-probs. A policy that tokenises its input records its prompt token ids; one that does
    /// not (the built-in softmax policy) gets the observation it saw in the request, since that
    /// is its prompt (`"observation"`). The observation is not copied otherwise: it is in the
    /// trajectory's steps already, and this runs on every step.
    pub fn action(
        model: &str,
        observation: &Observation,
        action: &Value,
        prompt_token_ids: Option<Vec<i64>>,
        completion_token_ids: Vec<i64>,
        completion_logprobs: Vec<f64>,
    ) -> ModelCall {
        let mut request = Map::new();
        request.insert("model".into(), json!(model));
        request.insert("kind".into(), json!("action"));
        if prompt_token_ids.is_none() {
            request.insert(
                "observation".into(),
                serde_json::to_value(observation).unwrap_or(Value::Null),
            );
        }
        let mut response = Map::new();
        response.insert("action".into(), action.clone());
        ModelCall {
            request,
            response: Some(response),
            error: None,
            latency_s: None,
            started_at: None,
            prompt_token_ids,
            completion_token_ids: Some(completion_token_ids),
            completion_logprobs: Some(completion_logprobs),
        }
    }

    /// Whether this is an action-policy record ([`ModelCall::action`]) rather than a chat call.
    pub fn is_action(&self) -> bool {
        self.request.get("kind").and_then(Value::as_str) == Some("action")
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Action(_) => f.write_str("Policy::Action"),
            Policy::Chat(m) => write!(f, "Policy::Chat({})", m.name()),
            Policy::Native(n) => write!(f, "Policy::Native({n})"),
            Policy::PerEpisode(_) => f.write_str("Policy::PerEpisode"),
        }
    }
}

impl Policy {
    /// An action policy from a closure.
    pub fn action(f: impl Fn(&Observation) -> Result<Value> + Send + Sync + 'static) -> Self {
        Policy::Action(Arc::new(f))
    }

    /// An action policy that always returns the same action.
    pub fn constant(action: Value) -> Self {
        Policy::action(move |_| Ok(action.clone()))
    }

    /// A chat-model policy.
    pub fn chat(model: impl ChatModel + 'static) -> Self {
        Policy::Chat(Arc::new(model))
    }

    /// A policy made per episode from its context (see [`Policy::PerEpisode`]).
    pub fn per_episode(
        f: impl Fn(&EpisodeContext, &CallLog) -> Result<Policy> + Send + Sync + 'static,
    ) -> Self {
        Policy::PerEpisode(Arc::new(f))
    }

    /// The kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Policy::Action(_) => "action policy",
            Policy::Chat(_) => "chat model",
            Policy::Native(_) => "native agent",
            Policy::PerEpisode(_) => "per-episode policy",
        }
    }

    /// The policy that acts in the episode `ctx`: itself, or what a per-episode policy makes.
    pub fn for_episode(&self, ctx: &EpisodeContext, log: &CallLog) -> Result<Policy> {
        let mut p = self.clone();
        // A factory may return another factory; a few levels are plenty, a loop is a bug.
        for _ in 0..8 {
            match p {
                Policy::PerEpisode(f) => p = f(ctx, log)?,
                other => return Ok(other),
            }
        }
        Err(Error::Policy(
            "a per-episode policy kept returning per-episode policies (8 levels); return an \
             action policy, a chat model or a native agent"
                .into(),
        ))
    }
}

/// A chat model acting in a text step environment: observations become user turns, the reply
/// text becomes the action. One per episode, since it holds the conversation.
pub struct ChatPolicy {
    model: Arc<dyn ChatModel>,
    /// The conversation so far.
    pub history: Vec<Message>,
    /// Every call made, in order.
    pub calls: Vec<ModelCall>,
}

impl ChatPolicy {
    /// Start a conversation with `model`, optionally under a system prompt.
    pub fn new(model: Arc<dyn ChatModel>, system: Option<&str>) -> Self {
        ChatPolicy {
            model,
            history: system.map(Message::system).into_iter().collect(),
            calls: Vec::new(),
        }
    }

    /// Show `obs` to the model and return its reply text as the action.
    pub fn act(&mut self, obs: &Observation) -> Result<Value> {
        match (&obs.messages, &obs.text) {
            (Some(msgs), _) if !msgs.is_empty() => self.history.extend(msgs.iter().cloned()),
            (_, Some(text)) => self.history.push(Message::user(text.clone())),
            _ => self.history.push(Message::user(obs.data.to_string())),
        }
        let (result, call) = self.model.complete_recorded(&self.history);
        self.calls.push(call);
        let reply = result?;
        let text = reply.text().unwrap_or_default();
        self.history.push(reply);
        Ok(Value::String(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use serde_json::json;

    #[test]
    fn function_model_records_openai_shaped_calls() {
        let m = FunctionModel::new("echo", |msgs| Ok(format!("{} turns", msgs.len())));
        let mut p = ChatPolicy::new(Arc::new(m), Some("be brief"));
        let a = p.act(&Observation::text("hi")).unwrap();
        assert_eq!(a, json!("2 turns"));
        assert_eq!(p.history.len(), 3);
        let call = &p.calls[0];
        assert_eq!(call.request["model"], "echo");
        assert_eq!(call.request["messages"][1]["content"], "hi");
        let resp = call.response.as_ref().unwrap();
        assert_eq!(resp["choices"][0]["message"]["content"], "2 turns");
    }

    #[test]
    fn failed_calls_are_still_recorded() {
        let m = FunctionModel::new("broken", |_| Err(Error::Policy("no".into())));
        let mut p = ChatPolicy::new(Arc::new(m), None);
        assert!(p.act(&Observation::text("hi")).is_err());
        assert_eq!(p.calls.len(), 1);
        assert!(p.calls[0].error.as_ref().unwrap().contains("no"));
    }
}
