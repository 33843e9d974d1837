//! Sandboxes: where task-mode agents and their tests run.
//!
//! One contract ([`Sandbox`]: create, exec, files, fork, destroy) over backends of increasing
//! isolation (`none < process < jail < container < microvm`). [`select`] picks the lightest
//! ready backend that is safe enough and says why the others were skipped. Three backends exist:
//!
//! - `process`: its own session and process group, rlimits (CPU seconds, address space, open
//!   files, process count, file size), a wall timeout that kills the whole group, a private
//!   working directory and a scrubbed environment. Commands see the host's file system.
//! - `jail`: the same limits inside new mount, PID, IPC, UTS and network namespaces (via nix),
//!   with the host root read-only, a private minimal `/dev`, a fresh `/proc`, and private
//!   writable `/app`, `/tests`, `/logs`, `/tmp` and `/solution`; `root: true` is root of a user
//!   namespace. Needs root (or `CAP_SYS_ADMIN`).
//! - `container`: one long-lived container of an image per sandbox, run by Podman or Docker
//!   (container.rs); sandbox paths are the container's own, and fork is a commit.
//!
//! See docs/sandbox.md for what each promise means and how `nenyax sandbox-check` proves it.

mod capture;
pub mod check;
mod container;
pub mod engine;
pub mod images;
mod marker;
mod options;
pub mod pool;
mod process;
mod spec;

pub use process::JAIL_SHM_BYTES;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use check::{sandbox_check, SandboxReport};
pub use container::{default_image, sweep as sweep_containers, Swept, DEFAULT_IMAGE, IMAGE_ENV};
pub use options::{ExecOptions, SandboxOptions};
pub use pool::WarmPool;
pub use spec::{
    BackendKind, Entry, Exec, ExecResult, Killed, Level, Limits, PluginRef, SandboxConfig,
    PRIVATE_DIRS,
};

// Parsing a name asks the plugin registry, and whether a backend can run here is asked of the
// backends, so both live here, not in spec.rs (which the registry's types depend on).
impl BackendKind {
    /// Parse a backend name: a built-in one, or a sandbox plugin registered or listed in the
    /// plugins config (loaded now).
    pub fn parse(s: &str) -> Result<BackendKind> {
        if let Some(b) = BackendKind::built_in(s) {
            return Ok(b);
        }
        let plugins = crate::plugins::library::plugin_names(crate::plugins::kinds::Kind::Sandbox);
        if plugins.iter().any(|p| p == s) {
            let (i, p) = crate::plugins::library::find_sandbox(s)?;
            return Ok(BackendKind::Plugin(PluginRef::new(
                i,
                p.name(),
                p.level(),
                p.source(),
            )));
        }
        Err(Error::Sandbox(format!(
            "unknown sandbox backend `{s}`: use `process`, `jail` or `container`{} (the microvm \
             backend is not implemented; a backend of your own is a sandbox plugin: \
             docs/plugins-abi.md)",
            if plugins.is_empty() {
                String::new()
            } else {
                format!(", or a sandbox plugin: {}", plugins.join(", "))
            }
        )))
    }

    /// `Ok(())` when the backend can run here, else why not.
    pub fn ready(self) -> std::result::Result<(), String> {
        match self {
            BackendKind::Process => Ok(()),
            BackendKind::Jail => process::jail_ready(),
            BackendKind::Container => container::ready(),
            BackendKind::Plugin(p) => p.plugin().ready(),
        }
    }
}

impl PluginRef {
    /// The plugin's backend implementation.
    pub fn plugin(self) -> std::sync::Arc<crate::plugins::sandbox::LibrarySandbox> {
        // Only the registry hands out refs, and it never removes a plugin.
        crate::plugins::library::sandbox_at(self.index).expect("sandbox plugins are never removed")
    }
}

impl<'de> Deserialize<'de> for BackendKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        BackendKind::parse(&name).map_err(serde::de::Error::custom)
    }
}

/// A backend as `nenyax sandboxes` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackendInfo {
    /// The backend's name.
    pub name: String,
    /// Its isolation level.
    pub level: Level,
    /// Whether it can run on this machine.
    pub ready: bool,
    /// Why it cannot, when it cannot.
    pub why_not: Option<String>,
    /// What it needs.
    pub needs: String,
}

/// Every backend, known or planned, with whether it is ready here.
pub fn backends() -> Vec<BackendInfo> {
    let info = |b: BackendKind| {
        let r = b.ready();
        BackendInfo {
            name: b.name().into(),
            level: b.level(),
            ready: r.is_ok(),
            why_not: r.err(),
            needs: b.needs(),
        }
    };
    let mut out: Vec<BackendInfo> = BackendKind::ALL.iter().map(|b| info(*b)).collect();
    out.push(BackendInfo {
        name: "microvm".into(),
        level: Level::Microvm,
        ready: false,
        why_not: Some("not implemented".into()),
        needs: "a microVM monitor (not implemented in nenyax yet)".into(),
    });
    out.extend(plugin_backends().into_iter().map(|p| match p {
        Ok(b) => info(b),
        Err((name, e)) => BackendInfo {
            name,
            level: Level::None,
            ready: false,
            why_not: Some(e),
            needs: "a sandbox plugin that loads".into(),
        },
    }));
    out
}

/// The sandbox plugins registered or listed in the plugins config (each loaded now), or the
/// name of one that does not load and why.
pub fn plugin_backends() -> Vec<std::result::Result<BackendKind, (String, String)>> {
    use crate::plugins::kinds::Kind;
    crate::plugins::library::plugin_names(Kind::Sandbox)
        .into_iter()
        .map(|n| BackendKind::parse(&n).map_err(|e| (n, e.to_string())))
        .collect()
}

/// The outcome of [`select`]: the chosen backend and why lighter or unready ones were skipped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Selection {
    /// The chosen backend.
    pub backend: BackendKind,
    /// `(backend, why)` for each backend passed over.
    pub skipped: Vec<(String, String)>,
}

/// Pick the lightest ready backend whose level is at least `level`.
pub fn select(level: Level) -> Result<Selection> {
    let mut skipped = Vec::new();
    // Plugins are picked by name only, never in place of a built-in.
    for info in backends()
        .into_iter()
        .filter(|b| BackendKind::ALL.iter().any(|k| k.name() == b.name) || b.name == "microvm")
    {
        if !info.level.satisfies(level) {
            skipped.push((
                info.name,
                format!(
                    "{} isolation is below the {} asked for",
                    level_name(info.level),
                    level_name(level)
                ),
            ));
            continue;
        }
        if !info.ready {
            skipped.push((info.name, info.why_not.unwrap_or_default()));
            continue;
        }
        return Ok(Selection {
            backend: BackendKind::parse(&info.name)?,
            skipped,
        });
    }
    let why: Vec<String> = skipped.iter().map(|(n, w)| format!("{n}: {w}")).collect();
    Err(Error::Sandbox(format!(
        "no sandbox backend at {} isolation or above is ready here ({}); run \
         `nenyax sandboxes` to see what each needs",
        level_name(level),
        why.join("; ")
    )))
}

/// An isolation level in words (its serialized name).
fn level_name(level: Level) -> String {
    serde_json::to_value(level)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "unknown".into())
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Set by the first warm pool (pool.rs): takes a dropped pooled sandbox's emptied directories
/// back for reuse. A hook, not a call, so that this module does not depend on the pool's.
static RECYCLE: std::sync::OnceLock<fn(&mut Sandbox)> = std::sync::OnceLock::new();

/// A live sandbox. Dropping it destroys it (kills what is left and removes its files).
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    id: String,
    inner: Inner,
}

/// Where a sandbox lives: a host directory (process and jail) or a container.
#[derive(Debug)]
enum Inner {
    Host {
        dir: tempfile::TempDir,
        /// Set once a command ran: only then can processes be left to sweep on destroy.
        ran: std::sync::atomic::AtomicBool,
    },
    Container(container::Container),
    /// A sandbox plugin's (plugins/sandbox.rs).
    Plugin(crate::plugins::sandbox::PluginSandbox),
}

fn next_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    )
}

fn check_extra_dirs(config: &SandboxConfig) -> Result<()> {
    for d in &config.extra_dirs {
        if d.is_empty()
            || d.contains('/')
            || d.starts_with('.')
            || PRIVATE_DIRS.contains(&d.as_str())
        {
            return Err(Error::Sandbox(format!(
                "extra directory `{d}` must be one plain top-level name (e.g. `skills`), not a path"
            )));
        }
    }
    Ok(())
}

impl Sandbox {
    /// Create a sandbox with the given configuration.
    pub fn create(config: SandboxConfig) -> Result<Sandbox> {
        if let Err(why) = config.backend.ready() {
            return Err(Error::Sandbox(format!(
                "the {} sandbox backend cannot run here: {why}",
                config.backend.name()
            )));
        }
        check_extra_dirs(&config)?;
        if let BackendKind::Plugin(p) = config.backend {
            let id = next_id();
            let dirs: Vec<&str> = PRIVATE_DIRS
                .iter()
                .copied()
                .chain(config.extra_dirs.iter().map(String::as_str))
                .collect();
            let sb = p.plugin().create(&config, &id, dirs)?;
            return Ok(Sandbox {
                config,
                id,
                inner: Inner::Plugin(sb),
            });
        }
        if config.backend == BackendKind::Container {
            let id = next_id();
            let c = container::Container::create(&config, &id, None)?;
            return Ok(Sandbox {
                config,
                id,
                inner: Inner::Container(c),
            });
        }
        if config.root && config.backend == BackendKind::Jail {
            if let Err(why) = process::user_namespace_ready() {
                return Err(Error::Sandbox(format!(
                    "a jail with root: true runs as root of a user namespace, which cannot be \
                     made here: {why}; use root: false"
                )));
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("nenyax-sbx-")
            .tempdir()
            .map_err(|e| io_err("create the sandbox directory", e))?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .map_err(|e| io_err("chmod the sandbox directory", e))?;
        for d in PRIVATE_DIRS
            .iter()
            .chain([".root"].iter())
            .map(|d| d.to_string())
            .chain(config.extra_dirs.clone())
        {
            let p = dir.path().join(&d);
            fs::create_dir(&p).map_err(|e| io_err(&format!("create {}", p.display()), e))?;
        }
        let sb = Sandbox {
            config,
            id: next_id(),
            inner: Inner::Host {
                dir,
                ran: std::sync::atomic::AtomicBool::new(false),
            },
        };
        let base = dir_of(&sb.inner).to_path_buf();
        for d in sb.private_dirs() {
            sb.chown(&base.join(d))?;
        }
        fs::set_permissions(base.join("tmp"), fs::Permissions::from_mode(0o1777))
            .map_err(|e| io_err("chmod tmp", e))?;
        Ok(sb)
    }

    /// Create a sandbox with the default configuration of `backend`.
    pub fn new(backend: BackendKind) -> Result<Sandbox> {
        Sandbox::create(SandboxConfig::new(backend))
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> BackendKind {
        self.config.backend
    }

    /// A unique id (every command's `NENYAX_SANDBOX` variable is `<id>.<command number>`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The host directory holding the private directories; `None` for a container, whose
    /// files live in the engine's storage.
    pub fn host_dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Host { dir, .. } => Some(dir.path()),
            Inner::Container(_) | Inner::Plugin(_) => None,
        }
    }

    /// The container's name in its engine (container backend only).
    pub fn container_name(&self) -> Option<&str> {
        match &self.inner {
            Inner::Container(c) => Some(c.name()),
            Inner::Host { .. } | Inner::Plugin(_) => None,
        }
    }

    /// Where a sandbox path lives on the host. Absolute paths must lie in one of the private
    /// directories (`/app`, `/tests`, `/logs`, `/tmp`, `/solution`); relative ones are taken
    /// from the workdir. `..` is refused. A container's files are not on the host: an error.
    pub fn host_path(&self, path: &str) -> Result<PathBuf> {
        let dir = match &self.inner {
            Inner::Host { dir, .. } => dir.path(),
            Inner::Container(c) => {
                return Err(Error::Sandbox(format!(
                    "sandbox path `{path}` has no host path: the files of container `{}` live \
                     in the container; use get, put and list",
                    c.name()
                )))
            }
            Inner::Plugin(p) => {
                return Err(Error::Sandbox(format!(
                    "sandbox path `{path}` has no host path: the files of a `{}` sandbox are the \
                     plugin's; use get, put and list",
                    p.plugin().name()
                )))
            }
        };
        let mut out = dir.to_path_buf();
        out.extend(self.sandbox_parts(path)?);
        Ok(out)
    }

    /// A sandbox path's components below `/`, checked to lie in a private directory: absolute
    /// paths as given, relative ones from the workdir, `..` refused.
    fn sandbox_parts(&self, path: &str) -> Result<Vec<String>> {
        let full = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.config.workdir.trim_end_matches('/'))
        };
        let p = Path::new(&full);
        let mut parts = Vec::new();
        for c in p.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
                _ => {
                    return Err(Error::Sandbox(format!(
                        "sandbox path `{path}` uses `..`: give a path inside /app, /tests, /logs, /tmp or /solution"
                    )))
                }
            }
        }
        match parts.first() {
            Some(first) if self.private_dirs().any(|d| d == first) => Ok(parts),
            _ => Err(Error::Sandbox(format!(
                "sandbox path `{path}` is outside the sandbox's private directories: use /app, \
                 /tests, /logs, /tmp or /solution"
            ))),
        }
    }

    /// Run a command.
    pub fn exec(&self, exec: &Exec) -> Result<ExecResult> {
        let (dir, ran) = match &self.inner {
            Inner::Host { dir, ran } => (dir.path(), ran),
            Inner::Container(c) => return c.exec(&self.config, &self.id, exec),
            Inner::Plugin(p) => {
                let cwd = match &exec.cwd {
                    Some(c) if c.starts_with('/') => c.clone(),
                    Some(c) => format!("{}/{c}", self.config.workdir.trim_end_matches('/')),
                    None => self.config.workdir.clone(),
                };
                return p.exec(exec, &cwd, &self.config);
            }
        };
        ran.store(true, Ordering::Relaxed);
        let host_path = |p: &str| self.host_path(p);
        let job = process::Job {
            config: &self.config,
            host_dir: dir,
            id: &self.id,
            run_as: self.run_as(),
            private_dirs: self.private_dirs().collect(),
            host_path: &host_path,
        };
        process::run(&job, exec)
    }

    /// Run a shell command line with the default timeout.
    pub fn sh(&self, cmd: &str) -> Result<ExecResult> {
        self.exec(&Exec::shell(cmd))
    }

    /// Write a file (creating parent directories) with the given Unix mode.
    pub fn put(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        if let Inner::Container(c) = &self.inner {
            return c.put(&self.container_path(path)?, data, mode);
        }
        if let Inner::Plugin(p) = &self.inner {
            return p.put(&self.plugin_path(path)?, data, mode);
        }
        let host = self.host_path(path)?;
        if let Some(parent) = host.parent() {
            self.mkdirs(parent)?;
        }
        fs::write(&host, data).map_err(|e| io_err(&format!("write {path}"), e))?;
        fs::set_permissions(&host, fs::Permissions::from_mode(mode))
            .map_err(|e| io_err(&format!("chmod {path}"), e))?;
        self.chown(&host)
    }

    /// Copy a host directory's contents into a sandbox directory (modes kept).
    pub fn put_dir(&self, host: &Path, path: &str) -> Result<()> {
        if let Inner::Container(c) = &self.inner {
            return c.put_dir(host, &self.container_path(path)?);
        }
        if let Inner::Plugin(p) = &self.inner {
            return put_tree(p, host, &self.plugin_path(path)?);
        }
        let dst = self.host_path(path)?;
        self.mkdirs(&dst)?;
        copy_tree(host, &dst, &|p| self.chown(p))
    }

    /// Read a file.
    pub fn get(&self, path: &str) -> Result<Vec<u8>> {
        if let Inner::Container(c) = &self.inner {
            return c.get(&self.container_path(path)?);
        }
        if let Inner::Plugin(p) = &self.inner {
            return p.get(&self.plugin_path(path)?);
        }
        let host = self.host_path(path)?;
        crate::limits::read_file(&host, &crate::limits::SANDBOX_FILE)
            .map_err(|e| e.into_error(format!("sandbox: could not read sandbox file {path}")))
    }

    /// List a directory, sorted by name.
    pub fn list(&self, path: &str) -> Result<Vec<Entry>> {
        if let Inner::Container(c) = &self.inner {
            return c.list(&self.container_path(path)?);
        }
        if let Inner::Plugin(p) = &self.inner {
            return p.list(&self.plugin_path(path)?);
        }
        let host = self.host_path(path)?;
        let mut out = Vec::new();
        for e in fs::read_dir(&host).map_err(|e| io_err(&format!("list {path}"), e))? {
            let e = e.map_err(|e| io_err(&format!("list {path}"), e))?;
            let md = fs::symlink_metadata(e.path()).map_err(|e| io_err("stat", e))?;
            out.push(Entry {
                name: e.file_name().to_string_lossy().into_owned(),
                dir: md.is_dir(),
                size: md.len(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Remove a file or directory tree.
    pub fn remove(&self, path: &str) -> Result<()> {
        if let Inner::Container(c) = &self.inner {
            return c.remove(&self.container_path(path)?);
        }
        if let Inner::Plugin(p) = &self.inner {
            return p.remove(&self.plugin_path(path)?);
        }
        let host = self.host_path(path)?;
        match fs::symlink_metadata(&host) {
            Ok(md) if md.is_dir() => fs::remove_dir_all(&host),
            Ok(_) => fs::remove_file(&host),
            Err(_) => Ok(()),
        }
        .map_err(|e| io_err(&format!("remove {path}"), e))
    }

    /// A new sandbox with the same configuration and a copy of this one's files (nothing
    /// running is copied). A container is committed to an image the fork starts from.
    pub fn fork(&self) -> Result<Sandbox> {
        if let Inner::Container(c) = &self.inner {
            let id = next_id();
            let child = c.fork(&self.config, &self.id, &id)?;
            return Ok(Sandbox {
                config: self.config.clone(),
                id,
                inner: Inner::Container(child),
            });
        }
        if let Inner::Plugin(p) = &self.inner {
            let id = next_id();
            let child = p.fork(&id)?;
            return Ok(Sandbox {
                config: self.config.clone(),
                id,
                inner: Inner::Plugin(child),
            });
        }
        let child = Sandbox::create(self.config.clone())?;
        let (from, to) = (dir_of(&self.inner), dir_of(&child.inner));
        for d in self.private_dirs() {
            copy_tree(&from.join(d), &to.join(d), &|p| child.chown(p))?;
        }
        Ok(child)
    }

    /// An address on the host for a service listening on `port` inside the sandbox: the process
    /// backend shares the host network; a jail has none, so it has no URL; a container with
    /// network has its own address on the engine's network.
    pub fn url(&self, port: u16) -> Result<String> {
        match (&self.inner, self.config.backend) {
            (Inner::Container(c), _) => c.url(&self.config, &self.id, port),
            (Inner::Plugin(p), _) => p.url(&self.id, port),
            (_, BackendKind::Process) => Ok(format!("http://127.0.0.1:{port}")),
            _ => Err(Error::UnsupportedCapability {
                env: format!("sandbox {}", self.id),
                what: "expose a port: a jail has its own network namespace".into(),
            }),
        }
    }

    /// Kill anything left and remove the sandbox's files (a container: killed now, removed by
    /// the engine and a background reaper before the process exits).
    pub fn destroy(mut self) -> Result<()> {
        let path = match &mut self.inner {
            Inner::Container(c) => {
                c.destroy();
                return Ok(());
            }
            // The plugin's destroy runs when the handle drops, below.
            Inner::Plugin(_) => {
                drop(self);
                return Ok(());
            }
            Inner::Host { dir, .. } => dir.path().to_path_buf(),
        };
        drop(self);
        if path.exists() {
            return Err(Error::Sandbox(format!(
                "{} could not be removed; remove it by hand",
                path.display()
            )));
        }
        Ok(())
    }

    /// Names of the private top-level directories (fixed ones, then extra ones).
    pub fn private_dirs(&self) -> impl Iterator<Item = &str> {
        PRIVATE_DIRS
            .iter()
            .copied()
            .chain(self.config.extra_dirs.iter().map(String::as_str))
    }

    /// The uid/gid commands run as on the host (None: the caller's own). A jail with
    /// `root: true` runs as root of a user namespace that is this user on the host.
    fn run_as(&self) -> Option<(u32, u32)> {
        nix::unistd::geteuid()
            .is_root()
            .then_some((SANDBOX_UID, SANDBOX_UID))
    }

    fn chown(&self, p: &Path) -> Result<()> {
        if let Some((u, g)) = self.run_as() {
            std::os::unix::fs::lchown(p, Some(u), Some(g))
                .map_err(|e| io_err(&format!("chown {}", p.display()), e))?;
        }
        Ok(())
    }

    /// A sandbox path as the absolute path a plugin gets: checked as for the host backends.
    fn plugin_path(&self, path: &str) -> Result<String> {
        Ok(format!("/{}", self.sandbox_parts(path)?.join("/")))
    }

    /// A sandbox path as an absolute container path (relative ones from the workdir).
    fn container_path(&self, path: &str) -> Result<String> {
        container::absolute(path, &self.config.workdir)
    }

    fn mkdirs(&self, p: &Path) -> Result<()> {
        let mut missing = Vec::new();
        let mut cur = p.to_path_buf();
        while !cur.exists() {
            missing.push(cur.clone());
            if !cur.pop() {
                break;
            }
        }
        for d in missing.into_iter().rev() {
            fs::create_dir(&d).map_err(|e| io_err(&format!("create {}", d.display()), e))?;
            self.chown(&d)?;
        }
        Ok(())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // A container cleans up in its own Drop.
        if let Inner::Host { ran, .. } = &self.inner {
            if ran.load(Ordering::Relaxed) {
                process::kill_marked(&self.id);
            }
        }
        if let Some(take_back) = RECYCLE.get() {
            take_back(self);
        }
    }
}

/// The host directory of a process or jail sandbox (only called on those).
fn dir_of(inner: &Inner) -> &Path {
    match inner {
        Inner::Host { dir, .. } => dir.path(),
        // Callers reach this only for host backends; an empty path fails any file operation.
        Inner::Container(_) | Inner::Plugin(_) => Path::new(""),
    }
}

/// The unprivileged uid/gid sandboxed commands run as when nenyax runs as root (`nobody`).
pub const SANDBOX_UID: u32 = 65534;

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::io(format!("sandbox: could not {what}"), e)
}

/// Copy a host tree into a plugin's sandbox file by file (an empty directory is made by writing
/// and removing a marker: the vtable has no mkdir).
fn put_tree(p: &crate::plugins::sandbox::PluginSandbox, src: &Path, dst: &str) -> Result<()> {
    let mut any = false;
    for e in fs::read_dir(src).map_err(|e| io_err(&format!("read {}", src.display()), e))? {
        let e = e.map_err(|e| io_err("read a directory entry", e))?;
        let from = e.path();
        let to = format!(
            "{}/{}",
            dst.trim_end_matches('/'),
            e.file_name().to_string_lossy()
        );
        let md = fs::metadata(&from).map_err(|e| io_err("stat", e))?;
        any = true;
        if md.is_dir() {
            put_tree(p, &from, &to)?;
        } else if md.is_file() {
            let data = crate::limits::read_file(&from, &crate::limits::TASK_FILE)
                .map_err(|e| e.into_error(format!("sandbox: read {}", from.display())))?;
            p.put(&to, &data, md.permissions().mode() & 0o7777)?;
        } else {
            return Err(Error::Sandbox(format!(
                "{} is not a regular file or directory (a FIFO, socket or device); remove it \
                 from the directory being copied into the sandbox",
                from.display()
            )));
        }
    }
    if !any {
        let keep = format!("{}/.nenyax-keep", dst.trim_end_matches('/'));
        p.put(&keep, b"", 0o644)?;
        p.remove(&keep)?;
    }
    Ok(())
}

fn copy_tree(src: &Path, dst: &Path, fix: &dyn Fn(&Path) -> Result<()>) -> Result<()> {
    for e in fs::read_dir(src).map_err(|e| io_err(&format!("read {}", src.display()), e))? {
        let e = e.map_err(|e| io_err("read a directory entry", e))?;
        let from = e.path();
        let to = dst.join(e.file_name());
        let md = fs::symlink_metadata(&from).map_err(|e| io_err("stat", e))?;
        if md.file_type().is_symlink() {
            let target = fs::read_link(&from).map_err(|e| io_err("readlink", e))?;
            std::os::unix::fs::symlink(target, &to).map_err(|e| io_err("symlink", e))?;
        } else if md.is_dir() {
            if !to.exists() {
                fs::create_dir(&to).map_err(|e| io_err(&format!("create {}", to.display()), e))?;
            }
            // Uploads belong to the sandbox user and stay writable by it (as root's would).
            let mode = md.permissions().mode() | 0o700;
            fs::set_permissions(&to, fs::Permissions::from_mode(mode))
                .map_err(|e| io_err("chmod", e))?;
            copy_tree(&from, &to, fix)?;
        } else if !md.is_file() {
            // A FIFO would block the copy forever and a device would never end.
            return Err(Error::Sandbox(format!(
                "{} is not a regular file, directory or symlink (a FIFO, socket or device); \
                 remove it from the directory being copied into the sandbox",
                from.display()
            )));
        } else {
            fs::copy(&from, &to).map_err(|e| io_err(&format!("copy {}", from.display()), e))?;
            let mode = md.permissions().mode() | 0o600;
            fs::set_permissions(&to, fs::Permissions::from_mode(mode))
                .map_err(|e| io_err("chmod", e))?;
        }
        fix(&to)?;
    }
    Ok(())
}
