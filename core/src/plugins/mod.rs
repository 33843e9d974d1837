//! Plugins: drivers as executables in any language (the bridge's JSON-lines protocol), and the
//! other kinds as shared libraries exporting a versioned C vtable, found through the plugins
//! config or registered at run time through the C ABI (docs/plugins.md).

pub mod abi;
pub mod config;
pub mod conformance;
mod crash;
pub mod driver;
#[cfg(feature = "python")]
pub mod external;
pub mod hub;
pub mod judge;
pub mod kinds;
pub mod learner;
pub mod library;
pub mod registry;
pub mod sandbox;
pub mod telemetry;

pub use abi::PluginInfo;
pub use kinds::{Interface, Kind, PLUGIN_ABI_VERSION};
pub use library::{find_judge, load_library, loaded, register};

use serde::Serialize;

/// Where a plugin came from, so a user knows what to edit or remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", content = "path", rename_all = "snake_case")]
pub enum Origin {
    /// Compiled into this library.
    BuiltIn,
    /// An executable found on PATH (its path).
    Path(std::path::PathBuf),
    /// An entry of the plugins config (the config file).
    Config(std::path::PathBuf),
    /// Registered at run time by the host through the C ABI.
    Host,
}

impl Origin {
    /// A short label for tables.
    pub fn label(&self) -> &'static str {
        match self {
            Origin::BuiltIn => "built-in",
            Origin::Path(_) => "PATH",
            Origin::Config(_) => "config",
            Origin::Host => "host",
        }
    }

    /// The file it came from, where there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Origin::Path(p) | Origin::Config(p) => Some(p),
            Origin::BuiltIn | Origin::Host => None,
        }
    }
}

/// One plugin this process can use, as a row of `nenyax plugins`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Installed {
    /// Its extension point.
    pub kind: Kind,
    /// What picks it: a URI scheme, `use = "..."`, `--provider`, `--telemetry`.
    pub name: String,
    /// Its own version where it reports one (built-ins: this library's).
    pub version: Option<String>,
    /// Where it came from.
    pub origin: Origin,
    /// One line on what it does.
    pub summary: String,
    /// Whether it works here; when not, what is missing.
    pub ready: bool,
    /// What is missing, or a note.
    pub needs: Option<String>,
}

/// Every plugin of every kind this process can use: the built-in set, then what the plugins
/// config adds. A config that does not parse is one row that says why, so the listing still
/// shows everything else.
pub fn installed() -> Vec<Installed> {
    let mut out = built_in();
    let entries = config::entries().unwrap_or_else(|e| {
        out.push(Installed {
            kind: Kind::Driver,
            name: "(plugins config)".into(),
            version: None,
            origin: Origin::Config(config::path()),
            summary: "the plugins config does not parse".into(),
            ready: false,
            needs: Some(e.to_string()),
        });
        Vec::new()
    });
    #[cfg(feature = "python")]
    out.extend(executable_drivers(&out));
    for e in entries {
        // In-process drivers (a `library`) are bridged too: listed with the executables.
        let executable = e.kind == Kind::Driver && (!e.command.is_empty() || e.library.is_some());
        if executable && cfg!(feature = "python") {
            continue; // listed by executable_drivers
        }
        let (version, missing) = match &e.library {
            Some(lib) if !lib.exists() => (None, Some(format!("{} does not exist", lib.display()))),
            Some(lib) => library_version(&e, lib),
            None if executable => (
                None,
                Some(
                    "executable drivers run in the bridge's workers, which this build left out \
                     (rebuild with `--features python`)"
                        .to_string(),
                ),
            ),
            None => (None, None),
        };
        out.push(Installed {
            kind: e.kind,
            name: match e.kind {
                Kind::Driver => e.scheme().to_string(),
                _ => e.name.clone(),
            },
            version,
            origin: Origin::Config(e.source.clone()),
            summary: e.summary.clone().unwrap_or_else(|| match &e.library {
                Some(lib) => format!("library {}", lib.display()),
                None => format!("executable {}", e.command.join(" ")),
            }),
            ready: missing.is_none(),
            needs: missing,
        });
    }
    out.extend(
        loaded()
            .into_iter()
            .filter(|p| p.source == library::REGISTERED_SOURCE)
            .map(|p| Installed {
                kind: p.kind,
                name: p.name,
                version: Some(p.version),
                origin: Origin::Host,
                summary: "registered by the host through the C ABI".into(),
                ready: true,
                needs: None,
            }),
    );
    out
}

/// Load a configured library (as using it would) for the version its descriptor reports; a
/// library that is refused (another ABI version, no such plugin in it) says why.
fn library_version(e: &config::Entry, lib: &std::path::Path) -> (Option<String>, Option<String>) {
    match library::load_library(lib) {
        Ok(infos) => match infos.iter().find(|i| i.kind == e.kind && i.name == e.name) {
            Some(i) => (Some(i.version.clone()), None),
            None => {
                let has: Vec<String> = infos
                    .iter()
                    .map(|i| format!("{} {}", i.kind, i.name))
                    .collect();
                (
                    None,
                    Some(format!(
                        "{} provides no {} plugin named `{}`; it provides: {}",
                        lib.display(),
                        e.kind,
                        e.name,
                        if has.is_empty() {
                            "nothing".into()
                        } else {
                            has.join(", ")
                        }
                    )),
                )
            }
        },
        Err(err) => (None, Some(err.to_string())),
    }
}

/// The executable drivers on PATH and in the plugins config, each asked for its version (its
/// handshake); one a built-in scheme shadows is listed as not usable, with why.
#[cfg(feature = "python")]
fn executable_drivers(built_in: &[Installed]) -> Vec<Installed> {
    use crate::driver::{Driver, Readiness};
    external::discover()
        .into_iter()
        .map(|d| {
            let shadowed = built_in
                .iter()
                .any(|b| b.kind == Kind::Driver && b.name == d.scheme());
            let needs = if shadowed {
                Some(format!(
                    "shadowed: the built-in `{}` driver takes this scheme; rename the \
                     executable or give it another `scheme` in the plugins config",
                    d.scheme()
                ))
            } else {
                match d.readiness() {
                    Readiness::Ready => None,
                    Readiness::Missing(m) => Some(m),
                }
            };
            Installed {
                kind: Kind::Driver,
                name: d.scheme().to_string(),
                version: if needs.is_none() { d.version() } else { None },
                origin: match d.config() {
                    Some(c) => Origin::Config(c.to_path_buf()),
                    None => Origin::Path(d.path().to_path_buf()),
                },
                summary: d.summary().to_string(),
                ready: needs.is_none(),
                needs,
            }
        })
        .collect()
}

/// The plugins compiled into this build, one row per driver, sandbox backend, judge, learner,
/// provider, hub and telemetry sink.
pub fn built_in() -> Vec<Installed> {
    let version = Some(env!("CARGO_PKG_VERSION").to_string());
    let mut out: Vec<Installed> = crate::router::Registry::with_builtins()
        .list()
        .into_iter()
        .map(|d| {
            let needs = match &d.readiness {
                crate::driver::Readiness::Ready => None,
                crate::driver::Readiness::Missing(m) => Some(m.clone()),
            };
            Installed {
                kind: Kind::Driver,
                name: d.scheme,
                version: version.clone(),
                origin: Origin::BuiltIn,
                summary: d.summary,
                ready: needs.is_none(),
                needs,
            }
        })
        .collect();
    use crate::integrations as i;
    let rows = [
        (Kind::Sandbox, i::sandboxes()),
        (Kind::Judge, i::judges()),
        (Kind::Learner, i::learners()),
        (Kind::Provider, i::providers()),
        (Kind::Hub, i::hubs()),
        (Kind::Telemetry, i::telemetry()),
    ];
    for (kind, list) in rows {
        out.extend(list.into_iter().map(|r| Installed {
            kind,
            name: r.name,
            version: version.clone(),
            origin: Origin::BuiltIn,
            summary: r.title,
            ready: r.ready,
            needs: r.needs,
        }));
    }
    out
}

/// Every extension point with its interface and version (`nenyax plugins --kinds`).
pub fn kinds() -> Vec<Interface> {
    Kind::ALL.iter().map(|k| k.interface()).collect()
}
