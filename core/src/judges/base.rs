//! The judge interface and what the answer-matching judges share: the expected answer from the
//! task, normalising, and a 1-or-0 verdict with what was compared.

use serde_json::Value;

use super::extract::Extract;
use crate::contract::{JudgeSource, Judgment, Trajectory};
use crate::error::{Error, Result};

/// Scores a finished episode.
pub trait Judge: Send + Sync {
    /// A stable identifier, used as the component name and `judge` field.
    fn id(&self) -> String;

    /// The verdict on `traj`.
    fn judge(&self, traj: &Trajectory) -> Result<Judgment>;
}

pub(super) fn expected(traj: &Trajectory, field: &str, judge: &str) -> Result<String> {
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

pub(super) fn normalize(s: &str, case_sensitive: bool) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if case_sensitive {
        s
    } else {
        s.to_lowercase()
    }
}

pub(super) fn clip(s: &str) -> String {
    s.chars().take(200).collect()
}

pub(super) fn verdict(id: String, hit: bool, got: Option<&str>, want: &str) -> Result<Judgment> {
    Ok(
        Judgment::new(if hit { 1.0 } else { 0.0 }, JudgeSource::Verifier, id)?
            .with_passed(hit)
            .with_detail("got", got.map(clip))
            .with_detail("expected", clip(want)),
    )
}

/// Extract the answer, normalise both sides, and score `hit(got, want)` as 1 or 0.
pub(super) fn compare(
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
