//! `nenyax serve` in a build without the `servers` feature: the same names, and a typed error
//! from [`Server::start`] saying how to get the server.

use serde_json::Value;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::env::Environment;
use crate::error::{Error, Result};

/// How a server would be bound; this build has no server, so the options are only read.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {}

impl ServeOptions {
    /// Accepts any options: the error comes from [`Server::start`], which names the feature.
    pub fn from_json(_v: &Value) -> Result<ServeOptions> {
        Ok(ServeOptions {})
    }
}

/// An OpenEnv server, which this build cannot start (no value of it can exist).
pub struct Server {
    never: Infallible,
}

impl Server {
    /// Always a typed error: this build was made without the `servers` feature.
    pub fn start(env: Arc<dyn Environment>, _opts: ServeOptions) -> Result<Server> {
        Err(Error::UnsupportedCapability {
            env: env.manifest().id.clone(),
            what: "be served: this build of Nenyax was built without the `servers` feature \
                   (rebuild with `--features servers`)"
                .into(),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        match self.never {}
    }

    /// The base URL clients use.
    pub fn url(&self) -> String {
        match self.never {}
    }

    /// Live episode sessions.
    pub fn active_sessions(&self) -> usize {
        match self.never {}
    }

    /// Block until the server stops.
    pub fn wait(self) {
        match self.never {}
    }

    /// Stop the server.
    pub fn stop(self) {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_says_the_build_has_no_server() {
        let env = crate::router::load("builtin:arithmetic?size=2").unwrap();
        let opts = ServeOptions::from_json(&serde_json::json!({"port": 0})).unwrap();
        match Server::start(env, opts) {
            Err(Error::UnsupportedCapability { what, .. }) => {
                assert!(what.contains("`servers` feature"), "{what}")
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a server started"),
        }
    }
}
