//! DPO (docs/learners.md): the sigmoid preference loss on each group's best-vs-worst pair, with its
//! gradient with respect to each token's log-probability.

use std::collections::HashMap;

use super::config::{bad, Real};
use crate::error::Result;

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
