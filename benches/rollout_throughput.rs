//! Rollout throughput of the built-in environment (`builtin:arithmetic?size=1000`).
//!
//! Every rollout benchmark runs a batch of 1000 episodes per iteration and reports elements/s,
//! i.e. rollouts/s:
//!
//! - `rollout/serial_loop`: `env.rollout` in a plain loop with the oracle (action) policy;
//! - `rollout/runner/{1,2}`: `Runner::collect` on 1 and 2 threads, same policy;
//! - `chat/serial_loop`, `chat/runner/{1,2}`: the same with a `FunctionModel` chat policy (a
//!   closure that looks the answer up by prompt), which adds the messages and the recorded,
//!   OpenAI-shaped model call to every trajectory;
//! - `json/{to_json,from_json}/{action,chat}`: `Trajectory::to_json` / `Trajectory::from_json`
//!   over 1000 trajectories (elements/s = trajectories/s);
//! - `ffi_equivalent/{serial_json,runner_json/{1,2}}`: the work the C ABI does for a batch
//!   (`nenyax_env_rollout` in a loop, `nenyax_runner_run` with a sink), in Rust, inside the timed
//!   region: planning the jobs, serialising every trajectory with `to_json` and dropping it as it
//!   arrives. `benches/ffi_compare.sh` sets these next to `benches/ffi_overhead.c`, so that the
//!   difference is the C boundary alone.
//!
//! Inputs (task clones, job lists, JSON lines) are built outside the timed region and the
//! returned trajectories are dropped outside it, so the figures cover the rollouts only.
//! `benches/compare.sh` runs this next to the Python reference (`benches/python_reference.py`).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use nenyax::{
    load, plan, Environment, FunctionModel, Job, Policy, Role, RolloutOptions, Runner, TaskRef,
    Trajectory,
};

const URI: &str = "builtin:arithmetic?size=1000";
const BATCH: usize = 1000;

struct Setup {
    env: Arc<dyn Environment>,
    tasks: Vec<TaskRef>,
    jobs: Vec<Job>,
    oracle: Policy,
    chat: Policy,
}

fn setup() -> Setup {
    let env = load(URI).expect("builtin:arithmetic loads");
    let tasks = env.tasks(None).expect("tasks");
    assert_eq!(tasks.len(), BATCH);
    let jobs = plan(env.as_ref(), BATCH, 0).expect("plan");
    let oracle = env.reference_policy(None).expect("oracle");
    // The chat policy: look the answer up by the prompt (the last user turn).
    let answers: HashMap<String, String> = tasks
        .iter()
        .map(|t| {
            let prompt = t.prompt.clone().expect("prompt");
            let answer = t.metadata["answer"].as_str().expect("answer").to_string();
            (prompt, answer)
        })
        .collect();
    let chat = Policy::chat(FunctionModel::new("lookup", move |messages| {
        let prompt = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.content.as_str())
            .unwrap_or_default();
        let answer = answers.get(prompt).map_or("?", String::as_str);
        Ok(format!("<answer>{answer}</answer>"))
    }));
    Setup {
        env,
        tasks,
        jobs,
        oracle,
        chat,
    }
}

/// Every trajectory solved, so a benchmark never measures a failure path by accident.
fn check_all_solved(trajs: &[Trajectory], what: &str) {
    assert_eq!(trajs.len(), BATCH, "{what}");
    for t in trajs {
        assert_eq!(t.score(), Some(1.0), "{what}: {:?}", t.error);
    }
}

fn serial(env: &dyn Environment, policy: &Policy, tasks: Vec<TaskRef>) -> Vec<Trajectory> {
    tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| env.rollout(policy, &RolloutOptions::new(Some(task), Some(i as i64))))
        .collect()
}

fn rollouts(c: &mut Criterion, s: &Setup, group_name: &str, policy: &Policy) {
    check_all_solved(&serial(s.env.as_ref(), policy, s.tasks.clone()), group_name);
    let mut group = c.benchmark_group(group_name);
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("serial_loop", |b| {
        b.iter_batched(
            || s.tasks.clone(),
            |tasks| serial(s.env.as_ref(), black_box(policy), tasks),
            BatchSize::PerIteration,
        )
    });

    for threads in [1usize, 2] {
        let runner = Runner::new(threads).expect("runner").progress(false);
        let trajs = runner
            .collect(&s.env, policy, s.jobs.clone(), None)
            .expect("collect");
        check_all_solved(&trajs, group_name);
        group.bench_with_input(BenchmarkId::new("runner", threads), &threads, |b, _| {
            b.iter_batched(
                || s.jobs.clone(),
                |jobs| {
                    runner
                        .collect(&s.env, black_box(policy), jobs, None)
                        .expect("collect")
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn bench_rollouts(c: &mut Criterion) {
    let s = setup();
    rollouts(c, &s, "rollout", &s.oracle);
    rollouts(c, &s, "chat", &s.chat);
}

fn bench_json(c: &mut Criterion) {
    let s = setup();
    let mut group = c.benchmark_group("json");
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (kind, policy) in [("action", &s.oracle), ("chat", &s.chat)] {
        let trajs = serial(s.env.as_ref(), policy, s.tasks.clone());
        check_all_solved(&trajs, kind);
        let lines: Vec<String> = trajs.iter().map(Trajectory::to_json).collect();
        // Not `==` on the whole trajectory: serde_json (without its `float_roundtrip` feature)
        // may read `started_at` back one ulp off. Compare what the timing does not touch.
        for (line, t) in lines.iter().zip(&trajs) {
            let back = Trajectory::from_json(line).expect("parses");
            assert!(back.task == t.task && back.steps == t.steps && back.messages == t.messages);
            assert!(back.judgment == t.judgment && back.model_calls.len() == t.model_calls.len());
        }
        group.bench_with_input(BenchmarkId::new("to_json", kind), &trajs, |b, trajs| {
            b.iter(|| {
                trajs
                    .iter()
                    .map(|t| black_box(t.to_json()).len())
                    .sum::<usize>()
            })
        });
        group.bench_with_input(BenchmarkId::new("from_json", kind), &lines, |b, lines| {
            b.iter_batched(
                || (),
                |()| {
                    lines
                        .iter()
                        .map(|l| Trajectory::from_json(black_box(l)).expect("parses"))
                        .collect::<Vec<_>>()
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// What `nenyax_env_rollout` (in a loop) and `nenyax_runner_run` with a sink do, minus the C
/// boundary: everything inside the timed region, as on the C side (benches/ffi_overhead.c).
fn bench_ffi_equivalent(c: &mut Criterion) {
    let s = setup();
    let mut group = c.benchmark_group("ffi_equivalent");
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    // nenyax_env_rollout(env, oracle, {"seed": i}): the env builds task i from the seed; the
    // trajectory is serialised and then dropped.
    let serial = || {
        (0..BATCH)
            .map(|i| {
                let t = s
                    .env
                    .rollout(&s.oracle, &RolloutOptions::new(None, Some(i as i64)));
                black_box(t.to_json()).len()
            })
            .sum::<usize>()
    };
    assert!(serial() > 0);
    group.bench_function("serial_json", |b| b.iter(serial));
    for threads in [1usize, 2] {
        let runner = Runner::new(threads).expect("runner").progress(false);
        // nenyax_runner_run(..., {"n": 1000, "seed": 0}, sink): plan, run, and on the calling
        // thread serialise each trajectory and drop it as it arrives.
        let batch = || {
            let jobs = plan(s.env.as_ref(), BATCH, 0).expect("plan");
            let mut bytes = 0usize;
            runner
                .run(&s.env, black_box(&s.oracle), jobs, None, |_, t| {
                    bytes += black_box(t.to_json()).len();
                    Ok(())
                })
                .expect("run");
            bytes
        };
        assert!(batch() > 0);
        group.bench_with_input(
            BenchmarkId::new("runner_json", threads),
            &threads,
            |b, _| b.iter(batch),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_rollouts, bench_json, bench_ffi_equivalent);
criterion_main!(benches);
