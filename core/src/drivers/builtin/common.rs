//! What the built-in environments share: the per-task generator and JSON object helper.

use serde_json::Value;

use crate::contract::JsonMap;
use crate::rng::{splitmix64, Rng};

/// The generator of task `index` under `seed`: the same task on every platform and version.
pub(super) fn task_rng(seed: u64, index: u64) -> Rng {
    Rng::new(seed ^ splitmix64(index.wrapping_add(0xA5A5_A5A5)))
}

/// A JSON object from a `json!({...})` literal.
pub(super) fn obj(v: Value) -> JsonMap {
    match v {
        Value::Object(m) => m,
        _ => JsonMap::new(),
    }
}
