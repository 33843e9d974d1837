//! __NAME__: a Nenyax telemetry sink plugin in Rust.
//!
//! Nenyax loads this shared library (listed in the plugins config with `kind = "telemetry"`),
//! calls `nenyax_plugin_entry` for its descriptors, and, for a run started with
//! `--telemetry __NAME__`, calls `start`, `episode` (each finished episode's Trajectory JSON),
//! `metrics`, `artifact`, `flush` and `finish` on its telemetry exporter thread. The library
//! never links libnenyax: the types below mirror include/nenyax.h (plugin ABI version 1,
//! telemetry vtable version 1), and Nenyax refuses a library whose versions differ from its own.
//!
//! Writing one JSON line per event to the file `NENYAX_SINK_FILE` names is a placeholder: send
//! the events to your service in the `on_*` functions and keep the rest.

use serde_json::{json, Value};
use std::ffi::{c_char, c_void, CStr};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Mutex;

/// NENYAX_PLUGIN_ABI_VERSION of the header this plugin was written against.
const PLUGIN_ABI_VERSION: u32 = 1;
/// NENYAX_PLUGIN_KIND_TELEMETRY.
const KIND_TELEMETRY: u32 = 7;
/// NENYAX_TELEMETRY_VTABLE_VERSION.
const TELEMETRY_VTABLE_VERSION: u32 = 1;

/// nenyax_plugin_out_t: where a callback writes its error text.
#[repr(C)]
pub struct Out {
    ctx: *mut c_void,
    write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

type JsonFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const Out) -> i32;

/// nenyax_telemetry_vtable_t.
#[repr(C)]
pub struct TelemetryVtable {
    version: u32,
    start: Option<JsonFn>,
    episode: Option<JsonFn>,
    metrics:
        Option<unsafe extern "C" fn(*mut c_void, u64, *const c_char, usize, *const Out) -> i32>,
    artifact: Option<
        unsafe extern "C" fn(*mut c_void, *const c_char, *const u8, usize, *const Out) -> i32,
    >,
    flush: Option<unsafe extern "C" fn(*mut c_void, *const Out) -> i32>,
    finish: Option<unsafe extern "C" fn(*mut c_void, i32, *const Out) -> i32>,
    drop: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// nenyax_plugin_t: one plugin this library provides.
#[repr(C)]
pub struct Plugin {
    abi_version: u32,
    kind: u32,
    kind_version: u32,
    flags: u32,
    name: *const c_char,
    version: *const c_char,
    vtable: *const c_void,
    user_data: *mut c_void,
}

/// The descriptors are immutable statics, so sharing them between threads is sound.
struct Plugins([Plugin; 1]);
unsafe impl Sync for Plugins {}

static VTABLE: TelemetryVtable = TelemetryVtable {
    version: TELEMETRY_VTABLE_VERSION,
    start: Some(start),
    episode: Some(episode),
    metrics: Some(metrics),
    artifact: Some(artifact),
    flush: Some(flush),
    finish: Some(finish),
    drop: None,
};

static PLUGINS: Plugins = Plugins([Plugin {
    abi_version: PLUGIN_ABI_VERSION,
    kind: KIND_TELEMETRY,
    kind_version: TELEMETRY_VTABLE_VERSION,
    // The state below has its own lock, so calls may come from several runs at once.
    flags: 1,
    name: c"__NAME__".as_ptr(),
    version: c"0.1.0".as_ptr(),
    vtable: &VTABLE as *const TelemetryVtable as *const c_void,
    user_data: std::ptr::null_mut(),
}]);

/// What the sink holds between calls.
struct State {
    file: Option<File>,
    episodes: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    file: None,
    episodes: 0,
});

/// Append one JSON line to the file `NENYAX_SINK_FILE` names (opened on first use).
fn emit(state: &mut State, line: Value) -> Result<(), String> {
    if state.file.is_none() {
        let path = std::env::var("NENYAX_SINK_FILE")
            .map_err(|_| "set NENYAX_SINK_FILE to the file __NAME__ appends to".to_string())?;
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("cannot open {path}: {e}"))?;
        state.file = Some(f);
    }
    let f = state.file.as_mut().expect("opened above");
    writeln!(f, "{line}").map_err(|e| format!("cannot write NENYAX_SINK_FILE: {e}"))
}

fn on_start(state: &mut State, run: Value) -> Result<(), String> {
    state.episodes = 0;
    emit(state, json!({"event": "start", "run": run}))
}

fn on_episode(state: &mut State, traj: Value) -> Result<(), String> {
    state.episodes += 1;
    let calls = traj["model_calls"].as_array().map_or(0, Vec::len);
    emit(
        state,
        json!({"event": "episode", "env_id": traj["env_id"], "seed": traj["seed"],
               "score": traj["judgment"]["score"], "model_calls": calls}),
    )
}

fn on_metrics(state: &mut State, step: u64, values: Value) -> Result<(), String> {
    emit(
        state,
        json!({"event": "metrics", "step": step, "values": values}),
    )
}

fn on_finish(state: &mut State, ok: bool) -> Result<(), String> {
    let line = json!({"event": "finish", "ok": ok, "episodes": state.episodes});
    emit(state, line)?;
    // Closed, so a reader (or the next run) sees everything.
    state.file = None;
    Ok(())
}

unsafe fn write(out: *const Out, text: &str) {
    if let Some(out) = out.as_ref() {
        if let Some(w) = out.write {
            w(out.ctx, text.as_ptr().cast(), text.len());
        }
    }
}

unsafe fn json_arg(ptr: *const c_char, len: usize) -> Result<Value, String> {
    if ptr.is_null() {
        return Err("__NAME__ got a NULL argument".into());
    }
    serde_json::from_slice(std::slice::from_raw_parts(ptr.cast::<u8>(), len))
        .map_err(|e| format!("__NAME__: the argument is not JSON: {e}"))
}

/// Run `f` on the state; 0, or 1 with the message in `out`. No panic may unwind into the host.
unsafe fn call(out: *const Out, f: impl FnOnce(&mut State) -> Result<(), String>) -> i32 {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }))
    .unwrap_or_else(|_| Err("__NAME__ panicked".into()));
    match result {
        Ok(()) => 0,
        Err(msg) => {
            write(out, &msg);
            1
        }
    }
}

unsafe extern "C" fn start(_: *mut c_void, run: *const c_char, len: usize, out: *const Out) -> i32 {
    let run = json_arg(run, len);
    call(out, |s| on_start(s, run?))
}

unsafe extern "C" fn episode(_: *mut c_void, t: *const c_char, len: usize, out: *const Out) -> i32 {
    let traj = json_arg(t, len);
    call(out, |s| on_episode(s, traj?))
}

unsafe extern "C" fn metrics(
    _: *mut c_void,
    step: u64,
    values: *const c_char,
    len: usize,
    out: *const Out,
) -> i32 {
    let values = json_arg(values, len);
    call(out, |s| on_metrics(s, step, values?))
}

unsafe extern "C" fn artifact(
    _: *mut c_void,
    name: *const c_char,
    _bytes: *const u8,
    len: usize,
    out: *const Out,
) -> i32 {
    let name = if name.is_null() {
        String::new()
    } else {
        CStr::from_ptr(name).to_string_lossy().into_owned()
    };
    call(out, |s| {
        emit(s, json!({"event": "artifact", "name": name, "bytes": len}))
    })
}

unsafe extern "C" fn flush(_: *mut c_void, out: *const Out) -> i32 {
    call(out, |s| match s.file.as_mut() {
        Some(f) => f
            .flush()
            .map_err(|e| format!("cannot write NENYAX_SINK_FILE: {e}")),
        None => Ok(()),
    })
}

unsafe extern "C" fn finish(_: *mut c_void, ok: i32, out: *const Out) -> i32 {
    call(out, |s| on_finish(s, ok != 0))
}

/// The library's one entry point: the plugins it provides.
///
/// # Safety
/// `plugins` and `count` must be valid for writes (Nenyax passes its own locals).
#[no_mangle]
pub unsafe extern "C" fn nenyax_plugin_entry(
    _host_abi_version: u32,
    plugins: *mut *const Plugin,
    count: *mut usize,
) -> i32 {
    if plugins.is_null() || count.is_null() {
        return 1;
    }
    *plugins = PLUGINS.0.as_ptr();
    *count = PLUGINS.0.len();
    0
}
