//! The sink interface, how sinks are named and built: a leaf of `telemetry` that the sinks and
//! the hub import, so none of them imports the module that re-exports them.

use crate::contract::{JsonMap, Trajectory};
use crate::error::{Error, Result};

/// What a run is, told to every sink once before its first episode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInfo {
    /// `"run"`, `"train"` or `"check"`: which command or entry point started it.
    pub kind: String,
    /// A human name for the run (the environment URI unless the caller gives one).
    pub name: String,
    /// Parameters worth tracking (URI, policy, episodes, learner settings), flat JSON values.
    pub params: JsonMap,
}

/// One telemetry backend. Every method is called on the exporter thread, never on a rollout
/// thread, so a sink may block on the network; an error is counted and reported once, and the
/// sink keeps receiving later events.
pub trait Sink: Send {
    /// The name it was chosen by (`otel`, `mlflow`, `wandb`).
    fn name(&self) -> &'static str;
    /// The run begins.
    fn start(&mut self, _run: &RunInfo) -> Result<()> {
        Ok(())
    }
    /// One finished episode, with its model calls' real start times and latencies.
    fn episode(&mut self, _traj: &Trajectory) -> Result<()> {
        Ok(())
    }
    /// Named values at a step (a training round, a batch of a run).
    fn metrics(&mut self, _step: u64, _values: &[(String, f64)]) -> Result<()> {
        Ok(())
    }
    /// A file to keep with the run (the JSON report).
    fn artifact(&mut self, _name: &str, _bytes: &[u8]) -> Result<()> {
        Ok(())
    }
    /// Send what is buffered; called every couple of seconds while events arrive, when the
    /// caller asks ([`Telemetry::flush`]), and before [`Sink::finish`].
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// The run ended (`ok` false when it failed); the last call a sink gets.
    fn finish(&mut self, _ok: bool) -> Result<()> {
        self.flush()
    }
}

/// A sink chosen by name, with its options (`[[telemetry]]` tables: `name = "mlflow"` plus
/// keys such as `tracking_uri`, `experiment`, `project`, `mode`, `endpoint`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkSpec {
    /// `otel` (alias `opentelemetry`), `mlflow` or `wandb`.
    pub name: String,
    /// Options of that sink; unknown keys are refused by the sink's builder.
    pub options: JsonMap,
}

/// The sink names [`build`] knows, in the order `nenyax integrations` lists them.
pub const SINKS: &[&str] = &["otel", "mlflow", "wandb"];

impl SinkSpec {
    /// A sink by name with no options.
    pub fn named(name: &str) -> Self {
        SinkSpec {
            name: name.trim().to_string(),
            options: JsonMap::new(),
        }
    }

    /// `{"name": "otel", ...options}`: the form of `[[telemetry]]` tables and the C ABI's
    /// `"telemetry"` lists.
    pub fn from_json(v: &serde_json::Value) -> Result<Self> {
        let name = v.get("name").and_then(serde_json::Value::as_str);
        match (v.as_object(), name) {
            (Some(map), Some(name)) => {
                let mut options = map.clone();
                options.remove("name");
                Ok(SinkSpec {
                    name: name.to_string(),
                    options,
                })
            }
            _ => Err(Error::Config(format!(
                "a telemetry entry must be a table with a \"name\" ({}) and that sink's \
                 options, not {v}",
                SINKS.join(", ")
            ))),
        }
    }
}

/// The sinks of a `--telemetry otel,mlflow` list (names only; options come from variables).
pub fn parse_list(list: &str) -> Result<Vec<SinkSpec>> {
    let specs: Vec<SinkSpec> = list
        .split(',')
        .filter(|n| !n.trim().is_empty())
        .map(SinkSpec::named)
        .collect();
    if specs.is_empty() {
        return Err(Error::Config(format!(
            "--telemetry needs at least one sink name ({})",
            SINKS.join(", ")
        )));
    }
    Ok(specs)
}

/// The sinks of a JSON list of `{"name": ..., ...options}` (a C ABI options key, a config
/// file's `[[telemetry]]` array read as JSON).
pub fn parse_json_list(v: &serde_json::Value) -> Result<Vec<SinkSpec>> {
    match v.as_array() {
        Some(items) => items.iter().map(SinkSpec::from_json).collect(),
        None => Err(Error::Config(format!(
            "\"telemetry\" must be a list of {{\"name\": ..., options}} objects, not {v}"
        ))),
    }
}
