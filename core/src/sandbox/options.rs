//! The JSON options of a sandbox and of one command, as the C ABI takes them: every field
//! optional, unknown fields rejected, seconds as numbers.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::time::Duration;

use super::{BackendKind, Exec, SandboxConfig};
use crate::error::Result;

/// A number of seconds (`what`, for the error) as a duration, null as none; negative or
/// non-finite is an error.
fn seconds<'de, D: Deserializer<'de>>(
    d: D,
    what: &str,
) -> std::result::Result<Option<Duration>, D::Error> {
    let Some(s) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    crate::limits::seconds(s, true)
        .map(Some)
        .map_err(|want| serde::de::Error::custom(format!("{what} must be {want}, got {s}")))
}

fn wall_s<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Duration>, D::Error> {
    seconds(d, "wall_s")
}

fn timeout_s<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Duration>, D::Error> {
    seconds(d, "timeout_s")
}

/// Sandbox options: {"backend": "process"|"jail"|"container"|a sandbox plugin's name (default
/// process), "cpu_s", "memory_bytes",
/// "open_files", "processes", "file_size_bytes", "wall_s", "output_bytes", "network",
/// "workdir", "root", "env": {..}, "extra_dirs": [..], "image", "read_only_root",
/// "keep_detached", "cpus"}; absent fields
/// keep the defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxOptions {
    /// The backend's name.
    pub backend: Option<String>,
    /// CPU seconds.
    pub cpu_s: Option<u64>,
    /// Address space in bytes.
    pub memory_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_files: Option<u64>,
    /// Processes.
    pub processes: Option<u64>,
    /// Largest file in bytes.
    pub file_size_bytes: Option<u64>,
    /// Wall-clock limit per command.
    #[serde(default, deserialize_with = "wall_s")]
    pub wall_s: Option<Duration>,
    /// Captured bytes kept per stream.
    pub output_bytes: Option<usize>,
    /// Network access (jail only).
    pub network: Option<bool>,
    /// Working directory inside the sandbox.
    pub workdir: Option<String>,
    /// Commands run as root inside a jail.
    pub root: Option<bool>,
    /// Environment variables every command gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// More private top-level directories.
    #[serde(default)]
    pub extra_dirs: Vec<String>,
    /// The image a container starts from.
    pub image: Option<String>,
    /// A read-only root file system (container only).
    pub read_only_root: Option<bool>,
    /// Background processes outlive their command (container only).
    pub keep_detached: Option<bool>,
    /// CPUs at once (container only).
    pub cpus: Option<f64>,
}

impl SandboxOptions {
    /// The configuration these options describe; an unknown backend is a sandbox error.
    pub fn config(self) -> Result<SandboxConfig> {
        let kind = BackendKind::parse(self.backend.as_deref().unwrap_or("process"))?;
        let mut c = SandboxConfig::new(kind);
        let l = &mut c.limits;
        l.cpu_s = self.cpu_s.or(l.cpu_s);
        l.memory_bytes = self.memory_bytes.or(l.memory_bytes);
        l.open_files = self.open_files.or(l.open_files);
        l.processes = self.processes.or(l.processes);
        l.file_size_bytes = self.file_size_bytes.or(l.file_size_bytes);
        if let Some(w) = self.wall_s {
            l.wall = w;
        }
        l.output_bytes = self.output_bytes.unwrap_or(l.output_bytes);
        c.network = self.network.unwrap_or(false);
        c.root = self.root.unwrap_or(false);
        if let Some(w) = self.workdir {
            c.workdir = w;
        }
        c.env = self.env;
        c.extra_dirs = self.extra_dirs;
        c.image = self.image;
        c.read_only_root = self.read_only_root.unwrap_or(false);
        c.keep_detached = self.keep_detached.unwrap_or(false);
        if let Some(n) = self.cpus {
            if !(n.is_finite() && n > 0.0 && n <= crate::limits::MAX_THREADS as f64) {
                return Err(crate::error::Error::Sandbox(format!(
                    "cpus must be a number of CPUs above 0 and at most {}, got {n}",
                    crate::limits::MAX_THREADS
                )));
            }
            c.cpus = Some(n);
        }
        Ok(c)
    }
}

/// One command: {"argv": [..]} or {"shell": "..."}, plus optional "cwd", "env", "stdin" (text)
/// and "timeout_s".
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecOptions {
    /// Program and arguments.
    #[serde(default)]
    pub argv: Vec<String>,
    /// A shell command line.
    pub shell: Option<String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Text written to stdin.
    pub stdin: Option<String>,
    /// Wall timeout.
    #[serde(default, deserialize_with = "timeout_s")]
    pub timeout_s: Option<Duration>,
}

impl From<ExecOptions> for Exec {
    fn from(e: ExecOptions) -> Exec {
        Exec {
            argv: e.argv,
            shell: e.shell,
            cwd: e.cwd,
            env: e.env,
            stdin: e.stdin.map(String::into_bytes),
            timeout: e.timeout_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_keep_defaults_and_reject_bad_seconds_and_unknown_fields() {
        let o: SandboxOptions = serde_json::from_str(r#"{"wall_s": 2.5, "cpu_s": 7}"#).unwrap();
        let c = o.config().unwrap();
        assert_eq!(c.limits.wall, Duration::from_millis(2500));
        assert_eq!(c.limits.cpu_s, Some(7));
        assert_eq!(c.backend, BackendKind::Process);
        for bad in ["-1", "1e19"] {
            let json = format!(r#"{{"wall_s": {bad}}}"#);
            let e = serde_json::from_str::<SandboxOptions>(&json).unwrap_err();
            assert!(
                e.to_string()
                    .contains("wall_s must be a number of seconds >= 0 and at most 31536000"),
                "{e}"
            );
        }
        let e = serde_json::from_str::<ExecOptions>(r#"{"argv": [], "nope": 1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `nope`"), "{e}");
        let x: Exec = serde_json::from_str::<ExecOptions>(r#"{"shell": "ls", "stdin": "hi"}"#)
            .unwrap()
            .into();
        assert_eq!(x.stdin.as_deref(), Some(&b"hi"[..]));
        assert!(SandboxOptions {
            backend: Some("firecracker".into()),
            ..Default::default()
        }
        .config()
        .is_err());
    }
}
