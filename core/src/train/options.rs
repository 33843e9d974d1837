//! How to train: the options of [`super::train`], as JSON, TOML (`[train]`) and Rust.

use serde::{Deserialize, Serialize};

/// How to train; in JSON and TOML (`[train]`) the same field names. Every field is optional.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainOptions {
    /// Rounds of rollouts and updates.
    pub rounds: usize,
    /// Rollouts per group: one task, one environment seed, `group_size` samples.
    pub group_size: usize,
    /// Groups per round.
    pub batch: usize,
    /// Held-out tasks (or seeds) evaluated before training and after every update; default:
    /// a quarter of the tasks (at least 1, at most 64), or 16 seeds for an environment
    /// without tasks.
    pub eval_tasks: Option<usize>,
    /// Episodes per held-out task at each evaluation.
    pub eval_repeats: usize,
    /// Use at most this many of the environment's tasks (default: all, up to 100000).
    pub tasks: Option<usize>,
    /// Seed of the split, of the order of training tasks and of every sampling seed.
    pub seed: i64,
    /// Parallel rollouts (0: one per core).
    pub concurrency: usize,
    /// Step limit per episode (default: the environment's).
    pub max_steps: Option<usize>,
    /// Revert an update that makes the held-out score worse (needs a learner that can
    /// snapshot; the report says when it cannot).
    pub gate: bool,
    /// How much worse than the best held-out score an update may be and still be kept.
    pub gate_tolerance: f64,
    /// An update is reverted only when its held-out score is below the current policy's by
    /// more than `gate_tolerance + gate_sigma x` the standard error of the difference of the
    /// two evaluations (0: any drop reverts). 1 by default, so evaluation noise alone neither
    /// reverts good updates nor lets one lucky evaluation freeze training.
    pub gate_sigma: f64,
    /// Write every trajectory (train and eval, with `metadata.episode`) to this JSONL file.
    pub trajectories: Option<String>,
    /// One line per round on stderr when it is a terminal.
    pub progress: bool,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            // Enough for the built-in policy to solve CartPole with `grpo` in a few seconds; groups
            // of 8 as the product description's example, so group-relative advantages have
            // something to compare.
            rounds: 20,
            group_size: 8,
            batch: 8,
            eval_tasks: None,
            eval_repeats: 1,
            tasks: None,
            seed: 0,
            concurrency: 0,
            max_steps: None,
            gate: true,
            gate_tolerance: 0.0,
            gate_sigma: 1.0,
            trajectories: None,
            progress: true,
        }
    }
}
