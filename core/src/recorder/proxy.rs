//! Calls forwarded to an upstream server through the one retrying client; streams pass
//! through as they arrive and are recorded whole.

use serde_json::{json, Map, Value};
use std::io::Read;
use std::time::Instant;

use super::exchange::{failed_call, respond_error, Exchange, SseWriter, JSON};
use crate::contract::ModelCall;
use crate::openai::sse::{assemble_stream, stream_finished};
use crate::openai::wire::{add_capture, truncate, wants_stream};
use crate::openai::{redact_url, Route, Upstream};

/// The most of one upstream reply, streamed or not, that is read and recorded.
const MAX_BODY: usize = crate::limits::HTTP_BODY.default as usize;

pub(super) fn proxy(
    ex: &mut Exchange<'_>,
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
    let mut answer = match up.client.post_json(&url, &payload, &[]) {
        Ok(a) => a,
        Err(e) => {
            // Recorded in the rollout's calls and sent to the environment: no login in it.
            let msg = format!(
                "upstream {} could not be reached: {} (after {} attempt{})",
                redact_url(&url),
                e.message,
                e.attempts,
                if e.attempts == 1 { "" } else { "s" }
            );
            respond_error(ex, 502, "upstream_error", &msg);
            call.error = Some(msg);
            call.latency_s = Some(t0.elapsed().as_secs_f64());
            call.started_at = Some(crate::contract::unix_time_at(t0));
            return call;
        }
    };
    let resp = &mut answer.response;
    let status = resp.status().as_u16();
    let is_sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if stream && is_sse && (200..300).contains(&status) {
        // Pass each piece through as it arrives, keep the whole for the record.
        let mut w = SseWriter::start(ex, status);
        let mut reader = resp.body_mut().as_reader();
        let mut whole = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        let mut client_gone = None;
        let mut upstream_err = None;
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if whole.len() + n > MAX_BODY => {
                    // The record keeps the whole stream, so an upstream that never ends it
                    // would grow it without bound.
                    upstream_err = Some(format!(
                        "the stream passed the {} limit for {}",
                        crate::limits::human(MAX_BODY as u64),
                        crate::limits::HTTP_BODY.what
                    ));
                    break;
                }
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
            // Ending the chunked body cleanly would tell the client all is well; cut it instead.
            w.abort();
        } else if let Err(e) = w.finish() {
            client_gone.get_or_insert(e.to_string());
        }
        if let Some(e) = client_gone {
            call.error
                .get_or_insert(format!("the client went away mid-stream: {e}"));
        }
        call.extract_tokens();
        call.latency_s = Some(t0.elapsed().as_secs_f64());
        call.started_at = Some(crate::contract::unix_time_at(t0));
        return call;
    }
    let text = match resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY as u64)
        .read_to_string()
    {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("could not read the upstream response: {e}");
            respond_error(ex, 502, "upstream_error", &msg);
            call.error = Some(msg);
            call.latency_s = Some(t0.elapsed().as_secs_f64());
            call.started_at = Some(crate::contract::unix_time_at(t0));
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
            truncate(&text, 500)
        ));
    } else if parsed.is_none() {
        call.error = Some(format!(
            "upstream returned a body that is not JSON: {}",
            truncate(&text, 300)
        ));
    }
    let content_type = if parsed.is_some() { JSON } else { "text/plain" };
    let _ = ex.send(status, content_type, text.as_bytes());
    call.latency_s = Some(t0.elapsed().as_secs_f64());
    call.started_at = Some(crate::contract::unix_time_at(t0));
    call
}
