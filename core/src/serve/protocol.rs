//! The OpenEnv side of `serve`: how a Nenyax step session looks on the wire.
//!
//! Shapes follow OpenEnv 0.10 (`serialize_observation`) and the Python reference's exporter
//! (`nenyax.export.openenv`), so a client of either server works with ours:
//!
//! - action: `{"value": <native action>, "metadata": {...}?}` (unknown fields are rejected);
//! - observation: `{"data", "text", "info", "metadata"}` inside the envelope
//!   `{"observation": ..., "reward": r, "done": d, "metadata": ...}`;
//! - the final step's metadata carries `terminated`, `truncated` and the episode's judgment as
//!   `nenyax_judgment` (the verifier's verdict, not a sum of rewards).

use serde_json::{json, Map, Value};

use crate::contract::{JsonMap, Manifest, Observation, TaskRef};
use crate::env::{guard, Environment, Session};
use crate::error::Error;
use crate::openenv_wire::Envelope;
pub(crate) use crate::openenv_wire::{clip, error_frame, Fault};

/// One episode being played for a client (a WS connection or an HTTP session).
pub(crate) struct Play {
    session: Session,
    episode_id: String,
    task_id: Option<String>,
    step_count: u64,
    done: bool,
    max_steps: usize,
}

/// Reset arguments, from a WS `reset` frame's `data` or an HTTP `/reset` body.
pub(crate) struct ResetArgs {
    pub seed: Option<i64>,
    pub episode_id: Option<String>,
    pub task_id: Option<String>,
}

impl ResetArgs {
    /// Read the keys Nenyax understands; others are ignored, as OpenEnv drops unknown kwargs.
    /// `strict` applies the HTTP `ResetRequest` rules (seed >= 0, episode id <= 255 chars).
    pub(crate) fn from_json(data: &Value, strict: bool) -> Result<ResetArgs, Fault> {
        let empty = Map::new();
        let obj = match data {
            Value::Null => &empty,
            Value::Object(o) => o,
            other => {
                return Err(Fault::invalid(
                    "dict_type",
                    json!(["data"]),
                    "Input should be a valid dictionary",
                    other,
                ))
            }
        };
        let loc = |k: &str| {
            if strict {
                json!(["body", k])
            } else {
                json!(["data", k])
            }
        };
        let seed = match obj.get("seed") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_i64() {
                Some(s) if !strict || s >= 0 => Some(s),
                Some(_) => {
                    return Err(Fault::invalid(
                        "greater_than_equal",
                        loc("seed"),
                        "Input should be greater than or equal to 0",
                        v,
                    ))
                }
                None => {
                    return Err(Fault::invalid(
                        "int_type",
                        loc("seed"),
                        "Input should be a valid integer",
                        v,
                    ))
                }
            },
        };
        let episode_id = match obj.get("episode_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !strict || s.chars().count() <= 255 => Some(s.clone()),
            Some(v @ Value::String(_)) => {
                return Err(Fault::invalid(
                    "string_too_long",
                    loc("episode_id"),
                    "String should have at most 255 characters",
                    v,
                ))
            }
            Some(v) => {
                return Err(Fault::invalid(
                    "string_type",
                    loc("episode_id"),
                    "Input should be a valid string",
                    v,
                ))
            }
        };
        let task_id = match obj.get("task_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(v) => {
                return Err(Fault::invalid(
                    "string_type",
                    loc("task_id"),
                    "Input should be a task id (a string or an integer)",
                    v,
                ))
            }
        };
        Ok(ResetArgs {
            seed,
            episode_id,
            task_id,
        })
    }
}

/// The native action out of an OpenEnv action object `{"value": ..., "metadata": {...}?}`.
/// `loc` prefixes error locations (`[]` over WS, where OpenEnv reports them relative to the
/// action).
pub(crate) fn native_action(action: &Value, loc: &[&str]) -> Result<Value, Fault> {
    let at = |k: &str| {
        let mut l: Vec<Value> = loc.iter().map(|s| json!(s)).collect();
        if !k.is_empty() {
            l.push(json!(k));
        }
        Value::Array(l)
    };
    let Value::Object(obj) = action else {
        return Err(Fault::invalid(
            "model_type",
            at(""),
            "Input should be an object with the action in `value`, e.g. {\"value\": \"<answer>4</answer>\"}",
            action,
        ));
    };
    let mut errors = Vec::new();
    for (k, v) in obj {
        match k.as_str() {
            "value" => {}
            "metadata" if v.is_object() => {}
            "metadata" => errors.push(json!({
                "type": "dict_type", "loc": at("metadata"),
                "msg": "Input should be a valid dictionary", "input": clip(v),
            })),
            _ => errors.push(json!({
                "type": "extra_forbidden", "loc": at(k),
                "msg": "Extra inputs are not permitted (the action goes in `value`)", "input": clip(v),
            })),
        }
    }
    if !obj.contains_key("value") {
        errors.push(json!({
            "type": "missing", "loc": at("value"),
            "msg": "Field required", "input": clip(action),
        }));
    }
    if !errors.is_empty() {
        return Err(Fault::Validation(errors));
    }
    Ok(obj["value"].clone())
}

fn observation_json(obs: &Observation, metadata: &JsonMap) -> Value {
    json!({
        "data": obs.data,
        "text": obs.text,
        "info": obs.info,
        "metadata": metadata,
    })
}

/// The envelope of a Nenyax observation (see [`Envelope::to_json`] for `http`).
pub(crate) fn envelope(
    obs: &Observation,
    reward: Option<f64>,
    done: bool,
    metadata: &JsonMap,
    http: bool,
) -> Value {
    Envelope {
        observation: observation_json(obs, metadata),
        reward,
        done,
        metadata: metadata.clone(),
    }
    .to_json(http)
}

impl Play {
    /// Start an episode; returns it with its first envelope.
    pub(crate) fn start(
        env: &dyn Environment,
        args: &ResetArgs,
        episode_id: String,
        http: bool,
    ) -> Result<(Play, Value), Fault> {
        let task = args.task_id.as_ref().map(|id| TaskRef::new(id.clone()));
        let session = guard(|| env.session(task.as_ref(), args.seed)).map_err(execution)?;
        let task_id = args
            .task_id
            .clone()
            .or_else(|| session.task().map(|t| t.id));
        let body = envelope(session.observation(), None, false, &JsonMap::new(), http);
        Ok((
            Play {
                session,
                episode_id,
                task_id,
                step_count: 0,
                done: false,
                max_steps: env.default_max_steps().max(1),
            },
            body,
        ))
    }

    /// Apply an action; the final step's metadata carries the judgment.
    pub(crate) fn step(&mut self, action: Value, http: bool) -> Result<Value, Fault> {
        if self.done {
            return Err(Fault::Execution(
                "the episode is over; send reset to start a new one".into(),
            ));
        }
        let step = self.session.act(action).map_err(execution)?;
        self.step_count += 1;
        let truncated =
            step.truncated || (!step.done() && self.step_count >= self.max_steps as u64);
        self.done = step.done() || truncated;
        let mut metadata = JsonMap::new();
        metadata.insert("terminated".into(), json!(step.terminated));
        metadata.insert("truncated".into(), json!(truncated));
        if self.done {
            match self.session.judgment() {
                Ok(j) => {
                    metadata.insert("nenyax_judgment".into(), json!(j));
                }
                Err(e) => {
                    metadata.insert(
                        "nenyax_judgment_error".into(),
                        json!(format!("{}: {e}", e.kind())),
                    );
                }
            }
        }
        Ok(envelope(
            &step.observation,
            Some(step.reward),
            self.done,
            &metadata,
            http,
        ))
    }

    /// The OpenEnv `State`: `episode_id`, `step_count`, plus `env_id`, `task_id` and `done`.
    pub(crate) fn state(&self, env_id: &str) -> Value {
        json!({
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "env_id": env_id,
            "task_id": self.task_id,
            "done": self.done,
        })
    }

    /// True once the episode ended.
    pub(crate) fn done(&self) -> bool {
        self.done
    }
}

/// The state of a connection with no episode yet (what OpenEnv's fresh env reports).
pub(crate) fn empty_state(env_id: &str) -> Value {
    json!({"episode_id": null, "step_count": 0, "env_id": env_id, "task_id": null, "done": false})
}

fn execution(e: Error) -> Fault {
    Fault::Execution(format!("{}: {e}", e.kind()))
}

/// `GET /metadata`: OpenEnv's `EnvironmentMetadata`, plus the Nenyax manifest for Nenyax clients.
pub(crate) fn metadata(m: &Manifest) -> Value {
    json!({
        "name": m.name,
        "description": m.description.clone().unwrap_or_else(|| format!("{} served by Nenyax", m.id)),
        "readme_content": null,
        "version": m.version.clone().unwrap_or_else(|| "1.0.0".into()),
        "author": null,
        "documentation_url": null,
        "nenyax_manifest": m,
    })
}

/// `GET /schema`: JSON Schemas of the action, observation, state and reset observation.
pub(crate) fn schema(m: &Manifest) -> Value {
    let native_action = m
        .action_schema
        .clone()
        .map(Value::Object)
        .unwrap_or_else(|| json!({}));
    let mut value = match native_action {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    value.insert(
        "description".into(),
        json!("Native action for the wrapped environment"),
    );
    value.insert("title".into(), json!("Value"));
    let metadata = json!({"additionalProperties": true, "type": "object", "title": "Metadata"});
    let action = json!({
        "title": "NenyaxAction",
        "type": "object",
        "additionalProperties": false,
        "properties": {"metadata": metadata, "value": value},
        "required": ["value"],
    });
    let data = m
        .observation_schema
        .clone()
        .map(Value::Object)
        .unwrap_or_else(|| json!({}));
    let observation = json!({
        "title": "NenyaxObservation",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "done": {"default": false, "type": "boolean", "title": "Done"},
            "reward": {"anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"}, {"type": "null"}], "default": null, "title": "Reward"},
            "metadata": metadata,
            "data": data,
            "text": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Text", "description": "Text rendering, if available"},
            "info": {"additionalProperties": true, "type": "object", "title": "Info"},
        },
    });
    let state = json!({
        "title": "NenyaxState",
        "type": "object",
        "additionalProperties": true,
        "properties": {
            "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Episode Id"},
            "step_count": {"default": 0, "minimum": 0, "type": "integer", "title": "Step Count"},
            "env_id": {"default": m.id, "type": "string", "title": "Env Id"},
            "task_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Task Id"},
            "done": {"default": false, "type": "boolean", "title": "Done"},
        },
    });
    json!({
        "action": action,
        "observation": observation,
        "state": state,
        "reset_observation": observation,
    })
}

/// `GET /openapi.json`: the routes this server offers (what `openenv validate` reads).
pub(crate) fn openapi(m: &Manifest) -> Value {
    let op =
        |summary: &str| json!({"summary": summary, "responses": {"200": {"description": "OK"}}});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": format!("{} (served by Nenyax)", m.name),
            "version": "1.0.0",
            "description": "An OpenEnv server: WebSocket sessions at /ws; stateless HTTP /reset, /step, /state; opt-in HTTP sessions with {\"session\": true} on /reset.",
        },
        "paths": {
            "/reset": {"post": op("Reset the environment")},
            "/step": {"post": op("Execute an action")},
            "/state": {"get": op("Get the current state")},
            "/health": {"get": op("Health check")},
            "/metadata": {"get": op("Environment metadata")},
            "/schema": {"get": op("Action, observation and state schemas")},
            "/mcp": {"post": op("MCP JSON-RPC endpoint (tools are not offered)")},
        },
    })
}

/// A JSON-RPC reply for `/mcp` and WS `mcp` frames: Nenyax environments offer no MCP tools.
pub(crate) fn mcp_reply(body: Option<&Value>) -> Value {
    let err = |id: Value, code: i64, msg: &str| json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": msg, "data": null}});
    match body {
        None => err(Value::Null, -32700, "Parse error"),
        Some(Value::Object(o)) if o.get("method").and_then(Value::as_str).is_some() => err(
            o.get("id").cloned().unwrap_or(Value::Null),
            -32603,
            "Environment does not support MCP",
        ),
        Some(Value::Object(o)) => err(
            o.get("id").cloned().unwrap_or(Value::Null),
            -32600,
            "Invalid Request",
        ),
        Some(_) => err(Value::Null, -32600, "Invalid Request"),
    }
}
