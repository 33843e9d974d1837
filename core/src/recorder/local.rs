//! Calls answered by a local model: the recording server makes the OpenAI-shaped response.

use serde_json::{Map, Value};
use std::time::Instant;

use super::exchange::{failed_call, respond_error, Exchange, SseWriter, JSON};
use crate::contract::ModelCall;
use crate::error::Error;
use crate::models::ChatModel;
use crate::openai::sse::stream_events;
use crate::openai::wire::{local_response, request_messages, wants_stream};
use crate::openai::Route;

pub(super) fn serve_model(
    ex: &mut Exchange<'_>,
    route: Route,
    body: Map<String, Value>,
    model: &dyn ChatModel,
    t0: Instant,
) -> ModelCall {
    let messages = match request_messages(route, &body) {
        Ok(m) => m,
        Err(msg) => {
            respond_error(ex, 400, "invalid_request_error", &msg);
            return failed_call(body, &msg, t0);
        }
    };
    let name = body
        .get("model")
        .and_then(Value::as_str)
        .map_or_else(|| model.name(), str::to_string);
    // Recorded, so that a model which knows its own token ids (a host's per-episode chat
    // callback) keeps them; the request and response are this server's.
    let (outcome, recorded) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (r, call) = model.complete_recorded(&messages);
        (r, Some(call))
    }))
    .unwrap_or_else(|_| (Err(Error::Policy("the model panicked".into())), None));
    let reply = match outcome {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("{}: {e}", e.kind());
            respond_error(ex, 500, "server_error", &msg);
            return failed_call(body, &msg, t0);
        }
    };
    let response = local_response(route, &name, &reply);
    let mut call = ModelCall {
        request: body,
        response: Some(response.clone()),
        error: None,
        latency_s: None,
        started_at: Some(crate::contract::unix_time_at(t0)),
        prompt_token_ids: None,
        completion_token_ids: None,
        completion_logprobs: None,
    };
    if let Some(r) = recorded {
        call.prompt_token_ids = r.prompt_token_ids;
        call.completion_token_ids = r.completion_token_ids;
        call.completion_logprobs = r.completion_logprobs;
    }
    let sent = if wants_stream(&call.request) {
        let events = stream_events(route, &response, &reply);
        let mut w = SseWriter::start(ex, 200);
        events
            .iter()
            .try_for_each(|e| w.event(e))
            .and_then(|_| w.finish())
    } else {
        ex.send(200, JSON, Value::Object(response).to_string().as_bytes())
    };
    if let Err(e) = sent {
        call.error = Some(format!(
            "the client went away before the reply was sent: {e}"
        ));
    }
    call.latency_s = Some(t0.elapsed().as_secs_f64());
    call
}
