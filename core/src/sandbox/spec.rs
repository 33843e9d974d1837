//! What a sandbox is asked for and what it answers, as plain data: the backends, limits and
//! configuration, a command to run and its result. The backends read these without depending on
//! the `Sandbox` itself.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::contract::Isolation;

/// The isolation level of a backend (the contract's [`Isolation`]).
pub type Level = Isolation;

/// The private directories every sandbox has, visible at `/<name>` inside a jail.
pub const PRIVATE_DIRS: [&str; 5] = ["app", "tests", "logs", "tmp", "solution"];

/// A sandbox backend: one of the built-in three, or a sandbox plugin (docs/plugins-abi.md).
/// Serialized as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A limited process group on the host.
    Process,
    /// A limited process group in new namespaces with a private file system view.
    Jail,
    /// A container of an image, run by Podman or Docker.
    Container,
    /// A backend from a library plugin or registered by a host through the C ABI.
    Plugin(PluginRef),
}

/// A sandbox plugin's fixed place in the plugin registry (plugins are never unloaded, so it
/// stays valid), with what listings need of it, so that `BackendKind` stays a small `Copy` value
/// and this module does not reach into the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PluginRef {
    pub(crate) index: u32,
    name: &'static str,
    level: Level,
    source: &'static str,
}

impl PluginRef {
    /// The plugin at `index` of the registry, named `name`, of `level`, loaded from `source`.
    pub(crate) fn new(index: u32, name: &'static str, level: Level, source: &'static str) -> Self {
        PluginRef {
            index,
            name,
            level,
            source,
        }
    }
}

impl BackendKind {
    /// The built-in backends, lightest first.
    pub const ALL: [BackendKind; 3] = [
        BackendKind::Process,
        BackendKind::Jail,
        BackendKind::Container,
    ];

    /// The backend's name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Process => "process",
            BackendKind::Jail => "jail",
            BackendKind::Container => "container",
            BackendKind::Plugin(p) => p.name,
        }
    }

    /// The isolation level it provides (a plugin's is what it declares).
    pub fn level(self) -> Level {
        match self {
            BackendKind::Process => Level::Process,
            BackendKind::Jail => Level::Jail,
            BackendKind::Container => Level::Container,
            BackendKind::Plugin(p) => p.level,
        }
    }

    /// A built-in backend by name (`docker` and `podman` name the container backend); plugins
    /// are parsed by `BackendKind::parse` (sandbox/mod.rs), which asks the plugin registry.
    pub fn built_in(s: &str) -> Option<BackendKind> {
        match s {
            "process" => Some(BackendKind::Process),
            "jail" => Some(BackendKind::Jail),
            "container" | "docker" | "podman" => Some(BackendKind::Container),
            _ => None,
        }
    }

    /// What the backend needs from the machine.
    pub fn needs(self) -> String {
        match self {
            BackendKind::Process => "Linux or another Unix; nothing else".into(),
            BackendKind::Jail => {
                "Linux, root or CAP_SYS_ADMIN (unshare of mount, PID, IPC, UTS and network namespaces)".into()
            }
            BackendKind::Container => {
                "Podman (or a Docker daemon) and a local base image: `nenyax setup container` \
                 installs and configures Podman, `nenyax images bootstrap` makes the image".into()
            }
            BackendKind::Plugin(p) => {
                format!("a sandbox plugin from {}; its `ready` says what it needs", p.source)
            }
        }
    }
}

impl Serialize for BackendKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Resource limits applied to every command a sandbox runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limits {
    /// CPU seconds (RLIMIT_CPU); the process gets SIGXCPU, then SIGKILL.
    pub cpu_s: Option<u64>,
    /// Address space in bytes (RLIMIT_AS); allocations beyond it fail.
    pub memory_bytes: Option<u64>,
    /// Open file descriptors (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// Processes of the sandbox user (RLIMIT_NPROC); effective because commands run as an
    /// unprivileged user when nenyax runs as root.
    pub processes: Option<u64>,
    /// Largest file a command may write, in bytes (RLIMIT_FSIZE).
    pub file_size_bytes: Option<u64>,
    /// Wall-clock limit per command when the exec gives none.
    pub wall: Duration,
    /// Captured bytes kept per stream (stdout, stderr); the rest is drained and counted.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_s: Some(600),
            memory_bytes: Some(8 << 30),
            open_files: Some(1024),
            processes: Some(512),
            file_size_bytes: Some(1 << 30),
            wall: Duration::from_secs(600),
            output_bytes: 1 << 20,
        }
    }
}

/// How to create a sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// The backend.
    pub backend: BackendKind,
    /// Limits for every command.
    pub limits: Limits,
    /// Allow network access (jail only; the process backend always shares the host network).
    pub network: bool,
    /// Environment variables every command gets (on top of the scrubbed base).
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (`/app` by default).
    pub workdir: String,
    /// Run commands as root inside a jail instead of the unprivileged sandbox user: root of a
    /// user namespace whose uid and gid 0 are the sandbox user's on the host, so it owns the
    /// private directories but can remount nothing and write no host file (other uids do not
    /// exist in it). The process backend ignores it.
    pub root: bool,
    /// More private top-level directories (e.g. `skills` for `/skills`), made like `/app`.
    pub extra_dirs: Vec<String>,
    /// The image a container starts from (container only); `None`: the default base image.
    pub image: Option<String>,
    /// Mount the container's root file system read-only (container only); the private
    /// directories stay writable.
    pub read_only_root: bool,
    /// Let what a command leaves running in the background outlive it, until the sandbox is
    /// destroyed (container only): Harbor tasks start services that their tests then talk to.
    /// A command that runs past its timeout is still killed with everything it started.
    pub keep_detached: bool,
    /// CPUs the container may use at once, as a CFS quota (container only; e.g. Harbor's
    /// `[environment] cpus`); `None`: no quota.
    pub cpus: Option<f64>,
}

impl SandboxConfig {
    /// Defaults for `backend`.
    pub fn new(backend: BackendKind) -> Self {
        SandboxConfig {
            backend,
            limits: Limits::default(),
            network: false,
            env: BTreeMap::new(),
            workdir: "/app".into(),
            root: false,
            extra_dirs: Vec::new(),
            image: None,
            read_only_root: false,
            keep_detached: false,
            cpus: None,
        }
    }
}

/// One command to run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Exec {
    /// Program and arguments; empty when `shell` is used.
    pub argv: Vec<String>,
    /// A shell command line, run with `bash -c` (or `sh -c` when bash is missing).
    pub shell: Option<String>,
    /// Working directory (a sandbox path); the sandbox's workdir when `None`.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Bytes written to stdin (then closed); stdin is empty when `None`.
    pub stdin: Option<Vec<u8>>,
    /// Wall timeout; the sandbox's `limits.wall` when `None`.
    pub timeout: Option<Duration>,
}

impl Exec {
    /// A shell command line.
    pub fn shell(cmd: impl Into<String>) -> Exec {
        Exec {
            shell: Some(cmd.into()),
            ..Exec::default()
        }
    }

    /// A program with arguments.
    pub fn argv<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Exec {
        Exec {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Exec::default()
        }
    }

    /// Set the wall timeout.
    pub fn timeout(mut self, t: Duration) -> Exec {
        self.timeout = Some(t);
        self
    }

    /// Set one environment variable.
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Exec {
        self.env.insert(k.into(), v.into());
        self
    }

    /// Set the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Exec {
        self.cwd = Some(cwd.into());
        self
    }

    /// Feed `data` on stdin.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Exec {
        self.stdin = Some(data.into());
        self
    }
}

/// Why a command was killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Killed {
    /// It ran past its wall timeout; the whole group was killed.
    Timeout,
    /// It used up its CPU seconds (SIGXCPU / SIGKILL from RLIMIT_CPU).
    CpuLimit,
    /// It wrote past the file-size limit (SIGXFSZ).
    FileSizeLimit,
    /// Another signal.
    Signal,
}

impl Killed {
    /// Why a command was killed, in words for messages; `None`: it was not.
    pub fn describe(killed: Option<Killed>) -> &'static str {
        match killed {
            None => "not killed",
            Some(Killed::Timeout) => "killed at its timeout",
            Some(Killed::CpuLimit) => "killed at its CPU limit",
            Some(Killed::FileSizeLimit) => "killed at its file-size limit",
            Some(Killed::Signal) => "killed by a signal",
        }
    }
}

/// What a command did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecResult {
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Captured stdout (lossy UTF-8, at most `limits.output_bytes`).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8, at most `limits.output_bytes`).
    pub stderr: String,
    /// Bytes of output beyond the cap that were drained and dropped.
    pub dropped_bytes: u64,
    /// Wall time in seconds.
    pub duration_s: f64,
    /// Why it was killed, when it was.
    pub killed: Option<Killed>,
}

impl ExecResult {
    /// True when it exited with status 0.
    pub fn ok(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// A file or directory in a sandbox listing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    /// The name within its directory.
    pub name: String,
    /// True for a directory.
    pub dir: bool,
    /// Size in bytes (files).
    pub size: u64,
}
