//! The C ABI of library plugins: the descriptor a shared library exports through
//! `nenyax_plugin_entry`, the per-kind vtables, and the fixed integer code of each kind.
//!
//! These are the definitions the loader reads. The header (include/nenyax.h) is generated from
//! ffi/, which holds identical `#[repr(C)]` copies checked field by field against these at
//! compile time (ffi/src/plugin.rs): cbindgen reads only ffi/, and parsing the whole core crate
//! for seven small types would drag its other public items into the header.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

use serde::Serialize;

use crate::plugins::kinds::Kind;

/// Where a plugin callback writes its result (JSON) or, when it returns non-zero, its error
/// text. `write` may be called several times; the pieces are concatenated.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_plugin_out_t {
    /// The host's state for `write`; pass it back unchanged.
    pub ctx: *mut c_void,
    /// Append `len` bytes at `ptr` (UTF-8) to the result.
    pub write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

/// A judge plugin's vtable (kind 3, version [`crate::plugins::kinds::JUDGE_VTABLE_VERSION`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_judge_vtable_t {
    /// The vtable version the plugin was built against.
    pub version: u32,
    /// Trajectory JSON in; a Judgment JSON (`{"score", "passed"?, "details"?}`) written to
    /// `out` and 0 returned, or an error message written to `out` and non-zero returned.
    pub judge: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            trajectory: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional, reserved for unregistering; never called today (plugins stay for the process's
    /// life).
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// A learner plugin's vtable (kind 4, version
/// [`crate::plugins::kinds::LEARNER_PLUGIN_VTABLE_VERSION`]): its policy (`act` for step
/// environments, `chat` for conversations; at least one) and its learning (`update`, optional
/// `snapshot`/`restore`). Every callback writes JSON (or, `chat`, text) to `out` and returns 0,
/// or writes an error message and returns non-zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_learner_plugin_vtable_t {
    /// The vtable version the plugin was built against.
    pub version: u32,
    /// `{"observation", "episode", "step", "seed"}` in; the action JSON out.
    pub act: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            request: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// A JSON array of chat messages in; the reply's text out.
    pub chat: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            messages: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// A JSON array of judged groups in; `{"metrics": {name: number}, "skipped"?: bool}` out.
    pub update: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            groups: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: save the state in the plugin's one snapshot slot.
    pub snapshot: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// Optional (with `snapshot`): go back to the snapshot.
    pub restore: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// Optional, reserved for unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// A telemetry sink plugin's vtable (kind 7, version
/// [`crate::plugins::kinds::TELEMETRY_VTABLE_VERSION`]). Every callback runs on the exporter
/// thread, never on a rollout thread; it returns 0, or non-zero with a message written to `out`
/// (counted and reported once; the run goes on). Only `episode` is required.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_telemetry_vtable_t {
    /// The vtable version the plugin was built against.
    pub version: u32,
    /// Optional: the run begins; `{"kind", "name", "params"}` JSON.
    pub start: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            run_info: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// One finished episode: its trajectory JSON.
    pub episode: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            trajectory: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: named values at `step`, a JSON object `{"name": number}`.
    pub metrics: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            step: u64,
            values: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: a file to keep with the run (`name` NUL-terminated UTF-8, `bytes` raw).
    pub artifact: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            name: *const c_char,
            bytes: *const u8,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: send what is buffered (called repeatedly, and before `finish`).
    pub flush: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// Optional: the run ended (`ok` 0 when it failed); the last call of a run.
    pub finish: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            ok: i32,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional, reserved for unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// An environment hub plugin's vtable (kind 6, version
/// [`crate::plugins::kinds::HUB_VTABLE_VERSION`]); both callbacks are required.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_hub_vtable_t {
    /// The vtable version the plugin was built against.
    pub version: u32,
    /// Up to `limit` entries matching `query` (UTF-8, may be empty): a JSON array of
    /// `{"name", "uri"?, "description"?, "meta"?}` written to `out`, 0 returned.
    pub search: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            query: *const c_char,
            len: usize,
            limit: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Make `name` loadable here and write the URI to load to `out` (plain text), 0 returned;
    /// an unknown name: a message and non-zero.
    pub fetch: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            name: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional, reserved for unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// An in-process driver plugin's vtable (kind 1, version
/// [`crate::plugins::kinds::DRIVER_VTABLE_VERSION`]): the bridge protocol of executable drivers
/// (docs/bridge.md), one JSON request in and one JSON reply out per call instead of a line each
/// way on pipes, so one driver's code can be built either way. An instance is what one worker
/// process would be: it holds one loaded environment and one episode.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_driver_vtable_t {
    /// The vtable version the plugin was built against.
    pub version: u32,
    /// A new instance in `*instance`; its handshake (`{"nenyax_bridge": 1, ...}`) written to
    /// `out`.
    pub open: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            instance: *mut *mut c_void,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// One request (a protocol line without its newline) in; its reply line out. Non-zero
    /// means the instance is broken: the host closes it and opens another.
    pub call: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            instance: *mut c_void,
            request: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Free an instance (after its `close` request, or when it broke).
    pub close: Option<unsafe extern "C" fn(user_data: *mut c_void, instance: *mut c_void)>,
    /// Optional, reserved for unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// A sandbox backend plugin's vtable (kind 2, version
/// [`crate::plugins::kinds::SANDBOX_VTABLE_VERSION`]). A sandbox is an opaque handle the plugin
/// makes in `create` and frees in `destroy`. Paths are absolute sandbox paths (the host resolves
/// relative ones against the workdir and refuses `..`). Every callback but `destroy` returns 0,
/// or non-zero with a message written to `out`. Sandbox plugins must set
/// `NENYAX_PLUGIN_THREAD_SAFE`: a terminal agent runs commands in one sandbox concurrently.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_sandbox_vtable_t {
    /// The vtable version the plugin was built against.
    pub version: u32,
    /// The isolation it provides: 1 process, 2 jail, 3 container, 4 microvm
    /// (`NENYAX_ISOLATION_*`); `nenyax sandbox-check` holds it to that level's promises.
    pub level: u32,
    /// Optional: 0 when it can run on this machine, else why not written to `out`.
    pub ready: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// The sandbox's configuration JSON in (docs/plugins-abi.md); its handle in `*sandbox`.
    pub create: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            config: *const c_char,
            len: usize,
            sandbox: *mut *mut c_void,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// One command's JSON in; its result JSON out.
    pub exec: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            request: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Write a file (NUL-terminated path), making its parent directories, with `mode`.
    pub put: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            path: *const c_char,
            data: *const u8,
            len: usize,
            mode: u32,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// A file's bytes out.
    pub get: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            path: *const c_char,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// A directory's entries out: a JSON array of `{"name", "dir", "size"}`.
    pub list: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            path: *const c_char,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Remove a file or a directory tree; a missing path is not an error.
    pub remove: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            path: *const c_char,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: a new sandbox (`*child`) with a copy of this one's files.
    pub fork: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            child: *mut *mut c_void,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: a host URL (plain text) for a service listening on `port` inside.
    pub url: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            sandbox: *mut c_void,
            port: u16,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Kill everything the sandbox runs and remove its files; the handle is dead after it.
    pub destroy: Option<unsafe extern "C" fn(user_data: *mut c_void, sandbox: *mut c_void)>,
    /// Optional, reserved for unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// One plugin a library (or a host, through `nenyax_plugin_register`) provides.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_plugin_t {
    /// The plugin ABI version the plugin was built against (`NENYAX_PLUGIN_ABI_VERSION`).
    pub abi_version: u32,
    /// What it extends: a `NENYAX_PLUGIN_KIND_*` code.
    pub kind: u32,
    /// The version of its kind's vtable (e.g. `NENYAX_JUDGE_VTABLE_VERSION`).
    pub kind_version: u32,
    /// `NENYAX_PLUGIN_THREAD_SAFE` when its callbacks may run concurrently; otherwise the host
    /// makes one call at a time.
    pub flags: u32,
    /// NUL-terminated UTF-8 name, what `use = "..."` matches.
    pub name: *const c_char,
    /// NUL-terminated UTF-8: the plugin's own version.
    pub version: *const c_char,
    /// The kind's vtable, e.g. a `const nenyax_judge_vtable_t *`.
    pub vtable: *const c_void,
    /// Passed to every callback.
    pub user_data: *mut c_void,
}

/// The entry point every plugin library exports with C linkage: given the host's plugin ABI
/// version, point `plugins` at an array of `count` descriptors that live as long as the library.
pub type nenyax_plugin_entry_fn = unsafe extern "C" fn(
    host_abi_version: u32,
    plugins: *mut *const nenyax_plugin_t,
    count: *mut usize,
) -> i32;

/// The symbol the loader looks up.
pub const ENTRY_SYMBOL: &str = "nenyax_plugin_entry";

/// Flag: the plugin's callbacks may be called from several threads at once.
pub const PLUGIN_THREAD_SAFE: u32 = 1;

/// `nenyax_sandbox_vtable_t.level` of a process-group backend; jail, container and microvm
/// follow in order.
pub const ISOLATION_PROCESS: u32 = 1;

/// `nenyax_sandbox_vtable_t.level` of a microVM backend, the highest code.
pub const ISOLATION_MICROVM: u32 = 4;

/// The isolation a sandbox plugin's `level` code names, if any.
pub fn isolation_from_code(code: u32) -> Option<crate::contract::Isolation> {
    use crate::contract::Isolation;
    match code {
        1 => Some(Isolation::Process),
        2 => Some(Isolation::Jail),
        3 => Some(Isolation::Container),
        4 => Some(Isolation::Microvm),
        _ => None,
    }
}

/// A plugin in the registry, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginInfo {
    /// What it extends.
    pub kind: Kind,
    /// What `use = "..."` picks it by.
    pub name: String,
    /// The plugin's own version string.
    pub version: String,
    /// The library's path, or `registered through the C ABI`.
    pub source: String,
}

/// The fixed code of a kind in `nenyax_plugin_t.kind`; values are never reused or renumbered.
pub fn kind_code(kind: Kind) -> u32 {
    match kind {
        Kind::Driver => 1,
        Kind::Sandbox => 2,
        Kind::Judge => 3,
        Kind::Learner => 4,
        Kind::Provider => 5,
        Kind::Hub => 6,
        Kind::Telemetry => 7,
    }
}

/// The kind a code names, if any.
pub fn kind_from_code(code: u32) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| kind_code(*k) == code)
}

/// The vtable version this Nenyax speaks for a kind, or None where library plugins of that kind
/// are not loadable yet (the loader then refuses them by name).
pub fn vtable_version(kind: Kind) -> Option<u32> {
    match kind {
        Kind::Judge => Some(crate::plugins::kinds::JUDGE_VTABLE_VERSION),
        Kind::Telemetry => Some(crate::plugins::kinds::TELEMETRY_VTABLE_VERSION),
        Kind::Hub => Some(crate::plugins::kinds::HUB_VTABLE_VERSION),
        Kind::Learner => Some(crate::plugins::kinds::LEARNER_PLUGIN_VTABLE_VERSION),
        Kind::Sandbox => Some(crate::plugins::kinds::SANDBOX_VTABLE_VERSION),
        Kind::Driver => Some(crate::plugins::kinds::DRIVER_VTABLE_VERSION),
        _ => None,
    }
}

/// `nenyax_plugin_out_t.write` for every kind's calls: append to the `Vec<u8>` behind `ctx`.
///
/// # Safety
/// `ctx` must be a live `Vec<u8>` and `ptr` valid for `len` bytes (what a plugin hands back).
pub(crate) unsafe extern "C" fn append(ctx: *mut c_void, ptr: *const c_char, len: usize) {
    if ctx.is_null() || ptr.is_null() || len == 0 {
        return;
    }
    let buf = &mut *ctx.cast::<Vec<u8>>();
    buf.extend_from_slice(std::slice::from_raw_parts(ptr.cast::<u8>(), len));
}

/// Call into a plugin with a fresh out buffer, holding `serial` (the lock of a plugin not
/// declared thread-safe) and naming the plugin on stderr if the call crashes: the return code
/// and what the plugin wrote. Every kind's calls go through here.
pub(crate) fn invoke(
    serial: Option<&std::sync::Mutex<()>>,
    crash: &crate::plugins::crash::CrashMessage,
    f: impl FnOnce(*const nenyax_plugin_out_t) -> i32,
) -> (i32, Vec<u8>) {
    let mut written: Vec<u8> = Vec::new();
    let out = nenyax_plugin_out_t {
        ctx: (&mut written as *mut Vec<u8>).cast(),
        write: Some(append),
    };
    let rc = {
        let _serial = serial.map(|m| m.lock().unwrap_or_else(|p| p.into_inner()));
        crate::plugins::crash::in_plugin(crash, || f(&out))
    };
    (rc, written)
}

/// The message of a failed call: what the plugin wrote, clipped, or that it wrote nothing.
pub(crate) fn failure_text(written: &[u8]) -> String {
    let text = String::from_utf8_lossy(written);
    if text.trim().is_empty() {
        "(it wrote no message)".to_string()
    } else {
        clip(text.trim())
    }
}

/// At most 500 characters of a plugin's text, for error messages.
pub(crate) fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(500).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_codes_round_trip_and_are_fixed() {
        let codes: Vec<u32> = Kind::ALL.iter().map(|k| kind_code(*k)).collect();
        assert_eq!(codes, [1, 2, 3, 4, 5, 6, 7]);
        for k in Kind::ALL {
            assert_eq!(kind_from_code(kind_code(k)), Some(k));
        }
        assert_eq!(kind_from_code(0), None);
        assert_eq!(kind_from_code(8), None);
    }
}
