//! Recordings: an OpenAI base URL of the model server answered by a chat policy.

use std::sync::Arc;

use nenyax_core::Policy;

use crate::args::{boxed, json_out, need_out, nenyax_string_t, to_string_out};
use crate::callbacks::Route;
use crate::error::{boundary, invalid, nenyax_error_t, out_param, quietly, FfiResult};
use crate::policy::{nenyax_policy_t, policy_ref};

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

pub(crate) unsafe fn recording_ref<'a>(
    r: *const nenyax_recording_t,
) -> FfiResult<&'a nenyax_recording_t> {
    r.as_ref()
        .ok_or_else(|| invalid("recording is NULL".into()))
}
