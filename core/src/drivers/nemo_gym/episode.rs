//! One NeMo Gym episode: its row, the resources server's session cookie, the tool calls and
//! replies so far, and `/verify` at the end.

use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::http::{self, Jar};
use super::rows::Row;
use super::shared::Shared;
use crate::contract::{JudgeSource, Judgment, Message, Observation, Role, Step, TaskRef, ToolCall};
use crate::env::Episode;
use crate::error::{Error, Result};

/// One live episode: the row, the cookie jar, the output items so far.
pub(crate) struct NemoEpisode {
    pub(super) shared: Arc<Shared>,
    pub(super) index: usize,
    pub(super) task: TaskRef,
    pub(super) jar: Jar,
    pub(super) session_id: String,
    /// Responses output items so far (model items, then each call's output), as NeMo Gym's
    /// simple agent accumulates them; `/verify` gets them all.
    pub(super) output: Vec<Value>,
    pub(super) obs: Observation,
    /// The model name written into the Response object `/verify` gets.
    pub(super) model_name: String,
    /// `/verify`'s verdict, once the final step asked for it.
    pub(super) judgment: Option<Judgment>,
    pub(super) closed: bool,
}

impl NemoEpisode {
    /// Seed a new session for row `index` (`POST /seed_session` with the whole row).
    pub(crate) fn open(shared: Arc<Shared>, index: usize, task: TaskRef) -> Result<NemoEpisode> {
        let row = &shared.rows[index];
        let mut jar = Jar::default();
        let url = shared.server.url("/seed_session");
        shared
            .server
            .post("/seed_session", &Value::Object(row.raw.clone()), &mut jar)?
            .ok(&url)
            .map_err(|e| match e {
                Error::Environment(m) => Error::Environment(format!(
                    "seeding task {index} (line {} of the data file) failed: {m}",
                    row.line
                )),
                other => other,
            })?;
        let n = shared.next_episode.fetch_add(1, Ordering::Relaxed);
        let messages = row.messages();
        let mut obs = Observation {
            data: json!({
                "input": row.params().get("input").cloned().unwrap_or(Value::Null),
                "tools": row.params().get("tools").cloned().unwrap_or(json!([])),
            }),
            text: Some(row.prompt()),
            messages: Some(messages),
            info: Map::new(),
        };
        obs.info.insert("task_id".into(), json!(task.id));
        obs.info.insert("task_index".into(), json!(index));
        if !row.tools.is_empty() {
            obs.info.insert("tools".into(), json!(row.tools));
        }
        Ok(NemoEpisode {
            session_id: format!("nenyax-{n}"),
            shared,
            index,
            task,
            jar,
            output: Vec::new(),
            obs,
            model_name: "nenyax-policy".into(),
            judgment: None,
            closed: false,
        })
    }

    pub(super) fn row(&self) -> &Row {
        &self.shared.rows[self.index]
    }

    /// Run one `function_call` item: `POST /<name>` with its parsed arguments and the cookies.
    /// Its raw reply (any status) is the output; unparseable arguments are answered as NeMo
    /// Gym's agent answers them, and a name that is not one of the task's tools with an error,
    /// both without calling the server. Appends the call and its output to
    /// the episode's items and returns the `function_call_output` item.
    pub(crate) fn run_call(&mut self, call: &Value, record_call: bool) -> Result<Value> {
        let name = call
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let call_id = call
            .get("call_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| {
                format!(
                    "call_{:012x}",
                    crate::contract::fresh_id() & 0xFFFF_FFFF_FFFF
                )
            });
        let args = match call.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| e.to_string()),
            Some(v @ Value::Object(_)) => Ok(v.clone()),
            None | Some(Value::Null) => Ok(json!({})),
            Some(other) => Err(format!(
                "arguments must be a JSON string or object, got {other}"
            )),
        };
        let tools = &self.shared.rows[self.index].tools;
        let output = match args {
            // Only the task's own tools are routes a call may reach (never /verify, say).
            _ if !tools.contains(&name) => json!({"error": format!(
                "Tool `{name}` is not one of this task's tools ({})", tools.join(", ")
            )})
            .to_string(),
            Err(e) => json!({"error": format!("Invalid tool call arguments: {e}")}).to_string(),
            Ok(args) => {
                let path = format!("/{name}");
                let server = &self.shared.server;
                server.post(&path, &args, &mut self.jar)?.body
            }
        };
        if record_call {
            let mut item = call.clone();
            if let Some(o) = item.as_object_mut() {
                o.insert("type".into(), json!("function_call"));
                o.insert("call_id".into(), json!(call_id));
                o.entry("arguments").and_modify(|a| {
                    if let Value::Object(_) = a {
                        *a = Value::String(a.to_string());
                    }
                });
            }
            self.output.push(item);
        }
        let out = json!({"type": "function_call_output", "call_id": call_id, "output": output});
        self.output.push(out.clone());
        Ok(out)
    }

    /// The assistant text as a Responses output message item.
    pub(super) fn push_text(&mut self, text: &str) {
        self.output.push(json!({
            "type": "message", "id": format!("msg_{:016x}", crate::contract::fresh_id()),
            "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }));
    }

    /// `POST /verify` with the row and a Response object holding every output item.
    pub(crate) fn verify(&self) -> Result<Judgment> {
        let params = self.row().params();
        let response = json!({
            "id": format!("resp_{}", self.session_id),
            "created_at": crate::contract::now_unix() as i64,
            "model": self.model_name,
            "object": "response",
            "status": "completed",
            "parallel_tool_calls": params.get("parallel_tool_calls").cloned().filter(|v| !v.is_null()).unwrap_or(json!(true)),
            "tool_choice": params.get("tool_choice").cloned().filter(|v| !v.is_null()).unwrap_or(json!("auto")),
            "tools": params.get("tools").cloned().filter(|v| !v.is_null()).unwrap_or(json!([])),
            "output": self.output,
        });
        let mut body = self.row().raw.clone();
        body.insert("response".into(), response);
        let url = self.shared.server.url("/verify");
        // /verify may set cookies too; they do not matter after it.
        let mut jar = self.jar.clone();
        let reply = self
            .shared
            .server
            .post("/verify", &Value::Object(body), &mut jar)?
            .ok(&url)?;
        let v = reply.json(&url)?;
        let reward = v.get("reward").and_then(Value::as_f64).ok_or_else(|| {
            Error::Protocol(format!(
                "{url} answered without a numeric `reward`: {}",
                http::clip(&v.to_string(), 300)
            ))
        })?;
        let mut j = Judgment::new(reward, JudgeSource::Verifier, "nemo_gym.verify")?;
        if reward == 0.0 || reward == 1.0 {
            j = j.with_passed(reward == 1.0);
        }
        if let Value::Object(m) = v {
            for (k, val) in m {
                // The echo of what was sent is not evidence; everything else the server added is.
                if k == "responses_create_params" || k == "response" || k == "reward" {
                    continue;
                }
                if k != "expected_answer" && self.row().raw.get(&k) == Some(&val) {
                    continue;
                }
                j.details.insert(k, val);
            }
        }
        Ok(j)
    }

    /// The contract messages of the whole episode: the input, then every output item.
    pub(crate) fn transcript(&self) -> Vec<Message> {
        let params = self.row().params();
        let mut items = self.row().input_items();
        items.extend(self.output.iter().cloned());
        crate::responses::items_to_messages(
            params.get("instructions").and_then(Value::as_str),
            &Value::Array(items),
        )
    }

    /// The last step: `text` (when given) joins the output, `/verify` judges it all.
    pub(crate) fn final_step(&mut self, action: Value, text: Option<&str>) -> Result<Step> {
        if let Some(t) = text {
            self.push_text(t);
        }
        let j = self.verify()?;
        let mut obs = Observation::default();
        obs.info
            .insert("verify".into(), Value::Object(j.details.clone()));
        let mut info = Map::new();
        info.insert("kind".into(), json!("final"));
        let reward = j.score;
        self.judgment = Some(j);
        Ok(Step {
            action,
            observation: obs,
            reward,
            terminated: true,
            truncated: false,
            info,
        })
    }
}

/// One tool call's step: the call as the action, its output as the observation.
pub(crate) fn tool_step(call: &Value, out: &Value) -> Step {
    let text = out
        .get("output")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut msg = Message::new(Role::Tool, text.clone());
    msg.tool_call_id = out
        .get("call_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut obs = Observation {
        data: serde_json::from_str(&text).unwrap_or(Value::String(text.clone())),
        text: Some(text),
        messages: Some(vec![msg]),
        info: Map::new(),
    };
    obs.info.insert("call_id".into(), out["call_id"].clone());
    let mut info = Map::new();
    info.insert("kind".into(), json!("tool_call"));
    info.insert(
        "tool".into(),
        call.get("name").cloned().unwrap_or(Value::Null),
    );
    Step {
        action: call.clone(),
        observation: obs,
        reward: 0.0,
        terminated: false,
        truncated: false,
        info,
    }
}

/// What an action may be, for errors.
const ACTION_SHAPES: &str = "expected the reply text (a JSON string), a tool call {name, \
     arguments}, an assistant message with tool_calls, or a list of Responses output items";

/// The `function_call` items among `items`, in order.
pub(super) fn function_calls(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .cloned()
        .collect()
}

/// A tool call given as an action: a Responses `function_call` item or a contract/OpenAI
/// tool call (`{id, name, arguments}` or `{function: {name, arguments}}`).
fn call_item(v: &Value) -> Option<Value> {
    if v.get("type").and_then(Value::as_str) == Some("function_call") {
        return Some(v.clone());
    }
    let tc: ToolCall = serde_json::from_value(v.clone()).ok()?;
    Some(json!({
        "type": "function_call",
        "call_id": tc.id,
        "name": tc.name,
        "arguments": match tc.arguments { Value::String(s) => s, other => other.to_string() },
    }))
}

impl Episode for NemoEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let invalid = |reason: &str| Error::InvalidAction {
            env: self.shared.id.clone(),
            action: crate::contract::preview(action),
            reason: reason.to_string(),
        };
        let has_tools = !self.row().tools.is_empty();
        // Normalise to the assistant text and the tool calls of this turn.
        let (text, calls, extra_items): (String, Vec<Value>, Vec<Value>) = match action {
            Value::String(s) => (s.clone(), Vec::new(), Vec::new()),
            Value::Object(o) if o.contains_key("tool_calls") || o.contains_key("role") => {
                let m = Message::from_openai(action)
                    .map_err(|e| invalid(&format!("not an assistant message: {e}")))?;
                if m.role != Role::Assistant {
                    return Err(invalid("a message action must have role `assistant`"));
                }
                let calls = function_calls(&crate::responses::message_to_items(&m));
                (m.text().unwrap_or_default(), calls, Vec::new())
            }
            Value::Object(_) => match call_item(action) {
                Some(c) => (String::new(), vec![c], Vec::new()),
                None => return Err(invalid(ACTION_SHAPES)),
            },
            Value::Array(items) => {
                let rest = items
                    .iter()
                    .filter(|i| i["type"] != "function_call")
                    .cloned()
                    .collect();
                (String::new(), function_calls(items), rest)
            }
            _ => return Err(invalid(ACTION_SHAPES)),
        };
        if calls.is_empty() {
            return if let Value::Array(_) = action {
                // A whole turn without calls: its items are the final output.
                self.output.extend(extra_items);
                self.final_step(action.clone(), None)
            } else {
                self.final_step(action.clone(), Some(&text))
            };
        }
        if !has_tools {
            return Err(invalid(
                "this task has no tools; answer with the reply text",
            ));
        }
        self.output.extend(extra_items);
        if !text.is_empty() {
            self.push_text(&text);
        }
        let mut outs = Vec::new();
        for c in &calls {
            outs.push(self.run_call(c, true)?);
        }
        if outs.len() == 1 {
            return Ok(tool_step(action, &outs[0]));
        }
        let msgs: Vec<Message> = outs
            .iter()
            .map(|o| {
                let mut m = Message::new(Role::Tool, o["output"].as_str().unwrap_or(""));
                m.tool_call_id = o["call_id"].as_str().map(str::to_string);
                m
            })
            .collect();
        let mut info = Map::new();
        info.insert("kind".into(), json!("tool_calls"));
        Ok(Step {
            action: action.clone(),
            observation: Observation {
                data: Value::Array(outs),
                text: None,
                messages: Some(msgs),
                info: Map::new(),
            },
            reward: 0.0,
            terminated: false,
            truncated: false,
            info,
        })
    }

    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        // A finished episode was verified by its last step; one cut short is verified now,
        // with what it produced (as NeMo Gym's agent does at its step limit).
        match &self.judgment {
            Some(j) if steps.last().is_some_and(|s| s.done()) => Ok(j.clone()),
            _ => self.verify(),
        }
    }

    fn task(&self) -> Option<TaskRef> {
        Some(self.task.clone())
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.shared.close_session && !self.jar.is_empty() {
            let body = json!({
                "resources_session_id": self.session_id,
                "episode_id": {"rollout_id": self.session_id, "attempt": 0},
            });
            // Best effort: the episode's result does not depend on the server's cleanup.
            let _ = self
                .shared
                .server
                .post("/close_session", &body, &mut self.jar);
        }
    }
}

impl Drop for NemoEpisode {
    fn drop(&mut self) {
        self.close();
    }
}
