//! Training-ready traces: from a judged [`Trajectory`], the token sequences a policy-gradient
//! learner trains on, built only from what the policy really sampled.
//!
//! Per model call: the prompt token ids, the sampled completion token ids and their sampling
//! log-probabilities, as the recording server (or the policy itself, for action calls) kept
//! them. Nothing is ever re-tokenised or guessed: a trajectory whose calls are missing, lack
//! token ids, or cannot be proven to form one sequence is masked from training with its reason.
//!
//! Two kinds of call make two kinds of row:
//! - chat calls (an LLM's turns) are joined into one row when each call's prompt provably
//!   extends the previous call's prompt plus completion, token for token; the row is the last
//!   prompt plus the last completion, and the loss mask is 1 exactly on the sampled completion
//!   tokens (tool results, environment text and earlier turns stay 0);
//! - action calls ([`ModelCall::action`], a step policy's choices) are independent draws: their
//!   segments sit back to back in one row per trajectory, each conditioned only on its own
//!   prompt (`context_start`).

use serde::Serialize;

use crate::contract::{ModelCall, Role, Trajectory};

/// Why a trajectory is left out of training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaskReason {
    /// The episode itself failed.
    Failed(String),
    /// No model call was recorded (the policy did not record what it sampled).
    NoCalls,
    /// A call failed or has no response.
    CallFailed(usize),
    /// A call was dropped: the conversation or the steps show more policy turns than calls.
    Dropped {
        /// Turns the trajectory shows.
        turns: usize,
        /// Calls recorded.
        calls: usize,
    },
    /// A call lacks prompt or completion token ids (the upstream did not return them).
    MissingTokenIds(usize, &'static str),
    /// A call's log-probabilities do not match its completion tokens one for one.
    LogprobCount(usize),
    /// Call `i`'s prompt does not extend call `i - 1`'s prompt plus completion.
    Discontinuous(usize),
    /// Action and chat calls in one trajectory.
    MixedCalls,
}

impl MaskReason {
    /// A short stable label, counted in reports.
    pub fn label(&self) -> &'static str {
        match self {
            MaskReason::Failed(_) => "episode_failed",
            MaskReason::NoCalls => "no_calls",
            MaskReason::CallFailed(_) => "call_failed",
            MaskReason::Dropped { .. } => "dropped_call",
            MaskReason::MissingTokenIds(..) => "missing_token_ids",
            MaskReason::LogprobCount(_) => "logprob_count",
            MaskReason::Discontinuous(_) => "discontinuous",
            MaskReason::MixedCalls => "mixed_calls",
        }
    }
}

impl std::fmt::Display for MaskReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaskReason::Failed(e) => write!(f, "the episode failed: {e}"),
            MaskReason::NoCalls => f.write_str(
                "no model call was recorded, so nothing says what the policy sampled (a \
                 per-episode policy records its choices in the episode's CallLog)",
            ),
            MaskReason::CallFailed(i) => write!(f, "model call {i} failed or has no response"),
            MaskReason::Dropped { turns, calls } => write!(
                f,
                "a model call was dropped: the trajectory shows {turns} policy turns but only \
                 {calls} recorded calls"
            ),
            MaskReason::MissingTokenIds(i, which) => write!(
                f,
                "model call {i} has no {which} token ids (serve the model with token ids \
                 returned, e.g. vLLM's `return_token_ids`, or record them in the policy); \
                 Nenyax never re-tokenises"
            ),
            MaskReason::LogprobCount(i) => write!(
                f,
                "model call {i} has a different number of log-probabilities than completion \
                 tokens"
            ),
            MaskReason::Discontinuous(i) => write!(
                f,
                "model call {i}'s prompt does not extend call {}'s prompt plus completion \
                 token for token, so the turns cannot be joined into one sequence",
                i - 1
            ),
            MaskReason::MixedCalls => {
                f.write_str("the trajectory mixes action-policy records and chat calls")
            }
        }
    }
}

/// One call's place in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// Index of the call in the trajectory's `model_calls`.
    pub call: usize,
    /// Where the tokens this call was conditioned on begin (0 for joined chat turns).
    pub context_start: usize,
    /// Where its completion (the sampled tokens) begins.
    pub completion_start: usize,
    /// How many tokens it sampled.
    pub completion_len: usize,
}

/// One training sequence: tokens, the loss mask and the sampling log-probabilities.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceRow {
    /// Token ids (prompt and completion; for action calls without a prompt, only the actions).
    pub tokens: Vec<i64>,
    /// 1 where the policy sampled the token (the loss counts it), else 0.
    pub mask: Vec<u8>,
    /// Sampling log-probability of each sampled token (NaN where unknown or not sampled).
    pub sampled_logp: Vec<f64>,
    /// The calls, in order.
    pub segments: Vec<Segment>,
    /// Whether the row is a chain of action calls (each segment conditioned only on itself).
    pub action: bool,
}

impl TraceRow {
    /// Tokens in the row.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the row has no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Sampled tokens in the row.
    pub fn sampled(&self) -> usize {
        self.mask.iter().filter(|&&m| m != 0).count()
    }

    /// Where position `t`'s conditioning context begins.
    pub fn context_start(&self, t: usize) -> usize {
        self.segments
            .iter()
            .rev()
            .find(|s| s.context_start <= t)
            .map_or(0, |s| s.context_start)
    }
}

/// How to turn trajectories into rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Turns {
    /// Join multi-turn chat calls when continuity is proven, else mask the trajectory.
    #[default]
    Join,
    /// Train on each chat call as its own row (its prompt as context), no continuity needed.
    Split,
}

/// A call's prompt tokens, completion tokens and their sampling log-probs.
type CallTokens<'a> = (&'a [i64], &'a [i64], Vec<f64>);

fn call_tokens(i: usize, c: &ModelCall) -> Result<CallTokens<'_>, MaskReason> {
    if c.error.is_some() || c.response.is_none() {
        return Err(MaskReason::CallFailed(i));
    }
    let completion = c
        .completion_token_ids
        .as_deref()
        .ok_or(MaskReason::MissingTokenIds(i, "completion"))?;
    let prompt = match (&c.prompt_token_ids, c.is_action()) {
        (Some(p), _) => p.as_slice(),
        // An action call's prompt is its observation, which it needs no tokens for.
        (None, true) => &[],
        (None, false) => return Err(MaskReason::MissingTokenIds(i, "prompt")),
    };
    let logp = match &c.completion_logprobs {
        Some(l) if l.len() == completion.len() => l.clone(),
        Some(_) => return Err(MaskReason::LogprobCount(i)),
        None => vec![f64::NAN; completion.len()],
    };
    Ok((prompt, completion, logp))
}

/// Policy turns a trajectory shows beyond its first call's prompt: assistant messages of its
/// conversation (chat), or steps (action calls). `None` when it shows none to compare with.
fn shown_turns(traj: &Trajectory, action: bool) -> Option<usize> {
    if action {
        return (!traj.steps.is_empty()).then_some(traj.steps.len());
    }
    if traj.messages.is_empty() {
        return None;
    }
    // Assistant turns inside the prompt the environment set are few-shot examples, not calls.
    let n = traj
        .messages
        .iter()
        .skip(prompt_len(traj).min(traj.messages.len()))
        .filter(|m| m.role == Role::Assistant)
        .count();
    Some(n)
}

/// Messages of the conversation before the policy's first turn: the initial observation's
/// when they begin the conversation, else the first recorded call's prompt (which, were that
/// call a later one because the first was dropped, would hide the dropped turn).
fn prompt_len(traj: &Trajectory) -> usize {
    let conv = &traj.messages;
    let initial = traj
        .initial_observation
        .as_ref()
        .and_then(|o| o.messages.as_ref());
    if let Some(init) = initial {
        let begins = !init.is_empty()
            && init.len() <= conv.len()
            && init
                .iter()
                .zip(conv)
                .all(|(a, b)| a.role == b.role && a.text() == b.text());
        if begins {
            return init.len();
        }
    }
    traj.model_calls
        .first()
        .and_then(|c| c.request.get("messages"))
        .and_then(|m| m.as_array())
        .map_or(0, Vec::len)
}

/// The rows of one trajectory, or why it is masked.
pub fn trace(traj: &Trajectory, turns: Turns) -> Result<Vec<TraceRow>, MaskReason> {
    if let Some(e) = &traj.error {
        return Err(MaskReason::Failed(e.clone()));
    }
    let calls = &traj.model_calls;
    if calls.is_empty() {
        return Err(MaskReason::NoCalls);
    }
    let action = calls[0].is_action();
    if calls.iter().any(|c| c.is_action() != action) {
        return Err(MaskReason::MixedCalls);
    }
    if let Some(shown) = shown_turns(traj, action) {
        if shown > calls.len() {
            return Err(MaskReason::Dropped {
                turns: shown,
                calls: calls.len(),
            });
        }
    }
    let parts = calls
        .iter()
        .enumerate()
        .map(|(i, c)| call_tokens(i, c))
        .collect::<Result<Vec<_>, _>>()?;
    if action {
        let mut row = empty_row(true);
        for (i, (prompt, completion, logp)) in parts.into_iter().enumerate() {
            let start = row.tokens.len();
            push(&mut row, prompt, completion, logp);
            row.segments.push(Segment {
                call: i,
                context_start: start,
                completion_start: start + prompt.len(),
                completion_len: completion.len(),
            });
        }
        return Ok(vec![row]);
    }
    if turns == Turns::Split {
        return Ok(parts
            .into_iter()
            .enumerate()
            .map(|(i, (prompt, completion, logp))| {
                let mut row = empty_row(false);
                push(&mut row, prompt, completion, logp);
                row.segments.push(Segment {
                    call: i,
                    context_start: 0,
                    completion_start: prompt.len(),
                    completion_len: completion.len(),
                });
                row
            })
            .collect());
    }
    // Join: each prompt must start with everything the row holds so far.
    let mut row = empty_row(false);
    for (i, (prompt, completion, logp)) in parts.into_iter().enumerate() {
        if !prompt.starts_with(&row.tokens) {
            return Err(MaskReason::Discontinuous(i));
        }
        let fresh = &prompt[row.tokens.len()..];
        push(&mut row, fresh, completion, logp);
        row.segments.push(Segment {
            call: i,
            context_start: 0,
            completion_start: prompt.len(),
            completion_len: completion.len(),
        });
    }
    Ok(vec![row])
}

fn empty_row(action: bool) -> TraceRow {
    TraceRow {
        tokens: Vec::new(),
        mask: Vec::new(),
        sampled_logp: Vec::new(),
        segments: Vec::new(),
        action,
    }
}

fn push(row: &mut TraceRow, prompt: &[i64], completion: &[i64], logp: Vec<f64>) {
    row.tokens.extend_from_slice(prompt);
    row.mask.extend(std::iter::repeat(0u8).take(prompt.len()));
    row.sampled_logp
        .extend(std::iter::repeat(f64::NAN).take(prompt.len()));
    row.tokens.extend_from_slice(completion);
    row.mask
        .extend(std::iter::repeat(1u8).take(completion.len()));
    row.sampled_logp.extend(logp);
}

/// The rows of a batch as padded `[B][T]` arrays, what trainers and the loss read.
#[derive(Debug, Clone, Default)]
pub struct Padded {
    /// B.
    pub rows: usize,
    /// T (the longest row).
    pub width: usize,
    /// Token ids, 0 in padding.
    pub tokens: Vec<i64>,
    /// Loss mask, 0 in padding.
    pub mask: Vec<u8>,
    /// Sampling log-probs, NaN where unknown, not sampled or padding.
    pub sampled_logp: Vec<f64>,
    /// Where each position's conditioning context begins (within its row).
    pub context_start: Vec<i64>,
    /// Each row's length before padding.
    pub lengths: Vec<i64>,
}

impl Padded {
    /// Pad `rows` to the longest.
    pub fn new(rows: &[&TraceRow]) -> Padded {
        let width = rows.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
        let n = rows.len() * width;
        let mut p = Padded {
            rows: rows.len(),
            width,
            tokens: vec![0; n],
            mask: vec![0; n],
            sampled_logp: vec![f64::NAN; n],
            context_start: vec![0; n],
            lengths: rows.iter().map(|r| r.len() as i64).collect(),
        };
        for (i, r) in rows.iter().enumerate() {
            let base = i * width;
            p.tokens[base..base + r.len()].copy_from_slice(&r.tokens);
            p.mask[base..base + r.len()].copy_from_slice(&r.mask);
            p.sampled_logp[base..base + r.len()].copy_from_slice(&r.sampled_logp);
            for s in &r.segments {
                let end = s.completion_start + s.completion_len;
                for c in &mut p.context_start[base + s.context_start..base + end] {
                    *c = s.context_start as i64;
                }
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Message, Mode, Observation};
    use serde_json::{json, Map, Value};

    fn chat_call(prompt: Vec<i64>, completion: Vec<i64>) -> ModelCall {
        let mut request = Map::new();
        request.insert("messages".into(), json!([{"role": "user", "content": "q"}]));
        let mut response = Map::new();
        response.insert("choices".into(), Value::Array(vec![]));
        ModelCall {
            request,
            response: Some(response),
            error: None,
            latency_s: None,
            started_at: None,
            completion_logprobs: Some(vec![-0.5; completion.len()]),
            prompt_token_ids: Some(prompt),
            completion_token_ids: Some(completion),
        }
    }

    fn traj(calls: Vec<ModelCall>) -> Trajectory {
        let mut t = Trajectory::start("x", Mode::Rollout, None, None);
        t.model_calls = calls;
        t
    }

    #[test]
    fn continuous_turns_join_and_mask_only_what_was_sampled() {
        let t = traj(vec![
            chat_call(vec![1, 2, 3], vec![10, 11]),
            // The tool result (20, 21) follows the first completion.
            chat_call(vec![1, 2, 3, 10, 11, 20, 21], vec![12]),
        ]);
        let rows = trace(&t, Turns::Join).unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.tokens, vec![1, 2, 3, 10, 11, 20, 21, 12]);
        assert_eq!(r.mask, vec![0, 0, 0, 1, 1, 0, 0, 1]);
        assert!(r.sampled_logp[0].is_nan() && r.sampled_logp[3] == -0.5);
        assert_eq!(r.segments[1].completion_start, 7);
    }

    #[test]
    fn broken_continuity_missing_ids_and_failures_are_masked_with_reasons() {
        let t = traj(vec![
            chat_call(vec![1, 2, 3], vec![10, 11]),
            chat_call(vec![1, 2, 3, 99, 20], vec![12]),
        ]);
        assert_eq!(trace(&t, Turns::Join), Err(MaskReason::Discontinuous(1)));
        // Split mode trains each call on its own instead.
        assert_eq!(trace(&t, Turns::Split).unwrap().len(), 2);
        let mut c = chat_call(vec![1], vec![2]);
        c.completion_token_ids = None;
        assert_eq!(
            trace(&traj(vec![c]), Turns::Join),
            Err(MaskReason::MissingTokenIds(0, "completion"))
        );
        let mut c = chat_call(vec![1], vec![2]);
        c.error = Some("boom".into());
        assert_eq!(
            trace(&traj(vec![c]), Turns::Join),
            Err(MaskReason::CallFailed(0))
        );
        assert_eq!(trace(&traj(vec![]), Turns::Join), Err(MaskReason::NoCalls));
        // The conversation shows two assistant turns after the prompt; one call was recorded.
        let mut t = traj(vec![chat_call(vec![1], vec![2])]);
        t.messages = vec![
            Message::user("q"),
            Message::assistant("a"),
            Message::user("tool says"),
            Message::assistant("b"),
        ];
        assert_eq!(
            trace(&t, Turns::Join),
            Err(MaskReason::Dropped { turns: 2, calls: 1 })
        );
    }

    #[test]
    fn a_dropped_first_call_shows_against_the_initial_prompt() {
        // A few-shot answer in the prompt, then two policy turns; only the second was recorded,
        // and its prompt holds the first turn as if it were part of the prompt.
        let conv = vec![
            Message::user("1 + 1?"),
            Message::assistant("2"),
            Message::user("q"),
            Message::assistant("a"),
            Message::new(Role::Tool, "r"),
            Message::assistant("b"),
        ];
        let mut c = chat_call(vec![1, 2, 3, 10, 20], vec![11]);
        let sent: Vec<Value> = conv[..5].iter().map(Message::to_openai).collect();
        c.request.insert("messages".into(), Value::Array(sent));
        let mut t = traj(vec![c]);
        t.messages = conv.clone();
        // From the recorded call alone the dropped turn cannot be told from the prompt.
        assert!(trace(&t, Turns::Join).is_ok());
        t.initial_observation = Some(Observation {
            messages: Some(conv[..3].to_vec()),
            ..Observation::default()
        });
        assert_eq!(
            trace(&t, Turns::Join),
            Err(MaskReason::Dropped { turns: 2, calls: 1 })
        );
        // An initial observation that does not begin the conversation is not trusted.
        t.initial_observation = Some(Observation {
            messages: Some(vec![Message::user("something else")]),
            ..Observation::default()
        });
        assert!(trace(&t, Turns::Join).is_ok());
    }

    #[test]
    fn action_calls_form_one_row_of_independent_segments() {
        let obs = Observation::text("s");
        let mut t = traj(vec![
            ModelCall::action("p", &obs, &json!(1), Some(vec![7, 8]), vec![1], vec![-0.1]),
            ModelCall::action("p", &obs, &json!(0), Some(vec![7, 9]), vec![0], vec![-0.2]),
        ]);
        let r = &trace(&t, Turns::Join).unwrap()[0];
        assert!(r.action);
        assert_eq!(r.tokens, vec![7, 8, 1, 7, 9, 0]);
        assert_eq!(r.mask, vec![0, 0, 1, 0, 0, 1]);
        let p = Padded::new(&[r]);
        assert_eq!(p.context_start, vec![0, 0, 0, 3, 3, 3]);
        // Three steps but two records: one choice went unrecorded.
        t.steps = (0..3)
            .map(|_| crate::contract::Step {
                action: json!(0),
                observation: obs.clone(),
                reward: 0.0,
                terminated: false,
                truncated: false,
                info: Map::new(),
            })
            .collect();
        assert_eq!(
            trace(&t, Turns::Join),
            Err(MaskReason::Dropped { turns: 3, calls: 2 })
        );
    }
}
