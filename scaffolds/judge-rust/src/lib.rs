//! __NAME__: a Nenyax judge plugin in Rust.
//!
//! Nenyax loads this shared library (listed in the plugins config with `kind = "judge"`),
//! calls `nenyax_plugin_entry` for its descriptors, and calls `judge` with each finished
//! episode's Trajectory as JSON; the verdict goes back as Judgment JSON through `out`. The
//! library never links libnenyax: the types below mirror include/nenyax.h (plugin ABI version
//! 1, judge vtable version 1), and Nenyax refuses a library whose versions differ from its own.
//!
//! The rule below (the last `<answer>` of the final reply equals the task's `answer`) is a
//! placeholder: replace `verdict` with your own judging and keep the rest.

use serde_json::{json, Value};
use std::ffi::{c_char, c_void};

/// NENYAX_PLUGIN_ABI_VERSION of the header this plugin was written against.
const PLUGIN_ABI_VERSION: u32 = 1;
/// NENYAX_PLUGIN_KIND_JUDGE.
const KIND_JUDGE: u32 = 3;
/// NENYAX_JUDGE_VTABLE_VERSION.
const JUDGE_VTABLE_VERSION: u32 = 1;
/// NENYAX_PLUGIN_THREAD_SAFE: `judge` may run on several rollout threads at once.
const THREAD_SAFE: u32 = 1;

/// nenyax_plugin_out_t: where a callback writes its JSON result or error text.
#[repr(C)]
pub struct Out {
    ctx: *mut c_void,
    write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

/// nenyax_judge_vtable_t.
#[repr(C)]
pub struct JudgeVtable {
    version: u32,
    judge: Option<
        unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const Out) -> i32,
    >,
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

static VTABLE: JudgeVtable = JudgeVtable {
    version: JUDGE_VTABLE_VERSION,
    judge: Some(judge),
    drop: None,
};

static PLUGINS: Plugins = Plugins([Plugin {
    abi_version: PLUGIN_ABI_VERSION,
    kind: KIND_JUDGE,
    kind_version: JUDGE_VTABLE_VERSION,
    flags: THREAD_SAFE,
    name: c"__NAME__".as_ptr(),
    version: c"0.1.0".as_ptr(),
    vtable: &VTABLE as *const JudgeVtable as *const c_void,
    user_data: std::ptr::null_mut(),
}]);

/// The verdict on one trajectory: Judgment JSON, or an error message.
fn verdict(traj: &Value) -> Result<Value, String> {
    let expected = match &traj["task"]["metadata"]["answer"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err("__NAME__ needs the task's metadata field `answer`".into()),
    };
    let got = answer(&final_text(traj));
    let hit = normalize(&got) == normalize(&expected);
    Ok(json!({
        "score": if hit { 1.0 } else { 0.0 },
        "passed": hit,
        "details": {"got": got, "expected": expected},
    }))
}

/// The last assistant message's text, else the last step's action.
fn final_text(traj: &Value) -> String {
    let from_messages = traj["messages"].as_array().and_then(|m| {
        m.iter()
            .rev()
            .find(|m| m["role"] == "assistant")
            .and_then(|m| m["content"].as_str().map(str::to_string))
    });
    from_messages.unwrap_or_else(|| {
        match traj["steps"].as_array().and_then(|s| s.last()).map(|s| &s["action"]) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        }
    })
}

/// The text inside the last `<answer></answer>`, else the whole text.
fn answer(text: &str) -> String {
    match text.rfind("<answer>") {
        Some(i) => {
            let rest = &text[i + "<answer>".len()..];
            rest[..rest.find("</answer>").unwrap_or(rest.len())].to_string()
        }
        None => text.to_string(),
    }
}

fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

unsafe fn write(out: *const Out, text: &str) {
    if let Some(out) = out.as_ref() {
        if let Some(w) = out.write {
            w(out.ctx, text.as_ptr().cast(), text.len());
        }
    }
}

/// The vtable's `judge`: no panic may unwind into the host, so it is caught here.
unsafe extern "C" fn judge(
    _user_data: *mut c_void,
    trajectory: *const c_char,
    len: usize,
    out: *const Out,
) -> i32 {
    let bytes = if trajectory.is_null() {
        &[][..]
    } else {
        std::slice::from_raw_parts(trajectory.cast::<u8>(), len)
    };
    let result = std::panic::catch_unwind(|| {
        let traj: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("__NAME__: the trajectory is not JSON: {e}"))?;
        verdict(&traj)
    })
    .unwrap_or_else(|_| Err("__NAME__ panicked".into()));
    match result {
        Ok(v) => {
            write(out, &v.to_string());
            0
        }
        Err(msg) => {
            write(out, &msg);
            1
        }
    }
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
