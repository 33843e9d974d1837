//! `--telemetry otel,mlflow,wandb` of `nenyax run` and `nenyax train`: the hub the command's
//! rollouts report to, and the batch metrics and summary `run` sends.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nenyax::telemetry::{parse_list, RunInfo, SinkSpec, Telemetry};
use nenyax::{Error, Trajectory};

/// How often `run` sends its batch metrics.
const BATCH_EVERY: Duration = Duration::from_secs(5);

/// The hub for `--telemetry` (names, options from the variables) and a config's tables;
/// `None` when neither asks for one. Started with `run`.
pub(crate) fn open(
    flag: Option<&str>,
    configured: &[SinkSpec],
    run: RunInfo,
) -> Result<Option<Arc<Telemetry>>, Error> {
    let mut specs = configured.to_vec();
    if let Some(list) = flag {
        for s in parse_list(list)? {
            // A config's table for the same sink keeps its options.
            if !specs.iter().any(|c| c.name == s.name) {
                specs.push(s);
            }
        }
    }
    if specs.is_empty() {
        return Ok(None);
    }
    let t = Telemetry::from_specs(&specs)?;
    t.start(run);
    Ok(Some(Arc::new(t)))
}

/// Params as flat JSON values.
pub(crate) fn params(pairs: &[(&str, Value)]) -> nenyax::JsonMap {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// The running numbers of `nenyax run`, sent every few seconds and at the end.
pub(crate) struct BatchMetrics {
    telemetry: Arc<Telemetry>,
    t0: Instant,
    last: Instant,
    episodes: u64,
    failures: u64,
    score_sum: f64,
    passed: u64,
}

impl BatchMetrics {
    /// Counting from now.
    pub(crate) fn new(telemetry: Arc<Telemetry>) -> Self {
        let now = Instant::now();
        BatchMetrics {
            telemetry,
            t0: now,
            last: now,
            episodes: 0,
            failures: 0,
            score_sum: 0.0,
            passed: 0,
        }
    }

    /// One delivered episode; sends the metrics when they are due.
    pub(crate) fn add(&mut self, t: &Trajectory) {
        self.episodes += 1;
        self.failures += u64::from(t.error.is_some());
        self.score_sum += t.score().unwrap_or(0.0);
        self.passed += u64::from(t.judgment.as_ref().and_then(|j| j.passed) == Some(true));
        if self.last.elapsed() >= BATCH_EVERY {
            self.last = Instant::now();
            self.send();
        }
    }

    fn send(&self) {
        let n = self.episodes.max(1) as f64;
        let rate = self.episodes as f64 / self.t0.elapsed().as_secs_f64().max(1e-9);
        self.telemetry.metrics(
            self.episodes,
            &[
                ("episodes".into(), self.episodes as f64),
                ("mean_score".into(), self.score_sum / n),
                ("failures".into(), self.failures as f64),
                ("passed".into(), self.passed as f64),
                ("rollouts_per_s".into(), rate),
            ],
        );
    }

    /// The final metrics, the summary (`run_summary.json`) and the end of the run.
    pub(crate) fn finish(self, mut summary: Value, ok: bool) {
        self.send();
        summary["episodes"] = json!(self.episodes);
        summary["errors"] = json!(self.failures);
        summary["passed"] = json!(self.passed);
        summary["mean_score"] = json!(self.score_sum / self.episodes.max(1) as f64);
        summary["wall_s"] = json!(self.t0.elapsed().as_secs_f64());
        let bytes = serde_json::to_vec_pretty(&summary).unwrap_or_default();
        self.telemetry.artifact("run_summary.json", &bytes);
        self.telemetry.finish(ok);
    }
}
