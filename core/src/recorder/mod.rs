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

mod local;
mod proxy;

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::contract::ModelCall;
use crate::error::{Error, Result};
use crate::models::ChatModel;
use crate::openai::wire::error_body;
// The wire types the recorder serves stay reachable at their old paths.
pub use crate::openai::{assemble_stream, Route, Upstream};

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
            Backend::Upstream(u) => u.model_name().unwrap_or("upstream").to_string(),
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
        Backend::Model(model) => local::serve_model(req, route, body, model.as_ref(), t0),
        Backend::Upstream(up) => proxy::proxy(req, route, body, up, t0),
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

fn respond_error(req: tiny_http::Request, status: u16, kind: &str, message: &str) {
    respond_json(req, status, &error_body(kind, message));
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
