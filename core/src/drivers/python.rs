//! The drivers that run their framework in Python bridge workers: `reasoning_gym:`,
//! `gymnasium:` and `verifiers:` (the worker and its protocol are [`crate::bridge`]).

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bridge::json::{number, parse};
use crate::bridge::verifiers::VerifiersEnv;
use crate::bridge::{BridgeConfig, Lease, Pool, Worker};
use crate::contract::{
    JudgeSource, Judgment, Manifest, Mode, Observation, RewardTiming, Step, TaskRef,
};
use crate::driver::{Driver, Readiness};
use crate::env::{Environment, Episode};
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::rng::{splitmix64, Rng};
use crate::uri::{ParamKind, ParamSpec, Uri};

/// A framework reached through the bridge.
pub struct BridgeDriver {
    scheme: &'static str,
    package: &'static str,
    requirement: &'static str,
    summary: &'static str,
}

/// `reasoning_gym:<dataset>?size=&seed=&<config keys>`.
pub fn reasoning_gym() -> BridgeDriver {
    BridgeDriver {
        scheme: "reasoning_gym",
        package: "reasoning-gym",
        requirement: "reasoning-gym==0.1.25",
        summary: "reasoning-gym datasets through the Python bridge: reasoning_gym:basic_arithmetic?size=100",
    }
}

/// `gymnasium:<id>?<make kwargs>`.
pub fn gymnasium() -> BridgeDriver {
    BridgeDriver {
        scheme: "gymnasium",
        package: "gymnasium",
        requirement: "gymnasium==1.4.0",
        summary: "Gymnasium environments through the Python bridge: gymnasium:CartPole-v1",
    }
}

/// `verifiers:<env_id>?<env args>` (rollout mode: the environment runs its own loop and calls
/// the model through the recording server).
pub fn verifiers() -> BridgeDriver {
    BridgeDriver {
        scheme: "verifiers",
        package: "verifiers",
        requirement: "verifiers>=0.3.1,<0.5",
        summary: "Prime Intellect verifiers environments (0.3 classic and 0.4 v1) through the Python bridge: verifiers:gsm8k",
    }
}

fn bridge_params() -> Vec<ParamSpec> {
    vec![
        ParamSpec {
            name: "workers",
            kind: ParamKind::Int { min: 1, max: 256 },
            default: "cores",
            help: "bridge worker processes (one environment instance each)",
        },
        ParamSpec {
            name: "python",
            kind: ParamKind::Str,
            default: "NENYAX_PYTHON, the managed venv, or python3",
            help: "the interpreter the bridge workers run (one with the framework installed)",
        },
        ParamSpec {
            name: "timeout_s",
            kind: ParamKind::Float,
            default: "300",
            help: "longest wait for one bridge reply before the worker is replaced",
        },
    ]
}

impl BridgeDriver {
    /// Whether `python` can import the framework.
    fn probe(&self, python: String) -> Readiness {
        let config = BridgeConfig {
            python,
            command: None,
            library: None,
            workers: 1,
            timeout: Duration::from_secs(30),
        };
        let probe = Worker::spawn(&config).and_then(|mut w| {
            let v = w.call("probe", json!({"packages": [self.package]}))?;
            crate::bridge::keep_probed(w, &config);
            Ok(v)
        });
        match probe {
            Err(e) => Readiness::Missing(e.to_string()),
            Ok(v) => match v["versions"][self.package].as_str() {
                Some(_) => Readiness::Ready,
                None => Readiness::Missing(format!(
                    "{} is not installed for {}; run `nenyax setup {}` or `{} -m pip install '{}'`",
                    self.requirement, config.python, self.scheme, config.python, self.requirement
                )),
            },
        }
    }
}

impl Driver for BridgeDriver {
    fn scheme(&self) -> &'static str {
        self.scheme
    }

    fn format(&self) -> &'static str {
        self.scheme
    }

    fn summary(&self) -> &'static str {
        self.summary
    }

    fn params(&self, _target: &str) -> Vec<ParamSpec> {
        // Plus every key the framework itself accepts, which the bridge checks.
        bridge_params()
    }

    fn readiness(&self) -> Readiness {
        self.probe(BridgeConfig::default().python)
    }

    fn readiness_for(&self, uri: &Uri) -> Readiness {
        match uri
            .params
            .iter()
            .find(|(k, _)| k == "python")
            .and_then(|(_, v)| v.as_str())
        {
            Some(p) => self.probe(p.to_string()),
            None => self.readiness(),
        }
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        load_bridged(
            &Bridged {
                scheme: self.scheme,
                command: None,
                library: None,
            },
            uri,
        )
    }
}

/// A driver whose environments live in bridge workers: one of the Python bridge's, or an
/// executable driver (crate::plugins::external), which share the loading and the environment.
#[derive(Debug, Clone)]
pub(crate) struct Bridged {
    /// The URI scheme, also the `driver` of the `load` request and the manifest's format.
    pub scheme: &'static str,
    /// An executable driver's program and arguments; `None` for the Python bridge. An
    /// executable driver has no `python` parameter (it is passed through to it like any
    /// other) and judges through its `judge` op.
    pub command: Option<Vec<String>>,
    /// An in-process driver from a library plugin (takes precedence over `command`).
    pub library: Option<Arc<crate::plugins::driver::LibraryDriver>>,
}

impl Bridged {
    /// A driver plugin (an executable or a library), not the Python bridge.
    fn is_plugin(&self) -> bool {
        self.command.is_some() || self.library.is_some()
    }
}

/// Start a pool for `uri` (the bridge parameters taken out, the rest sent to `load` as
/// `params`) and wrap its first `load` reply as an environment.
pub(crate) fn load_bridged(b: &Bridged, uri: &Uri) -> Result<Arc<dyn Environment>> {
    let scheme = b.scheme;
    let mut config = BridgeConfig {
        command: b.command.clone(),
        library: b.library.clone(),
        ..BridgeConfig::default()
    };
    let mut params = Map::new();
    for (k, v) in &uri.params {
        match k.as_str() {
            "workers" => {
                config.workers = v
                    .as_u64()
                    .filter(|n| (1..=256).contains(n))
                    .ok_or_else(|| Error::InvalidParameter {
                        driver: scheme.into(),
                        param: "workers".into(),
                        value: v.to_string(),
                        expected: "an integer from 1 to 256".into(),
                    })? as usize
            }
            "python" if !b.is_plugin() => {
                config.python = v
                    .as_str()
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| Error::InvalidParameter {
                        driver: scheme.into(),
                        param: "python".into(),
                        value: v.to_string(),
                        expected: "the path of a Python interpreter".into(),
                    })?
                    .to_string()
            }
            "timeout_s" => {
                config.timeout = crate::limits::seconds(v.as_f64().unwrap_or(f64::NAN), false)
                    .map_err(|expected| Error::InvalidParameter {
                        driver: scheme.into(),
                        param: "timeout_s".into(),
                        value: uri.raw_param("timeout_s").unwrap_or_else(|| v.to_string()),
                        expected,
                    })?;
            }
            _ => {
                params.insert(k.clone(), v.clone());
            }
        }
    }
    let load = json!({"driver": scheme, "target": uri.target, "params": params});
    let pool = Pool::new(config, load);
    let info = pool.start().map_err(|e| match e {
        Error::UnknownParameter {
            param, accepted, ..
        } => Error::UnknownParameter {
            driver: scheme.into(),
            suggestion: crate::error::suggest(&param, accepted.iter().map(String::as_str)),
            param,
            accepted,
        },
        Error::UnknownTarget { available, .. } => Error::UnknownTarget {
            driver: scheme.into(),
            target: uri.target.clone(),
            available,
        },
        // The framework refused the configuration (e.g. min_terms > max_terms).
        Error::Config(m) => Error::Config(format!("{}: {m}", uri.raw)),
        // An executable driver that cannot run (another protocol version) is this scheme's.
        Error::DriverUnavailable { missing, .. } if b.is_plugin() => Error::DriverUnavailable {
            driver: scheme.into(),
            missing,
        },
        other => other,
    })?;
    if scheme == "verifiers" && !b.is_plugin() {
        return Ok(Arc::new(VerifiersEnv::new(&uri.raw, pool, &info)?));
    }
    Ok(Arc::new(BridgedEnv::new(
        scheme,
        b.is_plugin(),
        &uri.raw,
        pool,
        &info,
    )))
}

struct BridgedEnv {
    manifest: Manifest,
    pool: Arc<Pool>,
    driver: &'static str,
    has_reference: bool,
    max_steps: usize,
    /// What the oracle does in each task, learnt when an episode of it starts; read by the
    /// reference policy so the answer never appears in an observation.
    references: Arc<Mutex<HashMap<String, Value>>>,
    /// An executable driver's: judged by its `judge` op rather than from the steps.
    external: bool,
    /// The action that answers nothing, from `load`'s `null_action` (for the audit).
    null_action: Option<Value>,
}

impl BridgedEnv {
    fn new(driver: &'static str, external: bool, id: &str, pool: Arc<Pool>, info: &Value) -> Self {
        let s = |k: &str| info.get(k).and_then(Value::as_str).map(str::to_string);
        let mut m = Manifest::new(
            id,
            s("name").unwrap_or_else(|| id.into()),
            driver,
            Mode::Step,
        );
        m.version = s("version");
        m.description = s("description");
        m.num_tasks = info.get("num_tasks").and_then(Value::as_u64);
        m.capabilities.text = info.get("text").and_then(Value::as_bool).unwrap_or(false);
        m.capabilities.reward_timing = if s("reward_timing").as_deref() == Some("per_step") {
            RewardTiming::PerStep
        } else {
            RewardTiming::Terminal
        };
        m.action_schema = info
            .get("action_schema")
            .and_then(Value::as_object)
            .cloned();
        m.observation_schema = info
            .get("observation_schema")
            .and_then(Value::as_object)
            .cloned();
        if let Some(extra) = info.get("extra").and_then(Value::as_object) {
            m.extra = extra.clone();
        }
        BridgedEnv {
            manifest: m,
            pool,
            driver,
            has_reference: info
                .get("has_reference")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            max_steps: info
                .get("max_steps")
                .and_then(Value::as_u64)
                .unwrap_or(10_000) as usize,
            references: Arc::new(Mutex::new(HashMap::new())),
            external,
            null_action: info.get("null_action").cloned(),
        }
    }
}

impl Environment for BridgedEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        if self.manifest.num_tasks.is_none() {
            return Ok(Vec::new());
        }
        let v = self
            .pool
            .checkout()?
            .call("tasks", json!({"limit": limit}))?;
        parse("tasks", v)
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let mut lease = self.pool.checkout()?;
        let r = lease.call(
            "reset",
            json!({
                "task_id": task.map(|t| t.id.clone()),
                "seed": seed,
                "with_reference": self.has_reference,
                // A task listed by `tasks` is complete; one made from a bare id is filled in.
                "want_task": task.map_or(true, |t| t.prompt.is_none() && t.metadata.is_empty()),
            }),
        )?;
        let obs: Observation = parse(
            "reset",
            r.get("observation").cloned().unwrap_or(Value::Null),
        )?;
        let task: Option<TaskRef> =
            match parse("reset", r.get("task").cloned().unwrap_or(Value::Null))? {
                Some(t) => Some(t),
                None => task.cloned(),
            };
        if self.has_reference {
            if let Some(t) = &task {
                let action = r.get("reference").cloned().unwrap_or(Value::Null);
                if !action.is_null() {
                    self.references
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(t.id.clone(), action);
                }
            }
        }
        Ok(Box::new(BridgedEpisode {
            driver: self.driver,
            external: self.external,
            lease: Mutex::new(lease),
            obs,
            task,
            env_id: self.manifest.id.clone(),
        }))
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        if !self.has_reference {
            return None;
        }
        let refs = self.references.clone();
        Some(Policy::action(move |obs| {
            let id = obs
                .info
                .get("task_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            refs.lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .cloned()
                .ok_or_else(|| Error::Policy(format!("no reference answer is known for task {id}")))
        }))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        if let Some(action) = &self.null_action {
            return Some(Policy::constant(action.clone()));
        }
        (self.driver == "reasoning_gym" && !self.external).then(|| Policy::constant(json!("")))
    }

    fn probe_policy(&self) -> Option<Policy> {
        random_policy(self.manifest.action_schema.as_ref()?)
    }

    fn default_max_steps(&self) -> usize {
        self.max_steps
    }
}

/// A random policy over an action schema, seeded by the observation it sees, so the same
/// situation always gets the same action (conformance replays must reproduce).
fn random_policy(schema: &Map<String, Value>) -> Option<Policy> {
    let schema = Value::Object(schema.clone());
    let kind = schema.get("type")?.as_str()?.to_string();
    if kind != "integer" && kind != "array" {
        return None;
    }
    Some(Policy::action(move |obs| {
        let seed = obs
            .data
            .to_string()
            .bytes()
            .fold(0u64, |h, b| splitmix64(h ^ u64::from(b)));
        let mut rng = Rng::new(seed);
        if kind == "integer" {
            let lo = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let hi = schema.get("maximum").and_then(Value::as_i64).unwrap_or(lo);
            return Ok(json!(rng.range(lo, hi)));
        }
        let n: u64 = schema
            .get("shape")
            .and_then(Value::as_array)
            .map_or(1, |s| s.iter().filter_map(Value::as_u64).product());
        // Bounds arrive nested to the space's shape; flatten them to index element-wise.
        fn flat(v: &Value, out: &mut Vec<f64>) {
            match v {
                Value::Array(a) => a.iter().for_each(|x| flat(x, out)),
                other => out.push(number(other)),
            }
        }
        let bounds = |k: &str| {
            let mut out = Vec::new();
            if let Some(v) = schema.get(k) {
                flat(v, &mut out);
            }
            out
        };
        let (lows, highs) = (bounds("low"), bounds("high"));
        let bound = |b: &[f64], i: usize, d: f64| {
            let x = if b.len() == 1 {
                b[0]
            } else {
                b.get(i).copied().unwrap_or(d)
            };
            if x.is_finite() {
                x
            } else {
                d
            }
        };
        let vals: Vec<f64> = (0..n as usize)
            .map(|i| {
                let (lo, hi) = (bound(&lows, i, -1.0), bound(&highs, i, 1.0));
                lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect();
        Ok(json!(vals))
    }))
}

struct BridgedEpisode {
    driver: &'static str,
    external: bool,
    /// In a mutex only because `judge` takes `&self` and an executable driver judges remotely.
    lease: Mutex<Lease>,
    obs: Observation,
    task: Option<TaskRef>,
    env_id: String,
}

impl Episode for BridgedEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let r = self
            .lease
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .call("step", json!({"action": action}))
            .map_err(|e| match e {
                Error::InvalidAction { reason, .. } => Error::InvalidAction {
                    env: self.env_id.clone(),
                    action: crate::contract::preview(action),
                    reason,
                },
                other => other,
            })?;
        self.obs = parse("step", r.get("observation").cloned().unwrap_or(Value::Null))?;
        Ok(Step {
            action: action.clone(),
            observation: self.obs.clone(),
            reward: number(r.get("reward").unwrap_or(&Value::Null)),
            terminated: r
                .get("terminated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            truncated: r.get("truncated").and_then(Value::as_bool).unwrap_or(false),
            info: r
                .get("info")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        })
    }

    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        if self.external {
            return self.judge_remote();
        }
        // Both verdicts are in the steps already: reasoning-gym's one step carries the
        // dataset's own score_answer, and Gymnasium's verdict is the return.
        let score: f64 = steps.iter().map(|s| s.reward).sum();
        let verifier = self.driver == "reasoning_gym";
        let (source, judge) = if verifier {
            (JudgeSource::Verifier, "reasoning_gym.score_answer")
        } else {
            (JudgeSource::Env, "gymnasium.return")
        };
        let mut j = Judgment::new(score, source, judge)?;
        if verifier {
            j.passed = Some(score >= 1.0);
            if let Some(t) = &self.task {
                if let Some(a) = t.metadata.get("answer") {
                    j.details.insert("expected".into(), a.clone());
                }
            }
        }
        Ok(j)
    }

    fn task(&self) -> Option<TaskRef> {
        self.task.clone()
    }
}

impl BridgedEpisode {
    /// An executable driver's own verdict (its `judge` op). `judge` takes `&self` but the
    /// worker needs `&mut`; the episode holds the only lease to it, so no one else waits on it.
    fn judge_remote(&self) -> Result<Judgment> {
        let v = self
            .lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .call("judge", json!({}))?;
        let j: Judgment = parse("judge", v)?;
        if !j.score.is_finite() {
            return Err(Error::Environment(format!(
                "driver `{}` judged a score of {}; a score must be finite",
                self.driver, j.score
            )));
        }
        Ok(j)
    }
}
