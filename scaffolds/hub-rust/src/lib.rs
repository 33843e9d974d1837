//! __NAME__: a Nenyax environment hub plugin in Rust.
//!
//! Nenyax loads this shared library (listed in the plugins config with `kind = "hub"`), calls
//! `nenyax_plugin_entry` for its descriptors, and calls `search` for `nenyax search __NAME__`
//! and `fetch` for `nenyax fetch __NAME__`. The library never links libnenyax: the types below
//! mirror include/nenyax.h (plugin ABI version 1, hub vtable version 1), and Nenyax refuses a
//! library whose versions differ from its own.
//!
//! The static catalogue below is a placeholder: list your service's entries in `search` and
//! make one loadable in `fetch`, and keep the rest.

use serde_json::{json, Value};
use std::ffi::{c_char, c_void};

/// NENYAX_PLUGIN_ABI_VERSION of the header this plugin was written against.
const PLUGIN_ABI_VERSION: u32 = 1;
/// NENYAX_PLUGIN_KIND_HUB.
const KIND_HUB: u32 = 6;
/// NENYAX_HUB_VTABLE_VERSION.
const HUB_VTABLE_VERSION: u32 = 1;
/// NENYAX_PLUGIN_THREAD_SAFE: the catalogue is immutable, so calls may run at once.
const THREAD_SAFE: u32 = 1;

/// nenyax_plugin_out_t: where a callback writes its result or error text.
#[repr(C)]
pub struct Out {
    ctx: *mut c_void,
    write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

/// nenyax_hub_vtable_t.
#[repr(C)]
pub struct HubVtable {
    version: u32,
    search:
        Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize, usize, *const Out) -> i32>,
    fetch: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const Out) -> i32>,
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

static VTABLE: HubVtable = HubVtable {
    version: HUB_VTABLE_VERSION,
    search: Some(search),
    fetch: Some(fetch),
    drop: None,
};

static PLUGINS: Plugins = Plugins([Plugin {
    abi_version: PLUGIN_ABI_VERSION,
    kind: KIND_HUB,
    kind_version: HUB_VTABLE_VERSION,
    flags: THREAD_SAFE,
    name: c"__NAME__".as_ptr(),
    version: c"0.1.0".as_ptr(),
    vtable: &VTABLE as *const HubVtable as *const c_void,
    user_data: std::ptr::null_mut(),
}]);

/// One entry of the catalogue.
struct Entry {
    name: &'static str,
    uri: &'static str,
    description: &'static str,
}

const CATALOGUE: &[Entry] = &[
    Entry {
        name: "arithmetic-20",
        uri: "builtin:arithmetic?size=20",
        description: "twenty two-digit arithmetic problems",
    },
    Entry {
        name: "digits-max",
        uri: "builtin:digits?rules=max&length=8",
        description: "find the largest of eight digits",
    },
    Entry {
        name: "guess-1000",
        uri: "builtin:guess?high=1000",
        description: "guess a number from 1 to 1000 with hints",
    },
];

/// Up to `limit` entries whose name or description contains `query` (case-insensitive).
fn listings(query: &str, limit: usize) -> Value {
    let q = query.to_lowercase();
    let found: Vec<Value> = CATALOGUE
        .iter()
        .filter(|e| e.name.contains(&q) || e.description.to_lowercase().contains(&q))
        .take(limit)
        .map(|e| json!({"name": e.name, "uri": e.uri, "description": e.description}))
        .collect();
    Value::Array(found)
}

/// The URI to load `name` by, or why there is none.
fn uri_of(name: &str) -> Result<String, String> {
    match CATALOGUE.iter().find(|e| e.name == name) {
        Some(e) => Ok(e.uri.to_string()),
        None => Err(format!(
            "__NAME__ has no entry named `{name}`; `nenyax search __NAME__` lists them"
        )),
    }
}

unsafe fn write(out: *const Out, text: &str) {
    if let Some(out) = out.as_ref() {
        if let Some(w) = out.write {
            w(out.ctx, text.as_ptr().cast(), text.len());
        }
    }
}

unsafe fn text<'a>(ptr: *const c_char, len: usize) -> &'a str {
    if ptr.is_null() {
        return "";
    }
    std::str::from_utf8(std::slice::from_raw_parts(ptr.cast::<u8>(), len)).unwrap_or("")
}

/// Write `result` to `out`: 0 on success, 1 with the message on failure. No panic may unwind
/// into the host, so callers catch them.
unsafe fn reply(out: *const Out, result: std::thread::Result<Result<String, String>>) -> i32 {
    match result.unwrap_or_else(|_| Err("__NAME__ panicked".into())) {
        Ok(v) => {
            write(out, &v);
            0
        }
        Err(msg) => {
            write(out, &msg);
            1
        }
    }
}

/// The vtable's `search`.
unsafe extern "C" fn search(
    _user_data: *mut c_void,
    query: *const c_char,
    len: usize,
    limit: usize,
    out: *const Out,
) -> i32 {
    let query = text(query, len);
    reply(
        out,
        std::panic::catch_unwind(|| Ok(listings(query, limit).to_string())),
    )
}

/// The vtable's `fetch`.
unsafe extern "C" fn fetch(
    _user_data: *mut c_void,
    name: *const c_char,
    len: usize,
    out: *const Out,
) -> i32 {
    let name = text(name, len);
    reply(out, std::panic::catch_unwind(|| uri_of(name)))
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
