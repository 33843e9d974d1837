//! Harbor tasks through the container backend, with real Podman (or Docker): Harbor's four
//! example tasks and the held-in Terminal-Bench-kind tasks (tests/harbor_tasks_tb) built from
//! their Dockerfiles and audited by `nenyax check`; the image cache; and bad input (a build that
//! fails, a base that cannot be pulled or mapped, a missing engine, a container killed from
//! outside mid-episode).
//!
//! The tasks' bases (ubuntu:24.04, debian:bookworm) cannot be pulled here; every command maps
//! them to the bootstrapped base (`nenyax images bootstrap`, localhost/nenyax-base:bookworm)
//! through NENYAX_IMAGES, with NENYAX_CONFIG pointing at an empty file so the machine's own
//! config plays no part. With NENYAX_REQUIRE_CONTAINER=1 (CI) a missing engine or base fails
//! these tests; otherwise they are skipped with a message naming what is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

const BASE: &str = "localhost/nenyax-base:bookworm";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A shared, empty config file and a build-log cache under target/, made once.
fn sandbox_env() -> (PathBuf, PathBuf) {
    let dir = root().join("target/harbor-container-test");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    if !config.exists() {
        std::fs::write(&config, "").unwrap();
    }
    (config, dir.join("cache"))
}

/// `nenyax args…` with the bases mapped to the bootstrapped image and `extra` env set.
fn nenyax(args: &[&str], extra: &[(&str, &str)]) -> Output {
    let (config, cache) = sandbox_env();
    let mut c = Command::new(env!("CARGO_BIN_EXE_nenyax"));
    c.args(args)
        .env("RUST_BACKTRACE", "0")
        .env("NENYAX_CONFIG", &config)
        .env("XDG_CACHE_HOME", &cache)
        .env(
            "NENYAX_IMAGES",
            format!("ubuntu:24.04={BASE},debian:bookworm={BASE}"),
        )
        .env_remove("NENYAX_CONTAINER_ENGINE");
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().expect("the nenyax binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether the engine and the bootstrapped base are ready; when not, a loud skip, or a failure
/// under NENYAX_REQUIRE_CONTAINER=1.
fn ready() -> bool {
    let missing = match Command::new("podman")
        .args(["image", "exists", BASE])
        .status()
    {
        Err(e) => Some(format!("podman cannot run ({e})")),
        Ok(s) if !s.success() => Some(format!(
            "the base image {BASE} is missing (`nenyax images bootstrap` makes it)"
        )),
        Ok(_) => None,
    };
    let missing = missing.or_else(|| {
        nenyax::sandbox::BackendKind::Container
            .ready()
            .err()
            .map(|why| format!("the container backend is not ready: {why}"))
    });
    match missing {
        None => true,
        Some(why) => {
            assert!(
                std::env::var("NENYAX_REQUIRE_CONTAINER").as_deref() != Ok("1"),
                "NENYAX_REQUIRE_CONTAINER=1 but {why}"
            );
            eprintln!("SKIPPED (harbor through containers): {why}");
            false
        }
    }
}

/// `nenyax check URI --samples 1 --json`, asserting AUDITED and that the manifest line names the
/// container backend (and the substituted base, for one that is never local: ubuntu here).
fn audited_in_a_container(uri: &str, substituted: bool) {
    let t0 = Instant::now();
    let o = nenyax(&["check", uri, "--samples", "1", "--json"], &[]);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{uri}: no JSON report ({e}): {}", text(&o)));
    assert_eq!(report["tier"], "audited", "{uri}: {report:#}");
    let manifest = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "manifest")
        .unwrap();
    let note = manifest["detail"].as_str().unwrap();
    assert!(note.starts_with("container backend"), "{uri}: {note}");
    if substituted {
        assert!(
            note.contains("base image substituted (offline mapping): ubuntu:24.04 -> "),
            "{uri}: {note}"
        );
    }
    eprintln!("{uri}: audited in {:.1}s", t0.elapsed().as_secs_f64());
}

#[test]
fn harbor_example_tasks_are_audited_in_containers() {
    if !ready() {
        return;
    }
    for t in ["simple-task", "multi-reward", "skills", "multi-step"] {
        let dir = root().join("tests/harbor_tasks").join(t);
        audited_in_a_container(&format!("harbor:{}?backend=container", dir.display()), true);
    }
}

#[test]
fn held_in_terminal_bench_tasks_are_audited_in_containers() {
    if !ready() {
        return;
    }
    let dir = root().join("tests/harbor_tasks_tb");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for t in &names {
        // Each Dockerfile installs packages with RUN: the jail cannot stand in for it.
        let df = std::fs::read_to_string(dir.join(t).join("environment/Dockerfile")).unwrap();
        assert!(df.contains("RUN apt-get"), "{t}");
        audited_in_a_container(
            &format!("harbor:{}?backend=container", dir.join(t).display()),
            df.starts_with("FROM ubuntu:"),
        );
    }
}

/// One episode of `policy` through `nenyax run`; the trajectory.
fn episode(uri: &str, policy: &str) -> Value {
    let out = tempfile::NamedTempFile::new().unwrap();
    let path = out.path().to_string_lossy().into_owned();
    let o = nenyax(
        &["run", uri, "--policy", policy, "-n", "1", "--out", &path],
        &[],
    );
    let line = std::fs::read_to_string(out.path()).unwrap();
    serde_json::from_str(line.lines().next().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("{uri} {policy}: no trajectory ({e}): {}", text(&o)))
}

#[test]
fn oracle_scores_one_nop_zero_and_the_substituted_base_is_in_the_trajectory() {
    if !ready() {
        return;
    }
    let uri = format!(
        "harbor:{}?backend=container",
        root().join("tests/harbor_tasks_tb/fix-git").display()
    );
    let oracle = episode(&uri, "oracle");
    assert_eq!(oracle["judgment"]["score"], 1.0, "{oracle:#}");
    let nop = episode(&uri, "null");
    assert_eq!(nop["judgment"]["score"], 0.0, "{nop:#}");
    let h = &oracle["metadata"]["harbor"];
    assert_eq!(h["backend"], "container", "{h:#}");
    assert_eq!(h["allow_internet"], false, "{h:#}");
    let img = &h["image"];
    assert_eq!(img["substituted"], true, "{img:#}");
    assert_eq!(img["base_requested"], "ubuntu:24.04", "{img:#}");
    assert_eq!(img["base_used"], BASE, "{img:#}");
    assert!(
        img["tag"]
            .as_str()
            .unwrap()
            .starts_with("localhost/nenyax-task-"),
        "{img:#}"
    );
}

/// A Harbor task in `<tmp>/<name>` with this Dockerfile, a solution and a test.
fn task(dockerfile: &str, solve: &str, test: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    for d in ["environment", "solution", "tests"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    std::fs::write(
        t.join("task.toml"),
        "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n[environment]\nallow_internet = false\n",
    )
    .unwrap();
    std::fs::write(t.join("instruction.md"), "Write /app/x.\n").unwrap();
    std::fs::write(t.join("environment/Dockerfile"), dockerfile).unwrap();
    std::fs::write(t.join("solution/solve.sh"), solve).unwrap();
    std::fs::write(t.join("tests/test.sh"), test).unwrap();
    (dir, t)
}

/// The image tag the manifest of `harbor:<t>?backend=container` names.
fn tag_of(t: &Path) -> Result<String, String> {
    let o = nenyax(
        &["info", &format!("harbor:{}?backend=container", t.display())],
        &[],
    );
    if !o.status.success() {
        return Err(text(&o));
    }
    let m: Value = serde_json::from_slice(&o.stdout).map_err(|e| format!("{e}: {}", text(&o)))?;
    Ok(m["extra"]["images"]["t"]["tag"]
        .as_str()
        .unwrap()
        .to_string())
}

#[test]
fn the_image_cache_reuses_an_unchanged_task_and_rebuilds_a_changed_one() {
    if !ready() {
        return;
    }
    let stamp = format!("{:?}", std::time::SystemTime::now());
    let (_d, t) = task(
        "FROM ubuntu:24.04\nCOPY data.txt /app/data.txt\nRUN cat /app/data.txt\nWORKDIR /app\n",
        "echo ok > /app/x\n",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    std::fs::write(t.join("environment/data.txt"), &stamp).unwrap();
    let first = tag_of(&t).unwrap();
    let t0 = Instant::now();
    let again = tag_of(&t).unwrap();
    assert_eq!(first, again);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "an unchanged task was rebuilt ({:?})",
        t0.elapsed()
    );
    // A changed context file, then a changed mode, each make a new image.
    std::fs::write(t.join("environment/data.txt"), format!("{stamp} changed")).unwrap();
    let changed = tag_of(&t).unwrap();
    assert_ne!(first, changed);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        t.join("environment/data.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let moded = tag_of(&t).unwrap();
    assert_ne!(changed, moded);
    // The task's Dockerfile still names ubuntu:24.04: the mapping went into a copy.
    let df = std::fs::read_to_string(t.join("environment/Dockerfile")).unwrap();
    assert!(df.starts_with("FROM ubuntu:24.04\n"));
    // Cached images carry the cache label (not the owner label that sweeps leftovers) and
    // `nenyax images list` shows them with the base they stand on.
    let labels = Command::new("podman")
        .args(["image", "inspect", "--format", "{{json .Labels}}", &moded])
        .output()
        .unwrap();
    let labels: Value = serde_json::from_slice(&labels.stdout).unwrap();
    assert!(labels["io.nenyax.cache"].is_string(), "{labels}");
    assert!(labels.get("io.nenyax.owner").is_none(), "{labels}");
    let o = nenyax(&["images", "list"], &[]);
    let listed = text(&o);
    assert!(o.status.success(), "{listed}");
    assert!(listed.contains(&moded) || listed.contains(&format!("{moded}:latest")));
    assert!(listed.contains("ubuntu:24.04") && listed.contains("NENYAX_IMAGES"));
    // Only the last image is kept by anyone; the others were this test's own.
    for tag in [&first, &changed, &moded] {
        let _ = Command::new("podman")
            .args(["rmi", "-f", tag])
            .output()
            .unwrap();
    }
}

#[test]
fn a_dockerfile_that_fails_to_build_quotes_the_failing_step_and_keeps_the_log() {
    if !ready() {
        return;
    }
    let (_d, t) = task(
        "FROM ubuntu:24.04\nWORKDIR /app\nRUN echo building && \\\n    exit 3\n",
        "true\n",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let o = nenyax(
        &["info", &format!("harbor:{}?backend=container", t.display())],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("failed at the step `RUN echo building"),
        "{err}"
    );
    assert!(err.contains("(line 3)"), "{err}");
    assert!(err.contains("exit status 3"), "{err}");
    let log = err
        .lines()
        .find_map(|l| l.strip_prefix("full log: "))
        .unwrap_or_else(|| panic!("no log path: {err}"));
    assert!(std::fs::read_to_string(log).unwrap().contains("building"));
}

#[test]
fn a_base_that_cannot_be_pulled_or_mapped_says_how_to_map_or_bootstrap() {
    if !ready() {
        return;
    }
    let (_d, t) = task(
        "FROM nenyax-test-no-such-base:1.0\nWORKDIR /app\n",
        "true\n",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let o = nenyax(
        &["info", &format!("harbor:{}?backend=container", t.display())],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for want in [
        "`nenyax-test-no-such-base:1.0` is not present locally and cannot be pulled",
        "[images]",
        "NENYAX_IMAGES=\"nenyax-test-no-such-base:1.0=",
        "nenyax images bootstrap",
        "line 1",
    ] {
        assert!(err.contains(want), "missing `{want}`: {err}");
    }
    // A mapping to an image that is not there says so too.
    let o = nenyax(
        &["info", &format!("harbor:{}?backend=container", t.display())],
        &[(
            "NENYAX_IMAGES",
            "nenyax-test-no-such-base:1.0=localhost/nenyax-test-absent:1",
        )],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("mapped to `localhost/nenyax-test-absent:1`")
            && err.contains("not present locally"),
        "{err}"
    );
    // A malformed NENYAX_IMAGES is a config error naming the item.
    let o = nenyax(
        &["info", &format!("harbor:{}?backend=container", t.display())],
        &[("NENYAX_IMAGES", "ubuntu:24.04")],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("`ubuntu:24.04` is not `from=to`"),
        "{}",
        text(&o)
    );
}

/// An engine that is not installed: `backend=container` is a clear error, `auto` falls back to
/// the jail and says so in the manifest. Needs no engine, only the jail (root).
#[test]
fn a_missing_engine_is_refused_by_name_or_auto_falls_back_to_the_jail() {
    let uri = format!(
        "harbor:{}?backend=container",
        root().join("tests/harbor_tasks/simple-task").display()
    );
    let none = [("NENYAX_CONTAINER_ENGINE", "/nonexistent/podman")];
    let o = nenyax(&["info", &uri], &none);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("backend=container was asked for")
            && err.contains("`/nonexistent/podman` is not installed")
            && err.contains("nenyax setup container"),
        "{err}"
    );
    if let Err(why) = nenyax::sandbox::BackendKind::Jail.ready() {
        eprintln!("SKIPPED (the auto fallback): the jail is not ready: {why}");
        return;
    }
    let o = nenyax(&["info", &uri.replace("container", "auto")], &none);
    assert!(o.status.success(), "{}", text(&o));
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(m["capabilities"]["isolation"], "jail", "{m:#}");
    assert_eq!(m["extra"]["sandbox"]["backend"], "jail", "{m:#}");
    let why = m["extra"]["sandbox"]["why"].as_str().unwrap();
    assert!(
        why.contains("fell back to the jail") && why.contains("/nonexistent/podman"),
        "{why}"
    );
    let o = nenyax(
        &["check", &uri.replace("container", "auto"), "--samples", "1"],
        &none,
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("tier: AUDITED"), "{}", text(&o));
    assert!(
        out.contains("jail backend: backend=auto fell back to the jail"),
        "{out}"
    );
}

/// Containers running `tag`'s image.
fn containers_of(tag: &str) -> Vec<String> {
    let o = Command::new("podman")
        .args(["ps", "-a", "-q", "--filter", &format!("ancestor={tag}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_container_killed_mid_episode_fails_that_episode_and_the_batch_goes_on() {
    if !ready() {
        return;
    }
    // The oracle takes a few seconds, long enough to kill its container from outside.
    let stamp = format!("{:?}", std::time::SystemTime::now());
    let (_d, t) = task(
        &format!("FROM ubuntu:24.04\nRUN echo '{stamp}' > /stamp\nWORKDIR /app\n"),
        "sleep 6\necho ok > /app/x\n",
        "if [ \"$(cat /app/x)\" = ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    );
    let tag = tag_of(&t).unwrap();
    let out = tempfile::NamedTempFile::new().unwrap();
    let path = out.path().to_string_lossy().into_owned();
    let uri = format!("harbor:{}?backend=container", t.display());
    let (config, cache) = sandbox_env();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args([
            "run",
            &uri,
            "--policy",
            "oracle",
            "-n",
            "3",
            "--concurrency",
            "1",
            "--out",
            &path,
        ])
        .env("NENYAX_CONFIG", &config)
        .env("XDG_CACHE_HOME", &cache)
        .env("NENYAX_IMAGES", format!("ubuntu:24.04={BASE}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the first episode's container once it runs.
    let t0 = Instant::now();
    let victim = loop {
        if let Some(c) = containers_of(&tag).into_iter().next() {
            break c;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no container appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    let k = Command::new("podman")
        .args(["kill", &victim])
        .output()
        .unwrap();
    assert!(k.status.success(), "podman kill: {}", text(&k));
    let status = child.wait().unwrap();
    let lines: Vec<Value> = std::fs::read_to_string(out.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "every episode has a trajectory");
    let failed: Vec<&Value> = lines.iter().filter(|l| !l["error"].is_null()).collect();
    assert_eq!(
        failed.len(),
        1,
        "exactly the killed episode fails: {lines:#?}"
    );
    let error = failed[0]["error"].to_string();
    assert!(error.contains("no longer running"), "{error}");
    let scores: Vec<&Value> = lines
        .iter()
        .filter(|l| l["error"].is_null())
        .map(|l| &l["judgment"]["score"])
        .collect();
    assert_eq!(scores, [&Value::from(1.0), &Value::from(1.0)], "{lines:#?}");
    assert!(status.code().is_some(), "the batch ended by itself");
    assert!(
        containers_of(&tag).is_empty(),
        "containers were left: {:?}",
        containers_of(&tag)
    );
    let _ = Command::new("podman").args(["rmi", "-f", &tag]).output();
}

/// `nenyax setup container --dry-run` changes nothing and says what it would do; a real run on a
/// containers.conf with other settings keeps them, and a second run changes nothing.
#[test]
fn setup_container_keeps_other_settings_and_is_idempotent() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("containers.conf");
    let original =
        "# mine\n[engine]\nnum_locks = 2048\n\n[network]\ndefault_subnet = \"10.89.0.0/24\"\n";
    std::fs::write(&conf, original).unwrap();
    let env = [("CONTAINERS_CONF", conf.to_str().unwrap())];
    let o = nenyax(&["setup", "container", "--dry-run"], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), original);
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains("dry run: nothing was changed"), "{said}");
    assert!(said.contains("packages: podman"), "{said}");

    let o = nenyax(&["setup", "container"], &env);
    assert!(o.status.success(), "{}", text(&o));
    let after = std::fs::read_to_string(&conf).unwrap();
    for kept in [
        "# mine",
        "num_locks = 2048",
        "default_subnet = \"10.89.0.0/24\"",
    ] {
        assert!(after.contains(kept), "{kept} was lost: {after}");
    }
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains("engine: podman answers"), "{said}");
    let o = nenyax(&["setup", "container"], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), after);
    let again = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        !again.contains(" set [") && !again.contains("would set"),
        "a second run changed something: {again}"
    );
}

/// The old Terminal-Bench layout (task.yaml, the Dockerfile at the root as the build context,
/// run-tests.sh, solution.sh) builds and runs the same way: fix-git rearranged.
#[test]
fn the_old_terminal_bench_layout_builds_and_runs_in_a_container() {
    if !ready() {
        return;
    }
    let src = root().join("tests/harbor_tasks_tb/fix-git");
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("fix-git-tb");
    std::fs::create_dir_all(t.join("tests")).unwrap();
    let instruction = std::fs::read_to_string(src.join("instruction.md")).unwrap();
    let indented: String = instruction.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(
        t.join("task.yaml"),
        format!("instruction: |-\n{indented}difficulty: easy\nmax_agent_timeout_sec: 120\nmax_test_timeout_sec: 60\n"),
    )
    .unwrap();
    std::fs::copy(src.join("environment/Dockerfile"), t.join("Dockerfile")).unwrap();
    std::fs::copy(src.join("environment/make_repo.sh"), t.join("make_repo.sh")).unwrap();
    std::fs::copy(src.join("solution/solve.sh"), t.join("solution.sh")).unwrap();
    std::fs::copy(src.join("tests/test.sh"), t.join("tests/check.sh")).unwrap();
    // Terminal-Bench's verdict is run-tests.sh's exit status.
    std::fs::write(
        t.join("run-tests.sh"),
        "#!/bin/bash\nbash $TEST_DIR/check.sh\n[ \"$(cat /logs/verifier/reward.txt)\" = 1 ]\n",
    )
    .unwrap();
    let uri = format!("harbor:{}?backend=container", t.display());
    let oracle = episode(&uri, "oracle");
    assert_eq!(oracle["judgment"]["score"], 1.0, "{oracle:#}");
    assert_eq!(oracle["metadata"]["harbor"]["image"]["substituted"], true);
    let nop = episode(&uri, "null");
    assert_eq!(nop["judgment"]["score"], 0.0, "{nop:#}");
}

/// With `auto`, an engine that cannot make a task's image for want of a base (nothing local, no
/// pull, no mapping) falls back to the jail when the jail can run the task, and says why;
/// `backend=container` is the mapping error itself.
#[test]
fn auto_falls_back_to_the_jail_when_no_base_can_be_had() {
    if !ready() {
        return;
    }
    if let Err(why) = nenyax::sandbox::BackendKind::Jail.ready() {
        eprintln!("SKIPPED: the jail is not ready: {why}");
        return;
    }
    let task = root().join("tests/harbor_tasks/simple-task");
    let unmapped = [("NENYAX_IMAGES", "")];
    let o = nenyax(&["info", &format!("harbor:{}", task.display())], &unmapped);
    assert!(o.status.success(), "{}", text(&o));
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(m["extra"]["sandbox"]["backend"], "jail", "{m:#}");
    let why = m["extra"]["sandbox"]["why"].as_str().unwrap();
    assert!(
        why.contains("cannot make the task's image") && why.contains("nenyax images bootstrap"),
        "{why}"
    );
    let o = nenyax(
        &[
            "info",
            &format!("harbor:{}?backend=container", task.display()),
        ],
        &unmapped,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Mapped, auto is the container.
    let o = nenyax(&["info", &format!("harbor:{}", task.display())], &[]);
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(m["extra"]["sandbox"]["backend"], "container", "{m:#}");
    assert_eq!(m["capabilities"]["isolation"], "container", "{m:#}");
}

/// A task that names a prebuilt `docker_image` (as Terminal-Bench 2's do) runs that image, here
/// through a mapping since it cannot be pulled; without one the error says how to map it.
#[test]
fn a_prebuilt_docker_image_is_resolved_like_a_base() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    std::fs::create_dir_all(t.join("tests")).unwrap();
    std::fs::write(
        t.join("task.toml"),
        "[environment]\ndocker_image = \"nenyax-test/prebuilt:1\"\nallow_internet = false\n",
    )
    .unwrap();
    std::fs::write(t.join("instruction.md"), "Nothing to do.\n").unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        "test -x /usr/bin/tmux && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let uri = format!("harbor:{}", t.display());
    let o = nenyax(&["info", &uri], &[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("harbor: task `t`: the base image `nenyax-test/prebuilt:1`")
            && err.contains("nenyax images bootstrap"),
        "{err}"
    );
    let out = tempfile::NamedTempFile::new().unwrap();
    let path = out.path().to_string_lossy().into_owned();
    let o = nenyax(
        &["run", &uri, "--policy", "null", "-n", "1", "--out", &path],
        &[("NENYAX_IMAGES", &format!("nenyax-test/prebuilt:1={BASE}"))],
    );
    assert!(o.status.success(), "{}", text(&o));
    let traj: Value =
        serde_json::from_str(std::fs::read_to_string(out.path()).unwrap().trim()).unwrap();
    assert_eq!(traj["judgment"]["score"], 1.0, "{traj:#}");
    let img = &traj["metadata"]["harbor"]["image"];
    assert_eq!(img["tag"], BASE, "{img:#}");
    assert_eq!(img["base_requested"], "nenyax-test/prebuilt:1", "{img:#}");
    assert_eq!(img["substituted"], true, "{img:#}");
}

/// `nenyax images bootstrap` refuses a package or suite name that is not one, and says how to
/// get mmdebstrap when it is missing, before making anything.
#[test]
fn bootstrap_refuses_bad_input_before_making_anything() {
    if !ready() {
        return;
    }
    let name = "localhost/nenyax-test-never-made:1";
    for (args, want) in [
        (
            vec!["--include", "tmux,a;b"],
            "--include: `a;b` is not a Debian package name",
        ),
        (
            vec!["--suite", "../x"],
            "--suite: `../x` is not a Debian suite name",
        ),
    ] {
        let mut all = vec!["images", "bootstrap", "--name", name, "--no-map"];
        all.extend(args);
        let o = nenyax(&all, &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(want),
            "{}",
            text(&o)
        );
    }
    let o = nenyax(
        &["images", "bootstrap", "--name", name, "--no-map"],
        &[
            ("PATH", "/nonexistent"),
            ("NENYAX_CONTAINER_ENGINE", "/usr/bin/podman"),
        ],
    );
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("mmdebstrap is not installed; run `nenyax setup container`"),
        "{}",
        text(&o)
    );
    let exists = Command::new("podman")
        .args(["image", "exists", name])
        .status()
        .unwrap();
    assert!(!exists.success(), "{name} was made");
}
