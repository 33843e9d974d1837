//! A terminus-style agent around any ChatModel: terminus-2's JSON response schema, parse-error
//! feedback, output capping and double confirmation of `task_complete`, in one of two
//! terminals (see docs/terminal-agent.md):
//!
//! - `tmux` (as Harbor's terminus-2): a real terminal in the sandbox ([`super::tmux`]).
//!   Keystrokes are typed into it, each command's `duration` is waited for (less when the shell
//!   is back and the screen has settled), and the model sees the output that is new since its
//!   last look, or the screen. Interactive programs (a REPL, `less`, a prompt reading the
//!   terminal) work.
//! - `bash`: each response's keystrokes run as one bash script in a shell whose working
//!   directory and exported variables persist between turns (restored from a state file), so
//!   background jobs and interactive programs do not survive a turn; `duration` is not waited
//!   for, the batch runs to completion (bounded by the agent's remaining time).
//!
//! Every model call goes through the recording server, so the trajectory holds each request
//! and response; each turn's step holds the commands and what the terminal showed.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::contract::{Message, Observation, Step, Trajectory};
use crate::error::{Error, Result};
use crate::openai::client::{Client, RetryPolicy};
use crate::policy::ChatModel;
use crate::sandbox::{Exec, Sandbox};

pub use super::tmux::{cap_output, Command, OUTPUT_LIMIT};
use super::tmux::{TerminalMode, Tmux};

const STATE: &str = "/tmp/.nenyax/shell-state";

/// The first prompt: terminus-2's JSON response contract with the task and terminal filled in.
/// `interactive`: the keystrokes go to a real terminal, so key names (C-c) are keys.
pub fn first_prompt(instruction: &str, terminal: &str, interactive: bool) -> String {
    let keys = if interactive {
        "For special keys, send a tmux key name as a command's whole keystrokes: C-c for \
Ctrl+C, C-d for Ctrl+D, Escape, Up, Tab. Interactive programs (a REPL, less, a prompt waiting \
for input) receive what you type. An empty keystrokes string with a duration just waits.\n"
    } else {
        "The keystrokes of one response run together as one non-interactive bash script: \
programs that wait for terminal input get none.\n"
    };
    format!(
        "You are an AI assistant tasked with solving command-line tasks in a Linux environment. \
You will be given a task description and the output from previously executed commands. Your \
goal is to solve the task by providing batches of shell commands.\n\n\
Format your response as JSON with the following structure:\n\n\
{{\n  \"analysis\": \"Analyze the current state based on the terminal output provided. What do you see? What has been accomplished? What still needs to be done?\",\n  \
\"plan\": \"Describe your plan for the next steps. What commands will you run and why?\",\n  \
\"commands\": [\n    {{\n      \"keystrokes\": \"ls -la\\n\",\n      \"duration\": 0.1\n    }}\n  ],\n  \
\"task_complete\": true\n}}\n\n\
Required fields: analysis, plan, commands. Optional: task_complete (default false).\n\
Each command's keystrokes are sent to the terminal verbatim; end a command with \\n to run it. \
duration is the number of seconds to wait for it (default 1.0, at most 60).\n{keys}\n\
Task Description:\n{instruction}\n\nCurrent terminal state:\n{terminal}\n"
    )
}

/// A parsed response.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The model's analysis.
    pub analysis: String,
    /// The model's plan.
    pub plan: String,
    /// Commands to run.
    pub commands: Vec<Command>,
    /// The model says the task is done.
    pub task_complete: bool,
    /// Non-fatal problems, shown to the model with the next observation.
    pub warnings: Vec<String>,
}

/// The first balanced `{...}` in `text`, ignoring braces inside strings.
fn first_object(text: &str) -> Option<(usize, usize)> {
    let start = text.find('{')?;
    let (mut depth, mut in_str, mut esc) = (0i32, false, false);
    for (i, c) in text[start..].char_indices() {
        if in_str {
            match c {
                _ if esc => esc = false,
                '\\' => esc = true,
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some((start, start + i + 1));
                }
            }
            _ => {}
        }
    }
    None
}

/// Parse a reply in terminus-2's JSON schema; `Err` is the message the model gets back.
pub fn parse(reply: &str) -> std::result::Result<Response, String> {
    let (a, b) = first_object(reply).ok_or("No valid JSON found in response")?;
    let mut warnings = Vec::new();
    if !reply[..a].trim().is_empty() {
        warnings.push("Extra text detected before JSON object".to_string());
    }
    if !reply[b..].trim().is_empty() {
        warnings.push("Extra text detected after JSON object".to_string());
    }
    let v: Value = serde_json::from_str(&reply[a..b]).map_err(|e| format!("Invalid JSON: {e}"))?;
    let o = v.as_object().ok_or("Response must be a JSON object")?;
    let missing: Vec<&str> = ["analysis", "plan", "commands"]
        .into_iter()
        .filter(|k| !o.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(format!("Missing required fields: {}", missing.join(", ")));
    }
    let text = |k: &str| match &o[k] {
        Value::String(s) => Ok(s.clone()),
        other => Err(format!("Field '{k}' must be a string, not {other}")),
    };
    let analysis = text("analysis")?;
    let plan = text("plan")?;
    let list = o["commands"]
        .as_array()
        .ok_or("Field 'commands' must be an array")?;
    let mut commands = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let c = c
            .as_object()
            .ok_or_else(|| format!("Command {} must be an object", i + 1))?;
        let keystrokes = c
            .get("keystrokes")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("Command {} missing required 'keystrokes' field", i + 1))?
            .to_string();
        let duration = match c.get("duration") {
            Some(d) => d.as_f64().unwrap_or(1.0),
            None => {
                warnings.push(format!(
                    "Command {}: Missing duration field, using default 1.0",
                    i + 1
                ));
                1.0
            }
        };
        for k in c.keys().filter(|k| *k != "keystrokes" && *k != "duration") {
            warnings.push(format!("Command {}: Unknown field '{k}'", i + 1));
        }
        if i + 1 < list.len() && !keystrokes.ends_with('\n') {
            warnings.push(format!(
                "Command {} should end with newline when followed by another command",
                i + 1
            ));
        }
        commands.push(Command {
            keystrokes,
            duration: duration.clamp(0.0, 60.0),
        });
    }
    let task_complete = match o.get("task_complete") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => matches!(s.to_ascii_lowercase().as_str(), "true" | "1" | "yes"),
        Some(other) => other.as_i64() == Some(1),
    };
    Ok(Response {
        analysis,
        plan,
        commands,
        task_complete,
        warnings,
    })
}

/// Run one batch of keystrokes in the persistent shell; the terminal output.
fn run_batch(sb: &Sandbox, commands: &[Command], left: Duration) -> Result<String> {
    let keys: String = commands.iter().map(|c| c.keystrokes.as_str()).collect();
    if keys.trim().is_empty() {
        return Ok(String::new());
    }
    let script = format!(
        "[ -f {STATE} ] && . {STATE} 2>/dev/null\n{keys}\n__nx_rc=$?\n{{ echo \"cd '$(pwd)'\"; export -p; }} > {STATE} 2>/dev/null\nexit $__nx_rc\n"
    );
    let r = sb.exec(
        &Exec::argv(["/bin/bash", "-s"])
            .stdin(script)
            .timeout(left.min(Duration::from_secs(180))),
    )?;
    let mut out = format!("{}{}", r.stdout, r.stderr);
    if r.killed.is_some() {
        out.push_str(&format!(
            "\n[nenyax: the commands were {}]\n",
            crate::sandbox::Killed::describe(r.killed)
        ));
    }
    Ok(out)
}

/// Ask the model through the recording server (so every call is recorded).
fn ask(
    client: &Client,
    model: &dyn ChatModel,
    base_url: &str,
    messages: &[Message],
) -> Result<String> {
    let body = json!({"model": model.name(), "messages": messages});
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    let resp = client
        .post_for_object(&url, &body)
        .map_err(|m| Error::Policy(format!("terminus: the model call failed: {m}")))?;
    Ok(Value::Object(resp)["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// The terminal an agent types into.
enum Term<'t, 's> {
    Bash,
    Tmux(&'t mut Tmux<'s>),
}

/// Run the agent on one instruction until it confirms completion twice, runs out of turns, or
/// runs out of time. Turns are appended to `traj` (messages and one step per model turn with
/// its commands and what the terminal showed); `traj.metadata` says which terminal ran
/// (`terminal`) and, when `auto` could not use tmux, why (`terminal_fallback`). Returns the
/// last terminal output.
#[allow(clippy::too_many_arguments)]
pub fn run(
    sb: &Sandbox,
    model: &dyn ChatModel,
    base_url: &str,
    instruction: &str,
    timeout: Duration,
    max_turns: usize,
    mode: TerminalMode,
    traj: &mut Trajectory,
) -> Result<String> {
    let t0 = Instant::now();
    let fallback = match mode {
        TerminalMode::Bash => {
            return bash_run(sb, model, base_url, instruction, timeout, max_turns, traj)
        }
        TerminalMode::Tmux => {
            Tmux::available(sb).map_err(|why| {
                Error::Environment(format!(
                    "terminal=tmux was asked for, but {why}; or run with terminal=bash"
                ))
            })?;
            None
        }
        TerminalMode::Auto => Tmux::available(sb).err(),
    };
    if let Some(why) = fallback {
        traj.metadata.insert("terminal_fallback".into(), json!(why));
        return bash_run(sb, model, base_url, instruction, timeout, max_turns, traj);
    }
    // The hosting exec (jail, process) outlives nothing: the scope ends with the agent.
    let hosting_deadline = timeout + Duration::from_secs(60);
    std::thread::scope(|scope| {
        let mut term = match Tmux::open(scope, sb, hosting_deadline) {
            Ok(t) => t,
            Err(e) if mode == TerminalMode::Auto => {
                traj.metadata.insert(
                    "terminal_fallback".into(),
                    json!(format!(
                        "tmux is installed but its session did not start: {e}"
                    )),
                );
                let left = timeout.saturating_sub(t0.elapsed());
                return bash_run(sb, model, base_url, instruction, left, max_turns, traj);
            }
            Err(e) => return Err(e),
        };
        traj.metadata.insert("terminal".into(), json!("tmux"));
        let first = term.first_look()?;
        let out = agent_loop(
            Term::Tmux(&mut term),
            sb,
            model,
            base_url,
            first_prompt(instruction, &first.text, true),
            timeout.saturating_sub(t0.elapsed()),
            max_turns,
            traj,
        );
        let closed = term.close();
        let out = out?;
        closed?;
        Ok(out)
    })
}

fn bash_run(
    sb: &Sandbox,
    model: &dyn ChatModel,
    base_url: &str,
    instruction: &str,
    timeout: Duration,
    max_turns: usize,
    traj: &mut Trajectory,
) -> Result<String> {
    traj.metadata.insert("terminal".into(), json!("bash"));
    agent_loop(
        Term::Bash,
        sb,
        model,
        base_url,
        first_prompt(instruction, "", false),
        timeout,
        max_turns,
        traj,
    )
}

/// The turns: ask, parse (errors go back to the model), type, look, confirm twice.
#[allow(clippy::too_many_arguments)]
fn agent_loop(
    mut term: Term,
    sb: &Sandbox,
    model: &dyn ChatModel,
    base_url: &str,
    prompt: String,
    timeout: Duration,
    max_turns: usize,
    traj: &mut Trajectory,
) -> Result<String> {
    let t0 = Instant::now();
    let client = Client::new(RetryPolicy::through_recorder());
    let mut messages = vec![Message::user(prompt)];
    let mut pending = false;
    let mut last = String::new();
    for turn in 0..max_turns {
        let left = timeout.saturating_sub(t0.elapsed());
        if left.is_zero() {
            break;
        }
        let reply = ask(&client, model, base_url, &messages)?;
        messages.push(Message::assistant(reply.clone()));
        let mut info = serde_json::Map::new();
        let (next, action, out, done) = match parse(&reply) {
            Err(e) => {
                pending = false;
                (
                    format!(
                        "Previous response had parsing errors:\nERROR: {e}\n\nPlease fix these issues and provide a proper JSON response."
                    ),
                    json!({"turn": turn, "parse_error": e}),
                    String::new(),
                    false,
                )
            }
            Ok(r) => {
                let left = timeout.saturating_sub(t0.elapsed());
                // What the step records, and what the model is told after a plain turn.
                let (out, shown) = match &mut term {
                    Term::Bash => {
                        let out = cap_output(&run_batch(sb, &r.commands, left)?, OUTPUT_LIMIT);
                        let shown = format!("New Terminal Output:\n{out}");
                        (out, shown)
                    }
                    Term::Tmux(t) => match t.run_batch(&r.commands, left) {
                        Ok(look) => {
                            info.insert("screen".into(), json!(look.screen));
                            (look.text.clone(), look.text)
                        }
                        // terminus-2 stops when its session dies; the tests still judge.
                        Err(Error::Environment(why)) => {
                            let msg = format!("ERROR: {why}. Cannot continue execution.");
                            info.insert("terminal_died".into(), json!(why));
                            messages.push(Message::user(msg.clone()));
                            traj.steps.push(Step {
                                action: json!({"turn": turn, "analysis": r.analysis, "plan": r.plan, "commands": commands_json(&r.commands), "task_complete": r.task_complete}),
                                observation: Observation::text(msg.clone()),
                                reward: 0.0,
                                terminated: false,
                                truncated: false,
                                info,
                            });
                            traj.messages.extend(messages);
                            return Ok(msg);
                        }
                        Err(e) => return Err(e),
                    },
                };
                let warn = if r.warnings.is_empty() {
                    String::new()
                } else {
                    format!(
                        "Previous response had warnings:\nWARNINGS: - {}\n\n",
                        r.warnings.join("\n- ")
                    )
                };
                let action = json!({"turn": turn, "analysis": r.analysis, "plan": r.plan, "commands": commands_json(&r.commands), "task_complete": r.task_complete});
                if r.task_complete && pending {
                    (String::new(), action, out, true)
                } else if r.task_complete {
                    pending = true;
                    (
                        format!(
                            "{warn}Current terminal state:\n{out}\n\nAre you sure you want to mark the task as complete? This will trigger your solution to be graded and you won't be able to make any further corrections. If so, include \"task_complete\": true in your JSON response again."
                        ),
                        action,
                        out,
                        false,
                    )
                } else {
                    pending = false;
                    (format!("{warn}{shown}"), action, out, false)
                }
            }
        };
        traj.steps.push(Step {
            action,
            observation: Observation::text(out.clone()),
            reward: 0.0,
            terminated: false,
            truncated: false,
            info,
        });
        last = out;
        if done {
            break;
        }
        messages.push(Message::user(next));
    }
    traj.messages.extend(messages);
    Ok(last)
}

fn commands_json(commands: &[Command]) -> Vec<Value> {
    commands
        .iter()
        .map(|c| json!({"keystrokes": c.keystrokes, "duration": c.duration}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_schema_and_takes_the_first_balanced_object() {
        let r = parse(
            "Sure! {\"analysis\": \"a {brace}\", \"plan\": \"p\", \"commands\": [{\"keystrokes\": \"ls\\n\", \"duration\": 120}], \"task_complete\": \"yes\"} trailing",
        )
        .unwrap();
        assert_eq!(r.analysis, "a {brace}");
        assert_eq!(r.commands[0].keystrokes, "ls\n");
        assert_eq!(r.commands[0].duration, 60.0, "duration is capped at 60 s");
        assert!(r.task_complete);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            parse("no json").unwrap_err(),
            "No valid JSON found in response"
        );
        assert_eq!(
            parse("{\"analysis\": \"a\"}").unwrap_err(),
            "Missing required fields: plan, commands"
        );
        assert_eq!(
            parse("{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": {}}").unwrap_err(),
            "Field 'commands' must be an array"
        );
        assert_eq!(
            parse("{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [{\"duration\": 1}]}")
                .unwrap_err(),
            "Command 1 missing required 'keystrokes' field"
        );
        let r = parse("{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [{\"keystrokes\": \"a\"}, {\"keystrokes\": \"b\\n\"}]}").unwrap();
        assert!(!r.task_complete);
        assert!(r
            .warnings
            .iter()
            .any(|w| w.contains("should end with newline")));
        assert!(r.warnings.iter().any(|w| w.contains("Missing duration")));
    }

    #[test]
    fn malformed_replies_are_errors_for_the_model_not_panics() {
        // Each of these goes back to the model as "Previous response had parsing errors".
        for (reply, says) in [
            ("{\"analysis\": \"a\", \"plan\": ", "No valid JSON found"),
            ("[1, 2]", "No valid JSON found"),
            (
                "{\"analysis\": 1, \"plan\": \"p\", \"commands\": []}",
                "Field 'analysis' must be a string",
            ),
            (
                "{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [\"ls\"]}",
                "Command 1 must be an object",
            ),
            (
                "{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [{\"keystrokes\": 5}]}",
                "Command 1 missing required 'keystrokes'",
            ),
            (
                "{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [], }",
                "Invalid JSON",
            ),
            ("\u{0}{\u{ffff}", "No valid JSON found"),
        ] {
            let e = parse(reply).unwrap_err();
            assert!(e.contains(says), "{reply:?}: {e}");
        }
    }

    #[test]
    fn task_complete_and_durations_take_terminus_2s_spellings() {
        let r = |tc: &str| {
            parse(&format!(
                "{{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [{{\"keystrokes\": \"C-c\", \"duration\": -3}}], \"task_complete\": {tc}}}"
            ))
            .unwrap()
        };
        assert!(r("true").task_complete && r("\"True\"").task_complete && r("1").task_complete);
        assert!(
            !r("false").task_complete && !r("null").task_complete && !r("\"no\"").task_complete
        );
        assert_eq!(
            r("true").commands[0].duration,
            0.0,
            "negative waits are no wait"
        );
        assert_eq!(r("true").commands[0].keystrokes, "C-c");
    }

    #[test]
    fn the_first_prompt_says_which_terminal_it_is() {
        let tmux = first_prompt("do it", "Current Terminal Screen:\n$", true);
        assert!(tmux.contains("C-c for Ctrl+C") && tmux.contains("Task Description:\ndo it"));
        assert!(tmux.ends_with("Current terminal state:\nCurrent Terminal Screen:\n$\n"));
        let bash = first_prompt("do it", "", false);
        assert!(bash.contains("non-interactive") && !bash.contains("C-c for Ctrl+C"));
    }

    #[test]
    fn output_is_capped_at_both_ends() {
        let s = "a".repeat(6000) + &"b".repeat(6000);
        let c = cap_output(&s, OUTPUT_LIMIT);
        assert!(c.starts_with(&"a".repeat(5000)) && c.ends_with(&"b".repeat(5000)));
        assert!(c.contains("[... output limited to 10000 bytes; 2000 interior bytes omitted ...]"));
        assert_eq!(cap_output("short", OUTPUT_LIMIT), "short");
    }
}
