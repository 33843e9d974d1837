//! The `nemo_gym:` driver against real NeMo Gym 0.7.0 resources servers (mcqa, reasoning_gym,
//! the single-tool-call weather example and the stateful counter), each started by the test
//! from the venv `scripts/setup_nemo_gym.sh` makes, with the server's shipped example data.
//!
//! `scripts/test.sh` sets `NENYAX_NEMO_GYM_PYTHON` (and `NENYAX_REQUIRE_NEMO_GYM`, so nothing
//! skips there); run alone without it, each test prints why it skips.

#[path = "support/nemo_gym_server.rs"]
mod nemo_gym_server;

use nemo_gym_server::{calls, example_data, python, ResourcesServer};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use nenyax::conformance::{check_uri, CheckOptions, Tier};
use nenyax::recorder::{Backend, ModelServer};
use nenyax::{
    load, ChatModel, Endpoint, FunctionModel, Message, Policy, Role, RolloutOptions, Runner,
    TaskRef,
};

/// One server per name for the whole test binary (they start in seconds, not milliseconds).
fn server(name: &'static str) -> Option<&'static ResourcesServer> {
    static SERVERS: OnceLock<Mutex<Vec<&'static ResourcesServer>>> = OnceLock::new();
    let py = python()?;
    let mut all = SERVERS
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(s) = all.iter().find(|s| s.name == name) {
        return Some(s);
    }
    let s: &'static ResourcesServer = Box::leak(Box::new(ResourcesServer::start(&py, name)));
    all.push(s);
    Some(s)
}

fn uri(s: &ResourcesServer, extra: &str) -> String {
    let py = python().expect("checked by server()");
    format!(
        "nemo_gym:{}?data={}{extra}",
        s.url,
        example_data(&py, &s.name)
    )
}

fn task(i: usize) -> RolloutOptions {
    RolloutOptions::new(Some(TaskRef::new(i.to_string())), None)
}

fn last_user(msgs: &[Message]) -> String {
    msgs.iter()
        .rev()
        .find(|m| m.role == Role::User)
        .and_then(Message::text)
        .unwrap_or_default()
}

fn assistant_turns(msgs: &[Message]) -> usize {
    let from = msgs.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
    msgs[from..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count()
}

/// Calls `get_weather` once, then answers from its output.
fn weather_model() -> FunctionModel {
    FunctionModel::with_messages("weather-script", |msgs| {
        Ok(match msgs.last().map(|m| m.role) {
            Some(Role::Tool) => Message::assistant(format!(
                "Here you go: {}",
                msgs.last().and_then(Message::text).unwrap_or_default()
            )),
            _ => calls(&[("get_weather", json!({"city": "San Francisco"}))]),
        })
    })
}

/// Reads "add X then add Y then get the count": increments by X and Y (or by X only when
/// `correct` is false), reads the counter, then reports it.
fn counter_model(correct: bool) -> FunctionModel {
    FunctionModel::with_messages("counter-script", move |msgs| {
        let q = last_user(msgs);
        let nums: Vec<i64> = q
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        Ok(match assistant_turns(msgs) {
            0 if correct => calls(&[
                ("increment_counter", json!({"count": nums[0]})),
                ("increment_counter", json!({"count": nums[1]})),
            ]),
            0 => calls(&[("increment_counter", json!({"count": nums[0]}))]),
            1 => calls(&[("get_counter_value", json!({}))]),
            _ => Message::assistant(format!(
                "The count is {}",
                msgs.last().and_then(Message::text).unwrap_or_default()
            )),
        })
    })
}

#[test]
fn mcqa_and_reasoning_gym_reach_audited() {
    for name in ["mcqa", "reasoning_gym"] {
        let Some(s) = server(name) else { return };
        let r = check_uri(
            &uri(s, ""),
            &CheckOptions {
                samples: 5,
                ..CheckOptions::default()
            },
        );
        assert_eq!(r.tier, Tier::Audited, "{}", r.render());
    }
}

#[test]
fn single_turn_verify_judges_and_explains() {
    let Some(s) = server("mcqa") else { return };
    let env = load(&uri(s, "")).unwrap();
    let m = env.manifest();
    assert_eq!(m.source_format, "nemo_gym");
    assert_eq!(m.name, "mcqa");
    assert_eq!(m.num_tasks, Some(5));
    assert!(m.capabilities.text);
    assert_eq!(m.extra["tools"], json!([]));
    // The observation is the row's input as chat messages; a wrong letter scores 0 and the
    // server's extracted answer is kept as evidence.
    let mut session = env.session(Some(&TaskRef::new("0")), None).unwrap();
    let msgs = session.observation().messages.clone().unwrap();
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].text().unwrap().contains("cystic fibrosis"));
    let step = session.act(json!("Thinking... \\boxed{C}")).unwrap();
    assert_eq!(step.reward, 0.0);
    assert!(step.terminated);
    let j = session.judgment().unwrap();
    assert_eq!(j.score, 0.0);
    assert_eq!(j.source, nenyax::JudgeSource::Verifier);
    assert_eq!(j.details["extracted_answer"], "C");
    assert_eq!(j.details["expected_answer"], "B");
    // The right letter, from a chat model this time: 1.0, with the model call recorded.
    let model = FunctionModel::new("right", |_| Ok("\\boxed{B}".into()));
    let t = env.rollout(&Policy::chat(model), &task(0));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    assert_eq!(t.model_calls.len(), 1);
    assert_eq!(t.judgment.unwrap().details["extracted_answer"], "B");
}

#[test]
fn weather_tool_calls_score_one_and_skipping_them_scores_zero() {
    let Some(s) = server("example_single_tool_call") else {
        return;
    };
    for api in ["responses", "chat"] {
        let env = load(&uri(s, &format!("&api={api}"))).unwrap();
        assert_eq!(env.manifest().extra["tools"], json!(["get_weather"]));
        let good = Policy::chat(weather_model());
        let bad = Policy::chat(FunctionModel::new("no-tools", |_| Ok("Sunny!".into())));
        for i in 0..5 {
            let t = env.rollout(&good, &task(i));
            assert_eq!(t.score(), Some(1.0), "api={api} task {i}: {:?}", t.error);
            // One model call per turn, the tool call as a step, then the final answer.
            assert_eq!(t.model_calls.len(), 2, "api={api}");
            assert!(t.model_calls.iter().all(|c| c.error.is_none()));
            assert_eq!(t.steps.len(), 2);
            assert_eq!(t.steps[0].action["name"], "get_weather");
            assert!(t.steps[0]
                .observation
                .text
                .as_deref()
                .unwrap()
                .contains("The weather in San Francisco is cold."));
            assert!(t.steps[1].terminated);
            assert_eq!(
                t.messages.iter().filter(|m| m.role == Role::Tool).count(),
                1
            );
            let t = env.rollout(&bad, &task(i));
            assert_eq!(t.score(), Some(0.0), "api={api}: {:?}", t.error);
        }
    }
}

#[test]
fn counter_state_follows_the_episode_cookie() {
    let Some(s) = server("example_session_state_mgmt") else {
        return;
    };
    let env = load(&uri(s, "")).unwrap();
    // Correct calls: 1.0 on every task, in parallel too (one cookie jar per episode).
    let jobs = nenyax::plan(env.as_ref(), 10, 0).unwrap();
    let good = Policy::chat(counter_model(true));
    let trajs = Runner::new(4)
        .unwrap()
        .progress(false)
        .collect(&env, &good, jobs, None)
        .unwrap();
    for t in &trajs {
        assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
        assert_eq!(t.model_calls.len(), 3);
        assert_eq!(t.steps.len(), 4, "three tool calls and the final answer");
        assert_eq!(t.metadata["stop_reason"], "no_tool_calls");
    }
    // A call short: the counter is off and /verify says so.
    let t = env.rollout(&Policy::chat(counter_model(false)), &task(0));
    assert_eq!(t.score(), Some(0.0), "{:?}", t.error);
    // The turn limit stops the loop after the first turn's calls and /verify judges what was
    // done: the counter's verify reads only its own state, which both increments already set.
    let t = env.rollout(
        &Policy::chat(counter_model(true)),
        &RolloutOptions {
            max_steps: Some(1),
            ..task(0)
        },
    );
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(t.model_calls.len(), 1);
    assert_eq!(t.metadata["stop_reason"], "max_turns");
    assert_eq!(t.steps.len(), 3, "two tool calls and the truncated end");
    assert!(t.steps.last().unwrap().truncated);
    assert_eq!(t.score(), Some(1.0));
}

#[test]
fn tool_tasks_step_from_outside_with_the_same_cookies() {
    let Some(s) = server("example_session_state_mgmt") else {
        return;
    };
    let env = load(&uri(s, "")).unwrap();
    // Row 0: initial 3, "add 1 then add 2", expected 6.
    let mut session = env.session(Some(&TaskRef::new("0")), None).unwrap();
    let step = session
        .act(json!({"name": "increment_counter", "arguments": {"count": 1}}))
        .unwrap();
    assert_eq!(step.observation.data, json!({"success": true}));
    session
        .act(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "increment_counter", "arguments": "{\"count\": 2}"}}]}))
        .unwrap();
    let step = session
        .act(json!({"type": "function_call", "call_id": "c3", "name": "get_counter_value", "arguments": "{}"}))
        .unwrap();
    assert_eq!(step.observation.data, json!({"count": 6}));
    // A tool the task does not have, and arguments that are not JSON: answered without
    // reaching the server (so a model cannot call /verify as a tool).
    let step = session
        .act(json!({"name": "verify", "arguments": {}}))
        .unwrap();
    assert!(step
        .observation
        .text
        .as_deref()
        .unwrap()
        .contains("not one of this task's tools"));
    let step = session
        .act(json!({"name": "increment_counter", "arguments": "{not json"}))
        .unwrap();
    assert!(step
        .observation
        .text
        .as_deref()
        .unwrap()
        .contains("Invalid tool call arguments"));
    let last = session.act(json!("The count is 6.")).unwrap();
    assert!(last.terminated);
    assert_eq!(session.judgment().unwrap().score, 1.0);
    // Text-only actions on a single-turn row are fine, tool calls are not.
    let mcqa = server("mcqa").unwrap();
    let env = load(&uri(mcqa, "")).unwrap();
    let mut session = env.session(None, Some(0)).unwrap();
    let e = session
        .act(json!({"name": "get_weather", "arguments": {}}))
        .err()
        .unwrap();
    assert!(e.to_string().contains("no tools"), "{e}");
}

#[test]
fn a_tool_calling_endpoint_works_like_a_function_model() {
    let Some(s) = server("example_session_state_mgmt") else {
        return;
    };
    // The upstream: an OpenAI-compatible server of our own (chat completions and responses)
    // answered by the scripted model; the Endpoint reaches it over HTTP like any vLLM.
    let upstream = ModelServer::start().unwrap();
    let rec = upstream.record(Backend::Model(Arc::new(counter_model(true))));
    for api in ["responses", "chat"] {
        let env = load(&uri(s, &format!("&api={api}"))).unwrap();
        let endpoint = Endpoint::new(rec.base_url(), "scripted");
        assert!(endpoint.upstream().is_some());
        let t = env.rollout(&Policy::chat(endpoint), &task(1));
        assert_eq!(t.score(), Some(1.0), "api={api}: {:?}", t.error);
        assert_eq!(t.model_calls.len(), 3);
        let route_key = if api == "chat" { "messages" } else { "input" };
        assert!(t.model_calls[2].request.contains_key(route_key));
        assert!(t.model_calls.iter().all(|c| c.response.is_some()));
    }
}

#[test]
fn replay_of_shipped_rollouts_audits_the_counter() {
    let Some(s) = server("example_session_state_mgmt") else {
        return;
    };
    let r = check_uri(
        &uri(s, ""),
        &CheckOptions {
            samples: 5,
            ..CheckOptions::default()
        },
    );
    assert_eq!(r.tier, Tier::Audited, "{}", r.render());
}

// ---- faults -------------------------------------------------------------------------------

#[test]
fn a_server_that_is_down_at_load_is_named() {
    let Some(py) = python() else { return };
    let port = nemo_gym_server::free_port();
    let u = format!(
        "nemo_gym:http://127.0.0.1:{port}?data={}",
        example_data(&py, "mcqa")
    );
    let e = load(&u).err().unwrap().to_string();
    assert!(e.contains(&format!("http://127.0.0.1:{port}")), "{e}");
    assert!(e.contains("could not be reached"), "{e}");
}

#[test]
fn a_server_killed_mid_episode_fails_that_episode_only() {
    let Some(py) = python() else { return };
    let victim = Arc::new(Mutex::new(ResourcesServer::start(
        &py,
        "example_session_state_mgmt",
    )));
    let url = victim.lock().unwrap().url.clone();
    let env = load(&uri(&victim.lock().unwrap(), "")).unwrap();
    // Episodes run one at a time; the third one's model kills the server after its first turn.
    let episode = Arc::new(AtomicUsize::new(0));
    let (v, ep) = (victim.clone(), episode.clone());
    let inner = counter_model(true);
    let model = FunctionModel::with_messages("killer", move |msgs| {
        if assistant_turns(msgs) == 0 {
            ep.fetch_add(1, Ordering::SeqCst);
        }
        if ep.load(Ordering::SeqCst) == 3 && assistant_turns(msgs) == 1 {
            v.lock().unwrap().kill();
        }
        inner.complete(msgs)
    });
    let jobs = nenyax::plan(env.as_ref(), 4, 0).unwrap();
    let trajs = Runner::new(1)
        .unwrap()
        .progress(false)
        .collect(&env, &Policy::chat(model), jobs, None)
        .unwrap();
    assert_eq!(trajs.len(), 4, "the batch went on");
    assert_eq!(trajs[0].score(), Some(1.0));
    assert_eq!(trajs[1].score(), Some(1.0));
    let e = trajs[2].error.as_deref().expect("the third episode failed");
    assert!(
        e.contains(&url) && e.contains("could not be reached"),
        "{e}"
    );
    assert_eq!(
        trajs[2].steps.len(),
        2,
        "what the episode did before the crash is kept"
    );
    assert!(trajs[3].error.is_some());
}

fn temp_data(rows: &[Value]) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".jsonl")
        .tempfile()
        .unwrap();
    for r in rows {
        writeln!(f, "{r}").unwrap();
    }
    f
}

#[test]
fn strict_field_checks_are_quoted_from_the_server() {
    let Some(s) = server("example_session_state_mgmt") else {
        return;
    };
    // The counter's /seed_session requires `initial_count`: the server's 422 is quoted.
    let f =
        temp_data(&[json!({"responses_create_params": {"input": "add 1"}, "expected_count": 1})]);
    let env = load(&format!("nemo_gym:{}?data={}", s.url, f.path().display())).unwrap();
    let e = env.session(None, Some(0)).err().unwrap().to_string();
    assert!(e.contains("HTTP 422"), "{e}");
    assert!(e.contains("initial_count: Field required (missing)"), "{e}");
    assert!(e.contains("line 1"), "{e}");
    // Responses create params are validated with extra="forbid" by /verify.
    let mcqa = server("mcqa").unwrap();
    let f = temp_data(&[
        json!({"responses_create_params": {"input": "hi", "bogus_field": 1},
        "options": [{"A": "a"}, {"B": "b"}], "expected_answer": "A"}),
    ]);
    let env = load(&format!(
        "nemo_gym:{}?data={}",
        mcqa.url,
        f.path().display()
    ))
    .unwrap();
    let t = env.rollout(&Policy::constant(json!("\\boxed{A}")), &task(0));
    let e = t.error.expect("verify refused the row");
    assert!(e.contains("HTTP 422") && e.contains("bogus_field"), "{e}");
    assert!(e.contains("extra_forbidden"), "{e}");
}

#[test]
fn malformed_rows_and_unserved_tools_name_line_and_field() {
    // Rows are checked before the server is contacted.
    let f = temp_data(&[
        json!({"responses_create_params": {"input": "fine"}}),
        json!({"responses_create_params": {"input": [{"role": "user"}]}}),
    ]);
    let e = load(&format!(
        "nemo_gym:http://127.0.0.1:9?data={}",
        f.path().display()
    ))
    .err()
    .unwrap();
    assert_eq!(e.kind(), "DefineError");
    let e = e.to_string();
    assert!(
        e.contains(":2: responses_create_params.input[0].content"),
        "{e}"
    );
    let e = load("nemo_gym:http://127.0.0.1:9?data=/no/such/file.jsonl")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("/no/such/file.jsonl"), "{e}");
    // A weather row against the mcqa server: its tool is not served there.
    let Some(mcqa) = server("mcqa") else { return };
    let py = python().unwrap();
    let e = load(&format!(
        "nemo_gym:{}?data={}",
        mcqa.url,
        example_data(&py, "example_single_tool_call")
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains(":1: responses_create_params.tools[0].name") && e.contains("get_weather"),
        "{e}"
    );
}
