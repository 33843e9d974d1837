//! The recording model server: an OpenAI-compatible HTTP server on 127.0.0.1 that sits between
//! every environment that calls a model itself (Verifiers, Harbor agents, NeMo Gym tool loops)
//! and the model, and records each call as a [`ModelCall`] of the rollout that made it.
//!
//! One server per process (or per [`ModelServer`] the caller starts) serves every concurrent
//! rollout. Each rollout gets a [`Recording`] with its own base URL,
//! `http://127.0.0.1:<port>/r/<id>/v1`, so calls are attributed by path, never by timing. Behind
//! a recording is either a local model ([`Backend::Model`]: a `FunctionModel`, a C callback, any
//! [`ChatModel`](crate::models::ChatModel)) that answers itself, or an upstream server
//! ([`Backend::Upstream`]) the call is proxied to, streams passed through as they arrive and
//! recorded whole.
//!
//! Served: `POST /v1/chat/completions` (plain and `stream: true`), `POST /v1/completions`,
//! `POST /v1/responses`, `GET /v1/models`. Bad requests (a body over the limit, malformed JSON,
//! an unknown route or recording) get an OpenAI-style error body with a 4xx status, and are
//! recorded with their error when the recording is known. API keys live only in the upstream
//! configuration: they are never part of a recorded request.

mod backend;
mod exchange;
mod local;
mod proxy;

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::contract::ModelCall;
use crate::error::{Error, Result};
use crate::http_server::{Conn, Framing, HttpServer, Options, Refused, Request, State};
use crate::openai::wire::error_body;
pub use backend::Backend;
use exchange::{failed_call, respond_error, respond_json, Exchange, JSON};
// The wire types the recorder serves stay reachable at their old paths.
pub use crate::openai::{assemble_stream, Route, Upstream};

/// Largest request body accepted, by default (a long agent transcript fits many times over).
pub const DEFAULT_MAX_BODY: usize = 32 << 20;

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
    max_body: usize,
}

/// An OpenAI-compatible server on 127.0.0.1 that records every call per rollout.
pub struct ModelServer {
    shared: Arc<Shared>,
    http: HttpServer,
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
        // Each recording's URL is its only key; a machine that cannot make them unguessable
        // gets no server rather than guessable URLs.
        crate::http_server::os_random(&mut [0u8; 16]).map_err(|e| {
            Error::io(
                "the operating system gives no random bytes for the recording server's URLs",
                e,
            )
        })?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::io("cannot start the recording model server on 127.0.0.1", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("the recording server has no TCP address", e))?
            .port();
        let shared = Arc::new(Shared {
            slots: RwLock::new(HashMap::new()),
            max_body,
        });
        let sh = shared.clone();
        let options = Options {
            name: "nenyax-recorder",
            max_connections: MAX_CONNECTIONS,
            busy: |open| {
                error_body(
                    "server_error",
                    &format!("the recording server has {open} connections open; retry later"),
                )
            },
        };
        let http = HttpServer::start(listener, options, move |stream, state| {
            serve_connection(stream, &sh, state)
        })
        .map_err(|e| Error::io("cannot start the recording server's threads", e))?;
        Ok(ModelServer { shared, http, port })
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
        // The URL is a capability: whoever knows it spends the upstream's key and writes into
        // this rollout's calls, so its id is 128 bits from the OS (never reused, so a stale URL
        // never lands in another rollout either).
        let id = crate::http_server::unguessable_id();
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
        // Idle connections end at once; a call being served still writes its reply.
        self.http.stop(Shutdown::Read);
    }
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

    /// The recording's id (the path segment after `/r/`): 32 hex digits, 128 bits from the OS.
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

/// Most connections open at once (each is a thread; hundreds of rollouts wait on slow models).
const MAX_CONNECTIONS: usize = 8192;

/// Longest wait for the next request on a keep-alive connection.
const KEEPALIVE: Duration = Duration::from_secs(75);

/// Each connection is served on its own thread, which reads a call and answers it itself (no
/// hand-off to another thread, which on a VM costs a vCPU wake-up per call), so hundreds of
/// calls can block on slow models at once without queueing behind each other.
fn serve_connection(stream: TcpStream, shared: &Shared, state: &State) {
    let mut conn = Conn::new(stream, KEEPALIVE);
    loop {
        if state.stopping() {
            return;
        }
        let req = match conn.read_head() {
            Ok(r) => r,
            Err(Refused::Gone) => return,
            Err(Refused::Reject(status, msg)) => {
                let body = error_body("invalid_request_error", &msg).to_string();
                return conn.refuse(status, JSON, body.as_bytes());
            }
        };
        let mut ex = Exchange {
            keep: req.keep_alive,
            drain: false,
            conn: &mut conn,
        };
        handle(&mut ex, req, shared);
        let (keep, drain) = (ex.keep, ex.drain);
        if drain {
            return conn.drain();
        }
        if !keep {
            return conn.finish();
        }
    }
}

fn handle(ex: &mut Exchange<'_>, mut req: Request, shared: &Shared) {
    let t0 = Instant::now();
    let path = req.path.clone();
    let Some((id, rest)) = path
        .strip_prefix("/r/")
        .and_then(|p| p.split_once("/v1/"))
        .map(|(id, rest)| (id.to_string(), rest.trim_end_matches('/').to_string()))
    else {
        body_left_unread(ex, &req);
        return respond_error(
            ex,
            404,
            "not_found",
            &format!(
                "no route {path}: use the base URL of a recording, http://127.0.0.1:<port>/r/<id>/v1"
            ),
        );
    };
    let route = match (req.method.as_str(), rest.as_str()) {
        ("POST", "chat/completions") => Route::Chat,
        ("POST", "completions") => Route::Completions,
        ("POST", "responses") => Route::Responses,
        ("GET", "models") => Route::Models,
        (m, r) => {
            body_left_unread(ex, &req);
            return respond_error(
                ex,
                404,
                "not_found",
                &format!("no route {m} /v1/{r}; served: POST chat/completions, completions, responses; GET models"),
            );
        }
    };
    let slot = shared
        .slots
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned();
    let Some(slot) = slot else {
        body_left_unread(ex, &req);
        return respond_error(
            ex,
            404,
            "not_found",
            &format!("unknown recording {id}: its rollout has finished, or it never existed"),
        );
    };
    let _in_flight = slot.begin();
    if route == Route::Models {
        body_left_unread(ex, &req);
        let name = match &slot.backend {
            Backend::Model(m) => m.name(),
            Backend::Upstream(u) => u.model_name().unwrap_or("upstream").to_string(),
        };
        let body = json!({"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "nenyax"}]});
        return respond_json(ex, 200, &body);
    }
    // The body, bounded: a client that sends more than the limit gets 413, not a reset.
    match ex.conn.read_body(&mut req, shared.max_body, true) {
        Ok(()) => {}
        Err(Refused::Reject(413, msg)) => {
            slot.push(failed_call(Map::new(), &msg, t0));
            ex.keep = false;
            ex.drain = true;
            return respond_error(ex, 413, "request_too_large", &msg);
        }
        Err(refused) => {
            let why = match refused {
                Refused::Reject(_, m) => m,
                Refused::Gone => "the client closed the connection".into(),
            };
            let msg = format!("could not read the request body: {why}");
            slot.push(failed_call(Map::new(), &msg, t0));
            ex.keep = false;
            return respond_error(ex, 400, "invalid_request_error", &msg);
        }
    }
    let raw = std::mem::take(&mut req.body);
    let body = match serde_json::from_slice::<Value>(&raw) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            let msg = "request body must be a JSON object";
            slot.push(failed_call(raw_request(&raw), msg, t0));
            return respond_error(ex, 400, "invalid_request_error", msg);
        }
        Err(e) => {
            let msg = format!("request body is not valid JSON: {e}");
            slot.push(failed_call(raw_request(&raw), &msg, t0));
            return respond_error(ex, 400, "invalid_request_error", &msg);
        }
    };
    let call = match &slot.backend {
        Backend::Model(model) => local::serve_model(ex, route, body, model.as_ref(), t0),
        Backend::Upstream(up) => proxy::proxy(ex, route, body, up, t0),
    };
    slot.push(call);
}

/// The answer to `req` will not read its body, so the connection closes after it (drained):
/// kept open, the body's bytes would be read as the next request, one the client never framed
/// as one (a proxy in front would see a single request).
fn body_left_unread(ex: &mut Exchange<'_>, req: &Request) {
    if req.framing != Framing::Empty {
        ex.keep = false;
        ex.drain = true;
    }
}

/// What a malformed body looked like, clipped, for the record.
fn raw_request(raw: &[u8]) -> Map<String, Value> {
    let text = String::from_utf8_lossy(&raw[..raw.len().min(4096)]).into_owned();
    let mut m = Map::new();
    m.insert("raw_body".into(), Value::String(text));
    m
}
