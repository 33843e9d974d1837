//! The C ABI of Nenyax (`libnenyax`). The header `include/nenyax.h` is generated from this
//! crate by cbindgen (`ffi/cbindgen.toml`); its conventions block is the normative summary.
//!
//! Every exported function runs inside [`boundary`], which catches panics, so nothing unwinds
//! into the host. Fallible functions return an owned `nenyax_error_t *` (NULL on success) and
//! write their out-parameters only on success. Contract data crosses as UTF-8 JSON.

#![warn(missing_docs)]
#![allow(non_camel_case_types)]
// Every `unsafe extern "C"` function documents its pointer contract in the header's
// conventions block (valid or NULL pointers, lengths in bytes); repeating it per function
// would only restate it.
#![allow(clippy::missing_safety_doc)]

mod callbacks;
mod error;

use serde::Deserialize;
use serde_json::Value;
use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::Arc;

use nenyax_core::conformance::{check, CheckOptions};
use nenyax_core::policy::EndpointSpec;
use nenyax_core::{Environment, Policy, Registry, RolloutOptions, Runner, Session, TaskRef};

pub use callbacks::{
    nenyax_act_fn, nenyax_chat_fn, nenyax_free_fn, nenyax_policy_vtable_t, nenyax_reply_set,
    nenyax_reply_t, nenyax_state_vtable_t, nenyax_task_vtable_t, nenyax_trajectory_fn,
};
pub use error::{
    nenyax_error_code, nenyax_error_free, nenyax_error_message, nenyax_error_t, nenyax_status_t,
};

use callbacks::{bind, Route};
use error::{boundary, invalid, json_err, new_error, out_param, quietly, FfiResult};

/// Flag for policies and callback-defined environments whose callbacks may be called from any
/// thread, concurrently (full parallelism for C/C++ hosts).
pub const NENYAX_THREAD_SAFE: u32 = 1;

/// Most worker threads a runner may have.
pub const NENYAX_MAX_THREADS: usize = 1024;

/// Version of `nenyax_policy_vtable_t`, `nenyax_task_vtable_t` and `nenyax_state_vtable_t`.
pub const NENYAX_VTABLE_VERSION: u32 = 1;

/// An owned UTF-8 string returned by the library (NUL-terminated; `len` excludes the NUL).
/// Free it with `nenyax_string_free`.
#[repr(C)]
pub struct nenyax_string_t {
    /// The bytes, NUL-terminated; NULL when empty-initialised.
    pub ptr: *mut c_char,
    /// Length in bytes, without the NUL.
    pub len: usize,
}

/// A loaded environment (any format). Thread-safe: `const` functions may run concurrently.
pub struct nenyax_env_t {
    env: Arc<dyn Environment>,
    routes: Vec<Arc<Route>>,
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

/// Reject flag bits this version does not know, so a newer host's intent is not silently lost.
fn check_flags(flags: u32) -> FfiResult<()> {
    let unknown = flags & !NENYAX_THREAD_SAFE;
    if unknown != 0 {
        return Err(invalid(format!(
            "unknown flag bits {unknown:#x}; this library knows NENYAX_THREAD_SAFE (1)"
        )));
    }
    Ok(())
}

/// Fail before doing any work when there is nowhere to put the result.
fn need_out<T>(out: *mut T) -> FfiResult<()> {
    if out.is_null() {
        return Err(invalid("the out-parameter is NULL".into()));
    }
    Ok(())
}

/// A policy: an action or chat callback, an endpoint, or an environment's own policy.
pub struct nenyax_policy_t {
    policy: Policy,
    routes: Vec<Arc<Route>>,
}

/// A live step-mode episode. Not thread-safe: use from one thread at a time.
pub struct nenyax_session_t {
    session: Session,
}

/// A thread pool for batches of rollouts.
pub struct nenyax_runner_t {
    runner: Runner,
}

fn to_string_out(s: String) -> nenyax_string_t {
    let s = s.replace('\0', "\\u0000");
    let len = s.len();
    let ptr = std::ffi::CString::new(s)
        .expect("NULs were escaped")
        .into_raw();
    nenyax_string_t { ptr, len }
}

fn json_out<T: serde::Serialize>(v: &T) -> nenyax_string_t {
    to_string_out(serde_json::to_string(v).expect("contract types serialise"))
}

/// Borrow a required UTF-8 input.
unsafe fn str_arg<'a>(ptr: *const c_char, len: usize, what: &str) -> FfiResult<&'a str> {
    if ptr.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
    std::str::from_utf8(bytes).map_err(|e| invalid(format!("{what} is not valid UTF-8 ({e})")))
}

/// Borrow an optional UTF-8 input: NULL or empty means absent.
unsafe fn opt_str_arg<'a>(
    ptr: *const c_char,
    len: usize,
    what: &str,
) -> FfiResult<Option<&'a str>> {
    if ptr.is_null() || len == 0 {
        return Ok(None);
    }
    str_arg(ptr, len, what).map(Some)
}

/// Parse optional JSON options into `T`, defaults when absent.
unsafe fn options<T: for<'de> Deserialize<'de> + Default>(
    ptr: *const c_char,
    len: usize,
    what: &str,
) -> FfiResult<T> {
    match opt_str_arg(ptr, len, what)? {
        None => Ok(T::default()),
        Some(s) => from_json_object(s, what),
    }
}

/// Parse a JSON object into `T`. Serde would also read a JSON array positionally into a
/// struct (`[3, 7]` as n = 3, seed = 7), which no caller means, so only objects are accepted.
fn from_json_object<T: for<'de> Deserialize<'de>>(s: &str, what: &str) -> FfiResult<T> {
    let v: Value = serde_json::from_str(s).map_err(|e| json_err(what, &e))?;
    if !v.is_object() {
        return Err(invalid(format!(
            "{what} must be a JSON object, got {}",
            nenyax_core::contract::preview_json(&v)
        )));
    }
    serde_json::from_value(v).map_err(|e| json_err(what, &e))
}

unsafe fn env_ref<'a>(env: *const nenyax_env_t) -> FfiResult<&'a nenyax_env_t> {
    env.as_ref().ok_or_else(|| invalid("env is NULL".into()))
}

unsafe fn policy_ref<'a>(p: *const nenyax_policy_t) -> FfiResult<&'a nenyax_policy_t> {
    p.as_ref().ok_or_else(|| invalid("policy is NULL".into()))
}

unsafe fn recording_ref<'a>(r: *const nenyax_recording_t) -> FfiResult<&'a nenyax_recording_t> {
    r.as_ref()
        .ok_or_else(|| invalid("recording is NULL".into()))
}

fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

// ---------------------------------------------------------------------------------------------
// versions and strings

/// Library version as a static NUL-terminated string ("0.1.0"); do not free it.
#[no_mangle]
pub extern "C" fn nenyax_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// Library version as MAJOR*1000000 + MINOR*1000 + PATCH; compare with NENYAX_VERSION_NUMBER.
#[no_mangle]
pub extern "C" fn nenyax_version_number() -> u32 {
    let part = |s: &str| s.parse::<u32>().unwrap_or(0);
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 1_000_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 1_000
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// Contract version (`PROTOCOL_VERSION`, "0.1") as a static string; do not free it.
#[no_mangle]
pub extern "C" fn nenyax_protocol_version() -> *const c_char {
    static PROTOCOL: &str = "0.1\0";
    debug_assert_eq!(
        &PROTOCOL[..PROTOCOL.len() - 1],
        nenyax_core::PROTOCOL_VERSION
    );
    PROTOCOL.as_ptr().cast()
}

/// Free a string returned by the library and reset it to {NULL, 0}; NULL or empty is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_string_free(s: *mut nenyax_string_t) {
    quietly(|| {
        if let Some(s) = s.as_mut() {
            if !s.ptr.is_null() {
                drop(std::ffi::CString::from_raw(s.ptr));
            }
            s.ptr = std::ptr::null_mut();
            s.len = 0;
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// environments

/// Load an environment by URI (e.g. "builtin:arithmetic?size=100"). Free with nenyax_env_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_env_load(
    uri: *const c_char,
    uri_len: usize,
    out: *mut *mut nenyax_env_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let uri = str_arg(uri, uri_len, "uri")?;
        let env = Registry::with_builtins().load(uri)?;
        let uri = uri.to_string();
        let factory: Factory = Arc::new(move || Registry::with_builtins().load(&uri));
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
        out_param(out, boxed(nenyax_policy_t { policy, routes }))
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RolloutJson {
    #[serde(default)]
    task: Option<TaskRef>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    max_steps: Option<usize>,
}

/// Roll out one episode on the calling thread and return its Trajectory as JSON. Options (JSON,
/// may be NULL): {"task": TaskRef, "seed": int, "max_steps": int}. A failed episode is not an
/// error: the trajectory carries it in "error".
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
        let o: RolloutJson = options(options_json, options_len, "options_json")?;
        let opts = RolloutOptions {
            task: o.task,
            seed: o.seed,
            max_steps: o.max_steps,
        };
        let routes: Vec<Arc<Route>> = env.routes.iter().chain(&policy.routes).cloned().collect();
        let bound = bind(&routes);
        // Only a chat model can be called from threads other than the rollout's (a rollout- or
        // task-mode environment, or a NeMo Gym tool task, calls it through the recording
        // server); every driver calls action policies and the environment's own callbacks on
        // the thread running the rollout. So a rollout runs right here unless the policy is a
        // host chat callback that must stay on this thread: then on a reused helper thread,
        // while this thread serves the callbacks routed back to it.
        let aside = matches!(policy.policy, nenyax_core::Policy::Chat(_))
            && policy.routes.iter().any(|r| !r.thread_safe());
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CheckJson {
    #[serde(default)]
    samples: Option<usize>,
    #[serde(default)]
    threads: Option<usize>,
}

fn check_options(o: CheckJson) -> CheckOptions {
    let d = CheckOptions::default();
    CheckOptions {
        samples: o.samples.unwrap_or(d.samples),
        threads: o.threads.unwrap_or(d.threads),
        ..d
    }
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
        let mut opts = check_options(options(options_json, options_len, "options_json")?);
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
        let opts = check_options(options(options_json, options_len, "options_json")?);
        let registry = Registry::with_builtins();
        let env = registry.load(uri)?;
        let factory = || registry.load(uri);
        let report = check(&env, Some(&factory), &opts);
        out_param(out, json_out(&report))
    })
}

// ---------------------------------------------------------------------------------------------
// sandboxes

/// A sandbox (process or jail backend). Not thread-safe for concurrent writes of the same
/// paths; commands may run from one thread at a time per handle.
pub struct nenyax_sandbox_t {
    sb: nenyax_core::sandbox::Sandbox,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SandboxJson {
    backend: Option<String>,
    cpu_s: Option<u64>,
    memory_bytes: Option<u64>,
    open_files: Option<u64>,
    processes: Option<u64>,
    file_size_bytes: Option<u64>,
    wall_s: Option<f64>,
    output_bytes: Option<usize>,
    network: Option<bool>,
    workdir: Option<String>,
    root: Option<bool>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    extra_dirs: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ExecJson {
    #[serde(default)]
    argv: Vec<String>,
    shell: Option<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    stdin: Option<String>,
    timeout_s: Option<f64>,
}

unsafe fn sandbox_ref<'a>(
    sb: *const nenyax_sandbox_t,
) -> FfiResult<&'a nenyax_core::sandbox::Sandbox> {
    sb.as_ref()
        .map(|s| &s.sb)
        .ok_or_else(|| invalid("sandbox is NULL".into()))
}

fn seconds(s: f64, what: &str) -> FfiResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(s).map_err(|_| {
        invalid(format!(
            "{what} must be a non-negative number of seconds, got {s}"
        ))
    })
}

/// Create a sandbox. Options (may be NULL): {"backend": "process"|"jail" (default process),
/// "cpu_s", "memory_bytes", "open_files", "processes", "file_size_bytes", "wall_s",
/// "output_bytes", "network", "workdir", "root", "env": {..}, "extra_dirs": [..]}.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_new(
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut nenyax_sandbox_t,
) -> *mut nenyax_error_t {
    use nenyax_core::sandbox::{BackendKind, Sandbox, SandboxConfig};
    boundary(|| {
        need_out(out)?;
        let o: SandboxJson = options(options_json, options_len, "options_json")?;
        let kind = BackendKind::parse(o.backend.as_deref().unwrap_or("process"))?;
        let mut c = SandboxConfig::new(kind);
        let l = &mut c.limits;
        l.cpu_s = o.cpu_s.or(l.cpu_s);
        l.memory_bytes = o.memory_bytes.or(l.memory_bytes);
        l.open_files = o.open_files.or(l.open_files);
        l.processes = o.processes.or(l.processes);
        l.file_size_bytes = o.file_size_bytes.or(l.file_size_bytes);
        if let Some(w) = o.wall_s {
            l.wall = seconds(w, "wall_s")?;
        }
        l.output_bytes = o.output_bytes.unwrap_or(l.output_bytes);
        c.network = o.network.unwrap_or(false);
        c.root = o.root.unwrap_or(false);
        if let Some(w) = o.workdir {
            c.workdir = w;
        }
        c.env = o.env;
        c.extra_dirs = o.extra_dirs;
        out_param(
            out,
            boxed(nenyax_sandbox_t {
                sb: Sandbox::create(c)?,
            }),
        )
    })
}

/// Run a command: {"argv": [..]} or {"shell": "..."}, plus optional "cwd", "env", "stdin"
/// (text) and "timeout_s". `out` receives the result as JSON: exit_code, signal, stdout,
/// stderr, dropped_bytes, duration_s, killed ("timeout"|"cpu_limit"|"file_size_limit"|
/// "signal"|null). A command that fails or is killed is not an error; one that cannot start is.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_exec(
    sandbox: *const nenyax_sandbox_t,
    exec_json: *const c_char,
    exec_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        let e: ExecJson =
            from_json_object(str_arg(exec_json, exec_len, "exec_json")?, "exec_json")?;
        let exec = nenyax_core::sandbox::Exec {
            argv: e.argv,
            shell: e.shell,
            cwd: e.cwd,
            env: e.env,
            stdin: e.stdin.map(String::into_bytes),
            timeout: e.timeout_s.map(|t| seconds(t, "timeout_s")).transpose()?,
        };
        out_param(out, json_out(&sb.exec(&exec)?))
    })
}

/// Write `len` bytes to a sandbox path (parents created) with Unix mode `mode`.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_put(
    sandbox: *const nenyax_sandbox_t,
    path: *const c_char,
    path_len: usize,
    data: *const u8,
    len: usize,
    mode: u32,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        let path = str_arg(path, path_len, "path")?;
        let bytes = slice_arg(data, len, "data")?;
        sb.put(path, bytes, mode)?;
        Ok(())
    })
}

/// Read a sandbox file into `out` (its bytes; a NUL byte in the file becomes "\u0000").
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_get(
    sandbox: *const nenyax_sandbox_t,
    path: *const c_char,
    path_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        let bytes = sb.get(str_arg(path, path_len, "path")?)?;
        out_param(
            out,
            to_string_out(String::from_utf8_lossy(&bytes).into_owned()),
        )
    })
}

/// List a sandbox directory as JSON: [{"name", "dir", "size"}], sorted by name.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_list(
    sandbox: *const nenyax_sandbox_t,
    path: *const c_char,
    path_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        let entries = sb.list(str_arg(path, path_len, "path")?)?;
        out_param(out, json_out(&entries))
    })
}

/// A new sandbox with the same configuration and a copy of this one's files.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_fork(
    sandbox: *const nenyax_sandbox_t,
    out: *mut *mut nenyax_sandbox_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        out_param(out, boxed(nenyax_sandbox_t { sb: sb.fork()? }))
    })
}

/// Destroy a sandbox (kill what is left, remove its files) and free it; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_free(sandbox: *mut nenyax_sandbox_t) {
    quietly(|| {
        if !sandbox.is_null() {
            let _ = Box::from_raw(sandbox).sb.destroy();
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// sessions

/// Open a step-mode session. Options (may be NULL): {"task": TaskRef, "seed": int}.
/// Rollout- and task-mode environments give NENYAX_STATUS_UNSUPPORTED.
#[no_mangle]
pub unsafe extern "C" fn nenyax_session_open(
    env: *const nenyax_env_t,
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut nenyax_session_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        let o: RolloutJson = options(options_json, options_len, "options_json")?;
        let session = env.env.session(o.task.as_ref(), o.seed)?;
        out_param(out, boxed(nenyax_session_t { session }))
    })
}

/// The current observation as JSON.
#[no_mangle]
pub unsafe extern "C" fn nenyax_session_observation(
    session: *const nenyax_session_t,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let s = session
            .as_ref()
            .ok_or_else(|| invalid("session is NULL".into()))?;
        out_param(out, json_out(s.session.observation()))
    })
}

/// Apply an action (JSON, e.g. "\"<answer>4</answer>\"" or "42") and return the Step as JSON.
#[no_mangle]
pub unsafe extern "C" fn nenyax_session_act(
    session: *mut nenyax_session_t,
    action_json: *const c_char,
    action_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let s = session
            .as_mut()
            .ok_or_else(|| invalid("session is NULL".into()))?;
        need_out(out)?;
        let text = str_arg(action_json, action_len, "action_json")?;
        let action: Value = serde_json::from_str(text).map_err(|e| json_err("action_json", &e))?;
        let step = s.session.act(action)?;
        out_param(out, json_out(&step))
    })
}

/// True once the episode terminated or was truncated (false for NULL).
#[no_mangle]
pub unsafe extern "C" fn nenyax_session_done(session: *const nenyax_session_t) -> bool {
    let mut done = false;
    quietly(|| {
        done = session.as_ref().is_some_and(|s| s.session.done());
        Ok(())
    });
    done
}

/// The episode's Judgment so far, as JSON.
#[no_mangle]
pub unsafe extern "C" fn nenyax_session_judgment(
    session: *const nenyax_session_t,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let s = session
            .as_ref()
            .ok_or_else(|| invalid("session is NULL".into()))?;
        out_param(out, json_out(&s.session.judgment()?))
    })
}

/// Close and free a session; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_session_free(session: *mut nenyax_session_t) {
    quietly(|| {
        if !session.is_null() {
            drop(Box::from_raw(session));
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// policies

/// A policy from C callbacks: `vtable->act` (observation JSON -> action JSON) or `vtable->chat`
/// (messages JSON -> reply text), exactly one non-NULL. Without NENYAX_THREAD_SAFE in `flags`
/// the callback runs only on threads that called into the library (see the conventions).
#[no_mangle]
pub unsafe extern "C" fn nenyax_policy_new(
    vtable: *const nenyax_policy_vtable_t,
    user_data: *mut c_void,
    free_user_data: nenyax_free_fn,
    flags: u32,
    out: *mut *mut nenyax_policy_t,
) -> *mut nenyax_error_t {
    let owner = callbacks::UserData::new(user_data, free_user_data);
    boundary(move || {
        check_flags(flags)?;
        let (policy, route) = callbacks::policy(vtable, owner, flags)?;
        out_param(
            out,
            boxed(nenyax_policy_t {
                policy,
                routes: vec![route],
            }),
        )
    })
}

/// A policy backed by an OpenAI-compatible endpoint: JSON {"provider" or "base_url", "model",
/// "api_key_env", "timeout_s", "retries", "backoff_s", "params"}; "provider" names one of
/// `nenyax integrations` (e.g. "vllm", "openai"), its base URL and key variable.
#[no_mangle]
pub unsafe extern "C" fn nenyax_policy_endpoint(
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut nenyax_policy_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let text = str_arg(options_json, options_len, "options_json")?;
        let spec: EndpointSpec = from_json_object(text, "options_json")?;
        let policy = Policy::chat(spec.build()?);
        out_param(
            out,
            boxed(nenyax_policy_t {
                policy,
                routes: Vec::new(),
            }),
        )
    })
}

/// Free a policy; NULL is a no-op. Its user_data is freed when no handle uses it any more.
#[no_mangle]
pub unsafe extern "C" fn nenyax_policy_free(policy: *mut nenyax_policy_t) {
    quietly(|| {
        if !policy.is_null() {
            drop(Box::from_raw(policy));
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// OpenEnv server

/// An OpenEnv server serving one step-mode environment (what `nenyax serve` runs).
/// Thread-safe; stop and free it with nenyax_server_stop.
pub struct nenyax_server_t {
    server: nenyax_core::Server,
    _routes: Vec<Arc<Route>>,
}

/// Serve `env` (a step-mode environment) as an OpenEnv server on background threads: WebSocket
/// sessions at /ws, HTTP /reset, /step, /state, /health, /metadata, /schema. Options (may be
/// NULL): {"host": "127.0.0.1", "port": 8000 (0: any free port), "max_sessions": 64,
/// "idle_timeout_s": 300, "max_message_bytes": 1048576, "max_connections": 1024,
/// "ping_interval_s": 20}. Environment callbacks are called from the server's threads: a
/// callback-defined environment needs NENYAX_THREAD_SAFE.
#[no_mangle]
pub unsafe extern "C" fn nenyax_serve_start(
    env: *const nenyax_env_t,
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut nenyax_server_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let env = env_ref(env)?;
        need_out(out)?;
        let opts = match opt_str_arg(options_json, options_len, "options_json")? {
            None => nenyax_core::ServeOptions::default(),
            Some(s) => {
                let v: Value = serde_json::from_str(s).map_err(|e| json_err("options_json", &e))?;
                nenyax_core::ServeOptions::from_json(&v)?
            }
        };
        let server = nenyax_core::Server::start(env.env.clone(), opts)?;
        out_param(
            out,
            boxed(nenyax_server_t {
                server,
                _routes: env.routes.clone(),
            }),
        )
    })
}

/// The server's base URL, e.g. `http://127.0.0.1:8000` (OpenEnv clients append /ws).
#[no_mangle]
pub unsafe extern "C" fn nenyax_server_url(
    server: *const nenyax_server_t,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let s = server
            .as_ref()
            .ok_or_else(|| invalid("server is NULL".into()))?;
        need_out(out)?;
        out_param(out, to_string_out(s.server.url()))
    })
}

/// Stop the server (every connection and session is closed) and free it; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_server_stop(server: *mut nenyax_server_t) {
    quietly(|| {
        if !server.is_null() {
            Box::from_raw(server).server.stop();
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// recordings

/// A recording on the process's model server: an OpenAI base URL of its own whose calls are
/// answered by a chat policy and kept, for a host that runs its own agent loop.
pub struct nenyax_recording_t {
    recording: nenyax_core::Recording,
    _routes: Vec<Arc<Route>>,
}

/// Start a recording answered by `policy` (a chat policy: a callback model or an endpoint,
/// which is proxied with streams and token ids intact); free it with nenyax_recording_free.
/// Callbacks are called from the server's threads: give them NENYAX_THREAD_SAFE.
#[no_mangle]
pub unsafe extern "C" fn nenyax_recording_new(
    policy: *const nenyax_policy_t,
    out: *mut *mut nenyax_recording_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let policy = policy_ref(policy)?;
        let model = match &policy.policy {
            Policy::Chat(m) => m.clone(),
            other => {
                return Err(invalid(format!(
                    "a recording needs a chat policy (a chat callback or an endpoint); got: {}",
                    other.kind()
                )))
            }
        };
        let recording =
            nenyax_core::ModelServer::global()?.record(nenyax_core::Backend::for_model(model));
        out_param(
            out,
            boxed(nenyax_recording_t {
                recording,
                _routes: policy.routes.clone(),
            }),
        )
    })
}

/// The recording's OpenAI base URL (`http://127.0.0.1:<port>/r/<id>/v1`).
#[no_mangle]
pub unsafe extern "C" fn nenyax_recording_base_url(
    recording: *const nenyax_recording_t,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let r = recording_ref(recording)?;
        need_out(out)?;
        out_param(out, to_string_out(r.recording.base_url().to_string()))
    })
}

/// The calls made so far, as a JSON array of ModelCall; with `drain` non-zero they are removed.
#[no_mangle]
pub unsafe extern "C" fn nenyax_recording_calls(
    recording: *const nenyax_recording_t,
    drain: i32,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let r = recording_ref(recording)?;
        need_out(out)?;
        let calls = if drain != 0 {
            r.recording.take()
        } else {
            r.recording.calls()
        };
        out_param(out, json_out(&calls))
    })
}

/// End a recording (its URL stops answering) and free it; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_recording_free(recording: *mut nenyax_recording_t) {
    quietly(|| {
        if !recording.is_null() {
            drop(Box::from_raw(recording));
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// learners (host memory, f64)

/// A required input array of `n` values; NULL is an error naming it (n = 0 gives an empty one).
unsafe fn slice_arg<'a, T>(ptr: *const T, n: usize, what: &str) -> FfiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    Ok(std::slice::from_raw_parts(ptr, n))
}

/// A required JSON object argument.
unsafe fn json_object_arg(ptr: *const c_char, len: usize, what: &str) -> FfiResult<Value> {
    let text = str_arg(ptr, len, what)?;
    let v: Value = serde_json::from_str(text).map_err(|e| json_err(what, &e))?;
    if !v.is_object() {
        return Err(invalid(format!("{what} must be a JSON object")));
    }
    Ok(v)
}

/// Advantages of `n` sequences into `out` (n values). Options: {"estimator": "grpo_verl" |
/// "grpo_trl" | "grpo" | "dr_grpo" | "rloo" | "reinforce", "eps", "singleton": "reward" |
/// "zero", "std_scope": "group" | "batch"}; `group_ids` label the rollouts of one task.
#[no_mangle]
pub unsafe extern "C" fn nenyax_advantages(
    rewards: *const f64,
    group_ids: *const i64,
    n: usize,
    options_json: *const c_char,
    options_len: usize,
    out: *mut f64,
) -> *mut nenyax_error_t {
    boundary(|| {
        let rewards = slice_arg(rewards, n, "rewards")?;
        let ids = slice_arg(group_ids, n, "group_ids")?;
        if out.is_null() {
            return Err(invalid("out is NULL".into()));
        }
        let est = nenyax_core::learn::Estimator::from_json(&json_object_arg(
            options_json,
            options_len,
            "options_json",
        )?)?;
        let adv = nenyax_core::learn::advantages(rewards, ids, &est)?;
        std::slice::from_raw_parts_mut(out, n).copy_from_slice(&adv);
        Ok(())
    })
}

/// DAPO's dynamic-sampling filter: `keep_out[i]` is 1 unless row i's group has all-equal rewards
/// (a group of one is kept). Exact equality, a deliberate deviation from the reference's float
/// std test (docs/learners.md).
#[no_mangle]
pub unsafe extern "C" fn nenyax_dapo_keep(
    rewards: *const f64,
    group_ids: *const i64,
    n: usize,
    keep_out: *mut u8,
) -> *mut nenyax_error_t {
    boundary(|| {
        let rewards = slice_arg(rewards, n, "rewards")?;
        let ids = slice_arg(group_ids, n, "group_ids")?;
        if keep_out.is_null() {
            return Err(invalid("keep_out is NULL".into()));
        }
        let keep = nenyax_core::learn::dapo_keep(rewards, ids)?;
        for (o, k) in std::slice::from_raw_parts_mut(keep_out, n)
            .iter_mut()
            .zip(keep)
        {
            *o = u8::from(k);
        }
        Ok(())
    })
}

/// What a policy-loss call returns besides the gradients.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct nenyax_pg_stats_t {
    /// The total loss (policy + KL - entropy).
    pub loss: f64,
    /// The policy term.
    pub loss_pg: f64,
    /// agg(KL) before its coefficient (0 without a KL term).
    pub kl: f64,
    /// agg(entropy) (0 without an entropy bonus).
    pub entropy: f64,
    /// Fraction of valid tokens clipped.
    pub clip_fraction: f64,
    /// Mean of old - logp over valid tokens.
    pub approx_kl: f64,
    /// Mean token ratio over valid tokens.
    pub mean_ratio: f64,
    /// Valid tokens (N).
    pub tokens: f64,
    /// Rows with at least one valid token (B').
    pub rows: f64,
}

impl From<nenyax_core::learn::PgStats> for nenyax_pg_stats_t {
    fn from(s: nenyax_core::learn::PgStats) -> Self {
        nenyax_pg_stats_t {
            loss: s.loss,
            loss_pg: s.loss_pg,
            kl: s.kl.unwrap_or(0.0),
            entropy: s.entropy.unwrap_or(0.0),
            clip_fraction: s.clip_fraction,
            approx_kl: s.approx_kl,
            mean_ratio: s.mean_ratio,
            tokens: s.tokens as f64,
            rows: s.rows as f64,
        }
    }
}

/// `rows x width` without overflow.
fn tokens_of(rows: usize, width: usize) -> FfiResult<usize> {
    rows.checked_mul(width)
        .ok_or_else(|| invalid(format!("rows ({rows}) x width ({width}) overflows")))
}

/// The host arrays of a loss call as a batch, each checked for NULL and sized `rows x width`.
#[allow(clippy::too_many_arguments)]
unsafe fn host_batch<'a, F: nenyax_core::learn::Real>(
    logp: *const F,
    old_logp: *const F,
    ref_logp: *const F,
    entropy: *const F,
    mask: *const u8,
    advantages: *const F,
    advantages_len: usize,
    rows: usize,
    width: usize,
) -> FfiResult<nenyax_core::learn::PgBatch<'a, F>> {
    let n = tokens_of(rows, width)?;
    let opt = |p: *const F, what: &str| -> FfiResult<Option<&'a [F]>> {
        if p.is_null() {
            Ok(None)
        } else {
            slice_arg(p, n, what).map(Some)
        }
    };
    let adv_len = if advantages_len == 0 {
        rows
    } else {
        advantages_len
    };
    Ok(nenyax_core::learn::PgBatch {
        logp: slice_arg(logp, n, "logp")?,
        old_logp: slice_arg(old_logp, n, "old_logp")?,
        ref_logp: opt(ref_logp, "ref_logp")?,
        entropy: opt(entropy, "entropy")?,
        mask: slice_arg(mask, n, "mask")?,
        advantages: slice_arg(advantages, adv_len, "advantages")?,
        width,
    })
}

/// The loss config of a C call: pg knobs or a named learner.
unsafe fn pg_config_arg(ptr: *const c_char, len: usize) -> FfiResult<nenyax_core::learn::PgConfig> {
    Ok(nenyax_core::learn::PgConfig::from_json(&json_object_arg(
        ptr,
        len,
        "config_json",
    )?)?)
}

/// The shared body of the host-memory loss entry points, in either precision.
#[allow(clippy::too_many_arguments)]
unsafe fn pg_loss_host<F: nenyax_core::learn::Real>(
    logp: *const F,
    old_logp: *const F,
    ref_logp: *const F,
    entropy: *const F,
    mask: *const u8,
    advantages: *const F,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut F,
    grad_entropy: *mut F,
    stats: *mut nenyax_pg_stats_t,
) -> FfiResult<()> {
    let n = tokens_of(rows, width)?;
    let cfg = pg_config_arg(config_json, config_len)?;
    let batch = host_batch(
        logp,
        old_logp,
        ref_logp,
        entropy,
        mask,
        advantages,
        advantages_len,
        rows,
        width,
    )?;
    if grad_logp.is_null() && n > 0 {
        return Err(invalid("grad_logp is NULL".into()));
    }
    let grad = if n == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(grad_logp, n)
    };
    let grad_h = if grad_entropy.is_null() || n == 0 {
        None
    } else {
        Some(std::slice::from_raw_parts_mut(grad_entropy, n))
    };
    let out = nenyax_core::learn::pg_loss_into(&batch, &cfg, grad, grad_h)?;
    if let Some(s) = stats.as_mut() {
        *s = out.into();
    }
    Ok(())
}

/// A policy-gradient loss over `rows` x `width` tokens (row-major, f64), its value in `stats`
/// and dL/dlogp in `grad_logp` (rows x width). `ref_logp` is needed with a KL term and
/// `entropy` with an entropy bonus (`grad_entropy` may be NULL); `advantages` holds
/// `advantages_len` values: one per row, or one per token (0 means one per row). Config: the
/// JSON of docs/c-api.md, or a named learner such as {"learner": "dapo"}.
#[no_mangle]
pub unsafe extern "C" fn nenyax_pg_loss(
    logp: *const f64,
    old_logp: *const f64,
    ref_logp: *const f64,
    entropy: *const f64,
    mask: *const u8,
    advantages: *const f64,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut f64,
    grad_entropy: *mut f64,
    stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        pg_loss_host(
            logp,
            old_logp,
            ref_logp,
            entropy,
            mask,
            advantages,
            advantages_len,
            rows,
            width,
            config_json,
            config_len,
            grad_logp,
            grad_entropy,
            stats,
        )
    })
}

/// nenyax_pg_loss in f32 (per-token maths in f64, results rounded once).
#[no_mangle]
pub unsafe extern "C" fn nenyax_pg_loss_f32(
    logp: *const f32,
    old_logp: *const f32,
    ref_logp: *const f32,
    entropy: *const f32,
    mask: *const u8,
    advantages: *const f32,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut f32,
    grad_entropy: *mut f32,
    stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        pg_loss_host(
            logp,
            old_logp,
            ref_logp,
            entropy,
            mask,
            advantages,
            advantages_len,
            rows,
            width,
            config_json,
            config_len,
            grad_logp,
            grad_entropy,
            stats,
        )
    })
}

/// REINFORCE++ token advantages (`rows` x `width`, row-major) into `advantages_out`, and the
/// discounted returns into `returns_out` (may be NULL). `group_ids` (may be NULL) selects the
/// baseline variant: the group mean is subtracted before whitening.
#[no_mangle]
pub unsafe extern "C" fn nenyax_reinforce_pp(
    rewards: *const f64,
    group_ids: *const i64,
    mask: *const u8,
    rows: usize,
    width: usize,
    gamma: f64,
    advantages_out: *mut f64,
    returns_out: *mut f64,
) -> *mut nenyax_error_t {
    boundary(|| {
        let n = tokens_of(rows, width)?;
        let rewards = slice_arg(rewards, rows, "rewards")?;
        let ids = if group_ids.is_null() {
            None
        } else {
            Some(slice_arg(group_ids, rows, "group_ids")?)
        };
        let mask = slice_arg(mask, n, "mask")?;
        if advantages_out.is_null() {
            return Err(invalid("advantages_out is NULL".into()));
        }
        let (adv, ret) = nenyax_core::learn::reinforce_pp(rewards, mask, width, gamma, ids)?;
        std::slice::from_raw_parts_mut(advantages_out, n).copy_from_slice(&adv);
        if !returns_out.is_null() {
            std::slice::from_raw_parts_mut(returns_out, n).copy_from_slice(&ret);
        }
        Ok(())
    })
}

/// DPO (sigmoid) on each group's best-vs-worst pair: the mean loss in `loss`, dL/dlogp in
/// `grad_logp` (rows x width, 0 for rows in no pair) and the number of pairs in `pairs` (may be
/// NULL). Sequence log-probs are sums over valid tokens.
#[no_mangle]
pub unsafe extern "C" fn nenyax_dpo_loss(
    rewards: *const f64,
    group_ids: *const i64,
    logp: *const f64,
    ref_logp: *const f64,
    mask: *const u8,
    rows: usize,
    width: usize,
    beta: f64,
    loss: *mut f64,
    grad_logp: *mut f64,
    pairs: *mut usize,
) -> *mut nenyax_error_t {
    boundary(|| {
        let n = tokens_of(rows, width)?;
        let out = nenyax_core::learn::dpo_loss(
            slice_arg(rewards, rows, "rewards")?,
            slice_arg(group_ids, rows, "group_ids")?,
            slice_arg(logp, n, "logp")?,
            slice_arg(ref_logp, n, "ref_logp")?,
            slice_arg(mask, n, "mask")?,
            width,
            beta,
        )?;
        if grad_logp.is_null() {
            return Err(invalid("grad_logp is NULL".into()));
        }
        std::slice::from_raw_parts_mut(grad_logp, n).copy_from_slice(&out.grad_logp);
        if let Some(l) = loss.as_mut() {
            *l = out.loss;
        }
        if let Some(p) = pairs.as_mut() {
            *p = out.pairs.len();
        }
        Ok(())
    })
}

/// How many f64 values the CUDA entry points write to `stats_device`: loss, loss_pg, kl,
/// entropy, clip_fraction, approx_kl, mean_ratio, tokens, rows, bad-input flags.
pub const NENYAX_PG_STATS_LEN: usize = 10;
const _: () = assert!(NENYAX_PG_STATS_LEN == nenyax_core::kernels::STATS_LEN);

/// Bit in the last stats value: `logp` held a NaN on a valid token.
pub const NENYAX_PG_BAD_LOGP: u32 = 1;
/// Bit in the last stats value: `old_logp` held a NaN on a valid token.
pub const NENYAX_PG_BAD_OLD_LOGP: u32 = 2;
/// Bit in the last stats value: `ref_logp` held a NaN on a valid token.
pub const NENYAX_PG_BAD_REF_LOGP: u32 = 4;
/// Bit in the last stats value: `entropy` held a NaN on a valid token.
pub const NENYAX_PG_BAD_ENTROPY: u32 = 8;
/// Bit in the last stats value: an advantage was NaN.
pub const NENYAX_PG_BAD_ADVANTAGES: u32 = 16;
const _: () = assert!(
    NENYAX_PG_BAD_LOGP == nenyax_core::kernels::BAD_LOGP
        && NENYAX_PG_BAD_OLD_LOGP == nenyax_core::kernels::BAD_OLD_LOGP
        && NENYAX_PG_BAD_REF_LOGP == nenyax_core::kernels::BAD_REF_LOGP
        && NENYAX_PG_BAD_ENTROPY == nenyax_core::kernels::BAD_ENTROPY
        && NENYAX_PG_BAD_ADVANTAGES == nenyax_core::kernels::BAD_ADVANTAGES
);

/// The GPU the CUDA entry points use, as JSON {"ordinal", "name", "compute_capability": [major,
/// minor]}; NENYAX_STATUS_CUDA_UNAVAILABLE says why there is none (no driver, no device, no
/// NVRTC). The first call loads the driver and compiles the kernels.
#[no_mangle]
pub unsafe extern "C" fn nenyax_cuda_device(out: *mut nenyax_string_t) -> *mut nenyax_error_t {
    boundary(|| {
        let d = nenyax_core::kernels::device()?;
        let v = serde_json::json!({
            "ordinal": d.ordinal,
            "name": d.name,
            "compute_capability": [d.compute_capability.0, d.compute_capability.1],
        });
        out_param(out, to_string_out(v.to_string()))
    })
}

/// The shared body of the device-pointer loss entry points.
#[allow(clippy::too_many_arguments)]
unsafe fn pg_loss_cuda<F: nenyax_core::kernels::DeviceReal>(
    logp: *const F,
    old_logp: *const F,
    ref_logp: *const F,
    entropy: *const F,
    mask: *const u8,
    advantages: *const F,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut F,
    grad_entropy: *mut F,
    stats_device: *mut f64,
    stream: *mut c_void,
) -> FfiResult<()> {
    let n = tokens_of(rows, width)?;
    if advantages_len != 0 && advantages_len != rows && advantages_len != n {
        return Err(invalid(format!(
            "advantages_len is {advantages_len}; give 0 or {rows} (one per row) or {n} (one per token)"
        )));
    }
    let cfg = pg_config_arg(config_json, config_len)?;
    let batch = nenyax_core::kernels::DeviceBatch {
        logp: logp as u64,
        old_logp: old_logp as u64,
        ref_logp: ref_logp as u64,
        entropy: entropy as u64,
        mask: mask as u64,
        advantages: advantages as u64,
        advantages_per_token: advantages_len == n && n != rows,
        rows,
        width,
    };
    let out = nenyax_core::kernels::DeviceOutput {
        grad_logp: grad_logp as u64,
        grad_entropy: grad_entropy as u64,
        stats: stats_device as u64,
    };
    nenyax_core::kernels::pg_loss_device::<F>(&batch, &cfg, &out, stream)?;
    Ok(())
}

/// The fused loss on the GPU over device pointers (f32, the primary context of the device),
/// queued on `stream` (a CUstream / cudaStream_t; NULL: the default stream), without
/// synchronising. `stats_device` receives NENYAX_PG_STATS_LEN doubles in device memory; a NaN
/// on a valid token sets a bit in its last value (NENYAX_PG_BAD_*) and an all-masked batch
/// leaves its token count at 0. Same arguments and config as nenyax_pg_loss.
#[no_mangle]
pub unsafe extern "C" fn nenyax_pg_loss_cuda_f32(
    logp: *const f32,
    old_logp: *const f32,
    ref_logp: *const f32,
    entropy: *const f32,
    mask: *const u8,
    advantages: *const f32,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut f32,
    grad_entropy: *mut f32,
    stats_device: *mut f64,
    stream: *mut c_void,
) -> *mut nenyax_error_t {
    boundary(|| {
        pg_loss_cuda(
            logp,
            old_logp,
            ref_logp,
            entropy,
            mask,
            advantages,
            advantages_len,
            rows,
            width,
            config_json,
            config_len,
            grad_logp,
            grad_entropy,
            stats_device,
            stream,
        )
    })
}

/// nenyax_pg_loss_cuda_f32 over f64 device arrays.
#[no_mangle]
pub unsafe extern "C" fn nenyax_pg_loss_cuda_f64(
    logp: *const f64,
    old_logp: *const f64,
    ref_logp: *const f64,
    entropy: *const f64,
    mask: *const u8,
    advantages: *const f64,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut f64,
    grad_entropy: *mut f64,
    stats_device: *mut f64,
    stream: *mut c_void,
) -> *mut nenyax_error_t {
    boundary(|| {
        pg_loss_cuda(
            logp,
            old_logp,
            ref_logp,
            entropy,
            mask,
            advantages,
            advantages_len,
            rows,
            width,
            config_json,
            config_len,
            grad_logp,
            grad_entropy,
            stats_device,
            stream,
        )
    })
}

/// The fused GPU loss from host memory (f32): copies in, runs, copies back and synchronises,
/// with the same arguments, results and errors as nenyax_pg_loss_f32.
#[no_mangle]
pub unsafe extern "C" fn nenyax_pg_loss_cuda_host_f32(
    logp: *const f32,
    old_logp: *const f32,
    ref_logp: *const f32,
    entropy: *const f32,
    mask: *const u8,
    advantages: *const f32,
    advantages_len: usize,
    rows: usize,
    width: usize,
    config_json: *const c_char,
    config_len: usize,
    grad_logp: *mut f32,
    grad_entropy: *mut f32,
    stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let n = tokens_of(rows, width)?;
        let cfg = pg_config_arg(config_json, config_len)?;
        let batch = host_batch(
            logp,
            old_logp,
            ref_logp,
            entropy,
            mask,
            advantages,
            advantages_len,
            rows,
            width,
        )?;
        if grad_logp.is_null() {
            return Err(invalid("grad_logp is NULL".into()));
        }
        let out = nenyax_core::kernels::pg_loss_host(&batch, &cfg)?;
        std::slice::from_raw_parts_mut(grad_logp, n).copy_from_slice(&out.grad_logp);
        if let (false, Some(g)) = (grad_entropy.is_null(), &out.grad_entropy) {
            std::slice::from_raw_parts_mut(grad_entropy, n).copy_from_slice(g);
        }
        if let Some(s) = stats.as_mut() {
            *s = out.stats.into();
        }
        Ok(())
    })
}

/// The full JSON of a named learner (e.g. "grpo", "dapo", "gspo"; see docs/c-api.md) with any
/// overrides applied, so a trainer can log exactly which knobs it ran. Free with nenyax_string_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_learner_json(
    config_json: *const c_char,
    config_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let v = json_object_arg(config_json, config_len, "config_json")?;
        let learner = nenyax_core::learn::Learner::from_json(&v)?;
        out_param(out, to_string_out(learner.to_json().to_string()))
    })
}

// ---------------------------------------------------------------------------------------------
// batches

/// A runner with its own pool of `threads` workers (0: one per core, or NENYAX_NUM_THREADS;
/// at most NENYAX_MAX_THREADS).
#[no_mangle]
pub unsafe extern "C" fn nenyax_runner_new(
    threads: usize,
    out: *mut *mut nenyax_runner_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        if threads > NENYAX_MAX_THREADS {
            return Err(invalid(format!(
                "threads = {threads} is more than this library allows ({NENYAX_MAX_THREADS}); use 0 for one per core"
            )));
        }
        let runner = Runner::new(threads)?.progress(false);
        out_param(out, boxed(nenyax_runner_t { runner }))
    })
}

/// Number of worker threads (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn nenyax_runner_threads(runner: *const nenyax_runner_t) -> usize {
    let mut n = 0;
    quietly(|| {
        n = runner.as_ref().map_or(0, |r| r.runner.threads());
        Ok(())
    });
    n
}

/// Free a runner; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_runner_free(runner: *mut nenyax_runner_t) {
    quietly(|| {
        if !runner.is_null() {
            drop(Box::from_raw(runner));
        }
        Ok(())
    });
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RunJson {
    #[serde(default)]
    n: Option<usize>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    max_steps: Option<usize>,
    #[serde(default)]
    tasks: Option<Vec<TaskRef>>,
}

/// Run a batch in parallel. Options (JSON, may be NULL): {"n": 10, "seed": 0, "max_steps": int,
/// "tasks": [TaskRef]} (default: the environment's tasks, cycled). With `sink`, each
/// trajectory is passed to it in job order on the calling thread (a non-zero return stops the
/// batch with NENYAX_STATUS_CALLBACK) and `out` may be NULL; without, `out` gets a JSON array.
#[no_mangle]
pub unsafe extern "C" fn nenyax_runner_run(
    runner: *const nenyax_runner_t,
    env: *const nenyax_env_t,
    policy: *const nenyax_policy_t,
    options_json: *const c_char,
    options_len: usize,
    sink: nenyax_trajectory_fn,
    sink_user_data: *mut c_void,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let runner = runner
            .as_ref()
            .ok_or_else(|| invalid("runner is NULL".into()))?;
        let env = env_ref(env)?;
        let policy = policy_ref(policy)?;
        if sink.is_none() && out.is_null() {
            return Err(invalid("give a sink callback or an out string".into()));
        }
        let o: RunJson = options(options_json, options_len, "options_json")?;
        let n = o.n.unwrap_or(10);
        let seed = o.seed.unwrap_or(0);
        let jobs = match o.tasks {
            Some(tasks) if !tasks.is_empty() => {
                let tasks: Vec<Arc<TaskRef>> = tasks.into_iter().map(Arc::new).collect();
                (0..n)
                    .map(|i| nenyax_core::Job {
                        task: Some(tasks[i % tasks.len()].clone()),
                        seed: Some(seed + i as i64),
                    })
                    .collect()
            }
            _ => nenyax_core::plan(env.env.as_ref(), n, seed)?,
        };
        let routes: Vec<Arc<Route>> = env.routes.iter().chain(&policy.routes).cloned().collect();
        let bound = bind(&routes);
        let mut collected = String::from("[");
        let mut stopped = None;
        runner
            .runner
            .run_serving(
                &env.env,
                &policy.policy,
                jobs,
                o.max_steps,
                Some(bound.queue()),
                |i, traj| {
                    match sink {
                        Some(f) => {
                            let json = callbacks::CText::new(traj.to_json());
                            let rc = f(sink_user_data, i, json.ptr(), json.len());
                            if rc != 0 {
                                stopped = Some(format!(
                            "the trajectory sink returned {rc} at job {i}; the batch was stopped"
                        ));
                                return Err(nenyax_core::Error::Config(
                                    "stopped by the sink".into(),
                                ));
                            }
                        }
                        None => {
                            if i > 0 {
                                collected.push(',');
                            }
                            collected.push_str(&traj.to_json());
                        }
                    }
                    Ok(())
                },
            )
            .map_err(|e| match stopped.take() {
                Some(msg) => new_error(nenyax_status_t::NENYAX_STATUS_CALLBACK, msg),
                None => e.into(),
            })?;
        collected.push(']');
        if sink.is_none() {
            out_param(out, to_string_out(collected))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_the_boundary_becomes_a_panic_error() {
        let e = boundary(|| panic!("simulated library bug"));
        assert!(!e.is_null());
        unsafe {
            assert_eq!(nenyax_error_code(e), nenyax_status_t::NENYAX_STATUS_PANIC);
            let mut len = 0;
            let msg = std::ffi::CStr::from_ptr(nenyax_error_message(e, &mut len));
            let msg = msg.to_str().unwrap();
            assert_eq!(len, msg.len());
            assert!(msg.contains("simulated library bug"), "{msg}");
            nenyax_error_free(e);
        }
        // Functions that cannot return an error swallow it instead of unwinding.
        quietly(|| panic!("in a free function"));
    }

    /// Every exported function runs inside the panic boundary, except the few whose bodies
    /// cannot panic (they only read static data or a field).
    #[test]
    fn every_export_runs_inside_the_panic_boundary() {
        let allowed = [
            "nenyax_version",
            "nenyax_version_number",
            "nenyax_protocol_version",
            "nenyax_error_code",
            "nenyax_error_message",
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        for file in ["lib.rs", "error.rs", "callbacks.rs"] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for chunk in text.split("#[no_mangle]").skip(1) {
                let name = chunk
                    .split("fn ")
                    .nth(1)
                    .and_then(|s| s.split('(').next())
                    .unwrap()
                    .trim()
                    .to_string();
                // The body runs to the next item; good enough for this file's layout.
                let body = chunk.split("\n}\n").next().unwrap();
                if !allowed.contains(&name.as_str()) {
                    // env_policy() is a helper whose whole body is a boundary().
                    assert!(
                        ["boundary(", "quietly(", "env_policy("]
                            .iter()
                            .any(|w| body.contains(w)),
                        "{file}: {name} does not run inside boundary()/quietly()"
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 34, "found only {checked} exports");
    }
}
