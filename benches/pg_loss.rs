//! The fused policy-gradient loss + gradient of Nenyax (`nenyax::learn::pg_loss_into`, rows in
//! parallel with rayon, the gradient written into a buffer allocated once) on CPU, on the inputs
//! that `benches/pg_torch.py` times with PyTorch eager and numpy; `benches/pg_compare.sh` runs
//! both and prints the ratios.
//!
//! Inputs per size `B x T`: lengths uniform in `[T/4, T]` (prefix masks), `logp = -|N(0,1)| *
//! 1.5 - 0.01`, `old = logp + N(0, 0.05)`, `ref = logp + N(0, 0.1)`, one advantage `N(0,1)` per
//! row, all from SplitMix64 with a fixed seed, generated as f32 (the f64 runs widen the same
//! values). They are written to `OUT/data-BxT.*` (raw little-endian arrays) for the Python side.
//! Padding holds finite values too (the eager formula multiplies by the mask, and NaN * 0 is NaN).
//!
//! Configurations (the same on both sides):
//!
//! - `a`: token-level PPO-clip 0.2/0.28, no dual-clip, token-mean aggregation (DAPO);
//! - `b`: `a` + k3 KL to `ref_logp`, coefficient 0.04, unclamped (TRL's `beta`);
//! - `c`: GRPO as TRL computes it: PPO-clip 0.2/0.2, seq-mean-token-mean over all B rows.
//!
//! Timed per configuration: `pg_loss_into::<f32>` (the main line), `pg_loss_into::<f64>`, and for
//! `a` the allocating `pg_loss::<f32>`. Each is run once to warm up, then timed `RUNS` times; one
//! JSON object per line on stdout (and in `OUT/rust.jsonl`, or `OUT/rust-LABEL.jsonl` with
//! `--label`, which times f32 only and writes no data) with the median and best, ns per padded
//! token and the loss value. At the first size the f32 gradient of each configuration is written
//! to `OUT/grad-CFG-BxT.f32` so that the Python side can compare its own token by token.
//!
//! Run: `cargo bench --bench pg_loss -- --bench [--sizes 1024x2048,4096x2048] [--runs 7]
//! [--configs a,b,c] [--out target/compare-pg] [--label NAME]`; the thread count is rayon's
//! (`RAYON_NUM_THREADS`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use nenyax::learn::{
    pg_loss, pg_loss_into, Aggregation, Kl, KlEstimator, PgBatch, PgConfig, PgStats, Real,
    Surrogate,
};

const SEED: u64 = 0x6e65_6e79_6178_5047;

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller, one value per call).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// One batch of inputs, as f32.
struct Data {
    b: usize,
    t: usize,
    logp: Vec<f32>,
    old: Vec<f32>,
    reference: Vec<f32>,
    mask: Vec<u8>,
    adv: Vec<f32>,
    valid: usize,
}

fn generate(b: usize, t: usize) -> Data {
    let mut rng = SplitMix(SEED ^ ((b as u64) << 32) ^ t as u64);
    let n = b * t;
    let (mut logp, mut old, mut reference) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let mut mask = vec![0u8; n];
    let mut adv = vec![0f32; b];
    let mut valid = 0;
    for (i, a) in adv.iter_mut().enumerate() {
        let len = t / 4 + (rng.next() % (t - t / 4 + 1) as u64) as usize;
        valid += len;
        *a = rng.normal() as f32;
        for j in 0..t {
            let k = i * t + j;
            let lp = -rng.normal().abs() * 1.5 - 0.01;
            logp[k] = lp as f32;
            old[k] = (lp + 0.05 * rng.normal()) as f32;
            reference[k] = (lp + 0.1 * rng.normal()) as f32;
            mask[k] = u8::from(j < len);
        }
    }
    Data {
        b,
        t,
        logp,
        old,
        reference,
        mask,
        adv,
        valid,
    }
}

fn write_raw(path: &Path, bytes: impl IntoIterator<Item = u8>) {
    let v: Vec<u8> = bytes.into_iter().collect();
    fs::write(path, v).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn f32s(v: &[f32]) -> impl Iterator<Item = u8> + '_ {
    v.iter().flat_map(|x| x.to_le_bytes())
}

fn save(out: &Path, d: &Data) {
    let p = |name: &str| out.join(format!("data-{}x{}.{name}", d.b, d.t));
    write_raw(&p("logp.f32"), f32s(&d.logp));
    write_raw(&p("old.f32"), f32s(&d.old));
    write_raw(&p("ref.f32"), f32s(&d.reference));
    write_raw(&p("adv.f32"), f32s(&d.adv));
    write_raw(&p("mask.u8"), d.mask.iter().copied());
}

fn configs() -> Vec<(&'static str, PgConfig)> {
    let dapo = PgConfig {
        surrogate: Surrogate::PpoClip {
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: None,
        },
        aggregation: Aggregation::TokenMean,
        kl: None,
        entropy_coef: 0.0,
    };
    let with_kl = PgConfig {
        kl: Some(Kl {
            estimator: KlEstimator::K3,
            coef: 0.04,
            clamp: false,
        }),
        ..dapo
    };
    let grpo = PgConfig {
        surrogate: Surrogate::PpoClip {
            clip_low: 0.2,
            clip_high: 0.2,
            dual_clip: None,
        },
        aggregation: Aggregation::SeqMeanTokenMean { trl_rows: true },
        kl: None,
        entropy_coef: 0.0,
    };
    vec![("a", dapo), ("b", with_kl), ("c", grpo)]
}

/// Median and best of `runs` timed calls after one warm-up, in ms, and the last result.
fn time<R>(runs: usize, mut f: impl FnMut() -> R) -> (f64, f64, R) {
    let mut last = f();
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        last = std::hint::black_box(f());
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    (ms[runs / 2], ms[0], last)
}

struct Args {
    sizes: Vec<(usize, usize)>,
    runs: usize,
    out: PathBuf,
    configs: Vec<String>,
    label: String,
}

fn parse_args() -> Option<Args> {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return None;
    }
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let sizes = value("--sizes")
        .unwrap_or_else(|| "1024x2048,4096x2048".into())
        .split(',')
        .map(|s| {
            let (b, t) = s.split_once('x').expect("--sizes: BxT,BxT");
            (b.parse().expect("B"), t.parse().expect("T"))
        })
        .collect();
    let runs = value("--runs").map_or(7, |r| r.parse().expect("--runs N"));
    // cargo bench runs the binary in the package root.
    let out = PathBuf::from(value("--out").unwrap_or_else(|| "target/compare-pg".into()));
    let configs = value("--configs")
        .unwrap_or_else(|| "a,b,c".into())
        .split(',')
        .map(String::from)
        .collect();
    let label = value("--label").unwrap_or_default();
    Some(Args {
        sizes,
        runs,
        out,
        configs,
        label,
    })
}

/// Times `pg_loss_into::<F>` (the gradient buffer allocated once, outside the timing) and, with
/// `alloc`, the allocating `pg_loss::<F>` too. Returns the JSON lines and the gradient.
fn bench<F: Real>(
    args: &Args,
    d: &Data,
    name: &str,
    cfg: &PgConfig,
    widen: impl Fn(f32) -> F,
    alloc: bool,
) -> (Vec<serde_json::Value>, Vec<F>) {
    let conv = |v: &[f32]| v.iter().map(|&x| widen(x)).collect::<Vec<F>>();
    let (logp, old, reference, adv) = (
        conv(&d.logp),
        conv(&d.old),
        conv(&d.reference),
        conv(&d.adv),
    );
    let batch = PgBatch {
        logp: &logp,
        old_logp: &old,
        ref_logp: cfg.kl.map(|_| reference.as_slice()),
        entropy: None,
        mask: &d.mask,
        advantages: &adv,
        width: d.t,
    };
    let padded = (d.b * d.t) as f64;
    let dtype = if std::mem::size_of::<F>() == 4 {
        "f32"
    } else {
        "f64"
    };
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let line = |api: &str, median: f64, best: f64, s: &PgStats| {
        json!({
            "side": "nenyax", "api": api, "dtype": dtype, "config": name, "label": args.label,
            "size": format!("{}x{}", d.b, d.t), "valid_tokens": d.valid, "threads": threads,
            "runs": args.runs, "median_ms": median, "best_ms": best,
            "ns_per_token": median * 1e6 / padded, "best_ns_per_token": best * 1e6 / padded,
            "loss": s.loss, "clip_fraction": s.clip_fraction,
        })
    };
    let mut grad = vec![widen(0.0); d.b * d.t];
    let (median, best, s) = time(args.runs, || {
        pg_loss_into(&batch, cfg, &mut grad, None).unwrap()
    });
    assert_eq!(s.tokens, d.valid);
    let mut lines = vec![line("pg_loss_into", median, best, &s)];
    if alloc {
        let (median, best, o) = time(args.runs, || pg_loss(&batch, cfg).unwrap());
        assert_eq!(o.grad_logp, grad, "pg_loss and pg_loss_into disagree");
        lines.push(line("pg_loss", median, best, &o.stats));
    }
    (lines, grad)
}

fn main() {
    let Some(args) = parse_args() else {
        println!("pg_loss: a benchmark; run it with `cargo bench --bench pg_loss -- --bench`");
        return;
    };
    fs::create_dir_all(&args.out).unwrap();
    let file = if args.label.is_empty() {
        "rust.jsonl".to_string()
    } else {
        format!("rust-{}.jsonl", args.label)
    };
    let mut log = fs::File::create(args.out.join(file)).unwrap();
    for (si, &(b, t)) in args.sizes.iter().enumerate() {
        let d = generate(b, t);
        if args.label.is_empty() {
            save(&args.out, &d);
        }
        for (name, cfg) in configs() {
            if !args.configs.iter().any(|c| c == name) {
                continue;
            }
            let full = args.label.is_empty();
            let (mut lines, grad) = bench::<f32>(&args, &d, name, &cfg, |x| x, full && name == "a");
            if full {
                lines.extend(bench::<f64>(&args, &d, name, &cfg, f64::from, false).0);
            }
            for line in lines {
                println!("{line}");
                writeln!(log, "{line}").unwrap();
            }
            if si == 0 && args.label.is_empty() {
                write_raw(
                    &args.out.join(format!("grad-{name}-{b}x{t}.f32")),
                    f32s(&grad),
                );
            }
        }
    }
}
