//! The interpreter of a venv made by scripts/setup_integrations.sh (`NENYAX_<NAME>_PYTHON`,
//! e.g. NENYAX_PHOENIX_PYTHON for .venv-phoenix). Without it a test skips, saying why; with
//! NENYAX_REQUIRE_INTEGRATIONS=1 (scripts/test.sh, so CI) it fails instead.

/// The venv's python for `name` (the requirements file's stem), or `None` to skip.
#[allow(dead_code)]
pub fn python(name: &str) -> Option<String> {
    let var = format!("NENYAX_{}_PYTHON", name.to_uppercase().replace('-', "_"));
    match std::env::var(&var) {
        Ok(p) if std::path::Path::new(&p).exists() => Some(p),
        other => {
            let why = match other {
                Ok(p) => format!("{var}={p} does not exist"),
                Err(_) => format!("{var} is not set (scripts/setup_integrations.sh {name})"),
            };
            if std::env::var("NENYAX_REQUIRE_INTEGRATIONS").as_deref() == Ok("1") {
                panic!("NENYAX_REQUIRE_INTEGRATIONS=1 but {why}");
            }
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// Run `script` in `py` with `args` and parse what it prints as JSON; a failing script fails the
/// test with its stderr.
#[allow(dead_code)]
pub fn python_json(py: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
