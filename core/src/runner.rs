//! Batches: many rollouts in parallel on a thread pool owned by the caller's [`Runner`] (never
//! the global rayon pool, so an embedding trainer keeps control of its threads), delivered in
//! task order as they complete.

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::contract::{TaskRef, Trajectory};
use crate::env::{Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::limits::{MAX_EPISODES, MAX_THREADS};
use crate::policy::{EpisodeContext, Policy};

/// One rollout to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The task; `None` lets the environment pick by seed. Shared, because a plan cycles
    /// through the same few tasks many times.
    pub task: Option<Arc<TaskRef>>,
    /// The seed.
    pub seed: Option<i64>,
    /// Which episode this is, for per-episode policies (a training round, group and member);
    /// `None`: a plain run.
    pub context: Option<EpisodeContext>,
}

/// `n` jobs: the environment's tasks in order (cycled when `n` exceeds them), or seeded
/// episodes when it has none. Job `i` gets seed `seed + i`.
pub fn plan(env: &dyn Environment, n: usize, seed: i64) -> Result<Vec<Job>> {
    check_seeds(n, seed)?;
    let tasks: Vec<Arc<TaskRef>> = env.tasks(Some(n))?.into_iter().map(Arc::new).collect();
    Ok((0..n)
        .map(|i| Job {
            task: (!tasks.is_empty()).then(|| tasks[i % tasks.len()].clone()),
            seed: Some(seed + i as i64),
            context: None,
        })
        .collect())
}

/// Episode seeds run from `seed` to `seed + n - 1`; past `i64::MAX` they would wrap (release)
/// or panic (debug), so a range that does not fit is refused, as is a batch too large to hold.
fn check_seeds(n: usize, seed: i64) -> Result<()> {
    if n > MAX_EPISODES {
        return Err(Error::Config(format!(
            "a batch of {n} episodes is more than one batch holds (at most {MAX_EPISODES}); run \
             several, each starting at the seed where the last one ended"
        )));
    }
    let last = i64::try_from(n.saturating_sub(1))
        .ok()
        .and_then(|k| seed.checked_add(k));
    if last.is_none() {
        return Err(Error::Config(format!(
            "seed {seed} with {n} episodes does not fit: episode i gets seed + i, and the last \
             seed must be at most {}; use a seed of at most {}",
            i64::MAX,
            i64::MAX - i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX)
        )));
    }
    Ok(())
}

/// A batch as callers describe it in JSON: {"n": 10, "seed": 0, "max_steps": int,
/// "tasks": [TaskRef]}; every field is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOptions {
    /// Number of rollouts (default 10).
    #[serde(default)]
    pub n: Option<usize>,
    /// Seed of the first job; job `i` gets `seed + i` (default 0).
    #[serde(default)]
    pub seed: Option<i64>,
    /// Step limit per episode; `None` uses the environment's default.
    #[serde(default)]
    pub max_steps: Option<usize>,
    /// Tasks to cycle through; absent or empty: the environment's own (see [`plan`]).
    #[serde(default)]
    pub tasks: Option<Vec<TaskRef>>,
}

impl RunOptions {
    /// The jobs of this batch: the given tasks cycled, else [`plan`] over the environment's.
    pub fn jobs(&self, env: &dyn Environment) -> Result<Vec<Job>> {
        let n = self.n.unwrap_or(10);
        let seed = self.seed.unwrap_or(0);
        crate::limits::check_max_steps(self.max_steps)?;
        match &self.tasks {
            Some(tasks) if !tasks.is_empty() => {
                check_seeds(n, seed)?;
                let tasks: Vec<Arc<TaskRef>> = tasks.iter().cloned().map(Arc::new).collect();
                Ok((0..n)
                    .map(|i| Job {
                        task: Some(tasks[i % tasks.len()].clone()),
                        seed: Some(seed + i as i64),
                        context: None,
                    })
                    .collect())
            }
            _ => plan(env, n, seed),
        }
    }
}

/// Work a rollout thread hands to the thread that called [`Runner::run`].
pub type CallerTask = Box<dyn FnOnce() + Send>;

thread_local! {
    /// This thread's one queue of caller tasks, kept for the thread's lifetime.
    static CALLER_QUEUE: (Sender<CallerTask>, Receiver<CallerTask>) = unbounded();
}

/// The calling thread's own task queue: every serving loop on this thread (a batch, a check,
/// one rollout, and the same nested inside a callback) waits on the same receiver, so a task
/// queued for this thread is always served by whichever loop is waiting here, and none is lost
/// when a nested loop returns while another thread was queueing for it.
pub fn caller_queue() -> (Sender<CallerTask>, Receiver<CallerTask>) {
    CALLER_QUEUE.with(|(tx, rx)| (tx.clone(), rx.clone()))
}

/// Run `caller` tasks on this thread until `done` yields a value; `None` when every sender of
/// `done` is gone without one. The one serve-the-caller loop: batches and single rollouts use it.
pub fn serve_until<T>(done: &Receiver<T>, caller: Option<&Receiver<CallerTask>>) -> Option<T> {
    // Never ready: without a caller queue this is a plain receive.
    let never = crossbeam_channel::never();
    let mut caller = caller.unwrap_or(&never);
    loop {
        crossbeam_channel::select! {
            recv(done) -> msg => return msg.ok(),
            recv(caller) -> task => match task {
                Ok(task) => task(),
                // No sender is left: stop polling it, or this loop would spin.
                Err(_) => caller = &never,
            },
        }
    }
}

/// Idle helper threads, each waiting on its own job channel.
static HELPERS: Mutex<Vec<Sender<HelperJob>>> = Mutex::new(Vec::new());

/// Most idle helper threads kept; more are only needed while calls nest, and then exit.
const MAX_IDLE_HELPERS: usize = 8;

/// Runs the work and returns what delivers its result, so the helper is idle again before the
/// caller can ask for the next one (a loop of calls then reuses one thread).
type HelperJob = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

fn helper_loop(me: Sender<HelperJob>, jobs: Receiver<HelperJob>) {
    while let Ok(job) = jobs.recv() {
        // A panic loses only this job (its result channel closes), not the thread.
        let deliver = catch_unwind(AssertUnwindSafe(job)).ok();
        let mut idle = HELPERS.lock().unwrap_or_else(|p| p.into_inner());
        let keep = idle.len() < MAX_IDLE_HELPERS;
        if keep {
            idle.push(me.clone());
        }
        drop(idle);
        if let Some(deliver) = deliver {
            deliver();
        }
        if !keep {
            return;
        }
    }
}

/// Run `work` on a reused helper thread while this thread serves `caller` tasks, and return
/// its result (`None` if it panicked). For work that may call back into this thread from
/// threads of its own (a rollout-mode environment calls a host model from the recording
/// server's threads): the caller keeps serving while it waits, and no thread is started per
/// call. Helpers are shared by all threads; a nested call takes another one.
pub fn run_aside<T: Send + 'static>(
    caller: Option<&Receiver<CallerTask>>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Option<T>> {
    let (done_tx, done_rx) = bounded::<T>(1);
    let job: HelperJob = Box::new(move || {
        let out = work();
        Box::new(move || {
            let _ = done_tx.send(out);
        })
    });
    let idle = HELPERS.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let job = match idle {
        Some(helper) => match helper.send(job) {
            Ok(()) => None,
            // The helper exited; start another.
            Err(e) => Some(e.into_inner()),
        },
        None => Some(job),
    };
    if let Some(job) = job {
        let (tx, rx) = unbounded::<HelperJob>();
        tx.send(job).expect("the receiver is here");
        let me = tx.clone();
        std::thread::Builder::new()
            .name("nenyax-helper".into())
            .spawn(move || helper_loop(me, rx))
            .map_err(|e| Error::Config(format!("cannot start a helper thread: {e}")))?;
    }
    Ok(serve_until(&done_rx, caller))
}

/// Owns a rayon pool and runs rollouts on it.
pub struct Runner {
    pool: rayon::ThreadPool,
    threads: usize,
    progress: bool,
    caller: Option<Receiver<CallerTask>>,
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl Runner {
    /// A runner with `threads` workers (0 means one per core, or `NENYAX_NUM_THREADS`), at most
    /// [`MAX_THREADS`].
    pub fn new(threads: usize) -> Result<Self> {
        if threads > MAX_THREADS {
            return Err(Error::Config(format!(
                "{threads} rollout threads asked for; at most {MAX_THREADS} (more only stall \
                 the machine while they start)"
            )));
        }
        let threads = match threads {
            0 => std::env::var("NENYAX_NUM_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0 && *n <= MAX_THREADS)
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
            caller: None,
            telemetry: None,
        })
    }

    /// Show a progress line on stderr (only ever when stderr is a terminal). On by default.
    pub fn progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// While a batch runs, also run the tasks arriving on `tasks` on the calling thread. This is
    /// how callbacks into hosts that must not be entered from other threads (Go, Julia) are
    /// served while environments still step in parallel.
    pub fn serve_caller(mut self, tasks: Receiver<CallerTask>) -> Self {
        self.caller = Some(tasks);
        self
    }

    /// Send every delivered trajectory to `telemetry` (queued, never blocking the batch).
    pub fn telemetry(mut self, telemetry: Arc<crate::telemetry::Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `jobs` with `policy`, calling `sink(index, trajectory)` on the calling thread in job
    /// order as results arrive. Every job yields a trajectory, failed ones with their error.
    ///
    /// Memory stays bounded whatever the number of jobs: workers pull jobs one at a time and
    /// may run at most a window of jobs ahead of the oldest one not yet delivered. A sink error
    /// stops the batch (jobs already running finish) and is returned.
    pub fn run(
        &self,
        env: &Arc<dyn Environment>,
        policy: &Policy,
        jobs: Vec<Job>,
        max_steps: Option<usize>,
        sink: impl FnMut(usize, Trajectory) -> Result<()>,
    ) -> Result<()> {
        self.run_serving(env, policy, jobs, max_steps, self.caller.as_ref(), sink)
    }

    /// [`Runner::run`], serving `caller` tasks on the calling thread for this batch only (the
    /// C ABI binds a fresh channel per call).
    pub fn run_serving(
        &self,
        env: &Arc<dyn Environment>,
        policy: &Policy,
        jobs: Vec<Job>,
        max_steps: Option<usize>,
        caller: Option<&Receiver<CallerTask>>,
        mut sink: impl FnMut(usize, Trajectory) -> Result<()>,
    ) -> Result<()> {
        crate::limits::check_max_steps(max_steps)?;
        let n = jobs.len();
        if n == 0 {
            return Ok(());
        }
        let window = (self.threads * 8).max(64);
        // A token lets a worker start one job; the caller returns one per job delivered.
        let (token_tx, token_rx) = bounded::<()>(window);
        for _ in 0..window.min(n) {
            token_tx.send(()).expect("capacity is the window");
        }
        let (done_tx, done_rx) = unbounded::<(usize, Trajectory)>();
        let next_job = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let (jobs, next_job, stop, env) = (&jobs, &next_job, &stop, env.as_ref());
        let show = self.progress && n > 1 && std::io::stderr().is_terminal();
        let mut outcome = Ok(());
        self.pool.in_place_scope(|scope| {
            for _ in 0..self.threads.min(n) {
                let (token_rx, done_tx) = (token_rx.clone(), done_tx.clone());
                scope.spawn(move |_| {
                    while token_rx.recv().is_ok() && !stop.load(Ordering::Relaxed) {
                        let i = next_job.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break };
                        let opts = RolloutOptions {
                            task: job.task.as_deref().cloned(),
                            seed: job.seed,
                            max_steps,
                            context: job.context.clone(),
                        };
                        // rollout() never panics; a closed receiver means the caller stopped.
                        if done_tx.send((i, env.rollout(policy, &opts))).is_err() {
                            break;
                        }
                    }
                });
            }
            drop((token_rx, done_tx));
            let mut token_tx = Some(token_tx);
            let mut progress = Progress::new(n, show);
            let mut pending = BTreeMap::new();
            let mut next = 0;
            // Tasks that must run on this (the calling) thread, e.g. callbacks into a host
            // language that cannot be entered from foreign threads, run while waiting; `None`:
            // every worker has exited (only after a stop, or when all is done).
            while let Some((i, traj)) = serve_until(&done_rx, caller) {
                if outcome.is_err() {
                    // Stopping: episodes already running finish (their callbacks are still
                    // served above, or their workers would wait forever) and are dropped.
                    continue;
                }
                progress.failed += usize::from(traj.error.is_some());
                pending.insert(i, traj);
                while let Some(traj) = pending.remove(&next) {
                    if let Some(t) = &self.telemetry {
                        t.episode(&traj);
                    }
                    if let Err(e) = sink(next, traj) {
                        outcome = Err(e);
                        stop.store(true, Ordering::Relaxed);
                        token_tx = None;
                        pending.clear();
                        break;
                    }
                    next += 1;
                    if let Some(t) = &token_tx {
                        let _ = t.try_send(());
                    }
                }
                progress.draw(next);
                if next == n {
                    break;
                }
            }
            progress.finish();
            drop(token_tx);
        });
        outcome
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

/// The progress line on stderr, redrawn at most ten times a second.
struct Progress {
    n: usize,
    show: bool,
    failed: usize,
    t0: Instant,
    last: Instant,
}

impl Progress {
    fn new(n: usize, show: bool) -> Self {
        let now = Instant::now();
        Progress {
            n,
            show,
            failed: 0,
            t0: now,
            last: now,
        }
    }

    fn draw(&mut self, done: usize) {
        if !self.show || (self.last.elapsed().as_millis() < 100 && done < self.n) {
            return;
        }
        self.last = Instant::now();
        let rate = done as f64 / self.t0.elapsed().as_secs_f64().max(1e-9);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r  {done}/{} rollouts  {rate:.0}/s  {} failed ",
            self.n, self.failed
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.show {
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::load;
    use serde_json::json;

    #[test]
    fn run_aside_reuses_one_helper_and_serves_the_caller_also_when_nested() {
        let (tx, rx) = caller_queue();
        let home = std::thread::current().id();
        let mut helpers = std::collections::HashSet::new();
        for i in 0..50 {
            let tx = tx.clone();
            let (helper, served_on) = run_aside(Some(&rx), move || {
                let (reply_tx, reply_rx) = bounded(1);
                let task: CallerTask = Box::new(move || {
                    // Every tenth call nests: another helper, served on this thread again.
                    let nested = (i % 10 == 0).then(|| {
                        let (tx, rx) = caller_queue();
                        run_aside(Some(&rx), move || {
                            let (r_tx, r_rx) = bounded(1);
                            let t: CallerTask = Box::new(move || {
                                let _ = r_tx.send(std::thread::current().id());
                            });
                            tx.send(t).unwrap();
                            r_rx.recv().unwrap()
                        })
                        .unwrap()
                        .unwrap()
                    });
                    let _ = reply_tx.send((std::thread::current().id(), nested));
                });
                tx.send(task).unwrap();
                (std::thread::current().id(), reply_rx.recv().unwrap())
            })
            .unwrap()
            .unwrap();
            assert_eq!(served_on.0, home);
            if let Some(nested_on) = served_on.1 {
                assert_eq!(nested_on, home);
            }
            assert_ne!(helper, home);
            helpers.insert(helper);
        }
        // One thread for all fifty calls (only the nested ones borrow a second).
        assert_eq!(helpers.len(), 1, "{helpers:?}");
    }

    #[test]
    fn workers_never_run_more_than_a_window_ahead() {
        let env = load("builtin:arithmetic?size=10").unwrap();
        let runner = Runner::new(2).unwrap().progress(false);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let delivered = Arc::new(AtomicUsize::new(0));
        let (f, d) = (in_flight.clone(), delivered.clone());
        let peak = Arc::new(AtomicUsize::new(0));
        let p = peak.clone();
        let policy = Policy::action(move |_| {
            let started = f.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(started - d.load(Ordering::SeqCst), Ordering::SeqCst);
            Ok(json!("<answer>0</answer>"))
        });
        let jobs = plan(env.as_ref(), 5000, 0).unwrap();
        let mut seen = 0;
        runner
            .run(&env, &policy, jobs, None, |i, t| {
                assert_eq!(i, seen);
                assert_eq!(t.seed, Some(i as i64));
                seen += 1;
                delivered.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, 5000);
        let window = (runner.threads() * 8).max(64);
        assert!(
            peak.load(Ordering::SeqCst) <= window,
            "{} > {window}",
            peak.load(Ordering::SeqCst)
        );
    }

    #[test]
    fn a_failing_sink_stops_the_batch_and_is_returned() {
        let env = load("builtin:arithmetic?size=10").unwrap();
        let runner = Runner::new(2).unwrap().progress(false);
        let oracle = env.reference_policy(None).unwrap();
        let mut calls = 0;
        let e = runner
            .run(
                &env,
                &oracle,
                plan(env.as_ref(), 10_000, 0).unwrap(),
                None,
                |i, _| {
                    calls += 1;
                    if i == 10 {
                        Err(Error::Config("disk full".into()))
                    } else {
                        Ok(())
                    }
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains("disk full"));
        assert_eq!(calls, 11);
    }

    #[test]
    fn caller_tasks_run_on_the_calling_thread_while_workers_step() {
        let env = load("builtin:arithmetic?size=10").unwrap();
        let (tx, rx) = unbounded::<CallerTask>();
        let home = std::thread::current().id();
        let tx = std::sync::Mutex::new(tx);
        // A policy that may only run on `home`: workers hand each call to the caller.
        let policy = Policy::action(move |obs| {
            let (reply_tx, reply_rx) = bounded(1);
            let task_id = obs.info["task_id"].clone();
            let task: CallerTask = Box::new(move || {
                let _ = reply_tx.send((std::thread::current().id(), task_id));
            });
            tx.lock().unwrap().send(task).unwrap();
            let (ran_on, id) = reply_rx.recv().unwrap();
            assert_eq!(ran_on, home);
            Ok(json!(format!("<answer>{id}</answer>")))
        });
        let runner = Runner::new(2).unwrap().progress(false).serve_caller(rx);
        let out = runner
            .collect(&env, &policy, plan(env.as_ref(), 200, 0).unwrap(), None)
            .unwrap();
        assert_eq!(out.len(), 200);
        assert!(out.iter().all(|t| t.error.is_none()), "{:?}", out[0].error);
    }

    #[test]
    fn a_sink_error_while_callbacks_are_routed_to_the_caller_does_not_hang() {
        let env = load("builtin:arithmetic?size=10").unwrap();
        let (tx, rx) = unbounded::<CallerTask>();
        let tx = std::sync::Mutex::new(tx);
        let policy = Policy::action(move |_| {
            let (reply_tx, reply_rx) = bounded(1);
            let task: CallerTask = Box::new(move || {
                let _ = reply_tx.send(());
            });
            tx.lock().unwrap().send(task).unwrap();
            reply_rx.recv().unwrap();
            Ok(json!("<answer>0</answer>"))
        });
        let runner = Runner::new(2).unwrap().progress(false);
        let (done_tx, done_rx) = bounded(1);
        std::thread::spawn(move || {
            let jobs = plan(env.as_ref(), 500, 0).unwrap();
            let r = runner.run_serving(&env, &policy, jobs, None, Some(&rx), |i, _| {
                if i == 5 {
                    Err(Error::Config("stop".into()))
                } else {
                    Ok(())
                }
            });
            let _ = done_tx.send(r.is_err());
        });
        let stopped = done_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the batch returned after its sink failed");
        assert!(stopped);
    }
}
