//! Images for the container backend: building a task's Dockerfile, caching it by content hash,
//! and mapping base images that cannot be pulled to local ones.
//!
//! A build is tagged `localhost/nenyax-task-<16 hex>`, the hex being a SHA-1 over the
//! Dockerfile, every file of the build context (path, mode, bytes) and the base images it
//! builds on (requested name, the image used and that image's id), so an unchanged task reuses
//! its image and any change (or a rebuilt base) builds a new one. Cached images carry
//! [`CACHE_LABEL`], not the owner label that marks a crashed run's leftovers for sweeping.
//!
//! Machines without a registry (like CI here) cannot pull `FROM ubuntu:24.04`. A base that is
//! neither present nor pullable is looked up in an explicit mapping: `NENYAX_IMAGES`
//! (`from=to,from=to`) first, then the `[images]` table of the config file
//! ([`config_path`]). The build then runs on a copy of the Dockerfile whose `FROM` names the
//! mapped image (the task's file is untouched), and the substitution is part of the result
//! ([`BuiltImage::bases`]) so callers record it. `nenyax images bootstrap` ([`bootstrap`])
//! makes a Debian base image from Debian's packages and writes the mapping for common bases.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use sha1::{Digest, Sha1};

use super::engine::Engine;
use crate::error::{Error, Result};

/// The label on images nenyax keeps as a cache (its value is the content hash).
pub const CACHE_LABEL: &str = "io.nenyax.cache";

/// The label naming the task an image was built for.
pub const TASK_LABEL: &str = "io.nenyax.task";

/// The base image `nenyax images bootstrap` makes and the mappings point to by default.
pub const DEFAULT_BASE: &str = "localhost/nenyax-base:bookworm";

/// Base mappings from the environment: `from=to,from=to`; they win over the config file.
pub const IMAGES_ENV: &str = "NENYAX_IMAGES";

/// The config file's path, when not the default one.
pub const CONFIG_ENV: &str = "NENYAX_CONFIG";

/// The prefix of task image tags.
pub const TASK_IMAGE_PREFIX: &str = "localhost/nenyax-task-";

/// Bases the bootstrap maps to its image: the ones Harbor and Terminal-Bench tasks start from.
pub const COMMON_BASES: &[&str] = &[
    "ubuntu:24.04",
    "ubuntu:22.04",
    "ubuntu:latest",
    "ubuntu",
    "debian:bookworm",
    "debian:bookworm-slim",
    "debian:12",
    "debian:stable",
    "python:3.11-slim",
    "python:3.11-slim-bookworm",
    "python:3.11",
];

/// Packages the bootstrapped base always has: the terminal agent's tmux, ps, TLS roots, and
/// what Harbor's test scripts need offline (python3 with pytest, curl).
pub const BOOTSTRAP_PACKAGES: &[&str] = &[
    "tmux",
    "procps",
    "ca-certificates",
    "curl",
    "python3",
    "python3-pytest",
    "python3-pip",
    "python-is-python3",
];

/// The config file: `$NENYAX_CONFIG`, else `$XDG_CONFIG_HOME/nenyax/config.toml`, else
/// `~/.config/nenyax/config.toml`.
pub fn config_path() -> PathBuf {
    crate::config_file(CONFIG_ENV, "config.toml")
}

/// Where build logs go: `$XDG_CACHE_HOME/nenyax/builds`, else `~/.cache/nenyax/builds`.
pub fn build_log_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("nenyax").join("builds")
}

/// One base mapping and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mapping {
    /// The image a Dockerfile names.
    pub from: String,
    /// The local image used instead.
    pub to: String,
    /// `NENYAX_IMAGES` or the config file's path.
    pub source: String,
}

/// Every mapping in force: `NENYAX_IMAGES` first (it wins), then the config file's `[images]`.
pub fn mappings() -> Result<Vec<Mapping>> {
    let mut out = Vec::new();
    if let Ok(raw) = std::env::var(IMAGES_ENV) {
        for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((from, to)) = item.split_once('=') else {
                return Err(Error::Config(format!(
                    "{IMAGES_ENV}: `{item}` is not `from=to`; write e.g. \
                     {IMAGES_ENV}=\"ubuntu:24.04={DEFAULT_BASE}\""
                )));
            };
            let (from, to) = (from.trim(), to.trim());
            if from.is_empty() || to.is_empty() {
                return Err(Error::Config(format!(
                    "{IMAGES_ENV}: `{item}` has an empty side; write e.g. \
                     {IMAGES_ENV}=\"ubuntu:24.04={DEFAULT_BASE}\""
                )));
            }
            out.push(Mapping {
                from: from.into(),
                to: to.into(),
                source: IMAGES_ENV.into(),
            });
        }
    }
    let path = config_path();
    let table = read_config(&path)?;
    if let Some(images) = table.get("images") {
        let Some(images) = images.as_table() else {
            return Err(Error::Config(format!(
                "{}: `images` must be a table of `\"from\" = \"to\"` strings",
                path.display()
            )));
        };
        for (from, to) in images {
            let Some(to) = to.as_str() else {
                return Err(Error::Config(format!(
                    "{}: [images] `{from}` must be a string naming a local image, not {to}",
                    path.display()
                )));
            };
            out.push(Mapping {
                from: from.clone(),
                to: to.into(),
                source: path.display().to_string(),
            });
        }
    }
    Ok(out)
}

fn read_config(path: &Path) -> Result<toml::Table> {
    match std::fs::read_to_string(path) {
        Ok(raw) => toml::from_str(&raw).map_err(|e| {
            Error::Config(format!(
                "{} is not valid TOML: {e}; fix it or remove it",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(e) => Err(Error::io(format!("read {}", path.display()), e)),
    }
}

/// Set `[images]` entries in the config file, keeping everything else in it; returns one line
/// per entry saying what changed.
pub fn write_mappings(path: &Path, pairs: &[(String, String)]) -> Result<Vec<String>> {
    let mut table = read_config(path)?;
    let images = table
        .entry("images")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(images) = images.as_table_mut() else {
        return Err(Error::Config(format!(
            "{}: `images` is not a table; fix it or remove it",
            path.display()
        )));
    };
    let mut said = Vec::new();
    for (from, to) in pairs {
        match images.get(from).and_then(|v| v.as_str()) {
            Some(old) if old == to => said.push(format!("{from} = {to} (already set)")),
            Some(old) => said.push(format!("{from} = {to} (was {old})")),
            None => said.push(format!("{from} = {to} (new)")),
        }
        images.insert(from.clone(), toml::Value::String(to.clone()));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    }
    let text = toml::to_string_pretty(&table)
        .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    std::fs::write(path, text).map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    Ok(said)
}

/// How one `FROM` image was resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaseChoice {
    /// The image the Dockerfile names.
    pub requested: String,
    /// The image the build used.
    pub used: String,
    /// Whether `used` stands in for `requested` through a mapping.
    pub substituted: bool,
    /// How it was found: `local`, `pulled`, or the mapping's source.
    pub via: String,
}

/// Pulls that failed in this process: a second task on the same base does not wait again.
fn failed_pulls() -> &'static Mutex<HashMap<String, String>> {
    static P: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

/// How long a pull may take before it counts as impossible.
const PULL_TIMEOUT: Duration = Duration::from_secs(300);

/// Resolve one base image: present locally, else pulled, else mapped; else an error saying how
/// to map it or bootstrap a base.
pub fn resolve_base(engine: &Engine, image: &str) -> Result<BaseChoice> {
    if engine.image_exists(image) {
        return Ok(BaseChoice {
            requested: image.into(),
            used: image.into(),
            substituted: false,
            via: "local".into(),
        });
    }
    let known_failure = failed_pulls()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(image)
        .cloned();
    let pull_error = match known_failure {
        Some(why) => why,
        None => {
            let mut cmd = engine.command();
            cmd.args(["pull", "-q", image]);
            match run_with_timeout(cmd, PULL_TIMEOUT, None) {
                Ok((true, _)) => {
                    return Ok(BaseChoice {
                        requested: image.into(),
                        used: image.into(),
                        substituted: false,
                        via: "pulled".into(),
                    })
                }
                Ok((false, out)) => {
                    let why = last_line(&out);
                    failed_pulls()
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(image.into(), why.clone());
                    why
                }
                Err(e) => e.to_string(),
            }
        }
    };
    let maps = mappings()?;
    if let Some(m) = maps.iter().find(|m| m.from == image) {
        if !engine.image_exists(&m.to) {
            return Err(Error::Sandbox(format!(
                "the base image `{image}` is mapped to `{}` (in {}), which is not present \
                 locally; run `nenyax images bootstrap --name {}` to make it, or map `{image}` \
                 to an image `{} images` lists",
                m.to,
                m.source,
                m.to,
                engine.kind().name()
            )));
        }
        return Ok(BaseChoice {
            requested: image.into(),
            used: m.to.clone(),
            substituted: true,
            via: m.source.clone(),
        });
    }
    Err(Error::Sandbox(format!(
        "the base image `{image}` is not present locally and cannot be pulled ({pull_error}), \
         and no mapping names it; map it to a local image with `[images]` in {} (e.g. \
         \"{image}\" = \"{DEFAULT_BASE}\") or {IMAGES_ENV}=\"{image}={DEFAULT_BASE}\", or run \
         `nenyax images bootstrap`, which makes {DEFAULT_BASE} from Debian's packages and maps \
         the common bases to it",
        config_path().display()
    )))
}

fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string()
}

/// Run `cmd` to its end or `timeout`, its stdout and stderr going to `log` (or captured);
/// returns (success, captured output or "").
fn run_with_timeout(
    mut cmd: std::process::Command,
    timeout: Duration,
    log: Option<&Path>,
) -> Result<(bool, String)> {
    let capture = tempfile::tempfile().map_err(|e| Error::io("create a temporary file", e))?;
    let (out, err) = match log {
        Some(p) => {
            let f = std::fs::File::create(p)
                .map_err(|e| Error::io(format!("create {}", p.display()), e))?;
            let g = f
                .try_clone()
                .map_err(|e| Error::io(format!("open {}", p.display()), e))?;
            (f, g)
        }
        None => {
            let g = capture
                .try_clone()
                .map_err(|e| Error::io("open a temporary file", e))?;
            (
                capture
                    .try_clone()
                    .map_err(|e| Error::io("open a temporary file", e))?,
                g,
            )
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("run {program}"), e))?;
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Sandbox(format!(
                    "`{program}` ran past its {}s limit and was stopped",
                    timeout.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(Error::io(format!("wait for {program}"), e)),
        }
    };
    let mut text = String::new();
    if log.is_none() {
        let mut f = capture;
        use std::io::Seek;
        let _ = f.seek(std::io::SeekFrom::Start(0));
        let _ = f.read_to_string(&mut text);
    }
    Ok((status.success(), text))
}

/// What to build: a Dockerfile and its context.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// The task's name (a label on the image, and in messages).
    pub name: String,
    /// The Dockerfile.
    pub dockerfile: PathBuf,
    /// The build context (its directory, for Harbor's environment/ and Terminal-Bench's root).
    pub context: PathBuf,
    /// The build's time limit (Harbor's `build_timeout_sec`).
    pub timeout: Duration,
}

/// A task image, built or reused.
#[derive(Debug, Clone, Serialize)]
pub struct BuiltImage {
    /// Its tag, `localhost/nenyax-task-<16 hex>`.
    pub tag: String,
    /// The full content hash.
    pub hash: String,
    /// How each `FROM` was resolved.
    pub bases: Vec<BaseChoice>,
    /// Whether the cached image was reused (no build ran).
    pub reused: bool,
    /// The build log (kept from the last build of this hash).
    pub log: PathBuf,
}

impl BuiltImage {
    /// Whether any base stands in for the one the Dockerfile names.
    pub fn substituted(&self) -> bool {
        self.bases.iter().any(|b| b.substituted)
    }

    /// The record a trajectory or manifest carries: tag, the last (final stage's) base as
    /// `base_requested`/`base_used`, whether substituted, and every base. Whether the build
    /// was reused is left out, so that two loads of one task describe it alike.
    pub fn to_json(&self) -> Value {
        let last = self.bases.last();
        json!({
            "tag": self.tag,
            "hash": self.hash,
            "base_requested": last.map(|b| b.requested.clone()),
            "base_used": last.map(|b| b.used.clone()),
            "substituted": self.substituted(),
            "bases": self.bases,
            "log": self.log.display().to_string(),
        })
    }
}

/// One `FROM` line: its 0-based line index, the image, and the stage name it defines.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FromLine {
    line: usize,
    image: String,
    stage: Option<String>,
}

/// The `FROM` lines of a Dockerfile (flags such as `--platform` skipped).
fn from_lines(text: &str) -> Vec<FromLine> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        let mut words = t.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let Some(image) = rest.first() else { continue };
        let stage = match rest.as_slice() {
            [_, as_, name, ..] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
            _ => None,
        };
        out.push(FromLine {
            line: i,
            image: image.to_string(),
            stage,
        });
    }
    out
}

/// Build locks by hash, so two loads of one task in this process build it once.
fn build_locks() -> &'static Mutex<HashMap<String, std::sync::Arc<Mutex<()>>>> {
    static L: OnceLock<Mutex<HashMap<String, std::sync::Arc<Mutex<()>>>>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Build the image `spec` describes, or reuse the cached one with the same content hash.
pub fn build(engine: &Engine, spec: &BuildSpec) -> Result<BuiltImage> {
    let text = crate::limits::read_text(&spec.dockerfile, &crate::limits::CONFIG_FILE)
        .map_err(|e| e.into_error(format!("read {}", spec.dockerfile.display())))?;
    let froms = from_lines(&text);
    if froms.is_empty() {
        return Err(Error::Environment(format!(
            "{}: {} has no FROM line, so there is no image to build on",
            spec.name,
            spec.dockerfile.display()
        )));
    }
    // Resolve each FROM that names an image, not an earlier stage.
    let mut stages: Vec<String> = Vec::new();
    let mut bases = Vec::new();
    let mut rewritten: Vec<String> = text.lines().map(str::to_string).collect();
    for f in &froms {
        let is_stage = stages.iter().any(|s| s.eq_ignore_ascii_case(&f.image));
        if !is_stage && f.image != "scratch" && !f.image.contains('$') {
            let choice = resolve_base(engine, &f.image).map_err(|e| match e {
                Error::Sandbox(m) => Error::Sandbox(format!(
                    "{}: {} line {}: {m}",
                    spec.name,
                    spec.dockerfile.display(),
                    f.line + 1
                )),
                other => other,
            })?;
            if choice.substituted {
                rewritten[f.line] = rewritten[f.line].replacen(&f.image, &choice.used, 1);
            }
            bases.push(choice);
        }
        if let Some(s) = &f.stage {
            stages.push(s.clone());
        }
    }
    let hash = content_hash(spec, &rewritten.join("\n"), engine, &bases)?;
    let tag = format!("{TASK_IMAGE_PREFIX}{}", &hash[..16]);
    let logs = build_log_dir();
    let log = logs.join(format!("{}.log", &hash[..16]));
    let lock = build_locks()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(hash.clone())
        .or_default()
        .clone();
    let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
    if engine.image_exists(&tag) {
        return Ok(BuiltImage {
            tag,
            hash,
            bases,
            reused: true,
            log,
        });
    }
    std::fs::create_dir_all(&logs)
        .map_err(|e| Error::io(format!("create {}", logs.display()), e))?;
    // The build reads a copy of the Dockerfile with the mapped FROMs; the task's stays as is.
    let tmp = tempfile::Builder::new()
        .prefix("nenyax-dockerfile-")
        .tempfile()
        .map_err(|e| Error::io("create a temporary Dockerfile", e))?;
    std::fs::write(tmp.path(), rewritten.join("\n") + "\n")
        .map_err(|e| Error::io("write a temporary Dockerfile", e))?;
    let mut cmd = engine.command();
    cmd.arg("build")
        .arg("-f")
        .arg(tmp.path())
        .arg("-t")
        .arg(&tag)
        .arg("--label")
        .arg(format!("{CACHE_LABEL}={hash}"))
        .arg("--label")
        .arg(format!("{TASK_LABEL}={}", spec.name));
    if let Some(b) = bases.last() {
        cmd.arg("--label")
            .arg(format!("io.nenyax.base-requested={}", b.requested))
            .arg("--label")
            .arg(format!("io.nenyax.base-used={}", b.used));
    }
    cmd.arg(&spec.context);
    let ok = match run_with_timeout(cmd, spec.timeout, Some(&log)) {
        Ok((ok, _)) => ok,
        Err(Error::Sandbox(m)) => {
            return Err(Error::Environment(format!(
                "{}: the image build {m} (build_timeout_sec); log: {}",
                spec.name,
                log.display()
            )))
        }
        Err(e) => return Err(e),
    };
    if !ok {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(build_error(spec, &text, &out, &log));
    }
    Ok(BuiltImage {
        tag,
        hash,
        bases,
        reused: false,
        log,
    })
}

/// A failed build as an error quoting the failing step (with its Dockerfile line when it can be
/// found), the log's tail and the log's path.
fn build_error(spec: &BuildSpec, dockerfile: &str, out: &str, log: &Path) -> Error {
    let step = failing_step(out);
    let at = step
        .as_deref()
        .and_then(|s| dockerfile_line(dockerfile, s))
        .map(|n| format!(" (line {n})"))
        .unwrap_or_default();
    let tail: Vec<&str> = out.lines().rev().take(15).collect::<Vec<_>>();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Error::Environment(format!(
        "{}: building {} failed at the step `{}`{at}; the build's last lines:\n{}\nfull log: {}",
        spec.name,
        spec.dockerfile.display(),
        step.as_deref().unwrap_or("(the engine named no step)"),
        tail.join("\n"),
        log.display()
    ))
}

/// The failing step as the engine printed it: Podman's `building at STEP "..."`, BuildKit's
/// `ERROR [n/m] ...`, or the last `STEP`/`Step` line it started.
fn failing_step(out: &str) -> Option<String> {
    for l in out.lines().rev() {
        if let Some(i) = l.find("building at STEP \"") {
            let rest = &l[i + "building at STEP \"".len()..];
            if let Some(end) = rest.find("\": ") {
                return Some(rest[..end].to_string());
            }
            return Some(rest.trim_end_matches('"').to_string());
        }
    }
    for l in out.lines().rev() {
        let t = l.trim();
        if let Some(i) = t.find("ERROR [") {
            if let Some(j) = t[i..].find("] ") {
                return Some(t[i + j + 2..].trim().to_string());
            }
        }
    }
    for l in out.lines().rev() {
        let t = l.trim();
        if t.starts_with("STEP ") || t.starts_with("Step ") {
            if let Some((_, step)) = t.split_once(": ") {
                return Some(step.trim().to_string());
            }
        }
    }
    None
}

/// The 1-based line of the Dockerfile where `step` (as the engine printed it, continuations
/// joined) begins.
fn dockerfile_line(dockerfile: &str, step: &str) -> Option<usize> {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let want = squash(step);
    let lines: Vec<&str> = dockerfile.lines().collect();
    for i in 0..lines.len() {
        let mut joined = String::new();
        for l in &lines[i..] {
            let t = l.trim();
            match t.strip_suffix('\\') {
                Some(body) => {
                    joined.push_str(body);
                    joined.push(' ');
                }
                None => {
                    joined.push_str(t);
                    break;
                }
            }
        }
        let got = squash(&joined);
        if !got.is_empty() && (got == want || (want.len() > 8 && got.starts_with(&want))) {
            return Some(i + 1);
        }
    }
    None
}

/// SHA-1 (hex) over the Dockerfile as built, every context file and the bases' image ids.
fn content_hash(
    spec: &BuildSpec,
    dockerfile: &str,
    engine: &Engine,
    bases: &[BaseChoice],
) -> Result<String> {
    let mut h = Sha1::new();
    h.update(b"nenyax-task-image-v1\0");
    h.update(dockerfile.as_bytes());
    h.update(b"\0");
    let mut files = BTreeMap::new();
    walk(&spec.context, &spec.context, &mut files)?;
    for (rel, (mode, bytes)) in &files {
        h.update(rel.as_bytes());
        h.update(b"\0");
        h.update(format!("{mode:o}").as_bytes());
        h.update(b"\0");
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    for b in bases {
        let id = engine
            .run(
                &["image", "inspect", "--format", "{{.Id}}", &b.used],
                "read a base image's id",
            )
            .unwrap_or_default();
        h.update(format!("{}\0{}\0{}\0", b.requested, b.used, id.trim()).as_bytes());
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Every entry under `dir`: relative path -> (mode, bytes; a symlink's target as its bytes).
fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Vec<u8>)>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("read the build context {}", dir.display()), e))?;
    for e in entries {
        let e = e.map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
        let p = e.path();
        let meta = std::fs::symlink_metadata(&p)
            .map_err(|e| Error::io(format!("stat {}", p.display()), e))?;
        let rel = p
            .strip_prefix(root)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        let mode = meta.permissions().mode();
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&p)
                .map_err(|e| Error::io(format!("read link {}", p.display()), e))?;
            out.insert(rel, (mode, target.to_string_lossy().as_bytes().to_vec()));
        } else if meta.is_dir() {
            out.insert(rel, (mode, Vec::new()));
            walk(root, &p, out)?;
        } else if meta.is_file() {
            let bytes =
                std::fs::read(&p).map_err(|e| Error::io(format!("read {}", p.display()), e))?;
            out.insert(rel, (mode, bytes));
        }
    }
    Ok(())
}

/// One cached task image, as `nenyax images list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CachedImage {
    /// Its tag.
    pub tag: String,
    /// The task it was built for.
    pub task: String,
    /// The base the Dockerfile names and the one used.
    pub base_requested: String,
    /// The base it was built on.
    pub base_used: String,
    /// Size as the engine prints it.
    pub size: String,
    /// When it was built, as the engine prints it.
    pub created: String,
}

/// The task images nenyax keeps (those labelled [`CACHE_LABEL`]).
pub fn cached_images(engine: &Engine) -> Result<Vec<CachedImage>> {
    // Docker's `images --format` has no labels, so they come from one `image inspect`.
    let out = engine.run(
        &[
            "images",
            "--filter",
            &format!("label={CACHE_LABEL}"),
            "--format",
            "{{.Repository}}:{{.Tag}}\t{{.Size}}\t{{.CreatedSince}}\t{{.ID}}",
        ],
        "list cached images",
    )?;
    let rows: Vec<Vec<String>> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('\t').map(|f| f.trim().to_string()).collect())
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec![
        "image".to_string(),
        "inspect".into(),
        "--format".into(),
        "{{json .Config.Labels}}".into(),
    ];
    // By id: an image whose tag moved to a newer build lists as `<none>:<none>`.
    args.extend(rows.iter().map(|r| r.get(3).cloned().unwrap_or_default()));
    let labels = engine.run(&args, "read cached images' labels")?;
    let labels: Vec<Value> = labels
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect();
    Ok(rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let g = |k: usize| r.get(k).cloned().unwrap_or_default();
            let label = |k: &str| {
                labels
                    .get(i)
                    .and_then(|l| l.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            CachedImage {
                tag: g(0),
                task: label(TASK_LABEL),
                base_requested: label("io.nenyax.base-requested"),
                base_used: label("io.nenyax.base-used"),
                size: g(1),
                created: g(2),
            }
        })
        .collect())
}

/// What `nenyax images bootstrap` makes.
#[derive(Debug, Clone)]
pub struct BootstrapOptions {
    /// The image's name.
    pub name: String,
    /// The Debian suite.
    pub suite: String,
    /// Packages beyond [`BOOTSTRAP_PACKAGES`].
    pub include: Vec<String>,
    /// The Debian mirror (mmdebstrap's default when `None`).
    pub mirror: Option<String>,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        BootstrapOptions {
            name: DEFAULT_BASE.into(),
            suite: "bookworm".into(),
            include: Vec::new(),
            mirror: None,
        }
    }
}

/// Make a Debian base image with `mmdebstrap --variant=minbase` and import it; `say` hears
/// each step. The mapping is the caller's to write ([`write_mappings`]).
pub fn bootstrap(
    engine: &Engine,
    opts: &BootstrapOptions,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    for p in &opts.include {
        if p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.:".contains(c))
        {
            return Err(Error::Config(format!(
                "--include: `{p}` is not a Debian package name (letters, digits and + - . : \
                 only; several are separated by commas)"
            )));
        }
    }
    if opts.suite.is_empty()
        || !opts
            .suite
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(Error::Config(format!(
            "--suite: `{}` is not a Debian suite name such as bookworm or trixie",
            opts.suite
        )));
    }
    if which("mmdebstrap").is_none() {
        return Err(Error::Sandbox(
            "mmdebstrap is not installed; run `nenyax setup container` (or `apt-get install \
             mmdebstrap`) first"
                .into(),
        ));
    }
    let dir = tempfile::Builder::new()
        .prefix("nenyax-bootstrap-")
        .tempdir()
        .map_err(|e| Error::io("create a temporary directory", e))?;
    let tar = dir.path().join("rootfs.tar");
    let mut pkgs: Vec<String> = BOOTSTRAP_PACKAGES.iter().map(|s| s.to_string()).collect();
    for p in &opts.include {
        if !pkgs.contains(p) {
            pkgs.push(p.clone());
        }
    }
    let mut cmd = std::process::Command::new("mmdebstrap");
    cmd.arg("--variant=minbase")
        .arg(format!("--include={}", pkgs.join(",")))
        // Debian's python3 refuses `pip install` outside a venv (PEP 668); the images Harbor
        // tasks name (python:*, ubuntu) are used with plain `pip install`, so allow it.
        .arg("--customize-hook=mkdir -p \"$1/etc\" && printf '[global]\\nbreak-system-packages = true\\n' > \"$1/etc/pip.conf\"")
        .arg(&opts.suite)
        .arg(&tar);
    if let Some(m) = &opts.mirror {
        cmd.arg(m);
    }
    say(&format!(
        "mmdebstrap --variant=minbase --include={} {} (from Debian's packages; about a minute)",
        pkgs.join(","),
        opts.suite
    ));
    let (ok, out) = run_with_timeout(cmd, Duration::from_secs(1800), None)?;
    if !ok {
        let tail: Vec<&str> = out.lines().rev().take(15).collect();
        return Err(Error::Sandbox(format!(
            "mmdebstrap failed for suite `{}`:\n{}",
            opts.suite,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    say(&format!("{} import {}", engine.kind().name(), opts.name));
    let args: Vec<std::ffi::OsString> = vec![
        "import".into(),
        "--change".into(),
        "CMD [\"/bin/bash\"]".into(),
        "--change".into(),
        "LABEL io.nenyax.base=bootstrap".into(),
        tar.clone().into_os_string(),
        opts.name.clone().into(),
    ];
    engine.run(&args, "import the bootstrapped root file system")?;
    Ok(())
}

/// A program's path on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_lines_skip_flags_and_name_stages() {
        let f = from_lines(
            "# c\nFROM --platform=linux/amd64 ubuntu:24.04 AS build\nRUN x\nfrom build\n",
        );
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].image, "ubuntu:24.04");
        assert_eq!(f[0].stage.as_deref(), Some("build"));
        assert_eq!(f[0].line, 1);
        assert_eq!(f[1].image, "build");
    }

    #[test]
    fn the_failing_step_is_found_in_podman_and_buildkit_output() {
        let podman = "STEP 1/3: FROM x\nSTEP 2/3: RUN false\nError: building at STEP \"RUN false\": while running runtime: exit status 1\n";
        assert_eq!(failing_step(podman).as_deref(), Some("RUN false"));
        let kit = "#5 [2/3] RUN false\n#5 ERROR: process did not complete\n------\n > [2/3] RUN false:\nERROR [2/3] RUN false\n";
        assert_eq!(failing_step(kit).as_deref(), Some("RUN false"));
        let df = "FROM a\nRUN apt-get update && \\\n    apt-get install -y nope\n";
        assert_eq!(
            dockerfile_line(df, "RUN apt-get update &&     apt-get install -y nope"),
            Some(2)
        );
    }
}
