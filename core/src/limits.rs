//! The accepted ranges of numbers that users give (flags, URI parameters, config files, JSON
//! options), in one place so that every entry point refuses the same values with the same words
//! instead of panicking on them (`Duration::from_secs_f64(1e20)` aborts the process); and how
//! counts read in messages.

use std::time::Duration;

/// Longest accepted timeout or wait: one year. Longer ones are almost surely a typo, and a
/// deadline of `now + 1e20 s` overflows the clock.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// Most threads a runner (`--concurrency`, `check --threads`) may start: more only stall the
/// machine while they start (10,000 took over 40 s) and no rollout gets faster.
pub const MAX_THREADS: usize = 1024;

/// Most episodes in one batch: a batch holds one job per episode before it starts, so
/// `-n 100000000000` asked for 8.8 TB and aborted; a larger run is several batches (seeds
/// continued, output appended).
pub const MAX_EPISODES: usize = 10_000_000;

/// `value` seconds as a duration, if it is finite, greater than 0 (or equal when `zero_ok`) and
/// at most [`MAX_SECONDS`]; otherwise `Err` with what is expected, for the caller to wrap in its
/// own error naming the option (`--timeout must be {expected}, got 1e20`).
pub fn seconds(value: f64, zero_ok: bool) -> Result<Duration, String> {
    let low_ok = if zero_ok { value >= 0.0 } else { value > 0.0 };
    if value.is_finite() && low_ok && value <= MAX_SECONDS {
        if let Ok(d) = Duration::try_from_secs_f64(value) {
            return Ok(d);
        }
    }
    Err(format!(
        "a number of seconds {} 0 and at most {} (one year)",
        if zero_ok { ">=" } else { ">" },
        MAX_SECONDS as u64
    ))
}

/// `n word` or `n words`, for messages that count things ("1 episode", "2 episodes").
pub fn count(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_refuses_what_would_panic_or_overflow() {
        assert_eq!(seconds(1.5, false), Ok(Duration::from_millis(1500)));
        assert_eq!(seconds(0.0, true), Ok(Duration::ZERO));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e20, MAX_SECONDS * 2.0] {
            let e = seconds(bad, false).unwrap_err();
            assert!(e.contains("at most 31536000"), "{bad}: {e}");
        }
        assert!(seconds(-0.5, true).is_err());
    }
}
