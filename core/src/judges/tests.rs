//! The judges' unit tests.

use super::*;
use crate::contract::{Mode, Observation, Step};
use crate::contract::{TaskRef, Trajectory};
use crate::error::Error;
use serde_json::json;
use std::sync::Arc;

fn traj(reply: &str, answer: &str) -> Trajectory {
    let mut task = TaskRef::new("0");
    task.metadata.insert("answer".into(), json!(answer));
    let mut t = Trajectory::start("x", Mode::Step, Some(task), None);
    t.steps.push(Step {
        action: json!(reply),
        observation: Observation::default(),
        reward: 0.0,
        terminated: true,
        truncated: false,
        info: Default::default(),
    });
    t
}

#[test]
fn extractors() {
    assert_eq!(
        extract_answer_tag("<answer>1</answer> then <ANSWER> 2 </answer>"),
        Some("2".into())
    );
    assert_eq!(extract_answer_tag("none"), None);
    assert_eq!(
        extract_answer_tag("<answer>1</answer> <answer>2"),
        Some("1".into())
    );
    assert_eq!(extract_answer_tag("</answer><answer>"), None);
    assert_eq!(extract_answer_tag("é<Answer>ü</ANSWER>"), Some("ü".into()));
    assert_eq!(last_number("it is 1,234.5 or -7"), Some(-7.0));
    assert_eq!(last_number("total 1,234.5"), Some(1234.5));
    assert_eq!(
        extract_boxed(r"so \boxed{\frac{1}{2}} done"),
        Some(r"\frac{1}{2}".into())
    );
    assert_eq!(extract_boxed(r"\boxed{unclosed"), None);
}

#[test]
fn exact_contains_numeric_regex() {
    let t = traj("thinking... <answer> Nairobi </answer>", "nairobi");
    assert_eq!(ExactMatch::default().judge(&t).unwrap().score, 1.0);
    assert_eq!(
        ExactMatch::default()
            .judge(&traj("<answer>Paris</answer>", "Nairobi"))
            .unwrap()
            .score,
        0.0
    );
    assert_eq!(Contains::default().judge(&t).unwrap().score, 1.0);
    let n = Numeric {
        abs_tol: 0.01,
        ..Numeric::default()
    };
    assert_eq!(
        n.judge(&traj("<answer>3.141</answer>", "3.14"))
            .unwrap()
            .score,
        1.0
    );
    assert_eq!(
        n.judge(&traj("<answer>3.2</answer>", "3.14"))
            .unwrap()
            .score,
        0.0
    );
    let r = RegexJudge::new(r"<answer>.+</answer>").unwrap();
    assert_eq!(r.judge(&t).unwrap().score, 1.0);
    assert!(RegexJudge::new("(").is_err());
    let mut no_task = t.clone();
    no_task.task = None;
    assert!(ExactMatch::default()
        .judge(&no_task)
        .unwrap_err()
        .to_string()
        .contains("no task"));
}

#[test]
fn function_judges_must_be_finite_and_may_not_panic_through() {
    let t = traj("x", "y");
    let nan = FnJudge::new("nan", |_| Ok(f64::NAN));
    assert!(matches!(nan.judge(&t), Err(Error::NonFiniteScore { .. })));
    let boom = FnJudge::new("boom", |_| panic!("judge bug"));
    assert!(boom
        .judge(&t)
        .unwrap_err()
        .to_string()
        .contains("judge bug"));
}

#[test]
fn rubric_scores_are_parsed_or_refused() {
    assert_eq!(
        LlmRubric::parse_score(r#"ok {"score": 0.75, "reason": "fine"}"#)
            .unwrap()
            .0,
        0.75
    );
    assert_eq!(LlmRubric::parse_score("Score: 1").unwrap().0, 1.0);
    assert!(LlmRubric::parse_score("looks good to me").is_err());
    assert!(LlmRubric::parse_score(r#"{"score": 7}"#).is_err());
}

#[test]
fn weighted_is_a_normalised_mean_with_distinct_components() {
    let parts: Vec<(Arc<dyn Judge>, f64)> = vec![
        (Arc::new(ExactMatch::default()), 3.0),
        (Arc::new(ExactMatch::default()), 1.0),
        (Arc::new(RegexJudge::new("zzz").unwrap()), 1.0),
    ];
    let w = Weighted::new(parts).unwrap();
    let j = w.judge(&traj("<answer>a</answer>", "a")).unwrap();
    assert!((j.score - 0.8).abs() < 1e-12);
    assert_eq!(j.components.len(), 3);
    assert_eq!(j.passed, Some(false));
    assert!(Weighted::new(vec![(Arc::new(EnvJudge) as Arc<dyn Judge>, f64::NAN)]).is_err());
}

#[test]
fn judges_from_json_specs() {
    let w = judge_from_json(
        r#"{"type": "weighted", "parts": [
            {"weight": 1, "judge": {"type": "exact"}},
            {"weight": 1, "judge": {"type": "regex", "pattern": "^<answer>"}}]}"#,
    )
    .unwrap();
    let j = w.judge(&traj("thinking <answer>a</answer>", "a")).unwrap();
    assert!((j.score - 0.5).abs() < 1e-12, "{j:?}");
    for (bad, needle) in [
        (r#"{"type": "fuzzy"}"#, "unknown judge type `fuzzy`"),
        (r#"{"type": "regex"}"#, "needs `pattern`"),
        (
            r#"{"type": "llm_rubric", "rubric": "r"}"#,
            "needs `endpoint`",
        ),
        (r#"{"type": "exact", "feild": "x"}"#, "feild"),
        (r#"{"type": "weighted"}"#, "at least one part"),
    ] {
        let e = judge_from_json(bad).err().unwrap().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
}
