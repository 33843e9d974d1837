//! The container backend: one long-lived, labelled container per sandbox, run by Podman or
//! Docker (see engine.rs), with commands run in it by `exec`.
//!
//! The container starts detached with `--rm` and an init (`--init`) as PID 1 whose child sleeps
//! forever; its limits are the engine's (`--memory`, `--pids-limit`, `--network=none`,
//! `--read-only`) and, per command, rlimits set by the small shell wrapper every command runs
//! through (CPU seconds, open files, file size: the engine's `--ulimit` also forces a process
//! limit above what these hosts allow). Every command carries a marker variable unique to it
//! (`NENYAX_EXEC`), so the host can kill exactly what it started when the wall timeout hits or
//! the command ends (a kill of the `exec` client would not reach into the container); the
//! container itself carries `NENYAX_CONTAINER`, so destroying it is a signal to its processes
//! from the host, not an engine round trip, and `--rm` lets the engine remove it once it stops.
//! Where the engine's processes are not visible from here (a remote daemon) both fall back to
//! the engine.
//!
//! Leftovers of a crashed run carry `io.nenyax.owner=<pid>` and are swept ([`sweep`]) at the
//! first container a process creates.

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::capture::capture;
use super::engine::{Engine, EngineKind, LABEL};
use super::marker::kill_env;
use super::spec::{Entry, Exec, ExecResult, Killed, SandboxConfig, PRIVATE_DIRS};
use crate::error::{Error, Result};

/// The environment variable that overrides the default image.
pub const IMAGE_ENV: &str = "NENYAX_CONTAINER_IMAGE";

/// The image a container starts from when the configuration names none and
/// `NENYAX_CONTAINER_IMAGE` is unset (`nenyax images bootstrap` makes it).
pub const DEFAULT_IMAGE: &str = "localhost/nenyax-base:bookworm";

/// The uid and gid commands run as unless the configuration asks for root (`nobody`).
const NOBODY: &str = "65534:65534";

/// A file the container's init writes once the private directories exist: commands wait for
/// it, since `run -d` returns before the init script has run.
const READY: &str = "/run/.nenyax-ready";

/// Waits (up to 10 s) for [`READY`]; every in-container script starts with it.
const WAIT: &str = "[ -e /run/.nenyax-ready ] || { i=0; while [ ! -e /run/.nenyax-ready ] && [ $i -lt 5000 ]; do sleep 0.002; i=$((i+1)); done; }\n";

/// What the wrapper prints and exits with when the working directory is missing.
const NO_CWD: &str = "nenyax-no-such-cwd";
const NO_CWD_CODE: i32 = 212;

/// The image a sandbox with this configuration starts from.
pub fn image_for(config: &SandboxConfig) -> String {
    config.image.clone().unwrap_or_else(default_image)
}

/// The default image: `NENYAX_CONTAINER_IMAGE`, else [`DEFAULT_IMAGE`].
pub fn default_image() -> String {
    std::env::var(IMAGE_ENV)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

/// Whether the container backend can run here: an engine answers and the default image is
/// present (a present image is remembered; a missing one is asked again, since it may be made
/// meanwhile).
pub(super) fn ready() -> std::result::Result<(), String> {
    let engine = Engine::detect().map_err(|e| match e {
        // The caller adds its own `sandbox:` context.
        Error::Sandbox(why) => why,
        other => other.to_string(),
    })?;
    static SEEN: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(Vec::new()));
    let image = default_image();
    if seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&image)
    {
        return Ok(());
    }
    if !engine.image_exists(&image) {
        return Err(missing_image(&engine, &image));
    }
    seen.lock().unwrap_or_else(|e| e.into_inner()).push(image);
    Ok(())
}

fn missing_image(engine: &Engine, image: &str) -> String {
    format!(
        "the image `{image}` is not present in {} (nothing is pulled: machines like this one \
         reach no registry); make the default base image with `nenyax images bootstrap`, map \
         the name to a local image in the `[images]` section of the config, or choose another \
         local image with `image` (or {IMAGE_ENV})",
        engine.kind().name()
    )
}

/// A committed snapshot of a container that forks run from; removed when the last container
/// or parent holding it is gone.
#[derive(Debug)]
pub(super) struct ForkImage {
    engine: Engine,
    name: String,
}

impl Drop for ForkImage {
    fn drop(&mut self) {
        // Runs on the reaper thread after the containers using it were removed (they hold it).
        let _ = self
            .engine
            .command()
            .args(["image", "rm", &self.name])
            .output();
    }
}

/// A live container sandbox.
#[derive(Debug)]
pub(super) struct Container {
    engine: Engine,
    name: String,
    /// The uid:gid commands run as.
    user: &'static str,
    /// The private directories, as absolute paths.
    dirs: Vec<String>,
    read_only: bool,
    /// The fork image it runs from, when it is a fork.
    base: Option<Arc<ForkImage>>,
    /// The last snapshot taken for a fork, with the generation it was taken at: forks of an
    /// unchanged container (a warm pool's template) reuse it instead of committing again.
    snapshot: Mutex<Option<(u64, Arc<ForkImage>)>>,
    /// Bumped by everything that may change the container's files.
    generation: AtomicU64,
    next_exec: AtomicU64,
    /// Set once it was destroyed (or handed to the reaper).
    done: AtomicBool,
    /// The host pid of the container's init, when visible from here.
    init: OnceLock<Option<i32>>,
}

static NEXT_IMAGE: AtomicU64 = AtomicU64::new(0);

impl Container {
    /// Start the container for a sandbox with id `id`.
    pub(super) fn create(
        config: &SandboxConfig,
        id: &str,
        base: Option<Arc<ForkImage>>,
    ) -> Result<Container> {
        let engine = Engine::detect()?;
        start_reaper(&engine);
        let image = match &base {
            Some(b) => b.name.clone(),
            None => image_for(config),
        };
        if image.trim().is_empty() || image.starts_with('-') {
            return Err(Error::Sandbox(format!(
                "container image `{image}` is not an image name: give a name such as \
                 `localhost/nenyax-base:bookworm`"
            )));
        }
        let workdir = absolute(&config.workdir, "/")?;
        let name = format!("nenyax-{id}");
        let user = if config.root { "0:0" } else { NOBODY };
        let dirs: Vec<String> = PRIVATE_DIRS
            .iter()
            .map(|d| d.to_string())
            .chain(config.extra_dirs.iter().cloned())
            .map(|d| format!("/{d}"))
            .collect();
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--rm".into(),
            "--pull=never".into(),
            "--init".into(),
            "--name".into(),
            name.clone(),
            "--label".into(),
            format!("{LABEL}={}", std::process::id()),
            "--hostname".into(),
            "nenyax".into(),
            "--user".into(),
            "0:0".into(),
            "-e".into(),
            format!("NENYAX_CONTAINER={name}"),
        ];
        if !config.network {
            args.push("--network=none".into());
        }
        let l = &config.limits;
        if let Some(m) = l.memory_bytes {
            // Swap counted in: a limit that spills to swap bounds nothing.
            args.extend([
                "--memory".into(),
                m.to_string(),
                "--memory-swap".into(),
                m.to_string(),
            ]);
        }
        if let Some(p) = l.processes {
            args.extend(["--pids-limit".into(), p.max(1).to_string()]);
        }
        if let Some(n) = config.cpus {
            args.extend(["--cpus".into(), format!("{n}")]);
        }
        let owner = if config.root { "0:0" } else { NOBODY };
        let mut made: Vec<String> = dirs.clone();
        if !made.contains(&workdir) && workdir != "/" {
            made.push(workdir.clone());
        }
        let list = made
            .iter()
            .map(|d| shell_quote(d))
            .collect::<Vec<_>>()
            .join(" ");
        let owned = made
            .iter()
            .filter(|d| d.as_str() != "/tmp")
            .map(|d| shell_quote(d))
            .collect::<Vec<_>>()
            .join(" ");
        let mut init = String::new();
        if config.read_only_root {
            // The root is read-only: the private directories are tmpfs mounts (a fork copies
            // them, since a commit leaves mounts out) that init gives to the sandbox user, and
            // /run holds the ready file.
            args.push("--read-only".into());
            args.extend(["--tmpfs".into(), "/run:rw,mode=755".into()]);
            for d in &made {
                let mode = if d == "/tmp" { "1777" } else { "755" };
                args.extend(["--tmpfs".into(), format!("{d}:rw,exec,mode={mode}")]);
            }
        } else {
            init += &format!("mkdir -p /run {list} && ");
        }
        init += &format!(
            "chown {owner} {owned} && chmod 1777 /tmp && : > {READY} && exec sleep 2147483647"
        );
        args.extend([image.clone(), "/bin/sh".into(), "-c".into(), init]);
        let out = engine.command().args(&args).output().map_err(|e| {
            Error::io(
                format!("container: could not run {}", engine.kind().name()),
                e,
            )
        })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if base.is_none() && !engine.image_exists(&image) {
                return Err(Error::Sandbox(missing_image(&engine, &image)));
            }
            return Err(Error::Sandbox(format!(
                "container: could not start a container of `{image}` with {}: {err}",
                engine.kind().name()
            )));
        }
        Ok(Container {
            engine,
            name,
            user,
            dirs,
            read_only: config.read_only_root,
            base,
            snapshot: Mutex::new(None),
            generation: AtomicU64::new(0),
            next_exec: AtomicU64::new(0),
            done: AtomicBool::new(false),
            init: OnceLock::new(),
        })
    }

    /// The container's name in the engine.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// A command for the engine: `exec` into this container as `user`, running `script` with
    /// `/bin/sh -c` after the readiness wait, with `args` as `$1...`.
    /// The second value holds the descriptors a direct command enters by: keep it until the
    /// command was spawned.
    fn sh(
        &self,
        user: &str,
        stdin: bool,
        script: &str,
        args: &[&str],
    ) -> (Command, Option<Direct>) {
        // nenyax's own file helpers run as the container's root with only the capabilities
        // that file work needs, entered directly when that is possible.
        if user == "0:0" && direct_allowed() {
            if let Some(d) = self.direct() {
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg(format!("{WAIT}{script}"))
                    .arg("nenyax")
                    .args(args)
                    .env_clear()
                    .envs(d.env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let plan = d.plan(Some(FILE_CAPS & d.bounding));
                // SAFETY: enter() only makes system calls on descriptors opened beforehand.
                unsafe {
                    c.pre_exec(move || enter(&plan));
                }
                return (c, Some(d));
            }
        }
        let mut c = self.engine.command();
        c.arg("exec");
        if stdin {
            c.arg("-i");
        }
        c.args(["--user", user, &self.name, "/bin/sh", "-c"])
            .arg(format!("{WAIT}{script}"))
            .arg("nenyax")
            .args(args);
        (c, None)
    }

    /// Run a helper script as root and return its stdout; a failure quotes its stderr.
    fn helper(
        &self,
        what: &str,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Vec<u8>> {
        let (mut c, _entered) = self.sh("0:0", stdin.is_some(), script, args);
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().map_err(|e| {
            Error::io(
                format!("container: could not run {}", self.engine.kind().name()),
                e,
            )
        })?;
        let feeder = match (stdin, child.stdin.take()) {
            (Some(data), Some(mut pipe)) => {
                let data = data.to_vec();
                Some(std::thread::spawn(move || {
                    let _ = pipe.write_all(&data);
                }))
            }
            _ => None,
        };
        let out = child
            .wait_with_output()
            .map_err(|e| Error::io(format!("container: wait for {what}"), e))?;
        if let Some(f) = feeder {
            let _ = f.join();
        }
        if !out.status.success() {
            return Err(self.failed(what, &out.stderr));
        }
        Ok(out.stdout)
    }

    /// The error for a failed helper: the engine's or the script's stderr, or that the
    /// container is gone.
    fn failed(&self, what: &str, stderr: &[u8]) -> Error {
        let err = String::from_utf8_lossy(stderr).trim().to_string();
        if !self.running() {
            return self.gone();
        }
        Error::Sandbox(format!("container sandbox: could not {what}: {err}"))
    }

    fn gone(&self) -> Error {
        Error::Sandbox(format!(
            "container sandbox: the container `{}` is no longer running (it was killed or \
             removed from outside, or ran out of memory as a whole); create a new sandbox",
            self.name
        ))
    }

    /// Whether the container still runs (one engine call; used on failures only).
    fn running(&self) -> bool {
        self.engine
            .command()
            .args(["inspect", "--format", "{{.State.Running}}", &self.name])
            .output()
            .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "true")
            .unwrap_or(false)
    }

    fn touched(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Run one command.
    pub(super) fn exec(&self, config: &SandboxConfig, id: &str, exec: &Exec) -> Result<ExecResult> {
        let tail: Vec<String> = match (&exec.shell, exec.argv.is_empty()) {
            (Some(line), true) => vec!["--nenyax-shell".into(), line.clone()],
            (None, false) => exec.argv.clone(),
            _ => {
                return Err(Error::Sandbox(
                    "an exec needs exactly one of argv (non-empty) or shell".into(),
                ))
            }
        };
        let cwd = absolute(
            exec.cwd.as_deref().unwrap_or(&config.workdir),
            &config.workdir,
        )?;
        self.touched();
        let marker = format!("{id}.{}", self.next_exec.fetch_add(1, Ordering::Relaxed));
        let l = &config.limits;
        let mut script = String::from(
            "cd -- \"$1\" 2>/dev/null || { echo nenyax-no-such-cwd >&2; exit 212; }\nshift\n",
        );
        if let Some(c) = l.cpu_s {
            // Soft limit first (SIGXCPU), the hard one a second later (SIGKILL).
            script += &format!("ulimit -S -t {c} && ulimit -H -t {} || exit 125\n", c + 1);
        }
        if let Some(n) = l.open_files {
            // Raising above the container's own hard limit fails and keeps the lower one.
            script += &format!("ulimit -n {n} 2>/dev/null\n");
        }
        if let Some(f) = l.file_size_bytes {
            // sh counts file size in 512-byte blocks.
            script += &format!("ulimit -f {} || exit 125\n", (f / 512).max(1));
        }
        script += "if [ \"$1\" = --nenyax-shell ]; then if command -v bash >/dev/null 2>&1; then exec bash -c \"$2\"; fi; exec sh -c \"$2\"; fi\nexec \"$@\"\n";
        let home = if config.root { "/root" } else { "/tmp" };
        let mut env: Vec<(String, String)> = vec![
            ("HOME".into(), home.into()),
            ("TMPDIR".into(), "/tmp".into()),
            ("NENYAX_SANDBOX".into(), id.into()),
        ];
        for (k, v) in config.env.iter().chain(exec.env.iter()) {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(Error::Sandbox(format!(
                    "environment variable `{}` cannot be passed to a command: a name must be \
                     non-empty without `=`, and neither name nor value may hold a NUL byte",
                    k.replace('\0', "\\0")
                )));
            }
            env.push((k.clone(), v.clone()));
        }
        // Last, so that no configured variable can take the marker away.
        env.push(("NENYAX_EXEC".into(), marker.clone()));
        let script = format!("{WAIT}{script}");
        // The sandbox user's commands enter the container's namespaces and cgroups straight
        // from here (milliseconds) when its init is visible; root's go through the engine,
        // which also applies its capability set and seccomp filter.
        let direct = if config.root || !direct_allowed() {
            None
        } else {
            self.direct()
        };
        let t0 = Instant::now();
        let mut child = match &direct {
            Some(d) => {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", &script, "nenyax", &cwd])
                    .args(&tail)
                    .env_clear()
                    .envs(d.env.iter().map(|(k, v)| (k, v)))
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(if exec.stdin.is_some() {
                        Stdio::piped()
                    } else {
                        Stdio::null()
                    })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let plan = d.plan(None);
                // SAFETY: enter() only makes system calls on descriptors opened beforehand.
                unsafe {
                    c.pre_exec(move || enter(&plan));
                }
                match c.spawn() {
                    Ok(child) => child,
                    Err(e) => {
                        if !self.running() {
                            return Err(self.gone());
                        }
                        return Err(Error::io(
                            format!("container: could not enter container `{}`", self.name),
                            e,
                        ));
                    }
                }
            }
            None => {
                let mut c = self.engine.command();
                c.arg("exec");
                if exec.stdin.is_some() {
                    c.arg("-i");
                    c.stdin(Stdio::piped());
                }
                c.args(["--user", self.user]);
                for (k, v) in &env {
                    c.arg("-e").arg(format!("{k}={v}"));
                }
                c.args([&self.name, "/bin/sh", "-c"])
                    .arg(&script)
                    .arg("nenyax")
                    .arg(&cwd)
                    .args(&tail);
                c.spawn().map_err(|e| {
                    Error::io(
                        format!("container: could not run {}", self.engine.kind().name()),
                        e,
                    )
                })?
            }
        };
        let rx = capture(&mut child, l.output_bytes);
        if let Some(mut stdin) = child.stdin.take() {
            let data = exec.stdin.clone().unwrap_or_default();
            std::thread::spawn(move || {
                let _ = stdin.write_all(&data);
            });
        }
        let timeout = exec.timeout.unwrap_or(l.wall);
        let needle = format!("NENYAX_EXEC={marker}\0");
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => return Err(Error::io("container: wait for a command", e)),
            }
            if !timed_out && t0.elapsed() >= timeout {
                timed_out = true;
                if kill_env(&needle) == 0 {
                    self.kill_inside(&marker);
                }
            }
            if timed_out && t0.elapsed() >= timeout + Duration::from_secs(10) {
                // The engine's client did not come back after its command was killed.
                let _ = child.kill();
                break child
                    .wait()
                    .map_err(|e| Error::io("container: wait for a killed command", e))?;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // What the command left behind (a detached child carries the marker too) goes now,
        // unless the sandbox keeps it for later commands (it still goes at destroy).
        if timed_out || !config.keep_detached {
            kill_env(&needle);
        }
        let (out, dropped) = super::capture::collect(&rx, Duration::from_secs(2));
        let [o, e] = out;
        let stderr = String::from_utf8_lossy(&e).into_owned();
        let code = status.code();
        if code == Some(NO_CWD_CODE) && stderr.contains(NO_CWD) {
            return Err(Error::Sandbox(format!(
                "working directory `{cwd}` does not exist in the sandbox; create it first (put \
                 or mkdir)"
            )));
        }
        // The engine's own failures (it could not exec at all, or the container went away) are
        // errors, not results. Podman says `Error: ...` (exit 125-127 or 255), Docker `Error
        // response from daemon: ...` (exit 1 or 126-127); a command may print the same, so a
        // container that still runs makes it a result unless the code is the engine's own 125.
        let engine_said =
            stderr.starts_with("Error:") || stderr.starts_with("Error response from daemon:");
        let suspect = direct.is_none()
            && match code {
                Some(125) | None => true,
                Some(1) | Some(126) | Some(127) | Some(255) => engine_said,
                _ => false,
            };
        if suspect && !timed_out {
            if !self.running() {
                return Err(self.gone());
            }
            if code == Some(125) || code.is_none() {
                return Err(Error::Sandbox(format!(
                    "container sandbox: could not run a command in `{}`: {}",
                    self.name,
                    stderr.trim()
                )));
            }
        }
        let (exit_code, signal) = match (code, &direct) {
            // Entered directly, the status is the command's own.
            (_, Some(_)) => (code, std::os::unix::process::ExitStatusExt::signal(&status)),
            // The engine reports a command that died of signal N as 128 + N, as a shell does.
            (Some(c), None) if (129..=128 + 64).contains(&c) => (None, Some(c - 128)),
            (Some(c), None) => (Some(c), None),
            (None, None) => (None, Some(libc::SIGKILL)),
        };
        if signal == Some(libc::SIGKILL) && !timed_out && !self.running() {
            return Err(self.gone());
        }
        let killed = if timed_out {
            Some(Killed::Timeout)
        } else {
            match signal {
                Some(s) if s == libc::SIGXCPU => Some(Killed::CpuLimit),
                Some(s) if s == libc::SIGXFSZ => Some(Killed::FileSizeLimit),
                Some(_) => Some(Killed::Signal),
                None => None,
            }
        };
        Ok(ExecResult {
            exit_code,
            signal,
            stdout: String::from_utf8_lossy(&o).into_owned(),
            stderr,
            dropped_bytes: dropped,
            duration_s: t0.elapsed().as_secs_f64(),
            killed,
        })
    }

    /// What entering the container directly needs, when its init is visible here and every
    /// namespace and cgroup of it can be opened; `None` sends the command through the engine.
    fn direct(&self) -> Option<Direct> {
        let pid = *self.init.get_or_init(|| find_init(&self.name));
        let pid = pid?;
        let mut ns = Vec::new();
        for name in ["ipc", "uts", "net", "cgroup", "pid", "mnt"] {
            let theirs = std::fs::metadata(format!("/proc/{pid}/ns/{name}")).ok()?;
            let ours = std::fs::metadata(format!("/proc/self/ns/{name}")).ok()?;
            if std::os::unix::fs::MetadataExt::ino(&theirs)
                == std::os::unix::fs::MetadataExt::ino(&ours)
            {
                continue;
            }
            ns.push(std::fs::File::open(format!("/proc/{pid}/ns/{name}")).ok()?);
        }
        let mut cgroups = Vec::new();
        let list = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        for line in list.lines() {
            let mut f = line.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            let dir = match ctrl {
                "" if std::path::Path::new("/sys/fs/cgroup/unified").is_dir() => {
                    "unified".to_string()
                }
                "" => String::new(),
                c => c.trim_start_matches("name=").to_string(),
            };
            let procs = std::path::Path::new("/sys/fs/cgroup")
                .join(dir)
                .join(path.trim_start_matches('/'))
                .join("cgroup.procs");
            // A limit the command would not be under is no shortcut: use the engine.
            cgroups.push(std::fs::OpenOptions::new().write(true).open(procs).ok()?);
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let needle = format!("NENYAX_CONTAINER={}", self.name);
        // The pid may have been reused since it was found: then it is not ours.
        if !environ.split(|b| *b == 0).any(|e| e == needle.as_bytes()) {
            return None;
        }
        let env = environ
            .split(|b| *b == 0)
            .filter_map(|e| {
                let e = String::from_utf8_lossy(e);
                let (k, v) = e.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let bounding = status
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
        Some(Direct {
            ns,
            cgroups,
            env,
            bounding,
        })
    }

    /// Kill a command's processes from inside the container, for engines whose processes the
    /// host cannot see.
    fn kill_inside(&self, marker: &str) {
        let script = "for p in /proc/[0-9]*; do if tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -qx \"NENYAX_EXEC=$1\"; then kill -9 ${p#/proc/} 2>/dev/null; fi; done";
        let (mut c, _entered) = self.sh("0:0", false, script, &[marker]);
        let _ = c.output();
    }

    /// Write a file (parents made), owned by the sandbox user.
    pub(super) fn put(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.touched();
        let script = format!(
            "f=$1; d=${{f%/*}}; top=$d; first=\n\
             while [ -n \"$top\" ] && [ ! -d \"$top\" ]; do first=$top; top=${{top%/*}}; done\n\
             {{ [ -z \"$d\" ] || mkdir -p -- \"$d\"; }} && cat > \"$f\" && chmod {mode:o} \"$f\" && \
             chown {u} \"$f\" && {{ [ -z \"$first\" ] || chown -R {u} \"$first\"; }}",
            mode = mode & 0o7777,
            u = self.user
        );
        self.helper(&format!("write {path}"), &script, &[path], Some(data))
            .map(|_| ())
    }

    /// Copy a host directory's contents into `path` (modes kept, owned by the sandbox user).
    pub(super) fn put_dir(&self, host: &std::path::Path, path: &str) -> Result<()> {
        self.touched();
        let mut names = Vec::new();
        for e in std::fs::read_dir(host)
            .map_err(|e| Error::io(format!("sandbox: could not read {}", host.display()), e))?
        {
            let e = e.map_err(|e| Error::io("sandbox: could not read a directory entry", e))?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        check_tree(host)?;
        if names.is_empty() {
            return self
                .helper(
                    &format!("create {path}"),
                    "mkdir -p -- \"$1\"",
                    &[path],
                    None,
                )
                .map(|_| ());
        }
        // The entries one by one, not `.`: extracting `.` would give the destination the host
        // directory's mode.
        let mut tar = Command::new("tar");
        tar.arg("-C")
            .arg(host)
            .args(["-cf", "-", "--"])
            .args(&names)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut tar = tar
            .spawn()
            .map_err(|e| Error::io("sandbox: could not run tar to pack a directory", e))?;
        let stream = tar
            .stdout
            .take()
            .map(Stdio::from)
            .unwrap_or_else(Stdio::null);
        let mut names_args: Vec<&str> = vec![path];
        names_args.extend(names.iter().map(String::as_str));
        let script = format!(
            "d=$1; shift; mkdir -p -- \"$d\" && tar -x -o -p -f - -C \"$d\" && cd -- \"$d\" && chown -R {} -- \"$@\"",
            self.user
        );
        let (mut c, _entered) = self.sh("0:0", true, &script, &names_args);
        c.stdin(stream);
        let out = c.output().map_err(|e| {
            Error::io(
                format!("container: could not run {}", self.engine.kind().name()),
                e,
            )
        })?;
        let packed = tar
            .wait_with_output()
            .map_err(|e| Error::io("sandbox: wait for tar", e))?;
        if !packed.status.success() {
            return Err(Error::Sandbox(format!(
                "sandbox: could not pack {}: {}",
                host.display(),
                String::from_utf8_lossy(&packed.stderr).trim()
            )));
        }
        if !out.status.success() {
            return Err(self.failed(&format!("copy {} into {path}", host.display()), &out.stderr));
        }
        Ok(())
    }

    /// Read a file, refused past the sandbox-file cap.
    pub(super) fn get(&self, path: &str) -> Result<Vec<u8>> {
        let limit = &crate::limits::SANDBOX_FILE;
        let cap = limit.bytes()?;
        let out = self.helper(
            &format!("read sandbox file {path}"),
            "[ -f \"$1\" ] || [ -c \"$1\" ] || { echo \"$1 is not a file\" >&2; exit 1; }; exec head -c \"$2\" -- \"$1\"",
            &[path, &(cap + 1).to_string()],
            None,
        )?;
        if out.len() as u64 > cap {
            return Err(Error::io(
                format!("sandbox: could not read sandbox file {path}"),
                std::io::Error::new(std::io::ErrorKind::InvalidData, limit.exceeded(path, cap)),
            ));
        }
        Ok(out)
    }

    /// List a directory, sorted by name.
    pub(super) fn list(&self, path: &str) -> Result<Vec<Entry>> {
        let out = self.helper(
            &format!("list {path}"),
            "[ -d \"$1\" ] || { echo \"$1 is not a directory\" >&2; exit 1; }; exec find \"$1\" -mindepth 1 -maxdepth 1 -printf '%y %s %f\\0'",
            &[path],
            None,
        )?;
        let mut entries = Vec::new();
        for item in out.split(|b| *b == 0).filter(|s| !s.is_empty()) {
            let s = String::from_utf8_lossy(item);
            let mut parts = s.splitn(3, ' ');
            let (Some(kind), Some(size), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            entries.push(Entry {
                name: name.to_string(),
                dir: kind == "d",
                size: size.parse().unwrap_or(0),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Remove a file or directory tree (nothing there is no error).
    pub(super) fn remove(&self, path: &str) -> Result<()> {
        self.touched();
        self.helper(&format!("remove {path}"), "rm -rf -- \"$1\"", &[path], None)
            .map(|_| ())
    }

    /// A snapshot image of the container as it is now (reused while nothing changed).
    fn snapshot(&self, id: &str) -> Result<Arc<ForkImage>> {
        let generation = self.generation.load(Ordering::SeqCst);
        let mut snap = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((g, img)) = snap.as_ref() {
            if *g == generation {
                return Ok(img.clone());
            }
        }
        let name = format!(
            "localhost/nenyax-fork:{}-{}",
            id,
            NEXT_IMAGE.fetch_add(1, Ordering::Relaxed)
        );
        let label = format!("LABEL {LABEL}={}", std::process::id());
        let mut args = vec!["commit", "--pause=false", "-c", &label, &self.name, &name];
        if self.engine.kind() == EngineKind::Podman {
            // Podman prints the layers it copies; only the id matters.
            args.insert(1, "-q");
        }
        let out = self.engine.command().args(&args).output().map_err(|e| {
            Error::io(
                format!("container: could not run {}", self.engine.kind().name()),
                e,
            )
        })?;
        if !out.status.success() {
            return Err(self.failed("commit the container for a fork", &out.stderr));
        }
        let img = Arc::new(ForkImage {
            engine: self.engine.clone(),
            name,
        });
        *snap = Some((generation, img.clone()));
        Ok(img)
    }

    /// A new container from a snapshot of this one (private directories on tmpfs, which a
    /// commit leaves out, are copied).
    pub(super) fn fork(
        &self,
        config: &SandboxConfig,
        id: &str,
        child_id: &str,
    ) -> Result<Container> {
        let img = self.snapshot(id)?;
        let child = Container::create(config, child_id, Some(img))?;
        if self.read_only {
            let rel: Vec<String> = self
                .dirs
                .iter()
                .map(|d| d.trim_start_matches('/').to_string())
                .collect();
            let mut args: Vec<&str> = vec![];
            args.extend(rel.iter().map(String::as_str));
            let (mut from, _from_entered) =
                self.sh("0:0", false, "cd / && exec tar -cf - -- \"$@\"", &args);
            from.stdout(Stdio::piped());
            let mut from = from
                .spawn()
                .map_err(|e| Error::io("container: could not read the private directories", e))?;
            let stream = from
                .stdout
                .take()
                .map(Stdio::from)
                .unwrap_or_else(Stdio::null);
            let (mut to, _to_entered) = child.sh("0:0", true, "exec tar -x -p -f - -C /", &[]);
            to.stdin(stream);
            let out = to
                .output()
                .map_err(|e| Error::io("container: could not copy the private directories", e))?;
            let _ = from.wait();
            if !out.status.success() {
                return Err(child.failed("copy the private directories into a fork", &out.stderr));
            }
        }
        Ok(child)
    }

    /// The address of `port` in the container: its own address on the engine's network.
    pub(super) fn url(&self, config: &SandboxConfig, id: &str, port: u16) -> Result<String> {
        if !config.network {
            return Err(Error::UnsupportedCapability {
                env: format!("sandbox {id}"),
                what: "expose a port: this container has no network (create it with \
                       network: true)"
                    .into(),
            });
        }
        let ip = self.engine.run(
            &[
                "inspect",
                "--format",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                &self.name,
            ],
            "find the container's address",
        )?;
        match ip.split_whitespace().find(|s| !s.is_empty()) {
            Some(ip) => Ok(format!("http://{ip}:{port}")),
            None => Err(Error::UnsupportedCapability {
                env: format!("sandbox {id}"),
                what: "expose a port: the container has no address on the engine's network \
                       (rootless networking); reach the service from inside the sandbox"
                    .into(),
            }),
        }
    }

    /// Kill everything in the container now; the engine removes it (`--rm`) and the reaper
    /// makes sure, then removes fork images nobody uses.
    pub(super) fn destroy(&mut self) {
        if self.done.swap(true, Ordering::SeqCst) {
            return;
        }
        let killed = kill_env(&format!("NENYAX_CONTAINER={}\0", self.name));
        let job = Job {
            engine: self.engine.clone(),
            container: Some(self.name.clone()),
            images: self
                .base
                .take()
                .into_iter()
                .chain(
                    self.snapshot
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take()
                        .map(|(_, i)| i),
                )
                .collect(),
        };
        if killed == 0 {
            // Nothing visible from here (a remote engine): remove it before returning, so
            // that nothing keeps running.
            run_job(job);
        } else {
            reaper().push(job);
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Whether commands may enter containers directly (`NENYAX_CONTAINER_EXEC=engine` sends every
/// command through the engine, for comparison or where entering is unwanted).
fn direct_allowed() -> bool {
    std::env::var("NENYAX_CONTAINER_EXEC").as_deref() != Ok("engine")
}

/// The host pid of the init of the container named `name`: the process carrying its marker
/// that is PID 1 of its own PID namespace.
fn find_init(name: &str) -> Option<i32> {
    let needle = format!("NENYAX_CONTAINER={name}\0");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let ns_pid = status
            .lines()
            .find(|l| l.starts_with("NSpid:"))
            .and_then(|l| l.split_whitespace().last());
        if ns_pid == Some("1") {
            return Some(pid);
        }
    }
    None
}

/// The container's namespaces and cgroups, opened, and its init's environment (the image's
/// `ENV` and the engine's variables).
#[derive(Debug)]
struct Direct {
    ns: Vec<std::fs::File>,
    cgroups: Vec<std::fs::File>,
    env: Vec<(String, String)>,
    /// The init's capability bounding set (the engine's capabilities for the container).
    bounding: u64,
}

/// What nenyax's file helpers keep as root: chown, reading and writing any file, setting modes
/// (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID), within what the
/// engine gave the container.
const FILE_CAPS: u64 = 0b1_1111;

/// The raw descriptors [`enter`] uses in the child (the files stay open in the parent until
/// the spawn returned).
struct Plan {
    ns: Vec<i32>,
    cgroups: Vec<i32>,
    /// `None`: the sandbox user; `Some(mask)`: root with only these capabilities.
    root_caps: Option<u64>,
}

impl Direct {
    fn plan(&self, root_caps: Option<u64>) -> Plan {
        use std::os::fd::AsRawFd;
        Plan {
            ns: self.ns.iter().map(|f| f.as_raw_fd()).collect(),
            cgroups: self.cgroups.iter().map(|f| f.as_raw_fd()).collect(),
            root_caps,
        }
    }
}

/// In the spawned child: join the container's cgroups and namespaces, fork once more so the
/// command is in its PID namespace, and become the sandbox user with `no_new_privs`; the
/// intermediate process waits and ends the way the command ended. Only system calls.
fn enter(plan: &Plan) -> std::io::Result<()> {
    let err = std::io::Error::last_os_error;
    for fd in &plan.cgroups {
        // SAFETY: writing a constant to a descriptor opened for it.
        if unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(err());
        }
    }
    for fd in &plan.ns {
        // SAFETY: setns on a namespace descriptor; joining the mount namespace last also moves
        // the root and working directory into the container's.
        if unsafe { libc::setns(*fd, 0) } != 0 {
            return Err(err());
        }
    }
    // SAFETY: the child is single-threaded; both sides only make system calls.
    match unsafe { libc::fork() } {
        -1 => Err(err()),
        0 => {
            for fd in plan.ns.iter().chain(&plan.cgroups) {
                // SAFETY: closing descriptors this process no longer needs.
                unsafe { libc::close(*fd) };
            }
            if let Some(mask) = plan.root_caps {
                // Root keeps uid 0, and at exec its capabilities become the bounding set: drop
                // every one outside the mask (those past the kernel's last are refused: fine).
                for cap in 0..64 {
                    if mask & (1u64 << cap) == 0 {
                        // SAFETY: prctl with constant arguments.
                        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
                    }
                }
                // SAFETY: as above.
                unsafe {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    {
                        return Err(err());
                    }
                }
                return Ok(());
            }
            // SAFETY: dropping groups and ids to the sandbox user, then forbidding new
            // privileges (setuid programs in the image raise nothing).
            unsafe {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0
                    || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                {
                    return Err(err());
                }
            }
            Ok(())
        }
        child => {
            // Every descriptor past stdio goes, the spawn's exec-error pipe first among them:
            // held open here, it would make the spawn wait until the command ended.
            // SAFETY: close_range is a plain system call that only closes descriptors.
            unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
            let mut status = 0;
            loop {
                // SAFETY: waiting for our own child.
                let r = unsafe { libc::waitpid(child, &mut status, 0) };
                if r == child || (r == -1 && err().raw_os_error() != Some(libc::EINTR)) {
                    break;
                }
            }
            // SAFETY: ending this intermediate process as the command ended.
            unsafe {
                if libc::WIFSIGNALED(status) {
                    let sig = libc::WTERMSIG(status);
                    libc::signal(sig, libc::SIG_DFL);
                    libc::raise(sig);
                    libc::_exit(128 + sig);
                }
                libc::_exit(if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    127
                })
            }
        }
    }
}

/// Quote for a POSIX shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A sandbox path as an absolute container path: relative ones are taken from `base`; `..`
/// and NUL bytes are refused.
pub(super) fn absolute(path: &str, base: &str) -> Result<String> {
    if path.contains('\0') {
        return Err(Error::Sandbox(format!(
            "sandbox path `{}` holds a NUL byte",
            path.replace('\0', "\\0")
        )));
    }
    let full = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", base.trim_end_matches('/'))
    };
    let mut parts = Vec::new();
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(Error::Sandbox(format!(
                    "sandbox path `{path}` uses `..`: give the path without it"
                )))
            }
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Refuse a FIFO, socket or device anywhere in a directory to upload (tar would copy it as a
/// node, not as data).
fn check_tree(dir: &std::path::Path) -> Result<()> {
    for e in std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("sandbox: could not read {}", dir.display()), e))?
    {
        let e = e.map_err(|e| Error::io("sandbox: could not read a directory entry", e))?;
        let md = std::fs::symlink_metadata(e.path())
            .map_err(|e| Error::io("sandbox: could not stat", e))?;
        if md.is_dir() {
            check_tree(&e.path())?;
        } else if !md.is_file() && !md.file_type().is_symlink() {
            return Err(Error::Sandbox(format!(
                "{} is not a regular file, directory or symlink (a FIFO, socket or device); \
                 remove it from the directory being copied into the sandbox",
                e.path().display()
            )));
        }
    }
    Ok(())
}

/// Work for the reaper: remove a container (when named), then let go of fork images (the last
/// holder's drop removes one).
struct Job {
    engine: Engine,
    container: Option<String>,
    images: Vec<Arc<ForkImage>>,
}

fn run_job(job: Job) {
    if let Some(name) = &job.container {
        let mut c = job.engine.command();
        c.args(["rm", "-f"]);
        if job.engine.kind() == EngineKind::Podman {
            c.args(["-t", "0"]);
        }
        // Already gone (its `--rm` was quicker) is fine.
        let _ = c.arg(name).output();
    }
    drop(job.images);
}

/// The background thread that removes destroyed containers and unused fork images, so that
/// destroying a sandbox costs a signal, not engine round trips. Work left when the process
/// exits is finished by an exit handler.
struct Reaper {
    queue: Mutex<VecDeque<Job>>,
    wake: Condvar,
    /// Jobs queued or running.
    pending: AtomicUsize,
    idle: Condvar,
    idle_lock: Mutex<()>,
}

impl Reaper {
    fn push(&self, job: Job) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(job);
        self.wake.notify_one();
    }

    /// Wait until every queued job is done, at most `limit`.
    fn flush(&self, limit: Duration) {
        let t0 = Instant::now();
        let mut g = self.idle_lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.pending.load(Ordering::SeqCst) > 0 && t0.elapsed() < limit {
            g = self
                .idle
                .wait_timeout(g, Duration::from_millis(20))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

fn reaper() -> &'static Reaper {
    static R: OnceLock<Reaper> = OnceLock::new();
    R.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("nenyax-container-reaper".into())
            .spawn(|| loop {
                let r = reaper();
                let job = {
                    let mut q = r.queue.lock().unwrap_or_else(|e| e.into_inner());
                    loop {
                        if let Some(j) = q.pop_front() {
                            break j;
                        }
                        q = r.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                    }
                };
                run_job(job);
                r.pending.fetch_sub(1, Ordering::SeqCst);
                let _g = r.idle_lock.lock().unwrap_or_else(|e| e.into_inner());
                r.idle.notify_all();
            });
        if spawned.is_err() {
            // Without a thread, jobs would wait forever: run_job is then called inline by
            // flush at exit at the latest.
        }
        // SAFETY: registering a plain `extern "C"` function with no captured state.
        unsafe {
            libc::atexit(flush_at_exit);
        }
        Reaper {
            queue: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            pending: AtomicUsize::new(0),
            idle: Condvar::new(),
            idle_lock: Mutex::new(()),
        }
    })
}

extern "C" fn flush_at_exit() {
    let r = reaper();
    r.flush(Duration::from_secs(30));
    // Whatever the thread could not take (it never started) is done here.
    let left: Vec<Job> = r
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect();
    for j in left {
        run_job(j);
    }
}

/// Start the reaper and, once per process, sweep a crashed run's leftovers in the background.
fn start_reaper(engine: &Engine) {
    static SWEPT: OnceLock<()> = OnceLock::new();
    let r = reaper();
    SWEPT.get_or_init(|| {
        let engine = engine.clone();
        r.pending.fetch_add(1, Ordering::SeqCst);
        let _ = std::thread::Builder::new()
            .name("nenyax-container-sweep".into())
            .spawn(move || {
                let _ = sweep_with(&engine);
                let r = reaper();
                r.pending.fetch_sub(1, Ordering::SeqCst);
                let _g = r.idle_lock.lock().unwrap_or_else(|e| e.into_inner());
                r.idle.notify_all();
            });
    });
}

/// What [`sweep`] removed.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Swept {
    /// Containers removed (names).
    pub containers: Vec<String>,
    /// Images removed (names or ids).
    pub images: Vec<String>,
}

/// Remove labelled containers and images whose owner process is dead (left by a crashed run);
/// anything of a live process is left alone.
pub fn sweep() -> Result<Swept> {
    sweep_with(&Engine::detect()?)
}

fn owner_dead(label: &str) -> bool {
    match label.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        ),
        // Not a pid: not ours to judge.
        _ => false,
    }
}

fn sweep_with(engine: &Engine) -> Result<Swept> {
    let mut swept = Swept::default();
    let filter = format!("label={LABEL}");
    let ids = engine.run(
        &["ps", "-a", "-q", "--no-trunc", "--filter", &filter],
        "list labelled containers",
    )?;
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if !ids.is_empty() {
        let mut args = vec![
            "inspect",
            "--format",
            "{{.Name}}\t{{index .Config.Labels \"io.nenyax.owner\"}}",
        ];
        args.extend(ids.iter().copied());
        // A container may vanish between the two calls: take what inspect could say.
        let out = engine.command().args(&args).output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for line in text.lines() {
            let Some((name, owner)) = line.split_once('\t') else {
                continue;
            };
            let name = name.trim_start_matches('/');
            if owner_dead(owner) {
                let mut c = engine.command();
                c.args(["rm", "-f"]);
                if engine.kind() == EngineKind::Podman {
                    c.args(["-t", "0"]);
                }
                if c.arg(name)
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false)
                {
                    swept.containers.push(name.to_string());
                }
            }
        }
    }
    let ids = engine.run(
        &["images", "-q", "--no-trunc", "--filter", &filter],
        "list labelled images",
    )?;
    let mut ids: Vec<&str> = ids.split_whitespace().collect();
    ids.dedup();
    if !ids.is_empty() {
        let mut args = vec![
            "image",
            "inspect",
            "--format",
            "{{.Id}}\t{{index .Config.Labels \"io.nenyax.owner\"}}",
        ];
        args.extend(ids.iter().copied());
        let text = engine
            .command()
            .args(&args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for line in text.lines() {
            let Some((id, owner)) = line.split_once('\t') else {
                continue;
            };
            if owner_dead(owner)
                && engine
                    .command()
                    .args(["image", "rm", "-f", id])
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false)
            {
                swept.images.push(id.to_string());
            }
        }
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_absolute_and_dot_dot_is_refused() {
        assert_eq!(absolute("x/y", "/app").unwrap(), "/app/x/y");
        assert_eq!(absolute("/usr//lib/./x", "/app").unwrap(), "/usr/lib/x");
        assert_eq!(absolute("/", "/app").unwrap(), "/");
        let e = absolute("/app/../etc", "/app").unwrap_err().to_string();
        assert!(e.contains("`..`"), "{e}");
        assert!(absolute("a\0b", "/app").is_err());
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("/a'b"), "'/a'\\''b'");
    }
}
