//! What the reproducibility and session checks compare, and how they say what differed.

use serde_json::{json, Value};

use crate::contract::{preview, Observation, Trajectory};
use crate::limits::count;

/// A score for messages: the number, or "no score".
pub(super) fn score_text(t: &Trajectory) -> String {
    t.score()
        .map_or_else(|| "no score".to_string(), |s| s.to_string())
}

/// Compare two rollouts of the same situation: initial observation, judgment (score and
/// passed) and every recorded step; `None` when they agree.
pub(super) fn same_situation(a: &Trajectory, b: &Trajectory) -> Option<String> {
    if let Some(e) = &b.error {
        return Some(format!("the second run failed: {e}"));
    }
    let (ia, ib) = (&a.initial_observation, &b.initial_observation);
    if let (Some(x), Some(y)) = (ia, ib) {
        if x.data != y.data || x.text != y.text {
            return Some("the same seed produced a different initial observation".into());
        }
    }
    let passed = |t: &Trajectory| t.judgment.as_ref().and_then(|j| j.passed);
    if a.score() != b.score() {
        return Some(format!(
            "the same seed and policy scored {} then {}",
            score_text(a),
            score_text(b)
        ));
    }
    if passed(a) != passed(b) {
        let word = |p: Option<bool>| match p {
            Some(true) => "passed",
            Some(false) => "failed",
            None => "was not marked passed or failed",
        };
        return Some(format!(
            "the same seed and policy scored {} both times but {} then {}",
            score_text(a),
            word(passed(a)),
            word(passed(b))
        ));
    }
    if a.steps.len() != b.steps.len() {
        return Some(format!(
            "the same seed and policy recorded {} then {}",
            count(a.steps.len(), "step"),
            count(b.steps.len(), "step")
        ));
    }
    for (k, (x, y)) in a.steps.iter().zip(&b.steps).enumerate() {
        let what = if x.action != y.action {
            Some(("action", preview(&x.action), preview(&y.action)))
        } else if x.observation.data != y.observation.data {
            Some((
                "observation",
                preview(&x.observation.data),
                preview(&y.observation.data),
            ))
        } else if x.observation.text != y.observation.text {
            let t = |o: &Option<String>| preview(&json!(o));
            Some((
                "observation text",
                t(&x.observation.text),
                t(&y.observation.text),
            ))
        } else if x.reward != y.reward {
            Some(("reward", x.reward.to_string(), y.reward.to_string()))
        } else if x.done() != y.done() {
            Some(("end of episode", x.done().to_string(), y.done().to_string()))
        } else {
            None
        };
        if let Some((field, p, q)) = what {
            return Some(format!("step {k}: the {field} was {p} then {q}"));
        }
    }
    None
}

/// Why a session's first observation shows the policy nothing, if it does: what a chat model
/// would be shown (messages, else text, else data) is blank.
pub(super) fn empty_observation(o: &Observation) -> Option<&'static str> {
    let blank = |s: &str| s.trim().is_empty();
    let shown = match (&o.messages, &o.text) {
        (Some(m), _) if !m.is_empty() => m.iter().all(|m| {
            m.text().map_or(true, |t| blank(&t))
                && m.tool_calls.as_ref().map_or(true, |c| c.is_empty())
        }),
        (_, Some(t)) => blank(t),
        _ => match &o.data {
            Value::Null => true,
            Value::String(s) => blank(s),
            Value::Array(a) => a.is_empty(),
            Value::Object(m) => m.is_empty(),
            _ => false,
        },
    };
    shown.then_some(
        "the session's first observation is empty (blank text, no data, no messages): a policy \
         is shown nothing to act on; give every task a non-empty prompt",
    )
}
