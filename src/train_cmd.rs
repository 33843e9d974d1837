//! `nenyax train`: improve a policy on an environment with any learner, from a run config
//! (`--config run.toml`) and/or flags, with one progress line per round and the report written
//! where asked. Also the learners' rows of `nenyax integrations`.

use clap::Args;
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nenyax::train::{train_observed, RunConfig, TrainReport};
use nenyax::Error;

/// Examples shown by `nenyax train --help`.
const EXAMPLES: &str = "Examples:
  nenyax train gymnasium:CartPole-v1 --learner grpo
      the built-in softmax policy, trained with GRPO (no model, no GPU); held-out return
      24 -> 283 in about a minute on 2 cores
  nenyax train builtin:arithmetic --learner incontext --base-url http://127.0.0.1:8000/v1 --model M
      any OpenAI-compatible server; the learner shows the model its own best episodes
  nenyax train --config examples/configs/cartpole-grpo.toml --out runs/cartpole --plot
      a run config (TOML: [env] [model] [learner] [train] [output]); flags override it
  nenyax train --config run.toml --set learner.clip_high=0.28 --dry-run
      any key by its dotted path; --dry-run checks everything and prints the run as JSON

Learners: nenyax integrations. Output with --out DIR: report.json, report.txt, and with
--plot curve.svg, with --trajectories trajectories.jsonl.
Exit status: 0 when every round ran, 1 when a round failed or the run could not start,
2 for a wrong flag, config key or value.";

/// The arguments of `nenyax train`.
#[derive(Args)]
#[command(after_help = EXAMPLES)]
pub struct TrainArgs {
    /// Environment URI (overrides the config's [env] uri)
    uri: Option<String>,
    /// Run config (TOML: [env], [model], [learner], [train], [output]); flags override it
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Learner: incontext, grpo, dr_grpo, dapo, rloo, reinforce, ... (nenyax integrations);
    /// another than the config's replaces its [learner] [default: incontext]
    #[arg(long)]
    learner: Option<String>,

    /// Model provider by name (vllm, ollama, openai, ...; nenyax integrations)
    #[arg(long, help_heading = "Model (learner incontext)")]
    provider: Option<String>,
    /// Model name served by the endpoint
    #[arg(long, help_heading = "Model (learner incontext)")]
    model: Option<String>,
    /// Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1
    #[arg(long, help_heading = "Model (learner incontext)")]
    base_url: Option<String>,
    /// Environment variable holding the API key
    #[arg(long, help_heading = "Model (learner incontext)")]
    api_key_env: Option<String>,
    /// Sampling temperature sent with every call (a finite number >= 0)
    #[arg(
        long,
        help_heading = "Model (learner incontext)",
        allow_negative_numbers = true
    )]
    temperature: Option<f64>,
    /// Completion token limit sent with every call
    #[arg(long, help_heading = "Model (learner incontext)")]
    max_tokens: Option<u64>,
    /// Per-request timeout in seconds
    #[arg(long, help_heading = "Model (learner incontext)")]
    timeout: Option<f64>,

    /// Rounds of rollouts and updates [default: 5]
    #[arg(long, help_heading = "Training")]
    rounds: Option<usize>,
    /// Rollouts per group (one task or seed, sampled N times) [default: 4]
    #[arg(long, help_heading = "Training")]
    group_size: Option<usize>,
    /// Groups per round [default: 8]
    #[arg(long, help_heading = "Training")]
    batch: Option<usize>,
    /// Seed of the split, the task order and every sampling seed [default: 0]
    #[arg(long, help_heading = "Training")]
    seed: Option<i64>,
    /// Parallel rollouts, 0: one per core [default: 0]
    #[arg(long, help_heading = "Training")]
    concurrency: Option<usize>,
    /// Held-out tasks (or seeds) [default: a quarter of the tasks, or 16 seeds]
    #[arg(long, help_heading = "Training")]
    eval_tasks: Option<usize>,
    /// Episodes per held-out task at each evaluation [default: 1]
    #[arg(long, help_heading = "Training")]
    eval_repeats: Option<usize>,
    /// Use at most this many of the environment's tasks
    #[arg(long, help_heading = "Training")]
    tasks: Option<usize>,
    /// Step limit per episode [default: the environment's]
    #[arg(long, help_heading = "Training")]
    max_steps: Option<usize>,
    /// Keep every update, even one that lowers the held-out score
    #[arg(long, help_heading = "Training")]
    no_gate: bool,
    /// How far below the best held-out score an update may land and still be kept
    #[arg(long, help_heading = "Training")]
    gate_tolerance: Option<f64>,

    /// Learning rate (Adam) of the built-in policy [default: 0.01]
    #[arg(long, help_heading = "Weight learners")]
    lr: Option<f64>,
    /// Hidden units of the built-in policy, 0: linear [default: 0]
    #[arg(long, help_heading = "Weight learners")]
    hidden: Option<usize>,
    /// Passes over each round's rollouts [default: 8 over the built-in policy, else 1]
    #[arg(long, help_heading = "Weight learners")]
    epochs: Option<usize>,
    /// Optimiser steps per pass [default: 4 over the built-in policy, else 1]
    #[arg(long, help_heading = "Weight learners")]
    minibatches: Option<usize>,

    /// Set any config key by its dotted path, e.g. learner.clip_high=0.28 (value as in TOML)
    #[arg(long = "set", value_name = "KEY=VALUE", help_heading = "Config")]
    set: Vec<String>,
    /// Check the config and flags, print the run as JSON, and stop
    #[arg(long, help_heading = "Config")]
    dry_run: bool,

    /// Write report.json and report.txt into this directory (created if missing)
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    out: Option<String>,
    /// Also write the learning curve, curve.svg, into --out
    #[arg(long, help_heading = "Output")]
    plot: bool,
    /// Also write every trajectory, trajectories.jsonl, into --out
    #[arg(long, help_heading = "Output")]
    trajectories: bool,
    /// Print the report as JSON instead of text
    #[arg(long, help_heading = "Output")]
    json: bool,
    /// No progress lines on stderr
    #[arg(long, short = 'q', help_heading = "Output")]
    quiet: bool,
    /// Send episodes, per-round metrics and the report to telemetry sinks: otel, mlflow, wandb
    /// (comma-separated; added to the config's [[telemetry]] tables)
    #[arg(long, value_name = "SINKS", help_heading = "Output")]
    telemetry: Option<String>,
}

/// Exit status for an error: 2 when what the user wrote is wrong, 1 when the run could not
/// start (an environment, a server or a file that failed).
fn status_of(e: &Error) -> u8 {
    match e {
        Error::Config(_)
        | Error::Define { .. }
        | Error::InvalidUri { .. }
        | Error::UnknownScheme { .. }
        | Error::UnknownTarget { .. }
        | Error::UnknownParameter { .. }
        | Error::InvalidParameter { .. } => 2,
        _ => 1,
    }
}

fn fail(e: &Error) -> ExitCode {
    // Not eprintln!: it panics when stderr is a pipe nobody reads.
    let _ = writeln!(std::io::stderr(), "error: {}: {e}", e.kind());
    ExitCode::from(status_of(e))
}

/// A `--set` value: TOML (a number, a boolean, a quoted string, an inline table or array),
/// else the text as a string, so `--set env.uri=builtin:guess` needs no quotes.
fn parse_value(text: &str) -> Value {
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(t) => t
            .get("v")
            .and_then(|v| serde_json::to_value(v).ok())
            .unwrap_or_else(|| Value::String(text.into())),
        Err(_) => Value::String(text.into()),
    }
}

/// The config the file and flags describe.
fn config(a: &TrainArgs) -> Result<RunConfig, Error> {
    let mut c = match (&a.config, &a.uri) {
        (Some(path), _) => RunConfig::load(path)?,
        (None, Some(uri)) => RunConfig::for_uri(uri)?,
        (None, None) => {
            return Err(Error::Config(
                "give an environment URI (nenyax train gymnasium:CartPole-v1 --learner grpo) \
                 or a run config (--config run.toml)"
                    .into(),
            ))
        }
    };
    // The learner first, so that the knobs below are checked against it. Another learner than
    // the file's replaces its whole [learner]: those knobs were chosen for that learner.
    if let Some(l) = &a.learner {
        if c.learner_name() != l {
            c.set("learner", json!({ "use": l }))?;
        }
    }
    if let Some(uri) = &a.uri {
        c.set("env.uri", json!(uri))?;
    }
    if c.learner_name() == "incontext" {
        for (flag, given) in [
            ("--lr", a.lr.is_some()),
            ("--hidden", a.hidden.is_some()),
            ("--epochs", a.epochs.is_some()),
            ("--minibatches", a.minibatches.is_some()),
        ] {
            if given {
                return Err(Error::Config(format!(
                    "{flag} applies to the weight learners (grpo, rloo, reinforce, ...); \
                     learner `incontext` changes no weights"
                )));
            }
        }
    }
    // JSON has no NaN: it would reach the server as `null`.
    if let Some(t) = a.temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(Error::Config(format!(
            "--temperature must be a finite number >= 0, got {t}"
        )));
    }
    let mut model = serde_json::Map::new();
    for (k, v) in [
        ("provider", a.provider.as_ref().map(|v| json!(v))),
        ("name", a.model.as_ref().map(|v| json!(v))),
        ("base_url", a.base_url.as_ref().map(|v| json!(v))),
        ("api_key_env", a.api_key_env.as_ref().map(|v| json!(v))),
        ("temperature", a.temperature.map(|v| json!(v))),
        ("max_tokens", a.max_tokens.map(|v| json!(v))),
        ("timeout_s", a.timeout.map(|v| json!(v))),
    ] {
        if let Some(v) = v {
            model.insert(k.into(), v);
        }
    }
    if a.provider.is_some() || a.base_url.is_some() {
        // Another server: the file's [model] (its server, key and parameters) gives way whole.
        if a.model.is_none() {
            return Err(Error::Config(
                "--provider and --base-url need --model, the name the server serves".into(),
            ));
        }
        c.set("model", Value::Object(model))?;
    } else if !model.is_empty() {
        if c.model.is_none() {
            return Err(Error::Config(
                "--model and the other model flags need --provider (e.g. vllm, openai) or \
                 --base-url (e.g. http://127.0.0.1:8000/v1)"
                    .into(),
            ));
        }
        for (k, v) in model {
            c.set(&format!("model.{k}"), v)?;
        }
    }
    if (a.plot || a.trajectories) && c.output.dir.is_none() && a.out.is_none() {
        return Err(Error::Config(
            "--plot and --trajectories write into the output directory; give --out DIR".into(),
        ));
    }
    let flags = [
        ("train.rounds", a.rounds.map(|v| json!(v))),
        ("train.group_size", a.group_size.map(|v| json!(v))),
        ("train.batch", a.batch.map(|v| json!(v))),
        ("train.seed", a.seed.map(|v| json!(v))),
        ("train.concurrency", a.concurrency.map(|v| json!(v))),
        ("train.eval_tasks", a.eval_tasks.map(|v| json!(v))),
        ("train.eval_repeats", a.eval_repeats.map(|v| json!(v))),
        ("train.tasks", a.tasks.map(|v| json!(v))),
        ("train.max_steps", a.max_steps.map(|v| json!(v))),
        ("train.gate", a.no_gate.then_some(json!(false))),
        ("train.gate_tolerance", a.gate_tolerance.map(|v| json!(v))),
        ("learner.trainer.lr", a.lr.map(|v| json!(v))),
        ("learner.trainer.hidden", a.hidden.map(|v| json!(v))),
        ("learner.epochs", a.epochs.map(|v| json!(v))),
        ("learner.minibatches", a.minibatches.map(|v| json!(v))),
        ("output.dir", a.out.as_ref().map(|v| json!(v))),
        ("output.plot", a.plot.then_some(json!(true))),
        ("output.trajectories", a.trajectories.then_some(json!(true))),
    ];
    for (k, v) in flags {
        if let Some(v) = v {
            c.set(k, v)?;
        }
    }
    for s in &a.set {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            Error::Config(format!(
                "--set takes KEY=VALUE (e.g. train.rounds=20), got {s:?}"
            ))
        })?;
        c.set(k.trim(), parse_value(v.trim()))?;
    }
    Ok(c)
}

/// Run `nenyax train`.
pub fn run(a: TrainArgs) -> ExitCode {
    let cfg = match config(&a) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    if a.dry_run {
        let shown = serde_json::to_string_pretty(&cfg.to_json()).expect("serialises");
        let printed = outln!("{}", nenyax::openai::redact_url(&shown));
        return match crate::unless_stdout_closed(printed) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        };
    }
    let mut built = match cfg.build() {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let out = cfg.output.clone();
    if let Some(dir) = &out.dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return fail(&Error::io(format!("cannot create --out {dir}"), e));
        }
    }
    let show = built.options.progress && !a.quiet;
    // The loop prints nothing itself: the callback below does, terminal or not.
    built.options.progress = false;
    if show {
        eprintln!(
            "nenyax train {}: learner {}, {} rounds x {} groups x {}",
            built.env.id(),
            built.learner.name(),
            built.options.rounds,
            built.options.batch,
            built.options.group_size
        );
    }
    let run_info = nenyax::telemetry::RunInfo {
        kind: "train".into(),
        name: built.env.id().to_string(),
        params: crate::telemetry_args::params(&[
            ("uri", json!(cfg.env.as_ref().map(|e| &e.uri))),
            ("learner", cfg.learner.clone()),
            (
                "model",
                cfg.model
                    .as_ref()
                    .and_then(|m| m.get("model"))
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
            (
                "train",
                serde_json::to_value(&built.options).unwrap_or(Value::Null),
            ),
        ]),
    };
    let tel = match crate::telemetry_args::open(a.telemetry.as_deref(), &cfg.telemetry, run_info) {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    let report = train_observed(
        &built.env,
        built.learner.as_mut(),
        &built.options,
        None,
        tel.clone(),
        |r| {
            if show {
                eprintln!("{}", r.line());
            }
        },
    );
    if let Some(t) = &tel {
        t.finish(report.as_ref().is_ok_and(|r| r.failed_rounds() == 0));
    }
    let report = match report {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let printed = if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).expect("serialises")
        )
    } else {
        outln!("{}", report.render())
    };
    // A reader that went away still gets the report files below.
    if let Err(e) = crate::unless_stdout_closed(printed) {
        return fail(&e);
    }
    if let Some(dir) = &out.dir {
        if let Err(e) = write_outputs(Path::new(dir), &report, &out) {
            return fail(&e);
        }
    }
    if report.failed_rounds() > 0 {
        eprintln!(
            "{} of {} rounds failed (see their errors above)",
            report.failed_rounds(),
            report.rounds.len() - 1
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn write_outputs(
    dir: &Path,
    report: &TrainReport,
    out: &nenyax::train::config::OutputConfig,
) -> Result<(), Error> {
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| Error::io(format!("cannot write {}", p.display()), e))
    };
    if out.report_json {
        write(
            "report.json",
            serde_json::to_string_pretty(&report.to_json()).expect("serialises") + "\n",
        )?;
    }
    if out.report_text {
        write("report.txt", report.render() + "\n")?;
    }
    if out.plot {
        write("curve.svg", report.svg())?;
    }
    Ok(())
}
