//! `nenyax sandbox-check`: which isolation promises a backend keeps, each measured by a command
//! that would get through if the promise were broken.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{BackendKind, Exec, Killed, Sandbox, SandboxConfig};
use crate::error::Result;

/// One promise and whether it held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Promise {
    /// Short name, e.g. `cpu_limit`.
    pub name: String,
    /// True when the promise held.
    pub held: bool,
    /// What was observed.
    pub detail: String,
}

/// The report of [`sandbox_check`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxReport {
    /// The backend checked.
    pub backend: BackendKind,
    /// Every promise, in order.
    pub promises: Vec<Promise>,
}

impl SandboxReport {
    /// True when every promise held.
    pub fn passed(&self) -> bool {
        self.promises.iter().all(|p| p.held)
    }

    /// A plain-text table.
    pub fn render(&self) -> String {
        let mut s = format!("sandbox-check {}\n", self.backend.name());
        for p in &self.promises {
            s += &format!(
                "  {:<4} {:<22} {}\n",
                if p.held { "ok" } else { "FAIL" },
                p.name,
                p.detail.replace('\n', " ")
            );
        }
        s += if self.passed() {
            "every promise held\n"
        } else {
            "some promises did not hold\n"
        };
        s
    }
}

type Probe = fn(BackendKind) -> Result<(bool, String)>;

fn with(kind: BackendKind, f: impl FnOnce(&mut SandboxConfig)) -> Result<Sandbox> {
    let mut c = SandboxConfig::new(kind);
    f(&mut c);
    Sandbox::create(c)
}

fn wall_timeout(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let t0 = Instant::now();
    let r = sb.exec(&Exec::shell("sleep 30 & sleep 30").timeout(Duration::from_millis(300)))?;
    let t = t0.elapsed().as_secs_f64();
    Ok((
        r.killed == Some(Killed::Timeout) && t < 5.0,
        format!(
            "sleeper ended after {t:.2}s ({})",
            Killed::describe(r.killed)
        ),
    ))
}

fn cpu_limit(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.cpu_s = Some(1))?;
    let r = sb.exec(&Exec::shell("while :; do :; done").timeout(Duration::from_secs(15)))?;
    Ok((
        r.killed == Some(Killed::CpuLimit),
        format!(
            "spinner ended after {:.2}s: {}",
            r.duration_s,
            Killed::describe(r.killed)
        ),
    ))
}

fn memory_limit(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.memory_bytes = Some(256 << 20))?;
    let r = sb.sh("python3 -c 'b = bytearray(1 << 30); print(\"allocated\")' 2>&1 | tail -n 1")?;
    Ok((
        r.stdout.contains("MemoryError"),
        format!(
            "1 GiB allocation under a 256 MiB limit: {}",
            r.stdout.trim()
        ),
    ))
}

fn open_files_limit(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.open_files = Some(32))?;
    let r = sb.sh("python3 -c '\nfs = []\ntry:\n    while len(fs) < 1000: fs.append(open(\"/dev/null\"))\nexcept OSError: pass\nprint(len(fs))'")?;
    let n: usize = r.stdout.trim().parse().unwrap_or(usize::MAX);
    Ok((n < 32, format!("opened {n} files under a limit of 32")))
}

fn process_limit(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.processes = Some(20))?;
    let r = sb.exec(
        &Exec::argv([
            "python3",
            "-c",
            "import os, time\nn = 0\nfor i in range(200):\n    try:\n        if os.fork() == 0:\n            time.sleep(2); os._exit(0)\n        n += 1\n    except OSError: pass\nprint(n)",
        ])
        .timeout(Duration::from_secs(20)),
    )?;
    let n: usize = r.stdout.trim().parse().unwrap_or(usize::MAX);
    Ok((
        n < 20,
        format!("{n} of 200 forks succeeded under a limit of 20"),
    ))
}

fn file_size_limit(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.file_size_bytes = Some(1 << 20))?;
    sb.sh("head -c 5000000 /dev/zero > big")?;
    let n = sb.get("big").map(|b| b.len()).unwrap_or(0);
    Ok((n <= 1 << 20, format!("wrote {n} bytes under a 1 MiB limit")))
}

fn output_cap(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.output_bytes = 1000)?;
    let r = sb.exec(&Exec::argv(["yes"]).timeout(Duration::from_millis(300)))?;
    Ok((
        r.stdout.len() == 1000 && r.dropped_bytes > 0,
        format!("kept {} bytes, dropped {}", r.stdout.len(), r.dropped_bytes),
    ))
}

fn detached_child(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    sb.sh("setsid sh -c 'sleep 1; touch escaped' >/dev/null 2>&1 </dev/null &")?;
    std::thread::sleep(Duration::from_millis(1500));
    let escaped = sb.get("escaped").is_ok();
    Ok((
        !escaped,
        if escaped {
            "a setsid child outlived its command".into()
        } else {
            "a setsid child was killed with its command".into()
        },
    ))
}

fn scrubbed_env(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let r = sb.sh("env | cut -d= -f1 | sort | tr '\\n' ' '")?;
    let mut allowed = vec![
        "HOME",
        "LANG",
        "NENYAX_SANDBOX",
        "OLDPWD",
        "PATH",
        "PWD",
        "SHLVL",
        "TMPDIR",
        "_",
    ];
    if kind == BackendKind::Container {
        // What the engine sets in every container, and the markers the host kills by.
        allowed.extend([
            "HOSTNAME",
            "TERM",
            "container",
            "NENYAX_CONTAINER",
            "NENYAX_EXEC",
        ]);
    }
    let extra: Vec<&str> = r
        .stdout
        .split_whitespace()
        .filter(|k| !allowed.contains(k))
        .collect();
    Ok((extra.is_empty(), format!("variables: {}", r.stdout.trim())))
}

/// A file on the host named for this check, and whether an attack left it there (removed).
fn landed(path: &str) -> bool {
    let there = std::path::Path::new(path).exists();
    let _ = std::fs::remove_file(path);
    there
}

fn host_root_read_only(kind: BackendKind) -> Result<(bool, String)> {
    let mut held = true;
    let mut seen = Vec::new();
    for root in [false, true] {
        let sb = with(kind, |c| c.root = root)?;
        let marker = format!("/usr/nenyax-probe-{}", sb.id());
        let r = sb.sh(&format!("touch {marker} 2>&1 || echo refused"))?;
        let wrote = landed(&marker);
        held &= r.stdout.contains("refused") && !wrote;
        // touch's reason is the text after its last colon.
        let first = r.stdout.lines().next().unwrap_or("");
        let why = first.rsplit(": ").next().unwrap_or(first).trim();
        seen.push(format!(
            "as {}: {}",
            if root { "root" } else { "nobody" },
            if wrote { "written on the host" } else { why }
        ));
    }
    Ok((held, format!("writing /usr {}", seen.join("; "))))
}

/// Root of a jail (`root: true`) attacks the host: remounts a host directory read-write (in
/// the jail's mount namespace and in new ones), and escapes the root with the chroot trick.
fn root_cannot_remount(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.root = true)?;
    let marker = format!("/usr/nenyax-remount-{}", sb.id());
    let attacks = [
        ("remount", format!("mount -o remount,rw,bind /usr && touch {marker}")),
        (
            "remount in a new mount namespace",
            format!("unshare -m sh -c 'mount -o remount,rw,bind /usr && touch {marker}'"),
        ),
        (
            "chroot escape",
            format!(
                "python3 -c \"import os\nos.mkdir('/tmp/x')\nos.chroot('/tmp/x')\nfor _ in range(64): os.chdir('..')\nos.chroot('.')\nopen('{marker}', 'w')\""
            ),
        ),
    ];
    let uid = sb.sh("id -u")?.stdout.trim().to_string();
    let mut through = Vec::new();
    for (name, attack) in &attacks {
        let r = sb.sh(attack)?;
        if landed(&marker) || r.ok() {
            through.push(*name);
        }
    }
    Ok((
        through.is_empty() && uid == "0",
        if through.is_empty() {
            format!(
                "root (uid {uid} in the jail) tried {}: no host file written",
                attacks.map(|a| a.0).join(", ")
            )
        } else {
            format!("root wrote the host's /usr by: {}", through.join(", "))
        },
    ))
}

/// A file written to the jail's `/dev/shm` must not be on the host's, as nobody or as root, and
/// `/dev` holds no host device beyond the harmless few.
fn private_dev(kind: BackendKind) -> Result<(bool, String)> {
    let allowed = [
        "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
        "urandom", "zero",
    ];
    let mut held = true;
    let mut seen = Vec::new();
    for root in [false, true] {
        let sb = with(kind, |c| c.root = root)?;
        let name = format!("nenyax-shm-probe-{}", sb.id());
        let r = sb.sh(&format!(
            "echo x > /dev/shm/{name} && cat /dev/shm/{name} && ls -A /dev | tr '\\n' ' '"
        ))?;
        let leaked = landed(&format!("/dev/shm/{name}"));
        let extra: Vec<String> = r
            .stdout
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .filter(|d| !allowed.contains(d))
            .map(String::from)
            .collect();
        held &= r.stdout.starts_with("x\n") && !leaked && extra.is_empty();
        seen.push(format!(
            "as {}: {}{}",
            if root { "root" } else { "nobody" },
            if leaked {
                "the file is on the host"
            } else {
                "not on the host"
            },
            if extra.is_empty() {
                String::new()
            } else {
                format!(", host devices {}", extra.join(" "))
            }
        ));
    }
    Ok((
        held,
        format!("a file written to /dev/shm, {}", seen.join("; ")),
    ))
}

/// COPY in a Harbor Dockerfile reads the build context only: `..` out of it and a symlink out
/// of it are refused when the task loads.
#[cfg(feature = "harbor")]
fn copy_confined(_kind: BackendKind) -> Result<(bool, String)> {
    let dir = tempfile::tempdir()
        .map_err(|e| crate::error::Error::io("sandbox-check: a temporary task", e))?;
    let io = |e| crate::error::Error::io("sandbox-check: write a temporary task", e);
    let t = dir.path().join("t");
    std::fs::create_dir_all(t.join("environment")).map_err(io)?;
    std::fs::write(dir.path().join("secret.txt"), "host secret\n").map_err(io)?;
    std::fs::write(t.join("task.toml"), "version = \"1.0\"\n").map_err(io)?;
    std::fs::write(t.join("instruction.md"), "x").map_err(io)?;
    std::os::unix::fs::symlink("../../secret.txt", t.join("environment/link")).map_err(io)?;
    let mut refused = Vec::new();
    for line in ["COPY ../../secret.txt /app/x", "COPY link /app/x"] {
        std::fs::write(
            t.join("environment/Dockerfile"),
            format!("FROM ubuntu:24.04\n{line}\n"),
        )
        .map_err(io)?;
        match crate::load(&format!("harbor:{}", t.display())) {
            Err(e) if e.to_string().contains("outside the build context") => refused.push(true),
            _ => refused.push(false),
        }
    }
    Ok((
        refused.iter().all(|r| *r),
        format!(
            "COPY of a host file by `..`: {}; through a symlink: {}",
            if refused[0] { "refused" } else { "accepted" },
            if refused[1] { "refused" } else { "accepted" }
        ),
    ))
}

fn private_dirs(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let r =
        sb.sh("for d in /app /tests /logs /tmp; do echo x > $d/probe || exit 1; done; ls /tmp")?;
    let host_clean = !std::path::Path::new("/app/probe").exists();
    Ok((
        r.ok() && r.stdout.trim() == "probe" && host_clean,
        format!(
            "wrote /app /tests /logs /tmp; /tmp holds only: {}",
            r.stdout.trim()
        ),
    ))
}

fn no_network(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let r = sb.sh("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '")?;
    let ifs: Vec<&str> = r.stdout.split_whitespace().collect();
    let open = with(kind, |c| c.network = true)?
        .sh("cat /proc/net/dev | tail -n +3 | wc -l")?
        .stdout
        .trim()
        .to_string();
    // A listener on the host's loopback: the jail's 127.0.0.1 must be another one.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| crate::error::Error::io("binding a probe listener on 127.0.0.1", e))?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let probe = format!(
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo reached || echo refused"
    );
    let reached = sb.sh(&probe)?.stdout.trim().to_string();
    Ok((
        ifs == ["lo"] && reached == "refused",
        format!(
            "interfaces without network: {}; the host's 127.0.0.1:{port}: {reached}; with \
             network=true: {open}",
            ifs.join(", ")
        ),
    ))
}

/// The jail's `/proc` shows its own few processes, and its PID 1 shows nothing of the host's
/// nenyax: not its command line (as nobody and as root), not its environment.
fn own_pids(kind: BackendKind) -> Result<(bool, String)> {
    let host = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let host = String::from_utf8_lossy(&host).replace('\0', " ");
    let mut held = true;
    let mut seen = Vec::new();
    for root in [false, true] {
        let sb = with(kind, |c| c.root = root)?;
        let r = sb.sh(
            "ls /proc | grep -c '^[0-9]'; tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/environ 2>/dev/null | tr -d '\\0' | wc -c",
        )?;
        let mut lines = r.stdout.lines();
        let n: usize = lines.next().unwrap_or("").parse().unwrap_or(usize::MAX);
        let cmdline = lines.next().unwrap_or("").trim().to_string();
        let environ = lines.next().unwrap_or("").trim().to_string();
        held &= n <= 5 && !cmdline.is_empty() && cmdline != host.trim() && environ == "0";
        seen.push(format!(
            "as {}: {n} processes, PID 1 is `{cmdline}`, {} bytes of its environment readable",
            if root { "root" } else { "nobody" },
            environ
        ));
    }
    Ok((held, seen.join("; ")))
}

fn own_hostname_and_ipc(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let r = sb.sh("hostname; ls /dev/mqueue 2>/dev/null | wc -l")?;
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = r.stdout.lines().next().unwrap_or("").to_string();
    Ok((
        name == "nenyax" && name != host,
        format!("hostname `{name}` (host: `{host}`)"),
    ))
}

/// A 1 GiB buffer under a 256 MiB memory limit: `tail` keeps a line without end in memory, so
/// it grows until the limit stops it; 16 MiB must still work (the limit is not just broken).
fn container_memory(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.memory_bytes = Some(256 << 20))?;
    let r = sb.sh(
        "head -c 1073741824 /dev/zero | tail -n 1 | wc -c; echo $?; head -c 16777216 /dev/zero | tail -n 1 | wc -c",
    )?;
    let lines: Vec<&str> = r.stdout.lines().map(str::trim).collect();
    let big_held = lines.first().is_some_and(|n| *n != "1073741824");
    let small_ok = lines.get(2) == Some(&"16777216");
    Ok((
        big_held && small_ok,
        format!(
            "1 GiB held in memory under a 256 MiB limit: {} bytes got through; 16 MiB: {}",
            lines.first().unwrap_or(&"?"),
            lines.get(2).unwrap_or(&"?")
        ),
    ))
}

/// Descriptors opened by bash until the limit of 32 refuses one.
fn container_open_files(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.open_files = Some(32))?;
    let r = sb.sh(
        "for i in $(seq 3 1000); do eval \"exec $i</dev/null\" 2>/dev/null || break; done; echo $((i - 3))",
    )?;
    let n: usize = r.stdout.trim().parse().unwrap_or(usize::MAX);
    Ok((n < 32, format!("opened {n} files under a limit of 32")))
}

/// A fork bomb (perl, which every Debian image has) under a limit of 20 processes.
fn container_processes(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |c| c.limits.processes = Some(20))?;
    let r = sb.exec(
        &Exec::argv([
            "perl",
            "-e",
            "my $n = 0; for (1..200) { my $p = fork(); next unless defined $p; if ($p == 0) { sleep 2; exit 0 } $n++ } print \"$n\\n\"",
        ])
        .timeout(Duration::from_secs(20)),
    )?;
    let n: usize = r.stdout.trim().parse().unwrap_or(usize::MAX);
    Ok((
        n < 20,
        format!("{n} of 200 forks succeeded under a limit of 20"),
    ))
}

/// The host's address other than loopback, learnt from the route a UDP socket would take (no
/// packet is sent).
fn host_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// No interface but loopback, the host's listeners (on its loopback and its own address) out
/// of reach, and no name resolution.
fn container_no_network(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let listener = std::net::TcpListener::bind("0.0.0.0:0")
        .map_err(|e| crate::error::Error::io("binding a probe listener", e))?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut targets = vec!["127.0.0.1".to_string()];
    if let Some(ip) = host_address() {
        targets.push(ip.to_string());
    }
    let mut script = String::from(
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo\n",
    );
    for t in &targets {
        script += &format!(
            "timeout 5 bash -c 'exec 3<>/dev/tcp/{t}/{port}' 2>/dev/null && echo reached || echo refused\n"
        );
    }
    script += "timeout 5 getent hosts deb.debian.org >/dev/null 2>&1 && echo resolved || echo unresolved\n";
    let r = sb.sh(&script)?;
    let lines: Vec<&str> = r.stdout.lines().map(str::trim).collect();
    let ifs = lines.first().copied().unwrap_or("");
    let reached = lines
        .iter()
        .skip(1)
        .take(targets.len())
        .any(|l| *l != "refused");
    let dns = lines.get(1 + targets.len()).copied().unwrap_or("?");
    Ok((
        ifs == "lo" && !reached && dns == "unresolved",
        format!(
            "interfaces: {ifs}; the host's listener at {} port {port}: {}; DNS: {dns}",
            targets.join(" and "),
            lines
                .iter()
                .skip(1)
                .take(targets.len())
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// With `read_only_root`, even root cannot write `/usr`, while the private directories stay
/// writable; without it, the sandbox user cannot write `/usr` either.
fn read_only_root(kind: BackendKind) -> Result<(bool, String)> {
    let ro = with(kind, |c| {
        c.read_only_root = true;
        c.root = true;
    })?;
    let r = ro.sh(
        "touch /usr/nenyax-probe 2>&1 | sed 's/.*: //'; for d in /app /tests /logs /tmp /solution; do echo x > $d/probe || exit 1; done && echo private-ok",
    )?;
    let lines: Vec<&str> = r.stdout.lines().collect();
    let refused = lines.first().copied().unwrap_or("");
    let private_ok = lines.last() == Some(&"private-ok");
    let rw = with(kind, |_| {})?;
    let nobody = rw.sh("touch /usr/nenyax-probe 2>/dev/null && echo written || echo refused")?;
    Ok((
        refused.contains("Read-only") && private_ok && nobody.stdout.trim() == "refused",
        format!(
            "root writing /usr of a read-only root: {}; private directories writable: {}; the \
             sandbox user writing /usr: {}",
            refused.trim(),
            if private_ok { "yes" } else { "no" },
            nobody.stdout.trim()
        ),
    ))
}

/// The private directories exist, are writable by the sandbox user, and the workdir is /app.
fn container_private_dirs(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let r = sb.sh("for d in /app /tests /logs /tmp /solution; do echo x > $d/probe || exit 1; done; pwd; id -u")?;
    Ok((
        r.ok() && r.stdout == "/app\n65534\n",
        format!(
            "wrote /app /tests /logs /tmp /solution as uid {}; workdir {}",
            r.stdout.lines().nth(1).unwrap_or("?"),
            r.stdout.lines().next().unwrap_or("?")
        ),
    ))
}

/// A file made in a host temporary directory is not visible in the container, and its PID 1
/// is the container's init, not the host's.
fn no_host_paths(kind: BackendKind) -> Result<(bool, String)> {
    let dir = tempfile::tempdir()
        .map_err(|e| crate::error::Error::io("sandbox-check: a host marker directory", e))?;
    let marker = dir.path().join("host-marker");
    std::fs::write(&marker, "host\n")
        .map_err(|e| crate::error::Error::io("sandbox-check: write a host marker", e))?;
    let sb = with(kind, |c| c.root = true)?;
    let r = sb.sh(&format!(
        "cat {} 2>/dev/null || echo absent; tr '\\0' ' ' < /proc/1/cmdline; echo",
        marker.display()
    ))?;
    let host_init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    let host_init = String::from_utf8_lossy(&host_init).replace('\0', " ");
    let lines: Vec<&str> = r.stdout.lines().map(str::trim).collect();
    let seen = lines.first().copied().unwrap_or("?");
    let init = lines.get(1).copied().unwrap_or("");
    Ok((
        seen == "absent" && !init.is_empty() && init != host_init.trim(),
        format!(
            "host file {}: {seen} inside; PID 1 is `{}` (the host's: `{}`)",
            marker.display(),
            first_word(init),
            first_word(&host_init)
        ),
    ))
}

/// A command line's program, for a one-line report.
fn first_word(cmdline: &str) -> &str {
    cmdline.split_whitespace().next().unwrap_or("")
}

/// Whether a container of this name still exists in the engine, and how many processes of it
/// the host still runs.
fn container_left(name: &str) -> (bool, usize) {
    let exists = super::engine::Engine::detect()
        .map(|e| {
            e.command()
                .args(["container", "inspect", "--format", "{{.Id}}", name])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        })
        .unwrap_or(false);
    let needle = format!("NENYAX_CONTAINER={name}\0");
    let running = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("environ"))
                        .map(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0);
    (exists, running)
}

/// Wait up to 10 s for a container to be gone with nothing of it running.
fn gone_soon(name: &str) -> (bool, usize) {
    let t0 = Instant::now();
    loop {
        let (exists, running) = container_left(name);
        if (!exists && running == 0) || t0.elapsed() > Duration::from_secs(10) {
            return (exists, running);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A container killed from outside in the middle of a command: the command fails, and nothing
/// of it is left; a destroyed sandbox leaves no container and no process.
fn cleanup_after_kill(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let name = sb.container_name().unwrap_or_default().to_string();
    let engine = super::engine::Engine::detect()?;
    let killer = {
        let (engine, name) = (engine.clone(), name.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            engine.run(&["kill", &name], "kill the container from outside")
        })
    };
    let r = sb.exec(&Exec::shell("sleep 30; echo survived").timeout(Duration::from_secs(20)));
    let kill = killer.join().map_err(|_| {
        crate::error::Error::Sandbox("sandbox-check: the killer thread panicked".into())
    })?;
    let outcome = match &r {
        Err(e) => format!("the command failed: {e}"),
        Ok(r) => format!("the command returned ({})", Killed::describe(r.killed)),
    };
    let failed = match &r {
        Err(_) => true,
        Ok(r) => !r.ok() && !r.stdout.contains("survived"),
    };
    let next = sb.sh("true").is_err();
    drop(sb);
    let (exists, running) = gone_soon(&name);
    let sb2 = with(kind, |_| {})?;
    let name2 = sb2.container_name().unwrap_or_default().to_string();
    sb2.sh("sleep 60 >/dev/null 2>&1 &")?;
    sb2.destroy()?;
    let (exists2, running2) = gone_soon(&name2);
    Ok((
        kill.is_ok() && failed && next && !exists && running == 0 && !exists2 && running2 == 0,
        format!(
            "killed mid-command: {outcome}; the next command {}; afterwards the container {} \
             with {running} processes; a destroyed sandbox's container {} with {running2} \
             processes",
            if next { "failed" } else { "ran" },
            if exists { "exists" } else { "is gone" },
            if exists2 { "exists" } else { "is gone" },
        ),
    ))
}

/// A file written in a fork is not in its parent and one written in the parent after the fork
/// is not in the fork; what was there before the fork is in both.
fn fork_isolation(kind: BackendKind) -> Result<(bool, String)> {
    let mut seen = Vec::new();
    let mut held = true;
    for ro in [false, true] {
        let parent = with(kind, |c| c.read_only_root = ro)?;
        // Relative to the workdir (/app): a process-level backend's commands see host paths.
        parent.sh("echo before > before")?;
        parent.put("/tmp/t", b"t\n", 0o644)?;
        let child = parent.fork()?;
        child.sh("echo child > child")?;
        parent.sh("echo parent > parent")?;
        let has = |sb: &Sandbox, f: &str| sb.get(f).is_ok();
        let ok = has(&child, "/app/before")
            && has(&child, "/tmp/t")
            && !has(&parent, "/app/child")
            && !has(&child, "/app/parent");
        held &= ok;
        seen.push(format!(
            "{}: {}",
            if ro {
                "read-only root"
            } else {
                "writable root"
            },
            if ok {
                "files before the fork in both, files after it in one only"
            } else {
                "a file crossed between fork and parent"
            }
        ));
    }
    Ok((held, seen.join("; ")))
}

/// The file contract every backend keeps: put (with parents and a mode), get, list, remove, a
/// missing file an error, removing a missing path no error, and `..` refused.
fn file_contract(kind: BackendKind) -> Result<(bool, String)> {
    let sb = with(kind, |_| {})?;
    let mut bad = Vec::new();
    sb.put("/app/d/e/x.txt", b"hello\n", 0o640)?;
    if sb.get("/app/d/e/x.txt")? != b"hello\n" {
        bad.push("get did not return what put wrote");
    }
    // Commands use workdir-relative paths: a process-level backend's commands see host paths.
    let mode = sb.sh("stat -c %a d/e/x.txt 2>&1 || stat -f %Lp d/e/x.txt")?;
    if mode.stdout.trim() != "640" {
        bad.push("the mode put gave is not the file's");
    }
    sb.put("/app/d/y", b"", 0o600)?;
    let names: Vec<(String, bool)> = sb
        .list("/app/d")?
        .into_iter()
        .map(|e| (e.name, e.dir))
        .collect();
    if names != [("e".to_string(), true), ("y".to_string(), false)] {
        bad.push("list of /app/d is not [e/, y]");
    }
    let seen = sb.sh("cat d/e/x.txt")?;
    if seen.stdout != "hello\n" {
        bad.push("a command does not see a file put in");
    }
    sb.sh("printf abc > made")?;
    if sb.get("made").ok().as_deref() != Some(&b"abc"[..]) {
        bad.push("get does not see a file a command made");
    }
    sb.remove("/app/d")?;
    if sb.get("/app/d/e/x.txt").is_ok() {
        bad.push("a removed tree is still there");
    }
    if sb.remove("/app/never-was").is_err() {
        bad.push("removing a missing path is an error");
    }
    if sb.get("/app/../etc/passwd").is_ok() {
        bad.push("`..` got out");
    }
    Ok((
        bad.is_empty(),
        if bad.is_empty() {
            "put (parents, mode), get, list, remove, commands and files agree".into()
        } else {
            bad.join("; ")
        },
    ))
}

/// The promises a sandbox plugin is held to: those of the level it declares (a container or a
/// microVM at least a jail's), the file contract, and fork isolation when it forks.
fn plugin_promises(
    kind: BackendKind,
    p: &crate::plugins::sandbox::LibrarySandbox,
) -> Vec<(&'static str, Probe)> {
    let mut out: Vec<(&'static str, Probe)> = vec![
        ("wall_timeout", wall_timeout),
        ("cpu_limit", cpu_limit),
        ("memory_limit", memory_limit),
        ("open_files_limit", open_files_limit),
        ("file_size_limit", file_size_limit),
        ("output_cap", output_cap),
        ("detached_child_killed", detached_child),
        ("scrubbed_environment", scrubbed_env),
        ("file_contract", file_contract),
    ];
    if nix::unistd::geteuid().is_root() {
        out.push(("process_limit", process_limit));
    }
    if kind.level().satisfies(super::Level::Jail) {
        out.extend([
            ("host_root_read_only", host_root_read_only as Probe),
            ("root_cannot_remount", root_cannot_remount),
            ("private_dev", private_dev),
            ("private_dirs", private_dirs),
            ("no_network", no_network),
            ("own_pid_namespace", own_pids),
            ("own_hostname", own_hostname_and_ipc),
        ]);
    }
    if p.forks() {
        out.push(("fork_isolation", fork_isolation));
    }
    out
}

/// The promises a backend makes, in order.
pub fn promises(kind: BackendKind) -> Vec<(&'static str, Probe)> {
    if let BackendKind::Plugin(p) = kind {
        return plugin_promises(kind, &p.plugin());
    }
    if kind == BackendKind::Container {
        return vec![
            ("wall_timeout", wall_timeout),
            ("cpu_limit", cpu_limit),
            ("memory_limit", container_memory),
            ("open_files_limit", container_open_files),
            ("process_limit", container_processes),
            ("file_size_limit", file_size_limit),
            ("output_cap", output_cap),
            ("detached_child_killed", detached_child),
            ("scrubbed_environment", scrubbed_env),
            ("no_network", container_no_network),
            ("read_only_root", read_only_root),
            ("private_dirs", container_private_dirs),
            ("no_host_paths", no_host_paths),
            ("own_hostname", own_hostname_and_ipc),
            ("cleanup_after_kill", cleanup_after_kill),
            ("fork_isolation", fork_isolation),
        ];
    }
    let mut p: Vec<(&'static str, Probe)> = vec![
        ("wall_timeout", wall_timeout),
        ("cpu_limit", cpu_limit),
        ("memory_limit", memory_limit),
        ("open_files_limit", open_files_limit),
        ("file_size_limit", file_size_limit),
        ("output_cap", output_cap),
        ("detached_child_killed", detached_child),
        ("scrubbed_environment", scrubbed_env),
    ];
    if nix::unistd::geteuid().is_root() {
        p.push(("process_limit", process_limit));
    }
    if kind == BackendKind::Jail {
        p.extend([
            ("host_root_read_only", host_root_read_only as Probe),
            ("root_cannot_remount", root_cannot_remount),
            ("private_dev", private_dev),
            ("private_dirs", private_dirs),
            ("no_network", no_network),
            ("own_pid_namespace", own_pids),
            ("own_hostname", own_hostname_and_ipc),
        ]);
        #[cfg(feature = "harbor")]
        p.push(("harbor_copy_confined", copy_confined));
    }
    p
}

/// Run every promise of `kind`: (name, held, what was observed), in order.
pub fn run_promises(kind: BackendKind) -> Vec<(&'static str, bool, String)> {
    promises(kind)
        .into_iter()
        .map(|(name, probe)| {
            let (held, detail) = match crate::env::guard(|| probe(kind)) {
                Ok(v) => v,
                Err(e) => (false, format!("{}: {e}", e.kind())),
            };
            (name, held, detail)
        })
        .collect()
}

/// Run every promise of `kind` and report which held.
pub fn sandbox_check(kind: BackendKind) -> SandboxReport {
    let promises = run_promises(kind)
        .into_iter()
        .map(|(name, held, detail)| Promise {
            name: name.into(),
            held,
            detail,
        })
        .collect();
    SandboxReport {
        backend: kind,
        promises,
    }
}
