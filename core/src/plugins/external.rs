//! Drivers as executables in any language: a program that speaks the bridge's JSON-lines
//! protocol (docs/bridge.md) on stdin and stdout becomes a URI scheme. It is found as
//! `nenyax-driver-<scheme>` on `PATH` or as a `kind = "driver"` entry with a `command` in the
//! plugins config (which wins). Its workers run in the bridge's pool, so crash recovery,
//! timeouts, limits and `nenyax check` work as for the Python bridge's drivers; a crashing
//! driver only fails the rollouts it was serving, never the host.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bridge::{BridgeConfig, Worker};
use crate::driver::{Driver, Readiness};
use crate::drivers::python::{load_bridged, Bridged};
use crate::env::Environment;
use crate::error::{Error, Result};
use crate::plugins::kinds::Kind;
use crate::uri::{ParamKind, ParamSpec, Uri};

/// The file name prefix that makes an executable on `PATH` a driver: `nenyax-driver-<scheme>`.
pub const PREFIX: &str = "nenyax-driver-";

/// An executable driver, found on `PATH` or in the plugins config.
#[derive(Debug, Clone)]
pub struct ExternalDriver {
    scheme: &'static str,
    summary: &'static str,
    command: Vec<String>,
    path: PathBuf,
    /// The plugins config it was listed in; `None` when found on `PATH`.
    config: Option<PathBuf>,
    /// An in-process driver: the config entry's name (what its library's descriptor is
    /// called); `path` is then the library.
    library: Option<String>,
}

impl ExternalDriver {
    /// A driver for `scheme` that runs `command` (program, then arguments); `config` is the
    /// plugins config that lists it (`None`: found on `PATH`), `summary` its one line if given.
    pub fn new(
        scheme: &str,
        command: Vec<String>,
        config: Option<PathBuf>,
        summary: Option<String>,
    ) -> Result<ExternalDriver> {
        if !valid_scheme(scheme) {
            return Err(Error::Config(format!(
                "driver scheme `{scheme}` must be letters, digits, `_`, `-` or `.`"
            )));
        }
        let Some(program) = command.first().filter(|p| !p.is_empty()) else {
            return Err(Error::Config(format!(
                "driver `{scheme}` has an empty command; give the program first, e.g. \
                 command = [\"/opt/acme/nenyax-driver-{scheme}\"]"
            )));
        };
        let path = resolve(program, config.as_deref());
        let mut command = command;
        command[0] = path.display().to_string();
        let from = match &config {
            Some(c) => format!("plugins config {}", c.display()),
            None => "PATH".to_string(),
        };
        let summary = match summary.filter(|s| !s.trim().is_empty()) {
            Some(s) => format!(
                "{} (external driver {}, from {from})",
                s.trim(),
                path.display()
            ),
            None => format!("external driver {} (from {from})", path.display()),
        };
        Ok(ExternalDriver {
            scheme: intern(scheme),
            summary: intern(&summary),
            command,
            path,
            config,
            library: None,
        })
    }

    /// An in-process driver for `scheme`: the plugin `name` of the shared library `library`,
    /// listed in the plugins config `config`.
    pub fn in_process(
        scheme: &str,
        name: &str,
        library: PathBuf,
        config: PathBuf,
        summary: Option<String>,
    ) -> Result<ExternalDriver> {
        if !valid_scheme(scheme) {
            return Err(Error::Config(format!(
                "driver scheme `{scheme}` must be letters, digits, `_`, `-` or `.`"
            )));
        }
        let summary = match summary.filter(|s| !s.trim().is_empty()) {
            Some(s) => format!(
                "{} (in-process driver {}, from plugins config {})",
                s.trim(),
                library.display(),
                config.display()
            ),
            None => format!(
                "in-process driver {} (from plugins config {})",
                library.display(),
                config.display()
            ),
        };
        Ok(ExternalDriver {
            scheme: intern(scheme),
            summary: intern(&summary),
            command: Vec::new(),
            path: library,
            config: Some(config),
            library: Some(name.to_string()),
        })
    }

    /// True for an in-process driver from a shared library.
    pub fn is_library(&self) -> bool {
        self.library.is_some()
    }

    /// The executable it runs, or an in-process driver's library.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugins config that lists it; `None` when it was found on `PATH`.
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// Where it was found: "PATH", or the plugins config file's path.
    pub fn source(&self) -> String {
        match &self.config {
            Some(c) => c.display().to_string(),
            None => "PATH".into(),
        }
    }

    /// The program and arguments a worker runs.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The version its handshake reports (`"version"`), if it reports one; starts the program
    /// once (an executable answers its handshake in milliseconds).
    pub fn version(&self) -> Option<String> {
        if self.readiness() != Readiness::Ready {
            return None;
        }
        if let Some(name) = &self.library {
            return crate::plugins::library::find_driver(name)
                .ok()
                .map(|d| d.info().version.clone());
        }
        let config = BridgeConfig {
            command: Some(self.command.clone()),
            workers: 1,
            timeout: Duration::from_secs(10),
            ..BridgeConfig::default()
        };
        let w = Worker::spawn(&config).ok()?;
        match w.hello().get("version")? {
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }
}

impl Driver for ExternalDriver {
    fn scheme(&self) -> &'static str {
        self.scheme
    }

    fn format(&self) -> &'static str {
        self.scheme
    }

    fn summary(&self) -> &'static str {
        self.summary
    }

    fn params(&self, _target: &str) -> Vec<ParamSpec> {
        // Plus every key the driver itself accepts: the rest go to its `load` as `params`.
        vec![
            ParamSpec {
                name: "workers",
                kind: ParamKind::Int { min: 1, max: 256 },
                default: "cores",
                help: "driver processes (one environment instance each)",
            },
            ParamSpec {
                name: "timeout_s",
                kind: ParamKind::Float,
                default: "300",
                help: "longest wait for one reply before the driver process is replaced",
            },
        ]
    }

    fn readiness(&self) -> Readiness {
        if let Some(name) = &self.library {
            if !self.path.is_file() {
                return Readiness::Missing(format!(
                    "the driver library {} cannot be found; fix its `library` in {}",
                    self.path.display(),
                    self.source()
                ));
            }
            return match crate::plugins::library::find_driver(name) {
                Ok(_) => Readiness::Ready,
                Err(e) => Readiness::Missing(e.to_string()),
            };
        }
        let fix = match &self.config {
            Some(c) => format!("fix its `command` in {}", c.display()),
            None => "reinstall it or take it off PATH".into(),
        };
        match std::fs::metadata(&self.path) {
            Err(e) => Readiness::Missing(format!(
                "the driver executable {} cannot be found ({e}); {fix}",
                self.path.display()
            )),
            Ok(m) if !m.is_file() => Readiness::Missing(format!(
                "the driver executable {} is not a file; {fix}",
                self.path.display()
            )),
            Ok(m) if !is_executable(&m) => Readiness::Missing(format!(
                "the driver executable {} is not executable; run `chmod +x {}` or {fix}",
                self.path.display(),
                self.path.display()
            )),
            Ok(_) => Readiness::Ready,
        }
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        let library = match &self.library {
            Some(name) => Some(crate::plugins::library::find_driver(name)?),
            None => None,
        };
        load_bridged(
            &Bridged {
                scheme: self.scheme,
                command: library.is_none().then(|| self.command.clone()),
                library,
            },
            uri,
        )
    }
}

/// Every executable driver here: the plugins config's driver entries with a `command`, then
/// each `nenyax-driver-<scheme>` on `PATH` whose scheme the config does not already have (the
/// first on `PATH` wins, as a shell would pick it). A broken plugins config contributes nothing
/// here; [`discover_checked`] reports it.
pub fn discover() -> Vec<ExternalDriver> {
    let mut out = configured().unwrap_or_default();
    for d in on_path() {
        if !out.iter().any(|o| o.scheme == d.scheme) {
            out.push(d);
        }
    }
    out
}

/// [`discover`], but a plugins config that cannot be read or parsed is an error.
pub fn discover_checked() -> Result<Vec<ExternalDriver>> {
    let mut out = configured()?;
    for d in on_path() {
        if !out.iter().any(|o| o.scheme == d.scheme) {
            out.push(d);
        }
    }
    Ok(out)
}

/// Each `nenyax-driver-<scheme>` executable on `PATH`, the first one per scheme.
fn on_path() -> Vec<ExternalDriver> {
    let mut out: Vec<ExternalDriver> = Vec::new();
    let Some(path) = std::env::var_os("PATH") else {
        return out;
    };
    for dir in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let scheme = name.strip_prefix(PREFIX)?.to_string();
                let path = e.path();
                let meta = std::fs::metadata(&path).ok()?;
                (valid_scheme(&scheme) && meta.is_file() && is_executable(&meta))
                    .then_some((scheme, path))
            })
            .collect();
        // Directory order is arbitrary; a stable listing is sorted.
        found.sort();
        for (scheme, path) in found {
            if out.iter().any(|d| d.scheme == scheme) {
                continue;
            }
            let command = vec![path.display().to_string()];
            if let Ok(d) = ExternalDriver::new(&scheme, command, None, None) {
                out.push(d);
            }
        }
    }
    out
}

/// The plugins config's drivers: executables (`command`) and in-process ones (`library`).
fn configured() -> Result<Vec<ExternalDriver>> {
    crate::plugins::config::entries()?
        .into_iter()
        .filter(|e| e.kind == Kind::Driver && (!e.command.is_empty() || e.library.is_some()))
        .map(|e| {
            let scheme = e.scheme().to_string();
            let made = match e.library.clone() {
                Some(lib) => {
                    ExternalDriver::in_process(&scheme, &e.name, lib, e.source.clone(), e.summary)
                }
                None => ExternalDriver::new(&scheme, e.command, Some(e.source.clone()), e.summary),
            };
            made.map_err(|err| {
                Error::Config(format!("plugins config {}: {err}", e.source.display()))
            })
        })
        .collect()
}

/// The program a command names: a path with a separator as given (relative to the config
/// file's folder when it came from one), a bare name looked up on `PATH` like a shell would.
fn resolve(program: &str, config: Option<&Path>) -> PathBuf {
    let p = Path::new(program);
    if p.components().count() > 1 || p.is_absolute() {
        return match config.and_then(Path::parent) {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(p))
                .find(|c| std::fs::metadata(c).is_ok_and(|m| m.is_file() && is_executable(&m)))
        })
        .unwrap_or_else(|| p.to_path_buf())
}

fn valid_scheme(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

#[cfg(unix)]
fn is_executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_m: &std::fs::Metadata) -> bool {
    true
}

/// One `&'static str` per distinct text: the driver interface hands out static strings, and a
/// registry is built per load, so the same driver's scheme and summary must not leak anew each
/// time.
fn intern(s: &str) -> &'static str {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let set = seen.get_or_insert_with(HashSet::new);
    if let Some(&known) = set.get(s) {
        return known;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_non_executable_program_is_missing_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("nenyax-driver-gone");
        let d = ExternalDriver::new("gone", vec![gone.display().to_string()], None, None).unwrap();
        match d.readiness() {
            Readiness::Missing(m) => assert!(m.contains("cannot be found"), "{m}"),
            Readiness::Ready => panic!("ready without a program"),
        }
        std::fs::write(&gone, "#!/bin/sh\n").unwrap();
        match d.readiness() {
            Readiness::Missing(m) => assert!(m.contains("chmod +x"), "{m}"),
            Readiness::Ready => panic!("ready though not executable"),
        }
        assert_eq!(d.source(), "PATH");
        assert!(d.summary().contains("from PATH"), "{}", d.summary());
    }

    #[test]
    fn bad_schemes_and_empty_commands_are_refused() {
        assert!(ExternalDriver::new("a b", vec!["x".into()], None, None).is_err());
        let e = ExternalDriver::new("acme", vec![], None, None).unwrap_err();
        assert!(e.to_string().contains("empty command"), "{e}");
    }

    #[test]
    fn interned_strings_are_shared() {
        assert!(std::ptr::eq(intern("same-text"), intern("same-text")));
    }
}
