//! Policy losses, their value and their gradient with respect to each token's log-probability
//! (pg-math.md §2-§4), on CPU in f64. A trainer backpropagates `grad_logp` through its own model.
//! Layout: row-major `[B][T]`, mask 1 = a token the loss counts; masked positions may hold
//! anything and get a gradient of exactly 0.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// The per-token surrogate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Surrogate {
    /// PPO-clip with separate low/high ranges (DAPO clip-higher) and verl's dual-clip for
    /// negative advantages; the log-ratio is clamped to ±20 as verl does.
    PpoClip {
        /// `1 - clip_low` bounds the ratio from below.
        clip_low: f64,
        /// `1 + clip_high` bounds it from above.
        clip_high: f64,
        /// Dual-clip constant `c > 1` (verl: 3), or none (TRL).
        dual_clip: Option<f64>,
    },
    /// GSPO: one ratio per sequence, the exponential of its mean token log-ratio (capped at 10
    /// as verl does), clipped like PPO.
    Gspo {
        /// Low range.
        clip_low: f64,
        /// High range.
        clip_high: f64,
    },
    /// `-A logp`, no ratio.
    Reinforce,
}

/// How per-token losses become one scalar: `L = sum w[i,t] l[i,t]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregation {
    /// `m / N`, N the valid tokens.
    TokenMean,
    /// `m / B'`, B' the rows with a valid token.
    SeqMeanTokenSum,
    /// verl: `m / ((n_i + 1e-8) B')`; with `trl_rows`, TRL's `m / (max(n_i, 1) B)`.
    SeqMeanTokenMean {
        /// Count every row, empty ones too (TRL).
        trl_rows: bool,
    },
    /// `m / D`, D the given constant or the padded width (Dr. GRPO).
    SeqMeanTokenSumNorm {
        /// The divisor; none: the padded width T.
        divisor: Option<f64>,
    },
}

/// The KL estimator against the reference policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KlEstimator {
    /// `logp - ref`.
    K1,
    /// `(logp - ref)^2 / 2`.
    K2,
    /// `exp(x) - x - 1`, `x = ref - logp` (low-variance KL).
    K3,
}

/// A KL penalty `coef * agg(k)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kl {
    /// Which estimator.
    pub estimator: KlEstimator,
    /// Its coefficient.
    pub coef: f64,
    /// verl's clamps for k3 (x to ±20, k to ±10, gradient 0 where either bites); TRL has none.
    pub clamp: bool,
}

/// Everything a policy-gradient loss needs to know besides the data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgConfig {
    /// The surrogate.
    pub surrogate: Surrogate,
    /// The aggregation.
    pub aggregation: Aggregation,
    /// The KL penalty, if any.
    pub kl: Option<Kl>,
    /// Entropy bonus coefficient (0: none).
    pub entropy_coef: f64,
}

/// The data of one batch.
#[derive(Debug, Clone, Copy)]
pub struct PgBatch<'a> {
    /// Current-policy log-probs of the sampled tokens, `[B][T]`.
    pub logp: &'a [f64],
    /// Old (behaviour) policy log-probs, `[B][T]`; for REINFORCE pass `logp`.
    pub old_logp: &'a [f64],
    /// Reference-policy log-probs, `[B][T]`, needed with a KL penalty.
    pub ref_logp: Option<&'a [f64]>,
    /// Token entropies, `[B][T]`, needed with an entropy bonus.
    pub entropy: Option<&'a [f64]>,
    /// 1 = counted, 0 = ignored, `[B][T]`.
    pub mask: &'a [u8],
    /// One advantage per sequence, `[B]`.
    pub advantages: &'a [f64],
    /// T.
    pub width: usize,
}

/// The loss, its gradient, and what a trainer logs.
#[derive(Debug, Clone, PartialEq)]
pub struct PgOutput {
    /// The total loss (policy + KL - entropy).
    pub loss: f64,
    /// The policy term alone.
    pub loss_pg: f64,
    /// `agg(k)` before its coefficient, with a KL penalty.
    pub kl: Option<f64>,
    /// `agg(H)`, with an entropy bonus.
    pub entropy: Option<f64>,
    /// `dL/dlogp[i,t]`, `[B][T]`, 0 on masked tokens.
    pub grad_logp: Vec<f64>,
    /// `dL/dH[i,t]`, with an entropy bonus.
    pub grad_entropy: Option<Vec<f64>>,
    /// Fraction of valid tokens whose ratio was clipped (no gradient from the policy term).
    pub clip_fraction: f64,
    /// Mean over valid tokens of `old - logp` (verl's `ppo_kl`).
    pub approx_kl: f64,
    /// Mean token ratio `exp(logp - old)` over valid tokens.
    pub mean_ratio: f64,
}

fn bad(arg: &str, why: String) -> Error {
    Error::Config(format!("`{arg}`: {why}"))
}

fn check_len(arg: &str, v: &[f64], want: usize) -> Result<()> {
    if v.len() != want {
        return Err(bad(arg, format!("has {} values; expected {want}", v.len())));
    }
    if let Some(i) = v.iter().position(|x| x.is_nan()) {
        return Err(bad(arg, format!("{arg}[{i}] is NaN")));
    }
    Ok(())
}

fn check_clip(low: f64, high: f64) -> Result<()> {
    for (name, v) in [("clip_low", low), ("clip_high", high)] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(bad(
                name,
                format!("is {v}; it must be a finite number >= 0"),
            ));
        }
    }
    if low >= 1.0 {
        return Err(bad("clip_low", format!("is {low}; it must be below 1")));
    }
    Ok(())
}

/// Whether a ratio `r` under advantage `a` still passes gradient (pg-math.md §2.1).
fn active(a: f64, r: f64, low: f64, high: f64, dual: Option<f64>) -> bool {
    if a > 0.0 {
        r <= 1.0 + high
    } else if a < 0.0 {
        r >= 1.0 - low && dual.map_or(true, |c| r < c)
    } else {
        false
    }
}

fn clipped_loss(a: f64, r: f64, low: f64, high: f64, dual: Option<f64>) -> f64 {
    let l = (-a * r).max(-a * r.clamp(1.0 - low, 1.0 + high));
    match dual {
        Some(c) if a < 0.0 => l.min(-a * c),
        _ => l,
    }
}

/// The loss and its gradient for one batch.
pub fn pg_loss(batch: &PgBatch<'_>, cfg: &PgConfig) -> Result<PgOutput> {
    let b = batch.advantages.len();
    let t = batch.width;
    if b == 0 || t == 0 {
        return Err(bad(
            "advantages",
            "is empty; pass at least one sequence".into(),
        ));
    }
    let n_tok = b * t;
    check_len("advantages", batch.advantages, b)?;
    if let Some(i) = batch.advantages.iter().position(|a| !a.is_finite()) {
        return Err(bad("advantages", format!("advantages[{i}] is not finite")));
    }
    if batch.mask.len() != n_tok {
        return Err(bad(
            "mask",
            format!("has {} values; expected {b} x {t}", batch.mask.len()),
        ));
    }
    let m = |k: usize| f64::from(u8::from(batch.mask[k] != 0));
    // Garbage is allowed on masked positions, so only valid tokens are checked for NaN.
    let check = |arg: &str, v: &[f64]| -> Result<()> {
        if v.len() != n_tok {
            return Err(bad(
                arg,
                format!("has {} values; expected {b} x {t}", v.len()),
            ));
        }
        if let Some(k) = (0..n_tok).find(|&k| batch.mask[k] != 0 && v[k].is_nan()) {
            return Err(bad(arg, format!("{arg}[{}][{}] is NaN", k / t, k % t)));
        }
        Ok(())
    };
    check("logp", batch.logp)?;
    check("old_logp", batch.old_logp)?;
    let lens: Vec<f64> = (0..b).map(|i| (0..t).map(|j| m(i * t + j)).sum()).collect();
    let n: f64 = lens.iter().sum();
    if n == 0.0 {
        return Err(bad(
            "mask",
            "has no valid tokens; nothing to compute a loss over".into(),
        ));
    }
    let rows = lens.iter().filter(|&&l| l > 0.0).count() as f64;
    let row_weight: Vec<f64> = match cfg.aggregation {
        Aggregation::TokenMean => vec![1.0 / n; b],
        Aggregation::SeqMeanTokenSum => vec![1.0 / rows; b],
        Aggregation::SeqMeanTokenMean { trl_rows: false } => {
            lens.iter().map(|l| 1.0 / ((l + 1e-8) * rows)).collect()
        }
        Aggregation::SeqMeanTokenMean { trl_rows: true } => {
            lens.iter().map(|l| 1.0 / (l.max(1.0) * b as f64)).collect()
        }
        Aggregation::SeqMeanTokenSumNorm { divisor } => {
            let d = divisor.unwrap_or(t as f64);
            if !(d.is_finite() && d > 0.0) {
                return Err(bad(
                    "divisor",
                    format!("is {d}; it must be a positive number"),
                ));
            }
            vec![1.0 / d; b]
        }
    };
    let mut grad = vec![0.0; n_tok];
    let (mut loss_pg, mut clipped, mut approx_kl, mut ratio_sum) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..b {
        let a = batch.advantages[i];
        let w = row_weight[i];
        // GSPO's sequence ratio, from the row's mean log-ratio.
        let seq_ratio = match cfg.surrogate {
            Surrogate::Gspo { .. } => {
                let s: f64 = (0..t)
                    .map(|j| {
                        let k = i * t + j;
                        if batch.mask[k] != 0 {
                            batch.logp[k] - batch.old_logp[k]
                        } else {
                            0.0
                        }
                    })
                    .sum::<f64>()
                    / lens[i].max(1.0);
                s.min(10.0).exp()
            }
            _ => 1.0,
        };
        for j in 0..t {
            let k = i * t + j;
            if batch.mask[k] == 0 {
                continue;
            }
            let delta = batch.logp[k] - batch.old_logp[k];
            approx_kl -= delta;
            ratio_sum += delta.exp();
            let (l, g, was_clipped) = match cfg.surrogate {
                Surrogate::Reinforce => (-a * batch.logp[k], -a, false),
                Surrogate::PpoClip {
                    clip_low,
                    clip_high,
                    dual_clip,
                } => {
                    check_clip(clip_low, clip_high)?;
                    if let Some(c) = dual_clip {
                        if c.is_nan() || c <= 1.0 {
                            return Err(bad("dual_clip", format!("is {c}; it must be > 1")));
                        }
                    }
                    let r = delta.clamp(-20.0, 20.0).exp();
                    let on = active(a, r, clip_low, clip_high, dual_clip) && delta.abs() < 20.0;
                    let l = clipped_loss(a, r, clip_low, clip_high, dual_clip);
                    (l, if on { -a * r } else { 0.0 }, !on && a != 0.0)
                }
                Surrogate::Gspo {
                    clip_low,
                    clip_high,
                } => {
                    check_clip(clip_low, clip_high)?;
                    let r = seq_ratio;
                    let on = active(a, r, clip_low, clip_high, None);
                    let l = clipped_loss(a, r, clip_low, clip_high, None);
                    (l, if on { -a * r } else { 0.0 }, !on && a != 0.0)
                }
            };
            loss_pg += w * l;
            grad[k] = w * g;
            clipped += f64::from(u8::from(was_clipped));
        }
    }
    let mut loss = loss_pg;
    let mut kl_value = None;
    if let Some(kl) = cfg.kl {
        let rf = batch
            .ref_logp
            .ok_or_else(|| bad("ref_logp", "is required with a KL penalty".into()))?;
        check("ref_logp", rf)?;
        if !kl.coef.is_finite() {
            return Err(bad("kl.coef", format!("is {}; it must be finite", kl.coef)));
        }
        let mut total = 0.0;
        for k in 0..n_tok {
            if batch.mask[k] == 0 {
                continue;
            }
            let w = row_weight[k / t];
            let d = batch.logp[k] - rf[k];
            let (v, dv) = match kl.estimator {
                KlEstimator::K1 => (d, 1.0),
                KlEstimator::K2 => (0.5 * d * d, d),
                KlEstimator::K3 => {
                    let x = -d;
                    if kl.clamp {
                        let xc = x.clamp(-20.0, 20.0);
                        let v = xc.exp() - xc - 1.0;
                        let vc = v.clamp(-10.0, 10.0);
                        let free = xc == x && vc == v;
                        (vc, if free { 1.0 - x.exp() } else { 0.0 })
                    } else {
                        (x.exp() - x - 1.0, 1.0 - x.exp())
                    }
                }
            };
            total += w * v;
            grad[k] += kl.coef * w * dv;
        }
        loss += kl.coef * total;
        kl_value = Some(total);
    }
    let (mut ent_value, mut grad_entropy) = (None, None);
    if cfg.entropy_coef != 0.0 {
        let h = batch
            .entropy
            .ok_or_else(|| bad("entropy", "is required with an entropy bonus".into()))?;
        check("entropy", h)?;
        let mut total = 0.0;
        let mut g = vec![0.0; n_tok];
        for k in 0..n_tok {
            if batch.mask[k] != 0 {
                let w = row_weight[k / t];
                total += w * h[k];
                g[k] = -cfg.entropy_coef * w;
            }
        }
        loss -= cfg.entropy_coef * total;
        ent_value = Some(total);
        grad_entropy = Some(g);
    }
    Ok(PgOutput {
        loss,
        loss_pg,
        kl: kl_value,
        entropy: ent_value,
        grad_logp: grad,
        grad_entropy,
        clip_fraction: clipped / n,
        approx_kl: approx_kl / n,
        mean_ratio: ratio_sum / n,
    })
}

/// DPO (sigmoid) on best-vs-worst pairs of each group: the highest reward is chosen, the lowest
/// rejected (ties: the lowest index), groups whose rewards are all equal are skipped. Sequence
/// log-probs are sums over valid tokens. Returns the mean loss over pairs, each pair's loss and
/// `dL/dlogp`.
pub fn dpo_loss(
    rewards: &[f64],
    group_ids: &[i64],
    logp: &[f64],
    ref_logp: &[f64],
    mask: &[u8],
    width: usize,
    beta: f64,
) -> Result<(f64, Vec<f64>, Vec<f64>)> {
    let b = rewards.len();
    if b == 0 || group_ids.len() != b {
        return Err(bad(
            "group_ids",
            format!("has {} entries for {b} rewards", group_ids.len()),
        ));
    }
    if let Some(i) = rewards.iter().position(|r| !r.is_finite()) {
        return Err(bad("rewards", format!("rewards[{i}] is not finite")));
    }
    if !(beta.is_finite() && beta > 0.0) {
        return Err(bad("beta", format!("is {beta}; it must be > 0")));
    }
    let n_tok = b * width;
    for (arg, v) in [("logp", logp), ("ref_logp", ref_logp)] {
        if v.len() != n_tok {
            return Err(bad(
                arg,
                format!("has {} values; expected {b} x {width}", v.len()),
            ));
        }
    }
    if mask.len() != n_tok {
        return Err(bad(
            "mask",
            format!("has {} values; expected {b} x {width}", mask.len()),
        ));
    }
    let seq = |i: usize| -> f64 {
        (0..width)
            .filter(|&j| mask[i * width + j] != 0)
            .map(|j| logp[i * width + j] - ref_logp[i * width + j])
            .sum()
    };
    let mut order: Vec<i64> = Vec::new();
    let mut members: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, g) in group_ids.iter().enumerate() {
        members
            .entry(*g)
            .or_insert_with(|| {
                order.push(*g);
                Vec::new()
            })
            .push(i);
    }
    let mut pairs = Vec::new();
    for g in order {
        let idx = &members[&g];
        let best = *idx
            .iter()
            .reduce(|x, y| if rewards[*y] > rewards[*x] { y } else { x })
            .expect("non-empty");
        let worst = *idx
            .iter()
            .reduce(|x, y| if rewards[*y] < rewards[*x] { y } else { x })
            .expect("non-empty");
        if rewards[best] > rewards[worst] {
            pairs.push((best, worst));
        }
    }
    if pairs.is_empty() {
        return Err(bad(
            "rewards",
            "no group has two different rewards, so there is no pair to learn from".into(),
        ));
    }
    let p = pairs.len() as f64;
    let mut grad = vec![0.0; n_tok];
    let mut per_pair = Vec::with_capacity(pairs.len());
    for (c, j) in pairs {
        let z = beta * (seq(c) - seq(j));
        // softplus(-z) and sigmoid(-z), stable on both sides.
        let loss = if z > 0.0 {
            (-z).exp().ln_1p()
        } else {
            -z + z.exp().ln_1p()
        };
        let sig = 1.0 / (1.0 + z.exp());
        per_pair.push(loss);
        for t in 0..width {
            let (kc, kj) = (c * width + t, j * width + t);
            if mask[kc] != 0 {
                grad[kc] -= beta / p * sig;
            }
            if mask[kj] != 0 {
                grad[kj] += beta / p * sig;
            }
        }
    }
    let mean = per_pair.iter().sum::<f64>() / p;
    Ok((mean, per_pair, grad))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(surrogate: Surrogate) -> PgConfig {
        PgConfig {
            surrogate,
            aggregation: Aggregation::TokenMean,
            kl: None,
            entropy_coef: 0.0,
        }
    }

    const PPO: Surrogate = Surrogate::PpoClip {
        clip_low: 0.2,
        clip_high: 0.2,
        dual_clip: None,
    };

    #[test]
    fn bad_input_names_the_argument() {
        let (lp, old) = (vec![-1.0; 4], vec![-1.0; 4]);
        let batch = |mask: &'static [u8], adv: &'static [f64]| PgBatch {
            logp: &[],
            old_logp: &[],
            ref_logp: None,
            entropy: None,
            mask,
            advantages: adv,
            width: 2,
        };
        let err = |b: PgBatch<'_>, c: PgConfig| pg_loss(&b, &c).unwrap_err().to_string();
        let mut b = batch(&[1, 1, 1, 1], &[1.0, -1.0]);
        b.logp = &lp[..3];
        b.old_logp = &old;
        assert!(err(b, cfg(PPO)).contains("`logp`"));
        let mut b = batch(&[0, 0, 0, 0], &[1.0, -1.0]);
        b.logp = &lp;
        b.old_logp = &old;
        assert!(err(b, cfg(PPO)).contains("no valid tokens"));
        let nan = [f64::NAN, -1.0, -1.0, -1.0];
        let mut b = batch(&[1, 1, 1, 1], &[1.0, -1.0]);
        b.logp = &nan;
        b.old_logp = &old;
        assert!(err(b, cfg(PPO)).contains("logp[0][0] is NaN"));
        let mut b = batch(&[1, 1, 1, 1], &[1.0, -1.0]);
        b.logp = &lp;
        b.old_logp = &old;
        let negative = Surrogate::PpoClip {
            clip_low: -0.1,
            clip_high: 0.2,
            dual_clip: None,
        };
        assert!(err(b, cfg(negative)).contains("`clip_low`"));
        let mut with_kl = cfg(PPO);
        with_kl.kl = Some(Kl {
            estimator: KlEstimator::K3,
            coef: 0.1,
            clamp: true,
        });
        assert!(err(b, with_kl).contains("`ref_logp`"));
        // Garbage under the mask is fine.
        let garbage = [-1.0, f64::NAN, -1.0, -1.0];
        let mut ok = batch(&[1, 0, 1, 1], &[1.0, -1.0]);
        ok.logp = &garbage;
        ok.old_logp = &old;
        assert_eq!(pg_loss(&ok, &cfg(PPO)).unwrap().grad_logp[1], 0.0);
        let e = dpo_loss(&[1.0, 1.0], &[0, 0], &lp, &old, &[1, 1, 1, 1], 2, 0.1).unwrap_err();
        assert!(
            e.to_string().contains("no group has two different rewards"),
            "{e}"
        );
    }
}
