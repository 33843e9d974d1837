//! The `mlflow` telemetry sink: one MLflow run per [`Sink::start`], written through the
//! tracking server's documented REST API 2.0 (no Python), metrics batched through
//! `runs/log-batch` and the report uploaded through the server's artifact proxy.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};

use super::spec::{RunInfo, Sink};
use crate::contract::{JsonMap, Trajectory};
use crate::error::{Error, Result};

/// The options the sink accepts.
const OPTIONS: &[&str] = &["tracking_uri", "experiment", "run_name", "timeout_s"];
// MLflow's own limits (mlflow/utils/validation.py); the server refuses a batch beyond them.
const MAX_METRICS_PER_BATCH: usize = 1000;
const MAX_PARAMS_PER_BATCH: usize = 100;
const MAX_PARAM_VALUE: usize = 6000;
const MAX_KEY: usize = 250;
/// Metrics kept while no run can be opened (the server is down); older ones are dropped first.
const MAX_PENDING: usize = 100_000;
/// How long a run that could not be opened waits before the next try, so that a server that is
/// down costs one refused connection per interval rather than one per flush.
const REOPEN_AFTER: Duration = Duration::from_secs(10);
/// Characters escaped in a URL query value or path segment.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');
/// The server's artifact proxy, as `mlflow-artifacts:` URIs resolve (MlflowArtifactsRepository).
const ARTIFACTS_ROUTE: &str = "/api/2.0/mlflow-artifacts/artifacts";

/// Whether the sink can run with its defaults: Ok, or what is missing.
pub fn readiness() -> std::result::Result<(), String> {
    tracking_uri(None).map(|_| ()).map_err(|e| e.to_string())
}

/// Build the sink from its options (`tracking_uri`, `experiment`, `run_name`, `timeout_s`).
pub fn build(options: &JsonMap) -> Result<Box<dyn Sink>> {
    Ok(Box::new(MlflowSink::new(options)?))
}

/// A run in an MLflow tracking server.
pub struct MlflowSink {
    base: String,
    experiment: String,
    run_name: Option<String>,
    agent: ureq::Agent,
    auth: Option<String>,
    info: Option<RunInfo>,
    run: Option<OpenRun>,
    pending: VecDeque<Value>,
    episodes: u64,
    /// When a failed [`MlflowSink::open_run`] may be tried again.
    reopen_at: Option<Instant>,
}

struct OpenRun {
    id: String,
    artifact_uri: String,
}

impl MlflowSink {
    /// The sink for `options`; nothing is sent before [`Sink::start`].
    pub fn new(options: &JsonMap) -> Result<MlflowSink> {
        check_keys("mlflow", options, OPTIONS)?;
        let base = tracking_uri(string_option("mlflow", options, "tracking_uri")?)?;
        let experiment = string_option("mlflow", options, "experiment")?
            .or_else(|| std::env::var("MLFLOW_EXPERIMENT_NAME").ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "nenyax".into());
        let timeout = match options.get("timeout_s") {
            None => 30.0,
            Some(v) => v
                .as_f64()
                .filter(|t| t.is_finite() && *t > 0.0)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "mlflow: option `timeout_s` = {v} must be a positive number of seconds"
                    ))
                })?,
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs_f64(timeout)))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(MlflowSink {
            base,
            experiment,
            run_name: string_option("mlflow", options, "run_name")?,
            agent,
            auth: auth_header(),
            info: None,
            run: None,
            pending: VecDeque::new(),
            episodes: 0,
            reopen_at: None,
        })
    }

    /// The id of the open run, once [`Sink::start`] has reached the server.
    pub fn run_id(&self) -> Option<&str> {
        self.run.as_ref().map(|r| r.id.as_str())
    }

    /// POST `body` to `path`, or GET it when there is no body.
    fn call(&self, path: &str, body: Option<&Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let sent = match body {
            None => self.with_auth(self.agent.get(&url)).call(),
            Some(b) => self
                .with_auth(self.agent.post(&url))
                .header("Content-Type", "application/json")
                .send(b.to_string().as_str()),
        };
        answer(&url, sent)
    }

    fn with_auth<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.auth {
            Some(a) => r.header("Authorization", a),
            None => r,
        }
    }

    fn experiment_id(&self) -> Result<String> {
        let path = format!(
            "/api/2.0/mlflow/experiments/get-by-name?experiment_name={}",
            utf8_percent_encode(&self.experiment, COMPONENT)
        );
        match self.call(&path, None) {
            Ok(v) => {
                let exp = &v["experiment"];
                if exp["lifecycle_stage"] == "deleted" {
                    return Err(Error::Config(format!(
                        "mlflow: experiment {:?} is deleted; restore it (`mlflow experiments restore`) or choose another with the `experiment` option",
                        self.experiment
                    )));
                }
                id_of(&exp["experiment_id"], "experiments/get-by-name")
            }
            Err(Error::Endpoint { message, .. }) if message.contains("RESOURCE_DOES_NOT_EXIST") => {
                let v = self.call(
                    "/api/2.0/mlflow/experiments/create",
                    Some(&json!({ "name": self.experiment })),
                )?;
                id_of(&v["experiment_id"], "experiments/create")
            }
            Err(e) => Err(e),
        }
    }

    /// Create the run of [`Sink::start`] and log its parameters.
    fn open_run(&mut self) -> Result<()> {
        let Some(info) = self.info.clone() else {
            return Err(Error::Config(
                "mlflow: no run was started (start comes before episodes and metrics)".into(),
            ));
        };
        let experiment_id = self.experiment_id()?;
        // The option is the user's explicit choice, so it wins over the caller's name.
        let name = [self.run_name.clone(), Some(info.name.clone())]
            .into_iter()
            .flatten()
            .find(|n| !n.is_empty())
            .unwrap_or_else(|| "nenyax".into());
        let tags = [
            ("mlflow.runName", name.as_str()),
            ("mlflow.source.name", "nenyax"),
            ("mlflow.source.type", "LOCAL"),
            ("nenyax.kind", info.kind.as_str()),
        ]
        .map(|(k, v)| json!({ "key": k, "value": v }));
        let v = self.call(
            "/api/2.0/mlflow/runs/create",
            Some(&json!({
                "experiment_id": experiment_id,
                "run_name": name,
                "start_time": now_ms(),
                "tags": tags,
            })),
        )?;
        let run = &v["run"]["info"];
        let id = id_of(&run["run_id"], "runs/create")?;
        self.run = Some(OpenRun {
            id: id.clone(),
            artifact_uri: run["artifact_uri"].as_str().unwrap_or_default().to_string(),
        });
        let params: Vec<Value> = info
            .params
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({ "key": mlflow_key(k), "value": truncate(&value, MAX_PARAM_VALUE) })
            })
            .collect();
        for chunk in params.chunks(MAX_PARAMS_PER_BATCH) {
            self.log_batch(&json!({ "run_id": id, "params": chunk }))?;
        }
        Ok(())
    }

    fn log_batch(&self, body: &Value) -> Result<()> {
        self.call("/api/2.0/mlflow/runs/log-batch", Some(body))
            .map(drop)
    }

    fn push(&mut self, step: u64, timestamp: i64, values: &[(String, f64)]) {
        // JSON has no NaN or infinity, and MLflow's REST API cannot take them.
        for (k, v) in values.iter().filter(|(_, v)| v.is_finite()) {
            self.pending.push_back(json!({
                "key": mlflow_key(k), "value": v, "timestamp": timestamp, "step": step,
            }));
        }
        while self.pending.len() > MAX_PENDING {
            self.pending.pop_front();
        }
    }

    /// Send the waiting metrics. While no run can be opened they wait (capped) for the server
    /// to come back, tried again every [`REOPEN_AFTER`] unless `force`.
    fn send_pending(&mut self, force: bool) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if self.run.is_none() {
            if !force && self.reopen_at.is_some_and(|t| Instant::now() < t) {
                return Ok(());
            }
            if let Err(e) = self.open_run() {
                self.reopen_at = Some(Instant::now() + REOPEN_AFTER);
                return Err(e);
            }
        }
        let id = self.run.as_ref().expect("opened above").id.clone();
        let mut pending = std::mem::take(&mut self.pending);
        let mut first_error = None;
        for chunk in pending.make_contiguous().chunks(MAX_METRICS_PER_BATCH) {
            if let Err(e) = self.log_batch(&json!({ "run_id": id, "metrics": chunk })) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn artifact_url(&self, run: &OpenRun, name: &str) -> Result<String> {
        let encoded: Vec<String> = name
            .split('/')
            .map(|s| utf8_percent_encode(s, COMPONENT).to_string())
            .collect();
        let name = encoded.join("/");
        let uri = &run.artifact_uri;
        if let Some(rest) = uri.strip_prefix("mlflow-artifacts:") {
            let (origin, path) = match rest.strip_prefix("//") {
                Some(hosted) => {
                    let (host, path) = hosted.split_at(hosted.find('/').unwrap_or(hosted.len()));
                    let scheme = self.base.split("://").next().unwrap_or("http");
                    (format!("{scheme}://{host}"), path)
                }
                None => (self.base.clone(), rest),
            };
            let path = path.trim_matches('/');
            return Ok(format!("{origin}{ARTIFACTS_ROUTE}/{path}/{name}"));
        }
        if uri.starts_with("http://") || uri.starts_with("https://") {
            return Ok(format!("{}/{name}", uri.trim_end_matches('/')));
        }
        Err(Error::Config(format!(
            "mlflow: the server stores this run's artifacts at {uri:?}, which it does not proxy; start `mlflow server` with artifact serving on (the default; not --no-serve-artifacts) so that artifacts go through it"
        )))
    }
}

impl Sink for MlflowSink {
    fn name(&self) -> &'static str {
        "mlflow"
    }

    fn start(&mut self, run: &RunInfo) -> Result<()> {
        self.info = Some(run.clone());
        self.run = None;
        self.pending.clear();
        self.episodes = 0;
        self.reopen_at = None;
        self.open_run()
            .inspect_err(|_| self.reopen_at = Some(Instant::now() + REOPEN_AFTER))
    }

    fn episode(&mut self, traj: &Trajectory) -> Result<()> {
        self.episodes += 1;
        let end = traj.started_at + traj.duration_s.unwrap_or(0.0);
        let timestamp = if end > 0.0 {
            (end * 1000.0) as i64
        } else {
            now_ms()
        };
        self.push(self.episodes, timestamp, &episode_metrics(traj));
        if self.pending.len() >= MAX_METRICS_PER_BATCH {
            return self.flush();
        }
        Ok(())
    }

    fn metrics(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        self.push(step, now_ms(), values);
        if self.pending.len() >= MAX_METRICS_PER_BATCH {
            return self.flush();
        }
        Ok(())
    }

    fn artifact(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        if self.run.is_none() {
            self.open_run()?;
        }
        let run = self.run.as_ref().expect("opened above");
        let url = self.artifact_url(run, name)?;
        let sent = self
            .with_auth(self.agent.put(&url))
            .header("Content-Type", "application/octet-stream")
            .send(bytes);
        answer(&url, sent).map(drop)
    }

    fn flush(&mut self) -> Result<()> {
        self.send_pending(false)
    }

    fn finish(&mut self, ok: bool) -> Result<()> {
        // The last chance for what is waiting: the server is tried whatever the backoff says.
        let flushed = self.send_pending(true);
        let Some(run) = self.run.take() else {
            return flushed;
        };
        let status = if ok { "FINISHED" } else { "FAILED" };
        let ended = self.call(
            "/api/2.0/mlflow/runs/update",
            Some(&json!({ "run_id": run.id, "status": status, "end_time": now_ms() })),
        );
        flushed.and(ended.map(drop))
    }
}

/// An episode's metrics, the same for every tracker: score, ok, steps, model calls, duration
/// and each numeric judgment component.
pub(crate) fn episode_metrics(traj: &Trajectory) -> Vec<(String, f64)> {
    let mut m = vec![
        ("episode/ok".to_string(), f64::from(u8::from(traj.ok()))),
        ("episode/steps".to_string(), traj.steps.len() as f64),
        (
            "episode/model_calls".to_string(),
            traj.model_calls.len() as f64,
        ),
    ];
    if let Some(s) = traj.score() {
        m.push(("episode/score".into(), s));
    }
    if let Some(d) = traj.duration_s {
        m.push(("episode/duration_s".into(), d));
    }
    if let Some(j) = &traj.judgment {
        for (k, v) in &j.components {
            if let Some(x) = v.as_f64() {
                m.push((format!("episode/reward/{k}"), x));
            }
        }
    }
    m
}

/// Refuse option keys outside `known`, by name.
pub(crate) fn check_keys(sink: &str, options: &JsonMap, known: &[&str]) -> Result<()> {
    match options.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(Error::Config(format!(
            "{sink}: unknown telemetry option `{k}`; known: {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A string option, or a typed error when it is there but not a string.
pub(crate) fn string_option(sink: &str, options: &JsonMap, key: &str) -> Result<Option<String>> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(Error::Config(format!(
            "{sink}: option `{key}` = {other} must be a string"
        ))),
    }
}

/// The tracking server's base URL: the option, else MLFLOW_TRACKING_URI; http(s) only.
fn tracking_uri(option: Option<String>) -> Result<String> {
    let from_option = option.is_some();
    let uri = option
        .or_else(|| std::env::var("MLFLOW_TRACKING_URI").ok())
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            Error::Config(
                "mlflow: no tracking server; set MLFLOW_TRACKING_URI or the `tracking_uri` option to the http(s) URL of `mlflow server` (e.g. http://127.0.0.1:5000)".into(),
            )
        })?;
    let uri = uri.trim().trim_end_matches('/').to_string();
    let host = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"));
    if host.map_or(true, str::is_empty) {
        let source = if from_option {
            "option `tracking_uri`"
        } else {
            "MLFLOW_TRACKING_URI"
        };
        return Err(Error::Config(format!(
            "mlflow: {source} = {uri:?} is not an http(s) URL; nenyax writes to MLflow through its REST API, so start `mlflow server` and give its URL (e.g. http://127.0.0.1:5000); file stores, sqlite: and databricks URIs are not supported"
        )));
    }
    Ok(uri)
}

/// MLFLOW_TRACKING_TOKEN as a bearer token, else MLFLOW_TRACKING_USERNAME/PASSWORD as Basic.
fn auth_header() -> Option<String> {
    let var = |k| std::env::var(k).ok().filter(|v: &String| !v.is_empty());
    if let Some(token) = var("MLFLOW_TRACKING_TOKEN") {
        return Some(format!("Bearer {token}"));
    }
    let user = var("MLFLOW_TRACKING_USERNAME")?;
    let password = var("MLFLOW_TRACKING_PASSWORD").unwrap_or_default();
    let login = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    Some(format!("Basic {login}"))
}

/// A reply's JSON, or a typed error naming the server's own message.
fn answer(
    url: &str,
    sent: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<Value> {
    let endpoint = |message: String| Error::Endpoint {
        url: url.to_string(),
        message,
    };
    let mut response =
        sent.map_err(|e| endpoint(format!("MLflow tracking server unreachable: {e}")))?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| endpoint(format!("MLflow reply unreadable: {e}")))?;
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if (200..300).contains(&status) {
        return Ok(body);
    }
    Err(endpoint(
        match (body["error_code"].as_str(), body["message"].as_str()) {
            (Some(code), Some(msg)) => format!("MLflow {code} (HTTP {status}): {msg}"),
            _ => format!("MLflow HTTP {status}: {}", truncate(text.trim(), 300)),
        },
    ))
}

fn id_of(v: &Value, call: &str) -> Result<String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| Error::Protocol(format!("mlflow: {call} returned no id")))
}

/// A key MLflow accepts: letters, digits and `_-. /:`, at most 250 characters.
fn mlflow_key(k: &str) -> String {
    let ok = |c: char| c.is_alphanumeric() || "_-. /:".contains(c);
    let k: String = k.chars().map(|c| if ok(c) { c } else { '_' }).collect();
    truncate(&k, MAX_KEY)
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: Value) -> JsonMap {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn refuses_unknown_options_and_non_http_uris() {
        let e = build(&opts(
            json!({"tracking_uri": "http://h:1", "experimnt": "x"}),
        ))
        .err()
        .unwrap();
        assert!(e.to_string().contains("`experimnt`"), "{e}");
        for bad in [
            "sqlite:///m.db",
            "file:///tmp/mlruns",
            "databricks",
            "http://",
        ] {
            let e = build(&opts(json!({ "tracking_uri": bad }))).err().unwrap();
            assert_eq!(e.kind(), "ConfigError");
            assert!(e.to_string().contains("not an http(s) URL"), "{e}");
        }
    }

    #[test]
    fn artifact_urls_follow_the_proxy() {
        let sink = MlflowSink::new(&opts(json!({"tracking_uri": "http://h:5/"}))).unwrap();
        let run = |u: &str| OpenRun {
            id: "r".into(),
            artifact_uri: u.into(),
        };
        assert_eq!(
            sink.artifact_url(&run("mlflow-artifacts:/1/r/artifacts"), "a b.json")
                .unwrap(),
            "http://h:5/api/2.0/mlflow-artifacts/artifacts/1/r/artifacts/a%20b.json"
        );
        assert_eq!(
            sink.artifact_url(&run("mlflow-artifacts://o:7/1/r/artifacts"), "d/x")
                .unwrap(),
            "http://o:7/api/2.0/mlflow-artifacts/artifacts/1/r/artifacts/d/x"
        );
        assert!(sink.artifact_url(&run("s3://b/1/r"), "x").is_err());
    }

    #[test]
    fn keys_fit_mlflow() {
        assert_eq!(mlflow_key("reward/α+β"), "reward/α_β");
        assert_eq!(mlflow_key(&"k".repeat(300)).len(), MAX_KEY);
    }
}
