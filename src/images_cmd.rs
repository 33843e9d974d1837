//! `nenyax images` (bootstrap and list the container backend's images) and
//! `nenyax setup container` (install and configure the engine on Debian or Ubuntu).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use nenyax::sandbox::engine::Engine;
use nenyax::sandbox::images::{self, BootstrapOptions};
use nenyax::Error;

/// `nenyax images ...`.
#[derive(Subcommand)]
pub enum ImagesAction {
    /// Make a Debian base image from Debian's packages (mmdebstrap) and map common bases to it
    Bootstrap {
        /// The image's name
        #[arg(long, default_value = images::DEFAULT_BASE)]
        name: String,
        /// The Debian suite
        #[arg(long, default_value = "bookworm")]
        suite: String,
        /// More packages, comma-separated (tmux, procps, ca-certificates, curl, python3 with
        /// pytest and pip are always included)
        #[arg(long, value_delimiter = ',')]
        include: Vec<String>,
        /// The Debian mirror (mmdebstrap's default otherwise)
        #[arg(long)]
        mirror: Option<String>,
        /// Do not write the mapping of common bases (ubuntu:24.04, debian:bookworm, ...) to it
        #[arg(long)]
        no_map: bool,
    },
    /// List nenyax's cached task images and the base mappings in force
    List {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
}

/// Run `nenyax images ACTION`.
pub fn images(action: ImagesAction) -> Result<ExitCode, Error> {
    match action {
        ImagesAction::Bootstrap {
            name,
            suite,
            include,
            mirror,
            no_map,
        } => {
            let engine = Engine::detect()?;
            let opts = BootstrapOptions {
                name: name.clone(),
                suite,
                include,
                mirror,
            };
            images::bootstrap(&engine, &opts, &mut |s| eprintln!("$ {s}"))?;
            outln!("made {name} from Debian's packages")?;
            if !no_map {
                let path = images::config_path();
                let pairs: Vec<(String, String)> = images::COMMON_BASES
                    .iter()
                    .map(|b| (b.to_string(), name.clone()))
                    .collect();
                let said = images::write_mappings(&path, &pairs)?;
                outln!(
                    "mapped in {} ([images]; a build that cannot pull one of these uses {name} \
                     and records the substitution):",
                    path.display()
                )?;
                for s in said {
                    outln!("  {s}")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ImagesAction::List { json } => {
            let maps = images::mappings()?;
            let engine = Engine::detect()?;
            let cached = images::cached_images(&engine)?;
            if json {
                let maps: Vec<_> = maps
                    .iter()
                    .map(|m| {
                        json!({"from": m.from, "to": m.to, "source": m.source,
                               "present": engine.image_exists(&m.to)})
                    })
                    .collect();
                outln!(
                    "{}",
                    json!({"engine": engine.kind().name(), "config": images::config_path(),
                           "mappings": maps, "cached": cached})
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            outln!(
                "base mappings ({} and {}):",
                images::IMAGES_ENV,
                images::config_path().display()
            )?;
            if maps.is_empty() {
                outln!("  none; `nenyax images bootstrap` makes a base and maps common ones")?;
            }
            for m in &maps {
                let present = if engine.image_exists(&m.to) {
                    ""
                } else {
                    "  (not present: `nenyax images bootstrap`)"
                };
                outln!("  {:<28} -> {}  [{}]{present}", m.from, m.to, m.source)?;
            }
            outln!(
                "cached task images ({} label {}):",
                engine.kind().name(),
                images::CACHE_LABEL
            )?;
            if cached.is_empty() {
                outln!("  none")?;
            }
            for c in &cached {
                let base = if c.base_requested.is_empty() || c.base_requested == c.base_used {
                    c.base_used.clone()
                } else {
                    format!("{} (for {})", c.base_used, c.base_requested)
                };
                outln!(
                    "  {:<40} {:<20} {:>10}  {:<16} on {base}",
                    c.tag,
                    c.task,
                    c.size,
                    c.created
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What the engine needs from Debian's packages. catatonit is only a recommendation of podman's,
/// but `--init` (every sandbox container's) fails without it.
const PACKAGES: &[&str] = &[
    "podman",
    "runc",
    "catatonit",
    "mmdebstrap",
    "uidmap",
    "slirp4netns",
];

/// `nenyax setup container [--dry-run]`: packages, containers.conf, then the engine answers.
pub fn setup_container(dry_run: bool) -> Result<ExitCode, Error> {
    let would = if dry_run { "would run" } else { "running" };
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |k: &str| {
        os.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default()
    };
    let (id, like) = (field("ID"), field("ID_LIKE"));
    let debian = [id.as_str(), like.as_str()]
        .iter()
        .any(|s| s.split_whitespace().any(|w| w == "debian" || w == "ubuntu"));
    if !debian {
        return Err(Error::Config(format!(
            "nenyax setup container knows Debian and Ubuntu (apt-get); this is `{}`: install \
             {} with its package manager, then run `nenyax sandboxes`",
            if id.is_empty() {
                "an unknown system"
            } else {
                &id
            },
            PACKAGES.join(", ")
        )));
    }
    // 1. Packages.
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        outln!("packages: {} are installed", PACKAGES.join(", "))?;
    } else {
        let root = is_root();
        if !root && !dry_run {
            return Err(Error::Config(format!(
                "nenyax setup container must install {} and needs root for apt-get; run it as \
                 root (or `sudo apt-get install {}`)",
                missing.join(", "),
                missing.join(" ")
            )));
        }
        let install = format!(
            "apt-get install -y --no-install-recommends {}",
            missing.join(" ")
        );
        for cmd in ["apt-get update", install.as_str()] {
            outln!("packages: {would} `{cmd}`")?;
            if !dry_run {
                let status = std::process::Command::new("sh")
                    .args(["-c", cmd])
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .status()
                    .map_err(|e| Error::io(format!("run `{cmd}`"), e))?;
                if !status.success() {
                    return Err(Error::Config(format!("`{cmd}` failed ({status})")));
                }
            }
        }
    }
    // 2. containers.conf.
    let conf = std::env::var_os("CONTAINERS_CONF")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/containers/containers.conf"));
    let wanted = wanted_settings();
    if wanted.is_empty() {
        outln!(
            "{}: nothing to set (crun can run, systemd manages cgroups, the open-files limit \
             is high enough)",
            conf.display()
        )?;
    } else {
        let old = match std::fs::read_to_string(&conf) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(format!("read {}", conf.display()), e)),
        };
        let mut text = old.clone();
        for s in &wanted {
            let (new, was) = set_toml_key(&text, s.section, s.key, s.value);
            let line = format!("[{}] {} = {}", s.section, s.key, s.value);
            match was {
                Some(v) if v == s.value => outln!("{}: {line} (already set)", conf.display())?,
                Some(v) => outln!(
                    "{}: {} {line} (was {v}): {}",
                    conf.display(),
                    if dry_run { "would set" } else { "set" },
                    s.why
                )?,
                None => outln!(
                    "{}: {} {line}: {}",
                    conf.display(),
                    if dry_run { "would set" } else { "set" },
                    s.why
                )?,
            }
            text = new;
        }
        if let Err(e) = toml::from_str::<toml::Table>(&text) {
            return Err(Error::Config(format!(
                "{} would not be valid TOML after setting the keys ({e}); fix the file by hand",
                conf.display()
            )));
        }
        if text != old && !dry_run {
            if let Some(dir) = conf.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
            }
            std::fs::write(&conf, &text)
                .map_err(|e| Error::io(format!("write {}", conf.display()), e))?;
        }
    }
    // 3. The engine answers.
    if dry_run {
        outln!("dry run: nothing was changed")?;
        return Ok(ExitCode::SUCCESS);
    }
    Engine::forget();
    let engine = Engine::detect()?;
    outln!(
        "engine: {} answers ({})",
        engine.kind().name(),
        engine.program().display()
    )?;
    if engine.image_exists(images::DEFAULT_BASE) {
        outln!("base image: {} is present", images::DEFAULT_BASE)?;
    } else {
        outln!(
            "base image: {} is missing; `nenyax images bootstrap` makes it from Debian's \
             packages (offline machines cannot pull ubuntu or debian images)",
            images::DEFAULT_BASE
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn dpkg_installed(pkg: &str) -> bool {
    std::process::Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Whether this process runs as root (effective uid 0, from /proc/self/status).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// One containers.conf key to set and why.
struct Setting {
    section: &'static str,
    key: &'static str,
    value: &'static str,
    why: String,
}

/// The containers.conf keys this machine needs.
fn wanted_settings() -> Vec<Setting> {
    let mut out = Vec::new();
    let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let crun = images::which("crun").is_some();
    if !unified || !crun {
        out.push(Setting {
            section: "engine",
            key: "runtime",
            value: "\"runc\"",
            why: if !unified {
                "cgroups here are v1 or hybrid, where crun fails (\"cgroups in hybrid mode not \
                 supported\")"
                    .into()
            } else {
                "crun is not installed".into()
            },
        });
    }
    let systemd = std::fs::read_to_string("/proc/1/comm")
        .map(|s| s.trim() == "systemd")
        .unwrap_or(false);
    if !systemd {
        let why = "systemd is not PID 1, so it cannot manage cgroups or the journal".to_string();
        out.push(Setting {
            section: "engine",
            key: "cgroup_manager",
            value: "\"cgroupfs\"",
            why: why.clone(),
        });
        out.push(Setting {
            section: "engine",
            key: "events_logger",
            value: "\"file\"",
            why,
        });
    }
    let hard = nofile_hard();
    if hard < 1_048_576 {
        out.push(Setting {
            section: "containers",
            key: "default_ulimits",
            value: "[]",
            why: format!(
                "the open-files hard limit here is {hard}, below the 1048576 containers ask for \
                 by default"
            ),
        });
    }
    out
}

fn nofile_hard() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(4).map(str::to_string))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// `text` with `key = value` set in `[section]`, keeping every other line (comments too); the
/// key's old value when it had one.
fn set_toml_key(text: &str, section: &str, key: &str, value: &str) -> (String, Option<String>) {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header = format!("[{section}]");
    let start = lines.iter().position(|l| l.trim() == header);
    let Some(start) = start else {
        if !lines.is_empty() && !lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.push(String::new());
        }
        lines.push(header);
        lines.push(format!("{key} = {value}"));
        return (lines.join("\n") + "\n", None);
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.trim_start().starts_with('['))
        .map(|i| start + 1 + i)
        .unwrap_or(lines.len());
    for i in start + 1..end {
        let t = lines[i].trim_start();
        if let Some((k, v)) = t.split_once('=') {
            if k.trim() == key {
                let old = v.trim().to_string();
                lines[i] = format!("{key} = {value}");
                return (lines.join("\n") + "\n", Some(old));
            }
        }
    }
    lines.insert(start + 1, format!("{key} = {value}"));
    (lines.join("\n") + "\n", None)
}

#[cfg(test)]
mod tests {
    use super::set_toml_key;

    #[test]
    fn setting_a_key_keeps_comments_and_other_keys() {
        let text = "# mine\n[engine]\n# runtime = \"crun\"\nnum_locks = 2048\n[network]\nx = 1\n";
        let (t, was) = set_toml_key(text, "engine", "runtime", "\"runc\"");
        assert_eq!(was, None);
        assert!(t.contains("# mine") && t.contains("num_locks = 2048") && t.contains("x = 1"));
        assert!(t.contains("[engine]\nruntime = \"runc\""), "{t}");
        let (t2, was) = set_toml_key(&t, "engine", "runtime", "\"runc\"");
        assert_eq!(was.as_deref(), Some("\"runc\""));
        assert_eq!(t2, t);
        let (t3, _) = set_toml_key(&t, "containers", "default_ulimits", "[]");
        assert!(t3.ends_with("[containers]\ndefault_ulimits = []\n"), "{t3}");
        toml::from_str::<toml::Table>(&t3).unwrap();
    }
}
