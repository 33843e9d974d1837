use nenyax::train::{learner, LearnerParts};
use nenyax::{load, train, TrainOptions};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let env = load(&args[1]).unwrap();
    let cfg: serde_json::Value = serde_json::from_str(&args[2]).unwrap();
    let opts: TrainOptions = serde_json::from_str(&args[3]).unwrap();
    let mut l = learner(
        &cfg,
        LearnerParts {
            env: Some(env.clone()),
            ..LearnerParts::default()
        },
    )
    .unwrap();
    let report = train(&env, l.as_mut(), &opts).unwrap();
    println!("{}", report.render());
}
