//! One-turn questions with an integer answer: `builtin:arithmetic` and `builtin:digits`.

use serde_json::{json, Value};
use std::sync::Arc;

use super::common::{obj, task_rng};
use crate::contract::{
    JsonMap, JudgeSource, Judgment, Manifest, Mode, Observation, RewardTiming, Step, TaskRef,
};
use crate::env::{task_index, Environment, Episode};
use crate::error::{Error, Result};
use crate::judges::extract_answer_tag;
use crate::policy::Policy;

/// One seeded question: its prompt, the structured data an observation carries, the answer.
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub(super) prompt: String,
    pub(super) data: JsonMap,
    pub(super) answer: i64,
}

/// A seeded family of questions, indexed from 0.
pub(super) trait Problems: Send + Sync {
    fn problem(&self, index: u64) -> Problem;
}

/// The instruction every one-turn question ends with, so one judge (the answer tag) fits all.
const ANSWER_FORMAT: &str = "Give your final answer inside <answer></answer> tags, e.g.";

#[derive(Debug, Clone)]
pub(super) struct Gen {
    pub(super) seed: u64,
    pub(super) digits: u32,
    pub(super) ops: Vec<char>,
}

impl Problems for Gen {
    fn problem(&self, index: u64) -> Problem {
        let mut rng = task_rng(self.seed, index);
        let hi = 10i64.pow(self.digits) - 1;
        let lo = if self.digits == 1 {
            0
        } else {
            10i64.pow(self.digits - 1)
        };
        let (a, b) = (rng.range(lo, hi), rng.range(lo, hi));
        let op = self.ops[rng.range(0, self.ops.len() as i64 - 1) as usize];
        let answer = match op {
            '+' => a + b,
            '-' => a - b,
            _ => a * b,
        };
        let expression = format!("{a} {op} {b}");
        Problem {
            prompt: format!("What is {expression}? {ANSWER_FORMAT} <answer>42</answer>."),
            data: obj(json!({ "expression": expression })),
            answer,
        }
    }
}

/// Which digit a `builtin:digits` question asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    Max,
    Min,
    Nth,
    Sum,
    Missing,
}

pub(super) const RULES: &[(&str, Rule)] = &[
    ("max", Rule::Max),
    ("min", Rule::Min),
    ("nth", Rule::Nth),
    ("sum", Rule::Sum),
    ("missing", Rule::Missing),
];

#[derive(Debug, Clone)]
pub(super) struct DigitsGen {
    pub(super) seed: u64,
    pub(super) length: usize,
    pub(super) rules: Vec<Rule>,
}

impl Problems for DigitsGen {
    fn problem(&self, index: u64) -> Problem {
        let mut rng = task_rng(self.seed, index);
        let rule = self.rules[rng.range(0, self.rules.len() as i64 - 1) as usize];
        // The answer is drawn first, uniform over 0..=9, so that no constant reply (such as
        // always 9 for the largest digit) beats chance, which is 1 in 10 for every rule.
        let answer = rng.range(0, 9);
        let n = self.length;
        let mut digits: Vec<i64> = match rule {
            Rule::Max => (0..n).map(|_| rng.range(0, answer)).collect(),
            Rule::Min => (0..n).map(|_| rng.range(answer, 9)).collect(),
            Rule::Nth | Rule::Sum => (0..n).map(|_| rng.range(0, 9)).collect(),
            // The nine other digits, shuffled (Fisher-Yates); `length` does not apply.
            Rule::Missing => {
                let mut d: Vec<i64> = (0..10).filter(|&d| d != answer).collect();
                for i in (1..d.len()).rev() {
                    d.swap(i, rng.range(0, i as i64) as usize);
                }
                d
            }
        };
        let at = rng.range(0, n as i64 - 1) as usize;
        match rule {
            Rule::Missing => {}
            Rule::Sum => {
                let rest: i64 = digits
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != at)
                    .map(|(_, d)| d)
                    .sum();
                digits[at] = (answer - rest).rem_euclid(10);
            }
            _ => digits[at] = answer,
        }
        let list = digits
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        let (name, question) = match rule {
            Rule::Max => ("max", "Which is the largest digit?".to_string()),
            Rule::Min => ("min", "Which is the smallest digit?".to_string()),
            Rule::Nth => ("nth", format!("Which digit is at position {}?", at + 1)),
            Rule::Sum => ("sum", "What is the last digit of their sum?".to_string()),
            Rule::Missing => ("missing", "Which digit from 0 to 9 is missing?".to_string()),
        };
        let mut data = obj(json!({ "digits": list, "rule": name }));
        if rule == Rule::Nth {
            data.insert("position".into(), json!(at + 1));
        }
        Problem {
            prompt: format!("Digits: {list}. {question} {ANSWER_FORMAT} <answer>7</answer>."),
            data,
            answer,
        }
    }
}

fn task_of(index: u64, p: &Problem) -> TaskRef {
    let mut t = TaskRef::new(index.to_string());
    t.prompt = Some(p.prompt.clone());
    t.metadata
        .insert("answer".into(), json!(p.answer.to_string()));
    t.metadata.extend(p.data.clone());
    t
}

/// A one-turn environment over a family of problems: the reply's last answer tag must equal
/// the answer.
pub(super) struct OneTurn {
    manifest: Manifest,
    size: u64,
    gen: Arc<dyn Problems>,
    judge: Arc<str>,
}

impl OneTurn {
    pub(super) fn new(
        id: &str,
        name: &str,
        size: u64,
        gen: Arc<dyn Problems>,
        description: String,
        data: Value,
    ) -> Self {
        let mut m = Manifest::new(id, name, "builtin", Mode::Step);
        m.version = Some(env!("CARGO_PKG_VERSION").to_string());
        m.license = Some("Apache-2.0".into());
        m.description = Some(description);
        m.capabilities.text = true;
        m.capabilities.reward_timing = RewardTiming::Terminal;
        m.num_tasks = Some(size);
        m.action_schema = Some(obj(
            json!({"type": "string", "description": "the reply text"}),
        ));
        m.observation_schema = Some(obj(json!({"type": "object", "properties": data})));
        OneTurn {
            manifest: m,
            size,
            gen,
            judge: format!("builtin:{name}").into(),
        }
    }
}

pub(super) struct OneTurnEpisode {
    env_id: String,
    judge: Arc<str>,
    task: TaskRef,
    answer: i64,
    obs: Observation,
}

impl Environment for OneTurn {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        let n = limit.map_or(self.size, |l| (l as u64).min(self.size));
        Ok((0..n).map(|i| task_of(i, &self.gen.problem(i))).collect())
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let index = task_index(&self.manifest.id, self.size, task, seed)?;
        let p = self.gen.problem(index);
        // Reuse the caller's task when it is one tasks() built (it has the prompt and answer)
        // rather than formatting it again; a task named by id alone is rebuilt.
        let task = match task {
            Some(t) if t.prompt.is_some() && t.metadata.contains_key("answer") => t.clone(),
            _ => task_of(index, &p),
        };
        let mut obs = Observation::text(task.prompt.clone().unwrap_or_else(|| p.prompt.clone()));
        obs.data = Value::Object(p.data);
        obs.info.insert("task_id".into(), json!(task.id));
        Ok(Box::new(OneTurnEpisode {
            env_id: self.manifest.id.clone(),
            judge: self.judge.clone(),
            task,
            answer: p.answer,
            obs,
        }))
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        let gen = self.gen.clone();
        Some(Policy::action(move |obs| {
            let index = obs
                .info
                .get("task_id")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::Policy("observation has no task_id".into()))?;
            Ok(json!(format!(
                "<answer>{}</answer>",
                gen.problem(index).answer
            )))
        }))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        Some(Policy::constant(json!("<answer></answer>")))
    }

    fn default_max_steps(&self) -> usize {
        1
    }
}

impl Episode for OneTurnEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let reply = action.as_str().ok_or_else(|| Error::InvalidAction {
            env: self.env_id.clone(),
            action: crate::contract::preview(action),
            reason: "expected the reply text (a JSON string)".into(),
        })?;
        let extracted = extract_answer_tag(reply);
        let correct = extracted
            .as_deref()
            .and_then(|s| s.trim().replace(',', "").parse::<f64>().ok())
            .is_some_and(|x| x == self.answer as f64);
        let mut info = JsonMap::new();
        info.insert("extracted".into(), json!(extracted));
        Ok(Step {
            action: action.clone(),
            observation: Observation::text(""),
            reward: if correct { 1.0 } else { 0.0 },
            terminated: true,
            truncated: false,
            info,
        })
    }

    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        let score = steps.last().map_or(0.0, |s| s.reward);
        Ok(Judgment::new(score, JudgeSource::Verifier, &*self.judge)?
            .with_passed(score >= 1.0)
            .with_detail("expected", self.answer.to_string())
            .with_detail(
                "extracted",
                steps
                    .last()
                    .and_then(|s| s.info.get("extracted"))
                    .cloned()
                    .unwrap_or(Value::Null),
            ))
    }

    fn task(&self) -> Option<TaskRef> {
        Some(self.task.clone())
    }
}
