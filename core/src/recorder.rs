//! The recording model server: an OpenAI-compatible HTTP server on 127.0.0.1 that sits between
//! every environment that calls a model itself (Verifiers, Harbor agents, NeMo Gym tool loops)
//! and the model, and records each call as a [`ModelCall`] of the rollout that made it.
//!
//! One server per process (or per [`ModelServer`] the caller starts) serves every concurrent
//! rollout. Each rollout gets a [`Recording`] with its own base URL,
//! `http://127.0.0.1:<port>/r/<id>/v1`, so calls are attributed by path, never by timing. Behind
//! a recording is either a local model ([`Backend::Model`]: a `FunctionModel`, a C callback, any
//! [`ChatModel`]) that answers itself, or an upstream server ([`Backend::Upstream`]) the call is
//! proxied to, streams passed through as they arrive and recorded whole.
//!
//! Served: `POST /v1/chat/completions` (plain and `stream: true`), `POST /v1/completions`,
//! `POST /v1/responses`, `GET /v1/models`. Bad requests (a body over the limit, malformed JSON,
//! an unknown route or recording) get an OpenAI-style error body with a 4xx status, and are
//! recorded with their error when the recording is known. API keys live only in the upstream
//! configuration: they are never part of a recorded request.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::contract::{Message, ModelCall};
use crate::error::{Error, Result};
use crate::policy::ChatModel;

/// Largest request body accepted, by default (a long agent transcript fits many times over).
pub const DEFAULT_MAX_BODY: usize = 32 << 20;

/// Who answers the calls of a recording.
#[derive(Clone)]
pub enum Backend {
    /// A local model answers; the server makes the OpenAI-shaped responses itself.
    Model(Arc<dyn ChatModel>),
    /// The call is forwarded to an upstream OpenAI-compatible server.
    Upstream(Arc<Upstream>),
}

impl Backend {
    /// The backend for a chat model: proxied when the model is an OpenAI-compatible server
    /// (streams, tool calls and token ids reach the caller intact), else the model answers.
    pub fn for_model(model: Arc<dyn ChatModel>) -> Backend {
        match model.upstream() {
            Some(up) => Backend::Upstream(Arc::new(up)),
            None => Backend::Model(model),
        }
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Model(m) => write!(f, "Backend::Model({})", m.name()),
            Backend::Upstream(u) => write!(f, "Backend::Upstream({})", u.base_url),
        }
    }
}

/// An upstream server that recorded calls are forwarded to.
pub struct Upstream {
    base_url: String,
    api_key: Option<String>,
    model: Option<String>,
    capture_tokens: bool,
    retries: u32,
    backoff: Duration,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Upstream")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("capture_tokens", &self.capture_tokens)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Forward to `base_url` (e.g. `http://localhost:8000/v1`). Defaults: no key, the caller's
    /// model name, no token capture, 600 s timeout, 2 retries of refused connections, 429 and
    /// 5xx before any byte reached the caller, 0.25 s backoff doubling.
    pub fn new(base_url: impl Into<String>) -> Upstream {
        Upstream {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: None,
            model: None,
            capture_tokens: false,
            retries: 2,
            backoff: Duration::from_millis(250),
            agent: agent(Duration::from_secs(600)),
        }
    }

    /// Send this key as `Authorization: Bearer`; it is never recorded.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
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
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.agent = agent(timeout);
        self
    }

    /// At most `retries` more attempts on refused connections, 429 and 5xx.
    pub fn retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.retries = retries;
        self.backoff = backoff;
        self
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

struct Slot {
    backend: Backend,
    calls: Mutex<Vec<ModelCall>>,
    /// Calls being served. A client has its reply before the call is recorded, so reading
    /// the calls waits for these (briefly) lest a rollout that ends at once miss its last one.
    in_flight: Mutex<usize>,
    settled: std::sync::Condvar,
}

/// Longest wait for calls still being recorded when a recording's calls are read.
const SETTLE: Duration = Duration::from_secs(5);

impl Slot {
    fn push(&self, call: ModelCall) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(call);
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        *self.in_flight.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        InFlight(self.clone())
    }

    fn settle(&self) {
        let n = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self
            .settled
            .wait_timeout_while(n, SETTLE, |n| *n > 0)
            .unwrap_or_else(|p| p.into_inner());
    }
}

/// A call being served; recorded (or failed) by the time it is dropped.
struct InFlight(Arc<Slot>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut n = self.0.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            self.0.settled.notify_all();
        }
    }
}

struct Shared {
    slots: RwLock<HashMap<String, Arc<Slot>>>,
    next: AtomicU64,
    max_body: usize,
    stop: AtomicBool,
    /// Handler threads started, and those waiting for a call.
    threads: AtomicUsize,
    idle: AtomicUsize,
}

/// An OpenAI-compatible server on 127.0.0.1 that records every call per rollout.
pub struct ModelServer {
    shared: Arc<Shared>,
    server: Arc<tiny_http::Server>,
    port: u16,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelServer(127.0.0.1:{})", self.port)
    }
}

impl ModelServer {
    /// Start a server on an ephemeral port of 127.0.0.1.
    pub fn start() -> Result<ModelServer> {
        ModelServer::start_with(DEFAULT_MAX_BODY)
    }

    /// Start a server that refuses request bodies over `max_body` bytes.
    pub fn start_with(max_body: usize) -> Result<ModelServer> {
        let server = tiny_http::Server::http("127.0.0.1:0").map_err(|e| {
            Error::io(
                "cannot start the recording model server on 127.0.0.1",
                std::io::Error::other(e.to_string()),
            )
        })?;
        let port = server
            .server_addr()
            .to_ip()
            .map(|a| a.port())
            .ok_or_else(|| Error::Config("the recording server has no TCP address".into()))?;
        let server = Arc::new(server);
        let shared = Arc::new(Shared {
            slots: RwLock::new(HashMap::new()),
            next: AtomicU64::new(1),
            max_body,
            stop: AtomicBool::new(false),
            threads: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
        });
        for _ in 0..4 {
            if !spawn_handler(&server, &shared) {
                return Err(Error::io(
                    "cannot start the recording server's threads",
                    std::io::Error::last_os_error(),
                ));
            }
        }
        Ok(ModelServer {
            shared,
            server,
            port,
        })
    }

    /// The process-wide server, started on first use and shared by every rollout.
    pub fn global() -> Result<&'static ModelServer> {
        static GLOBAL: OnceLock<ModelServer> = OnceLock::new();
        if let Some(s) = GLOBAL.get() {
            return Ok(s);
        }
        let s = ModelServer::start()?;
        // Two threads racing here each started one; the loser's is stopped on drop.
        Ok(GLOBAL.get_or_init(|| s))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A new recording answered by `backend`; its calls are kept until it is dropped.
    pub fn record(&self, backend: Backend) -> Recording {
        let n = self.shared.next.fetch_add(1, Ordering::Relaxed);
        // Unguessable enough that a stale URL never lands in another rollout.
        let id = format!("{n:x}-{:08x}", crate::rng::splitmix64(n ^ nanos()) as u32);
        let slot = Arc::new(Slot {
            backend,
            calls: Mutex::new(Vec::new()),
            in_flight: Mutex::new(0),
            settled: std::sync::Condvar::new(),
        });
        self.shared
            .slots
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), slot.clone());
        Recording {
            base_url: format!("{}/r/{id}/v1", self.url()),
            id,
            slot,
            shared: self.shared.clone(),
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        // Each unblock wakes one waiting thread, which sees the flag and exits; calls being
        // served finish first.
        self.shared.stop.store(true, Ordering::Relaxed);
        for _ in 0..self.shared.threads.load(Ordering::SeqCst) {
            self.server.unblock();
        }
    }
}

fn nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The calls of one rollout, made to its own base URL.
pub struct Recording {
    id: String,
    base_url: String,
    slot: Arc<Slot>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recording({})", self.base_url)
    }
}

impl Recording {
    /// The OpenAI base URL to give the environment, ending in `/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The recording's id (the path segment after `/r/`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The calls so far, in the order they finished (waiting up to 5 s for calls whose reply
    /// was sent but which are not recorded yet).
    pub fn calls(&self) -> Vec<ModelCall> {
        self.slot.settle();
        self.slot
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The calls so far, leaving none (waiting as [`Recording::calls`] does).
    pub fn take(&self) -> Vec<ModelCall> {
        self.slot.settle();
        std::mem::take(&mut *self.slot.calls.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.shared
            .slots
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// Handler threads wait in `recv` and serve the call they get themselves (no hand-off to
/// another thread, which on a VM costs a vCPU wake-up per call). The pool grows: a thread that
/// takes the last idle slot starts another, so hundreds of calls can block on slow models at
/// once without queueing behind each other, and threads stay for the next burst.
fn serve(server: Arc<tiny_http::Server>, shared: Arc<Shared>) {
    loop {
        shared.idle.fetch_add(1, Ordering::SeqCst);
        let got = server.recv();
        let idle_now = shared.idle.fetch_sub(1, Ordering::SeqCst) - 1;
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(req) = got else { continue };
        if idle_now == 0 {
            spawn_handler(&server, &shared);
        }
        handle(req, &shared);
    }
}

fn spawn_handler(server: &Arc<tiny_http::Server>, shared: &Arc<Shared>) -> bool {
    let (srv, sh) = (server.clone(), shared.clone());
    let spawned = std::thread::Builder::new()
        .name("nenyax-recorder".into())
        .spawn(move || serve(srv, sh))
        .is_ok();
    if spawned {
        shared.threads.fetch_add(1, Ordering::SeqCst);
    }
    // Out of threads: the ones running still serve, one call at a time each.
    spawned
}

/// Which OpenAI route a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/responses`.
    Responses,
    /// `GET /v1/models`.
    Models,
}

impl Route {
    fn path(self) -> &'static str {
        match self {
            Route::Chat => "chat/completions",
            Route::Completions => "completions",
            Route::Responses => "responses",
            Route::Models => "models",
        }
    }
}

fn handle(mut req: tiny_http::Request, shared: &Shared) {
    let t0 = Instant::now();
    let url = req.url().to_string();
    let path = url.split('?').next().unwrap_or("");
    let Some((id, rest)) = path
        .strip_prefix("/r/")
        .and_then(|p| p.split_once("/v1/"))
        .map(|(id, rest)| (id.to_string(), rest.trim_end_matches('/').to_string()))
    else {
        return respond_error(
            req,
            404,
            "not_found",
            &format!(
                "no route {path}: use the base URL of a recording, http://127.0.0.1:<port>/r/<id>/v1"
            ),
        );
    };
    let method = req.method().clone();
    let route = match (&method, rest.as_str()) {
        (tiny_http::Method::Post, "chat/completions") => Route::Chat,
        (tiny_http::Method::Post, "completions") => Route::Completions,
        (tiny_http::Method::Post, "responses") => Route::Responses,
        (tiny_http::Method::Get, "models") => Route::Models,
        (m, r) => {
            return respond_error(
                req,
                404,
                "not_found",
                &format!("no route {m} /v1/{r}; served: POST chat/completions, completions, responses; GET models"),
            )
        }
    };
    let slot = shared
        .slots
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned();
    let Some(slot) = slot else {
        return respond_error(
            req,
            404,
            "not_found",
            &format!("unknown recording {id}: its rollout has finished, or it never existed"),
        );
    };
    let _in_flight = slot.begin();
    if route == Route::Models {
        let name = match &slot.backend {
            Backend::Model(m) => m.name(),
            Backend::Upstream(u) => u.model.clone().unwrap_or_else(|| "upstream".into()),
        };
        let body = json!({"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "nenyax"}]});
        return respond_json(req, 200, &body);
    }
    // The body, bounded: a client that sends more than the limit gets 413, not a reset.
    let limit = shared.max_body;
    if req.body_length().is_some_and(|n| n > limit) {
        let msg = format!(
            "request body of {} bytes is over the {limit}-byte limit",
            req.body_length().unwrap_or(0)
        );
        slot.push(failed_call(Map::new(), &msg, t0));
        return respond_error(req, 413, "request_too_large", &msg);
    }
    let mut raw = Vec::new();
    let read = req.as_reader().take(limit as u64 + 1).read_to_end(&mut raw);
    if let Err(e) = read {
        slot.push(failed_call(
            Map::new(),
            &format!("could not read the request body: {e}"),
            t0,
        ));
        return respond_error(
            req,
            400,
            "invalid_request_error",
            &format!("could not read the request body: {e}"),
        );
    }
    if raw.len() > limit {
        let msg = format!("request body is over the {limit}-byte limit");
        slot.push(failed_call(Map::new(), &msg, t0));
        return respond_error(req, 413, "request_too_large", &msg);
    }
    let body = match serde_json::from_slice::<Value>(&raw) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            let msg = "request body must be a JSON object";
            slot.push(failed_call(raw_request(&raw), msg, t0));
            return respond_error(req, 400, "invalid_request_error", msg);
        }
        Err(e) => {
            let msg = format!("request body is not valid JSON: {e}");
            slot.push(failed_call(raw_request(&raw), &msg, t0));
            return respond_error(req, 400, "invalid_request_error", &msg);
        }
    };
    let call = match &slot.backend {
        Backend::Model(model) => serve_model(req, route, body, model.as_ref(), t0),
        Backend::Upstream(up) => proxy(req, route, body, up, t0),
    };
    slot.push(call);
}

fn failed_call(request: Map<String, Value>, error: &str, t0: Instant) -> ModelCall {
    ModelCall {
        request,
        response: None,
        error: Some(error.to_string()),
        latency_s: Some(t0.elapsed().as_secs_f64()),
        prompt_token_ids: None,
        completion_token_ids: None,
        completion_logprobs: None,
    }
}

/// What a malformed body looked like, clipped, for the record.
fn raw_request(raw: &[u8]) -> Map<String, Value> {
    let text = String::from_utf8_lossy(&raw[..raw.len().min(4096)]).into_owned();
    let mut m = Map::new();
    m.insert("raw_body".into(), Value::String(text));
    m
}

fn json_header() -> tiny_http::Header {
    tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
        .expect("a valid header")
}

fn respond_json(req: tiny_http::Request, status: u16, body: &Value) {
    let resp = tiny_http::Response::from_data(body.to_string().into_bytes())
        .with_status_code(status)
        .with_header(json_header());
    // The client may have gone; nothing to do about it here.
    let _ = req.respond(resp);
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

fn respond_error(req: tiny_http::Request, status: u16, kind: &str, message: &str) {
    respond_json(req, status, &error_body(kind, message));
}

/// The conversation a request asks about, whatever the route.
fn request_messages(
    route: Route,
    body: &Map<String, Value>,
) -> std::result::Result<Vec<Message>, String> {
    let text = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        }
    };
    match route {
        Route::Chat => {
            let msgs = body
                .get("messages")
                .and_then(Value::as_array)
                .ok_or("`messages` must be an array of chat messages")?;
            msgs.iter()
                .map(|m| Message::from_openai(m).map_err(|e| e.to_string()))
                .collect()
        }
        Route::Completions => {
            let prompt = body.get("prompt").ok_or("`prompt` is required")?;
            let p = match prompt {
                Value::Array(a) if a.len() == 1 => text(&a[0]),
                other => text(other),
            }
            .ok_or("`prompt` must be a string")?;
            Ok(vec![Message::user(p)])
        }
        Route::Responses => match body.get("input") {
            Some(input @ (Value::String(_) | Value::Array(_))) => {
                Ok(crate::responses::items_to_messages(
                    body.get("instructions").and_then(Value::as_str),
                    input,
                ))
            }
            _ => Err("`input` must be a string or a list of items".into()),
        },
        Route::Models => Ok(Vec::new()),
    }
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", crate::rng::splitmix64(nanos()))
}

/// The response body a route gives for a locally produced reply.
fn local_response(route: Route, model: &str, reply: &Message) -> Map<String, Value> {
    let created = crate::contract::now_unix() as i64;
    let text = reply.text().unwrap_or_default();
    let v = match route {
        Route::Chat => return crate::policy::chat_response(model, reply),
        Route::Completions => json!({
            "id": new_id("cmpl"), "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": null}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }),
        Route::Responses => json!({
            "id": new_id("resp"), "object": "response", "created_at": created, "model": model,
            "status": "completed",
            "output": crate::responses::message_to_items(reply),
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        }),
        Route::Models => json!({}),
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn wants_stream(body: &Map<String, Value>) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

fn serve_model(
    req: tiny_http::Request,
    route: Route,
    body: Map<String, Value>,
    model: &dyn ChatModel,
    t0: Instant,
) -> ModelCall {
    let messages = match request_messages(route, &body) {
        Ok(m) => m,
        Err(msg) => {
            respond_error(req, 400, "invalid_request_error", &msg);
            return failed_call(body, &msg, t0);
        }
    };
    let name = body
        .get("model")
        .and_then(Value::as_str)
        .map_or_else(|| model.name(), str::to_string);
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.complete(&messages)))
            .unwrap_or_else(|_| Err(Error::Policy("the model panicked".into())));
    let reply = match outcome {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("{}: {e}", e.kind());
            respond_error(req, 500, "server_error", &msg);
            return failed_call(body, &msg, t0);
        }
    };
    let response = local_response(route, &name, &reply);
    let mut call = ModelCall {
        request: body,
        response: Some(response.clone()),
        error: None,
        latency_s: None,
        prompt_token_ids: None,
        completion_token_ids: None,
        completion_logprobs: None,
    };
    let sent = if wants_stream(&call.request) {
        let events = stream_events(route, &response, &reply);
        let mut w = SseWriter::start(req, 200);
        events
            .iter()
            .try_for_each(|e| w.event(e))
            .and_then(|_| w.finish())
    } else {
        req.respond(
            tiny_http::Response::from_data(Value::Object(response).to_string().into_bytes())
                .with_header(json_header()),
        )
    };
    if let Err(e) = sent {
        call.error = Some(format!(
            "the client went away before the reply was sent: {e}"
        ));
    }
    call.latency_s = Some(t0.elapsed().as_secs_f64());
    call
}

/// The SSE data lines that stream a local reply, ending in `[DONE]` where the API has it.
fn stream_events(route: Route, response: &Map<String, Value>, reply: &Message) -> Vec<String> {
    let text = reply.text().unwrap_or_default();
    let id = response.get("id").cloned().unwrap_or(Value::Null);
    let model = response.get("model").cloned().unwrap_or(Value::Null);
    let created = response.get("created").cloned().unwrap_or(json!(0));
    match route {
        Route::Chat => {
            let chunk = |delta: Value, finish: Value, usage: Option<&Value>| {
                let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]});
                if let Some(u) = usage {
                    c["usage"] = u.clone();
                }
                c.to_string()
            };
            let mut delta = json!({"role": "assistant", "content": text});
            if let Some(calls) = &reply.tool_calls {
                delta["tool_calls"] = Value::Array(
                    calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let mut v = c.to_openai();
                            v["index"] = json!(i);
                            v
                        })
                        .collect(),
                );
            }
            let finish = response["choices"][0]["finish_reason"].clone();
            vec![
                chunk(delta, Value::Null, None),
                chunk(json!({}), finish, response.get("usage")),
                "[DONE]".into(),
            ]
        }
        Route::Completions => vec![
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": text, "finish_reason": null, "logprobs": null}]})
            .to_string(),
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": null}],
                   "usage": response.get("usage")})
            .to_string(),
            "[DONE]".into(),
        ],
        Route::Responses => {
            // The full event sequence: the official client builds its snapshot from it and
            // refuses a delta for an output item it has not been told about.
            let mut pending = Value::Object(response.clone());
            pending["status"] = json!("in_progress");
            pending["output"] = json!([]);
            // The message item (a local reply with tool calls may also carry other items).
            let item = response["output"]
                .as_array()
                .and_then(|o| o.iter().find(|i| i["type"] == "message"))
                .unwrap_or(&response["output"][0]);
            let item_id = item["id"].clone();
            let mut empty_item = item.clone();
            empty_item["status"] = json!("in_progress");
            empty_item["content"] = json!([]);
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            let mut done_part = part.clone();
            done_part["text"] = json!(text);
            let events = [
                json!({"type": "response.created", "response": pending}),
                json!({"type": "response.in_progress", "response": pending}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": empty_item}),
                json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
                json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []}),
                json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
                json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0, "content_index": 0, "part": done_part}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                json!({"type": "response.completed", "response": response}),
            ];
            events
                .into_iter()
                .enumerate()
                .map(|(i, mut e)| {
                    e["sequence_number"] = json!(i);
                    e.to_string()
                })
                .collect()
        }
        Route::Models => Vec::new(),
    }
}

/// A chunked `text/event-stream` response written by hand, so each event reaches the client
/// as soon as it is written (tiny_http's own chunking would hold it back until a buffer fills).
struct SseWriter {
    out: Box<dyn Write + Send>,
}

impl SseWriter {
    fn start(req: tiny_http::Request, status: u16) -> SseWriter {
        let mut out = req.into_writer();
        let reason = if status == 200 { "OK" } else { "Error" };
        let _ = write!(
            out,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let _ = out.flush();
        SseWriter { out }
    }

    fn raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        write!(self.out, "{:x}\r\n", bytes.len())?;
        self.out.write_all(bytes)?;
        self.out.write_all(b"\r\n")?;
        self.out.flush()
    }

    fn event(&mut self, data: &str) -> std::io::Result<()> {
        self.raw(format!("data: {data}\n\n").as_bytes())
    }

    fn finish(mut self) -> std::io::Result<()> {
        self.out.write_all(b"0\r\n\r\n")?;
        self.out.flush()
    }
}

/// What a training run needs from the upstream: token ids and logprobs, asked for in the
/// spellings vLLM and SGLang understand (OpenAI ignores `return_token_ids`).
fn add_capture(route: Route, body: &mut Map<String, Value>) {
    body.entry("return_token_ids").or_insert(json!(true));
    match route {
        Route::Chat => {
            body.entry("logprobs").or_insert(json!(true));
        }
        Route::Completions => {
            body.entry("logprobs").or_insert(json!(1));
        }
        _ => {}
    }
}

fn proxy(
    req: tiny_http::Request,
    route: Route,
    body: Map<String, Value>,
    up: &Upstream,
    t0: Instant,
) -> ModelCall {
    let mut sent = body.clone();
    if let Some(m) = &up.model {
        sent.insert("model".into(), json!(m));
    }
    if up.capture_tokens {
        add_capture(route, &mut sent);
    }
    let stream = wants_stream(&sent);
    let url = format!("{}/{}", up.base_url, route.path());
    // The recorded request is what the upstream was sent (after model and capture changes).
    let mut call = failed_call(sent.clone(), "", t0);
    call.error = None;
    let payload = Value::Object(sent).to_string();
    let mut wait = up.backoff;
    let mut attempt = 0;
    let mut resp = loop {
        let mut r = up
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(key) = &up.api_key {
            r = r.header("Authorization", &format!("Bearer {key}"));
        }
        let outcome = r.send(payload.as_str());
        let retry_why = match outcome {
            Ok(resp) => {
                let status = resp.status().as_u16();
                if (status == 429 || status >= 500) && attempt < up.retries {
                    format!("HTTP {status}")
                } else {
                    break resp;
                }
            }
            Err(e) => {
                if attempt >= up.retries {
                    let msg = format!("upstream {url} could not be reached: {e}");
                    respond_error(req, 502, "upstream_error", &msg);
                    call.error = Some(msg);
                    call.latency_s = Some(t0.elapsed().as_secs_f64());
                    return call;
                }
                e.to_string()
            }
        };
        let _ = retry_why;
        attempt += 1;
        std::thread::sleep(wait);
        wait = wait.saturating_mul(2);
    };
    let status = resp.status().as_u16();
    let is_sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if stream && is_sse && (200..300).contains(&status) {
        // Pass each piece through as it arrives, keep the whole for the record.
        let mut w = SseWriter::start(req, status);
        let mut reader = resp.body_mut().as_reader();
        let mut whole = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        let mut client_gone = None;
        let mut upstream_err = None;
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let scan_from = whole.len().saturating_sub(32);
                    whole.extend_from_slice(&buf[..n]);
                    if client_gone.is_none() {
                        if let Err(e) = w.raw(&buf[..n]) {
                            client_gone = Some(e.to_string());
                        }
                    }
                    // The last event ends the call even if the upstream keeps the connection.
                    if stream_finished(route, &whole[scan_from..]) {
                        break;
                    }
                }
                Err(e) => {
                    upstream_err = Some(e.to_string());
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&whole).into_owned();
        let (assembled, done) = assemble_stream(route, &text);
        call.response = assembled;
        if upstream_err.is_some() || !done {
            let why =
                upstream_err.unwrap_or_else(|| "the stream ended without its final event".into());
            call.error = Some(format!("upstream stream broke off: {why}"));
            // Ending the chunked body cleanly would tell the client all is well; drop it instead.
            drop(w);
        } else if let Err(e) = w.finish() {
            client_gone.get_or_insert(e.to_string());
        }
        if let Some(e) = client_gone {
            call.error
                .get_or_insert(format!("the client went away mid-stream: {e}"));
        }
        call.extract_tokens();
        call.latency_s = Some(t0.elapsed().as_secs_f64());
        return call;
    }
    let text = match resp.body_mut().read_to_string() {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("could not read the upstream response: {e}");
            respond_error(req, 502, "upstream_error", &msg);
            call.error = Some(msg);
            call.latency_s = Some(t0.elapsed().as_secs_f64());
            return call;
        }
    };
    let parsed = serde_json::from_str::<Value>(&text).ok();
    if let Some(Value::Object(m)) = &parsed {
        call.response = Some(m.clone());
        call.extract_tokens();
    }
    if !(200..300).contains(&status) {
        call.error = Some(format!(
            "upstream returned HTTP {status}: {}",
            clip(&text, 500)
        ));
    } else if parsed.is_none() {
        call.error = Some(format!(
            "upstream returned a body that is not JSON: {}",
            clip(&text, 300)
        ));
    }
    let content_type = if parsed.is_some() {
        json_header()
    } else {
        tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"text/plain"[..]).expect("valid")
    };
    let _ = req.respond(
        tiny_http::Response::from_data(text.into_bytes())
            .with_status_code(status)
            .with_header(content_type),
    );
    call.latency_s = Some(t0.elapsed().as_secs_f64());
    call
}

/// Whether `tail` holds the `[DONE]` event that ends a chat or completions stream. (Responses
/// API streams end with the connection, after their `response.completed` event.)
fn stream_finished(route: Route, tail: &[u8]) -> bool {
    let done = tail.windows(12).any(|w| w == b"data: [DONE]");
    route != Route::Responses && done && (tail.ends_with(b"\n\n") || tail.ends_with(b"\r\n\r\n"))
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Assemble a streamed response into the body a non-streamed call would have returned, and
/// say whether the stream ended properly (`[DONE]`, or `response.completed`).
pub fn assemble_stream(route: Route, sse: &str) -> (Option<Map<String, Value>>, bool) {
    let mut events = Vec::new();
    let mut done = false;
    for line in sse.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            done = true;
            continue;
        }
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(data) {
            events.push(m);
        }
    }
    if events.is_empty() {
        return (None, done);
    }
    match route {
        Route::Responses => {
            let completed = events
                .iter()
                .rev()
                .find(|e| e.get("type").and_then(Value::as_str) == Some("response.completed"));
            match completed
                .and_then(|e| e.get("response"))
                .and_then(Value::as_object)
            {
                Some(r) => (Some(r.clone()), true),
                None => (None, done),
            }
        }
        Route::Chat | Route::Completions => {
            let first = &events[0];
            let mut out = Map::new();
            for k in ["id", "created", "model", "system_fingerprint"] {
                if let Some(v) = first.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            out.insert(
                "object".into(),
                json!(if route == Route::Chat {
                    "chat.completion"
                } else {
                    "text_completion"
                }),
            );
            let mut content = String::new();
            let mut reasoning = String::new();
            let mut finish = Value::Null;
            let mut token_ids: Vec<Value> = Vec::new();
            let mut logprob_content: Vec<Value> = Vec::new();
            let mut token_logprobs: Vec<Value> = Vec::new();
            let mut tool_calls: Vec<Value> = Vec::new();
            let mut role = json!("assistant");
            for e in &events {
                for k in ["prompt_token_ids", "usage"] {
                    if let Some(v) = e.get(k).filter(|v| !v.is_null()) {
                        out.insert(k.into(), v.clone());
                    }
                }
                let Some(c) = e
                    .get("choices")
                    .and_then(Value::as_array)
                    .and_then(|c| c.first())
                else {
                    continue;
                };
                if let Some(v) = c.get("prompt_token_ids").filter(|v| !v.is_null()) {
                    out.insert("prompt_token_ids".into(), v.clone());
                }
                if let Some(ids) = c.get("token_ids").and_then(Value::as_array) {
                    token_ids.extend(ids.iter().cloned());
                }
                if let Some(f) = c.get("finish_reason").filter(|v| !v.is_null()) {
                    finish = f.clone();
                }
                if let Some(lp) = c.get("logprobs") {
                    if let Some(items) = lp.get("content").and_then(Value::as_array) {
                        logprob_content.extend(items.iter().cloned());
                    }
                    if let Some(items) = lp.get("token_logprobs").and_then(Value::as_array) {
                        token_logprobs.extend(items.iter().cloned());
                    }
                }
                if route == Route::Completions {
                    if let Some(t) = c.get("text").and_then(Value::as_str) {
                        content.push_str(t);
                    }
                    continue;
                }
                let Some(delta) = c.get("delta") else {
                    continue;
                };
                if let Some(r) = delta.get("role").filter(|v| !v.is_null()) {
                    role = r.clone();
                }
                if let Some(t) = delta.get("content").and_then(Value::as_str) {
                    content.push_str(t);
                }
                for k in ["reasoning_content", "reasoning"] {
                    if let Some(t) = delta.get(k).and_then(Value::as_str) {
                        reasoning.push_str(t);
                    }
                }
                for tc in delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    merge_tool_call(&mut tool_calls, tc);
                }
            }
            let mut choice = Map::new();
            choice.insert("index".into(), json!(0));
            if route == Route::Chat {
                let mut msg = Map::new();
                msg.insert("role".into(), role);
                msg.insert("content".into(), json!(content));
                if !reasoning.is_empty() {
                    msg.insert("reasoning_content".into(), json!(reasoning));
                }
                if !tool_calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(tool_calls));
                }
                choice.insert("message".into(), Value::Object(msg));
            } else {
                choice.insert("text".into(), json!(content));
            }
            choice.insert("finish_reason".into(), finish);
            let logprobs = if !logprob_content.is_empty() {
                json!({"content": logprob_content})
            } else if !token_logprobs.is_empty() {
                json!({"token_logprobs": token_logprobs})
            } else {
                Value::Null
            };
            choice.insert("logprobs".into(), logprobs);
            if !token_ids.is_empty() {
                choice.insert("token_ids".into(), Value::Array(token_ids));
            }
            out.insert("choices".into(), json!([Value::Object(choice)]));
            (Some(out), done)
        }
        Route::Models => (None, done),
    }
}

/// Streamed tool calls arrive in pieces keyed by `index`: the first carries id and name, the
/// rest append to the arguments string.
fn merge_tool_call(calls: &mut Vec<Value>, piece: &Value) {
    let index = piece
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(calls.len() as u64) as usize;
    while calls.len() <= index {
        calls.push(
            json!({"id": null, "type": "function", "function": {"name": "", "arguments": ""}}),
        );
    }
    let slot = &mut calls[index];
    if let Some(id) = piece.get("id").filter(|v| !v.is_null()) {
        slot["id"] = id.clone();
    }
    if let Some(f) = piece.get("function") {
        if let Some(n) = f.get("name").and_then(Value::as_str) {
            let name = format!("{}{n}", slot["function"]["name"].as_str().unwrap_or(""));
            slot["function"]["name"] = json!(name);
        }
        if let Some(a) = f.get("arguments").and_then(Value::as_str) {
            let args = format!(
                "{}{a}",
                slot["function"]["arguments"].as_str().unwrap_or("")
            );
            slot["function"]["arguments"] = json!(args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_chat_is_assembled_with_tokens_and_tool_calls() {
        let sse = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m\",\"prompt_token_ids\":[1,2,3],\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"token_ids\":[10],\"logprobs\":{\"content\":[{\"token\":\"Hel\",\"logprob\":-0.5}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\",\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":\"}}]},\"token_ids\":[11],\"logprobs\":{\"content\":[{\"token\":\"lo\",\"logprob\":-0.25}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"total_tokens\":5}}\n\n",
            "data: [DONE]\n\n"
        );
        let (resp, done) = assemble_stream(Route::Chat, sse);
        assert!(done);
        let resp = resp.unwrap();
        let msg = &resp["choices"][0]["message"];
        assert_eq!(msg["content"], "Hello");
        assert_eq!(msg["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(msg["tool_calls"][0]["id"], "t1");
        assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(resp["usage"]["total_tokens"], 5);
        let mut call = failed_call(Map::new(), "", Instant::now());
        call.response = Some(resp);
        call.extract_tokens();
        assert_eq!(call.prompt_token_ids, Some(vec![1, 2, 3]));
        assert_eq!(call.completion_token_ids, Some(vec![10, 11]));
        assert_eq!(call.completion_logprobs, Some(vec![-0.5, -0.25]));
    }

    #[test]
    fn a_stream_without_done_is_reported_unfinished() {
        let sse =
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";
        let (resp, done) = assemble_stream(Route::Chat, sse);
        assert!(!done);
        assert_eq!(resp.unwrap()["choices"][0]["message"]["content"], "x");
    }
}
