//! The router: parses a URI and hands it to the driver registered for its scheme. The drivers
//! themselves are [`crate::drivers`]; the interface they implement is [`crate::driver`].

use serde::Serialize;
use std::sync::Arc;

pub use crate::driver::{Driver, Readiness};
use crate::env::Environment;
use crate::error::{suggest, Error, Result};
use crate::uri::Uri;

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
        Registry::with_plugins()
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
        for driver in crate::drivers::built_in() {
            r.register(driver);
        }
        r
    }

    /// The built-in drivers plus every executable driver found on `PATH` or in the plugins
    /// config (crate::plugins::external) whose scheme no built-in driver has: a built-in
    /// scheme always wins, so a stray `nenyax-driver-builtin` cannot take it over.
    pub fn with_plugins() -> Self {
        #[allow(unused_mut)]
        let mut r = Registry::with_builtins();
        #[cfg(feature = "python")]
        for driver in crate::plugins::external::discover() {
            let known = r.driver(driver.scheme()).is_some()
                || crate::drivers::LEFT_OUT
                    .iter()
                    .any(|l| l.scheme == driver.scheme());
            if !known {
                r.drivers.push(Box::new(driver));
            }
        }
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

    /// Every driver, with its readiness, then the known ones left out of this build (marked
    /// missing).
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
        for left in crate::drivers::LEFT_OUT {
            if self.driver(left.scheme).is_none() {
                out.push(DriverInfo {
                    scheme: left.scheme.to_string(),
                    format: left.scheme.to_string(),
                    summary: left.what.to_string(),
                    readiness: Readiness::Missing(left.missing()),
                });
            }
        }
        out
    }

    /// Parse `uri`, check its parameters against the driver's, and load it.
    pub fn load(&self, uri: &str) -> Result<Arc<dyn Environment>> {
        let parsed = Uri::parse(uri)?;
        let Some(driver) = self.driver(&parsed.scheme) else {
            if let Some(left) = crate::drivers::LEFT_OUT
                .iter()
                .find(|l| l.scheme == parsed.scheme)
            {
                return Err(Error::DriverUnavailable {
                    driver: parsed.scheme.clone(),
                    missing: left.missing(),
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

/// Load an environment by URI with the built-in drivers and the executable ones found here.
pub fn load(uri: &str) -> Result<Arc<dyn Environment>> {
    Registry::with_plugins().load(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_scheme_is_either_built_or_named_as_left_out() {
        let r = Registry::with_builtins();
        let schemes = [
            "builtin",
            "define",
            "reasoning_gym",
            "gymnasium",
            "verifiers",
            "openenv",
            "nemo_gym",
            "harbor",
        ];
        for scheme in schemes {
            let left = crate::drivers::LEFT_OUT.iter().find(|l| l.scheme == scheme);
            assert_ne!(r.driver(scheme).is_some(), left.is_some(), "{scheme}");
            let Some(left) = left else { continue };
            match r.load(&format!("{scheme}:anything")) {
                Err(Error::DriverUnavailable { driver, missing }) => {
                    assert_eq!(driver, scheme);
                    let feature = format!("`{}` feature", left.feature);
                    assert!(missing.contains(&feature), "{missing}");
                }
                Err(other) => panic!("{scheme}: {other}"),
                Ok(_) => panic!("{scheme} loaded though left out"),
            }
            let listed = r.list().into_iter().find(|d| d.scheme == scheme).unwrap();
            assert!(matches!(listed.readiness, Readiness::Missing(_)));
        }
        assert_eq!(r.list().len(), schemes.len());
    }
}
