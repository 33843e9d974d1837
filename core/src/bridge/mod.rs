//! The Python bridge: Python-only frameworks run in child processes speaking JSON lines
//! (docs/bridge.md), never inside the host, so no libpython is linked into a C++/Go/Julia
//! trainer. The same workers run executable drivers in any language
//! ([`BridgeConfig::command`], crate::plugins::external). A [`Pool`] keeps one environment
//! instance per worker; a worker that dies, hangs past its timeout or answers garbage is killed
//! and replaced, and only the call it was serving fails.

use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

pub(crate) mod lines;
mod package;
use lines::LineReader;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

pub(crate) mod json;
/// The bridge drivers' old home; they are [`crate::drivers::python`] now.
pub use crate::drivers::python as drivers;
pub mod verifiers;

/// Protocol version this library speaks.
pub const PROTOCOL: u64 = crate::plugins::kinds::DRIVER_PROTOCOL_VERSION as u64;

/// How to start workers.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The interpreter (of the Python bridge; unused when `command` is set).
    pub python: String,
    /// An executable driver's program and arguments, started instead of the Python bridge
    /// package (docs/bridge.md, "Drivers in any language"); `None` runs `python -u -m
    /// nenyax_bridge`.
    pub command: Option<Vec<String>>,
    /// An in-process driver from a library plugin: each worker is one of its instances instead
    /// of a process (takes precedence over `command`).
    pub library: Option<Arc<crate::plugins::driver::LibraryDriver>>,
    /// Longest wait for one reply (and for the handshake plus load of a new worker).
    pub timeout: Duration,
    /// Most workers at once.
    pub workers: usize,
}

impl BridgeConfig {
    /// What workers run, as one string: the identity of a worker for reuse between pools.
    fn program(&self) -> String {
        match (&self.library, &self.command) {
            (Some(l), _) => format!("library {}", l.info().source),
            (None, Some(c)) => format!("command {c:?}"),
            (None, None) => self.python.clone(),
        }
    }

    /// What runs: "python bridge", or an executable driver's program file name.
    fn name(&self) -> String {
        if let Some(l) = &self.library {
            return l.info().name.clone();
        }
        match self.command.as_ref().and_then(|c| c.first()) {
            Some(exe) => program_name(exe),
            None => "python bridge".into(),
        }
    }

    /// How errors name a worker: the Python bridge, or the executable driver by its program.
    fn label(&self) -> String {
        if let Some(l) = &self.library {
            return l.label();
        }
        match &self.command {
            Some(_) => format!("driver `{}`", self.name()),
            None => self.name(),
        }
    }
}

/// An executable's file name (what a user recognises in an error), else the path as given.
fn program_name(exe: &str) -> String {
    std::path::Path::new(exe)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| exe.to_string())
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            python: default_python(),
            command: None,
            library: None,
            timeout: Duration::from_secs(300),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// `NENYAX_PYTHON`, else the managed venv of `nenyax setup` if it exists, else `python3`.
pub fn default_python() -> String {
    if let Ok(p) = std::env::var("NENYAX_PYTHON") {
        if !p.is_empty() {
            return p;
        }
    }
    let managed = managed_venv().join("bin/python");
    if managed.exists() {
        return managed.display().to_string();
    }
    "python3".into()
}

/// Where `nenyax setup` puts its venv: `$XDG_CACHE_HOME/nenyax/venv` or `~/.cache/nenyax/venv`.
pub fn managed_venv() -> std::path::PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("nenyax").join("venv")
}

/// How long a worker polls for the next request, and the host for its reply, before sleeping.
/// Both poll with a yield, so a busy core still runs whatever else is runnable; on the 2-core
/// VM of docs/performance.md this made one worker 2.5x and two workers 1.4x faster than
/// sleeping at once, because waking a halted vCPU costs more than a whole CartPole step.
/// `NENYAX_BRIDGE_SPIN_US=0` turns it off for a trainer that needs every idle cycle for itself.
fn spin_us() -> u64 {
    std::env::var("NENYAX_BRIDGE_SPIN_US")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(200)
}

/// `python -u -m nenyax_bridge` with the package on `PYTHONPATH` and Python's own hygiene.
fn python_command(python: &str) -> Result<Command> {
    // The package's directory first on PYTHONPATH (the worker takes it off again for the
    // programs it starts), the caller's entries after it.
    let mut pythonpath = package::dir()?.as_os_str().to_owned();
    if let Some(theirs) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        pythonpath.push(package::PATH_SEP);
        pythonpath.push(theirs);
    }
    let mut cmd = Command::new(python);
    cmd.args(["-u", "-m", package::MODULE])
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONHASHSEED", "0")
        .env("PYTHONUNBUFFERED", "1");
    Ok(cmd)
}

/// An executable driver: its program and arguments, nothing language-specific.
fn external_command(command: &[String]) -> Result<Command> {
    let Some((program, args)) = command.split_first() else {
        return Err(Error::Config(
            "an executable driver's command is empty; give at least the program".into(),
        ));
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    Ok(cmd)
}

/// How a worker is reached: a child process on pipes, or an in-process driver's instance.
enum Io {
    Process {
        child: Child,
        stdin: ChildStdin,
        lines: LineReader,
    },
    Library(crate::plugins::driver::Instance),
}

impl Io {
    /// Stop a child process (an instance is closed when dropped).
    fn kill(&mut self) {
        if let Io::Process { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How a failure names the worker: its pid, or that it ran in this process.
    fn who(&self) -> String {
        match self {
            Io::Process { child, .. } => format!("pid {}", child.id()),
            Io::Library(_) => "in-process instance".into(),
        }
    }
}

/// One child process, or one instance of an in-process driver.
pub struct Worker {
    io: Io,
    stderr: Arc<Mutex<VecDeque<String>>>,
    next_id: u64,
    timeout: Duration,
    dead: Option<String>,
    /// The cap on a reply line, for the message when a worker breaks it.
    max_line: u64,
    /// How errors name this worker ("python bridge", "driver `nenyax-driver-acme`").
    label: String,
    /// What runs ("python bridge", "nenyax-driver-acme"), for a typed DriverUnavailable.
    name: String,
    /// The handshake line it sent, parsed.
    hello: Value,
}

const STDERR_LINES: usize = 40;

impl Worker {
    /// Start a worker and wait for its handshake.
    pub fn spawn(config: &BridgeConfig) -> Result<Worker> {
        if let Some(lib) = &config.library {
            let (instance, hello) = lib.open()?;
            let w = Worker {
                io: Io::Library(instance),
                stderr: Arc::new(Mutex::new(VecDeque::new())),
                next_id: 0,
                timeout: config.timeout,
                dead: None,
                max_line: crate::limits::BRIDGE_LINE.bytes()?,
                label: config.label(),
                name: config.name(),
                hello: Value::Null,
            };
            return w.handshake(hello.trim_end());
        }
        let mut cmd = match &config.command {
            Some(command) => external_command(command)?,
            None => python_command(&config.python)?,
        };
        let mut child = cmd
            // One worker per core already: numerical libraries must not start a thread pool
            // per worker as well (OpenBLAS's idle threads spin).
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("OMP_NUM_THREADS", "1")
            .env("MKL_NUM_THREADS", "1")
            .env("NENYAX_BRIDGE_SPIN_US", spin_us().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| match &config.command {
                Some(command) => Error::DriverUnavailable {
                    driver: program_name(&command[0]),
                    missing: format!(
                        "cannot start the driver executable `{}` ({e}); check that it exists \
                         and is executable, or fix its `command` in the plugins config",
                        command[0]
                    ),
                },
                None => Error::DriverUnavailable {
                    driver: "python bridge".into(),
                    missing: format!(
                        "cannot start the interpreter `{}` ({e}); install Python 3.10+ or set \
                         NENYAX_PYTHON",
                        config.python
                    ),
                },
            })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let max_line = crate::limits::BRIDGE_LINE.bytes()?;
        let lines = LineReader::new(
            stdout,
            Duration::from_micros(spin_us()),
            usize::try_from(max_line).unwrap_or(usize::MAX),
        )
        .map_err(|e| Error::io("cannot set up the bridge worker's stdout", e))?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr.clone();
        std::thread::Builder::new()
            .name("nenyax-bridge-err".into())
            .spawn(move || {
                read_stderr(stderr_pipe, |line| {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    if t.len() == STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(line);
                })
            })
            .map_err(|e| Error::io("cannot start a bridge reader thread", e))?;
        let mut w = Worker {
            io: Io::Process {
                child,
                stdin,
                lines,
            },
            stderr,
            next_id: 0,
            timeout: config.timeout,
            dead: None,
            max_line,
            label: config.label(),
            name: config.name(),
            hello: Value::Null,
        };
        let hello = w.read_line(config.timeout, "the handshake")?;
        w.handshake(&hello)
    }

    /// Check the handshake line a new worker sent.
    fn handshake(self, hello: &str) -> Result<Worker> {
        let mut w = self;
        let v: Value = match serde_json::from_str(hello) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(w.fail(not_a_handshake(hello))),
        };
        match v.get("nenyax_bridge") {
            Some(theirs) if theirs.as_u64() == Some(PROTOCOL) => {}
            Some(theirs) => {
                let cause = format!(
                    "speaks bridge protocol {theirs}; this Nenyax speaks {PROTOCOL}; use a driver \
                     built for protocol {PROTOCOL} or a Nenyax that speaks {theirs} \
                     (docs/bridge.md)"
                );
                return Err(w.refuse(cause));
            }
            None => return Err(w.fail(not_a_handshake(hello))),
        }
        w.hello = v;
        Ok(w)
    }

    /// The handshake the worker sent (`{"nenyax_bridge": 1, ...}`), e.g. for a driver's version.
    pub fn hello(&self) -> &Value {
        &self.hello
    }

    /// Stop a worker that cannot be used at all (another protocol): an error naming what it is,
    /// not that it "was replaced", since a new one would be refused the same way.
    fn refuse(&mut self, cause: String) -> Error {
        self.io.kill();
        let msg = format!("{} {cause}", self.label);
        self.dead = Some(msg.clone());
        Error::DriverUnavailable {
            driver: self.name.clone(),
            missing: msg,
        }
    }

    /// The last lines the child wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// True once the worker failed and must be replaced.
    pub fn is_dead(&self) -> bool {
        self.dead.is_some()
    }

    fn fail(&mut self, cause: String) -> Error {
        if let Io::Process { .. } = self.io {
            self.io.kill();
            // Give the stderr reader a moment to drain what the child wrote before dying.
            std::thread::sleep(Duration::from_millis(20));
        }
        let tail = self.stderr_tail();
        let msg = format!(
            "{} worker ({}) {cause}; it was replaced{}",
            self.label,
            self.io.who(),
            if tail.is_empty() {
                String::new()
            } else {
                format!("; its stderr ended with:\n{tail}")
            }
        );
        self.dead = Some(msg.clone());
        Error::Environment(msg)
    }

    fn read_line(&mut self, timeout: Duration, what: &str) -> Result<String> {
        let Io::Process { lines, child, .. } = &mut self.io else {
            return Err(self.fail(format!(
                "cannot be read from as a process while answering {what}"
            )));
        };
        let read = lines.read_line(timeout);
        let status = |e: &std::io::Error, child: &mut Child| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                child
                    .wait()
                    .ok()
                    .map(|s| format!("exited ({s})"))
                    .unwrap_or_else(|| "exited".into())
            } else {
                format!("could not be read from ({e})")
            }
        };
        let exited = match &read {
            Err(e) if e.kind() != std::io::ErrorKind::InvalidData => Some(status(e, child)),
            _ => None,
        };
        match read {
            Ok(Some(l)) => Ok(l),
            Ok(None) => Err(self.fail(format!("did not answer {what} within {timeout:?}"))),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let limit = crate::limits::BRIDGE_LINE;
                let cause = format!(
                    "sent a line longer than the {} limit for {} in answer to {what} (if the \
                     environment's replies really are that large, raise it with {}=<bytes>)",
                    crate::limits::human(self.max_line),
                    limit.what,
                    limit.env.unwrap_or_default()
                );
                Err(self.fail(cause))
            }
            Err(_) => {
                let status = exited.unwrap_or_else(|| "exited".into());
                Err(self.fail(format!("{status} before answering {what}")))
            }
        }
    }

    /// Send one request and wait for its reply; a failed reply is a typed error, a broken
    /// worker is killed (and reported so the pool replaces it).
    pub fn call(&mut self, op: &str, args: Value) -> Result<Value> {
        if let Some(why) = &self.dead {
            return Err(Error::Environment(why.clone()));
        }
        self.next_id += 1;
        let id = self.next_id;
        let mut req = match args {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        req.insert("id".into(), json!(id));
        req.insert("op".into(), json!(op));
        let line = Value::Object(req).to_string();
        let reply = match &mut self.io {
            Io::Library(instance) => match instance.call(&line) {
                Ok(reply) => reply,
                Err(why) => return Err(self.fail(format!("failed `{op}` ({why})"))),
            },
            Io::Process { stdin, .. } => {
                let sent = stdin
                    .write_all(line.as_bytes())
                    .and_then(|_| stdin.write_all(b"\n"))
                    .and_then(|_| stdin.flush());
                if let Err(e) = sent {
                    return Err(self.fail(format!("could not be written to ({e})")));
                }
                self.read_line(self.timeout, &format!("`{op}`"))?
            }
        };
        if reply.len() as u64 > self.max_line {
            let limit = crate::limits::BRIDGE_LINE;
            return Err(self.fail(limit.exceeded(&format!("its reply to `{op}`"), self.max_line)));
        }
        let v: Value = match serde_json::from_str(&reply) {
            Ok(v) => v,
            Err(_) => {
                return Err(self.fail(format!("answered `{op}` with garbage: {}", clip(&reply))))
            }
        };
        if v.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(self.fail(format!("answered `{op}` out of turn: {}", clip(&reply))));
        }
        match v.get("ok") {
            Some(Value::Bool(true)) => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
            Some(Value::Bool(false)) => Err(remote_error(v.get("error").unwrap_or(&Value::Null))),
            _ => Err(self.fail(format!("answered `{op}` without `ok`: {}", clip(&reply)))),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Reap the child: no zombies, no orphans (an instance closes in its own Drop).
        self.io.kill();
    }
}

/// Hand each stderr line to `keep`, cut to [`crate::limits::BRIDGE_STDERR_LINE`]: only a tail
/// of them is kept, and a worker that writes without a newline must not grow one line forever.
fn read_stderr(mut pipe: impl Read, mut keep: impl FnMut(String)) {
    let cap = crate::limits::BRIDGE_STDERR_LINE.default as usize;
    let (mut line, mut cut) = (Vec::new(), false);
    let mut buf = [0u8; 8192];
    let mut emit = |line: &mut Vec<u8>, cut: &mut bool| {
        let mut s = String::from_utf8_lossy(line).into_owned();
        if *cut {
            s.push_str(" [cut]");
        }
        keep(s);
        line.clear();
        *cut = false;
    };
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut rest = &buf[..n];
        loop {
            let (piece, done) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], Some(i + 1)),
                None => (rest, None),
            };
            let room = cap.saturating_sub(line.len()).min(piece.len());
            line.extend_from_slice(&piece[..room]);
            cut |= room < piece.len();
            match done {
                Some(i) => {
                    emit(&mut line, &mut cut);
                    rest = &rest[i..];
                }
                None => break,
            }
        }
    }
    if !line.is_empty() {
        emit(&mut line, &mut cut);
    }
}

/// What a worker whose first line is not a handshake is told it sent.
fn not_a_handshake(line: &str) -> String {
    let sent = if line.trim().is_empty() {
        "an empty line".to_string()
    } else {
        format!("`{}`", clip(line))
    };
    format!("sent {sent} instead of a handshake (`{{\"nenyax_bridge\": {PROTOCOL}, ...}}`)")
}

fn clip(s: &str) -> String {
    s.chars().take(200).collect()
}

pub(crate) fn remote_error(e: &Value) -> Error {
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let message = s("message");
    match s("kind").as_str() {
        "MissingPackage" => Error::DriverUnavailable {
            driver: s("package"),
            missing: message,
        },
        // The driver and target are filled in by the caller, which knows them.
        "UnknownTarget" => Error::UnknownTarget {
            driver: String::new(),
            target: String::new(),
            available: vec![message],
        },
        "UnknownParameter" => Error::UnknownParameter {
            driver: s("driver"),
            param: s("param"),
            suggestion: None,
            accepted: e
                .get("accepted")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        },
        "InvalidParameter" => Error::Config(message),
        "InvalidAction" => Error::InvalidAction {
            env: s("env"),
            action: s("action"),
            reason: message,
        },
        kind => Error::Environment(format!("{kind}: {message}")),
    }
}

/// Loaded workers of dropped pools, kept while a [`Recycling`] scope is open, so that a pool
/// loading the same environment (same interpreter, timeout and `load` request) adopts one
/// instead of starting an interpreter and importing the framework again. `nenyax check` drops
/// its fresh instance before the parallel check needs a second worker for the first.
static SPARES: Mutex<Spares> = Mutex::new(Spares {
    scopes: 0,
    idle: Vec::new(),
});

/// At most this many workers wait for adoption; more are stopped.
const MAX_SPARES: usize = 8;

struct Spares {
    scopes: usize,
    idle: Vec<(String, Worker)>,
}

fn spares() -> std::sync::MutexGuard<'static, Spares> {
    SPARES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keep `w`, a worker that has only answered `probe` (so it is as good as a new interpreter),
/// for the next pool that starts a worker with the same interpreter, while a [`Recycling`]
/// scope is open: loading an environment probes its driver first, and that interpreter then
/// serves the load instead of a second one being started.
pub(crate) fn keep_probed(w: Worker, config: &BridgeConfig) {
    let mut s = spares();
    if s.scopes > 0 && s.idle.len() < MAX_SPARES && !w.is_dead() {
        s.idle.push((format!("probed\n{}", config.program()), w));
    }
}

/// A worker kept by [`keep_probed`] for `config`'s interpreter, else a new one.
fn spawn_or_reuse(config: &BridgeConfig) -> Result<Worker> {
    let key = format!("probed\n{}", config.program());
    let kept = {
        let mut s = spares();
        let i = s.idle.iter().position(|(k, _)| *k == key);
        i.map(|i| s.idle.swap_remove(i).1)
    };
    match kept {
        Some(mut w) => {
            w.timeout = config.timeout;
            Ok(w)
        }
        None => Worker::spawn(config),
    }
}

/// While a value of this type lives, workers of dropped pools wait for adoption by a pool that
/// loads the same environment; when the last one ends, the waiting workers are stopped. The
/// first worker of every pool is always a fresh interpreter: only extra workers are adopted.
pub struct Recycling(());

impl Recycling {
    /// Open a scope.
    pub fn start() -> Recycling {
        spares().scopes += 1;
        Recycling(())
    }
}

impl Drop for Recycling {
    fn drop(&mut self) {
        let stopped = {
            let mut s = spares();
            s.scopes -= 1;
            if s.scopes == 0 {
                std::mem::take(&mut s.idle)
            } else {
                Vec::new()
            }
        };
        // Workers are stopped (killed and reaped) outside the lock.
        drop(stopped);
    }
}

/// A pool of workers that all hold the same loaded environment.
pub struct Pool {
    config: BridgeConfig,
    load: Value,
    state: Mutex<PoolState>,
    freed: Condvar,
}

struct PoolState {
    idle: Vec<Worker>,
    live: usize,
}

impl Pool {
    /// A pool whose workers each run `load` (the `load` request's arguments) when started.
    pub fn new(config: BridgeConfig, load: Value) -> Arc<Pool> {
        Arc::new(Pool {
            config,
            load,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                live: 0,
            }),
            freed: Condvar::new(),
        })
    }

    /// Start one worker now and return what `load` answered (the environment's description).
    pub fn start(self: &Arc<Self>) -> Result<Value> {
        let mut lease = self.checkout_with(true)?;
        lease
            .loaded
            .take()
            .ok_or_else(|| Error::Environment("bridge: no load reply".into()))
    }

    /// A worker for exclusive use until the lease is dropped; waits while all are busy.
    pub fn checkout(self: &Arc<Self>) -> Result<Lease> {
        self.checkout_with(false)
    }

    fn checkout_with(self: &Arc<Self>, fresh: bool) -> Result<Lease> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if !fresh {
                if let Some(w) = st.idle.pop() {
                    return Ok(Lease {
                        worker: Some(w),
                        pool: self.clone(),
                        loaded: None,
                    });
                }
            }
            if st.live < self.config.workers.max(1) || fresh {
                st.live += 1;
                drop(st);
                if !fresh {
                    if let Some(w) = self.adopt() {
                        return Ok(Lease {
                            worker: Some(w),
                            pool: self.clone(),
                            loaded: None,
                        });
                    }
                }
                let started = spawn_or_reuse(&self.config).and_then(|mut w| {
                    let loaded = w.call("load", self.load.clone())?;
                    Ok((w, loaded))
                });
                return match started {
                    Ok((w, loaded)) => Ok(Lease {
                        worker: Some(w),
                        pool: self.clone(),
                        loaded: Some(loaded),
                    }),
                    Err(e) => {
                        self.release_slot();
                        Err(e)
                    }
                };
            }
            st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// What identifies the environment the workers hold, for adoption between pools.
    fn key(&self) -> String {
        format!(
            "{}\n{:?}\n{}",
            self.config.program(),
            self.config.timeout,
            self.load
        )
    }

    /// An idle worker of a dropped pool that loaded the same environment, if one waits.
    fn adopt(&self) -> Option<Worker> {
        let key = self.key();
        let mut s = spares();
        let i = s.idle.iter().position(|(k, _)| *k == key)?;
        Some(s.idle.swap_remove(i).1)
    }

    fn release_slot(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.live -= 1;
        self.freed.notify_one();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let idle =
            std::mem::take(&mut self.state.get_mut().unwrap_or_else(|p| p.into_inner()).idle);
        let key = self.key();
        let mut s = spares();
        if s.scopes == 0 {
            return;
        }
        for w in idle {
            if s.idle.len() < MAX_SPARES && !w.is_dead() {
                s.idle.push((key.clone(), w));
            }
        }
    }
}

/// Exclusive use of one worker; returned to the pool on drop, or discarded if it broke.
pub struct Lease {
    worker: Option<Worker>,
    pool: Arc<Pool>,
    loaded: Option<Value>,
}

impl Lease {
    /// Call the worker.
    pub fn call(&mut self, op: &str, args: Value) -> Result<Value> {
        self.worker
            .as_mut()
            .expect("held until drop")
            .call(op, args)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            if w.is_dead() {
                drop(w);
                self.pool.release_slot();
            } else {
                let mut st = self.pool.state.lock().unwrap_or_else(|p| p.into_inner());
                st.idle.push(w);
                self.pool.freed.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_lines_are_cut_at_the_cap() {
        let cap = crate::limits::BRIDGE_STDERR_LINE.default as usize;
        let mut input = b"first\n".to_vec();
        input.extend(std::iter::repeat(b'x').take(cap * 3));
        input.extend_from_slice(b"\nlast");
        let mut got = Vec::new();
        read_stderr(&input[..], |l| got.push(l));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], "first");
        assert_eq!(got[1], format!("{} [cut]", "x".repeat(cap)));
        assert_eq!(got[2], "last");
    }
}
