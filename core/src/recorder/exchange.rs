//! One request's answer on the wire: plain JSON replies, OpenAI error bodies, and SSE streams
//! written straight to the socket; plus the record of a call that failed.

use serde_json::{Map, Value};
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::Instant;

use crate::contract::ModelCall;
use crate::http_server::Conn;
use crate::openai::wire::error_body;

pub(super) const JSON: &str = "application/json";

/// One request's answer being written: whether the connection stays open after it, and
/// whether the client may still be sending a body that was refused.
pub(super) struct Exchange<'a> {
    pub(super) conn: &'a mut Conn,
    pub(super) keep: bool,
    pub(super) drain: bool,
}

impl Exchange<'_> {
    pub(super) fn send(
        &mut self,
        status: u16,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<()> {
        let r = self.conn.respond(status, content_type, body, self.keep);
        if r.is_err() {
            self.keep = false;
        }
        r
    }
}

pub(super) fn failed_call(request: Map<String, Value>, error: &str, t0: Instant) -> ModelCall {
    ModelCall {
        request,
        response: None,
        error: Some(error.to_string()),
        latency_s: Some(t0.elapsed().as_secs_f64()),
        started_at: Some(crate::contract::unix_time_at(t0)),
        prompt_token_ids: None,
        completion_token_ids: None,
        completion_logprobs: None,
    }
}

pub(super) fn respond_json(ex: &mut Exchange<'_>, status: u16, body: &Value) {
    // The client may have gone; nothing to do about it here.
    let _ = ex.send(status, JSON, body.to_string().as_bytes());
}

pub(super) fn respond_error(ex: &mut Exchange<'_>, status: u16, kind: &str, message: &str) {
    respond_json(ex, status, &error_body(kind, message));
}

/// A chunked `text/event-stream` response written straight to the socket, so each event
/// reaches the client as soon as it is written; the connection closes after it.
pub(super) struct SseWriter<'a> {
    out: &'a mut TcpStream,
}

impl<'a> SseWriter<'a> {
    pub(super) fn start(ex: &'a mut Exchange<'_>, status: u16) -> SseWriter<'a> {
        ex.keep = false;
        let out = ex.conn.stream();
        let reason = crate::http_server::reason(status);
        let _ = write!(
            out,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let _ = out.flush();
        SseWriter { out }
    }

    pub(super) fn raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        write!(self.out, "{:x}\r\n", bytes.len())?;
        self.out.write_all(bytes)?;
        self.out.write_all(b"\r\n")?;
        self.out.flush()
    }

    pub(super) fn event(&mut self, data: &str) -> std::io::Result<()> {
        self.raw(format!("data: {data}\n\n").as_bytes())
    }

    pub(super) fn finish(self) -> std::io::Result<()> {
        self.out.write_all(b"0\r\n\r\n")?;
        self.out.flush()
    }

    /// Cut the stream off without its last chunk, so the client sees it broke.
    pub(super) fn abort(self) {
        let _ = self.out.shutdown(Shutdown::Both);
    }
}
