//! What an environment declares about itself: its mode, risk, isolation, reward timing,
//! requirements and capabilities, and the tasks it names.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::common::*;

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
