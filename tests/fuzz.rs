//! The fuzz harness (docs/fuzzing.md): replays every input kept under tests/fuzz/corpus/<target>/
//! and tests/fuzz/regressions/<target>/ on every `cargo test`, and with `NENYAX_FUZZ_SECONDS=N`
//! also mutates them for N seconds (split across the targets) looking for panics, hangs, memory
//! blow-ups and broken round trips.
//!
//! Inputs run in a child process (this binary re-executed), so a hang, an abort or an
//! out-of-memory kill is seen and survived by the parent instead of ending the run. The child's
//! address space is capped, so an allocation that runs away fails there instead of on the host.
//!
//! `cargo test --test fuzz [TARGET...]` replays (optionally only the named targets);
//! `NENYAX_FUZZ_SECONDS=60 cargo test --test fuzz` fuzzes; `NENYAX_FUZZ_SEED` repeats a run's
//! mutations; `NENYAX_FUZZ_SAVE=1` keeps inputs that reached new behaviour in the corpus.

#[path = "fuzz/engine.rs"]
mod engine;
#[path = "fuzz/mutate.rs"]
mod mutate;
#[path = "fuzz/targets.rs"]
mod targets;

fn main() {
    let mut targets = targets::all();
    targets.push(engine::self_check_target());
    if let Ok(name) = std::env::var(engine::CHILD_ENV) {
        engine::child(&targets, &name);
    }
    std::process::exit(engine::parent(&targets));
}
