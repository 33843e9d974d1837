//! `nemo_gym:<server base URL>?data=<tasks.jsonl>`: NeMo Gym resources servers, over HTTP.
//!
//! A resources server owns tasks' tools and verification; the task rows come from a JSONL file
//! (each row: `responses_create_params` plus the server's own fields). One episode is one
//! cookie jar: `POST /seed_session` with the row, each tool call `POST /<tool>` with the same
//! cookies, `POST /verify` with the row and the accumulated Responses output items, then
//! `POST /close_session` where the server has it.
//!
//! - Single-turn rows (no tools): the observation is the row's input as chat messages, the
//!   action the assistant text, the judgment `/verify`'s reward.
//! - Tool rows: a chat model runs NeMo Gym's simple-agent tool loop here (`tool_loop.rs`),
//!   every model call through the recording server; an action policy steps it from outside
//!   (an action is a tool call, an assistant message with `tool_calls`, a list of Responses
//!   output items, or the final text).

mod episode;
mod http;
mod rows;
mod shared;
mod tool_loop;

use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::contract::{Manifest, Mode, RewardTiming, TaskRef};
use crate::driver::Driver;
use crate::env::{drive_steps, task_index, Environment, Episode, RolloutOptions};
use crate::error::{Error, Result};
use crate::policy::{FunctionModel, Policy};
use crate::uri::{ParamKind, ParamSpec, Params, Uri};

use episode::NemoEpisode;
use http::Server;
use rows::Row;
use shared::{Api, Shared};

/// Routes every resources server has; any other POST route is a tool.
const RESERVED: &[&str] = &[
    "/seed_session",
    "/verify",
    "/close_session",
    "/aggregate_metrics",
    "/reverify_mode",
    "/run",
    "/mcp",
];

/// The `nemo_gym:` scheme.
pub struct NemoGymDriver;

impl Driver for NemoGymDriver {
    fn scheme(&self) -> &'static str {
        "nemo_gym"
    }

    fn format(&self) -> &'static str {
        "nemo_gym"
    }

    fn summary(&self) -> &'static str {
        "NeMo Gym resources servers over HTTP, single-turn and tool-calling: nemo_gym:http://127.0.0.1:8001?data=tasks.jsonl"
    }

    fn params(&self, _target: &str) -> Vec<ParamSpec> {
        vec![
            ParamSpec {
                name: "data",
                kind: ParamKind::Str,
                default: "required",
                help: "the task JSONL file (the server's data/example.jsonl, say)",
            },
            ParamSpec {
                name: "api",
                kind: ParamKind::Str,
                default: "responses",
                help: "how the tool loop calls the model: responses (/v1/responses) or chat (/v1/chat/completions)",
            },
            ParamSpec {
                name: "max_turns",
                kind: ParamKind::Int { min: 1, max: 1000 },
                default: "16",
                help: "most model calls in one tool-calling episode",
            },
            ParamSpec {
                name: "timeout_s",
                kind: ParamKind::Float,
                default: "120",
                help: "longest wait for one reply of the resources server",
            },
            ParamSpec {
                name: "rollouts",
                kind: ParamKind::Str,
                default: "<data stem>_rollouts.jsonl next to data, when present",
                help: "example rollouts replayed by the reference policy of tool tasks",
            },
        ]
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        let params = Params::check("nemo_gym", uri, &self.params(&uri.target))?;
        let invalid = |param: &str, value: &str, expected: &str| Error::InvalidParameter {
            driver: "nemo_gym".into(),
            param: param.into(),
            value: value.into(),
            expected: expected.into(),
        };
        let base = uri.target.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) || base.len() < 10 {
            return Err(invalid(
                "target",
                &uri.target,
                "the resources server's base URL, e.g. nemo_gym:http://127.0.0.1:8001?data=tasks.jsonl",
            ));
        }
        let data = params.string("data", "");
        if data.is_empty() {
            return Err(invalid(
                "data",
                "",
                "the path of the task JSONL file, e.g. ?data=resources_servers/mcqa/data/example.jsonl",
            ));
        }
        let api = match params.string("api", "responses").as_str() {
            "responses" => Api::Responses,
            "chat" => Api::Chat,
            other => return Err(invalid("api", other, "responses or chat")),
        };
        let timeout = params
            .get("timeout_s")
            .and_then(Value::as_f64)
            .unwrap_or(120.0);
        let timeout = crate::limits::seconds(timeout, false).map_err(|want| {
            let raw = uri.raw_param("timeout_s");
            invalid(
                "timeout_s",
                &raw.unwrap_or_else(|| timeout.to_string()),
                &want,
            )
        })?;
        let data_path = PathBuf::from(&data);
        let rows = rows::load(&data_path)?;
        let server = Server::new(&base, timeout);
        let routes = served_routes(&server)?;
        check_tools(&rows, &routes, &data, &server.base)?;
        let rollouts_path = match params.get("rollouts").and_then(Value::as_str) {
            Some(p) => Some(PathBuf::from(p)),
            None => default_rollouts(&data_path).filter(|p| p.is_file()),
        };
        let replay = match &rollouts_path {
            Some(p) => tool_loop::load_replays(p)?,
            None => HashMap::new(),
        };
        let shared = Arc::new(Shared {
            id: uri.raw.clone(),
            server,
            close_session: routes.contains("/close_session"),
            tools: routes
                .iter()
                .filter(|r| !RESERVED.contains(&r.as_str()))
                .map(|r| r.trim_start_matches('/').to_string())
                .collect(),
            rows,
            api,
            max_turns: params.int("max_turns", 16) as usize,
            replay,
            next_episode: AtomicU64::new(1),
        });
        Ok(Arc::new(NemoGymEnv {
            manifest: manifest(&shared, &data_path, rollouts_path.as_deref()),
            shared,
        }))
    }
}

/// `example.jsonl` -> `example_rollouts.jsonl` in the same folder.
fn default_rollouts(data: &Path) -> Option<PathBuf> {
    let stem = data.file_stem()?.to_str()?;
    Some(data.with_file_name(format!("{stem}_rollouts.jsonl")))
}

/// The POST routes the server's OpenAPI document lists; also proves it is a resources server.
fn served_routes(server: &Server) -> Result<BTreeSet<String>> {
    let url = server.url("/openapi.json");
    let reply = server.get("/openapi.json")?.ok(&url)?;
    let doc = reply.json(&url)?;
    let routes: BTreeSet<String> = doc
        .get("paths")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter(|(_, ops)| ops.get("post").is_some())
                .map(|(path, _)| path.clone())
                .collect()
        })
        .unwrap_or_default();
    if !routes.contains("/verify") || !routes.contains("/seed_session") {
        return Err(Error::Environment(format!(
            "{} is not a NeMo Gym resources server: its /openapi.json lists no POST /seed_session \
             and /verify (it lists {})",
            server.base,
            if routes.is_empty() {
                "none".into()
            } else {
                routes.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        )));
    }
    Ok(routes)
}

/// Every tool a row names must be a route the server serves.
fn check_tools(rows: &[Row], routes: &BTreeSet<String>, file: &str, base: &str) -> Result<()> {
    for r in rows {
        for (i, t) in r.tools.iter().enumerate() {
            if !routes.contains(&format!("/{t}")) {
                let served: Vec<&str> = routes
                    .iter()
                    .filter(|r| !RESERVED.contains(&r.as_str()))
                    .map(|r| r.trim_start_matches('/'))
                    .collect();
                return Err(Error::Define {
                    file: file.to_string(),
                    line: r.line,
                    field: format!("responses_create_params.tools[{i}].name"),
                    message: format!(
                        "the server at {base} serves no tool `{t}` (it serves: {}); is this the \
                         data file of another server?",
                        if served.is_empty() {
                            "none".to_string()
                        } else {
                            served.join(", ")
                        }
                    ),
                });
            }
        }
    }
    Ok(())
}

fn manifest(shared: &Shared, data: &Path, rollouts: Option<&Path>) -> Manifest {
    // `.../resources_servers/<name>/data/example.jsonl` is the `<name>` server's data.
    let name = data
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "data"))
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .or_else(|| data.file_stem())
        .and_then(|n| n.to_str())
        .unwrap_or("nemo_gym")
        .to_string();
    let mut m = Manifest::new(&shared.id, name, "nemo_gym", Mode::Step);
    let with_tools = shared.rows.iter().filter(|r| !r.tools.is_empty()).count();
    m.description = Some(format!(
        "NeMo Gym resources server at {}: {} tasks from {} ({with_tools} with tools), judged by its /verify",
        shared.server.base,
        shared.rows.len(),
        data.display()
    ));
    m.capabilities.text = true;
    m.capabilities.resettable = true;
    m.capabilities.reward_timing = RewardTiming::Terminal;
    m.num_tasks = Some(shared.rows.len() as u64);
    m.action_schema = Some(obj(json!({
        "description": "the assistant's reply text; on tool tasks also a tool call {name, arguments}, an assistant message with tool_calls, or a list of Responses output items",
        "anyOf": [{"type": "string"}, {"type": "object"}, {"type": "array"}]
    })));
    m.extra.insert("server".into(), json!(shared.server.base));
    m.extra
        .insert("data".into(), json!(data.display().to_string()));
    m.extra.insert("tools".into(), json!(shared.tools));
    m.extra.insert("tool_tasks".into(), json!(with_tools));
    m.extra
        .insert("close_session".into(), json!(shared.close_session));
    m.extra.insert(
        "api".into(),
        json!(match shared.api {
            Api::Responses => "responses",
            Api::Chat => "chat",
        }),
    );
    if let Some(r) = rollouts {
        m.extra
            .insert("rollouts".into(), json!(r.display().to_string()));
    }
    m
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A loaded `nemo_gym:` environment.
struct NemoGymEnv {
    manifest: Manifest,
    shared: Arc<Shared>,
}

impl NemoGymEnv {
    fn task(&self, index: usize) -> TaskRef {
        let row = &self.shared.rows[index];
        let mut t = TaskRef::new(index.to_string());
        t.prompt = Some(row.prompt());
        t.metadata.insert("line".into(), json!(row.line));
        if let Some(a) = reference_answer(row) {
            t.metadata.insert("answer".into(), json!(a.1));
        }
        if !row.tools.is_empty() {
            t.metadata.insert("tools".into(), json!(row.tools));
        }
        t
    }
}

impl Environment for NemoGymEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        let n = limit.map_or(self.shared.rows.len(), |l| l.min(self.shared.rows.len()));
        Ok((0..n).map(|i| self.task(i)).collect())
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let index = task_index(&self.shared.id, self.shared.rows.len() as u64, task, seed)?;
        Ok(Box::new(NemoEpisode::open(
            self.shared.clone(),
            index as usize,
            self.task(index as usize),
        )?))
    }

    fn drive(
        &self,
        policy: &Policy,
        opts: &RolloutOptions,
        traj: &mut crate::Trajectory,
    ) -> Result<()> {
        let n = self.shared.rows.len() as u64;
        let index = task_index(&self.shared.id, n, opts.task.as_ref(), opts.seed)? as usize;
        match policy {
            Policy::Chat(model) if !self.shared.rows[index].tools.is_empty() => tool_loop::run(
                self.shared.clone(),
                self.task(index),
                model.clone(),
                index,
                opts,
                traj,
            ),
            _ => drive_steps(self, policy, opts, traj),
        }
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        let rows = &self.shared.rows;
        if rows
            .iter()
            .all(|r| r.tools.is_empty() && reference_answer(r).is_some())
        {
            let shared = self.shared.clone();
            return Some(Policy::action(move |obs| {
                let index = obs
                    .info
                    .get("task_index")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| Error::Policy("observation has no task_index".into()))?;
                let row = shared
                    .rows
                    .get(index as usize)
                    .ok_or_else(|| Error::Policy(format!("task_index {index} is out of range")))?;
                reference_answer(row)
                    .map(|(reply, _)| Value::String(reply))
                    .ok_or_else(|| Error::Policy(format!("line {} carries no answer", row.line)))
            }));
        }
        if self.shared.replay.is_empty() {
            return None;
        }
        let shared = self.shared.clone();
        Some(Policy::chat(FunctionModel::with_messages(
            "nemo-gym-replay",
            move |msgs| tool_loop::replay_turn(&shared.replay, msgs),
        )))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        // Answers nothing and calls no tool: a verifier that rewards it is not checking.
        Some(Policy::constant(json!("I don't know.")))
    }

    fn default_max_steps(&self) -> usize {
        self.shared.max_turns
    }
}

/// The reply that solves a row whose fields carry the expected answer, and the answer:
/// mcqa (`options` + `expected_answer`, a boxed letter and an `Answer:` line so every grading
/// mode reads it), reasoning_gym (`answer` + `metadata.source_dataset`, in `<answer>` tags),
/// math (`expected_answer`, boxed).
fn reference_answer(row: &Row) -> Option<(String, String)> {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let raw = &row.raw;
    if raw.get("options").is_some_and(Value::is_array) {
        let a = raw.get("expected_answer").and_then(text)?;
        return Some((format!("Answer: {a}\n\\boxed{{{a}}}"), a));
    }
    let rg = raw
        .get("metadata")
        .and_then(|m| m.get("source_dataset"))
        .is_some();
    if rg {
        let a = raw.get("answer").and_then(text)?;
        return Some((format!("<answer>{a}</answer>"), a));
    }
    let a = raw.get("expected_answer").and_then(text)?;
    Some((format!("The answer is \\boxed{{{a}}}."), a))
}
