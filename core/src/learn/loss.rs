//! Policy losses, their value and their gradient with respect to each token's log-probability
//! (docs/learners.md), on CPU in f32 or f64, one fused pass per row with rows in parallel. A trainer backpropagates `grad_logp` through its own model.
//! Layout: row-major `[B][T]`, mask 1 = a token the loss counts; masked positions may hold
//! anything and get a gradient of exactly 0.

use rayon::prelude::*;

use super::config::{bad, check_shapes};
pub use super::config::{
    Aggregation, Kl, KlEstimator, PgBatch, PgConfig, PgOutput, PgStats, Real, Surrogate,
};
pub use super::dpo::{dpo_loss, DpoOutput};
use super::fast;
use crate::error::Result;

/// Whether a ratio `r` under advantage `a` still passes gradient (docs/learners.md).
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

/// The weight `w_i` every valid token of row `i` gets in `L = sum w l` (docs/learners.md).
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
