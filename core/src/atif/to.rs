//! Trajectory -> ATIF v1.7.

use serde_json::{json, Value};

use super::schema::*;
use super::time::to_iso;
use crate::contract::{JsonMap, Message, ModelCall, Role, Trajectory};

/// Who the exported trajectories say acted, and which run they belong to.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// `session_id` of every document (NeMo Gym: the evaluation run).
    pub session_id: String,
    /// `agent.name`.
    pub agent_name: String,
    /// `agent.version`.
    pub agent_version: String,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            session_id: "nenyax".into(),
            agent_name: "nenyax".into(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

fn nenyax_extra(v: Value) -> Option<JsonMap> {
    let mut m = JsonMap::new();
    m.insert("nenyax".into(), v);
    Some(m)
}

/// ATIF content: a string stays one, OpenAI text parts become ATIF text parts, null is "".
fn content(v: &Value) -> Value {
    match v {
        Value::Null => Value::String(String::new()),
        Value::Array(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p.get("text").and_then(Value::as_str) {
                    Some(t) => json!({"type": "text", "text": t}),
                    None => p.clone(),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn step(id: usize, source: AtifSource, message: Value) -> AtifStep {
    AtifStep {
        step_id: id as u64,
        timestamp: None,
        source,
        model_name: None,
        reasoning_effort: None,
        message,
        reasoning_content: None,
        tool_calls: None,
        observation: None,
        metrics: None,
        is_copied_context: None,
        llm_call_count: None,
        extra: None,
    }
}

fn tool_call(c: &crate::contract::ToolCall, i: usize) -> AtifToolCall {
    // ATIF arguments are an object; a model's raw argument string is kept to restore it.
    let (arguments, raw) = match &c.arguments {
        Value::Object(m) => (m.clone(), None),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => (m, Some(s.clone())),
            _ => (JsonMap::new(), Some(s.clone())),
        },
        other => (JsonMap::new(), Some(other.to_string())),
    };
    AtifToolCall {
        tool_call_id: c.id.clone().unwrap_or_else(|| format!("call_{i}")),
        function_name: c.name.clone(),
        arguments,
        extra: raw.and_then(|r| nenyax_extra(json!({"arguments": r}))),
    }
}

fn usage(call: &ModelCall, key: &str) -> Option<u64> {
    call.response.as_ref()?.get("usage")?.get(key)?.as_u64()
}

fn ids(v: &Option<Vec<i64>>) -> Option<Vec<u64>> {
    v.as_ref()?.iter().map(|&i| u64::try_from(i).ok()).collect()
}

/// Fill an agent step from the model call that produced it.
fn apply_call(s: &mut AtifStep, call: &ModelCall) {
    s.timestamp = call.started_at.map(to_iso);
    s.model_name = call
        .response
        .as_ref()
        .and_then(|r| r.get("model"))
        .or_else(|| call.request.get("model"))
        .and_then(Value::as_str)
        .map(str::to_string);
    s.llm_call_count = Some(1);
    let metrics = AtifStepMetrics {
        prompt_tokens: usage(call, "prompt_tokens").or_else(|| usage(call, "input_tokens")),
        completion_tokens: usage(call, "completion_tokens")
            .or_else(|| usage(call, "output_tokens")),
        prompt_token_ids: ids(&call.prompt_token_ids),
        completion_token_ids: ids(&call.completion_token_ids),
        logprobs: call
            .completion_logprobs
            .clone()
            .filter(|l| l.iter().all(|x| x.is_finite())),
        ..AtifStepMetrics::default()
    };
    let mut extra = JsonMap::new();
    // `total_tokens` where NeMo Gym's exporter (Relay's extension shape) puts it.
    if let Some(total) = usage(call, "total_tokens") {
        extra.insert("total_tokens".into(), json!(total));
    }
    if let Some(l) = call.latency_s {
        extra.insert("nenyax".into(), json!({"latency_s": l}));
    }
    let metrics = AtifStepMetrics {
        extra: (!extra.is_empty()).then_some(extra),
        ..metrics
    };
    if metrics != AtifStepMetrics::default() {
        s.metrics = Some(metrics);
    }
}

/// Steps of a chat episode: one per system/user message, one agent step per assistant message
/// with the tool results that answer it as its observation.
fn chat_steps(traj: &Trajectory) -> Vec<AtifStep> {
    let calls: Vec<&ModelCall> = traj
        .model_calls
        .iter()
        .filter(|c| c.error.is_none() && c.response.is_some())
        .collect();
    let assistants = traj
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    // The last assistant messages are the calls' replies; earlier ones came with the prompt.
    let copied = assistants.saturating_sub(calls.len());
    let mut steps: Vec<AtifStep> = Vec::new();
    let mut seen_assistant = 0;
    for m in &traj.messages {
        let n = steps.len() + 1;
        match m.role {
            Role::System | Role::User => {
                let src = if m.role == Role::System {
                    AtifSource::System
                } else {
                    AtifSource::User
                };
                steps.push(step(n, src, content(&m.content)));
            }
            Role::Assistant => {
                let mut s = step(n, AtifSource::Agent, content(&m.content));
                s.reasoning_content = m
                    .extra
                    .get("reasoning_content")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let calls_here = m.tool_calls.as_deref().unwrap_or_default();
                if !calls_here.is_empty() {
                    s.tool_calls = Some(
                        calls_here
                            .iter()
                            .enumerate()
                            .map(|(i, c)| tool_call(c, i))
                            .collect(),
                    );
                }
                if m.content.is_null() {
                    s.extra = nenyax_extra(json!({"content_null": true}));
                }
                if seen_assistant < copied {
                    s.is_copied_context = Some(true);
                } else if let Some(call) = calls.get(seen_assistant - copied) {
                    apply_call(&mut s, call);
                }
                seen_assistant += 1;
                steps.push(s);
            }
            Role::Tool => tool_result(&mut steps, m),
        }
    }
    steps
}

/// A tool message becomes a result on the agent step that called it.
fn tool_result(steps: &mut Vec<AtifStep>, m: &Message) {
    let called = |s: &AtifStep| {
        s.tool_calls.as_ref().is_some_and(|cs| {
            cs.iter()
                .any(|c| Some(&c.tool_call_id) == m.tool_call_id.as_ref())
        })
    };
    let result = AtifObservationResult {
        source_call_id: m.tool_call_id.clone(),
        content: Some(content(&m.content)),
        subagent_trajectory_ref: None,
        extra: None,
    };
    match steps.iter_mut().rev().find(|s| called(s)) {
        Some(s) => s
            .observation
            .get_or_insert_with(|| AtifObservation {
                results: Vec::new(),
            })
            .results
            .push(result),
        // A result for no recorded call: environment feedback on a system step of its own.
        None => {
            let mut s = step(
                steps.len() + 1,
                AtifSource::System,
                Value::String(String::new()),
            );
            s.observation = Some(AtifObservation {
                results: vec![AtifObservationResult {
                    source_call_id: None,
                    ..result
                }],
            });
            steps.push(s);
        }
    }
}

fn text_of(v: &Value) -> Value {
    match v {
        Value::String(_) => v.clone(),
        Value::Null => Value::String(String::new()),
        other => Value::String(other.to_string()),
    }
}

/// Steps of a step-mode episode without chat: the first observation as a user step, each
/// action as an agent step observing what came back.
fn action_steps(traj: &Trajectory) -> Vec<AtifStep> {
    let mut steps = Vec::new();
    if let Some(o) = &traj.initial_observation {
        let text = o
            .text
            .clone()
            .map_or_else(|| text_of(&o.data), Value::String);
        steps.push(step(1, AtifSource::User, text));
    }
    for (i, st) in traj.steps.iter().enumerate() {
        let mut s = step(steps.len() + 1, AtifSource::Agent, text_of(&st.action));
        s.llm_call_count = Some(0);
        let seen = st
            .observation
            .text
            .clone()
            .map_or_else(|| text_of(&st.observation.data), Value::String);
        s.observation = Some(AtifObservation {
            results: vec![AtifObservationResult {
                source_call_id: None,
                content: Some(seen),
                subagent_trajectory_ref: None,
                extra: None,
            }],
        });
        s.extra = nenyax_extra(
            json!({"step": i, "reward": st.reward, "terminated": st.terminated, "truncated": st.truncated}),
        );
        steps.push(s);
    }
    steps
}

/// `traj` as an ATIF v1.7 document. The judgment, task, seed and error travel in
/// `extra.nenyax`, since ATIF has no reward field; ids follow NeMo Gym's
/// `<session>:<task>:<rollout>` when `rollout` is given.
pub fn to_atif(traj: &Trajectory, opts: &ExportOptions, rollout: Option<u64>) -> AtifTrajectory {
    let mut steps = if traj.messages.is_empty() {
        action_steps(traj)
    } else {
        chat_steps(traj)
    };
    if steps.is_empty() {
        // ATIF needs one step; an episode that failed before any exchange still says so.
        steps.push(step(
            1,
            AtifSource::System,
            Value::String(traj.error.clone().unwrap_or_default()),
        ));
    }
    let agent_steps: Vec<&AtifStep> = steps
        .iter()
        .filter(|s| s.source == AtifSource::Agent && s.is_copied_context.is_none())
        .collect();
    let total = |f: fn(&AtifStepMetrics) -> Option<u64>| -> Option<u64> {
        agent_steps
            .iter()
            .map(|s| s.metrics.as_ref().and_then(f))
            .sum()
    };
    let models: std::collections::BTreeSet<&str> = agent_steps
        .iter()
        .filter_map(|s| s.model_name.as_deref())
        .collect();
    let task = traj.task.as_ref().map(|t| t.id.clone());
    let trajectory_id = match rollout {
        Some(r) => format!("{}:{}:{r}", opts.session_id, task.as_deref().unwrap_or("-")),
        None => format!("{}:{:016x}", opts.session_id, crate::contract::fresh_id()),
    };
    AtifTrajectory {
        schema_version: SCHEMA_VERSION.into(),
        session_id: Some(opts.session_id.clone()),
        trajectory_id: Some(trajectory_id),
        agent: AtifAgent {
            name: opts.agent_name.clone(),
            version: opts.agent_version.clone(),
            model_name: (models.len() == 1).then(|| models.iter().next().unwrap().to_string()),
            tool_definitions: None,
            extra: None,
        },
        final_metrics: Some(AtifFinalMetrics {
            total_prompt_tokens: total(|m| m.prompt_tokens),
            total_completion_tokens: total(|m| m.completion_tokens),
            total_steps: Some(steps.len() as u64),
            ..AtifFinalMetrics::default()
        }),
        steps,
        notes: None,
        continued_trajectory_ref: None,
        subagent_trajectories: None,
        extra: nenyax_extra(json!({
            "env_id": traj.env_id,
            "mode": traj.mode,
            "protocol": traj.protocol,
            "task": traj.task,
            "seed": traj.seed,
            "judgment": traj.judgment,
            "error": traj.error,
            "started_at": traj.started_at,
            "duration_s": traj.duration_s,
            "metadata": traj.metadata,
        })),
    }
}
