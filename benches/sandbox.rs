//! Sandbox costs: create + exec(`true`) + destroy, and WarmPool acquire (+ drop), on the process
//! and jail backends. The Python reference (nenyax==0.1.0a1) is measured by
//! scripts/bench_sandbox_python.py; results and ratios in docs/performance.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use nenyax::sandbox::{BackendKind, Exec, Sandbox, SandboxConfig, WarmPool};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sandbox");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for kind in [BackendKind::Process, BackendKind::Jail] {
        if kind.ready().is_err() {
            continue;
        }
        let name = kind.name();
        g.bench_function(format!("{name}/create_exec_destroy"), |b| {
            b.iter(|| {
                let sb = Sandbox::new(kind).unwrap();
                let r = sb.exec(&Exec::argv(["true"])).unwrap();
                assert!(r.ok());
                sb.destroy().unwrap();
            })
        });
        let sb = Sandbox::new(kind).unwrap();
        g.bench_function(format!("{name}/exec_true"), |b| {
            b.iter(|| black_box(sb.exec(&Exec::argv(["true"])).unwrap()))
        });
        let setup = [Exec::shell(
            "mkdir -p data && seq 1 1000 > data/numbers.txt",
        )];
        let pool = WarmPool::new(SandboxConfig::new(kind), &setup, 4).unwrap();
        g.bench_function(format!("{name}/warm_pool_acquire"), |b| {
            b.iter(|| black_box(pool.acquire().unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
