//! What `--telemetry otel` costs a run: `builtin:arithmetic` with the oracle on a `Runner`,
//! telemetry off vs the OTLP sink exporting to a live receiver (an HTTP server in this process
//! that answers 200 to every export) vs a dead endpoint (a closed port), side by side in one
//! process, interleaved, each configuration three times (the median is reported):
//!
//! - `paced`: deliveries paced at 1,000 episodes/s (the target: < 5% fewer episodes/s);
//! - `full`: as fast as the runner goes on 2 threads;
//! - `clone`: the cost of the one copy a trajectory takes into the queue.
//!
//! Run: `cargo bench --bench telemetry_overhead` (prints a table for docs/performance.md).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nenyax::telemetry::{SinkSpec, Telemetry};
use nenyax::{load, plan, Environment, Policy, Runner};
use serde_json::json;

const URI: &str = "builtin:arithmetic?size=1000";

/// A receiver that reads every export and answers 200, on its own thread.
fn live_receiver() -> String {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("bind");
    let port = server.server_addr().to_ip().expect("ip").port();
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = Vec::new();
            let _ = std::io::Read::read_to_end(req.as_reader(), &mut body);
            let _ = req.respond(tiny_http::Response::empty(200));
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn dead_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

fn telemetry(endpoint: Option<&str>) -> Option<Arc<Telemetry>> {
    let endpoint = endpoint?;
    let mut spec = SinkSpec::named("otel");
    spec.options.insert("endpoint".into(), json!(endpoint));
    Some(Arc::new(Telemetry::from_specs(&[spec]).expect("otel sink")))
}

/// Episodes/s of one batch of `n`, deliveries paced at `rate` per second when given.
fn run(
    env: &Arc<dyn Environment>,
    policy: &Policy,
    n: usize,
    rate: Option<f64>,
    endpoint: Option<&str>,
) -> f64 {
    let tel = telemetry(endpoint);
    let mut runner = Runner::new(2).expect("runner").progress(false);
    if let Some(t) = &tel {
        runner = runner.telemetry(t.clone());
    }
    let jobs = plan(env.as_ref(), n, 0).expect("plan");
    let t0 = Instant::now();
    runner
        .run(env, policy, jobs, None, |i, t| {
            black_box(&t);
            if let Some(r) = rate {
                let due = t0 + Duration::from_secs_f64((i + 1) as f64 / r);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            Ok(())
        })
        .expect("batch");
    let eps = n as f64 / t0.elapsed().as_secs_f64();
    // Finishing (the last export, or giving up on a dead endpoint) is after the run's clock.
    if let Some(t) = tel {
        t.finish(true);
    }
    eps
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let env = load(URI).expect("builtin:arithmetic loads");
    let oracle = env.reference_policy(None).expect("oracle");
    let live = live_receiver();
    let dead = dead_endpoint();
    let configs: [(&str, Option<&str>); 3] = [
        ("off", None),
        ("otel live", Some(&live)),
        ("otel dead", Some(&dead)),
    ];
    let (paced_n, full_n, reps) = if quick {
        (200, 2000, 1)
    } else {
        (5000, 200_000, 3)
    };
    println!("| scenario | telemetry | episodes/s (median of {reps}) | vs off |");
    println!("|---|---|---|---|");
    for (name, n, rate) in [
        ("paced 1,000/s", paced_n, Some(1000.0)),
        ("full speed", full_n, None),
    ] {
        let mut got = vec![Vec::new(); configs.len()];
        for _ in 0..reps {
            for (k, (_, endpoint)) in configs.iter().enumerate() {
                got[k].push(run(&env, &oracle, n, rate, *endpoint));
            }
        }
        let medians: Vec<f64> = got.into_iter().map(median).collect();
        for ((label, _), m) in configs.iter().zip(&medians) {
            println!(
                "| {name} ({n} episodes) | {label} | {m:.0} | {:.3} |",
                m / medians[0]
            );
        }
    }
    // The copy into the queue: one trajectory of this environment.
    let t = env.rollout(&oracle, &nenyax::RolloutOptions::default());
    let k = if quick { 1000 } else { 200_000 };
    let t0 = Instant::now();
    for _ in 0..k {
        black_box(black_box(&t).clone());
    }
    let clone_ns = t0.elapsed().as_nanos() as f64 / k as f64;
    println!("\nclone of one trajectory into the queue: {clone_ns:.0} ns");
}
