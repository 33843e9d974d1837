//! An environment hub from a library plugin (or one a host registered through the C ABI):
//! `nenyax search NAME` and `nenyax fetch NAME` reach it when NAME is not a built-in hub. Its
//! listings come back as JSON and are checked here, so a malformed reply is a clean error naming
//! the plugin; a crash inside a call is named on stderr (crash.rs).

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::hubs::Listing;
use crate::plugins::abi::{clip, failure_text, invoke};
use crate::plugins::abi::{
    nenyax_hub_vtable_t, nenyax_plugin_out_t, nenyax_plugin_t, PluginInfo, PLUGIN_THREAD_SAFE,
};
use crate::plugins::crash::CrashMessage;
use crate::plugins::kinds::HUB_VTABLE_VERSION;

type SearchFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    usize,
    *const nenyax_plugin_out_t,
) -> i32;
type FetchFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const nenyax_plugin_out_t) -> i32;

/// A hub implemented by a plugin's `nenyax_hub_vtable_t`.
pub struct LibraryHub {
    info: PluginInfo,
    search: SearchFn,
    fetch: FetchFn,
    /// Owned by the plugin, which stays loaded for the process's life (`drop` is never called).
    user_data: *mut c_void,
    /// Held around each call unless the plugin declared itself thread-safe.
    serial: Option<Mutex<()>>,
    crash_search: CrashMessage,
    crash_fetch: CrashMessage,
}

// SAFETY: the plugin contract lets user_data be used from any thread; without
// NENYAX_PLUGIN_THREAD_SAFE calls are serialized by `serial`.
unsafe impl Send for LibraryHub {}
// SAFETY: as above.
unsafe impl Sync for LibraryHub {}

/// One entry of a plugin's search reply.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    uri: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    meta: Map<String, Value>,
    /// Ignored: the listing's hub is always the plugin's name.
    #[serde(default)]
    #[allow(dead_code)]
    hub: Option<String>,
}

impl LibraryHub {
    /// Check the hub vtable of a descriptor already checked for ABI and kind.
    ///
    /// # Safety
    /// `d.vtable` is non-NULL and points to a `nenyax_hub_vtable_t`.
    pub(crate) unsafe fn new(d: &nenyax_plugin_t, info: PluginInfo) -> Result<Self> {
        let whose = format!("hub plugin `{}` ({})", info.name, info.source);
        let vt = &*d.vtable.cast::<nenyax_hub_vtable_t>();
        if vt.version != HUB_VTABLE_VERSION {
            return Err(Error::Config(format!(
                "{whose}: its vtable says hub vtable version {}; this Nenyax speaks version \
                 {HUB_VTABLE_VERSION}: rebuild it against include/nenyax.h of this version",
                vt.version
            )));
        }
        let need = |what: &str| Error::Config(format!("{whose}: the vtable's `{what}` is NULL"));
        Ok(LibraryHub {
            search: vt.search.ok_or_else(|| need("search"))?,
            fetch: vt.fetch.ok_or_else(|| need("fetch"))?,
            crash_search: CrashMessage::new(&info.name, &info.source, "hub search"),
            crash_fetch: CrashMessage::new(&info.name, &info.source, "hub fetch"),
            serial: (d.flags & PLUGIN_THREAD_SAFE == 0).then(|| Mutex::new(())),
            user_data: d.user_data,
            info,
        })
    }

    /// The plugin's listing.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    fn whose(&self) -> String {
        format!("hub plugin `{}` ({})", self.info.name, self.info.source)
    }

    /// Call the plugin; what it wrote, or its error message as an error.
    fn call(
        &self,
        crash: &CrashMessage,
        what: &str,
        f: impl FnOnce(*mut c_void, *const nenyax_plugin_out_t) -> i32,
    ) -> Result<String> {
        let (rc, written) = invoke(self.serial.as_ref(), crash, |out| f(self.user_data, out));
        if rc != 0 {
            return Err(Error::Config(format!(
                "{} {what} failed (returned {rc}): {}",
                self.whose(),
                failure_text(&written)
            )));
        }
        let text = String::from_utf8_lossy(&written).into_owned();
        Ok(text)
    }

    /// Up to `limit` listings matching `query`, checked and labelled with this hub's name.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Listing>> {
        let mut q = query.as_bytes().to_vec();
        q.push(0);
        let text = self.call(&self.crash_search, "search", |ud, out| unsafe {
            (self.search)(ud, q.as_ptr().cast(), q.len() - 1, limit, out)
        })?;
        let entries: Vec<Entry> = serde_json::from_str(&text).map_err(|e| {
            Error::Config(format!(
                "{} search replied with something that is not a list of listings ({e}): {:?}; \
                 reply with JSON like [{{\"name\": \"x\", \"uri\": \"builtin:arithmetic\", \
                 \"description\": \"...\"}}]",
                self.whose(),
                clip(&text)
            ))
        })?;
        if let Some(bad) = entries.iter().find(|e| e.name.trim().is_empty()) {
            return Err(Error::Config(format!(
                "{} search listed an entry with an empty name (uri {:?})",
                self.whose(),
                bad.uri
            )));
        }
        // A plugin that ignores the limit is cut to it rather than refused.
        Ok(entries
            .into_iter()
            .take(limit)
            .map(|e| Listing {
                hub: self.info.name.clone(),
                name: e.name,
                uri: e.uri,
                description: e.description,
                meta: e.meta,
            })
            .collect())
    }

    /// The URI to load `name` by, as the plugin gives it (surrounding whitespace trimmed).
    pub fn fetch(&self, name: &str) -> Result<String> {
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        let text = self.call(&self.crash_fetch, "fetch", |ud, out| unsafe {
            (self.fetch)(ud, n.as_ptr().cast(), n.len() - 1, out)
        })?;
        let uri = text.trim();
        if uri.is_empty() {
            return Err(Error::Config(format!(
                "{} fetch of `{name}` returned no URI; write the URI to load to `out`",
                self.whose()
            )));
        }
        Ok(uri.to_string())
    }
}
