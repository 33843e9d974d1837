//! `define:` files: environments with no code, and errors that name the file, line and field.

use std::fs;
use std::path::Path;

use nenyax::conformance::{check_uri, CheckOptions, Tier};
use nenyax::{load, Error, RolloutOptions};

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p.display().to_string()
}

const CAPITALS: &str = r#"
name = "capitals"
description = "Capital cities"

[judge]
type = "exact"
field = "answer"
extract = "answer_tag"

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

#[test]
fn an_inline_define_file_reaches_audited() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "capitals.toml", CAPITALS);
    let uri = format!("define:{path}");
    let env = load(&uri).unwrap();
    assert_eq!(env.manifest().name, "capitals");
    assert_eq!(env.manifest().num_tasks, Some(3));
    let tasks = env.tasks(None).unwrap();
    assert_eq!(tasks[1].metadata["answer"], "Paris");
    let report = check_uri(&uri, &CheckOptions::default());
    assert_eq!(report.tier, Tier::Audited, "{}", report.render());
    // The judge reads the reply, case-insensitively with whitespace collapsed.
    let mut s = env.session(Some(&tasks[0]), None).unwrap();
    s.act(serde_json::json!("I think <answer> nairobi </answer>"))
        .unwrap();
    assert_eq!(s.judgment().unwrap().score, 1.0);
}

#[test]
fn a_tasks_file_is_read_relative_to_the_define_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("data")).unwrap();
    write(
        &dir.path().join("data"),
        "sums.jsonl",
        "{\"prompt\": \"2+2? Box it.\", \"answer\": \"4\"}\n\n{\"prompt\": \"3+4? Box it.\", \"answer\": 7}\n",
    );
    let path = write(
        dir.path(),
        "sums.toml",
        "tasks_file = \"data/sums.jsonl\"\n[judge]\ntype = \"numeric\"\nextract = \"boxed\"\ntolerance = 0.5\n",
    );
    let env = load(&format!("define:{path}")).unwrap();
    assert_eq!(
        env.manifest().name,
        "sums",
        "name defaults to the file stem"
    );
    let oracle = env.reference_policy(None).unwrap();
    for t in env.tasks(None).unwrap() {
        let tr = env.rollout(&oracle, &RolloutOptions::new(Some(t), None));
        assert_eq!(tr.score(), Some(1.0), "{:?}", tr);
    }
    let report = check_uri(&format!("define:{path}"), &CheckOptions::default());
    assert_eq!(report.tier, Tier::Audited, "{}", report.render());
}

#[test]
fn a_regex_judge_has_no_oracle_so_the_audit_is_skipped_not_passed() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "fmt.toml",
        "[judge]\ntype = \"regex\"\npattern = \"^<answer>.+</answer>$\"\n[[tasks]]\nprompt = \"Say anything in answer tags.\"\n",
    );
    let report = check_uri(&format!("define:{path}"), &CheckOptions::default());
    assert_eq!(report.tier, Tier::Trainable, "{}", report.render());
    let audit = report
        .checks
        .iter()
        .find(|c| c.name == "verifier_discriminates")
        .unwrap();
    assert_eq!(audit.status, nenyax::conformance::Status::Skip);
}

fn define_err(dir: &Path, name: &str, text: &str) -> (String, Error) {
    let path = write(dir, name, text);
    match load(&format!("define:{path}")) {
        Ok(_) => panic!("{name} loaded but should not have"),
        Err(e) => (path, e),
    }
}

#[test]
fn malformed_define_files_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // TOML syntax error on line 3.
    let (path, e) = define_err(
        d,
        "syntax.toml",
        "name = \"x\"\n\n[[tasks]\nprompt = \"q\"\n",
    );
    let msg = e.to_string();
    assert_eq!(e.kind(), "DefineError");
    assert!(msg.starts_with(&format!("{path}:3:")), "{msg}");

    // A misspelt top-level key: the field is named and the accepted ones listed.
    let (path, e) = define_err(d, "typo.toml", "name = \"x\"\ntask_file = \"a.jsonl\"\n");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{path}:2: task_file:")), "{msg}");
    assert!(msg.contains("tasks_file"), "{msg}");

    // A task without a prompt, on line 5.
    let (path, e) = define_err(
        d,
        "noprompt.toml",
        "[[tasks]]\nprompt = \"a\"\nanswer = \"1\"\n\n[[tasks]]\nanswer = \"2\"\n",
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{path}:5: tasks[1].prompt:")),
        "{msg}"
    );

    // A task without the field the judge compares with.
    let (_, e) = define_err(
        d,
        "noanswer.toml",
        "[[tasks]]\nprompt = \"a\"\nsolution = \"1\"\n",
    );
    assert!(e.to_string().contains("tasks[0].answer: missing"), "{e}");

    // An unknown judge type.
    let (path, e) = define_err(
        d,
        "judge.toml",
        "[judge]\ntype = \"fuzzy\"\n[[tasks]]\nprompt = \"a\"\nanswer = \"1\"\n",
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{path}:1: judge:"))
            && msg.contains("exact, contains, numeric, regex"),
        "{msg}"
    );

    // A bad regex.
    let (_, e) = define_err(
        d,
        "regex.toml",
        "[judge]\ntype = \"regex\"\npattern = \"(\"\n[[tasks]]\nprompt = \"a\"\n",
    );
    assert!(e.to_string().contains("not a valid regex"), "{e}");

    // Both inline tasks and a tasks file.
    let (_, e) = define_err(
        d,
        "both.toml",
        "tasks_file = \"x.jsonl\"\n[[tasks]]\nprompt = \"a\"\nanswer = \"1\"\n",
    );
    assert!(e.to_string().contains("not both"), "{e}");

    // No tasks at all.
    let (_, e) = define_err(d, "empty.toml", "name = \"empty\"\n");
    assert!(e.to_string().contains("no tasks"), "{e}");
}

#[test]
fn malformed_jsonl_rows_name_the_data_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = write(
        d,
        "rows.jsonl",
        "{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": \"b\", answer: 2}\n",
    );
    let (_, e) = define_err(d, "rows.toml", "tasks_file = \"rows.jsonl\"\n");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{data}:2: row: not valid JSON")),
        "{msg}"
    );

    let data = write(d, "arr.jsonl", "[1, 2]\n");
    let (_, e) = define_err(d, "arr.toml", "tasks_file = \"arr.jsonl\"\n");
    assert!(e.to_string().starts_with(&format!("{data}:1: row:")), "{e}");

    let data = write(
        d,
        "noprompt.jsonl",
        "{\"prompt\": \"a\", \"answer\": \"1\"}\n\n{\"answer\": \"2\"}\n",
    );
    let (_, e) = define_err(d, "np.toml", "tasks_file = \"noprompt.jsonl\"\n");
    assert!(
        e.to_string()
            .starts_with(&format!("{data}:3: tasks[1].prompt")),
        "{e}"
    );

    let (_, e) = define_err(d, "missing.toml", "tasks_file = \"nowhere.jsonl\"\n");
    assert!(
        e.to_string().contains("nowhere.jsonl") && e.to_string().contains("cannot read"),
        "{e}"
    );
}

#[test]
fn a_missing_define_file_is_named() {
    let e = load("define:./surely/not/here.toml").err().unwrap();
    assert_eq!(e.kind(), "DefineError");
    assert!(e.to_string().contains("surely/not/here.toml"), "{e}");
}
