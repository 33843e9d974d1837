//! Learners: advantages, REINFORCE++, DPO, the CUDA device, learner presets (the policy
//! losses are in pg.rs).

use std::ffi::c_char;

use crate::args::{json_object_arg, nenyax_string_t, slice_arg, to_string_out};
use crate::error::{boundary, invalid, nenyax_error_t, out_param, FfiResult};

/// Advantages of `n` sequences into `out` (n values). Options: {"estimator": "grpo_verl" |
/// "grpo_trl" | "grpo" | "dr_grpo" | "rloo" | "reinforce", "eps", "singleton": "reward" |
/// "zero", "std_scope": "group" | "batch"}; `group_ids` label the rollouts of one task.
#[no_mangle]
pub unsafe extern "C" fn nenyax_advantages(
    rewards: *const f64,
    group_ids: *const i64,
    n: usize,
    options_json: *const c_char,
    options_len: usize,
    out: *mut f64,
) -> *mut nenyax_error_t {
    boundary(|| {
        let rewards = slice_arg(rewards, n, "rewards")?;
        let ids = slice_arg(group_ids, n, "group_ids")?;
        if out.is_null() {
            return Err(invalid("out is NULL".into()));
        }
        let est = nenyax_core::learn::Estimator::from_json(&json_object_arg(
            options_json,
            options_len,
            "options_json",
        )?)?;
        let adv = nenyax_core::learn::advantages(rewards, ids, &est)?;
        std::slice::from_raw_parts_mut(out, n).copy_from_slice(&adv);
        Ok(())
    })
}

/// DAPO's dynamic-sampling filter: `keep_out[i]` is 1 unless row i's group has all-equal rewards
/// (a group of one is kept). Exact equality, a deliberate deviation from the reference's float
/// std test (docs/learners.md).
#[no_mangle]
pub unsafe extern "C" fn nenyax_dapo_keep(
    rewards: *const f64,
    group_ids: *const i64,
    n: usize,
    keep_out: *mut u8,
) -> *mut nenyax_error_t {
    boundary(|| {
        let rewards = slice_arg(rewards, n, "rewards")?;
        let ids = slice_arg(group_ids, n, "group_ids")?;
        if keep_out.is_null() {
            return Err(invalid("keep_out is NULL".into()));
        }
        let keep = nenyax_core::learn::dapo_keep(rewards, ids)?;
        for (o, k) in std::slice::from_raw_parts_mut(keep_out, n)
            .iter_mut()
            .zip(keep)
        {
            *o = u8::from(k);
        }
        Ok(())
    })
}

/// `rows x width` without overflow.
pub(crate) fn tokens_of(rows: usize, width: usize) -> FfiResult<usize> {
    rows.checked_mul(width)
        .ok_or_else(|| invalid(format!("rows ({rows}) x width ({width}) overflows")))
}

/// REINFORCE++ token advantages (`rows` x `width`, row-major) into `advantages_out`, and the
/// discounted returns into `returns_out` (may be NULL). `group_ids` (may be NULL) selects the
/// baseline variant: the group mean is subtracted before whitening.
#[no_mangle]
pub unsafe extern "C" fn nenyax_reinforce_pp(
    rewards: *const f64,
    group_ids: *const i64,
    mask: *const u8,
    rows: usize,
    width: usize,
    gamma: f64,
    advantages_out: *mut f64,
    returns_out: *mut f64,
) -> *mut nenyax_error_t {
    boundary(|| {
        let n = tokens_of(rows, width)?;
        let rewards = slice_arg(rewards, rows, "rewards")?;
        let ids = if group_ids.is_null() {
            None
        } else {
            Some(slice_arg(group_ids, rows, "group_ids")?)
        };
        let mask = slice_arg(mask, n, "mask")?;
        if advantages_out.is_null() {
            return Err(invalid("advantages_out is NULL".into()));
        }
        let (adv, ret) = nenyax_core::learn::reinforce_pp(rewards, mask, width, gamma, ids)?;
        std::slice::from_raw_parts_mut(advantages_out, n).copy_from_slice(&adv);
        if !returns_out.is_null() {
            std::slice::from_raw_parts_mut(returns_out, n).copy_from_slice(&ret);
        }
        Ok(())
    })
}

/// DPO (sigmoid) on each group's best-vs-worst pair: the mean loss in `loss`, dL/dlogp in
/// `grad_logp` (rows x width, 0 for rows in no pair) and the number of pairs in `pairs` (may be
/// NULL). Sequence log-probs are sums over valid tokens.
#[no_mangle]
pub unsafe extern "C" fn nenyax_dpo_loss(
    rewards: *const f64,
    group_ids: *const i64,
    logp: *const f64,
    ref_logp: *const f64,
    mask: *const u8,
    rows: usize,
    width: usize,
    beta: f64,
    loss: *mut f64,
    grad_logp: *mut f64,
    pairs: *mut usize,
) -> *mut nenyax_error_t {
    boundary(|| {
        let n = tokens_of(rows, width)?;
        let out = nenyax_core::learn::dpo_loss(
            slice_arg(rewards, rows, "rewards")?,
            slice_arg(group_ids, rows, "group_ids")?,
            slice_arg(logp, n, "logp")?,
            slice_arg(ref_logp, n, "ref_logp")?,
            slice_arg(mask, n, "mask")?,
            width,
            beta,
        )?;
        if grad_logp.is_null() {
            return Err(invalid("grad_logp is NULL".into()));
        }
        std::slice::from_raw_parts_mut(grad_logp, n).copy_from_slice(&out.grad_logp);
        if let Some(l) = loss.as_mut() {
            *l = out.loss;
        }
        if let Some(p) = pairs.as_mut() {
            *p = out.pairs.len();
        }
        Ok(())
    })
}

/// How many f64 values the CUDA entry points write to `stats_device`: loss, loss_pg, kl,
/// entropy, clip_fraction, approx_kl, mean_ratio, tokens, rows, bad-input flags.
pub const NENYAX_PG_STATS_LEN: usize = 10;
const _: () = assert!(NENYAX_PG_STATS_LEN == nenyax_core::kernels::STATS_LEN);

/// Bit in the last stats value: `logp` held a NaN on a valid token.
pub const NENYAX_PG_BAD_LOGP: u32 = 1;
/// Bit in the last stats value: `old_logp` held a NaN on a valid token.
pub const NENYAX_PG_BAD_OLD_LOGP: u32 = 2;
/// Bit in the last stats value: `ref_logp` held a NaN on a valid token.
pub const NENYAX_PG_BAD_REF_LOGP: u32 = 4;
/// Bit in the last stats value: `entropy` held a NaN on a valid token.
pub const NENYAX_PG_BAD_ENTROPY: u32 = 8;
/// Bit in the last stats value: an advantage was NaN.
pub const NENYAX_PG_BAD_ADVANTAGES: u32 = 16;
const _: () = assert!(
    NENYAX_PG_BAD_LOGP == nenyax_core::kernels::BAD_LOGP
        && NENYAX_PG_BAD_OLD_LOGP == nenyax_core::kernels::BAD_OLD_LOGP
        && NENYAX_PG_BAD_REF_LOGP == nenyax_core::kernels::BAD_REF_LOGP
        && NENYAX_PG_BAD_ENTROPY == nenyax_core::kernels::BAD_ENTROPY
        && NENYAX_PG_BAD_ADVANTAGES == nenyax_core::kernels::BAD_ADVANTAGES
);

/// The GPU the CUDA entry points use, as JSON {"ordinal", "name", "compute_capability": [major,
/// minor]}; NENYAX_STATUS_CUDA_UNAVAILABLE says why there is none (no driver, no device, no
/// NVRTC). The first call loads the driver and compiles the kernels.
#[no_mangle]
pub unsafe extern "C" fn nenyax_cuda_device(out: *mut nenyax_string_t) -> *mut nenyax_error_t {
    boundary(|| {
        let d = nenyax_core::kernels::device()?;
        let v = serde_json::json!({
            "ordinal": d.ordinal,
            "name": d.name,
            "compute_capability": [d.compute_capability.0, d.compute_capability.1],
        });
        out_param(out, to_string_out(v.to_string()))
    })
}

/// The full JSON of a named learner (e.g. "grpo", "dapo", "gspo"; see docs/c-api.md) with any
/// overrides applied, so a trainer can log exactly which knobs it ran. Free with nenyax_string_free.
#[no_mangle]
pub unsafe extern "C" fn nenyax_learner_json(
    config_json: *const c_char,
    config_len: usize,
    out: *mut nenyax_string_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let v = json_object_arg(config_json, config_len, "config_json")?;
        let learner = nenyax_core::learn::Algorithm::from_json(&v)?;
        out_param(out, to_string_out(learner.to_json().to_string()))
    })
}
