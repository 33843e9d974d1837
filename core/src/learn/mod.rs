//! The maths of the learners a trainer runs on rollouts: advantage estimators, and the
//! policy losses with their gradients, on CPU; the CUDA kernels and the C ABI are next. Every formula and
//! convention follows `pg-math.md` of the shared reference, and is checked against its golden
//! vectors (`tests/pg_golden.rs`).

pub mod advantage;
pub mod loss;

pub use advantage::{advantages, dapo_keep, reinforce_pp, Estimator, Singleton, StdScope};
pub use loss::{
    dpo_loss, pg_loss, Aggregation, Kl, KlEstimator, PgBatch, PgConfig, PgOutput, Surrogate,
};

use serde_json::Value;

use crate::error::{Error, Result};

fn config_err(msg: String) -> Error {
    Error::Config(msg)
}

impl Estimator {
    /// From JSON (the C ABI's options): `{"estimator": "grpo_verl" | "grpo_trl" | "grpo" |
    /// "dr_grpo" | "rloo" | "reinforce", "eps": 1e-6, "singleton": "reward" | "zero",
    /// "std_scope": "group" | "batch"}`.
    pub fn from_json(v: &Value) -> Result<Estimator> {
        let name = v
            .get("estimator")
            .and_then(Value::as_str)
            .ok_or_else(|| config_err("`estimator` is required (e.g. \"grpo_verl\")".into()))?;
        let singleton = match v.get("singleton").and_then(Value::as_str) {
            None => None,
            Some("reward") => Some(Singleton::Reward),
            Some("zero") => Some(Singleton::Zero),
            Some(o) => {
                return Err(config_err(format!(
                    "`singleton` is {o:?}; use \"reward\" or \"zero\""
                )))
            }
        };
        let scope = match v.get("std_scope").and_then(Value::as_str) {
            None | Some("group") => StdScope::Group,
            Some("batch") => StdScope::Batch,
            Some(o) => {
                return Err(config_err(format!(
                    "`std_scope` is {o:?}; use \"group\" or \"batch\""
                )))
            }
        };
        Ok(match name {
            "grpo_verl" => Estimator::GRPO_VERL,
            "grpo_trl" => Estimator::GRPO_TRL,
            "grpo" => Estimator::Grpo {
                eps: v.get("eps").and_then(Value::as_f64).unwrap_or(1e-6),
                scope,
                singleton: singleton.unwrap_or(Singleton::Reward),
            },
            "dr_grpo" => Estimator::DrGrpo,
            "rloo" => Estimator::Rloo {
                singleton: singleton.unwrap_or(Singleton::Reward),
            },
            "reinforce" => Estimator::ReinforceBatchMean,
            other => {
                return Err(config_err(format!(
                    "unknown estimator {other:?}; known: grpo_verl, grpo_trl, grpo, dr_grpo, rloo, reinforce"
                )))
            }
        })
    }
}

impl PgConfig {
    /// From JSON (the C ABI's config, the golden file's `params`): `{"loss": "ppo_clip" | "gspo"
    /// | "reinforce", "clip_low", "clip_high", "dual_clip_c", "agg": "token-mean" |
    /// "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm", "trl_rows",
    /// "agg_divisor", "kl": {"estimator": "k1" | "k2" | "k3", "coef", "clamp"},
    /// "entropy_coef"}`.
    pub fn from_json(p: &Value) -> Result<PgConfig> {
        let f = |k: &str| p.get(k).and_then(Value::as_f64);
        let need =
            |k: &str| f(k).ok_or_else(|| config_err(format!("`{k}` is required for this loss")));
        let surrogate = match p.get("loss").and_then(Value::as_str) {
            Some("ppo_clip") => Surrogate::PpoClip {
                clip_low: need("clip_low")?,
                clip_high: need("clip_high")?,
                dual_clip: f("dual_clip_c"),
            },
            Some("gspo") => Surrogate::Gspo {
                clip_low: need("clip_low")?,
                clip_high: need("clip_high")?,
            },
            Some("reinforce") => Surrogate::Reinforce,
            other => {
                return Err(config_err(format!(
                    "`loss` is {other:?}; use \"ppo_clip\", \"gspo\" or \"reinforce\""
                )))
            }
        };
        let aggregation = match p.get("agg").and_then(Value::as_str) {
            Some("token-mean") => Aggregation::TokenMean,
            Some("seq-mean-token-sum") => Aggregation::SeqMeanTokenSum,
            Some("seq-mean-token-mean") => Aggregation::SeqMeanTokenMean {
                trl_rows: p.get("trl_rows").and_then(Value::as_bool).unwrap_or(false),
            },
            Some("seq-mean-token-sum-norm") => Aggregation::SeqMeanTokenSumNorm {
                divisor: f("agg_divisor"),
            },
            other => {
                return Err(config_err(format!(
                    "`agg` is {other:?}; use token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm"
                )))
            }
        };
        let kl = match p.get("kl").filter(|k| !k.is_null()) {
            None => None,
            Some(k) => Some(Kl {
                estimator: match k.get("estimator").and_then(Value::as_str) {
                    Some("k1") => KlEstimator::K1,
                    Some("k2") => KlEstimator::K2,
                    Some("k3") => KlEstimator::K3,
                    other => {
                        return Err(config_err(format!(
                            "`kl.estimator` is {other:?}; use \"k1\", \"k2\" or \"k3\""
                        )))
                    }
                },
                coef: k
                    .get("coef")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| config_err("`kl.coef` is required".into()))?,
                clamp: k.get("clamp").and_then(Value::as_bool).unwrap_or(true),
            }),
        };
        Ok(PgConfig {
            surrogate,
            aggregation,
            kl,
            entropy_coef: f("entropy_coef").unwrap_or(0.0),
        })
    }
}
