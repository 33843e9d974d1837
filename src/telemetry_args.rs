//! `--telemetry otel,mlflow,wandb` of `nenyax run` and `nenyax train`: the hub the command's
//! rollouts report to (the batch metrics `run` sends are nenyax::telemetry::BatchMetrics).

use serde_json::Value;
use std::sync::Arc;

use nenyax::telemetry::{parse_list, RunInfo, SinkSpec, Telemetry};
use nenyax::Error;

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
