//! Harbor / Terminal-Bench tasks in task mode: `harbor:<task dir>` or `harbor:<dir of tasks>`.
//!
//! `backend=auto` (the default) runs each task in a container of an image built from its real
//! environment/Dockerfile when a container engine is ready (sandbox::images: cached by content
//! hash, offline bases mapped and the substitution recorded), and in a jail otherwise. A jail
//! stands in for the image only when the Dockerfile needs no more than a base image (the
//! host's root file system), WORKDIR, ENV, COPY and RUN lines that only install packages the
//! host already has; anything else is a typed error saying a container backend is needed. The
//! manifest says which backend runs and why. The agent (the oracle, nop, or a
//! terminus-style loop around any ChatModel) works in the jail, then tests/ is placed at
//! /tests and test.sh runs with the verifier timeout; reward.json (every key a component) or
//! reward.txt is the judgment. Multi-step tasks run their steps in one jail, each with its own
//! reward, stopping early below a step's `min_reward`.

pub(crate) mod task;
pub mod terminus;
pub mod tmux;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::contract::{
    JudgeSource, Judgment, Manifest, Mode, Observation, Step, TaskRef, Trajectory,
};
use crate::driver::{Driver, Readiness};
use crate::env::{Environment, RolloutOptions};
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::sandbox::engine::Engine;
use crate::sandbox::images::{self, BuiltImage};
use crate::sandbox::{BackendKind, Exec, Sandbox, SandboxConfig};
use crate::uri::{ParamKind, ParamSpec, Params, Uri};

pub use task::{HarborStep, HarborTask, TaskImage};

const SCHEME: &str = "harbor";

/// The `harbor:` driver.
#[derive(Debug, Default)]
pub struct HarborDriver;

impl Driver for HarborDriver {
    fn scheme(&self) -> &'static str {
        SCHEME
    }

    fn format(&self) -> &'static str {
        "harbor"
    }

    fn summary(&self) -> &'static str {
        "Harbor / Terminal-Bench task directories in a container (or a jail): harbor:path/to/task (or a folder of tasks)"
    }

    fn params(&self, _target: &str) -> Vec<ParamSpec> {
        vec![
            ParamSpec {
                name: "backend",
                kind: ParamKind::Str,
                default: "auto",
                help: "sandbox backend: `container` (the task's Dockerfile built with Podman or Docker), `jail` (the host's root stands in for the image), the name of a sandbox plugin of jail isolation or above, or `auto`: the container when an engine is ready, else the jail",
            },
            ParamSpec {
                name: "offline",
                kind: ParamKind::Bool,
                default: "true",
                help: "test scripts that download uv/pytest run the preinstalled `python3 -m pytest` instead",
            },
            ParamSpec {
                name: "max_turns",
                kind: ParamKind::Int { min: 1, max: 10_000 },
                default: "30",
                help: "model turns of the terminus agent",
            },
            ParamSpec {
                name: "terminal",
                kind: ParamKind::Str,
                default: "auto",
                help: "the terminus agent's terminal: `tmux` (a real terminal; interactive programs work), `bash` (each batch as one script), `auto` (tmux when the sandbox has it; docs/terminal-agent.md)",
            },
        ]
    }

    fn readiness(&self) -> Readiness {
        match (BackendKind::Container.ready(), BackendKind::Jail.ready()) {
            (Ok(()), _) | (_, Ok(())) => Readiness::Ready,
            (Err(c), Err(j)) => Readiness::Missing(format!(
                "the container sandbox backend ({c}) or the jail ({j})"
            )),
        }
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        let params = Params::check(SCHEME, uri, &self.params(&uri.target))?;
        let asked = params.string("backend", "auto");
        let root = PathBuf::from(&uri.target);
        let tasks = task::discover(&root)?;
        let (mut backend, mut why) = choose_backend(&asked)?;
        let mut built = std::collections::HashMap::new();
        if backend == BackendKind::Container {
            let engine = Engine::detect()?;
            for t in &tasks {
                match task_image(&engine, t) {
                    Ok(img) => {
                        built.insert(t.name.clone(), img);
                    }
                    // With auto, an engine that cannot make the image (no base: nothing
                    // local, no pull, no mapping) is not ready for these tasks; the jail runs
                    // them if it can, and the manifest says why. A Dockerfile that fails to
                    // build is the task's error, whatever the backend.
                    Err(Error::Sandbox(m))
                        if asked == "auto"
                            && tasks.iter().all(|t| t.jail_problem.is_none())
                            && BackendKind::Jail.ready().is_ok() =>
                    {
                        backend = BackendKind::Jail;
                        why = format!(
                            "backend=auto fell back to the jail because {} cannot make the \
                             task's image: {m}",
                            engine.kind().name()
                        );
                        built.clear();
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        match backend {
            BackendKind::Container => {}
            _ => {
                if let Some(problem) = tasks.iter().find_map(|t| t.jail_problem.clone()) {
                    return Err(Error::Environment(format!("{problem}. {why}")));
                }
            }
        }
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| uri.target.clone());
        let mut m = Manifest::new(&uri.raw, name, SCHEME, Mode::Task);
        m.capabilities.resettable = true;
        m.capabilities.text = true;
        m.capabilities.isolation = backend.level();
        m.num_tasks = Some(tasks.len() as u64);
        m.license = None;
        let substituted: Vec<String> = built
            .values()
            .flat_map(|b: &BuiltImage| b.bases.iter().filter(|c| c.substituted))
            .map(|c| format!("{} -> {}", c.requested, c.used))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut note = format!("{} backend: {why}", backend.name());
        if !substituted.is_empty() {
            note.push_str(&format!(
                "; base image substituted (offline mapping): {}",
                substituted.join(", ")
            ));
        }
        m.description = Some(format!(
            "{} Harbor task(s) from {}; {note}",
            tasks.len(),
            root.display()
        ));
        m.extra.insert(
            "sandbox".into(),
            json!({"backend": backend.name(), "why": why, "note": note}),
        );
        if !built.is_empty() {
            let images: Map<String, Value> = built
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json()))
                .collect();
            m.extra.insert("images".into(), Value::Object(images));
        }
        Ok(Arc::new(HarborEnv {
            manifest: m,
            tasks,
            built,
            backend,
            offline: params
                .get("offline")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            max_turns: params.int("max_turns", 30) as usize,
            terminal: tmux::TerminalMode::parse(SCHEME, &params.string("terminal", "auto"))?,
        }))
    }
}

/// A loaded set of Harbor tasks.
pub struct HarborEnv {
    manifest: Manifest,
    tasks: Vec<HarborTask>,
    /// Each task's image, by task name (container backend only).
    built: std::collections::HashMap<String, BuiltImage>,
    backend: BackendKind,
    offline: bool,
    max_turns: usize,
    terminal: tmux::TerminalMode,
}

impl HarborEnv {
    fn task(&self, t: Option<&TaskRef>, seed: Option<i64>) -> Result<&HarborTask> {
        match t {
            Some(t) => {
                self.tasks
                    .iter()
                    .find(|x| x.name == t.id)
                    .ok_or_else(|| Error::UnknownTarget {
                        driver: SCHEME.into(),
                        target: t.id.clone(),
                        available: self.tasks.iter().map(|x| x.name.clone()).collect(),
                    })
            }
            None => {
                let i =
                    crate::env::task_index(&self.manifest.id, self.tasks.len() as u64, None, seed)?;
                Ok(&self.tasks[i as usize])
            }
        }
    }

    /// Create the task's sandbox: a container of its image, or a jail with its private dirs and
    /// COPY'd files; both with the /logs layout.
    fn sandbox(&self, task: &HarborTask) -> Result<Sandbox> {
        if self.backend == BackendKind::Container {
            return self.container(task);
        }
        let mut cfg = SandboxConfig::new(self.backend);
        cfg.workdir = task.workdir.clone();
        cfg.env = task.env.clone();
        cfg.network = false;
        cfg.extra_dirs = task.extra_dirs.clone();
        cfg.limits.wall = Duration::from_secs(3600);
        let sb = Sandbox::create(cfg)?;
        for (src, dst) in &task.copies {
            if src.is_dir() {
                sb.put_dir(src, dst)?;
            } else {
                let data = crate::limits::read_file(src, &crate::limits::TASK_FILE)
                    .map_err(|e| e.into_error(format!("read COPY source {}", src.display())))?;
                let dst = if dst.ends_with('/') {
                    format!(
                        "{dst}{}",
                        src.file_name().unwrap_or_default().to_string_lossy()
                    )
                } else {
                    dst.clone()
                };
                sb.put(&dst, &data, 0o644)?;
            }
        }
        for d in ["/logs/agent", "/logs/verifier", "/logs/artifacts"] {
            sb.put(&format!("{d}/.keep"), b"", 0o644)?;
            sb.remove(&format!("{d}/.keep"))?;
        }
        let missing = match self.backend {
            // A plugin's files are its own: make the workdir, which costs nothing if it exists.
            BackendKind::Plugin(_) => true,
            _ => sb
                .host_path(&task.workdir)
                .map(|p| !p.exists())
                .unwrap_or(false),
        };
        if missing {
            sb.put(&format!("{}/.keep", task.workdir), b"", 0o644)?;
            sb.remove(&format!("{}/.keep", task.workdir))?;
        }
        Ok(sb)
    }

    /// A container of the task's image, with Harbor's limits and network, and /logs made.
    fn container(&self, task: &HarborTask) -> Result<Sandbox> {
        let image = self.built.get(&task.name).ok_or_else(|| {
            Error::Environment(format!("harbor: task `{}` has no image built", task.name))
        })?;
        let mut cfg = SandboxConfig::new(BackendKind::Container);
        cfg.image = Some(image.tag.clone());
        cfg.workdir = task.workdir.clone();
        cfg.env = task.env.clone();
        cfg.network = task.allow_internet;
        cfg.root = true;
        // Services the agent starts are still there for the tests, as in Harbor's containers.
        cfg.keep_detached = true;
        cfg.cpus = task.cpus;
        cfg.limits.wall = Duration::from_secs(3600);
        if let Some(mb) = task.memory_mb {
            cfg.limits.memory_bytes = Some(mb << 20);
        }
        let sb = Sandbox::create(cfg)?;
        // From /: the workdir may not exist yet in an image whose Dockerfile has no WORKDIR.
        let r = sb.exec(
            &Exec::shell(format!(
                "mkdir -p /logs/agent /logs/verifier /logs/artifacts '{}'",
                task.workdir.replace('\'', "'\\''")
            ))
            .cwd("/"),
        )?;
        if !r.ok() {
            return Err(Error::Sandbox(format!(
                "harbor: task `{}`: could not make /logs in its container: {}",
                task.name,
                r.stderr.trim()
            )));
        }
        Ok(sb)
    }

    /// Run the verifier of `step`; the reward components it wrote.
    fn verify(
        &self,
        sb: &Sandbox,
        task: &HarborTask,
        step: &HarborStep,
    ) -> Result<(Map<String, Value>, String)> {
        if self.backend == BackendKind::Container {
            // One command, not five: each is an engine call in a container.
            let r = sb.exec(
                &Exec::shell(
                    "rm -rf /logs/verifier/reward.txt /logs/verifier/reward.json /tests \
                     && mkdir -p /tests",
                )
                .cwd("/"),
            )?;
            if !r.ok() {
                return Err(Error::Sandbox(format!(
                    "{}: could not reset /tests and the rewards: {}",
                    task.name,
                    r.stderr.trim()
                )));
            }
        } else {
            for f in ["reward.txt", "reward.json"] {
                sb.remove(&format!("/logs/verifier/{f}"))?;
            }
            sb.remove("/tests")?;
            sb.put("/tests/.keep", b"", 0o644)?;
            sb.remove("/tests/.keep")?;
        }
        put_all(sb, &step.tests)?;
        let mut exec = Exec::shell(&step.test_command).timeout(step.verifier_timeout);
        exec.env = step.verifier_env.clone();
        if self.offline {
            install_offline_shims(sb, self.backend == BackendKind::Container)?;
            exec.env.insert(
                "PATH".into(),
                format!(
                    "/tmp/.nenyax/bin:{}",
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                ),
            );
        }
        let r = sb.exec(&exec)?;
        let log = format!("{}{}", r.stdout, r.stderr);
        sb.put("/logs/verifier/test-stdout.txt", log.as_bytes(), 0o644)?;
        if let Some(k) = r.killed {
            if k == crate::sandbox::Killed::Timeout {
                return Err(Error::Environment(format!(
                    "{}: step `{}`: the verifier ran past its {}s timeout; output: {}",
                    task.name,
                    step.name,
                    step.verifier_timeout.as_secs_f64(),
                    tail(&log, 2000)
                )));
            }
        }
        let rewards = read_rewards(sb).map_err(|why| {
            Error::Environment(format!(
                "{}: step `{}`: {why}; test output: {}",
                task.name,
                step.name,
                tail(&log, 2000)
            ))
        })?;
        Ok((rewards, log))
    }
}

fn tail(s: &str, n: usize) -> &str {
    let mut i = s.len().saturating_sub(n);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// `reward.json` (an object of finite numbers, or a bare number) else `reward.txt`.
fn read_rewards(sb: &Sandbox) -> std::result::Result<Map<String, Value>, String> {
    if let Ok(raw) = sb.get("/logs/verifier/reward.json") {
        let v: Value = serde_json::from_slice(&raw)
            .map_err(|e| format!("/logs/verifier/reward.json is not JSON: {e}"))?;
        let mut out = Map::new();
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    match v.as_f64() {
                        Some(x) if x.is_finite() => {
                            out.insert(k, json!(x));
                        }
                        _ => {
                            return Err(format!(
                                "reward.json key `{k}` is not a finite number: {v}"
                            ))
                        }
                    }
                }
            }
            Value::Number(n) => {
                out.insert("reward".into(), json!(n.as_f64().unwrap_or(f64::NAN)));
            }
            other => {
                return Err(format!(
                    "reward.json must be an object or a number, not {other}"
                ))
            }
        }
        if out.is_empty() {
            return Err("reward.json has no rewards".into());
        }
        return Ok(out);
    }
    match sb.get("/logs/verifier/reward.txt") {
        Ok(raw) => {
            let text = String::from_utf8_lossy(&raw);
            let x: f64 = text.trim().parse().map_err(|_| {
                format!(
                    "/logs/verifier/reward.txt holds `{}`, not a number",
                    text.trim()
                )
            })?;
            if !x.is_finite() {
                return Err(format!("reward.txt holds a non-finite reward {x}"));
            }
            let mut out = Map::new();
            out.insert("reward".into(), json!(x));
            Ok(out)
        }
        Err(_) => Err(
            "tests/test.sh wrote neither /logs/verifier/reward.json nor /logs/verifier/reward.txt"
                .into(),
        ),
    }
}

/// Stand-ins for the network installers test scripts use (apt-get, curl | sh for uv, uvx),
/// so that `uvx --with pytest... pytest ARGS` runs the preinstalled `python3 -m pytest ARGS`.
fn install_offline_shims(sb: &Sandbox, container: bool) -> Result<()> {
    let apt = "#!/bin/sh\necho \"nenyax offline mode: skipped apt-get $*\" >&2\nexit 0\n";
    let curl = "#!/bin/sh\ncase \"$*\" in *astral.sh*) echo 'nenyax offline mode: skipped the uv installer' >&2; exit 0;; esac\nexec /usr/bin/curl \"$@\"\n";
    let uvx = r#"#!/bin/bash
# nenyax offline mode: `uvx --with X... pytest ARGS` runs the preinstalled `python3 -m pytest ARGS`.
while [ $# -gt 0 ]; do
  case "$1" in
    --with|-w|--from|--python|-p) shift 2 ;;
    --with=*|--from=*|--python=*) shift ;;
    *) break ;;
  esac
done
tool="$1"; shift
if [ "$tool" != pytest ]; then
  echo "nenyax offline mode: uvx $tool is not available offline" >&2
  exit 127
fi
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ctrf) shift 2 ;;
    --ctrf=*) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
exec python3 -m pytest -p no:cacheprovider "${args[@]}"
"#;
    // Written on the host and uploaded as one directory: in a container each put is an
    // engine call.
    use std::os::unix::fs::PermissionsExt;
    let host = tempfile::tempdir().map_err(|e| Error::io("harbor: make the offline shims", e))?;
    let bin = host.path().join("bin");
    let write = |name: &str, body: &str| -> Result<()> {
        let p = bin.join(name);
        std::fs::write(&p, body)
            .and_then(|()| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| Error::io(format!("harbor: write the offline shim {name}"), e))
    };
    std::fs::create_dir(&bin).map_err(|e| Error::io("harbor: make the offline shims", e))?;
    write("apt-get", apt)?;
    write("apt", apt)?;
    write("curl", curl)?;
    write("uvx", uvx)?;
    sb.put_dir(&bin, "/tmp/.nenyax/bin")?;
    // `source $HOME/.local/bin/env` after the uv installer: HOME is /tmp in a jail, /root in a
    // container.
    let env = b"# nenyax offline mode: uv is not installed\n";
    if container {
        let r = sb.exec(
            &Exec::shell(
                "mkdir -p /tmp/.local/bin /root/.local/bin && cat > /tmp/.local/bin/env \
                 && cp /tmp/.local/bin/env /root/.local/bin/env",
            )
            .cwd("/")
            .stdin(env.to_vec()),
        )?;
        if !r.ok() {
            return Err(Error::Sandbox(format!(
                "harbor: could not write the offline uv stand-in: {}",
                r.stderr.trim()
            )));
        }
    } else {
        sb.put("/tmp/.local/bin/env", env, 0o644)?;
    }
    Ok(())
}

impl Environment for HarborEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        Ok(self
            .tasks
            .iter()
            .take(limit.unwrap_or(usize::MAX))
            .map(|t| {
                let mut r = TaskRef::new(&t.name);
                r.prompt = Some(t.steps[0].instruction.clone());
                r
            })
            .collect())
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        Some(Policy::Native("oracle".into()))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        Some(Policy::Native("nop".into()))
    }

    fn drive(&self, policy: &Policy, opts: &RolloutOptions, traj: &mut Trajectory) -> Result<()> {
        let task = self.task(opts.task.as_ref(), opts.seed)?;
        if traj.task.is_none() {
            traj.task = Some(TaskRef::new(&task.name));
        }
        let agent_name =
            match policy {
                Policy::Native(n) if n == "oracle" || n == "nop" => n.clone(),
                Policy::Native(n) => {
                    return Err(Error::PolicyMismatch(format!(
                    "Harbor has native agents `oracle` and `nop`, not `{n}`; pass a chat model for \
                     the terminus agent"
                )))
                }
                Policy::Chat(_) => "terminus".into(),
                Policy::Action(_) => return Err(Error::PolicyMismatch(
                    "Harbor tasks are driven by an agent: pass Policy::Native(\"oracle\"|\"nop\") \
                     or a chat model, not an action policy"
                        .into(),
                )),
                // rollout() resolves these; a direct drive() resolves it here.
                Policy::PerEpisode(_) => {
                    let log = crate::policy::CallLog::default();
                    let p = policy.for_episode(&opts.episode(), &log)?;
                    return self.drive(&p, opts, traj);
                }
            };
        traj.initial_observation = Some(Observation::text(task.steps[0].instruction.clone()));
        traj.metadata.insert("agent".into(), json!(agent_name));
        traj.metadata
            .insert("sandbox".into(), json!(self.backend.name()));
        let mut harbor = Map::new();
        harbor.insert("backend".into(), json!(self.backend.name()));
        if let Some(img) = self.built.get(&task.name) {
            harbor.insert("image".into(), img.to_json());
        }
        harbor.insert("allow_internet".into(), json!(task.allow_internet));
        if let Some(c) = task.cpus {
            harbor.insert("cpus".into(), json!(c));
        }
        if let Some(m) = task.memory_mb {
            harbor.insert("memory_mb".into(), json!(m));
        }
        traj.metadata.insert("harbor".into(), Value::Object(harbor));
        let sb = self.sandbox(task)?;
        let recording = match policy {
            Policy::Chat(model) => Some(
                crate::recorder::ModelServer::global()?
                    .record(crate::recorder::Backend::for_model(model.clone())),
            ),
            _ => None,
        };
        let mut components = Map::new();
        let mut step_scores: Vec<f64> = Vec::new();
        let mut details = Map::new();
        let mut stopped_early = None;
        let result: Result<()> = (|| {
            for (i, step) in task.steps.iter().enumerate() {
                // Step-scoped files and setup.
                if let Some(wd) = &step.workdir_files {
                    sb.put_dir(wd, &task.workdir)?;
                    if sb.get(&format!("{}/setup.sh", task.workdir)).is_ok() {
                        let r = sb.exec(&Exec::shell(format!("bash {}/setup.sh", task.workdir)))?;
                        if !r.ok() {
                            return Err(Error::Environment(format!(
                                "{}: step `{}`: workdir/setup.sh failed: {}",
                                task.name, step.name, r.stderr
                            )));
                        }
                    }
                }
                if let Some((cmd, retries, interval)) = &step.healthcheck {
                    let mut ok = false;
                    for _ in 0..*retries {
                        if sb
                            .exec(&Exec::shell(cmd).timeout(Duration::from_secs(30)))?
                            .ok()
                        {
                            ok = true;
                            break;
                        }
                        std::thread::sleep(*interval);
                    }
                    if !ok {
                        return Err(Error::Environment(format!(
                            "{}: step `{}`: the healthcheck `{cmd}` failed {retries} times",
                            task.name, step.name
                        )));
                    }
                }
                let t0 = Instant::now();
                let agent_out = match agent_name.as_str() {
                    "oracle" => self.run_oracle(&sb, task, step)?,
                    "nop" => String::new(),
                    _ => {
                        let Policy::Chat(model) = policy else {
                            unreachable!()
                        };
                        let rec = recording.as_ref().expect("made for chat policies");
                        terminus::run(
                            &sb,
                            model.as_ref(),
                            rec.base_url(),
                            &step.instruction,
                            step.agent_timeout,
                            self.max_turns,
                            self.terminal,
                            traj,
                        )?
                    }
                };
                let agent_s = t0.elapsed().as_secs_f64();
                let (rewards, log) = self.verify(&sb, task, step)?;
                let score =
                    rewards.values().filter_map(Value::as_f64).sum::<f64>() / rewards.len() as f64;
                if task.steps.len() == 1 {
                    components = rewards.clone();
                } else {
                    components.insert(step.name.clone(), json!(score));
                    if rewards.len() > 1 {
                        for (k, v) in &rewards {
                            components.insert(format!("{}.{k}", step.name), v.clone());
                        }
                    }
                }
                step_scores.push(score);
                let mut info = Map::new();
                info.insert("step".into(), json!(step.name));
                info.insert("rewards".into(), Value::Object(rewards));
                info.insert("agent_s".into(), json!(agent_s));
                info.insert("verifier_output".into(), json!(tail(&log, 4000)));
                traj.steps.push(Step {
                    action: json!({"agent": agent_name, "step": step.name}),
                    observation: Observation::text(tail(&agent_out, 4000).to_string()),
                    reward: score,
                    terminated: i + 1 == task.steps.len(),
                    truncated: false,
                    info,
                });
                if let Some(min) = step.min_reward {
                    if score < min && i + 1 < task.steps.len() {
                        stopped_early = Some(format!(
                            "step `{}` scored {score} below its min_reward {min}",
                            step.name
                        ));
                        if let Some(last) = traj.steps.last_mut() {
                            last.terminated = true;
                        }
                        for rest in &task.steps[i + 1..] {
                            components.insert(rest.name.clone(), json!(0.0));
                        }
                        break;
                    }
                }
            }
            Ok(())
        })();
        if let Some(rec) = &recording {
            traj.model_calls = rec.take();
        }
        result?;
        let n = task.steps.len() as f64;
        let score = step_scores.iter().sum::<f64>() / n;
        details.insert("steps".into(), json!(task.steps.len()));
        if let Some(why) = stopped_early {
            details.insert("stopped_early".into(), json!(why));
        }
        let mut j = Judgment::new(
            score,
            JudgeSource::Tests,
            format!("harbor:{}/tests/test.sh", task.name),
        )?
        .with_passed(score >= 1.0);
        j.components = components;
        for (k, v) in details {
            j = j.with_detail(&k, v);
        }
        traj.judgment = Some(j);
        sb.destroy()?;
        Ok(())
    }
}

impl HarborEnv {
    /// Harbor's oracle: solution/ at /solution, `bash /solution/solve.sh` from the workdir.
    fn run_oracle(&self, sb: &Sandbox, task: &HarborTask, step: &HarborStep) -> Result<String> {
        if step.solution.is_empty() {
            return Err(Error::Environment(format!(
                "{}: step `{}` has no solution/solve.sh, so the oracle cannot run",
                task.name, step.name
            )));
        }
        sb.remove("/solution")?;
        put_all(sb, &step.solution)?;
        let mut exec = Exec::shell(&step.solve_command).timeout(step.agent_timeout);
        exec.env = task.solution_env.clone();
        exec.env
            .insert("DEBIAN_FRONTEND".into(), "noninteractive".into());
        let r = sb.exec(&exec)?;
        let out = format!("{}{}", r.stdout, r.stderr);
        sb.put("/logs/agent/oracle.txt", out.as_bytes(), 0o644)?;
        Ok(out)
    }
}

/// Upload files and directories (host path, sandbox path), keeping file modes.
fn put_all(sb: &Sandbox, items: &[(PathBuf, String)]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for (host, at) in items {
        if host.is_dir() {
            sb.put_dir(host, at)?;
        } else {
            let data = crate::limits::read_file(host, &crate::limits::TASK_FILE)
                .map_err(|e| e.into_error(format!("harbor: read {}", host.display())))?;
            let mode = std::fs::metadata(host)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0o644);
            sb.put(at, &data, mode)?;
        }
    }
    Ok(())
}

/// The backend `asked` names (`auto`, `container`, `jail`) and why it runs.
fn choose_backend(asked: &str) -> Result<(BackendKind, String)> {
    let invalid = |expected: &str| Error::InvalidParameter {
        driver: SCHEME.into(),
        param: "backend".into(),
        value: asked.into(),
        expected: expected.into(),
    };
    if asked == "auto" {
        return Ok(match BackendKind::Container.ready() {
            Ok(()) => {
                let engine = Engine::detect()?;
                (
                    BackendKind::Container,
                    format!(
                        "backend=auto and {} is ready, so each task runs in a container of its \
                         Dockerfile's image",
                        engine.kind().name()
                    ),
                )
            }
            Err(why) => (
                BackendKind::Jail,
                format!(
                    "backend=auto fell back to the jail because the container backend is not \
                     ready ({why})"
                ),
            ),
        });
    }
    let kind = BackendKind::parse(asked)
        .map_err(|_| invalid("`auto`, `container` (also `podman` or `docker`) or `jail`"))?;
    match kind {
        BackendKind::Container => {
            BackendKind::Container.ready().map_err(|why| {
                Error::Sandbox(format!(
                    "harbor: backend={asked} was asked for, but the container backend is not \
                     ready: {why}"
                ))
            })?;
            Ok((kind, format!("backend={asked} was asked for")))
        }
        BackendKind::Jail => {
            BackendKind::Jail.ready().map_err(|why| {
                Error::Sandbox(format!(
                    "harbor: backend=jail was asked for, but the jail cannot run here: {why}"
                ))
            })?;
            Ok((
                kind,
                "backend=jail was asked for; the host's root file system stands in for the \
                 task's image"
                    .into(),
            ))
        }
        BackendKind::Process => Err(invalid(
            "`auto`, `container` or `jail`: Harbor tasks write and test absolute paths (/app, \
             /tests, /logs) that only a jail or a container provides",
        )),
        BackendKind::Plugin(p) => {
            let p = p.plugin();
            if !p.level().satisfies(crate::contract::Isolation::Jail) {
                return Err(invalid(&format!(
                    "a backend of jail isolation or above: sandbox plugin `{asked}` declares \
                     {:?} isolation, and Harbor tasks write and test absolute paths (/app, \
                     /tests, /logs) that only a jail or a container provides",
                    p.level()
                )));
            }
            p.ready().map_err(|why| {
                Error::Sandbox(format!(
                    "harbor: backend={asked} was asked for, but that sandbox plugin cannot run \
                     here: {why}"
                ))
            })?;
            Ok((
                kind,
                format!(
                    "backend={asked} was asked for: sandbox plugin `{asked}` {} ({}); the \
                     host's root file system stands in for the task's image as in a jail",
                    p.info().version,
                    p.info().source
                ),
            ))
        }
    }
}

/// The task's image: its Dockerfile built (or the cached build reused), its prebuilt image
/// resolved, or the default base.
fn task_image(engine: &Engine, t: &HarborTask) -> Result<BuiltImage> {
    match &t.image {
        TaskImage::Dockerfile {
            path,
            context,
            timeout,
        } => images::build(
            engine,
            &images::BuildSpec {
                name: t.name.clone(),
                dockerfile: path.clone(),
                context: context.clone(),
                timeout: *timeout,
            },
        ),
        TaskImage::Prebuilt(name) => prebuilt(engine, &t.name, name),
        TaskImage::Base => prebuilt(engine, &t.name, &crate::sandbox::default_image()),
    }
}

fn prebuilt(engine: &Engine, task: &str, image: &str) -> Result<BuiltImage> {
    let choice = images::resolve_base(engine, image).map_err(|e| match e {
        Error::Sandbox(m) => Error::Sandbox(format!("harbor: task `{task}`: {m}")),
        other => other,
    })?;
    Ok(BuiltImage {
        tag: choice.used.clone(),
        hash: String::new(),
        bases: vec![choice],
        reused: true,
        log: PathBuf::new(),
    })
}
