//! Judges that score their own way: a closure, the environment's own verdict, an LLM rubric, and
//! a weighted mean of other judges.

use regex::Regex;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

use super::base::{clip, Judge};
use crate::contract::{JudgeSource, Judgment, Message, Trajectory};
use crate::env::guard;
use crate::error::{Error, Result};
use crate::policy::ChatModel;

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
