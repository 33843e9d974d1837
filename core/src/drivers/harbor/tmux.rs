//! A real terminal for the terminus agent: one tmux session inside the sandbox, driven as
//! Terminal-Bench's terminus-2 drives it (keystrokes, a wait of each command's duration,
//! screen capture and the output that is new since the last look).
//!
//! No backend lets a daemonized tmux server outlive the exec that started it: a jail's exec is
//! its own PID namespace, which dies with the command; the container backend kills what each
//! command leaves behind (by its per-command marker); the process backend kills the sandbox's
//! marked processes after every exec. So the server is hosted by one long exec on a scoped
//! thread (a loop that ends when the agent is done or the session is gone), and when it ends
//! the backend's own cleanup takes everything the agent started in the terminal with it.
//! Clients are further execs that reach the server through its socket in the sandbox's private
//! /tmp (jail, container), or, on the process backend, where a further exec would sweep the
//! server away, run directly on the host (the process backend's commands see the host anyway)
//! as the sandbox's user.
//!
//! Every client call is one shell script (send the keys, wait, look), so a turn costs one exec
//! per command batch, not one per poll.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command as HostCommand, Stdio};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sandbox::{BackendKind, Exec, ExecResult, Sandbox};

/// Bytes of terminal output shown to the model per observation (as terminus-2).
pub const OUTPUT_LIMIT: usize = 10_000;

/// One command of a terminus response: keys to type, then a wait.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Sent verbatim; `\n` is Enter.
    pub keystrokes: String,
    /// Seconds to wait (capped at 60).
    pub duration: f64,
}

/// Cap `s` at `limit` bytes: the first half, a note, the last half.
pub fn cap_output(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_string();
    }
    let half = limit / 2;
    let mut a = half;
    while !s.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = s.len() - half;
    while !s.is_char_boundary(b) {
        b += 1;
    }
    format!(
        "{}\n[... output limited to {limit} bytes; {} interior bytes omitted ...]\n{}",
        &s[..a],
        b - a,
        &s[b..]
    )
}

/// Columns of the terminal (terminus-2's default).
pub const WIDTH: u16 = 160;
/// Rows of the terminal (terminus-2's default).
pub const HEIGHT: u16 = 40;
/// Lines of scrollback kept, so that output new since the last look can be found again.
pub const HISTORY_LIMIT: u32 = 50_000;
/// Where the agent's terminal session is logged (raw bytes, as `script` would).
pub const SESSION_LOG: &str = "/logs/agent/terminal.log";
/// Where the session's plain-text scrollback is written when the agent is done.
pub const SESSION_TEXT: &str = "/logs/agent/terminal.txt";

const DIR: &str = "/tmp/.nenyax/tmux";
const SESSION: &str = "nenyax";
/// How often the wait looks at the screen to return early once a command is done.
const POLL_US: u64 = 50_000;
/// Slack on top of the waits for one client script (tmux calls, a slow container exec).
const CLIENT_SLACK: Duration = Duration::from_secs(30);
const BASE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How the terminus agent's keystrokes reach the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalMode {
    /// tmux when the sandbox has it, else bash (the reason is recorded).
    Auto,
    /// A tmux session: interactive programs work.
    Tmux,
    /// Each batch of keystrokes runs as one bash script; nothing interactive survives.
    Bash,
}

impl TerminalMode {
    /// Parse the `terminal` URI parameter.
    pub fn parse(driver: &str, s: &str) -> Result<TerminalMode> {
        match s {
            "auto" | "" => Ok(TerminalMode::Auto),
            "tmux" => Ok(TerminalMode::Tmux),
            "bash" => Ok(TerminalMode::Bash),
            other => Err(Error::InvalidParameter {
                driver: driver.into(),
                param: "terminal".into(),
                value: other.into(),
                expected: "`tmux` (a real terminal), `bash` (each batch of keystrokes as one \
                           script) or `auto` (tmux when the sandbox has it)"
                    .into(),
            }),
        }
    }

    /// The name as the URI parameter spells it.
    pub fn name(self) -> &'static str {
        match self {
            TerminalMode::Auto => "auto",
            TerminalMode::Tmux => "tmux",
            TerminalMode::Bash => "bash",
        }
    }
}

/// What the terminal showed after a batch of commands.
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    /// What the model is told: `New Terminal Output:` and the lines new since the last look,
    /// or `Current Terminal Screen:` and the screen when there is nothing new to show or the
    /// new lines cannot be found (a full-screen program, a cleared screen).
    pub text: String,
    /// The visible screen, trailing blank lines dropped.
    pub screen: String,
}

/// A tmux session in a sandbox. Dropping it closes it.
pub struct Tmux<'s> {
    sb: &'s Sandbox,
    /// The socket as commands in the sandbox name it.
    sock: String,
    /// Clients run on the host (process backend) as this user, or in the sandbox (`None`).
    host_client: Option<HostClient>,
    /// The server's hosting exec, which ends when the session does.
    hosting: Option<ScopedJoinHandle<'s, Result<ExecResult>>>,
    /// The shell the pane runs, as `pane_current_command` names it: back in the foreground
    /// means the command is done.
    shell: String,
    /// Absolute line of the cursor at the last look, and the scrollback length then.
    last_line: i64,
    last_history: i64,
    nonce: String,
    closed: bool,
}

#[derive(Debug, Clone)]
struct HostClient {
    run_as: Option<(u32, u32)>,
    home: PathBuf,
}

/// Quote `s` for a POSIX shell.
fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// True when `k` as a whole is a key tmux names (`C-c`, `Escape`, `Up`, `F5`, `M-x`, `^D`):
/// terminus-2 sends such keystrokes as that key, and anything else as literal text.
pub fn is_key_name(k: &str) -> bool {
    const NAMED: [&str; 30] = [
        "Enter", "Escape", "Tab", "BTab", "BSpace", "Space", "Up", "Down", "Left", "Right", "Home",
        "End", "PageUp", "PgUp", "PageDown", "PgDn", "PPage", "NPage", "IC", "Insert", "DC",
        "Delete", "KPEnter", "KP0", "KP1", "KP2", "KP3", "KP4", "KP5", "KP6",
    ];
    let mut rest = k;
    let mut modified = false;
    while rest.len() > 2 && matches!(&rest[..2], "C-" | "M-" | "S-") {
        rest = &rest[2..];
        modified = true;
    }
    if let Some(c) = rest.strip_prefix('^') {
        return !modified && c.chars().count() == 1;
    }
    if NAMED.contains(&rest) {
        return true;
    }
    if let Some(n) = rest.strip_prefix('F') {
        if let Ok(n) = n.parse::<u8>() {
            return (1..=12).contains(&n);
        }
    }
    modified && rest.chars().count() == 1
}

/// The shell lines that type one command's keystrokes: a key name as that key, else the text
/// literally with each `\n` as Enter (long text in pieces tmux accepts).
fn send_lines(keystrokes: &str) -> String {
    let k = keystrokes.replace('\0', "");
    if k.is_empty() {
        return String::new();
    }
    if is_key_name(&k) {
        return format!("tm send-keys -t {SESSION} {}\n", q(&k));
    }
    let mut out = String::new();
    let parts: Vec<&str> = k.split('\n').collect();
    for (i, part) in parts.iter().enumerate() {
        let mut rest = *part;
        while !rest.is_empty() {
            let mut cut = rest.len().min(2048);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push_str(&format!(
                "tm send-keys -t {SESSION} -l -- {}\n",
                q(&rest[..cut])
            ));
            rest = &rest[cut..];
        }
        if i + 1 < parts.len() {
            out.push_str(&format!("tm send-keys -t {SESSION} Enter\n"));
        }
    }
    out
}

/// Split off `prefix` + the first line of `s` (a marker line) and return (marker rest, after).
fn after_marker<'a>(s: &'a str, marker: &str) -> Option<(&'a str, &'a str)> {
    let at = s.find(marker)?;
    let rest = &s[at + marker.len()..];
    let (line, after) = rest.split_once('\n').unwrap_or((rest, ""));
    Some((line.trim(), after))
}

fn trim_screen(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(0, |i| i + 1);
    lines[..end].join("\n")
}

impl<'s> Tmux<'s> {
    /// Whether the sandbox can run a tmux session, and if not, why (for the trajectory).
    pub fn available(sb: &Sandbox) -> std::result::Result<(), String> {
        let probe = "command -v tmux >/dev/null 2>&1 || { echo 'no tmux'; exit 1; }\n\
                     command -v bash >/dev/null 2>&1 || { echo 'no bash'; exit 1; }\n";
        let r = match sb.backend() {
            BackendKind::Process => host_run(&host_client(sb), probe, Duration::from_secs(10)),
            _ => sb
                .exec(
                    &Exec::argv(["sh", "-c", probe])
                        .cwd("/tmp")
                        .timeout(Duration::from_secs(30)),
                )
                .map_err(|e| e.to_string()),
        };
        let where_ = match sb.backend() {
            BackendKind::Container => {
                "the container's image; install it in the task's Dockerfile (RUN apt-get \
                 install -y tmux)"
            }
            _ => "this machine; install it (apt-get install tmux)",
        };
        match r {
            Ok(r) if r.ok() => Ok(()),
            Ok(r) if r.stdout.contains("no tmux") => {
                Err(format!("tmux is not installed in {where_}"))
            }
            Ok(r) if r.stdout.contains("no bash") => Err(format!(
                "bash is not installed in {where_}; the terminal's shell is bash"
            )),
            Ok(r) => Err(format!(
                "could not look for tmux in the sandbox: {}{}",
                r.stdout, r.stderr
            )),
            Err(e) => Err(format!("could not look for tmux in the sandbox: {e}")),
        }
    }

    /// Start the session: a `WIDTH`x`HEIGHT` terminal running bash in the sandbox's workdir,
    /// logged to [`SESSION_LOG`], its server hosted by an exec on `scope` that `deadline`
    /// bounds.
    pub fn open<'env>(
        scope: &'s Scope<'s, 'env>,
        sb: &'env Sandbox,
        deadline: Duration,
    ) -> Result<Tmux<'s>> {
        let backend = sb.backend();
        let host = backend == BackendKind::Process;
        let path = |p: &str| -> Result<String> {
            Ok(if host {
                sb.host_path(p)?.to_string_lossy().into_owned()
            } else {
                p.to_string()
            })
        };
        // The socket dir and the config are written through the sandbox, so the sandbox's
        // user owns them.
        let conf = format!(
            "set -g history-limit {HISTORY_LIMIT}\nset -g status off\nset -g default-command \"exec $SHELL\"\nset -g remain-on-exit off\n"
        );
        sb.put(&format!("{DIR}/tmux.conf"), conf.as_bytes(), 0o644)?;
        sb.put("/logs/agent/.keep", b"", 0o644)?;
        sb.remove("/logs/agent/.keep")?;
        let sock = path(&format!("{DIR}/sock"))?;
        let closing = path(&format!("{DIR}/closing"))?;
        sb.remove(&format!("{DIR}/closing"))?;
        if sock.len() > 100 {
            return Err(Error::Sandbox(format!(
                "the terminal's socket path {sock} is longer than a Unix socket allows; set \
                 TMPDIR to a shorter directory"
            )));
        }
        let nonce = format!(
            "NX{}{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        );
        let mut t = Tmux {
            sb,
            sock: sock.clone(),
            host_client: host.then(|| host_client(sb)),
            hosting: None,
            shell: "bash".into(),
            last_line: 0,
            last_history: 0,
            nonce,
            closed: false,
        };
        let start = format!(
            "S={sock}\nexport SHELL=\"$(command -v bash)\"\n\
             tmux -S \"$S\" -f {conf} new-session -d -s {SESSION} -x {WIDTH} -y {HEIGHT} -c {cwd} || exit $?\n\
             tmux -S \"$S\" pipe-pane -o -t {SESSION} {pipe} || exit $?\n",
            sock = q(&sock),
            conf = q(&path(&format!("{DIR}/tmux.conf"))?),
            cwd = q(&path(&sb.config().workdir)?),
            pipe = q(&format!("cat >> {}", q(&path(SESSION_LOG)?))),
        );
        if backend == BackendKind::Jail {
            // A jail lays out its root on its first exec, and two first execs at once race
            // on that layout (EEXIST): make it before the hosting exec and a client overlap.
            sb.exec(&Exec::argv(["true"]).cwd("/tmp").timeout(CLIENT_SLACK))?;
        }
        // Until close() flags it, or the session or its socket is gone (the agent ended
        // the shell, killed the server or removed /tmp/.nenyax).
        let script = format!(
            "{start}i=0\n\
             while [ -S \"$S\" ] && [ ! -e {closing} ]; do\n\
               sleep 0.2; i=$((i + 1))\n\
               if [ $((i % 10)) = 0 ] && ! tmux -S \"$S\" has-session -t {SESSION} 2>/dev/null; then break; fi\n\
             done\n\
             tmux -S \"$S\" kill-server 2>/dev/null\nexit 0\n",
            closing = q(&closing),
        );
        let exec = Exec::argv(["bash", "-c", script.as_str()])
            .cwd("/tmp")
            .timeout(deadline);
        t.hosting = Some(scope.spawn(move || sb.exec(&exec)));
        // The session is up once a client can see it; a start that failed ends the
        // hosting exec, whose output says why.
        let t0 = Instant::now();
        loop {
            if t.client(
                &format!("tm has-session -t {SESSION}\n"),
                Duration::from_secs(10),
            )?
            .ok()
            {
                break;
            }
            if t.hosting.as_ref().is_some_and(|h| h.is_finished()) {
                t.closed = true;
                let r = t.hosting.take().expect("checked above").join();
                return Err(match r {
                    Ok(Ok(r)) => start_error(&r.stdout, &r.stderr),
                    Ok(Err(e)) => e,
                    Err(_) => Error::Sandbox("the terminal's hosting thread panicked".into()),
                });
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(Error::Sandbox(
                    "the terminal's tmux session did not come up within 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = t.client(
            &format!("tm display -p -t {SESSION} '#{{pane_current_command}}'\n"),
            Duration::from_secs(10),
        )?;
        if r.ok() && !r.stdout.trim().is_empty() {
            t.shell = r.stdout.trim().to_string();
        }
        Ok(t)
    }

    /// Run a client script (with `tm` = tmux on the session's socket).
    fn client(&self, body: &str, timeout: Duration) -> Result<ExecResult> {
        let script = format!("tm() {{ tmux -S {} \"$@\"; }}\n{body}", q(&self.sock));
        match &self.host_client {
            Some(h) => host_run(h, &script, timeout).map_err(Error::Sandbox),
            None => self.sb.exec(
                &Exec::argv(["bash", "-s"])
                    .stdin(script)
                    .cwd("/tmp")
                    .timeout(timeout),
            ),
        }
    }

    /// The first look: the screen as it is now (after the shell's prompt appeared).
    pub fn first_look(&mut self) -> Result<Look> {
        let t0 = Instant::now();
        loop {
            let look = self.run_batch(&[], Duration::from_secs(5))?;
            if !look.screen.trim().is_empty() || t0.elapsed() > Duration::from_secs(3) {
                return Ok(Look {
                    text: format!("Current Terminal Screen:\n{}", look.screen),
                    screen: look.screen,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Type each command's keystrokes, wait its duration (returning early once the shell is
    /// back in the foreground and the screen has settled), then look at the terminal. The
    /// waits together stay within `left`.
    pub fn run_batch(&mut self, commands: &[Command], left: Duration) -> Result<Look> {
        let mut budget = left.as_micros() as u64;
        let mut body = format!(
            "tm has-session -t {SESSION} 2>/dev/null || {{ echo {n}GONE; exit 3; }}\n\
             settle() {{\n\
               if [ -z \"${{EPOCHREALTIME:-}}\" ]; then sleep \"$(( $1 / 1000000 )).$(printf '%06d' $(( $1 % 1000000 )))\"; return; fi\n\
               local end=$(( ${{EPOCHREALTIME/./}} + $1 )) now nap prev= cur= fg\n\
               while :; do\n\
                 now=${{EPOCHREALTIME/./}}\n\
                 [ \"$now\" -ge \"$end\" ] && return\n\
                 nap=$(( end - now )); [ $nap -gt {POLL_US} ] && nap={POLL_US}\n\
                 sleep \"$(printf '0.%06d' \"$nap\")\"\n\
                 fg=$(tm display -p -t {SESSION} '#{{pane_current_command}}')\n\
                 cur=$(tm capture-pane -p -t {SESSION} | cksum)\n\
                 [ \"$fg\" = {shell} ] && [ \"$cur\" = \"$prev\" ] && return\n\
                 prev=$cur\n\
               done\n\
             }}\n",
            n = self.nonce,
            shell = q(&self.shell),
        );
        let mut waits = 0u64;
        for c in commands {
            body.push_str(&send_lines(&c.keystrokes));
            let us = ((c.duration.max(0.0) * 1e6) as u64).min(budget);
            budget -= us;
            waits += us;
            if us > 0 {
                body.push_str(&format!("settle {us}\n"));
            }
        }
        let (n, limit, half) = (&self.nonce, OUTPUT_LIMIT, OUTPUT_LIMIT / 2);
        body.push_str(&format!(
            "set -- $(tm display -p -t {SESSION} '#{{history_size}} #{{cursor_y}} #{{alternate_on}}')\n\
             h=$1 cy=$2\n\
             echo {n}STATE \"$@\"\n\
             tm capture-pane -p -t {SESSION}\n\
             echo {n}NEW\n\
             start=$(( {last} - h )); [ $start -lt $(( -h )) ] && start=$(( -h ))\n\
             f={dir}/capture\n\
             tm capture-pane -p -J -t {SESSION} -S $start -E $cy > \"$f\"\n\
             size=$(wc -c < \"$f\")\n\
             echo {n}SIZE $size\n\
             if [ $size -gt {limit} ]; then head -c {half} \"$f\"; echo; echo {n}CUT; tail -c {half} \"$f\"; else cat \"$f\"; fi\n",
            last = self.last_line,
            dir = q(&self.dir_path()),
        ));
        let r = self.client(&body, Duration::from_micros(waits) + CLIENT_SLACK)?;
        if r.stdout.contains(&format!("{n}GONE")) || r.stderr.contains("no server running") {
            return Err(Error::Environment(
                "the terminal's tmux session is gone (a command ended its shell, killed the \
                 tmux server, or removed /tmp/.nenyax); the agent cannot type any more"
                    .into(),
            ));
        }
        if r.killed.is_some() || !r.ok() {
            return Err(Error::Sandbox(format!(
                "the terminal could not be driven ({}): {}{}",
                crate::sandbox::Killed::describe(r.killed),
                r.stdout,
                r.stderr
            )));
        }
        self.parse_look(&r.stdout)
    }

    fn dir_path(&self) -> String {
        self.sock.strip_suffix("/sock").unwrap_or(DIR).to_string()
    }

    fn parse_look(&mut self, out: &str) -> Result<Look> {
        let n = &self.nonce;
        let bad = || Error::Sandbox(format!("the terminal's capture was not understood: {out}"));
        let (state, rest) = after_marker(out, &format!("{n}STATE")).ok_or_else(bad)?;
        let nums: Vec<i64> = state
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let [history, cursor, alternate] = nums[..] else {
            return Err(bad());
        };
        let new_marker = format!("{n}NEW\n");
        let at = rest.find(&new_marker).ok_or_else(bad)?;
        let screen = trim_screen(&rest[..at]);
        let (size, new) = after_marker(&rest[at..], &format!("{n}SIZE")).ok_or_else(bad)?;
        let size: usize = size.parse().map_err(|_| bad())?;
        // The script already kept only both ends of a long output; say so as cap_output does.
        let new = match new.split_once(&format!("\n{n}CUT\n")) {
            Some((head, tail)) => format!(
                "{head}\n[... output limited to {OUTPUT_LIMIT} bytes; {} interior bytes omitted ...]\n{}",
                size.saturating_sub(OUTPUT_LIMIT),
                trim_screen(tail)
            ),
            None => cap_output(&trim_screen(new), OUTPUT_LIMIT),
        };
        // Lines can be found again only while the scrollback grew (no clear, no full-screen
        // program) and something new is there.
        let lost = alternate == 1 || history < self.last_history;
        let text = if lost || new.trim().is_empty() {
            format!("Current Terminal Screen:\n{screen}")
        } else {
            format!("New Terminal Output:\n{new}")
        };
        // A full-screen program's screen has its own (empty) scrollback: keep the place in the
        // normal one, where its output continues once the program ends.
        if alternate == 0 {
            self.last_line = history + cursor;
            self.last_history = history;
        }
        Ok(Look { text, screen })
    }

    /// End the session: save its scrollback to [`SESSION_TEXT`] and stop the server, so the
    /// hosting exec ends and the backend's cleanup takes what the agent left running.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let text = match &self.host_client {
            Some(_) => self
                .sb
                .host_path(SESSION_TEXT)
                .map(|p| p.to_string_lossy().into_owned()),
            None => Ok(SESSION_TEXT.to_string()),
        };
        let r = text.and_then(|text| {
            self.client(
                &format!(
                    "tm capture-pane -p -J -t {SESSION} -S - > {} 2>/dev/null\ntm kill-server 2>/dev/null\n",
                    q(&text)
                ),
                Duration::from_secs(30),
            )
        });
        // The hosting exec also ends by itself once this file appears: a client cannot stop a
        // server whose socket the agent removed. (Only now: it must not stop the server while
        // the scrollback is being saved.)
        let flagged = self.sb.put(&format!("{DIR}/closing"), b"", 0o644);
        if let Some(h) = self.hosting.take() {
            match h.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(Error::Sandbox(
                        "the terminal's hosting thread panicked".into(),
                    ))
                }
            }
        }
        flagged?;
        r.map(|_| ())
    }
}

impl Drop for Tmux<'_> {
    fn drop(&mut self) {
        // An agent that failed still has to let the hosting exec end, or the scope would wait
        // for it until its deadline.
        let _ = self.close_inner();
    }
}

fn start_error(stdout: &str, stderr: &str) -> Error {
    Error::Sandbox(format!(
        "could not start the terminal's tmux session: {}{}",
        stdout.trim(),
        stderr.trim()
    ))
}

fn host_client(sb: &Sandbox) -> HostClient {
    HostClient {
        run_as: nix::unistd::geteuid()
            .is_root()
            .then_some((crate::sandbox::SANDBOX_UID, crate::sandbox::SANDBOX_UID)),
        // Only the process backend has clients on the host, and it always has a host directory.
        home: sb
            .host_dir()
            .map(|d| d.join("tmp"))
            .unwrap_or_else(|| PathBuf::from("/tmp")),
    }
}

/// Run a client script on the host (process backend) as the sandbox's user, with a timeout.
fn host_run(
    h: &HostClient,
    script: &str,
    timeout: Duration,
) -> std::result::Result<ExecResult, String> {
    use std::os::unix::process::CommandExt;
    let mut cmd = HostCommand::new("bash");
    cmd.arg("-s")
        .env_clear()
        .env("PATH", BASE_PATH)
        .env("HOME", &h.home)
        .env("LANG", "C.UTF-8")
        .current_dir(&h.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((u, g)) = h.run_as {
        cmd.uid(u).gid(g);
    }
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not run a tmux client on the host: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(script.as_bytes());
    }
    let mut readers = Vec::new();
    for s in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let mut s = s;
        readers.push(std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        }));
    }
    let mut killed = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() > timeout => {
                let _ = child.kill();
                killed = Some(crate::sandbox::Killed::Timeout);
                break child
                    .wait()
                    .map_err(|e| format!("could not wait for a tmux client: {e}"))?;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("could not wait for a tmux client: {e}")),
        }
    };
    let mut outs = readers.into_iter().map(|r| r.join().unwrap_or_default());
    use std::os::unix::process::ExitStatusExt;
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        stdout: outs.next().unwrap_or_default(),
        stderr: outs.next().unwrap_or_default(),
        dropped_bytes: 0,
        duration_s: t0.elapsed().as_secs_f64(),
        killed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_are_keys_and_the_rest_is_text() {
        for k in [
            "C-c", "C-d", "Escape", "Enter", "Up", "F5", "M-x", "C-M-a", "^D", "BSpace",
        ] {
            assert!(is_key_name(k), "{k}");
        }
        for k in [
            "ls\n", "q", "C-", "hello", "C-c\n", "F13", "Upper", "C-xy", "",
        ] {
            assert!(!is_key_name(k), "{k}");
        }
    }

    #[test]
    fn keystrokes_become_literal_sends_with_enter_between_lines() {
        assert_eq!(
            send_lines("echo 'a'\n"),
            "tm send-keys -t nenyax -l -- 'echo '\\''a'\\'''\ntm send-keys -t nenyax Enter\n"
        );
        assert_eq!(send_lines("C-c"), "tm send-keys -t nenyax 'C-c'\n");
        assert_eq!(send_lines(""), "");
        // A leading dash is text, not an option.
        assert!(send_lines("-1\n").starts_with("tm send-keys -t nenyax -l -- '-1'\n"));
        // Long text goes in pieces, each on a character boundary.
        let long = "é".repeat(3000);
        let s = send_lines(&long);
        assert_eq!(s.matches("send-keys").count(), 3, "{}", s.len());
    }

    #[test]
    fn modes_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(
            TerminalMode::parse("harbor", "tmux").unwrap(),
            TerminalMode::Tmux
        );
        assert_eq!(
            TerminalMode::parse("harbor", "bash").unwrap(),
            TerminalMode::Bash
        );
        assert_eq!(
            TerminalMode::parse("harbor", "auto").unwrap(),
            TerminalMode::Auto
        );
        let e = TerminalMode::parse("harbor", "screen")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("terminal") && e.contains("screen") && e.contains("`tmux`"),
            "{e}"
        );
    }
}
