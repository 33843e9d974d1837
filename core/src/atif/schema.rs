//! ATIF v1.7 documents as serde types: the fields of Harbor's `harbor.models.trajectories` and
//! NeMo Gym 0.7.0's `nemo_gym.atif_v1_7`, with unknown fields refused as both of them do.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::JsonMap;

/// The version this module writes.
pub const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// One ATIF trajectory document (`agent/trajectory.json` in Harbor, `<task>-<rollout>.json` in
/// NeMo Gym's export).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifTrajectory {
    /// `ATIF-v1.x`.
    pub schema_version: String,
    /// The run the trajectory belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// This document's own id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory_id: Option<String>,
    /// Who acted.
    pub agent: AtifAgent,
    /// The interaction, numbered from 1.
    pub steps: Vec<AtifStep>,
    /// Free-form notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Totals over the steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_metrics: Option<AtifFinalMetrics>,
    /// The file that continues this trajectory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_trajectory_ref: Option<String>,
    /// Embedded subagent trajectories (kept verbatim, not imported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_trajectories: Option<Vec<Value>>,
    /// Producer-specific metadata (`nenyax`, `nemo_gym`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}

/// The agent configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifAgent {
    /// Agent name.
    pub name: String,
    /// Agent version.
    pub version: String,
    /// The model, when every step used the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// Tool schemas offered to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_definitions: Option<Vec<Value>>,
    /// Producer-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}

/// Who produced a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AtifSource {
    /// Instructions.
    System,
    /// The user (or environment speaking as one).
    User,
    /// The agent: an LLM reply, its tool calls and what they returned.
    Agent,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifStep {
    /// Position, from 1.
    pub step_id: u64,
    /// ISO 8601 time of the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Who produced it.
    pub source: AtifSource,
    /// The model that produced it (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// Reasoning effort requested (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<Value>,
    /// A string or a list of `{type: text|image, ...}` parts.
    pub message: Value,
    /// The model's reasoning text (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<AtifToolCall>>,
    /// What came back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<AtifObservation>,
    /// Token counts, ids and logprobs of the step's LLM call (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<AtifStepMetrics>,
    /// Whether this step repeats earlier context rather than new work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_copied_context: Option<bool>,
    /// LLM calls behind the step; 0 for deterministic dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_call_count: Option<u64>,
    /// Producer-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifToolCall {
    /// Id that observations refer to.
    pub tool_call_id: String,
    /// The tool.
    pub function_name: String,
    /// Arguments, always an object in ATIF.
    pub arguments: JsonMap,
    /// Producer-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}

/// What the environment returned after a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifObservation {
    /// One result per tool call (or free-standing feedback).
    pub results: Vec<AtifObservationResult>,
}

/// One observation result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifObservationResult {
    /// The tool call this answers; absent for feedback not tied to a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_call_id: Option<String>,
    /// A string or content parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// References to subagent trajectories (kept verbatim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_trajectory_ref: Option<Vec<Value>>,
    /// Producer-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}

/// Per-step LLM metrics.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifStepMetrics {
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Cached prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Cost in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Token ids sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u64>>,
    /// Token ids it produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u64>>,
    /// Log-probabilities of the completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f64>>,
    /// Producer-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}

/// Totals over a trajectory.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtifFinalMetrics {
    /// Sum of prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_prompt_tokens: Option<u64>,
    /// Sum of completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_completion_tokens: Option<u64>,
    /// Sum of cached tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cached_tokens: Option<u64>,
    /// Total cost in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    /// Number of steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<u64>,
    /// Producer-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonMap>,
}
