//! The Harbor registry: one `registry.json` (a list of datasets, each `{name, version,
//! description, tasks: [{name, git_url, git_commit_id?, path}]}`) in the harbor repository.
//! Fetching a dataset checks out only the listed task folders (a sparse, shallow checkout per
//! repository and commit) into the cache; the folder loads as `harbor:<folder>`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use serde_json::{json, Map, Value};

use super::common::{cache_dir, get_json, text, var, Listing};
use crate::error::{Error, Result};

const DEFAULT: &str = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json";
const FIX: &str = "set NENYAX_HARBOR_REGISTRY to a reachable registry.json (a URL or a file)";
/// Written into a fetched folder: the pins it was checked out at.
const STAMP: &str = ".nenyax-hub.json";

/// The registry in force: `NENYAX_HARBOR_REGISTRY` (a URL or a local file), else the one in
/// the harbor repository.
pub fn registry_location() -> String {
    var("NENYAX_HARBOR_REGISTRY").unwrap_or_else(|| DEFAULT.into())
}

/// `Ok` when `fetch` can check out here (git is installed).
pub fn readiness() -> std::result::Result<(), String> {
    match Command::new("git").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(
            "fetch checks tasks out with git, which is not installed; search needs nothing".into(),
        ),
    }
}

/// One dataset of the registry.
#[derive(Debug)]
struct Dataset {
    name: String,
    version: String,
    description: String,
    tasks: Vec<Task>,
}

/// One task entry: where its folder is.
#[derive(Debug, Clone)]
struct Task {
    name: String,
    git_url: String,
    commit: Option<String>,
    path: String,
}

fn load() -> Result<Vec<Dataset>> {
    let location = registry_location();
    let value = if location.starts_with("http://") || location.starts_with("https://") {
        get_json(&location, &[], None, FIX)?
    } else {
        let text = crate::limits::read_text(Path::new(&location), &crate::limits::CONFIG_FILE)
            .map_err(|e| e.into_error(format!("reading the Harbor registry {location}")))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::Config(format!("the Harbor registry {location} is not JSON: {e}"))
        })?
    };
    let list = value.as_array().ok_or_else(|| {
        Error::Protocol(format!(
            "the Harbor registry {location} is not a list of datasets"
        ))
    })?;
    Ok(list
        .iter()
        .map(|d| Dataset {
            name: text(d, "name"),
            version: text(d, "version"),
            description: text(d, "description"),
            tasks: d
                .get("tasks")
                .and_then(Value::as_array)
                .map(|ts| {
                    ts.iter()
                        .map(|t| Task {
                            name: text(t, "name"),
                            git_url: text(t, "git_url"),
                            commit: Some(text(t, "git_commit_id")).filter(|c| !c.is_empty()),
                            path: text(t, "path"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .filter(|d| !d.name.is_empty())
        .collect())
}

impl Dataset {
    fn id(&self) -> String {
        if self.version.is_empty() {
            self.name.clone()
        } else {
            format!("{}@{}", self.name, self.version)
        }
    }

    fn folder(&self) -> PathBuf {
        cache_dir().join("harbor").join(self.id())
    }

    fn listing(&self) -> Listing {
        let mut repos: Vec<&str> = self.tasks.iter().map(|t| t.git_url.as_str()).collect();
        repos.sort_unstable();
        repos.dedup();
        let mut meta = Map::new();
        meta.insert("version".into(), json!(self.version));
        meta.insert("tasks".into(), json!(self.tasks.len()));
        meta.insert("repositories".into(), json!(repos));
        Listing {
            hub: "harbor".into(),
            name: self.id(),
            uri: format!("harbor:{}", self.folder().display()),
            description: self.description.clone(),
            meta,
        }
    }
}

/// Datasets whose name, description or a task's name contains `query` (any case).
pub fn search(query: &str, limit: usize) -> Result<Vec<Listing>> {
    let q = query.trim().to_lowercase();
    Ok(load()?
        .iter()
        .filter(|d| {
            q.is_empty()
                || d.name.to_lowercase().contains(&q)
                || d.description.to_lowercase().contains(&q)
                || d.tasks.iter().any(|t| t.name.to_lowercase().contains(&q))
        })
        .take(limit)
        .map(Dataset::listing)
        .collect())
}

/// Numeric versions compare by component and above the rest (`head`, `parity`).
fn version_key(v: &str) -> (bool, Vec<u64>, String) {
    let nums: Option<Vec<u64>> = v.split('.').map(|p| p.parse().ok()).collect();
    (nums.is_some(), nums.unwrap_or_default(), v.to_string())
}

/// Check out `name[@version]` (the highest version when none is given) into the cache and
/// return `harbor:<folder>`.
pub fn fetch(id: &str) -> Result<String> {
    let (name, version) = match id.trim().rsplit_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (id.trim(), None),
    };
    let datasets = load()?;
    let dataset = datasets
        .iter()
        .filter(|d| d.name == name && version.map_or(true, |v| d.version == v))
        .max_by(|a, b| version_key(&a.version).cmp(&version_key(&b.version)))
        .ok_or_else(|| {
            let have: Vec<String> = datasets
                .iter()
                .filter(|d| d.name == name)
                .map(Dataset::id)
                .collect();
            Error::Config(if have.is_empty() {
                format!("the Harbor registry has no dataset {name:?}; `nenyax search harbor` lists them")
            } else {
                format!("the Harbor registry has no {id:?}; it has {}", have.join(", "))
            })
        })?;
    safe_component(&dataset.id(), "dataset")?;
    let dest = dataset.folder();
    let pins = pins(dataset)?;
    // A folder fetched at the same pins is reused; one with an unpinned task (its repository's
    // HEAD, which moves) is fetched again.
    let pinned = dataset.tasks.iter().all(|t| t.commit.is_some());
    let stamp = std::fs::read_to_string(dest.join(STAMP)).ok();
    if pinned && stamp.and_then(|s| serde_json::from_str::<Value>(&s).ok()) == Some(pins.clone()) {
        return Ok(format!("harbor:{}", dest.display()));
    }
    let parent = dest.parent().expect("under the cache");
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    let staging = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(parent)
        .map_err(|e| Error::io(format!("creating a folder in {}", parent.display()), e))?;
    let tasks_dir = staging.path().join("tasks");
    std::fs::create_dir(&tasks_dir).map_err(|e| Error::io("creating the staging folder", e))?;
    let mut groups: BTreeMap<(&str, Option<&str>), Vec<&Task>> = BTreeMap::new();
    for t in &dataset.tasks {
        groups
            .entry((t.git_url.as_str(), t.commit.as_deref()))
            .or_default()
            .push(t);
    }
    for (i, ((url, commit), tasks)) in groups.into_iter().enumerate() {
        let repo = staging.path().join(format!("repo-{i}"));
        checkout(url, commit, &tasks, &repo)?;
        for t in tasks {
            let from = repo.join(&t.path);
            if !from.is_dir() {
                return Err(Error::Config(format!(
                    "the Harbor registry lists {} at {url} {} path {:?}, which is not a folder there",
                    t.name,
                    commit.unwrap_or("HEAD"),
                    t.path
                )));
            }
            let to = tasks_dir.join(&t.name);
            std::fs::rename(&from, &to)
                .map_err(|e| Error::io(format!("moving {} into place", t.name), e))?;
        }
    }
    std::fs::write(tasks_dir.join(STAMP), pins.to_string())
        .map_err(|e| Error::io("writing the fetch stamp", e))?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest)
            .map_err(|e| Error::io(format!("replacing {}", dest.display()), e))?;
    }
    std::fs::rename(&tasks_dir, &dest)
        .map_err(|e| Error::io(format!("moving the tasks to {}", dest.display()), e))?;
    Ok(format!("harbor:{}", dest.display()))
}

/// What a fetched folder was checked out from, after checking every entry is safe to use.
fn pins(d: &Dataset) -> Result<Value> {
    if d.tasks.is_empty() {
        return Err(Error::Config(format!(
            "the Harbor dataset {} lists no tasks",
            d.id()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for t in &d.tasks {
        safe_component(&t.name, "task name")?;
        if !seen.insert(&t.name) {
            return Err(Error::Config(format!(
                "the Harbor dataset {} lists the task {} twice",
                d.id(),
                t.name
            )));
        }
        safe_url(&t.git_url)?;
        let p = Path::new(&t.path);
        if t.path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(Error::Config(format!(
                "the Harbor task {} has the path {:?}; only a relative path inside its repository is accepted",
                t.name, t.path
            )));
        }
        if let Some(c) = &t.commit {
            if !c.chars().all(|ch| ch.is_ascii_hexdigit()) {
                return Err(Error::Config(format!(
                    "the Harbor task {} pins the commit {c:?}, which is not a hex id",
                    t.name
                )));
            }
        }
    }
    Ok(json!(d
        .tasks
        .iter()
        .map(|t| json!([t.name, t.git_url, t.commit, t.path]))
        .collect::<Vec<_>>()))
}

fn safe_component(s: &str, what: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s != "."
        && s != ".."
        && !s.starts_with('.')
        && !s.contains(['/', '\\', '\0']);
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "the Harbor {what} {s:?} cannot name a folder"
        )))
    }
}

/// Only transports that fetch data: no `ext::` commands, no option-looking URLs.
fn safe_url(url: &str) -> Result<()> {
    let ok = ["https://", "http://", "git://", "ssh://", "file://"]
        .iter()
        .any(|p| url.starts_with(p))
        && !url.contains(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "the Harbor registry names the repository {url:?}; only https, http, git, ssh and file URLs are fetched"
        )))
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| {
            Error::Config(format!(
                "cannot run git ({e}); install git to fetch Harbor tasks"
            ))
        })?;
    if out.status.success() {
        return Ok(());
    }
    let last = super::common::last_error_line(&out);
    Err(Error::Config(format!("git {}: {}", args.join(" "), last)))
}

/// A shallow, sparse checkout of `tasks`' folders of `url` at `commit` (HEAD when unpinned).
fn checkout(url: &str, commit: Option<&str>, tasks: &[&Task], dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating a checkout folder", e))?;
    git(dir, &["init", "-q"])?;
    git(dir, &["remote", "add", "origin", url])?;
    let mut sparse = vec!["sparse-checkout", "set", "--no-cone"];
    let patterns: Vec<String> = tasks
        .iter()
        .map(|t| format!("/{}/", t.path.trim_end_matches('/')))
        .collect();
    sparse.extend(patterns.iter().map(String::as_str));
    git(dir, &sparse)?;
    git(
        dir,
        &[
            "fetch",
            "-q",
            "--depth",
            "1",
            "--filter=blob:none",
            "origin",
            commit.unwrap_or("HEAD"),
        ],
    )
    .map_err(|e| match e {
        Error::Config(m) => Error::Config(format!("fetching {url}: {m}")),
        other => other,
    })?;
    git(dir, &["checkout", "-q", "FETCH_HEAD"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_numbers_above_names() {
        let mut v = vec!["head", "1.10", "2.0", "1.9"];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v, ["head", "1.9", "1.10", "2.0"]);
    }

    #[test]
    fn unsafe_entries_are_refused() {
        assert!(safe_url("ext::sh -c touch% /tmp/x").is_err());
        assert!(safe_url("-uupload-pack=x").is_err());
        assert!(safe_url("https://github.com/a/b.git").is_ok());
        for bad in ["..", ".x", "a/b", ""] {
            assert!(safe_component(bad, "task name").is_err(), "{bad}");
        }
    }
}
