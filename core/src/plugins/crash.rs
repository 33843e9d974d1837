//! Naming the culprit of a crash: a library plugin runs inside this process, so a segfault in it
//! ends the process. Every call into a plugin records, per thread, a message prepared before the
//! call; a handler for SIGSEGV, SIGBUS, SIGILL and SIGFPE (installed with the first plugin) writes
//! it to stderr with write(2), puts the previous handler back and returns, so the signal then
//! takes its usual course and the process still dies by it (docs/plugins-abi.md).

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Once;

thread_local! {
    /// The message to print if this thread dies inside a plugin call (NULL outside one).
    static IN_PLUGIN: Cell<*const CrashMessage> = const { Cell::new(std::ptr::null()) };
}

/// A message prepared before the call, so the signal handler only has to write(2) it.
pub(crate) struct CrashMessage(Box<[u8]>);

impl CrashMessage {
    /// "nenyax: crashed inside plugin library (source) during its entry point".
    pub(crate) fn entry(source: &str, symbol: &str) -> Self {
        CrashMessage(
            format!("nenyax: crashed inside plugin library {source} during {symbol}\n")
                .into_bytes()
                .into_boxed_slice(),
        )
    }

    /// "nenyax: crashed inside library plugin `name` (source) during what".
    pub(crate) fn new(name: &str, source: &str, what: &str) -> Self {
        CrashMessage(
            format!(
                "nenyax: crashed inside library plugin `{name}` ({source}) during {what}; a \
                 library plugin runs in this process, so its crash ends it (docs/plugins-abi.md)\n"
            )
            .into_bytes()
            .into_boxed_slice(),
        )
    }
}

/// Run `f` (a call into a plugin) with `msg` recorded as what this thread is doing.
pub(crate) fn in_plugin<T>(msg: &CrashMessage, f: impl FnOnce() -> T) -> T {
    struct Reset(*const CrashMessage);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_PLUGIN.with(|c| c.set(self.0));
        }
    }
    ensure_crash_handler();
    let previous = IN_PLUGIN.with(|c| c.replace(msg));
    let _reset = Reset(previous);
    f()
}

/// The signals a crash in native code raises.
const FATAL: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// The handlers that were there before ours, restored by ours before the signal is re-raised.
static mut PREVIOUS: [std::mem::MaybeUninit<libc::sigaction>; 4] =
    [std::mem::MaybeUninit::uninit(); 4];

/// Install the handler once per process (before the first call into any plugin).
pub(crate) fn ensure_crash_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (i, sig) in FATAL.into_iter().enumerate() {
            // SAFETY: plain sigaction calls; PREVIOUS is written here once, before the handler
            // that reads it can run for this signal.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    on_fatal_signal;
                action.sa_sigaction = handler as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                let slot = std::ptr::addr_of_mut!(PREVIOUS[i]);
                libc::sigaction(sig, &action, (*slot).as_mut_ptr());
            }
        }
    });
}

/// Async-signal-safe: write the prepared message, put the previous handler back and return, so
/// the faulting instruction runs again and the signal takes its usual course (Rust's own
/// handler, or the default action: the process dies by that signal).
extern "C" fn on_fatal_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let msg = IN_PLUGIN.try_with(|c| c.get()).unwrap_or(std::ptr::null());
    // SAFETY: a non-NULL pointer is a CrashMessage that outlives the call it was set for, which
    // is the call this thread is in; write(2) and sigaction(2) are async-signal-safe.
    unsafe {
        if !msg.is_null() {
            let bytes = &(*msg).0;
            libc::write(2, bytes.as_ptr().cast(), bytes.len());
        }
        let i = FATAL.iter().position(|s| *s == sig).unwrap_or(0);
        let slot = std::ptr::addr_of!(PREVIOUS[i]);
        libc::sigaction(sig, (*slot).as_ptr(), std::ptr::null_mut());
        if !FATAL.contains(&sig) {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    // A signal sent by kill() would not recur on return; raise it again so it is not lost.
    // SAFETY: raise is async-signal-safe.
    if info.is_null() || unsafe { (*info).si_code } <= 0 {
        unsafe { libc::raise(sig) };
    }
}
