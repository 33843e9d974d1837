//! A deterministic chat model for arithmetic questions ("What is A op B? ...") whose behaviour
//! is a function of the worked examples in its prompt: the in-context learner's test peer.
//!
//! It always knows the answer; whether it uses the `<answer>` tags the judges read depends on
//! what it is shown. The "learner" model uses them whenever its prompt holds a worked example
//! (an assistant turn), else on 3 questions in 10; the "spoilt" model tags the right answer on
//! 7 questions in 10 when shown nothing, and answers wrong whenever it is shown examples.
#![allow(dead_code)]

use nenyax::{Error, FunctionModel, Message, Role};

/// The scripted model; `spoilt`: the one that gets worse with examples.
pub fn scripted(spoilt: bool) -> FunctionModel {
    FunctionModel::new("scripted", move |msgs: &[Message]| {
        let q = msgs
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(Message::text)
            .unwrap_or_default();
        let expr = q
            .strip_prefix("What is ")
            .and_then(|r| r.split('?').next())
            .ok_or_else(|| Error::Policy(format!("not an arithmetic question: {q}")))?;
        let parts: Vec<&str> = expr.split(' ').collect();
        let num = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| Error::Policy(format!("not a number in {q}: {s}")))
        };
        let (a, b) = (num(parts[0])?, num(parts.get(2).copied().unwrap_or(""))?);
        let answer = match parts[1] {
            "+" => a + b,
            "-" => a - b,
            _ => a * b,
        };
        let shown = msgs.iter().filter(|m| m.role == Role::Assistant).count();
        let h = q
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            % 10;
        Ok(match (spoilt, shown > 0) {
            (false, true) => format!("<answer>{answer}</answer>"),
            (false, false) if h < 3 => format!("<answer>{answer}</answer>"),
            (false, false) => format!("The answer is {answer}."),
            (true, false) if h < 7 => format!("<answer>{answer}</answer>"),
            (true, _) => format!("<answer>{}</answer>", answer + 1),
        })
    })
}
