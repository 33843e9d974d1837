//! ATIF on disk: NeMo Gym's export layout (one `<task>-<rollout>.json` per trajectory plus
//! `manifest.jsonl`), Harbor trial folders (`agent/trajectory.json`, `verifier/reward.*`), and
//! re-judging imported trajectories by replaying them through an environment.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{from_atif, to_atif, AtifTrajectory, ExportOptions, RecordedReward};
use crate::contract::{Judgment, Message, Role, TaskRef, Trajectory};
use crate::env::{Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::models::FunctionModel;
use crate::policy::Policy;

fn io(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let ctx = format!("{what} {}", p.display());
    move |e| Error::io(ctx, e)
}

/// The document as NeMo Gym writes it: two-space indented JSON and a final newline.
fn encode(doc: &AtifTrajectory) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(doc).expect("an ATIF document always serialises");
    out.push(b'\n');
    out
}

/// Export a Trajectory JSONL (`nenyax run --out`) as ATIF in NeMo Gym's layout: `out_dir`
/// (which must not exist yet) gets `<task>-<rollout>.json` per line and `manifest.jsonl` with
/// `trajectory_path`, `_ng_task_index`, `_ng_rollout_index` and `expected_sha256`, the
/// manifest `gym eval reverify --input-format atif` reads. A task id that is not a number is
/// numbered by first appearance. Returns how many trajectories were written.
pub fn export_jsonl(input: &Path, out_dir: &Path, opts: &ExportOptions) -> Result<usize> {
    if out_dir.exists() {
        return Err(Error::Config(format!(
            "ATIF output folder {} already exists; name a new one",
            out_dir.display()
        )));
    }
    let reader = BufReader::new(fs::File::open(input).map_err(io("open", input))?);
    let mut docs = Vec::new();
    let mut task_numbers: HashMap<String, u64> = HashMap::new();
    let mut rollouts: HashMap<u64, u64> = HashMap::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(io("read", input))?;
        if line.trim().is_empty() {
            continue;
        }
        let traj = Trajectory::from_json(&line)
            .map_err(|e| Error::Protocol(format!("{} line {}: {e}", input.display(), n + 1)))?;
        let id = traj
            .task
            .as_ref()
            .map_or_else(String::new, |t| t.id.clone());
        let next = task_numbers.len() as u64;
        let task = id
            .parse::<u64>()
            .unwrap_or_else(|_| *task_numbers.entry(id.clone()).or_insert(next));
        let rollout = rollouts.entry(task).or_insert(0);
        let mut doc = to_atif(&traj, opts, Some(*rollout));
        doc.trajectory_id = Some(format!("{}:{task}:{rollout}", opts.session_id));
        docs.push((task, *rollout, encode(&doc)));
        *rollout += 1;
    }
    if docs.is_empty() {
        return Err(Error::Config(format!(
            "{} holds no trajectories",
            input.display()
        )));
    }
    fs::create_dir_all(out_dir).map_err(io("create", out_dir))?;
    let mut manifest = String::new();
    for (task, rollout, bytes) in &docs {
        let name = format!("{task}-{rollout}.json");
        let path = out_dir.join(&name);
        fs::write(&path, bytes).map_err(io("write", &path))?;
        // Keys sorted, no spaces: the manifest lines NeMo Gym's exporter writes.
        manifest.push_str(&format!(
            "{{\"_ng_rollout_index\":{rollout},\"_ng_task_index\":{task},\"expected_sha256\":\"{:x}\",\"trajectory_path\":\"{name}\"}}\n",
            Sha256::digest(bytes)
        ));
    }
    let path = out_dir.join("manifest.jsonl");
    fs::write(&path, manifest).map_err(io("write", &path))?;
    Ok(docs.len())
}

/// Parse one ATIF document from bytes, naming the file when it does not fit.
pub fn parse(bytes: &[u8], origin: &Path) -> Result<AtifTrajectory> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Protocol(format!(
            "{} is not an ATIF trajectory: {e}",
            origin.display()
        ))
    })
}

/// The reward a Harbor trial recorded next to its trajectory: `verifier/reward.txt`, else
/// `verifier/reward.json`'s `reward` (or its only value).
fn harbor_reward(trial: &Path) -> Result<Option<RecordedReward>> {
    let txt = trial.join("verifier/reward.txt");
    if let Ok(s) = fs::read_to_string(&txt) {
        let score = s.trim().parse::<f64>().map_err(|_| {
            Error::Protocol(format!("{} is not a number: {:?}", txt.display(), s.trim()))
        })?;
        return Ok(Some(RecordedReward {
            score,
            recorded_by: "harbor:verifier/reward.txt".into(),
        }));
    }
    let js = trial.join("verifier/reward.json");
    let Ok(s) = fs::read_to_string(&js) else {
        return Ok(None);
    };
    let v: Value = serde_json::from_str(&s)
        .map_err(|e| Error::Protocol(format!("{} is not JSON: {e}", js.display())))?;
    let score = v.get("reward").or_else(|| {
        let m = v.as_object()?;
        (m.len() == 1).then(|| m.values().next()).flatten()
    });
    Ok(score.and_then(Value::as_f64).map(|score| RecordedReward {
        score,
        recorded_by: "harbor:verifier/reward.json".into(),
    }))
}

fn import_file(path: &Path, reward: Option<&RecordedReward>) -> Result<Trajectory> {
    let bytes = fs::read(path).map_err(io("read", path))?;
    let mut t = from_atif(&parse(&bytes, path)?, reward)?;
    if let Some(Value::Object(m)) = t.metadata.get_mut("atif") {
        m.insert("source_path".into(), json!(path.display().to_string()));
        m.insert(
            "source_sha256".into(),
            json!(format!("{:x}", Sha256::digest(&bytes))),
        );
    }
    Ok(t)
}

/// Import what `path` holds: an ATIF `.json` file, a Harbor trial folder (its
/// `agent/trajectory.json`, judged by its recorded reward), or an export folder with a
/// `manifest.jsonl` (NeMo Gym's or ours; each file's SHA-256 is checked against it).
pub fn import_path(path: &Path) -> Result<Vec<Trajectory>> {
    if path.is_file() {
        return Ok(vec![import_file(path, None)?]);
    }
    let traj = path.join("agent/trajectory.json");
    if traj.is_file() {
        return Ok(vec![import_file(&traj, harbor_reward(path)?.as_ref())?]);
    }
    let manifest = path.join("manifest.jsonl");
    let text = fs::read_to_string(&manifest).map_err(|e| {
        Error::Config(format!(
            "{} is neither an ATIF file, a Harbor trial folder (agent/trajectory.json) nor an \
             export folder (manifest.jsonl): {e}",
            path.display()
        ))
    })?;
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let entry: Value = serde_json::from_str(line)
            .map_err(|e| Error::Protocol(format!("{} line {}: {e}", manifest.display(), n + 1)))?;
        let file = entry
            .get("trajectory_path")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "{} line {} has no trajectory_path",
                    manifest.display(),
                    n + 1
                ))
            })?;
        let file = path.join(file);
        let t = import_file(&file, None)?;
        let want = entry.get("expected_sha256").and_then(Value::as_str);
        let got = t.metadata["atif"]["source_sha256"].as_str();
        if want.is_some_and(|w| Some(w) != got) {
            return Err(Error::Protocol(format!(
                "{} does not match its manifest digest (expected {}, got {})",
                file.display(),
                want.unwrap_or_default(),
                got.unwrap_or_default()
            )));
        }
        out.push(t);
    }
    Ok(out)
}

/// The agent's recorded replies, in order: what a replay answers with.
fn recorded_replies(traj: &Trajectory) -> Vec<Message> {
    let first_reply = traj.messages.len() - replies_from_end(traj);
    let replies: Vec<Message> = traj.messages[first_reply..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .cloned()
        .collect();
    if !replies.is_empty() {
        return replies;
    }
    // A step-mode episode keeps no chat, only its actions: text actions are the replies a chat
    // policy gives such an environment.
    traj.steps
        .iter()
        .filter_map(|s| s.action.as_str())
        .map(Message::assistant)
        .collect()
}

/// How many trailing messages came after the prompt (the first assistant message on).
fn replies_from_end(traj: &Trajectory) -> usize {
    let first = traj.messages.iter().position(|m| m.role == Role::Assistant);
    first.map_or(0, |i| traj.messages.len() - i)
}

/// Which recorded replies a re-judging replay answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replay {
    /// Every reply in order: for environments that play the same turns (tool calls included).
    #[default]
    All,
    /// Only the final answer, to every request: for single-turn judges (define:,
    /// reasoning_gym:) of trajectories whose agent worked in several turns elsewhere.
    Final,
}

/// Re-judge `traj` with `env`'s own judge: play its task again with a policy that answers
/// with the recorded replies (see [`Replay`]), and take the new judgment. The recorded judgment stays
/// as the `recorded` component and in `details.recorded_judgment`; `details.replayed` tells
/// whether the environment's prompt matched the recorded one. `task` overrides the
/// trajectory's own task (ATIF from other systems often names none Nenyax knows).
pub fn rejudge(
    traj: &Trajectory,
    env: &Arc<dyn Environment>,
    task: Option<TaskRef>,
    replay: Replay,
) -> Trajectory {
    let mut replies = recorded_replies(traj);
    if replay == Replay::Final {
        replies = replies.pop().into_iter().collect();
    }
    let replies = Arc::new(replies);
    let turn = Arc::new(AtomicUsize::new(0));
    let (r, k) = (replies.clone(), turn.clone());
    let model = FunctionModel::with_messages("atif-replay", move |_| {
        let i = k.fetch_add(1, Ordering::SeqCst);
        let again = (replay == Replay::Final)
            .then(|| r.first().cloned())
            .flatten();
        r.get(i).cloned().or(again).ok_or_else(|| {
            Error::Policy(format!(
                "the environment asked for reply {} but the trajectory recorded only {}",
                i + 1,
                r.len()
            ))
        })
    });
    let task = task.or_else(|| traj.task.clone());
    let replay = env.rollout(&Policy::chat(model), &RolloutOptions::new(task, traj.seed));
    let mut out = traj.clone();
    out.metadata.insert("rejudged_with".into(), json!(env.id()));
    let prompt = |t: &Trajectory| {
        let n = t.messages.len() - replies_from_end(t);
        t.messages[..n]
            .iter()
            .filter_map(Message::text)
            .collect::<Vec<_>>()
    };
    let same_prompt = prompt(&replay) == prompt(traj);
    match (replay.error, replay.judgment) {
        (None, Some(mut j)) => {
            if let Some(old) = &traj.judgment {
                j.components.insert("recorded".into(), json!(old.score));
                j.details.insert("recorded_judgment".into(), json!(old));
            }
            j.details.insert(
                "replayed".into(),
                json!({"replies": turn.load(Ordering::SeqCst), "of": replies.len(), "same_prompt": same_prompt}),
            );
            out.judgment = Some(j);
        }
        (err, _) => {
            out.metadata.insert(
                "rejudge_error".into(),
                json!(err.unwrap_or_else(|| "the environment returned no judgment".into())),
            );
        }
    }
    out
}

/// Judge `traj` with a [`Judge`](crate::judges::Judge) (e.g. from `judge_from_json`), keeping
/// the recorded judgment as the `recorded` component.
pub fn rejudge_with(traj: &Trajectory, judge: &dyn crate::judges::Judge) -> Result<Trajectory> {
    let mut out = traj.clone();
    let mut j: Judgment = judge.judge(traj)?;
    if let Some(old) = &traj.judgment {
        j.components.insert("recorded".into(), json!(old.score));
        j.details.insert("recorded_judgment".into(), json!(old));
    }
    out.judgment = Some(j);
    Ok(out)
}
