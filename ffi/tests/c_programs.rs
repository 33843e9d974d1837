//! The C ABI from C: every program in `tests/c/` is compiled against `include/nenyax.h` with
//! `-std=c11 -Wall -Wextra -Wpedantic -Werror`, linked against the `libnenyax` of the current
//! profile, and run; one `#[test]` per program, so a failure is named. The header itself must
//! compile alone as C11 and as C++17, and when included twice.
//!
//! The library is built first with `cargo build -p nenyax-ffi` for this test binary's profile
//! (the cdylib and staticlib are not dependencies of an integration test, so `cargo test` alone
//! may leave them stale). `$CC` picks the compiler (default `cc`).

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one C program may run before it counts as hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// The warnings every program and the header must pass (as errors), in C11 and in C++17.
const WARNINGS: &[&str] = &["-Wall", "-Wextra", "-Wpedantic", "-Werror"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ffi/ has a parent")
        .to_path_buf()
}

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// `target/` (or `$CARGO_TARGET_DIR`): the parent of cargo's per-target temporary directory.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .to_path_buf()
}

/// `target/[<triple>/]<profile>/`, where this test binary (in `deps/`) and libnenyax live.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <profile>/deps/")
        .to_path_buf()
}

/// Scratch space for compiled programs and their working directories.
fn scratch() -> PathBuf {
    let profile = profile_dir();
    let name = profile.file_name().expect("a profile directory name");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("nenyax-c-tests")
        .join(name);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// Build libnenyax (shared and static) for this binary's profile, once per process. The test
/// binary runs after cargo has released its build lock, so the nested build does not wait on
/// the `cargo test` that started us.
fn library_dir() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = profile_dir();
        let profile = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("the profile directory has no UTF-8 name")?
            .to_string();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(root())
            .args(["build", "--quiet", "-p", "nenyax-ffi", "--lib"])
            .env("CARGO_TARGET_DIR", target_dir());
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        // target/<triple>/<profile>: cross builds name the triple.
        let above = dir.parent().ok_or("no directory above the profile's")?;
        if above != target_dir() {
            let triple = above.file_name().and_then(|n| n.to_str()).unwrap_or("");
            cmd.args(["--target", triple]);
        }
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cmd:?} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for lib in ["libnenyax.so", "libnenyax.a"] {
            if !dir.join(lib).exists() {
                return Err(format!("{} was not built", dir.join(lib).display()));
            }
        }
        Ok(dir)
    });
    match built {
        Ok(dir) => dir,
        Err(e) => panic!("building libnenyax failed: {e}"),
    }
}

fn cc() -> OsString {
    std::env::var_os("CC")
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// Run a compiler command; panic with its output when it fails.
fn compile(mut cmd: Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler for {what} ({cmd:?}): {e}"));
    assert!(
        out.status.success(),
        "{what} does not compile ({}):\n$ {cmd:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `LD_LIBRARY_PATH` with `dir` first.
fn library_path(dir: &Path) -> OsString {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).expect("a joinable LD_LIBRARY_PATH")
}

/// Wait for `child`, killing it after `limit`; `None` when it was killed.
fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the C program") {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How the program is linked against libnenyax.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    Shared,
    Static,
}

/// Compile `tests/c/<name>.c`, run it, and assert that it exits 0.
fn run_c_program(name: &str, link: Link) {
    run_c_program_with(name, link, &[]);
}

/// [`run_c_program`] with extra environment variables for the program.
fn run_c_program_with(name: &str, link: Link, env: &[(&str, String)]) {
    let lib = library_dir();
    let scratch = scratch();
    let suffix = if link == Link::Static { "-static" } else { "" };
    let exe = scratch.join(format!("{name}{suffix}"));
    let source = c_dir().join(format!("{name}.c"));
    assert!(source.exists(), "{} is missing", source.display());

    let mut cmd = Command::new(cc());
    cmd.arg("-std=c11")
        .args(WARNINGS)
        .arg("-pthread")
        // Where the repository is, for programs that load test fixtures from it.
        .arg(format!("-DNENYAX_TEST_ROOT=\"{}\"", root().display()))
        .arg("-I")
        .arg(root().join("include"))
        .arg("-I")
        .arg(c_dir())
        .arg(&source)
        .arg("-o")
        .arg(&exe);
    match link {
        Link::Shared => {
            cmd.arg("-L").arg(lib).arg("-lnenyax");
        }
        Link::Static => {
            cmd.arg(lib.join("libnenyax.a"));
            cmd.args(["-lpthread", "-ldl"]);
        }
    }
    cmd.arg("-lm");
    compile(cmd, &format!("tests/c/{name}.c"));

    // Each program gets its own working directory (some write files relative to it) and its
    // output goes to files, so a chatty program cannot block on a full pipe.
    let work = scratch.join(format!("{name}{suffix}.run"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("create the working directory");
    let (out_path, err_path) = (work.join("stdout.txt"), work.join("stderr.txt"));
    let mut child = Command::new(&exe)
        .current_dir(&work)
        .env("LD_LIBRARY_PATH", library_path(lib))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("create stdout.txt"))
        .stderr(File::create(&err_path).expect("create stderr.txt"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let status = wait_with_timeout(&mut child, RUN_TIMEOUT);
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => {
            // Shown with --nocapture: what was checked.
            print!("{stdout}");
            eprint!("{stderr}");
        }
        Some(s) => panic!(
            "tests/c/{name}.c failed ({s}):\n--- stderr ---\n{stderr}\n--- stdout ---\n{stdout}"
        ),
        None => panic!(
            "tests/c/{name}.c did not finish within {RUN_TIMEOUT:?} (a hang?):\n--- stderr \
             ---\n{stderr}\n--- stdout ---\n{stdout}"
        ),
    }
}

/// The C programs, one `#[test]` each (the test name is the file name).
macro_rules! c_programs {
    ($($name:ident),* $(,)?) => {
        const PROGRAMS: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                run_c_program(stringify!($name), Link::Shared);
            }
        )*
    };
}

c_programs!(
    test_acceptance,
    test_basics,
    test_callbacks,
    test_check,
    test_define,
    test_endpoint,
    test_env_check_tier,
    test_errors,
    test_export,
    test_nested_race,
    test_pg_batch,
    test_pg_golden,
    test_plugin_register,
    test_reasoning_gym,
    test_recording,
    test_serve,
    test_sessions,
    test_sink_stop_routed,
    test_task_by_id,
    test_threads,
    test_train,
    test_with_judge_session,
);

/// The acceptance program also links statically (libnenyax.a plus the system libraries).
#[test]
fn test_acceptance_linked_statically() {
    run_c_program("test_acceptance", Link::Static);
}

#[path = "../../tests/support/nemo_gym_server.rs"]
mod nemo_gym_server;

/// Programs that need a peer started first, each with its own `#[test]` below.
const WITH_PEERS: &[&str] = &["test_nemo_gym_tool", "test_sandbox", "test_telemetry"];

/// A NeMo Gym tool task from C, against a real counter resources server started here.
#[test]
fn test_nemo_gym_tool() {
    let Some(py) = nemo_gym_server::python() else {
        return;
    };
    let server = nemo_gym_server::ResourcesServer::start(&py, "example_session_state_mgmt");
    let uri = format!(
        "nemo_gym:{}?data={}",
        server.url,
        nemo_gym_server::example_data(&py, "example_session_state_mgmt")
    );
    run_c_program_with(
        "test_nemo_gym_tool",
        Link::Shared,
        &[("NENYAX_TEST_NEMO_GYM_URI", uri)],
    );
}

#[path = "../../tests/support/integrations.rs"]
mod integrations;

/// Telemetry from C, its endpoint a receiver that decodes OTLP with opentelemetry-proto
/// (tests/support/otlp_receiver.py, from .venv-phoenix): the batch's five episodes and the
/// training's spans and per-round metrics arrive. Without that venv (locally) the program runs
/// against a closed port only.
#[test]
fn test_telemetry() {
    let Some(py) = integrations::python("phoenix") else {
        return run_c_program("test_telemetry", Link::Shared);
    };
    let got = scratch().join(format!("otlp-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&got);
    let port = nemo_gym_server::free_port();
    let mut receiver = Command::new(&py)
        .arg(root().join("tests/support/otlp_receiver.py"))
        .args([port.to_string(), got.display().to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("start the OTLP receiver");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the receiver did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    run_c_program_with(
        "test_telemetry",
        Link::Shared,
        &[(
            "NENYAX_TEST_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )],
    );
    let _ = receiver.kill();
    let _ = receiver.wait();
    let text = std::fs::read_to_string(&got).expect("the receiver got exports");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let spans: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["path"] == "/v1/traces")
        .flat_map(|l| l["request"]["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array())
        .flatten()
        .collect();
    let named = |n: &str| {
        spans
            .iter()
            .filter(|s| s["name"].as_str().is_some_and(|s| s.starts_with(n)))
            .count()
    };
    assert_eq!(named("episode builtin:arithmetic"), 5, "{text}");
    assert!(named("episode builtin:guess") > 0, "{text}");
    let metric_names: Vec<&str> = lines
        .iter()
        .filter(|l| l["path"] == "/v1/metrics")
        .flat_map(|l| l["request"]["resourceMetrics"][0]["scopeMetrics"][0]["metrics"].as_array())
        .flatten()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert!(
        metric_names.contains(&"nenyax.train.eval_score"),
        "{metric_names:?}"
    );
}

/// Sandboxes from C, the container backend when it is ready (required with
/// NENYAX_REQUIRE_CONTAINER=1), and a Harbor task (Harbor's simple-task example) with oracle and
/// nop when the jail backend is ready here, and then also the C jail plugin (loaded with
/// nenyax_plugin_load, picked by `"backend": "cjail"`).
#[test]
fn test_sandbox() {
    let task = root().join("tests/harbor_tasks/simple-task");
    let jail = nenyax_core::sandbox::BackendKind::Jail.ready().is_ok();
    let task = if jail {
        task.display().to_string()
    } else {
        String::new()
    };
    let container = container_support::container_ready();
    // The C jail of examples/plugins/sandbox-c, loaded from C and picked by name (it needs
    // root, as the built-in jail does).
    let plugin = if jail {
        let lib = scratch().join("libcjail.so");
        let mut cmd = Command::new(cc());
        cmd.args(["-std=c11", "-shared", "-fPIC", "-pthread", "-O2"])
            .arg(root().join("examples/plugins/sandbox-c/cjail.c"))
            .arg("-o")
            .arg(&lib);
        compile(cmd, "examples/plugins/sandbox-c/cjail.c");
        lib.display().to_string()
    } else {
        String::new()
    };
    run_c_program_with(
        "test_sandbox",
        Link::Shared,
        &[
            ("NENYAX_TEST_SANDBOX_PLUGIN", plugin),
            ("NENYAX_TEST_HARBOR_TASK", task),
            (
                "NENYAX_TEST_CONTAINER",
                if container { "1" } else { "0" }.into(),
            ),
        ],
    );
}

// The support module names the library `nenyax`, as the workspace's tests do.
extern crate nenyax_core as nenyax;
#[path = "../../tests/support/container.rs"]
mod container_support;

/// A new program in tests/c/ must be listed above, or it would silently never run.
#[test]
fn every_c_program_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(c_dir())
        .expect("read tests/c")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    found.sort();
    let mut listed: Vec<String> = PROGRAMS
        .iter()
        .chain(WITH_PEERS)
        .map(|s| s.to_string())
        .collect();
    listed.sort();
    assert_eq!(found, listed, "tests/c/*.c and the c_programs! list differ");
}

/// Compile `source` (written to the scratch directory) as C11 or C++17 with -Werror.
fn compile_header_unit(file: &str, source: &str, cplusplus: bool) {
    let path = scratch().join(file);
    std::fs::write(&path, source).expect("write the translation unit");
    let mut cmd = Command::new(cc());
    if cplusplus {
        cmd.args(["-x", "c++", "-std=c++17"]).args(WARNINGS);
    } else {
        cmd.args(["-std=c11", "-Wstrict-prototypes"]).args(WARNINGS);
    }
    cmd.arg("-I")
        .arg(root().join("include"))
        .arg("-c")
        .arg(&path)
        .arg("-o")
        .arg(path.with_extension("o"));
    compile(cmd, file);
}

/// Uses a few declarations, so the header is not just skipped over.
const USE_HEADER: &str = r#"
int uses_the_header(void);
int uses_the_header(void)
{
    nenyax_string_t s = {0, 0};
    const char *(*version)(void) = nenyax_version;
    nenyax_status_t status = NENYAX_STATUS_OK;
    (void)s;
    return version != 0 && status == NENYAX_STATUS_OK && NENYAX_VTABLE_VERSION == 1 &&
           NENYAX_VERSION_NUMBER >= 0;
}
"#;

#[test]
fn header_compiles_alone_as_c11() {
    compile_header_unit(
        "header_alone.c",
        &format!("#include \"nenyax.h\"\n{USE_HEADER}"),
        false,
    );
}

#[test]
fn header_compiles_alone_as_cpp17() {
    compile_header_unit(
        "header_alone.cpp",
        &format!(
            "#include \"nenyax.h\"\n{USE_HEADER}\nstatic_assert(sizeof(nenyax_string_t) == \
             2 * sizeof(void *), \"layout\");\n"
        ),
        true,
    );
}

#[test]
fn header_included_twice() {
    let source = format!("#include \"nenyax.h\"\n#include \"nenyax.h\"\n{USE_HEADER}");
    compile_header_unit("header_twice.c", &source, false);
    compile_header_unit("header_twice.cpp", &source, true);
}
