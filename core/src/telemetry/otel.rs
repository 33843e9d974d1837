//! The `otel` telemetry sink (not built yet).

use super::Sink;
use crate::contract::JsonMap;
use crate::error::{Error, Result};

/// Build the sink from its options.
pub fn build(_options: &JsonMap) -> Result<Box<dyn Sink>> {
    Err(Error::Config(
        "the otel telemetry sink is not built yet".into(),
    ))
}
