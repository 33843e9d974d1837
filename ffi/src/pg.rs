//! Policy-gradient losses: one versioned batch struct for every precision, memory and device,
//! and the five older entry points as aliases that fill one.

use std::ffi::{c_char, c_void};

use nenyax_core::kernels::DeviceReal;
use nenyax_core::learn::{PgBatch, PgConfig, Real};

use crate::args::{json_object_arg, slice_arg};
use crate::error::{boundary, invalid, nenyax_error_t, FfiResult};
use crate::learn::tokens_of;

/// What a policy-loss call returns besides the gradients.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct nenyax_pg_stats_t {
    /// The total loss (policy + KL - entropy).
    pub loss: f64,
    /// The policy term.
    pub loss_pg: f64,
    /// agg(KL) before its coefficient (0 without a KL term).
    pub kl: f64,
    /// agg(entropy) (0 without an entropy bonus).
    pub entropy: f64,
    /// Fraction of valid tokens clipped.
    pub clip_fraction: f64,
    /// Mean of old - logp over valid tokens.
    pub approx_kl: f64,
    /// Mean token ratio over valid tokens.
    pub mean_ratio: f64,
    /// Valid tokens (N).
    pub tokens: f64,
    /// Rows with at least one valid token (B').
    pub rows: f64,
}

impl From<nenyax_core::learn::PgStats> for nenyax_pg_stats_t {
    fn from(s: nenyax_core::learn::PgStats) -> Self {
        nenyax_pg_stats_t {
            loss: s.loss,
            loss_pg: s.loss_pg,
            kl: s.kl.unwrap_or(0.0),
            entropy: s.entropy.unwrap_or(0.0),
            clip_fraction: s.clip_fraction,
            approx_kl: s.approx_kl,
            mean_ratio: s.mean_ratio,
            tokens: s.tokens as f64,
            rows: s.rows as f64,
        }
    }
}

/// Version of `nenyax_pg_batch_t`.
pub const NENYAX_PG_BATCH_VERSION: u32 = 1;
/// `nenyax_pg_batch_t.dtype`: every float array is `float`.
pub const NENYAX_DTYPE_F32: u32 = 1;
/// `nenyax_pg_batch_t.dtype`: every float array is `double`.
pub const NENYAX_DTYPE_F64: u32 = 2;
/// `nenyax_pg_batch_t.memory`: the arrays are in host memory.
pub const NENYAX_MEMORY_HOST: u32 = 0;
/// `nenyax_pg_batch_t.memory`: the arrays are CUDA device pointers (of the device's primary
/// context).
pub const NENYAX_MEMORY_CUDA: u32 = 1;
/// `nenyax_pg_batch_t.device`: the loss runs on the CPU (host memory only).
pub const NENYAX_DEVICE_CPU: u32 = 0;
/// `nenyax_pg_batch_t.device`: the loss runs on the GPU.
pub const NENYAX_DEVICE_CUDA: u32 = 1;

/// One batch of a policy-gradient loss: `rows` x `width` tokens, row-major, every float array
/// of type `dtype`. `ref_logp` is needed with a KL term and `entropy` with an entropy bonus
/// (else NULL); `advantages` holds `advantages_len` values: one per row or one per token (0
/// means one per row). `grad_logp` (rows x width) receives dL/dlogp; `grad_entropy` (may be
/// NULL) dL/dentropy. With `memory` = NENYAX_MEMORY_CUDA the loss is queued on `stream` (a
/// CUstream / cudaStream_t; NULL: the default stream) without synchronising and its stats go to
/// `stats_device` (NENYAX_PG_STATS_LEN doubles in device memory); otherwise `stats_device` and
/// `stream` are ignored (set them to NULL).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nenyax_pg_batch_t {
    /// NENYAX_PG_BATCH_VERSION.
    pub version: u32,
    /// NENYAX_DTYPE_F32 or NENYAX_DTYPE_F64.
    pub dtype: u32,
    /// NENYAX_MEMORY_HOST or NENYAX_MEMORY_CUDA.
    pub memory: u32,
    /// NENYAX_DEVICE_CPU or NENYAX_DEVICE_CUDA (host memory on the GPU: copied in and back).
    pub device: u32,
    /// Log-probs under the current policy.
    pub logp: *const c_void,
    /// Log-probs under the policy that sampled the tokens.
    pub old_logp: *const c_void,
    /// Log-probs under the reference policy, or NULL.
    pub ref_logp: *const c_void,
    /// Per-token entropy, or NULL.
    pub entropy: *const c_void,
    /// 1 for a valid token, 0 for padding.
    pub mask: *const u8,
    /// Advantages, per row or per token.
    pub advantages: *const c_void,
    /// Number of advantages (0: one per row).
    pub advantages_len: usize,
    /// Sequences.
    pub rows: usize,
    /// Tokens per sequence (padded).
    pub width: usize,
    /// Out: dL/dlogp, rows x width.
    pub grad_logp: *mut c_void,
    /// Out: dL/dentropy, rows x width, or NULL.
    pub grad_entropy: *mut c_void,
    /// Out (CUDA memory only): NENYAX_PG_STATS_LEN doubles in device memory.
    pub stats_device: *mut f64,
    /// CUDA memory only: the stream to queue on, or NULL.
    pub stream: *mut c_void,
}

impl nenyax_pg_batch_t {
    /// A batch of the old entry points' arguments: inputs are logp, old_logp, ref_logp,
    /// entropy, advantages; sizes are advantages_len, rows, width.
    fn legacy(
        (dtype, memory, device): (u32, u32, u32),
        inputs: [*const c_void; 5],
        mask: *const u8,
        [advantages_len, rows, width]: [usize; 3],
        [grad_logp, grad_entropy]: [*mut c_void; 2],
    ) -> Self {
        let [logp, old_logp, ref_logp, entropy, advantages] = inputs;
        nenyax_pg_batch_t {
            version: NENYAX_PG_BATCH_VERSION,
            dtype,
            memory,
            device,
            logp,
            old_logp,
            ref_logp,
            entropy,
            mask,
            advantages,
            advantages_len,
            rows,
            width,
            grad_logp,
            grad_entropy,
            stats_device: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
        }
    }
}

/// The host arrays of a batch, each checked for NULL and sized `rows x width`.
unsafe fn host_batch<'a, F: Real>(b: &nenyax_pg_batch_t) -> FfiResult<PgBatch<'a, F>> {
    let n = tokens_of(b.rows, b.width)?;
    let opt = |p: *const c_void, what: &str| -> FfiResult<Option<&'a [F]>> {
        if p.is_null() {
            Ok(None)
        } else {
            slice_arg(p.cast::<F>(), n, what).map(Some)
        }
    };
    let adv_len = if b.advantages_len == 0 {
        b.rows
    } else {
        b.advantages_len
    };
    Ok(PgBatch {
        logp: slice_arg(b.logp.cast::<F>(), n, "logp")?,
        old_logp: slice_arg(b.old_logp.cast::<F>(), n, "old_logp")?,
        ref_logp: opt(b.ref_logp, "ref_logp")?,
        entropy: opt(b.entropy, "entropy")?,
        mask: slice_arg(b.mask, n, "mask")?,
        advantages: slice_arg(b.advantages.cast::<F>(), adv_len, "advantages")?,
        width: b.width,
    })
}

/// The loss config of a C call: pg knobs or a named learner.
unsafe fn pg_config_arg(ptr: *const c_char, len: usize) -> FfiResult<PgConfig> {
    Ok(PgConfig::from_json(&json_object_arg(
        ptr,
        len,
        "config_json",
    )?)?)
}

/// Where a batch's loss runs, from its `memory` and `device` fields.
#[derive(Clone, Copy)]
enum Place {
    Cpu,
    CudaFromHost,
    Cuda,
}

/// Check a batch's version and fields and run its loss where and in the precision it says.
unsafe fn pg_loss_batch(
    b: &nenyax_pg_batch_t,
    config_json: *const c_char,
    config_len: usize,
    stats: *mut nenyax_pg_stats_t,
) -> FfiResult<()> {
    if b.version != NENYAX_PG_BATCH_VERSION {
        return Err(invalid(format!(
            "batch->version {} is not supported; this library speaks version {NENYAX_PG_BATCH_VERSION}",
            b.version
        )));
    }
    let place = match (b.memory, b.device) {
        (NENYAX_MEMORY_HOST, NENYAX_DEVICE_CPU) => Place::Cpu,
        (NENYAX_MEMORY_HOST, NENYAX_DEVICE_CUDA) => Place::CudaFromHost,
        (NENYAX_MEMORY_CUDA, NENYAX_DEVICE_CUDA) => Place::Cuda,
        (NENYAX_MEMORY_CUDA, NENYAX_DEVICE_CPU) => {
            return Err(invalid(
                "batch->device is NENYAX_DEVICE_CPU but batch->memory is NENYAX_MEMORY_CUDA: \
                 device memory is computed on the GPU (set device to NENYAX_DEVICE_CUDA)"
                    .into(),
            ))
        }
        (NENYAX_MEMORY_HOST | NENYAX_MEMORY_CUDA, d) => {
            return Err(invalid(format!(
                "batch->device {d} is not NENYAX_DEVICE_CPU (0) or NENYAX_DEVICE_CUDA (1)"
            )))
        }
        (m, _) => {
            return Err(invalid(format!(
                "batch->memory {m} is not NENYAX_MEMORY_HOST (0) or NENYAX_MEMORY_CUDA (1)"
            )))
        }
    };
    match b.dtype {
        NENYAX_DTYPE_F32 => pg_loss_at::<f32>(place, b, config_json, config_len, stats),
        NENYAX_DTYPE_F64 => pg_loss_at::<f64>(place, b, config_json, config_len, stats),
        d => Err(invalid(format!(
            "batch->dtype {d} is not NENYAX_DTYPE_F32 (1) or NENYAX_DTYPE_F64 (2)"
        ))),
    }
}

unsafe fn pg_loss_at<F: DeviceReal>(
    place: Place,
    b: &nenyax_pg_batch_t,
    config_json: *const c_char,
    config_len: usize,
    stats: *mut nenyax_pg_stats_t,
) -> FfiResult<()> {
    match place {
        Place::Cpu => pg_loss_cpu::<F>(b, config_json, config_len, stats),
        Place::CudaFromHost => pg_loss_cuda_host::<F>(b, config_json, config_len, stats),
        Place::Cuda => pg_loss_cuda::<F>(b, config_json, config_len),
    }
}

/// The loss on the CPU over host memory.
unsafe fn pg_loss_cpu<F: Real>(
    b: &nenyax_pg_batch_t,
    config_json: *const c_char,
    config_len: usize,
    stats: *mut nenyax_pg_stats_t,
) -> FfiResult<()> {
    let n = tokens_of(b.rows, b.width)?;
    let cfg = pg_config_arg(config_json, config_len)?;
    let batch = host_batch::<F>(b)?;
    if b.grad_logp.is_null() && n > 0 {
        return Err(invalid("grad_logp is NULL".into()));
    }
    let grad = if n == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(b.grad_logp.cast::<F>(), n)
    };
    let grad_h = if b.grad_entropy.is_null() || n == 0 {
        None
    } else {
        Some(std::slice::from_raw_parts_mut(
            b.grad_entropy.cast::<F>(),
            n,
        ))
    };
    let out = nenyax_core::learn::pg_loss_into(&batch, &cfg, grad, grad_h)?;
    if let Some(s) = stats.as_mut() {
        *s = out.into();
    }
    Ok(())
}

/// The fused GPU loss over host memory: copies in, runs, copies back and synchronises.
unsafe fn pg_loss_cuda_host<F: DeviceReal>(
    b: &nenyax_pg_batch_t,
    config_json: *const c_char,
    config_len: usize,
    stats: *mut nenyax_pg_stats_t,
) -> FfiResult<()> {
    let n = tokens_of(b.rows, b.width)?;
    let cfg = pg_config_arg(config_json, config_len)?;
    let batch = host_batch::<F>(b)?;
    if b.grad_logp.is_null() {
        return Err(invalid("grad_logp is NULL".into()));
    }
    let out = nenyax_core::kernels::pg_loss_host(&batch, &cfg)?;
    std::slice::from_raw_parts_mut(b.grad_logp.cast::<F>(), n).copy_from_slice(&out.grad_logp);
    if let (false, Some(g)) = (b.grad_entropy.is_null(), &out.grad_entropy) {
        std::slice::from_raw_parts_mut(b.grad_entropy.cast::<F>(), n).copy_from_slice(g);
    }
    if let Some(s) = stats.as_mut() {
        *s = out.stats.into();
    }
    Ok(())
}

/// The fused GPU loss over device pointers, queued on the batch's stream.
unsafe fn pg_loss_cuda<F: DeviceReal>(
    b: &nenyax_pg_batch_t,
    config_json: *const c_char,
    config_len: usize,
) -> FfiResult<()> {
    let (rows, advantages_len) = (b.rows, b.advantages_len);
    let n = tokens_of(rows, b.width)?;
    if advantages_len != 0 && advantages_len != rows && advantages_len != n {
        return Err(invalid(format!(
            "advantages_len is {advantages_len}; give 0 or {rows} (one per row) or {n} (one per token)"
        )));
    }
    let cfg = pg_config_arg(config_json, config_len)?;
    let batch = nenyax_core::kernels::DeviceBatch {
        logp: b.logp as u64,
        old_logp: b.old_logp as u64,
        ref_logp: b.ref_logp as u64,
        entropy: b.entropy as u64,
        mask: b.mask as u64,
        advantages: b.advantages as u64,
        advantages_per_token: advantages_len == n && n != rows,
        rows,
        width: b.width,
    };
    let out = nenyax_core::kernels::DeviceOutput {
        grad_logp: b.grad_logp as u64,
        grad_entropy: b.grad_entropy as u64,
        stats: b.stats_device as u64,
    };
    nenyax_core::kernels::pg_loss_device::<F>(&batch, &cfg, &out, b.stream)?;
    Ok(())
}

/// A policy-gradient loss over one batch (see nenyax_pg_batch_t), with the config JSON of
/// docs/c-api.md or a named learner such as {"learner": "dapo"}. Host memory: its value goes to
/// `stats` (may be NULL); CUDA memory: to `batch->stats_device` (`stats` is not written). Bad
/// `version`, `dtype`, `memory` or `device` values are NENYAX_STATUS_INVALID_ARGUMENT naming the
/// field; the GPU paths give NENYAX_STATUS_CUDA_UNAVAILABLE where there is no usable GPU.
#[no_mangle]
pub unsafe extern "C" fn nenyax_pg_loss_batch(
    batch: *const nenyax_pg_batch_t,
    config_json: *const c_char,
    config_len: usize,
    stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    boundary(|| {
        let b = batch
            .as_ref()
            .ok_or_else(|| invalid("batch is NULL".into()))?;
        pg_loss_batch(b, config_json, config_len, stats)
    })
}

// The five entry points below predate nenyax_pg_batch_t and only fill one. Their long
// signatures are kept on a few lines each (rustfmt would give every parameter its own line and
// repeat a 15-line block five times).

/// Deprecated: use nenyax_pg_loss_batch. The loss over host f64 arrays on the CPU (the fields
/// of nenyax_pg_batch_t as arguments).
#[no_mangle]
#[rustfmt::skip]
pub unsafe extern "C" fn nenyax_pg_loss(
    logp: *const f64, old_logp: *const f64, ref_logp: *const f64, entropy: *const f64,
    mask: *const u8, advantages: *const f64, advantages_len: usize, rows: usize, width: usize,
    config_json: *const c_char, config_len: usize,
    grad_logp: *mut f64, grad_entropy: *mut f64, stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    let b = nenyax_pg_batch_t::legacy((NENYAX_DTYPE_F64, NENYAX_MEMORY_HOST, NENYAX_DEVICE_CPU),
        [logp.cast(), old_logp.cast(), ref_logp.cast(), entropy.cast(), advantages.cast()],
        mask, [advantages_len, rows, width], [grad_logp.cast(), grad_entropy.cast()]);
    boundary(|| pg_loss_batch(&b, config_json, config_len, stats))
}

/// Deprecated: use nenyax_pg_loss_batch. nenyax_pg_loss in f32 (per-token maths in f64, results
/// rounded once).
#[no_mangle]
#[rustfmt::skip]
pub unsafe extern "C" fn nenyax_pg_loss_f32(
    logp: *const f32, old_logp: *const f32, ref_logp: *const f32, entropy: *const f32,
    mask: *const u8, advantages: *const f32, advantages_len: usize, rows: usize, width: usize,
    config_json: *const c_char, config_len: usize,
    grad_logp: *mut f32, grad_entropy: *mut f32, stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    let b = nenyax_pg_batch_t::legacy((NENYAX_DTYPE_F32, NENYAX_MEMORY_HOST, NENYAX_DEVICE_CPU),
        [logp.cast(), old_logp.cast(), ref_logp.cast(), entropy.cast(), advantages.cast()],
        mask, [advantages_len, rows, width], [grad_logp.cast(), grad_entropy.cast()]);
    boundary(|| pg_loss_batch(&b, config_json, config_len, stats))
}

/// Deprecated: use nenyax_pg_loss_batch. The fused loss on the GPU over f32 device pointers
/// (the primary context of the device), queued on `stream` (NULL: the default stream) without
/// synchronising. `stats_device` receives NENYAX_PG_STATS_LEN doubles in device memory; a NaN
/// on a valid token sets a bit in its last value (NENYAX_PG_BAD_*) and an all-masked batch
/// leaves its token count at 0. Same arguments and config as nenyax_pg_loss.
#[no_mangle]
#[rustfmt::skip]
pub unsafe extern "C" fn nenyax_pg_loss_cuda_f32(
    logp: *const f32, old_logp: *const f32, ref_logp: *const f32, entropy: *const f32,
    mask: *const u8, advantages: *const f32, advantages_len: usize, rows: usize, width: usize,
    config_json: *const c_char, config_len: usize,
    grad_logp: *mut f32, grad_entropy: *mut f32, stats_device: *mut f64, stream: *mut c_void,
) -> *mut nenyax_error_t {
    let b = nenyax_pg_batch_t { stats_device, stream, ..nenyax_pg_batch_t::legacy(
        (NENYAX_DTYPE_F32, NENYAX_MEMORY_CUDA, NENYAX_DEVICE_CUDA),
        [logp.cast(), old_logp.cast(), ref_logp.cast(), entropy.cast(), advantages.cast()],
        mask, [advantages_len, rows, width], [grad_logp.cast(), grad_entropy.cast()]) };
    boundary(|| pg_loss_batch(&b, config_json, config_len, std::ptr::null_mut()))
}

/// Deprecated: use nenyax_pg_loss_batch. nenyax_pg_loss_cuda_f32 over f64 device arrays.
#[no_mangle]
#[rustfmt::skip]
pub unsafe extern "C" fn nenyax_pg_loss_cuda_f64(
    logp: *const f64, old_logp: *const f64, ref_logp: *const f64, entropy: *const f64,
    mask: *const u8, advantages: *const f64, advantages_len: usize, rows: usize, width: usize,
    config_json: *const c_char, config_len: usize,
    grad_logp: *mut f64, grad_entropy: *mut f64, stats_device: *mut f64, stream: *mut c_void,
) -> *mut nenyax_error_t {
    let b = nenyax_pg_batch_t { stats_device, stream, ..nenyax_pg_batch_t::legacy(
        (NENYAX_DTYPE_F64, NENYAX_MEMORY_CUDA, NENYAX_DEVICE_CUDA),
        [logp.cast(), old_logp.cast(), ref_logp.cast(), entropy.cast(), advantages.cast()],
        mask, [advantages_len, rows, width], [grad_logp.cast(), grad_entropy.cast()]) };
    boundary(|| pg_loss_batch(&b, config_json, config_len, std::ptr::null_mut()))
}

/// Deprecated: use nenyax_pg_loss_batch. The fused GPU loss from host memory (f32): copies in,
/// runs, copies back and synchronises, with the same arguments, results and errors as
/// nenyax_pg_loss_f32.
#[no_mangle]
#[rustfmt::skip]
pub unsafe extern "C" fn nenyax_pg_loss_cuda_host_f32(
    logp: *const f32, old_logp: *const f32, ref_logp: *const f32, entropy: *const f32,
    mask: *const u8, advantages: *const f32, advantages_len: usize, rows: usize, width: usize,
    config_json: *const c_char, config_len: usize,
    grad_logp: *mut f32, grad_entropy: *mut f32, stats: *mut nenyax_pg_stats_t,
) -> *mut nenyax_error_t {
    let b = nenyax_pg_batch_t::legacy((NENYAX_DTYPE_F32, NENYAX_MEMORY_HOST, NENYAX_DEVICE_CUDA),
        [logp.cast(), old_logp.cast(), ref_logp.cast(), entropy.cast(), advantages.cast()],
        mask, [advantages_len, rows, width], [grad_logp.cast(), grad_entropy.cast()]);
    boundary(|| pg_loss_batch(&b, config_json, config_len, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{
        nenyax_error_code, nenyax_error_free, nenyax_error_message, nenyax_status_t,
    };

    const CONFIG: &str = r#"{"learner": "grpo_trl", "kl": null}"#;

    /// The status and message of an error, freed.
    unsafe fn take(e: *mut nenyax_error_t) -> (nenyax_status_t, String) {
        assert!(!e.is_null(), "the call succeeded");
        let msg = std::ffi::CStr::from_ptr(nenyax_error_message(e, std::ptr::null_mut()))
            .to_string_lossy()
            .into_owned();
        let status = nenyax_error_code(e);
        nenyax_error_free(e);
        (status, msg)
    }

    #[test]
    fn the_batch_and_the_old_entry_point_agree_in_both_precisions() {
        let (rows, width) = (2, 3);
        let logp = [-1.0, -0.5, -2.0, -0.7, -1.2, -0.1];
        let old = [-1.1, -0.4, -2.0, -0.9, -1.0, -0.2];
        let mask = [1u8, 1, 0, 1, 1, 1];
        let adv = [0.5, -1.0];
        let mut grad = [0.0f64; 6];
        let mut want = [0.0f64; 6];
        let (mut s, mut w) = (nenyax_pg_stats_t::default(), nenyax_pg_stats_t::default());
        let b = nenyax_pg_batch_t::legacy(
            (NENYAX_DTYPE_F64, NENYAX_MEMORY_HOST, NENYAX_DEVICE_CPU),
            [
                logp.as_ptr().cast(),
                old.as_ptr().cast(),
                std::ptr::null(),
                std::ptr::null(),
                adv.as_ptr().cast(),
            ],
            mask.as_ptr(),
            [0, rows, width],
            [grad.as_mut_ptr().cast(), std::ptr::null_mut()],
        );
        unsafe {
            assert!(
                nenyax_pg_loss_batch(&b, CONFIG.as_ptr().cast(), CONFIG.len(), &mut s).is_null()
            );
            assert!(nenyax_pg_loss(
                logp.as_ptr(),
                old.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                mask.as_ptr(),
                adv.as_ptr(),
                0,
                rows,
                width,
                CONFIG.as_ptr().cast(),
                CONFIG.len(),
                want.as_mut_ptr(),
                std::ptr::null_mut(),
                &mut w,
            )
            .is_null());
        }
        assert_eq!((s.loss, s.tokens), (w.loss, w.tokens));
        assert_eq!(s.tokens, 5.0);
        assert_eq!(grad, want);
        assert_eq!(grad[2], 0.0, "a masked token gets no gradient");

        let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
        let (lp32, old32, adv32) = (f(&logp), f(&old), f(&adv));
        let mut g32 = [0.0f32; 6];
        let b32 = nenyax_pg_batch_t {
            dtype: NENYAX_DTYPE_F32,
            logp: lp32.as_ptr().cast(),
            old_logp: old32.as_ptr().cast(),
            advantages: adv32.as_ptr().cast(),
            grad_logp: g32.as_mut_ptr().cast(),
            ..b
        };
        let mut s32 = nenyax_pg_stats_t::default();
        unsafe {
            assert!(
                nenyax_pg_loss_batch(&b32, CONFIG.as_ptr().cast(), CONFIG.len(), &mut s32)
                    .is_null()
            );
        }
        assert!(
            (s32.loss - s.loss).abs() < 1e-5,
            "{} vs {}",
            s32.loss,
            s.loss
        );
        for (g, w) in g32.iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() < 1e-5);
        }
    }

    #[test]
    fn bad_batch_fields_are_invalid_arguments_naming_the_field() {
        let good = nenyax_pg_batch_t::legacy(
            (NENYAX_DTYPE_F64, NENYAX_MEMORY_HOST, NENYAX_DEVICE_CPU),
            [std::ptr::null(); 5],
            std::ptr::null(),
            [0, 1, 1],
            [std::ptr::null_mut(); 2],
        );
        let cases = [
            (nenyax_pg_batch_t { version: 0, ..good }, "batch->version 0"),
            (nenyax_pg_batch_t { dtype: 3, ..good }, "batch->dtype 3"),
            (nenyax_pg_batch_t { memory: 2, ..good }, "batch->memory 2"),
            (nenyax_pg_batch_t { device: 5, ..good }, "batch->device 5"),
            (
                nenyax_pg_batch_t {
                    memory: NENYAX_MEMORY_CUDA,
                    ..good
                },
                "batch->device is NENYAX_DEVICE_CPU",
            ),
            (good, "logp is NULL"),
        ];
        for (b, needle) in cases {
            let (status, msg) = unsafe {
                take(nenyax_pg_loss_batch(
                    &b,
                    CONFIG.as_ptr().cast(),
                    CONFIG.len(),
                    std::ptr::null_mut(),
                ))
            };
            assert_eq!(
                status,
                nenyax_status_t::NENYAX_STATUS_INVALID_ARGUMENT,
                "{msg}"
            );
            assert!(msg.contains(needle), "{msg} does not name {needle}");
        }
    }
}
