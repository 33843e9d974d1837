//! The process and jail backends: spawning one command with its limits.
//!
//! Everything that runs between `fork` and `exec` (the `pre_exec` closure) only makes system
//! calls on data prepared beforehand: no allocation, no locks.

#[cfg(feature = "sandbox")]
use std::ffi::CString;
#[cfg(feature = "sandbox")]
use std::fs;
use std::io::Write;
#[cfg(feature = "sandbox")]
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
#[cfg(feature = "sandbox")]
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[cfg(feature = "sandbox")]
use nix::mount::{mount, MsFlags};
#[cfg(feature = "sandbox")]
use nix::sched::{unshare, CloneFlags};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{killpg, Signal};
#[cfg(feature = "sandbox")]
use nix::sys::wait::{waitpid, WaitStatus};
#[cfg(feature = "sandbox")]
use nix::unistd::{chdir, fork, ForkResult};
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

/// Why `root: true` cannot run here: a build without the jail has no user namespaces either.
#[cfg(not(feature = "sandbox"))]
pub(super) fn user_namespace_ready() -> std::result::Result<(), String> {
    jail_ready()
}

#[cfg(feature = "sandbox")]
/// Whether a jail's command can make the user namespace that `root: true` runs in (probed
/// once).
pub(super) fn user_namespace_ready() -> std::result::Result<(), String> {
    static READY: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let mut cmd = Command::new("/bin/true");
            // SAFETY: unshare is a plain system call, safe between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    unshare(CloneFlags::CLONE_NEWUSER).map_err(std::io::Error::from)?;
                    Ok(())
                });
            }
            match cmd.status() {
                Ok(s) if s.success() => Ok(()),
                Ok(s) => Err(format!("a probe in a new user namespace failed ({s})")),
                Err(e) => Err(format!(
                    "cannot create a user namespace ({e}); check that user.max_user_namespaces \
                     is above 0"
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

/// The size of a jail's private `/dev/shm` (a tmpfs, so it is RAM the host lends).
pub const JAIL_SHM_BYTES: u64 = 64 << 20;

/// The host devices a jail gets, bound one by one into its private `/dev`.
#[cfg(feature = "sandbox")]
const JAIL_DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The symlinks of a jail's `/dev`: (name, target).
#[cfg(feature = "sandbox")]
const JAIL_DEV_LINKS: [(&str, &str); 5] = [
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// The name the jail's init shows in `/proc/1/cmdline` and `/proc/1/comm`.
#[cfg(feature = "sandbox")]
const INIT_NAME: &[u8] = b"nenyax-init\0";

#[cfg(feature = "sandbox")]
/// Bind mounts and the new root of a jail, prepared before the fork.
struct JailPlan {
    /// `(source, target, read_only)`.
    binds: Vec<(CString, CString, bool)>,
    proc_dir: CString,
    /// The private `/dev`: its mount point, `(host device, node)` binds, its symlinks
    /// `(target, path)`, the shm and pts mount points.
    dev_dir: CString,
    dev_nodes: Vec<(CString, CString)>,
    dev_links: Vec<(CString, CString)>,
    dev_shm: CString,
    dev_pts: CString,
    shm_options: CString,
    root: CString,
    cwd: CString,
    /// For `root: true`: the one line of the command's uid_map and gid_map (`0 <uid> 1`), and
    /// whether setgroups must be denied first (when nenyax itself is not root).
    userns: Option<(CString, CString, bool)>,
    /// Where this process's argv and environment lie (`/proc/self/stat` fields 48-51): the
    /// jail's init is a fork of it and blanks them, so its `/proc/1` shows nothing of the host.
    args: Option<[usize; 4]>,
}

#[cfg(feature = "sandbox")]
/// `arg_start, arg_end, env_start, env_end` of this process.
fn arg_and_env_area() -> Option<[usize; 4]> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<usize> = rest
        .split_whitespace()
        .skip(45)
        .take(4)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let a = [*f.first()?, *f.get(1)?, *f.get(2)?, *f.get(3)?];
    (a[0] < a[1] && a[2] <= a[3]).then_some(a)
}

#[cfg(feature = "sandbox")]
/// Lay out the jail's root directory (mount points and the host's top-level symlinks) once.
fn jail_plan(sb: &Job, cwd: &str, userns: Option<(u32, u32)>) -> Result<JailPlan> {
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
                // Two first commands of one jail lay out its root at the same time: the
                // other one's link is the same link.
                match std::os::unix::fs::symlink(target, &at) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(fail("symlink", e))
                    }
                    _ => {}
                }
            }
        } else if md.is_dir() {
            fs::create_dir_all(&at).map_err(|e| fail("create a mount point", e))?;
            binds.push((cstr(e.path()), cstr(&at), true));
        }
    }
    for d in ["sys", "dev"] {
        fs::create_dir_all(root.join(d)).map_err(|e| fail("create a mount point", e))?;
    }
    binds.push((cstr("/sys"), cstr(root.join("sys")), true));
    for d in sb.private_dirs.iter().copied() {
        let at = root.join(d);
        fs::create_dir_all(&at).map_err(|e| fail("create a mount point", e))?;
        binds.push((cstr(base.join(d)), cstr(&at), false));
    }
    let proc_dir = root.join("proc");
    fs::create_dir_all(&proc_dir).map_err(|e| fail("create /proc", e))?;
    let dev = root.join("dev");
    let map = |id: u32| CString::new(format!("0 {id} 1\n")).unwrap_or_default();
    Ok(JailPlan {
        binds,
        proc_dir: cstr(&proc_dir),
        dev_dir: cstr(&dev),
        dev_nodes: JAIL_DEVICES
            .iter()
            .filter(|d| Path::new("/dev").join(d).exists())
            .map(|d| (cstr(Path::new("/dev").join(d)), cstr(dev.join(d))))
            .collect(),
        dev_links: JAIL_DEV_LINKS
            .iter()
            .map(|(name, to)| (cstr(to), cstr(dev.join(name))))
            .collect(),
        dev_shm: cstr(dev.join("shm")),
        dev_pts: cstr(dev.join("pts")),
        shm_options: cstr(format!("size={JAIL_SHM_BYTES},mode=1777")),
        root: cstr(&root),
        cwd: CString::new(cwd).map_err(|_| Error::Sandbox("cwd has a NUL byte".into()))?,
        userns: userns.map(|(u, g)| (map(u), map(g), !nix::unistd::geteuid().is_root())),
        args: arg_and_env_area(),
    })
}

#[cfg(feature = "sandbox")]
/// What failed while a jail was being set up, for the message on the command's stderr.
type Step<T> = std::result::Result<T, (&'static str, nix::errno::Errno)>;

#[cfg(feature = "sandbox")]
/// Name the step a system call belongs to.
fn step<T>(what: &'static str, r: nix::Result<T>) -> Step<T> {
    r.map_err(|e| (what, e))
}

#[cfg(feature = "sandbox")]
/// Make `dst` and every mount under it read-only (mount_setattr, Linux 5.12+); older kernels
/// get the top mount only.
fn read_only(dst: &CString) -> nix::Result<()> {
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    // struct mount_attr { attr_set, attr_clr, propagation, userns_fd }
    let attr: [u64; 4] = [MOUNT_ATTR_RDONLY, 0, 0, 0];
    // SAFETY: a plain system call on a NUL-terminated path and a stack struct.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            dst.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let none: Option<&str> = None;
    mount(
        none,
        dst.as_c_str(),
        none,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        none,
    )
}

#[cfg(feature = "sandbox")]
/// A jail's `/dev`: a small read-only tmpfs holding binds of a few host devices, the usual
/// symlinks, a private size-capped `/dev/shm` and a private `/dev/pts`. Nothing written there
/// reaches the host, and no other host device (disks, memory) is reachable.
fn private_dev(plan: &JailPlan) -> Step<()> {
    let none: Option<&str> = None;
    let nosuid = MsFlags::MS_NOSUID;
    step(
        "mount /dev",
        mount(
            Some("tmpfs"),
            plan.dev_dir.as_c_str(),
            Some("tmpfs"),
            nosuid | MsFlags::MS_NOEXEC,
            Some("size=64k,mode=755"),
        ),
    )?;
    for (src, dst) in &plan.dev_nodes {
        // SAFETY: open and close on a NUL-terminated path: an empty file to bind the device on.
        let fd = unsafe {
            libc::open(
                dst.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o666,
            )
        };
        if fd < 0 {
            return Err(("create a /dev node", nix::errno::Errno::last()));
        }
        // SAFETY: closing the descriptor just opened.
        unsafe { libc::close(fd) };
        step(
            "bind a host device",
            mount(
                Some(src.as_c_str()),
                dst.as_c_str(),
                none,
                MsFlags::MS_BIND,
                none,
            ),
        )?;
    }
    for (dir, fstype, opts, flags) in [
        (
            &plan.dev_shm,
            "tmpfs",
            plan.shm_options.as_c_str(),
            nosuid | MsFlags::MS_NODEV,
        ),
        (
            &plan.dev_pts,
            "devpts",
            c"newinstance,ptmxmode=0666,mode=0620",
            nosuid | MsFlags::MS_NOEXEC,
        ),
    ] {
        // SAFETY: mkdir on a NUL-terminated path.
        if unsafe { libc::mkdir(dir.as_ptr(), 0o755) } != 0 {
            return Err(("create a /dev directory", nix::errno::Errno::last()));
        }
        step(
            "mount /dev/shm or /dev/pts",
            mount(
                Some(fstype),
                dir.as_c_str(),
                Some(fstype),
                flags,
                Some(opts),
            ),
        )?;
    }
    for (to, at) in &plan.dev_links {
        // SAFETY: symlink on NUL-terminated paths.
        if unsafe { libc::symlink(to.as_ptr(), at.as_ptr()) } != 0 {
            return Err(("create a /dev symlink", nix::errno::Errno::last()));
        }
    }
    step(
        "make /dev read-only",
        mount(
            none,
            plan.dev_dir.as_c_str(),
            none,
            MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | nosuid
                | MsFlags::MS_NOEXEC,
            none,
        ),
    )
}

#[cfg(feature = "sandbox")]
/// Inside the new namespaces: mount everything, then make the new root the mount namespace's
/// root (pivot_root) and detach the host's, so that no path (not even the chroot escape of a
/// process that may call chroot) leads back to the host's file system.
fn enter_jail(plan: &JailPlan) -> Step<()> {
    let none: Option<&str> = None;
    step(
        "make the mounts private",
        mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none),
    )?;
    step(
        "bind the new root",
        mount(
            Some(plan.root.as_c_str()),
            plan.root.as_c_str(),
            none,
            MsFlags::MS_BIND,
            none,
        ),
    )?;
    for (src, dst, ro) in &plan.binds {
        step(
            "bind a directory",
            mount(
                Some(src.as_c_str()),
                dst.as_c_str(),
                none,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none,
            ),
        )?;
        if *ro {
            step("make a bind read-only", read_only(dst))?;
        }
    }
    private_dev(plan)?;
    step(
        "mount /proc",
        mount(
            Some("proc"),
            plan.proc_dir.as_c_str(),
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            none,
        ),
    )?;
    step(
        "make the new root read-only",
        mount(
            none,
            plan.root.as_c_str(),
            none,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            none,
        ),
    )?;
    step("set the hostname", nix::unistd::sethostname("nenyax"))?;
    step("enter the new root", chdir(plan.root.as_c_str()))?;
    step("pivot_root", nix::unistd::pivot_root(".", "."))?;
    step(
        "detach the host's root",
        nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH),
    )?;
    step("enter the new root", chdir("/"))?;
    step("enter the working directory", chdir(plan.cwd.as_c_str()))?;
    Ok(())
}

#[cfg(feature = "sandbox")]
/// Write `parts` to stderr and leave with `code` (between fork and exec: no allocation).
fn die(parts: &[&[u8]], code: i32) -> ! {
    for p in parts {
        // SAFETY: writing a borrowed buffer to fd 2.
        unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(code) }
}

#[cfg(feature = "sandbox")]
/// The init of a jail gives nothing of the host's nenyax away through `/proc/1`: its argv and
/// environment are blanked (cmdline shows `nenyax-init`), and it is not dumpable, so its memory,
/// maps and environ stay closed to the command (root of a user namespace included).
fn scrub_init(plan: &JailPlan) {
    // SAFETY: prctl with constant arguments; the name is NUL-terminated.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_NAME, INIT_NAME.as_ptr(), 0, 0, 0);
    }
    if let Some([arg_start, arg_end, env_start, env_end]) = plan.args {
        // SAFETY: [arg_start, arg_end) and [env_start, env_end) are this process's own argv
        // and environment strings (from /proc/self/stat of the process it was forked from);
        // nothing in init reads them again.
        unsafe {
            std::ptr::write_bytes(arg_start as *mut u8, 0, arg_end - arg_start);
            std::ptr::write_bytes(env_start as *mut u8, 0, env_end - env_start);
            if arg_end - arg_start >= INIT_NAME.len() {
                std::ptr::copy_nonoverlapping(
                    INIT_NAME.as_ptr(),
                    arg_start as *mut u8,
                    INIT_NAME.len(),
                );
                // Shrink argv to the name (needs CAP_SYS_RESOURCE; else it is NUL-padded).
                libc::prctl(
                    libc::PR_SET_MM,
                    libc::PR_SET_MM_ARG_END,
                    arg_start + INIT_NAME.len(),
                    0,
                    0,
                );
            }
        }
    }
}

#[cfg(feature = "sandbox")]
/// Close the descriptors that are open (-1 stands for none).
fn close_fds(fds: &[i32]) {
    for &fd in fds.iter().filter(|fd| **fd >= 0) {
        // SAFETY: closing a descriptor this process owns.
        unsafe { libc::close(fd) };
    }
}

#[cfg(feature = "sandbox")]
/// `/proc/<pid>/<file>` as a NUL-terminated path in `buf` (no allocation).
fn proc_path<'a>(buf: &'a mut [u8; 64], pid: i32, file: &[u8]) -> &'a [u8] {
    let mut digits = [0u8; 12];
    let (mut n, mut i) = (pid.unsigned_abs(), digits.len());
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut len = 0;
    for part in [b"/proc/".as_slice(), &digits[i..], b"/", file, b"\0"] {
        buf[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    &buf[..len]
}

#[cfg(feature = "sandbox")]
/// Write `data` to `/proc/<pid>/<file>`; false when it cannot.
fn write_proc(pid: i32, file: &[u8], data: &[u8]) -> bool {
    let mut buf = [0u8; 64];
    let path = proc_path(&mut buf, pid, file);
    // SAFETY: open, write and close on a NUL-terminated path and a borrowed buffer.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        n == data.len() as isize
    }
}

#[cfg(feature = "sandbox")]
/// Init's half of `root: true`: map the command's new user namespace (its uid and gid 0 are
/// the unprivileged sandbox user's on the host), then let it go on.
fn map_user_namespace(plan: &JailPlan, child: Pid, ready: i32, go: i32) {
    let Some((uid_map, gid_map, deny)) = &plan.userns else {
        return;
    };
    let mut b = [0u8; 1];
    // SAFETY: reading one byte from our own pipe.
    let ok = unsafe { libc::read(ready, b.as_mut_ptr().cast(), 1) } == 1
        && (!deny || write_proc(child.as_raw(), b"setgroups", b"deny"))
        && write_proc(child.as_raw(), b"uid_map", uid_map.as_bytes())
        && write_proc(child.as_raw(), b"gid_map", gid_map.as_bytes());
    // SAFETY: writing one byte to our own pipe.
    unsafe { libc::write(go, [ok as u8].as_ptr().cast(), 1) };
}

#[cfg(feature = "sandbox")]
/// The command's half of `root: true`: a new user namespace whose root is the unprivileged
/// sandbox user on the host. Its capabilities hold only over that namespace: the jail's mounts
/// belong to the host's, so it can neither remount them nor (in a mount namespace of its own)
/// unlock them, and host files count it as `nobody`.
fn become_namespace_root(ready: i32, go: i32) -> Step<()> {
    step(
        "create a user namespace",
        unshare(CloneFlags::CLONE_NEWUSER),
    )?;
    let mut b = [1u8];
    // SAFETY: one byte each way on our own pipes.
    let mapped = unsafe {
        libc::write(ready, b.as_ptr().cast(), 1) == 1
            && libc::read(go, b.as_mut_ptr().cast(), 1) == 1
            && b[0] == 1
    };
    if !mapped {
        return Err(("map the user namespace", nix::errno::Errno::EPERM));
    }
    // SAFETY: setgroups with an empty list; refused (and not needed) when setgroups is denied.
    unsafe { libc::setgroups(0, std::ptr::null()) };
    // SAFETY: plain system calls.
    unsafe {
        if libc::setresgid(0, 0, 0) != 0 {
            return Err((
                "become gid 0 of the user namespace",
                nix::errno::Errno::last(),
            ));
        }
        if libc::setresuid(0, 0, 0) != 0 {
            return Err((
                "become uid 0 of the user namespace",
                nix::errno::Errno::last(),
            ));
        }
    }
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
            // This process is PID 1 of the new PID namespace, so the /proc it mounts shows
            // that namespace only.
            if let Err((what, e)) = enter_jail(plan) {
                die(
                    &[
                        b"nenyax: could not set up the jail: ",
                        what.as_bytes(),
                        b" failed (",
                        e.desc().as_bytes(),
                        b")\n",
                    ],
                    125,
                );
            }
            scrub_init(plan);
            // root: true: the command makes a user namespace and init maps it (only a process
            // outside that namespace may map it to the sandbox user).
            let (mut ready, mut go) = ([-1i32; 2], [-1i32; 2]);
            if plan.userns.is_some() {
                // SAFETY: pipe2 fills two-element arrays.
                let made = unsafe {
                    libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) == 0
                        && libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) == 0
                };
                if !made {
                    die(&[b"nenyax: could not set up the jail: pipe2 failed\n"], 125);
                }
            }
            // SAFETY: as above.
            match unsafe { fork() } {
                Ok(ForkResult::Parent { child }) => {
                    // Init: map the command's user namespace, then reap everything until the
                    // command ends.
                    // Only the command's ends stay open over there: if it dies before it
                    // asks, init's read sees the end instead of waiting forever.
                    close_fds(&[ready[1], go[0]]);
                    map_user_namespace(plan, child, ready[0], go[1]);
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
                    close_fds(&[ready[0], go[1]]);
                    apply_limits(limits).map_err(std::io::Error::from)?;
                    if plan.userns.is_some() {
                        if let Err((what, e)) = become_namespace_root(ready[1], go[0]) {
                            die(
                                &[
                                    b"nenyax: could not make root: true a user namespace: ",
                                    what.as_bytes(),
                                    b" failed (",
                                    e.desc().as_bytes(),
                                    b")\n",
                                ],
                                125,
                            );
                        }
                        close_fds(&[ready[1], go[0]]);
                    }
                    // The host's setuid programs are visible in the jail: running one must not
                    // make the command (the sandbox user) the host's root.
                    // SAFETY: prctl with constant arguments.
                    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
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
    let mark = format!(
        "{}.{}",
        sb.id,
        EXEC_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
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
        .env("NENYAX_SANDBOX", &mark);
    for (k, v) in cfg.env.iter().chain(exec.env.iter()) {
        cmd.env(k, v);
    }
    let l = &cfg.limits;
    #[cfg_attr(not(feature = "sandbox"), allow(unused_mut))]
    let mut limits = ChildLimits {
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
            // root: true is root of a user namespace mapped to the sandbox user (or, when
            // nenyax is not root, to the caller), never the host's root.
            let userns = cfg.root.then(|| {
                sb.run_as.unwrap_or_else(|| {
                    (
                        nix::unistd::geteuid().as_raw(),
                        nix::unistd::getegid().as_raw(),
                    )
                })
            });
            if userns.is_some() {
                limits.run_as = None;
            }
            let plan = jail_plan(sb, &cwd, userns)?;
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
    let rx = super::capture::capture(&mut child, cap);
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
        // Only this command's: another command of the same sandbox may still be running.
        super::marker::kill_env(&format!("NENYAX_SANDBOX={mark}\0"));
    }
    let (out, dropped) = super::capture::collect(&rx, Duration::from_secs(2));
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

/// Kill every process of the sandbox `id` that is left: each carries `NENYAX_SANDBOX=<id>.<n>`
/// (its command's number) in its environment, even after leaving its process group.
pub(super) fn kill_marked(id: &str) {
    super::marker::kill_env(&format!("NENYAX_SANDBOX={id}."));
}

/// Numbers the commands of every sandbox, so that the marker of one command's processes is not
/// another's: the sweep after a command must not kill a command still running beside it.
static EXEC_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
