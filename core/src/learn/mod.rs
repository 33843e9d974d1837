//! The maths of the learners a trainer runs on rollouts: advantage estimators, the policy losses
//! with their gradients (CPU here, CUDA in [`crate::kernels`]), and the named learners as presets
//! of those knobs. Every formula and convention follows docs/learners.md,
//! and is checked against its golden vectors (`tests/pg_golden.rs`).

pub mod advantage;
pub(crate) mod config;
mod dpo;
mod fast;
pub mod loss;

pub use advantage::{advantages, dapo_keep, reinforce_pp, Estimator, Singleton, StdScope};
pub use config::{
    Aggregation, Kl, KlEstimator, PgBatch, PgConfig, PgOutput, PgStats, Real, Surrogate,
};
pub use dpo::{dpo_loss, DpoOutput};
pub use loss::{pg_loss, pg_loss_into};

use serde_json::{json, Value};

use crate::error::{suggest, Error, Result};

fn config_err(msg: String) -> Error {
    Error::Config(msg)
}

/// The knobs of an advantage estimator, as its JSON spells them.
pub const ESTIMATOR_KEYS: &[&str] = &["estimator", "eps", "singleton", "std_scope"];
/// The knobs of a policy loss, as its JSON spells them.
pub const LOSS_KEYS: &[&str] = &[
    "loss",
    "clip_low",
    "clip_high",
    "dual_clip_c",
    "agg",
    "trl_rows",
    "agg_divisor",
    "kl",
    "entropy_coef",
];
/// The knobs of a KL penalty (`kl = {...}`).
pub const KL_KEYS: &[&str] = &["estimator", "coef", "clamp"];
/// Keys of a named learner's JSON beyond the estimator's and the loss's.
pub const ALGORITHM_KEYS: &[&str] = &["learner", "dapo_filter"];

/// Every key of `obj` must be one of `accepted`: a typo is an error naming it, the closest
/// accepted key and all of them, never a silently ignored knob.
pub fn check_keys<'a>(
    obj: &serde_json::Map<String, Value>,
    what: &str,
    accepted: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<()> {
    for k in obj.keys() {
        if !accepted.clone().into_iter().any(|a| a == k) {
            let hint = suggest(k, accepted.clone())
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            let all: Vec<&str> = accepted.into_iter().collect();
            return Err(config_err(format!(
                "{what} has no knob `{k}`{hint}; accepted: {}",
                all.join(", ")
            )));
        }
    }
    Ok(())
}

fn as_object<'a>(v: &'a Value, what: &str) -> Result<&'a serde_json::Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| config_err(format!("{what} must be a JSON object, got {v}")))
}

impl Estimator {
    /// From JSON (the C ABI's options): `{"estimator": "grpo_verl" | "grpo_trl" | "grpo" |
    /// "dr_grpo" | "rloo" | "reinforce", "eps": 1e-6, "singleton": "reward" | "zero",
    /// "std_scope": "group" | "batch"}`.
    pub fn from_json(v: &Value) -> Result<Estimator> {
        if v.get("learner").is_some() && v.get("estimator").is_none() {
            return Algorithm::from_json(v)?.estimator.ok_or_else(|| {
                config_err(
                    "this learner's advantages are per token (REINFORCE++); use reinforce_pp"
                        .into(),
                )
            });
        }
        check_keys(
            as_object(v, "an estimator config")?,
            "an estimator",
            ESTIMATOR_KEYS.iter().copied(),
        )?;
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
        if p.get("learner").is_some() {
            return Ok(Algorithm::from_json(p)?.loss);
        }
        check_keys(
            as_object(p, "a loss config")?,
            "a loss",
            LOSS_KEYS.iter().copied(),
        )?;
        if let Some(k) = p.get("kl").filter(|k| !k.is_null()) {
            check_keys(as_object(k, "`kl`")?, "`kl`", KL_KEYS.iter().copied())?;
        }
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
                    "`loss` is {}; use \"ppo_clip\", \"gspo\" or \"reinforce\"",
                    other.map_or("missing or not a string".into(), |o| format!("{o:?}"))
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
                    "`agg` is {}; use token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm",
                    other.map_or("missing or not a string".into(), |o| format!("{o:?}"))
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
                            "`kl.estimator` is {}; use \"k1\", \"k2\" or \"k3\"",
                            other.map_or("missing or not a string".into(), |o| format!("{o:?}"))
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

impl Estimator {
    /// The JSON [`Estimator::from_json`] reads back.
    pub fn to_json(&self) -> Value {
        let singleton = |s: &Singleton| match s {
            Singleton::Reward => "reward",
            Singleton::Zero => "zero",
        };
        match self {
            Estimator::Grpo {
                eps,
                scope,
                singleton: s,
            } => json!({
                "estimator": "grpo", "eps": eps, "singleton": singleton(s),
                "std_scope": match scope { StdScope::Group => "group", StdScope::Batch => "batch" },
            }),
            Estimator::DrGrpo => json!({"estimator": "dr_grpo"}),
            Estimator::Rloo { singleton: s } => {
                json!({"estimator": "rloo", "singleton": singleton(s)})
            }
            Estimator::ReinforceBatchMean => json!({"estimator": "reinforce"}),
        }
    }
}

impl PgConfig {
    /// The JSON [`PgConfig::from_json`] reads back.
    pub fn to_json(&self) -> Value {
        let mut v = match self.surrogate {
            Surrogate::PpoClip {
                clip_low,
                clip_high,
                dual_clip,
            } => json!({"loss": "ppo_clip", "clip_low": clip_low, "clip_high": clip_high,
                        "dual_clip_c": dual_clip}),
            Surrogate::Gspo {
                clip_low,
                clip_high,
            } => json!({"loss": "gspo", "clip_low": clip_low, "clip_high": clip_high}),
            Surrogate::Reinforce => json!({"loss": "reinforce"}),
        };
        let (agg, extra) = match self.aggregation {
            Aggregation::TokenMean => ("token-mean", None),
            Aggregation::SeqMeanTokenSum => ("seq-mean-token-sum", None),
            Aggregation::SeqMeanTokenMean { trl_rows } => {
                ("seq-mean-token-mean", Some(("trl_rows", json!(trl_rows))))
            }
            Aggregation::SeqMeanTokenSumNorm { divisor } => (
                "seq-mean-token-sum-norm",
                Some(("agg_divisor", json!(divisor))),
            ),
        };
        v["agg"] = json!(agg);
        if let Some((k, x)) = extra {
            v[k] = x;
        }
        v["kl"] = match self.kl {
            None => Value::Null,
            Some(k) => json!({
                "estimator": match k.estimator {
                    KlEstimator::K1 => "k1",
                    KlEstimator::K2 => "k2",
                    KlEstimator::K3 => "k3",
                },
                "coef": k.coef,
                "clamp": k.clamp,
            }),
        };
        v["entropy_coef"] = json!(self.entropy_coef);
        v
    }
}

/// A named learning algorithm: how it turns rewards into advantages and advantages into a loss
/// (the presets table of docs/learners.md). The learners of [`crate::train`] run it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Algorithm {
    /// Its name.
    pub name: &'static str,
    /// The group estimator; none: REINFORCE++'s token-level whitening ([`reinforce_pp`]).
    pub estimator: Option<Estimator>,
    /// Drop groups whose rewards are all equal before the loss (DAPO's dynamic sampling).
    pub dapo_filter: bool,
    /// The loss.
    pub loss: PgConfig,
}

const PPO_SYM: Surrogate = Surrogate::PpoClip {
    clip_low: 0.2,
    clip_high: 0.2,
    dual_clip: None,
};

const fn learner(
    name: &'static str,
    estimator: Option<Estimator>,
    dapo_filter: bool,
    surrogate: Surrogate,
    aggregation: Aggregation,
    kl: Option<Kl>,
) -> Algorithm {
    Algorithm {
        name,
        estimator,
        dapo_filter,
        loss: PgConfig {
            surrogate,
            aggregation,
            kl,
            entropy_coef: 0.0,
        },
    }
}

/// Every named learner. `grpo` follows verl (the trainer most GRPO runs at scale use);
/// `grpo_trl` follows TRL with the paper's KL coefficient.
pub const LEARNERS: &[Algorithm] = &[
    learner(
        "grpo",
        Some(Estimator::GRPO_VERL),
        false,
        Surrogate::PpoClip {
            clip_low: 0.2,
            clip_high: 0.2,
            dual_clip: Some(3.0),
        },
        Aggregation::TokenMean,
        Some(Kl {
            estimator: KlEstimator::K3,
            coef: 0.001,
            clamp: true,
        }),
    ),
    learner(
        "grpo_trl",
        Some(Estimator::GRPO_TRL),
        false,
        PPO_SYM,
        Aggregation::SeqMeanTokenMean { trl_rows: true },
        Some(Kl {
            estimator: KlEstimator::K3,
            coef: 0.04,
            clamp: false,
        }),
    ),
    learner(
        "dr_grpo",
        Some(Estimator::DrGrpo),
        false,
        PPO_SYM,
        Aggregation::SeqMeanTokenSumNorm { divisor: None },
        None,
    ),
    learner(
        "dapo",
        Some(Estimator::GRPO_VERL),
        true,
        Surrogate::PpoClip {
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: None,
        },
        Aggregation::TokenMean,
        None,
    ),
    learner(
        "rloo",
        Some(Estimator::Rloo {
            singleton: Singleton::Reward,
        }),
        false,
        PPO_SYM,
        Aggregation::TokenMean,
        None,
    ),
    learner(
        "reinforce",
        Some(Estimator::ReinforceBatchMean),
        false,
        Surrogate::Reinforce,
        Aggregation::SeqMeanTokenSum,
        None,
    ),
    learner(
        "reinforce_pp",
        None,
        false,
        PPO_SYM,
        Aggregation::TokenMean,
        None,
    ),
    learner(
        "gspo",
        Some(Estimator::GRPO_VERL),
        false,
        Surrogate::Gspo {
            clip_low: 3e-4,
            clip_high: 4e-4,
        },
        Aggregation::SeqMeanTokenMean { trl_rows: false },
        None,
    ),
];

impl Algorithm {
    /// A named preset (see [`LEARNERS`]).
    pub fn preset(name: &str) -> Result<Algorithm> {
        LEARNERS
            .iter()
            .find(|l| l.name == name)
            .copied()
            .ok_or_else(|| {
                let known: Vec<&str> = LEARNERS.iter().map(|l| l.name).collect();
                config_err(format!(
                    "unknown learner {name:?}; known: {}, or \"pg\" with every knob given",
                    known.join(", ")
                ))
            })
    }

    /// `{"learner": "<preset>", <any knob of PgConfig or Estimator JSON to override>}`, or
    /// `{"learner": "pg", "estimator": ..., "loss": ..., "agg": ...}` with every knob given
    /// (`"learner"` may be left out: a bare loss config, as `nenyax_pg_loss` takes, is a `pg`
    /// learner whose advantages the caller computes). Every key must be a known knob.
    pub fn from_json(v: &Value) -> Result<Algorithm> {
        let obj = as_object(v, "a learner config")?;
        check_keys(
            obj,
            "a learner",
            ALGORITHM_KEYS
                .iter()
                .chain(ESTIMATOR_KEYS)
                .chain(LOSS_KEYS)
                .copied(),
        )?;
        let name = match obj.get("learner") {
            None => "pg",
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(config_err(format!(
                    "`learner` must be a name such as \"grpo\", got {other}"
                )))
            }
        };
        let base = if name == "pg" {
            None
        } else {
            Some(Algorithm::preset(name)?)
        };
        let mut loss = base.map_or_else(|| json!({}), |l| l.loss.to_json());
        let mut est = base
            .and_then(|l| l.estimator)
            .map_or_else(|| json!({}), |e| e.to_json());
        for (k, x) in obj {
            match k.as_str() {
                "learner" | "dapo_filter" => {}
                "estimator" | "eps" | "singleton" | "std_scope" => est[k] = x.clone(),
                _ => loss[k] = x.clone(),
            }
        }
        // A generic `pg` without an estimator is a loss whose advantages the caller computes
        // (what `nenyax_pg_loss` takes); training one needs an estimator (train says so).
        let estimator = if est.get("estimator").is_some() {
            Some(Estimator::from_json(&est)?)
        } else if est.as_object().is_some_and(|o| !o.is_empty()) && base.is_none() {
            return Err(config_err(
                "`eps`, `singleton` and `std_scope` need an `estimator` (e.g. \"grpo\")".into(),
            ));
        } else {
            None
        };
        let loss = PgConfig::from_json(&loss)?;
        loss.validate()?;
        Ok(Algorithm {
            name: base.map_or("pg", |l| l.name),
            estimator,
            dapo_filter: obj
                .get("dapo_filter")
                .and_then(Value::as_bool)
                .unwrap_or(base.is_some_and(|l| l.dapo_filter)),
            loss,
        })
    }

    /// The JSON [`Algorithm::from_json`] reads back.
    pub fn to_json(&self) -> Value {
        let mut v = self.loss.to_json();
        if let Some(e) = self.estimator {
            for (k, x) in e.to_json().as_object().expect("an object") {
                v[k] = x.clone();
            }
        }
        v["learner"] = json!(self.name);
        v["dapo_filter"] = json!(self.dapo_filter);
        v
    }
}
