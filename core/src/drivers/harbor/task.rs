//! Reading Harbor task directories (task.toml) and old Terminal-Bench ones (task.yaml).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::sandbox::PRIVATE_DIRS;

/// One task, ready to run.
#[derive(Debug, Clone)]
pub struct HarborTask {
    /// The task's id: its directory name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// The working directory (Dockerfile WORKDIR, `[environment].workdir`, else `/app`).
    pub workdir: String,
    /// Environment of every command (Dockerfile ENV, then `[environment.env]`).
    pub env: BTreeMap<String, String>,
    /// Dockerfile COPY lines: host source, sandbox destination.
    pub copies: Vec<(PathBuf, String)>,
    /// Top-level directories beyond the standard ones that COPY or WORKDIR need.
    pub extra_dirs: Vec<String>,
    /// `[solution.env]`.
    pub solution_env: BTreeMap<String, String>,
    /// The steps (one for a single-step task).
    pub steps: Vec<HarborStep>,
    /// Why the jail cannot stand in for this task's image (a RUN that installs what the host
    /// lacks, a prebuilt image, a system path); `None` when it can.
    pub jail_problem: Option<String>,
    /// The image the container backend runs: built from a Dockerfile, or prebuilt.
    pub image: TaskImage,
    /// `[environment] allow_internet` (Harbor's default: true): network while the agent and
    /// the tests run. The image build always has network.
    pub allow_internet: bool,
    /// `[environment] cpus`.
    pub cpus: Option<f64>,
    /// `[environment] memory_mb`.
    pub memory_mb: Option<u64>,
}

/// Where a task's container image comes from.
#[derive(Debug, Clone)]
pub enum TaskImage {
    /// Built from this Dockerfile with this context, within the build timeout.
    Dockerfile {
        /// The Dockerfile.
        path: PathBuf,
        /// Its build context.
        context: PathBuf,
        /// `[environment] build_timeout_sec` (600 s by default).
        timeout: Duration,
    },
    /// `[environment] docker_image`: a prebuilt image.
    Prebuilt(String),
    /// No Dockerfile and no image: the default base.
    Base,
}

/// One step of a task.
#[derive(Debug, Clone)]
pub struct HarborStep {
    /// The step's name (`main` for single-step tasks).
    pub name: String,
    /// What the agent is asked.
    pub instruction: String,
    /// The agent's time limit.
    pub agent_timeout: Duration,
    /// The verifier's time limit.
    pub verifier_timeout: Duration,
    /// The verifier's environment.
    pub verifier_env: BTreeMap<String, String>,
    /// Early stop below this reward.
    pub min_reward: Option<f64>,
    /// What goes into /tests: host path (file or directory), sandbox path.
    pub tests: Vec<(PathBuf, String)>,
    /// The verifier command.
    pub test_command: String,
    /// What goes into /solution for the oracle; empty when the step has no solution.
    pub solution: Vec<(PathBuf, String)>,
    /// The oracle's command.
    pub solve_command: String,
    /// Files uploaded to the workdir before the agent runs (`steps/<name>/workdir/`).
    pub workdir_files: Option<PathBuf>,
    /// A command that must succeed before the agent starts, with its retries and interval.
    pub healthcheck: Option<(String, u32, Duration)>,
}

/// The tasks at `root`: one task directory, or a directory whose sub-directories are tasks.
pub fn discover(root: &Path) -> Result<Vec<HarborTask>> {
    let is_task = |p: &Path| p.join("task.toml").is_file() || p.join("task.yaml").is_file();
    if !root.is_dir() {
        return Err(Error::Environment(format!(
            "harbor: {} is not a directory; give a task directory (with task.toml or task.yaml) \
             or a directory of them",
            root.display()
        )));
    }
    if is_task(root) {
        return Ok(vec![load(root)?]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| Error::io(format!("harbor: list {}", root.display()), e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_task(p))
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(Error::Environment(format!(
            "harbor: {} holds no task (no task.toml or task.yaml in it or its sub-directories)",
            root.display()
        )));
    }
    dirs.iter().map(|d| load(d)).collect()
}

/// A `*_sec` field of task.toml as a duration (at least 1 ms); a value that is not a number of
/// seconds from 0 to a year is a task error naming the field.
fn secs(v: Option<&toml::Value>, default: f64, task: &str, field: &str) -> Result<Duration> {
    match v {
        None => checked_secs(default, &default.to_string(), task, "task.toml", field),
        Some(v) => {
            let s = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
            checked_secs(
                s.unwrap_or(f64::NAN),
                &v.to_string(),
                task,
                "task.toml",
                field,
            )
        }
    }
}

/// `s` seconds as a duration (at least 1 ms), or a task error naming the file and field that
/// gave `shown`.
fn checked_secs(s: f64, shown: &str, task: &str, file: &str, field: &str) -> Result<Duration> {
    if !(0.0..=crate::limits::MAX_SECONDS).contains(&s) {
        return Err(Error::Environment(format!(
            "harbor: task `{task}`: `{field}` in {file} is {shown}; it must be a number of \
             seconds from 0 to {:.0} (a year)",
            crate::limits::MAX_SECONDS
        )));
    }
    Ok(Duration::from_secs_f64(s.max(0.001)))
}

fn get<'a>(t: &'a toml::Value, path: &[&str]) -> Option<&'a toml::Value> {
    let mut cur = t;
    for p in path {
        cur = cur.get(p)?;
    }
    Some(cur)
}

/// Load one task directory.
pub fn load(dir: &Path) -> Result<HarborTask> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    // Every file of the task is checked against the real directory, so a symlink that leads
    // out of it is caught however the task was named.
    let dir = &std::fs::canonicalize(dir)
        .map_err(|e| Error::io(format!("harbor: open task {}", dir.display()), e))?;
    let task = if dir.join("task.toml").is_file() {
        load_harbor(dir, name)?
    } else {
        load_terminal_bench(dir, name)?
    };
    confine_task_files(&task)?;
    Ok(task)
}

/// A Harbor `task.toml` task in `dir` (canonical).
fn load_harbor(dir: &Path, name: String) -> Result<HarborTask> {
    let raw = read_text(dir, &dir.join("task.toml"))?;
    let cfg: toml::Value = toml::from_str(&raw).map_err(|e| {
        Error::Environment(format!(
            "harbor: {}/task.toml is not valid TOML: {e}",
            dir.display()
        ))
    })?;
    let env_dir = dir.join("environment");
    let build_timeout = secs(
        get(&cfg, &["environment", "build_timeout_sec"]),
        600.0,
        &name,
        "environment.build_timeout_sec",
    )?;
    let prebuilt = get(&cfg, &["environment", "docker_image"]).and_then(|v| v.as_str());
    let (mut image, task_image) = if let Some(img) = prebuilt {
        let jail_problem = Some(
            needs_container(
                &name,
                "it names a prebuilt docker_image, which only a container backend can run",
            )
            .to_string(),
        );
        let image = Image {
            jail_problem,
            ..Image::default()
        };
        (image, TaskImage::Prebuilt(img.to_string()))
    } else if env_dir.join("Dockerfile").is_file() {
        (
            parse_dockerfile(dir, &env_dir.join("Dockerfile"), &env_dir)?,
            TaskImage::Dockerfile {
                path: env_dir.join("Dockerfile"),
                context: env_dir.clone(),
                timeout: build_timeout,
            },
        )
    } else {
        (Image::default(), TaskImage::Base)
    };
    let allow_internet = match get(&cfg, &["environment", "allow_internet"]) {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| {
            Error::Environment(format!(
                "harbor: task `{name}`: `environment.allow_internet` in task.toml is {v}; it \
                 must be true or false"
            ))
        })?,
    };
    let cpus = match get(&cfg, &["environment", "cpus"]) {
        None => None,
        Some(v) => match v.as_float().or_else(|| v.as_integer().map(|i| i as f64)) {
            Some(c) if c > 0.0 && c <= 1024.0 => Some(c),
            _ => {
                return Err(Error::Environment(format!(
                    "harbor: task `{name}`: `environment.cpus` in task.toml is {v}; it must be \
                     a number of CPUs above 0 and at most 1024"
                )))
            }
        },
    };
    let memory_mb = match get(&cfg, &["environment", "memory_mb"]) {
        None => None,
        Some(v) => match v.as_integer() {
            Some(m) if (6..=1 << 24).contains(&m) => Some(m as u64),
            _ => {
                return Err(Error::Environment(format!(
                    "harbor: task `{name}`: `environment.memory_mb` in task.toml is {v}; it \
                     must be a whole number of MiB from 6 to 16777216"
                )))
            }
        },
    };
    if let Some(w) = get(&cfg, &["environment", "workdir"]).and_then(|v| v.as_str()) {
        image.workdir = Some(w.to_string());
    }
    for (k, v) in string_table(get(&cfg, &["environment", "env"])) {
        image.env.insert(k, v);
    }
    let workdir = image.workdir.clone().unwrap_or_else(|| "/app".into());
    let mut extra_dirs = image.extra_dirs.clone();
    if let Err(e) = top_dir(&workdir, &name, &mut extra_dirs) {
        image.jail_problem.get_or_insert(e.to_string());
    }
    let agent_default = get(&cfg, &["agent", "timeout_sec"]);
    let verifier_default = get(&cfg, &["verifier", "timeout_sec"]);
    let verifier_env = string_table(get(&cfg, &["verifier", "env"]));
    let test_command = "bash /tests/test.sh".to_string();
    let solve_command = "bash /solution/solve.sh".to_string();
    let mut steps = Vec::new();
    match cfg.get("steps").and_then(|s| s.as_array()) {
        Some(list) if !list.is_empty() => {
            for s in list {
                let sname = s
                    .get("name")
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| {
                        Error::Environment(format!("harbor: {name}: a [[steps]] entry has no name"))
                    })?
                    .to_string();
                let sdir = dir.join("steps").join(&sname);
                let mut tests = Vec::new();
                if dir.join("tests").is_dir() {
                    tests.push((dir.join("tests"), "/tests".to_string()));
                }
                if sdir.join("tests").is_dir() {
                    tests.push((sdir.join("tests"), "/tests".to_string()));
                }
                let solution = [sdir.join("solution"), dir.join("solution")]
                    .into_iter()
                    .find(|p| p.join("solve.sh").is_file())
                    .map(|p| vec![(p, "/solution".to_string())])
                    .unwrap_or_default();
                let mut venv = verifier_env.clone();
                venv.extend(string_table(get(s, &["verifier", "env"])));
                let healthcheck = s.get("healthcheck").and_then(|h| {
                    Some((
                        h.get("command")?.as_str()?.to_string(),
                        h.get("retries")
                            .and_then(|r| r.as_integer())
                            .unwrap_or(3)
                            .max(1) as u32,
                        h.get("interval_sec"),
                    ))
                });
                let healthcheck = match healthcheck {
                    Some((command, retries, interval)) => Some((
                        command,
                        retries,
                        secs(interval, 1.0, &name, "steps.healthcheck.interval_sec")?,
                    )),
                    None => None,
                };
                steps.push(HarborStep {
                    name: sname.clone(),
                    instruction: read_text(dir, &sdir.join("instruction.md"))?,
                    agent_timeout: secs(
                        get(s, &["agent", "timeout_sec"]).or(agent_default),
                        3600.0,
                        &name,
                        "agent.timeout_sec",
                    )?,
                    verifier_timeout: secs(
                        get(s, &["verifier", "timeout_sec"]).or(verifier_default),
                        600.0,
                        &name,
                        "verifier.timeout_sec",
                    )?,
                    verifier_env: venv,
                    min_reward: s
                        .get("min_reward")
                        .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64))),
                    tests,
                    test_command: test_command.clone(),
                    solution,
                    solve_command: solve_command.clone(),
                    workdir_files: Some(sdir.join("workdir")).filter(|p| p.is_dir()),
                    healthcheck,
                });
            }
        }
        _ => {
            steps.push(HarborStep {
                name: "main".into(),
                instruction: read_text(dir, &dir.join("instruction.md"))?,
                agent_timeout: secs(agent_default, 3600.0, &name, "agent.timeout_sec")?,
                verifier_timeout: secs(verifier_default, 600.0, &name, "verifier.timeout_sec")?,
                verifier_env,
                min_reward: None,
                tests: vec![(dir.join("tests"), "/tests".into())],
                test_command,
                solution: Some(dir.join("solution"))
                    .filter(|p| p.join("solve.sh").is_file())
                    .map(|p| vec![(p, "/solution".to_string())])
                    .unwrap_or_default(),
                solve_command,
                workdir_files: None,
                healthcheck: None,
            });
        }
    }
    Ok(HarborTask {
        name,
        dir: dir.to_path_buf(),
        workdir,
        env: image.env,
        copies: image.copies,
        extra_dirs,
        solution_env: string_table(get(&cfg, &["solution", "env"])),
        steps,
        jail_problem: image.jail_problem,
        image: task_image,
        allow_internet,
        cpus,
        memory_mb,
    })
}

/// The old Terminal-Bench layout: task.yaml, Dockerfile, run-tests.sh, solution.sh, tests/.
fn load_terminal_bench(dir: &Path, name: String) -> Result<HarborTask> {
    let yaml = read_text(dir, &dir.join("task.yaml"))?;
    let instruction = yaml_field(&yaml, "instruction").ok_or_else(|| {
        Error::Environment(format!(
            "harbor: {}/task.yaml has no `instruction`",
            dir.display()
        ))
    })?;
    let timeout = |k: &str, d: f64| match yaml_field(&yaml, k) {
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) => checked_secs(s, v.trim(), &name, "task.yaml", k),
            Err(_) => checked_secs(d, &d.to_string(), &name, "task.yaml", k),
        },
        None => checked_secs(d, &d.to_string(), &name, "task.yaml", k),
    };
    let agent_timeout = timeout("max_agent_timeout_sec", 360.0)?;
    let verifier_timeout = timeout("max_test_timeout_sec", 60.0)?;
    let (mut image, task_image) = if dir.join("Dockerfile").is_file() {
        (
            parse_dockerfile(dir, &dir.join("Dockerfile"), dir)?,
            TaskImage::Dockerfile {
                path: dir.join("Dockerfile"),
                context: dir.to_path_buf(),
                timeout: Duration::from_secs(600),
            },
        )
    } else {
        (Image::default(), TaskImage::Base)
    };
    let workdir = image.workdir.clone().unwrap_or_else(|| "/app".into());
    let mut extra_dirs = image.extra_dirs.clone();
    if let Err(e) = top_dir(&workdir, &name, &mut extra_dirs) {
        image.jail_problem.get_or_insert(e.to_string());
    }
    let mut tests = Vec::new();
    if dir.join("tests").is_dir() {
        tests.push((dir.join("tests"), "/tests".to_string()));
    }
    tests.push((dir.join("run-tests.sh"), "/tests/run-tests.sh".to_string()));
    let mut verifier_env = BTreeMap::new();
    verifier_env.insert("TEST_DIR".to_string(), "/tests".to_string());
    Ok(HarborTask {
        name,
        dir: dir.to_path_buf(),
        workdir,
        env: image.env,
        copies: image.copies,
        extra_dirs,
        solution_env: BTreeMap::new(),
        steps: vec![HarborStep {
            name: "main".into(),
            instruction,
            agent_timeout,
            verifier_timeout,
            verifier_env,
            min_reward: None,
            tests,
            // Harbor's mapper: the reward is run-tests.sh's exit status.
            test_command: "bash /tests/run-tests.sh; if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi".into(),
            solution: Some(dir.join("solution.sh"))
                .filter(|p| p.is_file())
                .map(|p| vec![(p, "/solution/solve.sh".to_string())])
                .unwrap_or_default(),
            solve_command: "bash /solution/solve.sh".into(),
            workdir_files: None,
            healthcheck: None,
        }],
        jail_problem: image.jail_problem,
        image: task_image,
        // Terminal-Bench's compose files give the container the network.
        allow_internet: true,
        cpus: None,
        memory_mb: None,
    })
}

/// A top-level `key: value` or `key: |` block from a YAML file (enough for task.yaml).
fn yaml_field(yaml: &str, key: &str) -> Option<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let prefix = format!("{key}:");
    let i = lines.iter().position(|l| l.starts_with(&prefix))?;
    let rest = lines[i][prefix.len()..].trim();
    if rest.starts_with('|') || rest.starts_with('>') {
        let mut out = Vec::new();
        let mut indent = None;
        for l in &lines[i + 1..] {
            if !l.trim().is_empty() && !l.starts_with(' ') && !l.starts_with('\t') {
                break;
            }
            let n = l.len() - l.trim_start().len();
            let ind = *indent.get_or_insert(n);
            // A line indented less than the first (or by other whitespace) loses all of it;
            // cutting at a byte count could split a character.
            out.push(l.get(ind..).unwrap_or_else(|| l.trim_start()));
        }
        while out.last().is_some_and(|l| l.is_empty()) {
            out.pop();
        }
        let sep = if rest.starts_with('>') { " " } else { "\n" };
        let mut s = out.join(sep);
        if !rest.contains('-') {
            s.push('\n');
        }
        Some(s)
    } else {
        Some(rest.trim_matches('"').trim_matches('\'').to_string())
    }
}

#[derive(Debug, Default)]
struct Image {
    workdir: Option<String>,
    env: BTreeMap<String, String>,
    copies: Vec<(PathBuf, String)>,
    extra_dirs: Vec<String>,
    /// The first reason the jail cannot stand in for the image.
    jail_problem: Option<String>,
}

fn needs_container(task: &str, why: &str) -> Error {
    Error::Environment(format!(
        "harbor: task `{task}` needs a container backend: {why}. The jail backend runs \
         Dockerfiles made of FROM, WORKDIR, ENV, COPY and RUN lines that only install packages \
         the host already has"
    ))
}

fn top_dir(path: &str, task: &str, extra: &mut Vec<String>) -> Result<()> {
    let first = path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    if !path.starts_with('/') || first.is_empty() || first == ".." || first.starts_with('.') {
        return Err(needs_container(
            task,
            &format!("the path `{path}` is not a plain absolute path"),
        ));
    }
    let system = [
        "usr", "bin", "sbin", "lib", "lib64", "etc", "var", "opt", "root", "home", "dev", "proc",
        "sys", "boot", "srv", "run", "mnt", "media",
    ];
    if system.contains(&first.as_str()) {
        return Err(needs_container(
            task,
            &format!("it writes `{path}` inside the host's read-only system directories"),
        ));
    }
    if !PRIVATE_DIRS.contains(&first.as_str()) && !extra.contains(&first) {
        extra.push(first);
    }
    Ok(())
}

fn host_has_package(pkg: &str) -> bool {
    std::process::Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// RUN lines the host already satisfies: apt-get update/install of installed packages and
/// cleaning apt's lists.
fn run_is_satisfied(cmd: &str) -> std::result::Result<(), String> {
    for part in cmd.split("&&").map(str::trim) {
        let words: Vec<&str> = part.split_whitespace().collect();
        match words.as_slice() {
            ["apt-get" | "apt", "update", ..] => {}
            ["rm", "-rf", rest @ ..]
                if rest.iter().all(|p| p.starts_with("/var/lib/apt/lists")) => {}
            ["apt-get" | "apt", "install", rest @ ..] => {
                for pkg in rest.iter().filter(|w| !w.starts_with('-')) {
                    if !host_has_package(pkg) {
                        return Err(format!(
                            "RUN installs `{pkg}`, which this host does not have"
                        ));
                    }
                }
            }
            _ => return Err(format!("RUN `{part}` changes the image")),
        }
    }
    Ok(())
}

fn parse_dockerfile(root: &Path, path: &Path, context: &Path) -> Result<Image> {
    let text = read_text(root, path)?;
    let task = path
        .parent()
        .and_then(|p| {
            if p.ends_with("environment") {
                p.parent()
            } else {
                Some(p)
            }
        })
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut img = Image::default();
    // (first physical line number, the logical line with its continuations joined)
    let mut logical = Vec::new();
    let mut cur = String::new();
    let mut first = 0;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        if cur.is_empty() {
            first = i + 1;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
        } else {
            cur.push_str(t);
            logical.push((first, std::mem::take(&mut cur)));
        }
    }
    if !cur.is_empty() {
        logical.push((first, cur));
    }
    for (line_no, l) in logical {
        let (ins, rest) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let rest = rest.trim();
        match ins.to_ascii_uppercase().as_str() {
            "FROM" | "LABEL" | "CMD" | "ENTRYPOINT" | "ARG" | "SHELL" | "EXPOSE" => {}
            "WORKDIR" => {
                if let Err(e) = top_dir(rest, &task, &mut img.extra_dirs) {
                    img.jail_problem.get_or_insert(e.to_string());
                }
                img.workdir = Some(rest.to_string());
            }
            "ENV" => {
                if let Some((k, v)) = rest.split_once('=') {
                    if !k.contains(' ') {
                        for kv in rest.split_whitespace() {
                            if let Some((k, v)) = kv.split_once('=') {
                                img.env.insert(k.into(), v.trim_matches('"').into());
                            }
                        }
                        continue;
                    }
                    let _ = v;
                }
                if let Some((k, v)) = rest.split_once(char::is_whitespace) {
                    img.env.insert(k.into(), v.trim().trim_matches('"').into());
                }
            }
            "COPY" | "ADD" => {
                let words: Vec<&str> = rest
                    .split_whitespace()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                if rest.contains("--from=") {
                    img.jail_problem.get_or_insert(
                        needs_container(&task, &format!("`{l}` copies from another image"))
                            .to_string(),
                    );
                    continue;
                }
                if words.len() < 2 || rest.contains("http://") || rest.contains("https://") {
                    img.jail_problem.get_or_insert(
                        needs_container(&task, &format!("`{l}` is not a local copy")).to_string(),
                    );
                    continue;
                }
                let dst = words[words.len() - 1].to_string();
                let dst = if dst.starts_with('/') {
                    dst
                } else {
                    format!(
                        "{}/{dst}",
                        img.workdir.clone().unwrap_or_else(|| "/".into())
                    )
                };
                if let Err(e) = top_dir(&dst, &task, &mut img.extra_dirs) {
                    img.jail_problem.get_or_insert(e.to_string());
                }
                for src in &words[..words.len() - 1] {
                    let s = context_source(context, src).map_err(|why| {
                        Error::Environment(format!(
                            "harbor: task `{task}`: {} line {line_no} `{l}`: {why}",
                            path.display()
                        ))
                    })?;
                    // A file copied into a directory keeps the name it has in the Dockerfile,
                    // not its symlink target's.
                    let name = Path::new(src).file_name().filter(|_| s.is_file());
                    let to = match name {
                        Some(n) if dst.ends_with('/') => format!("{dst}{}", n.to_string_lossy()),
                        _ => dst.clone(),
                    };
                    img.copies.push((s, to));
                }
            }
            "RUN" => {
                if img.jail_problem.is_none() {
                    if let Err(why) = run_is_satisfied(rest) {
                        img.jail_problem = Some(needs_container(&task, &why).to_string());
                    }
                }
            }
            other => {
                img.jail_problem.get_or_insert(
                    needs_container(&task, &format!("the Dockerfile uses {other}")).to_string(),
                );
            }
        }
    }
    Ok(img)
}

/// Where a COPY/ADD source lies, read the way Docker reads a build context: relative to the
/// context even when absolute, and never outside it, neither by `..` nor through a symlink (the
/// host's files are read as root and handed to the agent, so an escape would leak them).
fn context_source(context: &Path, src: &str) -> std::result::Result<PathBuf, String> {
    let outside = || {
        format!(
            "the source `{src}` is outside the build context {}; COPY and ADD read only files \
             inside it (absolute sources are taken from the context, as Docker does)",
            context.display()
        )
    };
    let mut rel = PathBuf::new();
    for c in Path::new(src).components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                if !rel.pop() {
                    return Err(outside());
                }
            }
            Component::Normal(n) => rel.push(n),
        }
    }
    let root = std::fs::canonicalize(context).map_err(|e| {
        format!(
            "the build context {} cannot be read: {e}",
            context.display()
        )
    })?;
    match std::fs::canonicalize(root.join(&rel)) {
        // A FIFO or device would block or never end the copy.
        Ok(real) if real.starts_with(&root) && !(real.is_file() || real.is_dir()) => Err(format!(
            "the source `{src}` is not a regular file or directory (a FIFO, socket or device)"
        )),
        Ok(real) if real.starts_with(&root) => Ok(real),
        Ok(_) => Err(outside()),
        Err(_) => Err(format!(
            "the source `{src}` does not exist in the build context {} (absolute sources are \
             taken from the context, as Docker does)",
            context.display()
        )),
    }
}

/// `p` when it lies inside the task directory `root` (canonical) once symlinks are resolved;
/// a missing file is left for its reader to report.
fn inside_task(root: &Path, p: &Path) -> Result<()> {
    match std::fs::canonicalize(p) {
        Ok(real) if !real.starts_with(root) => Err(Error::Environment(format!(
            "harbor: {} leads outside the task directory {} (to {}); a task's files must lie \
             inside its directory",
            p.display(),
            root.display(),
            real.display()
        ))),
        _ => Ok(()),
    }
}

/// Every file the task uploads (tests, solution, step workdirs) lies inside its directory.
fn confine_task_files(task: &HarborTask) -> Result<()> {
    for step in &task.steps {
        let uploads = step.tests.iter().chain(&step.solution).map(|(p, _)| p);
        for p in uploads.chain(&step.workdir_files) {
            inside_task(&task.dir, p)?;
        }
    }
    Ok(())
}

/// Read a required UTF-8 file of the task in `root`.
fn read_text(root: &Path, p: &Path) -> Result<String> {
    inside_task(root, p)?;
    crate::limits::read_text(p, &crate::limits::CONFIG_FILE)
        .map_err(|e| e.into_error(format!("harbor: read {}", p.display())))
}

/// `BTreeMap` from a TOML table of strings.
fn string_table(v: Option<&toml::Value>) -> BTreeMap<String, String> {
    v.and_then(toml::Value::as_table)
        .map(|t| {
            t.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
