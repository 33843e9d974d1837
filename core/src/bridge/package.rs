//! The workers' Python code: the `nenyax_bridge` package (core/src/bridge/py), embedded at build
//! time and written to a cache directory once per process, so that a worker imports real files
//! (`python -m nenyax_bridge`, tracebacks naming them) while the library stays one binary.
//!
//! The directory's name carries a hash of the files: two library versions never share it, and
//! what is there is complete, because each writer fills a private directory and renames it into
//! place (a loser of that race uses the winner's copy).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The package's files, relative to the directory that goes on the workers' `PYTHONPATH`.
const FILES: &[(&str, &str)] = &[
    (
        "nenyax_bridge/__init__.py",
        include_str!("py/nenyax_bridge/__init__.py"),
    ),
    (
        "nenyax_bridge/__main__.py",
        include_str!("py/nenyax_bridge/__main__.py"),
    ),
    (
        "nenyax_bridge/protocol.py",
        include_str!("py/nenyax_bridge/protocol.py"),
    ),
    (
        "nenyax_bridge/dispatch.py",
        include_str!("py/nenyax_bridge/dispatch.py"),
    ),
    (
        "nenyax_bridge/gymnasium_driver.py",
        include_str!("py/nenyax_bridge/gymnasium_driver.py"),
    ),
    (
        "nenyax_bridge/reasoning_gym_driver.py",
        include_str!("py/nenyax_bridge/reasoning_gym_driver.py"),
    ),
    (
        "nenyax_bridge/verifiers_wire.py",
        include_str!("py/nenyax_bridge/verifiers_wire.py"),
    ),
    (
        "nenyax_bridge/verifiers_classic.py",
        include_str!("py/nenyax_bridge/verifiers_classic.py"),
    ),
    (
        "nenyax_bridge/verifiers_v1.py",
        include_str!("py/nenyax_bridge/verifiers_v1.py"),
    ),
    (
        "nenyax_bridge/verifiers_driver.py",
        include_str!("py/nenyax_bridge/verifiers_driver.py"),
    ),
];

/// The module a worker runs (`python -m`).
pub(crate) const MODULE: &str = "nenyax_bridge";

/// What separates `PYTHONPATH` entries.
pub(crate) const PATH_SEP: &str = if cfg!(windows) { ";" } else { ":" };

/// The directory holding `nenyax_bridge/`, written on first use: under `$XDG_CACHE_HOME/nenyax`
/// (else `~/.cache/nenyax`), else, when that is not writable (a read-only or shared home), under
/// a per-user directory in the system's temporary directory.
pub(crate) fn dir() -> Result<&'static Path> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(d) = DIR.get() {
        return Ok(d);
    }
    let d = install(&candidates())?;
    Ok(DIR.get_or_init(|| d))
}

/// `bridge-<version>-<hash of the files>`.
fn dir_name() -> String {
    // FNV-1a over every name and content, each length-prefixed: a version stamp, not a
    // defence against anyone (the directory's owner is checked for that).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, text) in FILES {
        for part in [name.as_bytes(), text.as_bytes()] {
            for b in (part.len() as u64).to_le_bytes().iter().chain(part) {
                h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    format!("bridge-{}-{h:016x}", env!("CARGO_PKG_VERSION"))
}

/// The parent directories to try, in order.
fn candidates() -> Vec<PathBuf> {
    let absolute = |p: PathBuf| p.is_absolute().then_some(p);
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache"))
                .and_then(absolute)
        });
    let mut out: Vec<PathBuf> = cache.map(|c| c.join("nenyax")).into_iter().collect();
    out.push(std::env::temp_dir().join(format!("nenyax-{}", user_id())));
    out
}

/// The first candidate that holds, or can be given, a complete copy of the package.
fn install(parents: &[PathBuf]) -> Result<PathBuf> {
    let mut why = Vec::new();
    for parent in parents {
        match install_in(parent) {
            Ok(d) => return Ok(d),
            Err(e) => why.push(format!("{}: {e}", parent.display())),
        }
    }
    Err(Error::DriverUnavailable {
        driver: "python bridge".into(),
        missing: format!(
            "no directory to write the bridge's Python package to ({}); set XDG_CACHE_HOME to a \
             writable directory",
            why.join("; ")
        ),
    })
}

fn install_in(parent: &Path) -> std::result::Result<PathBuf, String> {
    let target = parent.join(dir_name());
    // The directory goes on PYTHONPATH, whose separator it must not contain.
    if target.to_string_lossy().contains(PATH_SEP) {
        return Err(format!("the path contains '{PATH_SEP}'"));
    }
    if is_complete(&target) {
        trusted(parent)?;
        trusted(&target)?;
        return Ok(target);
    }
    mkdir_all(parent).map_err(|e| format!("cannot create it ({e})"))?;
    trusted(parent)?;
    let staging = parent.join(format!(".{}.{}", dir_name(), unique()));
    let written = write_files(&staging);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!("cannot write to it ({e})"));
    }
    // A few rounds: a concurrent writer may have renamed its copy into place meanwhile, or a
    // damaged copy may have to be moved aside first.
    for _ in 0..3 {
        if std::fs::rename(&staging, &target).is_ok() {
            return Ok(target);
        }
        if is_complete(&target) {
            let _ = std::fs::remove_dir_all(&staging);
            trusted(&target)?;
            return Ok(target);
        }
        let aside = parent.join(format!(".{}.stale.{}", dir_name(), unique()));
        if std::fs::rename(&target, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
    let _ = std::fs::remove_dir_all(&staging);
    Err(format!(
        "cannot put a copy at {}: something else is there",
        target.display()
    ))
}

/// True when every file is there with the embedded content.
fn is_complete(dir: &Path) -> bool {
    FILES.iter().all(|(name, text)| {
        std::fs::read(dir.join(name)).is_ok_and(|b| b.as_slice() == text.as_bytes())
    })
}

fn write_files(dir: &Path) -> std::io::Result<()> {
    mkdir(dir)?;
    for (name, text) in FILES {
        let path = dir.join(name);
        if let Some(p) = path.parent() {
            mkdir_all(p)?;
        }
        std::fs::write(&path, text)?;
    }
    Ok(())
}

/// Distinct for every call in every process: names of private directories.
fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(unix)]
fn user_id() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn user_id() -> u32 {
    0
}

#[cfg(unix)]
fn mkdir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o755).create(p)
}

#[cfg(unix)]
fn mkdir_all(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
}

#[cfg(not(unix))]
fn mkdir(p: &Path) -> std::io::Result<()> {
    std::fs::create_dir(p)
}

#[cfg(not(unix))]
fn mkdir_all(p: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(p)
}

/// Workers run whatever is in the directory: it must belong to this user (or root) and be
/// writable by no one else, so that another user of a shared temporary directory cannot
/// plant code there.
#[cfg(unix)]
fn trusted(p: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).map_err(|e| format!("cannot inspect {} ({e})", p.display()))?;
    if m.uid() != user_id() && m.uid() != 0 {
        return Err(format!(
            "{} belongs to another user (uid {})",
            p.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by other users (mode {:o})",
            p.display(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn trusted(_: &Path) -> std::result::Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_directory_gets_every_file_and_is_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let parent = tmp.path().join("cache");
        let a = install_in(&parent).unwrap();
        assert!(a.ends_with(dir_name()), "{}", a.display());
        assert!(is_complete(&a));
        let main = std::fs::read_to_string(a.join("nenyax_bridge/__main__.py")).unwrap();
        assert!(main.contains("open_channel"), "{main}");
        assert_eq!(install_in(&parent).unwrap(), a);
        // Nothing but the package is left behind.
        let names: Vec<_> = std::fs::read_dir(&parent)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(dir_name())]);
    }

    #[test]
    fn a_damaged_copy_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let a = install_in(tmp.path()).unwrap();
        std::fs::write(a.join("nenyax_bridge/protocol.py"), "raise SystemExit(3)\n").unwrap();
        assert!(!is_complete(&a));
        assert_eq!(install_in(tmp.path()).unwrap(), a);
        assert!(is_complete(&a));
    }

    #[test]
    fn concurrent_writers_all_get_the_one_complete_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let parent = tmp.path().to_path_buf();
        let got: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| install_in(&parent).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|d| d == &got[0]), "{got:?}");
        assert!(is_complete(&got[0]));
        assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 1);
    }

    #[test]
    fn an_unwritable_cache_falls_back_and_none_at_all_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        // A file where the directory should be: not writable, whoever runs the test (root too).
        let blocked = tmp.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let fallback = tmp.path().join("tmp");
        let d = install(&[blocked.join("nenyax"), fallback.clone()]).unwrap();
        assert!(d.starts_with(&fallback), "{}", d.display());
        let e = install(&[blocked.join("a"), blocked.join("b")]).unwrap_err();
        assert_eq!(e.kind(), "DriverUnavailable");
        let msg = e.to_string();
        assert!(
            msg.contains(&blocked.join("a").display().to_string())
                && msg.contains(&blocked.join("b").display().to_string())
                && msg.contains("XDG_CACHE_HOME"),
            "{msg}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = install_in(&open).unwrap_err();
        assert!(e.contains("writable by other users"), "{e}");
    }

    #[test]
    fn every_file_of_the_package_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bridge/py");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir.join(MODULE))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .map(|n| format!("{MODULE}/{n}"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add new modules to FILES");
    }
}
