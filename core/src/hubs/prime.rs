//! The Prime Intellect Environments Hub: `GET /api/v1/environmentshub/` lists Verifiers
//! environments (as `prime env list` calls it); fetching reads `…/{owner}/{name}/@{version}`
//! and installs the package the way `prime env install` and Verifiers' own `install_from_hub`
//! do: from the hub's simple index (or its wheel URL) into the interpreter the `verifiers:`
//! driver runs.

use std::process::Command;

use serde_json::{Map, Value};

use super::common::{get_json, text, var, Listing};
use crate::error::{Error, Result};

const DEFAULT: &str = "https://api.primeintellect.ai";
const FIX: &str = "set NENYAX_PRIME_API to a reachable Environments Hub";

/// The API in force: `NENYAX_PRIME_API`, else api.primeintellect.ai (without `/api/v1`).
pub fn endpoint() -> String {
    let base = var("NENYAX_PRIME_API").unwrap_or_else(|| DEFAULT.into());
    base.trim_end_matches('/')
        .trim_end_matches("/api/v1")
        .to_string()
}

/// The interpreter `fetch` installs into: the one `verifiers:` environments load in.
pub fn python() -> String {
    #[cfg(feature = "python")]
    {
        crate::bridge::default_python()
    }
    #[cfg(not(feature = "python"))]
    {
        var("NENYAX_PYTHON").unwrap_or_else(|| "python3".into())
    }
}

/// `Ok` when `fetch` can install here: the interpreter runs and has Verifiers.
pub fn readiness() -> std::result::Result<(), String> {
    let py = python();
    let probe = Command::new(&py)
        .args([
            "-c",
            "import importlib.util as u, sys; sys.exit(u.find_spec('verifiers') is None)",
        ])
        .output();
    match probe {
        Ok(o) if o.status.success() => Ok(()),
        Ok(_) => Err(format!(
            "fetch installs into {py}, which lacks verifiers (pip install verifiers there, or set \
             NENYAX_PYTHON to a Python that has it); search needs nothing"
        )),
        Err(e) => Err(format!(
            "fetch installs into {py}, which cannot start ({e}); set NENYAX_PYTHON; search needs \
             nothing"
        )),
    }
}

/// Environments matching `query`, most starred first.
pub fn search(query: &str, limit: usize) -> Result<Vec<Listing>> {
    let mut q = vec![
        ("include_teams", "true".to_string()),
        ("limit", limit.to_string()),
        ("offset", "0".to_string()),
        ("sort_by", "stars".to_string()),
        ("sort_order", "desc".to_string()),
    ];
    if !query.trim().is_empty() {
        q.push(("search", query.trim().to_string()));
    }
    let url = format!("{}/api/v1/environmentshub/", endpoint());
    let reply = get_json(&url, &q, var("PRIME_API_KEY"), FIX)?;
    // `prime env list` accepts both names for the list.
    let envs = reply
        .get("data")
        .or_else(|| reply.get("environments"))
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Endpoint {
            url: url.clone(),
            message: "the reply has no `data` list of environments".into(),
        })?;
    Ok(envs.iter().take(limit).filter_map(listing).collect())
}

fn listing(env: &Value) -> Option<Listing> {
    let name = text(env, "name");
    let owner = env
        .pointer("/owner/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() || owner.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    for key in [
        "latest_version",
        "stars",
        "visibility",
        "tags",
        "updated_at",
    ] {
        if let Some(v) = env.get(key).filter(|v| !v.is_null()) {
            meta.insert(key.into(), v.clone());
        }
    }
    Some(Listing {
        hub: "prime".into(),
        name: format!("{owner}/{name}"),
        uri: format!("verifiers:{}", module_name(&name)),
        description: text(env, "description"),
        meta,
    })
}

/// The package's import name, as Verifiers and prime-cli normalise it.
fn module_name(name: &str) -> String {
    name.replace('-', "_").to_lowercase()
}

/// `owner/name[@version]` split; the version defaults to `latest`.
fn parse(id: &str) -> Result<(String, String, String)> {
    let (path, version) = id.trim().rsplit_once('@').unwrap_or((id.trim(), "latest"));
    let safe = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match path.split_once('/') {
        Some((owner, name)) if safe(owner) && safe(name) && safe(version) => {
            Ok((owner.into(), name.into(), version.into()))
        }
        _ => Err(Error::Config(format!(
            "{id:?} is not an Environments Hub id; give owner/name or owner/name@version as \
             `nenyax search prime` lists it"
        ))),
    }
}

/// Install `owner/name[@version]` into [`python`] and return `verifiers:<module>`.
pub fn fetch(id: &str) -> Result<String> {
    let (owner, name, version) = parse(id)?;
    let url = format!(
        "{}/api/v1/environmentshub/{owner}/{name}/@{version}",
        endpoint()
    );
    let reply = get_json(&url, &[], var("PRIME_API_KEY"), FIX)?;
    let details = reply.get("data").unwrap_or(&reply);
    let module = module_name(&name);
    let index = text(details, "simple_index_url");
    let wheel = text(details, "wheel_url");
    let wheel = (wheel.starts_with("https://") || wheel.starts_with("http://")).then_some(wheel);
    let mut args: Vec<String> = vec!["--upgrade".into()];
    if !index.is_empty() {
        args.push(if version == "latest" {
            module.clone()
        } else {
            format!("{module}=={version}")
        });
        args.extend(["--extra-index-url".into(), index]);
    } else if let Some(w) = wheel {
        args.push(w);
    } else {
        let why = if text(details, "visibility") == "PRIVATE" {
            "it is private and offers no package; `prime env pull` it and install the folder"
        } else {
            "the hub offers neither a package index nor a wheel for it"
        };
        return Err(Error::Config(format!(
            "cannot install {owner}/{name}: {why}"
        )));
    }
    if let Some(deps) = details.get("url_dependencies").and_then(Value::as_array) {
        args.extend(deps.iter().filter_map(|d| d.as_str().map(str::to_string)));
    }
    install(&python(), &args, &format!("{owner}/{name}@{version}"))?;
    Ok(format!("verifiers:{module}"))
}

/// `uv pip install --python PY ARGS` when uv is on PATH (as Verifiers does), else
/// `PY -m pip install ARGS`.
fn install(py: &str, args: &[String], what: &str) -> Result<()> {
    let uv = Command::new("uv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut cmd = if uv {
        let mut c = Command::new("uv");
        c.args(["pip", "install", "--python", py]);
        c
    } else {
        let mut c = Command::new(py);
        c.args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
        ]);
        c
    };
    let out = cmd.args(args).output().map_err(|e| {
        Error::Config(format!(
            "cannot run the installer for {what} ({e}); set NENYAX_PYTHON to a Python with pip"
        ))
    })?;
    if out.status.success() {
        return Ok(());
    }
    let last = super::common::last_error_line(&out);
    Err(Error::Config(format!(
        "installing {what} into {py} failed: {}",
        last
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_with_and_without_versions() {
        assert_eq!(
            parse("primeintellect/gsm8k").unwrap(),
            ("primeintellect".into(), "gsm8k".into(), "latest".into())
        );
        assert_eq!(parse("a/b-c@0.1.2").unwrap().2, "0.1.2");
        for bad in ["gsm8k", "a/b/c", "a/../b", "/b", "a/b@", "a/b c"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(module_name("Reverse-Text"), "reverse_text");
    }
}
