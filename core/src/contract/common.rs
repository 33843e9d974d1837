//! What every part of the contract shares: the protocol version, JSON maps, ids, the clock, and
//! short previews of values for error messages.

use serde_json::{Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// Version of the contract; minor versions only add optional fields.
pub const PROTOCOL_VERSION: &str = "0.1";

/// A JSON object, the shape of every free-form map in the contract.
pub type JsonMap = Map<String, Value>;

pub(super) fn protocol_default() -> String {
    PROTOCOL_VERSION.to_string()
}

/// Current Unix time in seconds.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The Unix time at which `t0` was taken: the monotonic clock's elapsed time subtracted from
/// now, so a call's recorded start matches its measured latency.
pub fn unix_time_at(t0: std::time::Instant) -> f64 {
    now_unix() - t0.elapsed().as_secs_f64()
}

/// A process-unique pseudo-random number for ids; not for anything that must be secret.
pub(crate) fn fresh_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SALT: OnceLock<u64> = OnceLock::new();
    // The clock is read once per process: ids only need to differ, and this runs per model call.
    let salt = *SALT.get_or_init(|| {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ u64::from(std::process::id()).rotate_left(32)
    });
    crate::rng::splitmix64(salt ^ COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A short rendering of a JSON value for error messages (at most 120 characters).
pub fn preview_json(v: &Value) -> String {
    preview(v)
}

/// A short rendering of a JSON value for error messages.
pub(crate) fn preview(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}
