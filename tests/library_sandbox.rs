//! A sandbox backend from a C shared library, end to end: examples/plugins/sandbox-c/cjail.c
//! (a jail), built here with the system's C compiler and listed in a plugins config, passes
//! every promise of `nenyax sandbox-check cjail` (the jail's, the file contract, fork
//! isolation), runs Harbor tasks to AUDITED through `backend=cjail`, and a copy built for
//! another vtable version is refused naming both versions.
//!
//! A jail needs root: without it the tests that run the jail print why and pass, unless
//! NENYAX_REQUIRE_SANDBOX_PLUGIN=1 (CI as root), when they fail instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the jail can run here; prints why not (or panics when it is required).
fn can_jail(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let required = std::env::var("NENYAX_REQUIRE_SANDBOX_PLUGIN").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: NENYAX_REQUIRE_SANDBOX_PLUGIN=1 but this is not root, and the cjail example \
         needs root for its namespaces"
    );
    eprintln!("skipping {test}: the cjail sandbox plugin needs root (set NENYAX_REQUIRE_SANDBOX_PLUGIN=1 to fail instead)");
    false
}

/// Compile the example into `dir/libcjail.so` with `defines` and list it in `dir/plugins.toml`
/// (a relative library path: relative to the config); panics with the compiler's output.
fn build(dir: &Path, defines: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .args([
            "-std=c11", "-shared", "-fPIC", "-pthread", "-O2", "-Wall", "-Wextra", "-Werror",
        ])
        .args(defines)
        .arg(root().join("examples/plugins/sandbox-c/cjail.c"))
        .arg("-o")
        .arg(dir.join("libcjail.so"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} (needed to build plugins): {e}"));
    assert!(
        o.status.success(),
        "{cc} failed on cjail.c:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(
        dir.join("plugins.toml"),
        "[[plugin]]\nname = \"cjail\"\nkind = \"sandbox\"\nlibrary = \"libcjail.so\"\n",
    )
    .unwrap();
}

fn nenyax(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .current_dir(root())
        .env("NENYAX_PLUGINS", dir.join("plugins.toml"))
        .output()
        .expect("run nenyax")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The promises a jail-level plugin must be held to: a report that ran fewer cannot pass.
const JAIL_PROMISES: [&str; 18] = [
    "wall_timeout",
    "cpu_limit",
    "memory_limit",
    "open_files_limit",
    "file_size_limit",
    "output_cap",
    "detached_child_killed",
    "scrubbed_environment",
    "process_limit",
    "file_contract",
    "host_root_read_only",
    "root_cannot_remount",
    "private_dev",
    "private_dirs",
    "no_network",
    "own_pid_namespace",
    "own_hostname",
    "fork_isolation",
];

#[test]
fn the_c_jail_keeps_every_promise_of_sandbox_check() {
    if !can_jail("the_c_jail_keeps_every_promise_of_sandbox_check") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), &[]);
    let listed = nenyax(dir.path(), &["sandboxes"]);
    let line = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .find(|l| l.starts_with("cjail"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        line.contains("jail") && line.contains("ready"),
        "nenyax sandboxes does not list cjail as a ready jail:\n{}",
        text(&listed)
    );
    let t0 = std::time::Instant::now();
    let o = nenyax(dir.path(), &["sandbox-check", "cjail", "--json"]);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("sandbox-check --json is not JSON ({e}):\n{}", text(&o)));
    let promises = report["promises"].as_array().expect("a promises array");
    let failed: Vec<String> = promises
        .iter()
        .filter(|p| p["held"] != true)
        .map(|p| format!("{}: {}", p["name"], p["detail"]))
        .collect();
    assert!(
        o.status.success() && failed.is_empty(),
        "promises the C jail broke:\n{}\n{}",
        failed.join("\n"),
        text(&o)
    );
    let names: Vec<&str> = promises.iter().filter_map(|p| p["name"].as_str()).collect();
    for want in JAIL_PROMISES {
        assert!(
            names.contains(&want),
            "sandbox-check did not run `{want}` (ran {names:?})"
        );
    }
    eprintln!(
        "cjail: {} promises held in {:.1}s",
        names.len(),
        t0.elapsed().as_secs_f64()
    );
    // The same promises as the kind's conformance check (what nenyax_plugin_check runs).
    let o = nenyax(dir.path(), &["plugin-check", "sandbox", "cjail"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in JAIL_PROMISES {
        assert!(
            out.contains(want),
            "plugin-check sandbox did not run `{want}`:\n{out}"
        );
    }
}

#[test]
fn harbor_tasks_reach_audited_in_the_c_jail() {
    if !can_jail("harbor_tasks_reach_audited_in_the_c_jail") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), &[]);
    for task in ["simple-task", "multi-step"] {
        let uri = format!("harbor:tests/harbor_tasks/{task}?backend=cjail");
        let t0 = std::time::Instant::now();
        let o = nenyax(
            dir.path(),
            &["check", &uri, "--samples", "1", "--require", "audited"],
        );
        let out = text(&o);
        assert!(
            o.status.success() && out.contains("AUDITED"),
            "{uri} is not AUDITED through the C jail:\n{out}"
        );
        assert!(
            out.contains("sandbox plugin `cjail`"),
            "{uri} did not say it ran in the plugin:\n{out}"
        );
        eprintln!("{uri}: AUDITED in {:.1}s", t0.elapsed().as_secs_f64());
    }
}

#[test]
fn a_c_jail_built_for_another_vtable_version_is_refused_naming_both() {
    // Refused when it loads, before anything needs root.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), &["-DCJAIL_VTABLE_VERSION=2"]);
    let o = nenyax(dir.path(), &["sandbox-check", "cjail"]);
    let out = text(&o);
    assert!(
        !o.status.success(),
        "a version-2 plugin was accepted:\n{out}"
    );
    assert!(
        out.contains("sandbox vtable version 2") && out.contains("speaks version 1"),
        "the refusal does not name both versions:\n{out}"
    );
}
