//! `builtin:guess`: find a seeded number with higher/lower feedback.

use serde_json::{json, Value};

use super::common::{obj, task_rng};
use crate::contract::{
    JsonMap, JudgeSource, Judgment, Manifest, Mode, Observation, RewardTiming, Step, TaskRef,
};
use crate::env::{task_index, Environment, Episode};
use crate::error::{Error, Result};
use crate::judges::last_number;
use crate::policy::Policy;

pub(super) struct Guess {
    manifest: Manifest,
    size: u64,
    seed: u64,
    high: i64,
    max_guesses: u32,
}

impl Guess {
    pub(super) fn new(id: &str, size: u64, seed: u64, high: i64, max_guesses: u32) -> Self {
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

pub(super) struct GuessEpisode {
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
