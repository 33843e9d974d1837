//! Judges: score any environment your own way, without touching it.
//!
//! A judge reads a finished [`Trajectory`](crate::contract::Trajectory) (its final text, its
//! task's metadata, the environment's own judgment) and returns a
//! [`Judgment`](crate::contract::Judgment). [`with_judge`] wraps any environment so that its
//! rollouts are re-judged; the environment's own verdict stays available as the `env`
//! component and in `details.env_judgment`.

mod base;
mod custom;
mod extract;
mod matching;
mod spec;
mod wrap;

pub use base::Judge;
pub use custom::{EnvJudge, FnJudge, LlmRubric, Weighted};
pub use extract::{extract_answer_tag, extract_boxed, last_number, Extract};
pub use matching::{Contains, ExactMatch, Numeric, RegexJudge};
pub use spec::{judge_from_json, judge_from_spec, JudgeSpec, WeightedPart};
pub use wrap::{with_judge, JudgedEnvironment};

#[cfg(test)]
mod tests;
