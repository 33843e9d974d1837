//! Advantage estimators over groups of rollouts of the same task (docs/learners.md). No gradient
//! flows through any of them, so they are computed in f64 whatever the caller's precision.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// What a group of one gets, where verl and TRL disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Singleton {
    /// verl: mean 0 and std 1, so the advantage is (about) the reward itself.
    Reward,
    /// TRL and verl's vectorized RLOO: 0.
    Zero,
}

/// Over what the GRPO standard deviation is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdScope {
    /// Each group's own (verl; TRL `scale_rewards="group"`).
    Group,
    /// All rewards of the batch, the mean still per group (TRL `scale_rewards="batch"`).
    Batch,
}

/// An outcome advantage estimator: one scalar per sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Estimator {
    /// `(r - mean_g) / (std_g + eps)`, std unbiased. verl: eps 1e-6, singleton `Reward`; TRL:
    /// eps 1e-4, singleton `Zero`.
    Grpo {
        /// Added to the std.
        eps: f64,
        /// Group or batch std.
        scope: StdScope,
        /// What a group of one gets.
        singleton: Singleton,
    },
    /// Dr. GRPO: `r - mean_g`, no std (a group of one: the reward, as verl).
    DrGrpo,
    /// RLOO: `r - mean of the others in the group` = `n/(n-1) (r - mean_g)`.
    Rloo {
        /// verl's `rloo` keeps the reward; its vectorized form and TRL give 0.
        singleton: Singleton,
    },
    /// REINFORCE with a batch-mean baseline: `r - mean(all r)`.
    ReinforceBatchMean,
}

impl Estimator {
    /// GRPO as verl computes it.
    pub const GRPO_VERL: Estimator = Estimator::Grpo {
        eps: 1e-6,
        scope: StdScope::Group,
        singleton: Singleton::Reward,
    };
    /// GRPO as TRL computes it.
    pub const GRPO_TRL: Estimator = Estimator::Grpo {
        eps: 1e-4,
        scope: StdScope::Group,
        singleton: Singleton::Zero,
    };
}

fn bad(arg: &str, why: String) -> Error {
    Error::Config(format!("`{arg}`: {why}"))
}

fn check_rewards(rewards: &[f64], group_ids: &[i64]) -> Result<()> {
    if rewards.is_empty() {
        return Err(bad(
            "rewards",
            "is empty; pass at least one sequence".into(),
        ));
    }
    if rewards.len() != group_ids.len() {
        return Err(bad(
            "group_ids",
            format!(
                "has {} entries for {} rewards; give one group id per sequence",
                group_ids.len(),
                rewards.len()
            ),
        ));
    }
    if let Some(i) = rewards.iter().position(|r| !r.is_finite()) {
        return Err(bad(
            "rewards",
            format!(
                "rewards[{i}] is {}; every reward must be finite (drop or score that rollout)",
                rewards[i]
            ),
        ));
    }
    Ok(())
}

/// Each group's members, in first-appearance order of the labels.
fn groups(group_ids: &[i64]) -> Vec<Vec<usize>> {
    let mut index: HashMap<i64, usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, g) in group_ids.iter().enumerate() {
        let k = *index.entry(*g).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[k].push(i);
    }
    out
}

fn mean(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let n = xs.clone().count() as f64;
    xs.sum::<f64>() / n
}

/// Unbiased (n-1) standard deviation; 0 for fewer than two values.
fn std_unbiased(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs.iter().copied());
    let ss: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
    (ss / (xs.len() - 1) as f64).sqrt()
}

/// One advantage per sequence. `group_ids` are arbitrary labels (rollouts of the same task
/// share one); groups may have different sizes. A group whose rewards are all equal gets 0.
pub fn advantages(rewards: &[f64], group_ids: &[i64], est: &Estimator) -> Result<Vec<f64>> {
    check_rewards(rewards, group_ids)?;
    if let Estimator::Grpo { eps, .. } = est {
        if !(eps.is_finite() && *eps >= 0.0) {
            return Err(bad(
                "eps",
                format!("is {eps}; it must be a finite number >= 0"),
            ));
        }
    }
    let mut out = vec![0.0; rewards.len()];
    if *est == Estimator::ReinforceBatchMean {
        let m = mean(rewards.iter().copied());
        for (o, r) in out.iter_mut().zip(rewards) {
            *o = r - m;
        }
        return Ok(out);
    }
    let batch_std = std_unbiased(rewards);
    for members in groups(group_ids) {
        let rs: Vec<f64> = members.iter().map(|&i| rewards[i]).collect();
        let n = rs.len();
        if n == 1 {
            let r = rs[0];
            out[members[0]] = match est {
                Estimator::Grpo {
                    eps,
                    singleton: Singleton::Reward,
                    ..
                } => r / (1.0 + eps),
                Estimator::DrGrpo
                | Estimator::Rloo {
                    singleton: Singleton::Reward,
                } => r,
                _ => 0.0,
            };
            continue;
        }
        let m = mean(rs.iter().copied());
        for (&i, &r) in members.iter().zip(&rs) {
            out[i] = match est {
                Estimator::Grpo { eps, scope, .. } => {
                    let s = match scope {
                        StdScope::Group => std_unbiased(&rs),
                        StdScope::Batch => batch_std,
                    };
                    (r - m) / (s + eps)
                }
                Estimator::DrGrpo => r - m,
                Estimator::Rloo { .. } => n as f64 / (n - 1) as f64 * (r - m),
                Estimator::ReinforceBatchMean => unreachable!("handled above"),
            };
        }
    }
    Ok(out)
}

/// DAPO's dynamic-sampling filter, per sequence: keep a group unless all its rewards are equal
/// (a group of one is kept). Equal means bit-equal: the reference tests a floating-point std
/// against 0, which keeps e.g. `[0.1, 0.1, 0.1]` by rounding; this test does not (a deliberate
/// deviation, docs/learners.md).
pub fn dapo_keep(rewards: &[f64], group_ids: &[i64]) -> Result<Vec<bool>> {
    check_rewards(rewards, group_ids)?;
    let mut keep = vec![true; rewards.len()];
    for members in groups(group_ids) {
        let first = rewards[members[0]].to_bits();
        let all_equal = members.iter().all(|&i| rewards[i].to_bits() == first);
        if members.len() > 1 && all_equal {
            for i in members {
                keep[i] = false;
            }
        }
    }
    Ok(keep)
}

/// REINFORCE++ token advantages (docs/learners.md), row-major `[B][T]` with `width` = T.
///
/// The outcome reward sits on each row's last valid token and is discounted backwards by
/// `gamma`; with `baseline` (group ids), the group mean is subtracted first (a group of one:
/// mean 0) and the reward is tiled over the row instead. Then the whole batch is whitened over
/// its valid tokens (token-weighted, unbiased, `rsqrt(var + 1e-8)`), and masked. Returns the
/// advantages and the returns before whitening.
pub fn reinforce_pp(
    rewards: &[f64],
    mask: &[u8],
    width: usize,
    gamma: f64,
    baseline: Option<&[i64]>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let ids: Vec<i64> = match baseline {
        Some(g) => g.to_vec(),
        None => (0..rewards.len() as i64).collect(),
    };
    check_rewards(rewards, &ids)?;
    if !(gamma.is_finite() && (0.0..=1.0).contains(&gamma)) {
        return Err(bad("gamma", format!("is {gamma}; it must be in [0, 1]")));
    }
    if width == 0 || mask.len() != rewards.len() * width {
        return Err(bad(
            "mask",
            format!(
                "has {} entries; expected rows x width = {} x {width}",
                mask.len(),
                rewards.len()
            ),
        ));
    }
    let scores = match baseline {
        Some(g) => advantages(rewards, g, &Estimator::DrGrpo)?,
        None => rewards.to_vec(),
    };
    let mut returns = vec![0.0; mask.len()];
    for (b, &score) in scores.iter().enumerate() {
        let row = &mask[b * width..(b + 1) * width];
        let out = &mut returns[b * width..(b + 1) * width];
        if baseline.is_some() {
            for (o, &m) in out.iter_mut().zip(row) {
                *o = score * f64::from(m);
            }
            continue;
        }
        let Some(last) = row.iter().rposition(|&m| m != 0) else {
            continue;
        };
        let mut running = 0.0;
        for t in (0..width).rev() {
            let r = if t == last { score } else { 0.0 };
            running = (r + gamma * running) * f64::from(row[t]);
            out[t] = running;
        }
    }
    let n: f64 = mask.iter().map(|&m| f64::from(m)).sum();
    if n <= 1.0 {
        return Err(bad(
            "mask",
            format!("has {n} valid tokens; whitening needs at least 2"),
        ));
    }
    let mu = returns
        .iter()
        .zip(mask)
        .map(|(r, &m)| r * f64::from(m))
        .sum::<f64>()
        / (n + 1e-8);
    let var = returns
        .iter()
        .zip(mask)
        .map(|(r, &m)| f64::from(m) * (r - mu) * (r - mu))
        .sum::<f64>()
        / (n + 1e-8)
        * (n / (n - 1.0));
    let scale = 1.0 / (var + 1e-8).sqrt();
    let adv = returns
        .iter()
        .zip(mask)
        .map(|(r, &m)| (r - mu) * scale * f64::from(m))
        .collect();
    Ok((adv, returns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_names_the_argument() {
        let e = advantages(&[1.0, f64::NAN], &[0, 0], &Estimator::GRPO_VERL).unwrap_err();
        assert!(e.to_string().contains("rewards[1] is NaN"), "{e}");
        let e = advantages(&[1.0], &[0, 0], &Estimator::DrGrpo).unwrap_err();
        assert!(e.to_string().contains("`group_ids`"), "{e}");
        let e = advantages(&[], &[], &Estimator::DrGrpo).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let neg = Estimator::Grpo {
            eps: -1.0,
            scope: StdScope::Group,
            singleton: Singleton::Zero,
        };
        assert!(advantages(&[1.0], &[0], &neg)
            .unwrap_err()
            .to_string()
            .contains("`eps`"));
        let e = reinforce_pp(&[1.0, 0.0], &[0, 0, 1, 0], 2, 1.0, None).unwrap_err();
        assert!(e.to_string().contains("valid tokens"), "{e}");
        let e = reinforce_pp(&[1.0], &[1, 1, 1], 2, 1.0, None).unwrap_err();
        assert!(e.to_string().contains("`mask`"), "{e}");
    }

    #[test]
    fn dapo_uses_an_exact_equality_test() {
        // The reference's float std keeps this group by rounding; Nenyax drops it.
        let keep = dapo_keep(&[0.1, 0.1, 0.1, 1.0], &[0, 0, 0, 1]).unwrap();
        assert_eq!(keep, vec![false, false, false, true]);
    }
}
