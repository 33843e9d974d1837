//! The in-context learner: no weights change. It keeps a bank of the model's own best episodes
//! and shows a few of them as worked examples in front of every conversation, so any chat
//! model (an endpoint, a closed API, a function) improves from its own successes.

use serde_json::{json, Value};
use std::sync::Arc;

use super::{Group, Learner, UpdateReport};
use crate::contract::{Message, ModelCall, Role, Trajectory};
use crate::error::{Error, Result};
use crate::models::ChatModel;
use crate::policy::Policy;

/// One banked episode: its conversation without system turns, ending in an assistant reply.
#[derive(Debug, Clone, PartialEq)]
struct Example {
    /// The first user message: the query it answered (one example per query is kept).
    key: String,
    messages: Vec<Message>,
    score: f64,
    /// When it was banked, for recency among equal scores.
    order: u64,
    chars: usize,
}

/// The in-context learner over a chat model.
pub struct InContext {
    model: Arc<dyn ChatModel>,
    /// Examples shown per call.
    pub shots: usize,
    /// Examples kept in the bank.
    pub capacity: usize,
    /// Lowest score worth banking.
    pub min_score: f64,
    /// Most characters of examples put in front of one conversation.
    pub budget_chars: usize,
    bank: Vec<Example>,
    saved: Option<Vec<Example>>,
    counter: u64,
}

impl InContext {
    /// A learner over `model` with the reference's defaults: 3 shots, 32 kept, min score 1,
    /// at most 8000 characters of examples per call.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        InContext {
            model,
            shots: 3,
            capacity: 32,
            min_score: 1.0,
            budget_chars: 8000,
            bank: Vec::new(),
            saved: None,
            counter: 0,
        }
    }

    /// Examples in the bank.
    pub fn banked(&self) -> usize {
        self.bank.len()
    }

    fn example(traj: &Trajectory) -> Option<Example> {
        let score = traj.score()?;
        if traj.error.is_some() {
            return None;
        }
        let mut messages: Vec<Message> = traj
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .cloned()
            .collect();
        // End on the last assistant reply: what follows it is feedback the model never used.
        let last = messages.iter().rposition(|m| m.role == Role::Assistant)?;
        messages.truncate(last + 1);
        let key = messages
            .iter()
            .find(|m| m.role == Role::User)
            .and_then(Message::text)?;
        let chars = messages
            .iter()
            .map(|m| m.text().map_or(0, |t| t.len()))
            .sum();
        Some(Example {
            key,
            messages,
            score,
            order: 0,
            chars,
        })
    }
}

/// The model with examples in front of each conversation.
struct WithExamples {
    model: Arc<dyn ChatModel>,
    examples: Arc<Vec<Example>>,
    shots: usize,
    budget_chars: usize,
}

impl WithExamples {
    fn augment(&self, messages: &[Message]) -> Vec<Message> {
        let query = messages
            .iter()
            .find(|m| m.role == Role::User)
            .and_then(Message::text);
        let mut picked: Vec<&Example> = Vec::new();
        let mut used = 0;
        for e in self.examples.iter() {
            if picked.len() == self.shots {
                break;
            }
            // Never the query itself: that would hand the model its own answer.
            if Some(&e.key) == query.as_ref() || used + e.chars > self.budget_chars {
                continue;
            }
            used += e.chars;
            picked.push(e);
        }
        let system = messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count();
        let mut out: Vec<Message> = messages[..system].to_vec();
        for e in picked {
            out.extend(e.messages.iter().cloned());
        }
        out.extend_from_slice(&messages[system..]);
        out
    }
}

impl ChatModel for WithExamples {
    fn name(&self) -> String {
        self.model.name()
    }

    fn complete(&self, messages: &[Message]) -> Result<Message> {
        self.model.complete(&self.augment(messages))
    }

    // The record shows what the model was really asked, examples included.
    fn complete_recorded(&self, messages: &[Message]) -> (Result<Message>, ModelCall) {
        self.model.complete_recorded(&self.augment(messages))
    }
}

impl Learner for InContext {
    fn name(&self) -> String {
        "incontext".into()
    }

    fn policy(&mut self) -> Result<Policy> {
        let mut examples = self.bank.clone();
        examples.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.order.cmp(&a.order)));
        let examples = Arc::new(examples);
        let (model, shots, budget_chars) = (self.model.clone(), self.shots, self.budget_chars);
        // Per episode, so a model that can be seeded samples reproducibly in each.
        Ok(Policy::per_episode(move |ctx, _| {
            Ok(Policy::Chat(Arc::new(WithExamples {
                model: model
                    .seeded(ctx.sample_seed)
                    .unwrap_or_else(|| model.clone()),
                examples: examples.clone(),
                shots,
                budget_chars,
            })))
        }))
    }

    fn update(&mut self, groups: &[Group]) -> Result<UpdateReport> {
        let mut report = UpdateReport::default();
        let mut added = 0;
        for g in groups {
            let best = g
                .trajectories
                .iter()
                .filter_map(|t| Some((t.score()?, t)))
                .filter(|(s, t)| *s >= self.min_score && t.error.is_none())
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let Some(mut ex) = best.and_then(|(_, t)| InContext::example(t)) else {
                continue;
            };
            if ex.chars > self.budget_chars {
                continue;
            }
            self.counter += 1;
            ex.order = self.counter;
            match self.bank.iter_mut().find(|e| e.key == ex.key) {
                Some(old) if old.score >= ex.score => {}
                Some(old) => {
                    *old = ex;
                    added += 1;
                }
                None => {
                    self.bank.push(ex);
                    added += 1;
                }
            }
        }
        // Over capacity: drop the lowest scores, then the oldest.
        if self.bank.len() > self.capacity {
            self.bank
                .sort_by(|a, b| b.score.total_cmp(&a.score).then(b.order.cmp(&a.order)));
            self.bank.truncate(self.capacity);
        }
        report.skipped = added == 0;
        report.metrics.insert("added".into(), added as f64);
        report
            .metrics
            .insert("banked".into(), self.bank.len() as f64);
        report.sequences = added;
        Ok(report)
    }

    fn snapshot(&mut self) -> Result<bool> {
        self.saved = Some(self.bank.clone());
        Ok(true)
    }

    fn restore(&mut self) -> Result<()> {
        self.bank = self
            .saved
            .clone()
            .ok_or_else(|| Error::Training("incontext: restore without a snapshot".into()))?;
        Ok(())
    }

    fn describe(&self) -> Value {
        json!({
            "name": "incontext",
            "model": self.model.name(),
            "shots": self.shots,
            "capacity": self.capacity,
            "min_score": self.min_score,
            "budget_chars": self.budget_chars,
        })
    }
}
