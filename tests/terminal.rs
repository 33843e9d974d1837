//! The terminus agent's real terminal (tmux in the sandbox): keystrokes, waits, screens and
//! incremental output on the process, jail and container backends, and a held-in Harbor task
//! that needs an interactive program (tests/harbor_tasks_tty/vault) solved by a scripted chat
//! model in `terminal=tmux` mode and not in `terminal=bash` mode.
//!
//! The jail needs root; the container backend needs Podman or Docker and the base image
//! `localhost/nenyax-base:bookworm` (`nenyax images bootstrap`). Without them these tests say
//! what is missing and skip, except that with NENYAX_REQUIRE_CONTAINER=1 a missing container
//! engine fails them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nenyax::drivers::harbor::terminus::Command;
use nenyax::drivers::harbor::tmux::Tmux;
use nenyax::sandbox::{BackendKind, Sandbox, SandboxConfig};
use nenyax::{check_uri, load, CheckOptions, FunctionModel, Message, Policy, RolloutOptions, Tier};

fn vault_dir() -> String {
    format!(
        "{}/tests/harbor_tasks_tty/vault",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn jail_ready() -> bool {
    match BackendKind::Jail.ready() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED: terminal tests on the jail need the jail backend: {why}");
            false
        }
    }
}

const BASE_IMAGE: &str = "localhost/nenyax-base:bookworm";

/// Whether a container sandbox of the base image can be made here; with
/// NENYAX_REQUIRE_CONTAINER set, a missing engine, image or backend fails the test instead of
/// skipping it.
fn container_ready() -> bool {
    let why = match BackendKind::Container.ready() {
        Err(why) => why,
        Ok(()) => match nenyax::sandbox::engine::Engine::detect() {
            Ok(e) if e.image_exists(BASE_IMAGE) => {
                let mut cfg = SandboxConfig::new(BackendKind::Container);
                cfg.image = Some(BASE_IMAGE.into());
                match Sandbox::create(cfg) {
                    Ok(sb) => {
                        let _ = sb.destroy();
                        return true;
                    }
                    Err(e) => e.to_string(),
                }
            }
            Ok(_) => format!("the base image {BASE_IMAGE} is missing (nenyax images bootstrap)"),
            Err(e) => e.to_string(),
        },
    };
    assert!(
        std::env::var_os("NENYAX_REQUIRE_CONTAINER").is_none(),
        "NENYAX_REQUIRE_CONTAINER is set but the container backend cannot run: {why}"
    );
    eprintln!("SKIPPED: terminal tests on the container backend: {why}");
    false
}

fn sandbox(backend: BackendKind) -> Sandbox {
    let mut cfg = SandboxConfig::new(backend);
    cfg.workdir = "/app".into();
    if backend == BackendKind::Container {
        cfg.image = Some(BASE_IMAGE.into());
    }
    Sandbox::create(cfg).expect("sandbox")
}

fn cmd(keys: &str, duration: f64) -> Command {
    Command {
        keystrokes: keys.into(),
        duration,
    }
}

/// Processes on this host whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                out.push(format!("{}: {c}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

/// One session through everything the agent relies on: the prompt on the first screen, output
/// new since the last look, state kept between batches, an early return when a command is
/// done, a program reading the terminal, C-c, a full-screen program, output truncation, and
/// nothing left running once it is closed.
fn drive_a_session(backend: BackendKind) {
    let sb = sandbox(backend);
    let marker = format!("nx-terminal-test-{}", std::process::id());
    std::thread::scope(|s| {
        let mut t = Tmux::open(s, &sb, Duration::from_secs(120)).expect("open");
        let first = t.first_look().unwrap();
        assert!(
            first.text.starts_with("Current Terminal Screen:\n"),
            "{first:?}"
        );
        assert!(
            first.screen.contains('$') || first.screen.contains('#'),
            "{first:?}"
        );

        let look = t
            .run_batch(
                &[
                    cmd("cd /tmp && X=41\n", 0.5),
                    cmd("echo $((X+1)) $PWD\n", 0.5),
                ],
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(look.text.starts_with("New Terminal Output:\n"), "{look:?}");
        assert!(look.text.contains("42 /tmp"), "{look:?}");
        // Only what is new: the first batch's command is not shown again.
        let look = t
            .run_batch(&[cmd("echo second\n", 0.5)], Duration::from_secs(30))
            .unwrap();
        assert!(
            look.text.contains("second") && !look.text.contains("X=41"),
            "{look:?}"
        );

        // The shell is back at once: a 10 s duration does not take 10 s.
        let t0 = Instant::now();
        t.run_batch(&[cmd("true\n", 10.0)], Duration::from_secs(30))
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

        // A program that reads the terminal gets what is typed, across batches.
        let look = t
            .run_batch(
                &[cmd("read -r -p 'name? ' n; echo \"hello-$n\"\n", 0.5)],
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(look.text.contains("name? "), "{look:?}");
        let look = t
            .run_batch(&[cmd("bob\n", 0.5)], Duration::from_secs(30))
            .unwrap();
        assert!(look.text.contains("hello-bob"), "{look:?}");

        // A command still running after its duration is interrupted with C-c.
        let t0 = Instant::now();
        let look = t
            .run_batch(
                &[
                    cmd("sleep 300\n", 0.3),
                    cmd("C-c", 0.3),
                    cmd("echo after-interrupt\n", 0.3),
                ],
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10));
        assert!(
            look.text.contains("^C") && look.text.contains("after-interrupt"),
            "{look:?}"
        );

        // A full-screen program: the model is shown the screen.
        // (What less or vim do, without needing either in the image: the alternate screen.)
        let app =
            "printf '\\e[?1049h\\e[HFULL SCREEN APP\\n'; read -r -s -n1; printf '\\e[?1049l'\n";
        let look = t
            .run_batch(&[cmd(app, 1.0)], Duration::from_secs(30))
            .unwrap();
        assert!(
            look.text.starts_with("Current Terminal Screen:\n"),
            "{look:?}"
        );
        assert_eq!(look.screen, "FULL SCREEN APP", "{look:?}");
        let look = t
            .run_batch(&[cmd("q", 0.5)], Duration::from_secs(30))
            .unwrap();
        assert!(
            !look.screen.lines().any(|l| l == "FULL SCREEN APP"),
            "{look:?}"
        );
        // Back in the normal screen, the new output starts where the program was started.
        assert!(look.text.starts_with("New Terminal Output:\n"), "{look:?}");
        assert!(
            look.text.contains("1049h") && !look.text.contains("after-interrupt"),
            "{look:?}"
        );

        // A long output keeps both ends.
        let look = t
            .run_batch(&[cmd("seq 1 20000\n", 3.0)], Duration::from_secs(30))
            .unwrap();
        assert!(
            look.text.contains("output limited to 10000 bytes"),
            "{}",
            look.text.len()
        );
        assert!(look.text.contains("\n20000\n"), "the end is kept");
        assert!(look.text.len() < 10_500, "{}", look.text.len());

        // A program the agent left running ends with the session.
        let bg = format!("bash -c 'sleep 301; true' {marker} &\n");
        t.run_batch(&[cmd(&bg, 0.2)], Duration::from_secs(30))
            .unwrap();
        assert!(
            !processes_naming(&marker).is_empty(),
            "the marker finds the program"
        );
        t.close().unwrap();
    });
    assert_gone(&marker, "the session closed");
    // The session was logged.
    let log = sb.get("/logs/agent/terminal.log").unwrap();
    assert!(String::from_utf8_lossy(&log).contains("hello-bob"));
    let text = sb.get("/logs/agent/terminal.txt").unwrap();
    assert!(String::from_utf8_lossy(&text).contains("after-interrupt"));
    sb.destroy().unwrap();
    assert_gone(&marker, "the sandbox was destroyed");
}

/// Nothing naming `marker` runs any more (killed processes may take a moment to be reaped).
fn assert_gone(marker: &str, after: &str) {
    let t0 = Instant::now();
    loop {
        let left = processes_naming(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "still running after {after}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_session_on_the_process_backend() {
    drive_a_session(BackendKind::Process);
}

#[test]
fn a_session_in_a_jail() {
    if jail_ready() {
        drive_a_session(BackendKind::Jail);
    }
}

#[test]
fn a_session_in_a_container() {
    if container_ready() {
        drive_a_session(BackendKind::Container);
    }
}

/// In a jail a daemonized tmux server dies with the exec that started it (each exec is its
/// own PID namespace): the reason the session is hosted by one long exec.
#[test]
fn a_daemonized_tmux_does_not_outlive_a_jail_exec() {
    if !jail_ready() {
        return;
    }
    let sb = sandbox(BackendKind::Jail);
    sb.put("/tmp/t/.keep", b"", 0o644).unwrap();
    let r = sb
        .sh("SHELL=/bin/bash tmux -S /tmp/t/s -f /dev/null new-session -d -s a && echo started")
        .unwrap();
    assert!(r.stdout.contains("started"), "{r:?}");
    let r = sb.sh("tmux -S /tmp/t/s has-session -t a").unwrap();
    assert!(!r.ok(), "the server survived its exec: {r:?}");
}

/// A model that reads the last screen it was shown and answers the vault's questions; after
/// `give_up` turns without the vault asking anything it declares the task done.
fn vault_model(give_up: usize) -> (Policy, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let model = FunctionModel::new("vault-typist", move |m: &[Message]| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        let last = m.last().and_then(|m| m.text()).unwrap_or_default();
        let reply = |keys: &str, done: bool| {
            serde_json::json!({
                "analysis": "reading the screen", "plan": "answer the vault",
                "commands": [{"keystrokes": keys, "duration": 1.0}],
                "task_complete": done,
            })
            .to_string()
        };
        // Only the part of the screen after the last prompt line matters.
        let tail = last.rsplit("$ ").next().unwrap_or(&last).to_string();
        let challenge = regex_sum(&last);
        Ok(if last.contains("Are you sure") {
            reply("", true)
        } else if last.contains("The vault is open.") {
            reply("cat /app/vault.txt\n", true)
        } else if tail.contains("Passphrase:") {
            reply("swordfish\n", false)
        } else if let Some(sum) = challenge.filter(|_| tail.contains("Challenge:")) {
            reply(&format!("{sum}\n"), false)
        } else if tail.contains("Operator name:") {
            reply("ada\n", false)
        } else if n + 1 >= give_up {
            reply("", true)
        } else {
            reply("bash /app/vault.sh\n", false)
        })
    });
    (Policy::chat(model), calls)
}

/// The answer to the last `what is A + B?` on the screen.
fn regex_sum(screen: &str) -> Option<u32> {
    let at = screen.rfind("what is ")?;
    let rest = &screen[at + "what is ".len()..];
    let (a, rest) = rest.split_once(" + ")?;
    let b = rest.split('?').next()?;
    Some(a.trim().parse::<u32>().ok()? + b.trim().parse::<u32>().ok()?)
}

fn vault_rollout(uri: &str, give_up: usize) -> nenyax::Trajectory {
    let env = load(uri).unwrap();
    let (policy, _) = vault_model(give_up);
    env.rollout(&policy, &RolloutOptions::default())
}

fn solves_the_vault_in_tmux_mode(uri: &str) {
    let t = vault_rollout(uri, 12);
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(t.metadata["terminal"], "tmux", "{:?}", t.metadata);
    assert_eq!(t.score(), Some(1.0), "{:#?}", t.steps);
    // The keystrokes and the screens are in the trajectory.
    let typed: Vec<String> = t
        .steps
        .iter()
        .filter_map(|s| s.action["commands"].as_array())
        .flatten()
        .filter_map(|c| c["keystrokes"].as_str().map(String::from))
        .collect();
    assert!(typed.contains(&"swordfish\n".to_string()), "{typed:?}");
    let screens: Vec<&str> = t
        .steps
        .iter()
        .filter_map(|s| s.info.get("screen").and_then(|v| v.as_str()))
        .collect();
    assert!(
        screens.iter().any(|s| s.contains("Challenge: what is")),
        "{screens:#?}"
    );
    assert!(
        screens.iter().any(|s| s.contains("The vault is open.")),
        "{screens:#?}"
    );
    // The passphrase is not echoed, so no screen shows it.
    assert!(
        screens.iter().all(|s| !s.contains("Passphrase: swordfish")),
        "{screens:#?}"
    );
}

#[test]
fn a_scripted_model_opens_the_vault_in_a_jail_terminal() {
    if jail_ready() {
        solves_the_vault_in_tmux_mode(&format!("harbor:{}", vault_dir()));
    }
}

#[test]
fn bash_mode_cannot_open_the_vault() {
    if !jail_ready() {
        return;
    }
    let t = vault_rollout(
        &format!("harbor:{}?terminal=bash&max_turns=6", vault_dir()),
        3,
    );
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(t.metadata["terminal"], "bash");
    assert_eq!(t.score(), Some(0.0), "{:#?}", t.steps);
    let outs: Vec<String> = t
        .steps
        .iter()
        .filter_map(|s| s.observation.text.clone())
        .collect();
    assert!(
        outs.iter()
            .any(|o| o.contains("stdin and stdout must be a terminal")),
        "{outs:#?}"
    );
}

#[test]
fn the_vault_task_is_audited_oracle_one_nop_zero() {
    if !jail_ready() {
        return;
    }
    let report = check_uri(
        &format!("harbor:{}", vault_dir()),
        &CheckOptions {
            samples: 1,
            ..CheckOptions::default()
        },
    );
    assert_eq!(report.tier, Tier::Audited, "{}", report.render());
}

#[test]
fn an_unknown_terminal_mode_is_refused_with_the_choices() {
    let e = load(&format!("harbor:{}?terminal=screen", vault_dir()))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("terminal") && e.contains("screen") && e.contains("`bash`"),
        "{e}"
    );
}

/// The agent ending its own shell (or removing the socket) ends its turns, not the run: the
/// next look says the session is gone, and closing does not wait for the hosting exec's
/// deadline.
fn a_session_the_agent_ends(backend: BackendKind) {
    let sb = sandbox(backend);
    for ender in ["exit\n", "rm -rf \"$TMPDIR/.nenyax\"\n"] {
        std::thread::scope(|s| {
            let mut t = Tmux::open(s, &sb, Duration::from_secs(300)).expect("open");
            t.first_look().unwrap();
            let _ = t.run_batch(&[cmd(ender, 0.5)], Duration::from_secs(30));
            let e = t
                .run_batch(&[cmd("echo still-here\n", 0.2)], Duration::from_secs(30))
                .unwrap_err();
            assert!(e.to_string().contains("session is gone"), "{ender:?}: {e}");
            let t0 = Instant::now();
            let _ = t.close();
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{ender:?}: {:?}",
                t0.elapsed()
            );
        });
    }
    sb.destroy().unwrap();
}

#[test]
fn the_agent_ending_its_shell_ends_the_session_on_the_process_backend() {
    a_session_the_agent_ends(BackendKind::Process);
}

#[test]
fn the_agent_ending_its_shell_ends_the_session_in_a_jail() {
    if jail_ready() {
        a_session_the_agent_ends(BackendKind::Jail);
    }
}
