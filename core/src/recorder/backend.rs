//! Who answers a recording's calls; its own file so that the stand-in recorder of a build
//! without the `servers` feature has the same type.

use std::sync::Arc;

use crate::models::ChatModel;
use crate::openai::Upstream;

/// Who answers the calls of a recording.
#[derive(Clone)]
pub enum Backend {
    /// A local model answers; the server makes the OpenAI-shaped responses itself.
    Model(Arc<dyn ChatModel>),
    /// The call is forwarded to an upstream OpenAI-compatible server.
    Upstream(Arc<Upstream>),
}

impl Backend {
    /// The backend for a chat model: proxied when the model is an OpenAI-compatible server
    /// (streams, tool calls and token ids reach the caller intact), else the model answers.
    pub fn for_model(model: Arc<dyn ChatModel>) -> Backend {
        match model.upstream() {
            Some(up) => Backend::Upstream(Arc::new(up)),
            None => Backend::Model(model),
        }
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Model(m) => write!(f, "Backend::Model({})", m.name()),
            Backend::Upstream(u) => write!(
                f,
                "Backend::Upstream({})",
                crate::openai::redact_url(&u.base_url)
            ),
        }
    }
}
