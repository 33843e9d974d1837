//! A chat model backed by a Rust closure.

use crate::contract::{Message, Role};
use crate::error::{Error, Result};

use super::chat::ChatModel;

type ReplyFn = dyn Fn(&[Message]) -> Result<Message> + Send + Sync;

/// A chat model backed by a Rust closure: messages in, reply text out (or, with
/// [`FunctionModel::with_messages`], a whole assistant message, tool calls included).
pub struct FunctionModel {
    name: String,
    f: Box<ReplyFn>,
}

impl FunctionModel {
    /// Wrap `f`; `name` is recorded as the model name.
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&[Message]) -> Result<String> + Send + Sync + 'static,
    ) -> Self {
        FunctionModel {
            name: name.into(),
            f: Box::new(move |m| f(m).map(Message::assistant)),
        }
    }

    /// Wrap `f`, which returns the whole assistant message: text, `tool_calls`, extras. Tool
    /// calls reach tool-calling environments through both the chat-completions and the
    /// Responses routes of the recording server. A reply whose role is not `assistant` is an
    /// error naming the model.
    pub fn with_messages(
        name: impl Into<String>,
        f: impl Fn(&[Message]) -> Result<Message> + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        let who = name.clone();
        FunctionModel {
            name,
            f: Box::new(move |m| {
                let reply = f(m)?;
                if reply.role != Role::Assistant {
                    return Err(Error::Policy(format!(
                        "model `{who}` replied with role {:?}; a reply must be an assistant message",
                        reply.role
                    )));
                }
                Ok(reply)
            }),
        }
    }
}

impl ChatModel for FunctionModel {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn complete(&self, messages: &[Message]) -> Result<Message> {
        (self.f)(messages)
    }
}
