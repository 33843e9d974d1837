//! An upstream OpenAI-compatible server: where it is and how it is called.

use std::time::Duration;

use super::client::{Client, RetryPolicy};

/// An upstream server that recorded calls are forwarded to.
pub struct Upstream {
    pub(crate) base_url: String,
    pub(crate) model: Option<String>,
    pub(crate) capture_tokens: bool,
    pub(crate) client: Client,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Upstream")
            .field("base_url", &super::redact_url(&self.base_url))
            .field("model", &self.model)
            .field("capture_tokens", &self.capture_tokens)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Forward to `base_url` (e.g. `http://localhost:8000/v1`). Defaults: no key, the caller's
    /// model name, no token capture, and [`RetryPolicy::default`] (600 s per attempt, 3
    /// retries of refused connections, 429 and 5xx before any byte reached the caller, 0.5 s
    /// backoff doubling up to 30 s).
    pub fn new(base_url: impl Into<String>) -> Upstream {
        Upstream {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: None,
            capture_tokens: false,
            client: Client::new(RetryPolicy::default()),
        }
    }

    /// Send this key as `Authorization: Bearer`; it is never recorded.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.client = self.client.bearer(Some(key.into()));
        self
    }

    /// Replace the request's `model` with this one (environments often hard-code a name).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Ask the upstream for token ids and logprobs (vLLM/SGLang `return_token_ids`,
    /// `logprobs`), so that calls are usable for training without re-tokenizing.
    pub fn capture_tokens(mut self, on: bool) -> Self {
        self.capture_tokens = on;
        self
    }

    /// Whole-call timeout.
    pub fn timeout(self, timeout: Duration) -> Self {
        let p = self.client.policy().with_timeout(timeout);
        self.retry_policy(p)
    }

    /// At most `retries` more attempts on refused connections, 429 and 5xx.
    pub fn retries(self, retries: u32, backoff: Duration) -> Self {
        let p = self.client.policy().with_retries(retries, backoff);
        self.retry_policy(p)
    }

    /// The whole retry policy at once.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.client = self.client.with_policy(policy);
        self
    }

    /// The base URL, as given (with any login in it: print it through
    /// [`redact_url`](super::redact_url)).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The model name sent instead of the caller's, if any.
    pub fn model_name(&self) -> Option<&str> {
        self.model.as_deref()
    }
}
