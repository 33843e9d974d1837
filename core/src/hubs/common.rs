//! What every hub client shares: the listing type, the cache folder, and one GET of JSON
//! with one-line errors (a leaf module, so the clients and the hub table do not import each
//! other).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

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
pub(super) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// GET `url` with `query` pairs and an optional bearer key; the body as JSON. A host that
/// cannot be reached is one [`Error::Endpoint`] naming it and `fix` (the variable to change).
pub(super) fn get_json(
    url: &str,
    query: &[(&str, String)],
    key: Option<String>,
    fix: &str,
) -> Result<Value> {
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
pub(super) fn last_error_line(out: &std::process::Output) -> String {
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
pub(super) fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}
