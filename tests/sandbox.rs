//! The sandbox contract and every limit of the process, jail and container backends, each
//! proven by a command that would get through if the limit were missing. The container backend
//! runs here when Podman or Docker is ready (with NENYAX_REQUIRE_CONTAINER=1 its absence fails
//! the tests); tests/container.rs has the attacks particular to it.

use std::time::{Duration, Instant};

use nenyax::sandbox::{BackendKind, Exec, Killed, Limits, Sandbox, SandboxConfig};

#[path = "support/container.rs"]
mod container_support;
use container_support::container_ready;

fn backends() -> Vec<BackendKind> {
    let mut b = vec![BackendKind::Process];
    match BackendKind::Jail.ready() {
        Ok(()) => b.push(BackendKind::Jail),
        Err(why) => eprintln!("jail backend not tested here: {why}"),
    }
    if container_ready() {
        b.push(BackendKind::Container);
    }
    b
}

/// The backends whose images are sure to have python3 (the host's): a container's default
/// image is a minimal Debian without it, so its limits are attacked with the shell in
/// tests/container.rs.
fn python_backends() -> Vec<BackendKind> {
    backends()
        .into_iter()
        .filter(|k| *k != BackendKind::Container)
        .collect()
}

fn sandbox(kind: BackendKind, f: impl FnOnce(&mut Limits)) -> Sandbox {
    let mut cfg = SandboxConfig::new(kind);
    f(&mut cfg.limits);
    Sandbox::create(cfg).unwrap()
}

#[test]
fn exec_returns_code_output_and_stdin() {
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        let r = sb
            .exec(&Exec::shell("read x; echo out:$x; echo err >&2; exit 3").stdin("hi\n"))
            .unwrap();
        assert_eq!(r.exit_code, Some(3), "{kind:?}: {r:?}");
        assert_eq!(r.stdout, "out:hi\n");
        assert_eq!(r.stderr, "err\n");
        assert!(r.killed.is_none());
        let r = sb.exec(&Exec::argv(["/bin/echo", "a b"])).unwrap();
        assert_eq!(r.stdout, "a b\n", "{kind:?}");
        let r = sb
            .exec(&Exec::shell("echo $FOO; pwd").env("FOO", "bar").cwd("/tmp"))
            .unwrap();
        let want_cwd = match kind {
            BackendKind::Process => sb.host_path("/tmp").unwrap().display().to_string(),
            _ => "/tmp".to_string(),
        };
        assert_eq!(r.stdout, format!("bar\n{want_cwd}\n"), "{kind:?}");
        sb.destroy().unwrap();
    }
}

#[test]
fn files_put_get_list_and_fork() {
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        sb.put("/app/sub/x.sh", b"#!/bin/sh\necho ran\n", 0o755)
            .unwrap();
        sb.put("notes.txt", b"n", 0o644).unwrap();
        let names: Vec<String> = sb
            .list("/app")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["notes.txt", "sub"]);
        let r = sb.sh("./sub/x.sh && echo made > made.txt").unwrap();
        assert_eq!(r.stdout, "ran\n", "{kind:?}: {r:?}");
        assert_eq!(sb.get("/app/made.txt").unwrap(), b"made\n");
        assert!(sb.host_path("/etc/passwd").is_err());
        assert!(sb.host_path("/app/../etc").is_err());
        let child = sb.fork().unwrap();
        assert_eq!(child.get("made.txt").unwrap(), b"made\n");
        child.put("made.txt", b"changed", 0o644).unwrap();
        assert_eq!(
            sb.get("made.txt").unwrap(),
            b"made\n",
            "a fork shares no files"
        );
        assert_eq!(child.sh("cat made.txt").unwrap().stdout, "changed");
    }
}

#[test]
fn wall_timeout_kills_the_whole_group() {
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        let t0 = Instant::now();
        // A grandchild in the same group that would outlive its parent.
        let r = sb
            .exec(
                &Exec::shell("(sleep 30; touch survived) & echo $! > pid; sleep 30")
                    .timeout(Duration::from_millis(500)),
            )
            .unwrap();
        assert_eq!(r.killed, Some(Killed::Timeout), "{kind:?}: {r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        match kind {
            BackendKind::Process => {
                let pid: i32 = String::from_utf8(sb.get("pid").unwrap())
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                // Dead means gone or a zombie waiting for init to reap it.
                let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| {
                        !s.rsplit(')')
                            .next()
                            .unwrap_or("")
                            .trim_start()
                            .starts_with('Z')
                    })
                    .unwrap_or(false);
                assert!(!alive, "the grandchild {pid} survived the timeout");
            }
            _ => {
                // `-fx`: a container's keeper is a sleep too, but not `sleep 30`.
                let r = sb.sh("pgrep -fx 'sleep 30' || echo none").unwrap();
                assert_eq!(r.stdout, "none\n", "{kind:?}: {r:?}");
            }
        }
    }
}

#[test]
fn a_detached_child_does_not_survive() {
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        // setsid leaves the process group; the child keeps writing a file once it is free.
        let r = sb
            .sh("setsid sh -c 'sleep 1; echo yes > alive.$$; while :; do sleep 0.1; done' >/dev/null 2>&1 < /dev/null & echo started")
            .unwrap();
        assert_eq!(r.stdout, "started\n", "{kind:?}: {r:?}");
        std::thread::sleep(Duration::from_millis(1500));
        let left: Vec<_> = sb
            .list("/app")
            .unwrap()
            .into_iter()
            .filter(|e| e.name.starts_with("alive"))
            .collect();
        assert!(left.is_empty(), "{kind:?}: a detached child kept running");
    }
}

#[test]
fn a_command_ending_spares_another_running_in_the_same_sandbox() {
    // What a terminal agent does: one long command (the terminal) while short ones come and go.
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        std::thread::scope(|s| {
            let long = s.spawn(|| sb.sh("sleep 1.5; echo survived").unwrap());
            std::thread::sleep(Duration::from_millis(300));
            for _ in 0..3 {
                assert!(sb.sh("true").unwrap().ok(), "{kind:?}");
            }
            let r = long.join().unwrap();
            assert_eq!(r.stdout, "survived\n", "{kind:?}: {r:?}");
        });
        // Destroying the sandbox still takes what its commands left running.
        sb.sh("setsid sh -c 'sleep 1; echo yes > /tmp/late' >/dev/null 2>&1 < /dev/null &")
            .unwrap();
        drop(sb);
    }
}

#[test]
fn cpu_seconds_are_limited() {
    for kind in backends() {
        let sb = sandbox(kind, |l| l.cpu_s = Some(1));
        let t0 = Instant::now();
        let r = sb
            .exec(&Exec::shell("while :; do :; done").timeout(Duration::from_secs(20)))
            .unwrap();
        assert_eq!(r.killed, Some(Killed::CpuLimit), "{kind:?}: {r:?}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}

#[test]
fn address_space_is_limited() {
    for kind in python_backends() {
        let sb = sandbox(kind, |l| l.memory_bytes = Some(256 << 20));
        let r = sb
            .sh("python3 -c 'b = bytearray(1 << 30); print(\"allocated\")'")
            .unwrap();
        assert!(
            !r.ok() && !r.stdout.contains("allocated"),
            "{kind:?}: {r:?}"
        );
        assert!(r.stderr.contains("MemoryError"), "{kind:?}: {r:?}");
        let r = sb
            .sh("python3 -c 'b = bytearray(16 << 20); print(\"allocated\")'")
            .unwrap();
        assert_eq!(
            r.stdout, "allocated\n",
            "{kind:?}: a small allocation must work: {r:?}"
        );
    }
}

#[test]
fn open_files_are_limited() {
    for kind in python_backends() {
        let sb = sandbox(kind, |l| l.open_files = Some(32));
        let r = sb
            .sh("python3 -c '\nfs = []\ntry:\n    while len(fs) < 1000: fs.append(open(\"/dev/null\"))\nexcept OSError as e: print(len(fs), e.errno)'")
            .unwrap();
        let n: usize = r.stdout.split_whitespace().next().unwrap().parse().unwrap();
        assert!(n < 32, "{kind:?}: opened {n}: {r:?}");
        assert!(r.stdout.trim().ends_with(" 24"), "EMFILE expected: {r:?}");
    }
}

#[test]
fn a_fork_bomb_is_contained() {
    if !nix::unistd::geteuid().is_root() {
        // RLIMIT_NPROC counts the caller's own processes; as a normal user the test would
        // count everything else the user runs.
        eprintln!("not root: the process-count limit is tested as root only");
        return;
    }
    for kind in python_backends() {
        let sb = sandbox(kind, |l| l.processes = Some(20));
        let t0 = Instant::now();
        let r = sb
            .exec(
                &Exec::argv([
                    "python3",
                    "-c",
                    "import os, time\nn = 0\nfor i in range(200):\n    try:\n        if os.fork() == 0:\n            time.sleep(3); os._exit(0)\n        n += 1\n    except OSError: pass\nprint(n)",
                ])
                .timeout(Duration::from_secs(20)),
            )
            .unwrap();
        let running: usize = r.stdout.trim().parse().unwrap_or(999);
        assert!(running < 20, "{kind:?}: {running} children ran: {r:?}");
        // The classic bomb: contained by the process limit, ended by the wall timeout.
        let r = sb
            .exec(&Exec::shell(":(){ :|:& };:; sleep 30").timeout(Duration::from_secs(2)))
            .unwrap();
        assert_eq!(r.killed, Some(Killed::Timeout), "{kind:?}");
        assert!(t0.elapsed() < Duration::from_secs(15));
    }
}

#[test]
fn file_size_is_limited() {
    for kind in backends() {
        let sb = sandbox(kind, |l| l.file_size_bytes = Some(1 << 20));
        let r = sb.sh("head -c 5000000 /dev/zero > big; echo done").unwrap();
        let size = sb.get("/app/big").unwrap().len();
        assert!(size <= 1 << 20, "{kind:?}: wrote {size} bytes: {r:?}");
        let r = sb
            .exec(&Exec::argv(["head", "-c", "5000000", "/dev/zero"]).cwd("/app"))
            .unwrap();
        assert!(
            r.dropped_bytes > 0 || r.stdout.len() == 1 << 20,
            "pipes are not files: {r:?}"
        );
    }
}

#[test]
fn captured_output_is_capped() {
    for kind in backends() {
        let sb = sandbox(kind, |l| l.output_bytes = 1000);
        let r = sb
            .exec(&Exec::argv(["yes"]).timeout(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(r.stdout.len(), 1000, "{kind:?}");
        assert!(r.dropped_bytes > 0);
        assert_eq!(r.killed, Some(Killed::Timeout));
    }
}

#[test]
fn the_environment_is_scrubbed() {
    std::env::set_var("NENYAX_TEST_SECRET", "leak");
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        let r = sb.sh("env").unwrap();
        assert!(!r.stdout.contains("NENYAX_TEST_SECRET"), "{kind:?}");
        assert!(r.stdout.contains("PATH=/usr/local/sbin"), "{kind:?}");
    }
}

#[test]
fn commands_run_unprivileged_when_nenyax_is_root() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    for kind in backends() {
        let sb = Sandbox::new(kind).unwrap();
        assert_eq!(sb.sh("id -u").unwrap().stdout, "65534\n", "{kind:?}");
    }
}

#[test]
fn sandbox_check_passes_on_every_ready_backend() {
    for kind in backends() {
        let report = nenyax::sandbox::sandbox_check(kind);
        assert!(report.passed(), "{}", report.render());
        let n = report.promises.len();
        assert!(n >= 8, "{kind:?}: only {n} promises checked");
    }
}

#[test]
fn warm_pool_hands_out_fresh_identical_sandboxes_and_refills() {
    for kind in backends() {
        let setup = [Exec::shell("echo prepared > state.txt")];
        let pool = nenyax::sandbox::WarmPool::new(SandboxConfig::new(kind), &setup, 2).unwrap();
        assert_eq!(pool.ready(), 2);
        let a = pool.acquire().unwrap();
        let b = pool.acquire().unwrap();
        let c = pool.acquire().unwrap(); // the pool may be empty: made on demand
        for sb in [&a, &b, &c] {
            assert_eq!(sb.get("state.txt").unwrap(), b"prepared\n", "{kind:?}");
        }
        a.sh("echo dirty > state.txt").unwrap();
        assert_eq!(
            b.get("state.txt").unwrap(),
            b"prepared\n",
            "sandboxes share nothing"
        );
        let t0 = Instant::now();
        while pool.ready() < 2 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pool.ready(), 2, "the pool refills in the background");
    }
}

#[test]
fn select_picks_the_lightest_safe_enough_backend() {
    use nenyax::sandbox::{select, Level};
    let s = select(Level::None).unwrap();
    assert_eq!(s.backend, BackendKind::Process);
    if BackendKind::Jail.ready().is_ok() {
        let s = select(Level::Jail).unwrap();
        assert_eq!(s.backend, BackendKind::Jail);
        assert_eq!(s.skipped[0].0, "process");
    }
    if container_ready() {
        let s = select(Level::Container).unwrap();
        assert_eq!(s.backend, BackendKind::Container);
        let passed: Vec<&str> = s.skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(passed, ["process", "jail"], "{s:?}");
        assert!(
            s.skipped[0]
                .1
                .contains("process isolation is below the container"),
            "{s:?}"
        );
    }
    let e = select(Level::Microvm).unwrap_err().to_string();
    assert!(
        e.contains("microvm") && e.contains("nenyax sandboxes"),
        "{e}"
    );
}

/// A jail for the attacks below, as the unprivileged sandbox user or as root; `None` (and a
/// note) where this machine cannot make jails.
fn jail(root: bool) -> Option<Sandbox> {
    if let Err(why) = BackendKind::Jail.ready() {
        eprintln!("jail backend not tested here: {why}");
        return None;
    }
    let mut cfg = SandboxConfig::new(BackendKind::Jail);
    cfg.root = root;
    Some(Sandbox::create(cfg).unwrap())
}

/// Root in a jail stays root of the jail only: remounting a host directory read-write (in the
/// jail's mount namespace or a new one), escaping the root with the chroot trick, or writing a
/// kernel setting must not change anything on the host.
#[test]
fn root_in_a_jail_cannot_write_the_host() {
    let Some(sb) = jail(true) else { return };
    assert_eq!(
        sb.sh("id -u").unwrap().stdout,
        "0\n",
        "root: true keeps uid 0"
    );
    let marker = format!("/usr/nenyax-marker-{}", sb.id());
    let escape = format!(
        "python3 -c \"import os\nos.mkdir('/tmp/x')\nos.chroot('/tmp/x')\nfor _ in range(64): os.chdir('..')\nos.chroot('.')\nopen('{marker}', 'w')\""
    );
    let attacks = [
        format!("mount -o remount,rw,bind /usr && touch {marker}"),
        format!("unshare -m sh -c 'mount -o remount,rw,bind /usr && touch {marker}'"),
        format!("unshare -Ur -m sh -c 'mount -o remount,rw,bind /usr && touch {marker}'"),
        escape,
    ];
    for attack in &attacks {
        let r = sb.sh(attack).unwrap();
        let landed = std::path::Path::new(&marker).exists();
        let _ = std::fs::remove_file(&marker);
        assert!(!landed, "`{attack}` wrote {marker} on the host: {r:?}");
    }
    // Writing a sysctl back with its own value changes nothing, but must be refused.
    let r = sb
        .sh("v=$(cat /proc/sys/vm/overcommit_ratio) && echo $v > /proc/sys/vm/overcommit_ratio && echo wrote")
        .unwrap();
    assert!(
        !r.stdout.contains("wrote"),
        "root wrote a kernel setting: {r:?}"
    );
    // The host's setuid programs raise nobody's privileges (as nobody the same holds).
    for sb in [&sb, &jail(false).unwrap()] {
        let r = sb.sh("grep NoNewPrivs /proc/self/status").unwrap();
        assert_eq!(r.stdout, "NoNewPrivs:\t1\n", "{r:?}");
    }
    // Root of the jail's user namespace is no exception to the process-count limit.
    let mut cfg = SandboxConfig::new(BackendKind::Jail);
    cfg.root = true;
    cfg.limits.processes = Some(20);
    let r = Sandbox::create(cfg)
        .unwrap()
        .exec(
            &Exec::argv([
                "python3",
                "-c",
                "import os, time\nn = 0\nfor i in range(60):\n    try:\n        if os.fork() == 0:\n            time.sleep(2); os._exit(0)\n        n += 1\n    except OSError: pass\nprint(n)",
            ])
            .timeout(Duration::from_secs(20)),
        )
        .unwrap();
    let n: usize = r.stdout.trim().parse().unwrap_or(999);
    assert!(n < 20, "root ran {n} processes under a limit of 20: {r:?}");
    // What root is for: owning and changing the sandbox's own files.
    let r = sb
        .sh("touch /app/f && chmod 600 /app/f && chown root:root /app/f && echo ok")
        .unwrap();
    assert_eq!(r.stdout, "ok\n", "{r:?}");
}

/// `/dev` in a jail is its own: a minimal set of devices, and a `/dev/shm` that is private,
/// capped and gone with the command.
#[test]
fn a_jail_has_a_private_dev_and_shm() {
    for root in [false, true] {
        let Some(sb) = jail(root) else { return };
        let name = format!("nenyax-shm-{}", sb.id());
        let r = sb
            .sh(&format!(
                "echo inside > /dev/shm/{name} && cat /dev/shm/{name}"
            ))
            .unwrap();
        assert_eq!(r.stdout, "inside\n", "root={root}: /dev/shm works: {r:?}");
        assert!(
            !std::path::Path::new("/dev/shm").join(&name).exists(),
            "root={root}: a file written to the jail's /dev/shm is on the host"
        );
        let r = sb.sh("ls -A /dev | sort | tr '\\n' ' '").unwrap();
        let allowed = [
            "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
            "tty", "urandom", "zero",
        ];
        let extra: Vec<&str> = r
            .stdout
            .split_whitespace()
            .filter(|d| !allowed.contains(d))
            .collect();
        assert!(
            extra.is_empty(),
            "root={root}: host devices in the jail: {extra:?}"
        );
        let r = sb
            .sh("head -c 3 /dev/zero | od -An -tx1 | tr -d ' \\n'; head -c 5 /dev/urandom | wc -c; echo x > /dev/null && echo null; echo x > /dev/full 2>/dev/null || echo full; readlink /dev/stderr; ls /dev/fd/ | grep -qx 1 && echo fd")
            .unwrap();
        assert_eq!(
            r.stdout, "0000005\nnull\nfull\n/proc/self/fd/2\nfd\n",
            "root={root}: {r:?}"
        );
        // 100 MiB into a tmpfs capped below that: the write stops at the cap.
        let r = sb
            .sh("head -c 104857600 /dev/zero > /dev/shm/big 2>/dev/null; stat -c %s /dev/shm/big")
            .unwrap();
        let size: u64 = r.stdout.trim().parse().unwrap_or(u64::MAX);
        assert!(
            size <= nenyax::sandbox::JAIL_SHM_BYTES,
            "root={root}: /dev/shm took {size} bytes: {r:?}"
        );
        let r = sb.sh("touch /dev/new 2>/dev/null || echo refused").unwrap();
        assert_eq!(
            r.stdout, "refused\n",
            "root={root}: /dev itself is read-only"
        );
    }
}

/// The jail's `/proc` shows its own processes only, and its PID 1 gives nothing of the host's
/// nenyax away: not its command line, environment or memory map.
#[test]
fn a_jail_proc_shows_nothing_of_the_host() {
    let host_cmdline = std::fs::read("/proc/self/cmdline").unwrap();
    let argv0 = std::env::args().next().unwrap();
    for root in [false, true] {
        let Some(sb) = jail(root) else { return };
        let r = sb.sh("cat /proc/1/cmdline | tr '\\0' ' '").unwrap();
        assert!(
            !r.stdout.contains(&argv0)
                && r.stdout.as_bytes() != host_cmdline.as_slice()
                && !r.stdout.trim().is_empty(),
            "root={root}: the jail's PID 1 shows the host's command line: {:?}",
            r.stdout
        );
        let r = sb
            .sh("cat /proc/1/environ 2>/dev/null | tr -d '\\0' | wc -c; cat /proc/1/maps >/dev/null 2>&1 && echo maps; ls /proc | grep -c '^[0-9]'")
            .unwrap();
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(
            lines[0], "0",
            "root={root}: PID 1's environment is readable: {r:?}"
        );
        assert_eq!(
            lines[1..].len(),
            1,
            "root={root}: PID 1's memory map is readable: {r:?}"
        );
        let n: usize = lines[1].parse().unwrap();
        assert!(n <= 5, "root={root}: {n} processes visible: {r:?}");
    }
}

/// Uploading a directory copies regular files, directories and symlinks; a FIFO in it would
/// block the copy forever, so it is refused by name.
#[test]
fn put_dir_refuses_a_fifo_instead_of_hanging() {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.txt"), "a").unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(src.path().join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let from = src.path().to_path_buf();
    std::thread::spawn(move || {
        let sb = Sandbox::new(BackendKind::Process).unwrap();
        let _ = tx.send(sb.put_dir(&from, "/app").map_err(|e| e.to_string()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("put_dir hung on a FIFO");
    let e = r.expect_err("a FIFO was copied");
    assert!(
        e.contains("pipe") && e.contains("not a regular file"),
        "{e}"
    );
}

/// The first two commands of a fresh jail lay out its root at the same time; neither may fail
/// on the other's half-made layout (they did: "could not symlink: File exists").
#[test]
fn first_commands_of_a_jail_may_run_at_once() {
    if BackendKind::Jail.ready().is_err() {
        eprintln!("SKIPPED: the jail cannot run here");
        return;
    }
    for _ in 0..8 {
        let sb = Sandbox::new(BackendKind::Jail).unwrap();
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..3).map(|_| s.spawn(|| sb.sh("true"))).collect();
            for r in runs {
                let r = r.join().unwrap().unwrap();
                assert!(r.ok(), "{r:?}");
            }
        });
    }
}
