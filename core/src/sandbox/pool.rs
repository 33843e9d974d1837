//! WarmPool: sandboxes prepared ahead of time, handed out fresh and refilled in the background.
//!
//! Where the time goes (docs/performance.md, "WarmPool acquire"): a process or jail sandbox is a
//! directory with six empty directories in it (`app`, `tests`, `logs`, `tmp`, `solution` and the
//! jail's `.root`), so a fork made from nothing allocates eight or more inodes and its removal
//! frees as many. On file systems where allocating an inode is slow (ext4 without a journal skips
//! every recently freed inode, so each `mkdir` costs 100+ µs under churn), that, not the pool's
//! locking, is the cost of a pool that hands out sandboxes as fast as they are dropped. So a
//! dropped process or jail sandbox that came from a pool gives its skeleton back: its contents
//! are removed at once (as a drop always did), the empty directories are reset and kept, and the
//! next fork only copies the template's own files into them.
//!
//! Containers are not recycled: their state is the container itself, and a fork is a commit
//! plus a new container made by the refill thread.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;

use super::{BackendKind, Exec, Sandbox, SandboxConfig};
use crate::error::{Error, Result};

struct Inner {
    template: Sandbox,
    ready: Mutex<VecDeque<Sandbox>>,
    wake: Condvar,
    size: usize,
    stop: AtomicBool,
    /// Emptied skeletons of dropped sandboxes, waiting for reuse; removed when the pool goes.
    /// Each waits next to where it was (a rename within one directory is the cheapest move).
    stash: Mutex<Vec<PathBuf>>,
    /// Whether dropped sandboxes leave their skeletons (process and jail pools).
    recycle: bool,
    /// The modes `Sandbox::create` gave each top-level directory (they follow the umask), to
    /// reset a kept skeleton to.
    modes: OnceLock<Vec<(String, u32)>>,
}

/// `size` ready sandboxes, each a fork of one template prepared with setup commands.
/// [`WarmPool::acquire`] hands out a fresh one and a background thread forks a replacement; a
/// dropped process or jail sandbox from the pool leaves its emptied directories for the next
/// fork to reuse.
pub struct WarmPool {
    inner: Arc<Inner>,
    filler: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool")
            .field("size", &self.inner.size)
            .field("ready", &self.ready())
            .finish()
    }
}

impl WarmPool {
    /// Create the template, run `setup` in it (each must exit 0), and fill the pool.
    pub fn new(config: SandboxConfig, setup: &[Exec], size: usize) -> Result<WarmPool> {
        let template = Sandbox::create(config)?;
        for (i, e) in setup.iter().enumerate() {
            let r = template.exec(e)?;
            if !r.ok() {
                return Err(Error::Sandbox(format!(
                    "warm pool setup command {i} failed ({}, {}): {}",
                    r.exit_code
                        .map_or("no exit status".into(), |c| format!("exit {c}")),
                    super::Killed::describe(r.killed),
                    r.stderr.trim()
                )));
            }
        }
        let recycle = recyclable(template.backend());
        let inner = Arc::new(Inner {
            template,
            ready: Mutex::new(VecDeque::with_capacity(size)),
            wake: Condvar::new(),
            size,
            stop: AtomicBool::new(false),
            stash: Mutex::new(Vec::new()),
            recycle,
            modes: OnceLock::new(),
        });
        for _ in 0..size {
            let sb = fresh(&inner)?;
            lock(&inner.ready).push_back(sb);
        }
        if inner.recycle {
            // The first fork was made by `Sandbox::create` and nothing has run in it yet.
            let probe = match lock(&inner.ready).front() {
                Some(sb) => skeleton_modes(sb),
                None => Ok(Vec::new()),
            };
            let modes = probe
                .map_err(|e| Error::io("sandbox: read a fresh sandbox's directory modes", e))?;
            let _ = inner.modes.set(modes);
        }
        let bg = inner.clone();
        let filler = std::thread::Builder::new()
            .name("nenyax-warm-pool".into())
            .spawn(move || refill(&bg))
            .map_err(|e| Error::io("sandbox: start the warm pool's refill thread", e))?;
        Ok(WarmPool {
            inner,
            filler: Some(filler),
        })
    }

    /// A fresh sandbox: a ready one when there is one (no fork waited for), else one made now.
    pub fn acquire(&self) -> Result<Sandbox> {
        let got = lock(&self.inner.ready).pop_front();
        // The refill thread sleeps only while the pool is full; wake it outside the lock.
        self.inner.wake.notify_one();
        match got {
            Some(sb) => Ok(sb),
            None => fresh(&self.inner),
        }
    }

    /// How many sandboxes are ready now.
    pub fn ready(&self) -> usize {
        lock(&self.inner.ready).len()
    }

    /// The pool's target size.
    pub fn size(&self) -> usize {
        self.inner.size
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn refill(inner: &Arc<Inner>) {
    loop {
        {
            let mut q = lock(&inner.ready);
            while q.len() >= inner.size && !inner.stop.load(Ordering::SeqCst) {
                q = inner.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        }
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        // The fork runs without the lock held, so acquire never waits for it.
        match fresh(inner) {
            Ok(sb) => lock(&inner.ready).push_back(sb),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake.notify_all();
        if let Some(h) = self.filler.take() {
            let _ = h.join();
        }
    }
}

/// Backends whose whole state is the sandbox's host directory.
fn recyclable(kind: BackendKind) -> bool {
    matches!(kind, BackendKind::Process | BackendKind::Jail)
}

/// A fork of the template, into a kept skeleton when there is one.
fn fresh(inner: &Arc<Inner>) -> Result<Sandbox> {
    if !inner.recycle {
        return inner.template.fork();
    }
    let skeleton = lock(&inner.stash).pop();
    let sb = match skeleton {
        Some(path) => match reuse(inner, &path) {
            Ok(sb) => sb,
            Err(_) => {
                let _ = fs::remove_dir_all(&path);
                inner.template.fork()?
            }
        },
        None => inner.template.fork()?,
    };
    lock(homes()).insert(sb.id.clone(), Arc::downgrade(inner));
    Ok(sb)
}

/// A new sandbox in the emptied skeleton at `skeleton`, with a copy of the template's files.
fn reuse(inner: &Inner, skeleton: &Path) -> Result<Sandbox> {
    let t = &inner.template;
    // tempfile can only own a directory it made: make one and move the skeleton over it
    // (replacing an empty directory, which rename allows), so the sandbox's directory is
    // removed on drop exactly as a created one's.
    let dir = tempfile::Builder::new()
        .prefix("nenyax-sbx-")
        .tempdir()
        .map_err(|e| Error::io("sandbox: create the sandbox directory", e))?;
    fs::rename(skeleton, dir.path())
        .map_err(|e| Error::io("sandbox: move a kept sandbox directory into place", e))?;
    let sb = Sandbox {
        config: t.config.clone(),
        id: super::next_id(),
        inner: super::Inner::Host {
            dir,
            ran: AtomicBool::new(false),
        },
    };
    let (from, to) = (super::dir_of(&t.inner), super::dir_of(&sb.inner));
    for d in t.private_dirs() {
        super::copy_tree(&from.join(d), &to.join(d), &|p| sb.chown(p))?;
    }
    Ok(sb)
}

/// Which pool made each live pooled sandbox, by sandbox id.
fn homes() -> &'static Mutex<HashMap<String, Weak<Inner>>> {
    static HOMES: OnceLock<Mutex<HashMap<String, Weak<Inner>>>> = OnceLock::new();
    HOMES.get_or_init(|| {
        // Registered once, by the first pool: sandboxes made before any pool never pay for it.
        let _ = super::RECYCLE.set(take_back);
        Mutex::new(HashMap::new())
    })
}

/// Called by `Sandbox`'s drop, after what it ran was killed: when the sandbox came from a live
/// pool that has room for another skeleton, remove its contents now and keep its directories
/// for the next fork. Anything unexpected (a directory replaced by a symlink, one that cannot be
/// emptied, extended attributes) and the directory is removed as usual instead.
fn take_back(sb: &mut Sandbox) {
    let home = lock(homes()).remove(&sb.id);
    let Some(inner) = home.and_then(|w| w.upgrade()) else {
        return;
    };
    keep_skeleton(&inner, sb);
    // If this was the last handle on the pool, the pool goes here, with the registry unlocked.
    drop(inner);
}

fn keep_skeleton(inner: &Inner, sb: &mut Sandbox) {
    if !inner.recycle || inner.stop.load(Ordering::SeqCst) || lock(&inner.stash).len() >= inner.size
    {
        return;
    }
    let Some(modes) = inner.modes.get() else {
        return;
    };
    if empty_skeleton(sb, modes).is_err() {
        return;
    }
    let super::Inner::Host { dir, .. } = &mut sb.inner else {
        return;
    };
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let to = dir.path().with_file_name(format!(
        "nenyax-pool-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    if rename_new(dir.path(), &to).is_ok() {
        // Moved out of the way: the sandbox's own path is gone, as after a removal.
        dir.disable_cleanup(true);
        lock(&inner.stash).push(to);
    }
}

/// Rename `from` to `to` unless `to` exists (a plain rename would replace an empty directory).
fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths, resolved from the working directory as rename's are.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for p in lock(&self.stash).drain(..) {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Remove everything a sandbox's commands left and reset its directories to how
/// `Sandbox::create` made them; an error means "do not reuse this one".
fn empty_skeleton(sb: &Sandbox, modes: &[(String, u32)]) -> std::io::Result<()> {
    let top = sb
        .host_dir()
        .ok_or_else(|| std::io::Error::other("not a host sandbox"))?;
    let expected: Vec<&str> = sb.private_dirs().chain([".root"]).collect();
    let unexpected = || std::io::Error::other("not a skeleton");
    // A command running as the owner of the top directory could have added or swapped entries.
    let mut seen = 0;
    for e in fs::read_dir(top)? {
        let name = e?.file_name();
        if !expected.iter().any(|d| name == **d) {
            return Err(unexpected());
        }
        seen += 1;
    }
    if seen != expected.len() {
        return Err(unexpected());
    }
    // `Sandbox::create` sets the top directory's mode itself, whatever the umask.
    if fs::symlink_metadata(top)?.mode() & 0o7777 != 0o755 {
        fs::set_permissions(top, fs::Permissions::from_mode(0o755))?;
    }
    for d in &expected {
        let p = top.join(d);
        let md = fs::symlink_metadata(&p)?;
        if !md.is_dir() || has_xattrs(&p)? {
            // Extended attributes (an ACL, a user.* note) would carry over to the next episode.
            return Err(unexpected());
        }
        for e in fs::read_dir(&p)? {
            let e = e?;
            // remove_dir_all does not follow symlinks, so a planted link removes only itself.
            if e.file_type()?.is_dir() {
                fs::remove_dir_all(e.path())?;
            } else {
                fs::remove_file(e.path())?;
            }
        }
        let mode = modes
            .iter()
            .find(|(n, _)| n == d)
            .map(|(_, m)| *m)
            .ok_or_else(unexpected)?;
        if md.mode() & 0o7777 != mode {
            fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
        }
        if *d != ".root" {
            sb.chown(&p).map_err(|_| unexpected())?;
        }
    }
    Ok(())
}

/// The mode of each top-level directory of a sandbox, by name.
fn skeleton_modes(sb: &Sandbox) -> std::io::Result<Vec<(String, u32)>> {
    sb.private_dirs()
        .chain([".root"])
        .map(|d| {
            let md = fs::symlink_metadata(super::dir_of(&sb.inner).join(d))?;
            Ok((d.to_string(), md.mode() & 0o7777))
        })
        .collect()
}

fn has_xattrs(p: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated path and a zero-length buffer: llistxattr only returns the size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    match n {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => {
            let e = std::io::Error::last_os_error();
            // A file system without xattrs has none to carry over.
            if e.raw_os_error() == Some(libc::ENOTSUP) {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    fn pool(size: usize) -> WarmPool {
        pool_of(BackendKind::Process, size)
    }

    fn pool_of(kind: BackendKind, size: usize) -> WarmPool {
        let setup = [Exec::shell(
            "mkdir -p data && echo template > data/state.txt",
        )];
        WarmPool::new(SandboxConfig::new(kind), &setup, size).unwrap()
    }

    fn ino(p: &Path) -> u64 {
        fs::symlink_metadata(p).unwrap().ino()
    }

    fn kept(pool: &WarmPool) -> usize {
        lock(&pool.inner.stash).len()
    }

    /// Acquire until a sandbox built in the skeleton whose `app` had inode `app_ino` comes out.
    fn acquire_reused(pool: &WarmPool, app_ino: u64) -> Sandbox {
        let mut others = Vec::new();
        let t0 = Instant::now();
        loop {
            let sb = pool.acquire().unwrap();
            if ino(&sb.host_dir().unwrap().join("app")) == app_ino {
                return sb;
            }
            others.push(sb);
            assert!(
                t0.elapsed() < Duration::from_secs(10) && others.len() < 50,
                "the kept skeleton was never reused"
            );
        }
    }

    #[test]
    fn a_reused_skeleton_holds_only_the_templates_files() {
        reused_skeleton_holds_only_the_templates_files(BackendKind::Process);
        match BackendKind::Jail.ready() {
            Ok(()) => reused_skeleton_holds_only_the_templates_files(BackendKind::Jail),
            Err(why) => eprintln!("note: the jail case was not run: {why}"),
        }
    }

    fn reused_skeleton_holds_only_the_templates_files(kind: BackendKind) {
        let pool = pool_of(kind, 2);
        let a = pool.acquire().unwrap();
        let app = ino(&a.host_dir().unwrap().join("app"));
        let r = a
            .sh("echo dirty > data/state.txt; mkdir -p deep/er && echo x > deep/er/f; \
                 echo t > ../tmp/left; echo l > ../logs/log; ln -s /etc/passwd link; chmod 0 ../logs")
            .unwrap();
        assert!(r.ok(), "{}", r.stderr);
        let path = a.host_dir().unwrap().to_path_buf();
        a.destroy().unwrap();
        assert!(
            !path.exists(),
            "destroy leaves no directory at the sandbox's path"
        );
        assert_eq!(kept(&pool), 1, "the emptied skeleton is kept");

        let b = acquire_reused(&pool, app);
        assert_eq!(b.get("data/state.txt").unwrap(), b"template\n");
        let names =
            |p: &str| -> Vec<String> { b.list(p).unwrap().into_iter().map(|e| e.name).collect() };
        assert_eq!(names("/app"), ["data"]);
        assert!(names("/tmp").is_empty() && names("/logs").is_empty());
        let fresh = pool.inner.modes.get().unwrap();
        for (d, mode) in fresh {
            let md = fs::symlink_metadata(b.host_dir().unwrap().join(d)).unwrap();
            assert_eq!(
                md.mode() & 0o7777,
                *mode,
                "{d} is reset to a fresh sandbox's mode"
            );
        }
        // Relative paths: the process backend's commands see host paths, a jail's its own.
        let r = b.sh("echo ok > ../logs/log && cat ../logs/log").unwrap();
        assert_eq!(r.stdout, "ok\n", "{}", r.stderr);
    }

    #[test]
    fn a_tampered_skeleton_is_removed_not_reused() {
        let pool = pool(2);
        // A directory swapped for a symlink: reusing it would write through the link.
        let a = pool.acquire().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), b"host").unwrap();
        let app = a.host_dir().unwrap().join("app");
        fs::remove_dir_all(&app).unwrap();
        std::os::unix::fs::symlink(outside.path(), &app).unwrap();
        let path = a.host_dir().unwrap().to_path_buf();
        drop(a);
        assert!(!path.exists());
        assert_eq!(fs::read(outside.path().join("keep")).unwrap(), b"host");
        assert_eq!(kept(&pool), 0, "a swapped directory is not kept");

        // Extended attributes would carry a note from one episode to the next.
        let b = pool.acquire().unwrap();
        let p = std::ffi::CString::new(b.host_dir().unwrap().join("tmp").as_os_str().as_bytes())
            .unwrap();
        // SAFETY: NUL-terminated name and path, a 4-byte value.
        let set = unsafe {
            libc::lsetxattr(
                p.as_ptr(),
                c"user.note".as_ptr(),
                b"seen".as_ptr().cast(),
                4,
                0,
            )
        };
        let path = b.host_dir().unwrap().to_path_buf();
        drop(b);
        assert!(!path.exists());
        if set == 0 {
            assert_eq!(kept(&pool), 0, "a directory with xattrs is not kept");
        } else {
            eprintln!("note: user xattrs are not supported here; that case was not exercised");
        }
    }

    #[test]
    fn the_pool_keeps_at_most_size_skeletons_and_removes_them_when_it_goes() {
        let pool = pool(1);
        let a = pool.acquire().unwrap();
        let held: Vec<Sandbox> = (0..3).map(|_| pool.acquire().unwrap()).collect();
        // Once the pool is full its refill thread sleeps, so nothing takes a skeleton back out.
        let t0 = Instant::now();
        while pool.ready() < 1 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(held);
        assert_eq!(kept(&pool), 1, "at most `size` skeletons are kept");
        let stash = lock(&pool.inner.stash)[0].clone();
        assert!(stash.exists());
        drop(pool);
        assert!(!stash.exists(), "the kept skeletons go with the pool");
        let path = a.host_dir().unwrap().to_path_buf();
        drop(a);
        assert!(
            !path.exists(),
            "a sandbox outliving its pool is removed as usual"
        );
    }
}
