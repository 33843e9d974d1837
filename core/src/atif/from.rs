//! ATIF (v1.x, from Nenyax, NeMo Gym, Harbor or any other producer) -> Trajectory.

use serde_json::{json, Value};

use super::schema::*;
use super::time::from_iso;
use crate::contract::{
    now_unix, JsonMap, JudgeSource, Judgment, Message, Mode, ModelCall, Observation, Role, Step,
    TaskRef, ToolCall, Trajectory,
};
use crate::error::{Error, Result};

fn nenyax(extra: &Option<JsonMap>) -> Option<&JsonMap> {
    extra.as_ref()?.get("nenyax")?.as_object()
}

/// OpenAI content from ATIF content: strings stay, text parts become `{type: text}` parts.
fn content(v: &Value) -> Value {
    match v {
        Value::Array(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p.get("text") {
                    Some(t) => json!({"type": "text", "text": t}),
                    None => p.clone(),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn check(doc: &AtifTrajectory) -> Result<()> {
    if !doc.schema_version.starts_with("ATIF-v1.") {
        return Err(Error::Protocol(format!(
            "not an ATIF v1 document: schema_version is `{}` (expected ATIF-v1.0 to ATIF-v1.7)",
            doc.schema_version
        )));
    }
    if doc.steps.is_empty() {
        return Err(Error::Protocol("ATIF trajectory has no steps".into()));
    }
    for (i, s) in doc.steps.iter().enumerate() {
        if s.step_id != i as u64 + 1 {
            return Err(Error::Protocol(format!(
                "ATIF steps[{i}].step_id is {}, expected {} (sequential from 1)",
                s.step_id,
                i + 1
            )));
        }
        let ids: Vec<&str> = s
            .tool_calls
            .iter()
            .flatten()
            .map(|c| c.tool_call_id.as_str())
            .collect();
        for r in s.observation.iter().flat_map(|o| &o.results) {
            if let Some(id) = r.source_call_id.as_deref().filter(|id| !ids.contains(id)) {
                return Err(Error::Protocol(format!(
                    "ATIF step {} has a result for tool call `{id}`, which that step did not make",
                    s.step_id
                )));
            }
        }
    }
    Ok(())
}

fn assistant(s: &AtifStep) -> Message {
    // ATIF writes "" for a reply that only calls tools; the chat wire says null.
    let null = nenyax(&s.extra).is_some_and(|n| n.get("content_null") == Some(&json!(true)))
        || (s.message == json!("") && s.tool_calls.as_ref().is_some_and(|c| !c.is_empty()));
    let mut m = Message::assistant("");
    m.content = if null {
        Value::Null
    } else {
        content(&s.message)
    };
    if let Some(r) = &s.reasoning_content {
        m.extra
            .insert("reasoning_content".into(), Value::String(r.clone()));
    }
    if let Some(calls) = &s.tool_calls {
        m.tool_calls = Some(
            calls
                .iter()
                .map(|c| ToolCall {
                    id: Some(c.tool_call_id.clone()),
                    name: c.function_name.clone(),
                    // The model's own argument string, when the exporter kept it.
                    arguments: nenyax(&c.extra)
                        .and_then(|n| n.get("arguments"))
                        .cloned()
                        .unwrap_or_else(|| Value::Object(c.arguments.clone())),
                })
                .collect(),
        );
    }
    m
}

/// The model call behind an agent step, rebuilt from what ATIF keeps of it.
fn model_call(s: &AtifStep, reply: &Message, prompt: &[Message]) -> ModelCall {
    let metrics = s.metrics.clone().unwrap_or_default();
    let model = s.model_name.clone().map_or(Value::Null, Value::String);
    let mut usage = JsonMap::new();
    for (k, v) in [
        ("prompt_tokens", metrics.prompt_tokens),
        ("completion_tokens", metrics.completion_tokens),
    ] {
        if let Some(v) = v {
            usage.insert(k.into(), json!(v));
        }
    }
    let finish = if reply.tool_calls.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let mut response = json!({
        "model": model,
        "choices": [{"index": 0, "message": reply.to_openai(), "finish_reason": finish}],
    });
    if !usage.is_empty() {
        response["usage"] = Value::Object(usage);
    }
    let ids = |v: Option<Vec<u64>>| v.map(|v| v.into_iter().map(|i| i as i64).collect());
    ModelCall {
        request: json!({"model": model, "messages": prompt.iter().map(Message::to_openai).collect::<Vec<_>>()})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        response: response.as_object().cloned(),
        error: None,
        latency_s: nenyax(&metrics.extra).and_then(|n| n.get("latency_s")?.as_f64()),
        started_at: s.timestamp.as_deref().and_then(from_iso),
        prompt_token_ids: ids(metrics.prompt_token_ids),
        completion_token_ids: ids(metrics.completion_token_ids),
        completion_logprobs: metrics.logprobs,
    }
}

fn observation_messages(s: &AtifStep, out: &mut Vec<Message>) {
    for r in s.observation.iter().flat_map(|o| &o.results) {
        let text = r.content.as_ref().map_or(Value::Null, content);
        out.push(match &r.source_call_id {
            Some(id) => Message {
                role: Role::Tool,
                content: text,
                tool_calls: None,
                tool_call_id: Some(id.clone()),
                extra: JsonMap::new(),
            },
            // Feedback tied to no call (a terminal's output) is what the agent reads next.
            None => Message {
                content: text,
                ..Message::user("")
            },
        });
    }
}

/// A step-mode episode exported by [`to_atif`](super::to_atif): actions and observations back.
fn restore_steps(doc: &AtifTrajectory, traj: &mut Trajectory) {
    let text = |v: &Value| v.as_str().map(str::to_string);
    if let Some(first) = doc.steps.first().filter(|s| s.source == AtifSource::User) {
        traj.initial_observation = text(&first.message).map(Observation::text);
    }
    for s in doc.steps.iter().filter(|s| s.source == AtifSource::Agent) {
        let n = nenyax(&s.extra).cloned().unwrap_or_default();
        let seen = s
            .observation
            .iter()
            .flat_map(|o| &o.results)
            .find_map(|r| r.content.as_ref().and_then(text));
        traj.steps.push(Step {
            action: s.message.clone(),
            observation: seen.map(Observation::text).unwrap_or_default(),
            reward: n.get("reward").and_then(Value::as_f64).unwrap_or(0.0),
            terminated: n.get("terminated") == Some(&json!(true)),
            truncated: n.get("truncated") == Some(&json!(true)),
            info: JsonMap::new(),
        });
    }
}

/// Where a recorded reward came from, for the imported judgment's `details.recorded_by`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedReward {
    /// The reward.
    pub score: f64,
    /// What recorded it (e.g. `harbor:verifier/reward.txt`).
    pub recorded_by: String,
}

/// Read an ATIF document into a Trajectory: messages, tool calls and results, one model call
/// per LLM agent step (with token ids and logprobs where present). The judgment is `reward`
/// when given, else the Nenyax judgment carried in `extra.nenyax`, else none (re-judge it).
pub fn from_atif(doc: &AtifTrajectory, reward: Option<&RecordedReward>) -> Result<Trajectory> {
    check(doc)?;
    let ours = nenyax(&doc.extra).cloned().unwrap_or_default();
    let get = |k: &str| ours.get(k).cloned().filter(|v| !v.is_null());
    let gym_source = doc
        .extra
        .as_ref()
        .and_then(|e| e.get("nemo_gym")?.get("source").cloned());
    let task =
        match get("task") {
            Some(t) => Some(serde_json::from_value::<TaskRef>(t).map_err(|e| {
                Error::Protocol(format!("ATIF extra.nenyax.task is not a task: {e}"))
            })?),
            None => gym_source.as_ref().and_then(|s| {
                let mut t = TaskRef::new(s.get("task_index")?.to_string());
                t.metadata.insert("nemo_gym".into(), s.clone());
                Some(t)
            }),
        };
    let mode = get("mode")
        .and_then(|m| serde_json::from_value(m).ok())
        .unwrap_or(Mode::Rollout);
    let env_id = get("env_id")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("atif:{}", doc.agent.name));
    let mut traj = Trajectory::start(&env_id, mode, task, get("seed").and_then(|s| s.as_i64()));
    traj.started_at = get("started_at")
        .and_then(|v| v.as_f64())
        .or_else(|| {
            doc.steps
                .iter()
                .find_map(|s| s.timestamp.as_deref().and_then(from_iso))
        })
        .unwrap_or_else(now_unix);
    traj.duration_s = get("duration_s").and_then(|v| v.as_f64());
    traj.error = get("error").and_then(|v| v.as_str().map(str::to_string));
    if let Some(Value::Object(m)) = get("metadata") {
        traj.metadata = m;
    }
    let step_mode = doc
        .steps
        .iter()
        .filter(|s| s.source == AtifSource::Agent)
        .all(|s| nenyax(&s.extra).is_some_and(|n| n.contains_key("step")))
        && doc.steps.iter().any(|s| s.source == AtifSource::Agent);
    if step_mode {
        restore_steps(doc, &mut traj);
    } else {
        for s in &doc.steps {
            let text = content(&s.message);
            match s.source {
                AtifSource::System | AtifSource::User => {
                    let empty = text.as_str() == Some("");
                    if !(empty && s.observation.is_some()) {
                        let role = if s.source == AtifSource::System {
                            Role::System
                        } else {
                            Role::User
                        };
                        traj.messages.push(Message {
                            content: text,
                            ..Message::new(role, "")
                        });
                    }
                }
                AtifSource::Agent => {
                    let reply = assistant(s);
                    if s.llm_call_count != Some(0) && s.is_copied_context != Some(true) {
                        traj.model_calls.push(model_call(s, &reply, &traj.messages));
                    }
                    traj.messages.push(reply);
                }
            }
            observation_messages(s, &mut traj.messages);
        }
    }
    traj.judgment = match (reward, get("judgment")) {
        (Some(r), _) => Some(
            Judgment::new(
                r.score,
                JudgeSource::External,
                format!("atif:{}", doc.agent.name),
            )?
            .with_detail("recorded_by", r.recorded_by.clone()),
        ),
        (None, Some(j)) => Some(serde_json::from_value(j).map_err(|e| {
            Error::Protocol(format!("ATIF extra.nenyax.judgment is not a judgment: {e}"))
        })?),
        (None, None) => None,
    };
    let mut foreign = doc.extra.clone().unwrap_or_default();
    foreign.remove("nenyax");
    traj.metadata.insert(
        "atif".into(),
        json!({
            "schema_version": doc.schema_version,
            "session_id": doc.session_id,
            "trajectory_id": doc.trajectory_id,
            "agent": doc.agent,
            "final_metrics": doc.final_metrics,
            "notes": doc.notes,
            "continued_trajectory_ref": doc.continued_trajectory_ref,
            "subagent_trajectories": doc.subagent_trajectories,
            "extra": foreign,
        }),
    );
    Ok(traj)
}
