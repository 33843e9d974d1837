//! `nenyax serve`: any step-mode environment as an OpenEnv server.
//!
//! Speaks the OpenEnv 0.10 wire protocol (see docs/openenv.md): WebSocket sessions at `/ws`
//! (one connection, one episode session), the stateless HTTP routes `/reset`, `/step`,
//! `/state`, and `/health`, `/metadata`, `/schema`, `/mcp`, `/openapi.json`. Beyond the Python
//! reference, `/reset` with `{"session": true}` opens an HTTP session whose `session_id`
//! `/step` and `/state` accept, so a whole episode can be played over plain HTTP.
//!
//! One thread per connection on a std `TcpListener` (no async runtime). The server owns its
//! sockets, so it can time out idle sessions, keep WebSockets alive with pings, bound every
//! request's size, and close every connection on [`Server::stop`]. Nothing a client sends can
//! panic it: requests are parsed defensively and every environment call runs under
//! [`guard`](crate::env::guard).

mod options;
mod protocol;
mod shared;
mod ws;

pub use options::ServeOptions;

use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contract::Mode;
use crate::env::Environment;
use crate::error::{Error, Result};
use crate::http_server::{Conn, HttpServer, Options, Refused, Request, State};
use protocol::{empty_state, native_action, Fault, Play, ResetArgs};
use shared::{lock, HttpSession, Shared};

/// A running OpenEnv server. Stops (closing every connection) on [`Server::stop`] or drop.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    http: HttpServer,
}

impl Server {
    /// Bind and start serving `env` (a step-mode environment) in background threads.
    pub fn start(env: Arc<dyn Environment>, opts: ServeOptions) -> Result<Server> {
        if env.mode() != Mode::Step {
            return Err(Error::UnsupportedCapability {
                env: env.id().to_string(),
                what: format!(
                    "be served over OpenEnv: it runs in {} mode, and only step-mode \
                     environments can be stepped by an OpenEnv client",
                    env.mode()
                ),
            });
        }
        if opts.max_sessions == 0 || opts.max_connections == 0 || opts.max_message_bytes == 0 {
            return Err(Error::Config(
                "serve options max_sessions, max_connections and max_message_bytes must be at \
                 least 1"
                    .into(),
            ));
        }
        crate::http_server::os_random(&mut [0u8; 16]).map_err(|e| {
            Error::io(
                "the operating system gives no random bytes for unguessable session ids",
                e,
            )
        })?;
        let listener = TcpListener::bind((opts.host.as_str(), opts.port)).map_err(|e| {
            Error::io(
                format!(
                    "cannot bind {}:{} (is the port in use? pick another with --port, or 0 for any)",
                    opts.host, opts.port
                ),
                e,
            )
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the bound address", e))?;
        let m = env.manifest();
        let shared = Arc::new(Shared {
            metadata: protocol::metadata(m).to_string().into_bytes(),
            schema: protocol::schema(m).to_string().into_bytes(),
            openapi: protocol::openapi(m).to_string().into_bytes(),
            env,
            opts,
            sessions: AtomicUsize::new(0),
            http_sessions: Mutex::new(HashMap::new()),
        });
        let s = shared.clone();
        let options = Options {
            name: "nenyax-serve",
            max_connections: s.opts.max_connections,
            busy: |open| json!({"detail": format!("Server at connection limit ({open} open); retry later")}),
        };
        let http = HttpServer::start(listener, options, move |stream, state| {
            handle_connection(stream, &s, state)
        })
        .map_err(|e| Error::io("cannot start the server thread", e))?;
        Ok(Server { addr, shared, http })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL clients use, e.g. `http://127.0.0.1:8000`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Live episode sessions (WebSocket and HTTP).
    pub fn active_sessions(&self) -> usize {
        self.shared.sessions.load(Ordering::SeqCst)
    }

    /// Block until the server stops (it stops only through [`Server::stop`] from another
    /// handle's thread, or when the process exits).
    pub fn wait(mut self) {
        self.http.wait();
    }

    /// Stop accepting, close every connection and end every session.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.http.stop(Shutdown::Both);
        let drained: Vec<HttpSession> = lock(&self.shared.http_sessions)
            .drain()
            .map(|(_, s)| s)
            .collect();
        self.shared
            .sessions
            .fetch_sub(drained.len(), Ordering::SeqCst);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn handle_connection(stream: TcpStream, shared: &Arc<Shared>, state: &State) {
    let mut conn = Conn::new(stream, KEEPALIVE.min(shared.opts.idle_timeout))
        .with_head_timeout(shared.opts.head_timeout);
    loop {
        if state.stopping() {
            return;
        }
        let read = conn.read_head().and_then(|mut req| {
            if req.has_token("upgrade", "websocket") {
                return Ok(req);
            }
            conn.read_body(&mut req, shared.opts.max_message_bytes, false)
                .map(|_| req)
        });
        let req = match read {
            Ok(r) => r,
            Err(Refused::Gone) => return,
            Err(Refused::Reject(status, msg)) => {
                let body = json!({"detail": msg}).to_string();
                // Drained, so that a client still sending (a head over the limit) reads the
                // answer instead of a reset.
                return conn.refuse(status, JSON, body.as_bytes());
            }
        };
        if req.has_token("upgrade", "websocket") {
            if req.path != "/ws" {
                let body =
                    json!({"detail": format!("no WebSocket endpoint at {}; use /ws", req.path)});
                let _ = conn.respond(404, JSON, body.to_string().as_bytes(), false);
                return;
            }
            let (stream, leftover) = conn.into_parts();
            return ws::websocket(stream, leftover, &req, shared, state);
        }
        let (status, body) = route(shared, &req);
        let ok = match body {
            Body::Json(v) => conn.respond(status, JSON, v.to_string().as_bytes(), req.keep_alive),
            Body::Raw(b) => conn.respond(status, JSON, b, req.keep_alive),
        };
        if ok.is_err() || !req.keep_alive {
            return conn.finish();
        }
    }
}

const JSON: &str = "application/json";
/// Longest wait for the next request on a keep-alive connection.
const KEEPALIVE: Duration = Duration::from_secs(75);

enum Body<'a> {
    Json(Value),
    Raw(&'a [u8]),
}

fn detail(msg: impl Into<String>) -> Body<'static> {
    Body::Json(json!({"detail": msg.into()}))
}

fn fault_response(f: Fault) -> (u16, Body<'static>) {
    match f {
        Fault::Validation(errors) => (422, Body::Json(json!({"detail": errors}))),
        Fault::Execution(m) => (500, detail(m)),
    }
}

/// Parse a JSON body; an empty body reads as `{}`.
fn json_body(req: &Request) -> std::result::Result<Value, Fault> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(&req.body).map_err(|e| {
        Fault::Validation(vec![json!({
            "type": "json_invalid",
            "loc": ["body", e.column()],
            "msg": format!("JSON decode error: {e}"),
            "input": {},
        })])
    })
}

fn route<'a>(shared: &'a Shared, req: &Request) -> (u16, Body<'a>) {
    let get = req.method == "GET" || req.method == "HEAD";
    let post = req.method == "POST";
    match req.path.as_str() {
        "/health" if get => (200, Body::Json(json!({"status": "healthy"}))),
        "/metadata" if get => (200, Body::Raw(&shared.metadata)),
        "/schema" if get => (200, Body::Raw(&shared.schema)),
        "/openapi.json" if get => (200, Body::Raw(&shared.openapi)),
        "/state" if get => http_state(shared, req),
        "/reset" if post => match http_reset(shared, req) {
            Ok(v) => (200, Body::Json(v)),
            Err(r) => r,
        },
        "/step" if post => match http_step(shared, req) {
            Ok(v) => (200, Body::Json(v)),
            Err(r) => r,
        },
        "/mcp" if post => {
            let body = serde_json::from_slice::<Value>(&req.body).ok();
            (200, Body::Json(protocol::mcp_reply(body.as_ref())))
        }
        "/health" | "/metadata" | "/schema" | "/openapi.json" | "/state" | "/reset" | "/step"
        | "/mcp" => (405, detail("Method Not Allowed")),
        "/ws" => (
            426,
            detail("/ws is a WebSocket endpoint; connect with an Upgrade: websocket request"),
        ),
        _ => (404, detail("Not Found")),
    }
}

type HttpResult = std::result::Result<Value, (u16, Body<'static>)>;

fn http_reset(shared: &Shared, req: &Request) -> HttpResult {
    let body = json_body(req).map_err(fault_response)?;
    if !body.is_object() {
        return Err(fault_response(Fault::invalid(
            "dict_type",
            json!(["body"]),
            "Input should be a valid dictionary",
            &body,
        )));
    }
    let args = ResetArgs::from_json(&body, true).map_err(fault_response)?;
    let want_session = match body.get("session") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(v) => {
            return Err(fault_response(Fault::invalid(
                "bool_type",
                json!(["body", "session"]),
                "Input should be a valid boolean",
                v,
            )))
        }
    };
    let episode_id = args.episode_id.clone().unwrap_or_else(|| shared.new_id());
    if shared.acquire().is_err() {
        return Err((503, capacity_detail(shared)));
    }
    let started = Play::start(shared.env.as_ref(), &args, episode_id, true);
    let (play, mut envelope) = match started {
        Ok(x) => x,
        Err(f) => {
            shared.release();
            return Err(fault_response(f));
        }
    };
    if !want_session {
        // Stateless, as in OpenEnv: the episode is dropped with the request.
        shared.release();
        return Ok(envelope);
    }
    let id = shared.new_id();
    envelope["session_id"] = json!(id);
    lock(&shared.http_sessions).insert(
        id,
        HttpSession {
            play: Arc::new(Mutex::new(play)),
            last_used: Instant::now(),
        },
    );
    Ok(envelope)
}

fn capacity_detail(shared: &Shared) -> Body<'static> {
    detail(format!(
        "Server at capacity: {}/{} sessions active. Cannot accept new sessions.",
        shared.sessions.load(Ordering::SeqCst),
        shared.opts.max_sessions
    ))
}

fn http_session(
    shared: &Shared,
    id: &str,
) -> std::result::Result<Arc<Mutex<Play>>, (u16, Body<'static>)> {
    shared.reap();
    let mut map = lock(&shared.http_sessions);
    match map.get_mut(id) {
        Some(s) => {
            s.last_used = Instant::now();
            Ok(s.play.clone())
        }
        None => Err((
            404,
            detail(format!(
                "no HTTP session `{id}`: it ended, idled out or never existed; POST /reset with \
                 {{\"session\": true}} to open one"
            )),
        )),
    }
}

fn http_step(shared: &Shared, req: &Request) -> HttpResult {
    let body = json_body(req).map_err(fault_response)?;
    let Value::Object(obj) = &body else {
        return Err(fault_response(Fault::invalid(
            "dict_type",
            json!(["body"]),
            "Input should be a valid dictionary",
            &body,
        )));
    };
    let Some(action) = obj.get("action") else {
        return Err(fault_response(Fault::invalid(
            "missing",
            json!(["body", "action"]),
            "Field required",
            &body,
        )));
    };
    let native = native_action(action, &[]).map_err(fault_response)?;
    match obj.get("session_id") {
        None | Some(Value::Null) => {
            // Stateless: a fresh episode (seed none) takes this one action, as in OpenEnv.
            if shared.acquire().is_err() {
                return Err((503, capacity_detail(shared)));
            }
            let args = ResetArgs {
                seed: None,
                episode_id: None,
                task_id: None,
            };
            let out = Play::start(shared.env.as_ref(), &args, shared.new_id(), true)
                .and_then(|(mut play, _)| play.step(native, true));
            shared.release();
            out.map_err(fault_response)
        }
        Some(Value::String(id)) => {
            let play = http_session(shared, id)?;
            let mut p = lock(&play);
            let out = p.step(native, true).map_err(fault_response)?;
            if p.done() {
                drop(p);
                if lock(&shared.http_sessions).remove(id).is_some() {
                    shared.release();
                }
            }
            Ok(out)
        }
        Some(v) => Err(fault_response(Fault::invalid(
            "string_type",
            json!(["body", "session_id"]),
            "Input should be a valid string",
            v,
        ))),
    }
}

fn http_state(shared: &Shared, req: &Request) -> (u16, Body<'static>) {
    match req.query_param("session_id") {
        None => (200, Body::Json(empty_state(&shared.env.manifest().id))),
        Some(id) => match http_session(shared, &id) {
            Ok(play) => (
                200,
                Body::Json(lock(&play).state(&shared.env.manifest().id)),
            ),
            Err(e) => e,
        },
    }
}
