//! Judges: score any environment your own way, without touching it.
//!
//! A judge reads a finished [`Trajectory`] (its final text, its task's metadata, the
//! environment's own judgment) and returns a [`Judgment`]. [`with_judge`] wraps any environment
//! so that its rollouts are re-judged; the environment's own verdict stays available as the
//! `env` component and in `details.env_judgment`.

use regex::Regex;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

use crate::contract::{JudgeSource, Judgment, Manifest, Message, TaskRef, Trajectory};
use crate::env::{guard, Environment, Episode, RolloutOptions};
use crate::error::{Error, Result};
use crate::policy::{ChatModel, EndpointSpec, Policy};

/// Scores a finished episode.
pub trait Judge: Send + Sync {
    /// A stable identifier, used as the component name and `judge` field.
    fn id(&self) -> String;

    /// The verdict on `traj`.
    fn judge(&self, traj: &Trajectory) -> Result<Judgment>;
}

/// The content of the last `<answer>…</answer>` span (tags in any case), if any.
pub fn extract_answer_tag(text: &str) -> Option<String> {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `text`.
    // Hand-rolled because this runs on every reply and a regex was a tenth of a rollout.
    let lower = text.to_ascii_lowercase();
    let end = lower.rfind("</answer>")?;
    let start = lower[..end].rfind("<answer>")? + "<answer>".len();
    Some(text[start..end].trim().to_string())
}

/// The last number in `text` (commas in thousands are ignored).
pub fn last_number(text: &str) -> Option<f64> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
            .expect("valid")
    });
    re.find_iter(text)
        .last()
        .and_then(|m| m.as_str().replace(',', "").parse().ok())
}

/// The content of the last `\boxed{…}`, with nested braces balanced.
pub fn extract_boxed(text: &str) -> Option<String> {
    let start = text.rfind("\\boxed{")? + "\\boxed{".len();
    let mut depth = 1;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(text[start..start + i].trim().to_string());
                }
            }
            _ => {}
        }
    }
    None
}

/// How the answer is pulled out of the reply before comparing.
#[derive(Debug, Clone)]
pub enum Extract {
    /// The whole reply.
    Whole,
    /// The last `<answer>…</answer>` span.
    AnswerTag,
    /// The last number.
    LastNumber,
    /// The last `\boxed{…}`.
    Boxed,
    /// The first capture group (or whole match) of the last match of a pattern.
    Pattern(Regex),
}

impl Extract {
    /// Parse a name: `whole`, `answer_tag`, `last_number`, `boxed`, or `regex:<pattern>`.
    pub fn parse(name: &str) -> Result<Extract> {
        Ok(match name {
            "whole" | "none" => Extract::Whole,
            "answer_tag" | "answer" => Extract::AnswerTag,
            "last_number" => Extract::LastNumber,
            "boxed" => Extract::Boxed,
            other => match other.strip_prefix("regex:") {
                Some(p) => Extract::Pattern(Regex::new(p).map_err(|e| {
                    Error::Config(format!("extract pattern `{p}` is not a valid regex: {e}"))
                })?),
                None => {
                    return Err(Error::Config(format!(
                        "unknown extract `{other}`; use whole, answer_tag, last_number, boxed or regex:<pattern>"
                    )))
                }
            },
        })
    }

    /// Apply to `text`; `None` when nothing is found.
    pub fn apply(&self, text: &str) -> Option<String> {
        match self {
            Extract::Whole => Some(text.trim().to_string()),
            Extract::AnswerTag => extract_answer_tag(text),
            Extract::LastNumber => last_number(text).map(|x| x.to_string()),
            Extract::Boxed => extract_boxed(text),
            Extract::Pattern(re) => re.captures_iter(text).last().map(|c| {
                c.get(1)
                    .or_else(|| c.get(0))
                    .map_or(String::new(), |m| m.as_str().trim().to_string())
            }),
        }
    }

    /// How to write `answer` so that this extraction finds it (for reference policies).
    pub fn render(&self, answer: &str) -> Option<String> {
        match self {
            Extract::Whole | Extract::LastNumber => Some(answer.to_string()),
            Extract::AnswerTag => Some(format!("<answer>{answer}</answer>")),
            Extract::Boxed => Some(format!("\\boxed{{{answer}}}")),
            Extract::Pattern(_) => None,
        }
    }

    fn name(&self) -> String {
        match self {
            Extract::Whole => "whole".into(),
            Extract::AnswerTag => "answer_tag".into(),
            Extract::LastNumber => "last_number".into(),
            Extract::Boxed => "boxed".into(),
            Extract::Pattern(r) => format!("regex:{}", r.as_str()),
        }
    }
}

fn expected(traj: &Trajectory, field: &str, judge: &str) -> Result<String> {
    let task = traj.task.as_ref().ok_or_else(|| {
        Error::Judge(format!(
            "{judge} needs the task's `{field}`, but the trajectory has no task"
        ))
    })?;
    match task.metadata.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Null) | None => Err(Error::Judge(format!(
            "{judge} needs task {}'s metadata field `{field}`, which is missing",
            task.id
        ))),
        Some(other) => Ok(other.to_string()),
    }
}

fn normalize(s: &str, case_sensitive: bool) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if case_sensitive {
        s
    } else {
        s.to_lowercase()
    }
}

fn clip(s: &str) -> String {
    s.chars().take(200).collect()
}

fn verdict(id: String, hit: bool, got: Option<&str>, want: &str) -> Result<Judgment> {
    Ok(
        Judgment::new(if hit { 1.0 } else { 0.0 }, JudgeSource::Verifier, id)?
            .with_passed(hit)
            .with_detail("got", got.map(clip))
            .with_detail("expected", clip(want)),
    )
}

/// Extract the answer, normalise both sides, and score `hit(got, want)` as 1 or 0.
fn compare(
    id: String,
    traj: &Trajectory,
    field: &str,
    extract: &Extract,
    case_sensitive: bool,
    hit: impl Fn(&str, &str) -> bool,
) -> Result<Judgment> {
    let want = expected(traj, field, &id)?;
    let got = extract.apply(&traj.final_text());
    let ok = got.as_deref().is_some_and(|g| {
        hit(
            &normalize(g, case_sensitive),
            &normalize(&want, case_sensitive),
        )
    });
    verdict(id, ok, got.as_deref(), &want)
}

/// The extracted answer equals the task's expected answer (whitespace collapsed).
#[derive(Debug, Clone)]
pub struct ExactMatch {
    /// Task metadata field holding the expected answer.
    pub field: String,
    /// How the answer is extracted from the reply.
    pub extract: Extract,
    /// Compare case-sensitively.
    pub case_sensitive: bool,
}

impl Default for ExactMatch {
    fn default() -> Self {
        ExactMatch {
            field: "answer".into(),
            extract: Extract::AnswerTag,
            case_sensitive: false,
        }
    }
}

impl Judge for ExactMatch {
    fn id(&self) -> String {
        format!("exact_match:{}", self.extract.name())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        compare(
            self.id(),
            traj,
            &self.field,
            &self.extract,
            self.case_sensitive,
            |g, w| g == w,
        )
    }
}

/// The extracted answer contains the task's expected answer.
#[derive(Debug, Clone)]
pub struct Contains {
    /// Task metadata field holding the expected answer.
    pub field: String,
    /// How the answer is extracted from the reply.
    pub extract: Extract,
    /// Compare case-sensitively.
    pub case_sensitive: bool,
}

impl Default for Contains {
    fn default() -> Self {
        Contains {
            field: "answer".into(),
            extract: Extract::Whole,
            case_sensitive: false,
        }
    }
}

impl Judge for Contains {
    fn id(&self) -> String {
        format!("contains:{}", self.extract.name())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        compare(
            self.id(),
            traj,
            &self.field,
            &self.extract,
            self.case_sensitive,
            |g, w| g.contains(w),
        )
    }
}

/// The final text matches a pattern anywhere (a format rule).
#[derive(Debug, Clone)]
pub struct RegexJudge {
    pattern: Regex,
}

impl RegexJudge {
    /// A judge for `pattern`; an invalid pattern is a typed error.
    pub fn new(pattern: &str) -> Result<Self> {
        Ok(RegexJudge {
            pattern: Regex::new(pattern)
                .map_err(|e| Error::Config(format!("`{pattern}` is not a valid regex: {e}")))?,
        })
    }
}

impl Judge for RegexJudge {
    fn id(&self) -> String {
        format!("regex:{}", self.pattern.as_str())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let hit = self.pattern.is_match(&traj.final_text());
        Ok(Judgment::new(
            if hit { 1.0 } else { 0.0 },
            JudgeSource::Verifier,
            self.id(),
        )?
        .with_passed(hit))
    }
}

/// The extracted number is within a tolerance of the expected number.
#[derive(Debug, Clone)]
pub struct Numeric {
    /// Task metadata field holding the expected number.
    pub field: String,
    /// How the answer is extracted from the reply.
    pub extract: Extract,
    /// Absolute tolerance.
    pub abs_tol: f64,
    /// Relative tolerance (of the expected value).
    pub rel_tol: f64,
}

impl Default for Numeric {
    fn default() -> Self {
        Numeric {
            field: "answer".into(),
            extract: Extract::AnswerTag,
            abs_tol: 1e-6,
            rel_tol: 0.0,
        }
    }
}

impl Judge for Numeric {
    fn id(&self) -> String {
        format!("numeric:{}", self.extract.name())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let want_text = expected(traj, &self.field, &self.id())?;
        let want = last_number(&want_text).ok_or_else(|| {
            Error::Judge(format!(
                "{}: expected answer `{}` is not a number",
                self.id(),
                clip(&want_text)
            ))
        })?;
        let got = self.extract.apply(&traj.final_text());
        let value = got.as_deref().and_then(last_number);
        let hit =
            value.is_some_and(|v| (v - want).abs() <= self.abs_tol.max(self.rel_tol * want.abs()));
        verdict(self.id(), hit, got.as_deref(), &want_text)
    }
}

type ScoreFn = dyn Fn(&Trajectory) -> Result<f64> + Send + Sync;

/// A judge from a closure over the trajectory, returning a score.
pub struct FnJudge {
    name: String,
    f: Box<ScoreFn>,
}

impl FnJudge {
    /// Wrap `f`; its score must be finite.
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&Trajectory) -> Result<f64> + Send + Sync + 'static,
    ) -> Self {
        FnJudge {
            name: name.into(),
            f: Box::new(f),
        }
    }
}

impl Judge for FnJudge {
    fn id(&self) -> String {
        format!("function:{}", self.name)
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let score = guard(|| (self.f)(traj))?;
        Judgment::new(score, JudgeSource::Verifier, self.id())
    }
}

/// The environment's own judgment, as a judge (for use inside [`Weighted`]).
#[derive(Debug, Clone, Default)]
pub struct EnvJudge;

impl Judge for EnvJudge {
    fn id(&self) -> String {
        "env".into()
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        traj.judgment
            .clone()
            .ok_or_else(|| Error::Judge("the environment produced no judgment".into()))
    }
}

/// An LLM grades the final answer against a plain-language rubric. The reply must carry a
/// score in [0, 1] (JSON `{"score": …}` or a `score: …` line); anything else is an error, not 0.
pub struct LlmRubric {
    model: Arc<dyn ChatModel>,
    rubric: String,
}

impl LlmRubric {
    /// A rubric judge using `model`.
    pub fn new(model: Arc<dyn ChatModel>, rubric: impl Into<String>) -> Self {
        LlmRubric {
            model,
            rubric: rubric.into(),
        }
    }

    /// Pull the score out of the grader's reply.
    pub fn parse_score(reply: &str) -> Result<(f64, Option<String>)> {
        static JSON_RE: OnceLock<Regex> = OnceLock::new();
        static LINE_RE: OnceLock<Regex> = OnceLock::new();
        let json_re = JSON_RE.get_or_init(|| Regex::new(r"(?s)\{.*?\}").expect("valid"));
        for m in json_re.find_iter(reply) {
            if let Ok(v) = serde_json::from_str::<Value>(m.as_str()) {
                if let Some(s) = v.get("score").and_then(Value::as_f64) {
                    let reason = v.get("reason").and_then(Value::as_str).map(str::to_string);
                    return Self::in_range(s, reply).map(|s| (s, reason));
                }
            }
        }
        let line_re = LINE_RE.get_or_init(|| {
            Regex::new(r"(?im)^\W*score\W*[:=]\s*(-?\d+(?:\.\d+)?)").expect("valid")
        });
        if let Some(c) = line_re.captures(reply) {
            let s: f64 = c[1].parse().map_err(|_| Error::Judge("bad score".into()))?;
            return Self::in_range(s, reply).map(|s| (s, None));
        }
        Err(Error::Judge(format!(
            "rubric judge reply has no score (expected JSON {{\"score\": 0..1, \"reason\": …}}): {}",
            clip(reply)
        )))
    }

    fn in_range(s: f64, reply: &str) -> Result<f64> {
        if (0.0..=1.0).contains(&s) {
            Ok(s)
        } else {
            Err(Error::Judge(format!(
                "rubric judge gave score {s}, outside 0..1: {}",
                clip(reply)
            )))
        }
    }
}

impl Judge for LlmRubric {
    fn id(&self) -> String {
        format!("llm_rubric:{}", self.model.name())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let task_text = traj
            .task
            .as_ref()
            .and_then(|t| t.prompt.clone())
            .or_else(|| {
                traj.messages
                    .iter()
                    .find(|m| m.role == crate::contract::Role::User)
                    .and_then(Message::text)
            })
            .or_else(|| {
                traj.initial_observation
                    .as_ref()
                    .and_then(|o| o.text.clone())
            })
            .unwrap_or_default();
        let prompt = format!(
            "You are grading an answer against a rubric.\n\nRubric:\n{}\n\nTask:\n{}\n\nAnswer:\n{}\n\n\
             Reply with only JSON: {{\"score\": <number from 0 to 1>, \"reason\": \"<one sentence>\"}}",
            self.rubric,
            task_text,
            traj.final_text()
        );
        let reply = self.model.complete(&[Message::user(prompt)])?;
        let text = reply.text().unwrap_or_default();
        let (score, reason) = Self::parse_score(&text)?;
        Ok(Judgment::new(score, JudgeSource::Rubric, self.id())?
            .with_detail("reason", reason)
            .with_detail("rubric", clip(&self.rubric)))
    }
}

/// A weighted mean of judges: `score = Σ wᵢ·sᵢ / Σ wᵢ`, so it stays on the parts' scale.
/// Each part's score is a component (names de-duplicated); `passed` holds when every part that
/// decides `passed` passed.
pub struct Weighted {
    parts: Vec<(Arc<dyn Judge>, f64)>,
}

impl Weighted {
    /// Combine `parts`; weights must be finite, non-negative and not all zero.
    pub fn new(parts: Vec<(Arc<dyn Judge>, f64)>) -> Result<Self> {
        if parts.is_empty() {
            return Err(Error::Config(
                "a weighted judge needs at least one part".into(),
            ));
        }
        if let Some((j, w)) = parts.iter().find(|(_, w)| !w.is_finite() || *w < 0.0) {
            return Err(Error::Config(format!(
                "weight {w} of judge `{}` must be a finite number >= 0",
                j.id()
            )));
        }
        if parts.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
            return Err(Error::Config(
                "weights of a weighted judge sum to zero".into(),
            ));
        }
        Ok(Weighted { parts })
    }
}

impl Judge for Weighted {
    fn id(&self) -> String {
        let names: Vec<String> = self
            .parts
            .iter()
            .map(|(j, w)| format!("{}*{w}", j.id()))
            .collect();
        format!("weighted({})", names.join(", "))
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let total: f64 = self.parts.iter().map(|(_, w)| w).sum();
        let mut score = 0.0;
        let mut passed: Option<bool> = None;
        let mut out = Judgment::new(0.0, JudgeSource::Rubric, self.id())?;
        for (judge, w) in &self.parts {
            let j = judge.judge(traj)?;
            score += w * j.score;
            if let Some(p) = j.passed {
                passed = Some(passed.unwrap_or(true) && p);
            }
            let mut name = judge.id();
            let mut n = 2;
            while out.components.contains_key(&name) {
                name = format!("{}#{n}", judge.id());
                n += 1;
            }
            out.components.insert(name, json!(j.score));
        }
        out.score = score / total;
        if !out.score.is_finite() {
            return Err(Error::NonFiniteScore {
                judge: self.id(),
                score: out.score,
            });
        }
        out.passed = passed;
        Ok(out)
    }
}

/// A judge described as data (a `define:` file's `[judge]` table, or JSON across the C ABI).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    /// `exact`, `contains`, `numeric`, `regex`, `env`, `llm_rubric` or `weighted`.
    #[serde(rename = "type", default = "default_kind")]
    pub kind: String,
    /// Task metadata field holding the expected answer.
    #[serde(default = "default_field")]
    pub field: String,
    /// How the answer is extracted (see [`Extract::parse`]).
    #[serde(default)]
    pub extract: Option<String>,
    /// The pattern of a `regex` judge.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Compare case-sensitively.
    #[serde(default)]
    pub case_sensitive: bool,
    /// Absolute tolerance of a `numeric` judge.
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// Relative tolerance of a `numeric` judge.
    #[serde(default)]
    pub rel_tolerance: Option<f64>,
    /// The rubric of an `llm_rubric` judge.
    #[serde(default)]
    pub rubric: Option<String>,
    /// The grader of an `llm_rubric` judge.
    #[serde(default)]
    pub endpoint: Option<EndpointSpec>,
    /// The parts of a `weighted` judge.
    #[serde(default)]
    pub parts: Vec<WeightedPart>,
}

/// One part of a `weighted` judge spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedPart {
    /// Its weight (finite, >= 0).
    pub weight: f64,
    /// The judge.
    pub judge: JudgeSpec,
}

fn default_kind() -> String {
    "exact".into()
}

fn default_field() -> String {
    "answer".into()
}

impl Default for JudgeSpec {
    fn default() -> Self {
        JudgeSpec {
            kind: default_kind(),
            field: default_field(),
            extract: None,
            pattern: None,
            case_sensitive: false,
            tolerance: None,
            rel_tolerance: None,
            rubric: None,
            endpoint: None,
            parts: Vec::new(),
        }
    }
}

/// Parse a judge spec from JSON, naming what does not fit.
pub fn judge_from_json(json: &str) -> Result<Arc<dyn Judge>> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| Error::Config(format!("judge spec: {e}")))?;
    // Serde would read an array positionally into the struct; a spec is always an object.
    if !value.is_object() {
        return Err(Error::Config(format!(
            "judge spec must be a JSON object like {{\"type\": \"exact\"}}, got {}",
            crate::contract::preview_json(&value)
        )));
    }
    let spec: JudgeSpec =
        serde_json::from_value(value).map_err(|e| Error::Config(format!("judge spec: {e}")))?;
    Ok(judge_from_spec(&spec)?.0)
}

/// Build the judge a spec describes, with the extraction an oracle reply must satisfy (for
/// judges that compare with an expected answer).
pub fn judge_from_spec(spec: &JudgeSpec) -> Result<(Arc<dyn Judge>, Option<Extract>)> {
    let extract = |default: Extract| -> Result<Extract> {
        spec.extract.as_deref().map_or(Ok(default), Extract::parse)
    };
    Ok(match spec.kind.as_str() {
        "exact" => {
            let e = extract(Extract::AnswerTag)?;
            let j = ExactMatch {
                field: spec.field.clone(),
                extract: e.clone(),
                case_sensitive: spec.case_sensitive,
            };
            (Arc::new(j), Some(e))
        }
        "contains" => {
            let e = extract(Extract::Whole)?;
            let j = Contains {
                field: spec.field.clone(),
                extract: e.clone(),
                case_sensitive: spec.case_sensitive,
            };
            (Arc::new(j), Some(e))
        }
        "numeric" => {
            let e = extract(Extract::AnswerTag)?;
            let j = Numeric {
                field: spec.field.clone(),
                extract: e.clone(),
                abs_tol: spec.tolerance.unwrap_or(1e-6),
                rel_tol: spec.rel_tolerance.unwrap_or(0.0),
            };
            (Arc::new(j), Some(e))
        }
        "regex" => {
            let p = spec
                .pattern
                .as_deref()
                .ok_or_else(|| Error::Config("a `regex` judge needs `pattern`".into()))?;
            (Arc::new(RegexJudge::new(p)?), None)
        }
        "env" => (Arc::new(EnvJudge), None),
        "llm_rubric" => {
            let rubric = spec
                .rubric
                .clone()
                .ok_or_else(|| Error::Config("an `llm_rubric` judge needs `rubric`".into()))?;
            let endpoint = spec.endpoint.as_ref().ok_or_else(|| {
                Error::Config("an `llm_rubric` judge needs `endpoint` = {base_url, model}".into())
            })?;
            let model: Arc<dyn ChatModel> = Arc::new(endpoint.build()?);
            (Arc::new(LlmRubric::new(model, rubric)), None)
        }
        "weighted" => {
            let parts = spec
                .parts
                .iter()
                .map(|p| Ok((judge_from_spec(&p.judge)?.0, p.weight)))
                .collect::<Result<Vec<_>>>()?;
            (Arc::new(Weighted::new(parts)?), None)
        }
        other => {
            return Err(Error::Config(format!(
                "unknown judge type `{other}`; use exact, contains, numeric, regex, env, llm_rubric or weighted"
            )))
        }
    })
}

/// A step-mode episode of a judged environment: sessions are re-judged like rollouts.
struct JudgedEpisode {
    inner: Box<dyn Episode>,
    judge: Arc<dyn Judge>,
    env_id: String,
}

impl Episode for JudgedEpisode {
    fn observation(&self) -> &crate::contract::Observation {
        self.inner.observation()
    }

    fn act(&mut self, action: &Value) -> Result<crate::contract::Step> {
        self.inner.act(action)
    }

    fn judge(&self, steps: &[crate::contract::Step]) -> Result<Judgment> {
        let mut traj = Trajectory::start(
            &self.env_id,
            crate::contract::Mode::Step,
            self.inner.task(),
            None,
        );
        traj.steps = steps.to_vec();
        traj.judgment = Some(self.inner.judge(steps)?);
        rejudge(self.judge.as_ref(), &mut traj)?;
        Ok(traj.judgment.expect("rejudge sets it"))
    }

    fn task(&self) -> Option<TaskRef> {
        self.inner.task()
    }

    fn close(&mut self) {
        self.inner.close();
    }
}

/// Replace `traj`'s judgment with `judge`'s verdict, keeping the environment's own verdict as
/// the `env` component and in `details.env_judgment` (or in metadata when the judge fails).
fn rejudge(judge: &dyn Judge, traj: &mut Trajectory) -> Result<()> {
    let env_judgment = traj.judgment.clone();
    let mut judged = guard(|| judge.judge(traj)).inspect_err(|_| {
        traj.judgment = None;
        traj.metadata
            .insert("env_judgment".into(), json!(env_judgment));
    })?;
    if let Some(env_j) = &env_judgment {
        judged.components.entry("env").or_insert(json!(env_j.score));
        judged.details.insert("env_judgment".into(), json!(env_j));
    }
    traj.judgment = Some(judged);
    Ok(())
}

/// An environment whose rollouts are re-judged by `judge`; everything else is delegated.
pub struct JudgedEnvironment {
    inner: Arc<dyn Environment>,
    judge: Arc<dyn Judge>,
    manifest: Manifest,
}

/// Wrap `env` so that `judge` scores its episodes, without touching the environment.
pub fn with_judge(env: Arc<dyn Environment>, judge: Arc<dyn Judge>) -> Arc<dyn Environment> {
    let mut manifest = env.manifest().clone();
    manifest.id = format!("{}+judge", manifest.id);
    manifest
        .extra
        .insert("judge".into(), Value::String(judge.id()));
    Arc::new(JudgedEnvironment {
        inner: env,
        judge,
        manifest,
    })
}

impl Environment for JudgedEnvironment {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        self.inner.tasks(limit)
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        Ok(Box::new(JudgedEpisode {
            inner: self.inner.open(task, seed)?,
            judge: self.judge.clone(),
            env_id: self.manifest.id.clone(),
        }))
    }

    fn drive(&self, policy: &Policy, opts: &RolloutOptions, traj: &mut Trajectory) -> Result<()> {
        let inner = self.inner.rollout(policy, opts);
        let env_id = std::mem::take(&mut traj.env_id);
        *traj = inner;
        traj.env_id = env_id;
        if traj.error.is_some() {
            return Ok(());
        }
        rejudge(self.judge.as_ref(), traj)
    }

    fn reference_policy(&self, task: Option<&TaskRef>) -> Option<Policy> {
        self.inner.reference_policy(task)
    }

    fn null_policy(&self, task: Option<&TaskRef>) -> Option<Policy> {
        self.inner.null_policy(task)
    }

    fn probe_policy(&self) -> Option<Policy> {
        self.inner.probe_policy()
    }

    fn default_max_steps(&self) -> usize {
        self.inner.default_max_steps()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Mode, Observation, Step};

    fn traj(reply: &str, answer: &str) -> Trajectory {
        let mut task = TaskRef::new("0");
        task.metadata.insert("answer".into(), json!(answer));
        let mut t = Trajectory::start("x", Mode::Step, Some(task), None);
        t.steps.push(Step {
            action: json!(reply),
            observation: Observation::default(),
            reward: 0.0,
            terminated: true,
            truncated: false,
            info: Default::default(),
        });
        t
    }

    #[test]
    fn extractors() {
        assert_eq!(
            extract_answer_tag("<answer>1</answer> then <ANSWER> 2 </answer>"),
            Some("2".into())
        );
        assert_eq!(extract_answer_tag("none"), None);
        assert_eq!(
            extract_answer_tag("<answer>1</answer> <answer>2"),
            Some("1".into())
        );
        assert_eq!(extract_answer_tag("</answer><answer>"), None);
        assert_eq!(extract_answer_tag("é<Answer>ü</ANSWER>"), Some("ü".into()));
        assert_eq!(last_number("it is 1,234.5 or -7"), Some(-7.0));
        assert_eq!(last_number("total 1,234.5"), Some(1234.5));
        assert_eq!(
            extract_boxed(r"so \boxed{\frac{1}{2}} done"),
            Some(r"\frac{1}{2}".into())
        );
        assert_eq!(extract_boxed(r"\boxed{unclosed"), None);
    }

    #[test]
    fn exact_contains_numeric_regex() {
        let t = traj("thinking... <answer> Nairobi </answer>", "nairobi");
        assert_eq!(ExactMatch::default().judge(&t).unwrap().score, 1.0);
        assert_eq!(
            ExactMatch::default()
                .judge(&traj("<answer>Paris</answer>", "Nairobi"))
                .unwrap()
                .score,
            0.0
        );
        assert_eq!(Contains::default().judge(&t).unwrap().score, 1.0);
        let n = Numeric {
            abs_tol: 0.01,
            ..Numeric::default()
        };
        assert_eq!(
            n.judge(&traj("<answer>3.141</answer>", "3.14"))
                .unwrap()
                .score,
            1.0
        );
        assert_eq!(
            n.judge(&traj("<answer>3.2</answer>", "3.14"))
                .unwrap()
                .score,
            0.0
        );
        let r = RegexJudge::new(r"<answer>.+</answer>").unwrap();
        assert_eq!(r.judge(&t).unwrap().score, 1.0);
        assert!(RegexJudge::new("(").is_err());
        let mut no_task = t.clone();
        no_task.task = None;
        assert!(ExactMatch::default()
            .judge(&no_task)
            .unwrap_err()
            .to_string()
            .contains("no task"));
    }

    #[test]
    fn function_judges_must_be_finite_and_may_not_panic_through() {
        let t = traj("x", "y");
        let nan = FnJudge::new("nan", |_| Ok(f64::NAN));
        assert!(matches!(nan.judge(&t), Err(Error::NonFiniteScore { .. })));
        let boom = FnJudge::new("boom", |_| panic!("judge bug"));
        assert!(boom
            .judge(&t)
            .unwrap_err()
            .to_string()
            .contains("judge bug"));
    }

    #[test]
    fn rubric_scores_are_parsed_or_refused() {
        assert_eq!(
            LlmRubric::parse_score(r#"ok {"score": 0.75, "reason": "fine"}"#)
                .unwrap()
                .0,
            0.75
        );
        assert_eq!(LlmRubric::parse_score("Score: 1").unwrap().0, 1.0);
        assert!(LlmRubric::parse_score("looks good to me").is_err());
        assert!(LlmRubric::parse_score(r#"{"score": 7}"#).is_err());
    }

    #[test]
    fn weighted_is_a_normalised_mean_with_distinct_components() {
        let parts: Vec<(Arc<dyn Judge>, f64)> = vec![
            (Arc::new(ExactMatch::default()), 3.0),
            (Arc::new(ExactMatch::default()), 1.0),
            (Arc::new(RegexJudge::new("zzz").unwrap()), 1.0),
        ];
        let w = Weighted::new(parts).unwrap();
        let j = w.judge(&traj("<answer>a</answer>", "a")).unwrap();
        assert!((j.score - 0.8).abs() < 1e-12);
        assert_eq!(j.components.len(), 3);
        assert_eq!(j.passed, Some(false));
        assert!(Weighted::new(vec![(Arc::new(EnvJudge) as Arc<dyn Judge>, f64::NAN)]).is_err());
    }

    #[test]
    fn judges_from_json_specs() {
        let w = judge_from_json(
            r#"{"type": "weighted", "parts": [
                {"weight": 1, "judge": {"type": "exact"}},
                {"weight": 1, "judge": {"type": "regex", "pattern": "^<answer>"}}]}"#,
        )
        .unwrap();
        let j = w.judge(&traj("thinking <answer>a</answer>", "a")).unwrap();
        assert!((j.score - 0.5).abs() < 1e-12, "{j:?}");
        for (bad, needle) in [
            (r#"{"type": "fuzzy"}"#, "unknown judge type `fuzzy`"),
            (r#"{"type": "regex"}"#, "needs `pattern`"),
            (
                r#"{"type": "llm_rubric", "rubric": "r"}"#,
                "needs `endpoint`",
            ),
            (r#"{"type": "exact", "feild": "x"}"#, "feild"),
            (r#"{"type": "weighted"}"#, "at least one part"),
        ] {
            let e = judge_from_json(bad).err().unwrap().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }
}
