//! The OpenEnv 0.10 wire format, coded once for both sides: the `openenv:` driver (a client of
//! any OpenEnv server) and `nenyax serve` (an OpenEnv server). See docs/openenv.md.
//!
//! - client frames: `{"type": "reset"|"step"|"mcp", "data": ...}`, `{"type": "state"}`,
//!   `{"type": "close"}` (unknown envelope keys are rejected);
//! - server frames: `{"type": "observation"|"state"|"mcp", "data": ...}` and
//!   `{"type": "error", "data": {"message", "code", ...}}` with OpenEnv's error codes;
//! - the observation envelope `{"observation", "reward", "done", "metadata"}`, whose reward may
//!   be an int, a float, a bool or null.

use serde_json::{json, Map, Value};

use crate::contract::JsonMap;

/// OpenEnv's error codes.
pub(crate) mod code {
    /// The frame is not JSON (the session stays open).
    pub const INVALID_JSON: &str = "INVALID_JSON";
    /// The frame's `type` is not known (the session stays open).
    pub const UNKNOWN_TYPE: &str = "UNKNOWN_TYPE";
    /// The frame or the action does not fit the protocol (the session stays open).
    pub const VALIDATION_ERROR: &str = "VALIDATION_ERROR";
    /// The environment raised (the session stays open).
    pub const EXECUTION_ERROR: &str = "EXECUTION_ERROR";
    /// The server is at its session limit (then it closes).
    pub const CAPACITY_REACHED: &str = "CAPACITY_REACHED";
    /// The server could not make an environment (then it closes).
    pub const FACTORY_ERROR: &str = "FACTORY_ERROR";
    /// The session could not be made or found (then it closes).
    pub const SESSION_ERROR: &str = "SESSION_ERROR";
}

/// A frame from client to server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClientFrame {
    /// Start an episode; `data` holds `seed`, `episode_id` and other reset arguments.
    Reset(Value),
    /// Apply an action (the action's fields, not wrapped).
    Step(Value),
    /// Ask for the episode's state.
    State,
    /// End the session (no reply).
    Close,
    /// A JSON-RPC request for the environment's MCP tools.
    Mcp(Value),
}

impl ClientFrame {
    /// The frame as sent.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            ClientFrame::Reset(d) => json!({"type": "reset", "data": d}),
            ClientFrame::Step(d) => json!({"type": "step", "data": d}),
            ClientFrame::State => json!({"type": "state"}),
            ClientFrame::Close => json!({"type": "close"}),
            ClientFrame::Mcp(d) => json!({"type": "mcp", "data": d}),
        }
    }

    /// Read a received frame; a bad one yields the error frame to answer with.
    pub(crate) fn parse(text: &str) -> Result<ClientFrame, Value> {
        let msg: Value = serde_json::from_str(text)
            .map_err(|e| error_frame(code::INVALID_JSON, &format!("Invalid JSON: {e}"), None))?;
        let Value::Object(obj) = &msg else {
            return Err(Fault::invalid(
                "model_type",
                json!([]),
                "Input should be an object {\"type\": ..., \"data\": ...}",
                &msg,
            )
            .frame());
        };
        let kind = match obj.get("type") {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(Fault::invalid(
                    "string_type",
                    json!(["type"]),
                    "Input should be a valid string",
                    other,
                )
                .frame())
            }
            None => {
                return Err(
                    Fault::invalid("missing", json!(["type"]), "Field required", &msg).frame(),
                )
            }
        };
        let allowed: &[&str] = match kind {
            "reset" | "step" | "mcp" => &["type", "data"],
            "state" | "close" => &["type"],
            other => {
                return Err(error_frame(
                    code::UNKNOWN_TYPE,
                    &format!("Unknown message type: {other}"),
                    None,
                ))
            }
        };
        if let Some(extra) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(Fault::invalid(
                "extra_forbidden",
                json!([extra]),
                "Extra inputs are not permitted",
                &obj[extra],
            )
            .frame());
        }
        let data = obj.get("data").cloned().unwrap_or(Value::Null);
        Ok(match kind {
            "reset" => ClientFrame::Reset(data),
            "step" => ClientFrame::Step(data),
            "mcp" => ClientFrame::Mcp(data),
            "state" => ClientFrame::State,
            _ => ClientFrame::Close,
        })
    }
}

/// A frame from server to client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ServerFrame {
    /// The envelope answering a reset or a step.
    Observation(Value),
    /// The episode's state.
    State(Value),
    /// A JSON-RPC reply.
    Mcp(Value),
    /// An error: its code, message and the whole `data` (extra fields included).
    Error {
        /// One of [`code`].
        code: String,
        /// The server's message.
        message: String,
        /// The whole `data` object.
        data: Value,
    },
}

impl ServerFrame {
    /// The frame as sent.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            ServerFrame::Observation(d) => json!({"type": "observation", "data": d}),
            ServerFrame::State(d) => json!({"type": "state", "data": d}),
            ServerFrame::Mcp(d) => json!({"type": "mcp", "data": d}),
            ServerFrame::Error { data, .. } => json!({"type": "error", "data": data}),
        }
    }

    /// Read a received frame; `None` for a frame of no known type.
    pub(crate) fn parse(msg: &Value) -> Option<ServerFrame> {
        let data = msg.get("data").cloned().unwrap_or(Value::Null);
        Some(match msg.get("type").and_then(Value::as_str)? {
            "observation" => ServerFrame::Observation(data),
            "state" => ServerFrame::State(data),
            "mcp" => ServerFrame::Mcp(data),
            "error" => ServerFrame::Error {
                code: data
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("UNKNOWN")
                    .to_string(),
                message: data
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message")
                    .to_string(),
                data,
            },
            _ => return None,
        })
    }
}

/// An error frame: `{"type":"error","data":{"message","code",...}}`.
pub(crate) fn error_frame(code: &str, message: &str, extra: Option<(&str, Value)>) -> Value {
    let mut data = Map::new();
    data.insert("message".into(), json!(message));
    data.insert("code".into(), json!(code));
    if let Some((k, v)) = extra {
        data.insert(k.into(), v);
    }
    json!({"type": "error", "data": data})
}

/// Why a request could not be served; maps to OpenEnv's error codes and HTTP statuses.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The request does not fit the protocol (WS `VALIDATION_ERROR`, HTTP 422).
    Validation(Vec<Value>),
    /// The environment refused or failed (WS `EXECUTION_ERROR`, HTTP 500).
    Execution(String),
}

impl Fault {
    /// One pydantic-shaped validation error.
    pub(crate) fn invalid(kind: &str, loc: Value, msg: impl Into<String>, input: &Value) -> Fault {
        Fault::Validation(vec![json!({
            "type": kind,
            "loc": loc,
            "msg": msg.into(),
            "input": clip(input),
        })])
    }

    /// The WS error frame.
    pub(crate) fn frame(&self) -> Value {
        match self {
            Fault::Validation(errors) => error_frame(
                code::VALIDATION_ERROR,
                "Invalid message",
                Some(("errors", Value::Array(errors.clone()))),
            ),
            Fault::Execution(m) => error_frame(code::EXECUTION_ERROR, m, None),
        }
    }
}

/// An echoed input, shortened so that a huge bad request does not produce a huge error.
pub(crate) fn clip(v: &Value) -> Value {
    match v {
        Value::String(s) if s.len() > 200 => {
            let mut end = 200;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            Value::String(format!("{}… ({} bytes)", &s[..end], s.len()))
        }
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => v.clone(),
        other => {
            let text = other.to_string();
            if text.len() > 200 {
                Value::String(format!("{} bytes of JSON", text.len()))
            } else {
                other.clone()
            }
        }
    }
}

/// The observation envelope of a reset or step reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Envelope {
    /// The observation's fields (OpenEnv keeps `metadata` inside it too).
    pub observation: Value,
    /// The reward; `None` when the server sent null or none.
    pub reward: Option<f64>,
    /// Whether the episode ended.
    pub done: bool,
    /// The step's metadata.
    pub metadata: JsonMap,
}

impl Envelope {
    /// The envelope as sent. `http` writes `metadata: null` when empty (HTTP responses always
    /// carry the key); WS omits it when empty, like OpenEnv 0.10.
    pub(crate) fn to_json(&self, http: bool) -> Value {
        let mut env = Map::new();
        env.insert("observation".into(), self.observation.clone());
        env.insert("reward".into(), json!(self.reward));
        env.insert("done".into(), json!(self.done));
        if !self.metadata.is_empty() {
            env.insert("metadata".into(), Value::Object(self.metadata.clone()));
        } else if http {
            env.insert("metadata".into(), Value::Null);
        }
        Value::Object(env)
    }

    /// Read a received envelope (an int, float, bool or null reward; OpenEnv 0.3 servers keep
    /// the metadata only inside the observation). `Err` says what is wrong with it.
    pub(crate) fn parse(data: &Value) -> Result<Envelope, &'static str> {
        let env = data.as_object().ok_or("is not an object")?;
        let observation = env.get("observation").cloned().unwrap_or(Value::Null);
        let reward = match env.get("reward") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(f64::from(u8::from(*b))),
            Some(Value::Number(n)) => n.as_f64(),
            Some(_) => return Err("has a reward that is not a number, bool or null"),
        };
        let done = match env.get("done") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("has a `done` that is not a bool"),
        };
        let mut metadata = env
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if metadata.is_empty() {
            if let Some(m) = observation.get("metadata").and_then(Value::as_object) {
                metadata = m.clone();
            }
        }
        Ok(Envelope {
            observation,
            reward,
            done,
            metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_between_the_two_sides() {
        for f in [
            ClientFrame::Reset(json!({"seed": 3})),
            ClientFrame::Step(json!({"message": "hi"})),
            ClientFrame::State,
            ClientFrame::Close,
        ] {
            assert_eq!(ClientFrame::parse(&f.to_json().to_string()), Ok(f));
        }
        let bad = ClientFrame::parse(r#"{"type":"state","data":1}"#).unwrap_err();
        assert_eq!(bad["data"]["code"], code::VALIDATION_ERROR);
        let unknown = ClientFrame::parse(r#"{"type":"dance"}"#).unwrap_err();
        assert_eq!(
            ServerFrame::parse(&unknown).unwrap(),
            ServerFrame::Error {
                code: code::UNKNOWN_TYPE.into(),
                message: "Unknown message type: dance".into(),
                data: unknown["data"].clone(),
            }
        );
        let e = Envelope {
            observation: json!({"text": "x", "metadata": {}}),
            reward: Some(0.5),
            done: true,
            metadata: JsonMap::new(),
        };
        assert_eq!(Envelope::parse(&e.to_json(false)), Ok(e.clone()));
        assert_eq!(e.to_json(true)["metadata"], Value::Null);
    }
}
