//! The plugins config: which third-party plugins this machine has, and where they live.
//!
//! One TOML file (`$NENYAX_PLUGINS`, else `$XDG_CONFIG_HOME/nenyax/plugins.toml`, else
//! `~/.config/nenyax/plugins.toml`, else `/etc/nenyax/plugins.toml`); no file means no configured plugins, not an error, so that a
//! fresh machine runs on the built-in set. Each `[[plugin]]` names an executable driver
//! (`command`) or a shared library of any other kind (`library`), see docs/plugins.md.

use serde::Deserialize;
use std::path::{Path, PathBuf};

use super::kinds::Kind;
use crate::error::{Error, Result};

/// The variable that points at a plugins config file, overriding the per-user one.
pub const CONFIG_ENV: &str = "NENYAX_PLUGINS";

/// One configured plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// What `use = "..."` picks; for a driver also its default URI scheme.
    pub name: String,
    /// Its extension point.
    pub kind: Kind,
    /// An executable driver's program and arguments (empty for a library plugin).
    pub command: Vec<String>,
    /// A library plugin's shared library, resolved against the config file's folder.
    pub library: Option<PathBuf>,
    /// A driver's URI scheme when it is not `name`.
    pub scheme: Option<String>,
    /// One line on what it does, for `nenyax plugins` and `nenyax drivers`.
    pub summary: Option<String>,
    /// A provider's OpenAI-compatible base URL (providers are data, not code).
    pub base_url: Option<String>,
    /// The variable holding a provider's API key (default `<NAME>_API_KEY`).
    pub key_var: Option<String>,
    /// The config file it came from, so listings and errors can say where to fix it.
    pub source: PathBuf,
}

impl Entry {
    /// The URI scheme of a driver entry (its `scheme`, else its name).
    pub fn scheme(&self) -> &str {
        self.scheme.as_deref().unwrap_or(&self.name)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    plugin: Vec<RawEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    name: String,
    kind: String,
    #[serde(default)]
    command: Vec<String>,
    library: Option<PathBuf>,
    scheme: Option<String>,
    summary: Option<String>,
    base_url: Option<String>,
    key_var: Option<String>,
}

/// Where the plugins config is looked for, whether or not it exists.
pub fn path() -> PathBuf {
    crate::config_file(CONFIG_ENV, "plugins.toml")
}

/// The configured plugins; an empty list when there is no config file. A file named by
/// `NENYAX_PLUGINS` that does not exist is an error, since the user asked for it.
pub fn entries() -> Result<Vec<Entry>> {
    let file = path();
    let explicit = std::env::var_os(CONFIG_ENV).is_some_and(|p| !p.is_empty());
    match std::fs::read_to_string(&file) {
        Ok(text) => parse(&text, &file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => Ok(Vec::new()),
        Err(e) => Err(Error::Config(format!(
            "cannot read the plugins config {} (named by {CONFIG_ENV}): {e}",
            file.display()
        ))),
    }
}

/// Parse a plugins config's text; `source` is the file, for relative library paths and errors.
pub fn parse(text: &str, source: &Path) -> Result<Vec<Entry>> {
    let bad = |what: String| {
        Error::Config(format!(
            "plugins config {}: {what} (see docs/plugins.md)",
            source.display()
        ))
    };
    let file: File = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let dir = source.parent().unwrap_or(Path::new("."));
    let mut out: Vec<Entry> = Vec::new();
    for raw in file.plugin {
        let name = raw.name.trim().to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad(format!(
                "plugin name `{}` must be letters, digits, `_` or `-`",
                raw.name
            )));
        }
        let kind = Kind::parse(&raw.kind).map_err(|e| bad(format!("plugin `{name}`: {e}")))?;
        let library = raw
            .library
            .map(|p| if p.is_relative() { dir.join(p) } else { p });
        if kind == Kind::Provider {
            let url = raw.base_url.as_deref().unwrap_or_default();
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
                return Err(bad(format!(
                    "provider `{name}` needs `base_url = \"https://host/v1\"` (its \
                     OpenAI-compatible API; providers are data, not code)"
                )));
            }
            if !raw.command.is_empty() || library.is_some() {
                return Err(bad(format!(
                    "provider `{name}` is a base URL and a key variable, not a program: drop \
                     `command`/`library`"
                )));
            }
            if let Some(var) = &raw.key_var {
                if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(bad(format!(
                        "provider `{name}`: key_var `{var}` must be an environment variable name"
                    )));
                }
            }
        } else if raw.base_url.is_some() || raw.key_var.is_some() {
            return Err(bad(format!(
                "`base_url` and `key_var` are for providers; {kind} plugin `{name}` does not take them"
            )));
        }
        match (kind, raw.command.is_empty(), library.is_some()) {
            (Kind::Provider, _, _) => {}
            (Kind::Driver, false, false) | (Kind::Driver, true, true) => {}
            (Kind::Driver, _, _) => {
                return Err(bad(format!(
                    "driver `{name}` needs exactly one of `command = [\"program\", ...]` (an \
                     executable speaking docs/bridge.md) or `library = \"path\"`"
                )))
            }
            (_, false, _) => {
                return Err(bad(format!(
                    "{kind} plugin `{name}` has a `command`, but only drivers run as \
                     executables; give its shared library as `library = \"path\"`"
                )))
            }
            (_, true, false) => {
                return Err(bad(format!(
                    "{kind} plugin `{name}` needs `library = \"path/to/lib{name}.so\"`"
                )))
            }
            _ => {}
        }
        if raw.scheme.is_some() && kind != Kind::Driver {
            return Err(bad(format!(
                "`scheme` is for drivers; {kind} plugin `{name}` is picked by `use = \"{name}\"`"
            )));
        }
        if out.iter().any(|e| e.kind == kind && e.name == name) {
            return Err(bad(format!("{kind} plugin `{name}` is listed twice")));
        }
        out.push(Entry {
            name,
            kind,
            command: raw.command,
            library,
            scheme: raw.scheme,
            summary: raw.summary,
            base_url: raw.base_url,
            key_var: raw.key_var,
            source: source.to_path_buf(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_at(text: &str) -> Result<Vec<Entry>> {
        parse(text, Path::new("/etc/nenyax/plugins.toml"))
    }

    #[test]
    fn drivers_and_libraries_parse_with_paths_resolved_against_the_file() {
        let got = parse_at(
            r#"
            [[plugin]]
            name = "acme"
            kind = "driver"
            command = ["/opt/acme/nenyax-driver-acme", "--quiet"]
            scheme = "acme_env"

            [[plugin]]
            name = "exact"
            kind = "judge"
            library = "lib/libexact.so"
            summary = "exact answers"
            "#,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].kind, Kind::Driver);
        assert_eq!(got[0].scheme(), "acme_env");
        assert_eq!(got[0].command.len(), 2);
        assert_eq!(
            got[1].library.as_deref(),
            Some(Path::new("/etc/nenyax/lib/libexact.so"))
        );
        assert_eq!(got[1].scheme(), "exact");
    }

    #[test]
    fn mistakes_name_the_plugin_and_the_fix() {
        let cases = [
            ("[[plugin]]\nname = \"a\"\nkind = \"judges\"\nlibrary = \"x.so\"", "unknown plugin kind `judges`"),
            ("[[plugin]]\nname = \"a\"\nkind = \"judge\"\ncommand = [\"x\"]", "only drivers run as executables"),
            ("[[plugin]]\nname = \"a\"\nkind = \"judge\"", "needs `library"),
            ("[[plugin]]\nname = \"a\"\nkind = \"driver\"", "exactly one of"),
            ("[[plugin]]\nname = \"a b\"\nkind = \"hub\"\nlibrary = \"x.so\"", "letters, digits"),
            ("[[plugin]]\nname = \"a\"\nkind = \"hub\"\nlibrary = \"x.so\"\nscheme = \"s\"", "`scheme` is for drivers"),
            ("[[plugin]]\nname = \"a\"\nkind = \"hub\"\nlibrary = \"x.so\"\n[[plugin]]\nname = \"a\"\nkind = \"hub\"\nlibrary = \"y.so\"", "listed twice"),
            ("[[plugin]]\nname = \"a\"\nkind = \"hub\"\nlibary = \"x.so\"", "unknown field `libary`"),
            ("[[plugin]]\nname = \"a\"\nkind = \"provider\"", "needs `base_url"),
            ("[[plugin]]\nname = \"a\"\nkind = \"provider\"\nbase_url = \"ftp://x/v1\"", "needs `base_url"),
            ("[[plugin]]\nname = \"a\"\nkind = \"provider\"\nbase_url = \"https://x.io/v1\"\nlibrary = \"x.so\"", "not a program"),
            ("[[plugin]]\nname = \"a\"\nkind = \"provider\"\nbase_url = \"https://x.io/v1\"\nkey_var = \"A-B\"", "environment variable name"),
            ("[[plugin]]\nname = \"a\"\nkind = \"judge\"\nlibrary = \"x.so\"\nbase_url = \"https://x.io/v1\"", "are for providers"),
        ];
        for (text, want) in cases {
            let e = parse_at(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("/etc/nenyax/plugins.toml"), "{e}");
        }
    }

    #[test]
    fn an_empty_file_has_no_plugins() {
        assert!(parse_at("").unwrap().is_empty());
    }
}
