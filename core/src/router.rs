//! Drivers and the router: one driver per native format, chosen by the URI's scheme.

use serde::Serialize;
use std::sync::Arc;

use crate::env::Environment;
use crate::error::{suggest, Error, Result};
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

/// Schemes of formats that later parts of Nenyax will drive; named in errors so that a user
/// learns the scheme is right but not built yet, rather than that it is a typo.
const PLANNED: &[(&str, &str)] = &[("verifiers", "Verifiers environments (rollout mode)")];

/// A driver's entry in `nenyax drivers`.
#[derive(Debug, Clone, Serialize)]
pub struct DriverInfo {
    /// URI scheme.
    pub scheme: String,
    /// Native format.
    pub format: String,
    /// What it loads.
    pub summary: String,
    /// Whether it runs here.
    pub readiness: Readiness,
}

/// Maps schemes to drivers.
pub struct Registry {
    drivers: Vec<Box<dyn Driver>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::with_builtins()
    }
}

impl Registry {
    /// A registry with no drivers.
    pub fn empty() -> Self {
        Registry {
            drivers: Vec::new(),
        }
    }

    /// Every driver compiled into this build.
    pub fn with_builtins() -> Self {
        let mut r = Registry::empty();
        r.register(Box::new(crate::drivers::builtin::BuiltinDriver));
        r.register(Box::new(crate::define::DefineDriver));
        r.register(Box::new(crate::bridge::drivers::reasoning_gym()));
        r.register(Box::new(crate::bridge::drivers::gymnasium()));
        r.register(Box::new(crate::bridge::drivers::verifiers()));
        r.register(Box::new(crate::drivers::openenv::OpenEnvDriver));
        r.register(Box::new(crate::drivers::nemo_gym::NemoGymDriver));
        r.register(Box::new(crate::drivers::harbor::HarborDriver));
        r
    }

    /// Add a driver; a later one with the same scheme replaces the earlier.
    pub fn register(&mut self, driver: Box<dyn Driver>) {
        self.drivers.retain(|d| d.scheme() != driver.scheme());
        self.drivers.push(driver);
    }

    /// The driver for `scheme`.
    pub fn driver(&self, scheme: &str) -> Option<&dyn Driver> {
        self.drivers
            .iter()
            .find(|d| d.scheme() == scheme)
            .map(|d| d.as_ref())
    }

    /// Every driver, with its readiness, then the planned formats (marked missing).
    pub fn list(&self) -> Vec<DriverInfo> {
        let mut out: Vec<DriverInfo> = self
            .drivers
            .iter()
            .map(|d| DriverInfo {
                scheme: d.scheme().to_string(),
                format: d.format().to_string(),
                summary: d.summary().to_string(),
                readiness: d.readiness(),
            })
            .collect();
        for (scheme, what) in PLANNED {
            if self.driver(scheme).is_none() {
                out.push(DriverInfo {
                    scheme: scheme.to_string(),
                    format: scheme.to_string(),
                    summary: what.to_string(),
                    readiness: Readiness::Missing(
                        "not built yet in this version of Nenyax (see the README's status table)"
                            .into(),
                    ),
                });
            }
        }
        out
    }

    /// Parse `uri`, check its parameters against the driver's, and load it.
    pub fn load(&self, uri: &str) -> Result<Arc<dyn Environment>> {
        let parsed = Uri::parse(uri)?;
        let Some(driver) = self.driver(&parsed.scheme) else {
            if let Some((_, what)) = PLANNED.iter().find(|(s, _)| *s == parsed.scheme) {
                return Err(Error::DriverUnavailable {
                    driver: parsed.scheme.clone(),
                    missing: format!(
                        "the {what} driver is not built yet in this version of Nenyax; \
                         `nenyax drivers` lists what works today"
                    ),
                });
            }
            let mut known: Vec<String> = self
                .drivers
                .iter()
                .map(|d| d.scheme().to_string())
                .collect();
            if let Some(s) = suggest(&parsed.scheme, known.iter().map(String::as_str)) {
                known.insert(0, format!("(did you mean `{s}`?)"));
            }
            return Err(Error::UnknownScheme {
                scheme: parsed.scheme.clone(),
                uri: uri.to_string(),
                known,
            });
        };
        if let Readiness::Missing(missing) = driver.readiness_for(&parsed) {
            return Err(Error::DriverUnavailable {
                driver: parsed.scheme,
                missing,
            });
        }
        driver.load(&parsed)
    }
}

/// Load an environment by URI with the built-in drivers.
pub fn load(uri: &str) -> Result<Arc<dyn Environment>> {
    Registry::with_builtins().load(uri)
}
