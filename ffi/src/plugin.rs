//! Library plugins: the descriptor and vtables a plugin library exports through
//! `nenyax_plugin_entry`, and the functions a host uses to register its own plugins, load a
//! library explicitly and list what is loaded (docs/plugins-abi.md).
//!
//! The types are copies of `nenyax_core::plugins::abi`'s, which the loader reads; cbindgen reads
//! only this crate, so the header is generated from these. The `const` block below fails the
//! build if a copy's layout drifts from the core definition.

use std::ffi::{c_char, c_void};
use std::mem::{align_of, offset_of, size_of};

use nenyax_core::plugins::abi as core_abi;
use nenyax_core::plugins::kinds as core_kinds;

use crate::args::{json_out, need_out, nenyax_string_t, str_arg};
use crate::error::{boundary, invalid, nenyax_error_t, out_param};

/// Version of the plugin descriptor (`nenyax_plugin_t`) this header describes; a plugin built
/// for another version is refused with both versions named.
pub const NENYAX_PLUGIN_ABI_VERSION: u32 = 1;

/// Version of `nenyax_judge_vtable_t`.
pub const NENYAX_JUDGE_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_learner_plugin_vtable_t`.
pub const NENYAX_LEARNER_PLUGIN_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_telemetry_vtable_t`.
pub const NENYAX_TELEMETRY_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_hub_vtable_t`.
pub const NENYAX_HUB_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_driver_vtable_t` (requests and replies are bridge protocol 1).
pub const NENYAX_DRIVER_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_sandbox_vtable_t`.
pub const NENYAX_SANDBOX_VTABLE_VERSION: u32 = 1;

/// `nenyax_sandbox_vtable_t.level` of a backend that limits a process group on the host.
pub const NENYAX_ISOLATION_PROCESS: u32 = 1;

/// `nenyax_sandbox_vtable_t.level` of a backend with namespaces and a private file system view.
pub const NENYAX_ISOLATION_JAIL: u32 = 2;

/// `nenyax_sandbox_vtable_t.level` of a backend running containers of images.
pub const NENYAX_ISOLATION_CONTAINER: u32 = 3;

/// `nenyax_sandbox_vtable_t.level` of a backend running guest kernels.
pub const NENYAX_ISOLATION_MICROVM: u32 = 4;

/// Flag in `nenyax_plugin_t.flags`: the plugin's callbacks may run on several threads at once;
/// without it the library makes one call at a time (from any thread).
pub const NENYAX_PLUGIN_THREAD_SAFE: u32 = 1;

/// What a plugin extends, the value of `nenyax_plugin_t.kind` (a uint32_t); values are fixed
/// forever.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nenyax_plugin_kind_t {
    /// Loads environments of a native format: `vtable` is a `nenyax_driver_vtable_t`.
    NENYAX_PLUGIN_KIND_DRIVER = 1,
    /// Runs commands in isolation: `vtable` is a `nenyax_sandbox_vtable_t`.
    NENYAX_PLUGIN_KIND_SANDBOX = 2,
    /// Scores a finished episode: `vtable` is a `nenyax_judge_vtable_t`.
    NENYAX_PLUGIN_KIND_JUDGE = 3,
    /// Improves a policy: `vtable` is a `nenyax_learner_plugin_vtable_t`.
    NENYAX_PLUGIN_KIND_LEARNER = 4,
    /// A model provider (not loadable from libraries yet).
    NENYAX_PLUGIN_KIND_PROVIDER = 5,
    /// An environment hub: `vtable` is a `nenyax_hub_vtable_t`.
    NENYAX_PLUGIN_KIND_HUB = 6,
    /// A telemetry sink: `vtable` is a `nenyax_telemetry_vtable_t`.
    NENYAX_PLUGIN_KIND_TELEMETRY = 7,
}

/// Where a plugin callback writes its result (JSON) or, when it returns non-zero, its error
/// text; `write` may be called several times and the pieces are concatenated.
#[repr(C)]
pub struct nenyax_plugin_out_t {
    /// The library's state for `write`: pass it back unchanged.
    pub ctx: *mut c_void,
    /// Append `len` bytes of UTF-8 at `ptr` to the result.
    pub write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

/// A judge plugin's vtable (`NENYAX_PLUGIN_KIND_JUDGE`).
#[repr(C)]
pub struct nenyax_judge_vtable_t {
    /// NENYAX_JUDGE_VTABLE_VERSION.
    pub version: u32,
    /// Trajectory JSON in (NUL-terminated; `len` excludes the NUL); write a Judgment JSON
    /// ({"score": finite number, "passed"?: bool, "details"?: object}) to `out` and return 0, or
    /// write an error message and return non-zero. Runs on worker threads (docs/plugins-abi.md).
    pub judge: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            trajectory: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional, reserved: would free `user_data` on unregistering; plugins stay for the
    /// process's life today, so it is never called.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// A learner plugin's vtable (`NENYAX_PLUGIN_KIND_LEARNER`), picked by `use = "<name>"` in a
/// run config's [learner] or `nenyax train --learner <name>`. Every callback gets NUL-terminated
/// JSON (`len` excludes the NUL), writes its result to `out` and returns 0, or writes an error
/// message and returns non-zero. `act` and `chat` run on worker threads (docs/plugins-abi.md).
#[repr(C)]
pub struct nenyax_learner_plugin_vtable_t {
    /// NENYAX_LEARNER_PLUGIN_VTABLE_VERSION.
    pub version: u32,
    /// The policy for step environments: {"observation": {"data", "text"?, ...}, "episode":
    /// {"round", "group", "member", "phase", "seed", "task_id", ...}, "step": n, "seed": u64 for
    /// this call's sampling} in; the action as JSON out. NULL if it gives `chat` only.
    pub act: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            request: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// The policy for conversations: a JSON array of {"role", "content"} in; the reply's text
    /// out. NULL if it gives `act` only (`act` is used when both are given).
    pub chat: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            messages: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Learn from one round: a JSON array of groups {"index", "task", "seed", "trajectories":
    /// [judged trajectories]} in; {"metrics": {name: finite number}, "skipped"?: bool} out.
    pub update: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            groups: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional: save the state in one slot (a later snapshot replaces it), so an update that
    /// makes held-out scores worse can be reverted. Give both or neither with `restore`.
    pub snapshot: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// Optional: go back to the last snapshot.
    pub restore: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// Optional, reserved: would free `user_data` on unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// A telemetry sink plugin's vtable (`NENYAX_PLUGIN_KIND_TELEMETRY`). Callbacks run on the
/// telemetry exporter thread, never on a rollout thread; each returns 0, or non-zero with a
/// message written to `out` (counted and reported once; the run goes on). Only `episode` is
/// required; the others may be NULL.
#[repr(C)]
pub struct nenyax_telemetry_vtable_t {
    /// NENYAX_TELEMETRY_VTABLE_VERSION.
    pub version: u32,
    /// The run begins: {"kind": "run"|"train"|"check", "name", "params": {...}} JSON
    /// (NUL-terminated; `len` excludes the NUL).
    pub start: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            run_info: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// One finished episode: its trajectory JSON (NUL-terminated; `len` excludes the NUL).
    pub episode: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            trajectory: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Named values at `step`: a JSON object {"name": number, ...} (NUL-terminated).
    pub metrics: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            step: u64,
            values: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// A file to keep with the run: `name` NUL-terminated UTF-8, `len` raw bytes at `bytes`.
    pub artifact: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            name: *const c_char,
            bytes: *const u8,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Send what is buffered; called every couple of seconds while events arrive and before
    /// `finish`, so it must tolerate being called repeatedly.
    pub flush: Option<
        unsafe extern "C" fn(user_data: *mut c_void, out: *const nenyax_plugin_out_t) -> i32,
    >,
    /// The run ended (`ok` 0 when it failed); the last call of a run (a process may hold
    /// several runs, each from `start` to `finish`).
    pub finish: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            ok: i32,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional, reserved: would free `user_data` on unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// An environment hub plugin's vtable (`NENYAX_PLUGIN_KIND_HUB`); `search` and `fetch` are
/// required.
#[repr(C)]
pub struct nenyax_hub_vtable_t {
    /// NENYAX_HUB_VTABLE_VERSION.
    pub version: u32,
    /// Up to `limit` entries matching `query` (UTF-8, NUL-terminated, may be empty): write a
    /// JSON array of {"name", "uri"?, "description"?, "meta"?: object} to `out` and return 0.
    pub search: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            query: *const c_char,
            len: usize,
            limit: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Make `name` (as `search` lists it) loadable here and write the URI to load (plain text)
    /// to `out`, returning 0; an unknown name: write a message and return non-zero.
    pub fetch: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            name: *const c_char,
            len: usize,
            out: *const nenyax_plugin_out_t,
        ) -> i32,
    >,
    /// Optional, reserved: would free `user_data` on unregistering; never called today.
    pub drop: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// An in-process driver plugin's vtable (`NENYAX_PLUGIN_KIND_DRIVER`, version
/// NENYAX_DRIVER_VTABLE_VERSION): the bridge protocol of executable drivers
/// (docs/bridge.md), one JSON request in and one JSON reply out per call instead of a line each
/// way on pipes, so one driver's code can be built either way. An instance is what one worker
/// process would be: it holds one loaded environment and one episode.
#[repr(C)]
pub struct nenyax_driver_vtable_t {
    /// NENYAX_DRIVER_VTABLE_VERSION.
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

/// A sandbox backend plugin's vtable (`NENYAX_PLUGIN_KIND_SANDBOX`, version
/// NENYAX_SANDBOX_VTABLE_VERSION). A sandbox is an opaque handle the plugin
/// makes in `create` and frees in `destroy`. Paths are absolute sandbox paths (the host resolves
/// relative ones against the workdir and refuses `..`). Every callback but `destroy` returns 0,
/// or non-zero with a message written to `out`. Sandbox plugins must set
/// `NENYAX_PLUGIN_THREAD_SAFE`: a terminal agent runs commands in one sandbox concurrently.
#[repr(C)]
pub struct nenyax_sandbox_vtable_t {
    /// NENYAX_SANDBOX_VTABLE_VERSION.
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

/// One plugin, as a library's `nenyax_plugin_entry` lists it or a host registers it.
#[repr(C)]
pub struct nenyax_plugin_t {
    /// NENYAX_PLUGIN_ABI_VERSION the plugin was built against (first field, fixed forever).
    pub abi_version: u32,
    /// A nenyax_plugin_kind_t value.
    pub kind: u32,
    /// The version of the kind's vtable, e.g. NENYAX_JUDGE_VTABLE_VERSION.
    pub kind_version: u32,
    /// 0 or NENYAX_PLUGIN_THREAD_SAFE.
    pub flags: u32,
    /// NUL-terminated UTF-8: what `use = "..."` matches.
    pub name: *const c_char,
    /// NUL-terminated UTF-8: the plugin's own version.
    pub version: *const c_char,
    /// The kind's vtable, e.g. a `const nenyax_judge_vtable_t *`.
    pub vtable: *const c_void,
    /// Passed to every callback.
    pub user_data: *mut c_void,
}

/// The function every plugin library exports with C linkage under the name
/// `nenyax_plugin_entry`: given the host's NENYAX_PLUGIN_ABI_VERSION, point `*plugins` at an
/// array of `*count` descriptors that live as long as the library, and return 0.
pub type nenyax_plugin_entry_fn = Option<
    unsafe extern "C" fn(
        host_abi_version: u32,
        plugins: *mut *const nenyax_plugin_t,
        count: *mut usize,
    ) -> i32,
>;

// The header's copies must be the loader's types, field for field.
const _: () = {
    macro_rules! same {
        ($ours:ty, $core:ty, $($f:ident),*) => {
            assert!(size_of::<$ours>() == size_of::<$core>());
            assert!(align_of::<$ours>() == align_of::<$core>());
            $(assert!(offset_of!($ours, $f) == offset_of!($core, $f));)*
        };
    }
    same!(
        nenyax_plugin_out_t,
        core_abi::nenyax_plugin_out_t,
        ctx,
        write
    );
    same!(
        nenyax_judge_vtable_t,
        core_abi::nenyax_judge_vtable_t,
        version,
        judge,
        drop
    );
    same!(
        nenyax_learner_plugin_vtable_t,
        core_abi::nenyax_learner_plugin_vtable_t,
        version,
        act,
        chat,
        update,
        snapshot,
        restore,
        drop
    );
    same!(
        nenyax_telemetry_vtable_t,
        core_abi::nenyax_telemetry_vtable_t,
        version,
        start,
        episode,
        metrics,
        artifact,
        flush,
        finish,
        drop
    );
    same!(
        nenyax_hub_vtable_t,
        core_abi::nenyax_hub_vtable_t,
        version,
        search,
        fetch,
        drop
    );
    same!(
        nenyax_driver_vtable_t,
        core_abi::nenyax_driver_vtable_t,
        version,
        open,
        call,
        close,
        drop
    );
    same!(
        nenyax_sandbox_vtable_t,
        core_abi::nenyax_sandbox_vtable_t,
        version,
        level,
        ready,
        create,
        exec,
        put,
        get,
        list,
        remove,
        fork,
        url,
        destroy,
        drop
    );
    same!(
        nenyax_plugin_t,
        core_abi::nenyax_plugin_t,
        abi_version,
        kind,
        kind_version,
        flags,
        name,
        version,
        vtable,
        user_data
    );
    assert!(NENYAX_PLUGIN_ABI_VERSION == core_kinds::PLUGIN_ABI_VERSION);
    assert!(NENYAX_JUDGE_VTABLE_VERSION == core_kinds::JUDGE_VTABLE_VERSION);
    assert!(NENYAX_TELEMETRY_VTABLE_VERSION == core_kinds::TELEMETRY_VTABLE_VERSION);
    assert!(NENYAX_HUB_VTABLE_VERSION == core_kinds::HUB_VTABLE_VERSION);
    assert!(NENYAX_SANDBOX_VTABLE_VERSION == core_kinds::SANDBOX_VTABLE_VERSION);
    assert!(NENYAX_DRIVER_VTABLE_VERSION == core_kinds::DRIVER_VTABLE_VERSION);
    assert!(NENYAX_ISOLATION_PROCESS == core_abi::ISOLATION_PROCESS);
    assert!(NENYAX_ISOLATION_MICROVM == core_abi::ISOLATION_MICROVM);
    assert!(NENYAX_PLUGIN_THREAD_SAFE == core_abi::PLUGIN_THREAD_SAFE);
    assert!(NENYAX_LEARNER_PLUGIN_VTABLE_VERSION == core_kinds::LEARNER_PLUGIN_VTABLE_VERSION);
};

/// Register a plugin this host implements (same descriptor and vtable as a library's), so that
/// `{"type": "plugin", "use": "<name>"}` judges (and `--telemetry`, `nenyax search` by name for
/// telemetry and hub plugins) find it. The descriptor and vtable are copied;
/// `user_data` must stay valid for the life of the process. A name already taken for the kind
/// is NENYAX_STATUS_CONFIG; so is a version mismatch, with both versions named.
#[no_mangle]
pub unsafe extern "C" fn nenyax_plugin_register(
    plugin: *const nenyax_plugin_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        if plugin.is_null() {
            return Err(invalid("plugin is NULL".into()));
        }
        nenyax_core::plugins::register(plugin.cast::<core_abi::nenyax_plugin_t>())?;
        Ok(())
    })
}

/// Load a plugin library (a path, UTF-8) and register the plugins its `nenyax_plugin_entry`
/// lists; loading the same file again is a no-op. Libraries are never unloaded.
#[no_mangle]
pub unsafe extern "C" fn nenyax_plugin_load(
    path: *const c_char,
    len: usize,
) -> *mut nenyax_error_t {
    boundary(|| {
        let path = str_arg(path, len, "path")?;
        nenyax_core::plugins::load_library(std::path::Path::new(path))?;
        Ok(())
    })
}

/// The plugins loaded or registered so far, as a JSON array of {"kind", "name", "version",
/// "source"}. Free with nenyax_string_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_plugins_json(out: *mut nenyax_string_t) -> *mut nenyax_error_t {
    boundary(|| {
        need_out(out)?;
        out_param(out, json_out(&nenyax_core::plugins::loaded()))
    })
}

/// Hold the plugin `name` of `kind` ("judge", ...) to its kind's conformance checks, as
/// `nenyax plugin-check` does, for a plugin's own test suite: NULL when it conforms, else a
/// NENYAX_STATUS_CONFIG error whose message is the report, every failed check named (or why it
/// cannot be checked). On success `report_out`, when not NULL, gets the JSON report ({"kind",
/// "name", "checks": [{"name", "passed", "detail"}]}); free it with nenyax_string_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_plugin_check(
    kind: *const c_char,
    kind_len: usize,
    name: *const c_char,
    name_len: usize,
    report_out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let kind = str_arg(kind, kind_len, "kind")?;
        let kind = nenyax_core::plugins::Kind::parse(kind).map_err(nenyax_core::Error::Config)?;
        let name = str_arg(name, name_len, "name")?;
        let report = nenyax_core::plugins::conformance::check(kind, name)?.into_result()?;
        if !report_out.is_null() {
            out_param(report_out, json_out(&report))?;
        }
        Ok(())
    })
}
