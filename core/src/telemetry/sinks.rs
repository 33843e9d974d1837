//! The table from a sink's name to its builder (its own module: the sinks import the interface
//! in `spec`, and the hub imports this).

use super::spec::{Sink, SinkSpec, SINKS};
use crate::error::{Error, Result};

/// Build the sink `spec` names; an unknown name is refused with the list of known ones.
pub fn build(spec: &SinkSpec) -> Result<Box<dyn Sink>> {
    match spec.name.as_str() {
        "otel" | "opentelemetry" => super::otel::build(&spec.options),
        "mlflow" => super::mlflow::build(&spec.options),
        "wandb" => super::wandb::build(&spec.options),
        // Not a built-in: a telemetry plugin of that name (docs/plugins-abi.md).
        other => match crate::plugins::library::find_sink(other) {
            Ok(plugin) => Ok(Box::new(plugin.sink(spec.options.clone()))),
            Err(e) => Err(Error::Config(format!(
                "unknown telemetry sink {other:?}; known: {}; and as a plugin: {e}",
                SINKS.join(", ")
            ))),
        },
    }
}
