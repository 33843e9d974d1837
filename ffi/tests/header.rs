//! include/nenyax.h is generated from this crate, committed, and must not drift.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn generate() -> String {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("utf-8 header")
}

#[test]
fn committed_header_matches_a_fresh_generation() {
    let fresh = generate();
    let path = root().join("include/nenyax.h");
    if std::env::var_os("NENYAX_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/nenyax.h");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/nenyax.h is out of date with ffi/: regenerate it with \
         `NENYAX_BLESS=1 cargo test -p nenyax-ffi --test header` and commit the result"
    );
}

#[test]
fn version_macros_match_cargo_toml() {
    let header = std::fs::read_to_string(root().join("include/nenyax.h")).expect("header");
    let define = |name: &str| -> String {
        header
            .lines()
            .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("#define {name} missing"))
            .trim()
            .to_string()
    };
    let part = |s: &str| s.parse::<u32>().unwrap();
    let (major, minor, patch) = (
        part(env!("CARGO_PKG_VERSION_MAJOR")),
        part(env!("CARGO_PKG_VERSION_MINOR")),
        part(env!("CARGO_PKG_VERSION_PATCH")),
    );
    assert_eq!(part(&define("NENYAX_VERSION_MAJOR")), major);
    assert_eq!(part(&define("NENYAX_VERSION_MINOR")), minor);
    assert_eq!(part(&define("NENYAX_VERSION_PATCH")), patch);
    // The packed number uses every part (a bug rustls-ffi shipped: PATCH was never used).
    assert_eq!(
        part(&define("NENYAX_VERSION_NUMBER")),
        major * 1_000_000 + minor * 1_000 + patch
    );
    assert_eq!(
        define("NENYAX_VERSION_STRING"),
        format!("\"{}\"", env!("CARGO_PKG_VERSION"))
    );
}
