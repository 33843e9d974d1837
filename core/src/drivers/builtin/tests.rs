//! The built-in environments' unit tests.

use serde_json::{json, Value};

use super::one_turn::{Gen, Problems};
use crate::contract::TaskRef;
use crate::env::RolloutOptions;
use crate::policy::Policy;
use crate::router::load;

#[test]
fn arithmetic_is_seeded_and_its_oracle_wins() {
    let env = load("builtin:arithmetic?size=50&seed=3").unwrap();
    let again = load("builtin:arithmetic?size=50&seed=3").unwrap();
    assert_eq!(env.tasks(None).unwrap(), again.tasks(None).unwrap());
    let other = load("builtin:arithmetic?size=50&seed=4").unwrap();
    assert_ne!(env.tasks(None).unwrap(), other.tasks(None).unwrap());
    let oracle = env.reference_policy(None).unwrap();
    let null = env.null_policy(None).unwrap();
    for t in env.tasks(None).unwrap() {
        let opts = RolloutOptions::new(Some(t.clone()), Some(0));
        let good = env.rollout(&oracle, &opts);
        assert_eq!(good.score(), Some(1.0), "{:?}", good.error);
        assert_eq!(
            good.task.as_ref().unwrap().metadata["answer"],
            t.metadata["answer"]
        );
        assert_eq!(env.rollout(&null, &opts).score(), Some(0.0));
    }
    // A task named by id alone is played and recorded in full.
    let t = env.rollout(&oracle, &RolloutOptions::new(Some(TaskRef::new("3")), None));
    assert_eq!(t.score(), Some(1.0));
    assert_eq!(t.task.unwrap(), env.tasks(None).unwrap()[3]);
}

#[test]
fn arithmetic_answers_are_right() {
    let gen = Gen {
        seed: 0,
        digits: 3,
        ops: vec!['+', '-', '*'],
    };
    for i in 0..200 {
        let p = gen.problem(i);
        let parts: Vec<&str> = p.data["expression"].as_str().unwrap().split(' ').collect();
        let (a, b): (i64, i64) = (parts[0].parse().unwrap(), parts[2].parse().unwrap());
        assert!((100..=999).contains(&a) && (100..=999).contains(&b));
        let want = match parts[1] {
            "+" => a + b,
            "-" => a - b,
            _ => a * b,
        };
        assert_eq!(p.answer, want);
    }
}

/// The answer a `builtin:digits` observation asks for, computed from its data alone.
fn digits_answer(data: &Value) -> i64 {
    let digits: Vec<i64> = data["digits"]
        .as_str()
        .unwrap()
        .split(' ')
        .map(|d| d.parse().unwrap())
        .collect();
    match data["rule"].as_str().unwrap() {
        "max" => *digits.iter().max().unwrap(),
        "min" => *digits.iter().min().unwrap(),
        "nth" => digits[data["position"].as_u64().unwrap() as usize - 1],
        "sum" => digits.iter().sum::<i64>() % 10,
        "missing" => (0..10).find(|d| !digits.contains(d)).unwrap(),
        r => panic!("unknown rule {r}"),
    }
}

#[test]
fn digits_answers_follow_their_rule_and_are_uniform() {
    let env =
        load("builtin:digits?rules=max,min,nth,sum,missing&length=5&size=5000&seed=9").unwrap();
    let mut counts = [0usize; 10];
    let mut rules = std::collections::BTreeMap::new();
    for t in env.tasks(None).unwrap() {
        let s = env.session(Some(&t), None).unwrap();
        let obs = s.observation().clone();
        let want = digits_answer(&obs.data);
        assert_eq!(t.metadata["answer"], json!(want.to_string()), "{obs:?}");
        let n = obs.data["digits"].as_str().unwrap().split(' ').count();
        assert_eq!(n, if obs.data["rule"] == "missing" { 9 } else { 5 });
        let text = obs.text.unwrap();
        assert!(text.starts_with(&format!(
            "Digits: {}.",
            obs.data["digits"].as_str().unwrap()
        )));
        assert!(
            text.ends_with("<answer></answer> tags, e.g. <answer>7</answer>."),
            "{text}"
        );
        counts[want as usize] += 1;
        *rules
            .entry(obs.data["rule"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    // Uniform answers: no constant reply beats chance (1 in 10). 5000 draws: each count is
    // 500 ± 21 (one sd), so ±100 fails only on a real skew.
    assert!(
        counts.iter().all(|&c| (400..=600).contains(&c)),
        "{counts:?}"
    );
    assert_eq!(rules.len(), 5, "{rules:?}");
    assert!(
        rules.values().all(|&c| (800..=1200).contains(&c)),
        "{rules:?}"
    );
}

#[test]
fn digits_is_seeded_and_its_oracle_wins() {
    let uri = "builtin:digits?size=60&seed=3&rules=nth,max";
    let env = load(uri).unwrap();
    assert_eq!(
        env.tasks(None).unwrap(),
        load(uri).unwrap().tasks(None).unwrap()
    );
    let other = load("builtin:digits?size=60&seed=4&rules=nth,max").unwrap();
    assert_ne!(env.tasks(None).unwrap(), other.tasks(None).unwrap());
    let oracle = env.reference_policy(None).unwrap();
    let null = env.null_policy(None).unwrap();
    for t in env.tasks(None).unwrap() {
        let opts = RolloutOptions::new(Some(t.clone()), None);
        let good = env.rollout(&oracle, &opts);
        assert_eq!(good.score(), Some(1.0), "{:?}", good.error);
        assert_eq!(
            good.judgment.unwrap().judge.as_deref(),
            Some("builtin:digits")
        );
        assert_eq!(env.rollout(&null, &opts).score(), Some(0.0));
        // One wrong digit scores 0.
        let wrong = (t.metadata["answer"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
            + 1)
            % 10;
        let bad = Policy::constant(json!(format!("<answer>{wrong}</answer>")));
        assert_eq!(env.rollout(&bad, &opts).score(), Some(0.0));
    }
    let report = crate::conformance::check_uri(uri, &Default::default());
    assert_eq!(
        report.tier,
        crate::conformance::Tier::Audited,
        "{}",
        report.render()
    );
}

#[test]
fn digits_rejects_unknown_rules() {
    for bad in ["rules=max,median", "rules=", "length=0"] {
        let e = load(&format!("builtin:digits?{bad}")).err().unwrap();
        assert!(
            e.to_string().contains("rules") || e.to_string().contains("length"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn guess_oracle_bisects_and_null_never_hits() {
    let env = load("builtin:guess?size=20&high=1000&max_guesses=10").unwrap();
    let oracle = env.reference_policy(None).unwrap();
    let null = env.null_policy(None).unwrap();
    for t in env.tasks(None).unwrap() {
        let opts = RolloutOptions::new(Some(t), None);
        let good = env.rollout(&oracle, &opts);
        assert_eq!(good.score(), Some(1.0), "{:?}", good.error);
        assert!(good.steps.len() <= 10);
        let bad = env.rollout(&null, &opts);
        assert_eq!(bad.score(), Some(0.0));
        assert_eq!(bad.steps.len(), 10);
    }
}

#[test]
fn guess_reads_numbers_out_of_chat_text() {
    let env = load("builtin:guess?high=10").unwrap();
    let mut s = env.session(None, Some(0)).unwrap();
    let step = s.act(json!("I think it is 5")).unwrap();
    assert_eq!(step.info["guess"], json!(5));
    let step = s.act(json!("no idea")).unwrap();
    assert!(step.observation.text.unwrap().contains("not a number"));
    assert!(s.act(json!({"guess": 1})).is_err());
}

#[test]
fn out_of_range_task_ids_are_typed_errors() {
    let env = load("builtin:arithmetic?size=5").unwrap();
    let e = env.session(Some(&TaskRef::new("9")), None).err().unwrap();
    assert!(e.to_string().contains("from 0 to 4"), "{e}");
}
