//! `nenyax serve` under faults, from a raw client (tungstenite and plain TCP), no Python needed:
//! malformed JSON and unknown message types, a client that disconnects mid-episode, more
//! sessions than the limit, an idle client past the timeout, 1 MB frames, malformed HTTP.
//! The real OpenEnv Python client and `openenv validate` are in tests/openenv.rs.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nenyax::{load, ServeOptions, Server};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn serve(uri: &str, f: impl FnOnce(&mut ServeOptions)) -> Server {
    let mut o = ServeOptions {
        port: 0,
        ..ServeOptions::default()
    };
    f(&mut o);
    Server::start(load(uri).unwrap(), o).unwrap()
}

fn ws(server: &Server) -> Ws {
    let (ws, _) = tungstenite::connect(format!("ws://{}/ws", server.addr())).unwrap();
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    ws
}

fn send(ws: &mut Ws, v: &Value) -> Value {
    ws.send(Message::text(v.to_string())).unwrap();
    read(ws)
}

fn read(ws: &mut Ws) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// The close frame the server sends next (skipping pings).
fn close_code(ws: &mut Ws) -> Option<CloseCode> {
    loop {
        match ws.read() {
            Ok(Message::Close(c)) => return c.map(|c| c.code),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A raw HTTP exchange: the status and the JSON body (Value::Null when not JSON).
fn raw_http(server: &Server, request: &[u8]) -> (u16, Value) {
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request);
    // Read one response (head plus content-length body): keep-alive connections stay open.
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some(i) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..i]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if out.len() >= i + 4 + len {
                out.truncate(i + 4 + len);
                break;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, body)
}

fn post(server: &Server, path: &str, body: &str) -> (u16, Value) {
    raw_http(
        server,
        format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

#[test]
fn a_websocket_episode_carries_the_judgment_in_the_final_metadata() {
    let server = serve("builtin:guess?high=8&max_guesses=3", |_| {});
    let mut c = ws(&server);
    let r = send(
        &mut c,
        &json!({"type": "reset", "data": {"seed": 1, "episode_id": "e1"}}),
    );
    assert_eq!(r["type"], "observation");
    assert_eq!(r["data"]["done"], false);
    assert!(r["data"]["reward"].is_null());
    assert!(r["data"]["observation"]["text"].is_string());
    let mut last = Value::Null;
    for _ in 0..3 {
        last = send(&mut c, &json!({"type": "step", "data": {"value": 0}}));
        if last["data"]["done"] == true {
            break;
        }
    }
    assert_eq!(last["data"]["done"], true, "{last}");
    let j = &last["data"]["metadata"]["nenyax_judgment"];
    assert_eq!(j["judge"], "builtin:guess", "{last}");
    assert_eq!(j["passed"], false);
    let st = send(&mut c, &json!({"type": "state"}));
    assert_eq!(st["data"]["episode_id"], "e1");
    assert_eq!(st["data"]["step_count"], 3);
    // Stepping after the end is an execution error; the session stays usable.
    let e = send(&mut c, &json!({"type": "step", "data": {"value": 1}}));
    assert_eq!(e["data"]["code"], "EXECUTION_ERROR");
    let r = send(&mut c, &json!({"type": "reset"}));
    assert_eq!(r["type"], "observation");
    c.send(Message::text(r#"{"type":"close"}"#)).unwrap();
    assert_eq!(close_code(&mut c), Some(CloseCode::Normal));
    wait_until("the session is released", || server.active_sessions() == 0);
}

#[test]
fn malformed_frames_get_protocol_errors_and_the_session_survives() {
    let server = serve("builtin:arithmetic", |_| {});
    let mut c = ws(&server);
    let code = |v: &Value| v["data"]["code"].as_str().unwrap_or_default().to_string();
    c.send(Message::text("{not json")).unwrap();
    assert_eq!(code(&read(&mut c)), "INVALID_JSON");
    assert_eq!(
        code(&send(&mut c, &json!({"type": "dance"}))),
        "UNKNOWN_TYPE"
    );
    assert_eq!(
        send(&mut c, &json!({"type": "dance"}))["data"]["message"],
        "Unknown message type: dance"
    );
    for bad in [
        json!([1, 2]),
        json!({"data": {}}),
        json!({"type": 3}),
        json!({"type": "reset", "extra": 1}),
        json!({"type": "reset", "data": "seed"}),
        json!({"type": "reset", "data": {"seed": "x"}}),
    ] {
        assert_eq!(code(&send(&mut c, &bad)), "VALIDATION_ERROR", "{bad}");
    }
    assert_eq!(
        code(&send(
            &mut c,
            &json!({"type": "step", "data": {"value": "x"}})
        )),
        "EXECUTION_ERROR",
        "stepping before reset"
    );
    c.send(Message::binary(vec![0u8, 159, 146, 150])).unwrap();
    assert_eq!(code(&read(&mut c)), "INVALID_JSON");
    send(&mut c, &json!({"type": "reset", "data": {"seed": 0}}));
    let e = send(&mut c, &json!({"type": "step", "data": {"bogus": 1}}));
    assert_eq!(code(&e), "VALIDATION_ERROR");
    let locs: Vec<Value> = e["data"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["loc"].clone())
        .collect();
    assert!(locs.contains(&json!(["bogus"])) && locs.contains(&json!(["value"])));
    // A native action the environment rejects is an execution error, not a crash.
    let e = send(
        &mut c,
        &json!({"type": "step", "data": {"value": {"no": 1}}}),
    );
    assert_eq!(code(&e), "EXECUTION_ERROR");
    assert!(e["data"]["message"]
        .as_str()
        .unwrap()
        .contains("InvalidAction"));
    // MCP is answered as JSON-RPC.
    let m = send(
        &mut c,
        &json!({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}}),
    );
    assert_eq!(m["data"]["id"], 7);
    assert_eq!(m["data"]["error"]["code"], -32603);
    // And the session still plays.
    let s = send(
        &mut c,
        &json!({"type": "step", "data": {"value": "<answer>0</answer>"}}),
    );
    assert_eq!(s["data"]["done"], true, "{s}");
}

#[test]
fn a_client_that_disconnects_mid_episode_frees_its_session() {
    let server = serve("builtin:guess", |o| o.max_sessions = 1);
    let mut c = ws(&server);
    send(&mut c, &json!({"type": "reset"}));
    send(&mut c, &json!({"type": "step", "data": {"value": 3}}));
    assert_eq!(server.active_sessions(), 1);
    // No close frame: the socket just goes away.
    if let MaybeTlsStream::Plain(s) = c.get_ref() {
        s.shutdown(std::net::Shutdown::Both).unwrap();
    }
    drop(c);
    wait_until("the dropped session is released", || {
        server.active_sessions() == 0
    });
    let mut d = ws(&server);
    assert_eq!(
        send(&mut d, &json!({"type": "reset"}))["type"],
        "observation"
    );
}

#[test]
fn sessions_beyond_the_limit_are_refused_with_capacity_reached() {
    let server = serve("builtin:guess", |o| o.max_sessions = 2);
    let mut a = ws(&server);
    let mut b = ws(&server);
    send(&mut a, &json!({"type": "reset"}));
    send(&mut b, &json!({"type": "reset"}));
    let mut c = ws(&server);
    let e = read(&mut c);
    assert_eq!(e["data"]["code"], "CAPACITY_REACHED", "{e}");
    assert_eq!(e["data"]["max_sessions"], 2);
    assert_eq!(e["data"]["active_sessions"], 2);
    assert_eq!(close_code(&mut c), Some(CloseCode::Normal));
    // HTTP sessions share the limit.
    let (status, body) = post(&server, "/reset", r#"{"session": true}"#);
    assert_eq!(status, 503, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("capacity"));
    // The stateless default needs a slot only for the request.
    a.send(Message::text(r#"{"type":"close"}"#)).unwrap();
    wait_until("a slot frees", || server.active_sessions() == 1);
    let (status, _) = post(&server, "/reset", "{}");
    assert_eq!(status, 200);
    assert_eq!(send(&mut b, &json!({"type": "state"}))["type"], "state");
}

#[test]
fn an_idle_client_is_closed_after_the_timeout() {
    let server = serve("builtin:guess", |o| {
        o.idle_timeout = Duration::from_millis(600);
        o.ping_interval = Duration::from_millis(200);
        o.max_sessions = 1;
    });
    let mut c = ws(&server);
    send(&mut c, &json!({"type": "reset"}));
    let t0 = Instant::now();
    // Reading answers the server's pings, but pings are not activity: only messages are.
    assert_eq!(close_code(&mut c), Some(CloseCode::Away));
    assert!(t0.elapsed() >= Duration::from_millis(500));
    wait_until("the idle session is released", || {
        server.active_sessions() == 0
    });
    // Its HTTP counterpart: an idle HTTP session expires.
    let (_, r) = post(&server, "/reset", r#"{"session": true}"#);
    let id = r["session_id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(800));
    let (status, body) = post(
        &server,
        "/step",
        &json!({"action": {"value": 1}, "session_id": id}).to_string(),
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(server.active_sessions(), 0);
}

#[test]
fn one_megabyte_frames_are_bounded() {
    let server = serve("builtin:arithmetic", |_| {});
    let mut c = ws(&server);
    send(&mut c, &json!({"type": "reset"}));
    // 1,000,000 bytes of reply text: under the 1 MiB default, answered and scored.
    let big = "9".repeat(1_000_000 - 80);
    let frame = json!({"type": "step", "data": {"value": format!("<answer>{big}</answer>")}});
    assert!(frame.to_string().len() <= 1_000_000);
    let r = send(&mut c, &frame);
    assert_eq!(r["data"]["done"], true);
    assert_eq!(r["data"]["reward"], 0.0);
    // Past the limit: closed with 1009 (message too big), and the server carries on.
    let mut d = ws(&server);
    let huge = "x".repeat((1 << 20) + 1);
    let _ = d.send(Message::text(huge));
    assert_eq!(close_code(&mut d), Some(CloseCode::Size));
    wait_until("both sessions are released", || {
        drop(c.close(None));
        server.active_sessions() == 0
    });
    let mut e = ws(&server);
    assert_eq!(
        send(&mut e, &json!({"type": "reset"}))["type"],
        "observation"
    );
    // The same bound holds for HTTP bodies.
    let body = format!(r#"{{"action": {{"value": "{}"}}}}"#, "y".repeat(1 << 20));
    let (status, _) = post(&server, "/step", &body);
    assert_eq!(status, 413);
}

#[test]
fn http_is_stateless_by_default_and_sessions_are_opt_in() {
    let server = serve("builtin:guess?high=4&max_guesses=4", |_| {});
    let (s, r) = post(&server, "/reset", "");
    assert_eq!(s, 200);
    assert!(
        r["metadata"].is_null() && r.get("session_id").is_none(),
        "{r}"
    );
    let (s, r) = post(&server, "/step", r#"{"action": {"value": 2}}"#);
    assert_eq!(s, 200, "{r}");
    assert!(r["reward"].is_number());
    let (s, r) = raw_http(
        &server,
        b"GET /state HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert_eq!((s, r["step_count"].clone()), (200, json!(0)));
    // A whole episode over HTTP: bisect with the session id until done.
    let (_, r) = post(&server, "/reset", r#"{"seed": 5, "session": true}"#);
    let id = r["session_id"].as_str().unwrap().to_string();
    let (mut lo, mut hi) = (1, 4);
    let mut done = false;
    for _ in 0..4 {
        let g = lo + (hi - lo) / 2;
        let (s, r) = post(
            &server,
            "/step",
            &json!({"action": {"value": g}, "session_id": id}).to_string(),
        );
        assert_eq!(s, 200, "{r}");
        if r["done"] == true {
            assert_eq!(r["metadata"]["nenyax_judgment"]["passed"], true, "{r}");
            done = true;
            break;
        }
        let d = &r["observation"]["data"];
        (lo, hi) = (d["low"].as_i64().unwrap(), d["high"].as_i64().unwrap());
        let (_, st) = raw_http(
            &server,
            format!("GET /state?session_id={id} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert!(st["step_count"].as_u64().unwrap() >= 1);
    }
    assert!(done);
    assert_eq!(
        server.active_sessions(),
        0,
        "a finished HTTP session is released"
    );
}

#[test]
fn malformed_http_is_answered_and_never_crashes_the_server() {
    let server = serve("builtin:arithmetic", |_| {});
    let cases: Vec<(&[u8], u16)> = vec![
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"DELETE /reset HTTP/1.1\r\n\r\n", 405),
        (b"POST /reset HTTP/1.1\r\ncontent-length: abc\r\n\r\n", 400),
        (
            b"POST /reset HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            411,
        ),
        (
            b"POST /step HTTP/1.1\r\ncontent-length: 5\r\n\r\n{bad}",
            422,
        ),
        (b"POST /step HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}", 422),
        (
            b"POST /step HTTP/1.1\r\ncontent-length: 20\r\n\r\n{\"action\": {\"v\": 1}}",
            422,
        ),
        (
            b"POST /reset HTTP/1.1\r\ncontent-length: 12\r\n\r\n{\"seed\": -1}",
            422,
        ),
        (b"GET /ws HTTP/1.1\r\n\r\n", 426),
        (
            b"GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            426,
        ),
        (b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}", 200),
    ];
    for (req, want) in cases {
        let (got, body) = raw_http(&server, req);
        assert_eq!(got, want, "{} -> {body}", String::from_utf8_lossy(req));
    }
    let (_, body) = raw_http(
        &server,
        b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
    );
    assert_eq!(body["jsonrpc"], "2.0");
    // A head larger than 16 KiB, binary junk and a half-sent request: the server stays up.
    let mut junk = b"GET /health HTTP/1.1\r\nx: ".to_vec();
    junk.extend(vec![b'a'; 20_000]);
    assert_eq!(raw_http(&server, &junk).0, 431);
    let _ = raw_http(
        &server,
        &[0xff, 0x00, 0x13, 0x37, b'\r', b'\n', b'\r', b'\n'],
    );
    {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(b"POST /reset HTTP/1.1\r\ncontent-length: 100\r\n\r\n{")
            .unwrap();
    }
    let (s, body) = raw_http(
        &server,
        b"GET /health HTTP/1.1\r\nconnection: close\r\n\r\n",
    );
    assert_eq!((s, body), (200, json!({"status": "healthy"})));
    // Keep-alive: two requests on one connection.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\n\r\nGET /metadata HTTP/1.1\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 2, "{out}");
    assert!(out.contains("nenyax_manifest"));
}

#[test]
fn options_are_checked_and_a_taken_port_is_a_typed_error() {
    let opts = ServeOptions::from_json(&json!({"port": 0, "max_sessions": 3})).unwrap();
    assert_eq!((opts.port, opts.max_sessions), (0, 3));
    assert_eq!(
        opts.host, "127.0.0.1",
        "binds loopback unless told otherwise"
    );
    for bad in [
        json!({"prot": 1}),
        json!({"port": 70000}),
        json!({"max_sessions": 0}),
        json!({"idle_timeout_s": -1}),
        json!([1]),
    ] {
        let e = ServeOptions::from_json(&bad).unwrap_err();
        assert_eq!(e.kind(), "ConfigError", "{bad}: {e}");
    }
    let taken = serve("builtin:guess", |_| {});
    let e = Server::start(
        load("builtin:guess").unwrap(),
        ServeOptions {
            port: taken.addr().port(),
            ..ServeOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("cannot bind"), "{e}");
}

/// Everything the server sends on one connection until it closes it, and whether it did
/// within `wait` (a server that keeps the connection open reads as `false`).
fn until_closed(mut s: TcpStream, wait: Duration) -> (String, bool) {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    while t0.elapsed() < wait {
        match s.read(&mut chunk) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), false)
}

/// Send `raw` on a fresh connection; the answers and whether the server then closed.
fn attack(server: &Server, raw: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(raw).unwrap();
    until_closed(s, Duration::from_secs(5))
}

#[test]
fn ambiguous_body_lengths_are_refused_and_never_read_as_a_second_request() {
    let server = serve("builtin:arithmetic", |_| {});
    // Behind a proxy that frames by the other length, the tail would be a smuggled request.
    let smuggled = "GET /health HTTP/1.1\r\nhost: x\r\n\r\n";
    let body = format!("{{}}{smuggled}");
    let cases: Vec<(String, &str)> = vec![
        (
            format!(
                "POST /mcp HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ),
            "400 ",
        ),
        (
            format!(
                "POST /mcp HTTP/1.1\r\ncontent-length: {}\r\ncontent-length: 2\r\n\r\n{body}",
                body.len()
            ),
            "400 ",
        ),
        // Duplicated, even when equal.
        (
            format!("POST /mcp HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{body}"),
            "400 ",
        ),
        (
            format!("POST /mcp HTTP/1.1\r\ncontent-length: 2, 2\r\n\r\n{body}"),
            "400 ",
        ),
        (
            format!("POST /mcp HTTP/1.1\r\ncontent-length: +2\r\n\r\n{body}"),
            "400 ",
        ),
        // A length and a transfer coding together: which one frames the body is ambiguous.
        (
            format!(
                "POST /mcp HTTP/1.1\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n{body}"
            ),
            "400 ",
        ),
        // Codings the server does not implement.
        (
            format!("POST /mcp HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n{body}"),
            "501 ",
        ),
        (
            format!("POST /mcp HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n{body}"),
            "501 ",
        ),
        (
            format!("POST /mcp HTTP/1.1\r\ntransfer-encoding: identity\r\n\r\n{body}"),
            "501 ",
        ),
    ];
    for (raw, want) in cases {
        let (out, closed) = attack(&server, raw.as_bytes());
        let first = raw.lines().take(4).collect::<Vec<_>>().join(" | ");
        assert!(closed, "{first}: the connection stayed open after {out:?}");
        assert_eq!(
            out.matches("HTTP/1.1 ").count(),
            1,
            "{first}: one answer, no second request: {out}"
        );
        assert!(
            out.starts_with(&format!("HTTP/1.1 {want}")),
            "{first}: want {want}, got {out}"
        );
        assert!(
            !out.contains("healthy"),
            "{first}: smuggled request served: {out}"
        );
        let detail = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(
            detail.contains("Content-Length") || detail.contains("Transfer-Encoding"),
            "{first}: the error names the header: {detail}"
        );
    }
    // One well-formed length still works.
    let (out, closed) = attack(
        &server,
        b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    assert!(closed && out.starts_with("HTTP/1.1 200 "), "{out}");
}

/// A request head of exactly `len` bytes (`GET /health`, padded with one header).
fn head_of(len: usize) -> Vec<u8> {
    let start = b"GET /health HTTP/1.1\r\nconnection: close\r\nx: ".to_vec();
    let end = b"\r\n\r\n";
    let mut h = start.clone();
    h.extend(vec![b'a'; len - start.len() - end.len()]);
    h.extend_from_slice(end);
    assert_eq!(h.len(), len);
    h
}

#[test]
fn the_head_limit_is_exactly_16_kib_whatever_the_writes() {
    let server = serve("builtin:arithmetic", |_| {});
    let (out, _) = attack(&server, &head_of(16 * 1024));
    assert!(out.starts_with("HTTP/1.1 200 "), "16 KiB fits: {out}");
    let (out, closed) = attack(&server, &head_of(16 * 1024 + 1));
    assert!(
        closed && out.starts_with("HTTP/1.1 431 "),
        "16 KiB + 1: {out}"
    );
    // In one write, 24 KiB arrives in a single read: still refused.
    let (out, closed) = attack(&server, &head_of(24 * 1024));
    assert!(closed && out.starts_with("HTTP/1.1 431 "), "24 KiB: {out}");
    // Byte by byte, the same limit.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    for piece in head_of(16 * 1024 + 1).chunks(1000) {
        if s.write_all(piece).is_err() {
            break;
        }
    }
    let (out, closed) = until_closed(s, Duration::from_secs(5));
    assert!(
        closed && out.starts_with("HTTP/1.1 431 "),
        "in pieces: {out}"
    );
}

#[test]
fn a_head_trickled_a_byte_at_a_time_is_cut_off_at_the_head_timeout() {
    let server = serve("builtin:arithmetic", |o| {
        o.head_timeout = Duration::from_millis(1000);
    });
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let reader = s.try_clone().unwrap();
    let t0 = Instant::now();
    // The trickle: one byte every 100 ms, far more often than any idle timeout, never ending.
    let trickle = std::thread::spawn(move || {
        let head = b"GET /health HTTP/1.1\r\nx: ";
        for i in 0.. {
            let b = head.get(i).copied().unwrap_or(b'a');
            if s.write_all(&[b]).is_err() || t0.elapsed() > Duration::from_secs(8) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    reader
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (out, closed) = until_closed(reader, Duration::from_secs(5));
    let took = t0.elapsed();
    assert!(closed, "still open after {took:?}: {out:?}");
    assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(4000),
        "closed after {took:?}, want about the 1 s head timeout"
    );
    trickle.join().unwrap();
    // The option is a typed, validated setting.
    let o = ServeOptions::from_json(&json!({"head_timeout_s": 2.5})).unwrap();
    assert_eq!(o.head_timeout, Duration::from_millis(2500));
    for bad in [json!({"head_timeout_s": 0}), json!({"head_timeout_s": "x"})] {
        let e = ServeOptions::from_json(&bad).unwrap_err();
        assert!(e.to_string().contains("head_timeout_s"), "{e}");
    }
}

/// SplitMix64 and its inverse (each step is a bijection), for the session id attack below.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unsplitmix64(y: u64) -> u64 {
    let unshift = |y: u64, s: u32| (0..64 / s + 1).fold(y, |x, _| y ^ (x >> s));
    let inverse = |m: u64| {
        (0..6).fold(m, |i, _| {
            i.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(i)))
        })
    };
    let mut z = unshift(y, 31);
    z = unshift(z.wrapping_mul(inverse(0x94D0_49BB_1331_11EB)), 27);
    z = unshift(z.wrapping_mul(inverse(0xBF58_476D_1CE4_E5B9)), 30);
    z.wrapping_sub(0x9E37_79B9_7F4A_7C15)
}

#[test]
fn a_client_cannot_compute_another_clients_session_id_from_its_own() {
    assert_eq!(unsplitmix64(splitmix64(0xDEAD_BEEF)), 0xDEAD_BEEF);
    let server = serve("builtin:guess", |_| {});
    let open = || {
        let (s, r) = post(&server, "/reset", r#"{"session": true}"#);
        assert_eq!(s, 200, "{r}");
        r["session_id"].as_str().unwrap().to_string()
    };
    // The attacker opens one session and tries to recover the generator behind its id (ids
    // used to be SplitMix64 of a seed xor a counter, both halves), then predicts the next ones.
    let mine = open();
    assert!(
        mine.len() == 32 && mine.bytes().all(|b| b.is_ascii_hexdigit()),
        "{mine}"
    );
    let a = u64::from_str_radix(&mine[..16], 16).unwrap();
    let b = u64::from_str_radix(&mine[16..], 16).unwrap();
    let mut predicted = Vec::new();
    for n in 0..64u64 {
        let seed = unsplitmix64(a) ^ n;
        if splitmix64(a ^ seed.rotate_left(17) ^ n) == b {
            for m in n + 1..n + 64 {
                let a = splitmix64(seed ^ m);
                let b = splitmix64(a ^ seed.rotate_left(17) ^ m);
                predicted.push(format!("{a:016x}{b:016x}"));
            }
        }
    }
    // The victim's session, opened next.
    let victim = open();
    assert!(
        !predicted.contains(&victim),
        "the victim's session id {victim} was computed from {mine}"
    );
    assert_ne!(victim, mine);
}
