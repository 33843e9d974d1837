//! The container backend's own promises and failures, on a real engine (Podman here): what
//! tests/sandbox.rs checks of every backend is not repeated. Without an engine these tests say
//! so loudly and pass, unless NENYAX_REQUIRE_CONTAINER=1 (CI), where they fail.
//!
//! Some cases need a process of their own (a different NENYAX_CONTAINER_ENGINE, an owner that
//! is SIGKILLed): they re-run this test binary on an `#[ignore]`d helper test with
//! NENYAX_TEST_HELPER set, which prints what the parent checks.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nenyax::sandbox::{BackendKind, Exec, Killed, Sandbox, SandboxConfig};

#[path = "support/container.rs"]
mod container_support;
use container_support::container_ready;

fn config() -> SandboxConfig {
    SandboxConfig::new(BackendKind::Container)
}

/// The engine binary the backend uses here (`podman` unless NENYAX_CONTAINER_ENGINE says).
fn engine() -> String {
    match std::env::var("NENYAX_CONTAINER_ENGINE").as_deref() {
        Ok("docker") => "docker".into(),
        Ok(p) if !p.is_empty() && p != "podman" => p.into(),
        _ => "podman".into(),
    }
}

/// Whether a container or image of this name exists in the engine.
fn exists(what: &str, name: &str) -> bool {
    Command::new(engine())
        .args([what, "inspect", "--format", "{{.Id}}", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Host processes that carry a container's marker.
fn processes_of(name: &str) -> usize {
    let needle = format!("NENYAX_CONTAINER={name}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .map(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
        })
        .count()
}

/// Wait up to 10 s for `cond`.
fn soon(cond: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// Run this test binary's helper `name` with `env`; its stdout.
fn helper(name: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("NENYAX_TEST_HELPER", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn in_helper() -> bool {
    std::env::var("NENYAX_TEST_HELPER").as_deref() == Ok("1")
}

#[test]
#[ignore = "run by an_engine_that_is_not_installed_is_a_clear_error"]
fn helper_create_with_the_engine_from_the_environment() {
    if !in_helper() {
        return;
    }
    match Sandbox::new(BackendKind::Container) {
        Ok(_) => println!("RESULT created"),
        Err(e) => println!("RESULT {}: {e}", e.kind()),
    }
    let ready = BackendKind::Container.ready();
    println!("READY {}", ready.err().unwrap_or_else(|| "ok".into()));
}

/// NENYAX_CONTAINER_ENGINE naming a binary that is not there: creating a container sandbox
/// fails with a sandbox error that names the binary and how to set an engine up.
#[test]
fn an_engine_that_is_not_installed_is_a_clear_error() {
    let out = helper(
        "helper_create_with_the_engine_from_the_environment",
        &[("NENYAX_CONTAINER_ENGINE", "/nonexistent/podman")],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The test harness prints `test NAME ... ` before the helper's own line.
    let line = text
        .lines()
        .find_map(|l| l.find("RESULT ").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("the helper said nothing: {text}"));
    assert!(
        !line.contains("sandbox: sandbox:") && line.matches("sandbox:").count() == 1,
        "{line}"
    );
    assert!(line.contains("SandboxError"), "{line}");
    assert!(
        line.contains("`/nonexistent/podman` is not installed"),
        "{line}"
    );
    assert!(line.contains("nenyax setup container"), "{line}");
    let ready = text.lines().find(|l| l.starts_with("READY ")).unwrap();
    assert!(!ready.contains("sandbox:"), "{ready}");
    assert!(ready.contains("is not installed"), "{ready}");
}

/// An image that is not present is not pulled: the error names it and says how to map or
/// bootstrap one.
#[test]
fn a_missing_image_says_how_to_map_or_bootstrap() {
    if !container_ready() {
        return;
    }
    let mut cfg = config();
    cfg.image = Some("localhost/nenyax-test-no-such-image:1".into());
    let e = Sandbox::create(cfg).unwrap_err().to_string();
    assert!(e.contains("localhost/nenyax-test-no-such-image:1"), "{e}");
    assert!(e.contains("nenyax images bootstrap"), "{e}");
    assert!(e.contains("[images]"), "{e}");
    assert!(!e.contains("Some("), "{e}");
    let mut cfg = config();
    cfg.image = Some("--privileged".into());
    let e = Sandbox::create(cfg).unwrap_err().to_string();
    assert!(e.contains("is not an image name"), "{e}");
}

/// A container killed from outside while a command runs: that command is an error naming the
/// container, so is the next one, and nothing of it stays running or stays in the engine.
#[test]
fn a_container_killed_mid_exec_fails_the_command_and_leaves_nothing() {
    if !container_ready() {
        return;
    }
    let sb = Sandbox::new(BackendKind::Container).unwrap();
    let name = sb.container_name().unwrap().to_string();
    let killer = {
        let name = name.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            Command::new(engine())
                .args(["kill", &name])
                .output()
                .unwrap()
        })
    };
    let t0 = Instant::now();
    let r = sb.exec(&Exec::shell("sleep 30; echo survived").timeout(Duration::from_secs(25)));
    assert!(killer.join().unwrap().status.success());
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the exec waited out its sleep"
    );
    let e = r
        .expect_err("a killed container's command must fail")
        .to_string();
    assert!(e.contains(&name) && e.contains("no longer running"), "{e}");
    let e = sb.sh("true").unwrap_err().to_string();
    assert!(e.contains("no longer running"), "{e}");
    assert!(soon(
        || !exists("container", &name) && processes_of(&name) == 0
    ));
    sb.destroy().unwrap();
}

/// Destroy kills at once (no process of the container is left when it returns) and the
/// container is removed right after.
#[test]
fn destroy_kills_everything_and_removes_the_container() {
    if !container_ready() {
        return;
    }
    let sb = Sandbox::new(BackendKind::Container).unwrap();
    let name = sb.container_name().unwrap().to_string();
    sb.sh("sleep 100 >/dev/null 2>&1 &").unwrap();
    assert!(processes_of(&name) >= 2, "init and its keeper run");
    sb.destroy().unwrap();
    assert_eq!(
        processes_of(&name),
        0,
        "destroy returned with processes left"
    );
    assert!(
        soon(|| !exists("container", &name)),
        "{name} was not removed"
    );
}

#[test]
#[ignore = "run by a_crashed_owners_containers_and_images_are_swept"]
fn helper_create_and_wait_to_be_killed() {
    if !in_helper() {
        return;
    }
    let sb = Sandbox::new(BackendKind::Container).unwrap();
    sb.sh("echo x > /app/x").unwrap();
    let fork = sb.fork().unwrap();
    let image = fork.sh("cat /proc/1/environ >/dev/null; echo").unwrap();
    assert!(image.ok());
    println!(
        "NAMES {} {}",
        sb.container_name().unwrap(),
        fork.container_name().unwrap()
    );
    std::thread::sleep(Duration::from_secs(120));
}

/// A run that dies without cleaning up (SIGKILL) leaves labelled containers and a fork image;
/// the sweep removes them because their owner is dead, and leaves a live owner's alone.
#[test]
fn a_crashed_owners_containers_and_images_are_swept() {
    if !container_ready() {
        return;
    }
    let mine = Sandbox::new(BackendKind::Container).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_create_and_wait_to_be_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("NENYAX_TEST_HELPER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut text = String::new();
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    while !text.contains("NAMES ") || !text[text.find("NAMES ").unwrap()..].contains('\n') {
        use std::io::Read;
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0 && t0.elapsed() < Duration::from_secs(60), "{text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let line = text.lines().find(|l| l.starts_with("NAMES ")).unwrap();
    let names: Vec<String> = line[6..].split_whitespace().map(String::from).collect();
    assert_eq!(names.len(), 2, "{line}");
    let image = Command::new(engine())
        .args(["inspect", "--format", "{{.ImageName}}", &names[1]])
        .output()
        .unwrap();
    let image = String::from_utf8_lossy(&image.stdout).trim().to_string();
    assert!(image.contains("nenyax-fork"), "the fork runs from {image}");
    child.kill().unwrap();
    child.wait().unwrap();
    for n in &names {
        assert!(exists("container", n), "{n} is gone before the sweep");
    }
    let swept = nenyax::sandbox::sweep_containers().unwrap();
    for n in &names {
        assert!(swept.containers.contains(n), "{n} not swept: {swept:?}");
        assert!(!exists("container", n), "{n} is still there");
        assert_eq!(processes_of(n), 0);
    }
    assert!(
        !exists("image", &image),
        "{image} is still there: {swept:?}"
    );
    assert!(!swept.images.is_empty());
    // A live owner's container stays.
    assert!(mine.sh("true").unwrap().ok());
}

/// The root file system can be made read-only: root cannot write `/usr`, the private
/// directories stay writable and reach a fork (they are tmpfs mounts a commit leaves out).
#[test]
fn a_read_only_root_keeps_private_dirs_writable_and_forkable() {
    if !container_ready() {
        return;
    }
    let mut cfg = config();
    cfg.read_only_root = true;
    cfg.root = true;
    cfg.extra_dirs = vec!["skills".into()];
    let sb = Sandbox::create(cfg).unwrap();
    let r = sb.sh("touch /usr/x 2>&1; id -u").unwrap();
    assert!(r.stdout.contains("Read-only file system"), "{r:?}");
    assert!(r.stdout.ends_with("0\n"), "{r:?}");
    sb.put("/skills/s.md", b"skill", 0o644).unwrap();
    sb.sh("echo t > /tmp/t && echo a > /app/a").unwrap();
    let child = sb.fork().unwrap();
    assert_eq!(child.get("/skills/s.md").unwrap(), b"skill");
    assert_eq!(child.get("/tmp/t").unwrap(), b"t\n");
    assert_eq!(child.sh("cat a").unwrap().stdout, "a\n");
}

/// Sandbox paths are the container's own: any absolute path can be read and listed, uploads
/// belong to the sandbox user, and relative paths start at the workdir.
#[test]
fn files_anywhere_in_the_container_and_owned_by_the_sandbox_user() {
    if !container_ready() {
        return;
    }
    let sb = Sandbox::new(BackendKind::Container).unwrap();
    assert!(sb.get("/etc/debian_version").is_ok());
    let etc: Vec<String> = sb
        .list("/etc")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(etc.contains(&"passwd".to_string()), "{etc:?}");
    sb.put("deep/er/f.txt", b"x", 0o600).unwrap();
    let r = sb
        .sh("stat -c '%u %a' /app/deep /app/deep/er /app/deep/er/f.txt")
        .unwrap();
    assert_eq!(r.stdout, "65534 755\n65534 755\n65534 600\n", "{r:?}");
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("d")).unwrap();
    std::fs::write(src.path().join("d/run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        src.path().join("d/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(src.path().join("top.txt"), "top").unwrap();
    sb.put_dir(src.path(), "/opt/up").unwrap();
    let r = sb
        .sh("/opt/up/d/run.sh; stat -c '%u %a' /opt/up/d/run.sh /opt/up/top.txt; echo more >> /opt/up/top.txt && echo writable")
        .unwrap();
    assert_eq!(r.stdout, "ran\n65534 755\n65534 644\nwritable\n", "{r:?}");
    assert!(sb.get("/no/such/file").is_err());
    sb.remove("/opt/up").unwrap();
    assert!(sb.list("/opt/up").is_err());
    let e = sb.sh_in("/no/such/dir").unwrap_err().to_string();
    assert!(e.contains("`/no/such/dir` does not exist"), "{e}");
}

/// A helper so the test above reads plainly.
trait ShIn {
    fn sh_in(&self, cwd: &str) -> nenyax::Result<nenyax::sandbox::ExecResult>;
}

impl ShIn for Sandbox {
    fn sh_in(&self, cwd: &str) -> nenyax::Result<nenyax::sandbox::ExecResult> {
        self.exec(&Exec::shell("pwd").cwd(cwd))
    }
}

/// Commands' exit codes and signals as the process backend reports them; a program that is
/// not there is exit 127; environment variables reach the command.
#[test]
fn exit_codes_signals_and_environment() {
    if !container_ready() {
        return;
    }
    let mut cfg = config();
    cfg.env.insert("FROM_CONFIG".into(), "c".into());
    let sb = Sandbox::create(cfg).unwrap();
    let r = sb.sh("kill -TERM $$").unwrap();
    assert_eq!((r.exit_code, r.signal), (None, Some(15)), "{r:?}");
    assert_eq!(r.killed, Some(Killed::Signal));
    let r = sb.exec(&Exec::argv(["no-such-program"])).unwrap();
    assert_eq!(r.exit_code, Some(127), "{r:?}");
    let r = sb
        .exec(
            &Exec::shell("echo $FROM_CONFIG$FROM_EXEC; printf '%s' \"$MULTI\"")
                .env("FROM_EXEC", "e")
                .env("MULTI", "a\nb"),
        )
        .unwrap();
    assert_eq!(r.stdout, "ce\na\nb", "{r:?}");
    let e = sb
        .exec(&Exec::shell("true").env("A=B", "x"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`A=B`"), "{e}");
}

/// Without network a container has no URL; with it, its address serves what listens inside.
#[test]
fn url_needs_network() {
    if !container_ready() {
        return;
    }
    let sb = Sandbox::new(BackendKind::Container).unwrap();
    let e = sb.url(8000).unwrap_err();
    assert_eq!(e.kind(), "UnsupportedCapability", "{e}");
    assert!(e.to_string().contains("network: true"), "{e}");
    let mut cfg = config();
    cfg.network = true;
    let sb = Sandbox::create(cfg).unwrap();
    let url = sb.url(8000).unwrap();
    assert!(
        url.starts_with("http://") && url.ends_with(":8000"),
        "{url}"
    );
    // A one-shot server inside (perl is in every Debian image), reached from the host while
    // the command that runs it waits.
    let serve = "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8000, Listen => 1, ReuseAddr => 1) or die; $c = $s->accept; print $c \"HTTP/1.0 200 OK\\r\\n\\r\\nfrom-container\"; close $c'";
    let addr = url.trim_start_matches("http://").to_string();
    let body = std::thread::scope(|s| {
        let server = s.spawn(|| sb.exec(&Exec::shell(serve).timeout(Duration::from_secs(20))));
        let t0 = Instant::now();
        let body = loop {
            use std::io::Read;
            if let Ok(mut c) = std::net::TcpStream::connect(&addr) {
                let mut b = String::new();
                let _ = c.read_to_string(&mut b);
                if b.contains("from-container") {
                    break b;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "nothing answered at {url}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let r = server.join().unwrap().unwrap();
        assert!(r.ok(), "{r:?}");
        body
    });
    assert!(body.ends_with("from-container"), "{body}");
}
