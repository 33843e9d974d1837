//! Environments compiled into the library, with no dependencies: the embedded default for the
//! README and for the tests of every layer above. Each has an oracle and a null policy, so each
//! can reach the audited tier.
//!
//! - `builtin:arithmetic`: seeded procedural one-turn arithmetic, answers in `<answer></answer>`.
//! - `builtin:digits`: seeded one-turn questions about a list of digits (the largest, the
//!   smallest, the one at a position, the last digit of the sum, the one of 0-9 missing) whose
//!   answer is one digit, uniform over 0-9: a rule a small model can learn from scratch and be
//!   tested on unseen lists.
//! - `builtin:guess`: guess a seeded number with higher/lower feedback, reward on the hit.
//! - `builtin:echo`: the logic of OpenEnv's `openenv init` scaffold (echo the message, reward
//!   `min(0.1 * length, 1)`), so `nenyax serve` can be benchmarked against the Python servers
//!   on the same environment; it never terminates, so episodes end at `max_steps`.

use serde_json::{json, Value};
use std::sync::Arc;

use crate::contract::{
    JsonMap, JudgeSource, Judgment, Manifest, Mode, Observation, RewardTiming, Step, TaskRef,
};
use crate::driver::Driver;
use crate::env::{task_index, Environment, Episode};
use crate::error::{Error, Result};
use crate::judges::{extract_answer_tag, last_number};
use crate::policy::Policy;
use crate::rng::{splitmix64, Rng};
use crate::uri::{ParamKind, ParamSpec, Params, Uri};

const TARGETS: &[&str] = &["arithmetic", "digits", "guess", "echo"];

/// The `builtin:` scheme.
pub struct BuiltinDriver;

fn size_seed() -> Vec<ParamSpec> {
    vec![
        ParamSpec {
            name: "size",
            kind: ParamKind::Int {
                min: 1,
                max: 100_000_000,
            },
            default: "100",
            help: "number of tasks",
        },
        ParamSpec {
            name: "seed",
            kind: ParamKind::Int {
                min: 0,
                max: i64::MAX,
            },
            default: "0",
            help: "seed of the task generator",
        },
    ]
}

impl Driver for BuiltinDriver {
    fn scheme(&self) -> &'static str {
        "builtin"
    }

    fn format(&self) -> &'static str {
        "builtin"
    }

    fn summary(&self) -> &'static str {
        "environments compiled into Nenyax: builtin:arithmetic?size=100&digits=2, builtin:digits?rules=max,min&length=6, builtin:guess?high=100, builtin:echo"
    }

    fn params(&self, target: &str) -> Vec<ParamSpec> {
        let mut p = size_seed();
        match target {
            "arithmetic" => {
                p.push(ParamSpec {
                    name: "digits",
                    kind: ParamKind::Int { min: 1, max: 9 },
                    default: "2",
                    help: "digits per operand",
                });
                p.push(ParamSpec {
                    name: "ops",
                    kind: ParamKind::Str,
                    default: "+-*",
                    help: "operators to draw from, any of + - *",
                });
            }
            "digits" => {
                p.push(ParamSpec {
                    name: "length",
                    kind: ParamKind::Int { min: 1, max: 64 },
                    default: "6",
                    help: "digits per question",
                });
                p.push(ParamSpec {
                    name: "rules",
                    kind: ParamKind::Str,
                    default: "max,min",
                    help: "questions to draw from, comma-separated: max, min, nth, sum, missing",
                });
            }
            "guess" => {
                p.push(ParamSpec {
                    name: "high",
                    kind: ParamKind::Int {
                        min: 2,
                        max: 1_000_000_000,
                    },
                    default: "100",
                    help: "the secret is drawn from 1..=high",
                });
                p.push(ParamSpec {
                    name: "max_guesses",
                    kind: ParamKind::Int { min: 1, max: 1000 },
                    default: "10",
                    help: "guesses before the episode ends",
                });
            }
            "echo" => {
                return vec![ParamSpec {
                    name: "max_steps",
                    kind: ParamKind::Int {
                        min: 1,
                        max: 1_000_000,
                    },
                    default: "10",
                    help: "steps per episode (the echo never ends by itself)",
                }]
            }
            _ => {}
        }
        p
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        if !TARGETS.contains(&uri.target.as_str()) {
            return Err(Error::UnknownTarget {
                driver: "builtin".into(),
                target: uri.target.clone(),
                available: crate::error::suggest(&uri.target, TARGETS.iter().copied())
                    .map(|s| format!("(did you mean `{s}`?)"))
                    .into_iter()
                    .chain(TARGETS.iter().map(|t| t.to_string()))
                    .collect(),
            });
        }
        let params = Params::check("builtin", uri, &self.params(&uri.target))?;
        if uri.target == "echo" {
            return Ok(Arc::new(Echo::new(
                &uri.raw,
                params.int("max_steps", 10) as usize,
            )));
        }
        let size = params.int("size", 100) as u64;
        let seed = params.int("seed", 0) as u64;
        Ok(match uri.target.as_str() {
            "arithmetic" => {
                let ops = params.string("ops", "+-*");
                if ops.is_empty() || !ops.chars().all(|c| "+-*".contains(c)) {
                    return Err(Error::InvalidParameter {
                        driver: "builtin".into(),
                        param: "ops".into(),
                        value: ops,
                        expected: "one or more of the characters + - * (write + as %2B in a URI)"
                            .into(),
                    });
                }
                let gen = Gen {
                    seed,
                    digits: params.int("digits", 2) as u32,
                    ops: ops.chars().collect(),
                };
                let description = format!(
                    "Seeded one-turn arithmetic with {}-digit operands ({ops}); the reply's last \
                     <answer></answer> span must equal the result.",
                    gen.digits
                );
                Arc::new(OneTurn::new(
                    &uri.raw,
                    "arithmetic",
                    size,
                    Arc::new(gen),
                    description,
                    json!({"expression": {"type": "string"}}),
                ))
            }
            "digits" => {
                let text = params.string("rules", "max,min");
                let rules: Option<Vec<Rule>> = text
                    .split(',')
                    .map(|r| RULES.iter().find(|(n, _)| *n == r.trim()).map(|(_, r)| *r))
                    .collect();
                let rules = rules.ok_or_else(|| Error::InvalidParameter {
                    driver: "builtin".into(),
                    param: "rules".into(),
                    value: text.clone(),
                    expected: "one or more of max, min, nth, sum, missing, comma-separated".into(),
                })?;
                let gen = DigitsGen {
                    seed,
                    length: params.int("length", 6) as usize,
                    rules,
                };
                let description = format!(
                    "Seeded one-turn questions about {} random digits ({text}), each answered \
                     by one digit, uniform over 0-9; the reply's last <answer></answer> span \
                     must equal it.",
                    gen.length
                );
                Arc::new(OneTurn::new(
                    &uri.raw,
                    "digits",
                    size,
                    Arc::new(gen),
                    description,
                    json!({
                        "digits": {"type": "string"},
                        "rule": {"type": "string"},
                        "position": {"type": "integer"}
                    }),
                ))
            }
            _ => Arc::new(Guess::new(
                &uri.raw,
                size,
                seed,
                params.int("high", 100),
                params.int("max_guesses", 10) as u32,
            )),
        })
    }
}

fn task_rng(seed: u64, index: u64) -> Rng {
    Rng::new(seed ^ splitmix64(index.wrapping_add(0xA5A5_A5A5)))
}

// ---------------------------------------------------------------------------------------------
// one-turn questions with an integer answer: arithmetic and digits

/// One seeded question: its prompt, the structured data an observation carries, the answer.
#[derive(Debug, Clone)]
struct Problem {
    prompt: String,
    data: JsonMap,
    answer: i64,
}

/// A seeded family of questions, indexed from 0.
trait Problems: Send + Sync {
    fn problem(&self, index: u64) -> Problem;
}

/// The instruction every one-turn question ends with, so one judge (the answer tag) fits all.
const ANSWER_FORMAT: &str = "Give your final answer inside <answer></answer> tags, e.g.";

#[derive(Debug, Clone)]
struct Gen {
    seed: u64,
    digits: u32,
    ops: Vec<char>,
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
enum Rule {
    Max,
    Min,
    Nth,
    Sum,
    Missing,
}

const RULES: &[(&str, Rule)] = &[
    ("max", Rule::Max),
    ("min", Rule::Min),
    ("nth", Rule::Nth),
    ("sum", Rule::Sum),
    ("missing", Rule::Missing),
];

#[derive(Debug, Clone)]
struct DigitsGen {
    seed: u64,
    length: usize,
    rules: Vec<Rule>,
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
struct OneTurn {
    manifest: Manifest,
    size: u64,
    gen: Arc<dyn Problems>,
    judge: Arc<str>,
}

impl OneTurn {
    fn new(
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

fn obj(v: Value) -> JsonMap {
    match v {
        Value::Object(m) => m,
        _ => JsonMap::new(),
    }
}

struct OneTurnEpisode {
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

// ---------------------------------------------------------------------------------------------
// guess

struct Guess {
    manifest: Manifest,
    size: u64,
    seed: u64,
    high: i64,
    max_guesses: u32,
}

impl Guess {
    fn new(id: &str, size: u64, seed: u64, high: i64, max_guesses: u32) -> Self {
        let mut m = Manifest::new(id, "guess", "builtin", Mode::Step);
        m.version = Some(env!("CARGO_PKG_VERSION").to_string());
        m.license = Some("Apache-2.0".into());
        m.description = Some(format!(
            "Guess a seeded number from 1 to {high} in at most {max_guesses} guesses; the feedback \
             says higher or lower, and the hit earns reward 1."
        ));
        m.capabilities.text = true;
        m.capabilities.reward_timing = RewardTiming::PerStep;
        m.num_tasks = Some(size);
        m.action_schema = Some(obj(json!({
            "type": ["integer", "string"],
            "minimum": 1,
            "maximum": high,
            "description": "the guess, or reply text whose last number is the guess"
        })));
        m.observation_schema = Some(obj(json!({
            "type": "object",
            "properties": {
                "low": {"type": "integer"}, "high": {"type": "integer"},
                "guesses_left": {"type": "integer"}, "feedback": {"type": ["string", "null"]}
            }
        })));
        Guess {
            manifest: m,
            size,
            seed,
            high,
            max_guesses,
        }
    }

    fn secret(&self, index: u64) -> i64 {
        task_rng(self.seed, index).range(1, self.high)
    }
}

struct GuessEpisode {
    env_id: String,
    task: TaskRef,
    secret: i64,
    low: i64,
    high: i64,
    left: u32,
    found: bool,
    obs: Observation,
}

impl GuessEpisode {
    fn observe(&mut self, feedback: Option<&str>) {
        let text = match feedback {
            None => format!(
                "I am thinking of a whole number from {} to {}. You have {} guesses. Reply with \
                 your guess as a number.",
                self.low, self.high, self.left
            ),
            Some(f) => format!("{f} You have {} guesses left.", self.left),
        };
        let mut obs = Observation::text(text);
        obs.data = json!({"low": self.low, "high": self.high, "guesses_left": self.left, "feedback": feedback});
        obs.info.insert("task_id".into(), json!(self.task.id));
        self.obs = obs;
    }
}

impl Environment for Guess {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn tasks(&self, limit: Option<usize>) -> Result<Vec<TaskRef>> {
        let n = limit.map_or(self.size, |l| (l as u64).min(self.size));
        Ok((0..n)
            .map(|i| {
                let mut t = TaskRef::new(i.to_string());
                t.metadata
                    .insert("answer".into(), json!(self.secret(i).to_string()));
                t
            })
            .collect())
    }

    fn open(&self, task: Option<&TaskRef>, seed: Option<i64>) -> Result<Box<dyn Episode>> {
        let index = task_index(&self.manifest.id, self.size, task, seed)?;
        let secret = self.secret(index);
        let mut t = TaskRef::new(index.to_string());
        t.metadata
            .insert("answer".into(), json!(secret.to_string()));
        let mut ep = GuessEpisode {
            env_id: self.manifest.id.clone(),
            task: t,
            secret,
            low: 1,
            high: self.high,
            left: self.max_guesses,
            found: false,
            obs: Observation::default(),
        };
        ep.observe(None);
        Ok(Box::new(ep))
    }

    fn reference_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        // Bisection from what the observation shows: always finds it within log2(high) guesses.
        Some(Policy::action(|obs| {
            let lo = obs.data.get("low").and_then(Value::as_i64);
            let hi = obs.data.get("high").and_then(Value::as_i64);
            match (lo, hi) {
                (Some(lo), Some(hi)) => Ok(json!(lo + (hi - lo) / 2)),
                _ => Err(Error::Policy("observation has no low/high bounds".into())),
            }
        }))
    }

    fn null_policy(&self, _task: Option<&TaskRef>) -> Option<Policy> {
        Some(Policy::constant(json!(0)))
    }

    fn default_max_steps(&self) -> usize {
        self.max_guesses as usize
    }
}

impl Episode for GuessEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let guess = match action {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f.round() as i64)),
            Value::String(s) => last_number(s).map(|f| f.round() as i64),
            other => {
                return Err(Error::InvalidAction {
                    env: self.env_id.clone(),
                    action: crate::contract::preview(other),
                    reason: "expected a number, or reply text containing one".into(),
                })
            }
        };
        self.left = self.left.saturating_sub(1);
        let feedback = match guess {
            None => "That is not a number.".to_string(),
            Some(g) if g == self.secret => {
                self.found = true;
                format!("Correct, it is {g}!")
            }
            Some(g) if g < self.secret => {
                self.low = self.low.max(g + 1);
                format!("Higher than {g}.")
            }
            Some(g) => {
                self.high = self.high.min(g - 1);
                format!("Lower than {g}.")
            }
        };
        self.observe(Some(&feedback));
        let mut info = JsonMap::new();
        info.insert("guess".into(), json!(guess));
        Ok(Step {
            action: action.clone(),
            observation: self.obs.clone(),
            reward: if self.found { 1.0 } else { 0.0 },
            terminated: self.found || self.left == 0,
            truncated: false,
            info,
        })
    }

    fn judge(&self, steps: &[Step]) -> Result<Judgment> {
        let score: f64 = steps.iter().map(|s| s.reward).sum();
        Ok(Judgment::new(score, JudgeSource::Env, "builtin:guess")?
            .with_passed(self.found)
            .with_detail("secret", self.secret)
            .with_detail("guesses", steps.len()))
    }

    fn task(&self) -> Option<TaskRef> {
        Some(self.task.clone())
    }
}

// ---------------------------------------------------------------------------------------------
// echo

struct Echo {
    manifest: Manifest,
    max_steps: usize,
}

impl Echo {
    fn new(id: &str, max_steps: usize) -> Self {
        let mut m = Manifest::new(id, "echo", "builtin", Mode::Step);
        m.version = Some(env!("CARGO_PKG_VERSION").to_string());
        m.license = Some("Apache-2.0".into());
        m.description = Some(
            "Echoes the message back; reward min(0.1 * length, 1) per step (the logic of the \
             openenv init scaffold)."
                .into(),
        );
        m.capabilities.text = true;
        m.capabilities.reward_timing = RewardTiming::PerStep;
        m.action_schema = Some(obj(json!({"type": "string", "description": "the message"})));
        m.observation_schema = Some(obj(json!({
            "type": "object",
            "properties": {"echoed_message": {"type": "string"}, "message_length": {"type": "integer"}}
        })));
        Echo {
            manifest: m,
            max_steps,
        }
    }
}

struct EchoEpisode {
    env_id: String,
    obs: Observation,
}

fn echo_observation(message: &str) -> Observation {
    let mut obs = Observation::text(message);
    obs.data = json!({"echoed_message": message, "message_length": message.chars().count()});
    obs
}

impl Environment for Echo {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&self, _task: Option<&TaskRef>, _seed: Option<i64>) -> Result<Box<dyn Episode>> {
        Ok(Box::new(EchoEpisode {
            env_id: self.manifest.id.clone(),
            obs: echo_observation("Echo environment ready!"),
        }))
    }

    fn default_max_steps(&self) -> usize {
        self.max_steps
    }
}

impl Episode for EchoEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let message = action.as_str().ok_or_else(|| Error::InvalidAction {
            env: self.env_id.clone(),
            action: crate::contract::preview(action),
            reason: "expected the message (a JSON string)".into(),
        })?;
        self.obs = echo_observation(message);
        Ok(Step {
            action: action.clone(),
            observation: self.obs.clone(),
            reward: (message.chars().count() as f64 * 0.1).min(1.0),
            terminated: false,
            truncated: false,
            info: JsonMap::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::RolloutOptions;
    use crate::router::load;

    #[test]
    fn arithmetic_is_seeded_and_its_oracle_wins() {
        let env = load("builtin:arithmetic?size=50&seed=3").unwrap();
        let again = load("builtin:arithmetic?size=50&seed=3").unwrap();
        assert_eq!(env.tasks(None).unwrap(), again.tasks(None).unwrap());
        let other = load("builtin:arithmetic?size=50&seed=4").unwrap();
        assert_ne!(env.tasks(None).unwrap(), other.tasks(None).unwrap());
        let oracle = env.reference_policy(None).unwrap();
        let null = env.null_policy(None).unwrap();
        for t in env.tasks(None).unwrap() {
            let opts = RolloutOptions::new(Some(t.clone()), Some(0));
            let good = env.rollout(&oracle, &opts);
            assert_eq!(good.score(), Some(1.0), "{:?}", good.error);
            assert_eq!(
                good.task.as_ref().unwrap().metadata["answer"],
                t.metadata["answer"]
            );
            assert_eq!(env.rollout(&null, &opts).score(), Some(0.0));
        }
        // A task named by id alone is played and recorded in full.
        let t = env.rollout(&oracle, &RolloutOptions::new(Some(TaskRef::new("3")), None));
        assert_eq!(t.score(), Some(1.0));
        assert_eq!(t.task.unwrap(), env.tasks(None).unwrap()[3]);
    }

    #[test]
    fn arithmetic_answers_are_right() {
        let gen = Gen {
            seed: 0,
            digits: 3,
            ops: vec!['+', '-', '*'],
        };
        for i in 0..200 {
            let p = gen.problem(i);
            let parts: Vec<&str> = p.data["expression"].as_str().unwrap().split(' ').collect();
            let (a, b): (i64, i64) = (parts[0].parse().unwrap(), parts[2].parse().unwrap());
            assert!((100..=999).contains(&a) && (100..=999).contains(&b));
            let want = match parts[1] {
                "+" => a + b,
                "-" => a - b,
                _ => a * b,
            };
            assert_eq!(p.answer, want);
        }
    }

    /// The answer a `builtin:digits` observation asks for, computed from its data alone.
    fn digits_answer(data: &Value) -> i64 {
        let digits: Vec<i64> = data["digits"]
            .as_str()
            .unwrap()
            .split(' ')
            .map(|d| d.parse().unwrap())
            .collect();
        match data["rule"].as_str().unwrap() {
            "max" => *digits.iter().max().unwrap(),
            "min" => *digits.iter().min().unwrap(),
            "nth" => digits[data["position"].as_u64().unwrap() as usize - 1],
            "sum" => digits.iter().sum::<i64>() % 10,
            "missing" => (0..10).find(|d| !digits.contains(d)).unwrap(),
            r => panic!("unknown rule {r}"),
        }
    }

    #[test]
    fn digits_answers_follow_their_rule_and_are_uniform() {
        let env =
            load("builtin:digits?rules=max,min,nth,sum,missing&length=5&size=5000&seed=9").unwrap();
        let mut counts = [0usize; 10];
        let mut rules = std::collections::BTreeMap::new();
        for t in env.tasks(None).unwrap() {
            let s = env.session(Some(&t), None).unwrap();
            let obs = s.observation().clone();
            let want = digits_answer(&obs.data);
            assert_eq!(t.metadata["answer"], json!(want.to_string()), "{obs:?}");
            let n = obs.data["digits"].as_str().unwrap().split(' ').count();
            assert_eq!(n, if obs.data["rule"] == "missing" { 9 } else { 5 });
            let text = obs.text.unwrap();
            assert!(text.starts_with(&format!(
                "Digits: {}.",
                obs.data["digits"].as_str().unwrap()
            )));
            assert!(
                text.ends_with("<answer></answer> tags, e.g. <answer>7</answer>."),
                "{text}"
            );
            counts[want as usize] += 1;
            *rules
                .entry(obs.data["rule"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
        // Uniform answers: no constant reply beats chance (1 in 10). 5000 draws: each count is
        // 500 ± 21 (one sd), so ±100 fails only on a real skew.
        assert!(
            counts.iter().all(|&c| (400..=600).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(rules.len(), 5, "{rules:?}");
        assert!(
            rules.values().all(|&c| (800..=1200).contains(&c)),
            "{rules:?}"
        );
    }

    #[test]
    fn digits_is_seeded_and_its_oracle_wins() {
        let uri = "builtin:digits?size=60&seed=3&rules=nth,max";
        let env = load(uri).unwrap();
        assert_eq!(
            env.tasks(None).unwrap(),
            load(uri).unwrap().tasks(None).unwrap()
        );
        let other = load("builtin:digits?size=60&seed=4&rules=nth,max").unwrap();
        assert_ne!(env.tasks(None).unwrap(), other.tasks(None).unwrap());
        let oracle = env.reference_policy(None).unwrap();
        let null = env.null_policy(None).unwrap();
        for t in env.tasks(None).unwrap() {
            let opts = RolloutOptions::new(Some(t.clone()), None);
            let good = env.rollout(&oracle, &opts);
            assert_eq!(good.score(), Some(1.0), "{:?}", good.error);
            assert_eq!(
                good.judgment.unwrap().judge.as_deref(),
                Some("builtin:digits")
            );
            assert_eq!(env.rollout(&null, &opts).score(), Some(0.0));
            // One wrong digit scores 0.
            let wrong = (t.metadata["answer"]
                .as_str()
                .unwrap()
                .parse::<i64>()
                .unwrap()
                + 1)
                % 10;
            let bad = Policy::constant(json!(format!("<answer>{wrong}</answer>")));
            assert_eq!(env.rollout(&bad, &opts).score(), Some(0.0));
        }
        let report = crate::conformance::check_uri(uri, &Default::default());
        assert_eq!(
            report.tier,
            crate::conformance::Tier::Audited,
            "{}",
            report.render()
        );
    }

    #[test]
    fn digits_rejects_unknown_rules() {
        for bad in ["rules=max,median", "rules=", "length=0"] {
            let e = load(&format!("builtin:digits?{bad}")).err().unwrap();
            assert!(
                e.to_string().contains("rules") || e.to_string().contains("length"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn guess_oracle_bisects_and_null_never_hits() {
        let env = load("builtin:guess?size=20&high=1000&max_guesses=10").unwrap();
        let oracle = env.reference_policy(None).unwrap();
        let null = env.null_policy(None).unwrap();
        for t in env.tasks(None).unwrap() {
            let opts = RolloutOptions::new(Some(t), None);
            let good = env.rollout(&oracle, &opts);
            assert_eq!(good.score(), Some(1.0), "{:?}", good.error);
            assert!(good.steps.len() <= 10);
            let bad = env.rollout(&null, &opts);
            assert_eq!(bad.score(), Some(0.0));
            assert_eq!(bad.steps.len(), 10);
        }
    }

    #[test]
    fn guess_reads_numbers_out_of_chat_text() {
        let env = load("builtin:guess?high=10").unwrap();
        let mut s = env.session(None, Some(0)).unwrap();
        let step = s.act(json!("I think it is 5")).unwrap();
        assert_eq!(step.info["guess"], json!(5));
        let step = s.act(json!("no idea")).unwrap();
        assert!(step.observation.text.unwrap().contains("not a number"));
        assert!(s.act(json!({"guess": 1})).is_err());
    }

    #[test]
    fn out_of_range_task_ids_are_typed_errors() {
        let env = load("builtin:arithmetic?size=5").unwrap();
        let e = env.session(Some(&TaskRef::new("9")), None).err().unwrap();
        assert!(e.to_string().contains("from 0 to 4"), "{e}");
    }
}
