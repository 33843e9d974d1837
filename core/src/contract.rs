//! The Nenyax contract: the data every environment exchanges, whatever its native format.
//!
//! Field names and JSON shapes are interchangeable with the Python reference (`nenyax==0.1.0a1`):
//! every field is written (nulls included) so that either side can read what the other wrote.
//! See docs/protocol.md.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// Version of the contract; minor versions only add optional fields.
pub const PROTOCOL_VERSION: &str = "0.1";

/// A JSON object, the shape of every free-form map in the contract.
pub type JsonMap = Map<String, Value>;

fn protocol_default() -> String {
    PROTOCOL_VERSION.to_string()
}

/// How an environment is driven; every native format maps to exactly one mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The caller drives each step through `session()` / `act()`.
    Step,
    /// The environment runs its own loop against a model endpoint.
    Rollout,
    /// An agent works in a sandbox and tests grade the end state.
    Task,
}

impl Mode {
    /// The lowercase label used on the wire and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Step => "step",
            Mode::Rollout => "rollout",
            Mode::Task => "task",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can go wrong in the world when an action is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Actions have no effect outside the episode.
    #[default]
    None,
    /// Effects can be undone.
    Reversible,
    /// Effects cannot be undone.
    Irreversible,
}

/// How strongly a sandbox separates untrusted actions from the host, weakest first.
///
/// The derived order is the isolation order, so `a >= b` reads "a satisfies b".
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// No sandbox: pure functions or simulated state.
    #[default]
    None,
    /// A separate OS process with resource limits.
    Process,
    /// A namespaced process with a private filesystem view.
    Jail,
    /// A container with its own filesystem and network.
    Container,
    /// A hardware-virtualised guest kernel.
    Microvm,
}

impl Isolation {
    /// True when this level is at least as strong as `required`.
    pub fn satisfies(self, required: Isolation) -> bool {
        self >= required
    }
}

/// When rewards arrive during an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardTiming {
    /// Every step may carry reward.
    PerStep,
    /// Only the end of the episode is scored.
    #[default]
    Terminal,
}

/// Something an environment needs from the machine it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Requirement {
    /// A container engine.
    Docker,
    /// Network access beyond loopback.
    Network,
    /// A GPU.
    Gpu,
    /// An OpenAI-compatible model endpoint.
    ModelEndpoint,
    /// A secret key for a hosted service.
    ApiKey,
}

/// How model tokens are captured for training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenCapture {
    /// Not captured.
    #[default]
    None,
    /// Captured by the Nenyax recording proxy.
    Proxy,
    /// Captured by the environment itself.
    Native,
}

/// What an environment can honestly do; drivers must never over-claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Capabilities {
    /// The same situation can be recreated from a seed or task id.
    pub resettable: bool,
    /// A session can be forked mid-episode.
    pub branchable: bool,
    /// Upper bound on concurrent sessions; `None` means unknown or unbounded.
    pub max_parallel: Option<u64>,
    /// Number of acting participants.
    pub participants: u32,
    /// Observations render as text and actions are accepted as text (LLM-drivable).
    pub text: bool,
    /// When rewards arrive.
    pub reward_timing: RewardTiming,
    /// Actions touch the real world.
    pub real_world: bool,
    /// Consequence of actions.
    pub risk: Risk,
    /// What the machine must provide.
    pub requires: Vec<Requirement>,
    /// Minimum isolation the environment's actions need.
    pub isolation: Isolation,
    /// How model tokens are captured.
    pub token_capture: TokenCapture,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            resettable: true,
            branchable: false,
            max_parallel: None,
            participants: 1,
            text: false,
            reward_timing: RewardTiming::Terminal,
            real_world: false,
            risk: Risk::None,
            requires: Vec::new(),
            isolation: Isolation::None,
            token_capture: TokenCapture::None,
        }
    }
}

/// Identity and contract of a loaded environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Canonical URI, e.g. `builtin:arithmetic?size=100`.
    pub id: String,
    /// Contract version this manifest was written with.
    #[serde(default = "protocol_default")]
    pub protocol: String,
    /// Short human name.
    pub name: String,
    /// Native format the driver translated from.
    pub source_format: String,
    /// How the environment is driven.
    pub mode: Mode,
    /// What the environment can do.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Version of the native environment, when known.
    #[serde(default)]
    pub version: Option<String>,
    /// Licence of the native environment, when known.
    #[serde(default)]
    pub license: Option<String>,
    /// One-paragraph description.
    #[serde(default)]
    pub description: Option<String>,
    /// JSON-Schema-like description of actions.
    #[serde(default)]
    pub action_schema: Option<JsonMap>,
    /// JSON-Schema-like description of observations.
    #[serde(default)]
    pub observation_schema: Option<JsonMap>,
    /// Number of enumerable tasks; `None` when unknown or unbounded.
    #[serde(default)]
    pub num_tasks: Option<u64>,
    /// Driver-specific facts.
    #[serde(default)]
    pub extra: JsonMap,
}

impl Manifest {
    /// A manifest with the given identity and default capabilities.
    pub fn new(id: impl Into<String>, name: impl Into<String>, format: &str, mode: Mode) -> Self {
        Manifest {
            id: id.into(),
            protocol: protocol_default(),
            name: name.into(),
            source_format: format.to_string(),
            mode,
            capabilities: Capabilities::default(),
            version: None,
            license: None,
            description: None,
            action_schema: None,
            observation_schema: None,
            num_tasks: None,
            extra: JsonMap::new(),
        }
    }
}

/// A pointer to one concrete situation in an environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRef {
    /// Stable identifier within the environment.
    pub id: String,
    /// Split the task belongs to, when the environment has splits.
    #[serde(default)]
    pub split: Option<String>,
    /// The task's prompt, when it has one.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Everything else known about the task (e.g. the expected `answer`).
    #[serde(default)]
    pub metadata: JsonMap,
}

impl TaskRef {
    /// A task with only an id.
    pub fn new(id: impl Into<String>) -> Self {
        TaskRef {
            id: id.into(),
            split: None,
            prompt: None,
            metadata: JsonMap::new(),
        }
    }
}

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

/// What the acting policy is allowed to see.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Observation {
    /// The native observation as JSON.
    #[serde(default)]
    pub data: Value,
    /// Text rendering, present when the environment is text-capable.
    #[serde(default)]
    pub text: Option<String>,
    /// Chat-shaped rendering, when the environment is conversational.
    #[serde(default)]
    pub messages: Option<Vec<Message>>,
    /// Side information (task id, feedback) that is not part of the observation proper.
    #[serde(default)]
    pub info: JsonMap,
}

impl Observation {
    /// A text observation.
    pub fn text(text: impl Into<String>) -> Self {
        Observation {
            text: Some(text.into()),
            ..Observation::default()
        }
    }
}

/// One transition in a step-mode episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The action taken.
    pub action: Value,
    /// What came back.
    pub observation: Observation,
    /// Reward for this transition; always finite.
    #[serde(default)]
    pub reward: f64,
    /// The episode reached a terminal state.
    #[serde(default)]
    pub terminated: bool,
    /// The episode was cut short (step limit).
    #[serde(default)]
    pub truncated: bool,
    /// Side information.
    #[serde(default)]
    pub info: JsonMap,
}

impl Step {
    /// True when the episode ended, by termination or truncation.
    pub fn done(&self) -> bool {
        self.terminated || self.truncated
    }
}

/// One request/response pair between an environment and a model endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// The chat-completions request body as sent.
    pub request: JsonMap,
    /// The raw response body, when one came back.
    #[serde(default)]
    pub response: Option<JsonMap>,
    /// Why the call failed, when it did.
    #[serde(default)]
    pub error: Option<String>,
    /// Wall time of the call in seconds.
    #[serde(default)]
    pub latency_s: Option<f64>,
    /// Prompt token ids, when the upstream returned them.
    #[serde(default)]
    pub prompt_token_ids: Option<Vec<i64>>,
    /// Completion token ids, when the upstream returned them.
    #[serde(default)]
    pub completion_token_ids: Option<Vec<i64>>,
    /// Per-token log-probabilities of the completion, when returned.
    #[serde(default)]
    pub completion_logprobs: Option<Vec<f64>>,
}

impl ModelCall {
    /// Copy token ids and logprobs from a vLLM/SGLang/OpenAI-style response; never re-tokenize.
    pub fn extract_tokens(&mut self) {
        let Some(resp) = &self.response else { return };
        let choice = resp
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        let ids = |v: Option<&Value>| -> Option<Vec<i64>> {
            v?.as_array()?.iter().map(Value::as_i64).collect()
        };
        self.prompt_token_ids = ids(resp.get("prompt_token_ids"))
            .or_else(|| ids(choice.and_then(|c| c.get("prompt_token_ids"))));
        self.completion_token_ids = ids(choice.and_then(|c| c.get("token_ids")));
        let logprobs = choice.and_then(|c| c.get("logprobs"));
        // Chat: logprobs.content[].logprob; completions: logprobs.token_logprobs[].
        self.completion_logprobs = logprobs
            .and_then(|l| l.get("content"))
            .and_then(Value::as_array)
            .map(|toks| {
                toks.iter()
                    .map(|t| t.get("logprob").and_then(Value::as_f64).unwrap_or(0.0))
                    .collect()
            })
            .or_else(|| {
                let toks = logprobs?.get("token_logprobs")?.as_array()?;
                Some(toks.iter().map(|t| t.as_f64().unwrap_or(0.0)).collect())
            });
    }
}

/// Who produced a judgment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgeSource {
    /// The environment's own reward.
    #[default]
    Env,
    /// A programmatic verifier.
    Verifier,
    /// A rubric (LLM or weighted criteria).
    Rubric,
    /// Tests run against the end state.
    Tests,
    /// A person.
    Human,
    /// Anything else.
    External,
}

/// How good an episode was, and on whose authority. The score is always finite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "JudgmentWire")]
pub struct Judgment {
    /// Primary scalar reward for the episode.
    pub score: f64,
    /// Whether the episode counts as a success, when the judge decides that.
    pub passed: Option<bool>,
    /// Named parts of the score.
    pub components: Map<String, Value>,
    /// Kind of authority behind the score.
    pub source: JudgeSource,
    /// Identifier of whatever produced the score.
    pub judge: Option<String>,
    /// Evidence (what was extracted, what was expected).
    pub details: JsonMap,
}

#[derive(Deserialize)]
struct JudgmentWire {
    score: f64,
    #[serde(default)]
    passed: Option<bool>,
    #[serde(default)]
    components: Map<String, Value>,
    #[serde(default)]
    source: JudgeSource,
    #[serde(default)]
    judge: Option<String>,
    #[serde(default)]
    details: JsonMap,
}

impl TryFrom<JudgmentWire> for Judgment {
    type Error = String;
    fn try_from(w: JudgmentWire) -> std::result::Result<Self, String> {
        if !w.score.is_finite() {
            return Err(format!("judgment score must be finite, got {}", w.score));
        }
        for (k, v) in &w.components {
            if !v.as_f64().is_some_and(f64::is_finite) {
                return Err(format!(
                    "judgment component `{k}` must be a finite number, got {v}"
                ));
            }
        }
        Ok(Judgment {
            score: w.score,
            passed: w.passed,
            components: w.components,
            source: w.source,
            judge: w.judge,
            details: w.details,
        })
    }
}

impl Judgment {
    /// A judgment with the given score; a NaN or infinite score is a typed error naming the judge.
    pub fn new(score: f64, source: JudgeSource, judge: impl Into<String>) -> Result<Self> {
        let judge = judge.into();
        if !score.is_finite() {
            return Err(Error::NonFiniteScore { judge, score });
        }
        Ok(Judgment {
            score,
            passed: None,
            components: Map::new(),
            source,
            judge: Some(judge),
            details: JsonMap::new(),
        })
    }

    /// Set `passed`.
    pub fn with_passed(mut self, passed: bool) -> Self {
        self.passed = Some(passed);
        self
    }

    /// Add a detail.
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }
}

/// The complete, judged record of one episode: the unit trainers consume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Id of the environment that produced it.
    pub env_id: String,
    /// Mode of that environment.
    pub mode: Mode,
    /// Contract version.
    #[serde(default = "protocol_default")]
    pub protocol: String,
    /// The task played, when known.
    #[serde(default)]
    pub task: Option<TaskRef>,
    /// The seed used.
    #[serde(default)]
    pub seed: Option<i64>,
    /// First observation (step mode).
    #[serde(default)]
    pub initial_observation: Option<Observation>,
    /// Transitions (step mode).
    #[serde(default)]
    pub steps: Vec<Step>,
    /// The conversation, when a chat model acted.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Every model call, with token ids and logprobs where the upstream returned them.
    #[serde(default)]
    pub model_calls: Vec<ModelCall>,
    /// The verdict; `None` when the episode failed before judging.
    #[serde(default)]
    pub judgment: Option<Judgment>,
    /// `"<Kind>: <message>"` when the episode failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Unix wall time at the start.
    #[serde(default = "now_unix")]
    pub started_at: f64,
    /// Wall time of the episode.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Anything else (driver facts, error kind).
    #[serde(default)]
    pub metadata: JsonMap,
}

impl Trajectory {
    /// An empty trajectory for an episode starting now.
    pub fn start(env_id: &str, mode: Mode, task: Option<TaskRef>, seed: Option<i64>) -> Self {
        Trajectory {
            env_id: env_id.to_string(),
            mode,
            protocol: protocol_default(),
            task,
            seed,
            initial_observation: None,
            steps: Vec::new(),
            messages: Vec::new(),
            model_calls: Vec::new(),
            judgment: None,
            error: None,
            started_at: now_unix(),
            duration_s: None,
            metadata: JsonMap::new(),
        }
    }

    /// True when the episode finished without error and was judged.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.judgment.is_some()
    }

    /// The judgment's score, when judged.
    pub fn score(&self) -> Option<f64> {
        self.judgment.as_ref().map(|j| j.score)
    }

    /// Record a failure: the readable error plus its stable kind in metadata.
    pub fn fail(&mut self, err: &Error) {
        self.error = Some(format!("{}: {}", err.kind(), err));
        self.metadata
            .insert("error_kind".into(), Value::String(err.kind().to_string()));
    }

    /// The text a judge should look at: the last assistant text, else the last action.
    pub fn final_text(&self) -> String {
        if let Some(t) = self
            .messages
            .iter()
            .rev()
            .filter(|m| m.role == Role::Assistant)
            .find_map(|m| m.content.as_str().map(str::to_string))
        {
            return t;
        }
        match self.steps.last().map(|s| &s.action) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    }

    /// Parse one JSON trajectory (e.g. a line of a `.jsonl` file).
    pub fn from_json(s: &str) -> Result<Self> {
        serde_json::from_str(s).map_err(|e| Error::Protocol(format!("not a Trajectory: {e}")))
    }

    /// Serialise to one JSON line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a Trajectory always serialises")
    }
}

/// Current Unix time in seconds.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A process-unique pseudo-random number for ids; not for anything that must be secret.
pub(crate) fn fresh_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SALT: OnceLock<u64> = OnceLock::new();
    // The clock is read once per process: ids only need to differ, and this runs per model call.
    let salt = *SALT.get_or_init(|| {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ u64::from(std::process::id()).rotate_left(32)
    });
    crate::rng::splitmix64(salt ^ COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A short rendering of a JSON value for error messages (at most 120 characters).
pub fn preview_json(v: &Value) -> String {
    preview(v)
}

/// A short rendering of a JSON value for error messages.
pub(crate) fn preview(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn isolation_is_ordered_weakest_first() {
        assert!(Isolation::Container.satisfies(Isolation::Process));
        assert!(!Isolation::Process.satisfies(Isolation::Jail));
        assert!(Isolation::None < Isolation::Microvm);
    }

    #[test]
    fn tool_calls_read_both_shapes_and_emit_the_wire_shape() {
        let wire: ToolCall = serde_json::from_value(json!({
            "id": "c1", "type": "function",
            "function": {"name": "add", "arguments": "{\"a\": 1}"}
        }))
        .unwrap();
        assert_eq!(wire.name, "add");
        assert_eq!(wire.arguments, json!("{\"a\": 1}"));
        let ours: ToolCall =
            serde_json::from_value(json!({"id": null, "name": "add", "arguments": {"a": 1}}))
                .unwrap();
        let out = ours.to_openai();
        assert_eq!(out["type"], "function");
        assert_eq!(out["function"]["arguments"], "{\"a\":1}");
        assert!(out["id"].as_str().unwrap().starts_with("call_"));
        let bad = serde_json::from_value::<ToolCall>(json!({"function": {"arguments": "{}"}}));
        assert!(bad.unwrap_err().to_string().contains("name"));
    }

    #[test]
    fn message_keeps_extra_fields_and_emits_content_always() {
        let m: Message = serde_json::from_value(json!({
            "role": "assistant", "content": null, "nenyax_ids": [1, 2],
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]
        }))
        .unwrap();
        assert_eq!(m.extra["nenyax_ids"], json!([1, 2]));
        let wire = m.to_openai();
        assert!(wire.as_object().unwrap().contains_key("content"));
        assert_eq!(wire["tool_calls"][0]["function"]["name"], "f");
        assert!(Message::from_openai(&json!({"role": "robot", "content": "x"})).is_err());
        let e = Message::from_openai(&json!({"role": "user", "content": 3})).unwrap_err();
        assert!(e.to_string().contains("content must be"), "{e}");
    }

    #[test]
    fn judgment_rejects_non_finite_scores_on_both_paths() {
        assert!(matches!(
            Judgment::new(f64::NAN, JudgeSource::Env, "j"),
            Err(Error::NonFiniteScore { .. })
        ));
        // JSON has no NaN literal and serde_json refuses 1e999, so check the validating path
        // that every deserialised judgment goes through.
        let wire: JudgmentWire = serde_json::from_str(r#"{"score": 1}"#).unwrap();
        let e = Judgment::try_from(JudgmentWire {
            score: f64::INFINITY,
            ..wire
        })
        .unwrap_err();
        assert!(e.contains("finite"), "{e}");
        assert!(serde_json::from_str::<Judgment>(r#"{"score": 1e999}"#).is_err());
        let ok: Judgment = serde_json::from_str(r#"{"score": 0.5}"#).unwrap();
        assert_eq!(ok.source, JudgeSource::Env);
    }

    #[test]
    fn manifest_rejects_unknown_fields() {
        let e = serde_json::from_value::<Manifest>(json!({
            "id": "x", "name": "x", "source_format": "x", "mode": "step", "colour": 1
        }))
        .unwrap_err();
        assert!(e.to_string().contains("colour"));
    }

    #[test]
    fn tokens_are_extracted_from_vllm_shaped_responses() {
        let mut call = ModelCall {
            request: JsonMap::new(),
            response: Some(
                json!({
                    "prompt_token_ids": [1, 2],
                    "choices": [{"token_ids": [7, 8], "logprobs": {"content": [
                        {"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.0}]}}]
                })
                .as_object()
                .unwrap()
                .clone(),
            ),
            error: None,
            latency_s: None,
            prompt_token_ids: None,
            completion_token_ids: None,
            completion_logprobs: None,
        };
        call.extract_tokens();
        assert_eq!(call.prompt_token_ids, Some(vec![1, 2]));
        assert_eq!(call.completion_token_ids, Some(vec![7, 8]));
        assert_eq!(call.completion_logprobs, Some(vec![-0.5, -1.0]));
    }
}
