//! What the CUDA path takes and returns, built with or without CUDA: the kernels' source, the
//! device batch and output descriptions, the stats layout and its bad-input flags.

use crate::error::{Error, Result};
use crate::learn::{PgConfig, PgStats, Real};

/// The CUDA C source of the kernels.
pub const SOURCE: &str = include_str!("pg.cu");

/// How many f64 values the device path writes to its stats buffer: loss, loss_pg, kl,
/// entropy, clip_fraction, approx_kl, mean_ratio, tokens, rows, bad-input flags.
pub const STATS_LEN: usize = 10;

/// Bad-input flags in `stats[9]`, one bit per argument that held a NaN on a valid token.
pub const BAD_LOGP: u32 = 1;
/// `old_logp` held a NaN.
pub const BAD_OLD_LOGP: u32 = 2;
/// `ref_logp` held a NaN.
pub const BAD_REF_LOGP: u32 = 4;
/// `entropy` held a NaN.
pub const BAD_ENTROPY: u32 = 8;
/// An advantage was NaN.
pub const BAD_ADVANTAGES: u32 = 16;

/// A float type the kernels have an entry point for.
pub trait DeviceReal: Real {
    /// The kernel's name in pg.cu.
    const KERNEL: &'static str;
}
impl DeviceReal for f32 {
    const KERNEL: &'static str = "nx_pg_loss_f32";
}
impl DeviceReal for f64 {
    const KERNEL: &'static str = "nx_pg_loss_f64";
}

/// The GPU the kernels run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device ordinal (`NENYAX_CUDA_DEVICE`, default 0).
    pub ordinal: i32,
    /// Its name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
}

/// A batch in device memory (raw `CUdeviceptr` values), row-major `[rows][width]`.
#[derive(Debug, Clone, Copy)]
pub struct DeviceBatch {
    /// Current-policy log-probs.
    pub logp: u64,
    /// Behaviour-policy log-probs.
    pub old_logp: u64,
    /// Reference log-probs (0: none; needed with a KL term).
    pub ref_logp: u64,
    /// Token entropies (0: none; needed with an entropy bonus).
    pub entropy: u64,
    /// u8 mask, 1 = counted.
    pub mask: u64,
    /// Advantages: one per row, or one per token with `advantages_per_token`.
    pub advantages: u64,
    /// Whether `advantages` holds `rows x width` values.
    pub advantages_per_token: bool,
    /// B.
    pub rows: usize,
    /// T.
    pub width: usize,
}

/// Where the device path writes: gradients and the [`STATS_LEN`] f64 stats, all device memory.
#[derive(Debug, Clone, Copy)]
pub struct DeviceOutput {
    /// dL/dlogp, `rows x width`.
    pub grad_logp: u64,
    /// dL/dH, `rows x width` (0: not wanted).
    pub grad_entropy: u64,
    /// [`STATS_LEN`] f64 values.
    pub stats: u64,
}

/// The checks both builds make on a device call before touching the GPU.
pub(super) fn check_device_args(b: &DeviceBatch, out: &DeviceOutput, cfg: &PgConfig) -> Result<()> {
    cfg.validate()?;
    let bad = |arg: &str, why: &str| Err(Error::Config(format!("`{arg}`: {why}")));
    if b.rows == 0 || b.width == 0 {
        return bad("rows", "rows and width must both be positive");
    }
    if b.rows > i32::MAX as usize || b.width > i32::MAX as usize {
        return bad("rows", "rows and width must each fit in 31 bits");
    }
    for (arg, p) in [
        ("logp", b.logp),
        ("old_logp", b.old_logp),
        ("mask", b.mask),
        ("advantages", b.advantages),
        ("grad_logp", out.grad_logp),
        ("stats", out.stats),
    ] {
        if p == 0 {
            return bad(arg, "is NULL");
        }
    }
    if cfg.kl.is_some() && b.ref_logp == 0 {
        return bad("ref_logp", "is required with a KL penalty");
    }
    if cfg.entropy_coef != 0.0 && b.entropy == 0 {
        return bad("entropy", "is required with an entropy bonus");
    }
    Ok(())
}

/// The device stats buffer as [`PgStats`], or the error its flags report.
pub fn stats_from_device(s: &[f64; STATS_LEN], cfg: &PgConfig) -> Result<PgStats> {
    let flags = s[9] as u32;
    let bad = |arg: &str| Error::Config(format!("`{arg}`: holds a NaN on a valid token"));
    if s[7] == 0.0 {
        return Err(Error::Config(
            "`mask`: has no valid tokens; nothing to compute a loss over".into(),
        ));
    }
    for (bit, arg) in [
        (BAD_LOGP, "logp"),
        (BAD_OLD_LOGP, "old_logp"),
        (BAD_REF_LOGP, "ref_logp"),
        (BAD_ENTROPY, "entropy"),
        (BAD_ADVANTAGES, "advantages"),
    ] {
        if flags & bit != 0 {
            return Err(bad(arg));
        }
    }
    Ok(PgStats {
        loss: s[0],
        loss_pg: s[1],
        kl: cfg.kl.map(|_| s[2]),
        entropy: (cfg.entropy_coef != 0.0).then_some(s[3]),
        clip_fraction: s[4],
        approx_kl: s[5],
        mean_ratio: s[6],
        tokens: s[7] as usize,
        rows: s[8] as usize,
    })
}
