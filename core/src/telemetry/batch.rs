//! The batch metrics and summary of a run, shared by `nenyax run` and the C ABI runner.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hub::Telemetry;
use crate::contract::Trajectory;

/// How often a run sends its batch metrics.
const BATCH_EVERY: Duration = Duration::from_secs(5);

/// The running numbers of a batch run (`nenyax run`, the C ABI runner), sent every few seconds
/// and at the end, so a tracker shows a run's progress and not only its episodes.
pub struct BatchMetrics {
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
    pub fn new(telemetry: Arc<Telemetry>) -> Self {
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
    pub fn add(&mut self, t: &Trajectory) {
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
    pub fn finish(self, mut summary: Value, ok: bool) {
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
