//! The OpenEnv server over a step-mode environment.

use serde_json::Value;
use std::ffi::c_char;
use std::sync::Arc;

use crate::args::{boxed, need_out, nenyax_string_t, opt_str_arg, to_string_out};
use crate::callbacks::Route;
use crate::env::{env_ref, nenyax_env_t};
use crate::error::{boundary, invalid, json_err, nenyax_error_t, out_param, quietly};

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
/// "ping_interval_s": 20, "head_timeout_s": 10}. Environment callbacks are called from the
/// server's threads: a callback-defined environment needs NENYAX_THREAD_SAFE.
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
