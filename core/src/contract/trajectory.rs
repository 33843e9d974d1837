//! One episode as recorded: observations, steps, model calls, the judgment and the trajectory
//! that holds them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::*;
use super::manifest::*;
use super::messages::*;
use crate::error::{Error, Result};

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
    /// When the call was sent, in seconds since the Unix epoch, so that traces and ATIF steps
    /// carry its real start rather than the time it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<f64>,
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
        // NeMo Gym's model servers (vllm_model with `return_token_id_information`) move the
        // ids onto the message (chat) or the turn's last output item (Responses) as
        // `prompt_token_ids`, `generation_token_ids` and `generation_log_probs`.
        let nemo = choice
            .and_then(|c| c.get("message"))
            .filter(|m| m.get("generation_token_ids").is_some())
            .or_else(|| {
                let output = resp.get("output")?.as_array()?;
                output
                    .iter()
                    .rev()
                    .find(|i| i.get("generation_token_ids").is_some())
            });
        if let Some(item) = nemo {
            self.prompt_token_ids = self
                .prompt_token_ids
                .take()
                .or_else(|| ids(item.get("prompt_token_ids")));
            self.completion_token_ids = self
                .completion_token_ids
                .take()
                .or_else(|| ids(item.get("generation_token_ids")));
            self.completion_logprobs = self.completion_logprobs.take().or_else(|| {
                item.get("generation_log_probs")?
                    .as_array()?
                    .iter()
                    .map(Value::as_f64)
                    .collect()
            });
        }
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
pub(super) struct JudgmentWire {
    pub(super) score: f64,
    #[serde(default)]
    pub(super) passed: Option<bool>,
    #[serde(default)]
    pub(super) components: Map<String, Value>,
    #[serde(default)]
    pub(super) source: JudgeSource,
    #[serde(default)]
    pub(super) judge: Option<String>,
    #[serde(default)]
    pub(super) details: JsonMap,
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
