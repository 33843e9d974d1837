//! The recording model server: local models and upstream proxying, streams, token capture,
//! faults, and attribution under many concurrent rollouts.
//!
//! The upstream here is a small tiny_http server written for the test: a vLLM-shaped peer
//! (token ids and logprobs) that can also fail on demand (500, a stall past the timeout, a
//! stream cut off mid-way), which is what no real server does on request. The official `openai`
//! Python client is exercised in `tests/python_interop.rs`.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nenyax::{Backend, FunctionModel, ModelServer, Role, Upstream};

fn echo_model() -> Backend {
    Backend::Model(Arc::new(FunctionModel::new("echo", |messages| {
        let last = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.text())
            .unwrap_or_default();
        Ok(format!("you said: {last}"))
    })))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

fn post(url: &str, body: &str) -> (u16, String) {
    let mut r = agent()
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .expect("the server answers");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn a_local_model_answers_every_route_and_each_call_is_recorded() {
    let server = ModelServer::start().unwrap();
    let rec = server.record(echo_model());
    let base = rec.base_url().to_string();
    assert!(base.ends_with("/v1"), "{base}");

    let (s, body) = post(
        &format!("{base}/chat/completions"),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "you said: hi");
    assert_eq!(v["object"], "chat.completion");

    let (s, body) = post(
        &format!("{base}/completions"),
        r#"{"model":"m","prompt":"2+2="}"#,
    );
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["text"], "you said: 2+2=");

    let (s, body) = post(
        &format!("{base}/responses"),
        r#"{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"ping"}]}]}"#,
    );
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["output"][0]["content"][0]["text"], "you said: ping");

    let mut r = agent().get(&format!("{base}/models")).call().unwrap();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["data"][0]["id"], "echo");

    let calls = rec.calls();
    assert_eq!(calls.len(), 3, "three model calls (GET /models is not one)");
    assert!(calls
        .iter()
        .all(|c| c.error.is_none() && c.response.is_some()));
    assert_eq!(calls[0].request["messages"][0]["content"], "hi");
    assert_eq!(calls[1].request["prompt"], "2+2=");
    assert!(calls.iter().all(|c| c.latency_s.is_some_and(|l| l >= 0.0)));
}

/// Reads a chunked SSE response by hand, returning the data lines and whether it ended cleanly.
fn sse(url: &str, body: &str) -> (Vec<String>, bool) {
    let mut r = agent()
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut text = String::new();
    let clean = r.body_mut().as_reader().read_to_string(&mut text).is_ok();
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_string))
        .collect();
    (data, clean)
}

#[test]
fn a_local_model_streams_chat_and_the_call_is_recorded_whole() {
    let server = ModelServer::start().unwrap();
    let rec = server.record(echo_model());
    let (events, clean) = sse(
        &format!("{}/chat/completions", rec.base_url()),
        r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"stream me"}]}"#,
    );
    assert!(clean);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, "you said: stream me");
    let calls = rec.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].response.as_ref().unwrap()["choices"][0]["message"]["content"],
        "you said: stream me"
    );
}

#[test]
fn bad_requests_get_openai_errors_and_are_recorded() {
    let server = ModelServer::start_with(1024).unwrap();
    let rec = server.record(echo_model());
    let base = rec.base_url().to_string();

    let (s, body) = post(&format!("{base}/chat/completions"), "{not json");
    assert_eq!(s, 400);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{body}"
    );

    let big = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(4000)
    );
    let (s, body) = post(&format!("{base}/chat/completions"), &big);
    assert_eq!(s, 413, "{body}");
    assert!(body.contains("limit"), "{body}");

    let (s, body) = post(&format!("{base}/chat/completions"), r#"{"model":"m"}"#);
    assert_eq!(s, 400);
    assert!(body.contains("messages"), "{body}");

    let (s, body) = post(&format!("{base}/embeddings"), r#"{"model":"m"}"#);
    assert_eq!(s, 404);
    assert!(body.contains("served: POST chat/completions"), "{body}");

    let gone = format!("{}/r/nope/v1/chat/completions", server.url());
    let (s, body) = post(&gone, r#"{"model":"m","messages":[]}"#);
    assert_eq!(s, 404);
    assert!(body.contains("unknown recording nope"), "{body}");

    let calls = rec.calls();
    assert_eq!(
        calls.len(),
        3,
        "malformed, oversize and invalid calls are recorded"
    );
    assert!(calls
        .iter()
        .all(|c| c.error.is_some() && c.response.is_none()));
    assert!(calls[0].request["raw_body"]
        .as_str()
        .unwrap()
        .contains("not json"));
}

/// What the test upstream saw of each request: its body and Authorization header.
type Seen = Arc<Mutex<Vec<(Value, Option<String>)>>>;

/// A vLLM-shaped upstream. The request's `model` picks the behaviour: `ok`, `fail500`,
/// `stall` (answers after 3 s), `flaky` (500 once, then ok), `stream` (token ids per chunk),
/// `cut` (a stream cut off after its first event).
fn upstream() -> (String, Seen, Arc<AtomicUsize>) {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = server.server_addr().to_ip().unwrap().port();
    let seen: Seen = Arc::default();
    let flaky = Arc::new(AtomicUsize::new(0));
    let (s2, f2) = (seen.clone(), flaky.clone());
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let (seen, flaky) = (s2.clone(), f2.clone());
            std::thread::spawn(move || {
                let mut body = String::new();
                req.as_reader().read_to_string(&mut body).unwrap();
                let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let auth = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Authorization"))
                    .map(|h| h.value.to_string());
                seen.lock().unwrap().push((v.clone(), auth));
                let content = v["messages"][0]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let ok = json!({
                    "id": "cmpl-1", "object": "chat.completion", "model": v["model"],
                    "prompt_token_ids": [101, 102, 103],
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": format!("re: {content}")},
                        "token_ids": [7, 8, 9],
                        "logprobs": {"content": [
                            {"token": "re", "logprob": -0.125, "bytes": null, "top_logprobs": []},
                            {"token": ":", "logprob": -0.5, "bytes": null, "top_logprobs": []},
                            {"token": " x", "logprob": -1.75, "bytes": null, "top_logprobs": []}]}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}});
                let json_resp = |status: u16, body: &Value| {
                    tiny_http::Response::from_data(body.to_string().into_bytes())
                        .with_status_code(status)
                        .with_header(
                            tiny_http::Header::from_bytes(
                                &b"Content-Type"[..],
                                &b"application/json"[..],
                            )
                            .unwrap(),
                        )
                };
                match v["model"].as_str().unwrap_or("ok") {
                    "fail500" => {
                        let _ = req.respond(json_resp(500, &json!({"error": {"message": "boom"}})));
                    }
                    "flaky" if flaky.fetch_add(1, Ordering::SeqCst) == 0 => {
                        let _ = req.respond(json_resp(500, &json!({"error": {"message": "once"}})));
                    }
                    "stall" => {
                        std::thread::sleep(Duration::from_secs(3));
                        let _ = req.respond(json_resp(200, &ok));
                    }
                    m @ ("stream" | "cut") => {
                        let mut w = req.into_writer();
                        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
                        w.write_all(head.as_bytes()).unwrap();
                        let events = [
                            json!({"id": "s1", "model": "stream", "prompt_token_ids": [101, 102],
                                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ab"},
                                   "token_ids": [5], "logprobs": {"content": [{"token": "ab", "logprob": -0.25}]}}]}),
                            json!({"id": "s1", "model": "stream",
                                   "choices": [{"index": 0, "delta": {"content": "cd"}, "finish_reason": "stop",
                                   "token_ids": [6], "logprobs": {"content": [{"token": "cd", "logprob": -0.75}]}}]}),
                        ];
                        for (i, e) in events.iter().enumerate() {
                            w.write_all(format!("data: {e}\n\n").as_bytes()).unwrap();
                            w.flush().unwrap();
                            if m == "cut" && i == 0 {
                                // Drop the connection mid-stream.
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        w.write_all(b"data: [DONE]\n\n").unwrap();
                        w.flush().unwrap();
                    }
                    _ => {
                        let _ = req.respond(json_resp(200, &ok));
                    }
                }
            });
        }
    });
    (format!("http://127.0.0.1:{port}/v1"), seen, flaky)
}

#[test]
fn proxied_calls_keep_vllm_token_ids_and_logprobs_exactly() {
    let (up, seen, _) = upstream();
    let server = ModelServer::start().unwrap();
    let backend = Backend::Upstream(Arc::new(
        Upstream::new(&up)
            .api_key("sk-secret-123")
            .capture_tokens(true),
    ));
    let rec = server.record(backend);
    let (s, body) = post(
        &format!("{}/chat/completions", rec.base_url()),
        r#"{"model":"ok","messages":[{"role":"user","content":"tokens"}]}"#,
    );
    assert_eq!(s, 200, "{body}");
    let calls = rec.calls();
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.prompt_token_ids, Some(vec![101, 102, 103]));
    assert_eq!(c.completion_token_ids, Some(vec![7, 8, 9]));
    assert_eq!(c.completion_logprobs, Some(vec![-0.125, -0.5, -1.75]));
    // capture_tokens asked the upstream for them; the key went to the upstream only.
    let (sent, auth) = seen.lock().unwrap()[0].clone();
    assert_eq!(sent["logprobs"], json!(true));
    assert_eq!(sent["return_token_ids"], json!(true));
    assert_eq!(auth.as_deref(), Some("Bearer sk-secret-123"));
    let recorded = serde_json::to_string(&calls).unwrap();
    assert!(
        !recorded.contains("sk-secret-123"),
        "the key leaked into the record"
    );
}

#[test]
fn proxied_streams_pass_through_and_are_recorded_whole() {
    let (up, _, _) = upstream();
    let server = ModelServer::start().unwrap();
    let rec = server.record(Backend::Upstream(Arc::new(Upstream::new(&up))));
    let (events, clean) = sse(
        &format!("{}/chat/completions", rec.base_url()),
        r#"{"model":"stream","stream":true,"messages":[{"role":"user","content":"s"}]}"#,
    );
    assert!(clean);
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[2], "[DONE]");
    let calls = rec.calls();
    let c = &calls[0];
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(
        c.response.as_ref().unwrap()["choices"][0]["message"]["content"],
        "abcd"
    );
    assert_eq!(c.prompt_token_ids, Some(vec![101, 102]));
    assert_eq!(c.completion_token_ids, Some(vec![5, 6]));
    assert_eq!(c.completion_logprobs, Some(vec![-0.25, -0.75]));
}

#[test]
fn upstream_faults_are_recorded_with_their_error() {
    let (up, seen, _) = upstream();
    let server = ModelServer::start().unwrap();
    let quick = Upstream::new(&up)
        .timeout(Duration::from_millis(500))
        .retries(1, Duration::from_millis(10));
    let rec = server.record(Backend::Upstream(Arc::new(quick)));
    let url = format!("{}/chat/completions", rec.base_url());
    let ask = |model: &str| {
        post(
            &url,
            &format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"q"}}]}}"#),
        )
    };

    // 500: retried once, then passed through with its status.
    let (s, body) = ask("fail500");
    assert_eq!(s, 500, "{body}");
    assert!(body.contains("boom"));
    // A 500 once, then success: the retry hides it from the client.
    let (s, _) = ask("flaky");
    assert_eq!(s, 200);
    // Past the timeout: 502 with an OpenAI error body.
    let (s, body) = ask("stall");
    assert_eq!(s, 502, "{body}");
    assert!(body.contains("upstream"), "{body}");
    // Cut off mid-stream: the client's stream breaks; the record says why and keeps the part.
    let mut r = agent()
        .post(&url)
        .header("Content-Type", "application/json")
        .send(r#"{"model":"cut","stream":true,"messages":[{"role":"user","content":"q"}]}"#)
        .unwrap();
    let mut text = String::new();
    let _ = r.body_mut().as_reader().read_to_string(&mut text);
    assert!(!text.contains("[DONE]"));

    let calls = rec.calls();
    assert_eq!(calls.len(), 4);
    assert!(
        calls[0].error.as_deref().unwrap().contains("HTTP 500"),
        "{:?}",
        calls[0].error
    );
    assert!(calls[1].error.is_none());
    assert!(
        calls[2]
            .error
            .as_deref()
            .unwrap()
            .contains("could not be reached"),
        "{:?}",
        calls[2].error
    );
    assert!(
        calls[3].error.as_deref().unwrap().contains("broke off"),
        "{:?}",
        calls[3].error
    );
    assert_eq!(
        calls[3].response.as_ref().unwrap()["choices"][0]["message"]["content"],
        "ab"
    );
    // fail500 twice (one retry), flaky twice, stall up to twice, cut once.
    assert!(seen.lock().unwrap().len() >= 6);

    // A refused connection: nothing listens there.
    let dead = server.record(Backend::Upstream(Arc::new(
        Upstream::new("http://127.0.0.1:9/v1").retries(0, Duration::ZERO),
    )));
    let (s, body) = post(
        &format!("{}/chat/completions", dead.base_url()),
        r#"{"model":"m","messages":[]}"#,
    );
    assert_eq!(s, 502, "{body}");
    assert_eq!(dead.calls().len(), 1);
}

#[test]
fn three_hundred_concurrent_rollouts_each_get_exactly_their_calls() {
    let server = ModelServer::start().unwrap();
    const ROLLOUTS: usize = 300;
    const CALLS: usize = 3;
    let slow_echo = Backend::Model(Arc::new(FunctionModel::new("slow", |messages| {
        // Long enough that every rollout is in flight at once.
        std::thread::sleep(Duration::from_millis(200));
        Ok(messages.last().and_then(|m| m.text()).unwrap_or_default())
    })));
    let recs: Vec<_> = (0..ROLLOUTS)
        .map(|_| server.record(slow_echo.clone()))
        .collect();
    let barrier = Arc::new(std::sync::Barrier::new(ROLLOUTS));
    std::thread::scope(|s| {
        for (i, rec) in recs.iter().enumerate() {
            let base = rec.base_url().to_string();
            let barrier = barrier.clone();
            s.spawn(move || {
                barrier.wait();
                for k in 0..CALLS {
                    let (status, body) = post(
                        &format!("{base}/chat/completions"),
                        &format!(r#"{{"model":"m","messages":[{{"role":"user","content":"rollout {i} call {k}"}}]}}"#),
                    );
                    assert_eq!(status, 200, "{body}");
                    let v: Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(v["choices"][0]["message"]["content"], format!("rollout {i} call {k}"));
                }
            });
        }
    });
    for (i, rec) in recs.iter().enumerate() {
        let calls = rec.calls();
        assert_eq!(calls.len(), CALLS, "rollout {i}");
        for (k, c) in calls.iter().enumerate() {
            assert!(c.error.is_none());
            assert_eq!(
                c.request["messages"][0]["content"],
                format!("rollout {i} call {k}")
            );
        }
    }
}

#[test]
fn a_call_is_in_the_recording_as_soon_as_its_reply_is() {
    // The reply reaches the client before the call is stored; reading the calls must wait for
    // it, or a rollout that ends right after its last call would lose that call.
    let server = ModelServer::start().unwrap();
    let rec = server.record(echo_model());
    for i in 0..200 {
        let (s, _) = post(
            &format!("{}/chat/completions", rec.base_url()),
            &format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{i}"}}]}}"#),
        );
        assert_eq!(s, 200);
        assert_eq!(rec.calls().len(), i + 1, "call {i} not recorded yet");
    }
}

/// Send `raw` to the recorder on a fresh connection; everything it answers until it closes.
fn raw_exchange(server: &ModelServer, raw: &[u8]) -> String {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_call_smuggled_behind_an_ambiguous_length_is_refused_and_never_recorded() {
    let server = ModelServer::start().unwrap();
    let rec = server.record(echo_model());
    let path = format!("/r/{}/v1/chat/completions", rec.id());
    let call = r#"{"model":"m","messages":[{"role":"user","content":"smuggled"}]}"#;
    let inner = format!(
        "POST {path} HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{call}",
        call.len()
    );
    let body = format!("{{}}{inner}");
    for framing in [
        format!("content-length: 2\r\ncontent-length: {}", body.len()),
        "content-length: 2\r\ntransfer-encoding: chunked".to_string(),
        "transfer-encoding: gzip".to_string(),
    ] {
        let raw = format!("POST {path} HTTP/1.1\r\n{framing}\r\n\r\n{body}");
        let out = raw_exchange(&server, raw.as_bytes());
        assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{framing}: {out}");
        assert!(
            out.starts_with("HTTP/1.1 400 ") || out.starts_with("HTTP/1.1 501 "),
            "{framing}: {out}"
        );
        assert!(!out.contains("you said"), "{framing}: {out}");
    }
    // A body the server answers without reading (a GET with one, an unknown route or
    // recording) must not be read as the next request either.
    for first in [
        format!("GET /r/{}/v1/models", rec.id()),
        format!("POST /r/{}/v1/embeddings", rec.id()),
        "POST /r/0123456789abcdef0123456789abcdef/v1/chat/completions".to_string(),
        "POST /nowhere".to_string(),
    ] {
        let raw = format!(
            "{first} HTTP/1.1\r\ncontent-length: {}\r\n\r\n{inner}",
            inner.len()
        );
        let out = raw_exchange(&server, raw.as_bytes());
        assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{first}: {out}");
        assert!(out.contains("connection: close"), "{first}: {out}");
        assert!(!out.contains("you said"), "{first}: {out}");
    }
    assert!(rec.calls().is_empty(), "{:?}", rec.calls());
}

#[test]
fn recording_ids_are_128_random_bits_and_guessed_ids_reach_nothing() {
    let server = ModelServer::start().unwrap();
    let recs: Vec<_> = (0..400).map(|_| server.record(echo_model())).collect();
    let ids: Vec<&str> = recs.iter().map(|r| r.id()).collect();
    for id in &ids {
        assert!(
            id.len() == 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "a recording id is 32 lowercase hex digits (128 bits): {id}"
        );
    }
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "ids repeat");
    // No counter, prefix or clock in them: across 400 ids every digit takes most of its 16
    // values (a counter or a timestamp keeps the leading digits fixed).
    for pos in 0..32 {
        let values: std::collections::HashSet<u8> =
            ids.iter().map(|id| id.as_bytes()[pos]).collect();
        assert!(values.len() >= 12, "digit {pos} takes only {values:?}");
    }
    // The old ids were a counter and 32 bits; guessing one in that shape, or a prefix of a
    // live id, reaches no recording.
    let call = r#"{"model":"m","messages":[{"role":"user","content":"injected"}]}"#;
    let live = &ids[0];
    for guess in [
        "1-a162f5a0".to_string(),
        "1-00000000".to_string(),
        live[..8].to_string(),
        live.to_ascii_uppercase(),
        format!("{live}0"),
    ] {
        let url = format!("{}/r/{guess}/v1/chat/completions", server.url());
        let (status, body) = post(&url, call);
        assert_eq!(status, 404, "{guess}: {body}");
        assert!(body.contains("unknown recording"), "{body}");
    }
    assert!(
        recs.iter().all(|r| r.calls().is_empty()),
        "a guess was recorded"
    );
    // The real URL works.
    let (status, body) = post(&format!("{}/chat/completions", recs[0].base_url()), call);
    assert_eq!(status, 200, "{body}");
    assert_eq!(recs[0].calls().len(), 1);
}

/// A port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn a_login_in_an_upstream_url_is_sent_but_never_shown_or_recorded() {
    // Still usable: ureq sends it as basic auth, and an API key (Bearer) wins over it.
    let (up, seen, _) = upstream();
    let with_login = up.replacen("http://", "http://user:secret@", 1);
    let server = ModelServer::start().unwrap();
    let rec = server.record(Backend::Upstream(Arc::new(Upstream::new(&with_login))));
    let (s, body) = post(
        &format!("{}/chat/completions", rec.base_url()),
        r#"{"model":"ok","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(s, 200, "{body}");
    let auth = seen.lock().unwrap().last().unwrap().1.clone();
    // base64("user:secret")
    assert_eq!(auth.as_deref(), Some("Basic dXNlcjpzZWNyZXQ="));

    // Unreachable, and an upstream error: neither the reply, the record nor a Debug print
    // shows the password.
    let dead = format!("http://user:secret@127.0.0.1:{}/v1", closed_port());
    for (base, model) in [(dead.as_str(), "ok"), (with_login.as_str(), "fail500")] {
        let backend = Backend::Upstream(Arc::new(Upstream::new(base).retries(0, Duration::ZERO)));
        assert!(!format!("{backend:?}").contains("secret"), "{backend:?}");
        let rec = server.record(backend);
        let (s, body) = post(
            &format!("{}/chat/completions", rec.base_url()),
            &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string(),
        );
        assert!(s >= 500, "{base} {model}: {s} {body}");
        assert!(!body.contains("secret"), "{body}");
        let calls = serde_json::to_string(&rec.calls()).unwrap();
        assert!(calls.contains("error"), "{calls}");
        assert!(!calls.contains("secret"), "{calls}");
    }
    let e = nenyax::Endpoint::new(&dead, "m");
    assert!(!format!("{e:?}").contains("secret"), "{e:?}");
    let missing = e
        .api_key_from_env("NENYAX_TEST_NO_SUCH_KEY_VAR")
        .unwrap_err();
    assert!(!missing.to_string().contains("secret"), "{missing}");
}

#[test]
fn the_cli_never_prints_or_writes_a_login_from_base_url() {
    let (up, seen, _) = upstream();
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("http://user:secret@127.0.0.1:{}/v1", closed_port());
    let failing = up.replacen("http://", "http://user:secret@", 1);
    let bin = env!("CARGO_BIN_EXE_nenyax");
    let mut runs = Vec::new();
    for (i, (base, model)) in [(dead.as_str(), "m"), (failing.as_str(), "fail500")]
        .into_iter()
        .enumerate()
    {
        let out = dir.path().join(format!("t{i}.jsonl"));
        let o = std::process::Command::new(bin)
            .args([
                "run",
                "builtin:arithmetic",
                "--policy",
                "endpoint",
                "--base-url",
                base,
            ])
            .args(["--model", model, "--retries", "0", "-n", "2", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let written = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(
            written.contains("EndpointError"),
            "the run failed on the endpoint and wrote it down: {written}"
        );
        runs.push((format!("run {base}"), o, written));
        let o = std::process::Command::new(bin)
            .args([
                "try",
                "builtin:arithmetic",
                "--policy",
                "endpoint",
                "--base-url",
                base,
            ])
            .args(["--model", model, "--retries", "0"])
            .output()
            .unwrap();
        runs.push((format!("try {base}"), o, String::new()));
    }
    // The server did get the login, as basic auth.
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|(_, a)| a.as_deref() == Some("Basic dXNlcjpzZWNyZXQ=")));
    let o = std::process::Command::new(bin)
        .args([
            "train",
            "builtin:arithmetic",
            "--model",
            "m",
            "--dry-run",
            "--base-url",
        ])
        .arg(&dead)
        .output()
        .unwrap();
    runs.push(("train --dry-run".into(), o, String::new()));
    let o = std::process::Command::new(bin)
        .arg("integrations")
        .env("NENYAX_VLLM_BASE_URL", &dead)
        .output()
        .unwrap();
    runs.push(("integrations".into(), o, String::new()));
    for (what, o, written) in &runs {
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(
            out.contains("***@127.0.0.1") || err.contains("***@127.0.0.1"),
            "{what}: the URL is still named, without its login:\n{out}\n{err}"
        );
        for (name, text) in [
            ("stdout", &*out),
            ("stderr", &*err),
            ("trajectory", written),
        ] {
            assert!(!text.contains("secret"), "{what}: {name} shows it:\n{text}");
        }
    }
}
