//! Error objects and the panic boundary.

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use nenyax_core::Error;

/// Stable status codes; values are never reused or renumbered.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nenyax_status_t {
    /// Success (also the code of a NULL error).
    NENYAX_STATUS_OK = 0,
    /// A NULL pointer, invalid UTF-8, malformed JSON or an unsupported vtable version.
    NENYAX_STATUS_INVALID_ARGUMENT = 1,
    /// A URI that does not parse.
    NENYAX_STATUS_INVALID_URI = 2,
    /// A URI scheme no driver handles.
    NENYAX_STATUS_UNKNOWN_SCHEME = 3,
    /// A driver that cannot run here (the message says what is missing).
    NENYAX_STATUS_DRIVER_UNAVAILABLE = 4,
    /// A target the driver does not know.
    NENYAX_STATUS_UNKNOWN_TARGET = 5,
    /// A URI parameter the driver does not accept.
    NENYAX_STATUS_UNKNOWN_PARAMETER = 6,
    /// A parameter value of the wrong type or range.
    NENYAX_STATUS_INVALID_PARAMETER = 7,
    /// The environment cannot do what was asked (e.g. no reference policy, no sessions).
    NENYAX_STATUS_UNSUPPORTED = 8,
    /// The policy's kind cannot drive this environment.
    NENYAX_STATUS_POLICY_MISMATCH = 9,
    /// A policy failed.
    NENYAX_STATUS_POLICY = 10,
    /// An action the environment cannot accept.
    NENYAX_STATUS_INVALID_ACTION = 11,
    /// The environment failed.
    NENYAX_STATUS_ENVIRONMENT = 12,
    /// A judge produced a NaN or infinite score.
    NENYAX_STATUS_NON_FINITE_SCORE = 13,
    /// A judge could not reach a verdict.
    NENYAX_STATUS_JUDGE = 14,
    /// A definition (spec or file) that does not fit.
    NENYAX_STATUS_DEFINE = 15,
    /// A model endpoint failed.
    NENYAX_STATUS_ENDPOINT = 16,
    /// Data that does not fit the contract.
    NENYAX_STATUS_PROTOCOL = 17,
    /// A configuration value that does not fit.
    NENYAX_STATUS_CONFIG = 18,
    /// A file or stream failed.
    NENYAX_STATUS_IO = 19,
    /// A host callback asked to stop (e.g. a trajectory sink returned non-zero).
    NENYAX_STATUS_CALLBACK = 20,
    /// A bug inside the library was caught before it could unwind into the host.
    NENYAX_STATUS_PANIC = 21,
    /// No usable GPU (no NVIDIA driver, no device, or no NVRTC); the CPU entry points still work.
    NENYAX_STATUS_CUDA_UNAVAILABLE = 22,
    /// A CUDA call failed on a GPU that is there.
    NENYAX_STATUS_CUDA = 23,
    /// A server refused a session because it is at its session limit (the message is the
    /// server's own); retry later or open fewer sessions.
    NENYAX_STATUS_CAPACITY = 24,
    /// A training round could not update: a trainer callback failed or returned non-finite
    /// log-probabilities, or every trace was masked (the message says why).
    NENYAX_STATUS_TRAINING = 25,
}

use nenyax_status_t::*;

/// An error: a status code and a readable message. Free it with `nenyax_error_free`.
pub struct nenyax_error_t {
    pub(crate) status: nenyax_status_t,
    pub(crate) message: CString,
}

pub(crate) type FfiResult<T> = Result<T, Box<nenyax_error_t>>;

pub(crate) fn new_error(status: nenyax_status_t, message: String) -> Box<nenyax_error_t> {
    let message = CString::new(message.replace('\0', "\\0")).expect("NULs were escaped");
    Box::new(nenyax_error_t { status, message })
}

pub(crate) fn invalid(message: String) -> Box<nenyax_error_t> {
    new_error(NENYAX_STATUS_INVALID_ARGUMENT, message)
}

pub(crate) fn json_err(what: &str, e: &serde_json::Error) -> Box<nenyax_error_t> {
    invalid(format!("{what} is not valid JSON for this call: {e}"))
}

fn status_of(e: &Error) -> nenyax_status_t {
    match e {
        Error::InvalidUri { .. } => NENYAX_STATUS_INVALID_URI,
        Error::UnknownScheme { .. } => NENYAX_STATUS_UNKNOWN_SCHEME,
        Error::DriverUnavailable { .. } => NENYAX_STATUS_DRIVER_UNAVAILABLE,
        Error::UnknownTarget { .. } => NENYAX_STATUS_UNKNOWN_TARGET,
        Error::UnknownParameter { .. } => NENYAX_STATUS_UNKNOWN_PARAMETER,
        Error::InvalidParameter { .. } => NENYAX_STATUS_INVALID_PARAMETER,
        Error::UnsupportedCapability { .. } => NENYAX_STATUS_UNSUPPORTED,
        Error::PolicyMismatch(_) => NENYAX_STATUS_POLICY_MISMATCH,
        Error::Policy(_) => NENYAX_STATUS_POLICY,
        Error::InvalidAction { .. } => NENYAX_STATUS_INVALID_ACTION,
        Error::Environment(_) => NENYAX_STATUS_ENVIRONMENT,
        Error::NonFiniteScore { .. } => NENYAX_STATUS_NON_FINITE_SCORE,
        Error::Judge(_) => NENYAX_STATUS_JUDGE,
        Error::Define { .. } => NENYAX_STATUS_DEFINE,
        Error::Endpoint { .. } => NENYAX_STATUS_ENDPOINT,
        Error::Protocol(_) => NENYAX_STATUS_PROTOCOL,
        Error::Capacity { .. } => NENYAX_STATUS_CAPACITY,
        Error::Training(_) => NENYAX_STATUS_TRAINING,
        Error::Config(_) => NENYAX_STATUS_CONFIG,
        Error::Io { .. } => NENYAX_STATUS_IO,
        Error::Sandbox(_) => NENYAX_STATUS_ENVIRONMENT,
        Error::CudaUnavailable(_) => NENYAX_STATUS_CUDA_UNAVAILABLE,
        Error::Cuda(_) => NENYAX_STATUS_CUDA,
    }
}

impl From<Error> for Box<nenyax_error_t> {
    fn from(e: Error) -> Self {
        new_error(status_of(&e), format!("{}: {e}", e.kind()))
    }
}

/// Run an exported function's body: `Ok` is NULL, an error is returned as an owned object, and
/// a panic becomes NENYAX_STATUS_PANIC instead of unwinding into the host.
pub(crate) fn boundary(f: impl FnOnce() -> FfiResult<()>) -> *mut nenyax_error_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => Box::into_raw(e),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with a non-string payload".into());
            Box::into_raw(new_error(
                NENYAX_STATUS_PANIC,
                format!("Panic: a bug inside nenyax was caught at the C boundary: {msg}"),
            ))
        }
    }
}

/// [`boundary`] for functions that cannot report an error (free functions): any error is dropped.
pub(crate) fn quietly(f: impl FnOnce() -> FfiResult<()>) {
    let e = boundary(f);
    if !e.is_null() {
        // SAFETY: `boundary` returns either NULL or a pointer from Box::into_raw.
        drop(unsafe { Box::from_raw(e) });
    }
}

/// A value the library hands over through an out-parameter.
pub(crate) trait Owned {
    /// Release it when there is nowhere to put it.
    unsafe fn discard(self);
}

impl<T> Owned for *mut T {
    unsafe fn discard(self) {
        drop(Box::from_raw(self));
    }
}

impl Owned for crate::nenyax_string_t {
    unsafe fn discard(self) {
        if !self.ptr.is_null() {
            drop(CString::from_raw(self.ptr));
        }
    }
}

/// Write `v` to `out`; a NULL `out` is an error and `v` is released, so nothing leaks.
pub(crate) unsafe fn out_param<T: Owned>(out: *mut T, v: T) -> FfiResult<()> {
    if out.is_null() {
        v.discard();
        return Err(invalid("the out-parameter is NULL".into()));
    }
    out.write(v);
    Ok(())
}

/// The status of an error; NENYAX_STATUS_OK for NULL.
#[no_mangle]
pub unsafe extern "C" fn nenyax_error_code(error: *const nenyax_error_t) -> nenyax_status_t {
    error.as_ref().map_or(NENYAX_STATUS_OK, |e| e.status)
}

/// The error's message, NUL-terminated and valid until the error is freed; "" for NULL.
/// When `len_out` is not NULL it receives the length in bytes (without the NUL).
#[no_mangle]
pub unsafe extern "C" fn nenyax_error_message(
    error: *const nenyax_error_t,
    len_out: *mut usize,
) -> *const c_char {
    let (ptr, len) = match error.as_ref() {
        Some(e) => (e.message.as_ptr(), e.message.as_bytes().len()),
        None => (c"".as_ptr(), 0),
    };
    if !len_out.is_null() {
        len_out.write(len);
    }
    ptr
}

/// Free an error; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn nenyax_error_free(error: *mut nenyax_error_t) {
    quietly(|| {
        if !error.is_null() {
            drop(Box::from_raw(error));
        }
        Ok(())
    });
}
