//! Server-sent event streams of the OpenAI APIs: assembling a streamed response into the body a
//! plain call would have returned, and streaming a locally made reply.

use serde_json::{json, Map, Value};

use super::wire::Route;
#[cfg(feature = "servers")]
use crate::contract::Message;

/// The SSE data lines that stream a local reply, ending in `[DONE]` where the API has it.
#[cfg(feature = "servers")]
pub(crate) fn stream_events(
    route: Route,
    response: &Map<String, Value>,
    reply: &Message,
) -> Vec<String> {
    let text = reply.text().unwrap_or_default();
    let id = response.get("id").cloned().unwrap_or(Value::Null);
    let model = response.get("model").cloned().unwrap_or(Value::Null);
    let created = response.get("created").cloned().unwrap_or(json!(0));
    match route {
        Route::Chat => {
            let chunk = |delta: Value, finish: Value, usage: Option<&Value>| {
                let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]});
                if let Some(u) = usage {
                    c["usage"] = u.clone();
                }
                c.to_string()
            };
            let mut delta = json!({"role": "assistant", "content": text});
            if let Some(calls) = &reply.tool_calls {
                delta["tool_calls"] = Value::Array(
                    calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let mut v = c.to_openai();
                            v["index"] = json!(i);
                            v
                        })
                        .collect(),
                );
            }
            let finish = response["choices"][0]["finish_reason"].clone();
            vec![
                chunk(delta, Value::Null, None),
                chunk(json!({}), finish, response.get("usage")),
                "[DONE]".into(),
            ]
        }
        Route::Completions => vec![
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": text, "finish_reason": null, "logprobs": null}]})
            .to_string(),
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": null}],
                   "usage": response.get("usage")})
            .to_string(),
            "[DONE]".into(),
        ],
        Route::Responses => {
            // The full event sequence: the official client builds its snapshot from it and
            // refuses a delta for an output item it has not been told about.
            let mut pending = Value::Object(response.clone());
            pending["status"] = json!("in_progress");
            pending["output"] = json!([]);
            // The message item (a local reply with tool calls may also carry other items).
            let item = response["output"]
                .as_array()
                .and_then(|o| o.iter().find(|i| i["type"] == "message"))
                .unwrap_or(&response["output"][0]);
            let item_id = item["id"].clone();
            let mut empty_item = item.clone();
            empty_item["status"] = json!("in_progress");
            empty_item["content"] = json!([]);
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            let mut done_part = part.clone();
            done_part["text"] = json!(text);
            let events = [
                json!({"type": "response.created", "response": pending}),
                json!({"type": "response.in_progress", "response": pending}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": empty_item}),
                json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
                json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []}),
                json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
                json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0, "content_index": 0, "part": done_part}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                json!({"type": "response.completed", "response": response}),
            ];
            events
                .into_iter()
                .enumerate()
                .map(|(i, mut e)| {
                    e["sequence_number"] = json!(i);
                    e.to_string()
                })
                .collect()
        }
        Route::Models => Vec::new(),
    }
}

/// Whether `tail` holds the `[DONE]` event that ends a chat or completions stream. (Responses
/// API streams end with the connection, after their `response.completed` event.)
#[cfg(feature = "servers")]
pub(crate) fn stream_finished(route: Route, tail: &[u8]) -> bool {
    let done = tail.windows(12).any(|w| w == b"data: [DONE]");
    route != Route::Responses && done && (tail.ends_with(b"\n\n") || tail.ends_with(b"\r\n\r\n"))
}

/// Assemble a streamed response into the body a non-streamed call would have returned, and
/// say whether the stream ended properly (`[DONE]`, or `response.completed`).
pub fn assemble_stream(route: Route, sse: &str) -> (Option<Map<String, Value>>, bool) {
    let mut events = Vec::new();
    let mut done = false;
    for line in sse.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            done = true;
            continue;
        }
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(data) {
            events.push(m);
        }
    }
    if events.is_empty() {
        return (None, done);
    }
    match route {
        Route::Responses => {
            let completed = events
                .iter()
                .rev()
                .find(|e| e.get("type").and_then(Value::as_str) == Some("response.completed"));
            match completed
                .and_then(|e| e.get("response"))
                .and_then(Value::as_object)
            {
                Some(r) => (Some(r.clone()), true),
                None => (None, done),
            }
        }
        Route::Chat | Route::Completions => {
            let first = &events[0];
            let mut out = Map::new();
            for k in ["id", "created", "model", "system_fingerprint"] {
                if let Some(v) = first.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            out.insert(
                "object".into(),
                json!(if route == Route::Chat {
                    "chat.completion"
                } else {
                    "text_completion"
                }),
            );
            let mut content = String::new();
            let mut reasoning = String::new();
            let mut finish = Value::Null;
            let mut token_ids: Vec<Value> = Vec::new();
            let mut logprob_content: Vec<Value> = Vec::new();
            let mut token_logprobs: Vec<Value> = Vec::new();
            let mut tool_calls: Vec<Value> = Vec::new();
            let mut role = json!("assistant");
            for e in &events {
                for k in ["prompt_token_ids", "usage"] {
                    if let Some(v) = e.get(k).filter(|v| !v.is_null()) {
                        out.insert(k.into(), v.clone());
                    }
                }
                let Some(c) = e
                    .get("choices")
                    .and_then(Value::as_array)
                    .and_then(|c| c.first())
                else {
                    continue;
                };
                if let Some(v) = c.get("prompt_token_ids").filter(|v| !v.is_null()) {
                    out.insert("prompt_token_ids".into(), v.clone());
                }
                if let Some(ids) = c.get("token_ids").and_then(Value::as_array) {
                    token_ids.extend(ids.iter().cloned());
                }
                if let Some(f) = c.get("finish_reason").filter(|v| !v.is_null()) {
                    finish = f.clone();
                }
                if let Some(lp) = c.get("logprobs") {
                    if let Some(items) = lp.get("content").and_then(Value::as_array) {
                        logprob_content.extend(items.iter().cloned());
                    }
                    if let Some(items) = lp.get("token_logprobs").and_then(Value::as_array) {
                        token_logprobs.extend(items.iter().cloned());
                    }
                }
                if route == Route::Completions {
                    if let Some(t) = c.get("text").and_then(Value::as_str) {
                        content.push_str(t);
                    }
                    continue;
                }
                let Some(delta) = c.get("delta") else {
                    continue;
                };
                if let Some(r) = delta.get("role").filter(|v| !v.is_null()) {
                    role = r.clone();
                }
                if let Some(t) = delta.get("content").and_then(Value::as_str) {
                    content.push_str(t);
                }
                for k in ["reasoning_content", "reasoning"] {
                    if let Some(t) = delta.get(k).and_then(Value::as_str) {
                        reasoning.push_str(t);
                    }
                }
                for tc in delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    merge_tool_call(&mut tool_calls, tc);
                }
            }
            let mut choice = Map::new();
            choice.insert("index".into(), json!(0));
            if route == Route::Chat {
                let mut msg = Map::new();
                msg.insert("role".into(), role);
                msg.insert("content".into(), json!(content));
                if !reasoning.is_empty() {
                    msg.insert("reasoning_content".into(), json!(reasoning));
                }
                if !tool_calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(tool_calls));
                }
                choice.insert("message".into(), Value::Object(msg));
            } else {
                choice.insert("text".into(), json!(content));
            }
            choice.insert("finish_reason".into(), finish);
            let logprobs = if !logprob_content.is_empty() {
                json!({"content": logprob_content})
            } else if !token_logprobs.is_empty() {
                json!({"token_logprobs": token_logprobs})
            } else {
                Value::Null
            };
            choice.insert("logprobs".into(), logprobs);
            if !token_ids.is_empty() {
                choice.insert("token_ids".into(), Value::Array(token_ids));
            }
            out.insert("choices".into(), json!([Value::Object(choice)]));
            (Some(out), done)
        }
        Route::Models => (None, done),
    }
}

/// Most tool calls one streamed reply is assembled with; pieces with a higher index are dropped.
const MAX_STREAMED_TOOL_CALLS: u64 = 1024;

/// Streamed tool calls arrive in pieces keyed by `index`: the first carries id and name, the
/// rest append to the arguments string.
fn merge_tool_call(calls: &mut Vec<Value>, piece: &Value) {
    let index = piece
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(calls.len() as u64);
    // The index comes from the upstream: an absurd one must not make us fill memory with
    // empty slots up to it. No reply has anywhere near this many calls.
    if index >= MAX_STREAMED_TOOL_CALLS {
        return;
    }
    let index = index as usize;
    while calls.len() <= index {
        calls.push(
            json!({"id": null, "type": "function", "function": {"name": "", "arguments": ""}}),
        );
    }
    let slot = &mut calls[index];
    if let Some(id) = piece.get("id").filter(|v| !v.is_null()) {
        slot["id"] = id.clone();
    }
    if let Some(f) = piece.get("function") {
        if let Some(n) = f.get("name").and_then(Value::as_str) {
            let name = format!("{}{n}", slot["function"]["name"].as_str().unwrap_or(""));
            slot["function"]["name"] = json!(name);
        }
        if let Some(a) = f.get("arguments").and_then(Value::as_str) {
            let args = format!(
                "{}{a}",
                slot["function"]["arguments"].as_str().unwrap_or("")
            );
            slot["function"]["arguments"] = json!(args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_chat_is_assembled_with_tokens_and_tool_calls() {
        let sse = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m\",\"prompt_token_ids\":[1,2,3],\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"token_ids\":[10],\"logprobs\":{\"content\":[{\"token\":\"Hel\",\"logprob\":-0.5}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\",\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":\"}}]},\"token_ids\":[11],\"logprobs\":{\"content\":[{\"token\":\"lo\",\"logprob\":-0.25}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"total_tokens\":5}}\n\n",
            "data: [DONE]\n\n"
        );
        let (resp, done) = assemble_stream(Route::Chat, sse);
        assert!(done);
        let resp = resp.unwrap();
        let msg = &resp["choices"][0]["message"];
        assert_eq!(msg["content"], "Hello");
        assert_eq!(msg["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(msg["tool_calls"][0]["id"], "t1");
        assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(resp["usage"]["total_tokens"], 5);
        let mut call = crate::contract::ModelCall {
            request: Map::new(),
            response: None,
            error: None,
            latency_s: None,
            started_at: None,
            prompt_token_ids: None,
            completion_token_ids: None,
            completion_logprobs: None,
        };
        call.response = Some(resp);
        call.extract_tokens();
        assert_eq!(call.prompt_token_ids, Some(vec![1, 2, 3]));
        assert_eq!(call.completion_token_ids, Some(vec![10, 11]));
        assert_eq!(call.completion_logprobs, Some(vec![-0.5, -0.25]));
    }

    #[test]
    fn a_stream_without_done_is_reported_unfinished() {
        let sse =
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";
        let (resp, done) = assemble_stream(Route::Chat, sse);
        assert!(!done);
        assert_eq!(resp.unwrap()["choices"][0]["message"]["content"], "x");
    }

    #[test]
    fn a_huge_tool_call_index_is_dropped_not_allocated() {
        // Found by the fuzzer (tests/fuzz/regressions/sse): this filled memory with empty slots.
        let sse = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[\
                   {\"index\":100000000000,\"id\":\"a\",\"function\":{\"name\":\"f\"}},\
                   {\"index\":1,\"id\":\"b\",\"function\":{\"name\":\"g\"}}]}}]}\n\n\
                   data: [DONE]\n\n";
        let (resp, done) = assemble_stream(Route::Chat, sse);
        assert!(done);
        let calls = resp.unwrap()["choices"][0]["message"]["tool_calls"].clone();
        assert_eq!(calls.as_array().map(Vec::len), Some(2), "{calls}");
        assert_eq!(calls[1]["function"]["name"], "g");
    }
}
