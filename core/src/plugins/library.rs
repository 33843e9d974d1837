//! Library plugins: shared libraries exporting `nenyax_plugin_entry`, and plugins a host
//! registers through the C ABI, kept in one process-global registry by (kind, name).
//!
//! A library plugin runs inside this process: a crash in it takes the process down. So that the
//! crash is not anonymous, every call into a plugin records which one is running on the calling
//! thread, and a fatal-signal handler (installed with the first plugin) writes
//! "nenyax: crashed inside library plugin `X` (source) during judge" to stderr before the signal
//! takes its usual course (docs/plugins-abi.md).

use std::collections::HashSet;
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::judges::Judge;
use crate::plugins::abi::{
    kind_code, kind_from_code, nenyax_plugin_entry_fn, nenyax_plugin_t, vtable_version, PluginInfo,
    ENTRY_SYMBOL,
};
use crate::plugins::crash::{ensure_crash_handler, in_plugin, CrashMessage};
use crate::plugins::driver::LibraryDriver;
use crate::plugins::hub::LibraryHub;
use crate::plugins::judge::LibraryJudge;
use crate::plugins::kinds::{Kind, PLUGIN_ABI_VERSION};
use crate::plugins::learner::LearnerPlugin;
use crate::plugins::sandbox::LibrarySandbox;
use crate::plugins::telemetry::LibraryTelemetry;

/// Where a plugin came from, as `nenyax plugins` shows it.
pub const REGISTERED_SOURCE: &str = "registered through the C ABI";

/// A plugin ready for use: its listing and its implementation.
struct Loaded {
    info: PluginInfo,
    telemetry: Option<Arc<LibraryTelemetry>>,
    hub: Option<Arc<LibraryHub>>,
    judge: Option<Arc<LibraryJudge>>,
    learner: Option<Arc<LearnerPlugin>>,
    sandbox: Option<Arc<LibrarySandbox>>,
    driver: Option<Arc<LibraryDriver>>,
}

#[derive(Default)]
struct Registry {
    plugins: Vec<Loaded>,
    /// Canonical paths of the libraries already loaded (each is loaded once).
    libraries: HashSet<PathBuf>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    // A panic while holding the lock leaves the registry consistent (pushes are single steps).
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

/// Every plugin loaded from a library or registered through the C ABI so far, in that order.
pub fn loaded() -> Vec<PluginInfo> {
    lock().plugins.iter().map(|p| p.info.clone()).collect()
}

/// Register plugins a host provides in its own process (`nenyax_plugin_register`).
///
/// # Safety
/// `plugin` must point to a descriptor whose pointers stay valid for the life of the process
/// (until the plugin's `drop`, for a judge), with callbacks that follow docs/plugins-abi.md.
pub unsafe fn register(plugin: *const nenyax_plugin_t) -> Result<PluginInfo> {
    let p = validate(plugin, REGISTERED_SOURCE, None)?;
    let info = p.info.clone();
    add(vec![p])?;
    Ok(info)
}

/// Load a plugin library (once per canonical path) and register the plugins it provides; a
/// library loaded before answers with its plugins again.
pub fn load_library(path: &Path) -> Result<Vec<PluginInfo>> {
    load_library_as(path, None)
}

/// Load `path`; `label` is the config entry's name, used in errors found before the library's
/// own names can be trusted (e.g. a descriptor of another ABI version).
fn load_library_as(path: &Path, label: Option<&str>) -> Result<Vec<PluginInfo>> {
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        Error::Config(format!(
            "plugin library {} cannot be read ({e}); fix `library` in the plugins config",
            path.display()
        ))
    })?;
    // Held across dlopen so two threads do not load and register one library twice.
    let mut reg = lock();
    let source = canonical.display().to_string();
    if reg.libraries.contains(&canonical) {
        // Loaded before: the same plugins again, so every caller learns what the library holds.
        return Ok(reg
            .plugins
            .iter()
            .filter(|p| p.info.source == source)
            .map(|p| p.info.clone())
            .collect());
    }
    let descriptors = open_and_enter(&canonical, &source)?;
    let mut found = Vec::new();
    for d in descriptors {
        // SAFETY: the entry point handed out this array; the library stays loaded.
        found.push(unsafe { validate(d, &source, label)? });
    }
    let infos = found.iter().map(|p| p.info.clone()).collect();
    add_locked(&mut reg, found)?;
    reg.libraries.insert(canonical);
    Ok(infos)
}

/// dlopen the library (never closed: vtables from it may be in use anywhere) and call its entry.
fn open_and_enter(path: &Path, source: &str) -> Result<Vec<*const nenyax_plugin_t>> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Config(format!("plugin library path {source} contains a NUL byte")))?;
    // SAFETY: dlopen with a valid C string; RTLD_LOCAL keeps the plugin's symbols to itself.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(Error::Config(format!(
            "cannot load plugin library {source}: {}; check that it is a shared library built for \
             this machine and that the libraries it needs can be found",
            dl_error()
        )));
    }
    let sym = CString::new(ENTRY_SYMBOL).expect("no NUL");
    // SAFETY: a valid handle and C string.
    let entry = unsafe { libc::dlsym(handle, sym.as_ptr()) };
    if entry.is_null() {
        return Err(Error::Config(format!(
            "{source} is not a Nenyax plugin: it exports no `{ENTRY_SYMBOL}` (declare it \
             `extern \"C\"` as include/nenyax.h does)"
        )));
    }
    // SAFETY: the symbol is the documented entry point; its signature is the ABI's.
    let entry: nenyax_plugin_entry_fn = unsafe { std::mem::transmute(entry) };
    let mut plugins: *const nenyax_plugin_t = std::ptr::null();
    let mut count: usize = 0;
    let rc = in_plugin(&CrashMessage::entry(source, ENTRY_SYMBOL), || unsafe {
        entry(PLUGIN_ABI_VERSION, &mut plugins, &mut count)
    });
    if rc != 0 {
        return Err(Error::Config(format!(
            "plugin library {source} refused to load: {ENTRY_SYMBOL} returned {rc} for plugin ABI \
             version {PLUGIN_ABI_VERSION}; rebuild it against include/nenyax.h of this version"
        )));
    }
    if count == 0 {
        return Err(Error::Config(format!(
            "plugin library {source} provides no plugins ({ENTRY_SYMBOL} returned a count of 0)"
        )));
    }
    if plugins.is_null() {
        return Err(Error::Config(format!(
            "plugin library {source}: {ENTRY_SYMBOL} returned {count} plugins but a NULL array"
        )));
    }
    Ok((0..count).map(|i| plugins.wrapping_add(i)).collect())
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a C string valid until the next dl call on this thread.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

fn add(found: Vec<Loaded>) -> Result<()> {
    add_locked(&mut lock(), found)
}

fn add_locked(reg: &mut Registry, found: Vec<Loaded>) -> Result<()> {
    for (i, p) in found.iter().enumerate() {
        let clash = reg
            .plugins
            .iter()
            .chain(&found[..i])
            .find(|q| q.info.kind == p.info.kind && q.info.name == p.info.name);
        if let Some(q) = clash {
            return Err(Error::Config(format!(
                "{} plugin `{}` ({}) clashes with one of that name already loaded ({}); give one \
                 of them another name",
                p.info.kind, p.info.name, p.info.source, q.info.source
            )));
        }
    }
    ensure_crash_handler();
    reg.plugins.extend(found);
    Ok(())
}

/// Read a C string field of a descriptor.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text(p: *const c_char, what: &str, whose: &str) -> Result<String> {
    if p.is_null() {
        return Err(Error::Config(format!("{whose}: `{what}` is NULL")));
    }
    CStr::from_ptr(p)
        .to_str()
        .map(str::to_string)
        .map_err(|_| Error::Config(format!("{whose}: `{what}` is not UTF-8")))
}

/// Check one descriptor against this Nenyax and build the plugin it describes.
///
/// # Safety
/// `d` is NULL or points to a readable descriptor (its first field at least).
unsafe fn validate(d: *const nenyax_plugin_t, source: &str, label: Option<&str>) -> Result<Loaded> {
    let who = |name: Option<&str>| match (name.or(label), source == REGISTERED_SOURCE) {
        (Some(n), _) => format!("plugin `{n}` ({source})"),
        (None, true) => format!("a plugin {source}"),
        (None, false) => format!("a plugin in {source}"),
    };
    if d.is_null() {
        return Err(Error::Config(format!(
            "{}: the descriptor is NULL",
            who(None)
        )));
    }
    // Only `abi_version` (the first field, fixed forever) can be trusted before it matches.
    let abi = std::ptr::read(d.cast::<u32>());
    if abi != PLUGIN_ABI_VERSION {
        return Err(Error::Config(format!(
            "{} was built for plugin ABI version {abi}; this Nenyax speaks version \
             {PLUGIN_ABI_VERSION}: rebuild it against include/nenyax.h of this version",
            who(None)
        )));
    }
    let d = &*d;
    let name = text(d.name, "name", &who(None))?;
    if name.is_empty() {
        return Err(Error::Config(format!("{}: `name` is empty", who(None))));
    }
    let whose = who(Some(&name));
    let version = text(d.version, "version", &whose)?;
    let kind = kind_from_code(d.kind).ok_or_else(|| {
        let known: Vec<String> = Kind::ALL
            .iter()
            .map(|k| format!("{}={}", kind_code(*k), k))
            .collect();
        Error::Config(format!(
            "{whose} has unknown kind code {}; the kinds are {}",
            d.kind,
            known.join(", ")
        ))
    })?;
    let Some(ours) = vtable_version(kind) else {
        return Err(Error::Config(format!(
            "{whose} is a {kind} plugin; this Nenyax loads only {} plugins from libraries so \
             far (drivers come as executables: docs/bridge.md)",
            Kind::ALL
                .into_iter()
                .filter(|k| vtable_version(*k).is_some())
                .map(Kind::name)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    if d.kind_version != ours {
        return Err(Error::Config(format!(
            "{whose} was built for {kind} vtable version {}; this Nenyax speaks version {ours}: \
             rebuild it against include/nenyax.h of this version",
            d.kind_version
        )));
    }
    if d.vtable.is_null() {
        return Err(Error::Config(format!("{whose}: `vtable` is NULL")));
    }
    let info = PluginInfo {
        kind,
        name,
        version,
        source: source.to_string(),
    };
    let judge = match kind {
        Kind::Judge => Some(Arc::new(LibraryJudge::new(d, info.clone())?)),
        _ => None,
    };
    let learner = match kind {
        Kind::Learner => Some(Arc::new(LearnerPlugin::new(d, info.clone())?)),
        _ => None,
    };
    let telemetry = match kind {
        Kind::Telemetry => Some(Arc::new(LibraryTelemetry::new(d, info.clone())?)),
        _ => None,
    };
    let hub = match kind {
        Kind::Hub => Some(Arc::new(LibraryHub::new(d, info.clone())?)),
        _ => None,
    };
    let sandbox = match kind {
        Kind::Sandbox => {
            // The names BackendKind::parse takes for built-in backends (listed here: the
            // sandbox module depends on this registry, not the other way round).
            let builtin = [
                "process",
                "jail",
                "container",
                "docker",
                "podman",
                "microvm",
                "auto",
            ]
            .contains(&info.name.as_str());
            if builtin {
                return Err(Error::Config(format!(
                    "{whose} is named like a built-in sandbox backend; give it another name"
                )));
            }
            Some(Arc::new(LibrarySandbox::new(d, info.clone())?))
        }
        _ => None,
    };
    let driver = match kind {
        Kind::Driver => Some(Arc::new(LibraryDriver::new(d, info.clone())?)),
        _ => None,
    };
    Ok(Loaded {
        info,
        judge,
        learner,
        telemetry,
        hub,
        sandbox,
        driver,
    })
}

/// A judge plugin by name: one registered through the C ABI or already loaded, else the plugins
/// config's `kind = "judge"` entry of that name, whose library is loaded now.
pub fn find_judge(name: &str) -> Result<Arc<dyn Judge>> {
    find_plugin(
        Kind::Judge,
        name,
        "type = \"plugin\", use = \"<name>\"",
        |p| p.judge.clone().map(|j| j as Arc<dyn Judge>),
    )
}

/// A learner plugin by name: one registered through the C ABI or already loaded, else the
/// plugins config's `kind = "learner"` entry of that name, whose library is loaded now.
/// `Ok(None)`: there is no learner plugin of that name (the caller names the built-in ones).
pub fn find_learner(name: &str) -> Result<Option<Arc<LearnerPlugin>>> {
    let known = lock()
        .plugins
        .iter()
        .any(|p| p.info.kind == Kind::Learner && p.info.name == name)
        || crate::plugins::config::entries()?
            .iter()
            .any(|e| e.kind == Kind::Learner && e.name == name);
    if !known {
        return Ok(None);
    }
    find_plugin(Kind::Learner, name, "--learner <name>", |p| {
        p.learner.clone()
    })
    .map(Some)
}

fn canonical_or(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// A telemetry plugin by name (registered, loaded, or the plugins config's `kind = "telemetry"`
/// entry, loaded now); the error says where plugins were looked for.
pub fn find_sink(name: &str) -> Result<Arc<LibraryTelemetry>> {
    find_plugin(Kind::Telemetry, name, "--telemetry <name>", |p| {
        p.telemetry.clone()
    })
}

/// A hub plugin by name (registered, loaded, or the plugins config's `kind = "hub"` entry,
/// loaded now); the error says where plugins were looked for.
pub fn find_hub(name: &str) -> Result<Arc<LibraryHub>> {
    find_plugin(Kind::Hub, name, "nenyax search <name>", |p| p.hub.clone())
}

/// An in-process driver plugin by name (registered, loaded, or the plugins config's `kind =
/// "driver"` entry with a `library`, loaded now).
pub fn find_driver(name: &str) -> Result<Arc<LibraryDriver>> {
    find_plugin(Kind::Driver, name, "<name>:TARGET", |p| p.driver.clone())
}

/// A sandbox backend plugin by name (registered, loaded, or the plugins config's `kind =
/// "sandbox"` entry, loaded now), with its fixed index in the registry (what
/// `BackendKind::Plugin` holds).
pub fn find_sandbox(name: &str) -> Result<(u32, Arc<LibrarySandbox>)> {
    find_plugin(Kind::Sandbox, name, "nenyax sandbox-check <name>", |p| {
        p.sandbox.clone()
    })?;
    sandbox_plugins()
        .into_iter()
        .find(|(_, s)| s.info().name == name)
        .ok_or_else(|| {
            Error::Config(format!(
                "sandbox plugin `{name}` vanished from the registry"
            ))
        })
}

/// The sandbox plugin at `index` in the registry (plugins are never removed, so an index stays
/// valid for the process's life).
pub fn sandbox_at(index: u32) -> Option<Arc<LibrarySandbox>> {
    lock()
        .plugins
        .get(index as usize)
        .and_then(|p| p.sandbox.clone())
}

/// Every sandbox plugin registered or loaded so far, with its index.
pub fn sandbox_plugins() -> Vec<(u32, Arc<LibrarySandbox>)> {
    lock()
        .plugins
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.sandbox.clone().map(|s| (i as u32, s)))
        .collect()
}

/// The plugins of `kind` loaded or registered so far, and those the config lists.
fn names_of(kind: Kind, entries: &[crate::plugins::config::Entry]) -> Vec<String> {
    let mut names: Vec<String> = lock()
        .plugins
        .iter()
        .filter(|p| p.info.kind == kind)
        .map(|p| p.info.name.clone())
        .chain(
            entries
                .iter()
                .filter(|e| e.kind == kind)
                .map(|e| e.name.clone()),
        )
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Find a plugin of `kind` by name as [`find_judge`] does, with `get` picking its
/// implementation out of the registry entry.
fn find_plugin<T>(
    kind: Kind,
    name: &str,
    used_by: &str,
    get: impl Fn(&Loaded) -> Option<T>,
) -> Result<T> {
    let loaded = |get: &dyn Fn(&Loaded) -> Option<T>| {
        lock()
            .plugins
            .iter()
            .find(|p| p.info.kind == kind && p.info.name == name)
            .and_then(get)
    };
    if let Some(t) = loaded(&get) {
        return Ok(t);
    }
    let entries = crate::plugins::config::entries()?;
    let config = crate::plugins::config::path();
    let Some(entry) = entries.iter().find(|e| e.kind == kind && e.name == name) else {
        let known = names_of(kind, &entries);
        return Err(Error::Config(format!(
            "no {kind} plugin named `{name}`: it is not registered through the C ABI nor listed \
             in {} ({}); add a [[plugin]] with name = \"{name}\", kind = \"{kind}\", library = \
             \"path/to/lib.so\" there to use it as `{}` (docs/plugins-abi.md)",
            config.display(),
            if known.is_empty() {
                format!("there are no {kind} plugins")
            } else {
                format!("known {kind} plugins: {}", known.join(", "))
            },
            used_by.replace("<name>", name)
        )));
    };
    let Some(library) = &entry.library else {
        return Err(Error::Config(format!(
            "{kind} plugin `{name}` in {} has no `library`; {kind} plugins are shared libraries \
             exporting {ENTRY_SYMBOL}",
            entry.source.display()
        )));
    };
    let library = library.clone();
    load_library_as(&library, Some(name))?;
    loaded(&get).ok_or_else(|| {
        let provides: Vec<String> = lock()
            .plugins
            .iter()
            .filter(|p| p.info.source == canonical_or(&library))
            .map(|p| format!("{} `{}`", p.info.kind, p.info.name))
            .collect();
        Error::Config(format!(
            "{} (listed as {kind} `{name}` in {}) provides no {kind} named `{name}`; it provides {}",
            library.display(),
            entry.source.display(),
            if provides.is_empty() {
                "nothing new (its plugins were loaded before)".to_string()
            } else {
                provides.join(", ")
            }
        ))
    })
}

/// The names of the plugins of `kind` this process knows of (loaded, registered, or in
/// the plugins config), for listings and errors; a config that does not parse lists none.
pub fn plugin_names(kind: Kind) -> Vec<String> {
    let entries = crate::plugins::config::entries().unwrap_or_default();
    names_of(kind, &entries)
}
