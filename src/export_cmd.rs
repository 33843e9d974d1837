//! `nenyax export`: trajectories (JSONL of `nenyax run --out`) as raw, SFT, DPO or token rows in
//! JSONL, Parquet or a Hugging Face dataset folder.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use nenyax::export::{export_file, ExportOptions, Format, RowKind};
use nenyax::Error;

/// `nenyax export IN.jsonl ...`.
#[derive(Args)]
pub struct ExportArgs {
    /// Trajectories as JSON lines (from `nenyax run --out`)
    input: PathBuf,
    /// Output format: jsonl, parquet, hf (a Hugging Face dataset folder) or atif
    #[arg(long, default_value = "jsonl")]
    to: String,
    /// Rows: raw (one per trajectory), sft, dpo (best vs worst per task) or tokens (training
    /// traces: token ids, logprobs, loss mask)
    #[arg(long, default_value = "raw")]
    rows: String,
    /// SFT keeps successful trajectories scoring at least this
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    min_score: f64,
    /// Output file (folder for --to hf) [default: next to IN, e.g. runs.sft.parquet]
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// Upload the dataset folder as a private Hub dataset OWNER/NAME (needs HF_TOKEN, --to hf)
    #[arg(long)]
    push_to_hub: Option<String>,
}

/// Run `nenyax export`, printing one line: rows written and where.
pub fn run(args: ExportArgs) -> Result<ExitCode, Error> {
    let opts = ExportOptions {
        to: Format::parse(&args.to)?,
        rows: RowKind::parse(&args.rows)?,
        min_score: args.min_score,
        out: args.out,
        push_to_hub: args.push_to_hub,
    };
    let summary = export_file(&args.input, &opts)?;
    if opts.to == Format::Atif {
        outln!(
            "wrote {} ATIF documents and manifest.jsonl to {}",
            summary.rows,
            summary.out
        )?;
    } else {
        outln!("{}", summary.line(opts.rows))?;
    }
    Ok(ExitCode::SUCCESS)
}
