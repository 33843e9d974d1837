//! The training loop: held-out split, baseline evaluation, then rounds of grouped rollouts,
//! an update, a held-out evaluation and gating.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::options::TrainOptions;
use super::report::{RoundReport, Times, TrainReport};
use super::{Group, Learner};
use crate::contract::{TaskRef, Trajectory};
use crate::env::Environment;
use crate::error::{Error, Result};
use crate::policy::{EpisodeContext, Phase, Policy};
use crate::rng::Rng;
use crate::runner::{CallerTask, Job, Runner};
use crate::telemetry::Telemetry;

/// A place an episode can start from: a listed task with its seed, or a seed alone.
#[derive(Debug, Clone)]
struct Slot {
    task: Option<Arc<TaskRef>>,
    seed: i64,
}

/// Held-out seeds of an environment without tasks start here, far from the training seeds
/// (`seed + round * batch + group`), so the two never meet.
const EVAL_SEED_BASE: i64 = 1 << 32;

fn split(env: &dyn Environment, opts: &TrainOptions) -> Result<(Vec<Slot>, Vec<Slot>)> {
    let limit = opts.tasks.unwrap_or(100_000);
    let tasks = env.tasks(Some(limit))?;
    if tasks.is_empty() {
        let n = opts.eval_tasks.unwrap_or(16).max(1);
        let eval = (0..n as i64)
            .map(|i| Slot {
                task: None,
                seed: EVAL_SEED_BASE + opts.seed + i,
            })
            .collect();
        // Training seeds are drawn per round (see `round_slots`).
        return Ok((Vec::new(), eval));
    }
    if tasks.len() < 2 {
        return Err(Error::Config(format!(
            "{} lists {} task; training needs at least 2, one to train on and one held out",
            env.id(),
            tasks.len()
        )));
    }
    let n_eval = opts
        .eval_tasks
        .unwrap_or((tasks.len() / 4).clamp(1, 64))
        .clamp(1, tasks.len() - 1);
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    shuffle(&mut order, opts.seed);
    let slot = |i: usize| Slot {
        task: Some(Arc::new(tasks[i].clone())),
        // One fixed environment seed per task, so a task plays the same in every round.
        seed: opts.seed + i as i64,
    };
    let eval = order[..n_eval].iter().map(|&i| slot(i)).collect();
    let train = order[n_eval..].iter().map(|&i| slot(i)).collect();
    Ok((train, eval))
}

fn shuffle<T>(v: &mut [T], seed: i64) {
    let mut rng = Rng::new(seed as u64 ^ 0x5EED_5EED);
    for i in (1..v.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// The training slots of round `round` (1-based): the next `batch` of a shuffled pass over the
/// pool, with a fresh shuffle per pass (so no task repeats within a round); seeds alone when
/// there is no pool.
fn round_slots(pool: &[Slot], round: usize, opts: &TrainOptions) -> Vec<Slot> {
    if pool.is_empty() {
        return (0..opts.batch)
            .map(|g| Slot {
                task: None,
                seed: opts.seed + ((round - 1) * opts.batch + g) as i64,
            })
            .collect();
    }
    let k = opts.batch.min(pool.len());
    let per_pass = pool.len() / k;
    let pass = (round - 1) / per_pass;
    let at = ((round - 1) % per_pass) * k;
    let mut order: Vec<usize> = (0..pool.len()).collect();
    shuffle(&mut order, opts.seed.wrapping_add(pass as i64 + 1));
    order[at..at + k].iter().map(|&i| pool[i].clone()).collect()
}

/// Drop `value` on a long-lived background thread (started on first use), so that freeing a
/// round's trajectories overlaps the next phase instead of holding up the loop; dropped here
/// if that thread cannot be started.
fn drop_aside<T: Send + 'static>(value: T) {
    type Garbage = Box<dyn Send>;
    static BIN: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Garbage>>> =
        std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Garbage>();
        std::thread::Builder::new()
            .name("nenyax-drop".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| tx)
    });
    let value: Garbage = Box::new(value);
    if let Some(tx) = bin {
        let _ = tx.send(value);
    }
}

fn job(slot: &Slot, ctx: EpisodeContext) -> Job {
    Job {
        task: slot.task.clone(),
        seed: Some(slot.seed),
        context: Some(ctx),
    }
}

/// Writes trajectories to the optional JSONL file.
struct Sink(Option<BufWriter<File>>);

impl Sink {
    fn write(&mut self, t: &Trajectory) -> Result<()> {
        if let Some(w) = &mut self.0 {
            writeln!(w, "{}", t.to_json())
                .map_err(|e| Error::io("writing a training trajectory", e))?;
        }
        Ok(())
    }
}

/// A held-out evaluation: each episode's score (a failed episode counts 0: a policy that
/// breaks the environment is not a good one) and how many failed.
#[derive(Debug, Clone, Default)]
struct Eval {
    scores: Vec<f64>,
    failed: usize,
}

impl Eval {
    fn mean(&self) -> f64 {
        self.scores.iter().sum::<f64>() / self.scores.len().max(1) as f64
    }

    /// The standard error of the mean (0 with fewer than two episodes).
    fn se(&self) -> f64 {
        let n = self.scores.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        let var = self.scores.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
        (var / n as f64).sqrt()
    }
}

/// Completion tokens the policy sampled in these trajectories (token ids where recorded, else
/// the response's usage).
fn sampled_tokens<'a>(trajs: impl IntoIterator<Item = &'a Trajectory>) -> usize {
    trajs
        .into_iter()
        .flat_map(|t| &t.model_calls)
        .map(|c| match &c.completion_token_ids {
            Some(ids) => ids.len(),
            None => c
                .response
                .as_ref()
                .and_then(|r| r.get("usage")?.get("completion_tokens")?.as_u64())
                .unwrap_or(0) as usize,
        })
        .sum()
}

struct Loop<'a> {
    env: &'a Arc<dyn Environment>,
    runner: Runner,
    opts: &'a TrainOptions,
    sink: Sink,
}

impl Loop<'_> {
    fn rollouts(&mut self, policy: &Policy, jobs: Vec<Job>) -> Result<Vec<Trajectory>> {
        let mut out = Vec::with_capacity(jobs.len());
        let sink = &mut self.sink;
        self.runner
            .run(self.env, policy, jobs, self.opts.max_steps, |_, t| {
                sink.write(&t)?;
                out.push(t);
                Ok(())
            })?;
        Ok(out)
    }

    fn evaluate(&mut self, learner: &mut dyn Learner, eval: &[Slot], round: usize) -> Result<Eval> {
        let policy = learner.policy()?;
        let mut jobs = Vec::new();
        for (g, slot) in eval.iter().enumerate() {
            for m in 0..self.opts.eval_repeats.max(1) {
                // Every evaluation reuses the same sampling seeds (round 0): two evaluations
                // then differ only by the policy.
                let mut ctx = EpisodeContext::new(
                    self.opts.seed,
                    Phase::Eval,
                    0,
                    g as u32,
                    m as u32,
                    slot.task.as_ref().map(|t| t.id.clone()),
                    Some(slot.seed),
                );
                ctx.round = round as u32;
                jobs.push(job(slot, ctx));
            }
        }
        let trajs = self.rollouts(&policy, jobs)?;
        let failed = trajs.iter().filter(|t| !t.ok()).count();
        if failed == trajs.len() {
            return Err(Error::Training(format!(
                "every held-out episode failed; the first: {}",
                trajs
                    .first()
                    .and_then(|t| t.error.clone())
                    .unwrap_or_default()
            )));
        }
        Ok(Eval {
            scores: trajs.iter().map(|t| t.score().unwrap_or(0.0)).collect(),
            failed,
        })
    }
}

/// Train `learner` on `env`: split off held-out tasks, evaluate, then each round roll out
/// `batch` groups of `group_size`, update, evaluate and gate. Bad options are an error before
/// anything runs; a round that fails (its rollouts, its update or its evaluation) is reported
/// as failed with the error, the learner goes back to its state before the round, and the
/// next round runs.
pub fn train(
    env: &Arc<dyn Environment>,
    learner: &mut dyn Learner,
    opts: &TrainOptions,
) -> Result<TrainReport> {
    train_with(env, learner, opts, |_| {})
}

/// [`train`], calling `on_round` after the baseline evaluation (round 0) and every round.
pub fn train_with(
    env: &Arc<dyn Environment>,
    learner: &mut dyn Learner,
    opts: &TrainOptions,
    on_round: impl FnMut(&RoundReport),
) -> Result<TrainReport> {
    train_serving(env, learner, opts, None, on_round)
}

/// [`train_with`], also running the `caller` tasks on the calling thread while rollouts run:
/// how the C ABI keeps host callbacks that must not leave the calling thread (Go, Julia) on it
/// while environments step in parallel ([`Runner::serve_caller`]).
pub fn train_serving(
    env: &Arc<dyn Environment>,
    learner: &mut dyn Learner,
    opts: &TrainOptions,
    caller: Option<Receiver<CallerTask>>,
    on_round: impl FnMut(&RoundReport),
) -> Result<TrainReport> {
    train_observed(env, learner, opts, caller, None, on_round)
}

/// [`train_serving`], also sending every trajectory, each round's numbers (as metrics at the
/// round's step) and the report (`train_report.json`) to `telemetry`. The caller starts and
/// finishes the telemetry run.
pub fn train_observed(
    env: &Arc<dyn Environment>,
    learner: &mut dyn Learner,
    opts: &TrainOptions,
    caller: Option<Receiver<CallerTask>>,
    telemetry: Option<Arc<Telemetry>>,
    mut on_round: impl FnMut(&RoundReport),
) -> Result<TrainReport> {
    let mut on_round = |r: &RoundReport| {
        if let Some(t) = &telemetry {
            t.metrics(r.round as u64, &round_metrics(r));
        }
        on_round(r);
    };
    check_options(learner, opts)?;
    let t_start = Instant::now();
    let (pool, eval) = split(env.as_ref(), opts)?;
    let sink = Sink(match &opts.trajectories {
        Some(p) => Some(BufWriter::new(
            File::create(p).map_err(|e| Error::io(format!("creating {p}"), e))?,
        )),
        None => None,
    });
    let mut runner = Runner::new(opts.concurrency)?.progress(false);
    if let Some(caller) = caller {
        runner = runner.serve_caller(caller);
    }
    if let Some(t) = &telemetry {
        runner = runner.telemetry(t.clone());
    }
    let mut lp = Loop {
        env,
        runner,
        opts,
        sink,
    };
    let show = opts.progress && std::io::stderr().is_terminal();
    let mut report = TrainReport::new(env.id(), learner.describe(), opts, pool.len(), eval.len());
    let t0 = Instant::now();
    let baseline = lp.evaluate(learner, &eval, 0)?;
    let mut base = RoundReport::new(0);
    base.eval_score = Some(baseline.mean());
    base.eval_se = Some(baseline.se());
    base.eval_failed = baseline.failed;
    base.times.eval_s = t0.elapsed().as_secs_f64();
    base.times.wall_s = base.times.eval_s;
    base.outcome = "baseline".into();
    report.baseline = baseline.mean();
    if show {
        eprintln!("{}", base.line());
    }
    on_round(&base);
    report.rounds.push(base);
    let mut best = report.baseline;
    // The held-out evaluation of the policy the learner holds now, which the next update must
    // not make worse.
    let mut current = baseline;
    for round in 1..=opts.rounds {
        let (r, after) = run_round(&mut lp, learner, &pool, &eval, round, &current);
        if let (Some(after), "kept") = (after, r.outcome.as_str()) {
            best = best.max(after.mean());
            current = after;
        }
        if r.ungated {
            report.gated = false;
        }
        if show {
            eprintln!("{}", r.line());
        }
        on_round(&r);
        report.rounds.push(r);
    }
    if let Some(w) = &mut lp.sink.0 {
        w.flush()
            .map_err(|e| Error::io("writing training trajectories", e))?;
    }
    report.best = best;
    report.final_eval = current.mean();
    report.wall_s = t_start.elapsed().as_secs_f64();
    if let Some(t) = &telemetry {
        t.artifact("train_report.json", report.to_json().to_string().as_bytes());
    }
    Ok(report)
}

/// The numbers a round's report line has, as named metrics (absent ones left out).
fn round_metrics(r: &RoundReport) -> Vec<(String, f64)> {
    let mut m: Vec<(String, f64)> = [
        ("train_score", r.train_score),
        ("eval_score", r.eval_score),
        ("eval_se", r.eval_se),
        ("gate_bar", r.gate_bar),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k.to_string(), v?)))
    .collect();
    m.extend([
        ("kept".to_string(), f64::from(u8::from(r.outcome == "kept"))),
        ("episodes".into(), r.episodes as f64),
        ("failed_episodes".into(), r.failed_episodes as f64),
        ("eval_failed".into(), r.eval_failed as f64),
        ("signal".into(), r.signal),
        ("sampled_tokens".into(), r.sampled_tokens as f64),
        ("wall_s".into(), r.times.wall_s),
        ("rollout_s".into(), r.times.rollout_s),
        ("update_s".into(), r.times.update_s),
        ("eval_s".into(), r.times.eval_s),
    ]);
    if let Some(u) = &r.update {
        m.extend(u.metrics.iter().map(|(k, v)| (format!("update.{k}"), *v)));
    }
    m
}

fn check_options(learner: &dyn Learner, opts: &TrainOptions) -> Result<()> {
    let need = learner.min_group_size();
    if opts.group_size < need {
        return Err(Error::Config(format!(
            "group_size is {}; learner `{}` needs at least {need} rollouts per group (its \
             advantages compare the members of a group); raise group_size, or use a learner \
             with a batch baseline such as `reinforce`",
            opts.group_size,
            learner.name()
        )));
    }
    if opts.group_size == 0 || opts.batch == 0 {
        return Err(Error::Config(
            "group_size and batch must be at least 1".into(),
        ));
    }
    // Episode seeds are the run's seed plus offsets below 2 * EVAL_SEED_BASE; past i64::MAX
    // they would overflow.
    let max_seed = i64::MAX - 2 * EVAL_SEED_BASE;
    if opts.seed > max_seed {
        return Err(Error::Config(format!(
            "seed is {}; it must be at most {max_seed} (episode seeds are the seed plus offsets \
             up to {})",
            opts.seed,
            2 * EVAL_SEED_BASE
        )));
    }
    for (k, v) in [
        ("gate_tolerance", opts.gate_tolerance),
        ("gate_sigma", opts.gate_sigma),
    ] {
        if !v.is_finite() || v < 0.0 {
            return Err(Error::Config(format!(
                "{k} is {v}; it must be a finite number >= 0"
            )));
        }
    }
    Ok(())
}

/// One round and, when it ran, its held-out evaluation; never an error: a failure is the
/// round's outcome.
fn run_round(
    lp: &mut Loop<'_>,
    learner: &mut dyn Learner,
    pool: &[Slot],
    eval: &[Slot],
    round: usize,
    current: &Eval,
) -> (RoundReport, Option<Eval>) {
    let opts = lp.opts;
    let t_round = Instant::now();
    let mut r = RoundReport::new(round);
    let mut times = Times::default();
    let mut snapshot = false;
    let mut after = None;
    let result = (|| -> Result<()> {
        // Rollouts: `batch` groups of `group_size` members each.
        let t0 = Instant::now();
        let slots = round_slots(pool, round, opts);
        let policy = learner.policy()?;
        let jobs: Vec<Job> = slots
            .iter()
            .enumerate()
            .flat_map(|(g, slot)| {
                (0..opts.group_size).map(move |m| {
                    job(
                        slot,
                        EpisodeContext::new(
                            opts.seed,
                            Phase::Train,
                            round as u32,
                            g as u32,
                            m as u32,
                            slot.task.as_ref().map(|t| t.id.clone()),
                            Some(slot.seed),
                        ),
                    )
                })
            })
            .collect();
        let mut trajs = lp.rollouts(&policy, jobs)?.into_iter();
        let groups: Vec<Group> = slots
            .iter()
            .enumerate()
            .map(|(g, slot)| Group {
                index: g,
                task: slot.task.as_deref().cloned(),
                seed: Some(slot.seed),
                trajectories: trajs.by_ref().take(opts.group_size).collect(),
            })
            .collect();
        times.rollout_s = t0.elapsed().as_secs_f64();
        let all: Vec<&Trajectory> = groups.iter().flat_map(|g| &g.trajectories).collect();
        r.episodes = all.len();
        r.failed_episodes = all.iter().filter(|t| !t.ok()).count();
        r.sampled_tokens = sampled_tokens(all.iter().copied());
        let ok: Vec<f64> = all.iter().filter_map(|t| t.score()).collect();
        r.signal = groups.iter().filter(|g| g.has_signal()).count() as f64 / groups.len() as f64;
        if ok.is_empty() {
            return Err(Error::Training(format!(
                "every one of the {} training episodes failed; the first: {}",
                all.len(),
                all.first()
                    .and_then(|t| t.error.clone())
                    .unwrap_or_default()
            )));
        }
        r.train_score = Some(ok.iter().sum::<f64>() / ok.len() as f64);
        // Update, after a snapshot to go back to.
        let t0 = Instant::now();
        if opts.gate {
            snapshot = learner.snapshot()?;
        }
        times.gate_s += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let update = learner.update(&groups);
        // A round's trajectories are many small JSON trees; freeing them is not the loop's
        // work to wait for.
        drop_aside(groups);
        let update = update?;
        times.update_s = t0.elapsed().as_secs_f64();
        times.trainer_s = update.trainer_s;
        r.update = Some(update);
        // Held-out evaluation and the gate.
        let t0 = Instant::now();
        let e = lp.evaluate(learner, eval, round)?;
        times.eval_s = t0.elapsed().as_secs_f64();
        r.eval_score = Some(e.mean());
        r.eval_se = Some(e.se());
        r.eval_failed = e.failed;
        // Worse beyond the evaluations' noise: the standard error of the difference of the
        // two means, times gate_sigma (a lucky evaluation must not freeze training).
        let noise = (current.se().powi(2) + e.se().powi(2)).sqrt();
        let bar = current.mean() - opts.gate_tolerance - opts.gate_sigma * noise;
        r.gate_bar = Some(bar);
        let worse = e.mean() < bar;
        after = Some(e);
        r.outcome = if !opts.gate {
            "kept".into()
        } else if !snapshot {
            r.ungated = true;
            "kept".into()
        } else if worse {
            let t0 = Instant::now();
            learner.restore()?;
            times.gate_s += t0.elapsed().as_secs_f64();
            "reverted".into()
        } else {
            "kept".into()
        };
        Ok(())
    })();
    if let Err(e) = result {
        r.outcome = "failed".into();
        r.error = Some(format!("{}: {e}", e.kind()));
        // Whatever the update did is undone, so the next round starts from a known state.
        if snapshot {
            if let Err(e2) = learner.restore() {
                r.error = Some(format!(
                    "{}; restoring the snapshot also failed: {e2}",
                    r.error.take().unwrap_or_default()
                ));
            }
        }
    }
    times.wall_s = t_round.elapsed().as_secs_f64();
    times.overhead_s = (times.wall_s - times.rollout_s - times.eval_s - times.trainer_s).max(0.0);
    r.times = times;
    (r, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_slots_cycle_without_repeats_within_a_round_and_stay_off_the_held_out() {
        let env = crate::router::load("builtin:arithmetic?size=20").unwrap();
        let opts = TrainOptions {
            batch: 6,
            ..TrainOptions::default()
        };
        let (pool, eval) = split(env.as_ref(), &opts).unwrap();
        assert_eq!((pool.len(), eval.len()), (15, 5));
        let held: Vec<&str> = eval
            .iter()
            .map(|s| s.task.as_ref().unwrap().id.as_str())
            .collect();
        for round in 1..=7 {
            let slots = round_slots(&pool, round, &opts);
            let ids: std::collections::HashSet<&str> = slots
                .iter()
                .map(|s| s.task.as_ref().unwrap().id.as_str())
                .collect();
            assert_eq!(ids.len(), 6, "round {round} repeats a task");
            assert!(ids.iter().all(|i| !held.contains(i)));
        }
        // Fixed by the seed.
        let (pool2, eval2) = split(env.as_ref(), &opts).unwrap();
        assert_eq!(eval2[0].task, eval[0].task);
        assert_eq!(pool2[3].task, pool[3].task);
    }
}
