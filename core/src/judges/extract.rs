//! Pulling the answer out of a reply: `<answer>` tags, the last number, `\boxed{}`, a regex.

use regex::Regex;
use std::sync::OnceLock;

use crate::error::{Error, Result};

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

    pub(super) fn name(&self) -> String {
        match self {
            Extract::Whole => "whole".into(),
            Extract::AnswerTag => "answer_tag".into(),
            Extract::LastNumber => "last_number".into(),
            Extract::Boxed => "boxed".into(),
            Extract::Pattern(r) => format!("regex:{}", r.as_str()),
        }
    }
}
