//! The driver interface: what every native format implements to be loaded by URI.
//!
//! It sits low (it needs only the contract's environment, errors and URIs) so that drivers and
//! the router both depend on it and never on each other.

use serde::Serialize;
use std::sync::Arc;

use crate::env::Environment;
use crate::error::Result;
use crate::uri::{ParamSpec, Uri};

/// Whether a driver can run on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "missing", rename_all = "lowercase")]
pub enum Readiness {
    /// Everything it needs is here.
    Ready,
    /// Something is missing; the text says exactly what and how to get it.
    Missing(String),
}

/// Translates one native format into the contract.
pub trait Driver: Send + Sync {
    /// The URI scheme, e.g. `builtin`.
    fn scheme(&self) -> &'static str;

    /// The native format's name, recorded as `source_format`.
    fn format(&self) -> &'static str;

    /// One line on what it loads, with an example URI.
    fn summary(&self) -> &'static str;

    /// The parameters accepted for `target` (checked before `load`).
    fn params(&self, target: &str) -> Vec<ParamSpec>;

    /// Whether it can run here.
    fn readiness(&self) -> Readiness {
        Readiness::Ready
    }

    /// Whether it can run this URI here (a URI may name its own interpreter, say).
    fn readiness_for(&self, _uri: &Uri) -> Readiness {
        self.readiness()
    }

    /// Load the environment a URI names.
    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>>;
}
