//! A sandbox backend from a library plugin (or one a host registered through the C ABI): one
//! more backend beside process, jail and container, picked by its name wherever a backend is
//! (`nenyax sandbox-check NAME`, `harbor:DIR?backend=NAME`, `{"backend": NAME}`). Everything
//! crosses as JSON (docs/plugins-abi.md), checked here, so a malformed reply is a clean
//! `SandboxError` naming the plugin; a crash inside a call is named on stderr (crash.rs).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CString};

use serde::{Deserialize, Serialize};

use crate::contract::Isolation;
use crate::error::{Error, Result};
use crate::plugins::abi::{clip, failure_text, invoke, isolation_from_code};
use crate::plugins::abi::{
    nenyax_plugin_out_t, nenyax_plugin_t, nenyax_sandbox_vtable_t, PluginInfo, PLUGIN_THREAD_SAFE,
};
use crate::plugins::crash::{in_plugin, CrashMessage};
use crate::plugins::kinds::SANDBOX_VTABLE_VERSION;
use crate::sandbox::{Entry, Exec, ExecResult, Killed, SandboxConfig};

type ReadyFn = unsafe extern "C" fn(*mut c_void, *const nenyax_plugin_out_t) -> i32;
type CreateFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *mut *mut c_void,
    *const nenyax_plugin_out_t,
) -> i32;
type ExecFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *const c_char,
    usize,
    *const nenyax_plugin_out_t,
) -> i32;
type PutFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *const c_char,
    *const u8,
    usize,
    u32,
    *const nenyax_plugin_out_t,
) -> i32;
type PathFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *const c_char,
    *const nenyax_plugin_out_t,
) -> i32;
type ForkFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut *mut c_void,
    *const nenyax_plugin_out_t,
) -> i32;
type UrlFn = unsafe extern "C" fn(*mut c_void, *mut c_void, u16, *const nenyax_plugin_out_t) -> i32;
type DestroyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// A sandbox backend implemented by a plugin's `nenyax_sandbox_vtable_t`.
pub struct LibrarySandbox {
    info: PluginInfo,
    /// The name for `BackendKind::name`, which hands out `&'static str`: plugins are never
    /// unloaded, so leaking one small string per plugin is the whole cost.
    name: &'static str,
    /// Its library's path (or "registered through the C ABI"), leaked for the same reason.
    source: &'static str,
    level: Isolation,
    ready: Option<ReadyFn>,
    create: CreateFn,
    exec: ExecFn,
    put: PutFn,
    get: PathFn,
    list: PathFn,
    remove: PathFn,
    fork: Option<ForkFn>,
    url: Option<UrlFn>,
    destroy: DestroyFn,
    /// Owned by the plugin, which stays loaded for the process's life.
    user_data: *mut c_void,
    crash: CrashMessage,
}

// SAFETY: sandbox plugins must declare NENYAX_PLUGIN_THREAD_SAFE (checked in `new`).
unsafe impl Send for LibrarySandbox {}
// SAFETY: as above.
unsafe impl Sync for LibrarySandbox {}

impl std::fmt::Debug for LibrarySandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibrarySandbox")
            .field("info", &self.info)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

/// The configuration a plugin's `create` gets (docs/plugins-abi.md).
#[derive(Serialize)]
struct WireConfig<'a> {
    id: &'a str,
    workdir: &'a str,
    private_dirs: Vec<&'a str>,
    network: bool,
    root: bool,
    env: &'a BTreeMap<String, String>,
    limits: WireLimits,
    image: Option<&'a str>,
    read_only_root: bool,
    keep_detached: bool,
    cpus: Option<f64>,
}

#[derive(Serialize)]
struct WireLimits {
    cpu_s: Option<u64>,
    memory_bytes: Option<u64>,
    open_files: Option<u64>,
    processes: Option<u64>,
    file_size_bytes: Option<u64>,
    wall_s: f64,
    output_bytes: usize,
}

/// One command as a plugin's `exec` gets it: everything resolved.
#[derive(Serialize)]
struct WireExec<'a> {
    argv: &'a [String],
    shell: Option<&'a str>,
    cwd: &'a str,
    env: BTreeMap<&'a str, &'a str>,
    stdin: Option<&'a str>,
    timeout_s: f64,
    output_bytes: usize,
}

/// A plugin's `exec` reply.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireResult {
    exit_code: Option<i32>,
    #[serde(default)]
    signal: Option<i32>,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    #[serde(default)]
    dropped_bytes: u64,
    #[serde(default)]
    duration_s: f64,
    #[serde(default)]
    killed: Option<Killed>,
}

impl LibrarySandbox {
    /// Check the sandbox vtable of a descriptor already checked for ABI and kind.
    ///
    /// # Safety
    /// `d.vtable` is non-NULL and points to a `nenyax_sandbox_vtable_t`.
    pub(crate) unsafe fn new(d: &nenyax_plugin_t, info: PluginInfo) -> Result<Self> {
        let whose = format!("sandbox plugin `{}` ({})", info.name, info.source);
        let vt = &*d.vtable.cast::<nenyax_sandbox_vtable_t>();
        if vt.version != SANDBOX_VTABLE_VERSION {
            return Err(Error::Config(format!(
                "{whose}: its vtable says sandbox vtable version {}; this Nenyax speaks version \
                 {SANDBOX_VTABLE_VERSION}: rebuild it against include/nenyax.h of this version",
                vt.version
            )));
        }
        if d.flags & PLUGIN_THREAD_SAFE == 0 {
            return Err(Error::Config(format!(
                "{whose} does not declare NENYAX_PLUGIN_THREAD_SAFE; a sandbox backend must take \
                 overlapping calls (a terminal agent runs commands in one sandbox at once): make \
                 it thread-safe and set the flag"
            )));
        }
        let level = isolation_from_code(vt.level).ok_or_else(|| {
            Error::Config(format!(
                "{whose}: level {} is not an isolation level; use NENYAX_ISOLATION_PROCESS (1), \
                 _JAIL (2), _CONTAINER (3) or _MICROVM (4)",
                vt.level
            ))
        })?;
        let need = |what: &str| Error::Config(format!("{whose}: the vtable's `{what}` is NULL"));
        Ok(LibrarySandbox {
            name: Box::leak(info.name.clone().into_boxed_str()),
            source: Box::leak(info.source.clone().into_boxed_str()),
            level,
            ready: vt.ready,
            create: vt.create.ok_or_else(|| need("create"))?,
            exec: vt.exec.ok_or_else(|| need("exec"))?,
            put: vt.put.ok_or_else(|| need("put"))?,
            get: vt.get.ok_or_else(|| need("get"))?,
            list: vt.list.ok_or_else(|| need("list"))?,
            remove: vt.remove.ok_or_else(|| need("remove"))?,
            fork: vt.fork,
            url: vt.url,
            destroy: vt.destroy.ok_or_else(|| need("destroy"))?,
            crash: CrashMessage::new(&info.name, &info.source, "a sandbox call"),
            user_data: d.user_data,
            info,
        })
    }

    /// The plugin's listing.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// Its name, for as long as the process lives.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Where it came from, for as long as the process lives.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The isolation it declares.
    pub fn level(&self) -> Isolation {
        self.level
    }

    /// Whether it gives `fork`.
    pub fn forks(&self) -> bool {
        self.fork.is_some()
    }

    fn whose(&self) -> String {
        format!("sandbox plugin `{}` ({})", self.info.name, self.info.source)
    }

    /// Call the plugin; the bytes it wrote, or its message as a sandbox error.
    fn call(
        &self,
        what: &str,
        f: impl FnOnce(*mut c_void, *const nenyax_plugin_out_t) -> i32,
    ) -> Result<Vec<u8>> {
        let (rc, written) = invoke(None, &self.crash, |out| f(self.user_data, out));
        if rc != 0 {
            return Err(Error::Sandbox(format!(
                "{} {what} failed (returned {rc}): {}",
                self.whose(),
                failure_text(&written)
            )));
        }
        Ok(written)
    }

    /// `Ok(())` when it can run here, else why not.
    pub fn ready(&self) -> std::result::Result<(), String> {
        let Some(ready) = self.ready else {
            return Ok(());
        };
        self.call("ready", |ud, out| unsafe { ready(ud, out) })
            .map(|_| ())
            .map_err(|e| match e {
                Error::Sandbox(m) => m,
                other => other.to_string(),
            })
    }

    /// Make a sandbox of `config` whose id is `id`.
    pub(crate) fn create(
        self: &std::sync::Arc<Self>,
        config: &SandboxConfig,
        id: &str,
        private_dirs: Vec<&str>,
    ) -> Result<PluginSandbox> {
        let l = &config.limits;
        let wire = WireConfig {
            id,
            workdir: &config.workdir,
            private_dirs,
            network: config.network,
            root: config.root,
            env: &config.env,
            limits: WireLimits {
                cpu_s: l.cpu_s,
                memory_bytes: l.memory_bytes,
                open_files: l.open_files,
                processes: l.processes,
                file_size_bytes: l.file_size_bytes,
                wall_s: l.wall.as_secs_f64(),
                output_bytes: l.output_bytes,
            },
            image: config.image.as_deref(),
            read_only_root: config.read_only_root,
            keep_detached: config.keep_detached,
            cpus: config.cpus,
        };
        let json = serde_json::to_string(&wire).expect("serialises");
        let c = CString::new(json).expect("JSON has no NUL");
        let mut handle: *mut c_void = std::ptr::null_mut();
        self.call("create", |ud, out| unsafe {
            (self.create)(ud, c.as_ptr(), c.as_bytes().len(), &mut handle, out)
        })?;
        self.adopt(handle, "create")
    }

    fn adopt(
        self: &std::sync::Arc<Self>,
        handle: *mut c_void,
        what: &str,
    ) -> Result<PluginSandbox> {
        if handle.is_null() {
            return Err(Error::Sandbox(format!(
                "{} {what} returned 0 but no sandbox handle",
                self.whose()
            )));
        }
        Ok(PluginSandbox {
            lib: self.clone(),
            handle,
        })
    }
}

/// A live sandbox of a plugin; dropping it calls the plugin's `destroy` once.
pub struct PluginSandbox {
    lib: std::sync::Arc<LibrarySandbox>,
    handle: *mut c_void,
}

// SAFETY: the plugin is thread-safe (checked at load) and the handle is its own to share.
unsafe impl Send for PluginSandbox {}
// SAFETY: as above.
unsafe impl Sync for PluginSandbox {}

impl std::fmt::Debug for PluginSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSandbox")
            .field("plugin", &self.lib.info.name)
            .finish_non_exhaustive()
    }
}

impl PluginSandbox {
    /// The backend behind it.
    pub fn plugin(&self) -> &std::sync::Arc<LibrarySandbox> {
        &self.lib
    }

    /// Run one command (`cwd` already absolute, `env` already merged with the sandbox's).
    pub(crate) fn exec(
        &self,
        exec: &Exec,
        cwd: &str,
        config: &SandboxConfig,
    ) -> Result<ExecResult> {
        let stdin = match &exec.stdin {
            None => None,
            Some(b) => Some(std::str::from_utf8(b).map_err(|_| {
                Error::Sandbox(format!(
                    "{}: stdin must be UTF-8 text for a sandbox plugin (the C ABI passes it as a \
                     JSON string); encode binary input, e.g. base64",
                    self.lib.whose()
                ))
            })?),
        };
        if exec.argv.is_empty() && exec.shell.is_none() {
            return Err(Error::Sandbox(
                "an exec needs argv or a shell command line".into(),
            ));
        }
        let env: BTreeMap<&str, &str> = config
            .env
            .iter()
            .chain(&exec.env)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let wire = WireExec {
            argv: if exec.shell.is_some() {
                &[]
            } else {
                &exec.argv
            },
            shell: exec.shell.as_deref(),
            cwd,
            env,
            stdin,
            timeout_s: exec.timeout.unwrap_or(config.limits.wall).as_secs_f64(),
            output_bytes: config.limits.output_bytes,
        };
        let json = serde_json::to_string(&wire).expect("serialises");
        let lib = &self.lib;
        let reply = lib.call("exec", |ud, out| unsafe {
            (lib.exec)(ud, self.handle, json.as_ptr().cast(), json.len(), out)
        })?;
        let r: WireResult = serde_json::from_slice(&reply).map_err(|e| {
            Error::Sandbox(format!(
                "{} exec replied with something that is not a result ({e}): {:?}; reply with \
                 {{\"exit_code\": 0, \"signal\": null, \"stdout\": \"\", \"stderr\": \"\", \
                 \"dropped_bytes\": 0, \"duration_s\": 0.0, \"killed\": null}}",
                lib.whose(),
                clip(&String::from_utf8_lossy(&reply))
            ))
        })?;
        if r.exit_code.is_none() && r.signal.is_none() && r.killed.is_none() {
            return Err(Error::Sandbox(format!(
                "{} exec replied with neither an exit code nor a signal nor a kill reason",
                lib.whose()
            )));
        }
        Ok(ExecResult {
            exit_code: r.exit_code,
            signal: r.signal,
            stdout: r.stdout,
            stderr: r.stderr,
            dropped_bytes: r.dropped_bytes,
            duration_s: if r.duration_s.is_finite() && r.duration_s >= 0.0 {
                r.duration_s
            } else {
                0.0
            },
            killed: r.killed,
        })
    }

    fn path_call(&self, what: &str, f: PathFn, path: &str) -> Result<Vec<u8>> {
        let c = CString::new(path)
            .map_err(|_| Error::Sandbox(format!("sandbox path {path:?} contains a NUL byte")))?;
        let lib = &self.lib;
        lib.call(&format!("{what} {path}"), |ud, out| unsafe {
            f(ud, self.handle, c.as_ptr(), out)
        })
    }

    /// Write a file at an absolute sandbox path.
    pub(crate) fn put(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let c = CString::new(path)
            .map_err(|_| Error::Sandbox(format!("sandbox path {path:?} contains a NUL byte")))?;
        let lib = &self.lib;
        lib.call(&format!("put {path}"), |ud, out| unsafe {
            (lib.put)(
                ud,
                self.handle,
                c.as_ptr(),
                data.as_ptr(),
                data.len(),
                mode,
                out,
            )
        })
        .map(|_| ())
    }

    /// Read a file.
    pub(crate) fn get(&self, path: &str) -> Result<Vec<u8>> {
        let bytes = self.path_call("get", self.lib.get, path)?;
        let limit = &crate::limits::SANDBOX_FILE;
        let cap = limit.bytes()?;
        if bytes.len() as u64 > cap {
            return Err(Error::Sandbox(
                limit.exceeded(&format!("sandbox file {path}"), cap),
            ));
        }
        Ok(bytes)
    }

    /// List a directory, sorted by name.
    pub(crate) fn list(&self, path: &str) -> Result<Vec<Entry>> {
        let reply = self.path_call("list", self.lib.list, path)?;
        let mut entries: Vec<Entry> = serde_json::from_slice(&reply).map_err(|e| {
            Error::Sandbox(format!(
                "{} list replied with something that is not a list of entries ({e}): {:?}; \
                 reply with [{{\"name\": \"x\", \"dir\": false, \"size\": 3}}]",
                self.lib.whose(),
                clip(&String::from_utf8_lossy(&reply))
            ))
        })?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Remove a file or tree (a missing path is fine).
    pub(crate) fn remove(&self, path: &str) -> Result<()> {
        self.path_call("remove", self.lib.remove, path).map(|_| ())
    }

    /// A copy in a new sandbox, when the plugin forks.
    pub(crate) fn fork(&self, id: &str) -> Result<PluginSandbox> {
        let Some(fork) = self.lib.fork else {
            return Err(Error::UnsupportedCapability {
                env: format!("sandbox {id}"),
                what: format!("fork: {} gives no `fork`", self.lib.whose()),
            });
        };
        let mut child: *mut c_void = std::ptr::null_mut();
        let lib = &self.lib;
        lib.call("fork", |ud, out| unsafe {
            fork(ud, self.handle, &mut child, out)
        })?;
        lib.adopt(child, "fork")
    }

    /// A host URL for `port` inside, when the plugin gives one.
    pub(crate) fn url(&self, id: &str, port: u16) -> Result<String> {
        let Some(url) = self.lib.url else {
            return Err(Error::UnsupportedCapability {
                env: format!("sandbox {id}"),
                what: format!("expose a port: {} gives no `url`", self.lib.whose()),
            });
        };
        let lib = &self.lib;
        let text = lib.call("url", |ud, out| unsafe { url(ud, self.handle, port, out) })?;
        let text = String::from_utf8_lossy(&text).trim().to_string();
        if text.is_empty() {
            return Err(Error::Sandbox(format!(
                "{} url returned no URL for port {port}",
                lib.whose()
            )));
        }
        Ok(text)
    }
}

impl Drop for PluginSandbox {
    fn drop(&mut self) {
        let lib = &self.lib;
        in_plugin(&lib.crash, || unsafe {
            (lib.destroy)(lib.user_data, self.handle)
        });
    }
}

#[cfg(test)]
mod tests {
    //! A sandbox plugin registered the way a host registers one (nenyax_plugin_register), whose
    //! callbacks delegate to the built-in process backend: the host side (JSON both ways, paths,
    //! fork, destroy, the promise set of its level) is then held to `sandbox-check`.

    use std::ffi::{c_char, c_void, CStr};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde::Deserialize;

    use crate::plugins::abi::{nenyax_plugin_out_t, nenyax_plugin_t, nenyax_sandbox_vtable_t};
    use crate::sandbox::{BackendKind, Exec, Sandbox, SandboxConfig};

    static DESTROYED: AtomicUsize = AtomicUsize::new(0);

    unsafe fn write(out: *const nenyax_plugin_out_t, s: &[u8]) {
        let o = &*out;
        (o.write.unwrap())(o.ctx, s.as_ptr().cast(), s.len());
    }

    unsafe fn fail(out: *const nenyax_plugin_out_t, e: impl std::fmt::Display) -> i32 {
        write(out, e.to_string().as_bytes());
        1
    }

    #[derive(Deserialize)]
    struct Cfg {
        workdir: String,
        env: std::collections::BTreeMap<String, String>,
        limits: Lim,
    }

    #[derive(Deserialize)]
    struct Lim {
        cpu_s: Option<u64>,
        memory_bytes: Option<u64>,
        open_files: Option<u64>,
        processes: Option<u64>,
        file_size_bytes: Option<u64>,
        wall_s: f64,
        output_bytes: usize,
    }

    #[derive(Deserialize)]
    struct Req {
        argv: Vec<String>,
        shell: Option<String>,
        cwd: String,
        env: std::collections::BTreeMap<String, String>,
        stdin: Option<String>,
        timeout_s: f64,
    }

    unsafe extern "C" fn create(
        _: *mut c_void,
        config: *const c_char,
        len: usize,
        sandbox: *mut *mut c_void,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let bytes = std::slice::from_raw_parts(config.cast::<u8>(), len);
        let c: Cfg = match serde_json::from_slice(bytes) {
            Ok(c) => c,
            Err(e) => return fail(out, e),
        };
        let mut sc = SandboxConfig::new(BackendKind::Process);
        sc.workdir = c.workdir;
        sc.env = c.env;
        let l = &mut sc.limits;
        (
            l.cpu_s,
            l.memory_bytes,
            l.open_files,
            l.processes,
            l.file_size_bytes,
        ) = (
            c.limits.cpu_s,
            c.limits.memory_bytes,
            c.limits.open_files,
            c.limits.processes,
            c.limits.file_size_bytes,
        );
        l.wall = std::time::Duration::from_secs_f64(c.limits.wall_s);
        l.output_bytes = c.limits.output_bytes;
        match Sandbox::create(sc) {
            Ok(sb) => {
                *sandbox = Box::into_raw(Box::new(sb)).cast();
                0
            }
            Err(e) => fail(out, e),
        }
    }

    unsafe extern "C" fn exec(
        _: *mut c_void,
        sb: *mut c_void,
        req: *const c_char,
        len: usize,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let sb = &*sb.cast::<Sandbox>();
        let r: Req = match serde_json::from_slice(std::slice::from_raw_parts(req.cast(), len)) {
            Ok(r) => r,
            Err(e) => return fail(out, e),
        };
        let mut x = match r.shell {
            Some(s) => Exec::shell(s),
            None => Exec::argv(r.argv),
        };
        x.cwd = Some(r.cwd);
        x.env = r.env;
        x.stdin = r.stdin.map(String::into_bytes);
        x.timeout = Some(std::time::Duration::from_secs_f64(r.timeout_s));
        match sb.exec(&x) {
            Ok(res) => {
                write(out, serde_json::to_string(&res).unwrap().as_bytes());
                0
            }
            Err(e) => fail(out, e),
        }
    }

    unsafe fn path<'a>(p: *const c_char) -> &'a str {
        CStr::from_ptr(p).to_str().unwrap()
    }

    unsafe extern "C" fn put(
        _: *mut c_void,
        sb: *mut c_void,
        p: *const c_char,
        data: *const u8,
        len: usize,
        mode: u32,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        let sb = &*sb.cast::<Sandbox>();
        let data = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(data, len)
        };
        match sb.put(path(p), data, mode) {
            Ok(()) => 0,
            Err(e) => fail(out, e),
        }
    }

    unsafe extern "C" fn get(
        _: *mut c_void,
        sb: *mut c_void,
        p: *const c_char,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        match (*sb.cast::<Sandbox>()).get(path(p)) {
            Ok(b) => {
                write(out, &b);
                0
            }
            Err(e) => fail(out, e),
        }
    }

    unsafe extern "C" fn list(
        _: *mut c_void,
        sb: *mut c_void,
        p: *const c_char,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        match (*sb.cast::<Sandbox>()).list(path(p)) {
            Ok(l) => {
                write(out, serde_json::to_string(&l).unwrap().as_bytes());
                0
            }
            Err(e) => fail(out, e),
        }
    }

    unsafe extern "C" fn remove(
        _: *mut c_void,
        sb: *mut c_void,
        p: *const c_char,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        match (*sb.cast::<Sandbox>()).remove(path(p)) {
            Ok(()) => 0,
            Err(e) => fail(out, e),
        }
    }

    unsafe extern "C" fn fork(
        _: *mut c_void,
        sb: *mut c_void,
        child: *mut *mut c_void,
        out: *const nenyax_plugin_out_t,
    ) -> i32 {
        match (*sb.cast::<Sandbox>()).fork() {
            Ok(c) => {
                *child = Box::into_raw(Box::new(c)).cast();
                0
            }
            Err(e) => fail(out, e),
        }
    }

    unsafe extern "C" fn destroy(_: *mut c_void, sb: *mut c_void) {
        DESTROYED.fetch_add(1, Ordering::SeqCst);
        drop(Box::from_raw(sb.cast::<Sandbox>()));
    }

    fn register(name: &'static CStr, version: u32, flags: u32) -> crate::Result<()> {
        let vt = Box::leak(Box::new(nenyax_sandbox_vtable_t {
            version,
            level: crate::plugins::abi::ISOLATION_PROCESS,
            ready: None,
            create: Some(create),
            exec: Some(exec),
            put: Some(put),
            get: Some(get),
            list: Some(list),
            remove: Some(remove),
            fork: Some(fork),
            url: None,
            destroy: Some(destroy),
            drop: None,
        }));
        let d = Box::leak(Box::new(nenyax_plugin_t {
            abi_version: crate::plugins::kinds::PLUGIN_ABI_VERSION,
            kind: 2,
            kind_version: crate::plugins::kinds::SANDBOX_VTABLE_VERSION,
            flags,
            name: name.as_ptr(),
            version: c"0.0.1".as_ptr(),
            vtable: (vt as *const nenyax_sandbox_vtable_t).cast(),
            user_data: std::ptr::null_mut(),
        }));
        // SAFETY: the descriptor and vtable are leaked, so they live as long as the process.
        unsafe { crate::plugins::library::register(d) }.map(|_| ())
    }

    #[test]
    fn a_registered_plugin_is_a_backend_held_to_its_levels_promises() {
        register(
            c"delegate",
            crate::plugins::kinds::SANDBOX_VTABLE_VERSION,
            1,
        )
        .unwrap();
        let kind = BackendKind::parse("delegate").unwrap();
        assert!(matches!(kind, BackendKind::Plugin(_)));
        assert_eq!(kind.name(), "delegate");
        assert_eq!(serde_json::to_string(&kind).unwrap(), "\"delegate\"");
        let back: BackendKind = serde_json::from_str("\"delegate\"").unwrap();
        assert_eq!(back, kind);
        assert!(crate::sandbox::backends()
            .iter()
            .any(|b| b.name == "delegate" && b.ready));
        // Never picked in place of a built-in.
        assert_ne!(
            crate::sandbox::select(crate::contract::Isolation::Process)
                .unwrap()
                .backend,
            kind
        );

        let before = DESTROYED.load(Ordering::SeqCst);
        let report = crate::sandbox::sandbox_check(kind);
        assert!(report.passed(), "{}", report.render());
        let names: Vec<&str> = report.promises.iter().map(|p| p.name.as_str()).collect();
        for want in [
            "wall_timeout",
            "scrubbed_environment",
            "file_contract",
            "fork_isolation",
        ] {
            assert!(names.contains(&want), "{names:?}");
        }
        // A process-level plugin is not held to (nor credited with) a jail's promises.
        assert!(!names.contains(&"private_dev"), "{names:?}");
        assert!(
            DESTROYED.load(Ordering::SeqCst) > before,
            "destroy was never called"
        );

        // Relative paths, stdin and a cwd reach the plugin resolved.
        let mut c = SandboxConfig::new(kind);
        c.env.insert("FROM_CONFIG".into(), "1".into());
        let sb = Sandbox::create(c).unwrap();
        sb.put("sub/in.txt", b"abc", 0o644).unwrap();
        let r = sb
            .exec(
                &Exec::shell("cat in.txt; cat; echo \" $FROM_CONFIG\"")
                    .cwd("sub")
                    .stdin("xyz"),
            )
            .unwrap();
        assert_eq!(r.stdout, "abcxyz 1\n", "{r:?}");
        assert!(sb.host_path("/app").is_err());
        let e = sb.put("/etc/nope", b"", 0o644).unwrap_err().to_string();
        assert!(
            e.contains("outside the sandbox's private directories"),
            "{e}"
        );
        let e = sb
            .exec(&Exec::argv(["true"]).stdin(vec![0xff, 0xfe]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("stdin must be UTF-8"), "{e}");
        let e = sb.url(8080).unwrap_err().to_string();
        assert!(e.contains("gives no `url`"), "{e}");
        let n = DESTROYED.load(Ordering::SeqCst);
        sb.destroy().unwrap();
        assert_eq!(DESTROYED.load(Ordering::SeqCst), n + 1);
    }

    #[test]
    fn a_sandbox_plugin_of_another_version_or_not_thread_safe_is_refused() {
        let e = register(c"v2", 2, 1).unwrap_err().to_string();
        assert!(e.contains("version 2") && e.contains("version 1"), "{e}");
        let e = register(c"serial", crate::plugins::kinds::SANDBOX_VTABLE_VERSION, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("NENYAX_PLUGIN_THREAD_SAFE"), "{e}");
        let e = register(c"jail", crate::plugins::kinds::SANDBOX_VTABLE_VERSION, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("built-in sandbox backend"), "{e}");
        let e = BackendKind::parse("nosuch").unwrap_err().to_string();
        assert!(e.contains("sandbox plugin"), "{e}");
    }
}
