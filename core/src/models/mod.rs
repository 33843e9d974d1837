//! Chat models: the [`ChatModel`] trait and its two kinds, a [`FunctionModel`] (a closure) and an
//! [`Endpoint`] (any OpenAI-compatible server, described as data by [`EndpointSpec`]), plus the
//! provider presets. Depends on the OpenAI wire and the contract, never on the recording server.

mod chat;
mod endpoint;
mod function;
pub mod providers;

pub use chat::ChatModel;
pub use endpoint::{Endpoint, EndpointSpec};
pub use function::FunctionModel;
