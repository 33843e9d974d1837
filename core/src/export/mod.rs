//! Exports of judged trajectories as training data: raw, SFT, DPO or token-level rows, written
//! as JSONL, Parquet or a Hugging Face dataset folder (optionally pushed to the Hub).
//!
//! Trajectories stream from JSONL one line at a time; only DPO holds anything back (each
//! group's best and worst trajectory). See docs/exports.md.
//!
//! ```no_run
//! use nenyax::export::{export_file, ExportOptions, Format, RowKind};
//!
//! let opts = ExportOptions { to: Format::Parquet, rows: RowKind::Sft, ..ExportOptions::default() };
//! let summary = export_file("runs.jsonl".as_ref(), &opts).unwrap();
//! println!("{} rows in {}", summary.rows, summary.out);
//! ```

mod hub;
#[cfg(feature = "export")]
mod parquet;
mod rows;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::contract::Trajectory;
use crate::error::{Error, Result};

pub use hub::{card, push_to_hub, DATA_FILE, TOKEN_VAR};
#[cfg(feature = "export")]
pub use parquet::ParquetWriter;
pub use rows::{to_rows, Col, Row, RowKind, RowMaker};

/// Where rows go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One JSON object per line.
    #[default]
    Jsonl,
    /// One Parquet file.
    Parquet,
    /// A Hugging Face dataset folder: `data/train-00000-of-00001.parquet` and a README card.
    Hf,
    /// Agent Trajectory Interchange Format (not part of this module yet).
    Atif,
}

impl Format {
    /// Every format, by name.
    pub const NAMES: [&'static str; 4] = ["jsonl", "parquet", "hf", "atif"];

    /// The format named `s`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "jsonl" => Format::Jsonl,
            "parquet" => Format::Parquet,
            "hf" => Format::Hf,
            "atif" => Format::Atif,
            _ => {
                return Err(Error::Config(format!(
                    "unknown export format `{s}`: use one of {}",
                    Self::NAMES.join(", ")
                )))
            }
        })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// What to export and where.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportOptions {
    /// The output format.
    pub to: Format,
    /// The rows.
    pub rows: RowKind,
    /// SFT keeps trajectories scoring at least this.
    pub min_score: f64,
    /// The output file or folder (default: next to the input, named after the rows).
    pub out: Option<PathBuf>,
    /// Upload the dataset folder to this Hub repository (needs `HF_TOKEN`; `to` must be `hf`).
    pub push_to_hub: Option<String>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            to: Format::Jsonl,
            rows: RowKind::Raw,
            min_score: 1.0,
            out: None,
            push_to_hub: None,
        }
    }
}

impl ExportOptions {
    /// Options from a JSON object `{"to", "rows", "min_score", "out", "push_to_hub"}`, every
    /// key optional; an unknown key or a wrong type is a typed error naming it.
    pub fn from_json(v: &Value) -> Result<Self> {
        let obj = v
            .as_object()
            .ok_or_else(|| Error::Config("export options must be a JSON object".into()))?;
        let mut o = ExportOptions::default();
        let text = |k: &str, v: &Value| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| Error::Config(format!("export option `{k}` must be a string")))
        };
        for (k, v) in obj {
            if v.is_null() {
                continue;
            }
            match k.as_str() {
                "to" => o.to = Format::parse(&text(k, v)?)?,
                "rows" => o.rows = RowKind::parse(&text(k, v)?)?,
                "min_score" => {
                    o.min_score = v.as_f64().ok_or_else(|| {
                        Error::Config("export option `min_score` must be a number".into())
                    })?
                }
                "out" => o.out = Some(text(k, v)?.into()),
                "push_to_hub" => o.push_to_hub = Some(text(k, v)?),
                _ => {
                    return Err(Error::Config(format!(
                        "unknown export option `{k}`: use to, rows, min_score, out, push_to_hub"
                    )))
                }
            }
        }
        Ok(o)
    }

    /// The default output next to `input`: `runs.jsonl` gives `runs.sft.parquet`, `runs.sft/`.
    pub fn default_out(&self, input: &Path) -> PathBuf {
        let stem = input.file_stem().unwrap_or_default().to_string_lossy();
        let name = match self.to {
            Format::Hf => format!("{stem}.{}", self.rows.name()),
            Format::Atif => format!("{stem}.atif"),
            to => format!("{stem}.{}.{}", self.rows.name(), to.name()),
        };
        input.with_file_name(name)
    }

    fn check(&self) -> Result<()> {
        if self.to == Format::Atif && self.rows != RowKind::Raw {
            return Err(Error::Config(format!(
                "ATIF documents are whole trajectories, not {} rows: leave out --rows (or use \
                 --rows raw) with --to atif",
                self.rows.name()
            )));
        }
        if self.push_to_hub.is_some() {
            if self.to != Format::Hf {
                return Err(Error::Config(
                    "--push-to-hub uploads a dataset folder: use it with --to hf".into(),
                ));
            }
            hub::token()?;
        }
        Ok(())
    }
}

/// What an export did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Rows written.
    pub rows: usize,
    /// Trajectories read.
    pub trajectories: usize,
    /// Trajectories (or DPO groups) left out, by reason.
    pub skipped: BTreeMap<String, usize>,
    /// The file or folder written.
    pub out: String,
    /// The Hub repository's URL, when pushed.
    pub pushed: Option<String>,
}

impl Summary {
    /// One line for people: what was written where, and what was left out.
    pub fn line(&self, rows: RowKind) -> String {
        let mut s = format!(
            "wrote {} {} rows from {} trajectories to {}",
            self.rows,
            rows.name(),
            self.trajectories,
            self.out
        );
        if !self.skipped.is_empty() {
            let why: Vec<String> = self
                .skipped
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            s += &format!(" (skipped: {})", why.join(", "));
        }
        if let Some(url) = &self.pushed {
            s += &format!("; pushed to {url}");
        }
        s
    }
}

enum Writer {
    Jsonl(BufWriter<File>),
    #[cfg(feature = "export")]
    Parquet(ParquetWriter),
}

impl Writer {
    fn create(path: &Path, to: Format, kind: RowKind) -> Result<Self> {
        let file =
            File::create(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        match to {
            Format::Jsonl => Ok(Writer::Jsonl(BufWriter::new(file))),
            #[cfg(feature = "export")]
            _ => Ok(Writer::Parquet(ParquetWriter::new(file, kind)?)),
            #[cfg(not(feature = "export"))]
            _ => {
                let _ = kind;
                Err(Error::Config(
                    "Parquet and hf exports need nenyax built with the `export` feature; \
                     --to jsonl works without it"
                        .into(),
                ))
            }
        }
    }

    fn write(&mut self, row: &Row) -> Result<()> {
        match self {
            Writer::Jsonl(w) => serde_json::to_writer(&mut *w, row)
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"))
                .map_err(|e| Error::io("writing JSONL rows", e)),
            #[cfg(feature = "export")]
            Writer::Parquet(w) => w.write(row),
        }
    }

    fn finish(self) -> Result<()> {
        match self {
            Writer::Jsonl(mut w) => w.flush().map_err(|e| Error::io("writing JSONL rows", e)),
            #[cfg(feature = "export")]
            Writer::Parquet(w) => w.finish(),
        }
    }
}

/// One ATIF v1.7 document per trajectory plus NeMo Gym's manifest, in the folder `out`
/// ([`crate::atif::export_jsonl`]).
fn export_atif(input: &Path, out: &Path) -> Result<Summary> {
    let n = crate::atif::export_jsonl(input, out, &crate::atif::ExportOptions::default())?;
    Ok(Summary {
        rows: n,
        trajectories: n,
        skipped: BTreeMap::new(),
        out: out.display().to_string(),
        pushed: None,
    })
}

/// Export the trajectories of the JSONL file `input`.
pub fn export_file(input: &Path, opts: &ExportOptions) -> Result<Summary> {
    opts.check()?;
    let out = opts.out.clone().unwrap_or_else(|| opts.default_out(input));
    if opts.to == Format::Atif {
        return export_atif(input, &out);
    }
    let file =
        File::open(input).map_err(|e| Error::io(format!("reading {}", input.display()), e))?;
    export_reader(
        BufReader::new(file),
        &input.display().to_string(),
        &out,
        opts,
    )
}

/// Export the JSONL trajectories read from `input` (named `source` in errors and the dataset
/// card) into `out`, whatever `opts.out` says.
pub fn export_reader(
    mut input: impl BufRead,
    source: &str,
    out: &Path,
    opts: &ExportOptions,
) -> Result<Summary> {
    opts.check()?;
    if opts.to == Format::Atif {
        // The ATIF writer reads a file (it numbers tasks and rollouts over the whole input).
        let mut tmp = tempfile::NamedTempFile::new()
            .map_err(|e| Error::io("creating a temporary file for the ATIF export", e))?;
        std::io::copy(&mut input, &mut tmp)
            .map_err(|e| Error::io(format!("reading {source}"), e))?;
        return export_atif(tmp.path(), out);
    }
    let mut maker = RowMaker::new(opts.rows, opts.min_score)?;
    let file = match opts.to {
        Format::Hf => {
            let data = out.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| Error::io(format!("creating {}", data.display()), e))?;
            out.join(DATA_FILE)
        }
        _ => out.to_path_buf(),
    };
    // Written aside and renamed at the end, so a failed export leaves no half file behind.
    let partial = PathBuf::from(format!("{}.partial", file.display()));
    let result = (|| {
        let mut w = Writer::create(&partial, opts.to, opts.rows)?;
        let mut rows = 0;
        let mut line = String::new();
        let mut n = 0;
        loop {
            line.clear();
            let read = input
                .read_line(&mut line)
                .map_err(|e| Error::io(format!("reading {source} line {}", n + 1), e))?;
            if read == 0 {
                break;
            }
            n += 1;
            if line.trim().is_empty() {
                continue;
            }
            let t: Trajectory = serde_json::from_str(&line).map_err(|e| {
                Error::Protocol(format!(
                    "{source} line {n} is not a trajectory (JSONL of `nenyax run --out`): {e}"
                ))
            })?;
            for r in maker.push(t) {
                w.write(&r)?;
                rows += 1;
            }
        }
        for r in maker.finish() {
            w.write(&r)?;
            rows += 1;
        }
        w.finish()?;
        Ok(rows)
    })();
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &file)
        .map_err(|e| Error::io(format!("moving the export to {}", file.display()), e))?;
    if opts.to == Format::Hf {
        let readme = out.join("README.md");
        std::fs::write(&readme, card(opts.rows, rows, source))
            .map_err(|e| Error::io(format!("writing {}", readme.display()), e))?;
    }
    let pushed = match &opts.push_to_hub {
        Some(repo) => Some(push_to_hub(out, repo)?),
        None => None,
    };
    Ok(Summary {
        rows,
        trajectories: maker.seen(),
        skipped: maker.skipped.clone(),
        out: out.display().to_string(),
        pushed,
    })
}
