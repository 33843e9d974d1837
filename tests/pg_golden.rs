//! The learners' maths against the golden vectors of pg-math.md (`tests/data/pg-golden.json`,
//! a copy of the shared reference's file): every advantage, loss, gradient and DPO case, on CPU.

use serde_json::Value;

use nenyax::kernels::DeviceReal;
use nenyax::learn::{
    advantages, dapo_keep, dpo_loss, pg_loss, reinforce_pp, Estimator, PgBatch, PgConfig, PgStats,
    Singleton, StdScope,
};

fn golden() -> Value {
    let text = include_str!("data/pg-golden.json");
    serde_json::from_str(text).expect("pg-golden.json parses")
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .flat_map(|x| match x {
            Value::Array(_) => f64s(x),
            other => vec![other.as_f64().expect("a number")],
        })
        .collect()
}

fn close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[test]
fn every_advantage_case_matches_in_f64_and_f32() {
    let g = golden();
    let tol = &g["tolerance"];
    let (rtol, atol) = (
        tol["float64_kernels"]["rtol"].as_f64().unwrap(),
        tol["float64_kernels"]["atol"].as_f64().unwrap(),
    );
    let (rtol32, atol32) = (
        tol["float32_kernels"]["rtol"].as_f64().unwrap(),
        tol["float32_kernels"]["atol"].as_f64().unwrap(),
    );
    let mut checked = 0;
    for case in g["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let inputs = &case["inputs"];
        let kind = case["kind"].as_str().unwrap();
        if !kind.starts_with("advantage") {
            continue;
        }
        let rewards = f64s(&inputs["rewards"]);
        let ids: Vec<i64> = inputs["group_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        match kind {
            "advantage" => {
                let estimators = [
                    ("grpo_verl_eps1e-6", Estimator::GRPO_VERL),
                    ("grpo_trl_eps1e-4", Estimator::GRPO_TRL),
                    (
                        "grpo_trl_scale_batch_eps1e-4",
                        Estimator::Grpo {
                            eps: 1e-4,
                            scope: StdScope::Batch,
                            singleton: Singleton::Zero,
                        },
                    ),
                    ("dr_grpo_no_std_verl", Estimator::DrGrpo),
                    (
                        "rloo_verl",
                        Estimator::Rloo {
                            singleton: Singleton::Reward,
                        },
                    ),
                    (
                        "rloo_vectorized_verl_and_trl",
                        Estimator::Rloo {
                            singleton: Singleton::Zero,
                        },
                    ),
                    ("reinforce_batch_mean", Estimator::ReinforceBatchMean),
                ];
                for (key, est) in estimators {
                    let want = f64s(&case["expected"][key]);
                    let got = advantages(&rewards, &ids, &est).unwrap();
                    close(&format!("{name}/{key}"), &got, &want, rtol, atol);
                    // f32 inputs, f32 outputs, at the f32 tolerance.
                    let r32: Vec<f64> = rewards.iter().map(|&r| f64::from(r as f32)).collect();
                    let got32: Vec<f64> = advantages(&r32, &ids, &est)
                        .unwrap()
                        .iter()
                        .map(|&a| f64::from(a as f32))
                        .collect();
                    close(
                        &format!("{name}/{key} (f32)"),
                        &got32,
                        &want,
                        rtol32,
                        atol32,
                    );
                    checked += 1;
                }
                let keep: Vec<bool> = case["expected"]["dapo_keep_group"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_bool().unwrap())
                    .collect();
                assert_eq!(dapo_keep(&rewards, &ids).unwrap(), keep, "{name}/dapo");
                checked += 1;
            }
            "advantage_token" => {
                let mask_rows = inputs["mask"].as_array().unwrap();
                let width = mask_rows[0].as_array().unwrap().len();
                let mask: Vec<u8> = f64s(&inputs["mask"]).iter().map(|&m| m as u8).collect();
                for gamma in f64s(&case["params"]["gammas"]) {
                    let tag = if gamma == 1.0 {
                        "1".to_string()
                    } else {
                        gamma.to_string()
                    };
                    let (adv, ret) = reinforce_pp(&rewards, &mask, width, gamma, None).unwrap();
                    let want = f64s(&case["expected"][format!("reinforce_pp_gamma{tag}")]);
                    close(&format!("{name}/gamma{tag}"), &adv, &want, rtol, atol);
                    let want = f64s(&case["expected"][format!("returns_gamma{tag}")]);
                    close(&format!("{name}/returns{tag}"), &ret, &want, rtol, atol);
                    checked += 2;
                }
                let (adv, _) = reinforce_pp(&rewards, &mask, width, 1.0, Some(&ids)).unwrap();
                let want = f64s(&case["expected"]["reinforce_pp_baseline"]);
                close(&format!("{name}/baseline"), &adv, &want, rtol, atol);
                checked += 1;
            }
            _ => {}
        }
    }
    assert_eq!(
        checked,
        2 * 8 + 5,
        "every advantage vector of the golden file was checked"
    );
}

fn config(p: &Value) -> PgConfig {
    PgConfig::from_json(p).expect("the golden params parse")
}

/// One pg_loss case in precision `F` on the CPU or the GPU: inputs rounded to `F`, outputs
/// widened back.
fn run_loss_case<F: DeviceReal>(
    g: &Value,
    case: &Value,
    gpu: bool,
) -> (PgStats, Vec<f64>, Option<Vec<f64>>, Vec<u8>) {
    let name = case["name"].as_str().unwrap();
    let inputs = match case["inputs_ref"].as_str() {
        Some(r) => &g["shared_inputs"][r],
        None => &case["inputs"],
    };
    let width = inputs["mask"][0].as_array().unwrap().len();
    let mask: Vec<u8> = f64s(&inputs["mask"]).iter().map(|&m| m as u8).collect();
    let to = |v: &Value| -> Vec<F> { f64s(v).into_iter().map(F::from_f64).collect() };
    let (logp, old) = (to(&inputs["logp"]), to(&inputs["old_logp"]));
    let reference = inputs.get("ref_logp").map(to);
    let entropy = inputs.get("entropy").map(to);
    let advantages = to(&inputs["advantages"]);
    let batch = PgBatch {
        logp: &logp,
        old_logp: &old,
        ref_logp: reference.as_deref(),
        entropy: entropy.as_deref(),
        mask: &mask,
        advantages: &advantages,
        width,
    };
    let cfg = config(&case["params"]);
    let out = if gpu {
        nenyax::kernels::pg_loss_host(&batch, &cfg)
    } else {
        pg_loss(&batch, &cfg)
    }
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let widen = |v: &[F]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    (
        out.stats,
        widen(&out.grad_logp),
        out.grad_entropy.as_deref().map(widen),
        mask,
    )
}

fn check_loss_cases<F: DeviceReal>(tolerance: &str, gpu: bool) -> usize {
    let g = golden();
    let tol = &g["tolerance"][tolerance];
    let (rtol, atol) = (tol["rtol"].as_f64().unwrap(), tol["atol"].as_f64().unwrap());
    let mut checked = 0;
    for case in g["cases"].as_array().unwrap() {
        if case["kind"] != "pg_loss" {
            continue;
        }
        let name = format!(
            "{} ({tolerance}{})",
            case["name"].as_str().unwrap(),
            if gpu { ", GPU" } else { "" }
        );
        let (stats, grad, grad_entropy, mask) = run_loss_case::<F>(&g, case, gpu);
        let want = &case["expected"];
        let scalar = |what: &str, got: f64, key: &str| {
            close(
                &format!("{name}/{what}"),
                &[got],
                &[want[key].as_f64().unwrap()],
                rtol,
                atol,
            )
        };
        scalar("loss", stats.loss, "loss");
        scalar("loss_pg", stats.loss_pg, "loss_pg");
        close(
            &format!("{name}/grad_logp"),
            &grad,
            &f64s(&want["grad_logp"]),
            rtol,
            atol,
        );
        if want["loss_kl_unscaled"].is_number() {
            scalar("kl", stats.kl.unwrap(), "loss_kl_unscaled");
        }
        if want["entropy_agg"].is_number() {
            scalar("entropy", stats.entropy.unwrap(), "entropy_agg");
            close(
                &format!("{name}/grad_entropy"),
                grad_entropy.as_ref().unwrap(),
                &f64s(&want["grad_entropy"]),
                rtol,
                atol,
            );
        }
        // Masked positions hold garbage in the inputs and must get exactly 0.
        assert!(
            mask.iter().zip(&grad).all(|(&m, &g)| m != 0 || g == 0.0),
            "{name}"
        );
        checked += 1;
    }
    checked
}

#[test]
fn every_loss_and_gradient_case_matches_in_f64() {
    assert_eq!(
        check_loss_cases::<f64>("float64_kernels", false),
        35,
        "every pg_loss case of the golden file was checked"
    );
}

#[test]
fn every_loss_and_gradient_case_matches_in_f32() {
    assert_eq!(
        check_loss_cases::<f32>("float32_kernels", false),
        35,
        "every pg_loss case of the golden file was checked"
    );
}

/// The DPO case in precision `F`; its note gives the rewards and groups the pairs come from.
fn check_dpo<F: DeviceReal>(tolerance: &str) {
    let g = golden();
    let tol = &g["tolerance"][tolerance];
    let (rtol, atol) = (tol["rtol"].as_f64().unwrap(), tol["atol"].as_f64().unwrap());
    let case = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "dpo")
        .unwrap();
    let inputs = &case["inputs"];
    let width = inputs["mask"][0].as_array().unwrap().len();
    let mask: Vec<u8> = f64s(&inputs["mask"]).iter().map(|&m| m as u8).collect();
    let to = |v: &Value| -> Vec<F> { f64s(v).into_iter().map(F::from_f64).collect() };
    let out = dpo_loss(
        &[1.0, 0.0, 0.5, 0.0, 0.0, 1.0],
        &[0, 0, 0, 1, 1, 1],
        &to(&inputs["logp"]),
        &to(&inputs["ref_logp"]),
        &mask,
        width,
        case["params"]["beta"].as_f64().unwrap(),
    )
    .unwrap();
    let want = &case["expected"];
    let name = |what: &str| format!("dpo/{what} ({tolerance})");
    close(
        &name("loss"),
        &[out.loss],
        &[want["loss"].as_f64().unwrap()],
        rtol,
        atol,
    );
    close(
        &name("per_pair"),
        &out.per_pair,
        &f64s(&want["per_pair_loss"]),
        rtol,
        atol,
    );
    let grad: Vec<f64> = out.grad_logp.iter().map(|x| x.to_f64()).collect();
    close(
        &name("grad_logp"),
        &grad,
        &f64s(&want["grad_logp"]),
        rtol,
        atol,
    );
}

#[test]
fn the_dpo_case_matches_in_f64() {
    check_dpo::<f64>("float64_kernels");
}

#[test]
fn the_dpo_case_matches_in_f32() {
    check_dpo::<f32>("float32_kernels");
}

/// A small deterministic generator, so the large-batch test needs no crate.
struct Lcg(u64);
impl Lcg {
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The golden cases are small enough to run on the calling thread; this batch is large enough
/// for rayon. With a fixed divisor each row's terms do not depend on the others, so the batch
/// must equal the sum of its rows computed one at a time.
fn large_batch_equals_its_rows<F: DeviceReal>() {
    let (b, t) = (96, 700);
    let mut rng = Lcg(7);
    let mut mask = vec![0u8; b * t];
    let (mut logp, mut old, mut rf, mut ent) = (vec![], vec![], vec![], vec![]);
    for i in 0..b {
        let len = (rng.uniform() * t as f64) as usize; // some rows are nearly empty
        for j in 0..t {
            mask[i * t + j] = u8::from(j < len);
            let lp = -3.0 * rng.uniform();
            logp.push(lp);
            old.push(lp + 0.3 * (rng.uniform() - 0.5));
            rf.push(lp + 0.5 * (rng.uniform() - 0.5));
            ent.push(2.0 * rng.uniform());
        }
    }
    let adv: Vec<f64> = (0..b).map(|_| 2.0 * rng.uniform() - 1.0).collect();
    let to = |v: &[f64]| -> Vec<F> { v.iter().map(|&x| F::from_f64(x)).collect() };
    let (logp, old, rf, ent, adv) = (to(&logp), to(&old), to(&rf), to(&ent), to(&adv));
    let cfg = PgConfig::from_json(&serde_json::json!({
        "loss": "ppo_clip", "clip_low": 0.2, "clip_high": 0.28, "dual_clip_c": 3.0,
        "agg": "seq-mean-token-sum-norm", "agg_divisor": 512.0,
        "kl": {"estimator": "k3", "coef": 0.01, "clamp": true}, "entropy_coef": 0.001
    }))
    .unwrap();
    let slice = |v: &[F], i: usize| v[i * t..(i + 1) * t].to_vec();
    let whole = pg_loss(
        &PgBatch {
            logp: &logp,
            old_logp: &old,
            ref_logp: Some(&rf),
            entropy: Some(&ent),
            mask: &mask,
            advantages: &adv,
            width: t,
        },
        &cfg,
    )
    .unwrap();
    let (mut loss, mut grad, mut grad_h) = (0.0, Vec::new(), Vec::new());
    for i in 0..b {
        if mask[i * t] == 0 {
            grad.extend(std::iter::repeat(F::from_f64(0.0)).take(t));
            grad_h.extend(std::iter::repeat(F::from_f64(0.0)).take(t));
            continue;
        }
        let (lp, od, r, h) = (
            slice(&logp, i),
            slice(&old, i),
            slice(&rf, i),
            slice(&ent, i),
        );
        let one = pg_loss(
            &PgBatch {
                logp: &lp,
                old_logp: &od,
                ref_logp: Some(&r),
                entropy: Some(&h),
                mask: &mask[i * t..(i + 1) * t],
                advantages: &adv[i..=i],
                width: t,
            },
            &cfg,
        )
        .unwrap();
        loss += one.stats.loss;
        grad.extend(one.grad_logp);
        grad_h.extend(one.grad_entropy.unwrap());
    }
    close("loss", &[whole.stats.loss], &[loss], 1e-12, 1e-15);
    assert_eq!(
        whole.grad_logp, grad,
        "the gradient is the same bit for bit"
    );
    assert_eq!(whole.grad_entropy.unwrap(), grad_h);
    // The same batch twice gives the same bits: the row sums are added in row order.
    let again = pg_loss(
        &PgBatch {
            logp: &logp,
            old_logp: &old,
            ref_logp: Some(&rf),
            entropy: Some(&ent),
            mask: &mask,
            advantages: &adv,
            width: t,
        },
        &cfg,
    )
    .unwrap();
    assert_eq!(again.stats, whole.stats);
}

#[test]
fn a_large_batch_in_parallel_equals_its_rows_one_by_one() {
    large_batch_equals_its_rows::<f64>();
    large_batch_equals_its_rows::<f32>();
}

/// The named learners are the golden file's preset cases (pg-math.md §3), knob for knob; where
/// a case fixes a batch-specific value (Dr. GRPO's divisor), the override is the only change.
#[test]
fn the_named_learners_are_the_golden_presets() {
    use nenyax::learn::{Algorithm, LEARNERS};
    let g = golden();
    let pairs = [
        (
            "preset/GRPO(trl)",
            serde_json::json!({"learner": "grpo_trl", "trl_rows": false}),
        ),
        ("preset/GRPO(verl)", serde_json::json!({"learner": "grpo"})),
        (
            "preset/DrGRPO(trl)",
            serde_json::json!({"learner": "dr_grpo", "agg_divisor": 48.0}),
        ),
        ("preset/DAPO", serde_json::json!({"learner": "dapo"})),
        ("preset/GSPO", serde_json::json!({"learner": "gspo"})),
        (
            "preset/RLOO(verl)+ppo_clip",
            serde_json::json!({"learner": "rloo"}),
        ),
        (
            "preset/REINFORCE(batch mean)",
            serde_json::json!({"learner": "reinforce"}),
        ),
    ];
    for (case_name, learner) in pairs {
        let case = g["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == case_name)
            .unwrap_or_else(|| panic!("{case_name} is in the golden file"));
        assert_eq!(
            PgConfig::from_json(&learner).unwrap(),
            config(&case["params"]),
            "{case_name}"
        );
    }
    // Every preset survives a JSON round trip, and an override changes just that knob.
    for l in LEARNERS {
        assert_eq!(
            Algorithm::from_json(&l.to_json()).unwrap(),
            *l,
            "{}",
            l.name
        );
    }
    let dapo =
        Algorithm::from_json(&serde_json::json!({"learner": "dapo", "clip_high": 0.3})).unwrap();
    assert!(dapo.dapo_filter);
    assert_eq!(dapo.loss.to_json()["clip_high"], 0.3);
    assert_eq!(
        Estimator::from_json(&serde_json::json!({"learner": "grpo_trl"})).unwrap(),
        Estimator::GRPO_TRL
    );
    let e = Algorithm::from_json(&serde_json::json!({"learner": "ppo"})).unwrap_err();
    assert!(e.to_string().contains("unknown learner \"ppo\""), "{e}");
    // A bare loss config (what nenyax_pg_loss takes) is a `pg` learner whose advantages the
    // caller computes: accepted, and written back without an estimator.
    let pg = Algorithm::from_json(
        &serde_json::json!({"learner": "pg", "loss": "reinforce", "agg": "token-mean"}),
    )
    .unwrap();
    assert_eq!(pg.estimator, None);
    let every_knob = serde_json::json!({"loss": "ppo_clip", "clip_low": 0.2, "clip_high": 0.28,
        "dual_clip_c": 3.0, "agg": "seq-mean-token-sum-norm", "agg_divisor": 64.0,
        "kl": {"estimator": "k3", "coef": 0.01, "clamp": true}, "entropy_coef": 0.001});
    let a = Algorithm::from_json(&every_knob).unwrap();
    assert_eq!(a.loss, PgConfig::from_json(&every_knob).unwrap());
    // Typos are errors that name the knob, the closest accepted one and all of them.
    for (cfg, typo, meant) in [
        (
            serde_json::json!({"learner": "dapo", "clip_hi": 0.3}),
            "clip_hi",
            "clip_high",
        ),
        (
            serde_json::json!({"learner": "grpo", "epss": 1e-6}),
            "epss",
            "eps",
        ),
        (
            serde_json::json!({"loss": "reinforce", "agg": "token-mean", "entropy_coeff": 0.1}),
            "entropy_coeff",
            "entropy_coef",
        ),
    ] {
        let e = Algorithm::from_json(&cfg).unwrap_err().to_string();
        assert!(e.contains(&format!("`{typo}`")), "{e}");
        assert!(e.contains(&format!("did you mean `{meant}`")), "{e}");
        assert!(
            e.contains("accepted: learner, dapo_filter, estimator"),
            "{e}"
        );
    }
    let e = PgConfig::from_json(
        &serde_json::json!({"loss": "reinforce", "agg": "token-mean",
        "kl": {"estimator": "k3", "coeff": 0.1}}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`coeff`") && e.contains("did you mean `coef`"),
        "{e}"
    );
    let e = Estimator::from_json(&serde_json::json!({"estimator": "grpo", "std": "group"}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`std`") && e.contains("std_scope"), "{e}");
}

/// Token-level advantages (REINFORCE++) go straight into the loss. With gamma = 1 each row's
/// valid tokens share one value, so the loss must equal the per-row form.
#[test]
fn token_level_advantages_feed_the_loss() {
    let g = golden();
    let case = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "advantage_token")
        .unwrap();
    let inputs = &case["inputs"];
    let width = inputs["mask"][0].as_array().unwrap().len();
    let mask: Vec<u8> = f64s(&inputs["mask"]).iter().map(|&m| m as u8).collect();
    let rewards = f64s(&inputs["rewards"]);
    let (tok, _) = reinforce_pp(&rewards, &mask, width, 1.0, None).unwrap();
    let rows = rewards.len();
    let per_row: Vec<f64> = (0..rows)
        .map(|i| {
            (0..width)
                .find(|&j| mask[i * width + j] != 0)
                .map_or(0.0, |j| tok[i * width + j])
        })
        .collect();
    let logp: Vec<f64> = (0..rows * width)
        .map(|k| -0.1 * (k % 13) as f64 - 0.2)
        .collect();
    let old: Vec<f64> = logp
        .iter()
        .enumerate()
        .map(|(k, l)| l + 0.01 * (k % 5) as f64 - 0.02)
        .collect();
    let cfg = PgConfig::from_json(&serde_json::json!({"learner": "reinforce_pp"})).unwrap();
    let run = |adv: &[f64]| {
        pg_loss(
            &PgBatch {
                logp: &logp,
                old_logp: &old,
                ref_logp: None,
                entropy: None,
                mask: &mask,
                advantages: adv,
                width,
            },
            &cfg,
        )
        .unwrap()
    };
    let (a, b) = (run(&tok), run(&per_row));
    close("loss", &[a.stats.loss], &[b.stats.loss], 1e-12, 1e-15);
    close("grad", &a.grad_logp, &b.grad_logp, 1e-12, 1e-15);
    assert!(a.stats.loss != 0.0);
}

/// Whether this machine has a usable GPU; prints why not, so a skip is never silent.
fn gpu_or_say_why(test: &str) -> bool {
    match nenyax::kernels::device() {
        Ok(d) => {
            println!(
                "{test}: running on {} (sm_{}{})",
                d.name, d.compute_capability.0, d.compute_capability.1
            );
            true
        }
        Err(e) => {
            println!("{test}: GPU part skipped: {e}");
            assert_eq!(e.kind(), "CudaUnavailable", "{e}");
            false
        }
    }
}

/// On a GPU machine: every golden case through the fused kernels in f64 and f32 at the golden
/// tolerances. Without one: the entry point says CUDA is unavailable (checked, not skipped).
#[test]
fn every_loss_case_matches_on_the_gpu_or_cuda_is_reported_unavailable() {
    if !gpu_or_say_why("golden cases on the GPU") {
        let (lp, m, a) = ([-1.0f32; 4], [1u8; 4], [1.0f32, -1.0]);
        let batch = PgBatch {
            logp: &lp,
            old_logp: &lp,
            ref_logp: None,
            entropy: None,
            mask: &m,
            advantages: &a,
            width: 2,
        };
        let cfg = PgConfig::from_json(&serde_json::json!({"learner": "dapo"})).unwrap();
        let e = nenyax::kernels::pg_loss_host(&batch, &cfg).unwrap_err();
        assert_eq!(e.kind(), "CudaUnavailable", "{e}");
        assert!(e.to_string().starts_with("CUDA unavailable: "), "{e}");
        return;
    }
    assert_eq!(check_loss_cases::<f64>("float64_kernels", true), 35);
    assert_eq!(check_loss_cases::<f32>("float32_kernels", true), 35);
}

/// On a GPU machine: a batch large enough for many blocks, with every term on and token-level
/// advantages, matches the CPU path; NaNs and an empty mask come back as the CPU's errors.
#[test]
fn a_large_batch_on_the_gpu_matches_the_cpu() {
    if !gpu_or_say_why("large batch on the GPU") {
        return;
    }
    let (b, t) = (300, 1500);
    let mut rng = Lcg(11);
    let mut mask = vec![0u8; b * t];
    let (mut logp, mut old, mut rf, mut ent, mut adv) = (vec![], vec![], vec![], vec![], vec![]);
    for i in 0..b {
        let len = (rng.uniform() * t as f64) as usize;
        for j in 0..t {
            mask[i * t + j] = u8::from(j < len);
            let lp = -3.0 * rng.uniform() as f32;
            logp.push(lp);
            old.push(lp + 0.3 * (rng.uniform() as f32 - 0.5));
            rf.push(lp + 0.5 * (rng.uniform() as f32 - 0.5));
            ent.push(2.0 * rng.uniform() as f32);
            adv.push(2.0 * rng.uniform() as f32 - 1.0);
        }
    }
    for learner in ["grpo", "grpo_trl", "gspo", "dr_grpo", "reinforce"] {
        let mut cfg = PgConfig::from_json(&serde_json::json!({"learner": learner})).unwrap();
        cfg.entropy_coef = 0.01;
        if cfg.kl.is_none() {
            cfg.kl = PgConfig::from_json(&serde_json::json!({"learner": "grpo"}))
                .unwrap()
                .kl;
        }
        let batch = PgBatch {
            logp: &logp,
            old_logp: &old,
            ref_logp: Some(&rf),
            entropy: Some(&ent),
            mask: &mask,
            advantages: &adv,
            width: t,
        };
        let cpu = pg_loss(&batch, &cfg).unwrap();
        let gpu = nenyax::kernels::pg_loss_host(&batch, &cfg).unwrap();
        let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        close(
            &format!("{learner}/loss"),
            &[gpu.stats.loss],
            &[cpu.stats.loss],
            1e-6,
            1e-9,
        );
        close(
            &format!("{learner}/grad"),
            &wide(&gpu.grad_logp),
            &wide(&cpu.grad_logp),
            1e-6,
            1e-12,
        );
        close(
            &format!("{learner}/grad_entropy"),
            &wide(gpu.grad_entropy.as_ref().unwrap()),
            &wide(cpu.grad_entropy.as_ref().unwrap()),
            1e-6,
            1e-12,
        );
        for (what, g, c) in [
            (
                "clip_fraction",
                gpu.stats.clip_fraction,
                cpu.stats.clip_fraction,
            ),
            ("approx_kl", gpu.stats.approx_kl, cpu.stats.approx_kl),
            ("mean_ratio", gpu.stats.mean_ratio, cpu.stats.mean_ratio),
        ] {
            close(&format!("{learner}/{what}"), &[g], &[c], 1e-6, 1e-9);
        }
        assert_eq!(
            (gpu.stats.tokens, gpu.stats.rows),
            (cpu.stats.tokens, cpu.stats.rows)
        );
    }
    let cfg = PgConfig::from_json(&serde_json::json!({"learner": "dapo"})).unwrap();
    let first = mask.iter().position(|&m| m != 0).unwrap();
    let mut bad = logp.clone();
    bad[first] = f32::NAN;
    let batch = PgBatch {
        logp: &bad,
        old_logp: &old,
        ref_logp: None,
        entropy: None,
        mask: &mask,
        advantages: &adv,
        width: t,
    };
    let e = nenyax::kernels::pg_loss_host(&batch, &cfg).unwrap_err();
    assert!(e.to_string().contains("`logp`"), "{e}");
    let empty = vec![0u8; b * t];
    let e = nenyax::kernels::pg_loss_host(
        &PgBatch {
            mask: &empty,
            logp: &logp,
            ..batch
        },
        &cfg,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no valid tokens"), "{e}");
}

/// Log-ratios beyond ±20 are clamped for the loss (verl) but the mean-ratio metric is the true
/// one; and a NaN on a valid token is named, wherever it sits in a row of any length.
#[test]
fn extreme_ratios_and_nans_in_the_vectorised_pass() {
    let t = 21; // two full chunks of 8 and a tail
    let mask: Vec<u8> = (0..t).map(|j| u8::from(j != 3)).collect();
    let logp: Vec<f64> = (0..t).map(|j| -1.0 - 0.01 * j as f64).collect();
    let mut old = logp.clone();
    old[5] = logp[5] - 25.0; // ratio e^25 on a valid token
    old[17] = logp[17] + 30.0; // ratio e^-30
    old[3] = f64::NAN; // masked garbage
    let cfg = PgConfig::from_json(&serde_json::json!({"learner": "dapo"})).unwrap();
    let batch = PgBatch {
        logp: &logp,
        old_logp: &old,
        ref_logp: None,
        entropy: None,
        mask: &mask,
        advantages: &[0.7],
        width: t,
    };
    let out = pg_loss(&batch, &cfg).unwrap();
    let valid: Vec<usize> = (0..t).filter(|&j| mask[j] != 0).collect();
    let want: f64 =
        valid.iter().map(|&j| (logp[j] - old[j]).exp()).sum::<f64>() / valid.len() as f64;
    close("mean_ratio", &[out.stats.mean_ratio], &[want], 1e-12, 0.0);
    assert_eq!(
        out.grad_logp[5], 0.0,
        "|log-ratio| >= 20 passes no gradient"
    );
    assert_eq!(out.grad_logp[3], 0.0);
    for at in [0, 7, 8, 16, 20] {
        let mut bad = logp.clone();
        bad[at] = f64::NAN;
        let e = pg_loss(
            &PgBatch {
                logp: &bad,
                ..batch
            },
            &cfg,
        )
        .unwrap_err();
        assert!(e.to_string().contains(&format!("logp[0][{at}]")), "{e}");
    }
}
