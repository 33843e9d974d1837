//! Hugging Face dataset folders (the layout the Hub and `datasets.load_dataset(folder)` read) and
//! their upload with `huggingface_hub`.

use std::path::Path;
use std::process::Command;

use super::rows::RowKind;
use crate::error::{Error, Result};

/// Where the data file sits inside a dataset folder.
pub const DATA_FILE: &str = "data/train-00000-of-00001.parquet";

/// The dataset card: YAML `configs` naming the data files, then what the columns hold.
pub fn card(kind: RowKind, rows: usize, source: &str) -> String {
    let columns: String = kind
        .columns()
        .iter()
        .map(|(n, c)| format!("| `{n}` | {} |\n", c.type_name()))
        .collect();
    format!(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n\
         tags:\n- nenyax\n- {kind}\n---\n\n# {kind} rows exported by Nenyax\n\n\
         {rows} rows written by `nenyax export --rows {kind}` (nenyax {version}) from `{source}`.\n\
         Columns marked JSON hold JSON text (messages in the OpenAI chat shape).\n\n\
         | column | type |\n|---|---|\n{columns}",
        kind = kind.name(),
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// The environment variable holding the Hub token.
pub const TOKEN_VAR: &str = "HF_TOKEN";

/// The token, or a typed error saying how to provide one.
pub fn token() -> Result<String> {
    match std::env::var(TOKEN_VAR) {
        Ok(t) if !t.trim().is_empty() => Ok(t),
        _ => Err(Error::Config(format!(
            "pushing to the Hugging Face Hub needs a token: set {TOKEN_VAR} (a write token from \
             https://huggingface.co/settings/tokens)"
        ))),
    }
}

const UPLOAD: &str = r#"
import sys
try:
    from huggingface_hub import HfApi
except ImportError:
    sys.exit("huggingface_hub is not installed for this Python: pip install huggingface_hub")
folder, repo, token = sys.argv[1], sys.argv[2], sys.stdin.readline().strip()
try:
    api = HfApi(token=token)
    url = api.create_repo(repo, repo_type="dataset", private=True, exist_ok=True)
    api.upload_folder(folder_path=folder, repo_id=repo, repo_type="dataset",
                      commit_message="nenyax export")
    print(url)
except Exception as e:
    msg = " ".join(str(e).split())
    sys.exit(f"{type(e).__name__}: {msg[:400]}")
"#;

/// Upload `folder` as the private dataset `repo` with `huggingface_hub` (run by `NENYAX_PYTHON`
/// or `python3`; `HF_ENDPOINT` points it elsewhere); returns the repository's URL.
pub fn push_to_hub(folder: &Path, repo: &str) -> Result<String> {
    use std::io::Write;
    let token = token()?;
    if repo.split('/').count() > 2 || repo.trim().is_empty() || repo.contains(char::is_whitespace) {
        return Err(Error::Config(format!(
            "--push-to-hub wants a dataset repository as NAME or OWNER/NAME, got `{repo}`"
        )));
    }
    let python = std::env::var("NENYAX_PYTHON").unwrap_or_else(|_| "python3".into());
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let fail = |message: String| Error::Endpoint {
        url: format!("{}/datasets/{repo}", endpoint.trim_end_matches('/')),
        message,
    };
    let mut child = Command::new(&python)
        .args(["-c", UPLOAD])
        .arg(folder)
        .arg(repo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot start {python} for the upload: {e}")))?;
    // The token goes over stdin so that it never shows in the process list.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{token}");
    }
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!("the upload process failed: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().rev().find(|l| !l.trim().is_empty());
        return Err(fail(format!(
            "upload failed: {}",
            line.unwrap_or("the upload process exited without saying why")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
