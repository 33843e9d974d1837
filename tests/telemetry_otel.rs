//! The `otel` telemetry sink against real receivers: `nenyax run --telemetry otel` over NeMo
//! Gym's stateful counter tool task sends its spans to a local Phoenix (arize-phoenix, read back
//! through Phoenix's REST API) and its metrics to an OTLP receiver that decodes them with
//! opentelemetry-proto; dead collectors (a closed port, one that never answers) cost the run
//! nothing but counted, reported drops.
//!
//! Needs NENYAX_PHOENIX_PYTHON (.venv-phoenix, scripts/setup_integrations.sh phoenix) and, for
//! the tool task, NENYAX_NEMO_GYM_PYTHON; each test says why it skips without them.

#[path = "support/integrations.rs"]
mod integrations;
#[path = "support/nemo_gym_server.rs"]
mod nemo_gym_server;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nemo_gym_server::{calls, example_data, free_port, ResourcesServer};
use nenyax::recorder::{Backend, ModelServer};
use nenyax::{FunctionModel, Message, Role, Trajectory};
use serde_json::{json, Value};

/// A child process killed when the test ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ready() {
        assert!(t0.elapsed() < limit, "{what} not ready after {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get_json(url: &str) -> Option<Value> {
    ureq::get(url).call().ok()?.body_mut().read_json().ok()
}

/// Phoenix on free ports with its own working folder.
fn phoenix(py: &str, dir: &Path) -> (Proc, String) {
    let port = free_port();
    let child = Command::new(py)
        .args(["-m", "phoenix.server.main", "serve"])
        .env("PHOENIX_WORKING_DIR", dir)
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", free_port().to_string())
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("phoenix.log")).unwrap())
        .spawn()
        .expect("start phoenix");
    let url = format!("http://127.0.0.1:{port}");
    let health = format!("{url}/healthz");
    wait_until("phoenix", Duration::from_secs(180), || {
        ureq::get(&health).call().is_ok()
    });
    (Proc(child), url)
}

/// The decoding OTLP receiver of tests/support/otlp_receiver.py, writing to `out`.
fn receiver(py: &str, out: &Path) -> (Proc, String) {
    let port = free_port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/otlp_receiver.py"
    );
    let child = Command::new(py)
        .args([script, &port.to_string(), &out.display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the OTLP receiver");
    let url = format!("http://127.0.0.1:{port}");
    wait_until("the OTLP receiver", Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    (Proc(child), url)
}

fn nenyax(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nenyax"));
    c.args(args).env("RUST_BACKTRACE", "0");
    for k in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    c.output().expect("nenyax runs")
}

fn last_user(msgs: &[Message]) -> String {
    msgs.iter()
        .rev()
        .find(|m| m.role == Role::User)
        .and_then(Message::text)
        .unwrap_or_default()
}

/// Reads "add X then add Y then get the count": two increments, a read, then the answer.
fn counter_model() -> FunctionModel {
    FunctionModel::with_messages("counter-script", move |msgs| {
        let nums: Vec<i64> = last_user(msgs)
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let from = msgs.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
        let turns = msgs[from..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        Ok(match turns {
            0 => calls(&[
                ("increment_counter", json!({"count": nums[0]})),
                ("increment_counter", json!({"count": nums[1]})),
            ]),
            1 => calls(&[("get_counter_value", json!({}))]),
            _ => Message::assistant(format!(
                "The count is {}",
                msgs.last().and_then(Message::text).unwrap_or_default()
            )),
        })
    })
}

/// Phoenix's spans of the default project, by span id, once `want` have arrived.
fn phoenix_spans(url: &str, want: usize) -> HashMap<String, Value> {
    let mut spans = HashMap::new();
    wait_until("the spans in phoenix", Duration::from_secs(60), || {
        spans.clear();
        let mut cursor = String::new();
        loop {
            let page = get_json(&format!(
                "{url}/v1/projects/default/spans?limit=1000{cursor}"
            ));
            let Some(page) = page else { return false };
            for s in page["data"].as_array().into_iter().flatten() {
                spans.insert(
                    s["context"]["span_id"].as_str().unwrap().to_string(),
                    s.clone(),
                );
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => break,
            }
        }
        spans.len() >= want
    });
    spans
}

/// Unix seconds of Phoenix's ISO time (microseconds, UTC).
fn unix_s(iso: &str) -> f64 {
    // 2026-12-02T17:45:03.813077+00:00
    let (date, rest) = iso.split_once('T').unwrap();
    let ymd: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let time = rest.trim_end_matches("+00:00");
    let hms: Vec<f64> = time.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m, d) = (ymd[0] - i64::from(ymd[1] <= 2), ymd[1], ymd[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    days as f64 * 86400.0 + hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]
}

fn close(a: f64, b: f64) -> bool {
    // Phoenix keeps microseconds.
    (a - b).abs() < 2e-6
}

#[test]
fn phoenix_receives_episode_model_and_tool_spans_at_the_recorded_times() {
    let Some(phx_py) = integrations::python("phoenix") else {
        return;
    };
    let Some(gym_py) = nemo_gym_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_phoenix, phx) = phoenix(&phx_py, dir.path());
    let metrics_file = dir.path().join("metrics.jsonl");
    let (_recv, recv) = receiver(&phx_py, &metrics_file);
    let counter = ResourcesServer::start(&gym_py, "example_session_state_mgmt");
    let upstream = ModelServer::start().unwrap();
    let rec = upstream.record(Backend::Model(Arc::new(counter_model())));
    let uri = format!(
        "nemo_gym:{}?data={}",
        counter.url,
        example_data(&gym_py, "example_session_state_mgmt")
    );
    let out = dir.path().join("t.jsonl");
    let metrics_url = format!("{recv}/v1/metrics");
    let o = nenyax(
        &[
            "run",
            &uri,
            "--base-url",
            rec.base_url(),
            "--model",
            "scripted",
            "-n",
            "3",
            "--concurrency",
            "3",
            "--telemetry",
            "otel",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &phx),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &metrics_url),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{}{err}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(!err.contains("telemetry"), "{err}");
    let trajs: Vec<Trajectory> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(trajs.len(), 3);
    assert!(
        trajs.iter().all(|t| t.score() == Some(1.0)),
        "{:?}",
        trajs[0].error
    );
    // Per episode: its span, three chat spans and three tool spans (two increments, a read).
    let spans = phoenix_spans(&phx, 3 * 7);
    assert_eq!(spans.len(), 21);
    for t in &trajs {
        let root = spans
            .values()
            .find(|s| s["parent_id"].is_null() && s["attributes"]["nenyax.seed"] == json!(t.seed))
            .expect("the episode's span");
        let a = &root["attributes"];
        assert_eq!(a["nenyax.env.id"], json!(t.env_id));
        assert_eq!(a["nenyax.task.id"], json!(t.task.as_ref().unwrap().id));
        assert_eq!(a["nenyax.score"], json!(1.0));
        assert_eq!(a["nenyax.ok"], json!(true));
        assert!(close(
            unix_s(root["start_time"].as_str().unwrap()),
            t.started_at
        ));
        let root_id = root["context"]["span_id"].as_str().unwrap();
        let mut children: Vec<&Value> = spans
            .values()
            .filter(|s| s["parent_id"].as_str() == Some(root_id))
            .collect();
        children.sort_by(|a, b| {
            (a["start_time"].as_str(), a["name"].as_str())
                .cmp(&(b["start_time"].as_str(), b["name"].as_str()))
        });
        assert!(children
            .iter()
            .all(|c| c["context"]["trace_id"] == root["context"]["trace_id"]));
        let chats: Vec<&&Value> = children
            .iter()
            .filter(|c| c["name"] == "chat scripted")
            .collect();
        assert_eq!(chats.len(), t.model_calls.len());
        assert_eq!(chats.len(), 3);
        // NeMo Gym speaks the Responses API: a tool call or a plain answer says why it ended.
        let reasons = ["tool_calls", "tool_calls", "stop"];
        for ((span, call), reason) in chats.iter().zip(&t.model_calls).zip(reasons) {
            let start = unix_s(span["start_time"].as_str().unwrap());
            let end = unix_s(span["end_time"].as_str().unwrap());
            assert!(
                close(start, call.started_at.unwrap()),
                "{start} vs {call:?}"
            );
            assert!(close(end - start, call.latency_s.unwrap()), "{span}");
            let a = &span["attributes"];
            assert_eq!(a["gen_ai.operation.name"], "chat");
            assert_eq!(a["gen_ai.request.model"], "scripted");
            assert_eq!(a["gen_ai.provider.name"], "openai");
            assert_eq!(span["span_kind"], "LLM");
            let resp = call.response.as_ref().unwrap();
            assert_eq!(a["gen_ai.response.id"], resp["id"]);
            assert_eq!(a["gen_ai.response.finish_reasons"], json!([reason]));
        }
        let tools: Vec<&str> = children
            .iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("execute_tool"))
            .map(|c| c["attributes"]["gen_ai.tool.name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tools,
            [
                "increment_counter",
                "increment_counter",
                "get_counter_value"
            ]
        );
    }
    // Metrics, decoded by opentelemetry-proto: the last export has the cumulative totals.
    let lines = std::fs::read_to_string(&metrics_file).unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(last["path"], "/v1/metrics");
    let res = &last["request"]["resourceMetrics"][0];
    let service = res["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "service.name")
        .unwrap();
    assert_eq!(service["value"]["stringValue"], "nenyax");
    let metrics: HashMap<&str, &Value> = res["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m))
        .collect();
    let episodes: f64 = metrics["nenyax.episodes"]["sum"]["dataPoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["asDouble"].as_f64().unwrap())
        .sum();
    assert_eq!(episodes, 3.0);
    let op = &metrics["gen_ai.client.operation.duration"]["histogram"]["dataPoints"][0];
    assert_eq!(op["count"], "9");
    let latency_sum: f64 = trajs
        .iter()
        .flat_map(|t| &t.model_calls)
        .map(|c| c.latency_s.unwrap())
        .sum();
    assert!((op["sum"].as_f64().unwrap() - latency_sum).abs() < 1e-9);
    let gauge = metrics["nenyax.run.mean_score"]["gauge"]["dataPoints"][0]["asDouble"].clone();
    assert_eq!(gauge, json!(1.0));
}

#[test]
fn otlp_json_and_headers_reach_a_real_decoder() {
    let Some(py) = integrations::python("phoenix") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("got.jsonl");
    let (_recv, url) = receiver(&py, &file);
    let o = nenyax(
        &[
            "run",
            "builtin:arithmetic",
            "--policy",
            "oracle",
            "-n",
            "4",
            "--telemetry",
            "otel",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &url),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=rl%20evals"),
            ("OTEL_SERVICE_NAME", "arith-eval"),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("telemetry"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let traces: Vec<&Value> = got.iter().filter(|g| g["path"] == "/v1/traces").collect();
    assert!(traces
        .iter()
        .all(|g| g["content_type"] == "application/json"));
    assert!(traces.iter().all(|g| g["headers"]["x-team"] == "rl evals"));
    let spans: Vec<&Value> = traces
        .iter()
        .flat_map(|g| {
            g["request"]["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .unwrap()
        })
        .collect();
    assert_eq!(spans.len(), 4);
    assert!(spans
        .iter()
        .all(|s| s["name"] == "episode builtin:arithmetic"));
    let seeds: Vec<&Value> = spans
        .iter()
        .map(|s| {
            &s["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["key"] == "nenyax.seed")
                .unwrap()["value"]["intValue"]
        })
        .collect();
    assert_eq!(seeds, [&json!("0"), &json!("1"), &json!("2"), &json!("3")]);
    let svc = &traces[0]["request"]["resourceSpans"][0]["resource"]["attributes"][0];
    assert_eq!(svc["value"]["stringValue"], "arith-eval");
    assert!(got.iter().any(|g| g["path"] == "/v1/metrics"));
}

#[test]
fn a_closed_port_costs_the_run_nothing_but_a_counted_warning() {
    // Bound then released: nothing listens there.
    let url = format!("http://127.0.0.1:{}", free_port());
    let o = nenyax(
        &[
            "run",
            "builtin:arithmetic",
            "--policy",
            "oracle",
            "-n",
            "2000",
            "--telemetry",
            "otel",
        ],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &url)],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("2000 episodes, 0 errors"));
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("sink otel")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("spans dropped"), "{err}");
}

#[test]
fn a_collector_that_never_answers_drops_spans_and_does_not_hang_exit() {
    // Accepts connections (the kernel's backlog) and never reads or answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let o = nenyax(
        &[
            "run",
            "builtin:arithmetic",
            "--policy",
            "oracle",
            "-n",
            "20000",
            "--concurrency",
            "2",
            "--telemetry",
            "otel",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &url),
            // Longer than the run: only the bounded finish can end the wait.
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "600000"),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("20000 episodes, 0 errors"));
    // The first export blocks: the queue fills and the rest is dropped, counted.
    assert!(
        err.contains("telemetry queue full, dropping events"),
        "{err}"
    );
    assert!(err.contains("did not finish within"), "{err}");
    let dropped: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("nenyax: telemetry dropped "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no drop count in {err}"));
    assert!(dropped > 10_000, "{err}");
    drop(silent);
}

#[test]
fn train_with_a_telemetry_table_sends_round_metrics_and_episode_spans() {
    let Some(py) = integrations::python("phoenix") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("got.jsonl");
    let (_recv, url) = receiver(&py, &file);
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        format!(
            "[env]\nuri = \"builtin:guess?high=16&max_guesses=4&size=64\"\n\n[learner]\nuse = \
             \"reinforce\"\n\n[train]\nrounds = 3\ngroup_size = 2\nbatch = 2\neval_tasks = 2\n\n\
             [[telemetry]]\nname = \"otel\"\nendpoint = \"{url}\"\nservice_name = \"guess-train\"\n"
        ),
    )
    .unwrap();
    let o = nenyax(
        &["train", "--config", config.to_str().unwrap(), "--quiet"],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("telemetry"), "{err}");
    let got: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last_metrics = got
        .iter()
        .rfind(|g| g["path"] == "/v1/metrics")
        .expect("metrics arrived");
    let res = &last_metrics["request"]["resourceMetrics"][0];
    assert_eq!(
        res["resource"]["attributes"][0]["value"]["stringValue"],
        "guess-train"
    );
    let round = res["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "nenyax.train.kept")
        .expect("round metrics");
    // The last round's numbers, at its step.
    let point = &round["gauge"]["dataPoints"][0];
    assert_eq!(point["attributes"][0]["value"]["intValue"], "3");
    let episodes: usize = got
        .iter()
        .filter(|g| g["path"] == "/v1/traces")
        .flat_map(|g| g["request"]["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array())
        .flatten()
        .filter(|s| {
            s["name"]
                .as_str()
                .unwrap()
                .starts_with("episode builtin:guess")
        })
        .count();
    // Baseline and three held-out evaluations of 2 tasks, three rounds of 2 x 2 rollouts.
    assert_eq!(episodes, 4 * 2 + 3 * 4);
}

#[test]
fn a_wrong_sink_name_is_one_line_before_anything_runs() {
    let o = nenyax(
        &[
            "run",
            "builtin:arithmetic",
            "--policy",
            "oracle",
            "--telemetry",
            "otel,zipkin",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown telemetry sink \"zipkin\"; known: otel, mlflow, wandb"));
    assert!(o.stdout.is_empty());
}
