//! OpenAI-compatible request and response bodies: chat completions, completions and the
//! Responses API, as the recording server serves them and every client reads them.

use serde_json::{json, Map, Value};

use crate::contract::{fresh_id, preview, Message, Role};
use crate::error::{Error, Result};

/// Which OpenAI route a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/responses`.
    Responses,
    /// `GET /v1/models`.
    Models,
}

impl Route {
    /// The path under `/v1/`.
    pub fn path(self) -> &'static str {
        match self {
            Route::Chat => "chat/completions",
            Route::Completions => "completions",
            Route::Responses => "responses",
            Route::Models => "models",
        }
    }
}

/// `s` cut to `n` characters, with an ellipsis when something was cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

/// An OpenAI chat-completions request body.
pub(crate) fn chat_request(
    model: &str,
    messages: &[Message],
    params: &Map<String, Value>,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    body.insert(
        "messages".into(),
        messages.iter().map(Message::to_openai).collect(),
    );
    for (k, v) in params {
        body.insert(k.clone(), v.clone());
    }
    body
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A `chat.completion` response body for a reply produced locally.
pub(crate) fn chat_response(model: &str, reply: &Message) -> Map<String, Value> {
    let finish = if reply.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
        "tool_calls"
    } else {
        "stop"
    };
    object(json!({
        "id": format!("chatcmpl-{:012x}", fresh_id() & 0xFFFF_FFFF_FFFF),
        "object": "chat.completion",
        "created": crate::contract::now_unix() as i64,
        "model": model,
        "choices": [{"index": 0, "message": reply.to_openai(), "finish_reason": finish, "logprobs": null}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }))
}

#[cfg(feature = "servers")]
fn new_id(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}-{:016x}", crate::rng::splitmix64(nanos))
}

/// The response body a route gives for a locally produced reply.
#[cfg(feature = "servers")]
pub(crate) fn local_response(route: Route, model: &str, reply: &Message) -> Map<String, Value> {
    let created = crate::contract::now_unix() as i64;
    let text = reply.text().unwrap_or_default();
    object(match route {
        Route::Chat => return chat_response(model, reply),
        Route::Completions => json!({
            "id": new_id("cmpl"), "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": null}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }),
        Route::Responses => json!({
            "id": new_id("resp"), "object": "response", "created_at": created, "model": model,
            "status": "completed",
            "output": super::responses::message_to_items(reply),
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        }),
        Route::Models => json!({}),
    })
}

/// The assistant message of a chat-completions response.
pub(crate) fn reply_from_response(resp: &Map<String, Value>) -> Result<Message> {
    let msg = resp
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("message"))
        .ok_or_else(|| {
            Error::Protocol(format!(
                "chat completion has no choices[0].message: {}",
                preview(&Value::Object(resp.clone()))
            ))
        })?;
    let mut m = Message::from_openai(msg)?;
    if m.role != Role::Assistant {
        return Err(Error::Protocol(format!(
            "chat completion reply has role {:?}, expected assistant",
            m.role
        )));
    }
    // Reasoning fields and other extras stay; an absent content is an empty reply.
    if m.content.is_null() && m.tool_calls.is_none() {
        m.content = Value::String(String::new());
    }
    Ok(m)
}

/// An OpenAI-style error body.
#[cfg(feature = "servers")]
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

/// Whether a request asks for a stream.
#[cfg(feature = "servers")]
pub(crate) fn wants_stream(body: &Map<String, Value>) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

/// The conversation a request asks about, whatever the route.
#[cfg(feature = "servers")]
pub(crate) fn request_messages(
    route: Route,
    body: &Map<String, Value>,
) -> std::result::Result<Vec<Message>, String> {
    let text = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        }
    };
    match route {
        Route::Chat => {
            let msgs = body
                .get("messages")
                .and_then(Value::as_array)
                .ok_or("`messages` must be an array of chat messages")?;
            msgs.iter()
                .map(|m| Message::from_openai(m).map_err(|e| e.to_string()))
                .collect()
        }
        Route::Completions => {
            let prompt = body.get("prompt").ok_or("`prompt` is required")?;
            let p = match prompt {
                Value::Array(a) if a.len() == 1 => text(&a[0]),
                other => text(other),
            }
            .ok_or("`prompt` must be a string")?;
            Ok(vec![Message::user(p)])
        }
        Route::Responses => match body.get("input") {
            Some(input @ (Value::String(_) | Value::Array(_))) => {
                Ok(super::responses::items_to_messages(
                    body.get("instructions").and_then(Value::as_str),
                    input,
                ))
            }
            _ => Err("`input` must be a string or a list of items".into()),
        },
        Route::Models => Ok(Vec::new()),
    }
}

/// What a training run needs from the upstream: token ids and logprobs, asked for in the
/// spellings vLLM and SGLang understand (OpenAI ignores `return_token_ids`).
pub(crate) fn add_capture(route: Route, body: &mut Map<String, Value>) {
    body.entry("return_token_ids").or_insert(json!(true));
    match route {
        Route::Chat => {
            body.entry("logprobs").or_insert(json!(true));
        }
        Route::Completions => {
            body.entry("logprobs").or_insert(json!(1));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_without_choices_are_protocol_errors() {
        let e = reply_from_response(json!({"error": "x"}).as_object().unwrap()).unwrap_err();
        assert!(e.to_string().contains("choices"), "{e}");
    }
}
