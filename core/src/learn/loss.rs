//! Policy losses, their value and their gradient with respect to each token's log-probability
//! (pg-math.md §2-§4), on CPU in f32 or f64, one fused pass per row with rows in parallel. A trainer backpropagates `grad_logp` through its own model.
//! Layout: row-major `[B][T]`, mask 1 = a token the loss counts; masked positions may hold
//! anything and get a gradient of exactly 0.

use std::collections::HashMap;

use rayon::prelude::*;

use super::fast;

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

/// A float type the learners take and give: `f32` or `f64`. The per-token maths runs in f64
/// whatever the storage type, so an f32 caller gets the f64 result rounded once; sums are f64.
pub trait Real: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// Widen to f64.
    fn to_f64(self) -> f64;
    /// Round from f64.
    fn from_f64(v: f64) -> Self;
    /// The slice as f32, for the 8-lane f32 pass; `None` for other types.
    #[doc(hidden)]
    fn as_f32(_v: &[Self]) -> Option<&[f32]> {
        None
    }
    /// The mutable slice as f32, for the 8-lane f32 pass.
    #[doc(hidden)]
    fn as_f32_mut(_v: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
    /// The slice as f64, for the 4-lane f64 pass; `None` for other types.
    #[doc(hidden)]
    fn as_f64(_v: &[Self]) -> Option<&[f64]> {
        None
    }
    /// The mutable slice as f64, for the 4-lane f64 pass.
    #[doc(hidden)]
    fn as_f64_mut(_v: &mut [Self]) -> Option<&mut [f64]> {
        None
    }
}

impl Real for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    fn as_f64(v: &[Self]) -> Option<&[f64]> {
        Some(v)
    }
    fn as_f64_mut(v: &mut [Self]) -> Option<&mut [f64]> {
        Some(v)
    }
}

impl Real for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn as_f32(v: &[Self]) -> Option<&[f32]> {
        Some(v)
    }
    fn as_f32_mut(v: &mut [Self]) -> Option<&mut [f32]> {
        Some(v)
    }
}

/// The data of one batch: `B = mask.len() / width` rows.
#[derive(Debug, Clone, Copy)]
pub struct PgBatch<'a, F: Real = f64> {
    /// Current-policy log-probs of the sampled tokens, `[B][T]`.
    pub logp: &'a [F],
    /// Old (behaviour) policy log-probs, `[B][T]`; for REINFORCE pass `logp`.
    pub old_logp: &'a [F],
    /// Reference-policy log-probs, `[B][T]`, needed with a KL penalty.
    pub ref_logp: Option<&'a [F]>,
    /// Token entropies, `[B][T]`, needed with an entropy bonus.
    pub entropy: Option<&'a [F]>,
    /// 1 = counted, 0 = ignored, `[B][T]`.
    pub mask: &'a [u8],
    /// One advantage per sequence (`[B]`), or one per token (`[B][T]`, REINFORCE++ with
    /// gamma < 1).
    pub advantages: &'a [F],
    /// T.
    pub width: usize,
}

/// The scalars of a loss call: the value and what a trainer logs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PgStats {
    /// The total loss (policy + KL - entropy).
    pub loss: f64,
    /// The policy term alone.
    pub loss_pg: f64,
    /// `agg(k)` before its coefficient, with a KL penalty.
    pub kl: Option<f64>,
    /// `agg(H)`, with an entropy bonus.
    pub entropy: Option<f64>,
    /// Fraction of valid tokens whose ratio was clipped (no gradient from the policy term).
    pub clip_fraction: f64,
    /// Mean over valid tokens of `old - logp` (verl's `ppo_kl`).
    pub approx_kl: f64,
    /// Mean token ratio `exp(logp - old)` over valid tokens.
    pub mean_ratio: f64,
    /// Valid tokens N.
    pub tokens: usize,
    /// Rows with at least one valid token B'.
    pub rows: usize,
}

/// The loss, its gradient, and what a trainer logs.
#[derive(Debug, Clone, PartialEq)]
pub struct PgOutput<F: Real = f64> {
    /// The scalars.
    pub stats: PgStats,
    /// `dL/dlogp[i,t]`, `[B][T]`, 0 on masked tokens.
    pub grad_logp: Vec<F>,
    /// `dL/dH[i,t]`, with an entropy bonus.
    pub grad_entropy: Option<Vec<F>>,
}

fn bad(arg: &str, why: String) -> Error {
    Error::Config(format!("`{arg}`: {why}"))
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

impl PgConfig {
    /// Every knob in range, so that the per-token loop never has to check.
    pub fn validate(&self) -> Result<()> {
        match self.surrogate {
            Surrogate::PpoClip {
                clip_low,
                clip_high,
                dual_clip,
            } => {
                check_clip(clip_low, clip_high)?;
                if let Some(c) = dual_clip {
                    if !(c.is_finite() && c > 1.0) {
                        return Err(bad("dual_clip", format!("is {c}; it must be > 1")));
                    }
                }
            }
            Surrogate::Gspo {
                clip_low,
                clip_high,
            } => check_clip(clip_low, clip_high)?,
            Surrogate::Reinforce => {}
        }
        if let Aggregation::SeqMeanTokenSumNorm { divisor: Some(d) } = self.aggregation {
            if !(d.is_finite() && d > 0.0) {
                return Err(bad(
                    "divisor",
                    format!("is {d}; it must be a positive number"),
                ));
            }
        }
        if let Some(kl) = self.kl {
            if !kl.coef.is_finite() {
                return Err(bad("kl.coef", format!("is {}; it must be finite", kl.coef)));
            }
        }
        if !self.entropy_coef.is_finite() {
            return Err(bad(
                "entropy_coef",
                format!("is {}; it must be finite", self.entropy_coef),
            ));
        }
        Ok(())
    }
}

/// Whether a ratio `r` under advantage `a` still passes gradient (pg-math.md §2.1).
#[inline(always)]
fn active(a: f64, r: f64, low: f64, high: f64, dual: Option<f64>) -> bool {
    if a > 0.0 {
        r <= 1.0 + high
    } else if a < 0.0 {
        r >= 1.0 - low && dual.map_or(true, |c| r < c)
    } else {
        false
    }
}

#[inline(always)]
fn clipped_loss(a: f64, r: f64, low: f64, high: f64, dual: Option<f64>) -> f64 {
    let l = (-a * r).max(-a * r.clamp(1.0 - low, 1.0 + high));
    match dual {
        Some(c) if a < 0.0 => l.min(-a * c),
        _ => l,
    }
}

/// One KL estimator's value and derivative in `logp` at `d = logp - ref`.
#[inline(always)]
fn kl_term(kl: &Kl, d: f64) -> (f64, f64) {
    match kl.estimator {
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
                let e = x.exp();
                (e - x - 1.0, 1.0 - e)
            }
        }
    }
}

/// Each row's share of the batch sums; added up in row order so results do not depend on
/// how rayon split the work.
#[derive(Debug, Clone, Copy, Default)]
struct RowSums {
    loss_pg: f64,
    kl: f64,
    entropy: f64,
    clipped: f64,
    approx_kl: f64,
    ratio: f64,
}

/// Below this many tokens a batch runs on the calling thread: rayon's hand-off costs more.
const PARALLEL_MIN_TOKENS: usize = 1 << 15;

/// The weight `w_i` every valid token of row `i` gets in `L = sum w l` (pg-math.md §3).
fn row_weights(agg: Aggregation, lens: &[usize], t: usize) -> Vec<f64> {
    let n: usize = lens.iter().sum();
    let rows = lens.iter().filter(|&&l| l > 0).count() as f64;
    let b = lens.len() as f64;
    lens.iter()
        .map(|&l| {
            let l = l as f64;
            match agg {
                Aggregation::TokenMean => 1.0 / n as f64,
                Aggregation::SeqMeanTokenSum => 1.0 / rows,
                Aggregation::SeqMeanTokenMean { trl_rows: false } => 1.0 / ((l + 1e-8) * rows),
                Aggregation::SeqMeanTokenMean { trl_rows: true } => 1.0 / (l.max(1.0) * b),
                Aggregation::SeqMeanTokenSumNorm { divisor } => 1.0 / divisor.unwrap_or(t as f64),
            }
        })
        .collect()
}

/// Where a row found bad data: (argument, column).
type RowError = (&'static str, usize);

/// The fused pass over one row: loss terms, gradients and metrics, masked tokens set to 0.
#[allow(clippy::too_many_arguments)]
fn row_pass<F: Real>(
    batch: &PgBatch<'_, F>,
    cfg: &PgConfig,
    i: usize,
    w: f64,
    len: usize,
    grad: &mut [F],
    grad_entropy: Option<&mut [F]>,
) -> std::result::Result<RowSums, RowError> {
    let t = batch.width;
    let base = i * t;
    let mask = &batch.mask[base..base + t];
    let logp = &batch.logp[base..base + t];
    let old = &batch.old_logp[base..base + t];
    let zero = F::from_f64(0.0);
    let mut s = RowSums::default();
    if len == 0 {
        grad.fill(zero);
        if let Some(ge) = grad_entropy {
            ge.fill(zero);
        }
        return Ok(s);
    }
    let token_adv = batch.advantages.len() != batch.mask.len() / t;
    let adv = |j: usize| {
        if token_adv {
            batch.advantages[base + j].to_f64()
        } else {
            batch.advantages[i].to_f64()
        }
    };
    // GSPO's sequence ratio, from the row's mean log-ratio (capped at 10 as verl does).
    let seq_ratio = match cfg.surrogate {
        Surrogate::Gspo { .. } => {
            let mut sum = 0.0;
            for j in 0..t {
                if mask[j] != 0 {
                    sum += logp[j].to_f64() - old[j].to_f64();
                }
            }
            (sum / len as f64).min(10.0).exp()
        }
        _ => 1.0,
    };
    let reference = batch.ref_logp.map(|r| &r[base..base + t]);
    let kl = cfg.kl.filter(|_| reference.is_some());
    let ent_coef = cfg.entropy_coef;
    let entropy = batch
        .entropy
        .filter(|_| ent_coef != 0.0)
        .map(|h| &h[base..base + t]);
    if let Surrogate::PpoClip {
        clip_low,
        clip_high,
        dual_clip,
    } = cfg.surrogate
    {
        let knobs = fast::Ppo {
            lo: 1.0 - clip_low,
            hi: 1.0 + clip_high,
            dual: dual_clip.unwrap_or(f64::INFINITY),
            kl_coef: kl.map_or(0.0, |k| k.coef),
        };
        let row = fast::Row {
            mask,
            logp,
            old,
            reference: reference.filter(|_| kl.is_some()),
            entropy,
            adv: if token_adv {
                &batch.advantages[base..base + t]
            } else {
                &batch.advantages[i..=i]
            },
        };
        let f = fast::ppo_row(&knobs, fast::kl_code(kl.as_ref()), w, &row, grad);
        // A NaN on a valid token: the scalar pass below finds and names it.
        if f.bad == 0 {
            let mut ratio = f.ratio;
            if f.out_of_range > 0 {
                // The fast loop summed the clamped ratio; the metric wants the true one.
                for j in (0..t).filter(|&j| mask[j] != 0) {
                    let d = logp[j].to_f64() - old[j].to_f64();
                    if d.abs() >= 20.0 {
                        ratio += d.exp() - d.clamp(-20.0, 20.0).exp();
                    }
                }
            }
            if let Some(ge) = grad_entropy {
                let v = F::from_f64(if entropy.is_some() {
                    -ent_coef * w
                } else {
                    0.0
                });
                for (g, &m) in ge.iter_mut().zip(mask) {
                    *g = if m != 0 { v } else { zero };
                }
            }
            return Ok(RowSums {
                loss_pg: f.loss,
                kl: f.kl,
                entropy: f.entropy,
                clipped: f.clipped,
                approx_kl: f.approx_kl,
                ratio,
            });
        }
    }
    let mut grad_entropy = grad_entropy;
    for j in 0..t {
        if mask[j] == 0 {
            grad[j] = zero;
            if let Some(ge) = grad_entropy.as_deref_mut() {
                ge[j] = zero;
            }
            continue;
        }
        let (lp, od) = (logp[j].to_f64(), old[j].to_f64());
        if lp.is_nan() {
            return Err(("logp", j));
        }
        if od.is_nan() {
            return Err(("old_logp", j));
        }
        let a = adv(j);
        if !a.is_finite() {
            return Err(("advantages", j));
        }
        let delta = lp - od;
        s.approx_kl -= delta;
        s.ratio += delta.exp();
        let (l, g, was_clipped) = match cfg.surrogate {
            Surrogate::Reinforce => (-a * lp, -a, false),
            Surrogate::PpoClip {
                clip_low,
                clip_high,
                dual_clip,
            } => {
                let r = delta.clamp(-20.0, 20.0).exp();
                let on = active(a, r, clip_low, clip_high, dual_clip) && delta.abs() < 20.0;
                let l = clipped_loss(a, r, clip_low, clip_high, dual_clip);
                (l, if on { -a * r } else { 0.0 }, !on && a != 0.0)
            }
            Surrogate::Gspo {
                clip_low,
                clip_high,
            } => {
                let r = seq_ratio;
                let on = active(a, r, clip_low, clip_high, None);
                let l = clipped_loss(a, r, clip_low, clip_high, None);
                (l, if on { -a * r } else { 0.0 }, !on && a != 0.0)
            }
        };
        s.loss_pg += w * l;
        s.clipped += f64::from(u8::from(was_clipped));
        let mut gk = w * g;
        if let (Some(kl), Some(rf)) = (kl.as_ref(), reference) {
            let rv = rf[j].to_f64();
            if rv.is_nan() {
                return Err(("ref_logp", j));
            }
            let (v, dv) = kl_term(kl, lp - rv);
            s.kl += w * v;
            gk += kl.coef * w * dv;
        }
        grad[j] = F::from_f64(gk);
        if let Some(h) = entropy {
            let hv = h[j].to_f64();
            if hv.is_nan() {
                return Err(("entropy", j));
            }
            s.entropy += w * hv;
            if let Some(ge) = grad_entropy.as_deref_mut() {
                ge[j] = F::from_f64(-ent_coef * w);
            }
        } else if let Some(ge) = grad_entropy.as_deref_mut() {
            ge[j] = zero;
        }
    }
    Ok(s)
}

/// The shapes and knobs of a loss call, checked before any token is read; returns (B, T).
/// NaNs on valid tokens are found in the pass itself.
pub(crate) fn check_shapes<F: Real>(
    batch: &PgBatch<'_, F>,
    cfg: &PgConfig,
    grad_len: usize,
    grad_entropy_len: Option<usize>,
) -> Result<(usize, usize)> {
    cfg.validate()?;
    let t = batch.width;
    if t == 0 {
        return Err(bad("width", "is 0; pass the padded sequence length".into()));
    }
    let n_tok = batch.mask.len();
    if n_tok == 0 {
        return Err(bad("mask", "is empty; pass at least one sequence".into()));
    }
    if n_tok % t != 0 {
        return Err(bad(
            "mask",
            format!("has {n_tok} values, not a multiple of width {t}"),
        ));
    }
    let b = n_tok / t;
    let shape = |arg: &str, len: usize| -> Result<()> {
        if len != n_tok {
            return Err(bad(arg, format!("has {len} values; expected {b} x {t}")));
        }
        Ok(())
    };
    shape("logp", batch.logp.len())?;
    shape("old_logp", batch.old_logp.len())?;
    shape("grad_logp", grad_len)?;
    if let Some(len) = grad_entropy_len {
        shape("grad_entropy", len)?;
    }
    let na = batch.advantages.len();
    if na != b && na != n_tok {
        return Err(bad(
            "advantages",
            format!(
                "has {na} values; expected one per sequence ({b}) or one per token ({b} x {t})"
            ),
        ));
    }
    if na == b {
        if let Some(i) = batch
            .advantages
            .iter()
            .position(|a| !a.to_f64().is_finite())
        {
            return Err(bad("advantages", format!("advantages[{i}] is not finite")));
        }
    }
    if cfg.kl.is_some() {
        let rf = batch
            .ref_logp
            .ok_or_else(|| bad("ref_logp", "is required with a KL penalty".into()))?;
        shape("ref_logp", rf.len())?;
    }
    if cfg.entropy_coef != 0.0 {
        let h = batch
            .entropy
            .ok_or_else(|| bad("entropy", "is required with an entropy bonus".into()))?;
        shape("entropy", h.len())?;
    }
    Ok((b, t))
}

/// The loss and its gradient for one batch, written into the caller's buffers (`grad_logp`:
/// B x T; `grad_entropy`: B x T, optional) in one pass over the tokens, rows in parallel.
pub fn pg_loss_into<F: Real>(
    batch: &PgBatch<'_, F>,
    cfg: &PgConfig,
    grad_logp: &mut [F],
    grad_entropy: Option<&mut [F]>,
) -> Result<PgStats> {
    let (b, t) = check_shapes(
        batch,
        cfg,
        grad_logp.len(),
        grad_entropy.as_deref().map(<[F]>::len),
    )?;
    let n_tok = b * t;
    let parallel = n_tok >= PARALLEL_MIN_TOKENS;
    let count = |r: &[u8]| r.iter().filter(|&&m| m != 0).count();
    let lens: Vec<usize> = if parallel {
        batch.mask.par_chunks(t).map(count).collect()
    } else {
        batch.mask.chunks(t).map(count).collect()
    };
    let n: usize = lens.iter().sum();
    if n == 0 {
        return Err(bad(
            "mask",
            "has no valid tokens; nothing to compute a loss over".into(),
        ));
    }
    let weights = row_weights(cfg.aggregation, &lens, t);
    let ge_rows: Vec<Option<&mut [F]>> = match grad_entropy {
        Some(ge) => ge.chunks_mut(t).map(Some).collect(),
        None => (0..b).map(|_| None).collect(),
    };
    let work = |(i, (g, ge)): (usize, (&mut [F], Option<&mut [F]>))| {
        row_pass(batch, cfg, i, weights[i], lens[i], g, ge)
    };
    let per_row: Vec<std::result::Result<RowSums, RowError>> = if parallel {
        grad_logp
            .par_chunks_mut(t)
            .zip(ge_rows.into_par_iter())
            .enumerate()
            .map(work)
            .collect()
    } else {
        grad_logp
            .chunks_mut(t)
            .zip(ge_rows)
            .enumerate()
            .map(work)
            .collect()
    };
    let mut total = RowSums::default();
    for (i, r) in per_row.into_iter().enumerate() {
        let r = r.map_err(|(arg, j)| bad(arg, format!("{arg}[{i}][{j}] is not a number")))?;
        total.loss_pg += r.loss_pg;
        total.kl += r.kl;
        total.entropy += r.entropy;
        total.clipped += r.clipped;
        total.approx_kl += r.approx_kl;
        total.ratio += r.ratio;
    }
    let mut loss = total.loss_pg;
    let kl = cfg.kl.map(|k| {
        loss += k.coef * total.kl;
        total.kl
    });
    let entropy = (cfg.entropy_coef != 0.0).then(|| {
        loss -= cfg.entropy_coef * total.entropy;
        total.entropy
    });
    let nf = n as f64;
    Ok(PgStats {
        loss,
        loss_pg: total.loss_pg,
        kl,
        entropy,
        clip_fraction: total.clipped / nf,
        approx_kl: total.approx_kl / nf,
        mean_ratio: total.ratio / nf,
        tokens: n,
        rows: lens.iter().filter(|&&l| l > 0).count(),
    })
}

/// The loss and its gradient for one batch, in new buffers.
pub fn pg_loss<F: Real>(batch: &PgBatch<'_, F>, cfg: &PgConfig) -> Result<PgOutput<F>> {
    let n = batch.mask.len();
    let mut grad_logp = vec![F::from_f64(0.0); n];
    let mut grad_entropy = (cfg.entropy_coef != 0.0).then(|| vec![F::from_f64(0.0); n]);
    let stats = pg_loss_into(batch, cfg, &mut grad_logp, grad_entropy.as_deref_mut())?;
    Ok(PgOutput {
        stats,
        grad_logp,
        grad_entropy,
    })
}

/// DPO's result: the mean loss over pairs, each pair, and `dL/dlogp`.
#[derive(Debug, Clone, PartialEq)]
pub struct DpoOutput<F: Real = f64> {
    /// Mean loss over the pairs.
    pub loss: f64,
    /// The (chosen, rejected) rows of each pair, one pair per group with distinct rewards.
    pub pairs: Vec<(usize, usize)>,
    /// Each pair's loss.
    pub per_pair: Vec<f64>,
    /// `dL/dlogp`, `[B][T]`, 0 on masked tokens and on rows in no pair.
    pub grad_logp: Vec<F>,
}

/// DPO (sigmoid) on best-vs-worst pairs of each group: the highest reward is chosen, the lowest
/// rejected (ties: the lowest index), groups whose rewards are all equal are skipped. Sequence
/// log-probs are sums over valid tokens.
pub fn dpo_loss<F: Real>(
    rewards: &[f64],
    group_ids: &[i64],
    logp: &[F],
    ref_logp: &[F],
    mask: &[u8],
    width: usize,
    beta: f64,
) -> Result<DpoOutput<F>> {
    let b = rewards.len();
    if b == 0 {
        return Err(bad(
            "rewards",
            "is empty; pass at least one sequence".into(),
        ));
    }
    if group_ids.len() != b {
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
    if width == 0 {
        return Err(bad("width", "is 0; pass the padded sequence length".into()));
    }
    let n_tok = b * width;
    if mask.len() != n_tok {
        return Err(bad(
            "mask",
            format!("has {} values; expected {b} x {width}", mask.len()),
        ));
    }
    for (arg, v) in [("logp", logp), ("ref_logp", ref_logp)] {
        if v.len() != n_tok {
            return Err(bad(
                arg,
                format!("has {} values; expected {b} x {width}", v.len()),
            ));
        }
        if let Some(k) = (0..n_tok).find(|&k| mask[k] != 0 && v[k].to_f64().is_nan()) {
            return Err(bad(
                arg,
                format!("{arg}[{}][{}] is not a number", k / width, k % width),
            ));
        }
    }
    let seq = |i: usize| -> f64 {
        (0..width)
            .filter(|&j| mask[i * width + j] != 0)
            .map(|j| logp[i * width + j].to_f64() - ref_logp[i * width + j].to_f64())
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
    let mut grad = vec![0.0f64; n_tok];
    let mut per_pair = Vec::with_capacity(pairs.len());
    for &(c, j) in &pairs {
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
    Ok(DpoOutput {
        loss: per_pair.iter().sum::<f64>() / p,
        pairs,
        per_pair,
        grad_logp: grad.into_iter().map(F::from_f64).collect(),
    })
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
        assert!(err(b, cfg(PPO)).contains("logp[0][0] is not a number"));
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
