//! The C ABI of Nenyax (`libnenyax`).
//!
//! Only the version entry point exists so far: the full handle-based surface (environments,
//! rollouts, policies as callbacks, errors as objects) is the work of the C ABI issue. It is
//! listed as "not yet" in the README's status table.

use std::ffi::c_char;

/// Library version as a static NUL-terminated string; the caller must not free it.
#[no_mangle]
pub extern "C" fn nenyax_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// Contract version (`PROTOCOL_VERSION`) as a static NUL-terminated string; do not free it.
#[no_mangle]
pub extern "C" fn nenyax_protocol_version() -> *const c_char {
    static PROTOCOL: &str = concat!("0.1", "\0");
    debug_assert_eq!(
        &PROTOCOL[..PROTOCOL.len() - 1],
        nenyax_core::PROTOCOL_VERSION
    );
    PROTOCOL.as_ptr().cast()
}
