//! Policies: exactly two kinds, because environments consume exactly two kinds.
//!
//! - an action policy maps an [`Observation`] to a native action (JSON);
//! - a [`ChatModel`] maps a conversation to a reply: a [`FunctionModel`] (a closure) or an
//!   [`Endpoint`] (any OpenAI-compatible `/v1/chat/completions` server).
//!
//! A chat model drives a text step environment directly through [`ChatPolicy`]: each
//! observation becomes a user turn and the reply text becomes the action.

use serde_json::Value;
use std::sync::Arc;

use crate::contract::{Message, ModelCall, Observation};
use crate::error::Result;

// The chat models live in `models`; these names stay here for the public paths.
pub use crate::models::{ChatModel, Endpoint, EndpointSpec, FunctionModel};

/// The function type behind an action policy.
pub type ActionFn = dyn Fn(&Observation) -> Result<Value> + Send + Sync;

/// Who acts in an episode.
#[derive(Clone)]
pub enum Policy {
    /// Observation -> native action.
    Action(Arc<ActionFn>),
    /// Conversation -> reply.
    Chat(Arc<dyn ChatModel>),
    /// A format's own agent, by name (e.g. Harbor's `oracle`, `nop`).
    Native(String),
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Action(_) => f.write_str("Policy::Action"),
            Policy::Chat(m) => write!(f, "Policy::Chat({})", m.name()),
            Policy::Native(n) => write!(f, "Policy::Native({n})"),
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

    /// The kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Policy::Action(_) => "action policy",
            Policy::Chat(_) => "chat model",
            Policy::Native(_) => "native agent",
        }
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
