//! Running the built `nenyax` binary from a test and reading what it printed.

use std::process::{Command, Output};

/// Run `nenyax args…` to completion; backtraces off so a panic shows as one line.
pub fn nenyax(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the nenyax binary runs")
}

/// What the command printed on stdout.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What the command printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Write `text` to a file `name` in a new temporary folder; the folder lives as long as the
/// returned guard.
pub fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("the file is written");
    (dir, path)
}
