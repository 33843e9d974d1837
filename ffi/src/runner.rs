//! Batches: a runner's pool of workers, and batches of rollouts on it.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use nenyax_core::runner::RunOptions;
use nenyax_core::Runner;

use serde_json::Value;

use crate::args::{boxed, nenyax_string_t, options, to_string_out};
use crate::callbacks::{self, bind, nenyax_trajectory_fn, Route};
use crate::env::{env_ref, nenyax_env_t};
use crate::error::{
    boundary, invalid, json_err, nenyax_error_t, nenyax_status_t, new_error, out_param, quietly,
};
use crate::policy::{nenyax_policy_t, policy_ref};
use crate::NENYAX_MAX_THREADS;

/// A thread pool for batches of rollouts.
pub struct nenyax_runner_t {
    runner: Runner,
}

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

/// Run a batch in parallel. Options (JSON, may be NULL): {"n": 10, "seed": 0, "max_steps": int,
/// "tasks": [TaskRef], "format": "array" | "jsonl", "telemetry": [{"name": "otel", ...}]}
/// (default: the environment's tasks, cycled; telemetry: none, see docs/telemetry.md).
/// With `sink`, each trajectory is passed to it in job order on the calling thread (a non-zero
/// return stops the batch with NENYAX_STATUS_CALLBACK) and `out` may be NULL; without, `out`
/// gets a JSON array, or with "format": "jsonl" one trajectory per line in job order, each line
/// ended by '\n' (compact JSON has no raw newline, so a host splits it without parsing).
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
        let mut o: Value = options(options_json, options_len, "options_json")?;
        let jsonl = match o.as_object_mut().and_then(|m| m.remove("format")) {
            None => false,
            Some(f) if f == "array" => false,
            Some(f) if f == "jsonl" => true,
            Some(f) => {
                return Err(invalid(format!(
                    "options_json: \"format\" is \"array\" or \"jsonl\", not {f}"
                )))
            }
        };
        let run = nenyax_core::telemetry::RunInfo {
            kind: "run".into(),
            name: env.env.id().to_string(),
            params:
                serde_json::json!({"uri": env.env.id(), "n": o.get("n"), "seed": o.get("seed")})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
        };
        let telemetry = nenyax_core::telemetry::take_from_options(&mut o, run)?;
        let summary = serde_json::json!({"uri": env.env.id(), "n": o.get("n"), "seed": o.get("seed"),
            "threads": runner.runner.threads()});
        let mut batch = telemetry
            .clone()
            .map(nenyax_core::telemetry::BatchMetrics::new);
        let o: RunOptions = if o.is_null() {
            RunOptions::default()
        } else {
            serde_json::from_value(o).map_err(|e| json_err("options_json", &e))?
        };
        let jobs = o.jobs(env.env.as_ref())?;
        let routes: Vec<Arc<Route>> = env.routes.iter().chain(&policy.routes).cloned().collect();
        let bound = bind(&routes);
        let mut collected = String::from(if jsonl { "" } else { "[" });
        let mut stopped = None;
        let ran = runner
            .runner
            .run_serving(
                &env.env,
                &policy.policy,
                jobs,
                o.max_steps,
                Some(bound.queue()),
                |i, traj| {
                    if let Some(t) = &telemetry {
                        t.episode(&traj);
                    }
                    if let Some(b) = batch.as_mut() {
                        b.add(&traj);
                    }
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
                        None if jsonl => {
                            collected.push_str(&traj.to_json());
                            collected.push('\n');
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
            });
        if let Some(b) = batch {
            let mut summary = summary;
            summary["error"] = serde_json::json!(ran
                .as_ref()
                .err()
                .map(|e| e.message.to_string_lossy().into_owned()));
            b.finish(summary, ran.is_ok());
        }
        ran?;
        if !jsonl {
            collected.push(']');
        }
        if sink.is_none() {
            out_param(out, to_string_out(collected))?;
        }
        Ok(())
    })
}
