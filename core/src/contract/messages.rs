//! Chat messages and tool calls, in the contract's shape and OpenAI's wire shape.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::common::*;
use crate::error::{Error, Result};

/// A tool call made by an assistant.
///
/// Reads both the contract shape `{id, name, arguments}` and OpenAI's wire shape
/// `{"type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// Call id; generated when emitting the wire shape if absent.
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Arguments: a JSON object, or the raw string the model produced.
    pub arguments: Value,
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let v = Value::deserialize(d)?;
        let obj = v
            .as_object()
            .ok_or_else(|| D::Error::custom("a tool call must be a JSON object"))?;
        let id = match obj.get("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "tool call id must be a string, got {other}"
                )))
            }
        };
        let body = match obj.get("function") {
            Some(Value::Object(f)) => f,
            _ => obj,
        };
        let name = body
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| D::Error::custom("tool call has no string `name`"))?
            .to_string();
        let arguments = match body.get("arguments") {
            None | Some(Value::Null) => Value::Object(JsonMap::new()),
            Some(a @ (Value::Object(_) | Value::String(_))) => a.clone(),
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "tool call `{name}` arguments must be an object or a string, got {other}"
                )))
            }
        };
        Ok(ToolCall {
            id,
            name,
            arguments,
        })
    }
}

impl ToolCall {
    /// The OpenAI wire shape; arguments are JSON-encoded as the wire expects a string.
    pub fn to_openai(&self) -> Value {
        let args = match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let id = self
            .id
            .clone()
            .unwrap_or_else(|| format!("call_{:08x}", fresh_id() as u32));
        serde_json::json!({
            "id": id,
            "type": "function",
            "function": {"name": self.name, "arguments": args},
        })
    }
}

/// Chat roles of the OpenAI wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The user or environment.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A chat message in the contract; extra fields (e.g. token ids) are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who spoke.
    pub role: Role,
    /// A string, a list of content parts, or null.
    #[serde(default, deserialize_with = "content_shape")]
    pub content: Value,
    /// Tool calls made by an assistant.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The call a tool message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Fields beyond the standard ones, preserved verbatim.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Message content is a string, a list of parts, or null, as in the OpenAI wire format.
fn content_shape<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Value, D::Error> {
    use serde::de::Error as _;
    match Value::deserialize(d)? {
        v @ (Value::String(_) | Value::Array(_) | Value::Null) => Ok(v),
        other => Err(D::Error::custom(format!(
            "message content must be a string, a list of parts or null, got {}",
            preview(&other)
        ))),
    }
}

impl Message {
    /// A message with text content.
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: Value::String(text.into()),
            tool_calls: None,
            tool_call_id: None,
            extra: JsonMap::new(),
        }
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Message::new(Role::User, text)
    }

    /// An assistant message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::new(Role::Assistant, text)
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Message::new(Role::System, text)
    }

    /// The text of the content: the string itself, or the joined text parts.
    pub fn text(&self) -> Option<String> {
        match &self.content {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                (!texts.is_empty()).then(|| texts.concat())
            }
            _ => None,
        }
    }

    /// Parse one message of the OpenAI wire shape, naming what is wrong when it does not fit.
    pub fn from_openai(v: &Value) -> Result<Self> {
        serde_json::from_value(v.clone()).map_err(|e| {
            Error::Protocol(format!("not an OpenAI chat message ({e}): {}", preview(v)))
        })
    }

    /// The OpenAI wire shape: nulls dropped, `content` always present.
    pub fn to_openai(&self) -> Value {
        let mut out = JsonMap::new();
        out.insert(
            "role".into(),
            serde_json::to_value(self.role).expect("role"),
        );
        out.insert("content".into(), self.content.clone());
        if let Some(calls) = self.tool_calls.as_ref().filter(|c| !c.is_empty()) {
            out.insert(
                "tool_calls".into(),
                calls.iter().map(ToolCall::to_openai).collect(),
            );
        }
        if let Some(id) = &self.tool_call_id {
            out.insert("tool_call_id".into(), Value::String(id.clone()));
        }
        for (k, v) in &self.extra {
            if !v.is_null() {
                out.insert(k.clone(), v.clone());
            }
        }
        Value::Object(out)
    }
}
