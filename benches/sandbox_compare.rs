//! The Rust side of benches/container_compare.sh: the same loops and statistics as
//! benches/python_container.py, so the two print comparable lines.
//!
//! `cargo bench --bench sandbox_compare -- PART [--image IMG] [-n N]`, PART one of:
//!
//! - `container`: `container/create_exec_destroy` (create, exec `true`, destroy, all timed),
//!   `container/cold_create` (create timed; exec and destroy not), `container/exec_true`,
//!   `container/destroy`, `container/fork`, `container/warm_pool_acquire` (the episode loop:
//!   acquire timed, then exec `true`, then the sandbox dropped on a background thread, as the
//!   Python side hands its destroy to a thread) and `container/warm_pool_acquire_full` (waits,
//!   untimed, until the pool is full again before each acquire: the hand-out alone);
//! - `pool`: `process/warm_pool_acquire` and `jail/warm_pool_acquire`, `acquire()` then drop in
//!   a loop, as `reference/process/warm_pool_acquire`.
//!
//! One JSON object per line on stdout: workload, n, median_ms, mean_ms, min_ms (each iteration
//! timed alone with `Instant`, after warm-up iterations that are not counted).

use std::time::{Duration, Instant};

use nenyax::sandbox::{BackendKind, Exec, Sandbox, SandboxConfig, WarmPool};

const SETUP: &str = "mkdir -p data && seq 1 1000 > data/numbers.txt";

fn report(workload: &str, times: &[Duration], extra: &str) {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let median = if n % 2 == 1 {
        ms[n / 2]
    } else {
        (ms[n / 2 - 1] + ms[n / 2]) / 2.0
    };
    let mean = ms.iter().sum::<f64>() / n as f64;
    println!(
        "{{\"workload\": \"{workload}\", \"n\": {n}, \"median_ms\": {median}, \"mean_ms\": {mean}, \
         \"min_ms\": {}{extra}}}",
        ms[0]
    );
}

fn timed(n: usize, warmup: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..warmup {
        f();
    }
    (0..n)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed()
        })
        .collect()
}

fn ok(sb: &Sandbox) {
    let r = sb.exec(&Exec::argv(["true"])).expect("exec true");
    assert!(r.ok(), "`true` failed in the sandbox: {}", r.stderr);
}

fn container(image: &str, n: usize) {
    if let Err(why) = BackendKind::Container.ready() {
        eprintln!("the container backend is not ready here: {why}");
        std::process::exit(2);
    }
    let mut config = SandboxConfig::new(BackendKind::Container);
    config.image = Some(image.to_string());
    let create = || Sandbox::create(config.clone()).expect("create a container sandbox");

    let times = timed(n, 1, || {
        let sb = create();
        ok(&sb);
        sb.destroy().expect("destroy");
    });
    report("container/create_exec_destroy", &times, "");

    let times: Vec<Duration> = (0..=n)
        .map(|_| {
            let t0 = Instant::now();
            let sb = create();
            let dt = t0.elapsed();
            ok(&sb);
            sb.destroy().expect("destroy");
            dt
        })
        .skip(1)
        .collect();
    report("container/cold_create", &times, "");

    let sb = create();
    report("container/exec_true", &timed(n, 1, || ok(&sb)), "");
    let times: Vec<Duration> = (0..n)
        .map(|_| {
            let s = create();
            let t0 = Instant::now();
            s.destroy().expect("destroy");
            t0.elapsed()
        })
        .collect();
    report("container/destroy", &times, "");
    sb.sh(SETUP).expect("setup");
    let times: Vec<Duration> = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            let child = sb.fork().expect("fork");
            let dt = t0.elapsed();
            drop(child);
            dt
        })
        .collect();
    report("container/fork", &times, "");
    drop(sb);

    let pool = WarmPool::new(config.clone(), &[Exec::shell(SETUP)], 4).expect("warm pool");
    let mut reaper = Vec::new();
    let mut episode = || {
        let t0 = Instant::now();
        let sb = pool.acquire().expect("acquire");
        let dt = t0.elapsed();
        ok(&sb);
        reaper.push(std::thread::spawn(move || drop(sb)));
        dt
    };
    let times: Vec<Duration> = (0..n).map(|_| episode()).collect();
    report("container/warm_pool_acquire", &times, "");
    let times: Vec<Duration> = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            while pool.ready() < pool.size() && t0.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(5));
            }
            episode()
        })
        .collect();
    report("container/warm_pool_acquire_full", &times, "");
    drop(pool);
    for h in reaper {
        let _ = h.join();
    }
}

fn pools(n: usize) {
    for kind in [BackendKind::Process, BackendKind::Jail] {
        if let Err(why) = kind.ready() {
            eprintln!("{} skipped: {why}", kind.name());
            continue;
        }
        let pool =
            WarmPool::new(SandboxConfig::new(kind), &[Exec::shell(SETUP)], 4).expect("warm pool");
        let singles = timed(n, 3, || drop(pool.acquire().expect("acquire")));
        let t0 = Instant::now();
        for _ in 0..n {
            drop(pool.acquire().expect("acquire"));
        }
        let tight = t0.elapsed().as_secs_f64() * 1e3 / n as f64;
        report(
            &format!("{}/warm_pool_acquire", kind.name()),
            &singles,
            &format!(", \"tight_loop_mean_ms\": {tight}"),
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut part = None;
    let mut image = "localhost/nenyax-base:bookworm".to_string();
    let mut n = 10;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--image" => image = args.next().expect("--image IMG"),
            "-n" => n = args.next().and_then(|v| v.parse().ok()).expect("-n N"),
            p => part = Some(p.to_string()),
        }
    }
    match part.as_deref() {
        Some("container") => container(&image, n),
        Some("pool") => pools(n),
        // `cargo test --all-targets` and a plain `cargo bench` (or one with another bench's
        // filter) run this too: nothing asked of it is no failure.
        other => eprintln!(
            "sandbox_compare: nothing measured ({}); pass `container` or `pool`, e.g. \
             `cargo bench --bench sandbox_compare -- pool -n 200` (benches/container_compare.sh)",
            other.map_or("no part given".to_string(), |p| format!(
                "`{p}` is not a part"
            ))
        ),
    }
}
