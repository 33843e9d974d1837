//! JSON over HTTP to one resources server, with one cookie jar per episode (the server's signed
//! session cookie is the episode).

use serde_json::Value;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::openai::client::{Answer, Client, RetryPolicy, MAX_RESPONSE};

/// A resources server's base URL and the client that reaches it.
pub(crate) struct Server {
    pub(crate) base: String,
    client: Client,
}

/// The cookies of one episode: every `Set-Cookie` name=value seen, echoed as `Cookie:`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Jar(Vec<(String, String)>);

impl Jar {
    fn header(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| {
            self.0
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    fn merge(&mut self, set_cookie: &str) {
        let pair = set_cookie.split(';').next().unwrap_or("").trim();
        if let Some((k, v)) = pair.split_once('=') {
            let k = k.trim().to_string();
            self.0.retain(|(name, _)| name != &k);
            self.0.push((k, v.trim().to_string()));
        }
    }

    /// Whether the server has given this episode a session cookie yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An HTTP reply: its status and body text.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: String,
}

impl Reply {
    /// The body as JSON, or a protocol error naming the URL.
    pub(crate) fn json(&self, url: &str) -> Result<Value> {
        serde_json::from_str(&self.body).map_err(|e| {
            Error::Protocol(format!(
                "NeMo Gym server {url} answered HTTP {} with a body that is not JSON ({e}): {}",
                self.status,
                clip(&self.body, 300)
            ))
        })
    }

    /// Ok for 2xx; otherwise an environment error quoting the server's `detail`.
    pub(crate) fn ok(self, url: &str) -> Result<Reply> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        Err(Error::Environment(format!(
            "NeMo Gym server {url} answered HTTP {}: {}",
            self.status,
            detail(&self.body)
        )))
    }
}

/// FastAPI's error `detail` made readable: each validation error as `loc: msg (type)`.
pub(crate) fn detail(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return clip(body, 500);
    };
    match v.get("detail") {
        Some(Value::Array(errs)) => errs
            .iter()
            .map(|e| {
                let loc = e
                    .get("loc")
                    .and_then(Value::as_array)
                    .map(|l| {
                        l.iter()
                            .map(|p| match p {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join(".")
                    })
                    .unwrap_or_default();
                let msg = e.get("msg").and_then(Value::as_str).unwrap_or("");
                let kind = e.get("type").and_then(Value::as_str).unwrap_or("");
                format!("{loc}: {msg} ({kind})")
            })
            .collect::<Vec<_>>()
            .join("; "),
        Some(Value::String(s)) => s.clone(),
        Some(other) => clip(&other.to_string(), 500),
        None => clip(body, 500),
    }
}

pub(crate) use crate::openai::wire::truncate as clip;

impl Server {
    /// A server at `base` (no trailing slash), each request bounded by `timeout`. Never
    /// retried: a tool call or `/verify` that reached the server may have changed the episode.
    pub(crate) fn new(base: &str, timeout: Duration) -> Server {
        Server {
            base: base.trim_end_matches('/').to_string(),
            client: Client::new(RetryPolicy::once(timeout)),
        }
    }

    /// `base` + `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn unreachable(&self, url: &str, e: impl std::fmt::Display) -> Error {
        Error::Environment(format!(
            "NeMo Gym resources server {url} could not be reached: {e}; is the server running \
             at {}? (start one as docs/nemo-gym.md shows, or fix the URL)",
            self.base
        ))
    }

    fn reply(&self, url: &str, mut answer: Answer) -> Result<Reply> {
        let status = answer.status();
        let body = answer
            .text(MAX_RESPONSE)
            .map_err(|e| self.unreachable(url, e))?;
        Ok(Reply { status, body })
    }

    /// GET `path`.
    pub(crate) fn get(&self, path: &str) -> Result<Reply> {
        let url = self.url(path);
        let answer = self
            .client
            .get(&url, &[])
            .map_err(|e| self.unreachable(&url, e.message))?;
        self.reply(&url, answer)
    }

    /// POST a JSON body to `path` with the episode's cookies; new cookies join the jar.
    pub(crate) fn post(&self, path: &str, body: &Value, jar: &mut Jar) -> Result<Reply> {
        let url = self.url(path);
        let cookie = jar.header();
        let headers: Vec<(&str, &str)> = cookie.iter().map(|c| ("Cookie", c.as_str())).collect();
        let answer = self
            .client
            .post_json(&url, &body.to_string(), &headers)
            .map_err(|e| self.unreachable(&url, e.message))?;
        for v in answer.response.headers().get_all("set-cookie") {
            if let Ok(s) = v.to_str() {
                jar.merge(s);
            }
        }
        self.reply(&url, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jar_keeps_the_latest_value_per_name() {
        let mut j = Jar::default();
        j.merge("A___x=one; path=/; Max-Age=1209600; httponly; samesite=lax");
        j.merge("B=two");
        j.merge("A___x=three; path=/");
        assert_eq!(j.header().unwrap(), "B=two; A___x=three");
    }

    #[test]
    fn fastapi_details_are_readable() {
        let body = r#"{"detail":[{"type":"extra_forbidden","loc":["body","responses_create_params","foo"],"msg":"Extra inputs are not permitted","input":1}]}"#;
        assert_eq!(
            detail(body),
            "body.responses_create_params.foo: Extra inputs are not permitted (extra_forbidden)"
        );
        assert_eq!(detail(r#"{"detail":"Not Found"}"#), "Not Found");
    }
}
