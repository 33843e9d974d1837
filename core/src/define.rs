//! Define an environment in a few lines: from tasks plus a score function, from state
//! functions, or from a file with no code at all (`define:./capitals.toml`).
//!
//! The file form:
//!
//! ```toml
//! name = "capitals"                 # optional, defaults to the file name
//! description = "Capital cities"    # optional
//! tasks_file = "capitals.jsonl"     # or inline [[tasks]] tables; paths are relative to this file
//!
//! [judge]                           # optional; this is the default
//! type = "exact"                    # exact | contains | numeric | regex | plugin (use = "name")
//! field = "answer"                  # the task field holding the expected answer
//! extract = "answer_tag"            # whole | answer_tag | last_number | boxed | regex:<pattern>
//!
//! [[tasks]]
//! prompt = "Capital of Kenya? Answer in <answer></answer> tags."
//! answer = "Nairobi"
//! ```

use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::contract::{
    JsonMap, JudgeSource, Judgment, Manifest, Mode, Observation, RewardTiming, Step, TaskRef,
    Trajectory,
};
use crate::env::{guard, task_index, Environment, Episode};
use crate::error::{Error, Result};
use crate::judges::{judge_from_spec, JudgeSpec};
use crate::limits::ReadError;
use crate::policy::Policy;

type ScoreFn = dyn Fn(&JsonMap, &str) -> Result<f64> + Send + Sync;
type ReferenceFn = dyn Fn(&JsonMap) -> Option<String> + Send + Sync;

/// A single-turn environment from task rows (each with a `prompt`) and a score function.
pub struct TaskEnvBuilder {
    name: String,
    rows: Vec<JsonMap>,
    score: Arc<ScoreFn>,
    reference: Option<Arc<ReferenceFn>>,
    description: Option<String>,
    judge_id: String,
}

impl TaskEnvBuilder {
    /// Rows and a scorer `(task row, reply) -> score`; every row must have a string `prompt`.
    pub fn new(
        name: impl Into<String>,
        rows: Vec<JsonMap>,
        score: impl Fn(&JsonMap, &str) -> Result<f64> + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        TaskEnvBuilder {
            judge_id: format!("{name}.score"),
            name,
            rows,
            score: Arc::new(score),
            reference: None,
            description: None,
        }
    }

    /// The reply an oracle would give for a row (enables the audited tier).
    pub fn reference(
        mut self,
        f: impl Fn(&JsonMap) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.reference = Some(Arc::new(f));
        self
    }

    /// A one-paragraph description.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }

    /// Check the rows and build the environment.
    pub fn build(self) -> Result<Arc<dyn Environment>> {
        let id = format!("defined:{}", self.name);
        self.build_with_id(id, "<inline>", &[])
    }

    fn build_with_id(
        self,
        id: String,
        file: &str,
        lines: &[usize],
    ) -> Result<Arc<dyn Environment>> {
        if self.rows.is_empty() {
            return Err(Error::Define {
                file: file.into(),
                line: 0,
                field: "tasks".into(),
                message: "no tasks; give at least one row with a `prompt`".into(),
            });
        }
        for (i, row) in self.rows.iter().enumerate() {
            if !row.get("prompt").is_some_and(Value::is_string) {
                return Err(Error::Define {
                    file: file.into(),
                    line: lines.get(i).copied().unwrap_or(0),
                    field: format!("tasks[{i}].prompt"),
                    message: match row.get("prompt") {
                        None => "missing; every task needs a `prompt` string".into(),
                        Some(v) => format!("must be a string, got {v}"),
                    },
                });
            }
        }
        let mut m = Manifest::new(id, self.name.clone(), "nenyax.define", Mode::Step);
        m.description = self.description.clone();
        m.capabilities.text = true;
        m.num_tasks = Some(self.rows.len() as u64);
        Ok(Arc::new(TaskEnv {
            manifest: m,
            rows: Arc::new(self.rows),
            score: self.score,
            reference: self.reference,
            judge_id: self.judge_id,
        }))
    }
}

struct TaskEnv {
    manifest: Manifest,
    rows: Arc<Vec<JsonMap>>,
    score: Arc<ScoreFn>,
    reference: Option<Arc<ReferenceFn>>,
    judge_id: String,
}

impl TaskEnv {
    fn task(&self, i: usize) -> TaskRef {
        let row = &self.rows[i];
        let mut t = TaskRef::new(i.to_string());
        t.prompt = row
            .get("prompt")
            .and_then(Value::as_str)
            .map(str::to_string);
        t.metadata = row
            .iter()
            .filter(|(k, _)| k.as_str() != "prompt")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        t
    }

    fn index(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<usize> {
        task_index(&self.manifest.id, self.rows.len() as u64, task, seed).map(|i| i as usize)
    }
}

struct TaskEpisode {
    judge_id: String,
    row: JsonMap,
    task: TaskRef,
    score: Arc<ScoreFn>,
    obs: Observation,
}

impl Environment for TaskEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        let n = limit.unwrap_or(usize::MAX).min(self.rows.len());
        Ok((0..n).map(|i| self.task(i)).collect())
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let i = self.index(task, seed)?;
        let t = self.task(i);
        let mut obs = Observation::text(t.prompt.clone().unwrap_or_default());
        obs.info.insert("task_id".into(), json!(t.id));
        Ok(Box::new(TaskEpisode {
            judge_id: self.judge_id.clone(),
            row: self.rows[i].clone(),
            task: t,
            score: self.score.clone(),
            obs,
        }))
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        let reference = self.reference.clone()?;
        let rows = self.rows.clone();
        // Only claim an oracle when it can answer every task.
        if rows.iter().any(|r| reference(r).is_none()) {
            return None;
        }
        Some(Policy::action(move |obs| {
            let i: usize = obs
                .info
                .get("task_id")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::Policy("observation has no task_id".into()))?;
            Ok(json!(reference(&rows[i]).unwrap_or_default()))
        }))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        Some(Policy::constant(json!("")))
    }

    fn default_max_steps(&self) -> usize {
        1
    }
}

impl Episode for TaskEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let reply = match action {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let score = (self.score)(&self.row, &reply)?;
        if !score.is_finite() {
            return Err(Error::NonFiniteScore {
                judge: self.judge_id.clone(),
                score,
            });
        }
        Ok(Step {
            action: Value::String(reply),
            observation: Observation::text(""),
            reward: score,
            terminated: true,
            truncated: false,
            info: JsonMap::new(),
        })
    }

    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        let score = steps.last().map_or(0.0, |s| s.reward);
        Judgment::new(score, JudgeSource::Verifier, self.judge_id.clone())
    }

    fn task(&self) -> Option<TaskRef> {
        Some(self.task.clone())
    }
}

type ResetFn = dyn Fn(i64) -> Result<Value> + Send + Sync;
type ObserveFn = dyn Fn(&Value) -> Result<Value> + Send + Sync;
type StepFn = dyn Fn(&mut Value, &Value) -> Result<(f64, bool)> + Send + Sync;

/// A multi-turn environment from state functions over a JSON state:
/// `reset(seed) -> state`, `observe(&state) -> text or JSON`, `step(&mut state, action) -> (reward, done)`.
pub fn stateful(
    name: &str,
    reset: impl Fn(i64) -> Result<Value> + Send + Sync + 'static,
    observe: impl Fn(&Value) -> Result<Value> + Send + Sync + 'static,
    step: impl Fn(&mut Value, &Value) -> Result<(f64, bool)> + Send + Sync + 'static,
    max_steps: usize,
) -> Arc<dyn Environment> {
    let mut m = Manifest::new(format!("defined:{name}"), name, "nenyax.define", Mode::Step);
    m.capabilities.text = true;
    m.capabilities.reward_timing = RewardTiming::PerStep;
    Arc::new(StateEnv {
        manifest: m,
        reset: Arc::new(reset),
        observe: Arc::new(observe),
        step: Arc::new(step),
        max_steps: max_steps.max(1),
    })
}

struct StateEnv {
    manifest: Manifest,
    reset: Arc<ResetFn>,
    observe: Arc<ObserveFn>,
    step: Arc<StepFn>,
    max_steps: usize,
}

struct StateEpisode {
    state: Value,
    observe: Arc<ObserveFn>,
    step: Arc<StepFn>,
    obs: Observation,
}

fn to_observation(seen: Value) -> Observation {
    match seen {
        Value::String(s) => Observation::text(s),
        data => Observation {
            data,
            ..Observation::default()
        },
    }
}

impl Environment for StateEnv {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&self, _task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let state = (self.reset)(seed.unwrap_or(0))?;
        let obs = to_observation((self.observe)(&state)?);
        Ok(Box::new(StateEpisode {
            state,
            observe: self.observe.clone(),
            step: self.step.clone(),
            obs,
        }))
    }

    fn default_max_steps(&self) -> usize {
        self.max_steps
    }
}

impl Episode for StateEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let (reward, done) = (self.step)(&mut self.state, action)?;
        self.obs = to_observation((self.observe)(&self.state)?);
        Ok(Step {
            action: action.clone(),
            observation: self.obs.clone(),
            reward,
            terminated: done,
            truncated: false,
            info: JsonMap::new(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// define: files

/// The `define:` scheme's driver, at its old path; it is [`crate::drivers::define`] now.
pub use crate::drivers::define::DefineDriver;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DefineFile {
    name: Option<String>,
    description: Option<String>,
    tasks_file: Option<String>,
    #[serde(default)]
    tasks: Vec<toml::Spanned<toml::Table>>,
    judge: Option<JudgeSpec>,
}

/// Line numbers of byte offsets in one text. Counting newlines up to each task's offset made
/// loading quadratic (40 s for 20,000 inline tasks); the line starts are found once instead.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        Lines(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        )
    }

    /// The 1-based line holding byte `offset`.
    fn of(&self, offset: usize) -> usize {
        self.0.partition_point(|&nl| nl < offset) + 1
    }
}

/// Load a `define:` TOML file; errors name the file, line and field.
pub fn load_file(path: &Path, id: &str) -> Result<Arc<dyn Environment>> {
    let file = path.display().to_string();
    let derr = |line: usize, field: &str, message: String| Error::Define {
        file: file.clone(),
        line,
        field: field.to_string(),
        message,
    };
    let text = crate::limits::read_text(path, &crate::limits::TASK_FILE).map_err(|e| match e {
        ReadError::Io(e) => derr(
            0,
            "file",
            format!("cannot read it ({e}); check the path after `define:`"),
        ),
        ReadError::TooLarge(m) => derr(0, "file", m),
        ReadError::Setting(e) => e,
    })?;
    let lines = Lines::new(&text);
    let spec: DefineFile = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(0, |s| lines.of(s.start));
        let msg = e.message().trim().to_string();
        let field = msg
            .split('`')
            .nth(1)
            .filter(|_| msg.contains("field"))
            .unwrap_or("toml")
            .to_string();
        derr(line, &field, msg)
    })?;
    let judge_line = text
        .lines()
        .position(|l| l.trim() == "[judge]")
        .map_or(0, |i| i + 1);
    let mut inline = Vec::new();
    for t in &spec.tasks {
        let line = lines.of(t.span().start);
        let row = match serde_json::to_value(t.get_ref()) {
            Ok(Value::Object(m)) => m,
            Ok(_) => JsonMap::new(),
            Err(e) => return Err(derr(line, "tasks", e.to_string())),
        };
        inline.push((row, line));
    }
    let default_name = path
        .file_stem()
        .map_or("defined".into(), |s| s.to_string_lossy().to_string());
    assemble(
        Parts {
            name: spec.name.unwrap_or(default_name),
            description: spec.description,
            tasks_file: spec.tasks_file,
            inline,
            judge: spec.judge.unwrap_or_default(),
            judge_line,
        },
        &file,
        path.parent().unwrap_or(Path::new(".")),
        id,
    )
}

/// A definition as JSON (the same fields as a `define:` file, with `tasks` as an array of
/// objects); a `tasks_file` is read relative to `base_dir`. Used across the C ABI.
pub fn from_json_spec(json: &str, base_dir: &Path) -> Result<Arc<dyn Environment>> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct DefineJson {
        name: Option<String>,
        description: Option<String>,
        tasks_file: Option<String>,
        #[serde(default)]
        tasks: Vec<JsonMap>,
        judge: Option<JudgeSpec>,
    }
    let file = "<json spec>";
    if let Ok(v) = serde_json::from_str::<Value>(json) {
        if !v.is_object() {
            return Err(Error::Define {
                file: file.into(),
                line: 1,
                field: "spec".into(),
                message: format!(
                    "a define spec must be a JSON object with `tasks` or `tasks_file`, got {}",
                    crate::contract::preview(&v)
                ),
            });
        }
    }
    let spec: DefineJson = serde_json::from_str(json).map_err(|e| Error::Define {
        file: file.into(),
        line: e.line(),
        field: e
            .to_string()
            .split('`')
            .nth(1)
            .unwrap_or("json")
            .to_string(),
        message: e.to_string(),
    })?;
    let name = spec.name.unwrap_or_else(|| "defined".into());
    let id = format!("defined:{name}");
    assemble(
        Parts {
            name,
            description: spec.description,
            tasks_file: spec.tasks_file,
            inline: spec.tasks.into_iter().map(|r| (r, 0)).collect(),
            judge: spec.judge.unwrap_or_default(),
            judge_line: 0,
        },
        file,
        base_dir,
        &id,
    )
}

/// What a definition says, whichever syntax it came in.
struct Parts {
    name: String,
    description: Option<String>,
    tasks_file: Option<String>,
    /// Inline task rows with the line each starts on (0 when unknown).
    inline: Vec<(JsonMap, usize)>,
    judge: JudgeSpec,
    judge_line: usize,
}

fn assemble(parts: Parts, file: &str, base_dir: &Path, id: &str) -> Result<Arc<dyn Environment>> {
    let derr = |line: usize, field: &str, message: String| Error::Define {
        file: file.to_string(),
        line,
        field: field.to_string(),
        message,
    };
    let judge_spec = parts.judge;
    let (judge, extract) =
        judge_from_spec(&judge_spec).map_err(|e| derr(parts.judge_line, "judge", e.to_string()))?;
    let (rows, lines, data_file) = match (&parts.tasks_file, parts.inline.is_empty()) {
        (Some(_), false) => {
            return Err(derr(
                0,
                "tasks",
                "give either `tasks_file` or inline tasks, not both".into(),
            ))
        }
        (Some(f), true) => {
            let p: PathBuf = base_dir.join(f);
            let (rows, lines) = read_jsonl(&p)?;
            (rows, lines, p.display().to_string())
        }
        (None, _) => {
            let (rows, lines) = parts.inline.into_iter().unzip();
            (rows, lines, file.to_string())
        }
    };
    let compares = matches!(judge_spec.kind.as_str(), "exact" | "contains" | "numeric");
    for (i, row) in rows.iter().enumerate() {
        if compares && !row.contains_key(&judge_spec.field) {
            return Err(Error::Define {
                file: data_file.clone(),
                line: lines.get(i).copied().unwrap_or(0),
                field: format!("tasks[{i}].{}", judge_spec.field),
                message: format!(
                    "missing; the `{}` judge compares the reply with this field",
                    judge_spec.kind
                ),
            });
        }
    }
    let field = judge_spec.field.clone();
    let judge_for_score = judge.clone();
    let mut builder = TaskEnvBuilder::new(parts.name, rows, move |row, reply| {
        let mut task = TaskRef::new("0");
        task.metadata = row.clone();
        let mut traj = Trajectory::start("define", Mode::Step, Some(task), None);
        traj.steps.push(Step {
            action: Value::String(reply.to_string()),
            observation: Observation::default(),
            reward: 0.0,
            terminated: true,
            truncated: false,
            info: JsonMap::new(),
        });
        guard(|| judge_for_score.judge(&traj)).map(|j| j.score)
    });
    builder.judge_id = judge.id();
    if let Some(extract) = extract {
        builder = builder.reference(move |row| {
            let want = match row.get(&field)? {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            extract.render(&want)
        });
    }
    if let Some(d) = parts.description {
        builder = builder.description(d);
    }
    builder.build_with_id(id.to_string(), &data_file, &lines)
}

fn read_jsonl(path: &Path) -> Result<(Vec<JsonMap>, Vec<usize>)> {
    let file = path.display().to_string();
    let text = crate::limits::read_text(path, &crate::limits::TASK_FILE).map_err(|e| {
        let message = match e {
            ReadError::Io(e) => format!(
                "cannot read it ({e}); a tasks_file is relative to the define file (or, for a \
                 JSON spec, to the working directory)"
            ),
            ReadError::TooLarge(m) => m,
            ReadError::Setting(e) => return e,
        };
        Error::Define {
            file: file.clone(),
            line: 0,
            field: "tasks_file".into(),
            message,
        }
    })?;
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(m)) => {
                rows.push(m);
                lines.push(i + 1);
            }
            Ok(other) => {
                return Err(Error::Define {
                    file,
                    line: i + 1,
                    field: "row".into(),
                    message: format!(
                        "each line must be a JSON object, got {}",
                        crate::contract::preview(&other)
                    ),
                })
            }
            Err(e) => {
                return Err(Error::Define {
                    file,
                    line: i + 1,
                    field: "row".into(),
                    message: format!("not valid JSON: {e}"),
                })
            }
        }
    }
    Ok((rows, lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::RolloutOptions;

    fn row(prompt: &str, answer: &str) -> JsonMap {
        json!({"prompt": prompt, "answer": answer})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn line_numbers_of_offsets() {
        let text = "a\nbc\n\nd";
        let lines = Lines::new(text);
        let got: Vec<usize> = (0..=text.len()).map(|o| lines.of(o)).collect();
        assert_eq!(got, [1, 1, 2, 2, 2, 3, 4, 4]);
    }

    #[test]
    fn task_env_scores_with_the_closure() {
        let env = TaskEnvBuilder::new(
            "caps",
            vec![row("Kenya?", "Nairobi"), row("France?", "Paris")],
            |r, reply| {
                Ok(f64::from(u8::from(
                    reply.contains(r["answer"].as_str().unwrap()),
                )))
            },
        )
        .reference(|r| r["answer"].as_str().map(str::to_string))
        .build()
        .unwrap();
        assert_eq!(env.id(), "defined:caps");
        let oracle = env.reference_policy(None).unwrap();
        for t in env.tasks(None).unwrap() {
            let tr = env.rollout(&oracle, &RolloutOptions::new(Some(t), None));
            assert_eq!(tr.score(), Some(1.0));
        }
        let null = env.null_policy(None).unwrap();
        assert_eq!(
            env.rollout(&null, &RolloutOptions::default()).score(),
            Some(0.0)
        );
    }

    #[test]
    fn non_finite_scores_fail_the_episode_not_the_process() {
        let env = TaskEnvBuilder::new("nan", vec![row("q", "a")], |_, _| Ok(f64::NAN))
            .build()
            .unwrap();
        let tr = env.rollout(&Policy::constant(json!("x")), &RolloutOptions::default());
        assert!(tr.judgment.is_none());
        assert!(tr.error.unwrap().starts_with("NonFiniteScore"));
    }

    #[test]
    fn rows_without_prompts_are_refused() {
        let e = TaskEnvBuilder::new(
            "x",
            vec![json!({"q": 1}).as_object().unwrap().clone()],
            |_, _| Ok(0.0),
        )
        .build()
        .err()
        .unwrap();
        assert!(e.to_string().contains("tasks[0].prompt"), "{e}");
    }

    #[test]
    fn stateful_env_runs_to_done() {
        let env = stateful(
            "count",
            |seed| Ok(json!({"n": seed})),
            |s| Ok(json!(format!("n is {}", s["n"]))),
            |s, a| {
                let n = s["n"].as_i64().unwrap() + a.as_i64().unwrap_or(0);
                s["n"] = json!(n);
                Ok((1.0, n >= 3))
            },
            10,
        );
        let tr = env.rollout(
            &Policy::constant(json!(1)),
            &RolloutOptions::new(None, Some(0)),
        );
        assert_eq!(tr.steps.len(), 3);
        assert_eq!(tr.score(), Some(3.0));
        assert_eq!(tr.steps[2].observation.text.as_deref(), Some("n is 3"));
    }

    #[test]
    fn json_specs_define_environments_too() {
        let env = from_json_spec(
            r#"{"name": "caps", "judge": {"type": "contains"},
                "tasks": [{"prompt": "Capital of Kenya?", "answer": "Nairobi"}]}"#,
            Path::new("."),
        )
        .unwrap();
        assert_eq!(env.id(), "defined:caps");
        let t = env.rollout(
            &Policy::constant(json!("It is Nairobi.")),
            &RolloutOptions::default(),
        );
        assert_eq!(t.score(), Some(1.0));
        let e = from_json_spec(r#"{"name": "x", "taks": []}"#, Path::new("."))
            .err()
            .unwrap();
        assert!(e.to_string().contains("taks"), "{e}");
        let e = from_json_spec(r#"{"tasks": [{"prompt": "q"}]}"#, Path::new("."))
            .err()
            .unwrap();
        assert!(e.to_string().contains("tasks[0].answer"), "{e}");
    }
}
