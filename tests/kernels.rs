//! The CUDA kernels without a GPU: their CUDA C compiles with NVRTC (where NVRTC is installed),
//! and the same source, run on the CPU by tests/kernels/emulate.cpp with threads standing in
//! for CUDA threads, matches every golden case. The GPU runs of the same cases are in
//! tests/pg_golden.rs and scripts/gpu_check.sh.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_kernels_compile_with_nvrtc() {
    match nenyax::kernels::compile_ptx("compute_90") {
        Ok(ptx) => {
            for entry in [
                "nx_row_lens",
                "nx_totals",
                "nx_pg_loss_f32",
                "nx_pg_loss_f64",
                "nx_pg_finalize",
            ] {
                assert!(
                    ptx.contains(&format!(".entry {entry}(")),
                    "{entry} is in the PTX"
                );
            }
            println!("NVRTC compiled the kernels: {} bytes of PTX", ptx.len());
        }
        Err(e) if e.kind() == "CudaUnavailable" => {
            // CI installs NVRTC (scripts/test.sh) and sets this, so there it cannot skip.
            assert!(
                std::env::var_os("NENYAX_REQUIRE_NVRTC").is_none(),
                "NENYAX_REQUIRE_NVRTC is set but: {e}"
            );
            println!("skipped: {e}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_kernels_match_every_golden_case_in_emulation() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernels_emulated");
    let cc = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let status = Command::new(&cc)
        .args([
            "-std=c++17",
            "-O1",
            "-pthread",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-I")
        .arg(root().join("core/src/kernels"))
        .arg("-I")
        .arg(root().join("ffi/tests/c"))
        .arg(root().join("tests/kernels/emulate.cpp"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} (a C++17 compiler is needed): {e}"));
    assert!(
        status.success(),
        "tests/kernels/emulate.cpp did not compile"
    );
    let run = Command::new(&out).output().expect("run the emulator");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    print!("{stdout}");
    assert!(run.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("35 golden cases"), "{stdout}");
    assert!(stdout.contains(", 0 failed"), "{stdout}");
}
