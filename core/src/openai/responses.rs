//! The OpenAI Responses API and chat completions, translated into each other faithfully
//! enough for tool-calling loops: input/output items to chat messages and back, function tools
//! to chat tools, and a Responses create request to a chat-completions request.
//!
//! Used by the recording server (a local model answering `/v1/responses`) and by the NeMo Gym
//! tool loop (`api=chat`), so both read and write the same shapes.

use serde_json::{json, Map, Value};

use crate::contract::{fresh_id, Message, Role, ToolCall};

/// The text of a content value: a string, or the joined `text` of its parts.
pub fn content_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .concat(),
        ),
        _ => None,
    }
}

/// The chat messages a Responses request's `instructions` and `input` items stand for.
///
/// Message items keep their role (`developer` becomes `system`); consecutive `function_call`
/// items become one assistant message with `tool_calls` (joined to the assistant text just
/// before them); a `function_call_output` becomes a `tool` message; `reasoning` items are kept
/// as `reasoning_content` on the next assistant message.
pub fn items_to_messages(instructions: Option<&str>, input: &Value) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    if let Some(s) = instructions {
        out.push(Message::system(s));
    }
    let items = match input {
        Value::String(s) => return with(out, Message::user(s.clone())),
        Value::Array(items) => items,
        _ => return out,
    };
    let mut reasoning: Option<String> = None;
    // Whether the last message is an assistant turn that tool calls may still join.
    let mut open_assistant = false;
    for item in items {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "function_call" => {
                let call = ToolCall {
                    id: item
                        .get("call_id")
                        .or_else(|| item.get("id"))
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    name: item
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    arguments: match item.get("arguments") {
                        Some(a @ (Value::String(_) | Value::Object(_))) => a.clone(),
                        _ => Value::String("{}".into()),
                    },
                };
                if !open_assistant {
                    let mut m = Message::assistant("");
                    m.content = Value::Null;
                    take_reasoning(&mut m, &mut reasoning);
                    out.push(m);
                    open_assistant = true;
                }
                let last = out.last_mut().expect("pushed above");
                last.tool_calls.get_or_insert_with(Vec::new).push(call);
            }
            "function_call_output" => {
                let mut m = Message::new(
                    Role::Tool,
                    item.get("output")
                        .map(|o| content_text(o).unwrap_or_else(|| o.to_string()))
                        .unwrap_or_default(),
                );
                m.tool_call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                out.push(m);
                open_assistant = false;
            }
            "reasoning" => {
                let text: String = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .chain(
                        item.get("content")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten(),
                    )
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n");
                if !text.is_empty() {
                    reasoning = Some(text);
                }
            }
            _ => {
                let text = item
                    .get("content")
                    .and_then(content_text)
                    .unwrap_or_default();
                let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                let mut m = match role {
                    "system" | "developer" => Message::system(text),
                    "assistant" => Message::assistant(text),
                    _ => Message::user(text),
                };
                open_assistant = m.role == Role::Assistant;
                if open_assistant {
                    take_reasoning(&mut m, &mut reasoning);
                }
                out.push(m);
            }
        }
    }
    out
}

fn with(mut v: Vec<Message>, m: Message) -> Vec<Message> {
    v.push(m);
    v
}

fn take_reasoning(m: &mut Message, reasoning: &mut Option<String>) {
    if let Some(r) = reasoning.take() {
        m.extra.insert("reasoning_content".into(), Value::String(r));
    }
}

fn id(prefix: &str) -> String {
    format!("{prefix}_{:016x}", fresh_id())
}

/// The Responses output items of one assistant reply: a `reasoning` item for its reasoning
/// text, a `message` item for its text (when there is any or no tool call), then one
/// `function_call` item per tool call, `arguments` as a JSON string.
pub fn message_to_items(reply: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    let reasoning = reply
        .extra
        .get("reasoning_content")
        .or_else(|| reply.extra.get("reasoning"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    if let Some(r) = reasoning {
        out.push(json!({"type": "reasoning", "id": id("rs"),
            "summary": [{"type": "summary_text", "text": r}]}));
    }
    let calls = reply.tool_calls.as_deref().unwrap_or_default();
    let text = reply.text().unwrap_or_default();
    if !text.is_empty() || calls.is_empty() {
        out.push(
            json!({"type": "message", "id": id("msg"), "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    for c in calls {
        let args = match &c.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(json!({"type": "function_call", "id": id("fc"),
            "call_id": c.id.clone().unwrap_or_else(|| id("call")),
            "name": c.name, "arguments": args, "status": "completed"}));
    }
    out
}

/// A Responses function tool (`{type, name, description, parameters, strict}`) as a chat tool
/// (`{type: "function", function: {...}}`); other tool types pass through unchanged.
pub fn tool_to_chat(tool: &Value) -> Value {
    if tool.get("type").and_then(Value::as_str) != Some("function")
        || tool.get("function").is_some()
    {
        return tool.clone();
    }
    let mut f = Map::new();
    for k in ["name", "description", "parameters", "strict"] {
        if let Some(v) = tool.get(k).filter(|v| !v.is_null()) {
            f.insert(k.into(), v.clone());
        }
    }
    json!({"type": "function", "function": f})
}

/// A Responses create request as a chat-completions request: `instructions` + `input` become
/// `messages`, tools and `tool_choice` take the chat shape, `max_output_tokens` becomes
/// `max_tokens`; sampling parameters, `parallel_tool_calls`, `metadata` and `model` pass through.
pub fn chat_request(params: &Map<String, Value>, model: &str) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert(
        "model".into(),
        params
            .get("model")
            .filter(|m| m.is_string())
            .cloned()
            .unwrap_or_else(|| Value::String(model.to_string())),
    );
    let messages = items_to_messages(
        params.get("instructions").and_then(Value::as_str),
        params.get("input").unwrap_or(&Value::Null),
    );
    body.insert(
        "messages".into(),
        messages.iter().map(Message::to_openai).collect(),
    );
    if let Some(tools) = params.get("tools").and_then(Value::as_array) {
        if !tools.is_empty() {
            body.insert("tools".into(), tools.iter().map(tool_to_chat).collect());
        }
    }
    if let Some(choice) = params.get("tool_choice").filter(|v| !v.is_null()) {
        let chat = match choice {
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
                json!({"type": "function", "function": {"name": o.get("name").cloned().unwrap_or(Value::Null)}})
            }
            other => other.clone(),
        };
        if body.contains_key("tools") {
            body.insert("tool_choice".into(), chat);
        }
    }
    for k in [
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "metadata",
        "seed",
        "stop",
    ] {
        if let Some(v) = params.get(k).filter(|v| !v.is_null()) {
            if k != "parallel_tool_calls" || body.contains_key("tools") {
                body.insert(k.into(), v.clone());
            }
        }
    }
    if let Some(v) = params.get("max_output_tokens").filter(|v| !v.is_null()) {
        body.insert("max_tokens".into(), v.clone());
    }
    body
}

/// Why a chat completion stopped early, in Responses terms (`max_output_tokens` for a reply
/// cut at the token limit), or `None` for a complete reply.
pub fn chat_incomplete(response: &Map<String, Value>) -> Option<String> {
    let finish = response
        .get("choices")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    (finish == Some("length")).then(|| "max_output_tokens".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_round_trip_through_chat_messages() {
        let input = json!([
            {"role": "developer", "content": "be nice"},
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "need a tool"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"SF\"}"},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{\"city\":\"LA\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "{\"t\": 1}"},
            {"type": "function_call_output", "call_id": "c2", "output": "{\"t\": 2}"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "cold"}]},
        ]);
        let msgs = items_to_messages(Some("sys"), &input);
        let roles: Vec<Role> = msgs.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Assistant
            ]
        );
        let calls = msgs[3].tool_calls.as_ref().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].id.as_deref(), Some("c2"));
        assert_eq!(msgs[3].extra["reasoning_content"], "need a tool");
        assert_eq!(msgs[4].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(msgs[4].text().unwrap(), "{\"t\": 1}");
        // And back: the assistant turn becomes reasoning + function_call items.
        let items = message_to_items(&msgs[3]);
        let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["reasoning", "function_call", "function_call"]);
        assert_eq!(items[1]["call_id"], "c1");
        assert_eq!(items[1]["arguments"], "{\"city\":\"SF\"}");
    }

    #[test]
    fn chat_request_translates_tools_and_limits() {
        let params = json!({
            "input": "hi", "instructions": "sys", "max_output_tokens": 64, "temperature": 0.5,
            "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false,
            "tools": [{"type": "function", "name": "f", "description": "", "parameters": {"type": "object"}, "strict": true}],
        });
        let body = chat_request(params.as_object().unwrap(), "m");
        assert_eq!(body["model"], "m");
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["tools"][0]["function"]["strict"], true);
        assert_eq!(body["tool_choice"]["function"]["name"], "f");
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][1]["content"], "hi");
    }
}
