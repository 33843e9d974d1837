//! What a training run reports: per round its scores, outcome, learning signal, tokens and the
//! time of each phase; as text ([`TrainReport::render`]), JSON and an SVG learning curve.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;

use super::options::TrainOptions;
use super::UpdateReport;

/// Seconds per phase of a round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Times {
    /// The whole round.
    pub wall_s: f64,
    /// Training rollouts (the policy's own sampling included).
    pub rollout_s: f64,
    /// The update, the trainer's share included.
    pub update_s: f64,
    /// Inside the trainer: its forward and backward passes and optimiser steps.
    pub trainer_s: f64,
    /// The held-out evaluation.
    pub eval_s: f64,
    /// Snapshots and restores.
    pub gate_s: f64,
    /// The loop's own cost: everything but rollouts, evaluation and the trainer.
    pub overhead_s: f64,
}

/// One round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundReport {
    /// 0 for the baseline evaluation, then 1, 2, ...
    pub round: usize,
    /// `baseline`, `kept`, `reverted` or `failed`.
    pub outcome: String,
    /// Kept without a gate because the learner cannot snapshot.
    pub ungated: bool,
    /// Why the round failed.
    pub error: Option<String>,
    /// Mean score of the training rollouts that were judged.
    pub train_score: Option<f64>,
    /// Held-out mean score after the update (failed episodes count 0).
    pub eval_score: Option<f64>,
    /// Standard error of that mean.
    pub eval_se: Option<f64>,
    /// The score below which the update was reverted (the current policy's held-out score
    /// less the tolerance and the noise allowance).
    pub gate_bar: Option<f64>,
    /// Held-out episodes that failed.
    pub eval_failed: usize,
    /// Training episodes.
    pub episodes: usize,
    /// Training episodes that failed.
    pub failed_episodes: usize,
    /// Fraction of groups whose members scored differently (any learning signal).
    pub signal: f64,
    /// Completion tokens the policy sampled in the training rollouts.
    pub sampled_tokens: usize,
    /// What the update did.
    pub update: Option<UpdateReport>,
    /// Where the time went.
    pub times: Times,
}

impl RoundReport {
    pub(super) fn new(round: usize) -> Self {
        RoundReport {
            round,
            outcome: String::new(),
            ungated: false,
            error: None,
            train_score: None,
            eval_score: None,
            eval_se: None,
            gate_bar: None,
            eval_failed: 0,
            episodes: 0,
            failed_episodes: 0,
            signal: 0.0,
            sampled_tokens: 0,
            update: None,
            times: Times::default(),
        }
    }

    /// The round as one line of text.
    pub fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("  -   ".to_string(), |v| format!("{v:6.3}"));
        if self.round == 0 {
            return format!(
                "baseline  eval {}  ({:.1}s)",
                f(self.eval_score),
                self.times.wall_s
            );
        }
        let mut s = format!(
            "round {:>3}  train {}  eval {}  signal {:.2}  {:<8} {:6.1}s",
            self.round,
            f(self.train_score),
            f(self.eval_score),
            self.signal,
            self.outcome,
            self.times.wall_s
        );
        if let Some(u) = &self.update {
            for k in [
                "loss",
                "clip_fraction",
                "kl",
                "added",
                "banked",
                "pairs",
                "targets",
            ] {
                match u.metrics.get(k) {
                    Some(v) if v.fract() == 0.0 && v.abs() < 1e9 => {
                        let _ = write!(s, "  {k} {v}");
                    }
                    Some(v) => {
                        let _ = write!(s, "  {k} {v:.4}");
                    }
                    None => {}
                }
            }
            if u.masked_total() > 0 {
                let _ = write!(s, "  masked {}", u.masked_total());
            }
        }
        if let Some(e) = &self.error {
            let _ = write!(s, "\n           {e}");
        }
        s
    }
}

/// A whole training run (what `to_json` writes reads back, e.g. to plot it later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The environment.
    pub env: String,
    /// The learner's settings.
    pub learner: Value,
    /// The options it ran with.
    pub options: TrainOptions,
    /// Tasks in the training pool (0: seeds only).
    pub train_tasks: usize,
    /// Held-out tasks (or seeds).
    pub held_out: usize,
    /// Held-out score before training.
    pub baseline: f64,
    /// Best held-out score seen.
    pub best: f64,
    /// Held-out score of the policy the run ends with.
    pub final_eval: f64,
    /// Whether harmful updates could be reverted (the learner snapshots).
    pub gated: bool,
    /// Round 0 (the baseline) then every round.
    pub rounds: Vec<RoundReport>,
    /// Seconds, all told.
    pub wall_s: f64,
}

impl TrainReport {
    pub(super) fn new(
        env: &str,
        learner: Value,
        opts: &TrainOptions,
        train_tasks: usize,
        held_out: usize,
    ) -> Self {
        TrainReport {
            env: env.to_string(),
            learner,
            options: opts.clone(),
            train_tasks,
            held_out,
            baseline: 0.0,
            best: 0.0,
            final_eval: 0.0,
            gated: opts.gate,
            rounds: Vec::new(),
            wall_s: 0.0,
        }
    }

    /// Rounds that failed.
    pub fn failed_rounds(&self) -> usize {
        self.rounds.iter().filter(|r| r.outcome == "failed").count()
    }

    /// Mean of the loop's own overhead over the rounds that ran, as a fraction of their time.
    pub fn overhead_fraction(&self) -> f64 {
        let (o, w) = self
            .rounds
            .iter()
            .filter(|r| r.round > 0)
            .fold((0.0, 0.0), |(o, w), r| {
                (o + r.times.overhead_s, w + r.times.wall_s)
            });
        if w > 0.0 {
            o / w
        } else {
            0.0
        }
    }

    /// The learner's name, as its settings give it.
    pub fn learner_name(&self) -> &str {
        self.learner
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("?")
    }

    /// The run as text: a header, one line per round, and the outcome.
    pub fn render(&self) -> String {
        let name = self.learner_name();
        let mut s = format!(
            "train {}  learner {name}  {} rounds x {} groups x {}  held out {}{}\n",
            self.env,
            self.options.rounds,
            self.options.batch,
            self.options.group_size,
            self.held_out,
            if self.train_tasks > 0 {
                format!(" of {} tasks", self.train_tasks + self.held_out)
            } else {
                " seeds".into()
            }
        );
        for r in &self.rounds {
            let _ = writeln!(s, "{}", r.line());
        }
        let signal: Vec<f64> = self.rounds.iter().skip(1).map(|r| r.signal).collect();
        let reverted = self
            .rounds
            .iter()
            .filter(|r| r.outcome == "reverted")
            .count();
        let _ = write!(
            s,
            "held-out {:.3} -> {:.3} (best {:.3}); {} kept, {} reverted, {} failed; signal {:.2}; {:.1}s{}",
            self.baseline,
            self.final_eval,
            self.best,
            self.rounds.iter().filter(|r| r.outcome == "kept").count(),
            reverted,
            self.failed_rounds(),
            if signal.is_empty() {
                0.0
            } else {
                signal.iter().sum::<f64>() / signal.len() as f64
            },
            self.wall_s,
            if self.gated || !self.options.gate {
                ""
            } else {
                "\n(no gating: the learner cannot snapshot, so no update could be reverted)"
            }
        );
        s
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A learning curve (held-out and training score per round) as a standalone SVG.
    pub fn svg(&self) -> String {
        let (w, h, pad) = (640.0, 360.0, 48.0);
        let eval: Vec<(f64, f64)> = self
            .rounds
            .iter()
            .filter_map(|r| Some((r.round as f64, r.eval_score?)))
            .collect();
        let train: Vec<(f64, f64)> = self
            .rounds
            .iter()
            .filter_map(|r| Some((r.round as f64, r.train_score?)))
            .collect();
        let all = eval.iter().chain(&train).map(|p| p.1);
        let (mut lo, mut hi) = all.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        if lo > hi {
            (lo, hi) = (0.0, 1.0);
        }
        if hi - lo < 1e-9 {
            hi = lo + 1.0;
        }
        let last = self.rounds.last().map_or(1, |r| r.round.max(1)) as f64;
        let x = |r: f64| pad + r / last * (w - 2.0 * pad);
        let y = |v: f64| h - pad - (v - lo) / (hi - lo) * (h - 2.0 * pad);
        let path = |pts: &[(f64, f64)]| {
            pts.iter()
                .map(|(r, v)| format!("{:.1},{:.1}", x(*r), y(*v)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let name = self.learner_name();
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{pad}\" y=\"24\" font-size=\"14\">{} / {name}: held-out {:.3} -> {:.3}</text>\n\
             <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
             <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
             <text x=\"{pad}\" y=\"{lb}\">round 0</text><text x=\"{r}\" y=\"{lb}\" text-anchor=\"end\">round {last}</text>\n\
             <text x=\"4\" y=\"{b}\">{lo:.2}</text><text x=\"4\" y=\"{pad}\">{hi:.2}</text>\n",
            xml(&self.env),
            self.baseline,
            self.final_eval,
            b = h - pad,
            r = w - pad,
            lb = h - pad + 16.0,
        );
        for (pts, colour, label, dy) in [
            (&eval, "#1f77b4", "held-out", 0.0),
            (&train, "#ff7f0e", "train", 16.0),
        ] {
            if pts.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
                path(pts)
            );
            for (rr, v) in pts.iter() {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                    x(*rr),
                    y(*v)
                );
            }
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{label}</text>",
                w - pad - 80.0,
                pad + 12.0 + dy
            );
        }
        for r in self.rounds.iter().filter(|r| r.outcome == "reverted") {
            if let Some(v) = r.eval_score {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#d62728\" text-anchor=\"middle\">x</text>",
                    x(r.round as f64),
                    y(v) - 6.0
                );
            }
        }
        s.push_str("</svg>\n");
        s
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
