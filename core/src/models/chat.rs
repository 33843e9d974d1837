//! The [`ChatModel`] trait: a language model seen as a function from a conversation to one reply.

use serde_json::Map;
use std::time::Instant;

use crate::contract::{Message, ModelCall};
use crate::error::Result;
use crate::openai::wire::{chat_request, chat_response};
use crate::openai::Upstream;

/// A language model seen as a function from a conversation to one reply.
pub trait ChatModel: Send + Sync {
    /// A short name, recorded as the request's `model`.
    fn name(&self) -> String;

    /// Reply to `messages`.
    fn complete(&self, messages: &[Message]) -> Result<Message>;

    /// When this model is an OpenAI-compatible server, how to reach it, so that the recording
    /// server proxies calls to it (streams, tool calls and token ids intact) instead of asking
    /// [`ChatModel::complete`].
    fn upstream(&self) -> Option<Upstream> {
        None
    }

    /// This model sampling with a fixed `seed`, where it can (an [`super::Endpoint`] sends it as
    /// the request's `seed`, which vLLM, SGLang and OpenAI honour), so that a training run's
    /// episodes sample reproducibly; `None` when the model has no such knob.
    fn seeded(&self, _seed: u64) -> Option<std::sync::Arc<dyn ChatModel>> {
        None
    }

    /// Reply and record the call; the default synthesises an OpenAI-shaped request and response
    /// so that every policy's calls look alike in a trajectory. Endpoints keep the raw bodies.
    fn complete_recorded(&self, messages: &[Message]) -> (Result<Message>, ModelCall) {
        let request = chat_request(&self.name(), messages, &Map::new());
        let t0 = Instant::now();
        let result = self.complete(messages);
        let latency = t0.elapsed().as_secs_f64();
        let (response, error) = match &result {
            Ok(m) => (Some(chat_response(&self.name(), m)), None),
            Err(e) => (None, Some(format!("{}: {e}", e.kind()))),
        };
        let call = ModelCall {
            request,
            response,
            error,
            latency_s: Some(latency),
            started_at: Some(crate::contract::now_unix() - latency),
            prompt_token_ids: None,
            completion_token_ids: None,
            completion_logprobs: None,
        };
        (result, call)
    }
}
