//! Environment hubs: find environments on the Hugging Face Hub (OpenEnv Spaces), the Prime
//! Intellect Environments Hub and the Harbor registry, and make one loadable.
//!
//! [`search`] needs no key on any hub (`HF_TOKEN` and `PRIME_API_KEY` are sent when set, for
//! private entries); [`fetch`] returns the URI to load: `openenv:https://<sub>.hf.space`,
//! `verifiers:<name>` after installing the package into the Verifiers interpreter, or
//! `harbor:<folder>` after a sparse checkout of the listed tasks into the cache. Each base URL
//! can be pointed elsewhere (`HF_ENDPOINT`, `NENYAX_PRIME_API`, `NENYAX_HARBOR_REGISTRY`), which
//! is how the tests serve recorded responses.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub mod harbor;
pub mod huggingface;
pub mod prime;

/// One environment a hub lists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listing {
    /// The hub it came from (`huggingface`, `prime`, `harbor`).
    pub hub: String,
    /// The name [`fetch`] takes (`owner/space`, `owner/env`, `dataset@version`).
    pub name: String,
    /// The URI to load once fetched.
    pub uri: String,
    /// The hub's one-line description, empty when it has none.
    pub description: String,
    /// What else the hub says (likes, stars, version, task count, tags).
    pub meta: Map<String, Value>,
}

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
    match hub(hub_name)?.name {
        "huggingface" => huggingface::fetch(name),
        "prime" => prime::fetch(name),
        _ => harbor::fetch(name),
    }
}

/// Where fetched hub content is kept: `$XDG_CACHE_HOME/nenyax/hubs` or
/// `~/.cache/nenyax/hubs`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("nenyax")
        .join("hubs")
}

/// The largest hub reply read: the Harbor registry lists every task of every dataset and runs
/// to megabytes.
const MAX_REPLY: u64 = 256 << 20;

/// A variable's value, unset when empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// GET `url` with `query` pairs and an optional bearer key; the body as JSON. A host that
/// cannot be reached is one [`Error::Endpoint`] naming it and `fix` (the variable to change).
fn get_json(url: &str, query: &[(&str, String)], key: Option<String>, fix: &str) -> Result<Value> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        // A host that drops packets fails in seconds, not at the global limit.
        .timeout_connect(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(url).header("Accept", "application/json");
    for (k, v) in query {
        req = req.query(k, v);
    }
    if let Some(k) = key {
        req = req.header("Authorization", format!("Bearer {k}"));
    }
    let endpoint = |message: String| Error::Endpoint {
        url: url.to_string(),
        message,
    };
    let mut resp = req.call().map_err(|e| {
        endpoint(format!(
            "cannot reach {} ({e}); check the network, or {fix}",
            host(url)
        ))
    })?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_REPLY)
        .read_to_string()
        .map_err(|e| endpoint(format!("reading the reply: {e}")))?;
    if status == 404 {
        return Err(endpoint("not found (404)".into()));
    }
    if !(200..300).contains(&status) {
        let snippet: String = body.chars().take(200).collect();
        return Err(endpoint(format!("HTTP {status}: {snippet}")));
    }
    serde_json::from_str(&body)
        .map_err(|e| endpoint(format!("the reply is not JSON ({e}); is {fix} right?")))
}

/// The host of a URL, for messages.
/// The last non-blank line of a tool's stderr: the line that says why it failed.
fn last_error_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_string()
}

fn host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// A string field, or "".
fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}
