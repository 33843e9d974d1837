//! The C ABI of Nenyax (`libnenyax`). The header `include/nenyax.h` is generated from this
//! crate by cbindgen (`ffi/cbindgen.toml`); its conventions block is the normative summary.
//!
//! Every exported function runs inside [`boundary`], which catches panics, so nothing unwinds
//! into the host. Fallible functions return an owned `nenyax_error_t *` (NULL on success) and
//! write their out-parameters only on success. Contract data crosses as UTF-8 JSON.

#![warn(missing_docs)]
#![allow(non_camel_case_types)]
// Every `unsafe extern "C"` function documents its pointer contract in the header's
// conventions block (valid or NULL pointers, lengths in bytes); repeating it per function
// would only restate it.
#![allow(clippy::missing_safety_doc)]

// One file per section of the header, declared in the header's order: cbindgen writes the
// functions of this file first (versions, strings), then each module's in declaration order.
mod args;

mod error;

mod env;

mod session;

mod policy;

mod runner;

mod learn;

mod pg;

mod trainer;

mod train;

mod sandbox;

mod server;

mod recording;

mod callbacks;

mod episode;
mod export;

mod plugin;

use std::ffi::c_char;

pub use args::nenyax_string_t;
pub use callbacks::{
    nenyax_act_fn, nenyax_chat_fn, nenyax_free_fn, nenyax_policy_vtable_t, nenyax_reply_set,
    nenyax_reply_t, nenyax_state_vtable_t, nenyax_task_vtable_t, nenyax_trajectory_fn,
};
pub use env::*;
pub use episode::*;
pub use error::{
    nenyax_error_code, nenyax_error_free, nenyax_error_message, nenyax_error_t, nenyax_status_t,
};
pub use export::*;
pub use learn::*;
pub use pg::*;
pub use plugin::*;
pub use policy::*;
pub use recording::*;
pub use runner::*;
pub use sandbox::*;
pub use server::*;
pub use session::*;
pub use train::*;
pub use trainer::*;

use error::quietly;

/// Flag for policies and callback-defined environments whose callbacks may be called from any
/// thread, concurrently (full parallelism for C/C++ hosts).
pub const NENYAX_THREAD_SAFE: u32 = 1;

/// Most worker threads a runner may have.
pub const NENYAX_MAX_THREADS: usize = 1024;

/// Version of `nenyax_task_vtable_t` and `nenyax_state_vtable_t`, and of a
/// `nenyax_policy_vtable_t` with `act` or `chat` only (its first three fields).
pub const NENYAX_VTABLE_VERSION: u32 = 1;

/// Version of a `nenyax_policy_vtable_t` with all its fields, `act_episode` and `chat_episode`
/// included.
pub const NENYAX_POLICY_VTABLE_VERSION: u32 = 2;

// ---------------------------------------------------------------------------------------------
// versions and strings

/// Library version as a static NUL-terminated string ("0.1.0"); do not free it.
#[no_mangle]
pub extern "C" fn nenyax_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// Library version as MAJOR*1000000 + MINOR*1000 + PATCH; compare with NENYAX_VERSION_NUMBER.
#[no_mangle]
pub extern "C" fn nenyax_version_number() -> u32 {
    let part = |s: &str| s.parse::<u32>().unwrap_or(0);
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 1_000_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 1_000
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// Contract version (`PROTOCOL_VERSION`, "0.1") as a static string; do not free it.
#[no_mangle]
pub extern "C" fn nenyax_protocol_version() -> *const c_char {
    static PROTOCOL: &str = "0.1\0";
    debug_assert_eq!(
        &PROTOCOL[..PROTOCOL.len() - 1],
        nenyax_core::PROTOCOL_VERSION
    );
    PROTOCOL.as_ptr().cast()
}

/// Free a string returned by the library and reset it to {NULL, 0}; NULL or empty is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_string_free(s: *mut nenyax_string_t) {
    quietly(|| {
        if let Some(s) = s.as_mut() {
            if !s.ptr.is_null() {
                drop(std::ffi::CString::from_raw(s.ptr));
            }
            s.ptr = std::ptr::null_mut();
            s.len = 0;
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::boundary;

    #[test]
    fn a_panic_inside_the_boundary_becomes_a_panic_error() {
        let e = boundary(|| panic!("simulated library bug"));
        assert!(!e.is_null());
        unsafe {
            assert_eq!(nenyax_error_code(e), nenyax_status_t::NENYAX_STATUS_PANIC);
            let mut len = 0;
            let msg = std::ffi::CStr::from_ptr(nenyax_error_message(e, &mut len));
            let msg = msg.to_str().unwrap();
            assert_eq!(len, msg.len());
            assert!(msg.contains("simulated library bug"), "{msg}");
            nenyax_error_free(e);
        }
        // Functions that cannot return an error swallow it instead of unwinding.
        quietly(|| panic!("in a free function"));
    }

    /// Every exported function runs inside the panic boundary, except the few whose bodies
    /// cannot panic (they only read static data or a field).
    #[test]
    fn every_export_runs_inside_the_panic_boundary() {
        let allowed = [
            "nenyax_version",
            "nenyax_version_number",
            "nenyax_protocol_version",
            "nenyax_error_code",
            "nenyax_error_message",
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        let files = [
            "lib.rs",
            "args.rs",
            "callbacks.rs",
            "env.rs",
            "episode.rs",
            "error.rs",
            "export.rs",
            "learn.rs",
            "pg.rs",
            "plugin.rs",
            "policy.rs",
            "recording.rs",
            "runner.rs",
            "sandbox.rs",
            "server.rs",
            "session.rs",
            "train.rs",
            "trainer.rs",
        ];
        // Every source file is listed, so an export in a new file is not skipped.
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".rs"))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = files.iter().map(|f| f.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "ffi/src/*.rs and this test's list differ");
        for file in files {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for chunk in text.split("#[no_mangle]").skip(1) {
                let name = chunk
                    .split("fn ")
                    .nth(1)
                    .and_then(|s| s.split('(').next())
                    .unwrap()
                    .trim()
                    .to_string();
                // The body runs to the next item; good enough for this file's layout.
                let body = chunk.split("\n}\n").next().unwrap();
                if !allowed.contains(&name.as_str()) {
                    // env_policy() is a helper whose whole body is a boundary().
                    assert!(
                        ["boundary(", "quietly(", "env_policy("]
                            .iter()
                            .any(|w| body.contains(w)),
                        "{file}: {name} does not run inside boundary()/quietly()"
                    );
                }
                checked += 1;
            }
        }
        // Every function the header declares (a line at column 0 naming one and opening its
        // parameter list) was found here.
        let header = std::fs::read_to_string(dir.join("../../include/nenyax.h")).unwrap();
        let declared = header
            .lines()
            .filter(|l| !l.starts_with(['/', '#', ' ', '}']) && !l.starts_with("typedef"))
            .filter(|l| l.contains("nenyax_") && l.contains('('))
            .count();
        assert!(declared >= 60, "the header declares {declared} functions");
        assert!(
            checked >= declared,
            "found only {checked} of {declared} exports"
        );
    }
}
