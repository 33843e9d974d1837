//! __NAME__: a Nenyax learner plugin in Rust.
//!
//! It plays builtin:guess (find a secret number from higher/lower feedback) with a tabular
//! softmax policy: one row of preferences per state (the feasible range and the guesses left),
//! one column per guess in that range. `update` is REINFORCE with each group's mean score as
//! the baseline. Nenyax loads this library (the plugins config, `kind = "learner"`), calls
//! `nenyax_plugin_entry`, and picks it with `--learner __NAME__` or `[learner] use = "__NAME__"`.
//! The library never links libnenyax: the types below mirror include/nenyax.h (plugin ABI
//! version 1, learner plugin vtable version 1), and Nenyax refuses other versions.
//!
//! The tabular policy is a placeholder: replace `act` and `update` with your own learner.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

/// NENYAX_PLUGIN_ABI_VERSION of the header this plugin was written against.
const PLUGIN_ABI_VERSION: u32 = 1;
/// NENYAX_PLUGIN_KIND_LEARNER.
const KIND_LEARNER: u32 = 4;
/// NENYAX_LEARNER_PLUGIN_VTABLE_VERSION.
const LEARNER_VTABLE_VERSION: u32 = 1;
/// The REINFORCE step on the preferences.
const LEARNING_RATE: f64 = 1.0;

/// nenyax_plugin_out_t: where a callback writes its JSON result or error text.
#[repr(C)]
pub struct Out {
    ctx: *mut c_void,
    write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

type Call = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const Out) -> i32;
type Bare = unsafe extern "C" fn(*mut c_void, *const Out) -> i32;

/// nenyax_learner_plugin_vtable_t.
#[repr(C)]
pub struct LearnerVtable {
    version: u32,
    act: Option<Call>,
    chat: Option<Call>,
    update: Option<Call>,
    snapshot: Option<Bare>,
    restore: Option<Bare>,
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

static VTABLE: LearnerVtable = LearnerVtable {
    version: LEARNER_VTABLE_VERSION,
    act: Some(act),
    chat: None,
    update: Some(update),
    snapshot: Some(snapshot),
    restore: Some(restore),
    drop: None,
};

static PLUGINS: Plugins = Plugins([Plugin {
    abi_version: PLUGIN_ABI_VERSION,
    kind: KIND_LEARNER,
    kind_version: LEARNER_VTABLE_VERSION,
    flags: 0, // the host makes one call at a time
    name: c"__NAME__".as_ptr(),
    version: c"0.1.0".as_ptr(),
    vtable: &VTABLE as *const LearnerVtable as *const c_void,
    user_data: std::ptr::null_mut(),
}]);

/// State key -> preferences of the guesses low..=high.
type Table = HashMap<String, Vec<f64>>;

/// The live table and the snapshot.
static STATE: Mutex<(Option<Table>, Option<Table>)> = Mutex::new((None, None));

/// builtin:guess's observation: its key, and the feasible range.
fn state(obs: &Value) -> Result<(String, i64, i64), String> {
    let d = &obs["data"];
    let (Some(low), Some(high)) = (d["low"].as_i64(), d["high"].as_i64()) else {
        return Err(format!("the observation is not builtin:guess's {{low, high}}: {d}"));
    };
    let left = d["guesses_left"].as_i64().unwrap_or(0);
    let high = high.max(low);
    Ok((format!("{low}-{high}-{left}"), low, high))
}

fn row<'t>(t: &'t mut Table, key: &str, width: usize) -> &'t mut Vec<f64> {
    let r = t.entry(key.to_string()).or_default();
    if r.len() != width {
        *r = vec![0.0; width];
    }
    r
}

fn softmax(r: &[f64]) -> Vec<f64> {
    let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = r.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

/// A uniform draw in [0, 1) from the call's own seed, so runs reproduce whatever the threads.
fn uniform(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

fn act_json(req: &Value) -> Result<Value, String> {
    let (key, low, high) = state(&req["observation"])?;
    let mut st = STATE.lock().map_err(|_| "poisoned".to_string())?;
    let table = st.0.get_or_insert_with(Table::new);
    let p = softmax(row(table, &key, (high - low + 1) as usize));
    let u = uniform(req["seed"].as_u64().unwrap_or(0));
    let (mut acc, mut pick) = (0.0, p.len() - 1);
    for (i, x) in p.iter().enumerate() {
        acc += x;
        if u < acc {
            pick = i;
            break;
        }
    }
    Ok(json!(low + pick as i64))
}

fn update_json(groups: &Value) -> Result<Value, String> {
    let groups = groups
        .as_array()
        .ok_or("update: the groups are not a JSON array of {trajectories}")?;
    let mut st = STATE.lock().map_err(|_| "poisoned".to_string())?;
    let table = st.0.get_or_insert_with(Table::new);
    let (mut steps, mut used, mut abs_adv) = (0usize, 0usize, 0.0);
    for (gi, g) in groups.iter().enumerate() {
        let trajs = g["trajectories"]
            .as_array()
            .ok_or(format!("update: group {gi} has no trajectories"))?;
        let judged: Vec<&Value> = trajs
            .iter()
            .filter(|t| t["error"].is_null() && t["judgment"]["score"].is_number())
            .collect();
        if judged.is_empty() {
            continue;
        }
        let score = |t: &Value| t["judgment"]["score"].as_f64().unwrap_or(0.0);
        let mean = judged.iter().map(|t| score(t)).sum::<f64>() / judged.len() as f64;
        for t in judged {
            let adv = score(t) - mean;
            used += 1;
            abs_adv += adv.abs();
            let mut before = t["initial_observation"].clone();
            if before.is_null() {
                return Err(format!("update: group {gi} has a trajectory without initial_observation"));
            }
            for s in t["steps"].as_array().into_iter().flatten() {
                let (key, low, high) = state(&before)?;
                let a = s["action"]
                    .as_i64()
                    .ok_or(format!("update: the action {} is not a whole number", s["action"]))?;
                let r = row(table, &key, (high - low + 1) as usize);
                if (low..=high).contains(&a) && adv != 0.0 {
                    let p = softmax(r);
                    for (i, x) in r.iter_mut().enumerate() {
                        let ind = if i as i64 == a - low { 1.0 } else { 0.0 };
                        *x += LEARNING_RATE * adv * (ind - p[i]);
                    }
                }
                steps += 1;
                before = s["observation"].clone();
            }
        }
    }
    let mean_adv = if used > 0 { abs_adv / used as f64 } else { 0.0 };
    Ok(json!({
        "metrics": {"steps": steps, "trajectories": used, "mean_abs_advantage": mean_adv,
                    "states": table.len()},
        "skipped": steps == 0 || mean_adv == 0.0,
    }))
}

unsafe fn write(out: *const Out, text: &str) {
    if let Some(out) = out.as_ref() {
        if let Some(w) = out.write {
            w(out.ctx, text.as_ptr().cast(), text.len());
        }
    }
}

/// Parse the input, run `f`, write its JSON or its error; no panic unwinds into the host.
unsafe fn call(
    input: *const c_char,
    len: usize,
    out: *const Out,
    f: fn(&Value) -> Result<Value, String>,
) -> i32 {
    let bytes = if input.is_null() {
        &[][..]
    } else {
        std::slice::from_raw_parts(input.cast::<u8>(), len)
    };
    let result = std::panic::catch_unwind(|| {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("__NAME__: not JSON: {e}"))?;
        f(&v)
    })
    .unwrap_or_else(|_| Err("__NAME__ panicked".into()));
    match result {
        Ok(v) => {
            write(out, &v.to_string());
            0
        }
        Err(msg) => {
            write(out, &format!("__NAME__: {msg}"));
            1
        }
    }
}

unsafe extern "C" fn act(_: *mut c_void, req: *const c_char, len: usize, out: *const Out) -> i32 {
    call(req, len, out, act_json)
}

unsafe extern "C" fn update(_: *mut c_void, g: *const c_char, len: usize, out: *const Out) -> i32 {
    call(g, len, out, update_json)
}

unsafe extern "C" fn snapshot(_: *mut c_void, out: *const Out) -> i32 {
    let Ok(mut st) = STATE.lock() else { return 1 };
    st.1 = Some(st.0.clone().unwrap_or_default());
    write(out, "{}");
    0
}

unsafe extern "C" fn restore(_: *mut c_void, out: *const Out) -> i32 {
    let Ok(mut st) = STATE.lock() else { return 1 };
    match st.1.clone() {
        Some(saved) => {
            st.0 = Some(saved);
            0
        }
        None => {
            write(out, "__NAME__: restore before any snapshot");
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
