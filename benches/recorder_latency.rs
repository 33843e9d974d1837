//! What the recording model server adds to a model call, against calling the upstream directly.
//!
//! The upstream is a local tiny_http server that answers every chat completion at once with a
//! fixed vLLM-shaped body (token ids and logprobs included), so the figures are the server's
//! own cost, not a model's. Workloads (one JSON object per line):
//!
//! - `direct`: POST to the upstream from a keep-alive ureq agent; median and p99 latency.
//! - `recorded/proxy`: the same call through a recording whose backend proxies to it.
//! - `recorded/local_model`: through a recording answered by a local `FunctionModel`.
//! - `concurrent/64`: 64 threads, each its own recording, calling through the proxy for 3 s;
//!   calls/s and median latency, and every call checked to be in its own recording.
//!
//! Run: `cargo bench --bench recorder_latency`.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nenyax::{Backend, FunctionModel, ModelServer, Upstream};

const CALLS: usize = 3000;

fn upstream() -> String {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = server.server_addr().to_ip().unwrap().port();
    let body = json!({
        "id": "cmpl-1", "object": "chat.completion", "model": "m",
        "prompt_token_ids": [1, 2, 3, 4],
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "<answer>42</answer>"},
            "token_ids": [7, 8, 9],
            "logprobs": {"content": [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -0.2}, {"token": "c", "logprob": -0.3}]}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}})
    .to_string();
    for _ in 0..4 {
        let (server, body) = (server.clone(), body.clone());
        std::thread::spawn(move || {
            for mut req in server.incoming_requests() {
                let mut sink = Vec::new();
                let _ = std::io::Read::read_to_end(req.as_reader(), &mut sink);
                let resp = tiny_http::Response::from_data(body.clone().into_bytes()).with_header(
                    tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
                        .unwrap(),
                );
                let _ = req.respond(resp);
            }
        });
    }
    format!("http://127.0.0.1:{port}/v1")
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

const REQUEST: &str = r#"{"model":"m","messages":[{"role":"system","content":"Answer in <answer></answer> tags."},{"role":"user","content":"What is 6 * 7?"}]}"#;

fn call(agent: &ureq::Agent, base: &str) -> f64 {
    let t = Instant::now();
    let mut r = agent
        .post(&format!("{base}/chat/completions"))
        .header("Content-Type", "application/json")
        .send(REQUEST)
        .unwrap();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert!(v["choices"][0]["message"]["content"].is_string());
    t.elapsed().as_secs_f64() * 1e6
}

fn stats(mut lat: Vec<f64>) -> (f64, f64) {
    lat.sort_by(|a, b| a.total_cmp(b));
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn serial(name: &str, base: &str) -> f64 {
    let agent = agent();
    for _ in 0..200 {
        call(&agent, base);
    }
    let lat: Vec<f64> = (0..CALLS).map(|_| call(&agent, base)).collect();
    let (median, p99) = stats(lat);
    println!(
        "{}",
        json!({"workload": name, "median_us": median, "p99_us": p99, "calls": CALLS})
    );
    median
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "recorder_latency: a benchmark; run it with `cargo bench --bench recorder_latency`"
        );
        return;
    }
    let up = upstream();
    let server = ModelServer::start().unwrap();
    let proxy = Backend::Upstream(Arc::new(Upstream::new(&up)));
    let direct = serial("direct", &up);
    let rec = server.record(proxy.clone());
    let through = serial("recorded/proxy", rec.base_url());
    assert_eq!(rec.take().len(), CALLS + 200);
    let local = server.record(Backend::Model(Arc::new(FunctionModel::new("m", |_| {
        Ok("<answer>42</answer>".to_string())
    }))));
    serial("recorded/local_model", local.base_url());
    println!(
        "{}",
        json!({"workload": "added_by_recorder", "median_us": through - direct})
    );

    let threads = 64;
    let recs: Vec<_> = (0..threads).map(|_| server.record(proxy.clone())).collect();
    let stop = Instant::now() + Duration::from_secs(3);
    let t0 = Instant::now();
    let lat: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = recs
            .iter()
            .map(|rec| {
                let base = rec.base_url().to_string();
                s.spawn(move || {
                    let agent = agent();
                    let mut lat = Vec::new();
                    while Instant::now() < stop {
                        lat.push(call(&agent, &base));
                    }
                    lat
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    for (rec, mine) in recs.iter().zip(&lat) {
        assert_eq!(
            rec.calls().len(),
            mine.len(),
            "a call landed in another recording"
        );
    }
    let total: usize = lat.iter().map(Vec::len).sum();
    let (median, p99) = stats(lat.concat());
    println!(
        "{}",
        json!({"workload": "concurrent/64", "calls_per_s": total as f64 / secs, "median_us": median, "p99_us": p99, "calls": total})
    );
}
