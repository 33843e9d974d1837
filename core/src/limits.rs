//! Limits on what users and peers hand to Nenyax, in one place: size caps on everything read
//! from files, pipes and peers, and the accepted ranges of numbers users give (flags, URI
//! parameters, config files, JSON options).
//!
//! A task author or a misbehaving worker controls these inputs, so none is read without a cap:
//! `define:/dev/zero` or a worker that never ends its line must fail with an error naming the
//! input and the cap, not exhaust memory. Each cap that a legitimate user could outgrow can be
//! raised with an environment variable (a byte count, or one with a `K`, `M` or `G` suffix
//! meaning KiB, MiB or GiB). docs/limits.md lists them all, with the caps enforced elsewhere
//! (HTTP heads and bodies of the servers, WebSocket frames, sandboxed command output).
//! Numbers are checked here so that every entry point refuses the same values with the same
//! words instead of panicking on them (`Duration::from_secs_f64(1e20)` aborts the process).

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

/// One cap: what it bounds, its default and the variable that raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What is capped, as it reads in a sentence ("task files").
    pub what: &'static str,
    /// The cap when the variable is unset, in bytes.
    pub default: u64,
    /// The environment variable that overrides the cap, when there is one.
    pub env: Option<&'static str>,
}

/// A `define:` TOML file, a `tasks_file` (JSONL), a `nemo_gym:` `data` or `rollouts` file.
/// Parsed rows take several times their size in memory, so the cap is well below RAM.
pub const TASK_FILE: Limit = Limit {
    what: "task files",
    default: 256 << 20,
    env: Some("NENYAX_MAX_TASK_FILE_BYTES"),
};

/// A configuration or task description: a `nenyax train` config, a Harbor `task.toml`,
/// `task.yaml`, `instruction.md` or Dockerfile, a training report read by `nenyax plot`.
pub const CONFIG_FILE: Limit = Limit {
    what: "configuration files",
    default: 16 << 20,
    env: Some("NENYAX_MAX_CONFIG_BYTES"),
};

/// A file read back out of a sandbox (a Harbor verifier's reward file, say): written by the
/// code under test, so never trusted to be small.
pub const SANDBOX_FILE: Limit = Limit {
    what: "files read from a sandbox",
    default: 64 << 20,
    env: Some("NENYAX_MAX_SANDBOX_FILE_BYTES"),
};

/// One JSON line from a Python bridge worker (a handshake or a reply). An observation with an
/// image fits many times over; a worker past it is killed and replaced.
pub const BRIDGE_LINE: Limit = Limit {
    what: "bridge worker reply lines",
    default: 32 << 20,
    env: Some("NENYAX_MAX_BRIDGE_LINE_BYTES"),
};

/// One line of a bridge worker's stderr: only the tail is kept for error messages, so a longer
/// line is cut, not refused.
pub const BRIDGE_STDERR_LINE: Limit = Limit {
    what: "bridge worker stderr lines",
    default: 4 << 10,
    env: None,
};

/// A model endpoint's or an upstream's HTTP reply body, streamed or not (a long completion
/// with logprobs fits many times over).
pub const HTTP_BODY: Limit = Limit {
    what: "HTTP reply bodies",
    default: 64 << 20,
    env: None,
};

impl Limit {
    /// The cap in force: the variable's value when it is set, else the default; a value that
    /// is not a positive byte count is an error naming the variable.
    pub fn bytes(&self) -> crate::Result<u64> {
        let Some(var) = self.env else {
            return Ok(self.default);
        };
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => parse_bytes(&v).ok_or_else(|| {
                crate::Error::Config(format!(
                    "{var}=`{v}` is not a size: give a positive number of bytes, optionally \
                     with a K, M or G suffix (e.g. {var}=512M)"
                ))
            }),
            _ => Ok(self.default),
        }
    }

    /// The sentence that says `subject` broke this cap and how to get past it.
    pub fn exceeded(&self, subject: &str, cap: u64) -> String {
        let fix = match self.env {
            Some(var) => format!(
                "; make it smaller, or raise the limit with {var}=<bytes> (e.g. {var}={})",
                suffixed(cap.saturating_mul(4))
            ),
            None => String::new(),
        };
        format!(
            "{subject} is larger than the {} limit for {}{fix}",
            human(cap),
            self.what
        )
    }
}

/// A size as people write it: `16 MiB`, `4 KiB`, `100 bytes`.
pub fn human(n: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// A size as [`Limit::bytes`] reads it back: `1G`, `64M`, `8K`, `100`.
fn suffixed(n: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, shift) = match v.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (v, 0),
        Some((i, _)) => {
            let shift = match v[i..].trim().to_ascii_uppercase().as_str() {
                "K" | "KB" | "KIB" => 10,
                "M" | "MB" | "MIB" => 20,
                "G" | "GB" | "GIB" => 30,
                _ => return None,
            };
            (&v[..i], shift)
        }
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1 << shift).filter(|&b| b > 0)
}

/// Why a capped read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The OS refused (missing file, no permission, not UTF-8 for a text read).
    Io(io::Error),
    /// The input is over its cap; the message names it, the cap and the fix.
    TooLarge(String),
    /// The variable that sets the cap does not hold a size.
    Setting(crate::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => e.fmt(f),
            ReadError::TooLarge(m) => f.write_str(m),
            ReadError::Setting(e) => e.fmt(f),
        }
    }
}

impl ReadError {
    /// As a crate error with `context` (what was being read, and where its path came from).
    pub fn into_error(self, context: impl Into<String>) -> crate::Error {
        match self {
            ReadError::Io(e) => crate::Error::io(context, e),
            ReadError::TooLarge(m) => {
                crate::Error::io(context, io::Error::new(io::ErrorKind::InvalidData, m))
            }
            ReadError::Setting(e) => e,
        }
    }
}

/// All of `path`, or an error when it is over `limit`. A regular file's size is checked first,
/// so an oversized one is refused without reading it; anything else (a device, a pipe) is read
/// through a window one byte past the cap, since its size cannot be trusted.
pub fn read_file(path: &Path, limit: &Limit) -> Result<Vec<u8>, ReadError> {
    let cap = limit.bytes().map_err(ReadError::Setting)?;
    let too_large = || ReadError::TooLarge(limit.exceeded(&path.display().to_string(), cap));
    let f = File::open(path).map_err(ReadError::Io)?;
    let meta = f.metadata().map_err(ReadError::Io)?;
    if meta.is_file() && meta.len() > cap {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(if meta.is_file() {
        meta.len() as usize
    } else {
        0
    });
    f.take(cap + 1)
        .read_to_end(&mut out)
        .map_err(ReadError::Io)?;
    if out.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(out)
}

/// [`read_file`] as UTF-8 text.
pub fn read_text(path: &Path, limit: &Limit) -> Result<String, ReadError> {
    String::from_utf8(read_file(path, limit)?).map_err(|_| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })
}

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

/// A step limit of 0 would still run one step; refuse it where the limit enters.
pub(crate) fn check_max_steps(max_steps: Option<usize>) -> crate::Result<()> {
    if max_steps == Some(0) {
        return Err(crate::Error::Config(
            "max_steps must be at least 1 (leave it unset for the environment's default)".into(),
        ));
    }
    Ok(())
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

    const SMALL: Limit = Limit {
        what: "test files",
        default: 10,
        env: None,
    };

    #[test]
    fn sizes_parse_as_people_write_them() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("2 GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("1k"), Some(1024));
        for bad in ["", "0", "-1", "1.5G", "lots", "99999999999999G"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
        assert_eq!(human(256 << 20), "256 MiB");
        assert_eq!(human(1000), "1000 bytes");
        assert_eq!(parse_bytes(&suffixed(1 << 30)), Some(1 << 30));
        assert_eq!(parse_bytes(&suffixed(1000)), Some(1000));
    }

    #[test]
    fn reads_stop_one_byte_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok");
        std::fs::write(&ok, b"0123456789").unwrap();
        assert_eq!(read_text(&ok, &SMALL).unwrap(), "0123456789");
        let big = dir.path().join("big");
        std::fs::write(&big, b"0123456789X").unwrap();
        let e = read_text(&big, &SMALL).unwrap_err().to_string();
        assert!(
            e.contains("big is larger than the 10 bytes limit for test files"),
            "{e}"
        );
        // A device reports no size: the window still stops it.
        let e = read_file(Path::new("/dev/zero"), &SMALL)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero is larger than"), "{e}");
    }
}
