//! The process and jail backends: spawning one command with its limits.
//!
//! Everything that runs between `fork` and `exec` (the `pre_exec` closure) only makes system
//! calls on data prepared beforehand: no allocation, no locks.

#[cfg(feature = "sandbox")]
use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
#[cfg(feature = "sandbox")]
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
#[cfg(feature = "sandbox")]
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[cfg(feature = "sandbox")]
use nix::mount::{mount, MsFlags};
#[cfg(feature = "sandbox")]
use nix::sched::{unshare, CloneFlags};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{kill, killpg, Signal};
#[cfg(feature = "sandbox")]
use nix::sys::wait::{waitpid, WaitStatus};
#[cfg(feature = "sandbox")]
use nix::unistd::{chdir, chroot, fork, ForkResult};
use nix::unistd::{setgid, setsid, setuid, Gid, Pid, Uid};

use super::spec::{BackendKind, Exec, ExecResult, Killed, SandboxConfig};
use crate::error::{Error, Result};

const BASE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why a build without the `sandbox` feature has no jail backend.
#[cfg(not(feature = "sandbox"))]
pub(super) fn jail_ready() -> std::result::Result<(), String> {
    Err(
        "this build of Nenyax has no jail backend: it was built without the `sandbox` feature \
         (rebuild with `--features sandbox`), so use the process backend"
            .into(),
    )
}

#[cfg(feature = "sandbox")]
/// Whether namespaces can be made here (probed once).
pub(super) fn jail_ready() -> std::result::Result<(), String> {
    static READY: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            if !cfg!(target_os = "linux") {
                return Err("jails need Linux namespaces".into());
            }
            let mut cmd = Command::new("/bin/true");
            // SAFETY: unshare is a plain system call, safe between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    unshare(jail_flags(false)).map_err(std::io::Error::from)?;
                    Ok(())
                });
            }
            match cmd.status() {
                Ok(s) if s.success() => Ok(()),
                Ok(s) => Err(format!("a probe in new namespaces failed ({s})")),
                Err(e) => Err(format!(
                    "cannot create mount, PID, IPC, UTS and network namespaces ({e}); run as root or \
                     with CAP_SYS_ADMIN, or use the process backend"
                )),
            }
        })
        .clone()
}

#[cfg(feature = "sandbox")]
fn jail_flags(network: bool) -> CloneFlags {
    let mut f = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if !network {
        f |= CloneFlags::CLONE_NEWNET;
    }
    f
}

#[cfg(feature = "sandbox")]
fn cstr(p: impl AsRef<Path>) -> CString {
    CString::new(p.as_ref().as_os_str().as_bytes()).expect("paths have no NUL bytes")
}

#[cfg(feature = "sandbox")]
/// Bind mounts and the new root of a jail, prepared before the fork.
struct JailPlan {
    /// `(source, target, read_only)`.
    binds: Vec<(CString, CString, bool)>,
    proc_dir: CString,
    root: CString,
    cwd: CString,
}

#[cfg(feature = "sandbox")]
/// Lay out the jail's root directory (mount points and the host's top-level symlinks) once.
fn jail_plan(sb: &Job, cwd: &str) -> Result<JailPlan> {
    let base = sb.host_dir;
    let root = base.join(".root");
    let fail = |what: &str, e: std::io::Error| Error::io(format!("sandbox: could not {what}"), e);
    let mut binds = Vec::new();
    let skip = ["proc", "sys", "dev", "tmp", "lost+found"];
    for e in fs::read_dir("/").map_err(|e| fail("list /", e))? {
        let e = e.map_err(|e| fail("list /", e))?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if skip.contains(&n.as_ref()) || sb.private_dirs.iter().copied().any(|d| d == n) {
            continue;
        }
        let at = root.join(&name);
        let md = fs::symlink_metadata(e.path()).map_err(|e| fail("stat a top-level entry", e))?;
        if md.file_type().is_symlink() {
            if fs::symlink_metadata(&at).is_err() {
                let target = fs::read_link(e.path()).map_err(|e| fail("readlink", e))?;
                std::os::unix::fs::symlink(target, &at).map_err(|e| fail("symlink", e))?;
            }
        } else if md.is_dir() {
            fs::create_dir_all(&at).map_err(|e| fail("create a mount point", e))?;
            binds.push((cstr(e.path()), cstr(&at), true));
        }
    }
    for (d, ro) in [("dev", false), ("sys", true)] {
        let at = root.join(d);
        fs::create_dir_all(&at).map_err(|e| fail("create a mount point", e))?;
        binds.push((cstr(Path::new("/").join(d)), cstr(&at), ro));
    }
    for d in sb.private_dirs.iter().copied() {
        let at = root.join(d);
        fs::create_dir_all(&at).map_err(|e| fail("create a mount point", e))?;
        binds.push((cstr(base.join(d)), cstr(&at), false));
    }
    let proc_dir = root.join("proc");
    fs::create_dir_all(&proc_dir).map_err(|e| fail("create /proc", e))?;
    Ok(JailPlan {
        binds,
        proc_dir: cstr(&proc_dir),
        root: cstr(&root),
        cwd: CString::new(cwd).map_err(|_| Error::Sandbox("cwd has a NUL byte".into()))?,
    })
}

#[cfg(feature = "sandbox")]
/// Inside the new namespaces: mount everything, enter the new root.
fn enter_jail(plan: &JailPlan) -> nix::Result<()> {
    let none: Option<&str> = None;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
    for (src, dst, ro) in &plan.binds {
        mount(
            Some(src.as_c_str()),
            dst.as_c_str(),
            none,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            none,
        )?;
        if *ro {
            mount(
                none,
                dst.as_c_str(),
                none,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                none,
            )?;
        }
    }
    mount(
        Some("proc"),
        plan.proc_dir.as_c_str(),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        none,
    )?;
    nix::unistd::sethostname("nenyax")?;
    chroot(plan.root.as_c_str())?;
    chdir(plan.cwd.as_c_str())?;
    Ok(())
}

#[cfg(feature = "sandbox")]
/// Close every descriptor from 3 up except `keep`.
fn close_from_3_except(keep: i32) {
    // SAFETY: close_range is a plain system call; it only closes descriptors.
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
    }
}

/// The limits, in the child.
#[derive(Clone, Copy)]
struct ChildLimits {
    cpu: Option<u64>,
    mem: Option<u64>,
    files: Option<u64>,
    procs: Option<u64>,
    fsize: Option<u64>,
    run_as: Option<(u32, u32)>,
}

fn apply_limits(l: &ChildLimits) -> nix::Result<()> {
    if let Some(c) = l.cpu {
        // Soft limit first (SIGXCPU), the hard one a second later (SIGKILL).
        setrlimit(Resource::RLIMIT_CPU, c, c + 1)?;
    }
    if let Some(m) = l.mem {
        setrlimit(Resource::RLIMIT_AS, m, m)?;
    }
    if let Some(n) = l.files {
        setrlimit(Resource::RLIMIT_NOFILE, n, n)?;
    }
    if let Some(n) = l.procs {
        setrlimit(Resource::RLIMIT_NPROC, n, n)?;
    }
    if let Some(n) = l.fsize {
        setrlimit(Resource::RLIMIT_FSIZE, n, n)?;
    }
    if let Some((u, g)) = l.run_as {
        nix::unistd::setgroups(&[]).ok();
        setgid(Gid::from_raw(g))?;
        setuid(Uid::from_raw(u))?;
    }
    Ok(())
}

#[cfg(feature = "sandbox")]
/// Wait for `pid`, retrying on EINTR; `None` when it cannot be waited for.
fn wait_for(pid: Pid) -> Option<WaitStatus> {
    loop {
        match waitpid(pid, None) {
            Ok(s @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => return Some(s),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
}

#[cfg(feature = "sandbox")]
/// The jail's three processes: the spawned child (outside, reports the status), the new PID
/// namespace's init (reaps orphans, keeps the namespace alive), and the command. When init
/// ends, the kernel kills everything left in the namespace.
fn jail_child(plan: &JailPlan, limits: &ChildLimits, network: bool) -> std::io::Result<()> {
    setsid().map_err(std::io::Error::from)?;
    unshare(jail_flags(network)).map_err(std::io::Error::from)?;
    let (rfd, wfd) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    use std::os::fd::AsRawFd;
    // SAFETY: the process is single-threaded here (a fresh fork); the children only make
    // system calls before exec or _exit.
    match unsafe { fork() }.map_err(std::io::Error::from)? {
        ForkResult::Parent { child } => {
            // Outside: wait for init, then end the way the command ended.
            drop(wfd);
            close_from_3_except(rfd.as_raw_fd());
            let _ = wait_for(child);
            let mut buf = [0u8; 8];
            // SAFETY: reading into a stack buffer from our own pipe.
            let n = unsafe { libc::read(rfd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            let (kind, val) = if n == 8 {
                (
                    i32::from_ne_bytes(buf[..4].try_into().unwrap_or_default()),
                    i32::from_ne_bytes(buf[4..].try_into().unwrap_or_default()),
                )
            } else {
                (0, 127)
            };
            if kind == 1 {
                // SAFETY: restoring the default action and raising a signal on ourselves.
                unsafe {
                    libc::signal(val, libc::SIG_DFL);
                    libc::raise(val);
                }
                // SAFETY: _exit never returns.
                unsafe { libc::_exit(128 + val) }
            }
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(val) }
        }
        ForkResult::Child => {
            drop(rfd);
            if enter_jail(plan).is_err() {
                // SAFETY: _exit never returns.
                unsafe { libc::_exit(125) }
            }
            // SAFETY: as above.
            match unsafe { fork() } {
                Ok(ForkResult::Parent { child }) => {
                    // Init: reap everything until the command ends.
                    close_from_3_except(wfd.as_raw_fd());
                    let report = loop {
                        match waitpid(Pid::from_raw(-1), None) {
                            Ok(WaitStatus::Exited(p, code)) if p == child => break (0i32, code),
                            Ok(WaitStatus::Signaled(p, sig, _)) if p == child => {
                                break (1i32, sig as i32)
                            }
                            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                            Err(_) => break (0, 127),
                        }
                    };
                    let mut buf = [0u8; 8];
                    buf[..4].copy_from_slice(&report.0.to_ne_bytes());
                    buf[4..].copy_from_slice(&report.1.to_ne_bytes());
                    // SAFETY: writing a stack buffer to our own pipe, then leaving.
                    unsafe {
                        libc::write(wfd.as_raw_fd(), buf.as_ptr().cast(), 8);
                        libc::_exit(0)
                    }
                }
                Ok(ForkResult::Child) => {
                    drop(wfd);
                    apply_limits(limits).map_err(std::io::Error::from)?;
                    Ok(())
                }
                // SAFETY: _exit never returns.
                Err(_) => unsafe { libc::_exit(126) },
            }
        }
    }
}

/// What a backend needs of the sandbox a command runs in; the sandbox hands it over, so that
/// the backends do not depend on the `Sandbox` type.
pub(super) struct Job<'a> {
    /// The sandbox's configuration.
    pub config: &'a SandboxConfig,
    /// Its directory on the host.
    pub host_dir: &'a Path,
    /// Its id, which marks its processes.
    pub id: &'a str,
    /// The uid and gid to run as, when the library runs as root.
    pub run_as: Option<(u32, u32)>,
    /// Its private directories, the fixed ones and the extra ones (the jail binds them).
    #[cfg_attr(not(feature = "sandbox"), allow(dead_code))]
    pub private_dirs: Vec<&'a str>,
    /// A sandbox path as a host path, checked to stay inside.
    pub host_path: &'a dyn Fn(&str) -> Result<PathBuf>,
}

/// Run one command in `sb`.
pub(super) fn run(sb: &Job, exec: &Exec) -> Result<ExecResult> {
    let cfg = sb.config;
    let jail = cfg.backend == BackendKind::Jail;
    let argv: Vec<String> = match (&exec.shell, exec.argv.is_empty()) {
        (Some(line), true) => {
            let sh = if Path::new("/bin/bash").exists() {
                "/bin/bash"
            } else {
                "/bin/sh"
            };
            vec![sh.into(), "-c".into(), line.clone()]
        }
        (None, false) => exec.argv.clone(),
        _ => {
            return Err(Error::Sandbox(
                "an exec needs exactly one of argv (non-empty) or shell".into(),
            ))
        }
    };
    let cwd = exec.cwd.clone().unwrap_or_else(|| cfg.workdir.clone());
    let host_cwd = (sb.host_path)(&cwd)?;
    if !host_cwd.is_dir() {
        return Err(Error::Sandbox(format!(
            "working directory `{cwd}` does not exist in the sandbox; create it first (put or mkdir)"
        )));
    }
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (home, tmp) = if jail {
        ("/tmp".to_string(), "/tmp".to_string())
    } else {
        let t = sb.host_dir.join("tmp").to_string_lossy().into_owned();
        (t.clone(), t)
    };
    cmd.env("PATH", BASE_PATH)
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .env("LANG", "C.UTF-8")
        .env("NENYAX_SANDBOX", sb.id);
    for (k, v) in cfg.env.iter().chain(exec.env.iter()) {
        cmd.env(k, v);
    }
    let l = &cfg.limits;
    let limits = ChildLimits {
        cpu: l.cpu_s,
        mem: l.memory_bytes,
        files: l.open_files,
        procs: l.processes,
        fsize: l.file_size_bytes,
        run_as: sb.run_as,
    };
    if jail {
        // Sandbox::create refuses a backend that is not ready, so only the jail build gets here.
        #[cfg(not(feature = "sandbox"))]
        return Err(Error::Sandbox(jail_ready().err().unwrap_or_default()));
        #[cfg(feature = "sandbox")]
        {
            let plan = jail_plan(sb, &cwd)?;
            let network = cfg.network;
            // SAFETY: jail_child only makes system calls on data prepared above.
            unsafe {
                cmd.pre_exec(move || jail_child(&plan, &limits, network));
            }
        }
    } else {
        cmd.current_dir(&host_cwd);
        // SAFETY: setsid, setrlimit, setgid and setuid are plain system calls.
        unsafe {
            cmd.pre_exec(move || {
                setsid().map_err(std::io::Error::from)?;
                apply_limits(&limits).map_err(std::io::Error::from)
            });
        }
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| {
        Error::Sandbox(format!(
            "could not start `{}` in the {} sandbox: {e}",
            argv[0],
            cfg.backend.name()
        ))
    })?;
    let pgid = Pid::from_raw(child.id() as i32);
    let cap = l.output_bytes;
    let (tx, rx) = mpsc::channel::<(usize, Vec<u8>, u64)>();
    for (i, stream) in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .enumerate()
    {
        let tx = tx.clone();
        if let Some(mut s) = stream {
            std::thread::spawn(move || {
                let (mut kept, mut dropped) = (Vec::new(), 0u64);
                let mut buf = [0u8; 16384];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let room = cap.saturating_sub(kept.len()).min(n);
                    kept.extend_from_slice(&buf[..room]);
                    dropped += (n - room) as u64;
                }
                let _ = tx.send((i, kept, dropped));
            });
        }
    }
    drop(tx);
    if let Some(mut stdin) = child.stdin.take() {
        let data = exec.stdin.clone().unwrap_or_default();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let timeout = exec.timeout.unwrap_or(l.wall);
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(Error::io("sandbox: wait for a command", e)),
        }
        if t0.elapsed() >= timeout {
            timed_out = true;
            let _ = killpg(pgid, Signal::SIGKILL);
            break child
                .wait()
                .map_err(|e| Error::io("sandbox: wait for a killed command", e))?;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // Whatever the command left behind in its group, or detached with our marker, goes too.
    let _ = killpg(pgid, Signal::SIGKILL);
    if !jail {
        kill_marked(sb.id);
    }
    let mut out = [Vec::new(), Vec::new()];
    let mut dropped = 0;
    let grace = Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        let left = grace.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, kept, d)) => {
                out[i] = kept;
                dropped += d;
            }
            Err(_) => break,
        }
    }
    let signal = status.signal();
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
    let [o, e] = out;
    Ok(ExecResult {
        exit_code: status.code(),
        signal,
        stdout: String::from_utf8_lossy(&o).into_owned(),
        stderr: String::from_utf8_lossy(&e).into_owned(),
        dropped_bytes: dropped,
        duration_s: t0.elapsed().as_secs_f64(),
        killed,
    })
}

/// Kill every process that carries `NENYAX_SANDBOX=<id>` in its environment (children that
/// left the process group). A process in the middle of `execve` shows an empty environ for a
/// moment, so a second scan follows 1 ms later, and more while a scan still finds some.
pub(super) fn kill_marked(id: &str) {
    for pass in 0..5 {
        if kill_marked_once(id) == 0 && pass > 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One scan of /proc; returns how many marked processes it killed.
fn kill_marked_once(id: &str) -> usize {
    let needle = format!("NENYAX_SANDBOX={id}\0");
    let Ok(dir) = fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id();
    let mut killed = 0;
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid as u32 == me {
            continue;
        }
        if let Ok(env) = fs::read(e.path().join("environ")) {
            if env.windows(needle.len()).any(|w| w == needle.as_bytes())
                && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
            {
                killed += 1;
            }
        }
    }
    killed
}

#[cfg(all(test, not(feature = "sandbox")))]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_the_jail_is_not_ready_and_says_why() {
        let why = BackendKind::Jail.ready().unwrap_err();
        assert!(why.contains("`sandbox` feature"), "{why}");
        assert!(BackendKind::Process.ready().is_ok());
    }
}
