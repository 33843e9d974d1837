//! Host callbacks: policies and environments implemented in C (or Go, Julia, C++).
//!
//! Unless registered with NENYAX_THREAD_SAFE, a callback only ever runs on a thread that
//! called into the library: while a batch or a check runs, its workers hand each such call to
//! the calling thread (a [`Route`] bound for the duration of the call), which runs it while it
//! waits. Environments still step in parallel; only the host code is serialised.

use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::{Map, Value};
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use nenyax_core::define::{stateful, TaskEnvBuilder};
use nenyax_core::runner::{caller_queue, CallerTask};
use nenyax_core::{ChatModel, Environment, Error, Message, Policy};

use crate::episode::{self, nenyax_act_episode_fn, nenyax_chat_episode_fn};
use crate::error::{invalid, FfiResult};
use crate::{NENYAX_POLICY_VTABLE_VERSION, NENYAX_THREAD_SAFE, NENYAX_VTABLE_VERSION};

/// Frees a callback's user data.
pub type nenyax_free_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Action policy callback: reads the observation JSON, writes the action JSON into `reply` with
/// nenyax_reply_set, returns 0; or returns non-zero (with an optional message in `reply`).
pub type nenyax_act_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        observation_json: *const c_char,
        observation_len: usize,
        reply: *mut nenyax_reply_t,
    ) -> i32,
>;

/// Chat callback: reads the conversation (a JSON array of OpenAI-shaped messages), writes the
/// assistant's reply text (plain UTF-8, not JSON) into `reply`, returns 0; non-zero fails.
pub type nenyax_chat_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        messages_json: *const c_char,
        messages_len: usize,
        reply: *mut nenyax_reply_t,
    ) -> i32,
>;

/// Receives one trajectory (JSON) of a batch, in job order, on the calling thread; non-zero
/// stops the batch.
pub type nenyax_trajectory_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        index: usize,
        trajectory_json: *const c_char,
        trajectory_len: usize,
    ) -> i32,
>;

/// A policy implemented by the host: set exactly one of `act`, `chat`, `act_episode` and
/// `chat_episode`. Version 1 (NENYAX_VTABLE_VERSION) ends after `chat` and is never read past
/// it, so hosts built against older headers keep working; version 2
/// (NENYAX_POLICY_VTABLE_VERSION) adds the per-episode callbacks.
#[repr(C)]
pub struct nenyax_policy_vtable_t {
    /// NENYAX_POLICY_VTABLE_VERSION (2), or NENYAX_VTABLE_VERSION (1) for `act`/`chat` only.
    pub version: u32,
    /// Observation JSON -> action JSON.
    pub act: nenyax_act_fn,
    /// Messages JSON -> reply text.
    pub chat: nenyax_chat_fn,
    /// Version 2: observation JSON -> action JSON, told which episode and call it serves, and
    /// recording what it sampled for training.
    pub act_episode: nenyax_act_episode_fn,
    /// Version 2: messages JSON -> reply text, told which episode and call it serves, and
    /// recording the call's token ids for training.
    pub chat_episode: nenyax_chat_episode_fn,
}

/// A one-turn environment's scorer (and optional oracle) implemented by the host.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nenyax_task_vtable_t {
    /// NENYAX_VTABLE_VERSION.
    pub version: u32,
    /// Score `reply` for the task row (JSON object): write a finite score to `score_out` and
    /// return 0, or return non-zero with an optional message in `error`.
    pub score: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            task_json: *const c_char,
            task_len: usize,
            reply: *const c_char,
            reply_len: usize,
            score_out: *mut f64,
            error: *mut nenyax_reply_t,
        ) -> i32,
    >,
    /// Optional (may be NULL): the reply an oracle gives for the task row, written to `reply`.
    pub reference: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            task_json: *const c_char,
            task_len: usize,
            reply: *mut nenyax_reply_t,
        ) -> i32,
    >,
}

/// A multi-turn environment implemented by the host over a JSON state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nenyax_state_vtable_t {
    /// NENYAX_VTABLE_VERSION.
    pub version: u32,
    /// Write the initial state (JSON) for `seed` to `state_out`; return 0.
    pub reset: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            seed: i64,
            state_out: *mut nenyax_reply_t,
        ) -> i32,
    >,
    /// Write what the policy sees (JSON; a JSON string becomes text) for the state.
    pub observe: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            state_json: *const c_char,
            state_len: usize,
            observation_out: *mut nenyax_reply_t,
        ) -> i32,
    >,
    /// Apply the action (JSON) to the state: write the next state (JSON) to `state_out`, the
    /// reward to `reward_out` and whether the episode ended to `done_out`; return 0.
    pub step: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            state_json: *const c_char,
            state_len: usize,
            action_json: *const c_char,
            action_len: usize,
            state_out: *mut nenyax_reply_t,
            reward_out: *mut f64,
            done_out: *mut bool,
        ) -> i32,
    >,
}

/// Where a callback writes its output; the library copies what is written.
pub struct nenyax_reply_t {
    bytes: Option<Vec<u8>>,
}

impl nenyax_reply_t {
    /// An empty slot, for a callback to write into.
    pub(crate) fn empty() -> nenyax_reply_t {
        nenyax_reply_t { bytes: None }
    }

    /// What the callback wrote, if anything.
    pub(crate) fn take(self) -> Option<Vec<u8>> {
        self.bytes
    }
}

/// Copy `len` bytes (UTF-8) into a callback's reply slot, replacing earlier ones. Returns false
/// (and copies nothing) when `reply` is NULL, or `data` is NULL with `len` > 0.
#[no_mangle]
pub unsafe extern "C" fn nenyax_reply_set(
    reply: *mut nenyax_reply_t,
    data: *const c_char,
    len: usize,
) -> bool {
    let mut ok = false;
    crate::error::quietly(|| {
        let Some(r) = reply.as_mut() else {
            return Ok(());
        };
        if data.is_null() && len > 0 {
            return Ok(());
        }
        let bytes = if len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec()
        };
        r.bytes = Some(bytes);
        ok = true;
        Ok(())
    });
    ok
}

/// The host's user data, freed with its free function when the last user is dropped.
pub(crate) struct UserData {
    pub(crate) ptr: *mut c_void,
    free: nenyax_free_fn,
}

// SAFETY: the pointer is only handed back to the host's callbacks, which are either declared
// thread-safe or routed to the thread that called into the library (see `Route`).
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

impl UserData {
    pub(crate) fn new(ptr: *mut c_void, free: nenyax_free_fn) -> Arc<UserData> {
        Arc::new(UserData { ptr, free })
    }
}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(f) = self.free {
            // SAFETY: the host gave us this pointer and this function to free it, once.
            unsafe { f(self.ptr) };
        }
    }
}

/// Which thread a non-thread-safe callback must run on, while a batch or check is running.
pub(crate) struct Route {
    thread_safe: bool,
    home: Mutex<Option<(ThreadId, Sender<CallerTask>)>>,
}

impl Route {
    /// Whether the host said its callbacks may run on any thread.
    pub(crate) fn thread_safe(&self) -> bool {
        self.thread_safe
    }

    pub(crate) fn new(flags: u32) -> Arc<Route> {
        Arc::new(Route {
            thread_safe: flags & NENYAX_THREAD_SAFE != 0,
            home: Mutex::new(None),
        })
    }

    /// Run `f` where the host allows it: here if thread-safe, unbound or already home;
    /// otherwise on the home thread, waiting for the result.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, Error> {
        if !self.thread_safe {
            let home = self.home.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some((tid, tx)) = home {
                if tid != std::thread::current().id() {
                    let (rtx, rrx) = bounded(1);
                    let task: CallerTask = Box::new(move || {
                        let _ = rtx.send(f());
                    });
                    tx.send(task).map_err(|_| {
                        Error::Policy("the calling thread stopped serving callbacks".into())
                    })?;
                    return rrx.recv().map_err(|_| {
                        Error::Policy(
                            "a callback routed to the calling thread did not return".into(),
                        )
                    });
                }
            }
        }
        Ok(f())
    }
}

/// Routes bound to the calling thread for one call; the previous binding is restored on drop,
/// so a batch started from inside another batch's callback leaves the outer one intact. Every
/// binding on a thread uses that thread's one queue ([`caller_queue`]), so a task a worker
/// queued for the outer call is served by the inner loop or, after it, by the outer one.
pub(crate) struct Bound {
    saved: Vec<(Arc<Route>, Home)>,
    queue: Receiver<CallerTask>,
}

type Home = Option<(ThreadId, Sender<CallerTask>)>;

pub(crate) fn bind(routes: &[Arc<Route>]) -> Bound {
    let here = std::thread::current().id();
    let (tx, queue) = caller_queue();
    let saved = routes
        .iter()
        .filter(|r| !r.thread_safe)
        .map(|r| {
            let mut home = r.home.lock().unwrap_or_else(|p| p.into_inner());
            let previous = home.replace((here, tx.clone()));
            (r.clone(), previous)
        })
        .collect();
    Bound { saved, queue }
}

impl Bound {
    /// The calling thread's task queue, for the loop that serves it while the call runs.
    pub(crate) fn queue(&self) -> &Receiver<CallerTask> {
        &self.queue
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        // Restore in reverse, in case one route was bound twice in the same call.
        for (r, previous) in self.saved.drain(..).rev() {
            *r.home.lock().unwrap_or_else(|p| p.into_inner()) = previous;
        }
    }
}

/// A callback's failure message: what it wrote to its reply slot, or "no message".
pub(crate) fn failure_message(bytes: Option<Vec<u8>>) -> String {
    bytes
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "no message".into())
}

/// Call a host function that writes into a reply slot; map failures with `err`.
pub(crate) unsafe fn with_reply(
    what: &str,
    err: fn(String) -> Error,
    f: impl FnOnce(*mut nenyax_reply_t) -> i32,
) -> Result<String, Error> {
    let mut reply = nenyax_reply_t { bytes: None };
    let rc = f(&mut reply);
    if rc != 0 {
        let msg = failure_message(reply.bytes);
        return Err(err(format!(
            "{what} callback failed with status {rc}: {msg}"
        )));
    }
    let bytes = reply.bytes.ok_or_else(|| {
        err(format!(
            "{what} callback returned 0 but set no reply; call nenyax_reply_set before returning"
        ))
    })?;
    String::from_utf8(bytes)
        .map_err(|e| err(format!("{what} callback replied with invalid UTF-8: {e}")))
}

pub(crate) fn parse_json(what: &str, err: fn(String) -> Error, text: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| {
        let shown: String = text.chars().take(120).collect();
        err(format!(
            "{what} callback replied with invalid JSON ({e}): {shown}"
        ))
    })
}

fn check_version(version: u32, what: &str) -> FfiResult<()> {
    if version != NENYAX_VTABLE_VERSION {
        return Err(invalid(format!(
            "{what} version {version} is not supported; this library speaks version {NENYAX_VTABLE_VERSION}"
        )));
    }
    Ok(())
}

/// Raw function pointers plus user data, as one sendable bundle.
#[derive(Clone)]
pub(crate) struct Host<F: Copy> {
    pub(crate) f: F,
    pub(crate) data: Arc<UserData>,
}

/// A policy from a host vtable, its route, and whether it is a chat model (which a rollout- or
/// task-mode environment may call from threads other than the rollout's).
pub(crate) struct HostPolicy {
    pub(crate) policy: Policy,
    pub(crate) route: Arc<Route>,
    pub(crate) chat: bool,
}

/// The callbacks a policy vtable sets, read field by field through the raw pointer: a version
/// 1 vtable may be only as large as its three fields, so nothing past `chat` is touched then.
unsafe fn policy_fields(
    vt: *const nenyax_policy_vtable_t,
) -> FfiResult<(
    nenyax_act_fn,
    nenyax_chat_fn,
    nenyax_act_episode_fn,
    nenyax_chat_episode_fn,
)> {
    if vt.is_null() {
        return Err(invalid("vtable is NULL".into()));
    }
    let version = std::ptr::addr_of!((*vt).version).read();
    if version != NENYAX_VTABLE_VERSION && version != NENYAX_POLICY_VTABLE_VERSION {
        return Err(invalid(format!(
            "nenyax_policy_vtable_t version {version} is not supported; this library speaks \
             versions {NENYAX_VTABLE_VERSION} (act, chat) and {NENYAX_POLICY_VTABLE_VERSION} \
             (NENYAX_POLICY_VTABLE_VERSION: also act_episode, chat_episode)"
        )));
    }
    let act = std::ptr::addr_of!((*vt).act).read();
    let chat = std::ptr::addr_of!((*vt).chat).read();
    if version < NENYAX_POLICY_VTABLE_VERSION {
        return Ok((act, chat, None, None));
    }
    Ok((
        act,
        chat,
        std::ptr::addr_of!((*vt).act_episode).read(),
        std::ptr::addr_of!((*vt).chat_episode).read(),
    ))
}

pub(crate) unsafe fn policy(
    vt: *const nenyax_policy_vtable_t,
    data: Arc<UserData>,
    flags: u32,
) -> FfiResult<HostPolicy> {
    let route = Route::new(flags);
    let r = route.clone();
    // A chat model (per episode or not) may be called from threads other than the rollout's.
    let (policy, chat) = match policy_fields(vt)? {
        (Some(act), None, None, None) => {
            let host = Host { f: act, data };
            let policy = Policy::action(move |obs| {
                let json = CText::new(serde_json::to_string(obs).expect("observations serialise"));
                let h = host.clone();
                let text = r.call(move || unsafe {
                    with_reply("action", Error::Policy, |reply| {
                        (h.f)(h.data.ptr, json.ptr(), json.len(), reply)
                    })
                })??;
                parse_json("action", Error::Policy, &text)
            });
            (policy, false)
        }
        (None, Some(chat), None, None) => {
            let model = HostChat {
                host: Host { f: chat, data },
                route: r,
            };
            (Policy::Chat(Arc::new(model)), true)
        }
        (None, None, Some(f), None) => (episode::act_policy(Host { f, data }, r), false),
        (None, None, None, Some(f)) => (episode::chat_policy(Host { f, data }, r), true),
        _ => {
            return Err(invalid(
                "set exactly one of vtable->act, ->chat, ->act_episode and ->chat_episode (the \
                 last two need version NENYAX_POLICY_VTABLE_VERSION)"
                    .into(),
            ))
        }
    };
    Ok(HostPolicy {
        policy,
        route,
        chat,
    })
}

type ChatFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *mut nenyax_reply_t) -> i32;

struct HostChat {
    host: Host<ChatFn>,
    route: Arc<Route>,
}

impl ChatModel for HostChat {
    fn name(&self) -> String {
        "host-callback".into()
    }

    fn complete(&self, messages: &[Message]) -> nenyax_core::Result<Message> {
        let json =
            CText::new(Value::Array(messages.iter().map(Message::to_openai).collect()).to_string());
        let h = self.host.clone();
        let text = self.route.call(move || unsafe {
            with_reply("chat", Error::Policy, |reply| {
                (h.f)(h.data.ptr, json.ptr(), json.len(), reply)
            })
        })??;
        Ok(Message::assistant(text))
    }
}

type ScoreFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *const c_char,
    usize,
    *mut f64,
    *mut nenyax_reply_t,
) -> i32;
type RefFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *mut nenyax_reply_t) -> i32;

/// Copy and check a task vtable.
pub(crate) unsafe fn task_vtable(
    vt: *const nenyax_task_vtable_t,
) -> FfiResult<nenyax_task_vtable_t> {
    let vt = *vt
        .as_ref()
        .ok_or_else(|| invalid("vtable is NULL".into()))?;
    check_version(vt.version, "nenyax_task_vtable_t")?;
    if vt.score.is_none() {
        return Err(invalid("vtable->score is NULL".into()));
    }
    Ok(vt)
}

/// A one-turn environment over host callbacks. Called again to build fresh instances (for
/// conformance), which share the host's user data and the route.
pub(crate) fn define_tasks(
    name: &str,
    rows: Vec<Map<String, Value>>,
    vt: nenyax_task_vtable_t,
    data: Arc<UserData>,
    route: &Arc<Route>,
) -> nenyax_core::Result<Arc<dyn Environment>> {
    let score: ScoreFn = vt.score.expect("checked by task_vtable");
    let (r, host) = (
        route.clone(),
        Host {
            f: score,
            data: data.clone(),
        },
    );
    let mut builder = TaskEnvBuilder::new(name, rows, move |row, reply| {
        let task = CText::new(Value::Object(row.clone()).to_string());
        let (reply, h) = (CText::new(reply.to_string()), host.clone());
        r.call(move || unsafe {
            let mut score = f64::NAN;
            let mut err = nenyax_reply_t { bytes: None };
            let rc = (h.f)(
                h.data.ptr,
                task.ptr(),
                task.len(),
                reply.ptr(),
                reply.len(),
                &mut score,
                &mut err,
            );
            if rc != 0 {
                let msg = err
                    .bytes
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                return Err(Error::Environment(format!(
                    "score callback failed with status {rc}: {msg}"
                )));
            }
            Ok(score)
        })?
    });
    if let Some(reference) = vt.reference {
        let (r, host) = (route.clone(), Host::<RefFn> { f: reference, data });
        builder = builder.reference(move |row| {
            let (task, h) = (
                CText::new(Value::Object(row.clone()).to_string()),
                host.clone(),
            );
            r.call(move || unsafe {
                with_reply("reference", Error::Environment, |reply| {
                    (h.f)(h.data.ptr, task.ptr(), task.len(), reply)
                })
                .ok()
            })
            .ok()
            .flatten()
        });
    }
    builder.build()
}

type ResetFn = unsafe extern "C" fn(*mut c_void, i64, *mut nenyax_reply_t) -> i32;
type ObserveFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, usize, *mut nenyax_reply_t) -> i32;
type StepFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *const c_char,
    usize,
    *mut nenyax_reply_t,
    *mut f64,
    *mut bool,
) -> i32;

/// Copy and check a state vtable.
pub(crate) unsafe fn state_vtable(
    vt: *const nenyax_state_vtable_t,
) -> FfiResult<nenyax_state_vtable_t> {
    let vt = *vt
        .as_ref()
        .ok_or_else(|| invalid("vtable is NULL".into()))?;
    check_version(vt.version, "nenyax_state_vtable_t")?;
    if vt.reset.is_none() || vt.observe.is_none() || vt.step.is_none() {
        return Err(invalid(
            "vtable->reset, ->observe and ->step must all be set".into(),
        ));
    }
    Ok(vt)
}

/// A multi-turn environment over host callbacks (fresh instances as for [`define_tasks`]).
pub(crate) fn define_stateful(
    name: &str,
    vt: nenyax_state_vtable_t,
    data: Arc<UserData>,
    route: &Arc<Route>,
    max_steps: usize,
) -> Arc<dyn Environment> {
    let env_err: fn(String) -> Error = Error::Environment;
    let (r1, h1) = (
        route.clone(),
        Host::<ResetFn> {
            f: vt.reset.expect("checked"),
            data: data.clone(),
        },
    );
    let (r2, h2) = (
        route.clone(),
        Host::<ObserveFn> {
            f: vt.observe.expect("checked"),
            data: data.clone(),
        },
    );
    let (r3, h3) = (
        route.clone(),
        Host::<StepFn> {
            f: vt.step.expect("checked"),
            data,
        },
    );
    stateful(
        name,
        move |seed| {
            let h = h1.clone();
            let text = r1.call(move || unsafe {
                with_reply("reset", env_err, |out| (h.f)(h.data.ptr, seed, out))
            })??;
            parse_json("reset", env_err, &text)
        },
        move |state| {
            let (st, h) = (CText::new(state.to_string()), h2.clone());
            let text = r2.call(move || unsafe {
                with_reply("observe", env_err, |out| {
                    (h.f)(h.data.ptr, st.ptr(), st.len(), out)
                })
            })??;
            parse_json("observe", env_err, &text)
        },
        move |state, action| {
            let (st, a, h) = (
                CText::new(state.to_string()),
                CText::new(action.to_string()),
                h3.clone(),
            );
            let (text, reward, done) = r3.call(move || unsafe {
                let (mut reward, mut done) = (0.0f64, false);
                let text = with_reply("step", env_err, |out| {
                    (h.f)(
                        h.data.ptr,
                        st.ptr(),
                        st.len(),
                        a.ptr(),
                        a.len(),
                        out,
                        &mut reward,
                        &mut done,
                    )
                })?;
                Ok::<_, Error>((text, reward, done))
            })??;
            *state = parse_json("step", env_err, &text)?;
            Ok((reward, done))
        },
        max_steps,
    )
}

/// Text handed to a host callback: NUL-terminated as a convenience for C string functions;
/// the length passed alongside excludes the NUL.
pub(crate) struct CText(String);

impl CText {
    pub(crate) fn new(mut s: String) -> Self {
        s.push('\0');
        CText(s)
    }

    pub(crate) fn ptr(&self) -> *const c_char {
        self.0.as_ptr().cast()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len() - 1
    }
}
