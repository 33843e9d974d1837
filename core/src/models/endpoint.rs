//! [`Endpoint`]: any OpenAI-compatible chat-completions server, called through the one
//! retrying client of [`crate::openai`], and [`EndpointSpec`], the same described as data.

use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::chat::ChatModel;
use super::providers::{provider, Provider, ProviderKind};
use crate::contract::{Message, ModelCall};
use crate::error::{Error, Result};
use crate::openai::wire::{add_capture, chat_request, reply_from_response, truncate};
use crate::openai::{redact_url, Client, RetryPolicy, Route, Upstream};

/// Any OpenAI-compatible chat-completions server (vLLM, SGLang, Ollama, hosted APIs).
///
/// Retries 429, 5xx and connection failures with exponential backoff, a bounded number of
/// times; other HTTP errors fail at once with the start of the server's reply.
#[derive(Clone)]
pub struct Endpoint {
    base_url: String,
    model: String,
    api_key: Option<String>,
    params: Map<String, Value>,
    stream: bool,
    capture: bool,
    gate: Option<Arc<Gate>>,
    client: Client,
}

/// At most `limit` requests in flight, shared by every clone of an endpoint.
struct Gate {
    limit: usize,
    busy: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

struct Permit<'a>(&'a Gate);

impl Gate {
    fn enter(&self) -> Permit<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy >= self.limit {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy += 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.0.freed.notify_one();
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &redact_url(&self.base_url))
            .field("model", &self.model)
            .field("policy", &self.client.policy())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint at `base_url` (e.g. `http://localhost:8000/v1`) serving `model`.
    /// Defaults: [`RetryPolicy::default`] (600 s timeout, 3 retries, 0.5 s initial backoff
    /// doubling up to 30 s), no API key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Endpoint {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            api_key: None,
            params: Map::new(),
            stream: false,
            capture: false,
            gate: None,
            client: Client::new(RetryPolicy::default()),
        }
    }

    /// Read the API key from the environment variable `var`; a missing variable is an error
    /// that names it, so a run never starts half-configured.
    pub fn api_key_from_env(self, var: &str) -> Result<Self> {
        let key = std::env::var(var).map_err(|_| {
            Error::Config(format!(
                "environment variable {var} is not set; export it with the API key for {}",
                redact_url(&self.base_url)
            ))
        })?;
        Ok(self.api_key(key))
    }

    /// Use this API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.client = self.client.bearer(Some(key.clone()));
        self.api_key = Some(key);
        self
    }

    /// Whole-request timeout.
    pub fn timeout(self, timeout: Duration) -> Self {
        let p = self.client.policy().with_timeout(timeout);
        self.retry_policy(p)
    }

    /// Retry policy: at most `retries` more attempts, waiting `backoff`, then doubling.
    pub fn retries(self, retries: u32, backoff: Duration) -> Self {
        let p = self.client.policy().with_retries(retries, backoff);
        self.retry_policy(p)
    }

    /// The whole retry policy at once (retries, backoff and its cap, timeout).
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.client = self.client.with_policy(policy);
        self
    }

    /// Ask for the reply as a stream (`stream: true`, with usage) and assemble it; for servers
    /// and models that only stream. The recorded response is the assembled body.
    pub fn stream(mut self, on: bool) -> Self {
        self.stream = on;
        self
    }

    /// Ask the server for token ids and logprobs (vLLM/SGLang `return_token_ids`, `logprobs`)
    /// on every call, direct or proxied by the recording server, so that the recorded calls
    /// are training-ready ([`crate::train::trace`]) without re-tokenising.
    pub fn capture_tokens(mut self, on: bool) -> Self {
        self.capture = on;
        self
    }

    /// At most `n` requests in flight at once across every thread using this endpoint (and its
    /// clones); the rest wait their turn. For rate-limited APIs and small local servers.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.gate = Some(Arc::new(Gate {
            limit: n.max(1),
            busy: std::sync::Mutex::new(0),
            freed: std::sync::Condvar::new(),
        }));
        self
    }

    /// A request parameter sent with every call (e.g. `temperature`, `max_tokens`).
    pub fn param(mut self, key: &str, value: Value) -> Self {
        self.params.insert(key.to_string(), value);
        self
    }

    /// The chat-completions URL.
    pub fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }

    fn post(&self, body: &Map<String, Value>) -> Result<Map<String, Value>> {
        let url = self.url();
        // The URL may carry a login (sent as basic auth); errors end up on screen and in
        // trajectories, so they name it without one.
        let fail = |message: String| Error::Endpoint {
            url: redact_url(&url).into_owned(),
            message,
        };
        let gave_up = |attempts: u32| {
            let s = if attempts == 1 { "" } else { "s" };
            format!(" (gave up after {attempts} attempt{s})")
        };
        let _permit = self.gate.as_ref().map(|g| g.enter());
        let payload = Value::Object(body.clone()).to_string();
        let mut answer = self.client.post_json(&url, &payload, &[]).map_err(|e| {
            fail(format!(
                "could not connect: {}{}",
                e.message,
                gave_up(e.attempts)
            ))
        })?;
        let status = answer.status();
        let text = answer
            .text(MAX_BODY)
            .map_err(|e| fail(format!("could not read the response body: {e}")))?;
        if !(200..300).contains(&status) {
            let mut msg = format!("returned HTTP {status}: {}", truncate(&text, 500));
            if crate::openai::client::retryable_status(status) {
                msg.push_str(&gave_up(answer.attempts));
            }
            return Err(fail(msg));
        }
        if self.stream {
            let (assembled, done) = crate::openai::assemble_stream(Route::Chat, &text);
            return match (assembled, done) {
                (Some(m), true) => Ok(m),
                _ => Err(fail(format!(
                    "returned a stream that did not end with [DONE]: {}",
                    truncate(&text, 300)
                ))),
            };
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(fail(format!(
                "returned HTTP {status} with a body that is not a JSON object: {}",
                truncate(&text, 300)
            ))),
        }
    }
}

/// Largest reply read (a long completion with logprobs fits many times over).
const MAX_BODY: u64 = 256 << 20;

impl ChatModel for Endpoint {
    // A seed the caller set explicitly wins; servers take a 31-bit non-negative integer.
    fn seeded(&self, seed: u64) -> Option<Arc<dyn ChatModel>> {
        if self.params.contains_key("seed") {
            return None;
        }
        Some(Arc::new(
            self.clone().param("seed", Value::from(seed & 0x7fff_ffff)),
        ))
    }

    fn name(&self) -> String {
        self.model.clone()
    }

    fn upstream(&self) -> Option<Upstream> {
        let mut up = Upstream::new(&self.base_url)
            .model(&self.model)
            .retry_policy(self.client.policy())
            .capture_tokens(self.capture);
        if let Some(k) = &self.api_key {
            up = up.api_key(k);
        }
        Some(up)
    }

    fn complete(&self, messages: &[Message]) -> Result<Message> {
        self.complete_recorded(messages).0
    }

    fn complete_recorded(&self, messages: &[Message]) -> (Result<Message>, ModelCall) {
        let mut request = chat_request(&self.model, messages, &self.params);
        if self.stream {
            request.insert("stream".into(), json!(true));
            request.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if self.capture {
            add_capture(Route::Chat, &mut request);
        }
        let t0 = Instant::now();
        let outcome = self.post(&request);
        let mut call = ModelCall {
            request,
            response: None,
            error: None,
            latency_s: Some(t0.elapsed().as_secs_f64()),
            started_at: Some(crate::contract::unix_time_at(t0)),
            prompt_token_ids: None,
            completion_token_ids: None,
            completion_logprobs: None,
        };
        let result = outcome.and_then(|resp| {
            call.response = Some(resp);
            call.extract_tokens();
            reply_from_response(call.response.as_ref().expect("set above"))
        });
        if let Err(e) = &result {
            call.error = Some(format!("{}: {e}", e.kind()));
        }
        (result, call)
    }
}

/// An [`Endpoint`] described as data (JSON across the C ABI, or a config file).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    /// A provider by name (`openai`, `groq`, `vllm`, ...; see `nenyax integrations`): its base
    /// URL and key variable are used unless `base_url` / `api_key_env` are given too.
    #[serde(default)]
    pub provider: Option<String>,
    /// Base URL, e.g. `http://localhost:8000/v1`; required without `provider`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model name.
    pub model: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Whole-request timeout in seconds (default 600).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Retries on 429, 5xx and connection errors (default 3).
    #[serde(default)]
    pub retries: Option<u32>,
    /// Initial backoff in seconds, doubled each retry (default 0.5).
    #[serde(default)]
    pub backoff_s: Option<f64>,
    /// Longest wait between retries in seconds, a server's `Retry-After` included (default 30).
    #[serde(default)]
    pub max_backoff_s: Option<f64>,
    /// Request parameters sent with every call (temperature, max_tokens, …).
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Ask for streamed replies and assemble them (default false).
    #[serde(default)]
    pub stream: bool,
    /// Most requests in flight at once (default: no limit).
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// Ask for token ids and logprobs on every call (default false).
    #[serde(default)]
    pub capture_tokens: bool,
}

impl EndpointSpec {
    /// Build the endpoint; bad numbers and a missing key variable are typed errors.
    pub fn build(&self) -> Result<Endpoint> {
        let secs = |name: &str, v: Option<f64>, default: f64| -> Result<Duration> {
            let v = v.unwrap_or(default);
            crate::limits::seconds(v, true)
                .map_err(|want| Error::Config(format!("endpoint `{name}` must be {want}, got {v}")))
        };
        let base = match (&self.base_url, &self.provider) {
            (Some(b), None) => Endpoint::new(b, &self.model),
            (Some(b), Some(p)) => {
                // An explicit URL wins; the provider still supplies the key variable.
                let p = provider(p)?;
                let e = Endpoint::new(b, &self.model);
                match std::env::var(p.key_var) {
                    Ok(k) if !k.is_empty() && self.api_key_env.is_none() => e.api_key(k),
                    _ => e,
                }
            }
            (None, Some(p)) if self.api_key_env.is_some() => {
                Endpoint::new(provider(p)?.base_url(), &self.model)
            }
            (None, Some(p)) => Endpoint::preset(p, &self.model)?,
            (None, None) => {
                return Err(Error::Config(
                    "an endpoint needs `base_url` or `provider` (e.g. {\"provider\": \"vllm\", \"model\": \"Qwen/Qwen3-8B\"})".into(),
                ))
            }
        };
        let d = RetryPolicy::default();
        let mut e = base.retry_policy(RetryPolicy {
            retries: self.retries.unwrap_or(d.retries),
            backoff: secs("backoff_s", self.backoff_s, d.backoff.as_secs_f64())?,
            max_backoff: secs(
                "max_backoff_s",
                self.max_backoff_s,
                d.max_backoff.as_secs_f64(),
            )?,
            timeout: secs("timeout_s", self.timeout_s, d.timeout.as_secs_f64())?,
        });
        if let Some(var) = &self.api_key_env {
            e = e.api_key_from_env(var)?;
        }
        for (k, v) in &self.params {
            e = e.param(k, v.clone());
        }
        e = e.stream(self.stream).capture_tokens(self.capture_tokens);
        if let Some(n) = self.max_concurrency {
            if n == 0 {
                return Err(Error::Config(
                    "endpoint `max_concurrency` must be at least 1".into(),
                ));
            }
            e = e.max_concurrency(n);
        }
        Ok(e)
    }
}

impl Provider {
    /// An endpoint for `model` on this provider. A hosted provider's key must be set; a local
    /// one's is used when set.
    pub fn endpoint(&self, model: &str) -> Result<Endpoint> {
        let e = Endpoint::new(self.base_url(), model);
        match (self.kind, std::env::var(self.key_var)) {
            (_, Ok(k)) if !k.is_empty() => Ok(e.api_key(k)),
            (ProviderKind::Local, _) => Ok(e),
            (ProviderKind::Hosted, _) => Err(Error::Config(format!(
                "provider `{}` needs an API key: export {} (nothing else is read or stored)",
                self.name, self.key_var
            ))),
        }
    }
}

impl Endpoint {
    /// `model` on a provider known by name (see [`super::providers::PROVIDERS`]).
    pub fn preset(provider_name: &str, model: &str) -> Result<Endpoint> {
        provider(provider_name)?.endpoint(model)
    }
}
