//! Step-mode sessions: open, observe, act, judge, close.

use serde_json::Value;
use std::ffi::c_char;

use nenyax_core::{RolloutOptions, Session};

use crate::args::{boxed, json_out, need_out, nenyax_string_t, options, str_arg};
use crate::env::{env_ref, nenyax_env_t};
use crate::error::{boundary, invalid, json_err, nenyax_error_t, out_param, quietly};

/// A live step-mode episode. Not thread-safe: use from one thread at a time.
pub struct nenyax_session_t {
    session: Session,
}

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
        let o: RolloutOptions = options(options_json, options_len, "options_json")?;
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
