//! Bounded inputs, performed as attacks: endless and oversized files, a bridge worker that
//! never ends its line or sends a huge one, and a `define:` file big enough that anything
//! quadratic in its size shows. Every case must end quickly with a clear error (or, for a
//! worker, with only its rollout failed), never exhaust memory.
//!
//! The CLI runs under a soft address-space limit, so that a regression fails the test with an
//! allocation failure instead of taking the machine's memory.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Address space the CLI may use: generous for its threads and a capped read, far below what
/// an unbounded read of /dev/zero reaches.
const ADDRESS_SPACE: u64 = 3 << 30;

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Run the CLI under [`ADDRESS_SPACE`] (soft, so a child may raise it again) and kill it if it
/// outlives `deadline`.
fn nenyax(args: &[&str], envs: &[(&str, &str)], deadline: Duration) -> Outcome {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nenyax"));
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_AS, &mut lim) == 0 {
                lim.rlim_cur = ADDRESS_SPACE.min(lim.rlim_max);
                libc::setrlimit(libc::RLIMIT_AS, &lim);
            }
            Ok(())
        });
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nenyax {args:?} still running after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        code: status.code(),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        took: t0.elapsed(),
    }
}

fn assert_refused(o: &Outcome, needles: &[&str]) {
    assert_eq!(
        o.code,
        Some(2),
        "a user error, not a crash: {}\n{}",
        o.stderr,
        o.stdout
    );
    for n in needles {
        assert!(o.stderr.contains(n), "`{n}` missing from: {}", o.stderr);
    }
}

#[test]
fn a_define_file_that_never_ends_is_refused_quickly() {
    let o = nenyax(&["info", "define:/dev/zero"], &[], Duration::from_secs(60));
    assert_refused(
        &o,
        &[
            "/dev/zero",
            "256 MiB limit for task files",
            "NENYAX_MAX_TASK_FILE_BYTES",
        ],
    );
    assert!(o.took < Duration::from_secs(30), "took {:?}", o.took);
}

#[test]
fn a_nemo_gym_data_file_that_never_ends_is_refused_before_connecting() {
    // Port 9 (discard) has no server: the data file is read, and refused, first.
    let o = nenyax(
        &["info", "nemo_gym:http://127.0.0.1:9?data=/dev/zero"],
        &[],
        Duration::from_secs(60),
    );
    assert_refused(
        &o,
        &[
            "/dev/zero",
            "`data` parameter",
            "256 MiB limit for task files",
            "NENYAX_MAX_TASK_FILE_BYTES",
        ],
    );
}

#[test]
fn a_tasks_file_over_the_cap_names_it_and_the_variable_that_raises_it() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..100)
        .map(|i| {
            format!(
                "{{\"prompt\": \"What is {i}+1?\", \"answer\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    assert!(rows.len() > 2048);
    std::fs::write(dir.path().join("rows.jsonl"), rows).unwrap();
    let define = dir.path().join("big.toml");
    std::fs::write(
        &define,
        "tasks_file = \"rows.jsonl\"\n[judge]\ntype = \"exact\"\n",
    )
    .unwrap();
    let uri = format!("define:{}", define.display());
    let deadline = Duration::from_secs(60);

    let o = nenyax(
        &["info", &uri],
        &[("NENYAX_MAX_TASK_FILE_BYTES", "2K")],
        deadline,
    );
    assert_refused(
        &o,
        &[
            "rows.jsonl is larger than the 2 KiB limit for task files",
            "NENYAX_MAX_TASK_FILE_BYTES=",
        ],
    );

    // Raised, the same file loads.
    let o = nenyax(
        &["info", &uri],
        &[("NENYAX_MAX_TASK_FILE_BYTES", "1M")],
        deadline,
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains("\"num_tasks\": 100"), "{}", o.stdout);

    // A value that is not a size is named, not ignored.
    let o = nenyax(
        &["info", &uri],
        &[("NENYAX_MAX_TASK_FILE_BYTES", "lots")],
        deadline,
    );
    assert_refused(&o, &["NENYAX_MAX_TASK_FILE_BYTES=`lots` is not a size"]);
}

/// A define file of `n` inline tasks.
fn define_file(dir: &Path, n: usize) -> String {
    let mut text = String::from("name = \"big\"\n[judge]\ntype = \"exact\"\n\n");
    for i in 0..n {
        text.push_str(&format!(
            "[[tasks]]\nprompt = \"What is {i}+1?\"\nanswer = \"{}\"\n\n",
            i + 1
        ));
    }
    let path = dir.join(format!("d{n}.toml"));
    std::fs::write(&path, text).unwrap();
    format!("define:{}", path.display())
}

#[test]
fn a_define_file_with_20000_tasks_loads_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    let time = |n: usize| {
        let uri = define_file(dir.path(), n);
        let t0 = Instant::now();
        let env = nenyax::load(&uri).unwrap();
        let took = t0.elapsed();
        assert_eq!(env.manifest().num_tasks, Some(n as u64));
        took
    };
    let small = time(2_000);
    let large = time(20_000);
    // Ten times the tasks should take about ten times as long. The quadratic loader took 80
    // times as long here (0.5 s against 40 s in a debug build); the floor keeps a tiny `small`
    // on a busy machine from failing a linear loader.
    let bound = (small * 30).max(Duration::from_secs(5));
    assert!(
        large < bound,
        "20,000 tasks took {large:?}, 2,000 took {small:?}: loading is not linear"
    );
}

/// A stand-in interpreter: a proxy in front of the real bridge worker that passes every line
/// through, except its reply to the second `reset` of the whole run (mid-batch, so a rollout
/// is in flight), which it replaces according to `FAKE_MODE`: `endless` writes bytes without
/// a newline until it is killed, `huge` writes one 200 MB line. Only one worker of the run
/// misbehaves; the ones started after it are real.
const FAKE_WORKER: &str = r#"
import os, resource, subprocess, sys

# The test capped the address space for nenyax; this interpreter takes its own back.
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
state, real, mode = os.environ["FAKE_STATE"], os.environ["FAKE_REAL"], os.environ["FAKE_MODE"]
child = subprocess.Popen([real] + sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
out = sys.stdout.buffer
out.write(child.stdout.readline())
out.flush()
for line in sys.stdin.buffer:
    child.stdin.write(line)
    child.stdin.flush()
    reply = child.stdout.readline()
    if b'"op":"reset"' in line.replace(b" ", b""):
        try:
            os.mkdir(os.path.join(state, "first_reset"))
        except FileExistsError:
            try:
                os.mkdir(os.path.join(state, "sabotaged"))
            except FileExistsError:
                pass
            else:
                with open(os.path.join(state, "pids"), "w") as f:
                    f.write(f"{os.getpid()} {child.pid}")
                chunk = b"x" * (1 << 20)
                if mode == "endless":
                    while True:
                        out.write(chunk)
                else:
                    out.write(b'"' + chunk * 200 + b'"\n')
                    out.flush()
                    sys.stdin.buffer.read()
    out.write(reply)
    out.flush()
"#;

fn bad_worker_run(mode: &str) {
    let real = std::env::var("NENYAX_PYTHON").expect(
        "NENYAX_PYTHON is not set: run scripts/test.sh, which installs reasoning-gym into .venv \
         and points NENYAX_PYTHON at it",
    );
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-python");
    std::fs::write(&fake, format!("#!{real}{FAKE_WORKER}")).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = dir.path().join("out.jsonl");
    let state = dir.path().to_str().unwrap();
    let o = nenyax(
        &[
            "run",
            "reasoning_gym:basic_arithmetic?size=6&workers=1",
            "-n",
            "6",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            ("NENYAX_PYTHON", fake.to_str().unwrap()),
            ("FAKE_REAL", &real),
            ("FAKE_STATE", state),
            ("FAKE_MODE", mode),
        ],
        Duration::from_secs(300),
    );
    assert!(
        o.code.is_some(),
        "nenyax was killed by a signal: {}",
        o.stderr
    );
    assert!(
        dir.path().join("sabotaged").exists(),
        "the fake worker misbehaved: {}",
        o.stderr
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let trajs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(trajs.len(), 6, "every rollout is in --out: {}", o.stderr);
    let failed: Vec<&str> = trajs.iter().filter_map(|t| t["error"].as_str()).collect();
    assert_eq!(
        failed.len(),
        1,
        "only the sabotaged rollout fails: {failed:?}"
    );
    for n in ["32 MiB limit for bridge worker reply lines", "replaced"] {
        assert!(failed[0].contains(n), "`{n}` missing from: {}", failed[0]);
    }
    assert!(
        trajs
            .iter()
            .filter(|t| t["error"].is_null())
            .all(|t| t["judgment"]["score"] == 1.0),
        "{text}"
    );
    // The misbehaving worker was killed, and the real bridge behind it saw its input close.
    let pids = std::fs::read_to_string(dir.path().join("pids")).unwrap();
    for pid in pids.split_whitespace() {
        let t0 = Instant::now();
        // Gone, or a zombie waiting for whichever process adopted it.
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        }) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "worker process {pid} outlived the run"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_bridge_worker_that_never_ends_its_line_loses_only_its_rollout() {
    bad_worker_run("endless");
}

#[test]
fn a_200_mb_bridge_reply_is_refused_at_the_cap() {
    bad_worker_run("huge");
}

#[test]
fn config_and_harbor_files_that_never_end_are_refused() {
    let deadline = Duration::from_secs(60);
    let needles = [
        "/dev/zero",
        "16 MiB limit for configuration files",
        "NENYAX_MAX_CONFIG_BYTES",
    ];
    let o = nenyax(&["plot", "/dev/zero"], &[], deadline);
    assert_refused(&o, &needles);
    let o = nenyax(
        &["train", "--config", "/dev/zero", "builtin:guess"],
        &[],
        deadline,
    );
    assert_refused(&o, &needles);

    // A Harbor task whose instruction is a link to /dev/zero is refused before any read (its
    // files must lie inside the task), and one whose instruction is a (sparse) file past the
    // cap is refused by its size.
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task");
    std::fs::create_dir(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n",
    )
    .unwrap();
    let instruction = task.join("instruction.md");
    std::os::unix::fs::symlink("/dev/zero", &instruction).unwrap();
    let uri = format!("harbor:{}", task.display());
    let o = nenyax(&["info", &uri], &[], deadline);
    assert_refused(&o, &["instruction.md leads outside the task directory"]);
    std::fs::remove_file(&instruction).unwrap();
    std::fs::File::create(&instruction)
        .unwrap()
        .set_len((16 << 20) + 1)
        .unwrap();
    let o = nenyax(&["info", &uri], &[], deadline);
    assert_refused(
        &o,
        &[
            "instruction.md is larger than the 16 MiB limit for configuration files",
            "NENYAX_MAX_CONFIG_BYTES",
        ],
    );
}

/// An upstream that answers a streamed chat call with events and never the last one, until
/// `bytes` have gone out.
fn endless_stream_upstream(bytes: usize) -> String {
    use std::io::Write;
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            let _ = req.as_reader().read_to_string(&mut body);
            std::thread::spawn(move || {
                let mut w = req.into_writer();
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
                if w.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let event = format!(
                    "data: {}\n\n",
                    serde_json::json!({"id": "s", "choices": [{"index": 0,
                        "delta": {"content": "x".repeat(4000)}}]})
                );
                let mut sent = 0;
                while sent < bytes && w.write_all(event.as_bytes()).is_ok() {
                    sent += event.len();
                }
                let _ = w.flush();
            });
        }
    });
    format!("http://127.0.0.1:{port}/v1")
}

#[test]
fn an_upstream_stream_that_never_ends_is_cut_at_the_cap() {
    use nenyax::{Backend, ModelServer, Upstream};
    use std::sync::Arc;
    // Well past the cap, so that the test ends even where the stream is not cut.
    let up = endless_stream_upstream(160 << 20);
    let server = ModelServer::start().unwrap();
    let rec = server.record(Backend::Upstream(Arc::new(Upstream::new(&up))));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut r = agent
        .post(&format!("{}/chat/completions", rec.base_url()))
        .header("Content-Type", "application/json")
        .send(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}"#)
        .unwrap();
    // Counted by hand: the cut-off stream ends in an error, and the count up to it matters.
    let mut reader = r.body_mut().as_reader();
    let (mut relayed, mut buf) = (0usize, vec![0u8; 1 << 16]);
    while let Ok(n) = reader.read(&mut buf) {
        if n == 0 {
            break;
        }
        relayed += n;
    }
    assert!(relayed <= 64 << 20, "relayed {relayed} bytes");
    let calls = rec.calls();
    let err = calls[0].error.as_deref().unwrap_or_default();
    assert!(
        err.contains("broke off") && err.contains("64 MiB limit for HTTP reply bodies"),
        "{err}"
    );
}

#[test]
fn a_sandbox_file_over_the_cap_is_refused_without_reading_it() {
    use nenyax::sandbox::{BackendKind, Sandbox, SandboxConfig};
    let sb = Sandbox::create(SandboxConfig::new(BackendKind::Process)).unwrap();
    // Code under test writes a file one byte over the cap, in its working directory.
    let r = sb.sh("head -c 67108865 /dev/zero > reward.txt").unwrap();
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
    let e = sb.get("reward.txt").unwrap_err().to_string();
    assert!(
        e.contains("reward.txt is larger than the 64 MiB limit for files read from a sandbox")
            && e.contains("NENYAX_MAX_SANDBOX_FILE_BYTES"),
        "{e}"
    );
    sb.put("reward.txt", b"1", 0o644).unwrap();
    assert_eq!(sb.get("reward.txt").unwrap(), b"1");
}
