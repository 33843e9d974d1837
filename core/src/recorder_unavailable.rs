//! The recording model server in a build without the `servers` feature: the same names, and a
//! typed error from [`ModelServer::start`] and [`ModelServer::global`] saying how to get it.

use std::convert::Infallible;

use crate::contract::ModelCall;
use crate::error::{Error, Result};
#[path = "recorder/backend.rs"]
mod backend;
pub use backend::Backend;
// The wire types stay reachable at their old paths: they do not need the server.
pub use crate::openai::{assemble_stream, Route, Upstream};

/// Largest request body accepted, by default.
pub const DEFAULT_MAX_BODY: usize = 32 << 20;

/// The recording model server, which this build cannot start (no value of it can exist).
#[derive(Debug)]
pub struct ModelServer {
    never: Infallible,
}

fn unavailable() -> Error {
    Error::UnsupportedCapability {
        env: "nenyax".into(),
        what: "record model calls: this build of Nenyax was built without the `servers` \
               feature (rebuild with `--features servers`)"
            .into(),
    }
}

impl ModelServer {
    /// Always a typed error: this build was made without the `servers` feature.
    pub fn start() -> Result<ModelServer> {
        Err(unavailable())
    }

    /// Always a typed error: this build was made without the `servers` feature.
    pub fn start_with(_max_body: usize) -> Result<ModelServer> {
        Err(unavailable())
    }

    /// Always a typed error: this build was made without the `servers` feature.
    pub fn global() -> Result<&'static ModelServer> {
        Err(unavailable())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        match self.never {}
    }

    /// A new recording answered by `backend`.
    pub fn record(&self, _backend: Backend) -> Recording {
        match self.never {}
    }
}

/// The calls of one rollout (no value of it can exist in this build).
#[derive(Debug)]
pub struct Recording {
    never: Infallible,
}

impl Recording {
    /// The OpenAI base URL to give the environment, ending in `/v1`.
    pub fn base_url(&self) -> &str {
        match self.never {}
    }

    /// The recording's id.
    pub fn id(&self) -> &str {
        match self.never {}
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<ModelCall> {
        match self.never {}
    }

    /// The calls so far, leaving none.
    pub fn take(&self) -> Vec<ModelCall> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_says_the_build_has_no_server() {
        for got in [ModelServer::start().err(), ModelServer::global().err()] {
            match got {
                Some(Error::UnsupportedCapability { what, .. }) => {
                    assert!(what.contains("`servers` feature"), "{what}")
                }
                Some(other) => panic!("{other}"),
                None => panic!("a recording server started"),
            }
        }
    }
}
