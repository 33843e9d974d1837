//! Environments: load, define (by spec or by callbacks), inspect, judge, roll out, check.

use serde_json::Value;
use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::Arc;

use nenyax_core::conformance::{check, CheckOptions};
use nenyax_core::policy::EpisodeContext;
use nenyax_core::{Environment, Policy, Registry, RolloutOptions};

use crate::args::{
    boxed, check_flags, json_out, need_out, nenyax_string_t, opt_str_arg, options, str_arg,
    to_string_out,
};
use crate::callbacks::{
    self, bind, nenyax_free_fn, nenyax_state_vtable_t, nenyax_task_vtable_t, Route,
};
use crate::error::{boundary, invalid, json_err, nenyax_error_t, out_param, quietly, FfiResult};
use crate::policy::{nenyax_policy_t, policy_ref};

/// A loaded environment (any format). Thread-safe: `const` functions may run concurrently.
pub struct nenyax_env_t {
    pub(crate) env: Arc<dyn Environment>,
    pub(crate) routes: Vec<Arc<Route>>,
    /// Builds a fresh instance, for the conformance checks that need one.
    factory: Option<Factory>,
}

type Factory = Arc<dyn Fn() -> nenyax_core::Result<Arc<dyn Environment>> + Send + Sync>;

fn env_handle(
    env: Arc<dyn Environment>,
    routes: Vec<Arc<Route>>,
    factory: Factory,
) -> nenyax_env_t {
    nenyax_env_t {
        env,
        routes,
        factory: Some(factory),
    }
}

pub(crate) unsafe fn env_ref<'a>(env: *const nenyax_env_t) -> FfiResult<&'a nenyax_env_t> {
    env.as_ref().ok_or_else(|| invalid("env is NULL".into()))
}

/// Load an environment by URI (e.g. "builtin:arithmetic?size=100"). Free with nenyax_env_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_load(
    uri: *const c_char,
    uri_len: usize,
    out: *mut *mut nenyax_env_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let uri = str_arg(uri, uri_len, "uri")?;
        let env = Registry::with_plugins().load(uri)?;
        let uri = uri.to_string();
        let factory: Factory = Arc::new(move || Registry::with_plugins().load(&uri));
        out_param(out, boxed(env_handle(env, Vec::new(), factory)))
    })
}

/// Define an environment from a JSON spec (the fields of a `define:` file: name, description,
/// tasks or tasks_file, judge); a tasks_file is read relative to the working directory.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_define(
    spec_json: *const c_char,
    spec_len: usize,
    out: *mut *mut nenyax_env_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let spec = str_arg(spec_json, spec_len, "spec_json")?;
        serde_json::from_str::<Value>(spec).map_err(|e| json_err("spec_json", &e))?;
        let env = nenyax_core::define::from_json_spec(spec, Path::new("."))?;
        let spec = spec.to_string();
        let factory: Factory =
            Arc::new(move || nenyax_core::define::from_json_spec(&spec, Path::new(".")));
        out_param(out, boxed(env_handle(env, Vec::new(), factory)))
    })
}

/// Define a one-turn environment from task rows (a JSON array of objects, each with a string
/// "prompt") scored by a C callback. `free_user_data` (may be NULL) runs when the last handle
/// using the callbacks is freed. `flags`: 0 or NENYAX_THREAD_SAFE.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_define_tasks(
    name: *const c_char,
    name_len: usize,
    tasks_json: *const c_char,
    tasks_len: usize,
    vtable: *const nenyax_task_vtable_t,
    user_data: *mut c_void,
    free_user_data: nenyax_free_fn,
    flags: u32,
    out: *mut *mut nenyax_env_t,
) -> *mut nenyax_error_t {
    // The callbacks own user_data from here on, also when the call fails.
    let owner = callbacks::UserData::new(user_data, free_user_data);
    boundary(move || {
        let name = str_arg(name, name_len, "name")?;
        let tasks = str_arg(tasks_json, tasks_len, "tasks_json")?;
        let rows: Vec<serde_json::Map<String, Value>> =
            serde_json::from_str(tasks).map_err(|e| json_err("tasks_json", &e))?;
        check_flags(flags)?;
        let vt = callbacks::task_vtable(vtable)?;
        let route = Route::new(flags);
        let env = callbacks::define_tasks(name, rows.clone(), vt, owner.clone(), &route)?;
        let (name, r) = (name.to_string(), route.clone());
        let factory: Factory =
            Arc::new(move || callbacks::define_tasks(&name, rows.clone(), vt, owner.clone(), &r));
        out_param(out, boxed(env_handle(env, vec![route], factory)))
    })
}

/// Define a multi-turn environment from C state callbacks over a JSON state (reset, observe,
/// step); episodes end when `step` sets done or after `max_steps` steps.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_define_stateful(
    name: *const c_char,
    name_len: usize,
    vtable: *const nenyax_state_vtable_t,
    user_data: *mut c_void,
    free_user_data: nenyax_free_fn,
    flags: u32,
    max_steps: usize,
    out: *mut *mut nenyax_env_t,
) -> *mut nenyax_error_t {
    let owner = callbacks::UserData::new(user_data, free_user_data);
    boundary(move || {
        let name = str_arg(name, name_len, "name")?;
        check_flags(flags)?;
        let vt = callbacks::state_vtable(vtable)?;
        let route = Route::new(flags);
        let env = callbacks::define_stateful(name, vt, owner.clone(), &route, max_steps);
        let (name, r) = (name.to_string(), route.clone());
        let factory: Factory = Arc::new(move || {
            Ok(callbacks::define_stateful(
                &name,
                vt,
                owner.clone(),
                &r,
                max_steps,
            ))
        });
        out_param(out, boxed(env_handle(env, vec![route], factory)))
    })
}

/// Free an environment; NULL is a no-op. Sessions and policies made from it stay valid.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_free(env: *mut nenyax_env_t) {
    quietly(|| {
        if !env.is_null() {
            drop(Box::from_raw(env));
        }
        Ok(())
    });
}

/// The manifest as JSON.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_manifest(
    env: *const nenyax_env_t,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        out_param(out, json_out(env.env.manifest()))
    })
}

/// Up to `limit` tasks (0: all) as a JSON array of TaskRef.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_tasks(
    env: *const nenyax_env_t,
    limit: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let tasks = env.env.tasks((limit > 0).then_some(limit))?;
        out_param(out, json_out(&tasks))
    })
}

/// The environment's reference (oracle) policy; NENYAX_STATUS_UNSUPPORTED when it has none.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_reference_policy(
    env: *const nenyax_env_t,
    out: *mut *mut nenyax_policy_t,
) -> *mut nenyax_error_t {
    env_policy(env, out, "a reference", |e| e.reference_policy(None))
}

/// The environment's null policy; NENYAX_STATUS_UNSUPPORTED when it has none.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_null_policy(
    env: *const nenyax_env_t,
    out: *mut *mut nenyax_policy_t,
) -> *mut nenyax_error_t {
    env_policy(env, out, "a null", |e| e.null_policy(None))
}

/// One of the environment's own policies as a handle; it keeps the environment's callback
/// routes, since such a policy may call back into the host (a callback-defined oracle).
unsafe fn env_policy(
    env: *const nenyax_env_t,
    out: *mut *mut nenyax_policy_t,
    which: &str,
    get: impl FnOnce(&dyn Environment) -> Option<Policy>,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let policy = get(env.env.as_ref())
            .ok_or_else(|| env.env.unsupported(&format!("provide {which} policy")))?;
        let routes = env.routes.clone();
        let chat = matches!(policy, Policy::Chat(_));
        out_param(
            out,
            boxed(nenyax_policy_t {
                policy,
                routes,
                chat,
            }),
        )
    })
}

/// A new environment whose episodes are re-judged by the judge a JSON spec describes
/// (e.g. {"type":"exact","extract":"answer_tag"}); `env` itself is unchanged.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_with_judge(
    env: *const nenyax_env_t,
    judge_json: *const c_char,
    judge_len: usize,
    out: *mut *mut nenyax_env_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let spec = str_arg(judge_json, judge_len, "judge_json")?;
        serde_json::from_str::<Value>(spec).map_err(|e| json_err("judge_json", &e))?;
        let judge = nenyax_core::judges::judge_from_json(spec)?;
        let judged = nenyax_core::with_judge(env.env.clone(), judge.clone());
        let factory = env.factory.clone().map(|inner| -> Factory {
            Arc::new(move || Ok(nenyax_core::with_judge(inner()?, judge.clone())))
        });
        out_param(
            out,
            boxed(nenyax_env_t {
                env: judged,
                routes: env.routes.clone(),
                factory,
            }),
        )
    })
}

/// Rollout options from JSON. A `context` (which episode this is, for per-episode policies)
/// that leaves out `seed`, `task_id` or `sample_seed` gets them from the options, so a host
/// need only say which round, group and member the episode is.
unsafe fn rollout_options(ptr: *const c_char, len: usize) -> FfiResult<RolloutOptions> {
    let mut opts: RolloutOptions = options(ptr, len, "options_json")?;
    if let Some(ctx) = &mut opts.context {
        let sample_seed_given = opt_str_arg(ptr, len, "options_json")?
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .is_some_and(|v| v["context"].get("sample_seed").is_some());
        if ctx.seed.is_none() {
            ctx.seed = opts.seed;
        }
        if ctx.task_id.is_none() {
            ctx.task_id = opts.task.as_ref().map(|t| t.id.clone());
        }
        if !sample_seed_given {
            let c = ctx.clone();
            let run_seed = c.seed.unwrap_or(0);
            ctx.sample_seed = EpisodeContext::new(
                run_seed, c.phase, c.round, c.group, c.member, c.task_id, c.seed,
            )
            .sample_seed;
        }
    }
    Ok(opts)
}

/// Roll out one episode on the calling thread (with a non-thread-safe chat callback: on a reused
/// helper thread, its calls served here) and return its Trajectory as JSON. Options (JSON,
/// may be NULL): {"task": TaskRef, "seed": int, "max_steps": int, "context": {"phase": "run" |
/// "train" | "eval", "round", "group", "member", "seed", "task_id", "sample_seed"}}; the
/// context is what per-episode policies see. A failed episode is not an error: the trajectory
/// carries it in "error".
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_rollout(
    env: *const nenyax_env_t,
    policy: *const nenyax_policy_t,
    options_json: *const c_char,
    options_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let policy = policy_ref(policy)?;
        need_out(out)?;
        let opts = rollout_options(options_json, options_len)?;
        let routes: Vec<Arc<Route>> = env.routes.iter().chain(&policy.routes).cloned().collect();
        let bound = bind(&routes);
        // Only a chat model can be called from threads other than the rollout's (a rollout- or
        // task-mode environment, or a NeMo Gym tool task, calls it through the recording
        // server); every driver calls action policies and the environment's own callbacks on
        // the thread running the rollout. So a rollout runs right here unless the policy is a
        // host chat callback (`chat` or `chat_episode`) that must stay on this thread: then on
        // a reused helper thread, while this thread serves the callbacks routed back to it.
        let aside = policy.chat && policy.routes.iter().any(|r| !r.thread_safe());
        let traj = if aside {
            let (e, p) = (env.env.clone(), policy.policy.clone());
            nenyax_core::runner::run_aside(Some(bound.queue()), move || e.rollout(&p, &opts))?
                .ok_or_else(|| invalid("the rollout thread stopped without a trajectory".into()))?
        } else {
            env.env.rollout(&policy.policy, &opts)
        };
        drop(bound);
        out_param(out, to_string_out(traj.to_json()))
    })
}

/// Run conformance on an environment handle; the report as JSON {env_id, mode, tier, checks}.
/// Options (may be NULL): {"samples": 8, "threads": 2}. Fresh instances for the
/// reproducibility check are rebuilt the way the handle was made (URI, spec or callbacks).
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_check(
    env: *const nenyax_env_t,
    options_json: *const c_char,
    options_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let mut opts: CheckOptions = options(options_json, options_len, "options_json")?;
        let bound = bind(&env.routes);
        opts.caller = Some(bound.queue().clone());
        let factory = env.factory.clone();
        let fresh = move || match &factory {
            Some(f) => f(),
            None => Err(nenyax_core::Error::Config(
                "no way to build a fresh instance".into(),
            )),
        };
        let report = check(&env.env, Some(&fresh), &opts);
        out_param(out, json_out(&report))
    })
}

/// Load `uri` and run the full conformance suite (fresh instances included); report as JSON.
#[no_mangle]
pub unsafe extern "C" fn nenyax_check_uri(
    uri: *const c_char,
    uri_len: usize,
    options_json: *const c_char,
    options_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let uri = str_arg(uri, uri_len, "uri")?;
        let opts: CheckOptions = options(options_json, options_len, "options_json")?;
        // As `nenyax check`: the fresh instance loads beside the first, workers are reused.
        let report = nenyax_core::conformance::try_check_uri(uri, &opts)?;
        out_param(out, json_out(&report))
    })
}
