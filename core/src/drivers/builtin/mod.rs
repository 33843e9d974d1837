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

use serde_json::json;
use std::sync::Arc;

mod common;
mod echo;
mod guess;
mod one_turn;

use echo::Echo;
use guess::Guess;
use one_turn::{DigitsGen, Gen, OneTurn, Rule, RULES};

use crate::driver::Driver;
use crate::env::Environment;
use crate::error::{Error, Result};
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

#[cfg(test)]
mod tests;
