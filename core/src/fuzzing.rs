//! Thin entry points into crate-internal parsers for the fuzz harness (tests/fuzz.rs,
//! docs/fuzzing.md). Not a stable API: each function feeds untrusted bytes to one parser the
//! way the library itself would, so the harness can look for panics, hangs and broken
//! round trips without the parsers' internals being made public.

#[cfg(any(feature = "servers", feature = "python"))]
use std::time::Duration;

/// What [`http_requests`] read from one connection, request by request.
#[cfg(feature = "servers")]
#[derive(Debug, Clone, PartialEq)]
pub enum HttpOutcome {
    /// A request whose head and body were accepted.
    Request {
        /// The method.
        method: String,
        /// The path without its query.
        path: String,
        /// The headers in the order given.
        headers: Vec<(String, String)>,
        /// How many body bytes were read.
        body_len: usize,
    },
    /// The server would answer with this status and close.
    Rejected(u16, String),
    /// The client closed (or went idle).
    Gone,
}

/// The HTTP server's largest accepted request head, for the harness's size property.
#[cfg(feature = "servers")]
pub const HTTP_MAX_HEAD: usize = crate::http_server::MAX_HEAD;

/// Read pipelined requests from `bytes` (sent on a loopback connection, then half-closed) as
/// `nenyax serve` and the recording server do: head, then body (chunked allowed, 1 MiB cap),
/// until the connection is refused or ends.
#[cfg(feature = "servers")]
pub fn http_requests(bytes: &[u8]) -> std::io::Result<Vec<HttpOutcome>> {
    use crate::http_server::{Conn, Refused};
    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    // A writer thread, so an input larger than the socket buffers cannot block this one.
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = client.write_all(&data);
        let _ = client.shutdown(Shutdown::Write);
        // Keep the client end open until the server is done, so its answers do not reset.
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut client, &mut sink);
    });
    let mut conn = Conn::new(server, Duration::from_secs(5));
    let mut out = Vec::new();
    loop {
        let outcome = match conn.read_head() {
            Ok(mut req) => match conn.read_body(&mut req, 1 << 20, true) {
                Ok(()) => HttpOutcome::Request {
                    method: req.method,
                    path: req.path,
                    headers: req.headers,
                    body_len: req.body.len(),
                },
                Err(Refused::Gone) => HttpOutcome::Gone,
                Err(Refused::Reject(s, m)) => HttpOutcome::Rejected(s, m),
            },
            Err(Refused::Gone) => HttpOutcome::Gone,
            Err(Refused::Reject(s, m)) => HttpOutcome::Rejected(s, m),
        };
        let go_on = matches!(outcome, HttpOutcome::Request { .. });
        out.push(outcome);
        if !go_on {
            break;
        }
    }
    let (stream, _) = conn.into_parts();
    let _ = stream.shutdown(Shutdown::Both);
    let _ = writer.join();
    Ok(out)
}

/// The line cap the fuzzed reader runs with: small, so that inputs reach the refusal path
/// (the bridge's own cap is `limits::BRIDGE_LINE`, 32 MiB by default).
#[cfg(feature = "python")]
pub const BRIDGE_LINE_CAP: usize = 4096;

/// What one bridge reply line turned into.
#[cfg(feature = "python")]
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeLine {
    /// The line as the reader returned it (without its newline).
    pub text: String,
    /// `Ok` with a short description of what the reply parsed into, or the error the bridge
    /// would report.
    pub parsed: std::result::Result<String, String>,
}

/// Feed `bytes` to the bridge's line reader as a worker's stdout (through a pipe, then EOF),
/// and read each line as the bridge reads a reply: JSON, then the contract types a reply's
/// `result` may be (observation, task, task list, reward number, remote error). Returns the
/// lines read before EOF or `timeout`, and whether the reader then refused a line longer than
/// [`BRIDGE_LINE_CAP`].
#[cfg(feature = "python")]
pub fn bridge_lines(bytes: &[u8], timeout: Duration) -> std::io::Result<(Vec<BridgeLine>, bool)> {
    use crate::bridge::json;
    use crate::contract::{Observation, TaskRef};
    use serde_json::Value;
    use std::io::Write;
    use std::os::fd::{FromRawFd, OwnedFd};

    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors this function then owns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::File::from(write_end);
        let _ = f.write_all(&data);
    });
    let mut reader = crate::bridge::lines::LineReader::new(
        std::process::ChildStdout::from(read_end),
        Duration::ZERO,
        BRIDGE_LINE_CAP,
    )?;
    let mut out = Vec::new();
    let result = loop {
        match reader.read_line(timeout) {
            Ok(Some(text)) => {
                let parsed = match serde_json::from_str::<Value>(&text) {
                    Err(e) => Err(format!("garbage: {e}")),
                    Ok(v) => {
                        let result = v.get("result").cloned().unwrap_or(Value::Null);
                        let mut seen = Vec::new();
                        if json::parse::<Observation>("step", result.clone()).is_ok() {
                            seen.push("observation");
                        }
                        if json::parse::<TaskRef>("reset", result.clone()).is_ok() {
                            seen.push("task");
                        }
                        if json::parse::<Vec<TaskRef>>("tasks", result.clone()).is_ok() {
                            seen.push("tasks");
                        }
                        let reward = json::number(v.get("reward").unwrap_or(&Value::Null));
                        if reward.is_finite() {
                            seen.push("reward");
                        }
                        if let Some(e) = v.get("error") {
                            let _ = crate::bridge::remote_error(e).to_string();
                            seen.push("error");
                        }
                        Ok(seen.join(","))
                    }
                };
                out.push(BridgeLine { text, parsed });
            }
            Ok(None) => break Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => break Ok(true),
            Err(e) => break Err(e),
        }
    };
    drop(reader);
    let _ = writer.join();
    result.map(|over_cap| (out, over_cap))
}

/// Load one Harbor task directory (task.toml, environment/Dockerfile, instruction.md) as the
/// `harbor:` driver does, without running anything in a sandbox.
#[cfg(feature = "harbor")]
pub fn harbor_task(dir: &std::path::Path) -> crate::Result<crate::drivers::harbor::HarborTask> {
    crate::drivers::harbor::task::load(dir)
}

/// Whether a streamed reply's tail ends the stream, as the recording server decides when it
/// relays an upstream stream.
#[cfg(feature = "servers")]
pub fn sse_finished(route: crate::openai::Route, tail: &[u8]) -> bool {
    crate::openai::sse::stream_finished(route, tail)
}

/// The SSE data lines the recording server would stream for a local `reply`, so the harness
/// can check that [`crate::openai::assemble_stream`] reads them back.
#[cfg(feature = "servers")]
pub fn sse_events(
    route: crate::openai::Route,
    response: &serde_json::Map<String, serde_json::Value>,
    reply: &crate::contract::Message,
) -> Vec<String> {
    crate::openai::sse::stream_events(route, response, reply)
}

/// Parse one WebSocket text frame's payload as `nenyax serve` does (the OpenEnv client frame);
/// `Err` is the error frame it would answer with.
#[cfg(any(feature = "openenv", feature = "servers"))]
pub fn ws_client_frame(text: &str) -> std::result::Result<String, serde_json::Value> {
    crate::openenv_wire::ClientFrame::parse(text).map(|f| f.to_json().to_string())
}

#[cfg(all(test, feature = "harbor"))]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_size_near_usize_max_is_refused_as_too_large() {
        // Found by the fuzzer (tests/fuzz/regressions/http/chunk-size-overflow): adding the
        // size to the body read so far overflowed and panicked the connection's thread.
        let raw = b"POST /step HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                    1\r\na\r\nffffffffffffffff\r\nb\r\n0\r\n\r\n";
        let out = http_requests(raw).unwrap();
        assert!(
            matches!(out.as_slice(), [HttpOutcome::Rejected(413, m)] if m.contains("limit")),
            "{out:?}"
        );
    }

    #[test]
    fn harbor_timeouts_out_of_range_are_task_errors_naming_the_field() {
        // Found by the fuzzer (tests/fuzz/regressions/harbor/timeout-inf): these panicked in
        // Duration::from_secs_f64.
        let dir = tempfile::tempdir().unwrap();
        let task = dir.path().join("t");
        std::fs::create_dir_all(task.join("steps/one")).unwrap();
        std::fs::write(task.join("instruction.md"), "hi\n").unwrap();
        std::fs::write(task.join("steps/one/instruction.md"), "hi\n").unwrap();
        for (toml, field) in [
            ("[agent]\ntimeout_sec = inf\n", "agent.timeout_sec"),
            ("[verifier]\ntimeout_sec = 1e20\n", "verifier.timeout_sec"),
            ("[agent]\ntimeout_sec = -5\n", "agent.timeout_sec"),
            ("[agent]\ntimeout_sec = nan\n", "agent.timeout_sec"),
            (
                "[[steps]]\nname = \"one\"\n[steps.healthcheck]\ncommand = \"true\"\ninterval_sec = inf\n",
                "steps.healthcheck.interval_sec",
            ),
        ] {
            std::fs::write(task.join("task.toml"), toml).unwrap();
            let e = harbor_task(&task).unwrap_err().to_string();
            assert!(e.contains(&format!("`{field}`")) && e.contains("seconds"), "{toml}: {e}");
        }
        std::fs::write(task.join("task.toml"), "[agent]\ntimeout_sec = 90\n").unwrap();
        let t = harbor_task(&task).unwrap();
        assert_eq!(t.steps[0].agent_timeout, Duration::from_secs(90));
    }

    #[test]
    fn terminal_bench_task_yaml_timeouts_and_indents_do_not_panic() {
        // Found by the fuzzer (tests/fuzz/regressions/harbor/terminal-bench-*): a timeout of
        // inf or -1 panicked in Duration::from_secs_f64, and a block line indented by fewer
        // bytes than the first was cut inside its first character.
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("task.yaml");
        for (text, field) in [
            (
                "instruction: x\nmax_agent_timeout_sec: inf\n",
                "max_agent_timeout_sec",
            ),
            (
                "instruction: x\nmax_test_timeout_sec: -1\n",
                "max_test_timeout_sec",
            ),
        ] {
            std::fs::write(&yaml, text).unwrap();
            let e = harbor_task(dir.path()).unwrap_err().to_string();
            assert!(
                e.contains(&format!("`{field}` in task.yaml")),
                "{text}: {e}"
            );
        }
        std::fs::write(&yaml, "instruction: |\n  first\n \u{e9} second\n").unwrap();
        let t = harbor_task(dir.path()).unwrap();
        assert_eq!(t.steps[0].instruction, "first\n\u{e9} second\n");
        assert_eq!(t.steps[0].agent_timeout, Duration::from_secs(360));
    }
}
