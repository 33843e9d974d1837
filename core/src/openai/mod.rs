//! The OpenAI-compatible wire, in one place: the request and response bodies ([`wire`]), the
//! Responses API's conversions ([`responses`]), server-sent event streams ([`sse`]), the one
//! retrying HTTP client with its policy ([`client`]) and the description of an upstream server
//! ([`Upstream`]). The models (`Endpoint`), the recording server's proxy and the NeMo Gym driver
//! all speak through it; it depends on the contract only.

pub mod client;
mod redact;
pub mod responses;
pub mod sse;
mod upstream;
pub mod wire;

pub use client::{Client, HttpError, RetryPolicy};
pub use redact::redact_url;
pub use sse::assemble_stream;
pub use upstream::Upstream;
pub use wire::Route;
