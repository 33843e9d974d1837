//! __NAME__: a Nenyax sandbox backend plugin in Rust, at process isolation.
//!
//! Nenyax loads this shared library (listed in the plugins config with `kind = "sandbox"`),
//! calls `nenyax_plugin_entry` for its descriptors, and uses it wherever a sandbox backend is
//! named: `nenyax sandbox-check __NAME__`, `harbor:DIR?backend=__NAME__`, `{"backend":
//! "__NAME__"}` in the C ABI's sandbox options. The library never links libnenyax: the types
//! below mirror include/nenyax.h (plugin ABI version 1, sandbox vtable version 1), and Nenyax
//! refuses a library whose versions differ from its own. The wire formats are in
//! docs/plugins-abi.md, "The sandbox vtable".
//!
//! What it does is what Nenyax's own `process` backend does: each sandbox is a host temporary
//! directory holding its private directories (sandbox path `/app/x` is `<dir>/app/x`), and each
//! command runs in a new session with rlimits, as uid/gid 65534 when the host runs as root,
//! with a scrubbed environment, its output capped, a wall timeout that kills its process group,
//! and afterwards every process still carrying `NENYAX_SANDBOX=<id>` is killed (that is how a
//! `setsid` child that left the group is caught). Commands see the host's file system: this is
//! process isolation, not a jail. To make it a different backend, replace `Sandbox::exec`
//! (e.g. run the command over SSH or in a VM) and the file functions, and declare the level you
//! then provide in `VTABLE.level`.

use serde_json::{json, Map, Value};
use std::ffi::{c_char, c_void, CStr, CString};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// NENYAX_PLUGIN_ABI_VERSION of the header this plugin was written against.
const PLUGIN_ABI_VERSION: u32 = 1;
/// NENYAX_PLUGIN_KIND_SANDBOX.
const KIND_SANDBOX: u32 = 2;
/// NENYAX_SANDBOX_VTABLE_VERSION.
const SANDBOX_VTABLE_VERSION: u32 = 1;
/// NENYAX_ISOLATION_PROCESS: a process group limited on the host.
const ISOLATION_PROCESS: u32 = 1;
/// NENYAX_PLUGIN_THREAD_SAFE: a sandbox is immutable once made, so calls may overlap (a
/// terminal agent runs commands in one sandbox at once, which Nenyax requires of sandboxes).
const THREAD_SAFE: u32 = 1;

/// PATH of every command; the host's own is never passed on.
const BASE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The uid/gid commands run as when the host runs as root (`nobody`).
const SANDBOX_UID: u32 = 65534;
/// The private directories when the configuration names none.
const DEFAULT_DIRS: [&str; 5] = ["app", "tests", "logs", "tmp", "solution"];
/// How long output may still arrive after a command ended (a pipe held by a killed child).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// nenyax_plugin_out_t: where a callback writes its result or error text.
#[repr(C)]
pub struct Out {
    ctx: *mut c_void,
    write: Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *const c_char, len: usize)>,
}

/// A callback on one file path of a sandbox.
type PathFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *const c_char, *const Out) -> i32;

/// nenyax_sandbox_vtable_t.
#[repr(C)]
pub struct SandboxVtable {
    version: u32,
    level: u32,
    ready: Option<unsafe extern "C" fn(*mut c_void, *const Out) -> i32>,
    create: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *const c_char,
            usize,
            *mut *mut c_void,
            *const Out,
        ) -> i32,
    >,
    exec: Option<
        unsafe extern "C" fn(*mut c_void, *mut c_void, *const c_char, usize, *const Out) -> i32,
    >,
    put: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *mut c_void,
            *const c_char,
            *const u8,
            usize,
            u32,
            *const Out,
        ) -> i32,
    >,
    get: Option<PathFn>,
    list: Option<PathFn>,
    remove: Option<PathFn>,
    fork:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void, *const Out) -> i32>,
    url: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u16, *const Out) -> i32>,
    destroy: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
    drop: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// nenyax_plugin_t: one plugin this library provides.
#[repr(C)]
pub struct Plugin {
    abi_version: u32,
    kind: u32,
    kind_version: u32,
    flags: u32,
    name: *const c_char,
    version: *const c_char,
    vtable: *const c_void,
    user_data: *mut c_void,
}

/// The descriptors are immutable statics, so sharing them between threads is sound.
struct Plugins([Plugin; 1]);
unsafe impl Sync for Plugins {}

static VTABLE: SandboxVtable = SandboxVtable {
    version: SANDBOX_VTABLE_VERSION,
    level: ISOLATION_PROCESS,
    ready: Some(ready),
    create: Some(create),
    exec: Some(exec),
    put: Some(put),
    get: Some(get),
    list: Some(list),
    remove: Some(remove),
    fork: Some(fork),
    url: Some(url),
    destroy: Some(destroy),
    drop: None,
};

static PLUGINS: Plugins = Plugins([Plugin {
    abi_version: PLUGIN_ABI_VERSION,
    kind: KIND_SANDBOX,
    kind_version: SANDBOX_VTABLE_VERSION,
    flags: THREAD_SAFE,
    name: c"__NAME__".as_ptr(),
    version: c"0.1.0".as_ptr(),
    vtable: &VTABLE as *const SandboxVtable as *const c_void,
    user_data: std::ptr::null_mut(),
}]);

/// The plugin's name, as the plugins config lists it; messages start with it.
const NAME: &str = "__NAME__";

/// Forks get ids of their own: their processes must not carry their parent's marker.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// A configuration's limits (`null`: unlimited).
#[derive(Clone, Copy, Default)]
struct Limits {
    cpu_s: Option<u64>,
    memory_bytes: Option<u64>,
    open_files: Option<u64>,
    processes: Option<u64>,
    file_size_bytes: Option<u64>,
    wall_s: Option<f64>,
    output_bytes: Option<usize>,
}

/// What the child sets between fork and exec: plain numbers, so that nothing there allocates.
#[derive(Clone, Copy)]
struct ChildSetup {
    limits: Limits,
    run_as: Option<(u32, u32)>,
}

/// One sandbox. Only the count of running commands changes after `create`, so concurrent
/// calls need no other lock.
struct Sandbox {
    /// The host's id for it, the value of every command's `NENYAX_SANDBOX`.
    id: String,
    /// Its host directory, holding one directory per private directory.
    dir: PathBuf,
    /// The configuration as given, for forks.
    config: Value,
    workdir: String,
    private_dirs: Vec<String>,
    /// Variables of every command (the host also merges them into each request's `env`).
    env: Map<String, Value>,
    limits: Limits,
    /// Commands running now. Every process of the sandbox carries the same marker, so the sweep
    /// for detached children waits until none runs: a short command must not kill a long one
    /// started beside it (a terminal agent does that).
    running: Mutex<usize>,
}

/// One running command of a sandbox; when the last one ends, what is left is swept.
struct Running<'a>(&'a Sandbox);

impl<'a> Running<'a> {
    /// Count a command in before it starts: a sweep in progress finishes first, so it cannot
    /// kill the new command.
    fn start(sb: &'a Sandbox) -> Running<'a> {
        *sb.running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Running(sb)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut n = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            // Under the lock, so that no command starts during the sweep.
            kill_marked(&self.0.id);
        }
    }
}

type Result<T> = std::result::Result<T, String>;

/// The uid/gid commands run as: `nobody` when the host is root, else the host's own user.
fn run_as() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } == 0).then_some((SANDBOX_UID, SANDBOX_UID))
}

/// Give a file to the sandbox user, so that commands can write what the host put there.
fn chown(p: &Path) -> Result<()> {
    if let Some((u, g)) = run_as() {
        std::os::unix::fs::lchown(p, Some(u), Some(g))
            .map_err(|e| format!("{NAME}: could not chown {}: {e}", p.display()))?;
    }
    Ok(())
}

/// An optional non-negative integer field: absent and `null` are `None`.
fn limit(v: &Value, key: &str) -> Result<Option<u64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_u64().map(Some).ok_or_else(|| {
            format!("{NAME}: limits.{key} must be a non-negative integer or null, not {x}")
        }),
    }
}

/// An optional number of seconds: absent and `null` are `None`.
fn seconds(v: &Value, key: &str) -> Result<Option<f64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(s)),
            _ => Err(format!(
                "{NAME}: {key} must be a non-negative number of seconds or null, not {x}"
            )),
        },
    }
}

/// A string-to-string object (`env`), or an error naming the field.
fn string_map(v: &Value, what: &str) -> Result<Map<String, Value>> {
    match v {
        Value::Null => Ok(Map::new()),
        Value::Object(m) if m.values().all(Value::is_string) => Ok(m.clone()),
        _ => Err(format!(
            "{NAME}: {what} must be an object of strings, not {v}"
        )),
    }
}

/// A fresh directory under the host's temporary directory, readable by the sandbox user.
fn make_dir() -> Result<PathBuf> {
    let template = std::env::temp_dir().join(format!("nenyax-{NAME}-XXXXXX"));
    let mut bytes = CString::new(template.as_os_str().as_bytes())
        .map_err(|_| format!("{NAME}: the temporary directory's path has a NUL byte"))?
        .into_bytes_with_nul();
    // SAFETY: mkdtemp rewrites the XXXXXX of a NUL-terminated buffer we own.
    if unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) }.is_null() {
        return Err(format!(
            "{NAME}: could not create a directory in {}: {}",
            std::env::temp_dir().display(),
            std::io::Error::last_os_error()
        ));
    }
    bytes.pop();
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes));
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{NAME}: could not chmod {}: {e}", dir.display()))?;
    Ok(dir)
}

impl Sandbox {
    /// Make a sandbox from its configuration JSON; `id` overrides the configuration's (forks).
    fn create(config: Value, id: Option<String>) -> Result<Sandbox> {
        if !config.is_object() {
            return Err(format!(
                "{NAME}: the sandbox configuration must be a JSON object, not {config}"
            ));
        }
        let id = match id {
            Some(id) => id,
            None => match config.get("id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() && !id.contains(['\0', '=']) => id.to_string(),
                _ => {
                    return Err(format!(
                        "{NAME}: the configuration needs an `id` (a non-empty string without \
                         `=`), which marks the sandbox's processes"
                    ))
                }
            },
        };
        let private_dirs: Vec<String> = match config.get("private_dirs") {
            None | Some(Value::Null) => DEFAULT_DIRS.iter().map(|d| d.to_string()).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|d| match d.as_str() {
                    Some(d) if !d.is_empty() && !d.contains('/') && !d.starts_with('.') => {
                        Ok(d.to_string())
                    }
                    _ => Err(format!(
                        "{NAME}: private_dirs holds `{d}`: each must be one plain top-level \
                         name such as \"app\""
                    )),
                })
                .collect::<Result<_>>()?,
            Some(x) => {
                return Err(format!(
                    "{NAME}: private_dirs must be an array of names, not {x}"
                ))
            }
        };
        let workdir = config
            .get("workdir")
            .and_then(Value::as_str)
            .unwrap_or("/app")
            .to_string();
        let env = string_map(config.get("env").unwrap_or(&Value::Null), "env")?;
        let l = config.get("limits").cloned().unwrap_or(Value::Null);
        let limits = Limits {
            cpu_s: limit(&l, "cpu_s")?,
            memory_bytes: limit(&l, "memory_bytes")?,
            open_files: limit(&l, "open_files")?,
            processes: limit(&l, "processes")?,
            file_size_bytes: limit(&l, "file_size_bytes")?,
            wall_s: seconds(&l, "wall_s")?,
            output_bytes: limit(&l, "output_bytes")?.map(|n| n as usize),
        };
        let dir = make_dir()?;
        let sb = Sandbox {
            id,
            dir,
            config,
            workdir,
            private_dirs,
            env,
            limits,
            running: Mutex::new(0),
        };
        // From here on, dropping `sb` on an error would leak the directory: remove it.
        let made = (|| {
            for d in &sb.private_dirs {
                let p = sb.dir.join(d);
                fs::create_dir(&p)
                    .map_err(|e| format!("{NAME}: could not create {}: {e}", p.display()))?;
                chown(&p)?;
            }
            if sb.private_dirs.iter().any(|d| d == "tmp") {
                let tmp = sb.dir.join("tmp");
                fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777))
                    .map_err(|e| format!("{NAME}: could not chmod {}: {e}", tmp.display()))?;
            }
            Ok(())
        })();
        match made {
            Ok(()) => Ok(sb),
            Err(e) => {
                sb.remove_files();
                Err(e)
            }
        }
    }

    /// Where a sandbox path lives on the host. Refuses `..`, paths outside the private
    /// directories, and symlinks on the way (a command could point one at the host's files,
    /// which the host, perhaps root, would then read or write); `last_may_be_link` allows the last
    /// component to be a link (`remove` deletes the link itself).
    fn host_path(&self, path: &str, last_may_be_link: bool) -> Result<PathBuf> {
        let full = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.workdir.trim_end_matches('/'))
        };
        let mut parts = Vec::new();
        for c in Path::new(&full).components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(s) => parts.push(s),
                _ => {
                    return Err(format!(
                        "{NAME}: sandbox path `{path}` uses `..`; give a path inside {}",
                        self.dirs_in_words()
                    ))
                }
            }
        }
        match parts.first() {
            Some(first)
                if self
                    .private_dirs
                    .iter()
                    .any(|d| first.as_bytes() == d.as_bytes()) => {}
            _ => {
                return Err(format!(
                    "{NAME}: sandbox path `{path}` is outside the sandbox's private \
                     directories; use {}",
                    self.dirs_in_words()
                ))
            }
        }
        let mut out = self.dir.clone();
        let n = parts.len();
        for (i, p) in parts.into_iter().enumerate() {
            out.push(p);
            let is_link = fs::symlink_metadata(&out)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if is_link && !(last_may_be_link && i + 1 == n) {
                return Err(format!(
                    "{NAME}: sandbox path `{path}` goes through a symbolic link; the host \
                     does not follow links a command made"
                ));
            }
        }
        Ok(out)
    }

    /// The private directories as `/app, /tests, ...` for messages.
    fn dirs_in_words(&self) -> String {
        self.private_dirs
            .iter()
            .map(|d| format!("/{d}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Run one command (the request JSON of docs/plugins-abi.md) and describe how it ended.
    fn exec(&self, req: &Value) -> Result<Value> {
        // An empty `argv` counts as none: Nenyax sends `"argv": []` beside a `shell`.
        let argv = req
            .get("argv")
            .filter(|a| a.as_array().is_none_or(|a| !a.is_empty()));
        let argv: Vec<String> = match (argv, req.get("shell")) {
            (Some(Value::Array(a)), None | Some(Value::Null)) => a
                .iter()
                .map(|s| {
                    s.as_str()
                        .map(String::from)
                        .ok_or_else(|| format!("{NAME}: argv holds {s}, not a string"))
                })
                .collect::<Result<_>>()?,
            (None | Some(Value::Null), Some(Value::String(line))) => {
                let sh = if Path::new("/bin/bash").exists() {
                    "/bin/bash"
                } else {
                    "/bin/sh"
                };
                vec![sh.into(), "-c".into(), line.clone()]
            }
            _ => {
                return Err(format!(
                    "{NAME}: an exec request needs exactly one of `argv` (a non-empty array) \
                     or `shell` (a string)"
                ))
            }
        };
        let cwd = req
            .get("cwd")
            .and_then(Value::as_str)
            .unwrap_or(&self.workdir);
        let host_cwd = self.host_path(cwd, false)?;
        if !host_cwd.is_dir() {
            return Err(format!(
                "{NAME}: working directory `{cwd}` does not exist in the sandbox; create it \
                 first (put a file in it)"
            ));
        }
        let timeout = match seconds(req, "timeout_s")? {
            Some(s) => Some(s),
            None => self.limits.wall_s,
        }
        .map(Duration::from_secs_f64);
        let cap = match req.get("output_bytes").and_then(Value::as_u64) {
            Some(n) => n as usize,
            None => self.limits.output_bytes.unwrap_or(usize::MAX),
        };
        let stdin = match req.get("stdin") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => s.clone().into_bytes(),
            Some(x) => return Err(format!("{NAME}: stdin must be a string or null, not {x}")),
        };
        let mut cmd = Command::new(&argv[0]);
        let tmp = self.dir.join("tmp");
        // Nothing of the host's environment: a base of our own, then the request's variables
        // (the sandbox's and the command's, merged by the host).
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", BASE_PATH)
            .env("HOME", &tmp)
            .env("TMPDIR", &tmp)
            .env("LANG", "C.UTF-8");
        for (k, v) in self
            .env
            .iter()
            .chain(string_map(req.get("env").unwrap_or(&Value::Null), "env")?.iter())
        {
            cmd.env(k, v.as_str().unwrap_or_default());
        }
        // Last, so that no request can unmark its processes and outlive its command.
        cmd.env("NENYAX_SANDBOX", &self.id)
            .current_dir(&host_cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let setup = ChildSetup {
            limits: self.limits,
            run_as: run_as(),
        };
        // SAFETY: the closure only makes system calls on plain numbers copied beforehand (no
        // allocation, no locks), which is what may run between fork and exec.
        unsafe {
            cmd.pre_exec(move || in_child(&setup));
        }
        let running = Running::start(self);
        let t0 = Instant::now();
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "{NAME}: could not start `{}` in sandbox {}: {e}",
                argv[0], self.id
            )
        })?;
        let pid = child.id() as libc::pid_t;
        let rx = capture(&mut child, cap);
        match child.stdin.take() {
            // A thread, so that a command that never reads its input cannot stall us.
            Some(pipe) if !stdin.is_empty() => {
                std::thread::spawn(move || feed(pipe, &stdin));
            }
            // Dropping the pipe closes it: the command reads end of input.
            _ => {}
        }
        let mut timed_out = false;
        let (status, usage) = loop {
            if let Some(done) = reap(pid, false) {
                break done;
            }
            if timeout.is_some_and(|t| t0.elapsed() >= t) {
                timed_out = true;
                // SAFETY: kill has no memory preconditions; the group is the command's session.
                unsafe { libc::killpg(pid, libc::SIGKILL) };
                break reap(pid, true).unwrap_or((0, None));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // What the command left in its group goes too, and (once no other command of the
        // sandbox runs) what it detached with our marker.
        // SAFETY: as above; the group exists while any member does, so its id is not reused.
        unsafe { libc::killpg(pid, libc::SIGKILL) };
        drop(running);
        let (out, dropped) = collect(&rx, OUTPUT_GRACE);
        let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
        let exit_code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        let killed = if timed_out {
            Some("timeout")
        } else {
            match signal {
                Some(libc::SIGXCPU) => Some("cpu_limit"),
                Some(libc::SIGXFSZ) => Some("file_size_limit"),
                // The hard CPU limit (a second past the soft one) ends it by SIGKILL.
                Some(libc::SIGKILL)
                    if self
                        .limits
                        .cpu_s
                        .is_some_and(|c| usage.is_some_and(|u| u >= c as f64)) =>
                {
                    Some("cpu_limit")
                }
                Some(_) => Some("signal"),
                None => None,
            }
        };
        let [stdout, stderr] = out;
        Ok(json!({
            "exit_code": exit_code,
            "signal": signal,
            "stdout": String::from_utf8_lossy(&stdout),
            "stderr": String::from_utf8_lossy(&stderr),
            "dropped_bytes": dropped,
            "duration_s": t0.elapsed().as_secs_f64(),
            "killed": killed,
        }))
    }

    /// Write a file with `mode`, making its parent directories (all owned by the sandbox user).
    fn put(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let host = self.host_path(path, false)?;
        let io = |what: &str, e: std::io::Error| format!("{NAME}: could not {what} {path}: {e}");
        if let Some(parent) = host.parent() {
            let mut missing = Vec::new();
            let mut cur = parent.to_path_buf();
            while !cur.exists() {
                missing.push(cur.clone());
                if !cur.pop() {
                    break;
                }
            }
            for d in missing.into_iter().rev() {
                fs::create_dir(&d).map_err(|e| io("create the directories of", e))?;
                chown(&d)?;
            }
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode & 0o7777)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&host)
            .map_err(|e| io("write", e))?;
        f.write_all(data).map_err(|e| io("write", e))?;
        // The mode asked for, whatever the umask took from it at creation.
        f.set_permissions(fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| io("chmod", e))?;
        chown(&host)
    }

    /// A file's bytes.
    fn get(&self, path: &str) -> Result<Vec<u8>> {
        let host = self.host_path(path, false)?;
        fs::read(&host).map_err(|e| format!("{NAME}: could not read sandbox file {path}: {e}"))
    }

    /// A directory's entries, sorted by name.
    fn list(&self, path: &str) -> Result<Value> {
        let host = self.host_path(path, false)?;
        let io = |e: std::io::Error| format!("{NAME}: could not list {path}: {e}");
        let mut out = Vec::new();
        for e in fs::read_dir(&host).map_err(io)? {
            let e = e.map_err(io)?;
            let md = fs::symlink_metadata(e.path()).map_err(io)?;
            out.push((
                e.file_name().to_string_lossy().into_owned(),
                md.is_dir(),
                md.len(),
            ));
        }
        out.sort();
        Ok(Value::Array(
            out.into_iter()
                .map(|(name, dir, size)| json!({"name": name, "dir": dir, "size": size}))
                .collect(),
        ))
    }

    /// Remove a file, link or directory tree; a missing path is not an error.
    fn remove(&self, path: &str) -> Result<()> {
        let host = self.host_path(path, true)?;
        match fs::symlink_metadata(&host) {
            Ok(md) if md.is_dir() => fs::remove_dir_all(&host),
            Ok(_) => fs::remove_file(&host),
            Err(_) => Ok(()),
        }
        .map_err(|e| format!("{NAME}: could not remove {path}: {e}"))
    }

    /// A new sandbox with the same configuration and a copy of the files (nothing running).
    fn fork(&self) -> Result<Sandbox> {
        let id = format!("{}-f{}", self.id, FORKS.fetch_add(1, Ordering::Relaxed));
        let child = Sandbox::create(self.config.clone(), Some(id))?;
        for d in &self.private_dirs {
            if let Err(e) = copy_tree(&self.dir.join(d), &child.dir.join(d)) {
                child.destroy();
                return Err(e);
            }
        }
        Ok(child)
    }

    /// Kill what is left and remove the files.
    fn destroy(self) {
        kill_marked(&self.id);
        self.remove_files();
    }

    /// Remove the directory; a command may have taken the write bit off one of its
    /// directories, so give it back and retry once.
    fn remove_files(&self) {
        if fs::remove_dir_all(&self.dir).is_err() {
            make_writable(&self.dir);
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Give every directory under `p` its owner's rwx back (not following links).
fn make_writable(p: &Path) {
    if let Ok(md) = fs::symlink_metadata(p) {
        if md.is_dir() {
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(md.mode() | 0o700));
            if let Ok(entries) = fs::read_dir(p) {
                for e in entries.flatten() {
                    make_writable(&e.path());
                }
            }
        }
    }
}

/// Copy a directory's contents (files, directories, links as links) into another.
fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        format!("{NAME}: fork could not {what} {}: {e}", p.display())
    };
    for e in fs::read_dir(src).map_err(|e| io("read", src, e))? {
        let e = e.map_err(|e| io("read", src, e))?;
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let md = fs::symlink_metadata(&from).map_err(|e| io("stat", &from, e))?;
        if md.file_type().is_symlink() {
            let target = fs::read_link(&from).map_err(|e| io("read the link", &from, e))?;
            std::os::unix::fs::symlink(target, &to).map_err(|e| io("link", &to, e))?;
        } else if md.is_dir() {
            fs::create_dir(&to).map_err(|e| io("create", &to, e))?;
            copy_tree(&from, &to)?;
            fs::set_permissions(&to, fs::Permissions::from_mode(md.mode() & 0o7777))
                .map_err(|e| io("chmod", &to, e))?;
        } else if md.is_file() {
            fs::copy(&from, &to).map_err(|e| io("copy", &from, e))?;
        } else {
            // A FIFO or socket a command made: nothing to copy, and opening a FIFO would block.
            continue;
        }
        chown(&to)?;
    }
    Ok(())
}

/// Write a command's input. A command that exits without reading it breaks the pipe, and a
/// host written in C may not ignore SIGPIPE as Rust programs do: the signal is blocked on this
/// thread (it is sent to the writing thread), so the write fails with EPIPE instead, and the
/// pending signal is taken off before the thread ends.
fn feed(mut pipe: std::process::ChildStdin, data: &[u8]) {
    // SAFETY: signal sets are plain data; the calls change this thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let broke = pipe.write_all(data).is_err();
        drop(pipe);
        if broke {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
        }
    }
}

/// Between fork and exec: a new session (so the timeout can kill the whole group), the
/// limits, then the sandbox user. Only system calls on `setup`'s numbers: nothing allocates.
fn in_child(setup: &ChildSetup) -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    // SAFETY: plain system calls on integers and a stack struct.
    unsafe {
        if libc::setsid() < 0 {
            return fail();
        }
        let l = &setup.limits;
        let set = |res, soft: u64, hard: u64| {
            let r = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            libc::setrlimit(res, &r) == 0
        };
        // The CPU limit's soft end sends SIGXCPU; its hard end, a second later, SIGKILL.
        let ok = l.cpu_s.is_none_or(|c| set(libc::RLIMIT_CPU, c, c + 1))
            && l.memory_bytes.is_none_or(|m| set(libc::RLIMIT_AS, m, m))
            && l.open_files.is_none_or(|n| set(libc::RLIMIT_NOFILE, n, n))
            && l.processes.is_none_or(|n| set(libc::RLIMIT_NPROC, n, n))
            && l.file_size_bytes
                .is_none_or(|n| set(libc::RLIMIT_FSIZE, n, n));
        if !ok {
            return fail();
        }
        if let Some((u, g)) = setup.run_as {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(g) != 0
                || libc::setuid(u) != 0
            {
                return fail();
            }
        }
    }
    Ok(())
}

/// Wait for `pid` (blocking or not): its wait status and the CPU seconds it used, or `None`
/// while it runs.
fn reap(pid: libc::pid_t, block: bool) -> Option<(i32, Option<f64>)> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data that wait4 fills.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: wait4 writes the two locals.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if r == pid {
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return Some((status, Some(secs(usage.ru_utime) + secs(usage.ru_stime))));
        }
        if r == 0 {
            return None;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Not our child any more (someone else reaped it): report it ended, status unknown.
            return Some((0, None));
        }
    }
}

/// SIGKILL every process on this host whose environment holds `NENYAX_SANDBOX=<id>`: children
/// that left the command's process group (setsid, daemons) still carry the marker.
fn kill_marked(id: &str) {
    let needle = format!("NENYAX_SANDBOX={id}\0");
    // A child caught inside execve can show an empty environment for a moment, so stop only
    // after two passes in a row found nothing.
    let mut quiet = 0;
    for _ in 0..10 {
        if kill_marked_once(needle.as_bytes()) == 0 {
            quiet += 1;
            if quiet == 2 {
                break;
            }
        } else {
            quiet = 0;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn kill_marked_once(needle: &[u8]) -> usize {
    let Ok(dir) = fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id();
    let mut killed = 0;
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(env) = fs::read(e.path().join("environ")) {
            // The environment starts a variable or follows a NUL: match whole variables only.
            let hit = env.starts_with(needle)
                || env
                    .windows(needle.len() + 1)
                    .any(|w| w[0] == 0 && &w[1..] == needle);
            // SAFETY: kill has no memory preconditions.
            if hit && unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
    }
    killed
}

/// Read stdout and stderr on two threads, keeping `cap` bytes of each and counting the rest;
/// each sends `(stream, kept, dropped)` when its pipe closes. Draining past the cap keeps the
/// command from blocking on a full pipe.
fn capture(child: &mut std::process::Child, cap: usize) -> mpsc::Receiver<(usize, Vec<u8>, u64)> {
    let (tx, rx) = mpsc::channel();
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    for (i, stream) in streams.into_iter().enumerate() {
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
    rx
}

/// Both streams as kept, and the bytes dropped, waiting at most `grace` after the command
/// ended (a killed child's pipe closes at once; a stranger holding one must not stall us).
fn collect(rx: &mpsc::Receiver<(usize, Vec<u8>, u64)>, grace: Duration) -> ([Vec<u8>; 2], u64) {
    let mut out = [Vec::new(), Vec::new()];
    let mut dropped = 0;
    let until = Instant::now() + grace;
    for _ in 0..2 {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok((i, kept, d)) => {
                out[i] = kept;
                dropped += d;
            }
            Err(_) => break,
        }
    }
    (out, dropped)
}

// ---- The C ABI: thin wrappers that parse, call the methods above, and write the result. ----

unsafe fn write(out: *const Out, bytes: &[u8]) {
    if let Some(out) = out.as_ref() {
        if let Some(w) = out.write {
            w(out.ctx, bytes.as_ptr().cast(), bytes.len());
        }
    }
}

/// Write `result` to `out`: 0 with the bytes on success, 1 with the message on failure. No
/// panic may unwind into the host, so this catches them.
unsafe fn reply(out: *const Out, f: impl FnOnce() -> Result<Vec<u8>>) -> i32 {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(format!("{NAME} panicked (a bug in the plugin)")));
    match result {
        Ok(v) => {
            write(out, &v);
            0
        }
        Err(msg) => {
            write(out, msg.as_bytes());
            1
        }
    }
}

unsafe fn json_in(ptr: *const c_char, len: usize, what: &str) -> Result<Value> {
    if ptr.is_null() {
        return Err(format!("{NAME}: no {what} JSON was given"));
    }
    serde_json::from_slice(std::slice::from_raw_parts(ptr.cast::<u8>(), len))
        .map_err(|e| format!("{NAME}: the {what} is not valid JSON: {e}"))
}

unsafe fn path_in<'a>(ptr: *const c_char) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(format!("{NAME}: no path was given"));
    }
    CStr::from_ptr(ptr)
        .to_str()
        .map_err(|_| format!("{NAME}: the path is not UTF-8"))
}

unsafe fn sandbox<'a>(ptr: *mut c_void) -> Result<&'a Sandbox> {
    ptr.cast::<Sandbox>()
        .as_ref()
        .ok_or_else(|| format!("{NAME}: no sandbox handle was given"))
}

/// The vtable's `ready`: the marker sweep needs Linux's /proc.
unsafe extern "C" fn ready(_user_data: *mut c_void, out: *const Out) -> i32 {
    reply(out, || {
        fs::read("/proc/self/environ")
            .map(|_| Vec::new())
            .map_err(|e| {
                format!(
                    "{NAME} needs Linux's /proc to find a command's detached children (reading \
                 /proc/self/environ: {e})"
                )
            })
    })
}

/// The vtable's `create`.
unsafe extern "C" fn create(
    _user_data: *mut c_void,
    config: *const c_char,
    len: usize,
    handle: *mut *mut c_void,
    out: *const Out,
) -> i32 {
    reply(out, || {
        if handle.is_null() {
            return Err(format!("{NAME}: no place for the sandbox handle was given"));
        }
        let sb = Sandbox::create(json_in(config, len, "sandbox configuration")?, None)?;
        *handle = Box::into_raw(Box::new(sb)).cast();
        Ok(Vec::new())
    })
}

/// The vtable's `exec`.
unsafe extern "C" fn exec(
    _user_data: *mut c_void,
    handle: *mut c_void,
    request: *const c_char,
    len: usize,
    out: *const Out,
) -> i32 {
    reply(out, || {
        let r = sandbox(handle)?.exec(&json_in(request, len, "exec request")?)?;
        Ok(r.to_string().into_bytes())
    })
}

/// The vtable's `put`.
unsafe extern "C" fn put(
    _user_data: *mut c_void,
    handle: *mut c_void,
    path: *const c_char,
    data: *const u8,
    len: usize,
    mode: u32,
    out: *const Out,
) -> i32 {
    reply(out, || {
        let data = if len == 0 {
            &[][..]
        } else if data.is_null() {
            return Err(format!("{NAME}: put was given no data but a length"));
        } else {
            std::slice::from_raw_parts(data, len)
        };
        sandbox(handle)?.put(path_in(path)?, data, mode)?;
        Ok(Vec::new())
    })
}

/// The vtable's `get`.
unsafe extern "C" fn get(
    _user_data: *mut c_void,
    handle: *mut c_void,
    path: *const c_char,
    out: *const Out,
) -> i32 {
    reply(out, || sandbox(handle)?.get(path_in(path)?))
}

/// The vtable's `list`.
unsafe extern "C" fn list(
    _user_data: *mut c_void,
    handle: *mut c_void,
    path: *const c_char,
    out: *const Out,
) -> i32 {
    reply(out, || {
        Ok(sandbox(handle)?
            .list(path_in(path)?)?
            .to_string()
            .into_bytes())
    })
}

/// The vtable's `remove`.
unsafe extern "C" fn remove(
    _user_data: *mut c_void,
    handle: *mut c_void,
    path: *const c_char,
    out: *const Out,
) -> i32 {
    reply(out, || {
        sandbox(handle)?.remove(path_in(path)?)?;
        Ok(Vec::new())
    })
}

/// The vtable's `fork`.
unsafe extern "C" fn fork(
    _user_data: *mut c_void,
    handle: *mut c_void,
    child: *mut *mut c_void,
    out: *const Out,
) -> i32 {
    reply(out, || {
        if child.is_null() {
            return Err(format!(
                "{NAME}: no place for the forked sandbox's handle was given"
            ));
        }
        let c = sandbox(handle)?.fork()?;
        *child = Box::into_raw(Box::new(c)).cast();
        Ok(Vec::new())
    })
}

/// The vtable's `url`: commands share the host's network, so a port inside is the host's.
unsafe extern "C" fn url(
    _user_data: *mut c_void,
    handle: *mut c_void,
    port: u16,
    out: *const Out,
) -> i32 {
    reply(out, || {
        sandbox(handle)?;
        Ok(format!("http://127.0.0.1:{port}").into_bytes())
    })
}

/// The vtable's `destroy`: called once per handle, which is dead afterwards.
unsafe extern "C" fn destroy(_user_data: *mut c_void, handle: *mut c_void) {
    if handle.is_null() {
        return;
    }
    let sb = Box::from_raw(handle.cast::<Sandbox>());
    // Nothing may unwind into the host; a failure here leaves at worst a temporary directory.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sb.destroy()));
}

/// The library's one entry point: the plugins it provides.
///
/// # Safety
/// `plugins` and `count` must be valid for writes (Nenyax passes its own locals).
#[no_mangle]
pub unsafe extern "C" fn nenyax_plugin_entry(
    _host_abi_version: u32,
    plugins: *mut *const Plugin,
    count: *mut usize,
) -> i32 {
    if plugins.is_null() || count.is_null() {
        return 1;
    }
    *plugins = PLUGINS.0.as_ptr();
    *count = PLUGINS.0.len();
    0
}
