//! The Nenyax contract: the data every environment exchanges, whatever its native format.
//!
//! Field names and JSON shapes are interchangeable with the Python reference (`nenyax==0.1.0a1`):
//! every field is written (nulls included) so that either side can read what the other wrote.
//! See docs/protocol.md.

mod common;
mod manifest;
mod messages;
mod trajectory;

pub use common::*;
pub use manifest::*;
pub use messages::*;
pub use trajectory::*;

#[cfg(test)]
mod tests;
