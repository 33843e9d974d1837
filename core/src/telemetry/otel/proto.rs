//! The OTLP requests the sink sends, encoded by hand (the few messages of
//! opentelemetry-proto's trace and metrics services it needs) as protobuf or as OTLP JSON.

use serde_json::{json, Value};

/// Wire encoding of the OTLP requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`: binary protobuf (the OTLP default).
    Protobuf,
    /// `http/json`: the OTLP JSON mapping (hex ids, integer enums).
    Json,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    StrArray(Vec<String>),
}

/// A key and its value.
pub type Attr = (String, AnyValue);

/// OTLP span kinds used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Internal = 1,
    Client = 3,
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: Vec<u8>,
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    pub start: u64,
    pub end: u64,
    pub attrs: Vec<Attr>,
    /// `Some(message)`: status ERROR.
    pub error: Option<String>,
}

/// One explicit-bucket histogram data point.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    pub attrs: Vec<Attr>,
    pub count: u64,
    pub sum: f64,
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub min: f64,
    pub max: f64,
}

/// The data of a metric (cumulative where it accumulates).
#[derive(Debug, Clone, PartialEq)]
pub enum MetricData {
    /// A monotonic cumulative sum per attribute set.
    Counter(Vec<(Vec<Attr>, f64)>),
    /// The last value per attribute set.
    Gauge(Vec<(Vec<Attr>, f64)>),
    Histogram(Vec<HistogramPoint>),
}

impl MetricData {
    /// No data points.
    pub fn is_empty(&self) -> bool {
        match self {
            MetricData::Counter(p) | MetricData::Gauge(p) => p.is_empty(),
            MetricData::Histogram(p) => p.is_empty(),
        }
    }
}

/// One metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub description: String,
    pub data: MetricData,
}

const SCOPE: &str = "nenyax";
const CUMULATIVE: u64 = 2;
const STATUS_ERROR: u64 = 2;

/// An ExportTraceServiceRequest with one resource and one scope.
pub fn traces(resource: &[(String, String)], spans: &[Span], protocol: Protocol) -> Vec<u8> {
    match protocol {
        Protocol::Protobuf => {
            let mut scope_spans = Pb::default();
            scope_spans.msg(1, &scope());
            for s in spans {
                scope_spans.msg(2, &span_pb(s));
            }
            let mut rs = Pb::default();
            rs.msg(1, &resource_pb(resource));
            rs.msg(2, &scope_spans);
            let mut req = Pb::default();
            req.msg(1, &rs);
            req.0
        }
        Protocol::Json => {
            let spans: Vec<Value> = spans.iter().map(span_json).collect();
            let body = json!({"resourceSpans": [{
                "resource": resource_json(resource),
                "scopeSpans": [{"scope": scope_json(), "spans": spans}],
            }]});
            body.to_string().into_bytes()
        }
    }
}

/// An ExportMetricsServiceRequest with one resource and one scope; points span `start..now`.
pub fn metrics(
    resource: &[(String, String)],
    metrics: &[Metric],
    start: u64,
    now: u64,
    protocol: Protocol,
) -> Vec<u8> {
    match protocol {
        Protocol::Protobuf => {
            let mut sm = Pb::default();
            sm.msg(1, &scope());
            for m in metrics {
                sm.msg(2, &metric_pb(m, start, now));
            }
            let mut rm = Pb::default();
            rm.msg(1, &resource_pb(resource));
            rm.msg(2, &sm);
            let mut req = Pb::default();
            req.msg(1, &rm);
            req.0
        }
        Protocol::Json => {
            let ms: Vec<Value> = metrics.iter().map(|m| metric_json(m, start, now)).collect();
            json!({"resourceMetrics": [{
                "resource": resource_json(resource),
                "scopeMetrics": [{"scope": scope_json(), "metrics": ms}],
            }]})
            .to_string()
            .into_bytes()
        }
    }
}

/// A protobuf message being written.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn tag(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }
    fn uint(&mut self, field: u32, v: u64) {
        self.tag(field, 0);
        self.varint(v);
    }
    fn fixed64(&mut self, field: u32, v: u64) {
        self.tag(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn double(&mut self, field: u32, v: f64) {
        self.fixed64(field, v.to_bits());
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.tag(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }
    fn msg(&mut self, field: u32, m: &Pb) {
        self.bytes(field, &m.0);
    }
    fn packed_fixed64(&mut self, field: u32, vs: impl Iterator<Item = u64>) {
        let b: Vec<u8> = vs.flat_map(u64::to_le_bytes).collect();
        self.bytes(field, &b);
    }
}

fn scope() -> Pb {
    let mut p = Pb::default();
    p.str(1, SCOPE);
    p.str(2, env!("CARGO_PKG_VERSION"));
    p
}

fn scope_json() -> Value {
    json!({"name": SCOPE, "version": env!("CARGO_PKG_VERSION")})
}

fn any_pb(v: &AnyValue) -> Pb {
    let mut p = Pb::default();
    match v {
        AnyValue::Str(s) => p.str(1, s),
        AnyValue::Bool(b) => p.uint(2, u64::from(*b)),
        AnyValue::Int(i) => p.uint(3, *i as u64),
        AnyValue::Double(d) => p.double(4, *d),
        AnyValue::StrArray(items) => {
            let mut arr = Pb::default();
            for s in items {
                arr.msg(1, &any_pb(&AnyValue::Str(s.clone())));
            }
            p.msg(5, &arr);
        }
    }
    p
}

fn kv_pb(field: u32, out: &mut Pb, attrs: &[Attr]) {
    for (k, v) in attrs {
        let mut kv = Pb::default();
        kv.str(1, k);
        kv.msg(2, &any_pb(v));
        out.msg(field, &kv);
    }
}

fn resource_pb(resource: &[(String, String)]) -> Pb {
    let mut r = Pb::default();
    kv_pb(1, &mut r, &str_attrs(resource));
    r
}

fn str_attrs(pairs: &[(String, String)]) -> Vec<Attr> {
    pairs
        .iter()
        .map(|(k, v)| (k.clone(), AnyValue::Str(v.clone())))
        .collect()
}

fn span_pb(s: &Span) -> Pb {
    let mut p = Pb::default();
    p.bytes(1, &s.trace_id);
    p.bytes(2, &s.span_id);
    if let Some(parent) = &s.parent {
        p.bytes(4, parent);
    }
    p.str(5, &s.name);
    p.uint(6, s.kind as u64);
    p.fixed64(7, s.start);
    p.fixed64(8, s.end);
    kv_pb(9, &mut p, &s.attrs);
    if let Some(msg) = &s.error {
        let mut st = Pb::default();
        st.str(2, msg);
        st.uint(3, STATUS_ERROR);
        p.msg(15, &st);
    }
    p
}

fn metric_pb(m: &Metric, start: u64, now: u64) -> Pb {
    let mut p = Pb::default();
    p.str(1, &m.name);
    p.str(2, &m.description);
    p.str(3, &m.unit);
    let number_points = |data: &mut Pb, points: &[(Vec<Attr>, f64)], start: Option<u64>| {
        for (attrs, v) in points {
            let mut dp = Pb::default();
            if let Some(s) = start {
                dp.fixed64(2, s);
            }
            dp.fixed64(3, now);
            dp.double(4, *v);
            kv_pb(7, &mut dp, attrs);
            data.msg(1, &dp);
        }
    };
    match &m.data {
        MetricData::Counter(points) => {
            let mut sum = Pb::default();
            number_points(&mut sum, points, Some(start));
            sum.uint(2, CUMULATIVE);
            sum.uint(3, 1);
            p.msg(7, &sum);
        }
        MetricData::Gauge(points) => {
            let mut g = Pb::default();
            number_points(&mut g, points, None);
            p.msg(5, &g);
        }
        MetricData::Histogram(points) => {
            let mut h = Pb::default();
            for hp in points {
                let mut dp = Pb::default();
                dp.fixed64(2, start);
                dp.fixed64(3, now);
                dp.fixed64(4, hp.count);
                dp.double(5, hp.sum);
                dp.packed_fixed64(6, hp.counts.iter().copied());
                dp.packed_fixed64(7, hp.bounds.iter().map(|b| b.to_bits()));
                kv_pb(9, &mut dp, &hp.attrs);
                dp.double(11, hp.min);
                dp.double(12, hp.max);
                h.msg(1, &dp);
            }
            h.uint(2, CUMULATIVE);
            p.msg(9, &h);
        }
    }
    p
}

fn any_json(v: &AnyValue) -> Value {
    match v {
        AnyValue::Str(s) => json!({"stringValue": s}),
        AnyValue::Bool(b) => json!({"boolValue": b}),
        // OTLP JSON writes 64-bit integers as strings.
        AnyValue::Int(i) => json!({"intValue": i.to_string()}),
        AnyValue::Double(d) => json!({"doubleValue": d}),
        AnyValue::StrArray(items) => {
            json!({"arrayValue": {"values": items.iter().map(|s| json!({"stringValue": s})).collect::<Vec<_>>()}})
        }
    }
}

fn attrs_json(attrs: &[Attr]) -> Value {
    attrs
        .iter()
        .map(|(k, v)| json!({"key": k, "value": any_json(v)}))
        .collect()
}

fn resource_json(resource: &[(String, String)]) -> Value {
    json!({"attributes": attrs_json(&str_attrs(resource))})
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn span_json(s: &Span) -> Value {
    let mut v = json!({
        "traceId": hex(&s.trace_id),
        "spanId": hex(&s.span_id),
        "name": s.name,
        "kind": s.kind as u64,
        "startTimeUnixNano": s.start.to_string(),
        "endTimeUnixNano": s.end.to_string(),
        "attributes": attrs_json(&s.attrs),
    });
    if let Some(p) = &s.parent {
        v["parentSpanId"] = json!(hex(p));
    }
    if let Some(msg) = &s.error {
        v["status"] = json!({"code": STATUS_ERROR, "message": msg});
    }
    v
}

fn metric_json(m: &Metric, start: u64, now: u64) -> Value {
    let points = |points: &[(Vec<Attr>, f64)], start: Option<u64>| -> Value {
        points
            .iter()
            .map(|(attrs, v)| {
                let mut p = json!({
                    "attributes": attrs_json(attrs),
                    "timeUnixNano": now.to_string(),
                    "asDouble": v,
                });
                if let Some(s) = start {
                    p["startTimeUnixNano"] = json!(s.to_string());
                }
                p
            })
            .collect()
    };
    let mut v = json!({"name": m.name, "description": m.description, "unit": m.unit});
    match &m.data {
        MetricData::Counter(p) => {
            v["sum"] = json!({"dataPoints": points(p, Some(start)),
                "aggregationTemporality": CUMULATIVE, "isMonotonic": true});
        }
        MetricData::Gauge(p) => v["gauge"] = json!({"dataPoints": points(p, None)}),
        MetricData::Histogram(hs) => {
            let dps: Vec<Value> = hs
                .iter()
                .map(|h| {
                    json!({
                        "attributes": attrs_json(&h.attrs),
                        "startTimeUnixNano": start.to_string(),
                        "timeUnixNano": now.to_string(),
                        "count": h.count.to_string(),
                        "sum": h.sum,
                        "bucketCounts": h.counts.iter().map(u64::to_string).collect::<Vec<_>>(),
                        "explicitBounds": h.bounds,
                        "min": h.min,
                        "max": h.max,
                    })
                })
                .collect();
            v["histogram"] = json!({"dataPoints": dps, "aggregationTemporality": CUMULATIVE});
        }
    }
    v
}
