//! Batches: many rollouts in parallel on a thread pool owned by the caller's [`Runner`] (never
//! the global rayon pool, so an embedding trainer keeps control of its threads), delivered in
//! task order as they complete.

use crossbeam_channel::unbounded;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Instant;

use crate::contract::{TaskRef, Trajectory};
use crate::env::{Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::policy::Policy;

/// One rollout to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The task; `None` lets the environment pick by seed.
    pub task: Option<TaskRef>,
    /// The seed.
    pub seed: Option<i64>,
}

/// `n` jobs: the environment's tasks in order (cycled when `n` exceeds them), or seeded
/// episodes when it has none. Job `i` gets seed `seed + i`.
pub fn plan(env: &dyn Environment, n: usize, seed: i64) -> Result<Vec<Job>> {
    let tasks = env.tasks(Some(n))?;
    Ok((0..n)
        .map(|i| Job {
            task: (!tasks.is_empty()).then(|| tasks[i % tasks.len()].clone()),
            seed: Some(seed + i as i64),
        })
        .collect())
}

/// Owns a rayon pool and runs rollouts on it.
pub struct Runner {
    pool: rayon::ThreadPool,
    threads: usize,
    progress: bool,
}

impl Runner {
    /// A runner with `threads` workers (0 means one per core, or `NENYAX_NUM_THREADS`).
    pub fn new(threads: usize) -> Result<Self> {
        let threads = match threads {
            0 => std::env::var("NENYAX_NUM_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("nenyax-rollout-{i}"))
            .build()
            .map_err(|e| Error::Config(format!("cannot start {threads} rollout threads: {e}")))?;
        Ok(Runner {
            pool,
            threads,
            progress: true,
        })
    }

    /// Show a progress line on stderr (only ever when stderr is a terminal). On by default.
    pub fn progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `jobs` with `policy`, calling `sink(index, trajectory)` on the calling thread in job
    /// order as results arrive. Every job yields a trajectory, failed ones with their error.
    pub fn run(
        &self,
        env: &Arc<dyn Environment>,
        policy: &Policy,
        jobs: Vec<Job>,
        max_steps: Option<usize>,
        mut sink: impl FnMut(usize, Trajectory) -> Result<()>,
    ) -> Result<()> {
        let n = jobs.len();
        let (tx, rx) = unbounded::<(usize, Trajectory)>();
        for (i, job) in jobs.into_iter().enumerate() {
            let (env, policy, tx) = (env.clone(), policy.clone(), tx.clone());
            self.pool.spawn(move || {
                let opts = RolloutOptions {
                    task: job.task,
                    seed: job.seed,
                    max_steps,
                };
                // rollout() never panics; a closed receiver means the caller stopped early.
                let _ = tx.send((i, env.rollout(&policy, &opts)));
            });
        }
        drop(tx);
        let show = self.progress && n > 1 && std::io::stderr().is_terminal();
        let t0 = Instant::now();
        let mut last_draw = t0;
        let mut pending = BTreeMap::new();
        let mut next = 0;
        let mut failed = 0;
        for (i, traj) in rx.iter() {
            failed += usize::from(traj.error.is_some());
            pending.insert(i, traj);
            while let Some(traj) = pending.remove(&next) {
                sink(next, traj)?;
                next += 1;
            }
            if show && (last_draw.elapsed().as_millis() >= 100 || next == n) {
                last_draw = Instant::now();
                let rate = next as f64 / t0.elapsed().as_secs_f64().max(1e-9);
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r  {next}/{n} rollouts  {rate:.0}/s  {failed} failed "
                );
                let _ = err.flush();
            }
        }
        if show {
            eprintln!();
        }
        Ok(())
    }

    /// Run `jobs` and collect the trajectories in job order.
    pub fn collect(
        &self,
        env: &Arc<dyn Environment>,
        policy: &Policy,
        jobs: Vec<Job>,
        max_steps: Option<usize>,
    ) -> Result<Vec<Trajectory>> {
        let mut out = Vec::with_capacity(jobs.len());
        self.run(env, policy, jobs, max_steps, |_, t| {
            out.push(t);
            Ok(())
        })?;
        Ok(out)
    }
}
