//! `nenyax import atif PATH... -o OUT.jsonl [--rejudge URI | --judge SPEC]`: ATIF trajectories
//! from other systems (NeMo Gym exports, Harbor trials) as Nenyax Trajectory JSONL, optionally
//! re-judged.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use nenyax::{atif, Error, Registry, TaskRef};

/// `nenyax import ...`.
#[derive(Subcommand)]
pub enum ImportFormat {
    /// ATIF v1.x: .json files, export folders with a manifest.jsonl, Harbor trial folders
    Atif {
        /// ATIF files or folders
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Where to write the Trajectory JSONL ("-" for stdout)
        #[arg(short, long)]
        out: PathBuf,
        /// Re-judge with this environment's own judge by replaying the recorded replies
        #[arg(long, conflicts_with = "judge")]
        rejudge: Option<String>,
        /// The task to replay (default: each trajectory's own task)
        #[arg(long, requires = "rejudge")]
        task: Option<String>,
        /// With --rejudge: answer with the final reply only (for single-turn judges)
        #[arg(long, requires = "rejudge")]
        final_answer: bool,
        /// Re-judge with a judge spec (JSON), e.g. '{"type": "regex", "pattern": "42"}' or '{"type": "exact"}' (the task's `answer`)
        #[arg(long)]
        judge: Option<String>,
    },
}

/// Run `nenyax import`.
pub fn run(registry: &Registry, format: ImportFormat) -> Result<ExitCode, Error> {
    let ImportFormat::Atif {
        paths,
        out,
        rejudge,
        task,
        final_answer,
        judge,
    } = format;
    let replay = if final_answer {
        atif::Replay::Final
    } else {
        atif::Replay::All
    };
    let mut trajs = Vec::new();
    for p in &paths {
        trajs.extend(atif::import_path(p)?);
    }
    if let Some(uri) = &rejudge {
        let env = registry.load(uri)?;
        let task = task.map(TaskRef::new);
        trajs = trajs
            .iter()
            .map(|t| atif::rejudge(t, &env, task.clone(), replay))
            .collect();
    }
    if let Some(spec) = &judge {
        let j = nenyax::judges::judge_from_json(spec)?;
        trajs = trajs
            .iter()
            .map(|t| atif::rejudge_with(t, j.as_ref()))
            .collect::<Result<_, _>>()?;
    }
    let mut text = String::new();
    for t in &trajs {
        text.push_str(&t.to_json());
        text.push('\n');
    }
    if out.as_os_str() == "-" {
        std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| Error::io("write stdout", e))?;
    } else {
        std::fs::write(&out, text).map_err(|e| Error::io(format!("write {}", out.display()), e))?;
    }
    let failed = trajs
        .iter()
        .filter(|t| t.metadata.contains_key("rejudge_error"))
        .count();
    let scored: Vec<f64> = trajs.iter().filter_map(|t| t.score()).collect();
    let mean = scored.iter().sum::<f64>() / scored.len().max(1) as f64;
    eprintln!(
        "imported {} trajectories ({} judged, mean score {mean:.3}){}",
        trajs.len(),
        scored.len(),
        if failed > 0 {
            format!("; {failed} could not be re-judged (see metadata.rejudge_error)")
        } else {
            String::new()
        }
    );
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
