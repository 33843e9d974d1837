//! The PPO-clip row pass (every named learner but GSPO and REINFORCE), written so the compiler
//! vectorises it: tokens go in fixed chunks of `L` lanes, every branch is a select, the sums are
//! per-lane, and `exp` is an inlined polynomial instead of a libm call. On x86-64 the same code
//! is also compiled for AVX2 + FMA and picked at run time. The maths is that of `row_pass` in
//! loss.rs, in f64; rare cases (a NaN on a valid token, a log-ratio beyond ±20) are settled
//! afterwards by a scalar look at the row, so the fast loop never branches on them.

use super::loss::{Kl, KlEstimator, Real};

/// Lanes per chunk: one AVX2 register of f64, so the loop's live values fit in registers.
const L: usize = 4;

/// `a * b + c`, fused in the AVX2 + FMA build, else two roundings.
#[inline(always)]
fn madd<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `max` as one instruction: the NaN rules of `f64::max` cost a compare and a blend per call,
/// and a NaN on a valid token is caught separately.
#[inline(always)]
fn fmax(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// `min` as one instruction (see [`fmax`]).
#[inline(always)]
fn fmin(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn fclamp(x: f64, lo: f64, hi: f64) -> f64 {
    fmin(fmax(x, lo), hi)
}

/// `e^x` in f64 to about 1 ulp: Cody-Waite reduction to |r| <= ln2/2, a degree-13 Taylor
/// polynomial (truncation below 1e-17), and the power of two built from bits. Branch-free so it
/// vectorises; x < -708 gives 0 (the true value is below 3e-308) and x > 709.78 gives +inf. A
/// NaN gives an unspecified value: callers check their inputs for NaN themselves.
/// `FMA`: fuse the polynomial's multiply-adds.
#[inline(always)]
fn exp_with<const FMA: bool>(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    // Adding 1.5 * 2^52 rounds to an integer and leaves it in the low mantissa bits.
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    let xc = fclamp(x, -708.0, 709.78);
    let kf = madd::<FMA>(xc, LOG2E, SHIFT) - SHIFT;
    let r = madd::<FMA>(-kf, LN2_LO, madd::<FMA>(-kf, LN2_HI, xc));
    // Estrin's scheme: the same polynomial with a dependency chain of 5 instead of 13.
    const C: [f64; 14] = [
        1.0,
        1.0,
        0.5,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5_040.0,
        1.0 / 40_320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
        1.0 / 479_001_600.0,
        1.0 / 6_227_020_800.0,
    ];
    let m = |a: f64, b: f64, c: f64| madd::<FMA>(a, b, c);
    let (r2, r4) = (r * r, r * r * (r * r));
    let r8 = r4 * r4;
    let q0 = m(m(C[3], r, C[2]), r2, m(C[1], r, C[0]));
    let q1 = m(m(C[7], r, C[6]), r2, m(C[5], r, C[4]));
    let q2 = m(m(C[11], r, C[10]), r2, m(C[9], r, C[8]));
    let q3 = m(C[13], r, C[12]);
    let p = m(m(q3, r4, q2), r8, m(q1, r4, q0));
    let k = (kf + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits()) as i64;
    // 2^(k-1) * 2, so that k = 1024 (x near 709.78) needs no exponent beyond the largest.
    let scale = f64::from_bits(((k + 1022) as u64) << 52);
    let y = p * scale * 2.0;
    let y = if x > 709.78 { f64::INFINITY } else { y };
    if x < -708.0 {
        0.0
    } else {
        y
    }
}

/// A row's knobs, hoisted out of the token loop.
#[derive(Clone, Copy)]
pub(crate) struct Ppo {
    /// `1 - clip_low`.
    pub lo: f64,
    /// `1 + clip_high`.
    pub hi: f64,
    /// Dual-clip constant, +inf for none.
    pub dual: f64,
    /// KL coefficient (0 without a KL term).
    pub kl_coef: f64,
}

/// One row's inputs, each sliced to the row.
pub(crate) struct Row<'a, F> {
    pub mask: &'a [u8],
    pub logp: &'a [F],
    pub old: &'a [F],
    pub reference: Option<&'a [F]>,
    pub entropy: Option<&'a [F]>,
    /// One value (the row's) or one per token.
    pub adv: &'a [F],
}

/// The row's sums: loss_pg, kl, entropy, clipped, approx_kl, ratio; each unweighted by `w`
/// except where the caller multiplies.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Sums {
    pub loss: f64,
    pub kl: f64,
    pub entropy: f64,
    pub clipped: f64,
    pub approx_kl: f64,
    pub ratio: f64,
    /// Valid tokens with a NaN anywhere, or a log-ratio beyond ±20 (ratio metric to redo).
    pub bad: u32,
    pub out_of_range: u32,
}

#[derive(Default)]
struct Lanes {
    loss: [f64; L],
    kl: [f64; L],
    entropy: [f64; L],
    clipped: [f64; L],
    approx_kl: [f64; L],
    ratio: [f64; L],
    bad: [u32; L],
    out_of_range: [u32; L],
}

/// KL estimator as a number, so it can be a const generic.
pub(crate) fn kl_code(kl: Option<&Kl>) -> u8 {
    match kl {
        None => 0,
        Some(k) => match (k.estimator, k.clamp) {
            (KlEstimator::K1, _) => 1,
            (KlEstimator::K2, _) => 2,
            (KlEstimator::K3, true) => 3,
            (KlEstimator::K3, false) => 4,
        },
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chunk<F: Real, const KL: u8, const ENT: bool, const TOK: bool, const FMA: bool>(
    p: &Ppo,
    w: f64,
    a_row: f64,
    m: &[u8; L],
    lp: &[F; L],
    od: &[F; L],
    rf: &[F; L],
    h: &[F; L],
    adv: &[F; L],
    g: &mut [F; L],
    acc: &mut Lanes,
) {
    for i in 0..L {
        let valid = m[i] != 0;
        let (lp, od) = (lp[i].to_f64(), od[i].to_f64());
        let a = if TOK { adv[i].to_f64() } else { a_row };
        let mut nan = lp.is_nan() | od.is_nan() | (TOK && !a.is_finite());
        let delta = lp - od;
        let r = exp_with::<FMA>(fclamp(delta, -20.0, 20.0));
        let in_range = (delta < 20.0) & (delta > -20.0);
        let l = fmax(-a * r, -a * fclamp(r, p.lo, p.hi));
        let l = if a < 0.0 { fmin(l, -a * p.dual) } else { l };
        let on = ((a > 0.0) & (r <= p.hi)) | ((a < 0.0) & (r >= p.lo) & (r < p.dual));
        let on = on & in_range;
        let mut gk = if on { -a * r * w } else { 0.0 };
        let mut kv = 0.0;
        if KL != 0 {
            let rv = rf[i].to_f64();
            nan |= rv.is_nan();
            let d = lp - rv;
            let (v, dv) = match KL {
                1 => (d, 1.0),
                2 => (0.5 * d * d, d),
                3 => {
                    let x = -d;
                    let xc = fclamp(x, -20.0, 20.0);
                    let e = exp_with::<FMA>(xc);
                    let v = e - xc - 1.0;
                    let vc = fclamp(v, -10.0, 10.0);
                    let free = (xc == x) & (vc == v);
                    (vc, if free { 1.0 - e } else { 0.0 })
                }
                _ => {
                    let x = -d;
                    let e = exp_with::<FMA>(x);
                    (e - x - 1.0, 1.0 - e)
                }
            };
            kv = v;
            gk += p.kl_coef * w * dv;
        }
        let mut hv = 0.0;
        if ENT {
            hv = h[i].to_f64();
            nan |= hv.is_nan();
        }
        g[i] = F::from_f64(if valid { gk } else { 0.0 });
        let z = |v: f64| if valid { v } else { 0.0 };
        acc.loss[i] += z(l);
        // Adding 0.0 is not free in strict IEEE (-0.0 + 0.0), so unused sums are skipped.
        if KL != 0 {
            acc.kl[i] += z(kv);
        }
        if ENT {
            acc.entropy[i] += z(hv);
        }
        acc.clipped[i] += z(if !on & (a != 0.0) { 1.0 } else { 0.0 });
        acc.approx_kl[i] -= z(delta);
        acc.ratio[i] += z(r);
        acc.bad[i] += u32::from(valid & nan);
        acc.out_of_range[i] += u32::from(valid & !in_range);
    }
}

#[inline(always)]
fn row_body<F: Real, const KL: u8, const ENT: bool, const TOK: bool, const FMA: bool>(
    p: &Ppo,
    w: f64,
    row: &Row<'_, F>,
    grad: &mut [F],
) -> Sums {
    let t = row.mask.len();
    let zero = F::from_f64(0.0);
    let a_row = if TOK { 0.0 } else { row.adv[0].to_f64() };
    let mut acc = Lanes::default();
    let full = t / L * L;
    let take = |v: &[F], j: usize| -> [F; L] { v[j..j + L].try_into().expect("L values") };
    let empty = [zero; L];
    for j in (0..full).step_by(L) {
        let m: [u8; L] = row.mask[j..j + L].try_into().expect("L values");
        let g: &mut [F; L] = (&mut grad[j..j + L]).try_into().expect("L values");
        if m == [0; L] {
            // Padding comes in runs: skip the maths, not the zeros.
            *g = [zero; L];
            continue;
        }
        chunk::<F, KL, ENT, TOK, FMA>(
            p,
            w,
            a_row,
            &m,
            &take(row.logp, j),
            &take(row.old, j),
            &row.reference.map_or(empty, |r| take(r, j)),
            &row.entropy.map_or(empty, |h| take(h, j)),
            &if TOK { take(row.adv, j) } else { empty },
            g,
            &mut acc,
        );
    }
    if full < t {
        // The tail, padded with masked lanes.
        let n = t - full;
        let pad = |v: &[F]| {
            let mut out = [zero; L];
            out[..n].copy_from_slice(&v[full..]);
            out
        };
        let mut m = [0u8; L];
        m[..n].copy_from_slice(&row.mask[full..]);
        let mut g = [zero; L];
        chunk::<F, KL, ENT, TOK, FMA>(
            p,
            w,
            a_row,
            &m,
            &pad(row.logp),
            &pad(row.old),
            &row.reference.map_or(empty, pad),
            &row.entropy.map_or(empty, pad),
            &if TOK { pad(row.adv) } else { empty },
            &mut g,
            &mut acc,
        );
        grad[full..].copy_from_slice(&g[..n]);
    }
    let sum = |v: &[f64; L]| v.iter().sum::<f64>();
    Sums {
        loss: sum(&acc.loss) * w,
        kl: sum(&acc.kl) * w,
        entropy: sum(&acc.entropy) * w,
        clipped: sum(&acc.clipped),
        approx_kl: sum(&acc.approx_kl),
        ratio: sum(&acc.ratio),
        bad: acc.bad.iter().sum(),
        out_of_range: acc.out_of_range.iter().sum(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2<F: Real, const KL: u8, const ENT: bool, const TOK: bool>(
    p: &Ppo,
    w: f64,
    row: &Row<'_, F>,
    grad: &mut [F],
) -> Sums {
    row_body::<F, KL, ENT, TOK, true>(p, w, row, grad)
}

fn row_dispatch<F: Real, const KL: u8, const ENT: bool, const TOK: bool>(
    p: &Ppo,
    w: f64,
    row: &Row<'_, F>,
    grad: &mut [F],
) -> Sums {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function was compiled for.
        return unsafe { row_avx2::<F, KL, ENT, TOK>(p, w, row, grad) };
    }
    row_body::<F, KL, ENT, TOK, false>(p, w, row, grad)
}

// ---------------------------------------------------------------------------------------------
// f32 storage: the same pass in f32 arithmetic, 8 lanes per AVX2 register. The result is rounded
// to f32 anyway; sums are gathered in f32 over at most `BLOCK32` tokens per lane group and then
// added in f64, so their rounding stays far inside the f32 tolerance (rtol 2e-5).

/// Lanes per f32 chunk: one AVX2 register.
const L32: usize = 8;
/// Chunks summed in f32 before the sums move to f64.
const BLOCK32: usize = 32;

#[inline(always)]
fn fmax32(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn fmin32(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn fclamp32(x: f32, lo: f32, hi: f32) -> f32 {
    fmin32(fmax32(x, lo), hi)
}

#[inline(always)]
fn madd32<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `e^x` in f32 to about 1 ulp: Cody-Waite reduction, a degree-7 Taylor polynomial (truncation
/// 5e-9) and the power of two from bits; x < -87 gives 0, x > 88.7 gives +inf.
#[inline(always)]
fn exp32<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const SHIFT: f32 = 12_582_912.0; // 1.5 * 2^23
    let m = |a: f32, b: f32, c: f32| madd32::<FMA>(a, b, c);
    let xc = fclamp32(x, -87.0, 88.7);
    let kf = m(xc, LOG2E, SHIFT) - SHIFT;
    let r = m(-kf, LN2_LO, m(-kf, LN2_HI, xc));
    let r2 = r * r;
    let q0 = m(m(1.0 / 6.0, r, 0.5), r2, m(1.0, r, 1.0));
    let q1 = m(
        m(1.0 / 5_040.0, r, 1.0 / 720.0),
        r2,
        m(1.0 / 120.0, r, 1.0 / 24.0),
    );
    let p = m(q1, r2 * r2, q0);
    let k = (kf + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits()) as i32;
    let scale = f32::from_bits(((k + 126) as u32) << 23);
    let y = p * scale * 2.0;
    let y = if x > 88.7 { f32::INFINITY } else { y };
    if x < -87.0 {
        0.0
    } else {
        y
    }
}

#[derive(Default)]
struct Lanes32 {
    loss: [f32; L32],
    kl: [f32; L32],
    entropy: [f32; L32],
    clipped: [f32; L32],
    approx_kl: [f32; L32],
    ratio: [f32; L32],
}

impl Lanes32 {
    fn flush(&mut self, into: &mut Lanes8x64) {
        for i in 0..L32 {
            into.loss[i] += f64::from(self.loss[i]);
            into.kl[i] += f64::from(self.kl[i]);
            into.entropy[i] += f64::from(self.entropy[i]);
            into.clipped[i] += f64::from(self.clipped[i]);
            into.approx_kl[i] += f64::from(self.approx_kl[i]);
            into.ratio[i] += f64::from(self.ratio[i]);
        }
        *self = Lanes32::default();
    }
}

#[derive(Default)]
struct Lanes8x64 {
    loss: [f64; L32],
    kl: [f64; L32],
    entropy: [f64; L32],
    clipped: [f64; L32],
    approx_kl: [f64; L32],
    ratio: [f64; L32],
    bad: [u32; L32],
    out_of_range: [u32; L32],
}

/// One row's inputs as f32.
struct Row32<'a> {
    mask: &'a [u8],
    logp: &'a [f32],
    old: &'a [f32],
    reference: Option<&'a [f32]>,
    entropy: Option<&'a [f32]>,
    adv: &'a [f32],
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chunk32<const KL: u8, const ENT: bool, const TOK: bool, const FMA: bool>(
    p: &Ppo,
    w: f32,
    a_row: f32,
    m: &[u8; L32],
    lp: &[f32; L32],
    od: &[f32; L32],
    rf: &[f32; L32],
    h: &[f32; L32],
    adv: &[f32; L32],
    g: &mut [f32; L32],
    acc: &mut Lanes32,
    counts: &mut Lanes8x64,
) {
    let (lo, hi, dual, kl_coef) = (p.lo as f32, p.hi as f32, p.dual as f32, p.kl_coef as f32);
    for i in 0..L32 {
        let valid = m[i] != 0;
        let (lp, od) = (lp[i], od[i]);
        let a = if TOK { adv[i] } else { a_row };
        let mut nan = lp.is_nan() | od.is_nan() | (TOK && !a.is_finite());
        let delta = lp - od;
        let r = exp32::<FMA>(fclamp32(delta, -20.0, 20.0));
        let in_range = (delta < 20.0) & (delta > -20.0);
        let l = fmax32(-a * r, -a * fclamp32(r, lo, hi));
        let l = if a < 0.0 { fmin32(l, -a * dual) } else { l };
        let on = ((a > 0.0) & (r <= hi)) | ((a < 0.0) & (r >= lo) & (r < dual));
        let on = on & in_range;
        let mut gk = if on { -a * r * w } else { 0.0 };
        let mut kv = 0.0;
        if KL != 0 {
            let rv = rf[i];
            nan |= rv.is_nan();
            let d = lp - rv;
            let (v, dv) = match KL {
                1 => (d, 1.0),
                2 => (0.5 * d * d, d),
                3 => {
                    let x = -d;
                    let xc = fclamp32(x, -20.0, 20.0);
                    let e = exp32::<FMA>(xc);
                    let v = e - xc - 1.0;
                    let vc = fclamp32(v, -10.0, 10.0);
                    let free = (xc == x) & (vc == v);
                    (vc, if free { 1.0 - e } else { 0.0 })
                }
                _ => {
                    let x = -d;
                    let e = exp32::<FMA>(x);
                    (e - x - 1.0, 1.0 - e)
                }
            };
            kv = v;
            gk += kl_coef * w * dv;
        }
        let mut hv = 0.0;
        if ENT {
            hv = h[i];
            nan |= hv.is_nan();
        }
        g[i] = if valid { gk } else { 0.0 };
        let z = |v: f32| if valid { v } else { 0.0 };
        acc.loss[i] += z(l);
        if KL != 0 {
            acc.kl[i] += z(kv);
        }
        if ENT {
            acc.entropy[i] += z(hv);
        }
        acc.clipped[i] += z(if !on & (a != 0.0) { 1.0 } else { 0.0 });
        acc.approx_kl[i] -= z(delta);
        acc.ratio[i] += z(r);
        counts.bad[i] += u32::from(valid & nan);
        counts.out_of_range[i] += u32::from(valid & !in_range);
    }
}

#[inline(always)]
fn row_body32<const KL: u8, const ENT: bool, const TOK: bool, const FMA: bool>(
    p: &Ppo,
    w: f64,
    row: &Row32<'_>,
    grad: &mut [f32],
) -> Sums {
    let t = row.mask.len();
    let a_row = if TOK { 0.0 } else { row.adv[0] };
    let wf = w as f32;
    let mut acc = Lanes32::default();
    let mut total = Lanes8x64::default();
    let full = t / L32 * L32;
    let take =
        |v: &[f32], j: usize| -> [f32; L32] { v[j..j + L32].try_into().expect("L32 values") };
    let empty = [0.0f32; L32];
    let mut since_flush = 0;
    for j in (0..full).step_by(L32) {
        let m: [u8; L32] = row.mask[j..j + L32].try_into().expect("L32 values");
        let g: &mut [f32; L32] = (&mut grad[j..j + L32]).try_into().expect("L32 values");
        if m == [0; L32] {
            *g = empty;
            continue;
        }
        chunk32::<KL, ENT, TOK, FMA>(
            p,
            wf,
            a_row,
            &m,
            &take(row.logp, j),
            &take(row.old, j),
            &row.reference.map_or(empty, |r| take(r, j)),
            &row.entropy.map_or(empty, |h| take(h, j)),
            &if TOK { take(row.adv, j) } else { empty },
            g,
            &mut acc,
            &mut total,
        );
        since_flush += 1;
        if since_flush == BLOCK32 {
            acc.flush(&mut total);
            since_flush = 0;
        }
    }
    if full < t {
        let n = t - full;
        let pad = |v: &[f32]| {
            let mut out = [0.0f32; L32];
            out[..n].copy_from_slice(&v[full..]);
            out
        };
        let mut m = [0u8; L32];
        m[..n].copy_from_slice(&row.mask[full..]);
        let mut g = empty;
        chunk32::<KL, ENT, TOK, FMA>(
            p,
            wf,
            a_row,
            &m,
            &pad(row.logp),
            &pad(row.old),
            &row.reference.map_or(empty, pad),
            &row.entropy.map_or(empty, pad),
            &if TOK { pad(row.adv) } else { empty },
            &mut g,
            &mut acc,
            &mut total,
        );
        grad[full..].copy_from_slice(&g[..n]);
    }
    acc.flush(&mut total);
    let sum = |v: &[f64; L32]| v.iter().sum::<f64>();
    Sums {
        loss: sum(&total.loss) * w,
        kl: sum(&total.kl) * w,
        entropy: sum(&total.entropy) * w,
        clipped: sum(&total.clipped),
        approx_kl: sum(&total.approx_kl),
        ratio: sum(&total.ratio),
        bad: total.bad.iter().sum(),
        out_of_range: total.out_of_range.iter().sum(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row32_avx2<const KL: u8, const ENT: bool, const TOK: bool>(
    p: &Ppo,
    w: f64,
    row: &Row32<'_>,
    grad: &mut [f32],
) -> Sums {
    row_body32::<KL, ENT, TOK, true>(p, w, row, grad)
}

fn row32_dispatch<const KL: u8, const ENT: bool, const TOK: bool>(
    p: &Ppo,
    w: f64,
    row: &Row32<'_>,
    grad: &mut [f32],
) -> Sums {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function was compiled for.
        return unsafe { row32_avx2::<KL, ENT, TOK>(p, w, row, grad) };
    }
    row_body32::<KL, ENT, TOK, false>(p, w, row, grad)
}

/// The f32 pass, where `F` is f32 (every slice converts); `None` otherwise.
fn ppo_row32<'a, F: Real>(
    p: &Ppo,
    kl: u8,
    w: f64,
    row: &Row<'a, F>,
    grad: &mut [F],
) -> Option<Sums> {
    fn opt<F: Real>(v: Option<&[F]>) -> Option<Option<&[f32]>> {
        match v {
            None => Some(None),
            Some(v) => F::as_f32(v).map(Some),
        }
    }
    let r = Row32 {
        mask: row.mask,
        logp: F::as_f32(row.logp)?,
        old: F::as_f32(row.old)?,
        reference: opt(row.reference)?,
        entropy: opt(row.entropy)?,
        adv: F::as_f32(row.adv)?,
    };
    let grad = F::as_f32_mut(grad)?;
    let ent = r.entropy.is_some();
    let tok = r.adv.len() == r.mask.len() && r.adv.len() != 1;
    macro_rules! go {
        ($kl:literal) => {
            match (ent, tok) {
                (false, false) => row32_dispatch::<$kl, false, false>(p, w, &r, grad),
                (true, false) => row32_dispatch::<$kl, true, false>(p, w, &r, grad),
                (false, true) => row32_dispatch::<$kl, false, true>(p, w, &r, grad),
                (true, true) => row32_dispatch::<$kl, true, true>(p, w, &r, grad),
            }
        };
    }
    Some(match kl {
        0 => go!(0),
        1 => go!(1),
        2 => go!(2),
        3 => go!(3),
        _ => go!(4),
    })
}

/// The PPO-clip pass over one row, weighted by `w`; `kl` is the code of [`kl_code`]. f32 data
/// runs in f32 arithmetic on 8 lanes, f64 data in f64 on 4.
pub(crate) fn ppo_row<F: Real>(p: &Ppo, kl: u8, w: f64, row: &Row<'_, F>, grad: &mut [F]) -> Sums {
    if let Some(s) = ppo_row32(p, kl, w, row, grad) {
        return s;
    }
    let ent = row.entropy.is_some();
    let tok = row.adv.len() == row.mask.len() && row.adv.len() != 1;
    macro_rules! go {
        ($kl:literal) => {
            match (ent, tok) {
                (false, false) => row_dispatch::<F, $kl, false, false>(p, w, row, grad),
                (true, false) => row_dispatch::<F, $kl, true, false>(p, w, row, grad),
                (false, true) => row_dispatch::<F, $kl, false, true>(p, w, row, grad),
                (true, true) => row_dispatch::<F, $kl, true, true>(p, w, row, grad),
            }
        };
    }
    match kl {
        0 => go!(0),
        1 => go!(1),
        2 => go!(2),
        3 => go!(3),
        _ => go!(4),
    }
}

#[cfg(test)]
mod tests {
    fn exp(x: f64) -> f64 {
        super::exp_with::<false>(x)
    }

    #[test]
    fn exp_is_within_two_ulps_of_libm() {
        let mut worst = 0.0f64;
        let mut x = -707.9;
        while x < 709.78 {
            let (got, want) = (exp(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        for x in [
            -20.0,
            -1e-300,
            0.0,
            1e-300,
            20.0,
            0.5,
            -0.5,
            std::f64::consts::LN_2,
        ] {
            let (got, want) = (exp(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 4.5e-16, "worst relative error {worst:e}");
        // The FMA build of the same function (mul_add is exact in software too).
        let mut x = -707.9;
        while x < 709.78 {
            let (got, want) = (super::exp_with::<true>(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 4.5e-16,
                "x = {x}: {got} vs {want}"
            );
            x += 0.0137;
        }
        assert_eq!(exp(710.0), f64::INFINITY);
        // The f32 version, both builds, against f64's exp rounded to f32.
        let mut x = -86.9f32;
        while x < 88.7 {
            for (got, what) in [
                (super::exp32::<false>(x), "plain"),
                (super::exp32::<true>(x), "fma"),
            ] {
                let want = f64::from(x).exp();
                let rel = ((f64::from(got) - want) / want).abs();
                assert!(
                    rel < 2.5e-7,
                    "exp32 {what} at {x}: {got} vs {want} ({rel:e})"
                );
            }
            x += 0.0137;
        }
        assert_eq!(super::exp32::<false>(89.0), f32::INFINITY);
        assert_eq!(exp(-800.0), 0.0);
    }
}
