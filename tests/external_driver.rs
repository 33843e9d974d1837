//! Drivers as executables in any language: the Go example (examples/plugins/driver-go), built
//! here with `go build`, becomes the scheme `gosums:` from PATH and another from a plugins
//! config, reaches AUDITED under `nenyax check`, survives its processes being killed mid-batch
//! (only their rollouts fail), and drivers that speak another protocol version, print garbage or
//! die before the handshake are refused with what they printed.
//!
//! Without `go` the tests print why and pass, unless `NENYAX_REQUIRE_GO=1` (CI), where they fail.
#![cfg(unix)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The folder holding the built `nenyax-driver-gosums`, or why there is none.
fn go_driver_dir() -> Option<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        // Under target/tmp, rebuilt by each run (go build is incremental), never left in /tmp.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("external-driver-go");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plugins/driver-go");
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(dir.join("nenyax-driver-gosums"))
            .arg(".")
            .current_dir(&src)
            // Never download a toolchain: the module asks for an old Go, any newer one builds it.
            .env("GOTOOLCHAIN", "local")
            .output()
            .map_err(|e| format!("`go` cannot be run ({e})"))?;
        if !out.status.success() {
            // A Go that runs but cannot build the example is a failure, not a skip.
            panic!(
                "go build of {} failed:\n{}",
                src.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(dir)
    });
    match built {
        Ok(dir) => Some(dir),
        Err(why) => {
            assert!(
                std::env::var("NENYAX_REQUIRE_GO").as_deref() != Ok("1"),
                "NENYAX_REQUIRE_GO=1 but the Go driver cannot be built: {why}"
            );
            eprintln!("skipped: {why}; install Go to run the executable-driver tests");
            None
        }
    }
}

/// The Go driver built as an in-process library (`-buildmode=c-shared -tags nenyax_lib`) into
/// `dir`, under `name`, with extra C flags; panics when the build fails (Go is there).
fn go_library(dir: &Path, name: &str, cflags: &str) -> PathBuf {
    let lib = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plugins/driver-go");
    let out = Command::new("go")
        .args(["build", "-buildmode=c-shared", "-tags", "nenyax_lib", "-o"])
        .arg(&lib)
        .arg(".")
        .current_dir(&src)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "1")
        .env("CGO_CFLAGS", cflags)
        .output()
        .expect("go runs");
    assert!(
        out.status.success(),
        "go build -buildmode=c-shared of {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

/// `dir` first on PATH, the rest as the test was given.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH joins")
}

/// Run `nenyax args…` with `PATH` and `NENYAX_PLUGINS` as given, and no per-user plugins
/// config (XDG_CONFIG_HOME points at an empty folder).
fn nenyax(args: &[&str], path: &std::ffi::OsStr, plugins: Option<&Path>) -> Output {
    let empty = tempfile::tempdir().expect("a temporary folder");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nenyax"));
    cmd.args(args)
        .env("RUST_BACKTRACE", "0")
        .env("PATH", path)
        .env("XDG_CONFIG_HOME", empty.path())
        .env_remove("NENYAX_PLUGINS");
    if let Some(p) = plugins {
        cmd.env("NENYAX_PLUGINS", p);
    }
    cmd.output().expect("the nenyax binary runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A shell script named `name` in a new folder (kept while the guard lives).
fn script(name: &str, body: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("the script is written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

#[test]
fn the_go_driver_on_path_is_audited_and_listed() {
    let Some(dir) = go_driver_dir() else { return };
    let path = path_with(dir);
    let o = nenyax(
        &["check", "gosums:sums?size=12", "--require", "audited"],
        &path,
        None,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("tier: AUDITED"), "{out}");

    let o = nenyax(&["drivers"], &path, None);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("gosums "))
        .unwrap_or_else(|| panic!("gosums is not listed:\n{out}"));
    assert!(line.contains("ready"), "{line}");
    assert!(line.contains("from PATH"), "{line}");
    assert!(line.contains("nenyax-driver-gosums"), "{line}");

    // `nenyax plugins` lists it too, with the version from its handshake and where it was found.
    let o = nenyax(&["plugins", "--json", "--kind", "driver"], &path, None);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let rows: Value = serde_json::from_str(&out).expect("plugins --json is JSON");
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "gosums")
        .unwrap_or_else(|| panic!("gosums is not in nenyax plugins: {out}"));
    assert_eq!(row["version"], "0.1.0", "{row}");
    assert_eq!(row["origin"]["from"], "path", "{row}");
    assert!(row["origin"]["path"]
        .as_str()
        .unwrap()
        .ends_with("nenyax-driver-gosums"));
    assert_eq!(row["ready"], true, "{row}");
}

#[test]
fn a_plugins_config_entry_makes_its_own_scheme() {
    let Some(dir) = go_driver_dir() else { return };
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("plugins.toml");
    std::fs::write(
        &conf,
        format!(
            "[[plugin]]\nname = \"arith\"\nkind = \"driver\"\ncommand = [{:?}]\n\
             summary = \"sums from a Go program\"\n",
            dir.join("nenyax-driver-gosums").display().to_string()
        ),
    )
    .unwrap();
    // Not on PATH: only the config names it.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let o = nenyax(
        &["check", "arith:sums?size=10", "--require", "audited"],
        &path,
        Some(&conf),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("tier: AUDITED"), "{out}");

    let o = nenyax(&["drivers", "--json"], &path, Some(&conf));
    let list: Value = serde_json::from_slice(&o.stdout).expect("drivers --json is JSON");
    let arith = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["scheme"] == "arith")
        .unwrap_or_else(|| panic!("arith is not listed: {list}"));
    let summary = arith["summary"].as_str().unwrap();
    assert!(summary.starts_with("sums from a Go program"), "{summary}");
    assert!(summary.contains(&conf.display().to_string()), "{summary}");
    assert_eq!(arith["readiness"]["status"], "ready");
    assert!(!list
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["scheme"] == "gosums"));
}

#[test]
fn killed_driver_processes_fail_only_their_rollouts() {
    let Some(dir) = go_driver_dir() else { return };
    let path = path_with(dir);
    let out_dir = tempfile::tempdir().unwrap();
    let out_file = out_dir.path().join("t.jsonl");
    // Task 7's step SIGKILLs the process serving it; 40 episodes over 20 tasks meet it twice.
    let o = nenyax(
        &[
            "run",
            "gosums:sums?size=20&workers=2&crash_task=7",
            "--policy",
            "oracle",
            "-n",
            "40",
            "--concurrency",
            "2",
            "--out",
            out_file.to_str().unwrap(),
        ],
        &path,
        None,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("40 episodes, 2 errors"), "{out}");
    let lines: Vec<Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 40);
    let (failed, ok): (Vec<&Value>, Vec<&Value>) =
        lines.iter().partition(|t| !t["error"].is_null());
    assert_eq!(failed.len(), 2, "{failed:?}");
    for t in &failed {
        assert_eq!(t["task"]["id"], "7", "{t}");
        let e = t["error"].to_string();
        assert!(e.contains("nenyax-driver-gosums"), "{e}");
        assert!(e.contains("SIGKILL") || e.contains("signal"), "{e}");
    }
    assert_eq!(ok.len(), 38);
    assert!(ok.iter().all(|t| t["judgment"]["score"] == 1.0));
    // Each crash took a process with it; the episodes after it ran on replacements.
    let pids: BTreeSet<i64> = ok
        .iter()
        .filter_map(|t| t["steps"][0]["info"]["pid"].as_i64())
        .collect();
    assert_eq!(
        ok.iter()
            .filter(|t| t["steps"][0]["info"]["pid"].is_i64())
            .count(),
        38
    );
    assert!(
        pids.len() > 2,
        "only {} driver processes served the batch: {pids:?}",
        pids.len()
    );
}

#[test]
fn hung_and_garbage_driver_processes_fail_only_their_rollouts() {
    let Some(dir) = go_driver_dir() else { return };
    let path = path_with(dir);
    // 10 episodes over 5 tasks: task 2 hangs (timeout_s=1 ends it) and task 4 answers garbage,
    // each twice.
    let o = nenyax(
        &[
            "run",
            "gosums:sums?size=5&workers=2&timeout_s=1&hang_task=2&garbage_task=4",
            "--policy",
            "oracle",
            "-n",
            "10",
            "--concurrency",
            "2",
            "--episodes",
        ],
        &path,
        None,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("10 episodes, 4 errors"), "{out}");
    assert!(out.contains("6 passed"), "{out}");
    for (task, why) in [
        ("2", "did not answer `step` within 1s"),
        ("4", "answered `step` with garbage: panic: this is not JSON"),
    ] {
        let failed: Vec<&str> = out
            .lines()
            .filter(|l| l.contains(&format!(": task {task}, ")))
            .collect();
        assert_eq!(failed.len(), 2, "{out}");
        assert!(failed.iter().all(|l| l.contains(why)), "{out}");
    }
}

#[test]
fn another_protocol_version_is_refused_naming_both() {
    let dir = script(
        "nenyax-driver-future",
        "printf '{\"nenyax_bridge\": 2, \"version\": \"9.0\"}\\n'\ncat >/dev/null",
    );
    let o = nenyax(
        &["run", "future:anything", "-n", "1"],
        &path_with(dir.path()),
        None,
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("`nenyax-driver-future` speaks bridge protocol 2; this Nenyax speaks 1"),
        "{err}"
    );
    assert!(err.contains("driver `future`"), "{err}");
}

#[test]
fn garbage_or_an_early_exit_before_the_handshake_shows_its_stderr() {
    let garbage = script(
        "nenyax-driver-noisy",
        "echo 'loading config' >&2\necho 'hello there'\ncat >/dev/null",
    );
    let o = nenyax(
        &["run", "noisy:x", "-n", "1"],
        &path_with(garbage.path()),
        None,
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("sent `hello there` instead of a handshake"),
        "{err}"
    );
    assert!(err.contains("loading config"), "{err}");
    assert!(err.contains("nenyax-driver-noisy"), "{err}");

    let early = script(
        "nenyax-driver-early",
        "echo 'missing libfoo.so' >&2\nexit 3",
    );
    let o = nenyax(
        &["run", "early:x", "-n", "1"],
        &path_with(early.path()),
        None,
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("exited"), "{err}");
    assert!(err.contains("before answering the handshake"), "{err}");
    assert!(err.contains("missing libfoo.so"), "{err}");
}

#[test]
fn a_built_in_scheme_wins_over_an_executable_of_the_same_name() {
    let dir = script("nenyax-driver-builtin", "exit 1");
    let path = path_with(dir.path());
    let o = nenyax(&["plugins", "--json", "--kind", "driver"], &path, None);
    let rows: Value = serde_json::from_slice(&o.stdout).expect("plugins --json is JSON");
    let shadowed = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "builtin" && r["origin"]["from"] == "path")
        .unwrap_or_else(|| panic!("the shadowed executable is not listed: {rows}"));
    assert_eq!(shadowed["ready"], false);
    assert!(shadowed["needs"].as_str().unwrap().contains("shadowed"));
    let o = nenyax(&["drivers", "--json"], &path, None);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let builtins: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["scheme"] == "builtin")
        .collect();
    assert_eq!(builtins.len(), 1);
    assert!(!builtins[0]["summary"]
        .as_str()
        .unwrap()
        .contains("external driver"));
    let o = nenyax(
        &["run", "builtin:arithmetic?size=2", "-n", "2"],
        &path,
        None,
    );
    assert!(o.status.success(), "{}", text(&o).1);
}

#[test]
fn the_library_reports_path_source_and_version() {
    use nenyax::plugins::external::ExternalDriver;
    use nenyax::router::{Driver, Readiness};
    let Some(dir) = go_driver_dir() else { return };
    let exe = dir.join("nenyax-driver-gosums");
    let d = ExternalDriver::new("gosums", vec![exe.display().to_string()], None, None).unwrap();
    assert_eq!(d.path(), exe);
    assert_eq!(d.source(), "PATH");
    assert_eq!(d.readiness(), Readiness::Ready);
    // The Go program's handshake says "version": "0.1.0".
    assert_eq!(d.version().as_deref(), Some("0.1.0"));
    let env = d
        .load(&nenyax::uri::Uri::parse("gosums:sums?size=3&workers=1").unwrap())
        .unwrap();
    assert_eq!(env.manifest().num_tasks, Some(3));
    assert_eq!(env.manifest().source_format, "gosums");
}

#[test]
fn the_go_driver_built_as_a_library_runs_in_process() {
    let Some(_) = go_driver_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let lib = go_library(dir.path(), "libgosums.so", "");
    let conf = dir.path().join("plugins.toml");
    std::fs::write(
        &conf,
        "[[plugin]]\nname = \"gosums\"\nkind = \"driver\"\nlibrary = \"libgosums.so\"\n",
    )
    .unwrap();
    // No executable anywhere: only the library can serve the scheme.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let o = nenyax(
        &["check", "gosums:sums?size=12", "--require", "audited"],
        &path,
        Some(&conf),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("tier: AUDITED"), "{out}");

    let o = nenyax(
        &["plugins", "--json", "--kind", "driver"],
        &path,
        Some(&conf),
    );
    let rows: Value = serde_json::from_slice(&o.stdout).expect("plugins --json is JSON");
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "gosums")
        .unwrap_or_else(|| panic!("gosums is not in nenyax plugins: {rows}"));
    assert_eq!(row["version"], "0.1.0", "{row}");
    assert_eq!(row["origin"]["from"], "config", "{row}");
    assert!(
        row["summary"]
            .as_str()
            .unwrap()
            .contains("in-process driver"),
        "{row}"
    );
    assert!(row["summary"]
        .as_str()
        .unwrap()
        .contains(&lib.display().to_string()));

    // Every step is served inside the nenyax process itself: the driver reports its pid.
    let out_file = dir.path().join("t.jsonl");
    let empty = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args([
            "run",
            "gosums:sums?size=20&workers=2",
            "--policy",
            "oracle",
            "-n",
            "40",
            "--concurrency",
            "2",
            "--out",
            out_file.to_str().unwrap(),
        ])
        .env("PATH", &path)
        .env("XDG_CONFIG_HOME", empty.path())
        .env("NENYAX_PLUGINS", &conf)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i64;
    let o = child.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("40 episodes, 0 errors"), "{out}");
    let lines: Vec<Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 40);
    assert!(lines.iter().all(|t| t["judgment"]["score"] == 1.0));
    let pids: BTreeSet<i64> = lines
        .iter()
        .filter_map(|t| t["steps"][0]["info"]["pid"].as_i64())
        .collect();
    assert_eq!(pids, BTreeSet::from([pid]), "steps ran outside nenyax");

    // A copy built for driver vtable version 2 is refused, naming both versions.
    let v2 = go_library(dir.path(), "libgosums2.so", "-DGOSUMS_VTABLE_VERSION=2");
    std::fs::write(
        &conf,
        format!(
            "[[plugin]]\nname = \"gosums\"\nkind = \"driver\"\nlibrary = {:?}\n",
            v2.display().to_string()
        ),
    )
    .unwrap();
    let o = nenyax(
        &["check", "gosums:sums", "--require", "audited"],
        &path,
        Some(&conf),
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("driver vtable version 2") && err.contains("speaks version 1"),
        "{out}\n{err}"
    );
}
