//! Per-episode host policies: the episode context (`nenyax_episode_t`) handed to `act_episode`
//! and `chat_episode` callbacks, and the record of what they sampled, so that host policies
//! sample reproducibly whatever the threads and leave training-ready traces.

use serde::Deserialize;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nenyax_core::policy::{CallLog, EpisodeContext};
use nenyax_core::{ChatModel, Error, Message, ModelCall, Policy};

use crate::callbacks::{failure_message, nenyax_reply_t, parse_json, CText, Host, Route};

/// Version of `nenyax_episode_t`.
pub const NENYAX_EPISODE_VERSION: u32 = 1;
/// `nenyax_episode_t.phase`: a plain batch, check or single rollout.
pub const NENYAX_PHASE_RUN: u32 = 0;
/// `nenyax_episode_t.phase`: a training rollout, which a learner will update from.
pub const NENYAX_PHASE_TRAIN: u32 = 1;
/// `nenyax_episode_t.phase`: a held-out evaluation episode.
pub const NENYAX_PHASE_EVAL: u32 = 2;

/// Which episode and which call a per-episode callback serves, so that it can seed its sampling
/// per call (the same draws whatever thread runs the episode) and tell group members apart.
/// Valid only during the callback.
#[repr(C)]
pub struct nenyax_episode_t {
    /// NENYAX_EPISODE_VERSION.
    pub version: u32,
    /// NENYAX_PHASE_RUN, NENYAX_PHASE_TRAIN or NENYAX_PHASE_EVAL.
    pub phase: u32,
    /// Training round (0: before training; evaluations of round r say r).
    pub round: u32,
    /// Group index within the round (evaluation: the held-out task's index).
    pub group: u32,
    /// Member index within the group (evaluation: the repeat).
    pub member: u32,
    /// This call's index within the episode, 0-based.
    pub step: u64,
    /// The environment seed (when `has_seed`).
    pub seed: i64,
    /// Whether the episode has an environment seed.
    pub has_seed: bool,
    /// The task's id (UTF-8, NUL-terminated); NULL when the episode plays no listed task.
    pub task_id: *const c_char,
    /// Length of `task_id` in bytes, without the NUL (0 when NULL).
    pub task_id_len: usize,
    /// Seed for this call's sampling: the same episode and step always get the same seed.
    pub sample_seed: u64,
}

/// Per-episode action callback: reads the episode and the observation JSON, writes the action
/// JSON into `reply` and, optionally, what it sampled into `record` (JSON {"prompt_token_ids":
/// [int] (optional), "completion_token_ids": [int], "completion_logprobs": [number]
/// (optional)}), returns 0; or returns non-zero with an optional message in `reply`.
pub type nenyax_act_episode_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        episode: *const nenyax_episode_t,
        observation_json: *const c_char,
        observation_len: usize,
        reply: *mut nenyax_reply_t,
        record: *mut nenyax_reply_t,
    ) -> i32,
>;

/// Per-episode chat callback: reads the episode and the conversation (JSON array of
/// OpenAI-shaped messages), writes the reply text (plain UTF-8) into `reply` and, optionally,
/// the call's token ids into `record` (JSON as for nenyax_act_episode_fn; a chat call needs
/// "prompt_token_ids" to be trained on), returns 0; non-zero fails.
pub type nenyax_chat_episode_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        episode: *const nenyax_episode_t,
        messages_json: *const c_char,
        messages_len: usize,
        reply: *mut nenyax_reply_t,
        record: *mut nenyax_reply_t,
    ) -> i32,
>;

type EpisodeFn = unsafe extern "C" fn(
    *mut c_void,
    *const nenyax_episode_t,
    *const c_char,
    usize,
    *mut nenyax_reply_t,
    *mut nenyax_reply_t,
) -> i32;

/// A `nenyax_episode_t` with the task id it points into.
struct Episode {
    raw: nenyax_episode_t,
    _task: Option<CText>,
}

impl Episode {
    fn new(ctx: &EpisodeContext, step: u64) -> Episode {
        let task = ctx.task_id.clone().map(CText::new);
        let (task_id, task_id_len) = task
            .as_ref()
            .map_or((std::ptr::null(), 0), |t| (t.ptr(), t.len()));
        Episode {
            raw: nenyax_episode_t {
                version: NENYAX_EPISODE_VERSION,
                phase: ctx.phase.code(),
                round: ctx.round,
                group: ctx.group,
                member: ctx.member,
                step,
                seed: ctx.seed.unwrap_or(0),
                has_seed: ctx.seed.is_some(),
                task_id,
                task_id_len,
                sample_seed: ctx.step_seed(step),
            },
            _task: task,
        }
    }
}

/// What a per-episode callback recorded about one call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    #[serde(default)]
    prompt_token_ids: Option<Vec<i64>>,
    completion_token_ids: Vec<i64>,
    #[serde(default)]
    completion_logprobs: Option<Vec<f64>>,
}

impl Record {
    fn parse(what: &str, bytes: Vec<u8>) -> Result<Record, Error> {
        let shape = "expected JSON {\"prompt_token_ids\": [int] (optional), \
                     \"completion_token_ids\": [int], \"completion_logprobs\": [number] \
                     (optional, one per completion token)}";
        let text = String::from_utf8(bytes)
            .map_err(|e| Error::Policy(format!("{what} callback's record is not UTF-8: {e}")))?;
        let r: Record = serde_json::from_str(&text).map_err(|e| {
            let shown: String = text.chars().take(120).collect();
            Error::Policy(format!(
                "{what} callback's record does not fit ({e}); {shape}; got: {shown}"
            ))
        })?;
        if let Some(l) = &r.completion_logprobs {
            if l.len() != r.completion_token_ids.len() {
                return Err(Error::Policy(format!(
                    "{what} callback's record has {} completion_logprobs for {} \
                     completion_token_ids; give one per token or leave them out",
                    l.len(),
                    r.completion_token_ids.len()
                )));
            }
        }
        Ok(r)
    }

    /// Put the record's token fields on a call.
    fn apply(self, call: &mut ModelCall) {
        call.prompt_token_ids = self.prompt_token_ids;
        call.completion_token_ids = Some(self.completion_token_ids);
        call.completion_logprobs = self.completion_logprobs;
    }
}

/// Call a per-episode callback with the episode of step `step` and `input`: its reply text and
/// its record, if it wrote one. Runs where `route` allows.
fn call_host(
    what: &'static str,
    host: &Host<EpisodeFn>,
    route: &Route,
    ctx: &Arc<EpisodeContext>,
    step: u64,
    input: String,
) -> Result<(String, Option<Record>), Error> {
    let (h, ctx, input) = (host.clone(), ctx.clone(), CText::new(input));
    route.call(move || {
        let episode = Episode::new(&ctx, step);
        let (mut reply, mut record) = (nenyax_reply_t::empty(), nenyax_reply_t::empty());
        // SAFETY: the host's function with its own user data; every pointer lives until it
        // returns.
        let rc = unsafe {
            (h.f)(
                h.data.ptr,
                &episode.raw,
                input.ptr(),
                input.len(),
                &mut reply,
                &mut record,
            )
        };
        if rc != 0 {
            return Err(Error::Policy(format!(
                "{what} callback failed with status {rc}: {}",
                failure_message(reply.take())
            )));
        }
        let text = reply.take().ok_or_else(|| {
            Error::Policy(format!(
                "{what} callback returned 0 but set no reply; call nenyax_reply_set before \
                 returning"
            ))
        })?;
        let text = String::from_utf8(text).map_err(|e| {
            Error::Policy(format!("{what} callback replied with invalid UTF-8: {e}"))
        })?;
        let record = match record.take() {
            Some(b) if !b.is_empty() => Some(Record::parse(what, b)?),
            _ => None,
        };
        Ok((text, record))
    })?
}

/// A policy made per episode over an `act_episode` callback: each call gets the episode and
/// its step, and what it records becomes a [`ModelCall::action`] in the episode's call log.
pub(crate) fn act_policy(host: Host<EpisodeFn>, route: Arc<Route>) -> Policy {
    Policy::per_episode(move |ctx: &EpisodeContext, log: &CallLog| {
        let (host, route, log) = (host.clone(), route.clone(), log.clone());
        let ctx = Arc::new(ctx.clone());
        let steps = AtomicU64::new(0);
        Ok(Policy::action(move |obs| {
            let step = steps.fetch_add(1, Ordering::Relaxed);
            let json = serde_json::to_string(obs).expect("observations serialise");
            let (text, record) = call_host("act_episode", &host, &route, &ctx, step, json)?;
            let action = parse_json("act_episode", Error::Policy, &text)?;
            if let Some(r) = record {
                let mut call = ModelCall::action(
                    MODEL,
                    obs,
                    &action,
                    r.prompt_token_ids.clone(),
                    Vec::new(),
                    Vec::new(),
                );
                r.apply(&mut call);
                log.push(call);
            }
            Ok(action)
        }))
    })
}

/// The model name host callbacks record.
const MODEL: &str = "host-callback";

/// A policy made per episode over a `chat_episode` callback.
pub(crate) fn chat_policy(host: Host<EpisodeFn>, route: Arc<Route>) -> Policy {
    Policy::per_episode(move |ctx: &EpisodeContext, _log: &CallLog| {
        Ok(Policy::Chat(Arc::new(EpisodeChat {
            host: host.clone(),
            route: route.clone(),
            ctx: Arc::new(ctx.clone()),
            steps: AtomicU64::new(0),
        })))
    })
}

/// One episode's chat model over a `chat_episode` callback.
struct EpisodeChat {
    host: Host<EpisodeFn>,
    route: Arc<Route>,
    ctx: Arc<EpisodeContext>,
    steps: AtomicU64,
}

impl EpisodeChat {
    fn call(&self, messages: &[Message]) -> Result<(String, Option<Record>), Error> {
        let step = self.steps.fetch_add(1, Ordering::Relaxed);
        let json = serde_json::Value::Array(messages.iter().map(Message::to_openai).collect());
        call_host(
            "chat_episode",
            &self.host,
            &self.route,
            &self.ctx,
            step,
            json.to_string(),
        )
    }
}

impl ChatModel for EpisodeChat {
    fn name(&self) -> String {
        MODEL.into()
    }

    fn complete(&self, messages: &[Message]) -> nenyax_core::Result<Message> {
        self.call(messages)
            .map(|(text, _)| Message::assistant(text))
    }

    fn complete_recorded(&self, messages: &[Message]) -> (nenyax_core::Result<Message>, ModelCall) {
        let t0 = Instant::now();
        let (result, record) = match self.call(messages) {
            Ok((text, record)) => (Ok(Message::assistant(text)), record),
            Err(e) => (Err(e), None),
        };
        // The library's own OpenAI-shaped record of the call, with the host's token ids.
        let replay = Replay(Mutex::new(Some(result)));
        let (result, mut call) = replay.complete_recorded(messages);
        // The host's call, not the replay's: when it was sent and how long it took.
        call.latency_s = Some(t0.elapsed().as_secs_f64());
        call.started_at = Some(nenyax_core::contract::unix_time_at(t0));
        if let Some(r) = record {
            r.apply(&mut call);
        }
        (result, call)
    }
}

/// A chat model that gives back one reply already obtained, so that [`ChatModel`]'s default
/// recording shapes the call exactly as for every other local model.
struct Replay(Mutex<Option<nenyax_core::Result<Message>>>);

impl ChatModel for Replay {
    fn name(&self) -> String {
        MODEL.into()
    }

    fn complete(&self, _messages: &[Message]) -> nenyax_core::Result<Message> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| Err(Error::Policy("a replayed reply was asked for twice".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nenyax_core::policy::Phase;

    #[test]
    fn the_header_phase_codes_are_the_cores() {
        assert_eq!(Phase::Run.code(), NENYAX_PHASE_RUN);
        assert_eq!(Phase::Train.code(), NENYAX_PHASE_TRAIN);
        assert_eq!(Phase::Eval.code(), NENYAX_PHASE_EVAL);
    }

    #[test]
    fn records_are_checked_with_a_message_naming_the_shape() {
        let ok = Record::parse(
            "act_episode",
            br#"{"prompt_token_ids":[1,2],"completion_token_ids":[3],"completion_logprobs":[-0.5]}"#
                .to_vec(),
        )
        .unwrap();
        assert_eq!(ok.completion_token_ids, vec![3]);
        let e = Record::parse(
            "act_episode",
            br#"{"completion_token_ids":[3],"x":1}"#.to_vec(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown field") && e.contains("completion_token_ids"),
            "{e}"
        );
        let e = Record::parse(
            "act_episode",
            br#"{"completion_token_ids":[3],"completion_logprobs":[]}"#.to_vec(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("0 completion_logprobs for 1"), "{e}");
    }
}
