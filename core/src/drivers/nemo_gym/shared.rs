//! What the driver, its episodes and its tool loop share, apart from the driver itself so that
//! the episode and tool-loop modules never import their parent.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use super::http::Server;
use super::rows::Row;
use crate::contract::Message;

/// How the tool loop calls the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `POST /v1/responses` with the row's Responses create parameters (as NeMo Gym does).
    Responses,
    /// `POST /v1/chat/completions`, the parameters and items translated.
    Chat,
}

/// What every episode of one loaded environment shares.
pub(crate) struct Shared {
    pub(super) id: String,
    pub(super) server: Server,
    pub(super) close_session: bool,
    pub(super) tools: Vec<String>,
    pub(super) rows: Vec<Row>,
    pub(super) api: Api,
    pub(super) max_turns: usize,
    /// Example rollouts' model turns, by the task's prompt.
    pub(super) replay: HashMap<String, Vec<Message>>,
    pub(super) next_episode: AtomicU64,
}
