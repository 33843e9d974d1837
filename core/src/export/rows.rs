//! Rows from trajectories: raw, SFT, DPO and token-level training rows, each a JSON object whose
//! columns and types are fixed per kind (so the Parquet writer can lay them out).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use crate::contract::{Message, Role, Trajectory};
use crate::error::{Error, Result};
use crate::train::trace::{trace, Turns};

/// One exported row: column name to value (`null` where unknown).
pub type Row = Map<String, Value>;

/// Which rows to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowKind {
    /// One row per trajectory: flat facts plus nested fields as JSON.
    #[default]
    Raw,
    /// The conversations of successful trajectories at or above a score.
    Sft,
    /// Best against worst trajectory of each (environment, task or seed) group.
    Dpo,
    /// Token ids, sampling log-probabilities and loss masks, one row per training trace row.
    Tokens,
}

impl RowKind {
    /// Every kind, by name.
    pub const NAMES: [&'static str; 4] = ["raw", "sft", "dpo", "tokens"];

    /// The kind named `s`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "raw" => RowKind::Raw,
            "sft" => RowKind::Sft,
            "dpo" => RowKind::Dpo,
            "tokens" => RowKind::Tokens,
            _ => {
                return Err(Error::Config(format!(
                    "unknown rows `{s}`: use one of {}",
                    Self::NAMES.join(", ")
                )))
            }
        })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Its columns, in order.
    pub fn columns(self) -> &'static [(&'static str, Col)] {
        use Col::*;
        match self {
            RowKind::Raw => &[
                ("env_id", Str),
                ("mode", Str),
                ("protocol", Str),
                ("task_id", Str),
                ("split", Str),
                ("seed", Int),
                ("score", Float),
                ("passed", Bool),
                ("ok", Bool),
                ("error", Str),
                ("n_steps", Int),
                ("n_messages", Int),
                ("n_model_calls", Int),
                ("duration_s", Float),
                ("started_at", Float),
                ("task", Json),
                ("initial_observation", Json),
                ("messages", Json),
                ("steps", Json),
                ("model_calls", Json),
                ("judgment", Json),
                ("metadata", Json),
            ],
            RowKind::Sft => &[
                ("env_id", Str),
                ("task_id", Str),
                ("seed", Int),
                ("score", Float),
                ("messages", Messages),
            ],
            RowKind::Dpo => &[
                ("env_id", Str),
                ("task_id", Str),
                ("seed", Int),
                ("prompt", Messages),
                ("chosen", Messages),
                ("rejected", Messages),
                ("score_chosen", Float),
                ("score_rejected", Float),
            ],
            RowKind::Tokens => &[
                ("env_id", Str),
                ("task_id", Str),
                ("seed", Int),
                ("score", Float),
                ("trajectory", Int),
                ("row", Int),
                ("action", Bool),
                ("tokens", Ints),
                ("logprobs", Floats),
                ("loss_mask", Bools),
                ("segment_call", Ints),
                ("segment_context_start", Ints),
                ("segment_completion_start", Ints),
                ("segment_completion_len", Ints),
            ],
        }
    }
}

/// A column's type: nullable scalars, JSON text, or lists of nullable scalars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    /// UTF-8 string.
    Str,
    /// 64-bit integer.
    Int,
    /// 64-bit float.
    Float,
    /// Boolean.
    Bool,
    /// Any JSON value: itself in JSONL, its JSON text in Parquet.
    Json,
    /// List of 64-bit integers.
    Ints,
    /// List of 64-bit floats (`null` where unknown).
    Floats,
    /// List of booleans.
    Bools,
    /// Chat messages (OpenAI shape): in Parquet a list of structs {role, content, tool_calls,
    /// tool_call_id} of strings, with non-string content and tool calls as JSON text, the
    /// shape chat-template trainers read.
    Messages,
}

impl Col {
    /// Its Parquet/Arrow type as a dataset card names it.
    pub fn type_name(self) -> &'static str {
        match self {
            Col::Str => "string",
            Col::Int => "int64",
            Col::Float => "float64",
            Col::Bool => "bool",
            Col::Json => "string (JSON)",
            Col::Ints => "list<int64>",
            Col::Floats => "list<float64>",
            Col::Bools => "list<bool>",
            Col::Messages => "list<struct<role, content, tool_calls (JSON), tool_call_id>>",
        }
    }
}

/// Turns a stream of trajectories into rows of one kind, counting what it leaves out and why.
pub struct RowMaker {
    kind: RowKind,
    min_score: f64,
    seen: usize,
    /// Why trajectories (or DPO groups) were left out, by reason.
    pub skipped: BTreeMap<String, usize>,
    groups: HashMap<(String, GroupKey), usize>,
    pairs: Vec<Pair>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum GroupKey {
    Task(String),
    Seed(i64),
}

/// A DPO group's best and worst so far (first seen wins ties, so the output is stable).
struct Pair {
    best: Trajectory,
    worst: Option<Trajectory>,
}

impl RowMaker {
    /// A maker of `kind` rows; SFT keeps trajectories scoring at least `min_score`.
    pub fn new(kind: RowKind, min_score: f64) -> Result<Self> {
        if !min_score.is_finite() {
            return Err(Error::Config(format!(
                "min_score must be a finite number, got {min_score}"
            )));
        }
        Ok(RowMaker {
            kind,
            min_score,
            seen: 0,
            skipped: BTreeMap::new(),
            groups: HashMap::new(),
            pairs: Vec::new(),
        })
    }

    /// Trajectories seen so far.
    pub fn seen(&self) -> usize {
        self.seen
    }

    fn skip(&mut self, why: &str) {
        *self.skipped.entry(why.to_string()).or_default() += 1;
    }

    /// The rows of one trajectory (none for DPO until [`RowMaker::finish`]).
    pub fn push(&mut self, t: Trajectory) -> Vec<Row> {
        let index = self.seen;
        self.seen += 1;
        match self.kind {
            RowKind::Raw => vec![raw(&t)],
            RowKind::Sft => match t.score() {
                _ if !t.ok() => self.skipped("failed"),
                _ if t.messages.is_empty() => self.skipped("no_messages"),
                Some(s) if s >= self.min_score => vec![sft(&t)],
                _ => self.skipped("below_min_score"),
            },
            RowKind::Dpo => {
                self.offer(t);
                Vec::new()
            }
            RowKind::Tokens => match trace(&t, Turns::Join) {
                Ok(rows) => rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| tokens(&t, index, i, r))
                    .collect(),
                Err(why) => self.skipped(why.label()),
            },
        }
    }

    fn skipped(&mut self, why: &str) -> Vec<Row> {
        self.skip(why);
        Vec::new()
    }

    fn offer(&mut self, t: Trajectory) {
        if !t.ok() {
            return self.skip("failed");
        }
        if t.messages.is_empty() {
            return self.skip("no_messages");
        }
        let key = match (&t.task, t.seed) {
            (Some(task), _) => GroupKey::Task(task.id.clone()),
            (None, Some(seed)) => GroupKey::Seed(seed),
            (None, None) => return self.skip("no_task_or_seed"),
        };
        let score = t.score().unwrap_or(0.0);
        match self.groups.get(&(t.env_id.clone(), key.clone())) {
            None => {
                self.groups
                    .insert((t.env_id.clone(), key), self.pairs.len());
                self.pairs.push(Pair {
                    best: t,
                    worst: None,
                });
            }
            Some(&i) => {
                let pair = &mut self.pairs[i];
                let worst_score = pair.worst.as_ref().unwrap_or(&pair.best).score();
                if score > pair.best.score().unwrap_or(0.0) {
                    // The old best may still be the worst.
                    let old = std::mem::replace(&mut pair.best, t);
                    if pair.worst.is_none() {
                        pair.worst = Some(old);
                    }
                } else if Some(score) < worst_score {
                    pair.worst = Some(t);
                }
            }
        }
    }

    /// The rows held back until every trajectory was seen (DPO pairs).
    pub fn finish(&mut self) -> Vec<Row> {
        let pairs = std::mem::take(&mut self.pairs);
        self.groups.clear();
        let mut rows = Vec::new();
        for p in pairs {
            match p.worst {
                Some(w) if w.score() < p.best.score() => rows.push(dpo(&p.best, &w)),
                _ => self.skip("group_without_score_difference"),
            }
        }
        rows
    }
}

/// Every row of `kind` from `trajectories`, in memory (what the reference's `to_rows` did).
pub fn to_rows(
    trajectories: impl IntoIterator<Item = Trajectory>,
    kind: RowKind,
    min_score: f64,
) -> Result<Vec<Row>> {
    let mut maker = RowMaker::new(kind, min_score)?;
    let mut rows: Vec<Row> = trajectories
        .into_iter()
        .flat_map(|t| maker.push(t))
        .collect();
    rows.extend(maker.finish());
    Ok(rows)
}

fn json_of<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn openai(messages: &[Message]) -> Value {
    Value::Array(messages.iter().map(Message::to_openai).collect())
}

fn row(v: Value) -> Row {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("rows are built from object literals"),
    }
}

fn raw(t: &Trajectory) -> Row {
    let j = t.judgment.as_ref();
    row(json!({
        "env_id": t.env_id,
        "mode": t.mode.as_str(),
        "protocol": t.protocol,
        "task_id": t.task.as_ref().map(|k| &k.id),
        "split": t.task.as_ref().and_then(|k| k.split.as_ref()),
        "seed": t.seed,
        "score": t.score(),
        "passed": j.and_then(|j| j.passed),
        "ok": t.ok(),
        "error": t.error,
        "n_steps": t.steps.len(),
        "n_messages": t.messages.len(),
        "n_model_calls": t.model_calls.len(),
        "duration_s": t.duration_s,
        "started_at": t.started_at,
        "task": json_of(&t.task),
        "initial_observation": json_of(&t.initial_observation),
        "messages": openai(&t.messages),
        "steps": json_of(&t.steps),
        "model_calls": json_of(&t.model_calls),
        "judgment": json_of(&t.judgment),
        "metadata": t.metadata,
    }))
}

fn sft(t: &Trajectory) -> Row {
    row(json!({
        "env_id": t.env_id,
        "task_id": t.task.as_ref().map(|k| &k.id),
        "seed": t.seed,
        "score": t.score(),
        "messages": openai(&t.messages),
    }))
}

/// Messages before the first assistant turn, and the rest.
fn split_prompt(t: &Trajectory) -> (&[Message], &[Message]) {
    let first = t
        .messages
        .iter()
        .position(|m| m.role == Role::Assistant)
        .unwrap_or(t.messages.len());
    t.messages.split_at(first)
}

fn dpo(best: &Trajectory, worst: &Trajectory) -> Row {
    let (prompt, chosen) = split_prompt(best);
    let (_, rejected) = split_prompt(worst);
    row(json!({
        "env_id": best.env_id,
        "task_id": best.task.as_ref().map(|k| &k.id),
        // Grouped by seed only when there is no task, so then both share it.
        "seed": if best.task.is_none() { best.seed } else { None },
        "prompt": openai(prompt),
        "chosen": openai(chosen),
        "rejected": openai(rejected),
        "score_chosen": best.score(),
        "score_rejected": worst.score(),
    }))
}

fn tokens(t: &Trajectory, index: usize, i: usize, r: &crate::train::TraceRow) -> Row {
    let seg = |f: fn(&crate::train::trace::Segment) -> usize| -> Vec<usize> {
        r.segments.iter().map(f).collect()
    };
    row(json!({
        "env_id": t.env_id,
        "task_id": t.task.as_ref().map(|k| &k.id),
        "seed": t.seed,
        "score": t.score(),
        "trajectory": index,
        "row": i,
        "action": r.action,
        "tokens": r.tokens,
        // NaN (not sampled, or unknown) becomes null.
        "logprobs": r.sampled_logp.iter().map(|&l| Value::from(l)).collect::<Vec<_>>(),
        "loss_mask": r.mask.iter().map(|&m| m != 0).collect::<Vec<_>>(),
        "segment_call": seg(|s| s.call),
        "segment_context_start": seg(|s| s.context_start),
        "segment_completion_start": seg(|s| s.completion_start),
        "segment_completion_len": seg(|s| s.completion_len),
    }))
}
