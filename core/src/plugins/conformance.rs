//! Conformance of a plugin of a kind other than driver (drivers have `nenyax check`): a fixed
//! toy set whose right verdicts are known, so that a plugin that scores everything alike, is
//! not deterministic, or breaks under the concurrency the runner uses fails with a named check.

use serde::Serialize;
use serde_json::json;
use std::sync::Arc;

use super::kinds::Kind;
use crate::contract::{Mode, Observation, Step, TaskRef, Trajectory};
use crate::error::{Error, Result};
use crate::judges::Judge;

/// One check of a conformance run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// Its stable name.
    pub name: &'static str,
    /// Whether the plugin met it.
    pub passed: bool,
    /// What was seen (figures on success, the first counterexample on failure).
    pub detail: String,
}

/// A plugin's conformance report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The kind checked.
    pub kind: Kind,
    /// The plugin's name.
    pub name: String,
    /// Every check, in order.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The report as a human reads it, one line per check.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} {}  →  {}\n",
            self.kind,
            self.name,
            if self.passed() { "CONFORMS" } else { "FAILS" }
        );
        for c in &self.checks {
            let mark = if c.passed { '✔' } else { '✘' };
            out.push_str(&format!("  {mark} {:<22} {}\n", c.name, c.detail));
        }
        out
    }

    /// `Err` naming every failed check; for a plugin's own test suite.
    pub fn into_result(self) -> Result<Report> {
        if self.passed() {
            return Ok(self);
        }
        Err(Error::Config(format!(
            "{} plugin `{}` does not conform:\n{}",
            self.kind,
            self.name,
            self.render()
        )))
    }
}

/// The toy set: (expected answer, a wrong answer), each given as the final action in an
/// `<answer>` tag, the convention the answer-matching judges extract by default.
const TOY: &[(&str, &str)] = &[
    ("42", "41"),
    ("Paris", "Lyon"),
    ("blue whale", "elephant"),
    ("7", "seven hundred"),
    ("-3.5", "3.5"),
    ("x^2", "y^2"),
];

/// A finished one-step episode whose task expects `answer` and whose last action is `reply`.
pub fn toy_trajectory(index: usize, reply: &str, answer: &str) -> Trajectory {
    let reply = if reply.is_empty() {
        String::new()
    } else {
        format!("<answer>{reply}</answer>")
    };
    let mut task = TaskRef::new(index.to_string());
    task.metadata.insert("answer".into(), json!(answer));
    task.metadata
        .insert("question".into(), json!(format!("toy question {index}")));
    let mut t = Trajectory::start(
        "plugin-check:toy",
        Mode::Step,
        Some(task),
        Some(index as i64),
    );
    t.steps.push(Step {
        action: json!(reply),
        observation: Observation::default(),
        reward: 0.0,
        terminated: true,
        truncated: false,
        info: Default::default(),
    });
    t
}

/// Check a judge against the toy set: it discriminates right from wrong and empty answers on
/// every task, gives finite scores, is deterministic, answers the same from several threads at
/// once (the runner judges on its rollout threads), and fails cleanly on an episode with no task.
pub fn check_judge(name: &str, judge: Arc<dyn Judge>) -> Report {
    let mut checks = Vec::new();
    let score =
        |t: &Trajectory| -> Result<f64> { crate::env::guard(|| judge.judge(t)).map(|j| j.score) };
    let mut verdicts: Vec<(f64, f64, f64)> = Vec::new();
    let mut first_error: Option<String> = None;
    for (i, (answer, wrong)) in TOY.iter().enumerate() {
        let got = (
            score(&toy_trajectory(i, answer, answer)),
            score(&toy_trajectory(i, wrong, answer)),
            score(&toy_trajectory(i, "", answer)),
        );
        match got {
            (Ok(r), Ok(w), Ok(e)) => verdicts.push((r, w, e)),
            (a, b, c) => {
                let e = [a, b, c]
                    .into_iter()
                    .find_map(|r| r.err())
                    .expect("one failed");
                first_error.get_or_insert_with(|| format!("task {i}: {}: {e}", e.kind()));
            }
        }
    }
    checks.push(Check {
        name: "judges_the_toy_set",
        passed: first_error.is_none(),
        detail: first_error.clone().unwrap_or_else(|| {
            format!(
                "{} verdicts on {} tasks, all finite",
                verdicts.len() * 3,
                TOY.len()
            )
        }),
    });
    let miss = verdicts
        .iter()
        .enumerate()
        .find(|(_, (r, w, e))| !(r > w && r > e));
    checks.push(Check {
        name: "discriminates",
        passed: first_error.is_none() && miss.is_none(),
        detail: match (miss, &first_error) {
            (_, Some(_)) => "not judged: the toy set failed".into(),
            (Some((i, (r, w, e))), None) => format!(
                "task {i} (answer `{}`): right {r} is not above wrong {w} and empty {e}",
                TOY[i].0
            ),
            (None, None) => {
                let mean = |f: fn(&(f64, f64, f64)) -> f64| {
                    verdicts.iter().map(f).sum::<f64>() / verdicts.len() as f64
                };
                format!(
                    "mean right {:.3} > wrong {:.3}, empty {:.3} on every task",
                    mean(|v| v.0),
                    mean(|v| v.1),
                    mean(|v| v.2)
                )
            }
        },
    });
    let repeat: Vec<(usize, f64, f64)> = TOY
        .iter()
        .enumerate()
        .filter_map(|(i, (answer, _))| {
            let t = toy_trajectory(i, answer, answer);
            match (score(&t), score(&t)) {
                (Ok(a), Ok(b)) if a.to_bits() != b.to_bits() => Some((i, a, b)),
                _ => None,
            }
        })
        .collect();
    checks.push(Check {
        name: "deterministic",
        passed: repeat.is_empty(),
        detail: match repeat.first() {
            Some((i, a, b)) => format!("task {i} judged twice: {a} then {b}"),
            None => "every toy episode judged twice alike".into(),
        },
    });
    let serial: Vec<Option<u64>> = TOY
        .iter()
        .enumerate()
        .map(|(i, (a, _))| score(&toy_trajectory(i, a, a)).ok().map(f64::to_bits))
        .collect();
    let threads = 4;
    let parallel: Vec<Vec<Option<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    TOY.iter()
                        .enumerate()
                        .map(|(i, (a, _))| score(&toy_trajectory(i, a, a)).ok().map(f64::to_bits))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let same = parallel.iter().all(|p| *p == serial);
    checks.push(Check {
        name: "thread_safe",
        passed: same,
        detail: if same {
            format!("{threads} threads at once agreed with the serial verdicts")
        } else {
            format!("{threads} threads at once disagreed with the serial verdicts")
        },
    });
    let mut no_task = toy_trajectory(0, "42", "42");
    no_task.task = None;
    let detail = match crate::env::guard(|| judge.judge(&no_task)) {
        Ok(j) => format!("judged without a task: score {}", j.score),
        Err(e) if e.to_string().contains("panicked") => format!("panicked: {e}"),
        Err(e) => format!("refused with {}: {}", e.kind(), clip(&e.to_string())),
    };
    checks.push(Check {
        name: "no_task_is_clean",
        passed: !detail.starts_with("panicked"),
        detail,
    });
    Report {
        kind: Kind::Judge,
        name: name.to_string(),
        checks,
    }
}

fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Check the plugin `name` of `kind` (`nenyax plugin-check`, `nenyax_plugin_check`). `Err` when
/// it cannot be checked at all (an unknown name, a kind checked elsewhere); a plugin that does
/// not conform is an `Ok` report whose checks say why.
pub fn check(kind: Kind, name: &str) -> Result<Report> {
    match kind {
        Kind::Judge => Ok(check_judge(name, judge_by_name(name)?)),
        Kind::Provider => Ok(check_provider(name)),
        Kind::Learner => check_learner_on(name, LEARNER_CHECK_ENV),
        Kind::Telemetry => Ok(check_telemetry(name, sink_by_name(name)?.as_mut())),
        Kind::Hub => Ok(check_hub(name, &*crate::plugins::library::find_hub(name)?)),
        Kind::Driver => Err(Error::Config(format!(
            "drivers are checked on an environment: `nenyax check {name}:TARGET --require audited`"
        ))),
        Kind::Sandbox => check_sandbox(name),
    }
}

/// Check a sandbox backend (a plugin or a built-in one) by name: `nenyax sandbox-check NAME`'s
/// promises as checks, after its `ready` (one failing check when it cannot run here).
pub fn check_sandbox(name: &str) -> Result<Report> {
    let kind = crate::sandbox::BackendKind::parse(name)?;
    let checks = match kind.ready() {
        Err(why) => vec![Check {
            name: "ready",
            passed: false,
            detail: why,
        }],
        Ok(()) => crate::sandbox::check::run_promises(kind)
            .into_iter()
            .map(|(name, passed, detail)| Check {
                name,
                passed,
                detail,
            })
            .collect(),
    };
    Ok(Report {
        kind: Kind::Sandbox,
        name: name.to_string(),
        checks,
    })
}

/// Check a model provider (built in or from the plugins config): it resolves by name, its base
/// URL and key variable are well formed, and an OpenAI-compatible chat completion round-trips
/// through Nenyax's client against a local stub standing in at the provider's base path (the
/// request's path, bearer key, model and messages checked by the stub). It never calls the real
/// service and never sends the real key.
pub fn check_provider(name: &str) -> Report {
    let mut checks = Vec::new();
    let report = |checks: Vec<Check>| Report {
        kind: Kind::Provider,
        name: name.to_string(),
        checks,
    };
    let p = match crate::providers::provider(name) {
        Ok(p) => p,
        Err(e) => {
            checks.push(Check {
                name: "resolves",
                passed: false,
                detail: e.to_string(),
            });
            return report(checks);
        }
    };
    let base = p.base_url;
    let rest = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"));
    let path = rest
        .map(|r| r.find('/').map_or("", |i| &r[i..]).trim_end_matches('/'))
        .unwrap_or_default();
    let key_ok = !p.key_var.is_empty()
        && p.key_var
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    // The API's paths are appended to the base URL, so a query or fragment would swallow them.
    let plain = !base.contains('?') && !base.contains('#');
    checks.push(Check {
        name: "resolves",
        passed: rest.is_some_and(|r| !r.is_empty()) && key_ok && plain,
        detail: if plain {
            format!("{} at {base}, key in {}", p.title, p.key_var)
        } else {
            format!("base URL {base} has a query or fragment, which the API's paths cannot follow")
        },
    });
    let detail = stub_round_trip(path);
    checks.push(Check {
        name: "round_trip",
        passed: detail.is_ok(),
        detail: detail.unwrap_or_else(|e| e),
    });
    report(checks)
}

/// One chat completion through [`crate::policy::Endpoint`] to a one-shot local server that checks
/// what it receives at `path`.
fn stub_round_trip(path: &str) -> std::result::Result<String, String> {
    use crate::policy::{ChatModel, Endpoint};
    use std::io::{Read, Write};
    const KEY: &str = "nenyax-check-key";
    const MODEL: &str = "nenyax-check-model";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let want_path = format!("{path}/chat/completions");
    let server = std::thread::spawn(move || -> std::result::Result<(), String> {
        let (mut conn, _) = listener.accept().map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = conn.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the client closed the connection early".into());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        };
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let n = conn.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body: serde_json::Value =
            serde_json::from_slice(&buf[head_end..]).map_err(|e| format!("body: {e}"))?;
        let request_line = head.lines().next().unwrap_or_default().to_string();
        let mut wrong = Vec::new();
        if request_line != format!("POST {want_path} HTTP/1.1") {
            wrong.push(format!(
                "request `{request_line}`, expected POST {want_path}"
            ));
        }
        if header("authorization").as_deref() != Some(&format!("Bearer {KEY}")) {
            wrong.push("no bearer key".to_string());
        }
        if body["model"] != MODEL || body["messages"][0]["content"] != "ping" {
            wrong.push(format!("body {body}"));
        }
        let reply = json!({
            "id": "chatcmpl-check", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "pong"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        })
        .to_string();
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{reply}",
            reply.len()
        );
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        }
    });
    let endpoint = Endpoint::new(format!("http://127.0.0.1:{port}{path}"), MODEL)
        .api_key(KEY)
        .retry_policy(crate::openai::RetryPolicy::once(
            std::time::Duration::from_secs(10),
        ));
    let reply = endpoint.complete(&[crate::contract::Message::new(
        crate::contract::Role::User,
        "ping",
    )]);
    let seen = server
        .join()
        .unwrap_or_else(|_| Err("the stub panicked".into()));
    match (reply, seen) {
        (Ok(m), Ok(())) if m.text().as_deref() == Some("pong") => Ok(format!(
            "POST {path}/chat/completions with the bearer key, model and messages; reply read"
        )),
        (Ok(m), Ok(())) => Err(format!("the reply came back as {:?}", m.text())),
        (_, Err(e)) => Err(format!("the stub saw a wrong request: {e}")),
        (Err(e), Ok(())) => Err(format!("the client failed: {e}")),
    }
}

/// Check the learner `name` (built in or a plugin) on the golden batch of the environment `uri`.
pub fn check_learner_on(name: &str, uri: &str) -> Result<Report> {
    let env = crate::router::load(uri)?;
    let mut learner = learner_by_name(name, &env)?;
    Ok(check_learner(name, learner.as_mut(), &env))
}

/// A judge by name, as `nenyax plugin-check judge NAME` finds it: a built-in judge type, or a
/// plugin (a judge spec `{"type": "plugin", "use": NAME}`), so built-ins and plugins are held
/// to the same checks.
pub fn judge_by_name(name: &str) -> Result<Arc<dyn Judge>> {
    let builtin = crate::judges::judge_from_json(&json!({ "type": name }).to_string());
    match builtin {
        Ok(j) => Ok(j),
        Err(builtin_err) => {
            let plugin = json!({ "type": "plugin", "use": name }).to_string();
            crate::judges::judge_from_json(&plugin).map_err(|e| {
                Error::Config(format!(
                    "no judge `{name}`: not a built-in judge type ({builtin_err}), and as a \
                     plugin: {e}"
                ))
            })
        }
    }
}

/// The environment a learner is checked on when none is named: its observations are small
/// objects (`{low, high, guesses_left}`) and its actions whole numbers, so a tabular learner
/// and the built-in softmax policy both play it.
pub const LEARNER_CHECK_ENV: &str = "builtin:guess?high=8&max_guesses=3";

/// Groups of the golden batch, members per group, and the run seed of its sampling.
const LEARNER_GROUPS: usize = 4;
const LEARNER_MEMBERS: usize = 4;
const LEARNER_SEED: i64 = 7;

/// Play the golden batch's episodes with the learner's current policy: `LEARNER_GROUPS` tasks
/// (or seeds) of `env`, `LEARNER_MEMBERS` members each, with fixed episode contexts, judged.
fn golden_groups(
    learner: &mut dyn crate::train::Learner,
    env: &Arc<dyn crate::env::Environment>,
    round: u32,
) -> Result<Vec<crate::train::Group>> {
    use crate::policy::{EpisodeContext, Phase};
    use crate::runner::{Job, Runner};
    let tasks = env.tasks(Some(LEARNER_GROUPS)).unwrap_or_default();
    let policy = crate::env::guard(|| learner.policy())?;
    let mut jobs = Vec::new();
    for g in 0..LEARNER_GROUPS {
        let task = tasks.get(g).cloned().map(Arc::new);
        let seed = Some(g as i64);
        for m in 0..LEARNER_MEMBERS {
            let ctx = EpisodeContext::new(
                LEARNER_SEED,
                Phase::Train,
                round,
                g as u32,
                m as u32,
                task.as_ref().map(|t| t.id.clone()),
                seed,
            );
            jobs.push(Job {
                task: task.clone(),
                seed,
                context: Some(ctx),
            });
        }
    }
    let mut trajs: Vec<(usize, Trajectory)> = Vec::new();
    Runner::new(1)?.run(env, &policy, jobs, None, |i, t| {
        trajs.push((i, t));
        Ok(())
    })?;
    trajs.sort_by_key(|(i, _)| *i);
    if let Some((_, t)) = trajs.iter().find(|(_, t)| !t.ok()) {
        return Err(Error::Policy(format!(
            "an episode failed: {}",
            t.error.clone().unwrap_or_default()
        )));
    }
    let mut groups = Vec::new();
    for g in 0..LEARNER_GROUPS {
        let members: Vec<Trajectory> = trajs
            .iter()
            .skip(g * LEARNER_MEMBERS)
            .take(LEARNER_MEMBERS)
            .map(|(_, t)| t.clone())
            .collect();
        groups.push(crate::train::Group {
            index: g,
            task: members.first().and_then(|t| t.task.clone()),
            seed: Some(g as i64),
            trajectories: members,
        });
    }
    Ok(groups)
}

/// The policy's actions on the golden observations (each task's first observation, under
/// fixed episode contexts), to compare a policy before and after a snapshot's restore.
fn golden_actions(
    learner: &mut dyn crate::train::Learner,
    env: &Arc<dyn crate::env::Environment>,
) -> Result<Vec<serde_json::Value>> {
    use crate::policy::{CallLog, EpisodeContext, Phase, Policy};
    let tasks = env.tasks(Some(LEARNER_GROUPS)).unwrap_or_default();
    let policy = crate::env::guard(|| learner.policy())?;
    let mut out = Vec::new();
    for g in 0..LEARNER_GROUPS {
        let task = tasks.get(g);
        let episode = env.open(task, Some(g as i64))?;
        let obs = episode.observation().clone();
        for m in 0..LEARNER_MEMBERS {
            let ctx = EpisodeContext::new(
                LEARNER_SEED,
                Phase::Eval,
                0,
                g as u32,
                m as u32,
                task.map(|t| t.id.clone()),
                Some(g as i64),
            );
            match policy.for_episode(&ctx, &CallLog::default())? {
                Policy::Action(f) => out.push(crate::env::guard(|| f(&obs))?),
                Policy::Chat(model) => {
                    let q = obs.text.clone().unwrap_or_else(|| obs.data.to_string());
                    let reply =
                        crate::env::guard(|| model.complete(&[crate::contract::Message::user(q)]))?;
                    out.push(json!(reply.content));
                }
                other => {
                    return Err(Error::Policy(format!(
                        "the learner's policy is a {}; a learner gives an action policy or a \
                         chat model",
                        other.kind()
                    )))
                }
            }
        }
    }
    Ok(out)
}

/// Check a learner on `env` (default [`LEARNER_CHECK_ENV`]) with a golden batch of fixed,
/// judged groups played by its own policy: its policy acts validly before and after an
/// update, the update returns finite metrics, a snapshot (if offered) restores the policy to
/// act exactly as before on fixed observations and sampling seeds, and a malformed group is
/// refused cleanly (an error, or finite metrics, and no panic) without breaking the policy.
pub fn check_learner(
    name: &str,
    learner: &mut dyn crate::train::Learner,
    env: &Arc<dyn crate::env::Environment>,
) -> Report {
    let mut checks = Vec::new();
    fn push(
        checks: &mut Vec<Check>,
        name: &'static str,
        r: std::result::Result<String, String>,
    ) -> bool {
        let passed = r.is_ok();
        checks.push(Check {
            name,
            passed,
            detail: r.unwrap_or_else(|e| e),
        });
        passed
    }
    let finite = |u: &crate::train::UpdateReport| -> std::result::Result<String, String> {
        match u.metrics.iter().find(|(_, v)| !v.is_finite()) {
            Some((k, v)) => Err(format!("metric `{k}` is {v}")),
            None => Ok(format!(
                "{} metrics, all finite{}",
                u.metrics.len(),
                if u.skipped { " (skipped)" } else { "" }
            )),
        }
    };
    let summary = |g: &[crate::train::Group]| {
        let scores: Vec<f64> = g
            .iter()
            .flat_map(|g| g.trajectories.iter().filter_map(Trajectory::score))
            .collect();
        let mean = scores.iter().sum::<f64>() / scores.len().max(1) as f64;
        format!(
            "{} groups x {} episodes played, mean score {mean:.3}",
            g.len(),
            LEARNER_MEMBERS
        )
    };
    let before = golden_groups(learner, env, 1);
    let acted = push(
        &mut checks,
        "acts_before_update",
        before
            .as_ref()
            .map(|g| summary(g))
            .map_err(|e| e.to_string()),
    );
    if !acted {
        return Report {
            kind: Kind::Learner,
            name: name.to_string(),
            checks,
        };
    }
    let groups = before.unwrap_or_default();
    let updated = crate::env::guard(|| learner.update(&groups));
    push(
        &mut checks,
        "update_finite",
        updated.as_ref().map_err(|e| e.to_string()).and_then(finite),
    );
    push(
        &mut checks,
        "acts_after_update",
        golden_groups(learner, env, 2)
            .map(|g| summary(&g))
            .map_err(|e| e.to_string()),
    );
    let snap = crate::env::guard(|| learner.snapshot());
    let restored = match snap {
        Err(e) => Err(format!("snapshot failed: {e}")),
        Ok(false) => Ok("not offered (updates cannot be reverted)".to_string()),
        Ok(true) => (|| -> std::result::Result<String, String> {
            let s = |e: Error| e.to_string();
            let want = golden_actions(learner, env).map_err(s)?;
            let more = golden_groups(learner, env, 3).map_err(s)?;
            crate::env::guard(|| learner.update(&more)).map_err(s)?;
            let moved = golden_actions(learner, env).map_err(s)?;
            crate::env::guard(|| learner.restore()).map_err(s)?;
            let got = golden_actions(learner, env).map_err(s)?;
            if let Some(i) = (0..want.len()).find(|i| want[*i] != got[*i]) {
                return Err(format!(
                    "after restore, golden observation {i} gets {} where the snapshot's policy \
                     chose {}",
                    got[i], want[i]
                ));
            }
            let changed = (0..want.len()).filter(|i| want[*i] != moved[*i]).count();
            Ok(format!(
                "{} golden actions as before after restore ({changed} had changed by the update)",
                want.len()
            ))
        })(),
    };
    push(&mut checks, "snapshot_restores", restored);
    // A malformed group: an episode whose steps do not come from this environment.
    let mut bad = toy_trajectory(0, "not an action of this environment", "42");
    bad.steps[0].action = json!({"malformed": [1, 2]});
    bad.steps[0].observation.data = json!("not an observation");
    bad.initial_observation = Some(Observation::default());
    bad.judgment =
        crate::contract::Judgment::new(1.0, crate::contract::JudgeSource::Env, "check").ok();
    let malformed = vec![crate::train::Group {
        index: 0,
        task: None,
        seed: None,
        trajectories: vec![bad.clone(), bad],
    }];
    let refused = match crate::env::guard(|| learner.update(&malformed)) {
        Err(e) => Ok(format!("refused: {}", clip_detail(&e.to_string()))),
        Ok(u) => finite(&u).map(|d| format!("accepted with {d}")),
    }
    .and_then(|d| {
        golden_groups(learner, env, 4)
            .map(|_| format!("{d}; the policy still acts"))
            .map_err(|e| format!("{d}; but then the policy fails: {e}"))
    });
    push(&mut checks, "malformed_group", refused);
    Report {
        kind: Kind::Learner,
        name: name.to_string(),
        checks,
    }
}

/// The first 160 characters of a message, for a check's detail.
fn clip_detail(s: &str) -> String {
    let mut out: String = s.chars().take(160).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out
}

/// A learner by name for `nenyax plugin-check learner NAME`: a built-in one (over the built-in
/// softmax policy, sized from `env`) or a learner plugin.
pub fn learner_by_name(
    name: &str,
    env: &Arc<dyn crate::env::Environment>,
) -> Result<Box<dyn crate::train::Learner>> {
    crate::train::learner(
        &json!(name),
        crate::train::LearnerParts {
            env: Some(env.clone()),
            ..Default::default()
        },
    )
}

/// Hold a telemetry sink to what the exporter does with every sink: a run started, several
/// judged episodes, metrics, an artifact, flushes called again and again, and a finish; then a
/// second run in the same process (a host may run many). Every call must return without error.
pub fn check_telemetry(name: &str, sink: &mut dyn crate::telemetry::Sink) -> Report {
    use crate::contract::{JudgeSource, Judgment};
    use crate::telemetry::RunInfo;
    let mut checks = Vec::new();
    let mut run = |label: &'static str, f: &mut dyn FnMut() -> Result<String>| {
        let (passed, detail) = match crate::env::guard(f) {
            Ok(d) => (true, d),
            Err(e) => (false, clip(&e.to_string())),
        };
        checks.push(Check {
            name: label,
            passed,
            detail,
        });
    };
    let mut info = RunInfo {
        kind: "check".into(),
        name: "plugin-check:toy".into(),
        ..RunInfo::default()
    };
    info.params.insert("episodes".into(), json!(TOY.len()));
    let episodes: Vec<Trajectory> = TOY
        .iter()
        .enumerate()
        .map(|(i, (answer, wrong))| {
            let reply = if i % 2 == 0 { answer } else { wrong };
            let mut t = toy_trajectory(i, reply, answer);
            let score = if i % 2 == 0 { 1.0 } else { 0.0 };
            t.judgment = Judgment::new(score, JudgeSource::Verifier, "plugin-check").ok();
            t.duration_s = Some(0.01);
            t
        })
        .collect();
    let sink = std::cell::RefCell::new(sink);
    run("starts", &mut || {
        sink.borrow_mut()
            .start(&info)
            .map(|()| "run started".into())
    });
    run("receives_episodes", &mut || {
        for (i, t) in episodes.iter().enumerate() {
            sink.borrow_mut()
                .episode(t)
                .map_err(|e| Error::Config(format!("episode {i}: {e}")))?;
        }
        Ok(format!("{} judged episodes accepted", episodes.len()))
    });
    run("receives_metrics", &mut || {
        let values = [
            ("mean_score".to_string(), 0.5),
            ("episodes".to_string(), episodes.len() as f64),
        ];
        sink.borrow_mut()
            .metrics(0, &values)
            .map(|()| "2 values at step 0 accepted".into())
    });
    run("receives_artifacts", &mut || {
        sink.borrow_mut()
            .artifact("report.json", b"{\"episodes\": 6}")
            .map(|()| "a 15-byte report.json accepted".into())
    });
    run("flushes_repeatedly", &mut || {
        for i in 0..3 {
            sink.borrow_mut()
                .flush()
                .map_err(|e| Error::Config(format!("flush {}: {e}", i + 1)))?;
        }
        Ok("3 flushes in a row accepted".into())
    });
    run("finishes", &mut || {
        sink.borrow_mut()
            .finish(true)
            .map(|()| "run finished".into())
    });
    run("runs_again", &mut || {
        let mut s = sink.borrow_mut();
        s.start(&info)?;
        s.episode(&episodes[0])?;
        s.finish(false)?;
        Ok("a second run (start, episode, failed finish) accepted".into())
    });
    Report {
        kind: Kind::Telemetry,
        name: name.to_string(),
        checks,
    }
}

/// A telemetry sink by name, as `nenyax plugin-check telemetry NAME` finds it: a built-in sink
/// (configured from its variables) or a telemetry plugin.
pub fn sink_by_name(name: &str) -> Result<Box<dyn crate::telemetry::Sink>> {
    crate::telemetry::build(&crate::telemetry::SinkSpec::named(name))
}

/// Hold a hub plugin to what `nenyax search` and `nenyax fetch` need: search lists well-formed
/// entries (unique names), finds an entry by its own name, every listed name fetches to a URI
/// the router parses, and an unknown name is a clean error.
pub fn check_hub(name: &str, hub: &crate::plugins::hub::LibraryHub) -> Report {
    let mut checks = Vec::new();
    let listed = hub.search("", 20);
    let names: Vec<String> = listed
        .as_ref()
        .map(|l| l.iter().map(|x| x.name.clone()).collect())
        .unwrap_or_default();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    checks.push(Check {
        name: "search_lists",
        passed: listed.is_ok() && !names.is_empty() && unique.len() == names.len(),
        detail: match &listed {
            Err(e) => clip(&e.to_string()),
            Ok(_) if names.is_empty() => "an empty query listed nothing".into(),
            Ok(_) if unique.len() != names.len() => {
                format!("names listed more than once in: {}", names.join(", "))
            }
            Ok(_) => format!("{} listings, names unique", names.len()),
        },
    });
    let found = names.first().map(|n| (n, hub.search(n, 20)));
    checks.push(Check {
        name: "search_finds_by_name",
        passed: matches!(&found, Some((n, Ok(l))) if l.iter().any(|x| &x.name == *n)),
        detail: match &found {
            None => "nothing listed to search for".into(),
            Some((n, Ok(l))) if l.iter().any(|x| &x.name == *n) => {
                format!("searching `{n}` lists it ({} listings)", l.len())
            }
            Some((n, Ok(l))) => format!("searching `{n}` does not list it ({} listings)", l.len()),
            Some((n, Err(e))) => format!("searching `{n}`: {}", clip(&e.to_string())),
        },
    });
    // A fetched URI must also name a scheme some driver here serves (built in, executable or
    // in-process): one no driver knows could never be loaded.
    let drivers = crate::router::Registry::with_plugins();
    let fetched: Vec<std::result::Result<String, String>> = names
        .iter()
        .map(|n| {
            let uri = hub.fetch(n).map_err(|e| format!("`{n}`: {}", e))?;
            let parsed = crate::uri::Uri::parse(&uri)
                .map_err(|e| format!("`{n}` fetched to {uri:?}, which does not parse: {e}"))?;
            if drivers.driver(&parsed.scheme).is_none() {
                return Err(format!(
                    "`{n}` fetched to {uri:?}, whose scheme `{}` no driver here serves \
                     (`nenyax drivers` lists them)",
                    parsed.scheme
                ));
            }
            Ok(uri)
        })
        .collect();
    let bad = fetched.iter().find_map(|r| r.as_ref().err());
    checks.push(Check {
        name: "fetch_gives_uris",
        passed: !names.is_empty() && bad.is_none(),
        detail: match (bad, fetched.first()) {
            (Some(e), _) => clip(e),
            (None, Some(Ok(u))) => format!("{} names fetched, e.g. {u}", fetched.len()),
            _ => "nothing listed to fetch".into(),
        },
    });
    let unknown = "nenyax-plugin-check-no-such-entry";
    let detail = match crate::env::guard(|| hub.fetch(unknown)) {
        Ok(u) => format!("fetching `{unknown}` gave {u:?} instead of an error"),
        Err(e) if e.to_string().contains("panicked") => format!("panicked: {e}"),
        Err(e) => format!("refused: {}", clip(&e.to_string())),
    };
    checks.push(Check {
        name: "unknown_name_is_clean",
        passed: detail.starts_with("refused"),
        detail,
    });
    Report {
        kind: Kind::Hub,
        name: name.to_string(),
        checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{JudgeSource, Judgment};

    #[test]
    fn the_exact_judge_conforms() {
        let r = check_judge("exact", judge_by_name("exact").unwrap());
        assert!(r.passed(), "{}", r.render());
        assert_eq!(r.checks.len(), 5);
    }

    struct Always(f64);
    impl Judge for Always {
        fn id(&self) -> String {
            "always".into()
        }
        fn judge(&self, _t: &Trajectory) -> Result<Judgment> {
            Judgment::new(self.0, JudgeSource::Verifier, "always")
        }
    }

    struct Flaky(std::sync::atomic::AtomicU64);
    impl Judge for Flaky {
        fn id(&self) -> String {
            "flaky".into()
        }
        fn judge(&self, t: &Trajectory) -> Result<Judgment> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let want = format!(
                "<answer>{}</answer>",
                t.task.as_ref().unwrap().metadata["answer"]
                    .as_str()
                    .unwrap()
            );
            let right = t.steps[0].action == json!(want);
            let base = if right { 1.0 } else { 0.0 };
            Judgment::new(base + (n % 2) as f64 * 0.01, JudgeSource::Verifier, "flaky")
        }
    }

    #[test]
    fn broken_judges_fail_the_check_that_names_their_fault() {
        let r = check_judge("always", Arc::new(Always(1.0)));
        assert!(!r.passed());
        let failed: Vec<_> = r
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name)
            .collect();
        assert_eq!(failed, ["discriminates"], "{}", r.render());
        assert!(
            r.render().contains("right 1 is not above wrong 1"),
            "{}",
            r.render()
        );

        let r = check_judge("flaky", Arc::new(Flaky(0.into())));
        assert!(
            r.checks
                .iter()
                .any(|c| c.name == "deterministic" && !c.passed),
            "{}",
            r.render()
        );
        assert!(r
            .clone()
            .into_result()
            .unwrap_err()
            .to_string()
            .contains("does not conform"));

        // A panicking judge (its no-task case unwraps) is caught and named.
        let r = check_judge("flaky", Arc::new(Flaky(0.into())));
        let c = r
            .checks
            .iter()
            .find(|c| c.name == "no_task_is_clean")
            .unwrap();
        assert!(!c.passed && c.detail.contains("panicked"), "{}", c.detail);
    }

    #[test]
    fn unknown_judges_say_both_places_looked() {
        let e = judge_by_name("no_such_judge").err().unwrap().to_string();
        assert!(e.contains("no judge `no_such_judge`"), "{e}");
    }
}
