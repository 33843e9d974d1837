//! The container engine: Podman or Docker, driven through their (shared) command-line surface.
//!
//! Both engines take the same `run`, `exec`, `build`, `commit`, `rm` and `image` commands, so one
//! implementation serves both; what differs (Docker needs a daemon, Podman needs none) shows up
//! only in whether `info` answers. `NENYAX_CONTAINER_ENGINE` chooses (`podman`, `docker`, or a
//! path to either binary); otherwise the first of Podman and Docker that answers is used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};

/// The environment variable that chooses the engine.
pub const ENGINE_ENV: &str = "NENYAX_CONTAINER_ENGINE";

/// The label every container and image nenyax makes carries, so a crashed run's leftovers can
/// be found and swept.
pub const LABEL: &str = "io.nenyax.owner";

/// Which engine a binary is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// Podman (daemonless; runs as root here with runc and cgroupfs).
    Podman,
    /// Docker (needs a running daemon).
    Docker,
}

impl EngineKind {
    /// The engine's name, as `NENYAX_CONTAINER_ENGINE` takes it.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Podman => "podman",
            EngineKind::Docker => "docker",
        }
    }
}

/// A container engine that answered `info`: the one binary every container command goes to.
#[derive(Debug, Clone)]
pub struct Engine {
    kind: EngineKind,
    program: PathBuf,
}

/// Why each engine could not be used, keyed by the value of `NENYAX_CONTAINER_ENGINE` (probing
/// runs `info`, which costs tens of milliseconds, so it is done once per choice).
fn probes() -> &'static Mutex<HashMap<String, std::result::Result<Engine, String>>> {
    static P: OnceLock<Mutex<HashMap<String, std::result::Result<Engine, String>>>> =
        OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Engine {
    /// The engine to use: `NENYAX_CONTAINER_ENGINE` when set, else Podman, else Docker. The
    /// error says what is missing and how to set it up (`nenyax setup container`).
    pub fn detect() -> Result<Engine> {
        let choice = std::env::var(ENGINE_ENV).unwrap_or_default();
        let mut cache = probes().lock().unwrap_or_else(|e| e.into_inner());
        let r = cache
            .entry(choice.clone())
            .or_insert_with(|| probe_choice(&choice))
            .clone();
        r.map_err(Error::Sandbox)
    }

    /// Forget cached probes (after `nenyax setup container` installed an engine).
    pub fn forget() {
        probes().lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Which engine this is.
    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    /// The binary commands go to.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// A command for this engine with stdin closed and output captured.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        // conmon drops an empty `oom` file into its working directory when a container meets its
        // memory limit: keep it out of the caller's.
        c.current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Run `args` and return stdout; a failure is a sandbox error naming `what` and quoting the
    /// engine's stderr.
    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S], what: &str) -> Result<String> {
        let out =
            self.command().args(args).output().map_err(|e| {
                Error::io(format!("container: could not run {}", self.kind.name()), e)
            })?;
        if !out.status.success() {
            return Err(Error::Sandbox(format!(
                "container: could not {what}: `{} {}` failed ({}): {}",
                self.kind.name(),
                args.first()
                    .map(|a| a.as_ref().to_string_lossy().into_owned())
                    .unwrap_or_default(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether an image with this name or id is present locally.
    pub fn image_exists(&self, image: &str) -> bool {
        self.command()
            .args(["image", "inspect", "--format", "{{.Id}}", image])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

fn probe_choice(choice: &str) -> std::result::Result<Engine, String> {
    let candidates: Vec<(EngineKind, PathBuf)> = match choice {
        "" => vec![
            (EngineKind::Podman, PathBuf::from("podman")),
            (EngineKind::Docker, PathBuf::from("docker")),
        ],
        "podman" => vec![(EngineKind::Podman, PathBuf::from("podman"))],
        "docker" => vec![(EngineKind::Docker, PathBuf::from("docker"))],
        path => {
            let p = PathBuf::from(path);
            let base = p.file_name().map(|s| s.to_string_lossy().into_owned());
            match base.as_deref() {
                Some(b) if b.starts_with("podman") => vec![(EngineKind::Podman, p)],
                Some(b) if b.starts_with("docker") => vec![(EngineKind::Docker, p)],
                _ => {
                    return Err(format!(
                        "{ENGINE_ENV}=`{path}` is neither podman nor docker: set it to `podman`, \
                         `docker`, or the path of one of those binaries"
                    ))
                }
            }
        }
    };
    let mut why = Vec::new();
    for (kind, program) in candidates {
        match probe(kind, &program) {
            Ok(()) => return Ok(Engine { kind, program }),
            Err(w) => why.push(format!("{}: {w}", kind.name())),
        }
    }
    Err(format!(
        "no container engine is ready ({}); run `nenyax setup container` to install and \
         configure Podman, or start a Docker daemon",
        why.join("; ")
    ))
}

fn probe(kind: EngineKind, program: &Path) -> std::result::Result<(), String> {
    let out = Command::new(program)
        .args(["info", "--format", "{{json .}}"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("`{}` is not installed", program.display()),
            _ => format!("could not run `{}`: {e}", program.display()),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    Err(match kind {
        EngineKind::Docker => format!("the client is installed but no daemon answers: {first}"),
        EngineKind::Podman => format!("`podman info` failed: {first}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_that_is_neither_engine_is_refused_by_name() {
        let e = probe_choice("/usr/bin/true").unwrap_err();
        assert!(e.contains("neither podman nor docker"), "{e}");
        let e = probe_choice("/nonexistent/podman").unwrap_err();
        assert!(e.contains("is not installed"), "{e}");
        assert!(e.contains("nenyax setup container"), "{e}");
    }
}
