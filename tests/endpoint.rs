//! The Endpoint policy against a local OpenAI-compatible server.
//!
//! No real model server (vLLM, SGLang) can run on the CI machine, so these tests use a small
//! scripted server for the HTTP behaviour only a fake can produce on demand: rate limits,
//! server errors, malformed bodies, and vLLM's token-id fields. It answers arithmetic
//! questions correctly so the whole chat path (prompt in, reply out, judged) is exercised.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use nenyax::{load, ChatModel, Endpoint, Message, Policy, RolloutOptions};

/// What the server does for one request.
#[derive(Clone)]
enum Reply {
    Status(u16, &'static str),
    Solve,
}

/// Each request's JSON body and Authorization header, in arrival order.
type Seen = Arc<Mutex<Vec<(Value, Option<String>)>>>;

struct Server {
    url: String,
    seen: Seen,
}

fn solve(body: &Value) -> String {
    let msgs = body["messages"].as_array().unwrap();
    let q = msgs.last().unwrap()["content"].as_str().unwrap();
    let expr = q.trim_start_matches("What is ").split('?').next().unwrap();
    let parts: Vec<&str> = expr.split(' ').collect();
    let (a, b): (i64, i64) = (parts[0].parse().unwrap(), parts[2].parse().unwrap());
    let r = match parts[1] {
        "+" => a + b,
        "-" => a - b,
        _ => a * b,
    };
    format!("The result is <answer>{r}</answer>")
}

fn serve(script: Vec<Reply>, then: Reply) -> Server {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", server.server_addr().to_ip().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut script: VecDeque<Reply> = script.into();
    thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let auth = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.to_string());
            log.lock().unwrap().push((body.clone(), auth));
            let (status, text) = match script.pop_front().unwrap_or_else(|| then.clone()) {
                Reply::Status(s, t) => (s, t.to_string()),
                Reply::Solve => {
                    let content = solve(&body);
                    let v = json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                        "prompt_token_ids": [101, 102, 103],
                        "choices": [{
                            "index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content, "reasoning_content": null},
                            "token_ids": [7, 8, 9],
                            "logprobs": {"content": [
                                {"token": "a", "logprob": -0.25}, {"token": "b", "logprob": -0.5},
                                {"token": "c", "logprob": -1.0}]}
                        }],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
                    });
                    (200, v.to_string())
                }
            };
            let _ = req.respond(tiny_http::Response::from_string(text).with_status_code(status));
        }
    });
    Server { url, seen }
}

fn quick(url: &str) -> Endpoint {
    Endpoint::new(url, "qwen-test").retries(3, Duration::from_millis(5))
}

#[test]
fn retries_rate_limits_and_server_errors_then_records_tokens() {
    let s = serve(
        vec![
            Reply::Status(429, "slow down"),
            Reply::Status(503, "warming up"),
        ],
        Reply::Solve,
    );
    std::env::set_var("NENYAX_TEST_ENDPOINT_KEY", "sk-test");
    let ep = quick(&s.url)
        .api_key_from_env("NENYAX_TEST_ENDPOINT_KEY")
        .unwrap()
        .param("temperature", json!(0.0));
    let env = load("builtin:arithmetic?size=5").unwrap();
    let t = env.rollout(&Policy::chat(ep), &RolloutOptions::new(None, Some(2)));
    assert_eq!(t.score(), Some(1.0), "{:?}", t.error);
    let seen = s.seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "two retried failures, then success");
    assert_eq!(seen[2].1.as_deref(), Some("Bearer sk-test"));
    assert_eq!(seen[2].0["temperature"], json!(0.0));
    assert_eq!(seen[2].0["model"], "qwen-test");
    assert_eq!(t.model_calls.len(), 1);
    let call = &t.model_calls[0];
    assert_eq!(call.prompt_token_ids, Some(vec![101, 102, 103]));
    assert_eq!(call.completion_token_ids, Some(vec![7, 8, 9]));
    assert_eq!(call.completion_logprobs, Some(vec![-0.25, -0.5, -1.0]));
    assert_eq!(call.response.as_ref().unwrap()["usage"]["total_tokens"], 6);
    assert_eq!(t.messages.len(), 2);
    assert_eq!(
        t.messages[1].extra.get("reasoning_content"),
        Some(&Value::Null)
    );
}

#[test]
fn client_errors_are_not_retried_and_quote_the_server() {
    let s = serve(
        vec![],
        Reply::Status(400, r#"{"error": "model `qwen-test` does not exist"}"#),
    );
    let (result, call) = quick(&s.url).complete_recorded(&[Message::user("hi")]);
    let e = result.unwrap_err();
    assert_eq!(e.kind(), "EndpointError");
    assert!(
        e.to_string().contains("HTTP 400") && e.to_string().contains("does not exist"),
        "{e}"
    );
    assert_eq!(s.seen.lock().unwrap().len(), 1);
    assert!(call.error.is_some() && call.response.is_none());
}

#[test]
fn persistent_server_errors_give_up_after_the_retry_budget() {
    let s = serve(vec![], Reply::Status(500, "boom"));
    let e = quick(&s.url).complete(&[Message::user("hi")]).unwrap_err();
    assert!(e.to_string().contains("gave up after 4 attempts"), "{e}");
    assert_eq!(s.seen.lock().unwrap().len(), 4);
}

#[test]
fn malformed_bodies_are_protocol_errors() {
    let s = serve(
        vec![Reply::Status(200, "not json")],
        Reply::Status(200, r#"{"choices": []}"#),
    );
    let e = quick(&s.url).complete(&[Message::user("hi")]).unwrap_err();
    assert!(e.to_string().contains("not a JSON object"), "{e}");
    let e = quick(&s.url).complete(&[Message::user("hi")]).unwrap_err();
    assert_eq!(e.kind(), "ProtocolError");
    assert!(e.to_string().contains("choices[0].message"), "{e}");
}

#[test]
fn a_batch_of_chat_rollouts_through_the_runner() {
    let s = serve(vec![], Reply::Solve);
    let env = load("builtin:arithmetic?size=20").unwrap();
    let runner = nenyax::Runner::new(2).unwrap().progress(false);
    let jobs = nenyax::plan(env.as_ref(), 20, 0).unwrap();
    let out = runner
        .collect(&env, &Policy::chat(quick(&s.url)), jobs, None)
        .unwrap();
    assert!(
        out.iter().all(|t| t.score() == Some(1.0)),
        "{:?}",
        out.iter().map(|t| &t.error).collect::<Vec<_>>()
    );
    assert_eq!(s.seen.lock().unwrap().len(), 20);
}

/// A recording server answered by `reply`, standing in for an OpenAI-compatible upstream that
/// streams when asked.
fn recorder_upstream(
    reply: impl Fn(&[Message]) -> nenyax::Result<String> + Send + Sync + 'static,
) -> (nenyax::ModelServer, nenyax::Recording) {
    let server = nenyax::ModelServer::start().unwrap();
    let rec = server.record(nenyax::Backend::Model(Arc::new(
        nenyax::FunctionModel::new("upstream", reply),
    )));
    (server, rec)
}

#[test]
fn a_streaming_endpoint_assembles_the_reply_and_records_it_whole() {
    let (_server, rec) = recorder_upstream(|_| Ok("streamed <answer>7</answer>".into()));
    let e = Endpoint::new(rec.base_url(), "m").stream(true);
    let (reply, call) = e.complete_recorded(&[Message::user("What is 3 + 4?")]);
    assert_eq!(
        reply.unwrap().text().unwrap(),
        "streamed <answer>7</answer>"
    );
    assert_eq!(call.request["stream"], json!(true));
    assert_eq!(
        call.response.unwrap()["choices"][0]["message"]["content"],
        "streamed <answer>7</answer>"
    );
    // The upstream saw a streamed call.
    assert_eq!(rec.calls()[0].request["stream"], json!(true));
}

#[test]
fn max_concurrency_caps_requests_in_flight_across_threads() {
    let now = Arc::new(Mutex::new((0usize, 0usize))); // (in flight, most seen)
    let n2 = now.clone();
    let (_server, rec) = recorder_upstream(move |_| {
        {
            let mut n = n2.lock().unwrap();
            n.0 += 1;
            n.1 = n.1.max(n.0);
        }
        thread::sleep(Duration::from_millis(50));
        n2.lock().unwrap().0 -= 1;
        Ok("ok".into())
    });
    let e = Endpoint::new(rec.base_url(), "m").max_concurrency(2);
    thread::scope(|s| {
        for _ in 0..8 {
            let e = e.clone();
            s.spawn(move || e.complete(&[Message::user("hi")]).unwrap());
        }
    });
    assert_eq!(rec.calls().len(), 8);
    assert_eq!(
        now.lock().unwrap().1,
        2,
        "at most 2 in flight, and the cap was reached"
    );
}

#[test]
fn tool_definitions_go_out_and_tool_calls_come_back() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", server.server_addr().to_ip().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            log.lock()
                .unwrap()
                .push((serde_json::from_str(&body).unwrap(), None));
            let reply = json!({"id": "c", "object": "chat.completion", "choices": [{"index": 0,
                "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]}}]});
            let _ = req.respond(tiny_http::Response::from_string(reply.to_string()));
        }
    });
    let tools = json!([{"type": "function", "function": {"name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]);
    let e = Endpoint::new(&url, "m").param("tools", tools.clone());
    let reply = e.complete(&[Message::user("add 2 and 3")]).unwrap();
    let calls = reply.tool_calls.expect("the tool call came back");
    assert_eq!(calls[0].name, "add");
    assert_eq!(calls[0].id.as_deref(), Some("call_1"));
    assert_eq!(seen.lock().unwrap()[0].0["tools"], tools);
}

/// Under train(), an endpoint samples with each episode's seed (the request's `seed`, which
/// vLLM, SGLang and OpenAI honour): group members differ, and a rerun sends the same seeds.
#[test]
fn train_sends_each_episode_its_own_sampling_seed() {
    use nenyax::train::{learner, LearnerParts};
    let run = || {
        let s = serve(vec![], Reply::Solve);
        let env = load("builtin:arithmetic?size=40").unwrap();
        let mut l = learner(
            &json!("incontext"),
            LearnerParts {
                model: Some(Arc::new(quick(&s.url))),
                ..LearnerParts::default()
            },
        )
        .unwrap();
        let opts = nenyax::TrainOptions {
            rounds: 1,
            group_size: 3,
            batch: 2,
            concurrency: 2,
            progress: false,
            ..nenyax::TrainOptions::default()
        };
        let r = nenyax::train(&env, l.as_mut(), &opts).unwrap();
        assert_eq!(r.failed_rounds(), 0, "{}", r.render());
        let mut seeds: Vec<u64> = s
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|(b, _)| b["seed"].as_u64().expect("every request carries a seed"))
            .collect();
        seeds.sort();
        seeds
    };
    let a = run();
    // 10 held-out episodes twice (before and after) and 6 training ones.
    assert_eq!(a.len(), 26);
    let mut distinct = a.clone();
    distinct.dedup();
    // Evaluations reuse their seeds; training members each have their own.
    assert_eq!(distinct.len(), 10 + 6, "{a:?}");
    assert_eq!(a, run());
}
