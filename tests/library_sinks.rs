//! Telemetry sinks and hubs as library plugins, end to end: the C examples of
//! examples/plugins/telemetry-c and examples/plugins/hub-c, built here with the system's C
//! compiler, picked by name through a plugins config (`--telemetry jsonl_sink`,
//! `nenyax search toy_hub`, `nenyax fetch toy_hub`), held to `nenyax plugin-check`; a library
//! built for another vtable version refused naming both versions; a sink whose calls fail
//! reported without holding the run up.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compile an example into `dir/lib<name>.so` with `defines`; panics with the compiler's output.
fn build(example: &str, dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = dir.join(format!("lib{name}.so"));
    let o = Command::new(&cc)
        .args([
            "-std=c11", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
        ])
        .args(defines)
        .arg(root().join("examples/plugins").join(example))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} (needed to build plugins): {e}"));
    assert!(
        o.status.success(),
        "{cc} failed on {example}:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn sink_lib(dir: &Path, defines: &[&str]) -> PathBuf {
    build("telemetry-c/jsonl_sink.c", dir, "jsonl_sink", defines)
}

fn hub_lib(dir: &Path, defines: &[&str]) -> PathBuf {
    build("hub-c/toy_hub.c", dir, "toy_hub", defines)
}

/// A plugins config in `dir` listing the sink and the hub (relative paths: to the config).
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("plugins.toml");
    std::fs::write(
        &path,
        "[[plugin]]\nname = \"jsonl_sink\"\nkind = \"telemetry\"\nlibrary = \"libjsonl_sink.so\"\n\n\
         [[plugin]]\nname = \"toy_hub\"\nkind = \"hub\"\nlibrary = \"libtoy_hub.so\"\n",
    )
    .unwrap();
    path
}

fn nenyax(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .env("NENYAX_PLUGINS", dir.join("plugins.toml"))
        .env("NENYAX_EXAMPLE_SINK_FILE", dir.join("events.jsonl"))
        .output()
        .expect("run nenyax")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line ({e}): {l}")))
        .collect()
}

fn of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

#[test]
fn the_c_sink_gets_every_episode_with_its_score_and_a_finish() {
    let dir = tempfile::tempdir().unwrap();
    sink_lib(dir.path(), &[]);
    config(dir.path());
    let runs = dir.path().join("runs.jsonl");
    let o = nenyax(
        dir.path(),
        &[
            "run",
            "builtin:arithmetic",
            "-n",
            "20",
            "--telemetry",
            "jsonl_sink",
            "--out",
            runs.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        !text(&o.stderr).contains("telemetry sink"),
        "{}",
        text(&o.stderr)
    );
    let ev = events(dir.path());
    assert_eq!(ev.first().unwrap()["event"], "start", "{ev:?}");
    assert_eq!(ev[0]["run"]["kind"], "run");
    assert_eq!(ev[0]["run"]["params"]["uri"], "builtin:arithmetic");
    assert_eq!(ev[0]["run"]["options"], serde_json::json!({}));

    // One episode line per trajectory, with the trajectory's own score and model call count.
    let trajs: Vec<Value> = std::fs::read_to_string(&runs)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let episodes = of(&ev, "episode");
    assert_eq!(episodes.len(), 20, "{ev:?}");
    for t in &trajs {
        let e = episodes
            .iter()
            .find(|e| e["seed"] == t["seed"])
            .unwrap_or_else(|| panic!("no episode line for seed {}", t["seed"]));
        assert_eq!(e["env_id"], "builtin:arithmetic");
        assert_eq!(e["score"], t["judgment"]["score"], "{e} vs {t}");
        assert_eq!(
            e["model_calls"],
            t["model_calls"].as_array().unwrap().len(),
            "{e}"
        );
    }
    let metrics = of(&ev, "metrics");
    assert!(!metrics.is_empty(), "{ev:?}");
    assert_eq!(metrics.last().unwrap()["values"]["episodes"], 20.0);
    assert_eq!(of(&ev, "artifact")[0]["name"], "run_summary.json");
    let last = ev.last().unwrap();
    assert_eq!(last["event"], "finish", "{ev:?}");
    assert_eq!(last["ok"], true);
    assert_eq!(last["episodes"], 20);
}

#[test]
fn the_sink_is_held_to_plugin_check_and_unknown_sinks_say_where_plugins_were_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    sink_lib(dir.path(), &[]);
    config(dir.path());
    let o = nenyax(dir.path(), &["plugin-check", "telemetry", "jsonl_sink"]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("CONFORMS"), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("flushes_repeatedly"));
    assert_eq!(
        of(&events(dir.path()), "finish").len(),
        2,
        "two runs each finish"
    );

    let o = nenyax(
        dir.path(),
        &[
            "run",
            "builtin:arithmetic",
            "-n",
            "2",
            "--telemetry",
            "nosuch",
        ],
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    let config = dir.path().join("plugins.toml");
    for want in [
        "unknown telemetry sink \"nosuch\"",
        "otel, mlflow, wandb",
        &config.display().to_string(),
        "known telemetry plugins: jsonl_sink",
    ] {
        assert!(err.contains(want), "missing {want:?} in: {err}");
    }
}

#[test]
fn a_failing_sink_is_reported_once_and_never_holds_the_run_up() {
    let dir = tempfile::tempdir().unwrap();
    sink_lib(dir.path(), &["-DEXAMPLE_FAIL_EPISODES"]);
    config(dir.path());
    let o = nenyax(
        dir.path(),
        &[
            "run",
            "builtin:arithmetic",
            "-n",
            "20",
            "--telemetry",
            "jsonl_sink",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert_eq!(
        err.matches("collector unavailable").count(),
        1,
        "the first error only: {err}"
    );
    assert!(err.contains("telemetry sink jsonl_sink"), "{err}");
    assert!(err.contains("failed in episode (returned 1)"), "{err}");
    assert!(
        err.contains("failed 20 times"),
        "every failure counted: {err}"
    );
    // The other events still arrived, and the run finished well.
    let ev = events(dir.path());
    assert!(of(&ev, "episode").is_empty());
    assert_eq!(ev.last().unwrap()["event"], "finish", "{ev:?}");
    assert_eq!(ev.last().unwrap()["ok"], true);

    let o = nenyax(dir.path(), &["plugin-check", "telemetry", "jsonl_sink"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stdout).contains("✘ receives_episodes"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn the_c_hub_searches_fetches_a_checkable_uri_and_conforms() {
    let dir = tempfile::tempdir().unwrap();
    hub_lib(dir.path(), &[]);
    config(dir.path());
    let o = nenyax(dir.path(), &["search", "toy_hub", "arith", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let found: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = found.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["arithmetic-20", "arithmetic-hard"]);
    assert_eq!(found[0]["hub"], "toy_hub");
    assert_eq!(found[0]["uri"], "builtin:arithmetic?size=20");

    let o = nenyax(dir.path(), &["search", "toy_hub", "--limit", "2", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let found: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(found.len(), 2);

    let o = nenyax(dir.path(), &["fetch", "toy_hub", "arithmetic-20"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let uri = text(&o.stdout).trim().to_string();
    assert_eq!(uri, "builtin:arithmetic?size=20");
    let o = nenyax(dir.path(), &["check", &uri]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let o = nenyax(dir.path(), &["fetch", "toy_hub", "nope"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("toy_hub has no entry named `nope`"),
        "{}",
        text(&o.stderr)
    );

    let o = nenyax(dir.path(), &["integrations", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let row = rows
        .iter()
        .find(|r| r["kind"] == "hub" && r["name"] == "toy_hub")
        .unwrap_or_else(|| panic!("no toy_hub row: {rows:?}"));
    assert_eq!(row["ready"], true, "{row}");

    let o = nenyax(dir.path(), &["plugin-check", "hub", "toy_hub"]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("CONFORMS"), "{}", text(&o.stdout));

    let o = nenyax(dir.path(), &["search", "nosuch", "x"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    for want in [
        "unknown hub \"nosuch\"",
        "huggingface",
        "known hub plugins: toy_hub",
    ] {
        assert!(err.contains(want), "missing {want:?} in: {err}");
    }
}

#[test]
fn a_hub_with_malformed_listings_fails_plugin_check_and_search_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    hub_lib(dir.path(), &["-DEXAMPLE_BAD_LISTINGS"]);
    config(dir.path());
    let o = nenyax(dir.path(), &["plugin-check", "hub", "toy_hub"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stdout).contains("✘ search_lists"),
        "{}",
        text(&o.stdout)
    );
    let o = nenyax(dir.path(), &["search", "toy_hub", "x"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("not a list of listings"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_hub_fetching_to_a_scheme_no_driver_serves_fails_plugin_check() {
    let dir = tempfile::tempdir().unwrap();
    hub_lib(dir.path(), &["-DEXAMPLE_UNKNOWN_SCHEME"]);
    config(dir.path());
    let o = nenyax(dir.path(), &["plugin-check", "hub", "toy_hub"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("✘ fetch_gives_uris"), "{out}");
    assert!(
        out.contains("scheme `nosuchdriver` no driver here serves"),
        "{out}"
    );
}

#[test]
fn libraries_built_for_another_vtable_version_are_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    sink_lib(dir.path(), &["-DEXAMPLE_TELEMETRY_VTABLE_VERSION=2"]);
    hub_lib(dir.path(), &["-DEXAMPLE_HUB_VTABLE_VERSION=2"]);
    config(dir.path());
    let o = nenyax(
        dir.path(),
        &[
            "run",
            "builtin:arithmetic",
            "-n",
            "1",
            "--telemetry",
            "jsonl_sink",
        ],
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    for want in [
        "plugin `jsonl_sink`",
        "built for telemetry vtable version 2",
        "this Nenyax speaks version 1",
        "rebuild it against include/nenyax.h",
    ] {
        assert!(err.contains(want), "missing {want:?} in: {err}");
    }
    let o = nenyax(dir.path(), &["search", "toy_hub", "x"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    for want in [
        "plugin `toy_hub`",
        "built for hub vtable version 2",
        "this Nenyax speaks version 1",
    ] {
        assert!(err.contains(want), "missing {want:?} in: {err}");
    }
}

#[test]
fn a_crashing_sink_is_named_as_the_process_dies() {
    let dir = tempfile::tempdir().unwrap();
    let lib = sink_lib(dir.path(), &["-DEXAMPLE_CRASH"]);
    config(dir.path());
    let o = nenyax(
        dir.path(),
        &[
            "run",
            "builtin:arithmetic",
            "-n",
            "2",
            "--telemetry",
            "jsonl_sink",
        ],
    );
    assert_eq!(o.status.signal(), Some(libc_sigsegv()), "{:?}", o.status);
    let err = text(&o.stderr);
    let canonical = std::fs::canonicalize(&lib).unwrap();
    let want = format!(
        "nenyax: crashed inside library plugin `jsonl_sink` ({}) during telemetry episode",
        canonical.display()
    );
    assert!(err.contains(&want), "missing {want:?} in: {err}");
}

/// SIGSEGV on Linux and macOS alike.
fn libc_sigsegv() -> i32 {
    11
}

#[test]
fn a_telemetry_plugin_named_in_a_train_config_gets_the_training_run() {
    let dir = tempfile::tempdir().unwrap();
    sink_lib(dir.path(), &[]);
    config(dir.path());
    let train = dir.path().join("train.toml");
    std::fs::write(
        &train,
        "[env]\nuri = \"builtin:guess?high=8&max_guesses=3\"\n\n[learner]\nuse = \"reinforce\"\n\n\
         [train]\nrounds = 2\n\n[[telemetry]]\nname = \"jsonl_sink\"\n",
    )
    .unwrap();
    let o = nenyax(dir.path(), &["train", "--config", train.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ev = events(dir.path());
    assert_eq!(ev[0]["event"], "start", "{ev:?}");
    assert_eq!(ev[0]["run"]["kind"], "train");
    // One metrics line per evaluation (the baseline, then each round), with its round as step.
    let metrics = of(&ev, "metrics");
    let steps: Vec<&Value> = metrics.iter().map(|m| &m["step"]).collect();
    assert_eq!(steps, [0, 1, 2], "{metrics:?}");
    // Every training rollout (2 rounds x 64) and held-out episode reached the sink.
    let trained: f64 = metrics
        .iter()
        .map(|m| m["values"]["episodes"].as_f64().unwrap())
        .sum();
    assert_eq!(trained, 128.0);
    assert!(
        of(&ev, "episode").len() > 128,
        "{}",
        of(&ev, "episode").len()
    );
    assert_eq!(ev.last().unwrap()["event"], "finish");
    assert_eq!(ev.last().unwrap()["ok"], true);

    // A name that is neither a built-in sink nor a plugin lists both kinds.
    std::fs::write(
        &train,
        "[env]\nuri = \"builtin:guess\"\n\n[[telemetry]]\nname = \"jsonl_snk\"\n",
    )
    .unwrap();
    let o = nenyax(
        dir.path(),
        &["train", "--config", train.to_str().unwrap(), "--dry-run"],
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("\"jsonl_snk\" is not a sink"), "{err}");
    assert!(err.contains("otel") && err.contains("jsonl_sink"), "{err}");
}
