//! The fuzz targets: each feeds one input to a parser the way the library meets untrusted bytes,
//! checks the properties that hold for it, and sums up what happened in a short signature.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use nenyax::fuzzing::{self, HttpOutcome};
use nenyax::openai::Route;
use nenyax::uri::{ParamKind, ParamSpec, Params, Uri};
use nenyax::{Manifest, Message, ModelCall, TaskRef, Trajectory};
use serde_json::Value;

use crate::engine::{normalize, Target};

pub fn all() -> Vec<Target> {
    let t = |name, run, max_len, secs: u64, tokens| Target {
        name,
        run,
        max_len,
        timeout: Duration::from_secs(secs),
        tokens,
    };
    vec![
        t(
            "uri",
            uri,
            4096,
            5,
            &["builtin:", "define:", "%20", "%7B", "+", "?a=", "&b="],
        ),
        t("contract", contract, 16384, 5, CONTRACT_TOKENS),
        t("define", define, 16384, 10, DEFINE_TOKENS),
        t("harbor", harbor, 8192, 10, HARBOR_TOKENS),
        t(
            "bridge",
            bridge,
            256 * 1024,
            10,
            &["{\"id\":1,\"ok\":true,\"result\":", "\"inf\"", "\"nan\""],
        ),
        t("http", http, 64 * 1024, 15, HTTP_TOKENS),
        t(
            "ws",
            ws,
            64 * 1024,
            15,
            &[
                "\u{81}\u{80}",
                "\u{88}",
                "\u{89}",
                "{\"type\":\"step\"",
                "{\"type\":\"reset\"}",
            ],
        ),
        t(
            "sse",
            sse,
            64 * 1024,
            5,
            &[
                "data: ",
                "data: [DONE]\n\n",
                "\"index\":",
                "\"delta\":",
                "\"choices\":[{",
            ],
        ),
    ]
}

const CONTRACT_TOKENS: &[&str] = &[
    "\"env_id\":",
    "\"mode\":\"step\"",
    "\"messages\":[",
    "\"role\":\"assistant\"",
    "\"content\":",
    "\"tool_calls\":[",
    "\"judgment\":{\"score\":",
    "\"model_calls\":[",
    "\"steps\":[",
    "1e308",
];
const DEFINE_TOKENS: &[&str] = &[
    "[[tasks]]\n",
    "[judge]\n",
    "kind = \"",
    "field = \"",
    "tasks_file = \"",
    "prompt = \"",
    "answer = ",
    "\"\"\"",
    "'''",
    "inf",
    "nan",
    "1979-05-27T07:32:00Z",
];
const HARBOR_TOKENS: &[&str] = &[
    "\n#--- Dockerfile\n",
    "timeout_sec = ",
    "[agent]\n",
    "[verifier]\n",
    "[[steps]]\n",
    "WORKDIR ",
    "COPY ",
    "ADD ",
    "ENV ",
    "RUN ",
    "\\\n",
    "/app",
    "../",
    "inf",
    "1e20",
];
const HTTP_TOKENS: &[&str] = &[
    "GET / HTTP/1.1\r\n",
    "POST /reset HTTP/1.1\r\n",
    "Content-Length: ",
    "Transfer-Encoding: chunked\r\n",
    "Connection: close\r\n",
    "Expect: 100-continue\r\n",
    "ffffffffffffffff",
    "\r\n1\r\na\r\n",
    "\r\n0\r\n\r\n",
    "HTTP/1.0",
    ": ",
];

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn err_sig(e: &impl std::fmt::Display, input: &str) -> String {
    format!("err {}", normalize(&e.to_string(), input))
}

// --- URIs -------------------------------------------------------------------------------------

/// Percent-encode all but unreserved characters, so that re-parsing reads back exactly `s`.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A URI as text that parses back to `u`.
fn render(u: &Uri) -> String {
    let mut s = format!("{}:{}", u.scheme, enc(&u.target));
    for (i, (k, v)) in u.params.iter().enumerate() {
        // Text that would read as JSON (`"4"` gave the text `4`) goes back quoted.
        let v = match v {
            Value::String(s) if serde_json::from_str::<Value>(s).is_err() => s.clone(),
            other => other.to_string(),
        };
        s.push(if i == 0 { '?' } else { '&' });
        s.push_str(&format!("{}={}", enc(k), enc(&v)));
    }
    s
}

/// A URI error by its variant and template parts only: URIs, names and values are the input's.
fn uri_err(e: &nenyax::Error, raw: &str) -> String {
    match e {
        // Every reason's template is told apart by its first two words.
        nenyax::Error::InvalidUri { reason, .. } => {
            let head: Vec<&str> = reason.split_whitespace().take(2).collect();
            format!("invalid {}", normalize(&head.join(" "), raw))
        }
        nenyax::Error::UnknownParameter { suggestion, .. } => {
            format!("unknown parameter, suggested {}", suggestion.is_some())
        }
        nenyax::Error::InvalidParameter { expected, .. } => format!("wants {expected}"),
        other => other.kind().to_string(),
    }
}

fn uri(data: &[u8]) -> Result<String, String> {
    let raw = text(data);
    let u = match Uri::parse(&raw) {
        Ok(u) => u,
        Err(e) => return Ok(uri_err(&e, &raw)),
    };
    let again = render(&u);
    let back = Uri::parse(&again)
        .map_err(|e| format!("a re-rendered URI does not parse: `{again}`: {e}"))?;
    if (&back.scheme, &back.target, &back.params) != (&u.scheme, &u.target, &u.params) {
        return Err(format!(
            "a re-rendered URI parses differently: `{raw}` as `{again}`"
        ));
    }
    let specs = [
        ParamSpec {
            name: "size",
            kind: ParamKind::Int { min: 1, max: 1000 },
            default: "10",
            help: "",
        },
        ParamSpec {
            name: "seed",
            kind: ParamKind::Int {
                min: i64::MIN,
                max: i64::MAX,
            },
            default: "0",
            help: "",
        },
        ParamSpec {
            name: "timeout_s",
            kind: ParamKind::Float,
            default: "60",
            help: "",
        },
        ParamSpec {
            name: "flag",
            kind: ParamKind::Bool,
            default: "false",
            help: "",
        },
        ParamSpec {
            name: "name",
            kind: ParamKind::Str,
            default: "x",
            help: "",
        },
        ParamSpec {
            name: "reset",
            kind: ParamKind::Json,
            default: "{}",
            help: "",
        },
    ];
    Ok(match Params::check("fuzz", &u, &specs) {
        Ok(p) => format!(
            "ok {} params, size {}",
            u.params.len().min(4),
            p.int("size", 10) > 0
        ),
        Err(e) => uri_err(&e, &raw),
    })
}

// --- Contract JSON ----------------------------------------------------------------------------

/// `T` parsed from `s` must serialise to JSON that parses back to the same value.
fn round_trip<T>(what: &str, s: &str, seen: &mut Vec<String>) -> Result<(), String>
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    let Ok(v) = serde_json::from_str::<T>(s) else {
        return Ok(());
    };
    let json = serde_json::to_string(&v)
        .map_err(|e| format!("a parsed {what} does not serialise: {e}"))?;
    let back: T = serde_json::from_str(&json)
        .map_err(|e| format!("a {what} does not parse back from its JSON: {e}: {json}"))?;
    if back != v {
        return Err(format!("a {what} changed in a JSON round trip: {json}"));
    }
    seen.push(what.to_string());
    Ok(())
}

fn contract(data: &[u8]) -> Result<String, String> {
    let s = text(data);
    let mut seen = Vec::new();
    match Trajectory::from_json(&s) {
        Ok(t) => {
            let back = Trajectory::from_json(&t.to_json())
                .map_err(|e| format!("a Trajectory's to_json does not parse back: {e}"))?;
            if back != t {
                return Err(format!(
                    "a Trajectory changed in a JSON round trip: {}",
                    t.to_json()
                ));
            }
            let _ = (t.ok(), t.score(), t.final_text());
            seen.push("trajectory".into());
        }
        Err(e) => seen.push(err_sig(&e, &s)),
    }
    round_trip::<Manifest>("Manifest", &s, &mut seen)?;
    round_trip::<TaskRef>("TaskRef", &s, &mut seen)?;
    round_trip::<Message>("Message", &s, &mut seen)?;
    round_trip::<Vec<Message>>("messages", &s, &mut seen)?;
    round_trip::<ModelCall>("ModelCall", &s, &mut seen)?;
    if let Ok(mut call) = serde_json::from_str::<ModelCall>(&s) {
        call.extract_tokens();
    }
    if let Ok(v) = serde_json::from_str::<Value>(&s) {
        if let Ok(m) = Message::from_openai(&v) {
            let wire = m.to_openai();
            let _ = Message::from_openai(&wire)
                .map_err(|e| format!("a message's to_openai does not read back: {e}: {wire}"))?;
            seen.push("openai".into());
        }
    }
    Ok(seen.join(","))
}

// --- define: TOML -----------------------------------------------------------------------------

/// This child's scratch folder (the parent removes it when the child ends).
fn scratch(name: &str) -> PathBuf {
    let dir = crate::engine::scratch_root(std::process::id()).join(name);
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn define(data: &[u8]) -> Result<String, String> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = scratch("define");
        let rows =
            "{\"prompt\": \"1+1\", \"answer\": \"2\"}\n{\"prompt\": \"2+2\", \"answer\": 4}\n";
        let _ = std::fs::write(d.join("tasks.jsonl"), rows);
        d
    });
    let path = dir.join("fuzz.toml");
    std::fs::write(&path, data).map_err(|e| format!("cannot write the input: {e}"))?;
    let input = text(data);
    let toml = match nenyax::define::load_file(&path, "define:fuzz") {
        Ok(env) => played(env.as_ref()),
        Err(e) => err_sig(&e, &input),
    };
    // The same fields as a JSON spec, as the C ABI takes them.
    let json = match serde_json::from_str::<Value>(&input) {
        Err(_) => String::new(),
        Ok(_) => match nenyax::define::from_json_spec(&input, dir) {
            Ok(env) => played(env.as_ref()),
            Err(e) => err_sig(&e, &input),
        },
    };
    Ok(format!("{toml} | {json}"))
}

/// A loaded definition's tasks, and one episode of its reference policy (its judge at work).
fn played(env: &dyn nenyax::Environment) -> String {
    let tasks = env.tasks(Some(3)).map(|t| t.len()).unwrap_or(0);
    let score = env.reference_policy(None).map(|p| {
        let t = env.rollout(&p, &nenyax::RolloutOptions::default());
        t.score()
            .map_or("none".to_string(), |s| format!("{}", s > 0.5))
    });
    format!("ok tasks {tasks} reference {score:?}")
}

// --- Harbor task.toml and Dockerfile ----------------------------------------------------------

fn harbor(data: &[u8]) -> Result<String, String> {
    static DIRS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (harbor_dir, tb_dir) = DIRS.get_or_init(|| {
        let root = scratch("harbor");
        let d = root.join("task-fuzz");
        for (p, body) in [
            ("instruction.md", "Write hello to /app/out.txt.\n"),
            ("environment/app.py", "print('hi')\n"),
            ("tests/test.sh", "#!/bin/bash\ntrue\n"),
            (
                "solution/solve.sh",
                "#!/bin/bash\necho hello > /app/out.txt\n",
            ),
            ("steps/one/instruction.md", "Step one.\n"),
        ] {
            let _ = std::fs::create_dir_all(d.join(p).parent().unwrap_or(&d));
            let _ = std::fs::write(d.join(p), body);
        }
        let tb = root.join("tb-fuzz");
        for (p, body) in [
            ("app.py", "print('hi')\n"),
            ("run-tests.sh", "#!/bin/bash\ntrue\n"),
            ("solution.sh", "#!/bin/bash\ntrue\n"),
        ] {
            let _ = std::fs::create_dir_all(&tb);
            let _ = std::fs::write(tb.join(p), body);
        }
        (d, tb)
    });
    let s = text(data);
    // `#yaml` first: the old Terminal-Bench layout (task.yaml, Dockerfile beside it).
    let (dir, config, context, rest) = match s.strip_prefix("#yaml\n") {
        Some(rest) => (tb_dir, "task.yaml", tb_dir.clone(), rest),
        None => (
            harbor_dir,
            "task.toml",
            harbor_dir.join("environment"),
            s.as_str(),
        ),
    };
    let (config_text, docker) = match rest.split_once("\n#--- Dockerfile\n") {
        Some((t, d)) => (t, Some(d)),
        None => (rest, None),
    };
    std::fs::write(dir.join(config), config_text).map_err(|e| e.to_string())?;
    let dockerfile = context.join("Dockerfile");
    match docker {
        Some(d) => std::fs::write(&dockerfile, d).map_err(|e| e.to_string())?,
        None => {
            let _ = std::fs::remove_file(&dockerfile);
        }
    }
    let task = match fuzzing::harbor_task(dir) {
        Ok(t) => t,
        Err(e) => return Ok(err_sig(&e, &s)),
    };
    // A COPY may only read from the build context, as in Docker.
    let context = context.canonicalize().map_err(|e| e.to_string())?;
    for (src, _) in &task.copies {
        let real = src.canonicalize().unwrap_or_else(|_| src.clone());
        if !real.starts_with(&context) {
            return Err(format!(
                "a COPY source outside the build context was accepted: {}",
                src.display()
            ));
        }
    }
    Ok(format!(
        "ok {config} steps {} copies {}",
        task.steps.len(),
        task.copies.len().min(3)
    ))
}

// --- Bridge reply lines -----------------------------------------------------------------------

fn bridge(data: &[u8]) -> Result<String, String> {
    let (lines, over_cap) = fuzzing::bridge_lines(data, Duration::from_secs(5))
        .map_err(|e| format!("the line reader failed: {e}"))?;
    // Every complete line comes back whole and in order; a last line without a newline is the
    // worker dying mid-reply and is not a reply. A line (complete or not) longer than the cap
    // is refused, and reading stops there.
    let mut parts: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let cap = fuzzing::BRIDGE_LINE_CAP;
    let first_over = parts.iter().position(|p| p.len() > cap);
    let expected = if over_cap { Some(lines.len()) } else { None };
    if first_over != expected {
        return Err(format!(
            "{} lines read back, over-cap refusal {over_cap}, first line over the {cap}-byte cap: {first_over:?}",
            lines.len()
        ));
    }
    if over_cap {
        parts.truncate(lines.len());
    } else {
        parts.pop();
    }
    let want = parts;
    if lines.len() != want.len() {
        return Err(format!(
            "{} lines sent, {} read back",
            want.len(),
            lines.len()
        ));
    }
    for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
        if got.text != String::from_utf8_lossy(want) {
            return Err(format!("line {} read back changed", i + 1));
        }
    }
    let kinds: std::collections::BTreeSet<String> = lines
        .iter()
        .map(|l| match &l.parsed {
            Ok(k) => k.clone(),
            Err(e) => normalize(e, ""),
        })
        .take(4)
        .collect();
    Ok(format!("{} lines: {:?}", lines.len().min(3), kinds))
}

// --- HTTP request heads -----------------------------------------------------------------------

fn http(data: &[u8]) -> Result<String, String> {
    let outcomes =
        fuzzing::http_requests(data).map_err(|e| format!("no loopback connection: {e}"))?;
    if let Some(HttpOutcome::Request { .. }) = outcomes.first() {
        let end = data
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| i + 4);
        if end.map_or(true, |e| e > fuzzing::HTTP_MAX_HEAD) {
            return Err(format!(
                "a request head of {} bytes was accepted; the limit is {}",
                end.map_or(data.len(), |e| e),
                fuzzing::HTTP_MAX_HEAD
            ));
        }
    }
    for o in &outcomes {
        if let HttpOutcome::Request { headers, .. } = o {
            let lengths: Vec<&str> = headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.as_str())
                .collect();
            let chunked = headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"));
            if lengths.len() > 1 {
                return Err("a request with more than one Content-Length was accepted".into());
            }
            if chunked && !lengths.is_empty() {
                return Err(
                    "a request with both Content-Length and Transfer-Encoding was accepted".into(),
                );
            }
        }
    }
    let sig: Vec<String> = outcomes
        .iter()
        .take(3)
        .map(|o| match o {
            HttpOutcome::Request {
                method, body_len, ..
            } => {
                format!(
                    "{} body {}",
                    if ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"]
                        .contains(&method.as_str())
                    {
                        method.as_str()
                    } else {
                        "other"
                    },
                    (*body_len).min(1)
                )
            }
            HttpOutcome::Rejected(s, m) => format!("{s} {}", normalize(m, "")),
            HttpOutcome::Gone => "gone".into(),
        })
        .collect();
    Ok(sig.join("; "))
}

// --- WebSocket frames -------------------------------------------------------------------------

/// One `nenyax serve` on builtin:echo per child, shared by every ws input.
fn server() -> SocketAddr {
    static ADDR: OnceLock<(nenyax::Server, SocketAddr)> = OnceLock::new();
    ADDR.get_or_init(|| {
        let env = nenyax::load("builtin:echo").expect("builtin:echo loads");
        let opts = nenyax::ServeOptions {
            port: 0,
            max_message_bytes: 64 * 1024,
            ..Default::default()
        };
        let s = nenyax::Server::start(env, opts).expect("serve starts on a free port");
        let a = s.addr();
        (s, a)
    })
    .1
}

/// The server's frames after its 101 head: (opcode, payload) pairs.
fn frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= 2 {
        let op = b[0] & 0x0f;
        let (len, at) = match b[1] & 0x7f {
            126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
            127 if b.len() >= 10 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(&b[2..10]);
                (u64::from_be_bytes(n) as usize, 10)
            }
            126 | 127 => break,
            n => (n as usize, 2),
        };
        if b.len() < at + len {
            break;
        }
        out.push((op, b[at..at + len].to_vec()));
        b = &b[at + len..];
    }
    out
}

fn ws(data: &[u8]) -> Result<String, String> {
    // The payload read as one text frame, as the server parses it: errors are frames, and a
    // parsed frame re-encodes to one that parses the same.
    let payload = text(data);
    if let Ok(json) = fuzzing::ws_client_frame(&payload) {
        let again = fuzzing::ws_client_frame(&json)
            .map_err(|e| format!("a re-encoded client frame is refused: {json}: {e}"))?;
        if again != json {
            return Err(format!(
                "a client frame changed when re-encoded: {json} then {again}"
            ));
        }
    }
    // The bytes as frames on a real upgraded connection.
    let mut s = TcpStream::connect(server()).map_err(|e| format!("cannot connect: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut req =
        b"GET /ws HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            .to_vec();
    req.extend_from_slice(data);
    let _ = s.write_all(&req);
    let _ = s.shutdown(Shutdown::Write);
    let mut reply = Vec::new();
    if let Err(e) = s.read_to_end(&mut reply) {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            return Err("the server kept the connection open 10 s after the client closed".into());
        }
    }
    let body = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(&reply[..0], |i| &reply[i + 4..]);
    let sig: Vec<String> = frames(body)
        .iter()
        .take(4)
        .map(|(op, p)| match op {
            1 => serde_json::from_slice::<Value>(p).map_or("text ?".into(), |v| {
                let code = v["data"]["code"].as_str().unwrap_or("");
                format!("{} {code}", v["type"].as_str().unwrap_or("?"))
            }),
            8 if p.len() >= 2 => format!("close {}", u16::from_be_bytes([p[0], p[1]])),
            op => format!("op {op}"),
        })
        .collect();
    Ok(sig.join("; "))
}

// --- OpenAI SSE streams -----------------------------------------------------------------------

fn sse(data: &[u8]) -> Result<String, String> {
    let (route, rest) = match data.split_first() {
        Some((b, rest)) => (
            [Route::Chat, Route::Completions, Route::Responses][*b as usize % 3],
            rest,
        ),
        None => (Route::Chat, data),
    };
    let stream = text(rest);
    let (assembled, done) = nenyax::openai::assemble_stream(route, &stream);
    let finished = fuzzing::sse_finished(route, rest);
    let Some(resp) = assembled else {
        return Ok(format!("{route:?} none done {done} finished {finished}"));
    };
    // What the recording server streams for a reply must assemble back to that reply.
    if route != Route::Responses {
        let choice = resp.get("choices").map_or(&Value::Null, |c| &c[0]);
        let text = match route {
            Route::Chat => choice["message"]["content"].as_str(),
            _ => choice["text"].as_str(),
        }
        .unwrap_or("")
        .to_string();
        let events = fuzzing::sse_events(route, &resp, &Message::assistant(text.clone()));
        let restreamed: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        let (back, done2) = nenyax::openai::assemble_stream(route, &restreamed);
        let back_text = back.as_ref().and_then(|b| {
            let c = &b["choices"][0];
            match route {
                Route::Chat => c["message"]["content"].as_str(),
                _ => c["text"].as_str(),
            }
            .map(str::to_string)
        });
        if !done2 || back_text.as_deref() != Some(text.as_str()) {
            return Err("a streamed reply does not assemble back to its text".into());
        }
    }
    let calls = resp
        .get("choices")
        .and_then(|c| c[0]["message"]["tool_calls"].as_array())
        .map_or(0, Vec::len);
    Ok(format!(
        "{route:?} some done {done} finished {finished} calls {}",
        calls.min(3)
    ))
}
