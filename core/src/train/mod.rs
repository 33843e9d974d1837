//! Improve a policy with any learner: the learner contract, the training loop and the named
//! learners.
//!
//! A [`Learner`] is anything with `policy()` (what to roll out with) and `update(groups)` (learn
//! from judged groups), plus `snapshot()` / `restore()` so that an update that makes held-out
//! performance worse can be reverted. [`train`] runs rounds of grouped rollouts, updates,
//! held-out evaluations and gating, for step, rollout and task environments alike.
//!
//! The learners by name ([`learner`], [`NAMES`]):
//! - `incontext` ([`InContext`]): curates worked examples from the model's own best episodes
//!   into the prompt of any chat model; no weights change.
//! - the weight learners `grpo`, `dr_grpo`, `dapo`, `rloo`, `reinforce`, `reinforce_pp`, `gspo`,
//!   `pg`, `rft` and `dpo` ([`PgLearner`]): each reduces to "the trainer reports per-token
//!   log-probabilities of the traced sequences; the learner returns dLoss/dlogp per token", so
//!   one [`Trainer`] interface serves all of them: the built-in [`SoftmaxPolicy`], or a host's
//!   own model through the C ABI.
//! - `tinker`: not available (see [`learner`]).
//!
//! A whole run (environment, model, learner, options, output) can be described in one TOML
//! file: [`config::RunConfig`].

pub mod config;
mod incontext;
mod options;
mod pg;
mod registry;
mod report;
mod rounds;
mod softmax;
pub mod trace;

pub use config::RunConfig;
pub use incontext::InContext;
pub use options::TrainOptions;
pub use pg::{Objective, PgLearner, PgOptions, TraceBatch, Trainer, Weights};
pub use registry::{check_learner, learner, Checked, LearnerParts, NAMES};
pub use report::{RoundReport, TrainReport};
pub use rounds::{train, train_observed, train_serving, train_with};
pub use softmax::{SoftmaxOptions, SoftmaxPolicy};
pub use trace::{MaskReason, TraceRow, Turns};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::contract::{TaskRef, Trajectory};
use crate::error::{Error, Result};
use crate::policy::Policy;

/// `group_size` rollouts of one task and one environment seed, told apart by their member
/// index (each samples with its own seed).
#[derive(Debug, Clone)]
pub struct Group {
    /// Index of the group in its round.
    pub index: usize,
    /// The task, when the environment lists tasks.
    pub task: Option<TaskRef>,
    /// The environment seed every member played.
    pub seed: Option<i64>,
    /// The members' trajectories, in member order (failed ones included, with their error).
    pub trajectories: Vec<Trajectory>,
}

impl Group {
    /// Whether the members' scores differ (a group whose members all scored the same carries
    /// no learning signal for group-relative learners). Failed members are left out.
    pub fn has_signal(&self) -> bool {
        let mut scores = self.trajectories.iter().filter_map(Trajectory::score);
        match scores.next() {
            Some(first) => scores.any(|s| s != first),
            None => false,
        }
    }
}

/// What one update did, for the round's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateReport {
    /// Named figures (loss, clip fraction, examples banked, ...).
    pub metrics: BTreeMap<String, f64>,
    /// Sequences the update trained on.
    pub sequences: usize,
    /// Sampled tokens the loss counted.
    pub tokens: usize,
    /// Trajectories left out of training, by reason label (see [`MaskReason::label`]).
    pub masked: BTreeMap<String, usize>,
    /// The first reason of each label, in words.
    pub mask_examples: BTreeMap<String, String>,
    /// Seconds spent inside the trainer (its forward and backward passes, its optimiser).
    pub trainer_s: f64,
    /// Whether the update changed nothing (no signal, nothing to learn from).
    pub skipped: bool,
}

impl UpdateReport {
    /// Count a masked trajectory.
    pub fn mask(&mut self, reason: &MaskReason) {
        *self.masked.entry(reason.label().into()).or_default() += 1;
        self.mask_examples
            .entry(reason.label().into())
            .or_insert_with(|| reason.to_string());
    }

    /// Trajectories masked, all reasons together.
    pub fn masked_total(&self) -> usize {
        self.masked.values().sum()
    }
}

/// The learner contract: what to roll out with, how to learn from judged groups, and how to
/// go back (for gating). Implemented by the built-in learners and by hosts through the C ABI.
pub trait Learner: Send {
    /// Its name, as configs and reports spell it.
    fn name(&self) -> String;

    /// The policy the next rollouts use (train and eval alike; per-episode policies see which
    /// in their [`crate::policy::EpisodeContext`]).
    fn policy(&mut self) -> Result<Policy>;

    /// Learn from one round's groups.
    fn update(&mut self, groups: &[Group]) -> Result<UpdateReport>;

    /// Save the current state (one slot: a later snapshot replaces it). `Ok(false)`: this
    /// learner cannot, so updates are never reverted and the report says so.
    fn snapshot(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// Go back to the last snapshot.
    fn restore(&mut self) -> Result<()> {
        Err(Error::Training(format!(
            "learner `{}` cannot restore a snapshot",
            self.name()
        )))
    }

    /// The smallest group its maths can learn from (2 for group-relative advantages).
    fn min_group_size(&self) -> usize {
        1
    }

    /// Its settings, for the report.
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "name": self.name() })
    }
}
