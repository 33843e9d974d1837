//! A judge from a library plugin (or one a host registered through the C ABI): the trajectory
//! goes in as JSON, a Judgment comes back as JSON, and anything else is a clean `Error::Judge`
//! naming the plugin. A crash inside the call is named on stderr by the fatal-signal handler of
//! `library.rs`, then ends the process: the plugin runs in it.

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::contract::{JsonMap, JudgeSource, Judgment, Trajectory};
use crate::error::{Error, Result};
use crate::judges::Judge;
use crate::plugins::abi::{clip, failure_text, invoke};
use crate::plugins::abi::{
    nenyax_judge_vtable_t, nenyax_plugin_out_t, nenyax_plugin_t, PluginInfo, PLUGIN_THREAD_SAFE,
};
use crate::plugins::crash::CrashMessage;
use crate::plugins::kinds::JUDGE_VTABLE_VERSION;

type JudgeFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const nenyax_plugin_out_t) -> i32;

/// A judge implemented by a plugin's `nenyax_judge_vtable_t`.
pub struct LibraryJudge {
    info: PluginInfo,
    judge: JudgeFn,
    /// Owned by the plugin: plugins stay registered for the process's life, so the vtable's
    /// `drop` is never called (also not for a descriptor refused at registration).
    user_data: *mut c_void,
    /// Held around each call unless the plugin declared itself thread-safe.
    serial: Option<Mutex<()>>,
    crash: CrashMessage,
}

// SAFETY: the plugin's contract (docs/plugins-abi.md) is that user_data may be used from any
// thread; without NENYAX_PLUGIN_THREAD_SAFE calls are serialized by `serial`.
unsafe impl Send for LibraryJudge {}
// SAFETY: as above.
unsafe impl Sync for LibraryJudge {}

impl LibraryJudge {
    /// Check the judge vtable of a descriptor already checked for ABI and kind.
    ///
    /// # Safety
    /// `d.vtable` is non-NULL and points to a `nenyax_judge_vtable_t` that outlives the judge.
    pub(crate) unsafe fn new(d: &nenyax_plugin_t, info: PluginInfo) -> Result<Self> {
        let whose = format!("judge plugin `{}` ({})", info.name, info.source);
        let vt = &*d.vtable.cast::<nenyax_judge_vtable_t>();
        if vt.version != JUDGE_VTABLE_VERSION {
            return Err(Error::Config(format!(
                "{whose}: its vtable says judge vtable version {}; this Nenyax speaks version \
                 {JUDGE_VTABLE_VERSION}: rebuild it against include/nenyax.h of this version",
                vt.version
            )));
        }
        let judge = vt
            .judge
            .ok_or_else(|| Error::Config(format!("{whose}: the vtable's `judge` is NULL")))?;
        Ok(LibraryJudge {
            crash: CrashMessage::new(&info.name, &info.source, "judge"),
            serial: (d.flags & PLUGIN_THREAD_SAFE == 0).then(|| Mutex::new(())),
            info,
            judge,
            user_data: d.user_data,
        })
    }

    fn whose(&self) -> String {
        format!("judge plugin `{}` ({})", self.info.name, self.info.source)
    }

    /// Call the plugin: its return code and what it wrote.
    fn call(&self, input: &[u8]) -> (i32, Vec<u8>) {
        // The input is NUL-terminated as a convenience; the length excludes the NUL.
        invoke(self.serial.as_ref(), &self.crash, |out| unsafe {
            (self.judge)(self.user_data, input.as_ptr().cast(), input.len() - 1, out)
        })
    }
}

/// What a judge plugin may reply.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    score: f64,
    #[serde(default)]
    passed: Option<bool>,
    #[serde(default)]
    components: Map<String, Value>,
    #[serde(default)]
    source: Option<JudgeSource>,
    #[serde(default)]
    details: JsonMap,
}

impl Judge for LibraryJudge {
    fn id(&self) -> String {
        format!("plugin:{}", self.info.name)
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let mut input = traj.to_json().into_bytes();
        input.push(0);
        let (rc, written) = self.call(&input);
        let text = String::from_utf8_lossy(&written);
        if rc != 0 {
            return Err(Error::Judge(format!(
                "{} failed (returned {rc}): {}",
                self.whose(),
                failure_text(&written)
            )));
        }
        let reply: Reply = serde_json::from_str(&text).map_err(|e| {
            Error::Judge(format!(
                "{} replied with something that is not a judgment ({e}): {:?}; reply with JSON \
                 like {{\"score\": 1.0, \"passed\": true}}",
                self.whose(),
                clip(&text)
            ))
        })?;
        let mut j = Judgment::new(
            reply.score,
            reply.source.unwrap_or(JudgeSource::Verifier),
            self.id(),
        )?;
        for (k, v) in &reply.components {
            if !v.as_f64().is_some_and(f64::is_finite) {
                return Err(Error::Judge(format!(
                    "{}: component `{k}` must be a finite number, got {v}",
                    self.whose()
                )));
            }
        }
        j.passed = reply.passed;
        j.components = reply.components;
        j.details = reply.details;
        j.details.insert(
            "plugin".into(),
            serde_json::json!({"name": self.info.name, "version": self.info.version,
                               "source": self.info.source}),
        );
        Ok(j)
    }
}
