//! Bad input tried as a new user would: every case gives a clear, typed error, never a panic,
//! and a failed rollout still yields a Trajectory carrying its error.

use serde_json::{json, Value};
use std::sync::Arc;

use nenyax::define::{stateful, TaskEnvBuilder};
use nenyax::judges::{with_judge, FnJudge, LlmRubric};
use nenyax::{
    load, plan, ChatModel, Endpoint, Environment, Episode, Error, FunctionModel, JsonMap, Manifest,
    Message, Mode, Observation, Policy, RolloutOptions, Runner, Step, TaskRef,
};

fn err_of(uri: &str) -> Error {
    match load(uri) {
        Ok(_) => panic!("{uri} loaded but should not have"),
        Err(e) => e,
    }
}

#[test]
fn unknown_scheme_lists_known_ones_and_suggests() {
    let e = err_of("biultin:arithmetic");
    assert!(matches!(e, Error::UnknownScheme { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("`biultin`") && msg.contains("did you mean `builtin`"),
        "{msg}"
    );
    assert!(msg.contains("define"), "{msg}");
}

#[test]
fn a_missing_harbor_task_directory_is_named() {
    let e = err_of("harbor:./terminal-bench/fix-git");
    assert!(matches!(e, Error::Environment(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("./terminal-bench/fix-git is not a directory"),
        "{e}"
    );
}

#[test]
fn a_missing_python_package_names_it_the_interpreter_and_the_fix() {
    // An interpreter without verifiers: the test venv's (reasoning-gym, gymnasium) or python3.
    let python = std::env::var("NENYAX_PYTHON").unwrap_or_else(|_| "python3".into());
    let e = err_of(&format!("verifiers:gsm8k?python={python}"));
    assert!(matches!(e, Error::DriverUnavailable { .. }), "{e:?}");
    let msg = e.to_string();
    for part in [
        "verifiers>=0.3.1,<0.5",
        python.as_str(),
        "nenyax setup verifiers",
    ] {
        assert!(msg.contains(part), "`{part}` missing from: {msg}");
    }
}

#[test]
fn typo_in_a_parameter_names_it_and_suggests_the_right_one() {
    let e = err_of("builtin:arithmetic?sizee=10");
    assert_eq!(e.kind(), "UnknownParameter");
    let msg = e.to_string();
    assert!(
        msg.contains("`sizee`") && msg.contains("did you mean `size`"),
        "{msg}"
    );
    assert!(msg.contains("digits"), "accepted list missing: {msg}");
}

#[test]
fn malformed_values_name_the_value_and_what_is_expected() {
    for (uri, needle) in [
        ("builtin:arithmetic?size=ten", "`ten`"),
        ("builtin:arithmetic?digits=12", "from 1 to 9"),
        ("builtin:arithmetic?ops=/", "+ - *"),
        ("builtin:guess?high=1", "from 2"),
    ] {
        let e = err_of(uri);
        assert_eq!(e.kind(), "InvalidParameter", "{uri}: {e}");
        assert!(e.to_string().contains(needle), "{uri}: {e}");
    }
}

#[test]
fn unknown_target_and_malformed_uri() {
    let e = err_of("builtin:arithmetik");
    assert_eq!(e.kind(), "UnknownTarget");
    assert!(e.to_string().contains("did you mean `arithmetic`"), "{e}");
    assert_eq!(err_of("arithmetic").kind(), "InvalidUri");
    assert_eq!(err_of("builtin:arithmetic?size=%4").kind(), "InvalidUri");
}

#[test]
fn a_policy_that_panics_yields_a_trajectory_with_the_error() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let boom = Policy::action(|_| panic!("policy bug: index out of range"));
    let t = env.rollout(&boom, &RolloutOptions::default());
    let err = t.error.as_deref().unwrap();
    assert!(
        err.starts_with("PolicyError") && err.contains("policy bug"),
        "{err}"
    );
    assert!(t.judgment.is_none());
    assert!(t.initial_observation.is_some(), "the episode had started");
    assert_eq!(t.metadata["error_kind"], "PolicyError");
}

#[test]
fn a_chat_model_that_panics_is_caught_too() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let model = FunctionModel::new("panicky", |_| panic!("model bug"));
    let t = env.rollout(&Policy::chat(model), &RolloutOptions::default());
    assert!(
        t.error.as_deref().unwrap().contains("model bug"),
        "{:?}",
        t.error
    );
}

#[test]
fn a_policy_returning_garbage_gets_an_invalid_action_error() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let t = env.rollout(
        &Policy::constant(json!({"answer": 4})),
        &RolloutOptions::default(),
    );
    let err = t.error.unwrap();
    assert!(
        err.starts_with("InvalidAction") && err.contains("JSON string"),
        "{err}"
    );
    let env = load("builtin:guess").unwrap();
    let t = env.rollout(&Policy::constant(json!([1, 2])), &RolloutOptions::default());
    assert!(t.error.unwrap().starts_with("InvalidAction"));
}

#[test]
fn a_policy_returning_an_error_is_recorded_as_a_policy_error() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let p = Policy::action(|_| Err(Error::Config("no model configured".into())));
    let t = env.rollout(&p, &RolloutOptions::default());
    let err = t.error.unwrap();
    assert!(
        err.starts_with("PolicyError") && err.contains("no model configured"),
        "{err}"
    );
}

#[test]
fn non_finite_scores_from_a_judge_are_errors_not_scores() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let judged = with_judge(env.clone(), Arc::new(FnJudge::new("nan", |_| Ok(f64::NAN))));
    let oracle = judged.reference_policy(None).unwrap();
    let t = judged.rollout(&oracle, &RolloutOptions::default());
    let err = t.error.as_deref().unwrap();
    assert!(
        err.starts_with("NonFiniteScore") && err.contains("function:nan"),
        "{err}"
    );
    assert!(t.judgment.is_none());
    // Nothing is lost: the environment's own verdict is kept.
    assert_eq!(t.metadata["env_judgment"]["score"], json!(1.0));

    let inf = TaskEnvBuilder::new("inf", vec![row("q", "a")], |_, _| Ok(f64::INFINITY))
        .build()
        .unwrap();
    let t = inf.rollout(&Policy::constant(json!("a")), &RolloutOptions::default());
    assert!(t.error.unwrap().starts_with("NonFiniteScore"));
}

#[test]
fn non_finite_rewards_are_refused_by_the_session() {
    let env = stateful(
        "nanreward",
        |_| Ok(json!(0)),
        |_| Ok(json!("go")),
        |_, _| Ok((f64::NAN, true)),
        5,
    );
    let t = env.rollout(&Policy::constant(json!(1)), &RolloutOptions::default());
    let err = t.error.unwrap();
    assert!(err.contains("non-finite reward"), "{err}");
}

#[test]
fn an_unreachable_endpoint_fails_the_episode_and_records_the_call() {
    // Port 9 (discard) has no listener here; connection is refused at once.
    let ep =
        Endpoint::new("http://127.0.0.1:9/v1", "m").retries(1, std::time::Duration::from_millis(5));
    let env = load("builtin:arithmetic?size=4").unwrap();
    let t = env.rollout(&Policy::chat(ep), &RolloutOptions::default());
    let err = t.error.as_deref().unwrap();
    assert!(err.starts_with("EndpointError"), "{err}");
    assert!(
        err.contains("127.0.0.1:9") && err.contains("2 attempts"),
        "{err}"
    );
    assert_eq!(t.model_calls.len(), 1, "the failed call is still recorded");
    assert!(t.model_calls[0].error.is_some());
    assert_eq!(
        t.messages.len(),
        1,
        "the prompt the model was shown is kept"
    );
}

#[test]
fn a_missing_api_key_variable_is_named() {
    let e = Endpoint::new("http://127.0.0.1:9/v1", "m")
        .api_key_from_env("NENYAX_TEST_SURELY_UNSET_KEY")
        .unwrap_err();
    assert!(
        e.to_string().contains("NENYAX_TEST_SURELY_UNSET_KEY"),
        "{e}"
    );
}

#[test]
fn an_unparseable_rubric_reply_is_an_error_not_a_zero() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let grader: Arc<dyn ChatModel> = Arc::new(FunctionModel::new("grader", |_| {
        Ok("Looks right to me!".into())
    }));
    let judged = with_judge(
        env,
        Arc::new(LlmRubric::new(grader, "Is the arithmetic right?")),
    );
    let oracle = judged.reference_policy(None).unwrap();
    let t = judged.rollout(&oracle, &RolloutOptions::default());
    let err = t.error.unwrap();
    assert!(
        err.starts_with("JudgeError") && err.contains("no score"),
        "{err}"
    );
    assert!(t.judgment.is_none());
}

#[test]
fn acting_after_the_end_is_a_typed_error() {
    let env = load("builtin:arithmetic?size=4").unwrap();
    let mut s = env.session(None, Some(1)).unwrap();
    s.act(json!("<answer>0</answer>")).unwrap();
    assert!(s.done());
    let e = s.act(json!("<answer>0</answer>")).unwrap_err();
    assert!(e.to_string().contains("episode is over"), "{e}");
}

/// A rollout-mode environment (no stepping from outside), for the capability errors.
struct ModelDriven(Manifest);

impl Environment for ModelDriven {
    fn manifest(&self) -> &Manifest {
        &self.0
    }
}

/// A non-text step environment, for the policy-kind errors.
struct Grid(Manifest);

struct GridEpisode(Observation);

impl Episode for GridEpisode {
    fn observation(&self) -> &Observation {
        &self.0
    }
    fn act(&mut self, action: &Value) -> nenyax::Result<Step> {
        Ok(Step {
            action: action.clone(),
            observation: self.0.clone(),
            reward: 1.0,
            terminated: true,
            truncated: false,
            info: JsonMap::new(),
        })
    }
}

impl Environment for Grid {
    fn manifest(&self) -> &Manifest {
        &self.0
    }
    fn open(&self, _: Option<&TaskRef>, _: Option<i64>) -> nenyax::Result<Box<dyn Episode>> {
        Ok(Box::new(GridEpisode(Observation {
            data: json!([[0, 1], [1, 0]]),
            ..Observation::default()
        })))
    }
}

#[test]
fn session_on_a_rollout_mode_environment_is_unsupported() {
    let env = ModelDriven(Manifest::new("x:rollout", "x", "test", Mode::Rollout));
    let e = env.session(None, None).err().unwrap();
    assert_eq!(e.kind(), "UnsupportedCapability");
    assert!(
        e.to_string().contains("rollout mode") && e.to_string().contains("rollout()"),
        "{e}"
    );
}

#[test]
fn a_chat_model_on_a_non_text_environment_is_a_policy_mismatch() {
    let env = Grid(Manifest::new("x:grid", "grid", "test", Mode::Step));
    let model = FunctionModel::new("m", |_| Ok("up".into()));
    let t = env.rollout(&Policy::chat(model), &RolloutOptions::default());
    assert!(t.error.unwrap().starts_with("PolicyMismatch"));
    let t = env.rollout(&Policy::Native("oracle".into()), &RolloutOptions::default());
    assert!(t.error.unwrap().contains("native agent"));
    let ok = env.rollout(&Policy::constant(json!(0)), &RolloutOptions::default());
    assert_eq!(ok.score(), Some(1.0), "{:?}", ok.error);
}

#[test]
fn parallel_batches_keep_every_failed_episode_in_order() {
    let env = load("builtin:arithmetic?size=50").unwrap();
    let flaky = Policy::action(|obs| {
        let id: u64 = obs.info["task_id"].as_str().unwrap().parse().unwrap();
        if id % 3 == 0 {
            panic!("task {id} breaks the policy");
        }
        Ok(json!("<answer>?</answer>"))
    });
    let runner = Runner::new(2).unwrap().progress(false);
    let jobs = plan(env.as_ref(), 50, 0).unwrap();
    let out = runner.collect(&env, &flaky, jobs, None).unwrap();
    assert_eq!(out.len(), 50);
    for (i, t) in out.iter().enumerate() {
        assert_eq!(t.task.as_ref().unwrap().id, i.to_string(), "order kept");
        assert_eq!(t.seed, Some(i as i64));
        assert_eq!(t.error.is_some(), i % 3 == 0, "episode {i}: {:?}", t.error);
    }
}

#[test]
fn chat_messages_must_parse_as_the_openai_shape() {
    let e = Message::from_openai(&json!({"role": "assistant", "content": 3, "tool_calls": 7}))
        .unwrap_err();
    assert_eq!(e.kind(), "ProtocolError");
}

fn row(prompt: &str, answer: &str) -> JsonMap {
    json!({"prompt": prompt, "answer": answer})
        .as_object()
        .unwrap()
        .clone()
}
