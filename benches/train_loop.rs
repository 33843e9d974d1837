//! train() with the in-context learner: rounds per second on a define environment with a
//! scripted chat model, the same as benches/python_train.py runs in the Python reference (see
//! benches/train_compare.sh). Not a criterion bench: one train() call is many rollouts.
//!
//!     cargo bench --bench train_loop -- TASKS.toml ROUNDS REPEATS

use std::sync::Arc;
use std::time::Instant;

use nenyax::train::{learner, LearnerParts};
use nenyax::{load, train, TrainOptions};

// The scripted model of benches/python_train.py (the tests' "learner" model): every answer
// known, the answer tags used only when the prompt shows a worked example (else on 3 questions
// in 10).
#[path = "../tests/support/scripted_model.rs"]
mod scripted_model;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // `cargo test --all-targets` runs this without arguments: a small smoke run on tasks of
    // its own, so the bench keeps compiling and working.
    let smoke;
    let [path, rounds, repeats] = match &args[..] {
        [p, r, n] => [p.clone(), r.clone(), n.clone()],
        [] => {
            smoke = tempfile::NamedTempFile::new().unwrap();
            let mut text = String::from(
                "name = \"arith\"\n[judge]\ntype = \"exact\"\nfield = \"answer\"\nextract = \"answer_tag\"\n",
            );
            for i in 0..40 {
                text += &format!(
                    "[[tasks]]\nprompt = \"What is {i} + 7? Answer inside <answer></answer> tags.\"\nanswer = \"{}\"\n",
                    i + 7
                );
            }
            std::fs::write(smoke.path(), text).unwrap();
            [smoke.path().display().to_string(), "2".into(), "1".into()]
        }
        _ => {
            eprintln!("usage: cargo bench --bench train_loop -- TASKS.toml ROUNDS REPEATS");
            std::process::exit(2);
        }
    };
    let (rounds, repeats): (usize, usize) = (rounds.parse().unwrap(), repeats.parse().unwrap());
    let env = load(&format!("define:{path}")).unwrap();
    let threads: usize = std::env::var("CONCURRENCY").map_or(1, |v| v.parse().unwrap());
    for _ in 0..repeats {
        let mut l = learner(
            &serde_json::json!({"use": "incontext", "shots": 3}),
            LearnerParts {
                model: Some(Arc::new(scripted_model::scripted(false))),
                ..LearnerParts::default()
            },
        )
        .unwrap();
        let opts = TrainOptions {
            rounds,
            group_size: 4,
            batch: 8,
            concurrency: threads,
            progress: false,
            ..TrainOptions::default()
        };
        let t0 = Instant::now();
        let r = train(&env, l.as_mut(), &opts).unwrap();
        let wall = t0.elapsed().as_secs_f64();
        println!(
            "{}",
            serde_json::json!({"side": "rust", "rounds": rounds, "threads": threads,
                "wall_s": wall, "baseline": r.baseline, "final": r.final_eval,
                "overhead": r.overhead_fraction()})
        );
    }
}
