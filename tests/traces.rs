//! Training-ready traces (`nenyax::train::trace`) from real recorded rollouts: the Verifiers
//! 0.3.1 ToolEnv `nx-tools-v0` and the 0.4.0 single-turn taskset `nx_arith` (the real packages,
//! in the venvs `scripts/setup_verifiers.sh` makes), and NeMo Gym 0.7.0's tool servers (real
//! servers from `scripts/setup_nemo_gym.sh`'s venv, as in tests/nemo_gym.rs).
//!
//! The policy is an `Endpoint` to a vLLM-shaped upstream (tests/support/token_model.rs): a
//! scripted model behind a chat template and a byte-level tokenizer that returns token ids and
//! logprobs when asked, so the recording server keeps what a real vLLM would give it; for NeMo
//! Gym's Responses API, NeMo Gym's own vllm_model server sits in front of it. Joining
//! is proven where the template is prefix-stable, and a trajectory is masked with its reason
//! where a call was dropped, its token ids are missing, or the template re-renders an earlier
//! turn.
//!
//! Prerequisites as in tests/verifiers.rs (`NENYAX_VERIFIERS_*_PYTHON`, a failure without them)
//! and tests/nemo_gym.rs (`NENYAX_NEMO_GYM_PYTHON`; a skip without it unless
//! `NENYAX_REQUIRE_NEMO_GYM` is set); `scripts/test.sh` sets them all.

#[path = "support/nemo_gym_server.rs"]
mod nemo_gym_server;
#[path = "support/token_model.rs"]
mod token_model;

use serde_json::{json, Value};

use nemo_gym_server::{example_data, ResourcesServer};
use nenyax::train::trace::{trace, MaskReason, TraceRow, Turns};
use nenyax::{load, Endpoint, Policy, Role, RolloutOptions, Runner, TaskRef, Trajectory};
use token_model::{detokenize, logprob, History, Reply, TokenModel};

// ---- checks on a trace ----------------------------------------------------------------------

fn ids(c: &nenyax::ModelCall) -> (&[i64], &[i64]) {
    (
        c.prompt_token_ids
            .as_deref()
            .expect("prompt token ids kept"),
        c.completion_token_ids
            .as_deref()
            .expect("completion token ids kept"),
    )
}

/// Joins `t` and checks the row against its calls: the last prompt plus the last completion,
/// one segment per call, the mask 1 exactly on what each call sampled (with the upstream's
/// log-probs) and 0 on everything else, every tool result among the 0s.
fn assert_joined(t: &Trajectory) -> TraceRow {
    let rows = trace(t, Turns::Join).unwrap_or_else(|e| panic!("masked: {e}"));
    assert_eq!(rows.len(), 1);
    let r = rows.into_iter().next().unwrap();
    let calls = &t.model_calls;
    assert_eq!(r.segments.len(), calls.len());
    let (lp, lc) = ids(calls.last().unwrap());
    assert_eq!(r.tokens, [lp, lc].concat(), "last prompt + last completion");
    let mut mask = vec![0u8; r.len()];
    let mut context = Vec::new();
    let mut end = 0;
    for (i, (s, c)) in r.segments.iter().zip(calls).enumerate() {
        let (p, comp) = ids(c);
        assert_eq!((s.call, s.context_start), (i, 0));
        assert_eq!(s.completion_start, p.len(), "call {i}");
        assert_eq!(s.completion_len, comp.len(), "call {i}");
        assert_eq!(&r.tokens[..p.len()], p, "call {i}'s prompt starts the row");
        assert_eq!(&r.tokens[p.len()..][..comp.len()], comp, "call {i}");
        mask[p.len()..][..comp.len()].fill(1);
        for (k, &tok) in comp.iter().enumerate() {
            assert_eq!(
                r.sampled_logp[p.len() + k],
                logprob(tok),
                "call {i} token {k}"
            );
        }
        // What was sampled is the reply the environment got, and never environment text.
        let said = detokenize(comp);
        assert!(said.ends_with("<|im_end|>") && !said.contains("<|im_start|>"));
        let (reply, tools) = reply(c);
        assert!(said.contains(&reply), "{said}");
        for name in tools {
            assert!(said.contains(&format!("\"name\":\"{name}\"")), "{said}");
        }
        context.push(detokenize(&r.tokens[end..p.len()]));
        end = p.len() + comp.len();
    }
    assert_eq!(r.mask, mask);
    assert!((0..r.len()).all(|k| (mask[k] == 1) != r.sampled_logp[k].is_nan()));
    let tools: Vec<String> = t
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| {
            format!(
                "<|im_start|>tool\n{}<|im_end|>",
                m.text().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        !tools.is_empty() || calls.len() == 1,
        "a tool loop has tool results"
    );
    let between = context[1..].concat();
    for tool in &tools {
        assert!(between.contains(tool), "{tool} not in the 0-masked context");
    }
    r
}

/// A call's reply as its response carries it: the text and the tool names, from a chat
/// completion or a Responses object's output items.
fn reply(c: &nenyax::ModelCall) -> (String, Vec<String>) {
    let r = Value::Object(c.response.clone().expect("a response"));
    let name = |v: &Value| v.as_str().map(str::to_string);
    if let Some(m) = r.pointer("/choices/0/message") {
        let tools = m["tool_calls"].as_array().into_iter().flatten();
        let names = tools.filter_map(|t| name(&t["function"]["name"])).collect();
        return (text(m), names);
    }
    let items = r["output"].as_array().cloned().unwrap_or_default();
    let of = |kind: &'static str| items.iter().filter(move |i| i["type"] == kind);
    let said = of("message").map(text).collect();
    (
        said,
        of("function_call")
            .filter_map(|f| name(&f["name"]))
            .collect(),
    )
}

/// The real trajectory with one call removed, or one call's ids removed, is masked with the
/// reason, whichever call it is.
fn assert_tampering_is_masked(t: &Trajectory) {
    let n = t.model_calls.len();
    for drop in 0..n {
        let mut d = t.clone();
        d.model_calls.remove(drop);
        let e = trace(&d, Turns::Join).expect_err("a dropped call is masked");
        let why = e.to_string();
        if n == 1 {
            assert_eq!(e, MaskReason::NoCalls);
            assert!(why.contains("no model call was recorded"), "{why}");
            continue;
        }
        assert_eq!(
            e,
            MaskReason::Dropped {
                turns: n,
                calls: n - 1
            },
            "call {drop} dropped"
        );
        assert!(why.contains("a model call was dropped"), "{why}");
        assert!(why.contains(&format!("{n} policy turns")), "{why}");
    }
    for i in 0..n {
        for which in ["prompt", "completion"] {
            let mut d = t.clone();
            let c = &mut d.model_calls[i];
            match which {
                "prompt" => c.prompt_token_ids = None,
                _ => c.completion_token_ids = None,
            }
            let e = trace(&d, Turns::Join).expect_err("missing ids are masked");
            assert_eq!(e, MaskReason::MissingTokenIds(i, which));
            let why = e.to_string();
            assert!(why.contains(&format!("call {i} has no {which} token ids")));
            assert!(why.contains("never re-tokenises"), "{why}");
        }
    }
    // Split trains each call on its own prompt: as many rows as calls.
    let rows = trace(t, Turns::Split).unwrap();
    assert_eq!(rows.len(), n);
    for (r, c) in rows.iter().zip(&t.model_calls) {
        let (p, comp) = ids(c);
        assert_eq!(r.tokens, [p, comp].concat());
        assert_eq!(r.sampled(), comp.len());
    }
}

/// Every call asked the upstream for token ids and logprobs and got them.
fn assert_captured(up: &TokenModel, t: &Trajectory) {
    for (i, c) in t.model_calls.iter().enumerate() {
        assert!(c.error.is_none(), "call {i}: {:?}", c.error);
        assert_eq!(c.request["return_token_ids"], json!(true), "call {i}");
        assert_eq!(c.request["logprobs"], json!(true), "call {i}");
        let n = c.completion_token_ids.as_ref().map(Vec::len);
        assert_eq!(c.completion_logprobs.as_ref().map(Vec::len), n, "call {i}");
    }
    assert!(up.requests().len() >= t.model_calls.len());
}

fn endpoint(up: &TokenModel) -> Policy {
    Policy::chat(Endpoint::new(&up.base_url, "token-model").capture_tokens(true))
}

fn task(i: usize) -> RolloutOptions {
    RolloutOptions::new(Some(TaskRef::new(i.to_string())), None)
}

fn text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn last_user(msgs: &[Value]) -> String {
    msgs.iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(text)
        .unwrap_or_default()
}

/// Assistant turns since the last user message: which turn of the tool loop this is.
fn turn(msgs: &[Value]) -> usize {
    let from = msgs.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    msgs[from..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

fn numbers(s: &str) -> Vec<i64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn last_tool(msgs: &[Value]) -> String {
    msgs.last().map(text).unwrap_or_default()
}

// ---- Verifiers ------------------------------------------------------------------------------

fn verifiers(var: &str, env: &str) -> String {
    let py = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run scripts/test.sh, which makes the verifiers venvs with \
             scripts/setup_verifiers.sh and points {var} at their interpreter"
        )
    });
    let envs = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verifiers_envs");
    format!("verifiers:{env}?path={envs}&python={py}&workers=1")
}

/// "What is (A + B) * C?": add, then multiply the sum, then answer; the first turn thinks
/// first when `think` is set.
fn arith_tools(think: bool) -> impl Fn(&[Value]) -> Reply + Send + Sync {
    move |msgs| {
        let q = numbers(&last_user(msgs));
        match turn(msgs) {
            0 => {
                let r = Reply::calls(&[("add", json!({"a": q[0], "b": q[1]}))]);
                if think {
                    r.thinking("Add first, then multiply.")
                } else {
                    r
                }
            }
            1 => Reply::calls(&[(
                "multiply",
                json!({"a": numbers(&last_tool(msgs))[0], "b": q[2]}),
            )]),
            _ => Reply::text(format!("<answer>{}</answer>", last_tool(msgs))),
        }
    }
}

#[test]
fn verifiers_tool_loop_joins_and_tampering_is_masked() {
    let up = TokenModel::start(History::Keep, arith_tools(true));
    let env = load(&verifiers("NENYAX_VERIFIERS_031_PYTHON", "nx-tools-v0")).unwrap();
    assert_eq!(env.manifest().extra["env_class"], "ToolEnv");
    let jobs = nenyax::plan(env.as_ref(), 4, 0).unwrap();
    let trajs = Runner::new(1)
        .unwrap()
        .progress(false)
        .collect(&env, &endpoint(&up), jobs, None)
        .unwrap();
    assert_eq!(trajs.len(), 4);
    for t in &trajs {
        assert!(t.error.is_none(), "{:?}", t.error);
        assert_eq!(t.score(), Some(1.0), "{:?}", t.judgment);
        assert_eq!(t.model_calls.len(), 3, "add, multiply, answer");
        assert_captured(&up, t);
        // The whole conversation came back: the few-shot answer in the prompt (context, not a
        // turn) and both tool-call turns, whose content verifiers returns empty.
        assert!(t.messages.iter().any(|m| m.text().as_deref() == Some("2")));
        let tool_turns = t.messages.iter().filter(|m| m.tool_calls.is_some());
        assert_eq!(tool_turns.count(), 2, "{:?}", t.messages);
        let r = assert_joined(t);
        assert_eq!(r.segments.len(), 3);
        // Reasoning was sampled in the first turn and kept in the history, so it is trained.
        let first = &r.segments[0];
        let sampled = detokenize(&r.tokens[first.completion_start..][..first.completion_len]);
        assert!(sampled.starts_with("<think>\nAdd first"), "{sampled}");
    }
    assert_tampering_is_masked(&trajs[0]);

    // Without capture the upstream, like vLLM, returns no ids: masked, never re-tokenised.
    let plain = Policy::chat(Endpoint::new(&up.base_url, "token-model"));
    let t = env.rollout(&plain, &task(1));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    assert!(t.model_calls[0].request.get("return_token_ids").is_none());
    assert_eq!(
        trace(&t, Turns::Join),
        Err(MaskReason::MissingTokenIds(0, "completion"))
    );
}

#[test]
fn verifiers_template_that_drops_past_reasoning_is_discontinuous() {
    // DeepSeek-R1-style: earlier turns re-render without their <think> block, so the second
    // prompt no longer extends what the first call sampled.
    let up = TokenModel::start(History::DropThink, arith_tools(true));
    let env = load(&verifiers("NENYAX_VERIFIERS_031_PYTHON", "nx-tools-v0")).unwrap();
    let t = env.rollout(&endpoint(&up), &task(2));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    assert_captured(&up, &t);
    let e = trace(&t, Turns::Join).expect_err("not prefix-stable");
    assert_eq!(e, MaskReason::Discontinuous(1));
    let why = e.to_string();
    assert!(
        why.contains("model call 1's prompt does not extend call 0's prompt plus completion"),
        "{why}"
    );
    // Each call is still usable on its own.
    assert_eq!(trace(&t, Turns::Split).unwrap().len(), 3);
    // The same template with no reasoning sampled re-renders every turn as sampled.
    let up = TokenModel::start(History::DropThink, arith_tools(false));
    let t = env.rollout(&endpoint(&up), &task(2));
    assert_joined(&t);
}

#[test]
fn verifiers_v1_single_turn_streamed_call_is_one_row() {
    let up = TokenModel::start(History::Keep, |msgs: &[Value]| {
        let q = last_user(msgs);
        let n = numbers(&q);
        let v = match () {
            _ if q.contains('+') => n[0] + n[1],
            _ if q.contains('*') => n[0] * n[1],
            _ => n[0] - n[1],
        };
        Reply::text(format!("<answer>{v}</answer>"))
    });
    let env = load(&verifiers("NENYAX_VERIFIERS_040_PYTHON", "nx_arith")).unwrap();
    let t = env.rollout(&endpoint(&up), &task(1));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    assert_eq!(t.model_calls.len(), 1);
    assert_captured(&up, &t);
    // Verifiers 0.4.0's harness always streams: the ids came in chunks and were assembled.
    assert_eq!(t.model_calls[0].request["stream"], json!(true));
    let r = assert_joined(&t);
    let (p, c) = ids(&t.model_calls[0]);
    assert_eq!(r.mask, [vec![0u8; p.len()], vec![1u8; c.len()]].concat());
    assert_eq!(detokenize(c), "<answer>42</answer><|im_end|>");
    assert!(detokenize(p).contains("What is 7 * 6?"));
    assert_tampering_is_masked(&t);
}

// ---- NeMo Gym -------------------------------------------------------------------------------

fn nemo_gym(name: &str) -> Option<(ResourcesServer, String)> {
    let py = nemo_gym_server::python()?;
    let s = ResourcesServer::start(&py, name);
    let data = example_data(&py, name);
    Some((s, data))
}

/// Calls `get_weather`, then answers from its output.
fn weather(msgs: &[Value]) -> Reply {
    match msgs.last().map(|m| m["role"].clone()) {
        Some(r) if r == "tool" => Reply::text(format!("Here you go: {}", last_tool(msgs))),
        _ => Reply::calls(&[("get_weather", json!({"city": "San Francisco"}))]),
    }
}

/// "add X then add Y then get the count": both increments in one turn, then the read, then the
/// answer.
fn counter(msgs: &[Value]) -> Reply {
    let n = numbers(&last_user(msgs));
    match turn(msgs) {
        0 => Reply::calls(&[
            ("increment_counter", json!({"count": n[0]})),
            ("increment_counter", json!({"count": n[1]})),
        ]),
        1 => Reply::calls(&[("get_counter_value", json!({}))]),
        _ => Reply::text(format!("The count is {}", last_tool(msgs))),
    }
}

#[test]
fn nemo_gym_tool_loops_join_and_tampering_is_masked() {
    type Script = fn(&[Value]) -> Reply;
    let cases: [(&str, Script, usize); 2] = [
        ("example_single_tool_call", weather, 2),
        ("example_session_state_mgmt", counter, 3),
    ];
    for (name, script, calls) in cases {
        let Some((s, data)) = nemo_gym(name) else {
            return;
        };
        let up = TokenModel::start(History::Keep, script);
        let env = load(&format!("nemo_gym:{}?data={data}&api=chat", s.url)).unwrap();
        for i in 0..3 {
            let t = env.rollout(&endpoint(&up), &task(i));
            assert_eq!(t.score(), Some(1.0), "{name} task {i}: {:?}", t.error);
            assert_eq!(t.model_calls.len(), calls, "{name}");
            assert_captured(&up, &t);
            assert_joined(&t);
            if i == 0 {
                assert_tampering_is_masked(&t);
            }
        }
    }
}

#[test]
fn nemo_gym_through_its_own_vllm_model_server_joins_on_both_apis() {
    // NeMo Gym's training set-up: its vllm_model server between the agent and vLLM returns the
    // token ids itself, on the chat message or on the Responses turn's last output item.
    let Some((s, data)) = nemo_gym("example_session_state_mgmt") else {
        return;
    };
    let py = nemo_gym_server::python().expect("checked above");
    let up = TokenModel::start(History::Keep, counter);
    let model = ResourcesServer::start_vllm_model(&py, &up.base_url, "token-model");
    // No capture asked: the vllm_model server does it, and refuses fields it does not know.
    let policy = Policy::chat(Endpoint::new(format!("{}/v1", model.url), "token-model"));
    for api in ["responses", "chat"] {
        let env = load(&format!("nemo_gym:{}?data={data}&api={api}", s.url)).unwrap();
        let t = env.rollout(&policy, &task(1));
        assert_eq!(t.score(), Some(1.0), "api={api}: {:?}", t.error);
        assert_eq!(t.model_calls.len(), 3, "api={api}");
        let route = if api == "chat" { "messages" } else { "input" };
        assert!(t.model_calls[0].request.contains_key(route));
        assert_joined(&t);
        assert_tampering_is_masked(&t);
    }
}

#[test]
fn nemo_gym_reasoning_joins_when_the_template_keeps_it_and_breaks_when_it_drops_it() {
    let Some((s, data)) = nemo_gym("example_session_state_mgmt") else {
        return;
    };
    let env = load(&format!("nemo_gym:{}?data={data}&api=chat", s.url)).unwrap();
    let thinking = |msgs: &[Value]| match turn(msgs) {
        0 => counter(msgs).thinking("Two increments, then read the counter."),
        _ => counter(msgs),
    };
    // The driver hands the reasoning back as a reasoning item, so a Qwen3-style template that
    // keeps it within the tool loop re-renders the first turn exactly as sampled.
    let up = TokenModel::start(History::Keep, thinking);
    let t = env.rollout(&endpoint(&up), &task(0));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    let r = assert_joined(&t);
    let first = &r.segments[0];
    let sampled = detokenize(&r.tokens[first.completion_start..][..first.completion_len]);
    assert!(sampled.starts_with("<think>\nTwo increments"), "{sampled}");
    // A DeepSeek-R1-style template drops it from history: the second prompt breaks off.
    let up = TokenModel::start(History::DropThink, thinking);
    let t = env.rollout(&endpoint(&up), &task(0));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    assert_captured(&up, &t);
    assert_eq!(trace(&t, Turns::Join), Err(MaskReason::Discontinuous(1)));
}
