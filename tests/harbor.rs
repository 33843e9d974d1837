//! The harbor: driver on Harbor's own example tasks (tests/harbor_tasks, Apache-2.0, see
//! SOURCES.md there): oracle and nop through conformance, per-step rewards, multi-key
//! rewards, and the terminus agent with a scripted model, all in the jail (`backend=jail`;
//! tests/harbor_container.rs runs the tasks through the container backend). Needs root.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nenyax::train::{learner, LearnerParts};
use nenyax::{
    check_uri, load, train, CheckOptions, FunctionModel, JudgeSource, Message, Policy,
    RolloutOptions, Tier, TrainOptions,
};

fn tasks_dir() -> String {
    format!("{}/tests/harbor_tasks", env!("CARGO_MANIFEST_DIR"))
}

fn ready() -> bool {
    match nenyax::sandbox::BackendKind::Jail.ready() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("harbor tests need the jail backend: {why}");
            false
        }
    }
}

#[test]
fn every_task_is_audited_oracle_one_nop_zero() {
    if !ready() {
        return;
    }
    for t in ["simple-task", "multi-reward", "skills", "multi-step"] {
        let uri = format!("harbor:{}/{t}?backend=jail", tasks_dir());
        let opts = CheckOptions {
            samples: 1,
            ..CheckOptions::default()
        };
        let report = check_uri(&uri, &opts);
        assert_eq!(report.tier, Tier::Audited, "{}", report.render());
    }
}

#[test]
fn a_directory_of_tasks_lists_each() {
    if !ready() {
        return;
    }
    let env = load(&format!("harbor:{}?backend=jail", tasks_dir())).unwrap();
    let ids: Vec<String> = env.tasks(None).unwrap().into_iter().map(|t| t.id).collect();
    assert_eq!(ids, ["multi-reward", "multi-step", "simple-task", "skills"]);
}

#[test]
fn multi_step_rewards_each_step_and_stops_early() {
    if !ready() {
        return;
    }
    let env = load(&format!("harbor:{}/multi-step?backend=jail", tasks_dir())).unwrap();
    let t = env.rollout(&Policy::Native("oracle".into()), &RolloutOptions::default());
    assert!(t.error.is_none(), "{:?}", t.error);
    let rewards: Vec<f64> = t.steps.iter().map(|s| s.reward).collect();
    assert_eq!(rewards, [1.0, 1.0, 1.0]);
    let j = t.judgment.unwrap();
    assert_eq!(j.source, JudgeSource::Tests);
    assert_eq!(j.components["scaffold"], 1.0);
    assert_eq!(j.components["document"], 1.0);

    let t = env.rollout(&Policy::Native("nop".into()), &RolloutOptions::default());
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(
        t.steps.len(),
        1,
        "min_reward 1.0 on scaffold stops the task"
    );
    let j = t.judgment.unwrap();
    assert_eq!(j.score, 0.0);
    assert_eq!(j.components["implement"], 0.0);
    assert!(j.details["stopped_early"]
        .as_str()
        .unwrap()
        .contains("scaffold"));
}

#[test]
fn reward_json_keys_are_components() {
    if !ready() {
        return;
    }
    let env = load(&format!("harbor:{}/multi-reward?backend=jail", tasks_dir())).unwrap();
    let t = env.rollout(&Policy::Native("oracle".into()), &RolloutOptions::default());
    let j = t.judgment.expect("judged");
    assert_eq!(j.components["correctness"], 1.0);
    assert_eq!(j.components["performance"], 1.0);
    assert_eq!(j.passed, Some(true));
}

/// A model that replays `replies` in order (then repeats the last).
fn scripted(replies: Vec<String>) -> (Policy, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let model = FunctionModel::new("scripted", move |_m: &[Message]| {
        let i = seen.fetch_add(1, Ordering::SeqCst);
        Ok(replies[i.min(replies.len() - 1)].clone())
    });
    (Policy::chat(model), n)
}

fn reply(keystrokes: &str, done: bool) -> String {
    serde_json::json!({
        "analysis": "a", "plan": "p",
        "commands": [{"keystrokes": keystrokes, "duration": 0.1}],
        "task_complete": done,
    })
    .to_string()
}

#[test]
fn a_scripted_model_solves_simple_task_with_double_confirmation() {
    if !ready() {
        return;
    }
    let env = load(&format!("harbor:{}/simple-task?backend=jail", tasks_dir())).unwrap();
    let (policy, calls) = scripted(vec![
        reply("cd /app\n", false),
        reply("echo 'Hello, world!' > hello.txt\n", true),
        reply("cat hello.txt\n", true),
    ]);
    let t = env.rollout(&policy, &RolloutOptions::default());
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(t.score(), Some(1.0), "{:#?}", t.steps);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the second task_complete ends the run"
    );
    assert_eq!(t.model_calls.len(), 3, "every model call is recorded");
    assert!(t.model_calls.iter().all(|c| c.response.is_some()));
    // The persistent shell kept `cd /app` from the first turn; the last output is the file.
    let outs: Vec<String> = t
        .steps
        .iter()
        .filter_map(|s| s.observation.text.clone())
        .collect();
    assert!(outs.iter().any(|o| o.contains("Hello, world!")), "{outs:?}");
    let confirm = t.messages[4].text().unwrap();
    assert!(confirm.contains("Are you sure you want to mark the task as complete?"));
}

#[test]
fn a_scripted_model_solves_every_step_of_multi_step() {
    if !ready() {
        return;
    }
    let env = load(&format!("harbor:{}/multi-step?backend=jail", tasks_dir())).unwrap();
    let greet1 = "printf '#!/bin/bash\\necho hello\\n' > /app/greet.sh && chmod +x /app/greet.sh\n";
    let greet2 = "printf '#!/bin/bash\\nname=$(tr -d \"\\\\n\" < /app/config.txt)\\necho \"Hello, ${name}!\"\\n' > /app/greet.sh\n";
    let readme = "printf '# greet.sh\\nReads config.txt.\\n```bash\\n/app/greet.sh\\n```\\n' > /app/README.md\n";
    let (policy, _) = scripted(vec![
        reply(greet1, true),
        reply("", true),
        reply(greet2, true),
        reply("", true),
        reply(readme, true),
        reply("", true),
    ]);
    let t = env.rollout(&policy, &RolloutOptions::default());
    assert!(t.error.is_none(), "{:?}", t.error);
    let j = t.judgment.unwrap();
    assert_eq!(j.score, 1.0, "{:?} {:#?}", j.components, t.steps);
    assert_eq!(t.model_calls.len(), 6);
}

#[test]
fn malformed_json_gets_parse_error_feedback_and_fails_cleanly() {
    if !ready() {
        return;
    }
    let env = load(&format!(
        "harbor:{}/simple-task?max_turns=3&backend=jail",
        tasks_dir()
    ))
    .unwrap();
    let (policy, calls) = scripted(vec![
        "I will create the file now.".into(),
        "{\"analysis\": \"a\", \"plan\": \"p\"}".into(),
    ]);
    let t = env.rollout(&policy, &RolloutOptions::default());
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(t.score(), Some(0.0));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let feedback = t.messages[2].text().unwrap();
    assert!(
        feedback.starts_with("Previous response had parsing errors:\nERROR: No valid JSON"),
        "{feedback}"
    );
    let feedback = t.messages[4].text().unwrap();
    assert!(
        feedback.contains("Missing required fields: commands"),
        "{feedback}"
    );
}

#[test]
fn a_dockerfile_that_builds_needs_a_container() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    std::fs::create_dir_all(t.join("environment")).unwrap();
    std::fs::write(t.join("task.toml"), "version = \"1.0\"\n").unwrap();
    std::fs::write(t.join("instruction.md"), "x").unwrap();
    std::fs::write(
        t.join("environment/Dockerfile"),
        "FROM ubuntu:24.04\nRUN pip install numpy\nWORKDIR /app\n",
    )
    .unwrap();
    let e = load(&format!("harbor:{}?backend=jail", t.display()))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("needs a container backend") && e.contains("pip install"),
        "{e}"
    );
    let e = load(&format!("harbor:{}?backend=process", t.display()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("jail"), "{e}");
}

/// The old Terminal-Bench layout (task.yaml, Dockerfile, run-tests.sh, solution.sh, tests/),
/// built from simple-task's own files the way Harbor's mapper maps them back.
#[test]
fn the_old_terminal_bench_layout_runs_oracle_and_nop() {
    if !ready() {
        return;
    }
    let src = std::path::PathBuf::from(tasks_dir()).join("simple-task");
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("hello-world");
    std::fs::create_dir_all(t.join("tests")).unwrap();
    let instruction = std::fs::read_to_string(src.join("instruction.md")).unwrap();
    let indented: String = instruction.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(
        t.join("task.yaml"),
        format!("instruction: |-\n{indented}author_name: x\ndifficulty: easy\nmax_agent_timeout_sec: 60\nmax_test_timeout_sec: 60\n"),
    )
    .unwrap();
    std::fs::copy(src.join("environment/Dockerfile"), t.join("Dockerfile")).unwrap();
    std::fs::copy(src.join("solution/solve.sh"), t.join("solution.sh")).unwrap();
    std::fs::copy(
        src.join("tests/test_state.py"),
        t.join("tests/test_outputs.py"),
    )
    .unwrap();
    std::fs::write(
        t.join("run-tests.sh"),
        "#!/bin/bash\npython3 -m pytest -p no:cacheprovider $TEST_DIR/test_outputs.py -rA\n",
    )
    .unwrap();
    let env = load(&format!("harbor:{}?backend=jail", t.display())).unwrap();
    let task = &env.tasks(None).unwrap()[0];
    assert_eq!(task.prompt.as_deref(), Some(instruction.trim_end()));
    let o = env.rollout(&Policy::Native("oracle".into()), &RolloutOptions::default());
    assert_eq!(o.score(), Some(1.0), "{:?} {:#?}", o.error, o.steps);
    let n = env.rollout(&Policy::Native("nop".into()), &RolloutOptions::default());
    assert_eq!(n.score(), Some(0.0), "{:?}", n.error);
}

/// train() drives a task-mode environment: the in-context learner's model is the terminus
/// agent's, over a directory of Harbor tasks, and every round completes (a model that declares
/// every task complete at once scores 0, so there is nothing to bank, but nothing fails).
#[test]
fn incontext_trains_on_a_task_mode_environment() {
    if !ready() {
        return;
    }
    let env = load(&format!("harbor:{}?backend=jail", tasks_dir())).unwrap();
    let done = FunctionModel::new("done", |_m: &[Message]| {
        Ok(
            serde_json::json!({"analysis": "a", "plan": "p", "commands": [],
            "task_complete": true})
            .to_string(),
        )
    });
    let mut l = learner(
        &serde_json::json!("incontext"),
        LearnerParts {
            model: Some(Arc::new(done)),
            ..LearnerParts::default()
        },
    )
    .unwrap();
    let opts = TrainOptions {
        rounds: 1,
        group_size: 2,
        batch: 2,
        concurrency: 2,
        progress: false,
        ..TrainOptions::default()
    };
    let r = train(&env, l.as_mut(), &opts).unwrap();
    assert_eq!(r.failed_rounds(), 0, "{}", r.render());
    assert_eq!(r.rounds[1].episodes, 4);
    assert_eq!(r.rounds[1].failed_episodes, 0, "{}", r.render());
    assert_eq!(r.rounds[1].train_score, Some(0.0));
}

/// A task whose Dockerfile is `lines`, in `<tmp>/t`, next to a file `<tmp>/secret.txt` that is
/// outside its build context (`<tmp>/t/environment`).
fn task_with_dockerfile(lines: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    std::fs::create_dir_all(t.join("environment")).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "host secret\n").unwrap();
    std::fs::write(t.join("task.toml"), "version = \"1.0\"\n").unwrap();
    std::fs::write(t.join("instruction.md"), "x").unwrap();
    std::fs::write(t.join("environment/Dockerfile"), lines).unwrap();
    (dir, t)
}

/// COPY and ADD read the build context only, as Docker does: `..`, an absolute source and a
/// symlink that leads out are refused, naming the line and the source; inside, a symlink and a
/// `..` that stays in are fine and an absolute source is taken from the context.
#[test]
fn copy_reads_nothing_outside_the_build_context() {
    let escapes = [
        "COPY ../../secret.txt /app/y".to_string(),
        "ADD ../secret.txt /app/y".to_string(),
        "COPY link /app/y".to_string(),
        "COPY dirlink/secret.txt /app/y".to_string(),
    ];
    for line in &escapes {
        let (dir, t) = task_with_dockerfile(&format!("FROM ubuntu:24.04\n{line}\nWORKDIR /app\n"));
        std::os::unix::fs::symlink("../../secret.txt", t.join("environment/link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), t.join("environment/dirlink")).unwrap();
        let e = load(&format!("harbor:{}", t.display()))
            .err()
            .unwrap_or_else(|| panic!("`{line}` was accepted"));
        let msg = e.to_string();
        assert!(
            msg.contains("outside the build context") && msg.contains(line.as_str()),
            "{line}: {msg}"
        );
        assert!(msg.contains("line 2"), "{msg}");
    }
    // An absolute source is the context's, as in Docker: the host's file is not read.
    let (dir, t) = task_with_dockerfile("");
    let abs = dir.path().join("secret.txt");
    std::fs::write(
        t.join("environment/Dockerfile"),
        format!("FROM ubuntu:24.04\nCOPY {} /app/x\n", abs.display()),
    )
    .unwrap();
    let msg = load(&format!("harbor:{}", t.display()))
        .err()
        .expect("the host's absolute path was read")
        .to_string();
    assert!(
        msg.contains("does not exist") && msg.contains("line 2"),
        "{msg}"
    );
    // Inside the context: a symlink, `..` that comes back, and `/` meaning the context.
    let (_dir, t) = task_with_dockerfile(
        "FROM ubuntu:24.04\nCOPY inner.txt /app/a\nCOPY sub/../inner.txt /app/b\nCOPY /inner.txt /app/c\nCOPY in-link /app/d\n",
    );
    std::fs::create_dir(t.join("environment/sub")).unwrap();
    std::fs::write(t.join("environment/inner.txt"), "ok").unwrap();
    std::os::unix::fs::symlink("inner.txt", t.join("environment/in-link")).unwrap();
    let r = load(&format!("harbor:{}?backend=jail", t.display()));
    assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
    // A FIFO in the context would block the copy forever.
    let (_dir, t) = task_with_dockerfile("FROM ubuntu:24.04\nCOPY pipe /app/p\n");
    let made = std::process::Command::new("mkfifo")
        .arg(t.join("environment/pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let msg = load(&format!("harbor:{}", t.display()))
        .err()
        .expect("a FIFO was accepted as a COPY source")
        .to_string();
    assert!(
        msg.contains("not a regular file") && msg.contains("line 2"),
        "{msg}"
    );
    // The task's own files are read as root too: an instruction or tests that lead out are
    // refused.
    for name in ["instruction.md", "tests"] {
        let (dir, t) = task_with_dockerfile("FROM ubuntu:24.04\n");
        let _ = std::fs::remove_file(t.join(name));
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), t.join(name)).unwrap();
        let msg = load(&format!("harbor:{}", t.display()))
            .err()
            .unwrap_or_else(|| panic!("a {name} symlink out of the task was followed"))
            .to_string();
        assert!(msg.contains("outside the task directory"), "{msg}");
    }
}
