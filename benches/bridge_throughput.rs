//! Throughput of the Python bridge (`gymnasium:` and `reasoning_gym:`), run next to
//! `benches/python_bridge.py` by `benches/bridge_compare.sh`, which joins the two into the
//! ratios of docs/performance.md.
//!
//! Workloads (one JSON object per line on stdout, names shared with the Python side):
//!
//! - `pipe/json_round_trip/{blocking,polling}`: the floor. A Python child that only reads a
//!   JSON line, parses it and answers a reply shaped like a CartPole step reply; the parent
//!   writes, reads and parses. Median microseconds per round trip, with both ends sleeping in
//!   `read` (blocking) or waiting as the bridge does (polling).
//! - `cartpole/step`: `Episode::act` on `gymnasium:CartPole-v1` through one worker, random
//!   actions, resetting when an episode ends. Median microseconds per `act`, and steps/s.
//! - `cartpole/rollout/serial`: `env.rollout` with the environment's random (probe) policy,
//!   200 episodes in a loop; steps/s.
//! - `cartpole/runner/{1,2}`: `Runner::collect` of 1000 episodes on 1 and 2 threads, with as many
//!   bridge workers; steps/s.
//! - `reasoning_gym/rollout/serial`, `reasoning_gym/runner/{1,2}`: 1000 rollouts of
//!   `reasoning_gym:basic_arithmetic?size=1000` with its reference policy; rollouts/s.
//!
//! Each workload runs once to warm up (which also starts the workers), then 5 timed runs; the
//! best and the median are reported. Needs `NENYAX_PYTHON` with gymnasium and reasoning-gym.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use nenyax::{load, plan, Environment, Policy, RolloutOptions, Runner};
use serde_json::{json, Value};

const RUNS: usize = 5;
/// CartPole episodes per runner batch (about 22 steps each with random actions).
const EPISODES: usize = 1000;

fn python() -> String {
    std::env::var("NENYAX_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn report(workload: &str, unit: &str, rates: &mut [f64], extra: Value) {
    let best = rates.iter().copied().fold(f64::MIN, f64::max);
    let med = median(rates);
    let mut rec = json!({"workload": workload, "unit": unit, "best": best, "median": med});
    if let (Value::Object(r), Value::Object(e)) = (&mut rec, extra) {
        r.extend(e);
    }
    println!("{rec}");
}

/// A child that answers each JSON line with the reply a CartPole step sends, as the bridge
/// spells it. With `SPIN` set it waits for input the way the bridge does (polling with a
/// yield for up to 200 us before sleeping), else it blocks in `read`.
const ECHO: &str = r#"
import json, os, select, sys, time
out = os.fdopen(os.dup(1), "wb", buffering=0)
reply = {"id": 0, "ok": True, "result": {"observation": {"data": [0.0123, -0.1532, 0.0441, 0.3101],
         "text": None, "messages": None, "info": {}}, "reward": 1.0, "terminated": False,
         "truncated": False, "info": {}}}
spin = os.environ.get("SPIN") == "1"
fd = sys.stdin.fileno()
os.set_blocking(fd, not spin)
out.write(b'{"ready": true}\n')
pending = b""
while True:
    while b"\n" not in pending:
        t0 = time.perf_counter()
        while True:
            try:
                chunk = os.read(fd, 65536)
                break
            except BlockingIOError:
                if time.perf_counter() - t0 > 200e-6:
                    select.select([fd], [], [])
                else:
                    os.sched_yield()
        if not chunk:
            sys.exit(0)
        pending += chunk
    line, pending = pending.split(b"\n", 1)
    req = json.loads(line)
    reply["id"] = req["id"]
    out.write(json.dumps(reply).encode() + b"\n")
"#;

/// Reads a reply line; with `spin`, polls a non-blocking pipe with a yield, as the bridge does.
fn read_reply(out: &mut std::process::ChildStdout, buf: &mut Vec<u8>, spin: bool) -> Value {
    use std::io::Read;
    let mut chunk = [0u8; 65536];
    loop {
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            let v = serde_json::from_slice(&buf[..i]).unwrap();
            buf.drain(..=i);
            return v;
        }
        match out.read(&mut chunk) {
            Ok(0) => panic!("the echo child exited"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && spin => {
                std::thread::yield_now()
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn pipe_round_trip(spin: bool) {
    let mut child = Command::new(python())
        .args(["-u", "-c", ECHO])
        .env("SPIN", if spin { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = Vec::new();
    read_reply(&mut stdout, &mut buf, false);
    if spin {
        use std::os::fd::AsRawFd;
        let fd = stdout.as_raw_fd();
        // SAFETY: flag changes on a descriptor this process owns.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let mut medians = Vec::new();
    let mut rates = Vec::new();
    for run in 0..=RUNS {
        let n = 20_000;
        let mut lat = Vec::with_capacity(n);
        let t0 = Instant::now();
        for i in 0..n {
            let t = Instant::now();
            let req = json!({"id": i, "op": "step", "action": 1}).to_string() + "\n";
            stdin.write_all(req.as_bytes()).unwrap();
            let v = read_reply(&mut stdout, &mut buf, spin);
            assert_eq!(v["id"], json!(i));
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        if run > 0 {
            rates.push(n as f64 / t0.elapsed().as_secs_f64());
            medians.push(median(&mut lat));
        }
    }
    drop(stdin);
    let _ = child.wait();
    let us = median(&mut medians);
    report(
        if spin {
            "pipe/json_round_trip/polling"
        } else {
            "pipe/json_round_trip/blocking"
        },
        "round trips/s",
        &mut rates,
        json!({"median_us": us}),
    );
}

fn cartpole(workers: usize) -> Arc<dyn Environment> {
    load(&format!("gymnasium:CartPole-v1?workers={workers}")).expect("gymnasium:CartPole-v1 loads")
}

fn cartpole_step() {
    let env = cartpole(1);
    let policy = env.probe_policy().expect("random policy");
    let mut medians = Vec::new();
    let mut rates = Vec::new();
    for run in 0..=RUNS {
        let n = 20_000;
        let mut lat = Vec::with_capacity(n);
        let mut episode = 0i64;
        let mut ep = env.open(None, Some(episode)).unwrap();
        let t0 = Instant::now();
        while lat.len() < n {
            let action = match &policy {
                Policy::Action(p) => p(ep.observation()).unwrap(),
                _ => unreachable!("the probe policy is an action policy"),
            };
            let t = Instant::now();
            let step = ep.act(&action).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            if step.terminated || step.truncated {
                episode += 1;
                // Give the worker back before asking for one (the pool has one).
                drop(ep);
                ep = env.open(None, Some(episode)).unwrap();
            }
        }
        if run > 0 {
            rates.push(n as f64 / t0.elapsed().as_secs_f64());
            medians.push(median(&mut lat));
        }
    }
    let us = median(&mut medians);
    report(
        "cartpole/step",
        "steps/s",
        &mut rates,
        json!({"median_us": us}),
    );
}

fn steps(trajs: &[nenyax::Trajectory]) -> usize {
    assert!(trajs.iter().all(|t| t.error.is_none()), "a rollout failed");
    trajs.iter().map(|t| t.steps.len()).sum()
}

fn cartpole_serial() {
    let env = cartpole(1);
    let policy = env.probe_policy().expect("random policy");
    let mut rates = Vec::new();
    for run in 0..=RUNS {
        let t0 = Instant::now();
        let trajs: Vec<_> = (0..200)
            .map(|i| env.rollout(&policy, &RolloutOptions::new(None, Some(i))))
            .collect();
        let dt = t0.elapsed().as_secs_f64();
        if run > 0 {
            rates.push(steps(&trajs) as f64 / dt);
        }
    }
    report("cartpole/rollout/serial", "steps/s", &mut rates, json!({}));
}

fn cartpole_runner(threads: usize) {
    let env = cartpole(threads);
    let policy = env.probe_policy().expect("random policy");
    let runner = Runner::new(threads).unwrap().progress(false);
    let mut rates = Vec::new();
    for run in 0..=RUNS {
        let jobs = plan(env.as_ref(), EPISODES, 0).unwrap();
        let t0 = Instant::now();
        let trajs = runner.collect(&env, &policy, jobs, None).unwrap();
        let dt = t0.elapsed().as_secs_f64();
        if run > 0 {
            rates.push(steps(&trajs) as f64 / dt);
        }
    }
    report(
        &format!("cartpole/runner/{threads}"),
        "steps/s",
        &mut rates,
        json!({}),
    );
}

fn arithmetic(workers: usize) -> Arc<dyn Environment> {
    load(&format!(
        "reasoning_gym:basic_arithmetic?size=1000&workers={workers}"
    ))
    .expect("reasoning_gym:basic_arithmetic loads")
}

fn solved(trajs: &[nenyax::Trajectory]) {
    for t in trajs {
        assert!(t.error.is_none(), "a rollout failed: {:?}", t.error);
        let score = t.judgment.as_ref().map_or(0.0, |j| j.score);
        assert_eq!(score, 1.0, "the reference policy must solve every task");
    }
}

fn arithmetic_serial() {
    let env = arithmetic(1);
    let oracle = env.reference_policy(None).expect("reference policy");
    let tasks = env.tasks(None).unwrap();
    let mut rates = Vec::new();
    for run in 0..=RUNS {
        let t0 = Instant::now();
        let trajs: Vec<_> = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                env.rollout(
                    &oracle,
                    &RolloutOptions::new(Some(t.clone()), Some(i as i64)),
                )
            })
            .collect();
        let dt = t0.elapsed().as_secs_f64();
        solved(&trajs);
        if run > 0 {
            rates.push(trajs.len() as f64 / dt);
        }
    }
    report(
        "reasoning_gym/rollout/serial",
        "rollouts/s",
        &mut rates,
        json!({}),
    );
}

fn arithmetic_runner(threads: usize) {
    let env = arithmetic(threads);
    let oracle = env.reference_policy(None).expect("reference policy");
    let runner = Runner::new(threads).unwrap().progress(false);
    let mut rates = Vec::new();
    for run in 0..=RUNS {
        let jobs = plan(env.as_ref(), 1000, 0).unwrap();
        let t0 = Instant::now();
        let trajs = runner.collect(&env, &oracle, jobs, None).unwrap();
        let dt = t0.elapsed().as_secs_f64();
        solved(&trajs);
        if run > 0 {
            rates.push(trajs.len() as f64 / dt);
        }
    }
    report(
        &format!("reasoning_gym/runner/{threads}"),
        "rollouts/s",
        &mut rates,
        json!({}),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it,
    // and minutes of benchmarks do not belong in a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "bridge_throughput: a benchmark; run it with `cargo bench --bench bridge_throughput`"
        );
        return;
    }
    // A name filter may follow.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let want = |name: &str| filter.as_deref().map_or(true, |f| name.contains(f));
    type Bench = (&'static str, fn());
    let all: [Bench; 9] = [
        ("pipe/json_round_trip/blocking", || pipe_round_trip(false)),
        ("pipe/json_round_trip/polling", || pipe_round_trip(true)),
        ("cartpole/step", cartpole_step),
        ("cartpole/rollout/serial", cartpole_serial),
        ("cartpole/runner/1", || cartpole_runner(1)),
        ("cartpole/runner/2", || cartpole_runner(2)),
        ("reasoning_gym/rollout/serial", arithmetic_serial),
        ("reasoning_gym/runner/1", || arithmetic_runner(1)),
        ("reasoning_gym/runner/2", || arithmetic_runner(2)),
    ];
    for (name, bench) in all {
        if want(name) {
            bench();
        }
    }
}
