//! Library plugins end to end: the C++ judge of examples/plugins/judge-cpp, built here with the
//! system's C++ compiler, used by `nenyax check`, `nenyax run` and `nenyax plugin-check judge`
//! through a plugins config; a
//! plugin built for another ABI version refused naming both versions; a judge that cannot
//! discriminate failing `--require audited`; a segfaulting plugin named as the process dies; and
//! every misbehaving reply or descriptor (tests/plugins/odd_judges.c) a clean typed error.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nenyax::contract::{Mode, TaskRef, Trajectory};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compile a plugin source into `dir/lib<name>.so` with `defines`; panics with the compiler's
/// output when it fails.
fn build(compiler: &str, source: &Path, dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let out = dir.join(format!("lib{name}.so"));
    let mut cmd = Command::new(compiler);
    if compiler.ends_with("++") {
        cmd.arg("-std=c++17");
    } else {
        cmd.arg("-std=c11");
    }
    let o = cmd
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(defines)
        .arg(source)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} (needed to build plugins): {e}"));
    assert!(
        o.status.success(),
        "{compiler} failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn cpp_plugin(dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let src = root().join("examples/plugins/judge-cpp/exact_answer.cpp");
    build(&cxx, &src, dir, name, defines)
}

fn odd_plugin(dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    build(
        &cc,
        &root().join("tests/plugins/odd_judges.c"),
        dir,
        name,
        defines,
    )
}

const TASKS: &str = r#"
[[tasks]]
prompt = "Capital of Kenya? Answer in <answer></answer> tags."
answer = "Nairobi"

[[tasks]]
prompt = "Capital of France? Answer in <answer></answer> tags."
answer = "Paris"

[[tasks]]
prompt = "Capital of Japan? Answer in <answer></answer> tags."
answer = "Tokyo"
"#;

/// A plugins config naming `library` (relative to the config) as judge `exact_answer`, and a
/// define file whose judge is that plugin (or, with `builtin`, the built-in exact judge).
fn setup(dir: &Path, library: &Path, builtin: bool) -> (PathBuf, String) {
    let rel = library.file_name().unwrap().to_str().unwrap();
    let config = dir.join("plugins.toml");
    std::fs::write(
        &config,
        format!(
            "[[plugin]]\nname = \"exact_answer\"\nkind = \"judge\"\nlibrary = \"{rel}\"\n\
             summary = \"the C++ example\"\n"
        ),
    )
    .unwrap();
    let judge = if builtin {
        "[judge]\ntype = \"exact\"\nextract = \"answer_tag\"\n"
    } else {
        "[judge]\ntype = \"plugin\"\nuse = \"exact_answer\"\nextract = \"answer_tag\"\n"
    };
    let define = dir.join("capitals.toml");
    std::fs::write(&define, format!("name = \"capitals\"\n{judge}{TASKS}")).unwrap();
    (config, format!("define:{}", define.display()))
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

fn tier(o: &Output) -> String {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}): {}", text(&o.stdout)));
    v["tier"].as_str().unwrap().to_string()
}

#[test]
fn the_cpp_judge_reaches_the_tier_of_the_builtin_exact_judge_and_is_the_one_used() {
    let dir = tempfile::tempdir().unwrap();
    let lib = cpp_plugin(dir.path(), "exact_answer", &[]);

    // The built-in exact judge on the same tasks: the tier to match.
    let (config, builtin_uri) = setup(dir.path(), &lib, true);
    let o = nenyax(&config, &["check", &builtin_uri, "--json"]);
    let want = tier(&o);
    assert_eq!(want, "audited", "{}", text(&o.stderr));

    let (config, uri) = setup(dir.path(), &lib, false);
    let o = nenyax(&config, &["check", &uri, "--json", "--require", "audited"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(tier(&o), want);

    // The trajectories name the plugin as their judge, and the oracle passes every task.
    let out = dir.path().join("runs.jsonl");
    let o = nenyax(
        &config,
        &["run", &uri, "-n", "3", "--out", out.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines = std::fs::read_to_string(&out).unwrap();
    let trajs: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(trajs.len(), 3);
    for t in &trajs {
        assert_eq!(t["judgment"]["judge"], "plugin:exact_answer", "{t}");
        assert_eq!(t["judgment"]["score"], 1.0, "{t}");
    }

    // The judge conformance check holds the plugin to the built-ins' standard.
    let o = nenyax(&config, &["plugin-check", "judge", "exact_answer"]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("CONFORMS"), "{}", text(&o.stdout));
}

#[test]
fn a_plugin_built_for_another_abi_version_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let lib = cpp_plugin(dir.path(), "abi2", &["-DEXAMPLE_ABI_VERSION=2"]);
    let (config, uri) = setup(dir.path(), &lib, false);
    let o = nenyax(&config, &["check", &uri]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    let canonical = std::fs::canonicalize(&lib).unwrap();
    for want in [
        "plugin `exact_answer`",
        &canonical.display().to_string(),
        "built for plugin ABI version 2",
        "this Nenyax speaks version 1",
        "rebuild it against include/nenyax.h",
    ] {
        assert!(err.contains(want), "missing {want:?} in: {err}");
    }
}

#[test]
fn a_judge_that_passes_everything_fails_require_audited() {
    let dir = tempfile::tempdir().unwrap();
    let lib = cpp_plugin(dir.path(), "broken", &["-DEXAMPLE_BROKEN"]);
    let (config, uri) = setup(dir.path(), &lib, false);
    let o = nenyax(&config, &["check", &uri, "--json", "--require", "audited"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("required tier audited not reached"),
        "{}",
        text(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let audit = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "verifier_discriminates")
        .expect("the audit ran");
    assert_eq!(audit["status"], "fail", "{audit}");
    // And the judge conformance check names the fault.
    let o = nenyax(&config, &["plugin-check", "judge", "exact_answer"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stdout).contains("discriminates"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn a_segfaulting_plugin_takes_the_process_down_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let lib = cpp_plugin(dir.path(), "crashes", &["-DEXAMPLE_CRASH"]);
    let (config, uri) = setup(dir.path(), &lib, false);
    let o = nenyax(&config, &["check", &uri]);
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "expected death by SIGSEGV, got {:?}; stderr: {}",
        o.status,
        text(&o.stderr)
    );
    let err = text(&o.stderr);
    let canonical = std::fs::canonicalize(&lib).unwrap();
    assert!(
        err.contains(&format!(
            "nenyax: crashed inside library plugin `exact_answer` ({}) during judge",
            canonical.display()
        )),
        "{err}"
    );
}

#[test]
fn an_unknown_plugin_name_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let lib = cpp_plugin(dir.path(), "named", &[]);
    let (config, _) = setup(dir.path(), &lib, false);
    let define = dir.path().join("other.toml");
    std::fs::write(
        &define,
        format!("[judge]\ntype = \"plugin\"\nuse = \"nope\"\n{TASKS}"),
    )
    .unwrap();
    let o = nenyax(&config, &["check", &format!("define:{}", define.display())]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("no judge plugin named `nope`"), "{err}");
    assert!(err.contains(&config.display().to_string()), "{err}");
    assert!(err.contains("known judge plugins: exact_answer"), "{err}");
}

fn trajectory(answer: &str, reply: &str) -> Trajectory {
    let mut task = TaskRef::new("t1");
    task.metadata
        .insert("answer".into(), serde_json::json!(answer));
    let mut t = Trajectory::start("test", Mode::Step, Some(task), None);
    t.steps.push(nenyax::contract::Step {
        action: serde_json::json!(reply),
        observation: Default::default(),
        reward: 0.0,
        terminated: true,
        truncated: false,
        info: Default::default(),
    });
    t
}

#[test]
fn misbehaving_replies_are_clean_judge_errors_naming_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let lib = odd_plugin(dir.path(), "odd", &[]);
    let infos = nenyax::plugins::load_library(&lib).unwrap();
    assert_eq!(infos.len(), 6);
    // Loaded once: a second load registers nothing new and answers with the same plugins.
    assert_eq!(nenyax::plugins::load_library(&lib).unwrap(), infos);
    let listed = nenyax::plugins::loaded();
    let counts = listed.iter().find(|p| p.name == "odd_counts").unwrap();
    assert_eq!(counts.version, "1.2.3");
    assert_eq!(
        counts.source,
        std::fs::canonicalize(&lib).unwrap().display().to_string()
    );

    let traj = trajectory("4", "<answer>4</answer>");
    let judge = |name: &str| nenyax::plugins::find_judge(name).unwrap().judge(&traj);
    let ok = judge("odd_counts").unwrap();
    assert_eq!(
        ok.score, 1.0,
        "the input is NUL-terminated and len excludes it"
    );
    assert_eq!(ok.judge.as_deref(), Some("plugin:odd_counts"));
    assert_eq!(ok.details["user"], "ok");
    assert_eq!(ok.details["plugin"]["name"], "odd_counts");

    for (name, kind, wants) in [
        (
            "odd_garbage",
            "JudgeError",
            &[
                "judge plugin `odd_garbage`",
                "not a judgment",
                "this is not json",
            ][..],
        ),
        (
            "odd_fails",
            "JudgeError",
            &["failed (returned 3)", "no answer in this trajectory"][..],
        ),
        ("odd_silent", "JudgeError", &["(it wrote no message)"][..]),
        ("odd_wrong_shape", "JudgeError", &["not a judgment"][..]),
        ("odd_huge", "JudgeError", &["odd_huge"][..]),
    ] {
        let e = judge(name).unwrap_err();
        assert_eq!(e.kind(), kind, "{name}: {e}");
        for w in wants {
            assert!(e.to_string().contains(w), "{name}: missing {w:?} in {e}");
        }
    }
}

#[test]
fn defective_descriptors_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (1, "`name` is NULL"),
        (2, "unknown kind code 42; the kinds are 1=driver"),
        (3, "judge vtable version 9; this Nenyax speaks version 1"),
        (4, "`vtable` is NULL"),
        (5, "refused to load: nenyax_plugin_entry returned 17"),
        (6, "the vtable's `judge` is NULL"),
        (7, "`name` is not UTF-8"),
    ];
    for (defect, want) in cases {
        let lib = odd_plugin(
            dir.path(),
            &format!("defect{defect}"),
            &[&format!("-DDEFECT={defect}")],
        );
        let e = nenyax::plugins::load_library(&lib).unwrap_err();
        assert_eq!(e.kind(), "ConfigError");
        assert!(e.to_string().contains(want), "defect {defect}: {e}");
        assert!(
            e.to_string().contains(&format!("defect{defect}")),
            "names the library: {e}"
        );
    }
    let e = nenyax::plugins::load_library(&dir.path().join("missing.so")).unwrap_err();
    assert!(e.to_string().contains("cannot be read"), "{e}");
    // A shared library that is not a plugin.
    let not_plugin = dir.path().join("libplain.so");
    let src = dir.path().join("plain.c");
    std::fs::write(&src, "int plain(void) { return 1; }\n").unwrap();
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&not_plugin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(o.success());
    let e = nenyax::plugins::load_library(&not_plugin).unwrap_err();
    assert!(
        e.to_string().contains("exports no `nenyax_plugin_entry`"),
        "{e}"
    );
}

#[test]
fn use_belongs_to_plugin_judges_and_plugin_judges_need_it() {
    let err = |json: &str| match nenyax::judges::judge_from_json(json) {
        Ok(_) => panic!("{json} was accepted"),
        Err(e) => e,
    };
    let e = err(r#"{"type": "exact", "use": "exact_answer"}"#);
    assert_eq!(e.kind(), "ConfigError");
    assert!(e.to_string().contains("write type = \"plugin\""), "{e}");
    let e = err(r#"{"type": "plugin"}"#);
    assert!(e.to_string().contains("needs `use`"), "{e}");
    let e = err(r#"{"type": "plugin", "use": "x", "extract": "sideways"}"#);
    assert_eq!(e.kind(), "ConfigError", "{e}");
}
