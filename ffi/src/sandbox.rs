//! Sandboxes: create, run commands, move files, fork, destroy.

use std::ffi::c_char;

use nenyax_core::sandbox::{ExecOptions, Sandbox, SandboxOptions};

use crate::args::{
    boxed, from_json_object, json_out, need_out, nenyax_string_t, options, slice_arg, str_arg,
    to_string_out,
};
use crate::error::{boundary, invalid, nenyax_error_t, out_param, quietly, FfiResult};

/// A sandbox (process, jail or container backend). Not thread-safe for concurrent writes of the same
/// paths; commands may run from one thread at a time per handle.
pub struct nenyax_sandbox_t {
    sb: Sandbox,
}

unsafe fn sandbox_ref<'a>(sb: *const nenyax_sandbox_t) -> FfiResult<&'a Sandbox> {
    sb.as_ref()
        .map(|s| &s.sb)
        .ok_or_else(|| invalid("sandbox is NULL".into()))
}

/// Create a sandbox. Options (may be NULL): {"backend": "process"|"jail"|"container" (default
/// process), "cpu_s", "memory_bytes", "open_files", "processes", "file_size_bytes", "wall_s",
/// "output_bytes", "network", "workdir", "root", "env": {..}, "extra_dirs": [..], "image",
/// "read_only_root", "keep_detached", "cpus" (the last four for a container)}.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_new(
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut nenyax_sandbox_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        need_out(out)?;
        let o: SandboxOptions = options(options_json, options_len, "options_json")?;
        let c = o.config()?;
        out_param(
            out,
            boxed(nenyax_sandbox_t {
                sb: Sandbox::create(c)?,
            }),
        )
    })
}

/// Run a command: {"argv": [..]} or {"shell": "..."}, plus optional "cwd", "env", "stdin"
/// (text) and "timeout_s". `out` receives the result as JSON: exit_code, signal, stdout,
/// stderr, dropped_bytes, duration_s, killed ("timeout"|"cpu_limit"|"file_size_limit"|
/// "signal"|null). A command that fails or is killed is not an error; one that cannot start is.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_exec(
    sandbox: *const nenyax_sandbox_t,
    exec_json: *const c_char,
    exec_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        let e: ExecOptions =
            from_json_object(str_arg(exec_json, exec_len, "exec_json")?, "exec_json")?;
        let exec = e.into();
        out_param(out, json_out(&sb.exec(&exec)?))
    })
}

/// Write `len` bytes to a sandbox path (parents created) with Unix mode `mode`.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_put(
    sandbox: *const nenyax_sandbox_t,
    path: *const c_char,
    path_len: usize,
    data: *const u8,
    len: usize,
    mode: u32,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        let path = str_arg(path, path_len, "path")?;
        let bytes = slice_arg(data, len, "data")?;
        sb.put(path, bytes, mode)?;
        Ok(())
    })
}

/// Read a sandbox file into `out` (its bytes; a NUL byte in the file becomes "\u0000").
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_get(
    sandbox: *const nenyax_sandbox_t,
    path: *const c_char,
    path_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        let bytes = sb.get(str_arg(path, path_len, "path")?)?;
        out_param(
            out,
            to_string_out(String::from_utf8_lossy(&bytes).into_owned()),
        )
    })
}

/// List a sandbox directory as JSON: [{"name", "dir", "size"}], sorted by name.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_list(
    sandbox: *const nenyax_sandbox_t,
    path: *const c_char,
    path_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        let entries = sb.list(str_arg(path, path_len, "path")?)?;
        out_param(out, json_out(&entries))
    })
}

/// A new sandbox with the same configuration and a copy of this one's files.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_fork(
    sandbox: *const nenyax_sandbox_t,
    out: *mut *mut nenyax_sandbox_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let sb = sandbox_ref(sandbox)?;
        need_out(out)?;
        out_param(out, boxed(nenyax_sandbox_t { sb: sb.fork()? }))
    })
}

/// Destroy a sandbox (kill what is left, remove its files) and free it; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_sandbox_free(sandbox: *mut nenyax_sandbox_t) {
    quietly(|| {
        if !sandbox.is_null() {
            let _ = Box::from_raw(sandbox).sb.destroy();
        }
        Ok(())
    });
}
