//! A training run in one TOML file: `[env]`, `[model]`, `[learner]`, `[train]` and `[output]`,
//! checked strictly, then built into what [`super::train`] takes.
//!
//! ```toml
//! [env]
//! uri = "gymnasium:CartPole-v1"      # or `env = "<uri>"`; a table may add `judge = {...}`
//!
//! [learner]
//! use = "grpo"                       # or `learner = "grpo"`; knobs as `nenyax::train::learner`
//! trainer = { use = "builtin", lr = 0.01 }
//!
//! [train]                            # the fields of TrainOptions
//! rounds = 20
//!
//! [output]
//! dir = "runs/cartpole"              # report.json and report.txt; `plot`, `trajectories` opt in
//! ```
//!
//! An unknown section or key is an error naming the file, the line and the key, with the closest
//! accepted name and all of them. Paths (the URI's, `output.dir`) are taken as on the command
//! line: relative to the directory `nenyax` runs in.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::options::TrainOptions;
use super::pg::Trainer;
use super::registry::{check_learner, learner, LearnerParts};
use super::Learner;
use crate::env::Environment;
use crate::error::{suggest, Error, Result};
use crate::judges::{judge_from_spec, with_judge, JudgeSpec};
use crate::models::providers::provider;
use crate::models::{ChatModel, EndpointSpec};

/// The sections a run config may have.
pub const SECTIONS: &[&str] = &["env", "model", "learner", "train", "output", "telemetry"];
/// The keys of `[env]`.
pub const ENV_KEYS: &[&str] = &["uri", "judge"];
/// The keys of `[model]`: an endpoint spec, with the model's `name` and the common request
/// parameters (`temperature`, `max_tokens`, `top_p`) as keys of their own.
pub const MODEL_KEYS: &[&str] = &[
    "provider",
    "base_url",
    "name",
    "api_key_env",
    "temperature",
    "max_tokens",
    "top_p",
    "params",
    "timeout_s",
    "retries",
    "backoff_s",
    "max_backoff_s",
    "stream",
    "max_concurrency",
];
/// The keys of `[output]`.
pub const OUTPUT_KEYS: &[&str] = &["dir", "report_json", "report_text", "trajectories", "plot"];
/// Request parameters `[model]` takes as keys of their own (the rest go in `params`).
const MODEL_PARAMS: &[&str] = &["temperature", "max_tokens", "top_p"];

/// Where the environment comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvConfig {
    /// Its URI, as `nenyax::load` takes it.
    pub uri: String,
    /// A judge spec (see [`crate::judges::JudgeSpec`]) that replaces the environment's verdict.
    pub judge: Option<Value>,
}

/// What to write, and where.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutputConfig {
    /// The directory (created if missing); `None`: write nothing, print only.
    pub dir: Option<String>,
    /// `report.json`: [`super::TrainReport::to_json`].
    pub report_json: bool,
    /// `report.txt`: [`super::TrainReport::render`].
    pub report_text: bool,
    /// `trajectories.jsonl`: every trajectory, train and held-out.
    pub trajectories: bool,
    /// `curve.svg`: the learning curve ([`super::TrainReport::svg`]).
    pub plot: bool,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            dir: None,
            report_json: true,
            report_text: true,
            trajectories: false,
            plot: false,
        }
    }
}

/// A whole training run, as a config file describes it.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where it came from: the path, or the label given to [`RunConfig::from_toml`]; empty for a
    /// run described by flags alone.
    pub file: String,
    /// The environment (`None` until a URI is given, in the file or on the command line).
    pub env: Option<EnvConfig>,
    /// The chat model as an endpoint spec (the JSON [`EndpointSpec`] reads), if any.
    pub model: Option<Value>,
    /// The learner: `{"use": "<name>", <knobs>}` (default `incontext`, as in the reference).
    pub learner: Value,
    /// How to train.
    pub train: TrainOptions,
    /// What to write.
    pub output: OutputConfig,
    /// The telemetry sinks of `[[telemetry]]` tables (`name = "otel"` plus that sink's keys).
    pub telemetry: Vec<crate::telemetry::SinkSpec>,
    /// The document as read (JSON), which [`RunConfig::set`] edits and parses again.
    doc: Map<String, Value>,
    /// The line of every key of the file, by dotted path (`learner.trainer.lr`).
    lines: BTreeMap<String, usize>,
}

/// The parts a run needs, built from a [`RunConfig`].
pub struct Run {
    /// The environment (with the config's judge, if any).
    pub env: Arc<dyn Environment>,
    /// The learner.
    pub learner: Box<dyn Learner>,
    /// The options, with `[output]`'s trajectories file filled in.
    pub options: TrainOptions,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Record the line of every key, by dotted path.
fn index_lines(
    text: &str,
    table: &toml::de::DeTable<'_>,
    prefix: &str,
    out: &mut BTreeMap<String, usize>,
) {
    for (k, v) in table.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.entry(path.clone())
            .or_insert_with(|| line_of(text, k.span().start));
        if let toml::de::DeValue::Table(t) = v.get_ref() {
            index_lines(text, t, &path, out);
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

impl RunConfig {
    /// Read and check a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<RunConfig> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = crate::limits::read_text(path, &crate::limits::CONFIG_FILE)
            .map_err(|e| Error::Config(format!("{file}: cannot read the run config: {e}")))?;
        RunConfig::from_toml(&text, &file)
    }

    /// Check a config given as TOML text; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<RunConfig> {
        let located = |line: usize, msg: String| {
            Error::Config(if line > 0 {
                format!("{file}:{line}: {msg}")
            } else {
                format!("{file}: {msg}")
            })
        };
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            located(line, format!("not valid TOML: {}", e.message().trim()))
        })?;
        let doc = match serde_json::to_value(&table) {
            Ok(Value::Object(m)) => m,
            _ => return Err(located(0, "cannot be read as a table".into())),
        };
        let mut lines = BTreeMap::new();
        if let Ok(de) = toml::de::DeTable::parse(text) {
            index_lines(text, de.get_ref(), "", &mut lines);
        }
        RunConfig::parse(doc, file.to_string(), lines)
    }

    /// A run on `uri` described by flags alone (every section at its default).
    pub fn for_uri(uri: &str) -> Result<RunConfig> {
        let mut doc = Map::new();
        doc.insert("env".into(), json!({ "uri": uri }));
        RunConfig::parse(doc, String::new(), BTreeMap::new())
    }

    /// Set one key by its dotted path (`train.rounds`, `learner.trainer.lr`, `model.name`), as a
    /// command-line flag overrides the file, and check the whole config again. A section given
    /// in the file as a string (`learner = "grpo"`) becomes a table first.
    pub fn set(&mut self, path: &str, value: Value) -> Result<()> {
        let mut doc = self.doc.clone();
        let parts: Vec<&str> = path.split('.').collect();
        let (last, parents) = parts.split_last().expect("split gives at least one part");
        let mut at = &mut doc;
        for (i, p) in parents.iter().enumerate() {
            let slot = at.entry(p.to_string()).or_insert_with(|| json!({}));
            if let Value::String(s) = slot {
                // `learner = "grpo"`, `env = "<uri>"`, `trainer = "builtin"`: the string is the
                // table's `use` (or the env's `uri`).
                let key = if i == 0 && *p == "env" { "uri" } else { "use" };
                *slot = json!({ key: s.clone() });
            }
            at = match slot {
                Value::Object(m) => m,
                other => {
                    return Err(self.error(
                        &parts[..=i].join("."),
                        format!(
                            "`{}` is {}, so `{path}` cannot be set",
                            parts[..=i].join("."),
                            kind_of(other)
                        ),
                    ))
                }
            };
        }
        at.insert(last.to_string(), value);
        *self = RunConfig::parse(doc, self.file.clone(), self.lines.clone())?;
        Ok(())
    }

    /// The line of a key (or of its section) in the file, 0 when unknown.
    pub fn line(&self, path: &str) -> usize {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p) {
                return *l;
            }
            match p.rfind('.') {
                Some(i) => p = &p[..i],
                None => return 0,
            }
        }
    }

    /// A config error located at `path` (`file:line: ` when known).
    fn error(&self, path: &str, msg: String) -> Error {
        Error::Config(self.locate(path, &msg))
    }

    fn locate(&self, path: &str, msg: &str) -> String {
        match (self.file.is_empty(), self.line(path)) {
            (true, _) => msg.to_string(),
            (false, 0) => format!("{}: {msg}", self.file),
            (false, l) => format!("{}:{l}: {msg}", self.file),
        }
    }

    /// A config error from elsewhere (the learner registry, a judge, an endpoint), put at the
    /// line of the first key of `section` it names in backquotes.
    fn relocate(&self, section: &str, e: Error) -> Error {
        let Error::Config(msg) = e else { return e };
        let named = msg.split('`').skip(1).step_by(2);
        let mut path = section.to_string();
        'found: for word in named {
            for cand in [
                format!("{section}.{word}"),
                format!("{section}.trainer.{word}"),
                format!("{section}.judge.{word}"),
                format!("{section}.params.{word}"),
            ] {
                if self.lines.contains_key(&cand) {
                    path = cand;
                    break 'found;
                }
            }
        }
        Error::Config(self.locate(&path, &format!("[{section}] {msg}")))
    }

    fn unknown_key(&self, path: &str, key: &str, accepted: &[&str], what: &str) -> Error {
        let hint = suggest(key, accepted.iter().copied())
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        self.error(
            path,
            format!(
                "{what} has no key `{key}`{hint}; accepted: {}",
                accepted.join(", ")
            ),
        )
    }

    fn check_keys(
        &self,
        section: &str,
        table: &Map<String, Value>,
        accepted: &[&str],
    ) -> Result<()> {
        for k in table.keys() {
            if !accepted.contains(&k.as_str()) {
                return Err(self.unknown_key(
                    &format!("{section}.{k}"),
                    k,
                    accepted,
                    &format!("[{section}]"),
                ));
            }
        }
        Ok(())
    }

    fn parse(
        doc: Map<String, Value>,
        file: String,
        lines: BTreeMap<String, usize>,
    ) -> Result<RunConfig> {
        let mut cfg = RunConfig {
            file,
            env: None,
            model: None,
            learner: json!({ "use": "incontext" }),
            train: TrainOptions::default(),
            output: OutputConfig::default(),
            telemetry: Vec::new(),
            doc: Map::new(),
            lines,
        };
        for k in doc.keys() {
            if !SECTIONS.contains(&k.as_str()) {
                return Err(cfg.unknown_key(k, k, SECTIONS, "a run config"));
            }
        }
        if let Some(v) = doc.get("env") {
            cfg.env = Some(cfg.parse_env(v)?);
        }
        if let Some(v) = doc.get("model") {
            cfg.model = Some(cfg.parse_model(v)?);
        }
        if let Some(v) = doc.get("learner") {
            cfg.learner = match v {
                Value::String(s) => json!({ "use": s }),
                Value::Object(_) => v.clone(),
                other => {
                    return Err(cfg.error(
                        "learner",
                        format!(
                            "`learner` is a name or a [learner] table with `use`, got {}",
                            kind_of(other)
                        ),
                    ))
                }
            };
        }
        let checked = check_learner(&cfg.learner).map_err(|e| cfg.relocate("learner", e))?;
        if let Some(v) = doc.get("train") {
            cfg.train = cfg.parse_train(v)?;
        }
        // Here rather than when the run starts, so the file's line is known and nothing loads.
        if cfg.train.group_size < checked.min_group_size {
            return Err(cfg.error(
                "train.group_size",
                format!(
                    "[train] group_size is {}; learner `{}` needs at least {} rollouts per group \
                     (its advantages compare the members of a group); raise group_size, or use \
                     a learner with a batch baseline such as `reinforce`",
                    cfg.train.group_size,
                    cfg.learner_name(),
                    checked.min_group_size
                ),
            ));
        }
        if let Some(v) = doc.get("output") {
            cfg.output = cfg.parse_output(v)?;
        }
        if let Some(v) = doc.get("telemetry") {
            cfg.telemetry = cfg.parse_telemetry(v)?;
        }
        cfg.doc = doc;
        Ok(cfg)
    }

    /// `[[telemetry]]` tables, each naming a known sink: built in, or a telemetry plugin
    /// registered or listed in the plugins config.
    fn parse_telemetry(&self, v: &Value) -> Result<Vec<crate::telemetry::SinkSpec>> {
        let specs =
            crate::telemetry::parse_json_list(v).map_err(|e| self.relocate("telemetry", e))?;
        let plugins = crate::plugins::library::plugin_names(crate::plugins::kinds::Kind::Telemetry);
        for s in &specs {
            let known = crate::telemetry::SINKS.contains(&s.name.as_str())
                || s.name == "opentelemetry"
                || plugins.contains(&s.name);
            if !known {
                let mut names: Vec<&str> = crate::telemetry::SINKS.to_vec();
                names.extend(plugins.iter().map(String::as_str));
                return Err(self.error(
                    "telemetry",
                    format!(
                        "[[telemetry]] name {:?} is not a sink; known: {} (a sink of your own is \
                         a telemetry plugin in the plugins config: docs/plugins-abi.md)",
                        s.name,
                        names.join(", ")
                    ),
                ));
            }
        }
        Ok(specs)
    }

    fn table<'a>(&self, section: &str, v: &'a Value) -> Result<&'a Map<String, Value>> {
        v.as_object().ok_or_else(|| {
            self.error(
                section,
                format!(
                    "`{section}` must be a [{section}] table, got {}",
                    kind_of(v)
                ),
            )
        })
    }

    fn parse_env(&self, v: &Value) -> Result<EnvConfig> {
        if let Value::String(uri) = v {
            return Ok(EnvConfig {
                uri: uri.clone(),
                judge: None,
            });
        }
        let t = self.table("env", v)?;
        self.check_keys("env", t, ENV_KEYS)?;
        let uri = match t.get("uri") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(other) => {
                return Err(self.error(
                    "env.uri",
                    format!("`uri` must be a non-empty string, got {other}"),
                ))
            }
            None => {
                return Err(self.error(
                    "env",
                    "[env] needs `uri` (e.g. uri = \"gymnasium:CartPole-v1\")".into(),
                ))
            }
        };
        let judge = match t.get("judge") {
            None => None,
            // `judge = "exact"` is the spec `{type = "exact"}`.
            Some(Value::String(kind)) => Some(json!({ "type": kind })),
            Some(j @ Value::Object(_)) => Some(j.clone()),
            Some(other) => {
                return Err(self.error(
                    "env.judge",
                    format!(
                        "`judge` is a judge type or a table ({{type = \"exact\", ...}}), got {}",
                        kind_of(other)
                    ),
                ))
            }
        };
        if let Some(j) = &judge {
            let spec: JudgeSpec = serde_json::from_value(j.clone())
                .map_err(|e| self.relocate("env", Error::Config(format!("`judge`: {e}"))))?;
            // Build it once to check the type and its fields; an llm_rubric judge's endpoint is
            // only built when the run starts (its key variable may be set later).
            if spec.kind != "llm_rubric" {
                judge_from_spec(&spec).map_err(|e| self.relocate("env", e))?;
            }
        }
        Ok(EnvConfig { uri, judge })
    }

    fn parse_model(&self, v: &Value) -> Result<Value> {
        let t = self.table("model", v)?;
        if t.contains_key("model") {
            return Err(self.error(
                "model.model",
                "[model] names the model with `name` (e.g. name = \"Qwen/Qwen3-8B\"), not \
                 `model`"
                    .into(),
            ));
        }
        self.check_keys("model", t, MODEL_KEYS)?;
        let mut spec = Map::new();
        let mut params = match t.get("params") {
            None => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(other) => {
                return Err(self.error(
                    "model.params",
                    format!("`params` must be a table, got {}", kind_of(other)),
                ))
            }
        };
        for (k, v) in t {
            match k.as_str() {
                "name" => {
                    spec.insert("model".into(), v.clone());
                }
                "params" => {}
                p if MODEL_PARAMS.contains(&p) => {
                    if params.contains_key(p) {
                        return Err(self.error(
                            &format!("model.{p}"),
                            format!("`{p}` is given twice, as a key and in `params`"),
                        ));
                    }
                    params.insert(p.into(), v.clone());
                }
                _ => {
                    spec.insert(k.clone(), v.clone());
                }
            }
        }
        if !params.is_empty() {
            spec.insert("params".into(), Value::Object(params));
        }
        if !spec.contains_key("model") {
            return Err(self.error(
                "model",
                "[model] needs `name`, the model the server serves (e.g. name = \
                 \"Qwen/Qwen3-8B\")"
                    .into(),
            ));
        }
        if !spec.contains_key("provider") && !spec.contains_key("base_url") {
            return Err(self.error(
                "model",
                "[model] needs `provider` (vllm, ollama, openai, ...; see `nenyax \
                 integrations`) or `base_url` (e.g. \"http://127.0.0.1:8000/v1\")"
                    .into(),
            ));
        }
        if let Some(p) = spec.get("provider").and_then(Value::as_str) {
            provider(p).map_err(|e| self.error("model.provider", format!("[model] {e}")))?;
        }
        let spec = Value::Object(spec);
        let parsed: EndpointSpec = serde_json::from_value(spec.clone())
            .map_err(|e| self.relocate("model", Error::Config(e.to_string())))?;
        for (k, v) in [
            ("timeout_s", parsed.timeout_s),
            ("backoff_s", parsed.backoff_s),
            ("max_backoff_s", parsed.max_backoff_s),
        ] {
            if v.is_some_and(|x| !(x.is_finite() && x >= 0.0)) {
                return Err(self.error(
                    &format!("model.{k}"),
                    format!("`{k}` must be a number of seconds >= 0"),
                ));
            }
        }
        if parsed.max_concurrency == Some(0) {
            return Err(self.error(
                "model.max_concurrency",
                "`max_concurrency` must be at least 1".into(),
            ));
        }
        Ok(spec)
    }

    fn parse_train(&self, v: &Value) -> Result<TrainOptions> {
        let t = self.table("train", v)?;
        let defaults = serde_json::to_value(TrainOptions::default()).unwrap_or(Value::Null);
        let accepted: Vec<&str> = defaults
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        self.check_keys("train", t, &accepted)?;
        // One key at a time, so that a wrong value is reported at its own line.
        for (k, v) in t {
            let mut one = Map::new();
            one.insert(k.clone(), v.clone());
            if let Err(e) = serde_json::from_value::<TrainOptions>(Value::Object(one)) {
                let why = e.to_string();
                let why = why.split(" at line").next().unwrap_or(&why);
                return Err(self.error(&format!("train.{k}"), format!("[train] `{k}`: {why}")));
            }
        }
        serde_json::from_value(v.clone()).map_err(|e| self.error("train", format!("[train] {e}")))
    }

    fn parse_output(&self, v: &Value) -> Result<OutputConfig> {
        let t = self.table("output", v)?;
        self.check_keys("output", t, OUTPUT_KEYS)?;
        let mut out = OutputConfig::default();
        for (k, v) in t {
            let path = format!("output.{k}");
            if k == "dir" {
                match v.as_str() {
                    Some(s) if !s.is_empty() => out.dir = Some(s.to_string()),
                    _ => {
                        return Err(
                            self.error(&path, format!("`dir` must be a non-empty path, got {v}"))
                        )
                    }
                }
                continue;
            }
            let b = v.as_bool().ok_or_else(|| {
                self.error(&path, format!("`{k}` must be true or false, got {v}"))
            })?;
            match k.as_str() {
                "report_json" => out.report_json = b,
                "report_text" => out.report_text = b,
                "trajectories" => out.trajectories = b,
                _ => out.plot = b,
            }
        }
        if out.dir.is_none() && (out.plot || out.trajectories) {
            return Err(self.error(
                "output",
                "[output] `plot` and `trajectories` write into `dir`; give `dir` too".into(),
            ));
        }
        Ok(out)
    }

    /// The learner's name.
    pub fn learner_name(&self) -> &str {
        self.learner
            .get("use")
            .and_then(Value::as_str)
            .unwrap_or("incontext")
    }

    /// The whole run, normalised (defaults filled in, `[model]` as an endpoint spec, shorthands
    /// expanded), as JSON: what `nenyax train --dry-run` prints and `nenyax_config_load` returns.
    pub fn to_json(&self) -> Value {
        json!({
            "file": self.file,
            "env": self.env.as_ref().map(|e| json!({ "uri": e.uri, "judge": e.judge })),
            "model": self.model,
            "learner": self.learner,
            "train": serde_json::to_value(&self.train).unwrap_or(Value::Null),
            "output": serde_json::to_value(&self.output).unwrap_or(Value::Null),
            "telemetry": self.telemetry.iter().map(|s| {
                let mut o = s.options.clone();
                o.insert("name".into(), json!(s.name));
                Value::Object(o)
            }).collect::<Vec<_>>(),
        })
    }

    /// The environment, with the config's judge in place of its own verdict.
    pub fn load_env(&self) -> Result<Arc<dyn Environment>> {
        let env = self.env.as_ref().ok_or_else(|| {
            self.error(
                "env",
                "no environment: give [env] uri = \"...\" in the config, or a URI on the \
                 command line"
                    .into(),
            )
        })?;
        let loaded = crate::router::load(&env.uri)?;
        Ok(match &env.judge {
            None => loaded,
            Some(j) => {
                let spec: JudgeSpec = serde_json::from_value(j.clone())
                    .map_err(|e| self.error("env.judge", format!("`judge`: {e}")))?;
                let (judge, _) = judge_from_spec(&spec).map_err(|e| self.relocate("env", e))?;
                with_judge(loaded, judge)
            }
        })
    }

    /// The chat model of `[model]`, if there is one (a missing key variable is an error here).
    pub fn chat_model(&self) -> Result<Option<Arc<dyn ChatModel>>> {
        let Some(spec) = &self.model else {
            return Ok(None);
        };
        let spec: EndpointSpec = serde_json::from_value(spec.clone())
            .map_err(|e| self.relocate("model", Error::Config(e.to_string())))?;
        let e = spec.build().map_err(|e| self.relocate("model", e))?;
        Ok(Some(Arc::new(e)))
    }

    /// The learner for `env`: `trainer` is a host's own (for `trainer = "host"`), `None` for the
    /// config's (the built-in policy by default).
    pub fn build_learner(
        &self,
        env: &Arc<dyn Environment>,
        trainer: Option<Box<dyn Trainer>>,
    ) -> Result<Box<dyn Learner>> {
        let parts = LearnerParts {
            env: Some(env.clone()),
            model: self.chat_model()?,
            trainer,
        };
        learner(&self.learner, parts).map_err(|e| self.relocate("learner", e))
    }

    /// The options of the run, with `[output]`'s `trajectories.jsonl` when asked for.
    pub fn options(&self) -> TrainOptions {
        let mut o = self.train.clone();
        if let (true, Some(dir)) = (self.output.trajectories, &self.output.dir) {
            o.trajectories = Some(
                Path::new(dir)
                    .join("trajectories.jsonl")
                    .display()
                    .to_string(),
            );
        }
        o
    }

    /// Everything a run needs: the environment, the learner (with the config's trainer) and the
    /// options.
    pub fn build(&self) -> Result<Run> {
        let env = self.load_env()?;
        let learner = self.build_learner(&env, None)?;
        Ok(Run {
            env,
            learner,
            options: self.options(),
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
