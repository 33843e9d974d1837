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

/// Async-signal-safe. Inside a plugin call: write the prepared message, put the previous
/// handler back and return, so the faulting instruction runs again and the signal takes its usual
/// course (Rust's own handler, the host's, or the default action: the process dies by it).
/// Outside one: hand the signal to the previous handler and stay installed, so runtimes that
/// use SIGSEGV themselves (Go, Julia, the JVM) keep working and a later plugin crash is named.
extern "C" fn on_fatal_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let msg = IN_PLUGIN.try_with(|c| c.get()).unwrap_or(std::ptr::null());
    let Some(i) = FATAL.iter().position(|s| *s == sig) else {
        return;
    };
    // SAFETY: PREVIOUS[i] was written before this handler was installed for `sig`; a non-NULL
    // `msg` is a CrashMessage that outlives the plugin call this thread is in; write(2),
    // sigaction(2) and raise(3) are async-signal-safe.
    unsafe {
        let prev = &*(*std::ptr::addr_of!(PREVIOUS[i])).as_ptr();
        if msg.is_null() && prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN
        {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    std::mem::transmute(prev.sa_sigaction);
                h(sig, info, ctx);
            } else {
                let h: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                h(sig);
            }
            return;
        }
        if !msg.is_null() {
            let bytes = &(*msg).0;
            libc::write(2, bytes.as_ptr().cast(), bytes.len());
        }
        // SIG_IGN is put back as the default: an ignored fault would only recur forever.
        if prev.sa_sigaction == libc::SIG_IGN {
            libc::signal(sig, libc::SIG_DFL);
        } else {
            libc::sigaction(sig, prev, std::ptr::null_mut());
        }
        // A signal sent by kill() would not recur on return; raise it again so it is not lost.
        if info.is_null() || (*info).si_code <= 0 {
            libc::raise(sig);
        }
    }
}
