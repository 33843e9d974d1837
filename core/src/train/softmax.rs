//! The built-in policy: a softmax over a discrete action space, linear or with one tanh hidden
//! layer, on the observation's numbers. It is a [`Trainer`], so every weight learner can train
//! it with nothing else installed (`nenyax train gymnasium:CartPole-v1 --learner grpo`).

use serde_json::{json, Value};
use std::sync::Arc;

use super::pg::{TraceBatch, Trainer, Weights};
use crate::contract::{ModelCall, Observation};
use crate::env::Environment;
use crate::error::{Error, Result};
use crate::policy::{CallLog, EpisodeContext, Phase, Policy};
use crate::rng::Rng;

/// Settings of the built-in policy.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SoftmaxOptions {
    /// Hidden units (0: a linear softmax).
    pub hidden: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Seed of the initial weights.
    pub seed: u64,
    /// Act greedily (the most likely action) in held-out evaluation instead of sampling.
    pub greedy_eval: bool,
    /// Clip the gradient to this L2 norm before each step (0: no clipping).
    pub max_grad_norm: f64,
}

impl Default for SoftmaxOptions {
    fn default() -> Self {
        SoftmaxOptions {
            hidden: 0,
            lr: 0.01,
            seed: 0,
            greedy_eval: false,
            max_grad_norm: 0.0,
        }
    }
}

impl SoftmaxOptions {
    /// Whether the numbers make sense (`lr` > 0, `max_grad_norm` >= 0), before any environment
    /// is at hand.
    pub fn validate(&self) -> Result<()> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(Error::Config(format!(
                "the built-in policy's `lr` is {}; it must be > 0",
                self.lr
            )));
        }
        if !(self.max_grad_norm.is_finite() && self.max_grad_norm >= 0.0) {
            return Err(Error::Config(format!(
                "the built-in policy's `max_grad_norm` is {}; it must be >= 0 (0: no clipping)",
                self.max_grad_norm
            )));
        }
        Ok(())
    }
}

/// Weights: `logits = W2 tanh(W1 x + b1) + b2`, or `W x + b` without a hidden layer.
#[derive(Debug, Clone, PartialEq)]
struct Net {
    inputs: usize,
    hidden: usize,
    actions: usize,
    /// Every parameter, flat: [W1 (h x i), b1 (h), W2 (a x h), b2 (a)] or [W (a x i), b (a)].
    w: Vec<f64>,
}

impl Net {
    fn new(inputs: usize, hidden: usize, actions: usize, seed: u64) -> Net {
        let n = if hidden == 0 {
            actions * (inputs + 1)
        } else {
            hidden * (inputs + 1) + actions * (hidden + 1)
        };
        let mut w = vec![0.0; n];
        if hidden > 0 {
            // Small random first layer (zero output layer: the first policy is uniform).
            let mut rng = Rng::new(seed);
            let scale = 1.0 / (inputs as f64).sqrt();
            for v in &mut w[..hidden * inputs] {
                *v = ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale;
            }
        }
        Net {
            inputs,
            hidden,
            actions,
            w,
        }
    }

    /// Log-softmax of the logits, and the hidden activations (for the backward pass).
    fn forward(&self, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (i, h, a) = (self.inputs, self.hidden, self.actions);
        let (feat, out_w, out_b): (Vec<f64>, &[f64], &[f64]) = if h == 0 {
            (x.to_vec(), &self.w[..a * i], &self.w[a * i..])
        } else {
            let (w1, rest) = self.w.split_at(h * i);
            let (b1, rest) = rest.split_at(h);
            let (w2, b2) = rest.split_at(a * h);
            let z: Vec<f64> = (0..h)
                .map(|k| (dot(&w1[k * i..(k + 1) * i], x) + b1[k]).tanh())
                .collect();
            (z, w2, b2)
        };
        let d = feat.len();
        let logits: Vec<f64> = (0..a)
            .map(|k| dot(&out_w[k * d..(k + 1) * d], &feat) + out_b[k])
            .collect();
        let m = logits.iter().cloned().fold(f64::MIN, f64::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
        (logits.iter().map(|l| l - lse).collect(), feat)
    }

    /// Add `g * d logp(action | x) / d w` to `grad`.
    fn backward(&self, x: &[f64], action: usize, g: f64, grad: &mut [f64]) {
        let (i, h, a) = (self.inputs, self.hidden, self.actions);
        let (logp, feat) = self.forward(x);
        let d = feat.len();
        // d logp[action] / d logit[k] = [k == action] - p[k]
        let dl: Vec<f64> = (0..a)
            .map(|k| g * (f64::from(u8::from(k == action)) - logp[k].exp()))
            .collect();
        let out = if h == 0 { 0 } else { h * (i + 1) };
        for k in 0..a {
            for j in 0..d {
                grad[out + k * d + j] += dl[k] * feat[j];
            }
            grad[out + a * d + k] += dl[k];
        }
        if h > 0 {
            let w2 = &self.w[out..out + a * h];
            for j in 0..h {
                let back: f64 = (0..a).map(|k| dl[k] * w2[k * h + j]).sum();
                let dz = back * (1.0 - feat[j] * feat[j]);
                for q in 0..i {
                    grad[j * i + q] += dz * x[q];
                }
                grad[h * i + j] += dz;
            }
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The numbers of an observation, depth first: numbers, booleans as 0/1, arrays and objects
/// recursed into; strings and nulls skipped.
fn features(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.push(n.as_f64().unwrap_or(0.0)),
        Value::Bool(b) => out.push(f64::from(u8::from(*b))),
        Value::Array(a) => a.iter().for_each(|x| features(x, out)),
        Value::Object(o) => o.values().for_each(|x| features(x, out)),
        _ => {}
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

/// The built-in softmax policy over a discrete action space.
pub struct SoftmaxPolicy {
    net: Arc<Net>,
    reference: Arc<Net>,
    adam: Adam,
    saved: Option<(Arc<Net>, Adam)>,
    /// The action the first logit stands for (the space's minimum).
    first_action: i64,
    opts: SoftmaxOptions,
    env_id: String,
}

impl SoftmaxPolicy {
    /// A policy for `env`: its discrete action space from the manifest's action schema (an
    /// integer with `minimum` and `maximum`), its input size from one observation.
    pub fn for_env(env: &dyn Environment, opts: SoftmaxOptions) -> Result<SoftmaxPolicy> {
        let m = env.manifest();
        let schema = m.action_schema.as_ref();
        let int = schema.and_then(|s| s.get("type")).is_some_and(|t| {
            t == "integer"
                || t.as_array()
                    .is_some_and(|a| a.iter().any(|x| x == "integer"))
        });
        let bound = |k: &str| schema.and_then(|s| s.get(k)).and_then(Value::as_i64);
        let (lo, hi) = match (int, bound("minimum"), bound("maximum")) {
            (true, Some(lo), Some(hi)) if hi >= lo && hi - lo < 65_536 => (lo, hi),
            _ => {
                return Err(Error::Config(format!(
                    "the built-in policy needs a discrete action space (an integer action with \
                     `minimum` and `maximum` in the manifest's action_schema, as Gymnasium's \
                     Discrete spaces have); {} has {}",
                    m.id,
                    schema.map_or("no action schema".into(), |s| Value::Object(s.clone())
                        .to_string())
                )))
            }
        };
        opts.validate()?;
        let session = env.session(None, Some(0)).map_err(|e| {
            Error::Config(format!(
                "the built-in policy reads one observation of {} to size its input: {e}",
                m.id
            ))
        })?;
        let mut x = Vec::new();
        features(&session.observation().data, &mut x);
        drop(session);
        if x.is_empty() {
            return Err(Error::Config(format!(
                "the built-in policy needs numbers in the observation; {}'s has none",
                m.id
            )));
        }
        let net = Arc::new(Net::new(
            x.len(),
            opts.hidden,
            (hi - lo + 1) as usize,
            opts.seed,
        ));
        let n = net.w.len();
        Ok(SoftmaxPolicy {
            reference: net.clone(),
            net,
            adam: Adam {
                m: vec![0.0; n],
                v: vec![0.0; n],
                t: 0,
            },
            saved: None,
            first_action: lo,
            opts,
            env_id: m.id.clone(),
        })
    }

    /// Parameters of the network.
    pub fn parameters(&self) -> usize {
        self.net.w.len()
    }

    fn net(&self, w: Weights) -> &Net {
        match w {
            Weights::Current => &self.net,
            Weights::Reference => &self.reference,
        }
    }

    /// The input and action of every masked position of row `r`.
    fn positions(&self, batch: &TraceBatch<'_>, r: usize) -> Result<Vec<(usize, Vec<f64>, usize)>> {
        let row = &batch.rows[r];
        let t = batch.width();
        let mut out = Vec::new();
        for seg in &row.segments {
            let call = batch.call(r, seg);
            let obs = call.request.get("observation").ok_or_else(|| {
                Error::Training(
                    "the built-in policy trains on its own action records only; this row \
                     holds a chat call"
                        .into(),
                )
            })?;
            let mut x = Vec::new();
            features(obs.get("data").unwrap_or(&Value::Null), &mut x);
            if x.len() != self.net.inputs {
                return Err(Error::Training(format!(
                    "an observation of {} has {} numbers; the built-in policy was sized for {}",
                    self.env_id,
                    x.len(),
                    self.net.inputs
                )));
            }
            for k in 0..seg.completion_len {
                let pos = seg.completion_start + k;
                let a = row.tokens[pos];
                if a < 0 || a as usize >= self.net.actions {
                    return Err(Error::Training(format!(
                        "action token {a} is outside the built-in policy's {} actions",
                        self.net.actions
                    )));
                }
                out.push((r * t + pos, x.clone(), a as usize));
            }
        }
        Ok(out)
    }
}

impl Trainer for SoftmaxPolicy {
    fn name(&self) -> String {
        if self.opts.hidden == 0 {
            "softmax-linear".into()
        } else {
            format!("softmax-mlp{}", self.opts.hidden)
        }
    }

    fn policy(&mut self) -> Result<Policy> {
        let net = self.net.clone();
        let name = self.name();
        let (first, greedy) = (self.first_action, self.opts.greedy_eval);
        Ok(Policy::per_episode(
            move |ctx: &EpisodeContext, log: &CallLog| {
                let (net, name, log, ctx) = (net.clone(), name.clone(), log.clone(), ctx.clone());
                let step = std::sync::atomic::AtomicU64::new(0);
                Ok(Policy::action(move |obs: &Observation| {
                    let mut x = Vec::new();
                    features(&obs.data, &mut x);
                    if x.len() != net.inputs {
                        return Err(Error::Policy(format!(
                            "the observation has {} numbers; the built-in policy was sized for {}",
                            x.len(),
                            net.inputs
                        )));
                    }
                    let (logp, _) = net.forward(&x);
                    let k = step.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let a = if greedy && ctx.phase == Phase::Eval {
                        (0..logp.len())
                            .max_by(|&i, &j| logp[i].total_cmp(&logp[j]))
                            .unwrap_or(0)
                    } else {
                        // Inverse-CDF draw from this call's own seed: the same whatever thread.
                        let u = (Rng::new(ctx.step_seed(k)).next_u64() >> 11) as f64
                            / (1u64 << 53) as f64;
                        let mut acc = 0.0;
                        let mut pick = logp.len() - 1;
                        for (i, l) in logp.iter().enumerate() {
                            acc += l.exp();
                            if u < acc {
                                pick = i;
                                break;
                            }
                        }
                        pick
                    };
                    let action = json!(first + a as i64);
                    log.push(ModelCall::action(
                        &name,
                        obs,
                        &action,
                        None,
                        vec![a as i64],
                        vec![logp[a]],
                    ));
                    Ok(action)
                }))
            },
        ))
    }

    fn logprobs(&mut self, batch: &TraceBatch<'_>, w: Weights) -> Result<Vec<f64>> {
        let net = self.net(w);
        let mut out = vec![0.0; batch.len() * batch.width()];
        for r in 0..batch.len() {
            for (pos, x, a) in self.positions(batch, r)? {
                out[pos] = net.forward(&x).0[a];
            }
        }
        Ok(out)
    }

    fn apply(&mut self, batch: &TraceBatch<'_>, grad_logp: &[f64]) -> Result<()> {
        let mut grad = vec![0.0; self.net.w.len()];
        for r in 0..batch.len() {
            for (pos, x, a) in self.positions(batch, r)? {
                let g = grad_logp[pos];
                if g != 0.0 {
                    self.net.backward(&x, a, g, &mut grad);
                }
            }
        }
        if self.opts.max_grad_norm > 0.0 {
            let norm = grad.iter().map(|g| g * g).sum::<f64>().sqrt();
            if norm > self.opts.max_grad_norm {
                grad.iter_mut()
                    .for_each(|g| *g *= self.opts.max_grad_norm / norm);
            }
        }
        // Adam, descending the loss.
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
        let adam = &mut self.adam;
        adam.t += 1;
        let (c1, c2) = (1.0 - b1.powi(adam.t), 1.0 - b2.powi(adam.t));
        let mut w = self.net.w.clone();
        for (k, g) in grad.iter().enumerate() {
            adam.m[k] = b1 * adam.m[k] + (1.0 - b1) * g;
            adam.v[k] = b2 * adam.v[k] + (1.0 - b2) * g * g;
            w[k] -= self.opts.lr * (adam.m[k] / c1) / ((adam.v[k] / c2).sqrt() + eps);
        }
        if w.iter().any(|v| !v.is_finite()) {
            return Err(Error::Training(
                "the built-in policy's weights became non-finite; lower `lr`".into(),
            ));
        }
        self.net = Arc::new(Net {
            w,
            ..(*self.net).clone()
        });
        Ok(())
    }

    fn snapshot(&mut self) -> Result<bool> {
        self.saved = Some((self.net.clone(), self.adam.clone()));
        Ok(true)
    }

    fn restore(&mut self) -> Result<()> {
        let (net, adam) = self
            .saved
            .clone()
            .ok_or_else(|| Error::Training("restore without a snapshot".into()))?;
        self.net = net;
        self.adam = adam;
        Ok(())
    }

    fn describe(&self) -> Value {
        json!({
            "name": self.name(),
            "inputs": self.net.inputs,
            "actions": self.net.actions,
            "parameters": self.parameters(),
            "options": serde_json::to_value(&self.opts).unwrap_or(Value::Null),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_match_finite_differences() {
        for hidden in [0, 5] {
            let mut net = Net::new(3, hidden, 4, 7);
            // Non-zero output weights, so every path carries gradient.
            for (k, v) in net.w.iter_mut().enumerate() {
                *v += 0.05 * ((k * 37 % 11) as f64 - 5.0);
            }
            let x = [0.3, -1.2, 0.7];
            let mut grad = vec![0.0; net.w.len()];
            net.backward(&x, 2, 1.0, &mut grad);
            for (k, g) in grad.iter().enumerate() {
                let mut plus = net.clone();
                plus.w[k] += 1e-6;
                let mut minus = net.clone();
                minus.w[k] -= 1e-6;
                let fd = (plus.forward(&x).0[2] - minus.forward(&x).0[2]) / 2e-6;
                assert!(
                    (fd - g).abs() < 1e-6,
                    "hidden {hidden}, w[{k}]: {fd} vs {g}"
                );
            }
        }
    }
}
