//! Training: learners (by name over a host trainer or the built-in policy, or a whole host
//! learner) and the training loop, whose report is JSON.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

use nenyax_core::train::{
    learner as named_learner, train_observed, Group, Learner, LearnerParts, UpdateReport,
};
use nenyax_core::{Error, Policy, TrainOptions};

use crate::args::{boxed, nenyax_string_t, opt_str_arg, str_arg, to_string_out};
use crate::callbacks::{
    bind, failure_message, nenyax_free_fn, nenyax_reply_t, CText, Route, UserData,
};
use crate::env::{env_ref, nenyax_env_t};
use crate::error::{boundary, invalid, json_err, nenyax_error_t, out_param, quietly, FfiResult};
use crate::policy::{nenyax_policy_t, policy_ref};
use crate::trainer::{nenyax_trainer_vtable_t, trainer_vtable, HostTrainer};

/// Version of `nenyax_learner_vtable_t`.
pub const NENYAX_LEARNER_VTABLE_VERSION: u32 = 1;

/// A whole learner implemented by the host (the learner contract: it rolls out with its own
/// policy, learns from judged groups, and may snapshot and restore for gating). Its callbacks
/// are called on the thread that called nenyax_train, never concurrently; each returns 0, or
/// non-zero with a message (the round then fails with NENYAX_STATUS_TRAINING in its report).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nenyax_learner_vtable_t {
    /// NENYAX_LEARNER_VTABLE_VERSION.
    pub version: u32,
    /// Learn from one round's groups (JSON [{"index", "task", "seed", "trajectories":
    /// [Trajectory]}]); write {"metrics": {name: number}} to `report` (or nothing).
    pub update: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            groups_json: *const c_char,
            groups_len: usize,
            report: *mut nenyax_reply_t,
        ) -> i32,
    >,
    /// Optional (NULL: updates are never reverted): save the learner's state in one slot.
    pub snapshot:
        Option<unsafe extern "C" fn(user_data: *mut c_void, error: *mut nenyax_reply_t) -> i32>,
    /// Optional, set with `snapshot`: go back to the last snapshot.
    pub restore:
        Option<unsafe extern "C" fn(user_data: *mut c_void, error: *mut nenyax_reply_t) -> i32>,
}

/// A learner: a named one (over a host trainer or the built-in policy) or the host's own.
/// Not thread-safe: one nenyax_train at a time may use it.
pub struct nenyax_learner_t {
    learner: Mutex<Box<dyn Learner>>,
    /// The routes of every host callback its rollouts may call (its policy's).
    routes: Vec<Arc<Route>>,
}

/// A learner config: JSON (`{"use": "grpo", ...}` or `"grpo"`) or a bare name (`grpo`).
fn learner_config(text: &str) -> FfiResult<Value> {
    let t = text.trim();
    if t.starts_with(['{', '"']) {
        let v: Value = serde_json::from_str(t).map_err(|e| json_err("config_json", &e))?;
        return Ok(v);
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(Value::String(t.to_string()));
    }
    Err(invalid(format!(
        "config_json is neither a learner name (e.g. grpo) nor JSON ({{\"use\": \"grpo\", ...}}): \
         {}",
        t.chars().take(80).collect::<String>()
    )))
}

/// The `use` of a learner config, when it has one.
fn learner_name(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("use").and_then(Value::as_str),
        _ => None,
    }
}

/// A learner by name from a config: `{"use": "grpo", ...knobs}` (JSON), or a bare name
/// (`grpo`). Weight learners train the host's model through `trainer` (whose sampling policy
/// is `policy`, required then), or with `trainer` NULL the built-in softmax policy (sized from
/// `env`, required then; `policy` must be NULL). `incontext` needs a chat `policy` (its model)
/// and no trainer. `user_data` belongs to the trainer and is freed with `free_user_data` when
/// the learner is freed (at once when `trainer` is NULL or the call fails). An unknown learner
/// or knob is NENYAX_STATUS_CONFIG, naming it and the accepted ones.
#[no_mangle]
pub unsafe extern "C" fn nenyax_learner_new(
    config_json: *const c_char,
    config_len: usize,
    env: *const nenyax_env_t,
    policy: *const nenyax_policy_t,
    trainer: *const nenyax_trainer_vtable_t,
    user_data: *mut c_void,
    free_user_data: nenyax_free_fn,
    out: *mut *mut nenyax_learner_t,
) -> *mut nenyax_error_t {
    let owner = UserData::new(user_data, free_user_data);
    boundary(move || {
        let config = learner_config(str_arg(config_json, config_len, "config_json")?)?;
        let env = env.as_ref();
        let policy = policy.as_ref();
        let incontext = learner_name(&config) == Some("incontext");
        let mut parts = LearnerParts {
            env: env.map(|e| e.env.clone()),
            ..LearnerParts::default()
        };
        let mut routes = env.map_or_else(Vec::new, |e| e.routes.clone());
        if let Some(p) = policy {
            routes.extend(p.routes.iter().cloned());
        }
        if incontext {
            if !trainer.is_null() {
                return Err(invalid(
                    "learner `incontext` changes no weights, so it takes no trainer; pass \
                     trainer = NULL and the chat policy to improve"
                        .into(),
                ));
            }
            let p = policy.ok_or_else(|| {
                invalid(
                    "learner `incontext` needs a chat policy (its model); policy is NULL".into(),
                )
            })?;
            match &p.policy {
                Policy::Chat(m) => parts.model = Some(m.clone()),
                other => {
                    return Err(invalid(format!(
                        "learner `incontext` needs a chat policy (a `chat` callback or an \
                         endpoint) to put examples in front of; got a {}",
                        other.kind()
                    )))
                }
            }
        } else if !trainer.is_null() {
            let vt = trainer_vtable(trainer)?;
            let p = policy.ok_or_else(|| {
                invalid(
                    "a host trainer needs its sampling policy: pass the nenyax_policy_t that \
                     samples with the trainer's weights (policy is NULL)"
                        .into(),
                )
            })?;
            parts.trainer = Some(Box::new(HostTrainer::new(vt, owner, p.policy.clone())));
        } else if policy.is_some() {
            return Err(invalid(
                "a policy without a trainer: with trainer = NULL the built-in softmax policy \
                 samples for itself; pass the trainer vtable that owns this policy's weights, \
                 or policy = NULL"
                    .into(),
            ));
        }
        let learner = named_learner(&config, parts)?;
        out_param(
            out,
            boxed(nenyax_learner_t {
                learner: Mutex::new(learner),
                routes,
            }),
        )
    })
}

/// A learner implemented by the host (see nenyax_learner_vtable_t), named `name`, rolling out
/// with `policy`. `free_user_data` (may be NULL) runs when the learner is freed, or at once if
/// this call fails.
#[no_mangle]
pub unsafe extern "C" fn nenyax_learner_custom(
    name: *const c_char,
    name_len: usize,
    vtable: *const nenyax_learner_vtable_t,
    user_data: *mut c_void,
    free_user_data: nenyax_free_fn,
    policy: *const nenyax_policy_t,
    out: *mut *mut nenyax_learner_t,
) -> *mut nenyax_error_t {
    let owner = UserData::new(user_data, free_user_data);
    boundary(move || {
        let name = str_arg(name, name_len, "name")?;
        if name.is_empty() {
            return Err(invalid(
                "name is empty; name the learner for its reports".into(),
            ));
        }
        let vt = learner_vtable(vtable)?;
        let policy = policy_ref(policy)?;
        let learner = HostLearner {
            name: name.to_string(),
            vt,
            data: owner,
            policy: policy.policy.clone(),
        };
        out_param(
            out,
            boxed(nenyax_learner_t {
                learner: Mutex::new(Box::new(learner)),
                routes: policy.routes.clone(),
            }),
        )
    })
}

/// Free a learner; NULL is a no-op. Its user data is freed with it.
#[no_mangle]
pub unsafe extern "C" fn nenyax_learner_free(learner: *mut nenyax_learner_t) {
    quietly(|| {
        if !learner.is_null() {
            drop(Box::from_raw(learner));
        }
        Ok(())
    });
}

/// Train `learner` on `env` and write the report (JSON) to `report_out`. Options (JSON, may be
/// NULL): {"rounds", "group_size", "batch", "eval_tasks", "eval_repeats", "tasks", "seed",
/// "concurrency", "max_steps", "gate", "gate_tolerance", "gate_sigma", "trajectories",
/// "progress", "telemetry": [{"name": "otel", ...}]}. The report is {"env", "learner", "options", "train_tasks", "held_out",
/// "baseline", "best", "final_eval", "gated", "rounds": [...], "wall_s", "overhead_fraction",
/// "text"}; a round that failed is in it (with "error"), not an error of this call. Rollouts
/// step on the library's threads; host policy callbacks without NENYAX_THREAD_SAFE run on this
/// thread, and trainer and learner callbacks always do.
#[no_mangle]
pub unsafe extern "C" fn nenyax_train(
    env: *const nenyax_env_t,
    learner: *mut nenyax_learner_t,
    options_json: *const c_char,
    options_len: usize,
    report_out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let handle = learner
            .as_ref()
            .ok_or_else(|| invalid("learner is NULL".into()))?;
        crate::args::need_out(report_out)?;
        let (opts, telemetry) = train_options_with_telemetry(
            opt_str_arg(options_json, options_len, "options_json")?,
            env.env.id(),
        )?;
        let mut guard = handle.learner.try_lock().map_err(|_| {
            invalid(
                "the learner is in use by another nenyax_train call; train one at a time".into(),
            )
        })?;
        let routes: Vec<Arc<Route>> = env.routes.iter().chain(&handle.routes).cloned().collect();
        let bound = bind(&routes);
        let report = train_observed(
            &env.env,
            guard.as_mut(),
            &opts,
            Some(bound.queue().clone()),
            telemetry.clone(),
            |_| {},
        );
        if let Some(t) = &telemetry {
            t.finish(report.as_ref().is_ok_and(|r| r.failed_rounds() == 0));
        }
        let report = report?;
        drop(bound);
        let mut v = report.to_json();
        v["overhead_fraction"] = json!(report.overhead_fraction());
        v["text"] = json!(report.render());
        out_param(report_out, to_string_out(v.to_string()))
    })
}

/// Read and check a run config file (TOML: `[env]`, `[model]`, `[learner]`, `[train]`,
/// `[output]`, as `nenyax train --config` reads it) and write it normalised, as JSON, to `out`:
/// {"file", "env": {"uri", "judge"}, "model", "learner", "train", "output"}, so a program can
/// pass "learner" to nenyax_learner_new and "train" to nenyax_train. `overrides_json` (may be
/// NULL) sets keys by dotted path first, e.g. {"train.gate": false, "learner.lr": 0.1}. Errors
/// (NENYAX_STATUS_CONFIG) name the file, the line and the key.
#[no_mangle]
pub unsafe extern "C" fn nenyax_config_load(
    path: *const c_char,
    path_len: usize,
    overrides_json: *const c_char,
    overrides_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let path = str_arg(path, path_len, "path")?;
        crate::args::need_out(out)?;
        let overrides = match opt_str_arg(overrides_json, overrides_len, "overrides_json")? {
            None => Map::new(),
            Some(t) => match serde_json::from_str(t).map_err(|e| json_err("overrides_json", &e))? {
                Value::Object(o) => o,
                other => {
                    return Err(invalid(format!(
                        "overrides_json must be a JSON object of dotted keys, got {}",
                        nenyax_core::contract::preview_json(&other)
                    )))
                }
            },
        };
        let mut cfg = nenyax_core::train::config::RunConfig::load(path)?;
        for (k, v) in overrides {
            cfg.set(&k, v)?;
        }
        out_param(out, to_string_out(cfg.to_json().to_string()))
    })
}

/// [`train_options`] and the hub of its `"telemetry"` list, started.
fn train_options_with_telemetry(
    text: Option<&str>,
    env_id: &str,
) -> FfiResult<(TrainOptions, Option<Arc<nenyax_core::Telemetry>>)> {
    let Some(t) = text else {
        return Ok((train_options(None)?, None));
    };
    let mut v: Value = serde_json::from_str(t).map_err(|e| json_err("options_json", &e))?;
    let mut run = nenyax_core::telemetry::RunInfo {
        kind: "train".into(),
        name: env_id.to_string(),
        params: Map::new(),
    };
    run.params.insert("uri".into(), json!(env_id));
    if let Some(o) = v.as_object() {
        run.params.extend(
            o.iter()
                .filter(|(k, _)| *k != "telemetry")
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    let telemetry = nenyax_core::telemetry::take_from_options(&mut v, run)?;
    Ok((train_options(Some(&v.to_string()))?, telemetry))
}

/// Train options from JSON: unknown fields are refused; `progress` is off unless asked for, as
/// a library writes nothing to stderr by itself.
fn train_options(text: Option<&str>) -> FfiResult<TrainOptions> {
    let mut v = match text {
        None => Value::Object(Map::new()),
        Some(t) => serde_json::from_str(t).map_err(|e| json_err("options_json", &e))?,
    };
    let Some(o) = v.as_object_mut() else {
        return Err(invalid(format!(
            "options_json must be a JSON object, got {}",
            nenyax_core::contract::preview_json(&v)
        )));
    };
    o.entry("progress").or_insert(Value::Bool(false));
    serde_json::from_value(v).map_err(|e| Error::Config(format!("train options: {e}")).into())
}

/// Copy and check a learner vtable.
unsafe fn learner_vtable(vt: *const nenyax_learner_vtable_t) -> FfiResult<nenyax_learner_vtable_t> {
    let vt = *vt
        .as_ref()
        .ok_or_else(|| invalid("learner vtable is NULL".into()))?;
    if vt.version != NENYAX_LEARNER_VTABLE_VERSION {
        return Err(invalid(format!(
            "nenyax_learner_vtable_t version {} is not supported; this library speaks version \
             {NENYAX_LEARNER_VTABLE_VERSION} (NENYAX_LEARNER_VTABLE_VERSION)",
            vt.version
        )));
    }
    if vt.update.is_none() {
        return Err(invalid("learner vtable->update is NULL".into()));
    }
    if vt.snapshot.is_some() != vt.restore.is_some() {
        return Err(invalid(
            "set both learner vtable->snapshot and ->restore, or neither (no gating)".into(),
        ));
    }
    Ok(vt)
}

/// A [`Learner`] over a host's vtable.
struct HostLearner {
    name: String,
    vt: nenyax_learner_vtable_t,
    data: Arc<UserData>,
    policy: Policy,
}

impl HostLearner {
    fn failed(&self, what: &str, rc: i32, error: nenyax_reply_t) -> nenyax_core::Result<()> {
        if rc == 0 {
            return Ok(());
        }
        Err(Error::Training(format!(
            "learner `{}`: its {what} callback failed with status {rc}: {}",
            self.name,
            failure_message(error.take())
        )))
    }
}

/// Groups as the host learner reads them.
fn groups_json(groups: &[Group]) -> String {
    let v: Vec<Value> = groups
        .iter()
        .map(|g| {
            json!({
                "index": g.index,
                "task": g.task,
                "seed": g.seed,
                "trajectories": g.trajectories,
            })
        })
        .collect();
    Value::Array(v).to_string()
}

impl Learner for HostLearner {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn policy(&mut self) -> nenyax_core::Result<Policy> {
        Ok(self.policy.clone())
    }

    fn update(&mut self, groups: &[Group]) -> nenyax_core::Result<UpdateReport> {
        let Some(f) = self.vt.update else {
            return Err(Error::Training(
                "the host learner has no update callback".into(),
            ));
        };
        let text = CText::new(groups_json(groups));
        let mut reply = nenyax_reply_t::empty();
        // SAFETY: the host's function with its own user data; the text outlives the call.
        let rc = unsafe { f(self.data.ptr, text.ptr(), text.len(), &mut reply) };
        if rc != 0 {
            return self
                .failed("update", rc, reply)
                .map(|()| UpdateReport::default());
        }
        let mut report = UpdateReport::default();
        let Some(bytes) = reply.take().filter(|b| !b.is_empty()) else {
            return Ok(report);
        };
        let bad = |why: String| {
            Error::Training(format!(
                "learner `{}`: its update report {why}; write {{\"metrics\": {{name: number}}}} \
                 or nothing",
                self.name
            ))
        };
        let v: Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("is not JSON ({e})")))?;
        let Some(o) = v.as_object() else {
            return Err(bad("is not a JSON object".into()));
        };
        if let Some(k) = o.keys().find(|k| *k != "metrics") {
            return Err(bad(format!("has an unknown field `{k}`")));
        }
        if let Some(m) = o.get("metrics") {
            let m: BTreeMap<String, f64> = serde_json::from_value(m.clone())
                .map_err(|e| bad(format!("has metrics that are not numbers ({e})")))?;
            report.metrics = m;
        }
        Ok(report)
    }

    fn snapshot(&mut self) -> nenyax_core::Result<bool> {
        let Some(f) = self.vt.snapshot else {
            return Ok(false);
        };
        let mut error = nenyax_reply_t::empty();
        // SAFETY: the host's function with its own user data.
        let rc = unsafe { f(self.data.ptr, &mut error) };
        self.failed("snapshot", rc, error).map(|()| true)
    }

    fn restore(&mut self) -> nenyax_core::Result<()> {
        let Some(f) = self.vt.restore else {
            return Err(Error::Training(format!(
                "learner `{}` cannot restore (no restore callback)",
                self.name
            )));
        };
        let mut error = nenyax_reply_t::empty();
        // SAFETY: the host's function with its own user data.
        let rc = unsafe { f(self.data.ptr, &mut error) };
        self.failed("restore", rc, error)
    }

    fn describe(&self) -> Value {
        json!({"name": self.name, "host": true, "snapshots": self.vt.snapshot.is_some()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_json_or_a_bare_name() {
        let ok = |t: &str| learner_config(t).ok();
        assert_eq!(ok("grpo"), Some(json!("grpo")));
        assert_eq!(ok(" \"dapo\" "), Some(json!("dapo")));
        assert_eq!(
            ok(r#"{"use":"rloo","epochs":2}"#),
            Some(json!({"use": "rloo", "epochs": 2}))
        );
        assert!(learner_config("grpo, please").is_err());
        assert!(learner_config("{oops").is_err());
    }

    #[test]
    fn train_options_refuse_unknown_fields_and_stay_quiet() {
        let o = train_options(Some(r#"{"rounds": 2}"#)).ok();
        assert_eq!(o.as_ref().map(|o| (o.rounds, o.progress)), Some((2, false)));
        let e = train_options(Some(r#"{"roundz": 2}"#))
            .err()
            .map(|e| e.status);
        assert_eq!(e, Some(crate::error::nenyax_status_t::NENYAX_STATUS_CONFIG));
    }
}
