//! `nenyax new-plugin`: every scaffold builds and passes its own conformance test (its
//! test.sh) on day one, and the same scaffold broken on purpose fails it, so the test is real.
//! Needs the scaffolds' toolchains (python3, go, g++, cargo); with NENYAX_REQUIRE_SCAFFOLDS set
//! a missing one fails instead of skipping.

use std::path::Path;
use std::process::{Command, Output};

/// One scaffold, and how to break it: in `file`, `from` becomes `to`.
struct Case {
    kind: &'static str,
    lang: &'static str,
    tool: &'static str,
    file: &'static str,
    from: &'static str,
    to: &'static str,
    /// What the failing test prints.
    fails_with: &'static str,
}

const CASES: &[Case] = &[
    Case {
        kind: "driver",
        lang: "python",
        tool: "python3",
        file: "nenyax-driver-__NAME__",
        from: "return {\"action\": f\"<answer>{self.task['metadata']['answer']}</answer>\"}",
        to: "return {\"action\": \"<answer>nope</answer>\"}",
        fails_with: "verifier_discriminates",
    },
    Case {
        kind: "driver",
        lang: "go",
        tool: "go",
        file: "main.go",
        from: "out[\"reference\"] = strconv.FormatInt(t.answer, 10)",
        to: "out[\"reference\"] = \"nope\"",
        fails_with: "verifier_discriminates",
    },
    Case {
        kind: "judge",
        lang: "cpp",
        tool: "g++",
        file: "__NAME__.cpp",
        from: "bool hit = normalize(got) == normalize(answer->text);",
        to: "bool hit = !got.empty() || answer->text.empty();",
        fails_with: "discriminates",
    },
    Case {
        kind: "learner",
        lang: "rust",
        tool: "cargo",
        file: "src/lib.rs",
        from: "            st.0 = Some(saved);\n",
        to: "            let _ = saved;\n",
        fails_with: "snapshot_restores",
    },
    Case {
        kind: "judge",
        lang: "rust",
        tool: "cargo",
        file: "src/lib.rs",
        from: "let hit = normalize(&got) == normalize(&expected);",
        to: "let hit = !got.is_empty() || expected.is_empty();",
        fails_with: "discriminates",
    },
    Case {
        kind: "learner",
        lang: "go",
        tool: "go",
        file: "main.go",
        from: "prefs = clone(saved)",
        to: "_ = saved",
        fails_with: "snapshot_restores",
    },
    Case {
        kind: "telemetry",
        lang: "c",
        tool: "cc",
        file: "__NAME__.c",
        from: "SINK.episodes++;",
        to: "return 1;",
        fails_with: "receives_episodes",
    },
    Case {
        kind: "hub",
        lang: "c",
        tool: "cc",
        file: "__NAME__.c",
        from: "put(out, CATALOGUE[i].uri);",
        to: "put(out, \"not a uri\");",
        fails_with: "fetch_gives_uris",
    },
    Case {
        kind: "telemetry",
        lang: "rust",
        tool: "cargo",
        file: "src/lib.rs",
        from: "state.episodes += 1;",
        to: "return Err(\"broken on purpose\".into());",
        fails_with: "receives_episodes",
    },
    Case {
        kind: "sandbox",
        lang: "c",
        tool: "cc as root",
        file: "__NAME__.c",
        from: "    env_set(&env, \"PATH\", 4, BASE_PATH, strlen(BASE_PATH));\n",
        to: "    for (char **e = environ; *e; e++) vec_push(&env, *e);\n    env_set(&env, \"PATH\", 4, BASE_PATH, strlen(BASE_PATH));\n",
        fails_with: "scrubbed_environment",
    },
    Case {
        kind: "hub",
        lang: "rust",
        tool: "cargo",
        file: "src/lib.rs",
        from: "Some(e) => Ok(e.uri.to_string()),",
        to: "Some(_) => Ok(\"not a uri\".to_string()),",
        fails_with: "fetch_gives_uris",
    },
    Case {
        kind: "sandbox",
        lang: "rust",
        tool: "cargo",
        file: "src/lib.rs",
        from: "            .env_clear()\n",
        to: "\n",
        fails_with: "FAIL scrubbed_environment",
    },
];

fn have(tool: &str) -> bool {
    // A jail's scaffold needs root for its namespaces as well as the compiler.
    if let Some(tool) = tool.strip_suffix(" as root") {
        return nix::unistd::geteuid().is_root() && have(tool);
    }
    // Go alone spells it without dashes.
    let arg = if tool == "go" { "version" } else { "--version" };
    Command::new(tool)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_test(dir: &Path) -> Output {
    Command::new("bash")
        .arg(dir.join("test.sh"))
        .env("NENYAX", env!("CARGO_BIN_EXE_nenyax"))
        .env_remove("NENYAX_PLUGINS")
        .output()
        .expect("bash runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_scaffold_passes_its_test_and_fails_it_when_broken() {
    let required = std::env::var_os("NENYAX_REQUIRE_SCAFFOLDS").is_some();
    let root = tempfile::tempdir().unwrap();
    let mut langs: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for case in CASES {
        if !have(case.tool) {
            assert!(
                !required,
                "{} is missing for the {} {} scaffold",
                case.tool, case.kind, case.lang
            );
            eprintln!(
                "skipping the {} {} scaffold: no {}",
                case.kind, case.lang, case.tool
            );
            continue;
        }
        let name = format!("my_{}_{}", case.kind, case.lang);
        let dir = root.path().join(&name);
        let made = Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .args(["new-plugin", case.kind, &name, "--lang", case.lang, "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(made.status.success(), "{}", text(&made));
        let good = run_test(&dir);
        assert!(
            good.status.success(),
            "the {} {} scaffold fails its own test on day one:\n{}",
            case.kind,
            case.lang,
            text(&good)
        );
        // Broken on purpose: the same test must now fail, naming the check.
        let file = dir.join(case.file.replace("__NAME__", &name));
        let src = std::fs::read_to_string(&file).unwrap();
        assert!(
            src.contains(case.from),
            "{}: the line to break moved",
            file.display()
        );
        std::fs::write(&file, src.replace(case.from, case.to)).unwrap();
        let bad = run_test(&dir);
        let out = text(&bad);
        assert!(
            !bad.status.success() && out.contains(case.fails_with),
            "the broken {} {} scaffold still passes (or fails for another reason):\n{out}",
            case.kind,
            case.lang
        );
        eprintln!(
            "{} {}: passes; broken on purpose, fails with {}",
            case.kind, case.lang, case.fails_with
        );
        langs.entry(case.kind).or_default().push(case.lang);
    }
    if required {
        for (kind, langs) in &langs {
            assert!(langs.len() >= 2, "{kind} has scaffolds in only {langs:?}");
        }
    }
}

#[test]
fn bad_requests_name_the_fix() {
    let root = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .arg("new-plugin")
            .args(args)
            .current_dir(root.path())
            .output()
            .unwrap()
    };
    let o = run(&["hub", "x"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("the scaffolds are:"), "{}", text(&o));
    let o = run(&["judge", "Bad-Name", "--lang", "rust"]);
    assert!(
        text(&o).contains("must start with a lowercase letter"),
        "{}",
        text(&o)
    );
    std::fs::create_dir(root.path().join("taken")).unwrap();
    std::fs::write(root.path().join("taken/x"), "").unwrap();
    let o = run(&["driver", "taken"]);
    assert!(
        text(&o).contains("already exists and is not empty"),
        "{}",
        text(&o)
    );
}
