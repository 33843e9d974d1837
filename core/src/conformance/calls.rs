//! Counting a policy's calls, so that `learning_signal` can hold each trajectory to what the
//! policy really answered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::contract::{Message, ModelCall};
use crate::error::Result;
use crate::policy::{ChatModel, Policy};

/// How often a policy was asked, so that a check can hold the trajectory to it.
#[derive(Default)]
pub(super) struct Calls {
    chat: AtomicUsize,
    action: AtomicUsize,
}

impl Calls {
    /// The chat and action calls since the last take, resetting both.
    pub(super) fn take(&self) -> (usize, usize) {
        (
            self.chat.swap(0, Ordering::SeqCst),
            self.action.swap(0, Ordering::SeqCst),
        )
    }
}

/// A chat model that counts the calls it answers.
struct CountingModel {
    inner: Arc<dyn ChatModel>,
    calls: Arc<Calls>,
}

impl ChatModel for CountingModel {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn complete(&self, messages: &[Message]) -> Result<Message> {
        self.calls.chat.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(messages)
    }

    fn complete_recorded(&self, messages: &[Message]) -> (Result<Message>, ModelCall) {
        self.calls.chat.fetch_add(1, Ordering::SeqCst);
        self.inner.complete_recorded(messages)
    }
}

/// `policy` counting its calls into `calls`; `None` when they cannot be counted (a native
/// agent, a per-episode policy, or an endpoint the recording server would call directly).
pub(super) fn counted(policy: &Policy, calls: &Arc<Calls>) -> Option<Policy> {
    match policy {
        Policy::Chat(m) if m.upstream().is_none() => Some(Policy::Chat(Arc::new(CountingModel {
            inner: m.clone(),
            calls: calls.clone(),
        }))),
        Policy::Action(f) => {
            let (f, calls) = (f.clone(), calls.clone());
            Some(Policy::action(move |obs| {
                calls.action.fetch_add(1, Ordering::SeqCst);
                f(obs)
            }))
        }
        _ => None,
    }
}
