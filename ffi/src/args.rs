//! Marshalling shared by every area: strings in and out, options, arrays, out-parameters.

use serde::Deserialize;
use serde_json::Value;
use std::ffi::c_char;

use crate::error::{invalid, json_err, FfiResult};
use crate::NENYAX_THREAD_SAFE;

/// An owned UTF-8 string returned by the library (NUL-terminated; `len` excludes the NUL).
/// Free it with `nenyax_string_free`.
#[repr(C)]
pub struct nenyax_string_t {
    /// The bytes, NUL-terminated; NULL when empty-initialised.
    pub ptr: *mut c_char,
    /// Length in bytes, without the NUL.
    pub len: usize,
}

/// Reject flag bits this version does not know, so a newer host's intent is not silently lost.
pub(crate) fn check_flags(flags: u32) -> FfiResult<()> {
    let unknown = flags & !NENYAX_THREAD_SAFE;
    if unknown != 0 {
        return Err(invalid(format!(
            "unknown flag bits {unknown:#x}; this library knows NENYAX_THREAD_SAFE (1)"
        )));
    }
    Ok(())
}

/// Fail before doing any work when there is nowhere to put the result.
pub(crate) fn need_out<T>(out: *mut T) -> FfiResult<()> {
    if out.is_null() {
        return Err(invalid("the out-parameter is NULL".into()));
    }
    Ok(())
}

pub(crate) fn to_string_out(s: String) -> nenyax_string_t {
    let s = s.replace('\0', "\\u0000");
    let len = s.len();
    let ptr = std::ffi::CString::new(s)
        .expect("NULs were escaped")
        .into_raw();
    nenyax_string_t { ptr, len }
}

pub(crate) fn json_out<T: serde::Serialize>(v: &T) -> nenyax_string_t {
    to_string_out(serde_json::to_string(v).expect("contract types serialise"))
}

/// Borrow a required UTF-8 input.
pub(crate) unsafe fn str_arg<'a>(ptr: *const c_char, len: usize, what: &str) -> FfiResult<&'a str> {
    if ptr.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
    std::str::from_utf8(bytes).map_err(|e| invalid(format!("{what} is not valid UTF-8 ({e})")))
}

/// Borrow an optional UTF-8 input: NULL or empty means absent.
pub(crate) unsafe fn opt_str_arg<'a>(
    ptr: *const c_char,
    len: usize,
    what: &str,
) -> FfiResult<Option<&'a str>> {
    if ptr.is_null() || len == 0 {
        return Ok(None);
    }
    str_arg(ptr, len, what).map(Some)
}

/// Parse optional JSON options into `T`, defaults when absent.
pub(crate) unsafe fn options<T: for<'de> Deserialize<'de> + Default>(
    ptr: *const c_char,
    len: usize,
    what: &str,
) -> FfiResult<T> {
    match opt_str_arg(ptr, len, what)? {
        None => Ok(T::default()),
        Some(s) => from_json_object(s, what),
    }
}

/// Parse a JSON object into `T`. Serde would also read a JSON array positionally into a
/// struct (`[3, 7]` as n = 3, seed = 7), which no caller means, so only objects are accepted.
pub(crate) fn from_json_object<T: for<'de> Deserialize<'de>>(s: &str, what: &str) -> FfiResult<T> {
    let v: Value = serde_json::from_str(s).map_err(|e| json_err(what, &e))?;
    if !v.is_object() {
        return Err(invalid(format!(
            "{what} must be a JSON object, got {}",
            nenyax_core::contract::preview_json(&v)
        )));
    }
    serde_json::from_value(v).map_err(|e| json_err(what, &e))
}

pub(crate) fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// A required input array of `n` values; NULL is an error naming it (n = 0 gives an empty one).
pub(crate) unsafe fn slice_arg<'a, T>(ptr: *const T, n: usize, what: &str) -> FfiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    Ok(std::slice::from_raw_parts(ptr, n))
}

/// A required JSON object argument.
pub(crate) unsafe fn json_object_arg(
    ptr: *const c_char,
    len: usize,
    what: &str,
) -> FfiResult<Value> {
    let text = str_arg(ptr, len, what)?;
    let v: Value = serde_json::from_str(text).map_err(|e| json_err(what, &e))?;
    if !v.is_object() {
        return Err(invalid(format!("{what} must be a JSON object")));
    }
    Ok(v)
}
