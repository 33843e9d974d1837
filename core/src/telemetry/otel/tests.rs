use super::*;
use crate::contract::{JudgeSource, Judgment, Mode};
use serde_json::json;

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

fn opts(v: Value) -> JsonMap {
    v.as_object().unwrap().clone()
}

#[test]
fn the_standard_variables_configure_it_and_options_override_them() {
    let env = env_of(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Basic%20abc,x-team=rl",
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=ci,service.name=fromres",
        ),
        ("OTEL_SERVICE_NAME", "trainer"),
    ]);
    let c = OtelConfig::resolve(&JsonMap::new(), &env).unwrap();
    assert_eq!(c.traces_endpoint, "http://collector:4318/v1/traces");
    assert_eq!(
        c.metrics_endpoint.as_deref(),
        Some("http://collector:4318/v1/metrics")
    );
    assert_eq!(
        c.headers,
        vec![
            ("authorization".to_string(), "Basic abc".to_string()),
            ("x-team".into(), "rl".into())
        ]
    );
    assert_eq!(c.timeout, Duration::from_millis(2500));
    assert_eq!(c.protocol, Protocol::Protobuf);
    assert!(c
        .resource
        .contains(&("service.name".into(), "trainer".into())));
    assert!(c
        .resource
        .contains(&("deployment.environment".into(), "ci".into())));

    let c = OtelConfig::resolve(
        &opts(
            json!({"traces_endpoint": "http://x:1/t", "protocol": "http/json",
            "headers": {"x-team": "eval"}, "metrics": false, "service_name": "s"}),
        ),
        &env,
    )
    .unwrap();
    assert_eq!(c.traces_endpoint, "http://x:1/t");
    assert_eq!(c.metrics_endpoint, None);
    assert_eq!(c.protocol, Protocol::Json);
    assert!(c.headers.contains(&("x-team".into(), "eval".into())));
    assert!(c.resource.contains(&("service.name".into(), "s".into())));
}

#[test]
fn bad_settings_are_refused_saying_what_to_use() {
    let none = |_: &str| None;
    for (o, want) in [
        (
            json!({"endpont": "x"}),
            "unknown otel telemetry option \"endpont\"",
        ),
        (
            json!({"protocol": "grpc"}),
            "use http/protobuf or http/json",
        ),
        (
            json!({"endpoint": "localhost:4318"}),
            "not an http:// or https:// URL",
        ),
        (json!({"timeout": -1}), "timeout must be seconds"),
        (json!({"headers": "novalue"}), "is not key=value"),
    ] {
        let e = OtelConfig::resolve(&opts(o), &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    let env = env_of(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]);
    let e = OtelConfig::resolve(&JsonMap::new(), &env).unwrap_err();
    assert!(e.to_string().contains("milliseconds"), "{e}");
}

fn tool_episode() -> Trajectory {
    let mut t = Trajectory::start("nemo_gym:counter", Mode::Rollout, None, Some(3));
    t.started_at = 1000.0;
    t.duration_s = Some(2.0);
    t.judgment = Some(
        Judgment::new(1.0, JudgeSource::Env, "env")
            .unwrap()
            .with_passed(true),
    );
    let call = |at: f64, resp: Value| ModelCall {
        request: opts(json!({"model": "m1", "temperature": 0.5})),
        response: Some(opts(resp)),
        error: None,
        latency_s: Some(0.25),
        started_at: Some(at),
        prompt_token_ids: None,
        completion_token_ids: Some(vec![1, 2, 3]),
        completion_logprobs: None,
    };
    t.model_calls = vec![
        call(
            1000.1,
            json!({"id": "r1", "model": "m1-2025", "choices": [{"finish_reason": "tool_calls",
                "message": {"tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "increment", "arguments": "{}"}}]}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5}}),
        ),
        call(
            1001.0,
            json!({"id": "r2", "choices": [{"finish_reason": "stop"}]}),
        ),
    ];
    t
}

fn attr<'a>(s: &'a Span, k: &str) -> Option<&'a AnyValue> {
    s.attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v)
}

#[test]
fn an_episode_is_a_root_span_with_chat_and_tool_children_at_their_recorded_times() {
    let cfg = OtelConfig::resolve(&JsonMap::new(), &|_| None).unwrap();
    let mut sink = OtelSink::new(cfg);
    let spans = sink.episode_spans(&tool_episode());
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "episode nemo_gym:counter",
            "chat m1",
            "execute_tool increment",
            "chat m1"
        ]
    );
    let root = &spans[0];
    assert_eq!(
        (root.start, root.end),
        (1_000_000_000_000, 1_002_000_000_000)
    );
    assert!(spans[1..].iter().all(|s| s.parent == Some(root.span_id)));
    assert!(spans.iter().all(|s| s.trace_id == root.trace_id));
    assert_eq!(
        (spans[1].start, spans[1].end),
        (1_000_100_000_000, 1_000_350_000_000)
    );
    // The tool ran between the first answer and the second call.
    assert_eq!(
        (spans[2].start, spans[2].end),
        (1_000_350_000_000, 1_001_000_000_000)
    );
    assert_eq!(
        attr(&spans[1], "gen_ai.usage.input_tokens"),
        Some(&AnyValue::Int(12))
    );
    assert_eq!(
        attr(&spans[1], "gen_ai.usage.output_tokens"),
        Some(&AnyValue::Int(5))
    );
    // Without usage, the token ids count.
    assert_eq!(
        attr(&spans[3], "gen_ai.usage.output_tokens"),
        Some(&AnyValue::Int(3))
    );
    assert_eq!(
        attr(&spans[1], "gen_ai.response.finish_reasons"),
        Some(&AnyValue::StrArray(vec!["tool_calls".into()]))
    );
    assert_eq!(
        attr(&spans[2], "gen_ai.tool.call.id"),
        Some(&AnyValue::Str("c1".into()))
    );
    assert_eq!(attr(root, "nenyax.passed"), Some(&AnyValue::Bool(true)));
    let m = sink.metric_list();
    let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "nenyax.episodes",
            "nenyax.episode.score",
            "nenyax.episode.duration",
            "gen_ai.client.operation.duration",
            "gen_ai.client.token.usage"
        ]
    );
}

#[test]
fn a_failed_call_and_episode_carry_error_status_and_type() {
    let mut t = tool_episode();
    t.error = Some("ModelError: upstream 500".into());
    t.judgment = None;
    t.model_calls[1].error = Some("HttpError: 500 from upstream".into());
    let mut sink = OtelSink::new(OtelConfig::resolve(&JsonMap::new(), &|_| None).unwrap());
    let spans = sink.episode_spans(&t);
    assert_eq!(spans[0].error.as_deref(), Some("ModelError: upstream 500"));
    assert_eq!(
        attr(&spans[0], "error.type"),
        Some(&AnyValue::Str("ModelError".into()))
    );
    assert_eq!(
        attr(&spans[3], "error.type"),
        Some(&AnyValue::Str("HttpError".into()))
    );
    assert!(spans[1].error.is_none());
}

#[test]
fn json_encoding_uses_hex_ids_and_string_integers() {
    let mut sink = OtelSink::new(OtelConfig::resolve(&JsonMap::new(), &|_| None).unwrap());
    let spans = sink.episode_spans(&tool_episode());
    let body = proto::traces(
        &[("service.name".into(), "n".into())],
        &spans,
        Protocol::Json,
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    let s = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][1];
    assert_eq!(s["traceId"].as_str().unwrap().len(), 32);
    assert_eq!(s["parentSpanId"].as_str().unwrap().len(), 16);
    assert_eq!(s["startTimeUnixNano"], "1000100000000");
    assert_eq!(s["kind"], 3);
}

#[test]
fn responses_api_answers_give_tool_calls_usage_and_a_finish_reason() {
    let r = opts(json!({"id": "resp_1", "model": "m", "status": "completed",
        "output": [{"type": "function_call", "call_id": "c9", "name": "get_counter_value",
            "arguments": "{}"}],
        "usage": {"input_tokens": 7, "output_tokens": 2}}));
    let a = Answer::of(Some(&r));
    assert_eq!(
        a.tool_calls,
        vec![("get_counter_value".to_string(), Some("c9".into()))]
    );
    assert_eq!(a.finish_reasons, ["tool_calls"]);
    assert_eq!((a.input_tokens, a.output_tokens), (Some(7), Some(2)));
    let cut = opts(json!({"output": [], "incomplete_details": {"reason": "max_output_tokens"}}));
    assert_eq!(Answer::of(Some(&cut)).finish_reasons, ["max_output_tokens"]);
}
