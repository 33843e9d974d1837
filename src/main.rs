//! The `nenyax` command line: list drivers, inspect, check, run, replay and train on
//! environments.

/// `println!` that returns an error instead of panicking when stdout is closed; see [`out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod export_cmd;
mod hubs_cmd;
mod images_cmd;
mod import_cmd;
mod integrations_cmd;
mod new_plugin_cmd;
mod plugins_cmd;
mod policy_args;
mod run_summary;
mod telemetry_args;
mod train_cmd;

use clap::{Parser, Subcommand};
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nenyax::conformance::{CheckOptions, Tier};
use nenyax::limits::{count, MAX_EPISODES, MAX_THREADS};
use nenyax::{plan, replay, Environment, Error, Readiness, Registry, Runner};
use policy_args::{check_policy_args, resolve_policy, PolicyArgs};
use run_summary::{episode_line, Tally};
use serde_json::json;

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
    /// List every plugin of every kind (built in, on PATH, in the plugins config), the extension
    /// points (--kinds) or the public registry (--registry)
    Plugins(plugins_cmd::PluginsArgs),
    /// Make a small plugin package (build file, source, a conformance test, README) that
    /// passes on day one
    NewPlugin(new_plugin_cmd::NewPluginArgs),
    /// Hold one plugin to its kind's conformance checks (exit 1 if it does not conform)
    PluginCheck(plugins_cmd::PluginCheckArgs),
    /// List every provider, hub, telemetry sink, exporter, sandbox, learner and judge, whether it
    /// is ready here, and what it needs
    Integrations {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Search an environment hub (huggingface, prime, harbor); no key needed
    Search {
        /// The hub: huggingface (OpenEnv Spaces), prime (Environments Hub) or harbor (registry)
        hub: String,
        /// Words to search for (none: the hub's top entries)
        query: Vec<String>,
        /// Most entries to list (1 to 1000)
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Make a hub entry loadable here and print the URI to load
    Fetch {
        /// The hub: huggingface, prime or harbor
        hub: String,
        /// The name `nenyax search` lists (owner/space, owner/env[@version], dataset[@version])
        name: String,
    },
    /// List sandbox backends, whether each is ready here, and what it needs
    Sandboxes {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        /// First remove containers and images a crashed run left (their owner process is dead)
        #[arg(long)]
        sweep: bool,
    },
    /// Check which isolation promises a sandbox backend keeps (exit 1 if any does not hold)
    SandboxCheck {
        /// Backend: process, jail, container, or the name of a sandbox plugin (plugins config)
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
        /// Tasks sampled per check (at least 1)
        #[arg(long, default_value_t = 8)]
        samples: usize,
        /// Threads for the parallel-consistency check (1 to 1024)
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
        /// Number of episodes (at most 10,000,000)
        #[arg(short = 'n', long, default_value_t = 10)]
        n: usize,
        /// Parallel rollouts (0: one per core; at most 1024)
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Seed of the first episode; episode i gets seed + i (all must fit in a 64-bit integer)
        #[arg(long, default_value_t = 0)]
        seed: i64,
        /// Step limit per episode (at least 1) [default: the environment's]
        #[arg(long)]
        max_steps: Option<usize>,
        /// Write trajectories as JSON lines to this file
        #[arg(long)]
        out: Option<String>,
        /// Append to --out instead of replacing it
        #[arg(long)]
        append: bool,
        /// Exit with status 1 if any episode failed (by default only if all did)
        #[arg(long)]
        fail_on_error: bool,
        /// Print one line per episode: index, task, seed, score and pass, or its error
        #[arg(long, visible_alias = "verbose")]
        episodes: bool,
        /// Send episodes and metrics to telemetry sinks: otel, mlflow, wandb (comma-separated;
        /// settings from their variables, e.g. OTEL_EXPORTER_OTLP_ENDPOINT)
        #[arg(long, value_name = "SINKS")]
        telemetry: Option<String>,
    },
    /// Create the managed Python environment and install a framework's pinned package into it
    Setup {
        /// reasoning-gym, gymnasium, verifiers, or container (Podman and its configuration)
        framework: String,
        /// The interpreter that creates the venv
        #[arg(long, default_value = "python3")]
        python: String,
        /// Say what `setup container` would install and change, and change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// The container backend's images: bootstrap a base from Debian's packages, list the cache
    Images {
        #[command(subcommand)]
        action: images_cmd::ImagesAction,
    },
    /// Read trajectories made by other systems (ATIF) as Trajectory JSONL, optionally re-judged
    Import {
        #[command(subcommand)]
        format: import_cmd::ImportFormat,
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
        /// Most concurrent episode sessions (WebSocket and HTTP); more are refused (at least 1)
        #[arg(long, default_value_t = 64)]
        max_sessions: usize,
        /// Seconds without a message before a session is closed (more than 0, at most a year)
        #[arg(long, default_value_t = 300.0, allow_negative_numbers = true)]
        idle_timeout: f64,
        /// Largest accepted request body or WebSocket message, in bytes (at least 1)
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
    /// Export trajectories as raw, SFT, DPO or token rows: JSONL, Parquet or a Hugging Face
    /// dataset
    Export(export_cmd::ExportArgs),
    /// Play episodes and show them as readable replays
    Try {
        /// Environment URI
        uri: String,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Number of episodes (at most 10,000,000)
        #[arg(short = 'n', long, default_value_t = 1)]
        n: usize,
        /// Seed of the first episode
        #[arg(long, default_value_t = 0)]
        seed: i64,
    },
}

fn parse_tier(s: &str) -> Result<Tier, String> {
    Tier::parse(s).map_err(|e| e.to_string())
}

/// A flag's seconds as a duration, refused by name when not finite, not positive or over a
/// year.
fn seconds(flag: &str, value: f64) -> Result<Duration, Error> {
    nenyax::limits::seconds(value, false)
        .map_err(|want| Error::Config(format!("{flag} must be {want}, got {value}")))
}

/// A count flag that must be at least 1 (0 would silently mean 1).
fn at_least_one(flag: &str, value: usize) -> Result<(), Error> {
    if value == 0 {
        return Err(Error::Config(format!("{flag} must be at least 1")));
    }
    Ok(())
}

/// `-n` within what one batch holds.
fn episode_count(n: usize) -> Result<(), Error> {
    if n > MAX_EPISODES {
        return Err(Error::Config(format!(
            "-n must be at most {MAX_EPISODES}, got {n}; split a larger run into several, \
             continuing with --seed and writing with --append"
        )));
    }
    Ok(())
}

/// A thread count flag within 1 (or 0 where it means one per core) and the maximum.
fn thread_count(flag: &str, value: usize, zero_ok: bool) -> Result<(), Error> {
    if value > MAX_THREADS || (value == 0 && !zero_ok) {
        return Err(Error::Config(format!(
            "{flag} must be {} and at most {MAX_THREADS}, got {value}",
            if zero_ok {
                "0 (one per core)"
            } else {
                "at least 1"
            }
        )));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // The reader went away (`nenyax info URI | head -1`): nothing is left to tell it.
        Err(e) if stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when stderr is a pipe nobody reads (`2>&1 | true`).
            let _ = writeln!(std::io::stderr(), "error: {}: {e}", e.kind());
            ExitCode::from(2)
        }
    }
}

/// What an error writing to stdout says; [`stdout_closed`] looks for it.
const STDOUT: &str = "cannot write to stdout";

/// Write to stdout. `println!` panics when the reader has gone; this returns the error, which
/// the caller passes up (stopping a batch) and `main` ends on quietly.
fn out(args: std::fmt::Arguments) -> Result<(), Error> {
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(|e| Error::io(STDOUT, e))
}

/// Whether `e` is a write to a stdout whose reader has gone (a broken pipe).
fn stdout_closed(e: &Error) -> bool {
    matches!(e, Error::Io { context, source }
        if context == STDOUT && source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// `Ok` for a closed stdout, so that work after printing (files to write) still happens.
fn unless_stdout_closed(r: Result<(), Error>) -> Result<(), Error> {
    match r {
        Err(e) if stdout_closed(&e) => Ok(()),
        other => other,
    }
}

fn load(registry: &Registry, uri: &str) -> Result<Arc<dyn Environment>, Error> {
    registry.load(uri)
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    let registry = Registry::with_plugins();
    match cli.command {
        // Its own exit statuses: 1 for a run that failed, 2 for what the user wrote.
        Command::Train(args) => Ok(train_cmd::run(*args)),
        Command::Export(args) => export_cmd::run(args),
        Command::Plot { report, out } => {
            let text = nenyax::limits::read_text(report.as_ref(), &nenyax::limits::CONFIG_FILE)
                .map_err(|e| e.into_error(format!("reading {report}")))?;
            let r: nenyax::TrainReport = serde_json::from_str(&text)
                .map_err(|e| Error::Protocol(format!("{report} is not a training report: {e}")))?;
            let out = out.unwrap_or_else(|| {
                std::path::Path::new(&report)
                    .with_file_name("curve.svg")
                    .display()
                    .to_string()
            });
            std::fs::write(&out, r.svg()).map_err(|e| Error::io(format!("writing {out}"), e))?;
            outln!("{out}: {}", r.render().lines().last().unwrap_or_default())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Integrations { json } => integrations_cmd::run(json).map(|()| ExitCode::SUCCESS),
        Command::Plugins(args) => plugins_cmd::run(&args).map(|()| ExitCode::SUCCESS),
        Command::NewPlugin(args) => new_plugin_cmd::run(&args).map(|_| ExitCode::SUCCESS),
        Command::PluginCheck(args) => plugins_cmd::check(&args).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        Command::Search {
            hub,
            query,
            limit,
            json,
        } => hubs_cmd::search(&hub, &query, limit, json).map(|()| ExitCode::SUCCESS),
        Command::Fetch { hub, name } => hubs_cmd::fetch(&hub, &name).map(|()| ExitCode::SUCCESS),
        Command::Drivers { json } => {
            let list = registry.list();
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("serialises")
                )?;
            } else {
                for d in list {
                    let status = match &d.readiness {
                        Readiness::Ready => "ready".to_string(),
                        Readiness::Missing(m) => format!("missing: {m}"),
                    };
                    outln!(
                        "{:<14} {:<8} {}",
                        d.scheme,
                        if matches!(d.readiness, Readiness::Ready) {
                            "ready"
                        } else {
                            "-"
                        },
                        d.summary
                    )?;
                    if !matches!(d.readiness, Readiness::Ready) {
                        outln!("{:<14} {:<8} {status}", "", "")?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sandboxes { json, sweep } => {
            if sweep {
                let swept = nenyax::sandbox::sweep_containers()?;
                eprintln!(
                    "swept {} containers and {} images left by crashed runs{}",
                    swept.containers.len(),
                    swept.images.len(),
                    if swept.containers.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", swept.containers.join(", "))
                    }
                );
            }
            let list = nenyax::sandbox::backends();
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("serialises")
                )?;
            } else {
                for b in list {
                    outln!(
                        "{:<10} {:<10} {:<6} needs: {}",
                        b.name,
                        format!("{:?}", b.level).to_lowercase(),
                        if b.ready { "ready" } else { "-" },
                        b.needs
                    )?;
                    if let Some(w) = b.why_not {
                        outln!("{:<10} {:<10} {:<6} not ready: {w}", "", "", "")?;
                    } else if b.name == "container" {
                        if let Ok(e) = nenyax::sandbox::engine::Engine::detect() {
                            outln!(
                                "{:<10} {:<10} {:<6} engine: {} ({}), default image: {}",
                                "",
                                "",
                                "",
                                e.kind().name(),
                                e.program().display(),
                                nenyax::sandbox::default_image()
                            )?;
                        }
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
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialises")
                )?;
            } else {
                out(format_args!("{}", report.render()))?;
            }
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Info { uri } => {
            let env = load(&registry, &uri)?;
            outln!(
                "{}",
                serde_json::to_string_pretty(env.manifest()).expect("serialises")
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            uri,
            samples,
            threads,
            json,
            require,
        } => {
            at_least_one("--samples", samples)?;
            thread_count("--threads", threads, false)?;
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
                        outln!(
                            "{}",
                            serde_json::to_string_pretty(&r.to_json()).expect("serialises")
                        )?;
                    }
                    return Err(e);
                }
            };
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&report.to_json()).expect("serialises")
                )?;
            } else {
                out(format_args!("{}", report.render()))?;
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
            fail_on_error,
            episodes,
            telemetry,
        } => {
            check_policy_args(&policy)?;
            episode_count(n)?;
            thread_count("--concurrency", concurrency, true)?;
            if max_steps == Some(0) {
                return Err(Error::Config(
                    "--max-steps must be at least 1 (leave it out for the environment's default)"
                        .into(),
                ));
            }
            let env = load(&registry, &uri)?;
            let policy_desc = policy.describe();
            let policy = resolve_policy(&policy, env.as_ref())?;
            let jobs = plan(env.as_ref(), n, seed)?;
            // No more threads than episodes: each idle one is only start-up time.
            let mut runner = Runner::new(if concurrency == 0 {
                0
            } else {
                concurrency.min(n.max(1))
            })?;
            let run_info = nenyax::telemetry::RunInfo {
                kind: "run".into(),
                name: uri.clone(),
                params: telemetry_args::params(&[
                    ("uri", json!(uri)),
                    ("policy", json!(policy_desc)),
                    ("n", json!(n)),
                    ("seed", json!(seed)),
                    ("concurrency", json!(runner.threads())),
                    ("max_steps", json!(max_steps)),
                ]),
            };
            let tel = telemetry_args::open(telemetry.as_deref(), &[], run_info)?;
            if let Some(t) = &tel {
                runner = runner.telemetry(t.clone());
            }
            let mut batch = tel.map(nenyax::telemetry::BatchMetrics::new);
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
            let mut tally = Tally::default();
            let t0 = Instant::now();
            let ran = runner.run(&env, &policy, jobs, max_steps, |i, traj| {
                tally.add(&traj);
                if let Some(b) = batch.as_mut() {
                    b.add(&traj);
                }
                if let Some(w) = writer.as_mut() {
                    writeln!(w, "{}", traj.to_json())
                        .map_err(|e| Error::io("cannot write --out", e))?;
                }
                if episodes {
                    outln!("{}", episode_line(i, &traj))?;
                }
                Ok(())
            });
            // A closed stdout stops the per-episode lines, not the trajectories already run.
            if let Some(mut w) = writer {
                w.flush().map_err(|e| Error::io("cannot write --out", e))?;
            }
            if let Some(b) = batch {
                let summary = json!({"uri": uri, "n": n, "seed": seed, "threads": runner.threads(),
                    "summary": tally.summary(), "out": out, "error": ran.as_ref().err().map(|e| e.to_string())});
                b.finish(summary, ran.is_ok() && tally.errors < n.max(1));
            }
            ran?;
            let secs = t0.elapsed().as_secs_f64();
            let threads = runner.threads();
            outln!(
                "{uri}: {}; {:.0} rollouts/s on {}{}",
                tally.summary(),
                n as f64 / secs.max(1e-9),
                count(threads, "thread"),
                out.as_ref()
                    .map(|p| format!(", written to {p}"))
                    .unwrap_or_default()
            )?;
            if let Some(e) = &tally.first_error {
                eprintln!("first error: {e}");
            }
            if fail_on_error && tally.errors > 0 {
                eprintln!(
                    "{} of {} failed (--fail-on-error)",
                    tally.errors,
                    count(n, "episode")
                );
                return Ok(ExitCode::from(1));
            }
            Ok(if n > 0 && tally.errors == n {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Setup {
            framework, dry_run, ..
        } if framework == "container" => images_cmd::setup_container(dry_run),
        Command::Setup {
            framework,
            python,
            dry_run,
        } => {
            if dry_run {
                return Err(Error::Config(
                    "--dry-run is for `nenyax setup container`; the framework setups only \
                     install into the managed venv"
                        .into(),
                ));
            }
            setup(&framework, &python)
        }
        Command::Images { action } => images_cmd::images(action),
        Command::Import { format } => import_cmd::run(&registry, format),
        Command::Serve {
            uri,
            host,
            port,
            max_sessions,
            idle_timeout,
            max_message_bytes,
        } => {
            let idle_timeout = seconds("--idle-timeout", idle_timeout)?;
            at_least_one("--max-sessions", max_sessions)?;
            at_least_one("--max-message-bytes", max_message_bytes)?;
            let env = load(&registry, &uri)?;
            let opts = nenyax::ServeOptions {
                host,
                port,
                max_sessions,
                idle_timeout,
                max_message_bytes,
                ..nenyax::ServeOptions::default()
            };
            let server = nenyax::Server::start(env, opts)?;
            // The first line says where it listens (scripts and tests read it).
            outln!(
                "nenyax serve: {uri} at {} (OpenEnv: /ws, /reset, /step, /state, /schema)",
                server.url()
            )?;
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
            check_policy_args(&policy)?;
            episode_count(n)?;
            let env = load(&registry, &uri)?;
            let policy = resolve_policy(&policy, env.as_ref())?;
            let jobs = plan(env.as_ref(), n, seed)?;
            let runner = Runner::new(1)?.progress(false);
            let mut failed = 0;
            runner.run(&env, &policy, jobs, None, |_, traj| {
                failed += usize::from(traj.error.is_some());
                out(format_args!("{}", replay::render(&traj)))
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
                "unknown framework `{framework}`; nenyax setup knows reasoning-gym, gymnasium, verifiers and container"
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
    outln!("{requirement} is installed in {venv_str}; the bridge uses {venv_python} unless NENYAX_PYTHON is set")?;
    Ok(ExitCode::SUCCESS)
}
