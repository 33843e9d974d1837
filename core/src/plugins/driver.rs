//! An in-process driver from a library plugin: the bridge protocol (docs/bridge.md) as function
//! calls. Each bridge worker opens one instance, so the pool, `nenyax check` and everything
//! built on bridged environments work unchanged; what an in-process driver gives up is
//! isolation (a crash takes the host down, a hung call cannot be timed out), what it gains is
//! no process, pipe or context switch per call.

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::plugins::abi::{clip, failure_text, invoke};
use crate::plugins::abi::{
    nenyax_driver_vtable_t, nenyax_plugin_out_t, nenyax_plugin_t, PluginInfo, PLUGIN_THREAD_SAFE,
};
use crate::plugins::crash::{in_plugin, CrashMessage};
use crate::plugins::kinds::DRIVER_VTABLE_VERSION;

type OpenFn =
    unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *const nenyax_plugin_out_t) -> i32;
type CallFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *const c_char,
    usize,
    *const nenyax_plugin_out_t,
) -> i32;
type CloseFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// A driver implemented by a plugin's `nenyax_driver_vtable_t`.
pub struct LibraryDriver {
    info: PluginInfo,
    open: OpenFn,
    call: CallFn,
    close: CloseFn,
    /// Owned by the plugin, which stays loaded for the process's life.
    user_data: *mut c_void,
    /// Held around each call unless the plugin declared itself thread-safe (then different
    /// instances run at once; one instance is only ever used by one worker at a time).
    serial: Option<Mutex<()>>,
    crash: CrashMessage,
}

// SAFETY: the plugin contract lets user_data be used from any thread; without
// NENYAX_PLUGIN_THREAD_SAFE calls are serialized by `serial`.
unsafe impl Send for LibraryDriver {}
// SAFETY: as above.
unsafe impl Sync for LibraryDriver {}

impl std::fmt::Debug for LibraryDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibraryDriver")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// One open instance; dropping it calls the plugin's `close`.
pub struct Instance {
    lib: std::sync::Arc<LibraryDriver>,
    handle: *mut c_void,
}

// SAFETY: an instance moves between threads with its worker but is used by one at a time.
unsafe impl Send for Instance {}

impl LibraryDriver {
    /// Check the driver vtable of a descriptor already checked for ABI and kind.
    ///
    /// # Safety
    /// `d.vtable` is non-NULL and points to a `nenyax_driver_vtable_t`.
    pub(crate) unsafe fn new(d: &nenyax_plugin_t, info: PluginInfo) -> Result<Self> {
        let whose = format!("driver plugin `{}` ({})", info.name, info.source);
        let vt = &*d.vtable.cast::<nenyax_driver_vtable_t>();
        if vt.version != DRIVER_VTABLE_VERSION {
            return Err(Error::Config(format!(
                "{whose}: its vtable says driver vtable version {}; this Nenyax speaks version \
                 {DRIVER_VTABLE_VERSION}: rebuild it against include/nenyax.h of this version",
                vt.version
            )));
        }
        let need = |what: &str| Error::Config(format!("{whose}: the vtable's `{what}` is NULL"));
        Ok(LibraryDriver {
            open: vt.open.ok_or_else(|| need("open"))?,
            call: vt.call.ok_or_else(|| need("call"))?,
            close: vt.close.ok_or_else(|| need("close"))?,
            serial: (d.flags & PLUGIN_THREAD_SAFE == 0).then(|| Mutex::new(())),
            crash: CrashMessage::new(&info.name, &info.source, "a driver call"),
            user_data: d.user_data,
            info,
        })
    }

    /// The plugin's listing.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// How errors name it.
    pub fn label(&self) -> String {
        format!("driver plugin `{}` ({})", self.info.name, self.info.source)
    }

    fn invoke(&self, f: impl FnOnce(*const nenyax_plugin_out_t) -> i32) -> (i32, String) {
        let (rc, written) = invoke(self.serial.as_ref(), &self.crash, f);
        (rc, String::from_utf8_lossy(&written).into_owned())
    }

    /// A new instance and the handshake it gave.
    pub fn open(self: &std::sync::Arc<Self>) -> Result<(Instance, String)> {
        let mut handle: *mut c_void = std::ptr::null_mut();
        let (rc, text) =
            self.invoke(|out| unsafe { (self.open)(self.user_data, &mut handle, out) });
        if rc != 0 || handle.is_null() {
            return Err(Error::DriverUnavailable {
                driver: self.info.name.clone(),
                missing: format!(
                    "{} could not open an instance (returned {rc}{}): {}",
                    self.label(),
                    if handle.is_null() {
                        ", no instance"
                    } else {
                        ""
                    },
                    clip(text.trim())
                ),
            });
        }
        Ok((
            Instance {
                lib: self.clone(),
                handle,
            },
            text,
        ))
    }
}

impl Instance {
    /// One request line in, its reply line out; `Err` (the plugin's message) when the
    /// instance broke.
    pub fn call(&mut self, request: &str) -> std::result::Result<String, String> {
        let lib = &self.lib;
        let (rc, text) = lib.invoke(|out| unsafe {
            (lib.call)(
                lib.user_data,
                self.handle,
                request.as_ptr().cast(),
                request.len(),
                out,
            )
        });
        if rc != 0 {
            return Err(format!("returned {rc}: {}", failure_text(text.as_bytes())));
        }
        Ok(text)
    }

    /// The driver it belongs to.
    pub fn driver(&self) -> &LibraryDriver {
        &self.lib
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let lib = &self.lib;
        let _serial = lib
            .serial
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()));
        in_plugin(&lib.crash, || unsafe {
            (lib.close)(lib.user_data, self.handle)
        });
    }
}
