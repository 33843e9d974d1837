//! The `nenyax` command line: list drivers, inspect, check, run, replay and train on
//! environments.

mod train_cmd;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nenyax::conformance::{CheckOptions, Tier};
use nenyax::{plan, replay, Endpoint, Environment, Error, Policy, Readiness, Registry, Runner};

#[derive(Parser)]
#[command(
    name = "nenyax",
    version,
    about = "One contract for every RL environment: load by URI, check, run, replay, train",
    after_help = "Examples:\n  nenyax check builtin:arithmetic\n  nenyax run builtin:arithmetic --policy oracle -n 1000 --out t.jsonl\n  nenyax try builtin:guess\n  nenyax train gymnasium:CartPole-v1 --learner grpo --rounds 20 --group-size 8"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every driver and whether it is ready here (and if not, what is missing)
    Drivers {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// List every model provider and learner, whether it is ready here, and what it needs
    Integrations {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// List sandbox backends, whether each is ready here, and what it needs
    Sandboxes {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Check which isolation promises a sandbox backend keeps (exit 1 if any does not hold)
    SandboxCheck {
        /// Backend: process or jail
        backend: String,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Print an environment's manifest as JSON
    Info {
        /// Environment URI, e.g. builtin:arithmetic?size=100
        uri: String,
    },
    /// Measure the conformance tier an environment really reaches
    Check {
        /// Environment URI
        uri: String,
        /// Tasks sampled per check
        #[arg(long, default_value_t = 8)]
        samples: usize,
        /// Threads for the parallel-consistency check
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
        /// Exit with status 1 unless this tier is reached
        #[arg(long, value_parser = parse_tier)]
        require: Option<Tier>,
    },
    /// Roll out many episodes in parallel and write judged trajectories
    Run {
        /// Environment URI
        uri: String,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Number of episodes
        #[arg(short = 'n', long, default_value_t = 10)]
        n: usize,
        /// Parallel rollouts (0: one per core)
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Seed of the first episode; episode i gets seed + i
        #[arg(long, default_value_t = 0)]
        seed: i64,
        /// Step limit per episode
        #[arg(long)]
        max_steps: Option<usize>,
        /// Write trajectories as JSON lines to this file
        #[arg(long)]
        out: Option<String>,
        /// Append to --out instead of replacing it
        #[arg(long)]
        append: bool,
    },
    /// Create the managed Python environment and install a framework's pinned package into it
    Setup {
        /// reasoning-gym, gymnasium or verifiers
        framework: String,
        /// The interpreter that creates the venv
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// Serve a step-mode environment as an OpenEnv server (/ws, /reset, /step, /state, /schema)
    Serve {
        /// Environment URI, e.g. reasoning_gym:basic_arithmetic?size=50
        uri: String,
        /// Address to bind (only this machine by default; 0.0.0.0 exposes it to the network)
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port to bind (0 picks a free one)
        #[arg(long, default_value_t = 8000)]
        port: u16,
        /// Most concurrent episode sessions (WebSocket and HTTP); more are refused
        #[arg(long, default_value_t = 64)]
        max_sessions: usize,
        /// Seconds without a message before a session is closed
        #[arg(long, default_value_t = 300.0)]
        idle_timeout: f64,
        /// Largest accepted request body or WebSocket message, in bytes
        #[arg(long, default_value_t = 1 << 20)]
        max_message_bytes: usize,
    },
    /// Improve a policy with a learner: held-out evaluation, gated updates, a report
    Train(Box<train_cmd::TrainArgs>),
    /// Draw the learning curve of a training report (report.json of `nenyax train --out`, or
    /// the report a program got from nenyax_train) as SVG
    Plot {
        /// The report (JSON)
        report: String,
        /// Where to write the SVG (default: curve.svg next to the report)
        #[arg(short = 'o', long)]
        out: Option<String>,
    },
    /// Play episodes and show them as readable replays
    Try {
        /// Environment URI
        uri: String,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Number of episodes
        #[arg(short = 'n', long, default_value_t = 1)]
        n: usize,
        /// Seed of the first episode
        #[arg(long, default_value_t = 0)]
        seed: i64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum PolicyKind {
    /// The environment's reference (oracle) policy
    Oracle,
    /// The environment's null policy (does nothing useful)
    Null,
    /// An OpenAI-compatible chat-completions server (--base-url, --model)
    Endpoint,
}

#[derive(Args)]
struct PolicyArgs {
    /// Who acts
    #[arg(long, value_enum, default_value_t = PolicyKind::Oracle)]
    policy: PolicyKind,
    /// Model provider by name (openai, groq, vllm, ollama, ...; see `nenyax integrations`)
    #[arg(long)]
    provider: Option<String>,
    /// Base URL of the endpoint, e.g. http://localhost:8000/v1
    #[arg(long)]
    base_url: Option<String>,
    /// Model name served by the endpoint
    #[arg(long)]
    model: Option<String>,
    /// Environment variable holding the endpoint's API key
    #[arg(long)]
    api_key_env: Option<String>,
    /// Sampling temperature sent to the endpoint
    #[arg(long)]
    temperature: Option<f64>,
    /// Completion token limit sent to the endpoint
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Per-request timeout in seconds
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Retries on 429, 5xx and connection errors
    #[arg(long, default_value_t = 3)]
    retries: u32,
}

fn parse_tier(s: &str) -> Result<Tier, String> {
    Tier::parse(s).map_err(|e| e.to_string())
}

fn resolve_policy(args: &PolicyArgs, env: &dyn Environment) -> Result<Policy, Error> {
    let missing = |what: &str| Error::UnsupportedCapability {
        env: env.id().to_string(),
        what: format!("provide a {what} policy; use --policy endpoint with a model instead"),
    };
    match args.policy {
        PolicyKind::Oracle => env
            .reference_policy(None)
            .ok_or_else(|| missing("reference")),
        PolicyKind::Null => env.null_policy(None).ok_or_else(|| missing("null")),
        PolicyKind::Endpoint => {
            if args.base_url.is_none() && args.provider.is_none() {
                return Err(Error::Config(
                    "--policy endpoint needs --provider (e.g. vllm, openai) or --base-url \
                     (e.g. http://localhost:8000/v1)"
                        .into(),
                ));
            }
            let model = args
                .model
                .clone()
                .ok_or_else(|| Error::Config("--policy endpoint needs --model".into()))?;
            if !(args.timeout.is_finite() && args.timeout > 0.0) {
                return Err(Error::Config(format!(
                    "--timeout must be a positive number of seconds, got {}",
                    args.timeout
                )));
            }
            let e = match (&args.base_url, &args.provider) {
                (Some(base), _) => Endpoint::new(base, &model),
                (None, Some(p)) => Endpoint::preset(p, &model)?,
                (None, None) => unreachable!("checked above"),
            };
            let mut e = e
                .timeout(Duration::from_secs_f64(args.timeout))
                .retries(args.retries, Duration::from_millis(500));
            if let Some(var) = &args.api_key_env {
                e = e.api_key_from_env(var)?;
            }
            if let Some(t) = args.temperature {
                e = e.param("temperature", json!(t));
            }
            if let Some(m) = args.max_tokens {
                e = e.param("max_tokens", json!(m));
            }
            Ok(Policy::chat(e))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}: {e}", e.kind());
            ExitCode::from(2)
        }
    }
}

fn load(registry: &Registry, uri: &str) -> Result<Arc<dyn Environment>, Error> {
    registry.load(uri)
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    let registry = Registry::with_builtins();
    match cli.command {
        // Its own exit statuses: 1 for a run that failed, 2 for what the user wrote.
        Command::Train(args) => Ok(train_cmd::run(*args)),
        Command::Plot { report, out } => {
            let text = std::fs::read_to_string(&report)
                .map_err(|e| Error::io(format!("reading {report}"), e))?;
            let r: nenyax::TrainReport = serde_json::from_str(&text)
                .map_err(|e| Error::Protocol(format!("{report} is not a training report: {e}")))?;
            let out = out.unwrap_or_else(|| {
                std::path::Path::new(&report)
                    .with_file_name("curve.svg")
                    .display()
                    .to_string()
            });
            std::fs::write(&out, r.svg()).map_err(|e| Error::io(format!("writing {out}"), e))?;
            println!("{out}: {}", r.render().lines().last().unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
        Command::Integrations { json } => {
            let mut rows: Vec<Value> = nenyax::providers::PROVIDERS
                .iter()
                .map(|p| {
                    let ready = p.readiness();
                    json!({
                        "name": p.name,
                        "title": p.title,
                        "kind": if p.kind == nenyax::providers::ProviderKind::Local { "local" } else { "hosted" },
                        "base_url": p.base_url(),
                        "key_var": p.key_var,
                        "ready": ready.is_ok(),
                        "needs": ready.err(),
                    })
                })
                .collect();
            let learners = train_cmd::learner_rows();
            if json {
                // One list: providers, then learners (`kind` = "learner").
                rows.extend(learners);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).expect("serialises")
                );
            } else {
                println!("model providers (use: --policy endpoint --provider NAME --model M)");
                for r in &rows {
                    let status = if r["ready"] == json!(true) {
                        "ready"
                    } else {
                        "-"
                    };
                    println!(
                        "  {:<11} {:<6} {:<7} {}",
                        r["name"].as_str().unwrap_or_default(),
                        r["kind"].as_str().unwrap_or_default(),
                        status,
                        r["base_url"].as_str().unwrap_or_default()
                    );
                    if let Some(n) = r["needs"].as_str() {
                        println!("  {:<11} {:<6} {:<7} needs: {n}", "", "", "");
                    }
                }
                train_cmd::print_learners(&learners);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Drivers { json } => {
            let list = registry.list();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("serialises")
                );
            } else {
                for d in list {
                    let status = match &d.readiness {
                        Readiness::Ready => "ready".to_string(),
                        Readiness::Missing(m) => format!("missing: {m}"),
                    };
                    println!(
                        "{:<14} {:<8} {}",
                        d.scheme,
                        if matches!(d.readiness, Readiness::Ready) {
                            "ready"
                        } else {
                            "-"
                        },
                        d.summary
                    );
                    if !matches!(d.readiness, Readiness::Ready) {
                        println!("{:<14} {:<8} {status}", "", "");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sandboxes { json } => {
            let list = nenyax::sandbox::backends();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("serialises")
                );
            } else {
                for b in list {
                    println!(
                        "{:<10} {:<10} {:<6} needs: {}",
                        b.name,
                        format!("{:?}", b.level).to_lowercase(),
                        if b.ready { "ready" } else { "-" },
                        b.needs
                    );
                    if let Some(w) = b.why_not {
                        println!("{:<10} {:<10} {:<6} not ready: {w}", "", "", "");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::SandboxCheck { backend, json } => {
            let kind = nenyax::sandbox::BackendKind::parse(&backend)?;
            if let Err(why) = kind.ready() {
                eprintln!("error: the {backend} backend is not ready here: {why}");
                return Ok(ExitCode::from(1));
            }
            let report = nenyax::sandbox::sandbox_check(kind);
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialises")
                );
            } else {
                print!("{}", report.render());
            }
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Info { uri } => {
            let env = load(&registry, &uri)?;
            println!(
                "{}",
                serde_json::to_string_pretty(env.manifest()).expect("serialises")
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            uri,
            samples,
            threads,
            json,
            require,
        } => {
            let opts = CheckOptions {
                samples,
                threads,
                ..CheckOptions::default()
            };
            let t0 = Instant::now();
            let report = match nenyax::conformance::try_check_uri(&uri, &opts) {
                Ok(report) => report,
                Err(e) => {
                    // --json promises a report on stdout: tier none, the load error as its check.
                    if json {
                        let r =
                            nenyax::conformance::load_failed(&uri, &e, t0.elapsed().as_secs_f64());
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&r.to_json()).expect("serialises")
                        );
                    }
                    return Err(e);
                }
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report.to_json()).expect("serialises")
                );
            } else {
                print!("{}", report.render());
            }
            if let Some(t) = require {
                if report.tier < t {
                    eprintln!(
                        "required tier {} not reached (got {})",
                        t.label(),
                        report.tier.label()
                    );
                    return Ok(ExitCode::from(1));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            uri,
            policy,
            n,
            concurrency,
            seed,
            max_steps,
            out,
            append,
        } => {
            let env = load(&registry, &uri)?;
            let policy = resolve_policy(&policy, env.as_ref())?;
            let runner = Runner::new(concurrency)?;
            let jobs = plan(env.as_ref(), n, seed)?;
            let mut writer = match &out {
                Some(path) => Some(BufWriter::new(
                    OpenOptions::new()
                        .create(true)
                        .write(true)
                        .append(append)
                        .truncate(!append)
                        .open(path)
                        .map_err(|e| Error::io(format!("cannot open --out {path}"), e))?,
                )),
                None => None,
            };
            let (mut sum, mut judged, mut passed, mut failed) = (0.0, 0usize, 0usize, 0usize);
            let mut first_error = None;
            let t0 = Instant::now();
            runner.run(&env, &policy, jobs, max_steps, |_, traj| {
                if let Some(s) = traj.score() {
                    sum += s;
                    judged += 1;
                }
                passed += usize::from(traj.judgment.as_ref().and_then(|j| j.passed) == Some(true));
                if let Some(e) = &traj.error {
                    failed += 1;
                    first_error.get_or_insert_with(|| e.clone());
                }
                if let Some(w) = writer.as_mut() {
                    writeln!(w, "{}", traj.to_json())
                        .map_err(|e| Error::io("cannot write --out", e))?;
                }
                Ok(())
            })?;
            if let Some(mut w) = writer {
                w.flush().map_err(|e| Error::io("cannot write --out", e))?;
            }
            let secs = t0.elapsed().as_secs_f64();
            let mean = if judged > 0 {
                format!("{:.3}", sum / judged as f64)
            } else {
                "n/a".to_string()
            };
            let threads = runner.threads();
            println!(
                "{uri}: {n} episode{}, mean score {mean}, {passed} passed, {failed} failed, {:.0} rollouts/s on {threads} thread{}{}",
                if n == 1 { "" } else { "s" },
                n as f64 / secs.max(1e-9),
                if threads == 1 { "" } else { "s" },
                out.as_ref().map(|p| format!(", written to {p}")).unwrap_or_default()
            );
            if let Some(e) = first_error {
                eprintln!("first error: {e}");
            }
            Ok(if n > 0 && failed == n {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Setup { framework, python } => setup(&framework, &python),
        Command::Serve {
            uri,
            host,
            port,
            max_sessions,
            idle_timeout,
            max_message_bytes,
        } => {
            if !(idle_timeout.is_finite() && idle_timeout > 0.0) {
                return Err(Error::Config(format!(
                    "--idle-timeout must be a positive number of seconds, got {idle_timeout}"
                )));
            }
            let env = load(&registry, &uri)?;
            let opts = nenyax::ServeOptions {
                host,
                port,
                max_sessions: max_sessions.max(1),
                idle_timeout: Duration::from_secs_f64(idle_timeout),
                max_message_bytes: max_message_bytes.max(1),
                ..nenyax::ServeOptions::default()
            };
            let server = nenyax::Server::start(env, opts)?;
            // The first line says where it listens (scripts and tests read it).
            println!(
                "nenyax serve: {uri} at {} (OpenEnv: /ws, /reset, /step, /state, /schema)",
                server.url()
            );
            std::io::stdout()
                .flush()
                .map_err(|e| Error::io("cannot write to stdout", e))?;
            server.wait();
            Ok(ExitCode::SUCCESS)
        }
        Command::Try {
            uri,
            policy,
            n,
            seed,
        } => {
            let env = load(&registry, &uri)?;
            let policy = resolve_policy(&policy, env.as_ref())?;
            let jobs = plan(env.as_ref(), n, seed)?;
            let runner = Runner::new(1)?.progress(false);
            let mut failed = 0;
            runner.run(&env, &policy, jobs, None, |_, traj| {
                failed += usize::from(traj.error.is_some());
                print!("{}", replay::render(&traj));
                Ok(())
            })?;
            Ok(if n > 0 && failed == n {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// Pinned packages of the frameworks the bridge drives.
const FRAMEWORKS: &[(&str, &str)] = &[
    ("reasoning-gym", "reasoning-gym==0.1.25"),
    ("reasoning_gym", "reasoning-gym==0.1.25"),
    ("gymnasium", "gymnasium==1.4.0"),
    // The v1 API's harness programs are run with uv; verifiers needs Python 3.11 to 3.13.
    ("verifiers", "verifiers==0.4.0 uv"),
];

fn setup(framework: &str, python: &str) -> Result<ExitCode, Error> {
    let requirement = FRAMEWORKS
        .iter()
        .find(|(name, _)| *name == framework)
        .map(|(_, r)| *r)
        .ok_or_else(|| {
            Error::Config(format!(
                "unknown framework `{framework}`; nenyax setup knows reasoning-gym, gymnasium and verifiers"
            ))
        })?;
    let venv = nenyax::bridge::managed_venv();
    let run = |program: &str, args: &[&str]| -> Result<(), Error> {
        eprintln!("$ {program} {}", args.join(" "));
        let status = std::process::Command::new(program)
            .args(args)
            .status()
            .map_err(|e| Error::io(format!("cannot run {program}"), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "`{program} {}` failed ({status})",
                args.join(" ")
            )))
        }
    };
    let venv_str = venv.display().to_string();
    if !venv.join("bin/python").exists() {
        run(python, &["-m", "venv", &venv_str])?;
    }
    let venv_python = venv.join("bin/python").display().to_string();
    let mut args = vec!["-m", "pip", "install", "--quiet"];
    args.extend(requirement.split_whitespace());
    run(&venv_python, &args)?;
    println!("{requirement} is installed in {venv_str}; the bridge uses {venv_python} unless NENYAX_PYTHON is set");
    Ok(ExitCode::SUCCESS)
}
