//! How `nenyax serve` is bound and bounded.

use serde_json::Value;
use std::time::Duration;

use crate::error::{Error, Result};

/// How a server is bound and bounded.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to bind; `127.0.0.1` unless told otherwise.
    pub host: String,
    /// Port to bind; 0 picks a free one (read it back with
    /// [`Server::addr`](crate::serve::Server::addr)).
    pub port: u16,
    /// Most episode sessions (WebSocket and HTTP together) at once; more are refused with
    /// `CAPACITY_REACHED` (WS) or 503 (HTTP).
    pub max_sessions: usize,
    /// A session with no message for this long is closed and its slot freed.
    pub idle_timeout: Duration,
    /// Largest request body or WebSocket message accepted, in bytes.
    pub max_message_bytes: usize,
    /// Most open connections; more are answered 503 and closed.
    pub max_connections: usize,
    /// Interval of the server's WebSocket pings (keeps proxies and clients from dropping idle
    /// sessions).
    pub ping_interval: Duration,
    /// Longest a request head may take from its first byte to its last; a slower client gets
    /// 408 and is disconnected (the idle timeout alone never ends a byte-a-second trickle).
    pub head_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            host: "127.0.0.1".into(),
            port: 8000,
            max_sessions: 64,
            idle_timeout: Duration::from_secs(300),
            max_message_bytes: 1 << 20,
            max_connections: 1024,
            ping_interval: Duration::from_secs(20),
            head_timeout: crate::http_server::HEAD_TIMEOUT,
        }
    }
}

impl ServeOptions {
    /// Options from a JSON object with any of `host`, `port`, `max_sessions`,
    /// `idle_timeout_s`, `max_message_bytes`, `max_connections`, `ping_interval_s`,
    /// `head_timeout_s` (the C ABI's
    /// form). Unknown keys and out-of-range values are typed errors.
    pub fn from_json(v: &Value) -> Result<ServeOptions> {
        let mut o = ServeOptions::default();
        let Some(obj) = v.as_object() else {
            if v.is_null() {
                return Ok(o);
            }
            return Err(Error::Config(format!(
                "serve options must be a JSON object, got {v}"
            )));
        };
        let bad = |k: &str, want: &str, got: &Value| {
            Error::Config(format!(
                "serve option `{k}` = {got} is invalid: expected {want}"
            ))
        };
        let count = |k: &str, x: &Value| {
            x.as_u64()
                .filter(|n| *n >= 1)
                .map(|n| n as usize)
                .ok_or_else(|| bad(k, "a positive integer", x))
        };
        let secs = |k: &str, x: &Value| {
            let s = x.as_f64().ok_or_else(|| bad(k, "a number of seconds", x))?;
            crate::limits::seconds(s, false).map_err(|want| bad(k, &want, x))
        };
        for (k, x) in obj {
            match k.as_str() {
                "host" => {
                    o.host = x
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| bad(k, "an address such as 127.0.0.1", x))?
                        .to_string()
                }
                "port" => {
                    o.port = x
                        .as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .ok_or_else(|| bad(k, "a port from 0 to 65535", x))?
                }
                "max_sessions" => o.max_sessions = count(k, x)?,
                "max_connections" => o.max_connections = count(k, x)?,
                "max_message_bytes" => o.max_message_bytes = count(k, x)?,
                "idle_timeout_s" => o.idle_timeout = secs(k, x)?,
                "ping_interval_s" => o.ping_interval = secs(k, x)?,
                "head_timeout_s" => o.head_timeout = secs(k, x)?,
                other => {
                    return Err(Error::Config(format!(
                        "unknown serve option `{other}`; known: host, port, max_sessions, \
                         idle_timeout_s, max_message_bytes, max_connections, ping_interval_s, \
                         head_timeout_s"
                    )))
                }
            }
        }
        Ok(o)
    }
}
