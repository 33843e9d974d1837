//! The knobs and buffers of the policy losses, shared by the CPU loss ([`super::loss`]), its
//! fast path and the CUDA kernels: the surrogate, aggregation and KL choices, the precision
//! trait, the batch and output types, and the checks every call makes before reading a token.

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

/// A knob or buffer out of range, named as the caller spelt it.
pub(crate) fn bad(arg: &str, why: String) -> Error {
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
