//! Learners by name, from a config (`{"use": "grpo", ...knobs}`), every knob checked.

use serde_json::{Map, Value};
use std::sync::Arc;

use super::incontext::InContext;
use super::pg::{Objective, PgLearner, PgOptions, TraceBatch, Trainer, Weights};
use super::softmax::{SoftmaxOptions, SoftmaxPolicy};
use super::trace::Turns;
use super::Learner;
use crate::contract::Message;
use crate::env::Environment;
use crate::error::{suggest, Error, Result};
use crate::learn::{check_keys, Algorithm, ALGORITHM_KEYS, ESTIMATOR_KEYS, LOSS_KEYS};
use crate::models::ChatModel;
use crate::policy::Policy;

/// Every learner name `train` accepts, as the product description lists them (plus `grpo_trl`,
/// TRL's GRPO conventions).
pub const NAMES: &[&str] = &[
    "incontext",
    "grpo",
    "grpo_trl",
    "dr_grpo",
    "dapo",
    "rloo",
    "reinforce",
    "reinforce_pp",
    "gspo",
    "pg",
    "rft",
    "dpo",
    "tinker",
];

/// What a learner may need besides its config: the environment (to size the built-in policy),
/// a chat model (for `incontext`), a host's trainer (for the weight learners).
#[derive(Default)]
pub struct LearnerParts {
    /// The environment it will train on.
    pub env: Option<Arc<dyn Environment>>,
    /// The chat model (`incontext`).
    pub model: Option<Arc<dyn ChatModel>>,
    /// The trainer that owns the weights; `None`: the config's (`trainer = "builtin"`).
    pub trainer: Option<Box<dyn Trainer>>,
}

/// Run-control knobs every weight learner takes.
const RUN_KEYS: &[&str] = &[
    "use",
    "epochs",
    "minibatches",
    "turns",
    "old_logp",
    "trainer",
];

fn err(msg: String) -> Error {
    Error::Config(msg)
}

fn get_f64(cfg: &Map<String, Value>, k: &str, default: f64) -> Result<f64> {
    match cfg.get(k) {
        None => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| err(format!("`{k}` must be a finite number, got {v}"))),
    }
}

fn get_usize(cfg: &Map<String, Value>, k: &str, default: usize) -> Result<usize> {
    match cfg.get(k) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .map(|x| x as usize)
            .ok_or_else(|| err(format!("`{k}` must be a whole number >= 0, got {v}"))),
    }
}

/// A learner from `config`: a name (`"grpo"`) or a table `{"use": "<name>", <knobs>}`. An
/// unknown name or knob is an error naming it, the closest accepted one and all of them.
///
/// - `incontext`: `shots`, `capacity`, `min_score`, `budget_chars`; needs `parts.model`.
/// - `grpo`, `grpo_trl`, `dr_grpo`, `dapo`, `rloo`, `reinforce`, `reinforce_pp`, `gspo`:
///   any knob of [`Algorithm::from_json`] to override the preset; `pg`: every knob.
/// - `rft`: `min_score` (default 1); `dpo`: `beta` (default 0.1).
/// - every weight learner: `epochs`, `minibatches` (default 1 and 1; 8 and 4 over the
///   built-in policy, whose steps cost next to nothing), `turns` (`"join"` | `"split"`),
///   `old_logp` (`"recompute"` | `"sampled"`), `gamma` (REINFORCE++), and `trainer`: the
///   host's (`parts.trainer`), or `"builtin"` / `{use = "builtin", hidden, lr, seed,
///   greedy_eval, max_grad_norm}`, the built-in softmax policy.
/// - `tinker` is an error saying why it is not available.
pub fn learner(config: &Value, parts: LearnerParts) -> Result<Box<dyn Learner>> {
    build(config, parts, false)
}

/// What [`check_learner`] learns about a valid learner config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The smallest group its maths can learn from ([`Learner::min_group_size`]).
    pub min_group_size: usize,
}

/// Check a learner config as [`learner`] would, without the environment, the chat model or a
/// host's trainer: every name, knob and value that can be judged from the config alone
/// (`trainer = "host"` passes, since the program that links libnenyax brings it).
pub fn check_learner(config: &Value) -> Result<Checked> {
    let l = build(config, LearnerParts::default(), true)?;
    Ok(Checked {
        min_group_size: l.min_group_size(),
    })
}

/// Stands in for the parts a check has not got, so that the same code path judges the config
/// (a second, check-only parser would drift from the real one).
struct Absent;

impl ChatModel for Absent {
    fn name(&self) -> String {
        "absent".into()
    }

    fn complete(&self, _: &[Message]) -> Result<Message> {
        Err(err(
            "a learner built only to check its config cannot run".into()
        ))
    }
}

impl Trainer for Absent {
    fn name(&self) -> String {
        "absent".into()
    }

    fn policy(&mut self) -> Result<Policy> {
        Err(err(
            "a learner built only to check its config cannot run".into()
        ))
    }

    fn logprobs(&mut self, _: &TraceBatch<'_>, _: Weights) -> Result<Vec<f64>> {
        Err(err(
            "a learner built only to check its config cannot run".into()
        ))
    }

    fn apply(&mut self, _: &TraceBatch<'_>, _: &[f64]) -> Result<()> {
        Err(err(
            "a learner built only to check its config cannot run".into()
        ))
    }
}

fn build(config: &Value, parts: LearnerParts, check: bool) -> Result<Box<dyn Learner>> {
    let cfg: Map<String, Value> = match config {
        Value::String(s) => {
            let mut m = Map::new();
            m.insert("use".into(), Value::String(s.clone()));
            m
        }
        Value::Object(o) => o.clone(),
        other => {
            return Err(err(format!(
                "a learner is a name or a table with `use`, got {other}"
            )))
        }
    };
    let name = cfg
        .get("use")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            err(format!(
                "the learner needs `use = \"<name>\"`; one of {}",
                NAMES.join(", ")
            ))
        })?
        .to_string();
    if !NAMES.contains(&name.as_str()) {
        return plugin_learner(&name, &cfg);
    }
    match name.as_str() {
        "incontext" => {
            check_keys(
                &cfg,
                "learner `incontext`",
                ["use", "shots", "capacity", "min_score", "budget_chars"],
            )?;
            let model = match parts.model {
                Some(m) => m,
                None if check => Arc::new(Absent),
                None => {
                    return Err(err(
                        "learner `incontext` needs a chat model: give [model] (provider and \
                         name, or base_url) or --provider/--model (or --base-url)"
                            .into(),
                    ))
                }
            };
            let mut l = InContext::new(model);
            l.shots = get_usize(&cfg, "shots", l.shots)?;
            l.capacity = get_usize(&cfg, "capacity", l.capacity)?.max(1);
            l.min_score = get_f64(&cfg, "min_score", l.min_score)?;
            l.budget_chars = get_usize(&cfg, "budget_chars", l.budget_chars)?;
            Ok(Box::new(l))
        }
        "tinker" => Err(Error::DriverUnavailable {
            driver: "learner tinker".into(),
            missing: "not available: Thinking Machines' Tinker is reached through its Python \
                      SDK, whose wire protocol is not publicly documented, so Nenyax (a Rust \
                      library with no Python inside) cannot implement it honestly; use a \
                      weight learner with your own trainer through the C ABI, or `incontext`"
                .into(),
        }),
        _ => weight_learner(&name, cfg, parts, check),
    }
}

fn weight_learner(
    name: &str,
    cfg: Map<String, Value>,
    parts: LearnerParts,
    check: bool,
) -> Result<Box<dyn Learner>> {
    let what = format!("learner `{name}`");
    let objective = match name {
        "rft" => {
            check_keys(&cfg, &what, RUN_KEYS.iter().copied().chain(["min_score"]))?;
            Objective::Rft {
                min_score: get_f64(&cfg, "min_score", 1.0)?,
            }
        }
        "dpo" => {
            check_keys(&cfg, &what, RUN_KEYS.iter().copied().chain(["beta"]))?;
            Objective::Dpo {
                beta: get_f64(&cfg, "beta", 0.1)?,
            }
        }
        _ => {
            let extra: &[&str] = if name == "reinforce_pp" {
                &["gamma"]
            } else {
                &[]
            };
            check_keys(
                &cfg,
                &what,
                RUN_KEYS
                    .iter()
                    .chain(ALGORITHM_KEYS.iter().filter(|k| **k != "learner"))
                    .chain(ESTIMATOR_KEYS)
                    .chain(LOSS_KEYS)
                    .chain(extra)
                    .copied(),
            )?;
            let mut alg = Map::new();
            alg.insert("learner".into(), Value::String(name.into()));
            for (k, v) in &cfg {
                if !RUN_KEYS.contains(&k.as_str()) && k != "gamma" {
                    alg.insert(k.clone(), v.clone());
                }
            }
            let alg = Algorithm::from_json(&Value::Object(alg))?;
            Objective::Pg(alg)
        }
    };
    let builtin = parts.trainer.is_none() && trainer_use(cfg.get("trainer")) == Some("builtin");
    let (epochs, minibatches) = if builtin {
        BUILTIN_EPOCHS_MINIBATCHES
    } else {
        (1, 1)
    };
    let opts = PgOptions {
        epochs: get_usize(&cfg, "epochs", epochs)?,
        minibatches: get_usize(&cfg, "minibatches", minibatches)?,
        turns: match cfg.get("turns").and_then(Value::as_str) {
            None | Some("join") => Turns::Join,
            Some("split") => Turns::Split,
            Some(o) => return Err(err(format!("`turns` is {o:?}; use \"join\" or \"split\""))),
        },
        sampled_old_logp: match cfg.get("old_logp").and_then(Value::as_str) {
            None | Some("recompute") => false,
            Some("sampled") => true,
            Some(o) => {
                return Err(err(format!(
                    "`old_logp` is {o:?}; use \"recompute\" or \"sampled\""
                )))
            }
        },
        gamma: get_f64(&cfg, "gamma", 1.0)?,
    };
    let trainer = match parts.trainer {
        Some(t) => {
            if let Some(spec) = cfg.get("trainer") {
                if spec.as_str() != Some("host") {
                    return Err(err(format!(
                        "{what}: the program gave its own trainer, so `trainer = {spec}` cannot \
                         apply; leave `trainer` out or set it to \"host\""
                    )));
                }
            }
            t
        }
        None => builtin_trainer(&what, cfg.get("trainer"), parts.env, check)?,
    };
    Ok(Box::new(PgLearner::new(name, objective, opts, trainer)?))
}

/// Default passes and minibatches of a weight learner over the built-in policy. Its forward and
/// backward passes are microseconds while every rollout step is a round trip to the
/// environment (to Python, for Gymnasium), so squeezing each round's rollouts with many small
/// steps is nearly free; PPO's clip (and for REINFORCE and RLOO the small steps themselves)
/// keep the later steps near the policy that sampled. On CartPole-v1 with GRPO (20 rounds of
/// 8 groups x 8) 8 x 4 reached a held-out return of 252-283 on seeds 0-2, 4 x 4 155-254, and
/// 1 x 1 stalled at 30 (seed 0). A host's trainer (an LLM) keeps verl's one step per round and
/// sets its own.
const BUILTIN_EPOCHS_MINIBATCHES: (usize, usize) = (8, 4);

/// The `use` of a `trainer` knob: `"builtin"` when left out, `None` when malformed.
fn trainer_use(spec: Option<&Value>) -> Option<&str> {
    match spec {
        None => Some("builtin"),
        Some(Value::String(s)) => Some(s),
        Some(Value::Object(o)) => o.get("use").map_or(Some("builtin"), Value::as_str),
        Some(_) => None,
    }
}

fn builtin_trainer(
    what: &str,
    spec: Option<&Value>,
    env: Option<Arc<dyn Environment>>,
    check: bool,
) -> Result<Box<dyn Trainer>> {
    let mut table = match spec {
        None => Map::new(),
        Some(Value::String(s)) => {
            let mut m = Map::new();
            m.insert("use".into(), Value::String(s.clone()));
            m
        }
        Some(Value::Object(o)) => o.clone(),
        Some(other) => {
            return Err(err(format!(
                "{what}: `trainer` is a name or a table with `use`, got {other}"
            )))
        }
    };
    match table
        .remove("use")
        .as_ref()
        .and_then(Value::as_str)
        .unwrap_or("builtin")
    {
        "builtin" => {}
        "host" if !table.is_empty() => {
            let k = table.keys().next().cloned().unwrap_or_default();
            return Err(err(format!(
                "{what}: `trainer = \"host\"` takes no knobs here (got `{k}`): the program's \
                 own trainer has its settings"
            )));
        }
        "host" if check => return Ok(Box::new(Absent)),
        "host" => {
            return Err(err(format!(
                "{what}: `trainer = \"host\"` means a program that links libnenyax registers \
                 its own trainer (nenyax_learner_new with a nenyax_trainer_vtable_t; see \
                 bindings/cpp/examples/trainer.cpp); the nenyax command line has none"
            )))
        }
        other => {
            return Err(err(format!(
                "{what}: unknown trainer `{other}`; use \"builtin\" (the built-in softmax \
                 policy) or \"host\" (a program's own, through the C ABI)"
            )))
        }
    }
    // Its knobs are SoftmaxOptions' fields; checked here for the did-you-mean serde lacks.
    let fields = serde_json::to_value(SoftmaxOptions::default()).unwrap_or(Value::Null);
    let known: Vec<&str> = fields
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    check_keys(
        &table,
        &format!("{what}: trainer `builtin`"),
        known.iter().copied(),
    )?;
    let opts: SoftmaxOptions = serde_json::from_value(Value::Object(table))
        .map_err(|e| err(format!("{what}: trainer `builtin`: {e}")))?;
    opts.validate()?;
    if check && env.is_none() {
        return Ok(Box::new(Absent));
    }
    let env = env.ok_or_else(|| {
        err(format!(
            "{what}: the built-in policy is sized from the environment; give it one"
        ))
    })?;
    Ok(Box::new(SoftmaxPolicy::for_env(env.as_ref(), opts)?))
}

/// A learner plugin (a shared library in the plugins config, or one a host registered) for a
/// name that is not a built-in learner's; built-in names always win. An unknown name is an
/// error naming the closest learner, built-in or plugin, and all of them.
fn plugin_learner(name: &str, cfg: &Map<String, Value>) -> Result<Box<dyn Learner>> {
    let plugins = crate::plugins::library::plugin_names(crate::plugins::kinds::Kind::Learner);
    let mut unreadable = String::new();
    match crate::plugins::library::find_learner(name) {
        Ok(Some(plugin)) => {
            check_keys(cfg, &format!("learner plugin `{name}`"), ["use"])?;
            return Ok(Box::new(crate::plugins::learner::LibraryLearner::new(
                plugin,
            )));
        }
        Ok(None) => {}
        // A listed plugin that cannot load says why; an unreadable config must not hide the
        // did-you-mean of a mistyped built-in name.
        Err(e) if plugins.iter().any(|p| p == name) => return Err(e),
        Err(e) => unreadable = format!(" (the plugins config could not be read: {e})"),
    }
    let hint = suggest(
        name,
        NAMES
            .iter()
            .copied()
            .chain(plugins.iter().map(String::as_str)),
    )
    .map(|s| format!(" (did you mean `{s}`?)"))
    .unwrap_or_default();
    let plugins = if plugins.is_empty() {
        format!(
            "no learner plugins (add a [[plugin]] with kind = \"learner\" to {})",
            crate::plugins::config::path().display()
        )
    } else {
        format!("learner plugins: {}", plugins.join(", "))
    };
    Err(err(format!(
        "unknown learner `{name}`{hint}; known: {}; {plugins}{unreadable}",
        NAMES.join(", ")
    )))
}
