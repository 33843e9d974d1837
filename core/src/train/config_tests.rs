//! Unit tests of the run config: normalisation, located errors, overrides.

use super::*;

fn err(text: &str) -> String {
    RunConfig::from_toml(text, "run.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn a_full_config_normalises() {
    let c = RunConfig::from_toml(
        "[env]\nuri = \"builtin:arithmetic\"\njudge = \"exact\"\n\
         [model]\nbase_url = \"http://127.0.0.1:8000/v1\"\nname = \"m\"\ntemperature = 0.5\n\
         [learner]\nuse = \"incontext\"\nshots = 2\n\
         [train]\nrounds = 3\ngroup_size = 2\n\
         [output]\ndir = \"out\"\nplot = true\n",
        "run.toml",
    )
    .unwrap();
    let j = c.to_json();
    assert_eq!(j["env"]["uri"], "builtin:arithmetic");
    assert_eq!(j["env"]["judge"]["type"], "exact");
    assert_eq!(j["model"]["model"], "m");
    assert_eq!(j["model"]["params"]["temperature"], 0.5);
    assert_eq!(j["learner"]["shots"], 2);
    assert_eq!(j["train"]["rounds"], 3);
    assert_eq!(j["train"]["batch"], 8);
    assert_eq!(j["output"]["plot"], true);
    assert_eq!(j["output"]["report_json"], true);
    // The model spec is what EndpointSpec reads.
    serde_json::from_value::<EndpointSpec>(j["model"].clone()).unwrap();
}

#[test]
fn unknown_sections_and_keys_name_the_file_line_and_key() {
    let e = err("[env]\nuri = \"builtin:arithmetic\"\n[trian]\nrounds = 2\n");
    assert!(e.starts_with("run.toml:3: "), "{e}");
    assert!(
        e.contains("`trian`") && e.contains("did you mean `train`"),
        "{e}"
    );
    let e = err("[env]\nuri = \"builtin:arithmetic\"\n[train]\nrounds = 2\ngroup_szie = 4\n");
    assert!(e.starts_with("run.toml:5: "), "{e}");
    assert!(e.contains("did you mean `group_size`"), "{e}");
    let e = err("env = \"x:y\"\n[train]\nrounds = \"many\"\n");
    assert!(
        e.starts_with("run.toml:3: ") && e.contains("`rounds`"),
        "{e}"
    );
    let e = err("[model]\nprovider = \"vlm\"\nname = \"m\"\n");
    assert!(
        e.starts_with("run.toml:2: ") && e.contains("did you mean `vllm`"),
        "{e}"
    );
    let e = err("[model]\nbase_url = \"u\"\nname = \"m\"\ntemprature = 1\n");
    assert!(
        e.starts_with("run.toml:4: ") && e.contains("`temperature`"),
        "{e}"
    );
    let e = err("[output]\nplot = true\n");
    assert!(e.contains("give `dir`"), "{e}");
}

#[test]
fn learner_knobs_are_checked_by_the_registry_and_placed_at_their_line() {
    let e = err("[learner]\nuse = \"grpo\"\nepochs = 2\nclip_lo = 0.1\n");
    assert!(e.starts_with("run.toml:4: "), "{e}");
    assert!(e.contains("has no knob `clip_lo`"), "{e}");
    let e = err("[learner]\nuse = \"grpo\"\n[learner.trainer]\nuse = \"builtin\"\nhiden = 8\n");
    assert!(
        e.starts_with("run.toml:5: ") && e.contains("did you mean `hidden`"),
        "{e}"
    );
    let e = err("[learner]\nuse = \"gpro\"\n");
    assert!(e.contains("did you mean `grpo`"), "{e}");
    let e = err("learner = { use = \"grpo\", trainer = { lr = -1.0 } }\n");
    assert!(e.starts_with("run.toml:1: ") && e.contains("`lr`"), "{e}");
    // A host's trainer is the program's to give: the config is valid.
    RunConfig::from_toml("[learner]\nuse = \"grpo\"\ntrainer = \"host\"\n", "x").unwrap();
}

#[test]
fn set_overrides_and_checks_again() {
    let mut c = RunConfig::from_toml("learner = \"grpo\"\n[train]\nrounds = 2\n", "f").unwrap();
    c.set("learner.trainer.lr", json!(0.05)).unwrap();
    c.set("train.rounds", json!(7)).unwrap();
    c.set("env.uri", json!("builtin:arithmetic")).unwrap();
    assert_eq!(c.learner, json!({"use": "grpo", "trainer": {"lr": 0.05}}));
    assert_eq!(c.train.rounds, 7);
    assert_eq!(c.env.as_ref().unwrap().uri, "builtin:arithmetic");
    let e = c
        .set("learner.use", json!("incontxt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("did you mean `incontext`"), "{e}");
}

#[test]
fn telemetry_tables_name_a_sink_and_keep_its_options() {
    let c = RunConfig::from_toml(
        "[[telemetry]]\nname = \"otel\"\nendpoint = \"http://127.0.0.1:4318\"\n\n\
         [[telemetry]]\nname = \"mlflow\"\n",
        "run.toml",
    )
    .unwrap();
    assert_eq!(c.telemetry.len(), 2);
    assert_eq!(c.telemetry[0].name, "otel");
    assert_eq!(
        c.telemetry[0].options["endpoint"],
        json!("http://127.0.0.1:4318")
    );
    assert_eq!(c.to_json()["telemetry"][0]["name"], json!("otel"));
    let e = err("[[telemetry]]\nname = \"zipkin\"\n");
    assert!(
        e.starts_with("run.toml:1: ") && e.contains("known: otel, mlflow, wandb"),
        "{e}"
    );
    let e = err("[telemetry]\nname = \"otel\"\n");
    assert!(e.contains("must be a list"), "{e}");
}
