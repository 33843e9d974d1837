//! The audit's null policies. The empty reply alone lets lenient judges through (a `contains`
//! judge on one-letter answers, a `numeric` judge with a huge tolerance), so the audit also plays
//! replies shaped like the reference's answer that do not answer: a natural-language non-answer,
//! a fixed wrong answer and a random one in the same format (digits and letters replaced, any
//! `<answer>` tags or `\boxed{}` wrapper kept).

use serde_json::{json, Value};

use crate::contract::{Role, Trajectory};
use crate::policy::{FunctionModel, Policy};
use crate::rng::{splitmix64, Rng};

/// One null policy and what it replies, for the report.
pub(super) struct Null {
    /// What kind of null it is ("empty reply", ...).
    pub name: &'static str,
    /// Its reply, as shown in a failure.
    pub reply: String,
    /// The policy.
    pub policy: Policy,
}

/// The reference's answer in one episode, and how it was given.
enum Answer {
    /// An action policy's last action (a string or a number).
    Action(Value),
    /// A chat model's last reply.
    Chat(String),
}

/// What the reference answered: its last action, or its last reply as a chat model; `None` for
/// native agents and non-text actions, whose format cannot be imitated.
fn answer(reference: &Policy, t: &Trajectory) -> Option<Answer> {
    match reference {
        Policy::Native(_) => None,
        Policy::Chat(_) => t
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .and_then(|m| m.text())
            .map(Answer::Chat),
        Policy::Action(_) | Policy::PerEpisode(_) => match t.steps.last().map(|s| &s.action) {
            Some(v @ (Value::String(_) | Value::Number(_))) => Some(Answer::Action(v.clone())),
            _ => None,
        },
    }
}

/// The byte range of `s` that holds the answer proper: inside `<answer>...</answer>`, inside
/// `\boxed{...}`, else all of it.
fn answer_span(s: &str) -> (usize, usize) {
    if let (Some(a), Some(b)) = (s.find("<answer>"), s.rfind("</answer>")) {
        if a + "<answer>".len() <= b {
            return (a + "<answer>".len(), b);
        }
    }
    if let Some(a) = s.find("\\boxed{") {
        let start = a + "\\boxed{".len();
        let mut depth = 1usize;
        for (i, c) in s[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return (start, start + i);
                    }
                }
                _ => {}
            }
        }
    }
    (0, s.len())
}

/// `s` with every ASCII digit and letter of its answer part passed through `f`.
fn reshape(s: &str, mut f: impl FnMut(char) -> char) -> String {
    let (a, b) = answer_span(s);
    let inner: String = s[a..b]
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { f(c) } else { c })
        .collect();
    format!("{}{inner}{}", &s[..a], &s[b..])
}

/// The fixed wrong answer: every digit `0` and every letter `x` (`X`), or `1` and `y` (`Y`) where
/// that would be the reference's answer itself. A constant, not a shifted copy: a bijection on
/// digits or letters can map an answer onto another valid one (puzzle24's `4 + 3 + 9 + 8` under
/// rot5 is `9 + 8 + 4 + 3`; propositional_logic's `(P ∨ Q)` shifted by one is `(Q ∨ R)`, which may
/// follow from the premises too), and a null must not be right.
fn fixed(c: char, second: bool) -> char {
    match (c, second) {
        ('0'..='9', false) => '0',
        ('0'..='9', true) => '1',
        ('a'..='z', false) => 'x',
        ('a'..='z', true) => 'y',
        ('A'..='Z', false) => 'X',
        ('A'..='Z', true) => 'Y',
        _ => c,
    }
}

/// The next digit or letter, wrapping (9 -> 0, z -> a): makes a random answer that came out
/// equal to the reference's differ.
fn shift(c: char) -> char {
    let (base, n) = match c {
        '0'..='9' => (b'0', 10),
        'a'..='z' => (b'a', 26),
        'A'..='Z' => (b'A', 26),
        _ => return c,
    };
    (base + (c as u8 - base + 1) % n) as char
}

/// A random digit or letter of the same class as `c`.
fn random_like(c: char, rng: &mut Rng) -> char {
    let (base, n) = match c {
        '0'..='9' => (b'0', 10),
        'a'..='z' => (b'a', 26),
        'A'..='Z' => (b'A', 26),
        _ => return c,
    };
    (base + (rng.next_u64() % n) as u8) as char
}

/// The null policies made from the reference's answer in `t` (episode `episode` of the audit):
/// empty, a non-answer, a fixed wrong answer and a random one in the answer's format. Each
/// differs from the reference's answer; the random one is seeded by the episode, so a check
/// repeats exactly.
pub(super) fn derived(reference: &Policy, t: &Trajectory, episode: usize) -> Vec<Null> {
    let Some(answer) = answer(reference, t) else {
        return Vec::new();
    };
    let (text, number) = match &answer {
        Answer::Action(Value::String(s)) | Answer::Chat(s) => (s.clone(), false),
        Answer::Action(v) => (v.to_string(), true),
    };
    let mut replies: Vec<(&'static str, String)> = Vec::new();
    if !number {
        replies.push(("empty reply", String::new()));
        replies.push(("non-answer", "I don't know the answer.".into()));
    }
    let (a, b) = answer_span(&text);
    if text[a..b].chars().any(|c| c.is_ascii_alphanumeric()) {
        let mut wrong = reshape(&text, |c| fixed(c, false));
        if wrong == text {
            wrong = reshape(&text, |c| fixed(c, true));
        }
        replies.push(("wrong answer in the expected format", wrong));
        let mut rng = Rng::new(splitmix64(0x6e75_6c6c ^ episode as u64));
        let mut random = reshape(&text, |c| random_like(c, &mut rng));
        if random == text {
            // Replace the first digit or letter so that it cannot be the reference's answer.
            let mut first = true;
            random = reshape(&text, |c| {
                if std::mem::take(&mut first) {
                    shift(c)
                } else {
                    c
                }
            });
        }
        replies.push(("random answer in the expected format", random));
    }
    replies
        .into_iter()
        .filter(|(_, reply)| *reply != text)
        .filter_map(|(name, reply)| {
            let policy = match &answer {
                Answer::Chat(_) => {
                    let r = reply.clone();
                    Policy::chat(FunctionModel::new("null", move |_| Ok(r.clone())))
                }
                Answer::Action(_) if number => {
                    // "00" is not JSON but is the number 0.
                    let v: Value = serde_json::from_str(&reply)
                        .ok()
                        .filter(Value::is_number)
                        .or_else(|| reply.parse::<i64>().ok().map(Value::from))
                        .or_else(|| {
                            reply
                                .parse::<f64>()
                                .ok()
                                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
                        })?;
                    Policy::constant(v)
                }
                Answer::Action(_) => Policy::constant(json!(reply)),
            };
            Some(Null {
                name,
                reply,
                policy,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_kept_and_the_answer_changed() {
        let wrong = |s: &str| reshape(s, |c| fixed(c, false));
        assert_eq!(wrong("<answer>42</answer>"), "<answer>00</answer>");
        assert_eq!(wrong("\\boxed{x9}"), "\\boxed{x0}");
        assert_eq!(wrong("Zebra-7"), "Xxxxx-0");
        assert_eq!(
            wrong("<answer>4 + 3 + 9 + 8</answer>"),
            "<answer>0 + 0 + 0 + 0</answer>"
        );
        assert_eq!(wrong("<answer></answer>"), "<answer></answer>");
        assert_eq!(reshape("z9", shift), "a0");
        let mut rng = Rng::new(1);
        let r = reshape("<answer>-12.5</answer>", |c| random_like(c, &mut rng));
        assert!(
            r.starts_with("<answer>-") && r.ends_with("</answer>"),
            "{r}"
        );
        assert_eq!(r.len(), "<answer>-12.5</answer>".len());
    }

    #[test]
    fn numeric_actions_get_numeric_nulls_that_differ() {
        let mut t = Trajectory::start("x", crate::contract::Mode::Step, None, None);
        t.steps.push(crate::contract::Step {
            action: json!(7),
            observation: Default::default(),
            reward: 1.0,
            terminated: true,
            truncated: false,
            info: Default::default(),
        });
        for seed in 0..50 {
            let nulls = derived(&Policy::constant(json!(7)), &t, seed);
            assert_eq!(nulls.len(), 2, "no empty or text reply for a number");
            for n in nulls {
                let v: f64 = n.reply.parse().unwrap();
                assert!(v != 7.0, "{}", n.reply);
            }
        }
    }
}
