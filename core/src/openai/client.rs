//! The one HTTP client for OpenAI-compatible servers and other JSON-over-HTTP peers, with one
//! retry policy: connection failures, 429 and 5xx are retried with exponential backoff up to a
//! cap, a `Retry-After` in seconds is honoured (under the same cap), and every other answer is
//! returned at once. Each attempt is bounded by the policy's timeout.

use serde_json::{Map, Value};
use std::time::Duration;

use super::redact::redact_url;
use super::wire::truncate;
use ureq::http::Response;
use ureq::Body;

/// Retries, backoff and timeout of a [`Client`]; configurable per endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Most extra attempts after the first.
    pub retries: u32,
    /// Wait before the first retry; doubled for each later one.
    pub backoff: Duration,
    /// Longest wait between attempts, `Retry-After` included.
    pub max_backoff: Duration,
    /// Whole-request timeout of one attempt.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    /// 3 retries, 0.5 s doubling up to 30 s, 600 s per attempt.
    fn default() -> Self {
        RetryPolicy {
            retries: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// This policy with another whole-call timeout.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        RetryPolicy { timeout, ..self }
    }

    /// This policy with at most `retries` more attempts, waiting `backoff`, then doubling.
    pub fn with_retries(self, retries: u32, backoff: Duration) -> Self {
        RetryPolicy {
            retries,
            backoff,
            ..self
        }
    }

    /// No retries (for calls that must not be repeated), each attempt bounded by `timeout`.
    pub fn once(timeout: Duration) -> Self {
        RetryPolicy {
            retries: 0,
            timeout,
            ..RetryPolicy::default()
        }
    }

    /// For a model call through the recording server, which retries the upstream itself: one
    /// attempt, bounded only by an hour (an agent's turn can be long).
    pub fn through_recorder() -> Self {
        RetryPolicy::once(Duration::from_secs(3600))
    }

    /// The wait before retry number `attempt` (0-based): the server's `Retry-After` when given,
    /// else the doubled backoff, never more than `max_backoff`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX));
        retry_after.unwrap_or(doubled).min(self.max_backoff)
    }
}

/// Whether an HTTP status is worth another attempt (rate limit or server error).
pub fn retryable_status(status: u16) -> bool {
    status == 429 || status >= 500
}

/// A call that got no usable answer: the URL, the status when the server answered, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// The URL called, any login in it replaced by `***`.
    pub url: String,
    /// The HTTP status, when there was one.
    pub status: Option<u16>,
    /// What happened (the connection error, or the start of the body).
    pub message: String,
    /// Attempts made.
    pub attempts: u32,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} returned HTTP {s}: {}", self.url, self.message),
            None => write!(f, "{}: {}", self.url, self.message),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for crate::error::Error {
    fn from(e: HttpError) -> Self {
        let message = match e.status {
            Some(s) => format!("returned HTTP {s}: {}", e.message),
            None => e.message,
        };
        crate::error::Error::Endpoint {
            url: e.url,
            message,
        }
    }
}

/// The final answer of a call and how many attempts it took. A retryable status comes back
/// here too once the retries are spent, so a proxy can pass it on as it was.
pub struct Answer {
    /// The response, body unread.
    pub response: Response<Body>,
    /// Attempts made (1 when the first one answered).
    pub attempts: u32,
}

impl Answer {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The body as text, at most `limit` bytes.
    pub fn text(&mut self, limit: u64) -> std::result::Result<String, String> {
        self.response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|e| e.to_string())
    }

    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
    }
}

/// Largest response body read by default (a long completion with logprobs fits many times).
pub const MAX_RESPONSE: u64 = crate::limits::HTTP_BODY.default;

/// A retrying HTTP client; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    policy: RetryPolicy,
    bearer: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Client")
            .field("policy", &self.policy)
            .field("bearer", &self.bearer.is_some())
            .finish()
    }
}

impl Client {
    /// A client under `policy`, statuses returned rather than raised.
    pub fn new(policy: RetryPolicy) -> Client {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(policy.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            agent,
            policy,
            bearer: None,
        }
    }

    /// The same client under another policy (a new agent when the timeout changes).
    pub fn with_policy(self, policy: RetryPolicy) -> Client {
        let bearer = self.bearer;
        Client {
            bearer,
            ..Client::new(policy)
        }
    }

    /// Send `Authorization: Bearer <key>` with every request.
    pub fn bearer(mut self, key: Option<String>) -> Client {
        self.bearer = key;
        self
    }

    /// Whether a bearer key is set.
    pub fn has_key(&self) -> bool {
        self.bearer.is_some()
    }

    /// The policy in effect.
    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// POST a JSON body, retrying under the policy.
    pub fn post_json(
        &self,
        url: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Result<Answer, HttpError> {
        self.call(url, Some(body), headers)
    }

    /// POST a JSON body and read a JSON object back. A status outside 2xx, a body that cannot
    /// be read or one that is not a JSON object is an error saying which, with the body's start.
    pub fn post_for_object(&self, url: &str, body: &Value) -> Result<Map<String, Value>, String> {
        let mut answer = self
            .post_json(url, &body.to_string(), &[])
            .map_err(|e| e.message)?;
        let status = answer.status();
        let text = answer.text(MAX_RESPONSE)?;
        if !(200..300).contains(&status) {
            return Err(format!("HTTP {status}: {}", truncate(&text, 500)));
        }
        match serde_json::from_str(&text) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(format!(
                "the reply is not a JSON object: {}",
                truncate(&text, 300)
            )),
        }
    }

    /// GET, retrying under the policy.
    pub fn get(&self, url: &str, headers: &[(&str, &str)]) -> Result<Answer, HttpError> {
        self.call(url, None, headers)
    }

    fn call(
        &self,
        url: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, HttpError> {
        let auth = self.bearer.as_ref().map(|k| format!("Bearer {k}"));
        let mut attempt = 0u32;
        loop {
            let outcome = match body {
                Some(b) => {
                    let mut r = self
                        .agent
                        .post(url)
                        .header("Content-Type", "application/json");
                    if let Some(a) = &auth {
                        r = r.header("Authorization", a);
                    }
                    for (k, v) in headers {
                        r = r.header(*k, *v);
                    }
                    r.send(b)
                }
                None => {
                    let mut r = self.agent.get(url);
                    if let Some(a) = &auth {
                        r = r.header("Authorization", a);
                    }
                    for (k, v) in headers {
                        r = r.header(*k, *v);
                    }
                    r.call()
                }
            };
            let retry_after = match outcome {
                Ok(response) => {
                    let answer = Answer {
                        response,
                        attempts: attempt + 1,
                    };
                    if !retryable_status(answer.status()) || attempt >= self.policy.retries {
                        return Ok(answer);
                    }
                    answer
                        .header("retry-after")
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        // A server may ask for any wait (`1e20`); the policy caps it anyway.
                        .map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
                }
                Err(e) => {
                    if attempt >= self.policy.retries {
                        // Callers print and record this; a login in the URL stays out of it.
                        return Err(HttpError {
                            url: redact_url(url).into_owned(),
                            status: None,
                            message: redact_url(&e.to_string()).into_owned(),
                            attempts: attempt + 1,
                        });
                    }
                    None
                }
            };
            std::thread::sleep(self.policy.delay(attempt, retry_after));
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_retry_after_wins() {
        let p = RetryPolicy {
            retries: 10,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(3),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(p.delay(0, None), Duration::from_millis(500));
        assert_eq!(p.delay(2, None), Duration::from_secs(2));
        assert_eq!(p.delay(3, None), Duration::from_secs(3));
        assert_eq!(p.delay(40, None), Duration::from_secs(3));
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(60))),
            Duration::from_secs(3)
        );
        assert!(retryable_status(429) && retryable_status(503) && !retryable_status(404));
    }
}
