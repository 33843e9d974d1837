//! The maths of the learners a trainer runs on rollouts: advantage estimators, and the
//! policy losses with their gradients, on CPU; the CUDA kernels and the C ABI are next. Every formula and
//! convention follows `pg-math.md` of the shared reference, and is checked against its golden
//! vectors (`tests/pg_golden.rs`).

pub mod advantage;
pub mod loss;

pub use advantage::{advantages, dapo_keep, reinforce_pp, Estimator, Singleton, StdScope};
pub use loss::{
    dpo_loss, pg_loss, Aggregation, Kl, KlEstimator, PgBatch, PgConfig, PgOutput, Surrogate,
};
