//! Values as the bridge worker sends them, read into the contract's types.

use serde_json::Value;

use crate::error::{Error, Result};

/// A bridge reply as a contract type; a mismatch is a protocol error naming the reply.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| {
        Error::Protocol(format!(
            "bridge `{what}` reply does not fit the contract: {e}"
        ))
    })
}

/// A number that may arrive as "inf"/"-inf"/"nan" (the bridge's spelling of non-finite floats).
pub(crate) fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        Value::Bool(b) => f64::from(u8::from(*b)),
        _ => f64::NAN,
    }
}
