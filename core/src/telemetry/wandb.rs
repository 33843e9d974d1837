//! The `wandb` telemetry sink: a Weights & Biases run written by the wandb SDK itself, in a
//! small Python helper process (embedded below) that the sink feeds JSON lines. Online when
//! WANDB_API_KEY is set, else offline into `wandb/offline-run-*` for `wandb sync` to upload.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::mlflow::{check_keys, episode_metrics, string_option};
use super::spec::{RunInfo, Sink};
use crate::contract::{JsonMap, Trajectory};
use crate::error::{Error, Result};

/// The helper: init, log, save and finish through the wandb SDK, one JSON reply per command.
const HELPER: &str = include_str!("wandb_helper.py");
/// The options the sink accepts.
const OPTIONS: &[&str] = &[
    "project",
    "entity",
    "run_name",
    "group",
    "tags",
    "dir",
    "mode",
    "python",
    "timeout_s",
];
const MODES: &[&str] = &["online", "offline", "disabled"];
/// Lines of the helper's stderr kept to explain its death.
const STDERR_LINES: usize = 20;

/// Whether `import wandb` works in the interpreter the sink would use: Ok, or what is missing.
pub fn readiness() -> std::result::Result<(), String> {
    importable(&interpreter(None))
}

fn importable(python: &str) -> std::result::Result<(), String> {
    match Command::new(python)
        .args(["-c", "import wandb"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`import wandb` fails in {python}: {}; `{python} -m pip install wandb`, or point NENYAX_WANDB_PYTHON at an interpreter that has it",
            last_line(&String::from_utf8_lossy(&out.stderr))
        )),
        Err(e) => Err(format!(
            "cannot run {python} ({e}); set NENYAX_WANDB_PYTHON to a Python with wandb installed"
        )),
    }
}

/// Build the sink from its options (`project`, `entity`, `run_name`, `group`, `tags`, `dir`,
/// `mode`, `python`, `timeout_s`); the helper starts with the run.
pub fn build(options: &JsonMap) -> Result<Box<dyn Sink>> {
    Ok(Box::new(WandbSink::new(options)?))
}

/// A W&B run, written by the wandb SDK in a helper process.
pub struct WandbSink {
    python: String,
    mode: String,
    /// Whether the mode was chosen for the user (offline for want of WANDB_API_KEY).
    mode_defaulted: bool,
    init: Map<String, Value>,
    timeout: Duration,
    helper: Option<Helper>,
    episodes: u64,
    run_dir: Option<String>,
}

struct Helper {
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl WandbSink {
    /// The sink for `options`; a mode that cannot work is refused here, before any run.
    pub fn new(options: &JsonMap) -> Result<WandbSink> {
        check_keys("wandb", options, OPTIONS)?;
        let opt = |k| string_option("wandb", options, k);
        let has_key = std::env::var("WANDB_API_KEY").is_ok_and(|k| !k.is_empty());
        let given = opt("mode")?;
        let mode_defaulted = given.is_none();
        let mode = match given {
            Some(m) if !MODES.contains(&m.as_str()) => {
                return Err(Error::Config(format!(
                    "wandb: option `mode` = {m:?} is not one of {}",
                    MODES.join(", ")
                )))
            }
            Some(m) => m,
            None if has_key => "online".into(),
            None => "offline".into(),
        };
        if mode == "online" && !has_key {
            return Err(Error::Config(
                "wandb: mode \"online\" needs WANDB_API_KEY (your key from https://wandb.ai/authorize); set it, or use mode \"offline\" and upload later with `wandb sync`".into(),
            ));
        }
        let tags = match options.get("tags") {
            None => None,
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => Some(a.clone()),
            Some(other) => {
                return Err(Error::Config(format!(
                    "wandb: option `tags` = {other} must be a list of strings"
                )))
            }
        };
        let timeout = match options.get("timeout_s") {
            None => 300.0,
            Some(v) => v
                .as_f64()
                .filter(|t| t.is_finite() && *t > 0.0)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "wandb: option `timeout_s` = {v} must be a positive number of seconds"
                    ))
                })?,
        };
        let project = opt("project")?
            .or_else(|| std::env::var("WANDB_PROJECT").ok())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "nenyax".into());
        let mut init = Map::new();
        init.insert("op".into(), "init".into());
        init.insert("project".into(), project.into());
        init.insert("mode".into(), mode.clone().into());
        for (key, value) in [
            ("entity", opt("entity")?),
            ("name", opt("run_name")?),
            ("group", opt("group")?),
            ("dir", opt("dir")?),
        ] {
            if let Some(v) = value {
                init.insert(key.into(), v.into());
            }
        }
        if let Some(t) = tags {
            init.insert("tags".into(), Value::Array(t));
        }
        Ok(WandbSink {
            python: interpreter(opt("python")?),
            mode,
            mode_defaulted,
            init,
            timeout: Duration::from_secs_f64(timeout),
            helper: None,
            episodes: 0,
            run_dir: None,
        })
    }

    /// The run's local directory (`.../wandb/offline-run-*` offline), once started.
    pub fn run_dir(&self) -> Option<&str> {
        self.run_dir.as_deref()
    }

    fn spawn(&self) -> Result<Helper> {
        let mut cmd = Command::new(&self.python);
        cmd.args(["-c", HELPER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if std::env::var_os("WANDB_SILENT").is_none() {
            // The sink prints the one line that matters (where the run went).
            cmd.env("WANDB_SILENT", "true");
        }
        let mut child = cmd.spawn().map_err(|e| {
            Error::io(
                format!(
                    "wandb: cannot start {} (set the `python` option or NENYAX_WANDB_PYTHON to a Python with wandb installed)",
                    self.python
                ),
                e,
            )
        })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr_pipe);
            // Lossy: the SDK's progress output is not always UTF-8.
            let mut bytes = Vec::new();
            while matches!(reader.read_until(b'\n', &mut bytes), Ok(n) if n > 0) {
                let line = String::from_utf8_lossy(&bytes).trim_end().to_string();
                bytes.clear();
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == STDERR_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        Ok(Helper {
            child,
            stdin,
            replies,
            stderr,
        })
    }

    /// Send one command and wait for its reply; a dead or silent helper is an error of the sink.
    fn send(&mut self, cmd: &Value) -> Result<Map<String, Value>> {
        let Some(h) = self.helper.as_mut() else {
            return Err(Error::Config(
                "wandb: no run is open (start failed or the helper exited earlier)".into(),
            ));
        };
        let wrote = writeln!(h.stdin, "{cmd}").and_then(|()| h.stdin.flush());
        let reply = match wrote {
            Ok(()) => h.replies.recv_timeout(self.timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match reply {
            Ok(line) => match serde_json::from_str::<Value>(&line) {
                Ok(Value::Object(m)) => match m.get("error").and_then(Value::as_str) {
                    Some(e) => Err(Error::Config(format!("wandb: {e}"))),
                    None => Ok(m),
                },
                _ => Err(Error::Protocol(format!(
                    "wandb: the helper answered {line:?}, not a JSON object"
                ))),
            },
            Err(why) => {
                let mut h = self.helper.take().expect("checked above");
                let status = match why {
                    RecvTimeoutError::Timeout => {
                        let _ = h.child.kill();
                        format!("gave no answer in {:?} and was stopped", self.timeout)
                    }
                    RecvTimeoutError::Disconnected => match h.child.wait() {
                        Ok(s) => format!("exited ({s})"),
                        Err(e) => format!("was lost ({e})"),
                    },
                };
                let _ = h.child.wait();
                // The stderr reader may still be draining the last lines.
                std::thread::sleep(Duration::from_millis(50));
                let tail: Vec<String> = h
                    .stderr
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .rev()
                    .take(3)
                    .rev()
                    .cloned()
                    .collect();
                Err(Error::io(
                    format!(
                        "wandb: the helper process ({}) {status}; its last output: {}",
                        self.python,
                        if tail.is_empty() {
                            "(none)".to_string()
                        } else {
                            tail.join(" | ")
                        }
                    ),
                    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "wandb helper is gone"),
                ))
            }
        }
    }

    fn log(&mut self, counter: (&str, u64), values: &[(String, f64)]) -> Result<()> {
        // JSON has no NaN or infinity.
        let data: Map<String, Value> = values
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let mut cmd = json!({ "op": "log", "data": data });
        cmd[counter.0] = counter.1.into();
        self.send(&cmd).map(drop)
    }
}

impl Sink for WandbSink {
    fn name(&self) -> &'static str {
        "wandb"
    }

    fn start(&mut self, run: &RunInfo) -> Result<()> {
        if self.helper.is_some() {
            self.finish(true)?;
        }
        self.episodes = 0;
        self.helper = Some(self.spawn()?);
        let mut init = self.init.clone();
        if !init.contains_key("name") && !run.name.is_empty() {
            init.insert("name".into(), run.name.clone().into());
        }
        if !run.kind.is_empty() {
            init.insert("job_type".into(), run.kind.clone().into());
        }
        init.insert("config".into(), Value::Object(run.params.clone()));
        let reply = self.send(&Value::Object(init))?;
        let dir = reply.get("dir").and_then(Value::as_str).unwrap_or_default();
        self.run_dir = Some(dir.to_string());
        match self.mode.as_str() {
            "offline" => eprintln!(
                "nenyax: W&B is offline{}; the run is in {dir}; upload it later with `wandb sync {dir}`",
                if self.mode_defaulted { " (no WANDB_API_KEY)" } else { "" }
            ),
            "online" => eprintln!(
                "nenyax: W&B run at {}",
                reply.get("url").and_then(Value::as_str).unwrap_or(dir)
            ),
            _ => {}
        }
        Ok(())
    }

    fn episode(&mut self, traj: &Trajectory) -> Result<()> {
        self.episodes += 1;
        self.log(("episode", self.episodes), &episode_metrics(traj))
    }

    fn metrics(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        self.log(("step", step), values)
    }

    fn artifact(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let safe = !name.is_empty()
            && !name.starts_with('/')
            && name.split('/').all(|p| !p.is_empty() && p != "..");
        if !safe {
            return Err(Error::Config(format!(
                "wandb: artifact name {name:?} must be a relative path without `..`"
            )));
        }
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        self.send(&json!({ "op": "save", "name": name, "data": data }))
            .map(drop)
    }

    fn finish(&mut self, ok: bool) -> Result<()> {
        if self.helper.is_none() {
            return Ok(());
        }
        let done = self.send(&json!({ "op": "finish", "ok": ok }));
        if let Some(mut h) = self.helper.take() {
            drop(h.stdin);
            let _ = h.child.wait();
        }
        done.map(drop)
    }
}

impl Drop for WandbSink {
    fn drop(&mut self) {
        // Without finish the helper sees end of input and wandb closes the run at exit.
        if let Some(mut h) = self.helper.take() {
            drop(h.stdin);
            std::thread::spawn(move || h.child.wait());
        }
    }
}

/// The interpreter: the option, else NENYAX_WANDB_PYTHON, else NENYAX_PYTHON, else python3.
fn interpreter(option: Option<String>) -> String {
    option
        .or_else(|| std::env::var("NENYAX_WANDB_PYTHON").ok())
        .or_else(|| std::env::var("NENYAX_PYTHON").ok())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: Value) -> JsonMap {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn refuses_bad_options() {
        for (o, needle) in [
            (json!({"projekt": "x"}), "`projekt`"),
            (json!({"mode": "shared"}), "not one of"),
            (json!({"tags": "a"}), "list of strings"),
            (json!({"project": 3}), "must be a string"),
        ] {
            let e = build(&opts(o)).err().unwrap();
            assert_eq!(e.kind(), "ConfigError");
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn readiness_names_the_interpreter_and_the_fix() {
        let e = importable("/nonexistent/python3").unwrap_err();
        assert!(e.contains("cannot run /nonexistent/python3"), "{e}");
        assert!(e.contains("NENYAX_WANDB_PYTHON"), "{e}");
        // A Python without wandb: the import error and how to install it.
        if let Err(e) = importable("python3") {
            assert!(e.contains("pip install wandb"), "{e}");
        }
    }

    #[test]
    fn artifact_names_stay_in_the_run() {
        let mut sink = WandbSink::new(&opts(json!({"mode": "disabled"}))).unwrap();
        for bad in ["/etc/x", "../x", "a//b", ""] {
            assert!(sink.artifact(bad, b"x").is_err(), "{bad}");
        }
    }
}
