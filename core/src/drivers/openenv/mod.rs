//! `openenv:` — any OpenEnv server, local or a Hugging Face Space, in step mode.
//!
//! `openenv:<http(s)/ws(s) base URL | host:port | owner/space>?<options>`. One WebSocket
//! (`/ws`, synchronous tungstenite, TLS for `https`/`wss`) per session: `reset` with the seed,
//! `step` with the action, `state`, `close`. The manifest comes from `/metadata` and `/schema`.
//! Rewards and `done` come from the envelope (int, float, bool or null rewards). A server
//! restart or dropped socket fails the episode it carried only: the next episode reconnects.
//!
//! A background keepalive thread answers the server's pings while the policy is thinking, so an
//! idle session is not dropped by uvicorn's 20 s ping timeout. Servers at their session limit
//! answer `CAPACITY_REACHED`, surfaced as [`Error::Capacity`] with the server's message.
//!
//! A server made by `nenyax serve` is recognised (its `/metadata` carries the Nenyax manifest):
//! its observations and the verifier's judgment in the final step's metadata come back intact.

use serde_json::{json, Map, Value};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::contract::{
    JsonMap, JudgeSource, Judgment, Manifest, Mode, Observation, Requirement, RewardTiming, Step,
    TaskRef,
};
use crate::driver::Driver;
use crate::env::{Environment, Episode};
use crate::error::{Error, Result};
use crate::openenv_wire::{ClientFrame, Envelope};
use crate::policy::Policy;
use crate::uri::{ParamKind, ParamSpec, Params, Uri};

mod link;
mod target;

use link::Link;
use target::{token, Config, Target, SCHEME};

/// The `openenv:` scheme.
pub struct OpenEnvDriver;

fn specs() -> Vec<ParamSpec> {
    vec![
        ParamSpec {
            name: "token_env",
            kind: ParamKind::Str,
            default: "HF_TOKEN, sent to *.hf.space only",
            help: "environment variable holding a bearer token (private Spaces)",
        },
        ParamSpec {
            name: "seeded",
            kind: ParamKind::Bool,
            default: "false (true for nenyax serve servers that are resettable)",
            help: "the server honours reset(seed=...), so episodes are reproducible",
        },
        ParamSpec {
            name: "text_action",
            kind: ParamKind::Str,
            default: "the action's only string field, from /schema",
            help: "action field that takes free text; chat replies are wrapped as {field: reply}",
        },
        ParamSpec {
            name: "reset",
            kind: ParamKind::Json,
            default: "{}",
            help: "extra keyword arguments sent with every reset (a JSON object)",
        },
        ParamSpec {
            name: "sessions",
            kind: ParamKind::Int { min: 1, max: 4096 },
            default: "unlimited",
            help: "most sessions this client opens at once (waits for a free one beyond)",
        },
        ParamSpec {
            name: "max_steps",
            kind: ParamKind::Int {
                min: 1,
                max: 100_000_000,
            },
            default: "1000",
            help: "step limit per episode (OpenEnv servers need not terminate)",
        },
        ParamSpec {
            name: "timeout_s",
            kind: ParamKind::Float,
            default: "300",
            help: "longest wait for one reply before the session is dropped",
        },
        ParamSpec {
            name: "keepalive_s",
            kind: ParamKind::Float,
            default: "5",
            help: "how often an idle session answers the server's pings",
        },
    ]
}

impl Driver for OpenEnvDriver {
    fn scheme(&self) -> &'static str {
        SCHEME
    }

    fn format(&self) -> &'static str {
        "openenv"
    }

    fn summary(&self) -> &'static str {
        "any OpenEnv server over WebSocket: openenv:http://localhost:8000, openenv:owner/space (Hugging Face)"
    }

    fn params(&self, _target: &str) -> Vec<ParamSpec> {
        specs()
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        let params = Params::check(SCHEME, uri, &specs())?;
        let target = Target::parse(&uri.target)?;
        let secs = |name: &str, default: f64| -> Result<Duration> {
            let v = params.get(name).and_then(Value::as_f64).unwrap_or(default);
            crate::limits::seconds(v, false).map_err(|expected| Error::InvalidParameter {
                driver: SCHEME.into(),
                param: name.into(),
                value: uri.raw_param(name).unwrap_or_else(|| v.to_string()),
                expected,
            })
        };
        let reset = match params.get("reset") {
            None => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(other) => {
                return Err(Error::InvalidParameter {
                    driver: SCHEME.into(),
                    param: "reset".into(),
                    value: other.to_string(),
                    expected: "a JSON object of reset keyword arguments, e.g. {\"target\":3}"
                        .into(),
                })
            }
        };
        let token = token(&target, params.get("token_env").and_then(Value::as_str))?;
        let config = Config {
            timeout: secs("timeout_s", 300.0)?,
            keepalive: secs("keepalive_s", 5.0)?,
            token,
            reset,
        };
        OpenEnv::connect(
            uri,
            target,
            config,
            &params,
            params.get("sessions").and_then(Value::as_u64),
        )
        .map(|e| Arc::new(e) as Arc<dyn Environment>)
    }
}

/// A counting semaphore (the client-side session limit).
struct Slots {
    free: Mutex<u64>,
    cv: Condvar,
}

struct SlotGuard(Arc<Slots>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.cv.notify_one();
    }
}

struct OpenEnv {
    manifest: Manifest,
    target: Target,
    config: Arc<Config>,
    text_action: Option<String>,
    /// Served by `nenyax serve`: observations and judgments are Nenyax's own.
    nenyax: bool,
    max_steps: usize,
    slots: Option<Arc<Slots>>,
    probe: Option<Value>,
}

fn get_json(url: &str, token: Option<&str>, timeout: Duration) -> Result<Option<Value>> {
    let client = crate::openai::Client::new(crate::openai::RetryPolicy::once(timeout))
        .bearer(token.map(str::to_string));
    let mut answer = client.get(url, &[]).map_err(|e| Error::Endpoint {
        url: url.to_string(),
        message: format!(
            "cannot reach the OpenEnv server: {}; is it running, and is the URL right?",
            e.message
        ),
    })?;
    let status = answer.status();
    if status == 401 || status == 403 {
        return Err(Error::Endpoint {
            url: url.to_string(),
            message: format!(
                "HTTP {status}: the server wants a token; put it in an environment variable and \
                 name it with ?token_env=VAR (HF_TOKEN is used for *.hf.space)"
            ),
        });
    }
    if status != 200 {
        return Ok(None);
    }
    Ok(answer
        .text(crate::openai::client::MAX_RESPONSE)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok()))
}

/// The action field that takes free text: the only string property besides `metadata`.
fn infer_text_action(action_schema: Option<&Value>) -> Option<String> {
    let props = action_schema?.get("properties")?.as_object()?;
    let fields: Vec<(&String, &Value)> = props.iter().filter(|(k, _)| *k != "metadata").collect();
    let required: Vec<&str> = action_schema?
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let is_string = |v: &Value| v.get("type").and_then(Value::as_str) == Some("string");
    let strings: Vec<&String> = fields
        .iter()
        .filter(|(_, v)| is_string(v))
        .map(|(k, _)| *k)
        .collect();
    match strings.as_slice() {
        [one] if fields.len() == 1 || required == [one.as_str()] => Some((*one).clone()),
        _ => None,
    }
}

/// An action object built from the schema's defaults (a probe for non-text servers).
fn default_action(action_schema: Option<&Value>) -> Option<Value> {
    let props = action_schema?.get("properties")?.as_object()?;
    let mut out = Map::new();
    for (k, p) in props {
        if k == "metadata" {
            continue;
        }
        let v = p.get("default").cloned().unwrap_or_else(|| {
            match p.get("type").and_then(Value::as_str) {
                Some("string") => json!(""),
                Some("integer") => json!(p.get("minimum").and_then(Value::as_i64).unwrap_or(0)),
                Some("number") => json!(p.get("minimum").and_then(Value::as_f64).unwrap_or(0.0)),
                Some("boolean") => json!(false),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => Value::Null,
            }
        });
        out.insert(k.clone(), v);
    }
    Some(Value::Object(out))
}

impl OpenEnv {
    fn connect(
        uri: &Uri,
        target: Target,
        config: Config,
        params: &Params,
        sessions: Option<u64>,
    ) -> Result<OpenEnv> {
        let t = config.token.as_deref();
        let probe_timeout = config.timeout.min(Duration::from_secs(30));
        let meta = get_json(&format!("{}/metadata", target.http), t, probe_timeout)?
            .unwrap_or(Value::Null);
        let schema =
            get_json(&format!("{}/schema", target.http), t, probe_timeout)?.unwrap_or(Value::Null);
        let served: Option<Manifest> = meta
            .get("nenyax_manifest")
            .cloned()
            .and_then(|m| serde_json::from_value(m).ok());
        let s = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
        let name = s("name").unwrap_or_else(|| target.host.clone());
        let mut m = Manifest::new(&uri.raw, name, SCHEME, Mode::Step);
        m.version = s("version");
        m.description = s("description");
        m.capabilities.reward_timing = RewardTiming::PerStep;
        m.capabilities.requires = vec![Requirement::Network];
        m.capabilities.max_parallel = sessions;
        let nenyax = served.is_some();
        let seeded_param = params.get("seeded").and_then(Value::as_bool);
        let mut text_action = params
            .get("text_action")
            .and_then(Value::as_str)
            .map(str::to_string);
        let max_steps;
        if let Some(sm) = &served {
            // The served environment's own contract, seen through the wire.
            m.capabilities.text = sm.capabilities.text;
            m.capabilities.reward_timing = sm.capabilities.reward_timing;
            m.capabilities.resettable = seeded_param.unwrap_or(sm.capabilities.resettable);
            m.action_schema = sm.action_schema.clone();
            m.observation_schema = sm.observation_schema.clone();
            m.num_tasks = sm.num_tasks;
            m.extra.insert("served_env".into(), json!(sm.id));
            max_steps = params.int("max_steps", 1000) as usize;
        } else {
            m.capabilities.resettable = seeded_param.unwrap_or(false);
            m.action_schema = schema.get("action").and_then(Value::as_object).cloned();
            m.observation_schema = schema
                .get("observation")
                .and_then(Value::as_object)
                .cloned();
            if text_action.is_none() {
                text_action = infer_text_action(schema.get("action"));
            }
            m.capabilities.text = text_action.is_some();
            max_steps = params.int("max_steps", 1000) as usize;
        }
        if let Some(st) = schema.get("state") {
            m.extra.insert("state_schema".into(), st.clone());
        }
        m.extra.insert("server".into(), json!(target.http));
        let probe = if nenyax {
            None
        } else {
            default_action(schema.get("action"))
        };
        Ok(OpenEnv {
            manifest: m,
            target,
            config: Arc::new(config),
            text_action,
            nenyax,
            max_steps,
            slots: sessions.map(|n| {
                Arc::new(Slots {
                    free: Mutex::new(n),
                    cv: Condvar::new(),
                })
            }),
            probe,
        })
    }

    fn take_slot(&self) -> Result<Option<SlotGuard>> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        let deadline = Instant::now() + self.config.timeout;
        let mut free = slots.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Capacity {
                    server: self.target.http.clone(),
                    message: format!(
                        "no client session slot (sessions={}) freed within {:.0} s",
                        self.manifest.capabilities.max_parallel.unwrap_or(0),
                        self.config.timeout.as_secs_f64()
                    ),
                });
            }
            free = slots
                .cv
                .wait_timeout(free, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *free -= 1;
        Ok(Some(SlotGuard(slots.clone())))
    }
}

impl Environment for OpenEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let slot = self.take_slot()?;
        let link = Link::open(&self.target, &self.config)?;
        let mut data = self.config.reset.clone();
        // The seed always goes with reset (OpenEnv's reset takes it); `seeded` only decides
        // whether the environment claims to be resettable, which the checks then measure.
        if let Some(s) = seed {
            data.insert("seed".into(), json!(s));
        }
        if let Some(t) = task {
            data.insert("task_id".into(), json!(t.id));
        }
        let reply = link.call(ClientFrame::Reset(Value::Object(data)), &self.target.http)?;
        let (obs, _, _, meta) = self.read_envelope(&reply)?;
        let task = task.cloned().or_else(|| {
            obs.info
                .get("task_id")
                .and_then(Value::as_str)
                .map(|id| TaskRef::new(id.to_string()))
        });
        let _ = meta;
        Ok(Box::new(OpenEnvEpisode {
            env: EnvView {
                target: self.target.http.clone(),
                env_id: self.manifest.id.clone(),
                text_action: self.text_action.clone(),
                nenyax: self.nenyax,
                text: self.manifest.capabilities.text,
            },
            link: Some(link),
            obs,
            task,
            _slot: slot,
        }))
    }

    fn probe_policy(&self) -> Option<Policy> {
        if self.manifest.capabilities.text {
            return None;
        }
        self.probe.clone().map(Policy::constant)
    }

    fn default_max_steps(&self) -> usize {
        self.max_steps
    }
}

impl OpenEnv {
    fn read_envelope(&self, reply: &Value) -> Result<(Observation, f64, bool, JsonMap)> {
        EnvView {
            target: self.target.http.clone(),
            env_id: self.manifest.id.clone(),
            text_action: self.text_action.clone(),
            nenyax: self.nenyax,
            text: self.manifest.capabilities.text,
        }
        .read_envelope(reply)
    }
}

/// What an episode needs to know about its environment.
struct EnvView {
    target: String,
    env_id: String,
    text_action: Option<String>,
    nenyax: bool,
    text: bool,
}

impl EnvView {
    /// `(observation, reward, done, metadata)` out of an observation envelope.
    fn read_envelope(&self, data: &Value) -> Result<(Observation, f64, bool, JsonMap)> {
        let bad = |what: &str| {
            Error::Protocol(format!(
                "{}: the server's observation envelope {what}: {}",
                self.target,
                crate::contract::preview(data)
            ))
        };
        let Envelope {
            observation: raw,
            reward,
            done,
            metadata,
        } = Envelope::parse(data).map_err(bad)?;
        let mut obs = if self.nenyax {
            // Nenyax's own observation, carried in {data, text, info}.
            Observation {
                data: raw.get("data").cloned().unwrap_or(Value::Null),
                text: raw.get("text").and_then(Value::as_str).map(str::to_string),
                messages: None,
                info: raw
                    .get("info")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            }
        } else {
            let mut fields = raw.as_object().cloned().unwrap_or_default();
            fields.remove("metadata");
            let text = if self.text {
                Some(render_text(&fields))
            } else {
                None
            };
            let mut info = JsonMap::new();
            if !metadata.is_empty() {
                info.insert("metadata".into(), Value::Object(metadata.clone()));
            }
            Observation {
                data: Value::Object(fields),
                text,
                messages: None,
                info,
            }
        };
        if reward.is_none() {
            obs.info.insert("reward_missing".into(), json!(true));
        }
        Ok((obs, reward.unwrap_or(0.0), done, metadata))
    }
}

/// A text rendering of an observation's fields for a chat model: the text-like field when
/// there is one, else every field as `name: value` lines.
fn render_text(fields: &JsonMap) -> String {
    for key in ["text", "prompt", "message", "content", "stdout"] {
        if let Some(Value::String(s)) = fields.get(key) {
            return s.clone();
        }
    }
    let strings: Vec<&str> = fields.values().filter_map(Value::as_str).collect();
    if let [one] = strings.as_slice() {
        return (*one).to_string();
    }
    fields
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}: {s}"),
            other => format!("{k}: {other}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

struct OpenEnvEpisode {
    env: EnvView,
    link: Option<Link>,
    obs: Observation,
    task: Option<TaskRef>,
    _slot: Option<SlotGuard>,
}

impl Episode for OpenEnvEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let link = self.link.as_ref().ok_or_else(|| {
            Error::Environment(format!(
                "{}: the connection of this episode was lost; start a new episode",
                self.env.target
            ))
        })?;
        let wire = if self.env.nenyax {
            json!({"value": action})
        } else {
            match (action, &self.env.text_action) {
                (Value::Object(_), _) => action.clone(),
                (other, Some(field)) => json!({ field.as_str(): other }),
                (other, None) => {
                    return Err(Error::InvalidAction {
                        env: self.env.env_id.clone(),
                        action: crate::contract::preview(other),
                        reason: "OpenEnv actions are JSON objects of the action's fields (see \
                                 the manifest's action_schema); set ?text_action=FIELD to send \
                                 text"
                            .into(),
                    })
                }
            }
        };
        let reply = match link.call(ClientFrame::Step(wire), &self.env.target) {
            Ok(r) => r,
            Err(e @ Error::InvalidAction { .. }) => return Err(e),
            Err(e) => {
                // The session is gone with its connection: only this episode fails.
                if link.broken() {
                    self.link = None;
                }
                return Err(e);
            }
        };
        let (obs, reward, done, metadata) = self.env.read_envelope(&reply)?;
        self.obs = obs.clone();
        let truncated = metadata.get("truncated").and_then(Value::as_bool) == Some(true);
        let terminated = if self.env.nenyax {
            metadata
                .get("terminated")
                .and_then(Value::as_bool)
                .unwrap_or(done && !truncated)
        } else {
            done
        };
        let mut info = metadata;
        if let Some(m) = obs.info.get("reward_missing") {
            info.insert("reward_missing".into(), m.clone());
        }
        Ok(Step {
            action: action.clone(),
            observation: obs,
            reward,
            terminated: terminated || (done && !truncated),
            truncated: done && truncated,
            info,
        })
    }

    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        // A Nenyax server sends the verifier's own verdict with the final step.
        if let Some(j) = steps.last().and_then(|s| s.info.get("nenyax_judgment")) {
            return serde_json::from_value(j.clone()).map_err(|e| {
                Error::Protocol(format!(
                    "{}: the served judgment does not fit the contract: {e}",
                    self.env.target
                ))
            });
        }
        let total: f64 = steps.iter().map(|s| s.reward).sum();
        Ok(
            Judgment::new(total, JudgeSource::Env, "openenv.episode_return")?
                .with_detail("steps", steps.len()),
        )
    }

    fn task(&self) -> Option<TaskRef> {
        self.task.clone()
    }

    fn close(&mut self) {
        if let Some(link) = self.link.take() {
            link.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_actions_are_inferred_only_when_unambiguous() {
        let scaffold = json!({"properties": {"metadata": {"type": "object"}, "message": {"type": "string"}}, "required": ["message"]});
        assert_eq!(
            infer_text_action(Some(&scaffold)).as_deref(),
            Some("message")
        );
        let count =
            json!({"properties": {"metadata": {}, "delta": {"type": "integer", "default": 1}}});
        assert_eq!(infer_text_action(Some(&count)), None);
        assert_eq!(default_action(Some(&count)), Some(json!({"delta": 1})));
        let two = json!({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}});
        assert_eq!(infer_text_action(Some(&two)), None);
    }

    #[test]
    fn envelopes_accept_every_reward_type() {
        let v = EnvView {
            target: "t".into(),
            env_id: "e".into(),
            text_action: Some("message".into()),
            nenyax: false,
            text: true,
        };
        for (r, want) in [
            (json!(10), 10.0),
            (json!(0.5), 0.5),
            (json!(true), 1.0),
            (json!(null), 0.0),
        ] {
            let (o, reward, done, _) = v
                .read_envelope(&json!({"observation": {"echoed_message": "hi", "message_length": 2, "metadata": {}}, "reward": r, "done": true}))
                .unwrap();
            assert_eq!(reward, want);
            assert!(done);
            assert_eq!(o.text.as_deref(), Some("hi"));
        }
        assert!(v
            .read_envelope(&json!({"observation": {}, "reward": "x"}))
            .is_err());
        assert!(v.read_envelope(&json!([1])).is_err());
    }
}
