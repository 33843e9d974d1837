//! Environment hubs: find environments on the Hugging Face Hub (OpenEnv Spaces), the Prime
//! Intellect Environments Hub and the Harbor registry, and make one loadable.
//!
//! [`search`] needs no key on any hub (`HF_TOKEN` and `PRIME_API_KEY` are sent when set, for
//! private entries); [`fetch`] returns the URI to load: `openenv:https://<sub>.hf.space`,
//! `verifiers:<name>` after installing the package into the Verifiers interpreter, or
//! `harbor:<folder>` after a sparse checkout of the listed tasks into the cache. Each base URL
//! can be pointed elsewhere (`HF_ENDPOINT`, `NENYAX_PRIME_API`, `NENYAX_HARBOR_REGISTRY`), which
//! is how the tests serve recorded responses.

use crate::error::{Error, Result};

mod common;
pub mod harbor;
pub mod huggingface;
pub mod prime;

pub use common::{cache_dir, Listing};

/// A hub: its name, what it lists, and the variables that change where it is.
#[derive(Debug, Clone, Copy)]
pub struct Hub {
    /// The name [`search`] and [`fetch`] take.
    pub name: &'static str,
    /// What it lists, in a few words.
    pub title: &'static str,
    /// The variable that points it at another server, and its default.
    pub endpoint_var: &'static str,
    /// The key sent when set (never needed for search).
    pub key_var: Option<&'static str>,
}

impl Hub {
    /// The base URL or registry location in force here.
    pub fn endpoint(&self) -> String {
        match self.name {
            "huggingface" => huggingface::endpoint(),
            "prime" => prime::endpoint(),
            _ => harbor::registry_location(),
        }
    }

    /// `Ok` when it can be searched here; else what is missing. Searching needs only the
    /// network; fetching has its own tools (git for harbor, a Python for prime).
    pub fn readiness(&self) -> std::result::Result<(), String> {
        match self.name {
            "prime" => prime::readiness(),
            "harbor" => harbor::readiness(),
            _ => Ok(()),
        }
    }
}

/// Every hub, in the order `nenyax integrations` lists them.
pub const HUBS: &[Hub] = &[
    Hub {
        name: "huggingface",
        title: "Hugging Face Spaces tagged openenv",
        endpoint_var: "HF_ENDPOINT",
        key_var: Some("HF_TOKEN"),
    },
    Hub {
        name: "prime",
        title: "Prime Intellect Environments Hub (verifiers packages)",
        endpoint_var: "NENYAX_PRIME_API",
        key_var: Some("PRIME_API_KEY"),
    },
    Hub {
        name: "harbor",
        title: "Harbor registry (task datasets in git repositories)",
        endpoint_var: "NENYAX_HARBOR_REGISTRY",
        key_var: None,
    },
];

fn hub(name: &str) -> Result<&'static Hub> {
    HUBS.iter().find(|h| h.name == name).ok_or_else(|| {
        let known: Vec<&str> = HUBS.iter().map(|h| h.name).collect();
        let hint = crate::error::suggest(name, known.iter().copied())
            .map(|s| format!(" (did you mean {s}?)"))
            .unwrap_or_default();
        Error::Config(format!(
            "unknown hub {name:?}{hint}; known: {}",
            known.join(", ")
        ))
    })
}

/// The most entries one search returns.
pub const MAX_LIMIT: usize = 1000;

/// Up to `limit` (1 to [`MAX_LIMIT`]) environments on `hub` matching `query` (empty: the hub's own order).
pub fn search(hub_name: &str, query: &str, limit: usize) -> Result<Vec<Listing>> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Error::Config(format!(
            "a search limit of {limit} is out of range; give 1 to {MAX_LIMIT}"
        )));
    }
    if !HUBS.iter().any(|h| h.name == hub_name) {
        return plugin_hub(hub_name)?.search(query, limit);
    }
    match hub(hub_name)?.name {
        "huggingface" => huggingface::search(query, limit),
        "prime" => prime::search(query, limit),
        _ => harbor::search(query, limit),
    }
}

/// Make `name` (as [`search`] lists it) loadable here and return the URI to load.
pub fn fetch(hub_name: &str, name: &str) -> Result<String> {
    if name.trim().is_empty() {
        return Err(Error::Config(format!(
            "no name to fetch from {hub_name}; `nenyax search {hub_name}` lists them"
        )));
    }
    if !HUBS.iter().any(|h| h.name == hub_name) {
        return plugin_hub(hub_name)?.fetch(name);
    }
    match hub(hub_name)?.name {
        "huggingface" => huggingface::fetch(name),
        "prime" => prime::fetch(name),
        _ => harbor::fetch(name),
    }
}

/// A hub plugin named `name` (not a built-in hub); the error names the built-in hubs too.
fn plugin_hub(name: &str) -> Result<std::sync::Arc<crate::plugins::hub::LibraryHub>> {
    crate::plugins::library::find_hub(name).map_err(|e| match hub(name) {
        Err(builtin) => Error::Config(format!("{builtin}; and as a plugin: {e}")),
        Ok(_) => e,
    })
}
