//! A learner from a library plugin (or one a host registered through the C ABI): its policy
//! (`act` for step environments, `chat` for conversations) and its learning (`update`,
//! `snapshot`, `restore`) are calls through its `nenyax_learner_plugin_vtable_t`, JSON in and
//! out, so a learner written in Go, C++ or anything with a C ABI trains under `nenyax train`.
//! Errors are clean `Error::Training`/`Error::Policy` values naming the plugin; a crash inside a
//! call is named on stderr (crash.rs), then ends the process: the plugin runs in it.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::contract::{Message, Observation};
use crate::error::{Error, Result};
use crate::models::ChatModel;
use crate::plugins::abi::{clip, failure_text, invoke};
use crate::plugins::abi::{
    nenyax_learner_plugin_vtable_t, nenyax_plugin_out_t, nenyax_plugin_t, PluginInfo,
    PLUGIN_THREAD_SAFE,
};
use crate::plugins::crash::CrashMessage;
use crate::plugins::kinds::LEARNER_PLUGIN_VTABLE_VERSION;
use crate::policy::{CallLog, EpisodeContext, Policy};
use crate::train::{Group, Learner, UpdateReport};

type DataFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const nenyax_plugin_out_t) -> i32;
type StateFn = unsafe extern "C" fn(*mut c_void, *const nenyax_plugin_out_t) -> i32;

/// A loaded learner plugin: its vtable, shared by every [`LibraryLearner`] made from it (the
/// plugin has one `user_data`, so they share its state too).
pub struct LearnerPlugin {
    info: PluginInfo,
    act: Option<DataFn>,
    chat: Option<DataFn>,
    update: DataFn,
    snapshot: Option<StateFn>,
    restore: Option<StateFn>,
    /// Owned by the plugin; `drop` is never called (plugins stay for the process's life).
    user_data: *mut c_void,
    /// Held around each call unless the plugin declared itself thread-safe.
    serial: Option<Mutex<()>>,
    crash_act: CrashMessage,
    crash_update: CrashMessage,
}

// SAFETY: the plugin's contract (docs/plugins-abi.md) is that user_data may be used from any
// thread; without NENYAX_PLUGIN_THREAD_SAFE calls are serialized by `serial`.
unsafe impl Send for LearnerPlugin {}
// SAFETY: as above.
unsafe impl Sync for LearnerPlugin {}

impl LearnerPlugin {
    /// Check the learner vtable of a descriptor already checked for ABI and kind.
    ///
    /// # Safety
    /// `d.vtable` is non-NULL and points to a `nenyax_learner_plugin_vtable_t` that outlives
    /// the plugin.
    pub(crate) unsafe fn new(d: &nenyax_plugin_t, info: PluginInfo) -> Result<Self> {
        let whose = format!("learner plugin `{}` ({})", info.name, info.source);
        let vt = &*d.vtable.cast::<nenyax_learner_plugin_vtable_t>();
        if vt.version != LEARNER_PLUGIN_VTABLE_VERSION {
            return Err(Error::Config(format!(
                "{whose}: its vtable says learner vtable version {}; this Nenyax speaks version \
                 {LEARNER_PLUGIN_VTABLE_VERSION}: rebuild it against include/nenyax.h of this \
                 version",
                vt.version
            )));
        }
        let update = vt
            .update
            .ok_or_else(|| Error::Config(format!("{whose}: the vtable's `update` is NULL")))?;
        if vt.act.is_none() && vt.chat.is_none() {
            return Err(Error::Config(format!(
                "{whose}: the vtable has neither `act` nor `chat`; a learner must give the policy \
                 it trains (act for step environments, chat for conversations)"
            )));
        }
        if vt.snapshot.is_some() != vt.restore.is_some() {
            return Err(Error::Config(format!(
                "{whose}: the vtable has one of `snapshot` and `restore` but not the other; give \
                 both or neither"
            )));
        }
        Ok(LearnerPlugin {
            crash_act: CrashMessage::new(&info.name, &info.source, "learner act/chat"),
            crash_update: CrashMessage::new(
                &info.name,
                &info.source,
                "learner update/snapshot/restore",
            ),
            serial: (d.flags & PLUGIN_THREAD_SAFE == 0).then(|| Mutex::new(())),
            act: vt.act,
            chat: vt.chat,
            update,
            snapshot: vt.snapshot,
            restore: vt.restore,
            user_data: d.user_data,
            info,
        })
    }

    /// Its listing (name, version, source).
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// Whether it offers `snapshot`/`restore`.
    pub fn can_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    fn whose(&self) -> String {
        format!("learner plugin `{}` ({})", self.info.name, self.info.source)
    }

    /// Call `f` (a callback) with an output buffer: its return code and what it wrote.
    fn call(
        &self,
        crash: &CrashMessage,
        f: impl FnOnce(&nenyax_plugin_out_t) -> i32,
    ) -> Result<String> {
        // SAFETY: `invoke` hands a valid out struct for the call's duration.
        let (rc, written) = invoke(self.serial.as_ref(), crash, |out| f(unsafe { &*out }));
        if rc != 0 {
            return Err(Error::Training(format!(
                "{} failed (returned {rc}): {}",
                self.whose(),
                failure_text(&written)
            )));
        }
        Ok(String::from_utf8_lossy(&written).into_owned())
    }

    /// Call a data callback with `input` (passed NUL-terminated; the length excludes the NUL).
    fn call_data(&self, f: DataFn, crash: &CrashMessage, input: String) -> Result<String> {
        let mut input = input.into_bytes();
        input.push(0);
        let ud = self.user_data;
        // SAFETY: the vtable's contract; `input` outlives the call.
        self.call(crash, |out| unsafe {
            f(ud, input.as_ptr().cast(), input.len() - 1, out)
        })
    }

    /// The plugin's action for one observation of an episode (its `act`).
    pub fn act(&self, obs: &Observation, ctx: &EpisodeContext, step: u64) -> Result<Value> {
        let f = self.act.ok_or_else(|| {
            Error::Policy(format!(
                "{} has no `act`: it gives a chat policy only",
                self.whose()
            ))
        })?;
        let request = json!({
            "observation": obs,
            "episode": ctx,
            "step": step,
            "seed": ctx.step_seed(step),
        });
        let text = self
            .call_data(f, &self.crash_act, request.to_string())
            .map_err(|e| Error::Policy(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::Policy(format!(
                "{}: `act` wrote something that is not JSON ({e}): {:?}; write the action as \
                 JSON, e.g. 3 or \"text\"",
                self.whose(),
                clip(&text)
            ))
        })
    }

    /// The plugin's reply to a conversation (its `chat`).
    pub fn chat(&self, messages: &[Message]) -> Result<String> {
        let f = self.chat.ok_or_else(|| {
            Error::Policy(format!(
                "{} has no `chat`: it gives an action policy only",
                self.whose()
            ))
        })?;
        let input = serde_json::to_string(messages)
            .map_err(|e| Error::Policy(format!("{}: {e}", self.whose())))?;
        self.call_data(f, &self.crash_act, input)
            .map_err(|e| Error::Policy(e.to_string()))
    }

    /// Learn from `groups` (its `update`), as JSON.
    pub fn update_json(&self, groups: &Value) -> Result<UpdateReport> {
        let text = self.call_data(self.update, &self.crash_update, groups.to_string())?;
        let reply: UpdateReply = serde_json::from_str(&text).map_err(|e| {
            Error::Training(format!(
                "{}: `update` replied with something that is not an update report ({e}): {:?}; \
                 reply with JSON like {{\"metrics\": {{\"loss\": 0.5}}}}",
                self.whose(),
                clip(&text)
            ))
        })?;
        for (k, v) in &reply.metrics {
            if !v.is_finite() {
                return Err(Error::Training(format!(
                    "{}: metric `{k}` is {v}; metrics must be finite numbers",
                    self.whose()
                )));
            }
        }
        Ok(UpdateReport {
            metrics: reply.metrics,
            sequences: reply.sequences,
            tokens: reply.tokens,
            skipped: reply.skipped,
            ..UpdateReport::default()
        })
    }

    /// Save its state (its `snapshot`); `Ok(false)` when it has none.
    pub fn snapshot(&self) -> Result<bool> {
        let Some(f) = self.snapshot else {
            return Ok(false);
        };
        let ud = self.user_data;
        // SAFETY: the vtable's contract.
        self.call(&self.crash_update, |out| unsafe { f(ud, out) })?;
        Ok(true)
    }

    /// Go back to its snapshot (its `restore`).
    pub fn restore(&self) -> Result<()> {
        let Some(f) = self.restore else {
            return Err(Error::Training(format!(
                "{} cannot restore a snapshot (its vtable has no `restore`)",
                self.whose()
            )));
        };
        let ud = self.user_data;
        // SAFETY: the vtable's contract.
        self.call(&self.crash_update, |out| unsafe { f(ud, out) })?;
        Ok(())
    }

    /// Its policy: per episode through `act` (so it can sample from the episode's seeds), or
    /// a chat model through `chat`.
    pub fn policy(self: &Arc<Self>) -> Policy {
        if self.act.is_some() {
            let plugin = Arc::clone(self);
            return Policy::per_episode(move |ctx: &EpisodeContext, _log: &CallLog| {
                let (plugin, ctx) = (Arc::clone(&plugin), ctx.clone());
                let step = AtomicU64::new(0);
                Ok(Policy::action(move |obs: &Observation| {
                    let k = step.fetch_add(1, Ordering::Relaxed);
                    plugin.act(obs, &ctx, k)
                }))
            });
        }
        Policy::Chat(Arc::new(PluginChat(Arc::clone(self))))
    }
}

/// A learner plugin's `chat` as a chat model.
struct PluginChat(Arc<LearnerPlugin>);

impl ChatModel for PluginChat {
    fn name(&self) -> String {
        format!("plugin:{}", self.0.info.name)
    }

    fn complete(&self, messages: &[Message]) -> Result<Message> {
        Ok(Message::assistant(self.0.chat(messages)?))
    }
}

/// What `update` may reply.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateReply {
    #[serde(default)]
    metrics: BTreeMap<String, f64>,
    #[serde(default)]
    sequences: usize,
    #[serde(default)]
    tokens: usize,
    #[serde(default)]
    skipped: bool,
}

/// A [`Learner`] over a learner plugin.
pub struct LibraryLearner {
    plugin: Arc<LearnerPlugin>,
}

impl LibraryLearner {
    /// The learner over a loaded plugin.
    pub fn new(plugin: Arc<LearnerPlugin>) -> Self {
        LibraryLearner { plugin }
    }
}

/// The groups as the plugin sees them: `[{"index", "task", "seed", "trajectories": [...]}]`.
pub fn groups_json(groups: &[Group]) -> Value {
    Value::Array(
        groups
            .iter()
            .map(|g| {
                json!({
                    "index": g.index,
                    "task": g.task,
                    "seed": g.seed,
                    "trajectories": g.trajectories,
                })
            })
            .collect(),
    )
}

impl Learner for LibraryLearner {
    fn name(&self) -> String {
        self.plugin.info.name.clone()
    }

    fn policy(&mut self) -> Result<Policy> {
        Ok(self.plugin.policy())
    }

    fn update(&mut self, groups: &[Group]) -> Result<UpdateReport> {
        self.plugin.update_json(&groups_json(groups))
    }

    fn snapshot(&mut self) -> Result<bool> {
        self.plugin.snapshot()
    }

    fn restore(&mut self) -> Result<()> {
        self.plugin.restore()
    }

    fn describe(&self) -> Value {
        json!({
            "name": self.plugin.info.name,
            "plugin": {
                "kind": "learner",
                "version": self.plugin.info.version,
                "source": self.plugin.info.source,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::abi::kind_code;
    use crate::plugins::kinds::{Kind, PLUGIN_ABI_VERSION};
    use std::ffi::CString;

    unsafe fn put(out: *const nenyax_plugin_out_t, s: &str) {
        let o = &*out;
        (o.write.unwrap())(o.ctx, s.as_ptr().cast(), s.len());
    }

    unsafe fn input(p: *const c_char, len: usize) -> String {
        String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len)).into_owned()
    }

    /// Acts with the observation's `data.n + 1`; echoes the request's step in `act`.
    unsafe extern "C" fn act_plus_one(
        _: *mut c_void,
        p: *const c_char,
        len: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let v: Value = serde_json::from_str(&input(p, len)).unwrap();
        let n = v["observation"]["data"]["n"].as_i64().unwrap_or(0);
        put(out, &(n + 1).to_string());
        0
    }

    unsafe extern "C" fn act_not_json(
        _: *mut c_void,
        _: *const c_char,
        _: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        put(out, "three");
        0
    }

    /// Counts the groups' trajectories.
    unsafe extern "C" fn update_count(
        _: *mut c_void,
        p: *const c_char,
        len: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let v: Value = serde_json::from_str(&input(p, len)).unwrap();
        let n: usize = v
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["trajectories"].as_array().unwrap().len())
            .sum();
        put(out, &format!("{{\"metrics\": {{\"trajectories\": {n}}}}}"));
        0
    }

    unsafe extern "C" fn update_fails(
        _: *mut c_void,
        _: *const c_char,
        _: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        put(out, "no signal today");
        7
    }

    unsafe extern "C" fn update_nan(
        _: *mut c_void,
        _: *const c_char,
        _: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        put(out, "{\"metrics\": {\"loss\": 1e999}}");
        0
    }

    unsafe extern "C" fn state_ok(_: *mut c_void, _: *const nenyax_plugin_out_t) -> i32 {
        0
    }

    fn vt(
        act: Option<DataFn>,
        update: Option<DataFn>,
        snapshot: Option<StateFn>,
        restore: Option<StateFn>,
    ) -> nenyax_learner_plugin_vtable_t {
        nenyax_learner_plugin_vtable_t {
            version: LEARNER_PLUGIN_VTABLE_VERSION,
            act,
            chat: None,
            update,
            snapshot,
            restore,
            drop: None,
        }
    }

    /// Register a learner (leaked: plugins stay for the process's life).
    fn register(name: &str, vt: nenyax_learner_plugin_vtable_t) -> Result<Arc<LearnerPlugin>> {
        let vt: &'static nenyax_learner_plugin_vtable_t = Box::leak(Box::new(vt));
        let name_c: &'static CString = Box::leak(Box::new(CString::new(name).unwrap()));
        let d: &'static nenyax_plugin_t = Box::leak(Box::new(nenyax_plugin_t {
            abi_version: PLUGIN_ABI_VERSION,
            kind: kind_code(Kind::Learner),
            kind_version: LEARNER_PLUGIN_VTABLE_VERSION,
            flags: 0,
            name: name_c.as_ptr(),
            version: c"1.0".as_ptr(),
            vtable: (vt as *const nenyax_learner_plugin_vtable_t).cast(),
            user_data: std::ptr::null_mut(),
        }));
        // SAFETY: everything above is leaked, so it lives as long as the process.
        unsafe { crate::plugins::library::register(d) }?;
        Ok(crate::plugins::library::find_learner(name)?.expect("just registered"))
    }

    fn episode_action(p: &Arc<LearnerPlugin>, n: i64) -> Result<Value> {
        let policy = p.policy();
        let ctx = EpisodeContext::plain(None, Some(1));
        match policy.for_episode(&ctx, &CallLog::default())? {
            Policy::Action(f) => {
                let obs = Observation {
                    data: json!({ "n": n }),
                    ..Default::default()
                };
                f(&obs)
            }
            other => panic!("not an action policy: {other:?}"),
        }
    }

    /// The chat-only learner's state: the preference for computing the answer over replying
    /// "none", its one snapshot, and a call counter for sampling.
    static CHAT_PREF: Mutex<(f64, f64)> = Mutex::new((0.0, 0.0));
    static CHAT_CALLS: AtomicU64 = AtomicU64::new(0);

    /// `a op b op c ...` with + - * and the usual precedence.
    fn eval_expr(e: &str) -> Option<i64> {
        let toks: Vec<&str> = e.split_whitespace().collect();
        let mut sum = 0i64;
        let mut term: i64 = toks.first()?.parse().ok()?;
        let mut sign = 1i64;
        for pair in toks[1..].chunks(2) {
            let n: i64 = pair.get(1)?.parse().ok()?;
            match pair[0] {
                "*" => term *= n,
                "+" | "-" => {
                    sum += sign * term;
                    sign = if pair[0] == "+" { 1 } else { -1 };
                    term = n;
                }
                _ => return None,
            }
        }
        Some(sum + sign * term)
    }

    /// A chat policy choosing between two strategies: compute the answer, or reply "none".
    unsafe extern "C" fn chat_bandit(
        _: *mut c_void,
        p: *const c_char,
        len: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let msgs: Value = serde_json::from_str(&input(p, len)).unwrap();
        let q = msgs
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string();
        let pref = CHAT_PREF.lock().unwrap().0;
        let p_compute = 1.0 / (1.0 + (-pref).exp());
        let k = CHAT_CALLS.fetch_add(1, Ordering::Relaxed);
        let u = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
        let reply = match q.strip_prefix("What is ").and_then(|r| r.split('?').next()) {
            Some(expr) if u < p_compute => match eval_expr(expr) {
                Some(n) => format!("<answer>{n}</answer>"),
                None => "<answer>none</answer>".into(),
            },
            _ => "<answer>none</answer>".into(),
        };
        put(out, &reply);
        0
    }

    /// REINFORCE on the two strategies' mean scores.
    unsafe extern "C" fn update_bandit(
        _: *mut c_void,
        p: *const c_char,
        len: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let groups: Value = serde_json::from_str(&input(p, len)).unwrap();
        let (mut sums, mut counts) = ([0.0f64; 2], [0.0f64; 2]);
        for t in groups
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["trajectories"].as_array().unwrap())
        {
            let reply = t["messages"]
                .as_array()
                .and_then(|m| m.iter().rev().find(|m| m["role"] == "assistant"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default();
            let arm = usize::from(reply.contains("none"));
            sums[arm] += t["judgment"]["score"].as_f64().unwrap_or(0.0);
            counts[arm] += 1.0;
        }
        let mut st = CHAT_PREF.lock().unwrap();
        if counts[0] > 0.0 && counts[1] > 0.0 {
            st.0 += 4.0 * (sums[0] / counts[0] - sums[1] / counts[1]);
        }
        put(
            out,
            &json!({"metrics": {"preference": st.0, "computed": counts[0]}}).to_string(),
        );
        0
    }

    unsafe extern "C" fn snapshot_bandit(_: *mut c_void, _: *const nenyax_plugin_out_t) -> i32 {
        let mut st = CHAT_PREF.lock().unwrap();
        st.1 = st.0;
        0
    }

    unsafe extern "C" fn restore_bandit(_: *mut c_void, _: *const nenyax_plugin_out_t) -> i32 {
        let mut st = CHAT_PREF.lock().unwrap();
        st.0 = st.1;
        0
    }

    #[test]
    fn a_chat_only_learner_plugin_trains_on_a_chat_environment() {
        let mut v = vt(
            None,
            Some(update_bandit),
            Some(snapshot_bandit),
            Some(restore_bandit),
        );
        v.chat = Some(chat_bandit);
        let p = register("t-chat-bandit", v).unwrap();
        assert!(matches!(p.policy(), Policy::Chat(_)));
        let env = crate::load("builtin:arithmetic?size=64").unwrap();
        let mut l = LibraryLearner::new(p);
        let opts = crate::train::TrainOptions {
            rounds: 4,
            group_size: 4,
            batch: 6,
            eval_tasks: Some(16),
            eval_repeats: 2,
            ..Default::default()
        };
        let r = crate::train::train(&env, &mut l, &opts).unwrap();
        // Half the replies compute at first; the update learns that computing scores.
        assert!((0.2..0.8).contains(&r.baseline), "baseline {}", r.baseline);
        assert!(r.final_eval > 0.9, "{} -> {}", r.baseline, r.final_eval);
        let last = r.rounds.last().unwrap();
        assert!(last.error.is_none(), "{:?}", last.error);
        assert_eq!(r.learner["plugin"]["kind"], "learner");
    }

    #[test]
    fn a_registered_learner_acts_updates_and_names_itself() {
        let p = register(
            "t-good",
            vt(
                Some(act_plus_one),
                Some(update_count),
                Some(state_ok),
                Some(state_ok),
            ),
        )
        .unwrap();
        assert_eq!(episode_action(&p, 41).unwrap(), json!(42));
        let mut l = LibraryLearner::new(p);
        let t = crate::plugins::conformance::toy_trajectory(0, "42", "42");
        let g = Group {
            index: 0,
            task: None,
            seed: None,
            trajectories: vec![t.clone(), t],
        };
        let u = l.update(&[g]).unwrap();
        assert_eq!(u.metrics["trajectories"], 2.0);
        assert!(l.snapshot().unwrap());
        l.restore().unwrap();
        assert_eq!(l.describe()["plugin"]["version"], "1.0");
    }

    #[test]
    fn bad_vtables_are_refused_naming_what_is_missing() {
        let e = register("t-no-update", vt(Some(act_plus_one), None, None, None))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("`update` is NULL") && e.contains("t-no-update"),
            "{e}"
        );
        let e = register("t-no-policy", vt(None, Some(update_count), None, None))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("neither `act` nor `chat`"), "{e}");
        let e = register(
            "t-half-snapshot",
            vt(Some(act_plus_one), Some(update_count), Some(state_ok), None),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("`snapshot` and `restore`"), "{e}");
        let mut other = vt(Some(act_plus_one), Some(update_count), None, None);
        other.version = 9;
        let e = register("t-v9", other).err().unwrap().to_string();
        assert!(
            e.contains("learner vtable version 9") && e.contains("speaks version 1"),
            "{e}"
        );
    }

    #[test]
    fn bad_replies_are_clean_errors() {
        let p = register(
            "t-bad-replies",
            vt(Some(act_not_json), Some(update_fails), None, None),
        )
        .unwrap();
        let e = episode_action(&p, 1).unwrap_err();
        assert!(matches!(e, Error::Policy(_)), "{e:?}");
        assert!(e.to_string().contains("not JSON"), "{e}");
        let e = p.update_json(&json!([])).unwrap_err().to_string();
        assert!(
            e.contains("failed (returned 7): no signal today") && e.contains("t-bad-replies"),
            "{e}"
        );
        assert!(!p.snapshot().unwrap(), "no snapshot offered");
        assert!(p.restore().is_err());
        let p = register(
            "t-nan",
            vt(Some(act_plus_one), Some(update_nan), None, None),
        )
        .unwrap();
        let e = p.update_json(&json!([])).unwrap_err().to_string();
        assert!(
            e.contains("not an update report") || e.contains("finite"),
            "{e}"
        );
    }
}
