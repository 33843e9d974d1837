//! Policies: host callbacks and OpenAI-compatible endpoints.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use nenyax_core::policy::EndpointSpec;
use nenyax_core::Policy;

use crate::args::{boxed, check_flags, from_json_object, str_arg};
use crate::callbacks::{self, nenyax_free_fn, nenyax_policy_vtable_t, Route};
use crate::error::{boundary, invalid, nenyax_error_t, out_param, quietly, FfiResult};

/// A policy: an action or chat callback, an endpoint, or an environment's own policy.
pub struct nenyax_policy_t {
    pub(crate) policy: Policy,
    pub(crate) routes: Vec<Arc<Route>>,
    /// A chat model, per episode or not: a rollout- or task-mode environment calls it from the
    /// model server's threads, so a single rollout with it runs aside (see nenyax_env_rollout).
    pub(crate) chat: bool,
}

pub(crate) unsafe fn policy_ref<'a>(p: *const nenyax_policy_t) -> FfiResult<&'a nenyax_policy_t> {
    p.as_ref().ok_or_else(|| invalid("policy is NULL".into()))
}

/// A policy from C callbacks: exactly one of `vtable->act` (observation JSON -> action JSON),
/// `vtable->chat` (messages JSON -> reply text), and, with version NENYAX_POLICY_VTABLE_VERSION,
/// `vtable->act_episode` / `vtable->chat_episode` (the same, told their episode and recording
/// what they sampled). Without NENYAX_THREAD_SAFE in `flags` the callback runs only on threads
/// that called into the library (see the conventions).
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
        let host = callbacks::policy(vtable, owner, flags)?;
        out_param(
            out,
            boxed(nenyax_policy_t {
                policy: host.policy,
                routes: vec![host.route],
                chat: host.chat,
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
                chat: true,
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
