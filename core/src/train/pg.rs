//! The weight learners: every named policy-gradient preset, `pg` with every knob, `rft` and
//! `dpo`, over one [`Trainer`] interface. The trainer owns the weights and reports per-token
//! log-probabilities of traced sequences; the learner turns them into `dLoss/dlogp` per token
//! (the maths of [`crate::learn`]), which the trainer backpropagates and steps on.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

use super::trace::{trace, Padded, Segment, TraceRow, Turns};
use super::{Group, Learner, UpdateReport};
use crate::contract::{ModelCall, Trajectory};
use crate::error::{Error, Result};
use crate::learn::{
    advantages, dapo_keep, dpo_loss, pg_loss, reinforce_pp, Algorithm, PgBatch, PgStats,
};
use crate::policy::Policy;

/// Whose log-probabilities a trainer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// The weights being trained.
    Current,
    /// The frozen reference (the weights before training), for KL penalties and DPO.
    Reference,
}

/// Where a traced row came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowInfo {
    /// Index into [`TraceBatch::trajectories`].
    pub trajectory: usize,
    /// Group index in the round.
    pub group: usize,
    /// Member index in the group.
    pub member: usize,
    /// The trajectory's score.
    pub reward: f64,
}

/// Traced sequences handed to a trainer: the rows, where each came from, and the padded
/// `[B][T]` arrays (tokens, loss mask, sampling log-probs, each position's context start).
pub struct TraceBatch<'a> {
    /// The rows.
    pub rows: Vec<TraceRow>,
    /// Where each row came from.
    pub info: Vec<RowInfo>,
    /// The trajectories the rows came from.
    pub trajectories: Vec<&'a Trajectory>,
    /// The rows padded to one width.
    pub padded: Padded,
}

impl<'a> TraceBatch<'a> {
    /// A batch of `rows` (with their `info`) over `trajectories`.
    pub fn new(rows: Vec<TraceRow>, info: Vec<RowInfo>, trajectories: Vec<&'a Trajectory>) -> Self {
        let padded = Padded::new(&rows.iter().collect::<Vec<_>>());
        TraceBatch {
            rows,
            info,
            trajectories,
            padded,
        }
    }

    /// B.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// T.
    pub fn width(&self) -> usize {
        self.padded.width
    }

    /// The model call behind a segment of a row (its request holds the prompt: the messages of
    /// a chat call, the observation of an action call).
    pub fn call(&self, row: usize, segment: &Segment) -> &ModelCall {
        &self.trajectories[self.info[row].trajectory].model_calls[segment.call]
    }

    /// The sub-batch of the given rows.
    pub fn select(&self, rows: &[usize]) -> TraceBatch<'a> {
        TraceBatch::new(
            rows.iter().map(|&r| self.rows[r].clone()).collect(),
            rows.iter().map(|&r| self.info[r]).collect(),
            self.trajectories.clone(),
        )
    }

    /// A `[B][T]` array of this batch's rows, taken from the same array of `parent`'s rows
    /// `rows` (whose width may differ).
    fn regrid(&self, parent_width: usize, rows: &[usize], v: &[f64]) -> Vec<f64> {
        let w = self.width();
        let mut out = vec![0.0; rows.len() * w];
        for (i, &r) in rows.iter().enumerate() {
            let n = self.rows[i].len();
            out[i * w..i * w + n].copy_from_slice(&v[r * parent_width..r * parent_width + n]);
        }
        out
    }
}

/// A model whose weights a weight learner trains: it samples (its policy), scores traced
/// sequences, and applies a gradient with respect to per-token log-probabilities. Implemented
/// by [`super::SoftmaxPolicy`] and by hosts through the C ABI (`nenyax_trainer_vtable_t`).
pub trait Trainer: Send {
    /// A short name, for reports.
    fn name(&self) -> String;

    /// The policy that samples with the current weights.
    fn policy(&mut self) -> Result<Policy>;

    /// `log p(token[t] | its context)` for every position of every row, `[B][T]`; only the
    /// masked positions are read, and each must be finite.
    fn logprobs(&mut self, batch: &TraceBatch<'_>, weights: Weights) -> Result<Vec<f64>>;

    /// Backpropagate `grad_logp` (`dLoss/dlogp`, `[B][T]`, 0 off the mask) through the model
    /// and take one optimiser step that lowers the loss.
    fn apply(&mut self, batch: &TraceBatch<'_>, grad_logp: &[f64]) -> Result<()>;

    /// Save the weights (and optimiser state) in one slot; `Ok(false)` if it cannot.
    fn snapshot(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// Go back to the saved weights.
    fn restore(&mut self) -> Result<()> {
        Err(Error::Training(format!(
            "trainer `{}` cannot restore a snapshot",
            self.name()
        )))
    }

    /// Its settings, for the report.
    fn describe(&self) -> Value {
        json!({ "name": self.name() })
    }
}

/// What a weight learner optimises.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// A policy-gradient algorithm (a named preset or `pg` with every knob).
    Pg(Algorithm),
    /// Rejection-sampling fine-tuning: the best episode of each group scoring at least
    /// `min_score` becomes a supervised target (token-mean negative log-likelihood).
    Rft {
        /// Lowest score worth imitating.
        min_score: f64,
    },
    /// DPO (sigmoid) on each group's best-vs-worst pair against the reference weights.
    Dpo {
        /// The KL strength.
        beta: f64,
    },
}

/// How a weight learner runs its updates (beyond its objective's maths).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgOptions {
    /// Passes over each round's data (PPO epochs).
    pub epochs: usize,
    /// Optimiser steps per epoch (the rows split evenly).
    pub minibatches: usize,
    /// Join multi-turn chat calls (mask when continuity is not proven) or split them.
    pub turns: Turns,
    /// Use the sampler's log-probabilities as the old policy (TRL) instead of recomputing
    /// them with the trainer before the update (verl's default, and ours).
    pub sampled_old_logp: bool,
    /// REINFORCE++'s discount.
    pub gamma: f64,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            epochs: 1,
            minibatches: 1,
            turns: Turns::Join,
            sampled_old_logp: false,
            gamma: 1.0,
        }
    }
}

/// A weight learner: an [`Objective`] run over a [`Trainer`].
pub struct PgLearner {
    name: String,
    objective: Objective,
    opts: PgOptions,
    trainer: Box<dyn Trainer>,
}

/// One traceable trajectory of the round.
struct Entry<'a> {
    traj: &'a Trajectory,
    group: usize,
    member: usize,
    reward: f64,
}

impl PgLearner {
    /// `objective` trained through `trainer`.
    pub fn new(
        name: impl Into<String>,
        objective: Objective,
        opts: PgOptions,
        trainer: Box<dyn Trainer>,
    ) -> Result<PgLearner> {
        let name = name.into();
        if opts.epochs == 0 || opts.minibatches == 0 {
            return Err(Error::Config(format!(
                "learner `{name}`: `epochs` and `minibatches` must be at least 1"
            )));
        }
        if let Objective::Pg(a) = &objective {
            a.loss.validate()?;
            if a.estimator.is_none() && a.name != "reinforce_pp" {
                return Err(Error::Config(format!(
                    "learner `{name}` has no advantage estimator; set `estimator` (grpo, \
                     grpo_verl, grpo_trl, dr_grpo, rloo or reinforce) or use a named preset"
                )));
            }
            if a.loss.entropy_coef != 0.0 {
                return Err(Error::Config(format!(
                    "learner `{name}`: `entropy_coef` needs per-token entropies, which trainers \
                     do not report; set it to 0"
                )));
            }
        }
        if let Objective::Dpo { beta } = objective {
            if !(beta.is_finite() && beta > 0.0) {
                return Err(Error::Config(format!(
                    "learner `{name}`: `beta` is {beta}; it must be > 0"
                )));
            }
            if opts.turns == Turns::Split {
                return Err(Error::Config(format!(
                    "learner `{name}` pairs whole trajectories; `turns = \"split\"` is not \
                     supported with it"
                )));
            }
        }
        Ok(PgLearner {
            name,
            objective,
            opts,
            trainer,
        })
    }

    /// The trainer.
    pub fn trainer(&mut self) -> &mut dyn Trainer {
        self.trainer.as_mut()
    }

    /// The flattened, judged members of every group; failures counted as masked.
    fn entries<'a>(&self, groups: &'a [Group], report: &mut UpdateReport) -> Vec<Entry<'a>> {
        let mut out = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            for (m, t) in group.trajectories.iter().enumerate() {
                match (t.score(), &t.error) {
                    (Some(r), None) => out.push(Entry {
                        traj: t,
                        group: g,
                        member: m,
                        reward: r,
                    }),
                    (_, e) => report.mask(&super::MaskReason::Failed(
                        e.clone().unwrap_or_else(|| "no judgment".into()),
                    )),
                }
            }
        }
        out
    }

    /// Trace the chosen entries into a batch; each row carries its entry's index in `value`.
    fn batch<'a>(
        &self,
        entries: &[&Entry<'a>],
        report: &mut UpdateReport,
    ) -> Result<(TraceBatch<'a>, Vec<usize>)> {
        let mut rows = Vec::new();
        let mut info = Vec::new();
        let mut owner = Vec::new();
        let mut trajectories = Vec::new();
        for (k, e) in entries.iter().enumerate() {
            match trace(e.traj, self.opts.turns) {
                Ok(rs) => {
                    for r in rs {
                        rows.push(r);
                        info.push(RowInfo {
                            trajectory: trajectories.len(),
                            group: e.group,
                            member: e.member,
                            reward: e.reward,
                        });
                        owner.push(k);
                    }
                    trajectories.push(e.traj);
                }
                Err(reason) => report.mask(&reason),
            }
        }
        if rows.is_empty() || rows.iter().all(|r| r.sampled() == 0) {
            let why: Vec<String> = report
                .masked
                .iter()
                .map(|(k, n)| {
                    format!(
                        "{n} {k} (e.g. {})",
                        report.mask_examples.get(k).map_or("", String::as_str)
                    )
                })
                .collect();
            return Err(Error::Training(format!(
                "learner `{}`: every trace of this round was masked, nothing to train on: {}",
                self.name,
                if why.is_empty() {
                    "no trajectory was judged".to_string()
                } else {
                    why.join("; ")
                }
            )));
        }
        Ok((TraceBatch::new(rows, info, trajectories), owner))
    }

    /// The trainer's log-probs, checked for shape and finiteness on the mask.
    fn logprobs(&mut self, batch: &TraceBatch<'_>, w: Weights) -> Result<Vec<f64>> {
        let v = self.trainer.logprobs(batch, w)?;
        check_logprobs(&self.trainer.name(), batch, &v, w)?;
        Ok(v)
    }

    /// Whole groups go to one minibatch, so a group's members (DPO's pairs) stay together.
    fn minibatches(&self, batch: &TraceBatch<'_>) -> Vec<Vec<usize>> {
        let mut groups: Vec<usize> = batch.info.iter().map(|i| i.group).collect();
        groups.sort_unstable();
        groups.dedup();
        let k = self.opts.minibatches.min(groups.len()).max(1);
        (0..k)
            .map(|i| {
                (0..batch.len())
                    .filter(|&r| {
                        let g = groups.binary_search(&batch.info[r].group).unwrap_or(0);
                        g % k == i
                    })
                    .collect()
            })
            .collect()
    }

    /// Run `epochs` x `minibatches` steps: `step(sub-batch, its rows, logp)` gives the
    /// gradient, which the trainer applies. `first_logp` (the full batch's current log-probs,
    /// when already computed) spares one forward pass before the first step.
    fn optimise(
        &mut self,
        batch: &TraceBatch<'_>,
        first_logp: Option<&[f64]>,
        report: &mut UpdateReport,
        mut step: impl FnMut(&TraceBatch<'_>, &[usize], &[f64]) -> Result<(Vec<f64>, PgStats)>,
    ) -> Result<()> {
        let mut sums: BTreeMap<&'static str, f64> = BTreeMap::new();
        let mut steps = 0.0;
        let mut stepped = false;
        // The same minibatches every epoch: laid out once.
        let subs: Vec<(Vec<usize>, TraceBatch<'_>)> = self
            .minibatches(batch)
            .into_iter()
            .map(|rows| {
                let sub = batch.select(&rows);
                (rows, sub)
            })
            .collect();
        for _ in 0..self.opts.epochs {
            for (rows, sub) in &subs {
                let (rows, sub) = (rows.as_slice(), sub);
                let logp = match first_logp {
                    Some(l) if !stepped => sub.regrid(batch.width(), rows, l),
                    _ => {
                        let t0 = Instant::now();
                        let l = self.logprobs(sub, Weights::Current);
                        report.trainer_s += t0.elapsed().as_secs_f64();
                        l?
                    }
                };
                let (grad, stats) = step(sub, rows, &logp)?;
                let t0 = Instant::now();
                let r = self.trainer.apply(sub, &grad);
                report.trainer_s += t0.elapsed().as_secs_f64();
                r?;
                stepped = true;
                steps += 1.0;
                for (k, v) in [
                    ("loss", stats.loss),
                    ("loss_pg", stats.loss_pg),
                    ("kl", stats.kl.unwrap_or(0.0)),
                    ("clip_fraction", stats.clip_fraction),
                    ("approx_kl", stats.approx_kl),
                    ("mean_ratio", stats.mean_ratio),
                ] {
                    *sums.entry(k).or_default() += v;
                }
            }
        }
        for (k, v) in sums {
            report.metrics.insert(k.into(), v / steps);
        }
        report.metrics.insert("steps".into(), steps);
        Ok(())
    }

    fn update_pg(&mut self, alg: Algorithm, groups: &[Group]) -> Result<UpdateReport> {
        let mut report = UpdateReport::default();
        let mut entries = self.entries(groups, &mut report);
        let ids = |es: &[Entry<'_>]| es.iter().map(|e| e.group as i64).collect::<Vec<_>>();
        let rewards = |es: &[Entry<'_>]| es.iter().map(|e| e.reward).collect::<Vec<_>>();
        if alg.dapo_filter && !entries.is_empty() {
            let keep = dapo_keep(&rewards(&entries), &ids(&entries))?;
            let before = entries.len();
            let mut it = keep.into_iter();
            entries.retain(|_| it.next().unwrap_or(false));
            report
                .metrics
                .insert("dapo_filtered".into(), (before - entries.len()) as f64);
        }
        let adv_of: Vec<f64> = match alg.estimator {
            Some(est) if !entries.is_empty() => {
                advantages(&rewards(&entries), &ids(&entries), &est)?
            }
            _ => vec![0.0; entries.len()],
        };
        let token_level = alg.estimator.is_none();
        if entries.is_empty()
            || (!token_level && adv_of.iter().all(|a| *a == 0.0) && alg.loss.kl.is_none())
        {
            // Nothing differs within any group: every advantage is 0 and the gradient too.
            report.skipped = true;
            report.metrics.insert("signal".into(), 0.0);
            return Ok(report);
        }
        let chosen: Vec<&Entry<'_>> = entries.iter().collect();
        let (batch, owner) = self.batch(&chosen, &mut report)?;
        let (b, t) = (batch.len(), batch.width());
        let t0 = Instant::now();
        let old = if self.opts.sampled_old_logp {
            let s = batch.padded.sampled_logp.clone();
            check_logprobs("the sampler", &batch, &s, Weights::Current)?;
            s
        } else {
            self.logprobs(&batch, Weights::Current)?
        };
        let reference = match alg.loss.kl {
            Some(_) => Some(self.logprobs(&batch, Weights::Reference)?),
            None => None,
        };
        report.trainer_s += t0.elapsed().as_secs_f64();
        gap_metric(&batch, &old, &mut report);
        // One advantage per row (its trajectory's), or REINFORCE++'s per token.
        let adv: Vec<f64> = if token_level {
            let row_rewards: Vec<f64> = batch.info.iter().map(|i| i.reward).collect();
            let row_ids: Vec<i64> = batch.info.iter().map(|i| i.group as i64).collect();
            reinforce_pp(
                &row_rewards,
                &batch.padded.mask,
                t,
                self.opts.gamma,
                Some(&row_ids),
            )?
            .0
        } else {
            owner.iter().map(|&k| adv_of[k]).collect()
        };
        let first = (!self.opts.sampled_old_logp).then_some(old.as_slice());
        let cfg = alg.loss;
        self.optimise(&batch, first, &mut report, |sub, rows, logp| {
            let pick = |v: &[f64]| sub.regrid(t, rows, v);
            let sub_adv: Vec<f64> = if token_level {
                pick(&adv)
            } else {
                rows.iter().map(|&r| adv[r]).collect()
            };
            let (old_s, ref_s) = (pick(&old), reference.as_deref().map(pick));
            let out = pg_loss(
                &PgBatch {
                    logp,
                    old_logp: &old_s,
                    ref_logp: ref_s.as_deref(),
                    entropy: None,
                    mask: &sub.padded.mask,
                    advantages: &sub_adv,
                    width: sub.width(),
                },
                &cfg,
            )?;
            Ok((out.grad_logp, out.stats))
        })?;
        report.sequences = b;
        report.tokens = batch.rows.iter().map(TraceRow::sampled).sum();
        Ok(report)
    }

    fn update_rft(&mut self, min_score: f64, groups: &[Group]) -> Result<UpdateReport> {
        let mut report = UpdateReport::default();
        let entries = self.entries(groups, &mut report);
        // The best member of each group (the first on ties), if it scores high enough.
        let mut best: BTreeMap<usize, &Entry<'_>> = BTreeMap::new();
        for e in &entries {
            if e.reward >= min_score && best.get(&e.group).map_or(true, |b| e.reward > b.reward) {
                best.insert(e.group, e);
            }
        }
        report.metrics.insert("targets".into(), best.len() as f64);
        if best.is_empty() {
            report.skipped = true;
            return Ok(report);
        }
        let chosen: Vec<&Entry<'_>> = best.into_values().collect();
        let (batch, _) = self.batch(&chosen, &mut report)?;
        self.optimise(&batch, None, &mut report, |sub, _, logp| {
            let n = sub.padded.mask.iter().filter(|&&m| m != 0).count().max(1) as f64;
            let mut nll = 0.0;
            let grad: Vec<f64> = sub
                .padded
                .mask
                .iter()
                .zip(logp)
                .map(|(&m, &l)| {
                    if m != 0 {
                        nll -= l / n;
                        -1.0 / n
                    } else {
                        0.0
                    }
                })
                .collect();
            Ok((
                grad,
                PgStats {
                    loss: nll,
                    loss_pg: nll,
                    tokens: n as usize,
                    ..PgStats::default()
                },
            ))
        })?;
        report.sequences = batch.len();
        report.tokens = batch.rows.iter().map(TraceRow::sampled).sum();
        Ok(report)
    }

    fn update_dpo(&mut self, beta: f64, groups: &[Group]) -> Result<UpdateReport> {
        let mut report = UpdateReport::default();
        let entries = self.entries(groups, &mut report);
        // Only groups whose members differ can give a pair.
        let mut by_group: BTreeMap<usize, Vec<&Entry<'_>>> = BTreeMap::new();
        for e in &entries {
            by_group.entry(e.group).or_default().push(e);
        }
        let chosen: Vec<&Entry<'_>> = by_group
            .into_values()
            .filter(|es| es.iter().any(|e| e.reward != es[0].reward))
            .flatten()
            .collect();
        if chosen.is_empty() {
            report.skipped = true;
            report.metrics.insert("pairs".into(), 0.0);
            return Ok(report);
        }
        let (batch, _) = self.batch(&chosen, &mut report)?;
        let t0 = Instant::now();
        let reference = self.logprobs(&batch, Weights::Reference);
        report.trainer_s += t0.elapsed().as_secs_f64();
        let reference = reference?;
        let t = batch.width();
        let mut pairs = 0.0;
        let mut wins = 0.0;
        self.optimise(&batch, None, &mut report, |sub, rows, logp| {
            let rewards: Vec<f64> = sub.info.iter().map(|i| i.reward).collect();
            let ids: Vec<i64> = sub.info.iter().map(|i| i.group as i64).collect();
            let ref_s = sub.regrid(t, rows, &reference);
            let out = dpo_loss(
                &rewards,
                &ids,
                logp,
                &ref_s,
                &sub.padded.mask,
                sub.width(),
                beta,
            )?;
            pairs = out.pairs.len() as f64;
            wins = out
                .per_pair
                .iter()
                .filter(|l| **l < std::f64::consts::LN_2)
                .count() as f64;
            Ok((
                out.grad_logp,
                PgStats {
                    loss: out.loss,
                    loss_pg: out.loss,
                    ..PgStats::default()
                },
            ))
        })?;
        report.metrics.insert("pairs".into(), pairs);
        report.metrics.insert(
            "accuracy".into(),
            if pairs > 0.0 { wins / pairs } else { 0.0 },
        );
        report.sequences = batch.len();
        report.tokens = batch.rows.iter().map(TraceRow::sampled).sum();
        Ok(report)
    }
}

/// Mean |sampled - recomputed| log-prob over tokens where the sampler reported one: how far
/// the sampler and the trainer disagree (0 for a trainer that samples itself).
fn gap_metric(batch: &TraceBatch<'_>, old: &[f64], report: &mut UpdateReport) {
    let (mut sum, mut n) = (0.0, 0usize);
    for ((&m, &s), &o) in batch
        .padded
        .mask
        .iter()
        .zip(&batch.padded.sampled_logp)
        .zip(old)
    {
        if m != 0 && s.is_finite() {
            sum += (s - o).abs();
            n += 1;
        }
    }
    if n > 0 {
        report
            .metrics
            .insert("sampler_logp_gap".into(), sum / n as f64);
    }
}

/// A trainer's log-probs must be `[B][T]` and finite (and at most 0) on the mask.
fn check_logprobs(who: &str, batch: &TraceBatch<'_>, v: &[f64], w: Weights) -> Result<()> {
    let (b, t) = (batch.len(), batch.width());
    let what = match w {
        Weights::Current => "log-probabilities",
        Weights::Reference => "reference log-probabilities",
    };
    if v.len() != b * t {
        return Err(Error::Training(format!(
            "trainer `{who}` returned {} {what}; expected {b} rows x {t} tokens",
            v.len()
        )));
    }
    for (i, (&m, &l)) in batch.padded.mask.iter().zip(v).enumerate() {
        if m != 0 && !(l.is_finite() && l <= 1e-6) {
            return Err(Error::Training(format!(
                "trainer `{who}` returned {what} {l} at row {}, token {}; each must be a finite \
                 number <= 0",
                i / t,
                i % t
            )));
        }
    }
    Ok(())
}

impl Learner for PgLearner {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn policy(&mut self) -> Result<Policy> {
        self.trainer.policy()
    }

    fn update(&mut self, groups: &[Group]) -> Result<UpdateReport> {
        let signal =
            groups.iter().filter(|g| g.has_signal()).count() as f64 / groups.len().max(1) as f64;
        let mut report = match self.objective {
            Objective::Pg(a) => self.update_pg(a, groups),
            Objective::Rft { min_score } => self.update_rft(min_score, groups),
            Objective::Dpo { beta } => self.update_dpo(beta, groups),
        }?;
        report.metrics.entry("signal".into()).or_insert(signal);
        Ok(report)
    }

    fn snapshot(&mut self) -> Result<bool> {
        self.trainer.snapshot()
    }

    fn restore(&mut self) -> Result<()> {
        self.trainer.restore()
    }

    fn min_group_size(&self) -> usize {
        match self.objective {
            // A batch-mean baseline learns from groups of one.
            Objective::Pg(a) => match a.estimator {
                Some(crate::learn::Estimator::ReinforceBatchMean) => 1,
                _ => 2,
            },
            Objective::Rft { .. } => 1,
            Objective::Dpo { .. } => 2,
        }
    }

    fn describe(&self) -> Value {
        let objective = match self.objective {
            Objective::Pg(a) => a.to_json(),
            Objective::Rft { min_score } => json!({"learner": "rft", "min_score": min_score}),
            Objective::Dpo { beta } => json!({"learner": "dpo", "beta": beta}),
        };
        json!({
            "name": self.name,
            "objective": objective,
            "epochs": self.opts.epochs,
            "minibatches": self.opts.minibatches,
            "turns": match self.opts.turns { Turns::Join => "join", Turns::Split => "split" },
            "old_logp": if self.opts.sampled_old_logp { "sampled" } else { "recompute" },
            "trainer": self.trainer.describe(),
        })
    }
}
