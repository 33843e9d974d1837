//! Replay, mutation and the parent/child split of the fuzz harness.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mutate::{mutate, Rng};

/// Set in the child's environment; its value is ignored.
pub const CHILD_ENV: &str = "NENYAX_FUZZ_CHILD";

/// The child's address-space cap: a parser that tries to allocate more is a finding.
const CHILD_MEMORY: u64 = 4 << 30;

/// One thing to fuzz.
pub struct Target {
    /// Its folder name under tests/fuzz/corpus and tests/fuzz/regressions.
    pub name: &'static str,
    /// Runs one input: `Ok` with a short signature of what happened (new signatures steer the
    /// fuzzer), `Err` when a property broke. A panic is caught by the child.
    pub run: fn(&[u8]) -> Result<String, String>,
    /// Longest input the mutator makes.
    pub max_len: usize,
    /// Longest one input may take before it counts as a hang.
    pub timeout: Duration,
    /// Fragments worth inserting, beyond the shared ones.
    pub tokens: &'static [&'static str],
}

/// How one input went.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Ok(String),
    /// A property broke.
    Violation(String),
    Panic(String),
    Hang,
    /// The child died (abort, out of memory, a signal).
    Crash(String),
}

impl Outcome {
    fn failed(&self) -> bool {
        !matches!(self, Outcome::Ok(_))
    }

    /// What identifies the bug rather than the input: a panic's location, a violation's
    /// message without its numbers and quoted parts, or the kind of crash.
    fn signature(&self) -> String {
        match self {
            Outcome::Ok(s) => format!("ok {s}"),
            // Violations say what broke before a colon and show the input after it.
            Outcome::Violation(m) => {
                format!(
                    "violation {}",
                    normalize(m.split(": ").next().unwrap_or(m), "")
                )
            }
            Outcome::Panic(m) => format!("panic {}", m.split(": ").next().unwrap_or(m)),
            Outcome::Hang => "hang".into(),
            Outcome::Crash(m) => format!("crash {}", normalize(m, "")),
        }
    }

    fn describe(&self) -> String {
        match self {
            Outcome::Ok(s) => format!("ok ({s})"),
            Outcome::Violation(m) => format!("property broken: {m}"),
            Outcome::Panic(m) => format!("panicked at {m}"),
            Outcome::Hang => "did not finish in time (hang)".into(),
            Outcome::Crash(m) => format!("crashed the process: {m}"),
        }
    }
}

/// The words of a message that come from its template rather than from the input, so that
/// one bug has one signature: the input itself, quoted parts (`x`, "x"), snippet lines
/// (`1 | text`), numbers and punctuation are dropped.
pub fn normalize(m: &str, input: &str) -> String {
    // A short input could also be a piece of a template word; its own words are dropped below.
    let m = if input.trim().len() < 6 {
        m.to_string()
    } else {
        m.replace(input, "").replace(input.trim(), "")
    };
    let m: String = m
        .lines()
        .filter(|l| !l.contains('|'))
        .collect::<Vec<_>>()
        .join(" ");
    // Words of the input that reach the message in pieces (a field name, a scheme).
    let theirs: HashSet<String> = input
        .split(|c: char| !c.is_ascii_alphabetic())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut unquoted = String::new();
    let mut quote = None;
    for c in m.chars() {
        match (quote, c) {
            (None, '`' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, c) => unquoted.push(c),
            _ => {}
        }
    }
    let mut words: Vec<String> = Vec::new();
    for w in unquoted.split(|c: char| !c.is_ascii_alphabetic()) {
        let w = w.to_ascii_lowercase();
        if w.len() >= 3 && words.last() != Some(&w) && !theirs.contains(&w) {
            words.push(w);
        }
        if words.len() == 12 {
            break;
        }
    }
    words.join(" ")
}

// ---------------------------------------------------------------------------------------------
// The child: run inputs read from stdin, answer on a private descriptor.

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub fn child(targets: &[Target], _: &str) -> ! {
    use std::os::fd::FromRawFd;
    // The answers go to a copy of stdout; stdout itself becomes stderr, so anything the code
    // under test prints cannot corrupt them.
    // SAFETY: dup/dup2 on this process's own standard descriptors.
    let proto = unsafe { libc::dup(1) };
    unsafe { libc::dup2(2, 1) };
    // SAFETY: `proto` was just duplicated and is owned by nothing else.
    let mut answers = unsafe { fs::File::from_raw_fd(proto) };
    let limit = libc::rlimit {
        rlim_cur: CHILD_MEMORY,
        rlim_max: CHILD_MEMORY,
    };
    // SAFETY: setrlimit with a valid struct.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        // A panic inside std or a dependency (`Duration::from_secs_f64`, a slice index) is
        // named by the project's frame that called it, so that each call site is its own bug
        // and the name does not depend on the toolchain's paths.
        let site = if at.starts_with('/') {
            project_frame().unwrap_or_else(|| at.clone())
        } else {
            at.clone()
        };
        let mut p = PANICS.lock().unwrap_or_else(|e| e.into_inner());
        if site == at {
            p.push(format!("{site}: {msg}"));
        } else {
            p.push(format!("{site}: {msg} (in {at})"));
        }
    }));
    let mut stdin = std::io::stdin().lock();
    loop {
        let mut head = [0u8; 5];
        if stdin.read_exact(&mut head).is_err() {
            std::process::exit(0);
        }
        let t = head[0] as usize;
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut input = vec![0u8; len];
        if stdin.read_exact(&mut input).is_err() {
            std::process::exit(0);
        }
        PANICS.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let r = std::panic::catch_unwind(|| (targets[t].run)(&input));
        let panics = std::mem::take(&mut *PANICS.lock().unwrap_or_else(|e| e.into_inner()));
        let (kind, msg) = match (panics.first(), r) {
            (Some(p), _) => (b'P', p.clone()),
            (None, Ok(Ok(sig))) => (b'O', sig),
            (None, Ok(Err(v))) => (b'V', v),
            (None, Err(_)) => (b'P', "unknown: a panic without a message".into()),
        };
        let mut frame = vec![kind];
        frame.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        frame.extend_from_slice(msg.as_bytes());
        if answers.write_all(&frame).is_err() {
            std::process::exit(0);
        }
    }
}

/// The innermost frame of the current backtrace in this repository's code (not the harness).
fn project_frame() -> Option<String> {
    // The workspace's own files appear relative to it (`./core/src/uri.rs:90:72`).
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    bt.lines()
        .filter_map(|l| l.trim().strip_prefix("at ./"))
        .find(|l| !l.starts_with("tests/"))
        .map(str::to_string)
}

// ---------------------------------------------------------------------------------------------
// The parent: one child at a time, replaced after a hang or a crash.

struct Runner {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<(u8, String)>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The stderr reader, done once the child's stderr is closed.
    stderr_done: std::thread::JoinHandle<()>,
}

impl Runner {
    fn start() -> Runner {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .env(CHILD_ENV, "1")
            // glibc reserves 64 MiB of address space per thread arena; a few are enough.
            .env("MALLOC_ARENA_MAX", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("re-run the fuzz binary as its child");
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut head = [0u8; 5];
            if stdout.read_exact(&mut head).is_err() {
                return;
            }
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut msg = vec![0u8; len];
            if stdout.read_exact(&mut msg).is_err() {
                return;
            }
            if tx
                .send((head[0], String::from_utf8_lossy(&msg).into_owned()))
                .is_err()
            {
                return;
            }
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr.clone();
        let stderr_done = std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(stderr_pipe);
            let mut line = String::new();
            while std::io::BufRead::read_line(&mut r, &mut line).unwrap_or(0) > 0 {
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                // Enough for a failed allocation's message and the backtrace printed after it.
                if t.len() == 400 {
                    t.pop_front();
                }
                t.push_back(line.trim_end().to_string());
                line.clear();
            }
        });
        Runner {
            child,
            stdin,
            answers,
            stderr,
            stderr_done,
        }
    }

    fn restart(&mut self) {
        self.stop();
        *self = Runner::start();
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(scratch_root(self.child.id()));
    }

    fn run(&mut self, t: usize, target: &Target, input: &[u8]) -> Outcome {
        let mut frame = vec![t as u8];
        frame.extend_from_slice(&(input.len() as u32).to_le_bytes());
        frame.extend_from_slice(input);
        let sent = self
            .stdin
            .write_all(&frame)
            .and_then(|_| self.stdin.flush());
        let outcome = match sent.map(|_| self.answers.recv_timeout(target.timeout)) {
            Ok(Ok((b'O', sig))) => return Outcome::Ok(sig),
            Ok(Ok((b'V', msg))) => return Outcome::Violation(msg),
            Ok(Ok((_, msg))) => return Outcome::Panic(msg),
            Ok(Err(RecvTimeoutError::Timeout)) => Outcome::Hang,
            Ok(Err(RecvTimeoutError::Disconnected)) | Err(_) => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                // Let the stderr reader catch the child's last words (bounded, in case
                // something the child started still holds the pipe).
                let t0 = Instant::now();
                while !self.stderr_done.is_finished() && t0.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
                // A failed allocation says so, then may print a backtrace after it.
                let why = tail
                    .iter()
                    .find(|l| l.contains("memory allocation of"))
                    .or_else(|| tail.iter().rev().find(|l| !l.trim().is_empty()))
                    .cloned()
                    .unwrap_or_default();
                Outcome::Crash(format!("{status}; {why}"))
            }
        };
        self.restart();
        outcome
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a child's targets keep their files (a folder per child, so runs never collide).
pub fn scratch_root(pid: u32) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{pid}"))
}

// ---------------------------------------------------------------------------------------------
// Corpora, known findings, replay.

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.is_file());
    v.sort();
    v
}

/// tests/fuzz/known.txt: `<target>/<file>  <note>` lines naming regression inputs that still
/// fail today because the fix belongs to another piece of work; `#` starts a comment.
fn known() -> Result<HashMap<String, String>, String> {
    let path = root().join("known.txt");
    let text = fs::read_to_string(&path).unwrap_or_default();
    let mut map = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (file, note) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if !root().join("regressions").join(file).is_file() {
            return Err(format!(
                "{}:{}: `{file}` is not a file under tests/fuzz/regressions",
                path.display(),
                i + 1
            ));
        }
        map.insert(file.to_string(), note.trim().to_string());
    }
    Ok(map)
}

fn fnv(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// The harness's own target: inputs that panic, hang, abort, run out of memory or break a
/// property on purpose, so that every run first proves it still sees each kind of failure.
pub fn self_check_target() -> Target {
    fn run(input: &[u8]) -> Result<String, String> {
        match input {
            b"panic" => panic!("self-check panic"),
            b"hang" => {
                std::thread::sleep(Duration::from_secs(60));
                Ok("woke".into())
            }
            b"abort" => std::process::abort(),
            b"alloc" => {
                // Twice the child's address-space cap: the allocation must fail.
                let v: Vec<u8> =
                    Vec::with_capacity(std::hint::black_box(2 * CHILD_MEMORY as usize));
                Ok(format!("allocated {}", v.capacity()))
            }
            b"violation" => Err("self-check violation".into()),
            _ => Ok("fine".into()),
        }
    }
    Target {
        name: "self-check",
        run,
        max_len: 16,
        timeout: Duration::from_secs(1),
        tokens: &[],
    }
}

fn self_check(runner: &mut Runner, t: usize, target: &Target) -> Vec<String> {
    type Expect = fn(&Outcome) -> bool;
    let cases: [(&[u8], Expect); 6] = [
        (b"fine", |o| matches!(o, Outcome::Ok(_))),
        (
            b"panic",
            |o| matches!(o, Outcome::Panic(m) if m.contains("self-check panic")),
        ),
        (b"violation", |o| matches!(o, Outcome::Violation(_))),
        (b"hang", |o| matches!(o, Outcome::Hang)),
        (b"abort", |o| matches!(o, Outcome::Crash(_))),
        (
            b"alloc",
            |o| matches!(o, Outcome::Crash(m) if m.contains("memory allocation")),
        ),
    ];
    let mut out = Vec::new();
    for (input, want) in cases {
        let got = runner.run(t, target, input);
        if !want(&got) {
            out.push(format!(
                "the harness's self-check `{}` was not seen as intended: {}",
                String::from_utf8_lossy(input),
                got.describe()
            ));
        }
    }
    out
}

pub fn parent(targets: &[Target]) -> i32 {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let check = targets.iter().position(|t| t.name == "self-check");
    let chosen: Vec<usize> = (0..targets.len())
        .filter(|&i| Some(i) != check)
        .filter(|&i| args.is_empty() || args.iter().any(|a| targets[i].name.contains(a.as_str())))
        .collect();
    let known = match known() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("fuzz: {e}");
            return 1;
        }
    };
    let mut runner = Runner::start();
    let mut failures = Vec::new();
    if let Some(c) = check {
        let t0 = Instant::now();
        failures.extend(self_check(&mut runner, c, &targets[c]));
        println!(
            "fuzz: self-check (a panic, a hang, an abort and a failed allocation are each seen) in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    // Per target: the inputs that pass (mutation seeds) and the signatures of known findings
    // (the fuzzer does not report those again).
    let mut seeds: Vec<Vec<Vec<u8>>> = vec![Vec::new(); targets.len()];
    let mut expected: Vec<HashSet<String>> = vec![HashSet::new(); targets.len()];
    let mut seen: Vec<HashSet<String>> = vec![HashSet::new(); targets.len()];
    for &t in &chosen {
        let target = &targets[t];
        let t0 = Instant::now();
        let (mut n, mut k) = (0, 0);
        for kind in ["corpus", "regressions"] {
            for path in files(&root().join(kind).join(target.name)) {
                let input = fs::read(&path).unwrap_or_default();
                let outcome = runner.run(t, target, &input);
                n += 1;
                let rel = format!(
                    "{}/{}",
                    target.name,
                    path.file_name().unwrap_or_default().to_string_lossy()
                );
                let note = (kind == "regressions").then(|| known.get(&rel)).flatten();
                match (outcome.failed(), note) {
                    (false, None) => {
                        seen[t].insert(outcome.signature());
                        seeds[t].push(input);
                    }
                    (true, Some(note)) => {
                        k += 1;
                        println!("fuzz: known ({note}): {kind}/{rel} {}", outcome.describe());
                        expected[t].insert(outcome.signature());
                    }
                    (true, None) => {
                        failures.push(format!("tests/fuzz/{kind}/{rel} {}", outcome.describe()))
                    }
                    (false, Some(note)) => failures.push(format!(
                        "tests/fuzz/regressions/{rel} passes now: remove its line ({note}) from \
                         tests/fuzz/known.txt"
                    )),
                }
            }
        }
        println!(
            "fuzz: {:<10} replayed {n} inputs ({k} known to fail) in {:.1} s",
            target.name,
            t0.elapsed().as_secs_f64()
        );
    }
    let budget: f64 = match std::env::var("NENYAX_FUZZ_SECONDS") {
        Ok(s) => match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => v,
            _ => {
                eprintln!("fuzz: NENYAX_FUZZ_SECONDS must be a number of seconds, got `{s}`");
                return 1;
            }
        },
        Err(_) => 0.0,
    };
    if budget > 0.0 && !chosen.is_empty() {
        let seed = std::env::var("NENYAX_FUZZ_SEED")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        let save = std::env::var("NENYAX_FUZZ_SAVE").is_ok_and(|v| v == "1");
        let each = Duration::from_secs_f64(budget / chosen.len() as f64);
        println!(
            "fuzz: mutating for {:.0} s per target (NENYAX_FUZZ_SEED={seed} repeats this run)",
            each.as_secs_f64()
        );
        let mut rng = Rng(seed | 1);
        for &t in &chosen {
            let found = fuzz_target(
                &mut runner,
                t,
                &targets[t],
                each,
                &mut rng,
                &mut seeds[t],
                &expected[t],
                &mut seen[t],
                save,
            );
            failures.extend(found);
        }
    }
    if failures.is_empty() {
        println!("fuzz: ok");
        0
    } else {
        for f in &failures {
            println!("fuzz: FAILED: {f}");
        }
        1
    }
}

#[allow(clippy::too_many_arguments)]
fn fuzz_target(
    runner: &mut Runner,
    t: usize,
    target: &Target,
    budget: Duration,
    rng: &mut Rng,
    pool: &mut Vec<Vec<u8>>,
    expected: &HashSet<String>,
    seen: &mut HashSet<String>,
    save: bool,
) -> Vec<String> {
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let t0 = Instant::now();
    let (mut execs, mut grown, mut known_hits) = (0u64, 0, 0u64);
    let mut found: HashMap<String, String> = HashMap::new();
    let debug = std::env::var("NENYAX_FUZZ_DEBUG").is_ok_and(|v| v == "1");
    while t0.elapsed() < budget {
        let mut input = pool[rng.below(pool.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut input, pool, target, rng);
        }
        input.truncate(target.max_len);
        let outcome = runner.run(t, target, &input);
        execs += 1;
        let sig = outcome.signature();
        if !outcome.failed() {
            if debug && !seen.contains(&sig) {
                println!("fuzz: new {sig}");
            }
            if seen.insert(sig) && pool.len() < 4000 {
                grown += 1;
                if save {
                    let dir = root().join("corpus").join(target.name);
                    let _ = fs::create_dir_all(&dir);
                    let _ = fs::write(dir.join(fnv(&input)), &input);
                }
                pool.push(input);
            }
            continue;
        }
        if expected.contains(&sig) {
            known_hits += 1;
            continue;
        }
        if found.contains_key(&sig) {
            continue;
        }
        let small = minimize(runner, t, target, input, &sig);
        let dir = root().join("regressions").join(target.name);
        let _ = fs::create_dir_all(&dir);
        let path = dir.join(fnv(&small));
        let _ = fs::write(&path, &small);
        let shown: String = String::from_utf8_lossy(&small).chars().take(300).collect();
        let msg = format!(
            "tests/fuzz/regressions/{}/{} {} (found by mutation; replaying it reproduces it; \
             {} bytes, starting {shown:?})",
            target.name,
            path.file_name().unwrap_or_default().to_string_lossy(),
            outcome.describe(),
            small.len()
        );
        println!("fuzz: FOUND: {msg}");
        found.insert(sig, msg);
    }
    println!(
        "fuzz: {:<10} {execs} runs in {:.0} s ({:.0}/s), {grown} new behaviours, {} new findings, {known_hits} runs hit known ones",
        target.name,
        t0.elapsed().as_secs_f64(),
        execs as f64 / t0.elapsed().as_secs_f64().max(1e-9),
        found.len()
    );
    found.into_values().collect()
}

/// Drop chunks of a failing input while it still fails the same way, so the kept regression
/// case shows the bug rather than the noise around it (at most a few seconds).
fn minimize(runner: &mut Runner, t: usize, target: &Target, input: Vec<u8>, sig: &str) -> Vec<u8> {
    let mut best = input;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut chunk = best.len() / 2;
    // A hang costs a whole timeout per try: keep those as found.
    if sig == "hang" {
        return best;
    }
    while chunk > 0 && Instant::now() < deadline {
        let mut i = 0;
        let mut shrunk = false;
        while i + chunk <= best.len() && Instant::now() < deadline {
            let mut cand = best.clone();
            cand.drain(i..i + chunk);
            if runner.run(t, target, &cand).signature() == sig {
                best = cand;
                shrunk = true;
            } else {
                i += chunk;
            }
        }
        if !shrunk {
            chunk /= 2;
        }
    }
    best
}
