//! A readable replay of one episode, for `nenyax try`.

use serde_json::Value;
use std::fmt::Write as _;

use crate::contract::{Role, Trajectory};

fn one_line(s: &str, max: usize) -> String {
    let flat = s.replace('\n', " ⏎ ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Render `traj` as a transcript: header, observations and actions (or messages), verdict.
pub fn render(traj: &Trajectory) -> String {
    let mut out = String::new();
    let task = traj.task.as_ref().map_or("-".to_string(), |t| t.id.clone());
    let seed = traj.seed.map_or("-".to_string(), |s| s.to_string());
    let _ = writeln!(
        out,
        "━━ {} [{}] task={task} seed={seed} {:.3}s",
        traj.env_id,
        traj.mode,
        traj.duration_s.unwrap_or(0.0)
    );
    if !traj.messages.is_empty() {
        for m in &traj.messages {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            let _ = writeln!(
                out,
                "{role:>9} │ {}",
                one_line(&m.text().unwrap_or_default(), 300)
            );
        }
    } else {
        if let Some(o) = &traj.initial_observation {
            let text = o.text.clone().unwrap_or_else(|| o.data.to_string());
            let _ = writeln!(out, "{:>9} │ {}", "observe", one_line(&text, 300));
        }
        for (i, s) in traj.steps.iter().enumerate() {
            let _ = writeln!(
                out,
                "{:>9} │ {}  reward={}{}",
                format!("act {}", i + 1),
                one_line(&show(&s.action), 200),
                s.reward,
                if s.truncated { "  (truncated)" } else { "" }
            );
            if let Some(t) = s.observation.text.as_deref().filter(|t| !t.is_empty()) {
                let _ = writeln!(out, "{:>9} │ {}", "observe", one_line(t, 300));
            }
        }
    }
    if !traj.model_calls.is_empty() {
        let _ = writeln!(
            out,
            "{:>9} │ {} calls recorded",
            "model",
            traj.model_calls.len()
        );
    }
    if let Some(e) = &traj.error {
        let _ = writeln!(out, "{:>9} │ {e}", "ERROR");
    }
    if let Some(j) = &traj.judgment {
        let passed = j.passed.map_or(String::new(), |p| format!(" passed={p}"));
        let _ = writeln!(
            out,
            "{:>9} │ score={}{passed} by {}",
            "judged",
            j.score,
            j.judge.as_deref().unwrap_or("?")
        );
    }
    out
}
