//! The public registry of plugins (`registry/plugins.toml`), compiled into the library so that
//! an installed binary lists it without a source checkout, and validated by the tests so that a
//! bad entry fails CI rather than a user's `nenyax plugins --registry`.

use serde::{Deserialize, Serialize};

use super::kinds::Kind;
use crate::error::{Error, Result};

/// The registry as this build shipped it.
pub const REGISTRY_TOML: &str = include_str!("../../../registry/plugins.toml");

/// The registry format this build reads.
pub const SCHEMA: u32 = 1;

/// One listed plugin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listed {
    /// What `use = "..."` or a driver's URI scheme picks.
    pub name: String,
    /// Its extension point.
    pub kind: Kind,
    /// Its repository (https) or a folder of the Nenyax repository.
    pub source: String,
    /// Who keeps it, with a contact.
    pub maintainer: String,
    /// One line on what it does.
    pub summary: String,
    /// What it is written in.
    pub language: String,
    /// The version of its kind's interface it speaks.
    pub interface: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    schema: u32,
    #[serde(default)]
    plugin: Vec<Raw>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    kind: String,
    source: String,
    maintainer: String,
    summary: String,
    language: String,
    interface: u32,
}

const LANGUAGES: &[&str] = &["c", "cpp", "go", "python", "rust", "julia", "other"];

/// The registry compiled into this build.
pub fn listed() -> Result<Vec<Listed>> {
    parse(REGISTRY_TOML)
}

/// Parse and validate a registry file's text: every rule a pull request to the registry must
/// meet, so CI (and `nenyax plugins --registry`) reject what users could not use.
pub fn parse(text: &str) -> Result<Vec<Listed>> {
    let bad = |what: String| Error::Config(format!("registry/plugins.toml: {what}"));
    let file: File = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    if file.schema != SCHEMA {
        return Err(bad(format!(
            "schema {} is not the schema {SCHEMA} this build reads",
            file.schema
        )));
    }
    let mut out: Vec<Listed> = Vec::new();
    for raw in file.plugin {
        let name = &raw.name;
        let kind = Kind::parse(&raw.kind).map_err(|e| bad(format!("plugin `{name}`: {e}")))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        {
            return Err(bad(format!(
                "plugin name `{name}` must be lowercase letters, digits, `_` or `-`"
            )));
        }
        if out.iter().any(|l| l.kind == kind && &l.name == name) {
            return Err(bad(format!("{kind} plugin `{name}` is listed twice")));
        }
        let remote = raw.source.starts_with("https://");
        let local = !raw.source.is_empty()
            && !raw.source.contains("..")
            && !raw.source.starts_with('/')
            && !raw.source.contains("://");
        if !(remote || local) {
            return Err(bad(format!(
                "plugin `{name}`: source `{}` must be an https URL or a folder of this repository",
                raw.source
            )));
        }
        if !raw.maintainer.contains('@') && !raw.maintainer.contains("https://") {
            return Err(bad(format!(
                "plugin `{name}`: maintainer `{}` needs a contact (an email or an https URL)",
                raw.maintainer
            )));
        }
        if raw.summary.trim().is_empty() || raw.summary.contains('\n') {
            return Err(bad(format!("plugin `{name}`: summary must be one line")));
        }
        if !LANGUAGES.contains(&raw.language.as_str()) {
            return Err(bad(format!(
                "plugin `{name}`: language `{}` is not one of {}",
                raw.language,
                LANGUAGES.join(", ")
            )));
        }
        match kind.interface().version {
            Some(v) if v == raw.interface => {}
            Some(v) => {
                return Err(bad(format!(
                    "{kind} plugin `{name}` speaks interface version {}, but this build's {kind} \
                     interface is version {v}",
                    raw.interface
                )))
            }
            None => {
                return Err(bad(format!(
                    "{kind} plugin `{name}`: {kind}s take no third-party plugins yet"
                )))
            }
        }
        out.push(Listed {
            name: raw.name,
            kind,
            source: raw.source,
            maintainer: raw.maintainer,
            summary: raw.summary,
            language: raw.language,
            interface: raw.interface,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_registry_is_valid_and_its_local_sources_exist() {
        let listed = listed().unwrap();
        assert!(!listed.is_empty());
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for l in &listed {
            if !l.source.starts_with("https://") {
                assert!(
                    root.join(&l.source).is_dir(),
                    "{} {}: source folder {} is missing",
                    l.kind,
                    l.name,
                    l.source
                );
            }
        }
    }

    #[test]
    fn bad_entries_are_refused_with_the_rule_they_break() {
        let entry = |fields: &str| format!("schema = 1\n[[plugin]]\n{fields}");
        let good = "name = \"x\"\nkind = \"judge\"\nsource = \"https://example.org/x\"\n\
                    maintainer = \"a@b.c\"\nsummary = \"s\"\nlanguage = \"c\"\ninterface = 1";
        assert_eq!(parse(&entry(good)).unwrap().len(), 1);
        let cases = [
            (good.replace("judge", "judges"), "unknown plugin kind"),
            (good.replace("name = \"x\"", "name = \"X Y\""), "lowercase"),
            (good.replace("https://example.org/x", "/abs"), "https URL"),
            (good.replace("https://example.org/x", "../up"), "https URL"),
            (good.replace("a@b.c", "anon"), "needs a contact"),
            (good.replace("\"c\"", "\"cobol\""), "language"),
            (
                good.replace("interface = 1", "interface = 9"),
                "interface version 9",
            ),
            (format!("{good}\nextra = 1"), "unknown field"),
        ];
        for (fields, want) in cases {
            let e = parse(&entry(&fields)).unwrap_err().to_string();
            assert!(e.contains(want), "{fields}: {e}");
        }
        let twice = format!("{}\n[[plugin]]\n{good}", entry(good));
        assert!(parse(&twice).unwrap_err().to_string().contains("twice"));
        assert!(parse("schema = 2")
            .unwrap_err()
            .to_string()
            .contains("schema 2"));
    }
}
