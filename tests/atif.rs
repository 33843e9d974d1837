//! ATIF v1.7 both ways: round trips of chat and step-mode trajectories, NeMo Gym's export
//! layout, a Harbor trial imported and re-judged, bad input, and (with
//! `NENYAX_NEMO_GYM_PYTHON`) the same NeMo Gym episode exported by Nenyax and by NeMo Gym
//! 0.7.0's own `gym eval export`, compared field by field, validated by its pydantic models and
//! re-verified through its ATIF re-verification projection against the real server.

#[path = "support/nemo_gym_server.rs"]
mod nemo_gym_server;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

use nenyax::atif::{self, AtifSource, ExportOptions, Replay};
use nenyax::{
    load, FunctionModel, JudgeSource, Judgment, Message, Mode, ModelCall, Policy, Role,
    RolloutOptions, TaskRef, ToolCall, Trajectory,
};

fn data(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/atif")
        .join(p)
}

fn call_msg(id: &str, name: &str, args: &str) -> Message {
    let mut m = Message::assistant("");
    m.content = Value::Null;
    m.tool_calls = Some(vec![ToolCall {
        id: Some(id.into()),
        name: name.into(),
        arguments: Value::String(args.into()),
    }]);
    m
}

fn model_call(t0: f64, ids: Option<Vec<i64>>, logprobs: Option<Vec<f64>>) -> ModelCall {
    ModelCall {
        request: json!({"model": "m"}).as_object().cloned().unwrap(),
        response:
            json!({"model": "m-2026", "usage": {"prompt_tokens": 12, "completion_tokens": 3}})
                .as_object()
                .cloned(),
        error: None,
        latency_s: Some(0.25),
        started_at: Some(t0),
        prompt_token_ids: Some(vec![1, 2, 3]),
        completion_token_ids: ids,
        completion_logprobs: logprobs,
    }
}

/// A tool-calling chat episode with token ids, logprobs, reasoning and a judgment.
fn chat_trajectory() -> Trajectory {
    let mut t = Trajectory::start(
        "define:calc.toml",
        Mode::Step,
        Some(TaskRef::new("7")),
        Some(3),
    );
    let mut reasoned = Message::assistant("It is 42.");
    reasoned
        .extra
        .insert("reasoning_content".into(), json!("6 times 7"));
    let mut tool = Message::new(Role::Tool, "42");
    tool.tool_call_id = Some("c1".into());
    t.messages = vec![
        Message::system("Use the calculator."),
        Message::user("What is 6 * 7?"),
        call_msg("c1", "mul", r#"{"a": 6, "b": 7}"#),
        tool,
        reasoned,
    ];
    t.model_calls = vec![
        model_call(1_796_000_000.5, Some(vec![7, 8]), Some(vec![-0.5, -0.25])),
        model_call(1_796_000_001.25, Some(vec![9]), Some(vec![-1.0])),
    ];
    let j = Judgment::new(1.0, JudgeSource::Verifier, "exact")
        .unwrap()
        .with_passed(true);
    t.judgment = Some(j);
    t
}

#[test]
fn a_chat_trajectory_round_trips_through_atif() {
    let t = chat_trajectory();
    let doc = atif::to_atif(&t, &ExportOptions::default(), Some(0));
    // One step per system/user message, one agent step per reply with its tool results.
    let sources: Vec<AtifSource> = doc.steps.iter().map(|s| s.source).collect();
    use AtifSource::*;
    assert_eq!(sources, [System, User, Agent, Agent]);
    let call = &doc.steps[2];
    assert_eq!(
        call.tool_calls.as_ref().unwrap()[0].arguments,
        *json!({"a": 6, "b": 7}).as_object().unwrap()
    );
    let obs = &call.observation.as_ref().unwrap().results[0];
    assert_eq!(
        (obs.source_call_id.as_deref(), obs.content.as_ref()),
        (Some("c1"), Some(&json!("42")))
    );
    let m = call.metrics.as_ref().unwrap();
    assert_eq!((m.prompt_tokens, m.completion_tokens), (Some(12), Some(3)));
    assert_eq!(m.completion_token_ids, Some(vec![7, 8]));
    assert_eq!(
        call.timestamp.as_deref(),
        Some("2026-11-30T00:53:20.500000Z")
    );
    assert_eq!(call.model_name.as_deref(), Some("m-2026"));
    assert_eq!(doc.steps[3].reasoning_content.as_deref(), Some("6 times 7"));
    let fm = doc.final_metrics.as_ref().unwrap();
    assert_eq!(
        (
            fm.total_prompt_tokens,
            fm.total_completion_tokens,
            fm.total_steps
        ),
        (Some(24), Some(6), Some(4))
    );
    assert_eq!(doc.trajectory_id.as_deref(), Some("nenyax:7:0"));

    // Through JSON and back: messages (the raw argument string included), token ids,
    // logprobs, start times, task, seed and judgment are kept.
    let text = serde_json::to_string(&doc).unwrap();
    let back = atif::from_atif(
        &atif::parse(text.as_bytes(), Path::new("mem")).unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(back.messages, t.messages);
    assert_eq!(back.judgment, t.judgment);
    assert_eq!(
        (back.task.as_ref().unwrap().id.as_str(), back.seed),
        ("7", Some(3))
    );
    assert_eq!(back.env_id, t.env_id);
    assert_eq!(back.model_calls.len(), 2);
    for (a, b) in back.model_calls.iter().zip(&t.model_calls) {
        assert_eq!(a.prompt_token_ids, b.prompt_token_ids);
        assert_eq!(a.completion_token_ids, b.completion_token_ids);
        assert_eq!(a.completion_logprobs, b.completion_logprobs);
        assert_eq!(a.latency_s, b.latency_s);
        assert!((a.started_at.unwrap() - b.started_at.unwrap()).abs() < 1e-6);
        assert_eq!(a.response.as_ref().unwrap()["usage"]["prompt_tokens"], 12);
    }
    // The rebuilt call holds the prompt the model saw and its reply.
    let req = &back.model_calls[1].request["messages"];
    assert_eq!(req.as_array().unwrap().len(), 4);
    assert_eq!(
        back.model_calls[1].response.as_ref().unwrap()["choices"][0]["message"]["content"],
        "It is 42."
    );
}

#[test]
fn replies_that_came_with_the_prompt_are_copied_context() {
    // A few-shot example in the prompt: three assistant messages, two model calls.
    let mut t = chat_trajectory();
    t.messages.insert(1, Message::user("What is 2 * 2?"));
    t.messages.insert(2, Message::assistant("4"));
    let doc = atif::to_atif(&t, &ExportOptions::default(), None);
    let agents: Vec<_> = doc
        .steps
        .iter()
        .filter(|s| s.source == AtifSource::Agent)
        .collect();
    assert_eq!(agents[0].is_copied_context, Some(true));
    assert!(agents[0].metrics.is_none() && agents[0].timestamp.is_none());
    assert_eq!(
        agents[1].metrics.as_ref().unwrap().completion_token_ids,
        Some(vec![7, 8])
    );
    let back = atif::from_atif(&doc, None).unwrap();
    assert_eq!(back.messages, t.messages);
    assert_eq!(back.model_calls.len(), 2);
    assert_eq!(back.model_calls[0].completion_token_ids, Some(vec![7, 8]));
}

#[test]
fn a_step_mode_episode_round_trips_as_actions_and_observations() {
    let env = load("builtin:arithmetic").unwrap();
    let t = env.rollout(
        &Policy::constant(json!("12")),
        &RolloutOptions::new(None, Some(5)),
    );
    assert!(
        t.messages.is_empty() && !t.steps.is_empty(),
        "{:?}",
        t.error
    );
    let doc = atif::to_atif(&t, &ExportOptions::default(), None);
    assert_eq!(doc.steps[0].source, AtifSource::User);
    assert_eq!(doc.steps[1].llm_call_count, Some(0));
    let back = atif::from_atif(&doc, None).unwrap();
    assert_eq!(back.steps.len(), t.steps.len());
    for (a, b) in back.steps.iter().zip(&t.steps) {
        assert_eq!(
            (&a.action, a.reward, a.terminated),
            (&b.action, b.reward, b.terminated)
        );
    }
    assert_eq!(back.score(), t.score());
    assert_eq!(
        back.initial_observation.unwrap().text,
        t.initial_observation.unwrap().text
    );
}

#[test]
fn export_writes_nemo_gyms_layout_and_import_checks_its_digests() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("run.jsonl");
    let mut other = chat_trajectory();
    other.task = Some(TaskRef::new("alpha"));
    let lines = [chat_trajectory(), chat_trajectory(), other]
        .map(|t| t.to_json())
        .join("\n");
    std::fs::write(&jsonl, lines).unwrap();
    let out = dir.path().join("atif");
    let opts = ExportOptions {
        session_id: "run-1".into(),
        ..ExportOptions::default()
    };
    assert_eq!(atif::export_jsonl(&jsonl, &out, &opts).unwrap(), 3);
    let manifest = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap();
    let rows: Vec<Value> = manifest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Task 7 twice (rollouts 0 and 1); `alpha` is not a number, so it is numbered by first
    // appearance; keys sorted as NeMo Gym writes them.
    assert_eq!(rows[0]["trajectory_path"], "7-0.json");
    assert_eq!(rows[1]["trajectory_path"], "7-1.json");
    assert_eq!(
        (&rows[2]["_ng_task_index"], &rows[2]["_ng_rollout_index"]),
        (&json!(0), &json!(0))
    );
    assert!(manifest
        .starts_with("{\"_ng_rollout_index\":0,\"_ng_task_index\":7,\"expected_sha256\":\""));
    let doc: Value = serde_json::from_slice(&std::fs::read(out.join("7-1.json")).unwrap()).unwrap();
    assert_eq!(doc["trajectory_id"], "run-1:7:1");
    let back = atif::import_path(&out).unwrap();
    assert_eq!(back.len(), 3);
    assert_eq!(back[1].messages, chat_trajectory().messages);
    // The output folder is never overwritten, and a changed file fails its digest.
    assert!(atif::export_jsonl(&jsonl, &out, &opts)
        .unwrap_err()
        .to_string()
        .contains("already exists"));
    std::fs::write(out.join("7-1.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    let e = atif::import_path(&out).unwrap_err().to_string();
    assert!(
        e.contains("7-1.json does not match its manifest digest"),
        "{e}"
    );
}

#[test]
fn a_harbor_trial_imports_with_its_reward_and_re_judges() {
    let t = atif::import_path(&data("harbor-trial")).unwrap().remove(0);
    let j = t.judgment.as_ref().unwrap();
    assert_eq!((j.score, j.source), (1.0, JudgeSource::External));
    assert_eq!(j.details["recorded_by"], "harbor:verifier/reward.txt");
    assert_eq!(t.env_id, "atif:terminus-2");
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    use Role::*;
    // The call's result is a tool message; raw terminal output tied to no call is a user turn.
    assert_eq!(roles, [User, Assistant, Tool, Assistant, User, Assistant]);
    assert_eq!(
        t.messages[1].tool_calls.as_ref().unwrap()[0].arguments["keystrokes"],
        "wc -l /app/data.csv\n"
    );
    assert_eq!(
        t.messages[1].extra["reasoning_content"],
        "wc -l counts the header too, so I will subtract one."
    );
    assert_eq!(t.model_calls.len(), 3);
    assert_eq!(
        t.model_calls[0].completion_token_ids,
        Some(vec![4913, 26350, 788, 330, 785, 151645])
    );
    assert_eq!(
        t.model_calls[0].completion_logprobs.as_ref().unwrap()[3],
        -1.0986
    );
    assert_eq!(t.model_calls[2].started_at, Some(1_796_029_929.640_001));
    assert_eq!(t.metadata["atif"]["schema_version"], "ATIF-v1.8");

    // Re-judged by a define: environment's own judge on the final answer...
    let env = load(&format!("define:{}", data("harbor-task.toml").display())).unwrap();
    let r = atif::rejudge(&t, &env, Some(TaskRef::new("0")), Replay::Final);
    let j = r.judgment.as_ref().unwrap();
    assert_eq!(
        (j.score, j.source),
        (1.0, JudgeSource::Verifier),
        "{:?}",
        r.metadata
    );
    assert_eq!(j.components["recorded"], 1.0);
    assert_eq!(j.details["replayed"]["same_prompt"], true);
    // ... and a wrong final answer scores 0 whatever was recorded.
    let mut wrong = t.clone();
    wrong.messages.last_mut().unwrap().content = json!("It has 42 data rows.");
    assert_eq!(
        atif::rejudge(&wrong, &env, Some(TaskRef::new("0")), Replay::Final).score(),
        Some(0.0)
    );
    // Replaying every reply into a one-turn environment judges the first, a tool call: 0.
    assert_eq!(
        atif::rejudge(&t, &env, Some(TaskRef::new("0")), Replay::All).score(),
        Some(0.0)
    );
}

fn nenyax(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_import_command_writes_trajectories_and_re_judges() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.jsonl");
    let trial = data("harbor-trial").display().to_string();
    let task = format!("define:{}", data("harbor-task.toml").display());
    let o = nenyax(&[
        "import",
        "atif",
        &trial,
        "-o",
        out.to_str().unwrap(),
        "--rejudge",
        &task,
        "--task",
        "0",
        "--final-answer",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("imported 1 trajectories (1 judged, mean score 1.000)"),
        "{err}"
    );
    let t = Trajectory::from_json(std::fs::read_to_string(&out).unwrap().trim()).unwrap();
    assert_eq!(t.judgment.unwrap().source, JudgeSource::Verifier);
    // A judge spec instead of an environment.
    let o = nenyax(&[
        "import",
        "atif",
        &trial,
        "-o",
        "-",
        "--judge",
        r#"{"type": "regex", "pattern": "\\b42\\b"}"#,
    ]);
    assert!(o.status.success());
    assert_eq!(
        Trajectory::from_json(String::from_utf8_lossy(&o.stdout).trim())
            .unwrap()
            .score(),
        Some(0.0)
    );
}

#[test]
fn bad_atif_gets_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let good: Value =
        serde_json::from_slice(&std::fs::read(data("harbor-trial/agent/trajectory.json")).unwrap())
            .unwrap();
    // (file, object to change as a JSON pointer, its field, the new value, the error).
    let cases = [
        (
            "version.json",
            "",
            "schema_version",
            json!("ATIF-v2.0"),
            "not an ATIF v1 document: schema_version is `ATIF-v2.0`",
        ),
        (
            "ids.json",
            "/steps/1",
            "step_id",
            json!(5),
            "steps[1].step_id is 5, expected 2",
        ),
        (
            "unknown.json",
            "/steps/0",
            "speaker",
            json!("me"),
            "unknown field `speaker`",
        ),
        (
            "dangling.json",
            "/steps/1/observation/results/0",
            "source_call_id",
            json!("nope"),
            "result for tool call `nope`, which that step did not make",
        ),
    ];
    for (name, at, field, value, want) in cases {
        let mut v = good.clone();
        v.pointer_mut(at).unwrap()[field] = value;
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        let e = atif::import_path(&p).unwrap_err();
        assert_eq!(e.kind(), "ProtocolError");
        assert!(e.to_string().contains(want), "{name}: {e}");
        let o = nenyax(&["import", "atif", p.to_str().unwrap(), "-o", "-"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.trim().lines().count() == 1 && err.contains(want),
            "{name}: {err}"
        );
    }
    let e = atif::import_path(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("neither an ATIF file, a Harbor trial folder"),
        "{e}"
    );
}

/// NeMo Gym's role names: it refuses `developer` in ATIF export, so the row says `system`, as
/// Nenyax reads it.
fn gym_items(items: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = items.as_array().cloned().unwrap_or_default();
    for i in &mut out {
        if i.get("role") == Some(&json!("developer")) {
            i["role"] = json!("system");
        }
        if i.get("role").is_some() && i.get("type").is_none() {
            i["type"] = json!("message");
        }
    }
    out
}

/// The episode as a NeMo Gym rollout row (what `gym eval export` reads): its `ng_trajectory`
/// v1.0 record built from the Responses requests and replies the nemo_gym driver exchanged.
fn gym_rollout(t: &Trajectory) -> Value {
    let (inv, task_id, rollout_id) = ("inv-0", "0", "0-0");
    let mut turns = Vec::new();
    let mut calls = Vec::new();
    let mut steps = 0;
    for (i, c) in t.model_calls.iter().enumerate() {
        let resp = c.response.as_ref().unwrap();
        let answer = gym_items(&resp["output"]);
        steps += answer
            .iter()
            .filter(|a| a["type"] == "function_call")
            .count();
        let started = c.started_at.unwrap();
        let latency = c.latency_s.unwrap();
        turns.push(json!({
            "invocation_id": inv, "task_id": task_id, "rollout_id": rollout_id,
            "turn_no": i + 1, "timestamp": started,
            "question": gym_items(&c.request["input"]), "answer": answer,
            "step_count": steps, "model_calls": [{"model_call_id": format!("mc-{i}")}],
        }));
        calls.push(json!({
            "model_call_id": format!("mc-{i}"), "started_at": started,
            "completed_at": started + latency, "duration_ms": latency * 1000.0,
            "response_metadata": {"response_id": resp["id"], "model": resp["model"],
                                  "dialect": "responses", "response_status": resp["status"]},
            "token_stats": {"prompt_tokens": resp["usage"]["input_tokens"],
                            "completion_tokens": resp["usage"]["output_tokens"],
                            "total_tokens": resp["usage"]["total_tokens"]},
        }));
    }
    let last = t.model_calls.last().unwrap();
    let mut conversation = gym_items(&last.request["input"]);
    conversation.extend(gym_items(&last.response.as_ref().unwrap()["output"]));
    let tool_calls: Vec<Value> = conversation
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|o| {
            let call = conversation
                .iter()
                .find(|c| c["type"] == "function_call" && c["call_id"] == o["call_id"])
                .unwrap();
            json!({"invocation_id": inv, "tool_call_id": o["call_id"], "tool_name": call["name"],
                   "status": "completed", "output": o["output"]})
        })
        .collect();
    let refs: Vec<Value> = (0..calls.len())
        .map(|i| json!({"model_call_id": format!("mc-{i}")}))
        .collect();
    json!({
        "_ng_task_index": 0, "_ng_rollout_index": 0,
        "agent_ref": {"type": "responses_api_agents", "name": "simple_agent"},
        "reward": t.score(),
        "ng_trajectory": {
            "schema_version": "1.0", "task_id": task_id, "rollout_id": rollout_id,
            "invocations": [{"invocation_id": inv, "status": "completed", "model_calls": refs,
                             "conversation": conversation}],
            "turns": turns, "model_calls": calls, "tool_calls": tool_calls,
        },
    })
}

/// Validates our files with NeMo Gym's pydantic models, then re-verifies them the way
/// `gym eval reverify --input-format atif` does: its manifest loader and projection build the
/// /verify payloads, posted to the running resources server.
const GYM_CHECK: &str = r#"
import json, sys, urllib.request
from pathlib import Path
from nemo_gym.atif_v1_7 import AtifTrajectoryV1_7
from nemo_gym.rollout_reverification import _prepare_atif_payloads, ATIF_PROVENANCE_KEY
ours, inputs, url = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
for f in sorted(ours.glob("*.json")) + [Path(p) for p in sys.argv[4:]]:
    AtifTrajectoryV1_7.model_validate_json(f.read_text())
rewards = []
for p in _prepare_atif_payloads(inputs, ours / "manifest.jsonl"):
    body = {k: v for k, v in p.items() if k != ATIF_PROVENANCE_KEY}
    req = urllib.request.Request(url + "/verify", json.dumps(body).encode(), {"Content-Type": "application/json"})
    rewards.append(json.load(urllib.request.urlopen(req))["reward"])
print(json.dumps({"valid": len(list(ours.glob("*.json"))), "rewards": rewards}))
"#;

/// A step without producer-specific `extra`, its text parts joined: the fields both exporters
/// fill from the same episode.
fn comparable(doc: &Value) -> Value {
    let mut d = doc.clone();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("extra");
                if let Some(Value::Array(parts)) = m.get("message") {
                    let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
                    m.insert("message".into(), json!(text));
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut d);
    d
}

#[test]
fn nemo_gyms_own_export_of_the_same_episode_matches_ours() {
    let Some(py) = nemo_gym_server::python() else {
        return;
    };
    let s = nemo_gym_server::ResourcesServer::start(&py, "example_single_tool_call");
    let data_file = nemo_gym_server::example_data(&py, &s.name);
    let uri = format!("nemo_gym:{}?data={data_file}&api=responses", s.url);
    let env = load(&uri).unwrap();
    let model = FunctionModel::with_messages("weather-script", |msgs| {
        Ok(match msgs.last().map(|m| m.role) {
            Some(Role::Tool) => Message::assistant(format!(
                "Here you go: {}",
                msgs.last().and_then(Message::text).unwrap_or_default()
            )),
            _ => call_msg("call_0", "get_weather", r#"{"city":"San Francisco"}"#),
        })
    });
    let t = env.rollout(
        &Policy::chat(model),
        &RolloutOptions::new(Some(TaskRef::new("0")), None),
    );
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);

    let dir = tempfile::tempdir().unwrap();
    let (run, rollouts) = (
        dir.path().join("run.jsonl"),
        dir.path().join("rollouts.jsonl"),
    );
    std::fs::write(&run, t.to_json()).unwrap();
    std::fs::write(&rollouts, gym_rollout(&t).to_string()).unwrap();
    let opts = ExportOptions {
        session_id: "eval-1".into(),
        agent_name: "simple_agent".into(),
        agent_version: "1.0".into(),
    };
    let (ours, theirs) = (dir.path().join("ours"), dir.path().join("theirs"));
    assert_eq!(atif::export_jsonl(&run, &ours, &opts).unwrap(), 1);
    let gym = Path::new(&py).with_file_name("gym");
    let o = Command::new(&gym)
        .args([
            "eval",
            "export",
            "--format",
            "atif",
            "--rollouts",
            rollouts.to_str().unwrap(),
            "--output-dir",
            theirs.to_str().unwrap(),
            "--session-id",
            "eval-1",
            "--agent-version",
            "1.0",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gym eval export: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );

    // The same layout: one file per rollout, the same manifest keys.
    let read =
        |p: PathBuf| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let manifest = |d: &Path| -> Value {
        serde_json::from_str(
            std::fs::read_to_string(d.join("manifest.jsonl"))
                .unwrap()
                .trim(),
        )
        .unwrap()
    };
    let (mo, mt) = (manifest(&ours), manifest(&theirs));
    for k in ["trajectory_path", "_ng_task_index", "_ng_rollout_index"] {
        assert_eq!(mo[k], mt[k], "manifest {k}");
    }
    let (a, b) = (read(ours.join("0-0.json")), read(theirs.join("0-0.json")));
    // Field by field, without the producers' own `extra`: ids, agent, steps (sources, text,
    // tool calls, results, timestamps, model names, token counts) and final metrics agree.
    assert_eq!(
        comparable(&a),
        comparable(&b),
        "ours:\n{a:#}\ntheirs:\n{b:#}"
    );
    assert_eq!(a["steps"][2]["timestamp"], b["steps"][2]["timestamp"]);
    assert!(b["extra"]["nemo_gym"].is_object() && a["extra"]["nenyax"]["judgment"]["score"] == 1.0);

    // Ours passes NeMo Gym's pydantic models, and its re-verification projection of our file
    // scores 1.0 at the real server.
    let inputs = dir.path().join("inputs.jsonl");
    let mut row: Value = serde_json::from_str(
        std::fs::read_to_string(&data_file)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    row["_ng_task_index"] = json!(0);
    row["_ng_rollout_index"] = json!(0);
    row["agent_ref"] = json!({"type": "responses_api_agents", "name": "simple_agent"});
    std::fs::write(&inputs, row.to_string()).unwrap();
    let o = Command::new(&py)
        .args([
            "-c",
            GYM_CHECK,
            ours.to_str().unwrap(),
            inputs.to_str().unwrap(),
            &s.url,
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        serde_json::from_str::<Value>(out.trim()).unwrap(),
        json!({"valid": 1, "rewards": [1.0]})
    );

    // NeMo Gym's file imports into the same conversation and re-judges at the server: 1.0.
    let back = atif::import_path(&theirs).unwrap().remove(0);
    let texts = |t: &Trajectory| {
        t.messages
            .iter()
            .map(|m| (m.role, m.text(), m.tool_calls.clone()))
            .collect::<Vec<_>>()
    };
    let mut want = t.clone();
    // Their file keeps the arguments as an object, not the model's string.
    for m in &mut want.messages {
        for c in m.tool_calls.iter_mut().flatten() {
            c.arguments = serde_json::from_str(c.arguments.as_str().unwrap()).unwrap();
        }
    }
    assert_eq!(texts(&back), texts(&want));
    assert_eq!(back.task.as_ref().unwrap().id, "0");
    assert!(back.judgment.is_none(), "NeMo Gym's ATIF carries no reward");
    let r = atif::rejudge(&back, &env, None, Replay::All);
    assert_eq!(
        r.score(),
        Some(1.0),
        "{:?}",
        r.metadata.get("rejudge_error")
    );
    assert_eq!(
        r.judgment.unwrap().details["replayed"],
        json!({"replies": 2, "of": 2, "same_prompt": true})
    );
}
