//! Learner plugins end to end: the Go learner of examples/plugins/learner-go, built here with
//! `go build -buildmode=c-shared`, trains under `nenyax train --learner gotab` through a plugins
//! config and raises the held-out score; a build claiming another learner vtable version is
//! refused naming both versions; `--dry-run` accepts a plugin learner and an unknown name lists
//! the plugins. Without `go` the Go tests skip with a reason, unless NENYAX_REQUIRE_GO is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `go` runs; when it does not: skip (print why), or fail under NENYAX_REQUIRE_GO.
fn have_go() -> bool {
    let ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("NENYAX_REQUIRE_GO").is_none(),
            "NENYAX_REQUIRE_GO is set but `go` does not run; install Go to build the Go learner"
        );
        eprintln!("skipped: `go` is not installed, so the Go learner plugin cannot be built");
    }
    ok
}

/// Build the example into `dir/libgotab.so` with extra C flags (e.g. another vtable version).
fn build_go(dir: &Path, cflags: Option<&str>) -> PathBuf {
    build_go_with(dir, cflags, &[])
}

/// [`build_go`] with extra `go build` arguments (e.g. `-ldflags`).
fn build_go_with(dir: &Path, cflags: Option<&str>, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let lib = dir.join("libgotab.so");
    let mut cmd = Command::new("go");
    cmd.current_dir(root().join("examples/plugins/learner-go"))
        .args(["build", "-buildmode=c-shared"])
        .args(extra)
        .arg("-o")
        .arg(&lib)
        .arg(".");
    if let Some(f) = cflags {
        cmd.env("CGO_CFLAGS", f);
    }
    let o = cmd.output().expect("run go build");
    assert!(
        o.status.success(),
        "go build -buildmode=c-shared failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    lib
}

/// A scratch directory under target/tmp (go build's output must outlive nothing else).
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("library_learner")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A plugins config listing `lib` as learner `gotab`.
fn config(dir: &Path, lib: &Path) -> PathBuf {
    let c = dir.join("plugins.toml");
    std::fs::write(
        &c,
        format!(
            "[[plugin]]\nname = \"gotab\"\nkind = \"learner\"\nlibrary = \"{}\"\n",
            lib.file_name().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    c
}

fn nenyax(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .env("NENYAX_PLUGINS", config)
        .output()
        .expect("run nenyax")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const ENV: &str = "builtin:guess?high=8&max_guesses=3";

#[test]
fn the_go_learner_trains_under_nenyax_train_and_the_held_out_score_rises() {
    if !have_go() {
        return;
    }
    let dir = scratch("trains");
    let lib = build_go(&dir, None);
    let cfg = config(&dir, &lib);
    let out = dir.join("run");
    let o = nenyax(
        &cfg,
        &[
            "train",
            ENV,
            "--learner",
            "gotab",
            "--rounds",
            "8",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(
        o.status.success(),
        "nenyax train failed:\n{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    // The plugin was the learner: the report names it and the library it came from.
    assert_eq!(report["learner"]["name"], "gotab", "{}", report["learner"]);
    assert_eq!(report["learner"]["plugin"]["kind"], "learner");
    let source = report["learner"]["plugin"]["source"].as_str().unwrap();
    assert!(source.ends_with("libgotab.so"), "{source}");
    let rounds = report["rounds"].as_array().unwrap();
    let first_update = rounds
        .iter()
        .find_map(|r| r["update"].as_object())
        .expect("an update");
    let steps = first_update["metrics"]["steps"].as_f64().unwrap();
    assert!(
        steps > 0.0,
        "the plugin's update saw no steps: {first_update:?}"
    );
    let baseline = report["baseline"].as_f64().unwrap();
    let last = report["final_eval"].as_f64().unwrap();
    let best = report["best"].as_f64().unwrap();
    eprintln!("gotab on {ENV}: held-out {baseline:.3} -> {last:.3} (best {best:.3})");
    // Uniform guessing finds it about half the time; bisection always does (3 guesses, 8
    // numbers: 7 of 8 within three). 8 rounds reach 0.92 on seed 0.
    assert!(
        last >= baseline + 0.2,
        "the held-out score did not rise enough: {baseline:.3} -> {last:.3}"
    );
}

#[test]
fn a_learner_vtable_of_another_version_is_refused_naming_both() {
    if !have_go() {
        return;
    }
    let dir = scratch("version");
    let lib = build_go(&dir, Some("-O2 -DGOTAB_VTABLE_VERSION=99"));
    let cfg = config(&dir, &lib);
    let o = nenyax(&cfg, &["train", ENV, "--learner", "gotab", "--rounds", "1"]);
    assert!(!o.status.success(), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains("learner vtable version 99") && err.contains("speaks version 1"),
        "{err}"
    );
    assert!(err.contains("gotab"), "{err}");
}

#[test]
fn dry_run_accepts_a_plugin_learner() {
    if !have_go() {
        return;
    }
    let dir = scratch("dry");
    let lib = build_go(&dir, None);
    let cfg = config(&dir, &lib);
    let o = nenyax(&cfg, &["train", ENV, "--learner", "gotab", "--dry-run"]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    // Knobs the plugin cannot take are refused, naming it.
    let o = nenyax(
        &cfg,
        &[
            "train",
            ENV,
            "--learner",
            "gotab",
            "--set",
            "learner.lr=0.5",
            "--dry-run",
        ],
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("learner plugin `gotab`") && err.contains("lr"),
        "{err}"
    );
}

#[test]
fn an_unknown_learner_names_the_builtins_and_the_plugins() {
    let dir = scratch("unknown");
    // A config entry is enough to be listed: the library is not loaded for a name not asked for.
    let cfg = config(&dir, &dir.join("libgotab.so"));
    let o = nenyax(&cfg, &["train", ENV, "--learner", "gotabb", "--dry-run"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("unknown learner `gotabb`"), "{err}");
    assert!(err.contains("did you mean `gotab`"), "{err}");
    assert!(
        err.contains("grpo") && err.contains("learner plugins: gotab"),
        "{err}"
    );
}

#[test]
fn plugin_check_passes_the_go_learner_and_fails_one_whose_restore_forgets() {
    if !have_go() {
        return;
    }
    let dir = scratch("check");
    let lib = build_go(&dir, None);
    let cfg = config(&dir, &lib);
    let o = nenyax(&cfg, &["plugin-check", "learner", "gotab", "--json"]);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", text(&o.stdout), text(&o.stderr)));
    assert!(o.status.success(), "{report:#}");
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "acts_before_update",
            "update_finite",
            "acts_after_update",
            "snapshot_restores",
            "malformed_group"
        ]
    );
    // A build whose restore keeps the updated table is caught by the snapshot check.
    let broken = scratch("check-broken");
    let lib = build_go_with(&broken, None, &["-ldflags", "-X main.corruptFlag=yes"]);
    let cfg = config(&broken, &lib);
    let o = nenyax(&cfg, &["plugin-check", "learner", "gotab"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("FAILS") && out.contains("✘ snapshot_restores"),
        "{out}"
    );
}

#[test]
fn plugin_check_holds_a_builtin_learner_to_the_same_checks() {
    let dir = scratch("builtin");
    let cfg = dir.join("none.toml");
    let o = nenyax(&cfg, &["plugin-check", "learner", "grpo"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("CONFORMS") && out.contains("✔ snapshot_restores"),
        "{out}"
    );
}
