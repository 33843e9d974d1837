//! A telemetry sink from a library plugin (or one a host registered through the C ABI): each
//! event goes in as JSON through `nenyax_telemetry_vtable_t`, and a non-zero return is an error
//! naming the plugin, which the telemetry hub counts and reports once (the run goes on). Calls
//! run on the exporter thread; a crash inside one is named on stderr (crash.rs).

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::contract::{JsonMap, Trajectory};
use crate::error::{Error, Result};
use crate::plugins::abi::{failure_text, invoke};
use crate::plugins::abi::{
    nenyax_plugin_out_t, nenyax_plugin_t, nenyax_telemetry_vtable_t, PluginInfo, PLUGIN_THREAD_SAFE,
};
use crate::plugins::crash::CrashMessage;
use crate::plugins::kinds::TELEMETRY_VTABLE_VERSION;
use crate::telemetry::{RunInfo, Sink};

/// One loaded telemetry plugin: its vtable, shared by every sink built from it (one per run).
pub struct LibraryTelemetry {
    info: PluginInfo,
    vt: nenyax_telemetry_vtable_t,
    /// Owned by the plugin, which stays loaded for the process's life (`drop` is never called).
    user_data: *mut c_void,
    /// Held around each call unless the plugin declared itself thread-safe: two runs in one
    /// process have two exporter threads.
    serial: Option<Mutex<()>>,
    /// `Sink::name` is `&'static str`; a plugin lives as long as the process, so its name does.
    name: &'static str,
    crash: [CrashMessage; 6],
}

// SAFETY: the plugin contract (docs/plugins-abi.md) lets user_data be used from any thread; without
// NENYAX_PLUGIN_THREAD_SAFE calls are serialized by `serial`.
unsafe impl Send for LibraryTelemetry {}
// SAFETY: as above.
unsafe impl Sync for LibraryTelemetry {}

impl LibraryTelemetry {
    /// Check the telemetry vtable of a descriptor already checked for ABI and kind.
    ///
    /// # Safety
    /// `d.vtable` is non-NULL and points to a `nenyax_telemetry_vtable_t`.
    pub(crate) unsafe fn new(d: &nenyax_plugin_t, info: PluginInfo) -> Result<Self> {
        let whose = format!("telemetry plugin `{}` ({})", info.name, info.source);
        // Copied: a host's descriptor and vtable need not outlive registration.
        let vt = *d.vtable.cast::<nenyax_telemetry_vtable_t>();
        if vt.version != TELEMETRY_VTABLE_VERSION {
            return Err(Error::Config(format!(
                "{whose}: its vtable says telemetry vtable version {}; this Nenyax speaks version \
                 {TELEMETRY_VTABLE_VERSION}: rebuild it against include/nenyax.h of this version",
                vt.version
            )));
        }
        if vt.episode.is_none() {
            return Err(Error::Config(format!(
                "{whose}: the vtable's `episode` is NULL (only start, metrics, artifact, flush and \
                 finish may be)"
            )));
        }
        let at = |what: &str| CrashMessage::new(&info.name, &info.source, what);
        Ok(LibraryTelemetry {
            crash: [
                at("telemetry start"),
                at("telemetry episode"),
                at("telemetry metrics"),
                at("telemetry artifact"),
                at("telemetry flush"),
                at("telemetry finish"),
            ],
            name: Box::leak(info.name.clone().into_boxed_str()),
            serial: (d.flags & PLUGIN_THREAD_SAFE == 0).then(|| Mutex::new(())),
            user_data: d.user_data,
            vt,
            info,
        })
    }

    /// The plugin's listing.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// A sink over this plugin, for one run; `options` (the other keys of its `[[telemetry]]`
    /// table or C ABI entry) reach the plugin in `start`'s JSON.
    pub fn sink(self: &Arc<Self>, options: JsonMap) -> LibrarySink {
        LibrarySink(self.clone(), options)
    }

    /// Call the plugin with an out buffer; its return code becomes an error with its message.
    fn call(
        &self,
        what: usize,
        f: impl FnOnce(*mut c_void, *const nenyax_plugin_out_t) -> i32,
    ) -> Result<()> {
        let (rc, written) = invoke(self.serial.as_ref(), &self.crash[what], |out| {
            f(self.user_data, out)
        });
        if rc == 0 {
            return Ok(());
        }
        let message = failure_text(&written);
        let names = ["start", "episode", "metrics", "artifact", "flush", "finish"];
        Err(Error::Config(format!(
            "telemetry plugin `{}` ({}) failed in {} (returned {rc}): {message}",
            self.info.name, self.info.source, names[what]
        )))
    }

    /// Call a callback that takes one JSON document.
    fn call_json(&self, what: usize, json: String, f: JsonFn) -> Result<()> {
        let mut input = json.into_bytes();
        input.push(0);
        // The input is NUL-terminated as a convenience; the length excludes the NUL.
        self.call(what, |ud, out| unsafe {
            f(ud, input.as_ptr().cast(), input.len() - 1, out)
        })
    }
}

type JsonFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const nenyax_plugin_out_t) -> i32;

/// A [`Sink`] that hands every event to a telemetry plugin; chosen by the plugin's name wherever
/// built-in sinks are (`--telemetry`, `[[telemetry]]`, the C ABI's `"telemetry"`).
pub struct LibrarySink(Arc<LibraryTelemetry>, JsonMap);

impl Sink for LibrarySink {
    fn name(&self) -> &'static str {
        self.0.name
    }

    fn start(&mut self, run: &RunInfo) -> Result<()> {
        let Some(f) = self.0.vt.start else {
            return Ok(());
        };
        let info = json!({"kind": run.kind, "name": run.name, "params": run.params,
                          "options": self.1});
        self.0.call_json(0, info.to_string(), f)
    }

    fn episode(&mut self, traj: &Trajectory) -> Result<()> {
        let f = self.0.vt.episode.expect("checked when loaded");
        self.0.call_json(1, traj.to_json(), f)
    }

    fn metrics(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        let Some(f) = self.0.vt.metrics else {
            return Ok(());
        };
        let map: Map<String, Value> = values.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let mut input = Value::Object(map).to_string().into_bytes();
        input.push(0);
        self.0.call(2, |ud, out| unsafe {
            f(ud, step, input.as_ptr().cast(), input.len() - 1, out)
        })
    }

    fn artifact(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let Some(f) = self.0.vt.artifact else {
            return Ok(());
        };
        let name = CString::new(name.replace('\0', "")).expect("NULs removed");
        self.0.call(3, |ud, out| unsafe {
            f(ud, name.as_ptr(), bytes.as_ptr(), bytes.len(), out)
        })
    }

    fn flush(&mut self) -> Result<()> {
        let Some(f) = self.0.vt.flush else {
            return Ok(());
        };
        self.0.call(4, |ud, out| unsafe { f(ud, out) })
    }

    fn finish(&mut self, ok: bool) -> Result<()> {
        // Like the built-ins: what is buffered is sent before the run is closed.
        let flushed = self.flush();
        let finished = match self.0.vt.finish {
            Some(f) => self
                .0
                .call(5, |ud, out| unsafe { f(ud, i32::from(ok), out) }),
            None => Ok(()),
        };
        flushed.and(finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Mode;
    use crate::plugins::abi::kind_code;
    use crate::plugins::kinds::{Kind, PLUGIN_ABI_VERSION};
    use std::sync::atomic::{AtomicUsize, Ordering};

    static EPISODES: AtomicUsize = AtomicUsize::new(0);
    static STARTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

    unsafe extern "C" fn start(
        _: *mut c_void,
        p: *const c_char,
        len: usize,
        _: *const nenyax_plugin_out_t,
    ) -> i32 {
        let s = std::slice::from_raw_parts(p.cast::<u8>(), len);
        STARTS
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(s).into_owned());
        0
    }

    /// Fails its second call, with a message.
    unsafe extern "C" fn episode(
        _: *mut c_void,
        _: *const c_char,
        _: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        if EPISODES.fetch_add(1, Ordering::SeqCst) == 1 {
            let msg = "disk full";
            ((*out).write.unwrap())((*out).ctx, msg.as_ptr().cast(), msg.len());
            return 7;
        }
        0
    }

    fn vtable(version: u32, with_episode: bool) -> &'static nenyax_telemetry_vtable_t {
        Box::leak(Box::new(nenyax_telemetry_vtable_t {
            version,
            start: Some(start),
            episode: with_episode.then_some(episode as JsonFn),
            metrics: None,
            artifact: None,
            flush: None,
            finish: None,
            drop: None,
        }))
    }

    fn descriptor(
        name: &'static std::ffi::CStr,
        vt: &'static nenyax_telemetry_vtable_t,
    ) -> nenyax_plugin_t {
        nenyax_plugin_t {
            abi_version: PLUGIN_ABI_VERSION,
            kind: kind_code(Kind::Telemetry),
            kind_version: TELEMETRY_VTABLE_VERSION,
            flags: 0,
            name: name.as_ptr(),
            version: c"0.1.0".as_ptr(),
            vtable: (vt as *const nenyax_telemetry_vtable_t).cast(),
            user_data: std::ptr::null_mut(),
        }
    }

    #[test]
    fn a_registered_sink_is_picked_by_the_c_abi_option_gets_its_options_and_its_errors_are_counted()
    {
        let d = descriptor(c"unit_sink", vtable(TELEMETRY_VTABLE_VERSION, true));
        // SAFETY: a valid descriptor whose vtable lives for the process.
        unsafe { crate::plugins::library::register(&d) }.unwrap();
        let mut options = json!({"telemetry": [{"name": "unit_sink", "endpoint": "x"}]});
        let run = RunInfo {
            kind: "run".into(),
            name: "unit".into(),
            ..RunInfo::default()
        };
        let t = crate::telemetry::take_from_options(&mut options, run)
            .unwrap()
            .expect("a hub");
        assert_eq!(t.sinks(), ["unit_sink"]);
        for seed in 0..3 {
            t.episode(&Trajectory::start("unit", Mode::Step, None, Some(seed)));
        }
        let stats = t.finish(true);
        assert_eq!(EPISODES.load(Ordering::SeqCst), 3);
        assert_eq!(stats.errors, 1, "{stats:?}");
        let starts = STARTS.lock().unwrap();
        let started: Value = serde_json::from_str(&starts[0]).unwrap();
        assert_eq!(started["kind"], "run");
        assert_eq!(started["options"], json!({"endpoint": "x"}));
    }

    #[test]
    fn a_vtable_without_episode_or_of_another_version_is_refused() {
        let d = descriptor(c"unit_no_episode", vtable(TELEMETRY_VTABLE_VERSION, false));
        // SAFETY: as above.
        let e = unsafe { crate::plugins::library::register(&d) }
            .unwrap_err()
            .to_string();
        assert!(e.contains("`episode` is NULL"), "{e}");
        let d = descriptor(c"unit_v2", vtable(2, true));
        // SAFETY: as above.
        let e = unsafe { crate::plugins::library::register(&d) }
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("telemetry vtable version 2") && e.contains("speaks version 1"),
            "{e}"
        );
        let e = crate::telemetry::build(&crate::telemetry::SinkSpec::named("unit_v2"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown telemetry sink \"unit_v2\""), "{e}");
    }
}
