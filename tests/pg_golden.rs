//! The learners' maths against the golden vectors of pg-math.md (`tests/data/pg-golden.json`,
//! a copy of the shared reference's file): every advantage, loss, gradient and DPO case, on CPU.

use serde_json::Value;

use nenyax::learn::{
    advantages, dapo_keep, dpo_loss, pg_loss, reinforce_pp, Estimator, PgBatch, PgConfig,
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

#[test]
fn every_loss_and_gradient_case_matches_in_f64() {
    let g = golden();
    let tol = &g["tolerance"]["float64_kernels"];
    let (rtol, atol) = (tol["rtol"].as_f64().unwrap(), tol["atol"].as_f64().unwrap());
    let mut checked = 0;
    for case in g["cases"].as_array().unwrap() {
        if case["kind"] != "pg_loss" {
            continue;
        }
        let name = case["name"].as_str().unwrap();
        let inputs = match case["inputs_ref"].as_str() {
            Some(r) => &g["shared_inputs"][r],
            None => &case["inputs"],
        };
        let width = inputs["mask"][0].as_array().unwrap().len();
        let mask: Vec<u8> = f64s(&inputs["mask"]).iter().map(|&m| m as u8).collect();
        let (logp, old) = (f64s(&inputs["logp"]), f64s(&inputs["old_logp"]));
        let reference = inputs.get("ref_logp").map(f64s);
        let entropy = inputs.get("entropy").map(f64s);
        let advantages = f64s(&inputs["advantages"]);
        let batch = PgBatch {
            logp: &logp,
            old_logp: &old,
            ref_logp: reference.as_deref(),
            entropy: entropy.as_deref(),
            mask: &mask,
            advantages: &advantages,
            width,
        };
        let out =
            pg_loss(&batch, &config(&case["params"])).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = &case["expected"];
        close(
            &format!("{name}/loss"),
            &[out.loss],
            &[want["loss"].as_f64().unwrap()],
            rtol,
            atol,
        );
        close(
            &format!("{name}/loss_pg"),
            &[out.loss_pg],
            &[want["loss_pg"].as_f64().unwrap()],
            rtol,
            atol,
        );
        close(
            &format!("{name}/grad_logp"),
            &out.grad_logp,
            &f64s(&want["grad_logp"]),
            rtol,
            atol,
        );
        if let Some(k) = want["loss_kl_unscaled"].as_f64() {
            close(&format!("{name}/kl"), &[out.kl.unwrap()], &[k], rtol, atol);
        }
        if let Some(h) = want["entropy_agg"].as_f64() {
            close(
                &format!("{name}/entropy"),
                &[out.entropy.unwrap()],
                &[h],
                rtol,
                atol,
            );
            let ge = out.grad_entropy.as_ref().unwrap();
            close(
                &format!("{name}/grad_entropy"),
                ge,
                &f64s(&want["grad_entropy"]),
                rtol,
                atol,
            );
        }
        // Masked positions hold garbage in the inputs and must get exactly 0.
        assert!(
            mask.iter()
                .zip(&out.grad_logp)
                .all(|(&m, &g)| m != 0 || g == 0.0),
            "{name}"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 35,
        "every pg_loss case of the golden file was checked"
    );
}

#[test]
fn the_dpo_case_matches_in_f64() {
    let g = golden();
    let tol = &g["tolerance"]["float64_kernels"];
    let (rtol, atol) = (tol["rtol"].as_f64().unwrap(), tol["atol"].as_f64().unwrap());
    let case = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "dpo")
        .unwrap();
    let inputs = &case["inputs"];
    // The case's note gives the rewards and groups its pairs come from.
    let rewards = [1.0, 0.0, 0.5, 0.0, 0.0, 1.0];
    let ids = [0, 0, 0, 1, 1, 1];
    let width = inputs["mask"][0].as_array().unwrap().len();
    let mask: Vec<u8> = f64s(&inputs["mask"]).iter().map(|&m| m as u8).collect();
    let (loss, per_pair, grad) = dpo_loss(
        &rewards,
        &ids,
        &f64s(&inputs["logp"]),
        &f64s(&inputs["ref_logp"]),
        &mask,
        width,
        case["params"]["beta"].as_f64().unwrap(),
    )
    .unwrap();
    let want = &case["expected"];
    close(
        "dpo/loss",
        &[loss],
        &[want["loss"].as_f64().unwrap()],
        rtol,
        atol,
    );
    close(
        "dpo/per_pair",
        &per_pair,
        &f64s(&want["per_pair_loss"]),
        rtol,
        atol,
    );
    close(
        "dpo/grad_logp",
        &grad,
        &f64s(&want["grad_logp"]),
        rtol,
        atol,
    );
}
