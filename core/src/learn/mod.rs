//! The maths of the learners a trainer runs on rollouts: advantage estimators now; the clipped
//! losses and their gradients, and the CUDA kernels, are issue 6's next steps. Every formula and
//! convention follows `pg-math.md` of the shared reference, and is checked against its golden
//! vectors (`tests/pg_golden.rs`).

pub mod advantage;

pub use advantage::{advantages, dapo_keep, reinforce_pp, Estimator, Singleton, StdScope};
