//! The tool loop of NeMo Gym's simple agent, run here: the model is called through the
//! recording server (Responses API, or chat completions translated), each function call is
//! posted to the resources server with the episode's cookies, its raw reply goes back as the
//! call's output, and the loop stops on a turn without calls, a truncated reply or the turn
//! limit; `/verify` then judges every output item.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::episode::{function_calls, tool_step, NemoEpisode};
use super::shared::{Api, Shared};
use crate::contract::{Message, Role, Step, TaskRef, ToolCall, Trajectory};
use crate::env::{Episode as _, RolloutOptions};
use crate::error::{Error, Result};
use crate::openai::client::{Client, RetryPolicy};
use crate::policy::ChatModel;
use crate::recorder::{Backend, ModelServer};
use crate::responses::{chat_incomplete, chat_request, items_to_messages, message_to_items};

/// One model turn: its output items and, when the reply was cut short, why.
struct Turn {
    items: Vec<Value>,
    incomplete: Option<String>,
}

/// One model call to the recording server (which retries the upstream itself).
fn post(client: &Client, url: &str, body: &Map<String, Value>) -> Result<Map<String, Value>> {
    client
        .post_for_object(url, &Value::Object(body.clone()))
        .map_err(|m| Error::Policy(format!("model call {url} failed: {m}")))
}

fn call_model(
    api: Api,
    agent: &Client,
    base: &str,
    params: &Map<String, Value>,
    input: Vec<Value>,
    model: &str,
) -> Result<Turn> {
    let mut body = params.clone();
    body.insert("input".into(), Value::Array(input));
    body.remove("stream");
    if !body.get("model").is_some_and(Value::is_string) {
        body.insert("model".into(), json!(model));
    }
    match api {
        Api::Responses => {
            let resp = post(agent, &format!("{base}/responses"), &body)?;
            let items = resp
                .get("output")
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "the model's Responses reply has no `output` list: {}",
                        super::http::clip(&Value::Object(resp.clone()).to_string(), 300)
                    ))
                })?;
            let incomplete = resp
                .get("incomplete_details")
                .filter(|d| !d.is_null())
                .map(|d| {
                    d.get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("incomplete")
                        .to_string()
                });
            Ok(Turn { items, incomplete })
        }
        Api::Chat => {
            let request = chat_request(&body, model);
            let resp = post(agent, &format!("{base}/chat/completions"), &request)?;
            let msg = resp
                .get("choices")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("message"))
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "the model's chat completion has no choices[0].message: {}",
                        super::http::clip(&Value::Object(resp.clone()).to_string(), 300)
                    ))
                })?;
            let reply = Message::from_openai(msg)?;
            Ok(Turn {
                items: message_to_items(&reply),
                incomplete: chat_incomplete(&resp),
            })
        }
    }
}

fn turn_text(items: &[Value]) -> String {
    items
        .iter()
        .filter(|i| i["type"] == "message")
        .filter_map(|i| crate::responses::content_text(&i["content"]))
        .collect::<Vec<_>>()
        .concat()
}

/// Run one tool-calling episode of row `index` (task `full`) with `model` into `traj`.
pub(super) fn run(
    shared: Arc<Shared>,
    full: TaskRef,
    model: Arc<dyn ChatModel>,
    index: usize,
    opts: &RolloutOptions,
    traj: &mut Trajectory,
) -> Result<()> {
    traj.task = Some(match traj.task.take() {
        Some(mut given) => {
            given.prompt = given.prompt.or(full.prompt.clone());
            for (k, v) in &full.metadata {
                given.metadata.entry(k.clone()).or_insert(v.clone());
            }
            given
        }
        None => full.clone(),
    });
    let mut ep = NemoEpisode::open(shared.clone(), index, full)?;
    ep.model_name = model.name();
    traj.initial_observation = Some(ep.obs.clone());
    let recording = ModelServer::global()?.record(Backend::for_model(model.clone()));
    let agent = Client::new(RetryPolicy::through_recorder());
    let limit = opts.max_steps.unwrap_or(shared.max_turns).max(1);
    let params = ep.row().params().clone();
    let input = ep.row().input_items();
    let mut steps: Vec<Step> = Vec::new();
    let result = (|| -> Result<()> {
        let mut turns = 0;
        let (last_text, stop) = loop {
            turns += 1;
            let mut sent = input.clone();
            sent.extend(ep.output.iter().cloned());
            let turn = call_model(
                shared.api,
                &agent,
                recording.base_url(),
                &params,
                sent,
                &model.name(),
            )?;
            let calls = function_calls(&turn.items);
            let text = turn_text(&turn.items);
            ep.output.extend(turn.items);
            if let Some(why) = turn.incomplete {
                break (text, format!("incomplete: {why}"));
            }
            if calls.is_empty() {
                break (text, "no_tool_calls".to_string());
            }
            for c in &calls {
                let out = ep.run_call(c, false)?;
                // The item's `id` is the model server's, fresh on every reply: the step keeps
                // what the model chose (call_id, name, arguments), so replays compare equal.
                let mut action = c.clone();
                if let Some(o) = action.as_object_mut() {
                    o.remove("id");
                }
                steps.push(tool_step(&action, &out));
            }
            if turns >= limit {
                break (text, "max_turns".to_string());
            }
        };
        let mut last = ep.final_step(Value::String(last_text), None)?;
        if stop != "no_tool_calls" {
            last.terminated = false;
            last.truncated = true;
        }
        last.info.insert("stop_reason".into(), json!(stop));
        traj.metadata.insert("stop_reason".into(), json!(stop));
        traj.metadata.insert("model_turns".into(), json!(turns));
        let judgment = ep.judge(std::slice::from_ref(&last))?;
        steps.push(last);
        traj.judgment = Some(judgment);
        Ok(())
    })();
    traj.steps = steps;
    traj.messages = ep.transcript();
    traj.model_calls = recording.take();
    ep.close();
    result
}

/// Example rollouts (`response.output` of each line) as model turns, by the task's prompt.
pub(super) fn load_replays(path: &Path) -> Result<HashMap<String, Vec<Message>>> {
    let file = path.display().to_string();
    let text = crate::limits::read_text(path, &crate::limits::TASK_FILE).map_err(|e| {
        e.into_error(format!(
            "cannot read the example rollouts {file} (the URI's `rollouts` parameter)"
        ))
    })?;
    let bad = |line: usize, field: &str, message: String| Error::Define {
        file: file.clone(),
        line,
        field: field.into(),
        message,
    };
    let mut out = HashMap::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(l)
            .map_err(|e| bad(i + 1, "<row>", format!("not valid JSON: {e}")))?;
        let params = v
            .get("responses_create_params")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(i + 1, "responses_create_params", "missing".into()))?;
        let output = v
            .pointer("/response/output")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                bad(
                    i + 1,
                    "response.output",
                    "missing; an example rollout records the model's output items".into(),
                )
            })?;
        let prompt = last_user_text(&items_to_messages(
            params.get("instructions").and_then(Value::as_str),
            params.get("input").unwrap_or(&Value::Null),
        ));
        let mut turns = Vec::new();
        let mut current: Vec<Value> = Vec::new();
        for item in output {
            if item["type"] == "function_call_output" {
                if !current.is_empty() {
                    turns.push(turn_message(&std::mem::take(&mut current)));
                }
            } else {
                current.push(item.clone());
            }
        }
        if !current.is_empty() {
            turns.push(turn_message(&current));
        }
        out.insert(prompt, turns);
    }
    Ok(out)
}

/// One model turn's items as one assistant message: text joined, tool calls in order.
fn turn_message(items: &[Value]) -> Message {
    let mut m = Message::assistant(turn_text(items));
    let calls: Vec<ToolCall> = items_to_messages(None, &Value::Array(items.to_vec()))
        .into_iter()
        .filter_map(|m| m.tool_calls)
        .flatten()
        .collect();
    if !calls.is_empty() {
        m.tool_calls = Some(calls);
    }
    m
}

fn last_user_text(msgs: &[Message]) -> String {
    msgs.iter()
        .rev()
        .find(|m| m.role == Role::User)
        .and_then(Message::text)
        .unwrap_or_default()
}

/// The replay model: the example rollout of the conversation's task, turn by turn.
pub(super) fn replay_turn(
    replays: &HashMap<String, Vec<Message>>,
    msgs: &[Message],
) -> Result<Message> {
    let prompt = last_user_text(msgs);
    let last_user = msgs.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
    let done = msgs[last_user..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    let turns = replays.get(&prompt).ok_or_else(|| {
        Error::Policy(format!(
            "no example rollout for the task `{}`",
            super::http::clip(&prompt, 80)
        ))
    })?;
    turns.get(done).cloned().ok_or_else(|| {
        Error::Policy(format!(
            "the example rollout of `{}` has {} model turns; turn {} was asked for",
            super::http::clip(&prompt, 80),
            turns.len(),
            done + 1
        ))
    })
}
