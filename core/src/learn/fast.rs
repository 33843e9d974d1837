//! The PPO-clip row pass (every named learner but GSPO and REINFORCE), written so the compiler
//! vectorises it: tokens go in fixed chunks of lanes, every branch is a select, the sums are
//! per-lane, and `exp` is an inlined polynomial instead of a libm call. The pass runs in the
//! storage precision, 8 f32 or 4 f64 lanes per AVX2 register; on x86-64 it is also compiled for
//! AVX2 + FMA and picked at run time. The maths is that of `row_pass` in loss.rs. Rare cases (a
//! NaN on a valid token, a log-ratio beyond ±20) are settled afterwards by the caller's scalar
//! look at the row, so the fast loop never branches on them.

use std::ops::{Add, Mul, Neg, Sub};

use super::config::{Kl, KlEstimator, Real};

/// The arithmetic the pass needs from its lane type: f32 or f64.
trait Lane:
    Real
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
{
    /// Lanes per chunk: one AVX2 register.
    const N: usize;
    /// Constant of the type.
    fn c(v: f64) -> Self;
    /// `a * b + c`, fused in the FMA build.
    fn madd<const FMA: bool>(a: Self, b: Self, c: Self) -> Self;
    /// `e^x` to about 1 ulp of the type.
    fn exp<const FMA: bool>(x: Self) -> Self;
    /// NaN test.
    fn nan(self) -> bool;
    /// Neither NaN nor infinite.
    fn finite(self) -> bool;
}

/// `max` as one instruction: the NaN rules of `f64::max` cost a compare and a blend per call,
/// and a NaN on a valid token is caught separately.
#[inline(always)]
fn fmax<T: PartialOrd>(a: T, b: T) -> T {
    if a > b {
        a
    } else {
        b
    }
}

/// `min` as one instruction (see [`fmax`]).
#[inline(always)]
fn fmin<T: PartialOrd>(a: T, b: T) -> T {
    if a < b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn fclamp<T: PartialOrd>(x: T, lo: T, hi: T) -> T {
    fmin(fmax(x, lo), hi)
}

impl Lane for f64 {
    const N: usize = 4;
    #[inline(always)]
    fn c(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn madd<const FMA: bool>(a: Self, b: Self, c: Self) -> Self {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    /// Cody-Waite reduction to |r| <= ln2/2, a degree-13 Taylor polynomial (truncation below
    /// 1e-17) by Estrin's scheme (dependency depth 5), and the power of two built from bits.
    /// x < -708 gives 0 (the true value is below 3e-308), x > 709.78 gives +inf, NaN gives an
    /// unspecified value (callers check their inputs for NaN themselves).
    #[inline(always)]
    fn exp<const FMA: bool>(x: Self) -> Self {
        const LOG2E: f64 = std::f64::consts::LOG2_E;
        const LN2_HI: f64 = 6.931_471_803_691_238e-1;
        const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
        // Adding 1.5 * 2^52 rounds to an integer and leaves it in the low mantissa bits.
        const SHIFT: f64 = 6_755_399_441_055_744.0;
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
        let m = Self::madd::<FMA>;
        let xc = fclamp(x, -708.0, 709.78);
        let kf = m(xc, LOG2E, SHIFT) - SHIFT;
        let r = m(-kf, LN2_LO, m(-kf, LN2_HI, xc));
        let (r2, r4) = (r * r, r * r * (r * r));
        let q0 = m(m(C[3], r, C[2]), r2, m(C[1], r, C[0]));
        let q1 = m(m(C[7], r, C[6]), r2, m(C[5], r, C[4]));
        let q2 = m(m(C[11], r, C[10]), r2, m(C[9], r, C[8]));
        let q3 = m(C[13], r, C[12]);
        let p = m(m(q3, r4, q2), r4 * r4, m(q1, r4, q0));
        let k = (kf + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits()) as i64;
        // 2^(k-1) * 2, so that k = 1024 (x near 709.78) needs no exponent beyond the largest.
        let y = p * f64::from_bits(((k + 1022) as u64) << 52) * 2.0;
        let y = if x > 709.78 { f64::INFINITY } else { y };
        if x < -708.0 {
            0.0
        } else {
            y
        }
    }
    #[inline(always)]
    fn nan(self) -> bool {
        self.is_nan()
    }
    #[inline(always)]
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Lane for f32 {
    const N: usize = 8;
    #[inline(always)]
    fn c(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn madd<const FMA: bool>(a: Self, b: Self, c: Self) -> Self {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    /// As for f64, with a degree-7 polynomial (truncation 5e-9); x < -87 gives 0, x > 88.7
    /// gives +inf.
    #[inline(always)]
    fn exp<const FMA: bool>(x: Self) -> Self {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        const SHIFT: f32 = 12_582_912.0; // 1.5 * 2^23
        let m = Self::madd::<FMA>;
        let xc = fclamp(x, -87.0, 88.7);
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
        let y = p * f32::from_bits(((k + 126) as u32) << 23) * 2.0;
        let y = if x > 88.7 { f32::INFINITY } else { y };
        if x < -87.0 {
            0.0
        } else {
            y
        }
    }
    #[inline(always)]
    fn nan(self) -> bool {
        self.is_nan()
    }
    #[inline(always)]
    fn finite(self) -> bool {
        self.is_finite()
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

/// The row's sums: loss_pg, kl and entropy weighted by `w`, the rest plain counts and sums.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Sums {
    pub loss: f64,
    pub kl: f64,
    pub entropy: f64,
    pub clipped: f64,
    pub approx_kl: f64,
    pub ratio: f64,
    /// Valid tokens with a NaN anywhere (the caller redoes the row to name it).
    pub bad: u32,
    /// Valid tokens with a log-ratio beyond ±20 (the caller redoes the ratio metric).
    pub out_of_range: u32,
}

/// Chunks summed in the lane type before the sums move to f64: 256 f32 or 128 f64 tokens per
/// lane group, far inside the f32 tolerance (rtol 2e-5).
const BLOCK: usize = 32;

/// Per-lane sums in the lane type (`T`), flushed into f64 ones (`W`) every [`BLOCK`] chunks.
struct Lanes<T, W> {
    loss: [T; 8],
    kl: [T; 8],
    entropy: [T; 8],
    clipped: [T; 8],
    approx_kl: [T; 8],
    ratio: [T; 8],
    bad: [u32; 8],
    out_of_range: [u32; 8],
    wide: [[W; 8]; 6],
}

impl<T: Lane> Lanes<T, f64> {
    fn new() -> Self {
        let z = [T::default(); 8];
        Lanes {
            loss: z,
            kl: z,
            entropy: z,
            clipped: z,
            approx_kl: z,
            ratio: z,
            bad: [0; 8],
            out_of_range: [0; 8],
            wide: [[0.0; 8]; 6],
        }
    }

    fn flush(&mut self) {
        let z = [T::default(); 8];
        for (k, v) in [
            &mut self.loss,
            &mut self.kl,
            &mut self.entropy,
            &mut self.clipped,
            &mut self.approx_kl,
            &mut self.ratio,
        ]
        .into_iter()
        .enumerate()
        {
            for (w, x) in self.wide[k].iter_mut().zip(&v[..T::N]) {
                *w += x.to_f64();
            }
            *v = z;
        }
    }
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

/// The knobs in the lane type.
#[derive(Clone, Copy)]
struct Knobs<T> {
    lo: T,
    hi: T,
    dual: T,
    kl_coef: T,
    w: T,
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chunk<T: Lane, const KL: u8, const ENT: bool, const TOK: bool, const FMA: bool>(
    p: &Knobs<T>,
    a_row: T,
    m: &[u8],
    lp: &[T],
    od: &[T],
    rf: &[T],
    h: &[T],
    adv: &[T],
    g: &mut [T],
    acc: &mut Lanes<T, f64>,
) {
    let (zero, one) = (T::c(0.0), T::c(1.0));
    let (m20, p20) = (T::c(-20.0), T::c(20.0));
    for i in 0..T::N {
        let valid = m[i] != 0;
        let (lp, od) = (lp[i], od[i]);
        let a = if TOK { adv[i] } else { a_row };
        let mut nan = lp.nan() | od.nan() | (TOK && !a.finite());
        let delta = lp - od;
        let r = T::exp::<FMA>(fclamp(delta, m20, p20));
        let in_range = (delta < p20) & (delta > m20);
        let l = fmax(-a * r, -a * fclamp(r, p.lo, p.hi));
        let l = if a < zero { fmin(l, -a * p.dual) } else { l };
        let on = ((a > zero) & (r <= p.hi)) | ((a < zero) & (r >= p.lo) & (r < p.dual));
        let on = on & in_range;
        let mut gk = if on { -a * r * p.w } else { zero };
        let mut kv = zero;
        if KL != 0 {
            let rv = rf[i];
            nan |= rv.nan();
            let d = lp - rv;
            let (v, dv) = match KL {
                1 => (d, one),
                2 => (T::c(0.5) * d * d, d),
                3 => {
                    let x = -d;
                    let xc = fclamp(x, m20, p20);
                    let e = T::exp::<FMA>(xc);
                    let v = e - xc - one;
                    let vc = fclamp(v, T::c(-10.0), T::c(10.0));
                    let free = (xc == x) & (vc == v);
                    (vc, if free { one - e } else { zero })
                }
                _ => {
                    let x = -d;
                    let e = T::exp::<FMA>(x);
                    (e - x - one, one - e)
                }
            };
            kv = v;
            gk = gk + p.kl_coef * p.w * dv;
        }
        let mut hv = zero;
        if ENT {
            hv = h[i];
            nan |= hv.nan();
        }
        g[i] = if valid { gk } else { zero };
        let z = |v: T| if valid { v } else { zero };
        acc.loss[i] = acc.loss[i] + z(l);
        // Adding 0.0 is not free in strict IEEE (-0.0 + 0.0), so unused sums are skipped.
        if KL != 0 {
            acc.kl[i] = acc.kl[i] + z(kv);
        }
        if ENT {
            acc.entropy[i] = acc.entropy[i] + z(hv);
        }
        acc.clipped[i] = acc.clipped[i] + z(if !on & (a != zero) { one } else { zero });
        acc.approx_kl[i] = acc.approx_kl[i] - z(delta);
        acc.ratio[i] = acc.ratio[i] + z(r);
        acc.bad[i] += u32::from(valid & nan);
        acc.out_of_range[i] += u32::from(valid & !in_range);
    }
}

#[inline(always)]
fn row_body<T: Lane, const KL: u8, const ENT: bool, const TOK: bool, const FMA: bool>(
    p: &Ppo,
    w: f64,
    row: &Row<'_, T>,
    grad: &mut [T],
) -> Sums {
    let n = T::N;
    let t = row.mask.len();
    let zero = T::c(0.0);
    let knobs = Knobs {
        lo: T::c(p.lo),
        hi: T::c(p.hi),
        dual: T::c(p.dual),
        kl_coef: T::c(p.kl_coef),
        w: T::c(w),
    };
    let a_row = if TOK { zero } else { row.adv[0] };
    let mut acc = Lanes::<T, f64>::new();
    let empty = [zero; 8];
    let full = t / n * n;
    let mut since_flush = 0;
    for j in (0..full).step_by(n) {
        let m = &row.mask[j..j + n];
        if m.iter().all(|&x| x == 0) {
            // Padding comes in runs: skip the maths, not the zeros.
            grad[j..j + n].fill(zero);
            continue;
        }
        let sl = |v: Option<&[T]>| -> [T; 8] {
            let mut out = [zero; 8];
            if let Some(v) = v {
                out[..n].copy_from_slice(&v[j..j + n]);
            }
            out
        };
        let (lp, od) = (sl(Some(row.logp)), sl(Some(row.old)));
        let (rf, h) = (sl(row.reference), sl(row.entropy));
        let adv = if TOK { sl(Some(row.adv)) } else { empty };
        chunk::<T, KL, ENT, TOK, FMA>(
            &knobs,
            a_row,
            m,
            &lp,
            &od,
            &rf,
            &h,
            &adv,
            &mut grad[j..j + n],
            &mut acc,
        );
        since_flush += 1;
        if since_flush == BLOCK {
            acc.flush();
            since_flush = 0;
        }
    }
    if full < t {
        // The tail, padded with masked lanes.
        let k = t - full;
        let pad = |v: Option<&[T]>| {
            let mut out = [zero; 8];
            if let Some(v) = v {
                out[..k].copy_from_slice(&v[full..]);
            }
            out
        };
        let mut m = [0u8; 8];
        m[..k].copy_from_slice(&row.mask[full..]);
        let (lp, od) = (pad(Some(row.logp)), pad(Some(row.old)));
        let (rf, h) = (pad(row.reference), pad(row.entropy));
        let adv = if TOK { pad(Some(row.adv)) } else { empty };
        let mut g = [zero; 8];
        chunk::<T, KL, ENT, TOK, FMA>(&knobs, a_row, &m, &lp, &od, &rf, &h, &adv, &mut g, &mut acc);
        grad[full..].copy_from_slice(&g[..k]);
    }
    acc.flush();
    let sum = |k: usize| acc.wide[k][..n].iter().sum::<f64>();
    Sums {
        loss: sum(0) * w,
        kl: sum(1) * w,
        entropy: sum(2) * w,
        clipped: sum(3),
        approx_kl: sum(4),
        ratio: sum(5),
        bad: acc.bad.iter().sum(),
        out_of_range: acc.out_of_range.iter().sum(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2<T: Lane, const KL: u8, const ENT: bool, const TOK: bool>(
    p: &Ppo,
    w: f64,
    row: &Row<'_, T>,
    grad: &mut [T],
) -> Sums {
    row_body::<T, KL, ENT, TOK, true>(p, w, row, grad)
}

fn row_dispatch<T: Lane, const KL: u8, const ENT: bool, const TOK: bool>(
    p: &Ppo,
    w: f64,
    row: &Row<'_, T>,
    grad: &mut [T],
) -> Sums {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function was compiled for.
        return unsafe { row_avx2::<T, KL, ENT, TOK>(p, w, row, grad) };
    }
    row_body::<T, KL, ENT, TOK, false>(p, w, row, grad)
}

fn ppo_row_in<T: Lane>(p: &Ppo, kl: u8, w: f64, row: &Row<'_, T>, grad: &mut [T]) -> Sums {
    let ent = row.entropy.is_some();
    let tok = row.adv.len() == row.mask.len() && row.adv.len() != 1;
    macro_rules! go {
        ($kl:literal) => {
            match (ent, tok) {
                (false, false) => row_dispatch::<T, $kl, false, false>(p, w, row, grad),
                (true, false) => row_dispatch::<T, $kl, true, false>(p, w, row, grad),
                (false, true) => row_dispatch::<T, $kl, false, true>(p, w, row, grad),
                (true, true) => row_dispatch::<T, $kl, true, true>(p, w, row, grad),
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

/// The PPO-clip pass over one row, weighted by `w`; `kl` is the code of [`kl_code`]. f32 data
/// runs in f32 arithmetic on 8 lanes, f64 data in f64 on 4.
pub(crate) fn ppo_row<F: Real>(p: &Ppo, kl: u8, w: f64, row: &Row<'_, F>, grad: &mut [F]) -> Sums {
    fn cast<'a, F: Real, T: Real>(
        row: &Row<'a, F>,
        to: impl Fn(&'a [F]) -> Option<&'a [T]>,
    ) -> Option<Row<'a, T>> {
        let opt = |v: Option<&'a [F]>| match v {
            None => Some(None),
            Some(v) => to(v).map(Some),
        };
        Some(Row {
            mask: row.mask,
            logp: to(row.logp)?,
            old: to(row.old)?,
            reference: opt(row.reference)?,
            entropy: opt(row.entropy)?,
            adv: to(row.adv)?,
        })
    }
    if let Some(r) = cast(row, F::as_f32) {
        let g = F::as_f32_mut(grad).expect("f32 data, f32 gradient");
        return ppo_row_in(p, kl, w, &r, g);
    }
    let r = cast(row, F::as_f64).expect("the learners' types are f32 and f64");
    let g = F::as_f64_mut(grad).expect("f64 data, f64 gradient");
    ppo_row_in(p, kl, w, &r, g)
}

#[cfg(test)]
mod tests {
    use super::Lane;

    #[test]
    fn exp_is_within_two_ulps_of_libm() {
        for fma in [false, true] {
            let exp = |x: f64| {
                if fma {
                    <f64 as Lane>::exp::<true>(x)
                } else {
                    <f64 as Lane>::exp::<false>(x)
                }
            };
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
            assert!(worst < 4.5e-16, "fma {fma}: worst relative error {worst:e}");
            assert_eq!(exp(710.0), f64::INFINITY);
            assert_eq!(exp(-800.0), 0.0);
            // The f32 version against f64's exp.
            let exp32 = |x: f32| {
                if fma {
                    <f32 as Lane>::exp::<true>(x)
                } else {
                    <f32 as Lane>::exp::<false>(x)
                }
            };
            let mut x = -86.9f32;
            while x < 88.7 {
                let (got, want) = (exp32(x), f64::from(x).exp());
                let rel = ((f64::from(got) - want) / want).abs();
                assert!(
                    rel < 2.5e-7,
                    "exp32 fma {fma} at {x}: {got} vs {want} ({rel:e})"
                );
                x += 0.0137;
            }
            assert_eq!(exp32(89.0), f32::INFINITY);
        }
    }
}
