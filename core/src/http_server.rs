//! The one HTTP/1.1 server stack, shared by the recording model server and `nenyax serve`.
//!
//! A std `TcpListener`, one thread per connection (no async runtime, no hand-off between
//! threads), requests parsed with httparse. Owning the sockets is what both servers need: every
//! request head and body is bounded (431, 413 instead of a reset), idle keep-alive connections
//! time out, the number of open connections is capped (503), a connection can be handed over
//! for a WebSocket upgrade with the bytes already read, a streamed (SSE) reply writes straight
//! to the socket, and [`HttpServer::stop`] ends every connection.
//!
//! A request's framing is never ambiguous: a head over [`MAX_HEAD`] bytes (counted exactly, however
//! the bytes arrive) is 431, a head still incomplete [`HEAD_TIMEOUT`] after its first byte is 408,
//! and duplicated `Content-Length` headers, `Content-Length` with `Transfer-Encoding`, or a
//! transfer coding other than `chunked` are refused (400, 501) and the connection closed, so a
//! proxy in front that frames the body differently cannot get a second request smuggled in.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head accepted, its final blank line included.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Longest a request head may take to arrive once its first byte has, by default: a client
/// trickling a byte at a time never trips the per-read idle timeout, so the head as a whole
/// needs its own deadline.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How a request's body is delimited, decided once from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed request. The body is read separately ([`Conn::read_body`]) so that a server can
/// route (and record) a request before deciding what its body may be.
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP/1.1 keep-alive (or HTTP/1.0 with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// How the body is delimited.
    pub framing: Framing,
}

impl Request {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header holds `token`.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.header(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }

    /// A query parameter's raw value.
    pub fn query_param(&self, key: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then(|| v.to_string())
        })
    }
}

/// Why no request (or body) could be read.
pub(crate) enum Refused {
    /// The client closed, or went idle between requests.
    Gone,
    /// A bad request, to be answered with this status and message, then the connection closed.
    Reject(u16, String),
}

/// One client connection, with the bytes read past the current request (pipelining).
pub(crate) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    idle: Duration,
    head_timeout: Duration,
}

impl Conn {
    /// Wrap an accepted stream; reads between requests time out after `idle`, and a request
    /// head must arrive whole within [`HEAD_TIMEOUT`] of its first byte.
    pub fn new(stream: TcpStream, idle: Duration) -> Conn {
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(idle));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
        Conn {
            stream,
            buf: Vec::new(),
            idle,
            head_timeout: HEAD_TIMEOUT,
        }
    }

    /// This connection with another deadline for each request head.
    pub fn with_head_timeout(mut self, head_timeout: Duration) -> Conn {
        self.head_timeout = head_timeout;
        self
    }

    fn fill(&mut self) -> Result<(), Refused> {
        self.fill_timed().map_err(|_| Refused::Gone)
    }

    /// Read what the client sent next; `Err(true)` when the read timed out.
    fn fill_timed(&mut self) -> Result<(), bool> {
        let mut chunk = [0u8; 8192];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let timed_out = matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    );
                    return Err(timed_out);
                }
            }
        }
    }

    /// Read the next request's head (at most [`MAX_HEAD`] bytes, within the head timeout of
    /// its first byte); its body is left unread.
    pub fn read_head(&mut self) -> Result<Request, Refused> {
        let mut shortened = false;
        let head_end = self.read_head_bytes(&mut shortened);
        if shortened {
            let _ = self.stream.set_read_timeout(Some(self.idle));
        }
        let head_end = head_end?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let parsed = match req.parse(&self.buf[..head_end]) {
            Ok(httparse::Status::Complete(_)) => req,
            Ok(httparse::Status::Partial) => {
                return Err(Refused::Reject(400, "incomplete request head".into()))
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Refused::Reject(431, "more than 64 request headers".into()))
            }
            Err(e) => return Err(Refused::Reject(400, format!("malformed request: {e}"))),
        };
        let target = parsed.path.unwrap_or("/");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut request = Request {
            method: parsed.method.unwrap_or("").to_string(),
            path: path.to_string(),
            query: query.to_string(),
            headers: parsed
                .headers
                .iter()
                .map(|h| {
                    let v = String::from_utf8_lossy(h.value).trim().to_string();
                    (h.name.to_string(), v)
                })
                .collect(),
            body: Vec::new(),
            keep_alive: false,
            framing: Framing::Empty,
        };
        request.framing = framing(&request.headers)?;
        request.keep_alive = if parsed.version.unwrap_or(1) == 0 {
            request.has_token("connection", "keep-alive")
        } else {
            !request.has_token("connection", "close")
        };
        self.buf.drain(..head_end);
        Ok(request)
    }

    /// Wait for a whole head in the buffer; its length. Only the first [`MAX_HEAD`] bytes are
    /// searched, so a head one byte over the limit is refused however many arrived at once.
    /// `shortened` is set when the socket's read timeout was cut down to the head deadline.
    fn read_head_bytes(&mut self, shortened: &mut bool) -> Result<usize, Refused> {
        let limit = self.head_timeout;
        let mut deadline = (!self.buf.is_empty()).then(|| Instant::now() + limit);
        // Where the search for the blank line resumes: a head trickled in tiny pieces is
        // scanned once, not once per piece.
        let mut from = 0;
        loop {
            let window = &self.buf[from..self.buf.len().min(MAX_HEAD)];
            if let Some(i) = window.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok(from + i + 4);
            }
            from = self.buf.len().min(MAX_HEAD).saturating_sub(3);
            if self.buf.len() >= MAX_HEAD {
                return Err(Refused::Reject(
                    431,
                    format!(
                        "the request head is larger than {} KiB; send fewer or shorter headers",
                        MAX_HEAD / 1024
                    ),
                ));
            }
            let too_slow = || {
                Refused::Reject(
                    408,
                    format!(
                        "the request head did not arrive whole within {} s of its first byte",
                        limit.as_secs_f64()
                    ),
                )
            };
            if let Some(d) = deadline {
                // Each read waits only as long as the head as a whole may still take.
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(too_slow());
                }
                let _ = self.stream.set_read_timeout(Some(left.min(self.idle)));
                *shortened = true;
            }
            match self.fill_timed() {
                Ok(()) => {
                    deadline.get_or_insert_with(|| Instant::now() + limit);
                }
                Err(true) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(too_slow())
                }
                Err(_) => return Err(Refused::Gone),
            }
        }
    }

    /// Read `req`'s body into `req.body`: at most `max_body` bytes, by `Content-Length`, or
    /// chunked when `chunked` allows it (else 411). Answers `Expect: 100-continue`.
    pub fn read_body(
        &mut self,
        req: &mut Request,
        max_body: usize,
        chunked: bool,
    ) -> Result<(), Refused> {
        let is_chunked = req.framing == Framing::Chunked;
        if is_chunked && !chunked {
            return Err(Refused::Reject(
                411,
                "chunked request bodies are not accepted; send Content-Length".into(),
            ));
        }
        let len = match req.framing {
            Framing::Length(n) => n,
            Framing::Empty | Framing::Chunked => 0,
        };
        if len > max_body {
            return Err(Refused::Reject(
                413,
                format!("request body of {len} bytes is over the {max_body}-byte limit"),
            ));
        }
        if req.has_token("expect", "100-continue") && self.buf.is_empty() {
            let _ = self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        if is_chunked {
            req.body = self.read_chunked(max_body)?;
            return Ok(());
        }
        while self.buf.len() < len {
            self.fill()?;
        }
        req.body = self.buf.drain(..len).collect();
        Ok(())
    }

    fn read_line(&mut self) -> Result<String, Refused> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(Refused::Reject(400, "chunk header too long".into()));
            }
            self.fill()?;
        }
    }

    fn read_chunked(&mut self, max_body: usize) -> Result<Vec<u8>, Refused> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line()?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| Refused::Reject(400, format!("bad chunk size `{size}`")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.read_line()?.is_empty() {}
                return Ok(body);
            }
            // `size` is the client's: compare without adding, which could overflow.
            if size > max_body.saturating_sub(body.len()) {
                return Err(Refused::Reject(
                    413,
                    format!("request body is over the {max_body}-byte limit"),
                ));
            }
            while self.buf.len() < size + 2 {
                self.fill()?;
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.drain(..size + 2);
        }
    }

    /// Write a whole response.
    pub fn respond(
        &mut self,
        status: u16,
        content_type: &str,
        body: &[u8],
        keep: bool,
    ) -> io::Result<()> {
        write_response(&mut self.stream, status, content_type, body, keep)
    }

    /// Answer a request that cannot be served and end the connection, reading what the client
    /// still sends for a moment so that the answer is not lost to a reset; except after a 408,
    /// where the client is the slow one and waiting on it longer is what the deadline prevents.
    pub fn refuse(mut self, status: u16, content_type: &str, body: &[u8]) {
        let _ = self.respond(status, content_type, body, false);
        if status == 408 {
            return self.finish();
        }
        self.drain();
    }

    /// End the connection after an answer sent before the request was read whole: read (and
    /// drop) what the client still sends for up to 2 s, so the answer is not lost to a reset.
    pub fn drain(mut self) {
        drain(&mut self.stream);
    }

    /// End the connection after the last response.
    pub fn finish(self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// The socket and the bytes read past the request head (a WebSocket upgrade's start).
    pub fn into_parts(self) -> (TcpStream, Vec<u8>) {
        (self.stream, self.buf)
    }

    /// The socket, for a reply streamed by hand.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

/// 128 bits from the operating system's generator, as 32 hex digits. For ids that are
/// capabilities (a recording's URL spends the user's upstream key; an HTTP session id steps
/// someone's episode), so no id may be derived from another, a counter or the clock.
pub(crate) fn unguessable_id() -> String {
    let mut b = [0u8; 16];
    if os_random(&mut b).is_err() {
        // Only when the OS stopped answering after it answered at server start: std's hasher
        // keys come from the OS too, and SipHash under them is still not guessable.
        use std::hash::BuildHasher;
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let state = std::collections::hash_map::RandomState::new();
        for (i, half) in b.chunks_mut(8).enumerate() {
            let h = state.hash_one((n, i, Instant::now()));
            half.copy_from_slice(&h.to_le_bytes());
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Fill `buf` from the OS (getrandom(2) on Linux, /dev/urandom elsewhere or without it). A
/// server calls it once at start so that a machine without randomness is a typed error there.
pub(crate) fn os_random(buf: &mut [u8]) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let mut filled = 0;
        while filled < buf.len() {
            let rest = &mut buf[filled..];
            // SAFETY: the pointer and length describe `rest`, which getrandom only writes into.
            let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    _ if e.raw_os_error() == Some(libc::ENOSYS) => break,
                    _ => return Err(e),
                }
            }
            filled += n as usize;
        }
        if filled == buf.len() {
            return Ok(());
        }
    }
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf))
}

/// How `headers` delimit the body. Refused when two readers of the same bytes could disagree
/// (a proxy that picks the other header would see a different request end): more than one
/// `Content-Length`, one that is not a plain byte count, `Content-Length` with
/// `Transfer-Encoding`, or a transfer coding other than a single `chunked`.
fn framing(headers: &[(String, String)]) -> Result<Framing, Refused> {
    let named = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let lengths = named("content-length");
    let codings = named("transfer-encoding");
    let bad = |msg: String| Err(Refused::Reject(400, msg));
    if !lengths.is_empty() && !codings.is_empty() {
        return bad(
            "a request with both Content-Length and Transfer-Encoding is ambiguous; send one of them"
                .into(),
        );
    }
    if !codings.is_empty() {
        let list = codings.join(", ");
        if list.trim().eq_ignore_ascii_case("chunked") {
            return Ok(Framing::Chunked);
        }
        return Err(Refused::Reject(
            501,
            format!(
                "Transfer-Encoding `{list}` is not implemented; send the body with Content-Length \
                 (or Transfer-Encoding: chunked where accepted)"
            ),
        ));
    }
    match lengths.as_slice() {
        [] => Ok(Framing::Empty),
        [v] if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => match v.parse() {
            Ok(n) => Ok(Framing::Length(n)),
            Err(_) => bad(format!("Content-Length `{v}` is too large")),
        },
        [v] => bad(format!(
            "Content-Length `{v}` is not a byte count; send one number of bytes"
        )),
        many => bad(format!(
            "{} Content-Length headers ({}); send exactly one",
            many.len(),
            many.join(", ")
        )),
    }
}

/// Half-close `stream`, then read and drop what the peer still sends (at most 2 s, 64 MiB), so
/// the last thing written reaches it instead of being lost to a reset; then close it.
pub(crate) fn drain(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut sink = [0u8; 16 * 1024];
    let mut discarded = 0usize;
    while Instant::now() < deadline && discarded < (64 << 20) {
        match stream.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => discarded += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// The reason phrase of the statuses these servers send.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Entity",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Write a whole response with a `Content-Length` body, in one write.
pub(crate) fn write_response(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    keep: bool,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: {}\r\n\r\n",
        reason(status),
        body.len(),
        if keep { "keep-alive" } else { "close" }
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out)?;
    stream.flush()
}

/// What the accept loop and the connections share.
pub(crate) struct State {
    stopping: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    next: AtomicU64,
}

impl State {
    /// True once [`HttpServer::stop`] began.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a server accepts connections.
pub(crate) struct Options {
    /// Thread name prefix.
    pub name: &'static str,
    /// Most open connections; more are answered 503 with `busy(open)` and closed.
    pub max_connections: usize,
    /// The JSON body of the 503 answer.
    pub busy: fn(usize) -> serde_json::Value,
}

/// A listener accepting in a background thread, each connection served on its own thread.
pub(crate) struct HttpServer {
    addr: SocketAddr,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Start accepting on `listener`; `handler` serves one connection until it ends.
    pub fn start(
        listener: TcpListener,
        opts: Options,
        handler: impl Fn(TcpStream, &State) + Send + Sync + 'static,
    ) -> io::Result<HttpServer> {
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        });
        let s = state.clone();
        let handler = Arc::new(handler);
        let accept = std::thread::Builder::new()
            .name(format!("{}-accept", opts.name))
            .spawn(move || accept_loop(listener, s, opts, handler))?;
        Ok(HttpServer {
            addr,
            state,
            accept: Some(accept),
        })
    }

    /// Block until the accept loop ends (after [`HttpServer::stop`] from elsewhere).
    pub fn wait(&mut self) {
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }

    /// Stop accepting and shut every open connection down `how`: `Both` cuts them, `Read`
    /// lets a reply being written finish while idle connections end at once.
    pub fn stop(&mut self, how: Shutdown) {
        if self.state.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
        self.wait();
        for (_, c) in lock(&self.state.conns).drain() {
            let _ = c.shutdown(how);
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop(Shutdown::Both);
    }
}

/// The address that reaches a listener bound to `addr` (a wildcard bind is reached on loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

type Handler = dyn Fn(TcpStream, &State) + Send + Sync;

fn accept_loop(listener: TcpListener, state: Arc<State>, opts: Options, handler: Arc<Handler>) {
    for stream in listener.incoming() {
        if state.stopping() {
            break;
        }
        let Ok(stream) = stream else {
            // EMFILE and friends: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let open = lock(&state.conns).len();
        if open >= opts.max_connections {
            let mut s = stream;
            let body = (opts.busy)(open).to_string();
            let _ = write_response(&mut s, 503, "application/json", body.as_bytes(), false);
            continue;
        }
        let id = state.next.fetch_add(1, Ordering::SeqCst);
        if let Ok(c) = stream.try_clone() {
            lock(&state.conns).insert(id, c);
        }
        let (s, h) = (state.clone(), handler.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("{}-conn", opts.name))
            .spawn(move || {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(stream, &s)));
                lock(&s.conns).remove(&id);
            });
        if spawned.is_err() {
            lock(&state.conns).remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serve one request on a real socket; returns what `read` made of it.
    fn exchange(raw: &'static [u8], max_body: usize, chunked: bool) -> Result<Request, u16> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(raw).unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
        });
        let (stream, _) = listener.accept().unwrap();
        let mut conn = Conn::new(stream, Duration::from_secs(5));
        let out = conn
            .read_head()
            .and_then(|mut r| conn.read_body(&mut r, max_body, chunked).map(|_| r));
        conn.finish();
        client.join().unwrap();
        out.map_err(|e| match e {
            Refused::Gone => 0,
            Refused::Reject(s, _) => s,
        })
    }

    #[test]
    fn bodies_are_read_by_length_or_chunks_within_the_limit() {
        let r = exchange(
            b"POST /a?x=1 HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
            10,
            false,
        )
        .unwrap_or_else(|s| panic!("{s}"));
        assert_eq!((r.path.as_str(), r.body.as_slice()), ("/a", &b"{}"[..]));
        assert_eq!(r.query_param("x").as_deref(), Some("1"));
        assert!(r.keep_alive);
        let chunked = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(exchange(chunked, 10, true).ok().unwrap().body, b"abcde");
        assert_eq!(exchange(chunked, 4, true).err(), Some(413));
        assert_eq!(exchange(chunked, 10, false).err(), Some(411));
        let long = b"POST / HTTP/1.1\r\ncontent-length: 11\r\n\r\n";
        assert_eq!(exchange(long, 10, false).err(), Some(413));
        assert_eq!(exchange(b"NOT HTTP\r\n\r\n", 10, false).err(), Some(400));
        let closed = b"GET / HTTP/1.0\r\n\r\n";
        assert!(!exchange(closed, 10, false).ok().unwrap().keep_alive);
    }

    #[test]
    fn only_one_plain_length_or_a_lone_chunked_frames_a_body() {
        let f = |hs: &[(&str, &str)]| {
            let hs: Vec<(String, String)> = hs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            match framing(&hs) {
                Ok(f) => Ok(f),
                Err(Refused::Reject(s, _)) => Err(s),
                Err(Refused::Gone) => Err(0),
            }
        };
        assert_eq!(f(&[]), Ok(Framing::Empty));
        assert_eq!(f(&[("Content-Length", "12")]), Ok(Framing::Length(12)));
        assert_eq!(f(&[("transfer-encoding", "Chunked")]), Ok(Framing::Chunked));
        for bad in [
            &[("content-length", "1"), ("Content-Length", "1")][..],
            &[("content-length", "1"), ("content-length", "2")],
            &[("content-length", "1,1")],
            &[("content-length", "-1")],
            &[("content-length", "+1")],
            &[("content-length", "")],
            &[("content-length", "99999999999999999999999")],
            &[("content-length", "1"), ("transfer-encoding", "chunked")],
        ] {
            assert_eq!(f(bad), Err(400), "{bad:?}");
        }
        for unknown in [
            &[("transfer-encoding", "gzip")][..],
            &[("transfer-encoding", "gzip, chunked")],
            &[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
        ] {
            assert_eq!(f(unknown), Err(501), "{unknown:?}");
        }
    }

    #[test]
    fn a_trickled_head_is_cut_off_at_its_deadline_not_the_idle_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            for b in b"GET / HTTP/1.1\r\nx: ".iter().chain([b'a'; 200].iter()) {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let (stream, _) = listener.accept().unwrap();
        let mut conn = Conn::new(stream, Duration::from_secs(30))
            .with_head_timeout(Duration::from_millis(300));
        let t0 = Instant::now();
        let status = match conn.read_head() {
            Err(Refused::Reject(s, _)) => s,
            Err(Refused::Gone) => 0,
            Ok(_) => 200,
        };
        let took = t0.elapsed();
        drop(conn);
        client.join().unwrap();
        assert_eq!(status, 408);
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
}
