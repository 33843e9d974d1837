//! Telemetry: episodes, metrics and reports sent to tracing and experiment-tracking services
//! (OpenTelemetry over OTLP, MLflow, Weights & Biases) off the rollout hot path.
//!
//! A [`Sink`] runs on one background exporter thread; rollouts only enqueue. Sinks are chosen
//! by name with [`SinkSpec`] (`--telemetry otel,mlflow` on the CLI, `[[telemetry]]` in config
//! files, `"telemetry"` in C ABI options) and built with [`build`].

use crate::error::Result;

mod batch;
mod hub;
pub mod mlflow;
pub mod otel;
mod sinks;
mod spec;
pub mod wandb;

pub use batch::BatchMetrics;
pub use hub::{Telemetry, TelemetryStats};
pub use sinks::build;
pub use spec::{parse_json_list, parse_list, RunInfo, Sink, SinkSpec, SINKS};

/// Take the `"telemetry"` key out of an options object (the C ABI's runner and train options)
/// and start a hub for it; `None` when the key is absent or an empty list.
pub fn take_from_options(
    options: &mut serde_json::Value,
    run: RunInfo,
) -> Result<Option<std::sync::Arc<Telemetry>>> {
    let Some(v) = options.as_object_mut().and_then(|m| m.remove("telemetry")) else {
        return Ok(None);
    };
    let specs = parse_json_list(&v)?;
    if specs.is_empty() {
        return Ok(None);
    }
    let t = Telemetry::from_specs(&specs)?;
    t.start(run);
    Ok(Some(std::sync::Arc::new(t)))
}
