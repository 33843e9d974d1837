//! Policies: exactly two kinds, because environments consume exactly two kinds.
//!
//! - an action policy maps an [`Observation`] to a native action (JSON);
//! - a [`ChatModel`] maps a conversation to a reply: a [`FunctionModel`] (a closure) or an
//!   [`Endpoint`] (any OpenAI-compatible `/v1/chat/completions` server).
//!
//! A chat model drives a text step environment directly through [`ChatPolicy`]: each
//! observation becomes a user turn and the reply text becomes the action.

use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::{fresh_id, preview, Message, ModelCall, Observation, Role};
use crate::error::{Error, Result};

/// The function type behind an action policy.
pub type ActionFn = dyn Fn(&Observation) -> Result<Value> + Send + Sync;

/// A language model seen as a function from a conversation to one reply.
pub trait ChatModel: Send + Sync {
    /// A short name, recorded as the request's `model`.
    fn name(&self) -> String;

    /// Reply to `messages`.
    fn complete(&self, messages: &[Message]) -> Result<Message>;

    /// When this model is an OpenAI-compatible server, how to reach it, so that the recording
    /// server proxies calls to it (streams, tool calls and token ids intact) instead of asking
    /// [`ChatModel::complete`].
    fn upstream(&self) -> Option<crate::recorder::Upstream> {
        None
    }

    /// Reply and record the call; the default synthesises an OpenAI-shaped request and response
    /// so that every policy's calls look alike in a trajectory. Endpoints keep the raw bodies.
    fn complete_recorded(&self, messages: &[Message]) -> (Result<Message>, ModelCall) {
        let request = chat_request(&self.name(), messages, &Map::new());
        let t0 = Instant::now();
        let result = self.complete(messages);
        let latency = t0.elapsed().as_secs_f64();
        let (response, error) = match &result {
            Ok(m) => (Some(chat_response(&self.name(), m)), None),
            Err(e) => (None, Some(format!("{}: {e}", e.kind()))),
        };
        let call = ModelCall {
            request,
            response,
            error,
            latency_s: Some(latency),
            prompt_token_ids: None,
            completion_token_ids: None,
            completion_logprobs: None,
        };
        (result, call)
    }
}

/// Who acts in an episode.
#[derive(Clone)]
pub enum Policy {
    /// Observation -> native action.
    Action(Arc<ActionFn>),
    /// Conversation -> reply.
    Chat(Arc<dyn ChatModel>),
    /// A format's own agent, by name (e.g. Harbor's `oracle`, `nop`).
    Native(String),
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Action(_) => f.write_str("Policy::Action"),
            Policy::Chat(m) => write!(f, "Policy::Chat({})", m.name()),
            Policy::Native(n) => write!(f, "Policy::Native({n})"),
        }
    }
}

impl Policy {
    /// An action policy from a closure.
    pub fn action(f: impl Fn(&Observation) -> Result<Value> + Send + Sync + 'static) -> Self {
        Policy::Action(Arc::new(f))
    }

    /// An action policy that always returns the same action.
    pub fn constant(action: Value) -> Self {
        Policy::action(move |_| Ok(action.clone()))
    }

    /// A chat-model policy.
    pub fn chat(model: impl ChatModel + 'static) -> Self {
        Policy::Chat(Arc::new(model))
    }

    /// The kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Policy::Action(_) => "action policy",
            Policy::Chat(_) => "chat model",
            Policy::Native(_) => "native agent",
        }
    }
}

type ReplyFn = dyn Fn(&[Message]) -> Result<Message> + Send + Sync;

/// A chat model backed by a Rust closure: messages in, reply text out (or, with
/// [`FunctionModel::with_messages`], a whole assistant message, tool calls included).
pub struct FunctionModel {
    name: String,
    f: Box<ReplyFn>,
}

impl FunctionModel {
    /// Wrap `f`; `name` is recorded as the model name.
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&[Message]) -> Result<String> + Send + Sync + 'static,
    ) -> Self {
        FunctionModel {
            name: name.into(),
            f: Box::new(move |m| f(m).map(Message::assistant)),
        }
    }

    /// Wrap `f`, which returns the whole assistant message: text, `tool_calls`, extras. Tool
    /// calls reach tool-calling environments through both the chat-completions and the
    /// Responses routes of the recording server. A reply whose role is not `assistant` is an
    /// error naming the model.
    pub fn with_messages(
        name: impl Into<String>,
        f: impl Fn(&[Message]) -> Result<Message> + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        let who = name.clone();
        FunctionModel {
            name,
            f: Box::new(move |m| {
                let reply = f(m)?;
                if reply.role != Role::Assistant {
                    return Err(Error::Policy(format!(
                        "model `{who}` replied with role {:?}; a reply must be an assistant message",
                        reply.role
                    )));
                }
                Ok(reply)
            }),
        }
    }
}

impl ChatModel for FunctionModel {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn complete(&self, messages: &[Message]) -> Result<Message> {
        (self.f)(messages)
    }
}

/// An OpenAI chat-completions request body.
pub(crate) fn chat_request(
    model: &str,
    messages: &[Message],
    params: &Map<String, Value>,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    body.insert(
        "messages".into(),
        messages.iter().map(Message::to_openai).collect(),
    );
    for (k, v) in params {
        body.insert(k.clone(), v.clone());
    }
    body
}

/// A `chat.completion` response body for a reply produced locally.
pub(crate) fn chat_response(model: &str, reply: &Message) -> Map<String, Value> {
    let finish = if reply.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
        "tool_calls"
    } else {
        "stop"
    };
    let v = json!({
        "id": format!("chatcmpl-{:012x}", fresh_id() & 0xFFFF_FFFF_FFFF),
        "object": "chat.completion",
        "created": crate::contract::now_unix() as i64,
        "model": model,
        "choices": [{"index": 0, "message": reply.to_openai(), "finish_reason": finish, "logprobs": null}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! object"),
    }
}

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
    max_retries: u32,
    backoff: Duration,
    timeout: Duration,
    stream: bool,
    gate: Option<Arc<Gate>>,
    agent: ureq::Agent,
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
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint at `base_url` (e.g. `http://localhost:8000/v1`) serving `model`.
    /// Defaults: 600 s timeout, 3 retries, 0.5 s initial backoff, no API key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        let mut e = Endpoint {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            api_key: None,
            params: Map::new(),
            max_retries: 3,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(600),
            stream: false,
            gate: None,
            agent: ureq::Agent::new_with_defaults(),
        };
        e = e.timeout(Duration::from_secs(600));
        e
    }

    /// Read the API key from the environment variable `var`; a missing variable is an error
    /// that names it, so a run never starts half-configured.
    pub fn api_key_from_env(mut self, var: &str) -> Result<Self> {
        let key = std::env::var(var).map_err(|_| {
            Error::Config(format!(
                "environment variable {var} is not set; export it with the API key for {}",
                self.base_url
            ))
        })?;
        self.api_key = Some(key);
        Ok(self)
    }

    /// Use this API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Whole-request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build();
        self.agent = config.into();
        self
    }

    /// Retry policy: at most `retries` more attempts, waiting `backoff`, then doubling.
    pub fn retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.max_retries = retries;
        self.backoff = backoff;
        self
    }

    /// Ask for the reply as a stream (`stream: true`, with usage) and assemble it; for servers
    /// and models that only stream. The recorded response is the assembled body.
    pub fn stream(mut self, on: bool) -> Self {
        self.stream = on;
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
        let fail = |message: String| Error::Endpoint {
            url: url.clone(),
            message,
        };
        let _permit = self.gate.as_ref().map(|g| g.enter());
        let mut wait = self.backoff;
        let mut attempt = 0;
        loop {
            let mut req = self
                .agent
                .post(&url)
                .header("Content-Type", "application/json");
            if let Some(key) = &self.api_key {
                req = req.header("Authorization", &format!("Bearer {key}"));
            }
            let outcome = req.send(Value::Object(body.clone()).to_string());
            let retryable = match outcome {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let text = resp
                        .body_mut()
                        .read_to_string()
                        .map_err(|e| fail(format!("could not read the response body: {e}")))?;
                    if (200..300).contains(&status) && self.stream {
                        let (assembled, done) =
                            crate::recorder::assemble_stream(crate::recorder::Route::Chat, &text);
                        return match (assembled, done) {
                            (Some(m), true) => Ok(m),
                            _ => Err(fail(format!(
                                "returned a stream that did not end with [DONE]: {}",
                                truncate(&text, 300)
                            ))),
                        };
                    }
                    if (200..300).contains(&status) {
                        return match serde_json::from_str::<Value>(&text) {
                            Ok(Value::Object(m)) => Ok(m),
                            _ => Err(fail(format!(
                                "returned HTTP {status} with a body that is not a JSON object: {}",
                                truncate(&text, 300)
                            ))),
                        };
                    }
                    let msg = format!("returned HTTP {status}: {}", truncate(&text, 500));
                    if status == 429 || status >= 500 {
                        msg
                    } else {
                        return Err(fail(msg));
                    }
                }
                Err(e) => format!("could not connect: {e}"),
            };
            if attempt >= self.max_retries {
                return Err(fail(format!(
                    "{retryable} (gave up after {} attempt{})",
                    attempt + 1,
                    if attempt == 0 { "" } else { "s" }
                )));
            }
            attempt += 1;
            std::thread::sleep(wait);
            wait = wait.saturating_mul(2);
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

fn reply_from_response(resp: &Map<String, Value>) -> Result<Message> {
    let msg = resp
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("message"))
        .ok_or_else(|| {
            Error::Protocol(format!(
                "chat completion has no choices[0].message: {}",
                preview(&Value::Object(resp.clone()))
            ))
        })?;
    let mut m = Message::from_openai(msg)?;
    if m.role != Role::Assistant {
        return Err(Error::Protocol(format!(
            "chat completion reply has role {:?}, expected assistant",
            m.role
        )));
    }
    // Reasoning fields and other extras stay; an absent content is an empty reply.
    if m.content.is_null() && m.tool_calls.is_none() {
        m.content = Value::String(String::new());
    }
    Ok(m)
}

impl ChatModel for Endpoint {
    fn name(&self) -> String {
        self.model.clone()
    }

    fn upstream(&self) -> Option<crate::recorder::Upstream> {
        let mut up = crate::recorder::Upstream::new(&self.base_url)
            .model(&self.model)
            .timeout(self.timeout)
            .retries(self.max_retries, self.backoff);
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
        let t0 = Instant::now();
        let outcome = self.post(&request);
        let mut call = ModelCall {
            request,
            response: None,
            error: None,
            latency_s: Some(t0.elapsed().as_secs_f64()),
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
    /// Request parameters sent with every call (temperature, max_tokens, …).
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Ask for streamed replies and assemble them (default false).
    #[serde(default)]
    pub stream: bool,
    /// Most requests in flight at once (default: no limit).
    #[serde(default)]
    pub max_concurrency: Option<usize>,
}

impl EndpointSpec {
    /// Build the endpoint; bad numbers and a missing key variable are typed errors.
    pub fn build(&self) -> Result<Endpoint> {
        let secs = |name: &str, v: Option<f64>, default: f64| -> Result<Duration> {
            let v = v.unwrap_or(default);
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(Error::Config(format!(
                    "endpoint `{name}` must be a number of seconds >= 0, got {v}"
                )))
            }
        };
        let base = match (&self.base_url, &self.provider) {
            (Some(b), None) => Endpoint::new(b, &self.model),
            (Some(b), Some(p)) => {
                // An explicit URL wins; the provider still supplies the key variable.
                let p = crate::providers::provider(p)?;
                let e = Endpoint::new(b, &self.model);
                match std::env::var(p.key_var) {
                    Ok(k) if !k.is_empty() && self.api_key_env.is_none() => e.api_key(k),
                    _ => e,
                }
            }
            (None, Some(p)) if self.api_key_env.is_some() => {
                Endpoint::new(crate::providers::provider(p)?.base_url(), &self.model)
            }
            (None, Some(p)) => Endpoint::preset(p, &self.model)?,
            (None, None) => {
                return Err(Error::Config(
                    "an endpoint needs `base_url` or `provider` (e.g. {\"provider\": \"vllm\", \"model\": \"Qwen/Qwen3-8B\"})".into(),
                ))
            }
        };
        let mut e = base
            .timeout(secs("timeout_s", self.timeout_s, 600.0)?)
            .retries(
                self.retries.unwrap_or(3),
                secs("backoff_s", self.backoff_s, 0.5)?,
            );
        if let Some(var) = &self.api_key_env {
            e = e.api_key_from_env(var)?;
        }
        for (k, v) in &self.params {
            e = e.param(k, v.clone());
        }
        e = e.stream(self.stream);
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

/// A chat model acting in a text step environment: observations become user turns, the reply
/// text becomes the action. One per episode, since it holds the conversation.
pub struct ChatPolicy {
    model: Arc<dyn ChatModel>,
    /// The conversation so far.
    pub history: Vec<Message>,
    /// Every call made, in order.
    pub calls: Vec<ModelCall>,
}

impl ChatPolicy {
    /// Start a conversation with `model`, optionally under a system prompt.
    pub fn new(model: Arc<dyn ChatModel>, system: Option<&str>) -> Self {
        ChatPolicy {
            model,
            history: system.map(Message::system).into_iter().collect(),
            calls: Vec::new(),
        }
    }

    /// Show `obs` to the model and return its reply text as the action.
    pub fn act(&mut self, obs: &Observation) -> Result<Value> {
        match (&obs.messages, &obs.text) {
            (Some(msgs), _) if !msgs.is_empty() => self.history.extend(msgs.iter().cloned()),
            (_, Some(text)) => self.history.push(Message::user(text.clone())),
            _ => self.history.push(Message::user(obs.data.to_string())),
        }
        let (result, call) = self.model.complete_recorded(&self.history);
        self.calls.push(call);
        let reply = result?;
        let text = reply.text().unwrap_or_default();
        self.history.push(reply);
        Ok(Value::String(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_model_records_openai_shaped_calls() {
        let m = FunctionModel::new("echo", |msgs| Ok(format!("{} turns", msgs.len())));
        let mut p = ChatPolicy::new(Arc::new(m), Some("be brief"));
        let a = p.act(&Observation::text("hi")).unwrap();
        assert_eq!(a, json!("2 turns"));
        assert_eq!(p.history.len(), 3);
        let call = &p.calls[0];
        assert_eq!(call.request["model"], "echo");
        assert_eq!(call.request["messages"][1]["content"], "hi");
        let resp = call.response.as_ref().unwrap();
        assert_eq!(resp["choices"][0]["message"]["content"], "2 turns");
    }

    #[test]
    fn failed_calls_are_still_recorded() {
        let m = FunctionModel::new("broken", |_| Err(Error::Policy("no".into())));
        let mut p = ChatPolicy::new(Arc::new(m), None);
        assert!(p.act(&Observation::text("hi")).is_err());
        assert_eq!(p.calls.len(), 1);
        assert!(p.calls[0].error.as_ref().unwrap().contains("no"));
    }

    #[test]
    fn replies_without_choices_are_protocol_errors() {
        let e = reply_from_response(json!({"error": "x"}).as_object().unwrap()).unwrap_err();
        assert!(e.to_string().contains("choices"), "{e}");
    }
}
