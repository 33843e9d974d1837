//! Where an OpenEnv server is (`openenv:` targets: URLs, `host:port`, Hugging Face Spaces) and
//! which token it gets, and how its sessions are bounded.

use std::time::Duration;

use crate::contract::JsonMap;
use crate::error::{Error, Result};

/// The `openenv:` scheme.
pub(super) const SCHEME: &str = "openenv";

/// How sessions are opened and bounded.
pub(super) struct Config {
    /// Longest wait for one reply.
    pub(super) timeout: Duration,
    /// How often an idle session answers the server's pings.
    pub(super) keepalive: Duration,
    /// The bearer token, if any.
    pub(super) token: Option<String>,
    /// Extra reset arguments.
    pub(super) reset: JsonMap,
}

/// Where the server is: its HTTP base and its WebSocket URL.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub(super) http: String,
    pub(super) ws: String,
    pub(super) host: String,
    pub(super) port: u16,
}

impl Target {
    pub(super) fn parse(raw: &str) -> Result<Target> {
        let bad = |why: &str| Error::InvalidUri {
            uri: format!("{SCHEME}:{raw}"),
            reason: format!(
                "{why}; expected openenv:http://host:port, openenv:https://..., openenv:host:port \
                 or a Hugging Face Space id such as openenv:owner/name"
            ),
        };
        let raw = raw.trim().trim_end_matches('/');
        if raw.is_empty() {
            return Err(bad("the server is missing"));
        }
        let space = raw
            .strip_prefix("https://huggingface.co/spaces/")
            .or_else(|| raw.strip_prefix("huggingface.co/spaces/"));
        let (tls, rest) = if let Some(id) = space {
            (true, space_host(id).ok_or_else(|| bad("bad Space id"))?)
        } else if let Some(r) = raw.strip_prefix("https://") {
            (true, r.to_string())
        } else if let Some(r) = raw.strip_prefix("wss://") {
            (true, r.to_string())
        } else if let Some(r) = raw.strip_prefix("http://") {
            (false, r.to_string())
        } else if let Some(r) = raw.strip_prefix("ws://") {
            (false, r.to_string())
        } else if raw.contains("://") {
            return Err(bad("unsupported URL scheme"));
        } else if !raw.contains(':') && raw.matches('/').count() == 1 {
            (true, space_host(raw).ok_or_else(|| bad("bad Space id"))?)
        } else {
            (false, raw.to_string())
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest.as_str(), ""),
        };
        let path = path.strip_suffix("/ws").unwrap_or(path);
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse() {
                Ok(p) => (h.to_string(), p),
                Err(_) if authority.starts_with('[') && authority.ends_with(']') => {
                    (authority.to_string(), if tls { 443 } else { 80 })
                }
                Err(_) => return Err(bad(&format!("bad port `{p}`"))),
            },
            _ => (authority.to_string(), if tls { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        let (h, w) = if tls {
            ("https", "wss")
        } else {
            ("http", "ws")
        };
        Ok(Target {
            http: format!("{h}://{authority}{path}"),
            ws: format!("{w}://{authority}{path}/ws"),
            host,
            port,
        })
    }
}

/// `owner/name` → `owner-name.hf.space` (lowercase, every other character a dash).
fn space_host(id: &str) -> Option<String> {
    let (owner, name) = id.split_once('/')?;
    if owner.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    let sub: String = format!("{owner}-{name}")
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    Some(format!("{sub}.hf.space"))
}

/// The bearer token: from `token_env` when named (it must then be set), else `HF_TOKEN` for
/// Hugging Face Spaces only, so a token is never sent to a server the user did not mean.
pub(super) fn token(target: &Target, var: Option<&str>) -> Result<Option<String>> {
    match var {
        Some(v) => match std::env::var(v) {
            Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
            _ => Err(Error::InvalidParameter {
                driver: SCHEME.into(),
                param: "token_env".into(),
                value: v.into(),
                expected: format!("the name of a set environment variable; `{v}` is not set"),
            }),
        },
        None if target.host.ends_with(".hf.space") => Ok(std::env::var("HF_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let t = Target::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!(
            (t.http.as_str(), t.ws.as_str(), t.port),
            ("http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws", 8000)
        );
        let t = Target::parse("localhost:9").unwrap();
        assert_eq!(t.ws, "ws://localhost:9/ws");
        let t = Target::parse("openenv/echo_env").unwrap();
        assert_eq!(t.http, "https://openenv-echo-env.hf.space");
        assert_eq!(t.ws, "wss://openenv-echo-env.hf.space/ws");
        assert_eq!(t.port, 443);
        let t = Target::parse("https://huggingface.co/spaces/Owner/My.Env").unwrap();
        assert_eq!(t.http, "https://owner-my-env.hf.space");
        let t = Target::parse("wss://example.com/prefix/ws").unwrap();
        assert_eq!(t.http, "https://example.com/prefix");
        assert_eq!(t.ws, "wss://example.com/prefix/ws");
        assert!(Target::parse("ftp://x").is_err());
        assert!(Target::parse("").is_err());
        assert!(Target::parse("http://h:notaport").is_err());
    }
}
