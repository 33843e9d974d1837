//! The `otel` sink: episodes as OpenTelemetry traces and metrics over OTLP/HTTP
//! (`http/protobuf`, the OTLP default, or `http/json`), readable by Phoenix, Jaeger, Langfuse
//! and any OpenTelemetry collector. Model calls follow the GenAI semantic conventions.
//!
//! Every episode is one trace: an `episode <env>` span, a `chat <model>` child per model call
//! at the call's recorded start (`ModelCall.started_at`) lasting its `latency_s`, and an
//! `execute_tool <name>` child per tool call the model asked for, placed in the window between
//! that call's end and the next call's start (the environment does not time tools itself).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::spec::{RunInfo, Sink};
use crate::contract::{fresh_id, JsonMap, ModelCall, Trajectory};
use crate::error::{Error, Result};

mod proto;
use proto::{AnyValue, Attr, HistogramPoint, Metric, MetricData, Span, SpanKind};

/// Spans buffered before an export, as the OpenTelemetry SDKs' batch processor does.
const DEFAULT_BATCH: usize = 512;
/// Option keys the sink takes (`[[telemetry]]` tables, the C ABI's `"telemetry"` objects).
const KEYS: &[&str] = &[
    "name",
    "endpoint",
    "traces_endpoint",
    "metrics_endpoint",
    "headers",
    "protocol",
    "timeout",
    "service_name",
    "resource_attributes",
    "batch_size",
    "metrics",
    "provider",
];

pub use proto::Protocol;

/// Where and how the sink exports, from the `OTEL_*` variables overridden by options.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelConfig {
    /// Full URL spans are POSTed to (`.../v1/traces`).
    pub traces_endpoint: String,
    /// Full URL metrics are POSTed to (`.../v1/metrics`); `None`: no metrics.
    pub metrics_endpoint: Option<String>,
    /// Extra request headers (e.g. `Authorization`).
    pub headers: Vec<(String, String)>,
    /// The encoding.
    pub protocol: Protocol,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Resource attributes, `service.name` included.
    pub resource: Vec<(String, String)>,
    /// Spans per export.
    pub batch_size: usize,
    /// `gen_ai.provider.name` of model calls (the calls use the OpenAI chat wire format).
    pub provider: String,
}

impl OtelConfig {
    /// The configuration from `env` (a variable lookup, `std::env::var` in production) with
    /// `options` taking precedence.
    pub fn resolve(options: &JsonMap, env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        if let Some(k) = options.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::Config(format!(
                "unknown otel telemetry option {k:?}; known: {}",
                KEYS[1..].join(", ")
            )));
        }
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let opt_str = |k: &str| -> Result<Option<String>> {
            match options.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(Error::Config(format!(
                    "otel telemetry option {k} must be a string, not {v}"
                ))),
            }
        };
        let base = opt_str("endpoint")?
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .unwrap_or_else(|| "http://localhost:4318".into());
        let signal = |path: &str| format!("{}/{path}", base.trim_end_matches('/'));
        let traces_endpoint = opt_str("traces_endpoint")?
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .unwrap_or_else(|| signal("v1/traces"));
        let metrics_on = match options.get("metrics") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(Error::Config(format!(
                    "otel telemetry option metrics must be true or false, not {v}"
                )))
            }
        };
        let metrics_option = opt_str("metrics_endpoint")?;
        let metrics_endpoint = metrics_on.then(|| {
            metrics_option
                .or_else(|| env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
                .unwrap_or_else(|| signal("v1/metrics"))
        });
        for url in std::iter::once(&traces_endpoint).chain(&metrics_endpoint) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(Error::Config(format!(
                    "otel endpoint {url:?} is not an http:// or https:// URL (OTLP/HTTP, e.g. \
                     http://localhost:4318)"
                )));
            }
        }
        let mut headers = match env("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"))
        {
            Some(s) => pairs(&s, "OTEL_EXPORTER_OTLP_HEADERS")?,
            None => Vec::new(),
        };
        merge(&mut headers, map_or_pairs(options, "headers")?);
        let protocol = match opt_str("protocol")?
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
        {
            None | Some("http/protobuf") => Protocol::Protobuf,
            Some("http/json") => Protocol::Json,
            Some(other) => {
                return Err(Error::Config(format!(
                    "otel protocol {other:?} is not supported; use http/protobuf or http/json \
                     (gRPC receivers also listen on OTLP/HTTP, port 4318)"
                )))
            }
        };
        let timeout = match options.get("timeout") {
            Some(Value::Number(n)) => n.as_f64().filter(|s| *s > 0.0 && *s <= 3600.0),
            None | Some(Value::Null) => match env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
            {
                Some(ms) => ms
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|ms| *ms > 0.0 && *ms <= 3_600_000.0)
                    .map(|ms| ms / 1000.0)
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "OTEL_EXPORTER_OTLP_TIMEOUT={ms:?} is not a number of milliseconds \
                             between 1 and 3600000"
                        ))
                    })
                    .map(Some)?,
                None => Some(10.0),
            },
            Some(_) => None,
        }
        .ok_or_else(|| {
            Error::Config("otel telemetry option timeout must be seconds in (0, 3600]".into())
        })?;
        let mut resource = match env("OTEL_RESOURCE_ATTRIBUTES") {
            Some(s) => pairs(&s, "OTEL_RESOURCE_ATTRIBUTES")?,
            None => Vec::new(),
        };
        merge(&mut resource, map_or_pairs(options, "resource_attributes")?);
        let service = opt_str("service_name")?
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| "nenyax".into());
        merge(&mut resource, vec![("service.name".into(), service)]);
        let batch_size = match options.get("batch_size") {
            None | Some(Value::Null) => DEFAULT_BATCH,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=100_000).contains(n))
                .ok_or_else(|| {
                    Error::Config(format!(
                        "otel telemetry option batch_size must be 1..100000, not {v}"
                    ))
                })? as usize,
        };
        Ok(OtelConfig {
            traces_endpoint,
            metrics_endpoint,
            headers,
            protocol,
            timeout: Duration::from_secs_f64(timeout),
            resource,
            batch_size,
            provider: opt_str("provider")?.unwrap_or_else(|| "openai".into()),
        })
    }
}

/// `k=v,k2=v2` with percent-encoded values (the W3C baggage form the OTEL_* variables use).
fn pairs(s: &str, what: &str) -> Result<Vec<(String, String)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((percent_decode(k.trim()), percent_decode(v.trim())))
            }
            _ => Err(Error::Config(format!(
                "{what}: {p:?} is not key=value (the form is k1=v1,k2=v2)"
            ))),
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An option given as a table of strings or as a `k=v,...` string.
fn map_or_pairs(options: &JsonMap, key: &str) -> Result<Vec<(String, String)>> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => pairs(s, &format!("otel telemetry option {key}")),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
                _ => Err(Error::Config(format!(
                    "otel telemetry option {key}.{k} must be a string, not {v}"
                ))),
            })
            .collect(),
        Some(v) => Err(Error::Config(format!(
            "otel telemetry option {key} must be a table or a k=v,... string, not {v}"
        ))),
    }
}

/// Later pairs replace earlier ones with the same key.
fn merge(into: &mut Vec<(String, String)>, from: Vec<(String, String)>) {
    for (k, v) in from {
        match into.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => into.push((k, v)),
        }
    }
}

/// Build the sink from its options and the `OTEL_*` variables.
pub fn build(options: &JsonMap) -> Result<Box<dyn Sink>> {
    let config = OtelConfig::resolve(options, &|k| std::env::var(k).ok())?;
    Ok(Box::new(OtelSink::new(config)))
}

/// Cumulative histogram state (OTLP explicit buckets).
#[derive(Debug, Clone)]
struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    min: f64,
    max: f64,
}

impl Hist {
    fn new(bounds: &'static [f64]) -> Self {
        Hist {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn record(&mut self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

/// The GenAI semantic conventions' advised buckets for durations in seconds.
const DURATION_BOUNDS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// The GenAI semantic conventions' advised buckets for token counts.
const TOKEN_BOUNDS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
const SCORE_BOUNDS: &[f64] = &[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// Attribute sets of a metric's data points, kept sorted so exports are stable.
type Series<T> = BTreeMap<Vec<(String, String)>, T>;

/// Exports spans in batches and cumulative metrics on every flush.
pub struct OtelSink {
    config: OtelConfig,
    agent: ureq::Agent,
    spans: Vec<Span>,
    run: Option<RunInfo>,
    session: String,
    start_ns: u64,
    episodes: Series<u64>,
    scores: Series<Hist>,
    durations: Series<Hist>,
    op_durations: Series<Hist>,
    tokens: Series<Hist>,
    gauges: BTreeMap<String, (u64, f64)>,
    metrics_dirty: bool,
}

impl OtelSink {
    /// A sink exporting as `config` says.
    pub fn new(config: OtelConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        OtelSink {
            config,
            agent,
            spans: Vec::new(),
            run: None,
            session: format!("{:016x}", fresh_id()),
            start_ns: nanos(crate::contract::now_unix()),
            episodes: Series::new(),
            scores: Series::new(),
            durations: Series::new(),
            op_durations: Series::new(),
            tokens: Series::new(),
            gauges: BTreeMap::new(),
            metrics_dirty: false,
        }
    }

    fn post(&self, url: &str, body: Vec<u8>) -> Result<()> {
        let ct = match self.config.protocol {
            Protocol::Protobuf => "application/x-protobuf",
            Protocol::Json => "application/json",
        };
        let mut req = self.agent.post(url).header("Content-Type", ct);
        for (k, v) in &self.config.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        match req.send(&body[..]) {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let text = resp
                    .body_mut()
                    .with_config()
                    .limit(2000)
                    .read_to_string()
                    .unwrap_or_default();
                Err(Error::Config(format!(
                    "OTLP export to {url} answered HTTP {status}: {}",
                    text.trim()
                )))
            }
            Err(e) => Err(Error::Config(format!("OTLP export to {url} failed: {e}"))),
        }
    }

    fn export_spans(&mut self) -> Result<()> {
        if self.spans.is_empty() {
            return Ok(());
        }
        // A failed batch is dropped, as the SDKs do: holding it would grow without bound
        // while a collector is down.
        let spans = std::mem::take(&mut self.spans);
        let body = proto::traces(&self.config.resource, &spans, self.config.protocol);
        self.post(&self.config.traces_endpoint, body)
            .map_err(|e| Error::Config(format!("{e} ({} spans dropped)", spans.len())))
    }

    fn export_metrics(&mut self) -> Result<()> {
        let Some(url) = self.config.metrics_endpoint.clone() else {
            return Ok(());
        };
        if !std::mem::take(&mut self.metrics_dirty) {
            return Ok(());
        }
        let now = nanos(crate::contract::now_unix());
        let body = proto::metrics(
            &self.config.resource,
            &self.metric_list(),
            self.start_ns,
            now,
            self.config.protocol,
        );
        self.post(&url, body)
    }

    fn metric_list(&self) -> Vec<Metric> {
        let attrs = |k: &Vec<(String, String)>| -> Vec<Attr> {
            k.iter()
                .map(|(k, v)| (k.clone(), AnyValue::Str(v.clone())))
                .collect()
        };
        let hist = |name: &str, unit: &str, desc: &str, s: &Series<Hist>| Metric {
            name: name.into(),
            unit: unit.into(),
            description: desc.into(),
            data: MetricData::Histogram(
                s.iter()
                    .map(|(k, h)| HistogramPoint {
                        attrs: attrs(k),
                        count: h.counts.iter().sum(),
                        sum: h.sum,
                        bounds: h.bounds.to_vec(),
                        counts: h.counts.clone(),
                        min: h.min,
                        max: h.max,
                    })
                    .collect(),
            ),
        };
        let mut out = vec![
            Metric {
                name: "nenyax.episodes".into(),
                unit: "{episode}".into(),
                description: "Episodes finished".into(),
                data: MetricData::Counter(
                    self.episodes
                        .iter()
                        .map(|(k, n)| (attrs(k), *n as f64))
                        .collect(),
                ),
            },
            hist(
                "nenyax.episode.score",
                "1",
                "Scores of judged episodes",
                &self.scores,
            ),
            hist(
                "nenyax.episode.duration",
                "s",
                "Wall time of episodes",
                &self.durations,
            ),
            hist(
                "gen_ai.client.operation.duration",
                "s",
                "GenAI operation duration",
                &self.op_durations,
            ),
            hist(
                "gen_ai.client.token.usage",
                "{token}",
                "Measures number of input and output tokens used",
                &self.tokens,
            ),
        ];
        // `nenyax.run.mean_score`, `nenyax.train.eval_score`: apart from the sink's own.
        let kind = self.run.as_ref().map_or("run", |r| r.kind.as_str());
        out.extend(self.gauges.iter().map(|(name, (step, v))| Metric {
            name: format!("nenyax.{kind}.{name}"),
            unit: String::new(),
            description: "A run or training metric".into(),
            data: MetricData::Gauge(vec![(
                vec![("nenyax.step".into(), AnyValue::Int(*step as i64))],
                *v,
            )]),
        }));
        out.retain(|m| !m.data.is_empty());
        out
    }

    /// The spans of one episode, recording its metrics on the way.
    fn episode_spans(&mut self, t: &Trajectory) -> Vec<Span> {
        let trace_id = [fresh_id().to_be_bytes(), fresh_id().to_be_bytes()].concat();
        let root_id = fresh_id().to_be_bytes();
        let start = nanos(t.started_at);
        let end = start + nanos(t.duration_s.unwrap_or(0.0));
        let mode = serde_json::to_value(t.mode)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let mut attrs: Vec<Attr> = vec![
            ("nenyax.env.id".into(), AnyValue::Str(t.env_id.clone())),
            ("nenyax.env.mode".into(), AnyValue::Str(mode)),
            ("nenyax.ok".into(), AnyValue::Bool(t.ok())),
            ("nenyax.steps".into(), AnyValue::Int(t.steps.len() as i64)),
            (
                "nenyax.model_calls".into(),
                AnyValue::Int(t.model_calls.len() as i64),
            ),
            ("session.id".into(), AnyValue::Str(self.session.clone())),
            (
                "openinference.span.kind".into(),
                AnyValue::Str("CHAIN".into()),
            ),
        ];
        if let Some(run) = &self.run {
            attrs.push(("nenyax.run.name".into(), AnyValue::Str(run.name.clone())));
        }
        if let Some(task) = &t.task {
            attrs.push(("nenyax.task.id".into(), AnyValue::Str(task.id.clone())));
        }
        if let Some(seed) = t.seed {
            attrs.push(("nenyax.seed".into(), AnyValue::Int(seed)));
        }
        if let Some(j) = &t.judgment {
            attrs.push(("nenyax.score".into(), AnyValue::Double(j.score)));
            if let Some(p) = j.passed {
                attrs.push(("nenyax.passed".into(), AnyValue::Bool(p)));
            }
        }
        let mut status = None;
        if let Some(e) = &t.error {
            let kind = t
                .metadata
                .get("error_kind")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error_type(e));
            attrs.push(("error.type".into(), AnyValue::Str(kind)));
            status = Some(e.clone());
        }
        let env_key = vec![("nenyax.env.id".to_string(), t.env_id.clone())];
        *self
            .episodes
            .entry(vec![
                ("nenyax.env.id".into(), t.env_id.clone()),
                ("nenyax.ok".into(), t.ok().to_string()),
            ])
            .or_default() += 1;
        if let Some(s) = t.score() {
            self.scores
                .entry(env_key.clone())
                .or_insert_with(|| Hist::new(SCORE_BOUNDS))
                .record(s);
        }
        if let Some(d) = t.duration_s {
            self.durations
                .entry(env_key)
                .or_insert_with(|| Hist::new(DURATION_BOUNDS))
                .record(d);
        }
        self.metrics_dirty = true;
        let mut spans = vec![Span {
            trace_id: trace_id.clone(),
            span_id: root_id,
            parent: None,
            name: format!("episode {}", t.env_id),
            kind: SpanKind::Internal,
            start,
            end,
            attrs,
            error: status,
        }];
        for (i, call) in t.model_calls.iter().enumerate() {
            let next_start = t.model_calls.get(i + 1).and_then(|c| c.started_at);
            let window = (start, next_start.map(nanos), end);
            let call_spans = self.call_spans(call, &trace_id, root_id, window);
            spans.extend(call_spans);
        }
        spans
    }

    /// The `chat` span of one model call and the `execute_tool` spans of the tools it asked for.
    fn call_spans(
        &mut self,
        call: &ModelCall,
        trace_id: &[u8],
        parent: [u8; 8],
        (episode_start, next_start, episode_end): (u64, Option<u64>, u64),
    ) -> Vec<Span> {
        let str_at = |m: Option<&JsonMap>, k: &str| {
            m.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let request_model = str_at(Some(&call.request), "model");
        let response = call.response.as_ref();
        let mut attrs: Vec<Attr> = vec![
            ("gen_ai.operation.name".into(), AnyValue::Str("chat".into())),
            (
                "gen_ai.provider.name".into(),
                AnyValue::Str(self.config.provider.clone()),
            ),
            (
                "gen_ai.system".into(),
                AnyValue::Str(self.config.provider.clone()),
            ),
            (
                "openinference.span.kind".into(),
                AnyValue::Str("LLM".into()),
            ),
        ];
        if let Some(m) = &request_model {
            attrs.push(("gen_ai.request.model".into(), AnyValue::Str(m.clone())));
            attrs.push(("llm.model_name".into(), AnyValue::Str(m.clone())));
        }
        for (key, attr) in [
            ("temperature", "gen_ai.request.temperature"),
            ("top_p", "gen_ai.request.top_p"),
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("max_completion_tokens", "gen_ai.request.max_tokens"),
            ("max_output_tokens", "gen_ai.request.max_tokens"),
            ("seed", "gen_ai.request.seed"),
        ] {
            match call.request.get(key) {
                Some(Value::Number(n)) if n.is_i64() => {
                    attrs.push((attr.into(), AnyValue::Int(n.as_i64().unwrap_or(0))))
                }
                Some(Value::Number(n)) => {
                    attrs.push((attr.into(), AnyValue::Double(n.as_f64().unwrap_or(0.0))))
                }
                _ => {}
            }
        }
        if let Some(m) = str_at(response, "model") {
            attrs.push(("gen_ai.response.model".into(), AnyValue::Str(m)));
        }
        if let Some(id) = str_at(response, "id") {
            attrs.push(("gen_ai.response.id".into(), AnyValue::Str(id)));
        }
        let answer = Answer::of(response);
        if !answer.finish_reasons.is_empty() {
            attrs.push((
                "gen_ai.response.finish_reasons".into(),
                AnyValue::StrArray(answer.finish_reasons.clone()),
            ));
        }
        let input = answer
            .input_tokens
            .or_else(|| call.prompt_token_ids.as_ref().map(|t| t.len() as i64));
        let output = answer
            .output_tokens
            .or_else(|| call.completion_token_ids.as_ref().map(|t| t.len() as i64));
        let op_key = |extra: Option<(&str, String)>| -> Vec<(String, String)> {
            let mut k = vec![
                ("gen_ai.operation.name".to_string(), "chat".to_string()),
                ("gen_ai.provider.name".into(), self.config.provider.clone()),
            ];
            if let Some(m) = &request_model {
                k.push(("gen_ai.request.model".into(), m.clone()));
            }
            if let Some((a, b)) = extra {
                k.push((a.into(), b));
            }
            k.sort();
            k
        };
        for (kind, n) in [("input", input), ("output", output)] {
            if let Some(n) = n {
                attrs.push((format!("gen_ai.usage.{kind}_tokens"), AnyValue::Int(n)));
                self.tokens
                    .entry(op_key(Some(("gen_ai.token.type", kind.into()))))
                    .or_insert_with(|| Hist::new(TOKEN_BOUNDS))
                    .record(n as f64);
            }
        }
        let error = call.error.as_ref().map(|e| {
            let kind = error_type(e);
            attrs.push(("error.type".into(), AnyValue::Str(kind.clone())));
            kind
        });
        // A call without a recorded start sits at the episode's start; say so on the span.
        let start = match call.started_at {
            Some(s) => nanos(s),
            None => {
                attrs.push(("nenyax.timing".into(), AnyValue::Str("unrecorded".into())));
                episode_start
            }
        };
        let end = start + nanos(call.latency_s.unwrap_or(0.0));
        if let Some(l) = call.latency_s {
            self.op_durations
                .entry(op_key(error.clone().map(|e| ("error.type", e))))
                .or_insert_with(|| Hist::new(DURATION_BOUNDS))
                .record(l);
        }
        let span_id = fresh_id().to_be_bytes();
        let mut spans = vec![Span {
            trace_id: trace_id.to_vec(),
            span_id,
            parent: Some(parent),
            name: match &request_model {
                Some(m) => format!("chat {m}"),
                None => "chat".into(),
            },
            kind: SpanKind::Client,
            start,
            end,
            attrs,
            error: call.error.clone(),
        }];
        // Tools run after the model answered and before the next call (or the episode's end).
        let tool_end = next_start.unwrap_or(episode_end).max(end);
        for (name, id) in &answer.tool_calls {
            let mut attrs: Vec<Attr> = vec![
                (
                    "gen_ai.operation.name".into(),
                    AnyValue::Str("execute_tool".into()),
                ),
                ("gen_ai.tool.name".into(), AnyValue::Str(name.clone())),
                ("gen_ai.tool.type".into(), AnyValue::Str("function".into())),
                (
                    "openinference.span.kind".into(),
                    AnyValue::Str("TOOL".into()),
                ),
                ("tool.name".into(), AnyValue::Str(name.clone())),
                ("nenyax.timing".into(), AnyValue::Str("window".into())),
            ];
            if let Some(id) = id {
                attrs.push(("gen_ai.tool.call.id".into(), AnyValue::Str(id.clone())));
            }
            spans.push(Span {
                trace_id: trace_id.to_vec(),
                span_id: fresh_id().to_be_bytes(),
                parent: Some(parent),
                name: format!("execute_tool {name}"),
                kind: SpanKind::Internal,
                start: end,
                end: tool_end,
                attrs,
                error: None,
            });
        }
        spans
    }
}

/// What a model's answer says, from a chat-completions or a Responses API body.
#[derive(Debug, Default)]
struct Answer {
    finish_reasons: Vec<String>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    /// The tools it asked for: name and call id.
    tool_calls: Vec<(String, Option<String>)>,
}

impl Answer {
    fn of(response: Option<&JsonMap>) -> Self {
        let Some(r) = response else {
            return Answer::default();
        };
        let usage = |keys: [&str; 2]| keys.iter().find_map(|k| r.get("usage")?.get(*k)?.as_i64());
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let mut a = Answer {
            input_tokens: usage(["prompt_tokens", "input_tokens"]),
            output_tokens: usage(["completion_tokens", "output_tokens"]),
            ..Answer::default()
        };
        if let Some(choices) = r.get("choices").and_then(Value::as_array) {
            a.finish_reasons = choices
                .iter()
                .filter_map(|c| s(c, "finish_reason"))
                .collect();
            let calls = choices
                .first()
                .and_then(|c| c.pointer("/message/tool_calls"));
            for tc in calls.and_then(Value::as_array).into_iter().flatten() {
                let name = tc.pointer("/function/name").and_then(Value::as_str);
                a.tool_calls
                    .push((name.unwrap_or("tool").to_string(), s(tc, "id")));
            }
        } else if let Some(items) = r.get("output").and_then(Value::as_array) {
            // The Responses API has no finish reason: a tool call or a cut-off says it.
            for it in items.iter().filter(|i| i["type"] == "function_call") {
                let name = s(it, "name").unwrap_or_else(|| "tool".into());
                a.tool_calls.push((name, s(it, "call_id")));
            }
            let cut = r
                .get("incomplete_details")
                .and_then(|d| d.get("reason")?.as_str());
            a.finish_reasons = vec![match (cut, a.tool_calls.is_empty()) {
                (Some(why), _) => why.to_string(),
                (None, false) => "tool_calls".into(),
                (None, true) => "stop".into(),
            }];
        }
        a
    }
}

/// A short, low-cardinality error type: the `Kind` of `"<Kind>: message"`, else `error`.
fn error_type(e: &str) -> String {
    match e.split_once(':') {
        Some((k, _)) if !k.is_empty() && k.len() <= 64 && !k.contains(char::is_whitespace) => {
            k.to_string()
        }
        _ => "error".into(),
    }
}

fn nanos(secs: f64) -> u64 {
    (secs.max(0.0) * 1e9).round() as u64
}

impl Sink for OtelSink {
    fn name(&self) -> &'static str {
        "otel"
    }

    fn start(&mut self, run: &RunInfo) -> Result<()> {
        self.run = Some(run.clone());
        Ok(())
    }

    fn episode(&mut self, traj: &Trajectory) -> Result<()> {
        let spans = self.episode_spans(traj);
        self.spans.extend(spans);
        if self.spans.len() >= self.config.batch_size {
            return self.export_spans();
        }
        Ok(())
    }

    fn metrics(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        for (k, v) in values {
            self.gauges.insert(k.clone(), (step, *v));
        }
        self.metrics_dirty = true;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let spans = self.export_spans();
        let metrics = self.export_metrics();
        spans.and(metrics)
    }
}

#[cfg(test)]
mod tests;
