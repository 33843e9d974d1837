// Fused policy-gradient loss kernels (docs/learners.md), compiled at run time with NVRTC.
// Per-token maths runs in double whatever the storage type, exactly as the CPU path does, so a
// GPU result differs from the CPU one only by summation order. No headers: NVRTC has none
// without include paths, and the same file is compiled as C++ by the emulation test
// (ffi/tests/c/test_kernels_emulated.cpp), which defines the CUDA keywords itself.

#define NX_BLOCK 256
#define NX_ROW_STATS 7  // loss_pg, kl, entropy, clipped, approx_kl, ratio, bad-input flags

// Bad-input flags, OR-ed over tokens: which argument held a NaN on a valid token.
#define NX_BAD_LOGP 1
#define NX_BAD_OLD 2
#define NX_BAD_REF 4
#define NX_BAD_ENTROPY 8
#define NX_BAD_ADVANTAGE 16

// Must match `PgParams` in core/src/kernels/mod.rs field for field.
struct PgParams {
    double clip_low, clip_high, dual_c, divisor, kl_coef, ent_coef;
    int surrogate;      // 0 ppo-clip, 1 gspo, 2 reinforce
    int agg;            // 0 token-mean, 1 seq-mean-token-sum, 2 seq-mean-token-mean, 3 ...-sum-norm
    int trl_rows;       // seq-mean-token-mean: TRL's row count and max(n, 1)
    int kl_kind;        // 0 none, 1 k1, 2 k2, 3 k3
    int kl_clamp;       // verl's k3 clamps
    int adv_per_token;  // advantages are [B][T] instead of [B]
    int has_ent;        // an entropy bonus is on
    int pad;
};

__device__ double nx_clamp(double x, double lo, double hi) { return fmin(fmax(x, lo), hi); }

__device__ bool nx_active(double a, double r, double low, double high, double dual) {
    if (a > 0.0) return r <= 1.0 + high;
    if (a < 0.0) return r >= 1.0 - low && (dual <= 0.0 || r < dual);
    return false;
}

__device__ double nx_clipped_loss(double a, double r, double low, double high, double dual) {
    double l = fmax(-a * r, -a * nx_clamp(r, 1.0 - low, 1.0 + high));
    if (dual > 0.0 && a < 0.0) l = fmin(l, -a * dual);
    return l;
}

// A block-wide sum of NX_ROW_STATS values in a fixed order (deterministic for a fixed block size).
__device__ void nx_block_sum(double *v, double (*sh)[NX_BLOCK]) {
    unsigned t = threadIdx.x;
    for (int k = 0; k < NX_ROW_STATS; k++) sh[k][t] = v[k];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s)
            for (int k = 0; k < NX_ROW_STATS; k++) sh[k][t] += sh[k][t + s];
        __syncthreads();
    }
    for (int k = 0; k < NX_ROW_STATS; k++) v[k] = sh[k][0];
    __syncthreads();
}

// Valid tokens per row: one block per row.
extern "C" __global__ void nx_row_lens(const unsigned char *mask, long long width, int *lens) {
    __shared__ int sh[NX_BLOCK];
    const unsigned char *m = mask + (long long)blockIdx.x * width;
    int c = 0;
    for (long long j = threadIdx.x; j < width; j += blockDim.x) c += m[j] != 0;
    sh[threadIdx.x] = c;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) lens[blockIdx.x] = sh[0];
}

// N (valid tokens) and B' (rows with one): one block.
extern "C" __global__ void nx_totals(const int *lens, long long rows, long long *totals) {
    __shared__ long long sn[NX_BLOCK], sr[NX_BLOCK];
    long long n = 0, r = 0;
    for (long long i = threadIdx.x; i < rows; i += blockDim.x) {
        n += lens[i];
        r += lens[i] > 0;
    }
    sn[threadIdx.x] = n;
    sr[threadIdx.x] = r;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sn[threadIdx.x] += sn[threadIdx.x + s];
            sr[threadIdx.x] += sr[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        totals[0] = sn[0];
        totals[1] = sr[0];
    }
}

// The fused pass: one block per row reads logp, old (and ref, entropy) once, writes the
// gradient, and leaves the row's sums in row_stats[row][NX_ROW_STATS].
template <typename T>
__device__ void nx_pg_row(const T *logp, const T *old, const T *ref, const T *ent,
                          const unsigned char *mask, const T *adv, long long rows, long long width,
                          const int *lens, const long long *totals, PgParams p, T *grad,
                          T *grad_ent, double *row_stats) {
    __shared__ double sh[NX_ROW_STATS][NX_BLOCK];
    const long long i = blockIdx.x;
    const long long base = i * width;
    const double len = (double)lens[i];
    const double n = (double)totals[0], brows = (double)totals[1];
    double w;
    switch (p.agg) {
    case 0: w = 1.0 / n; break;
    case 1: w = 1.0 / brows; break;
    case 2: w = p.trl_rows ? 1.0 / (fmax(len, 1.0) * (double)rows) : 1.0 / ((len + 1e-8) * brows); break;
    default: w = 1.0 / (p.divisor > 0.0 ? p.divisor : (double)width); break;
    }
    double v[NX_ROW_STATS];
    for (int k = 0; k < NX_ROW_STATS; k++) v[k] = 0.0;
    // GSPO's sequence ratio: the row's mean log-ratio, capped at 10 as verl does.
    double seq_ratio = 1.0;
    if (p.surrogate == 1 && len > 0.0) {
        for (long long j = threadIdx.x; j < width; j += blockDim.x)
            if (mask[base + j]) v[0] += (double)logp[base + j] - (double)old[base + j];
        nx_block_sum(v, sh);
        seq_ratio = exp(fmin(v[0] / len, 10.0));
        v[0] = 0.0;
    }
    int bad = 0;
    for (long long j = threadIdx.x; j < width; j += blockDim.x) {
        const long long k = base + j;
        if (!mask[k] || len == 0.0) {
            grad[k] = (T)0;
            if (grad_ent) grad_ent[k] = (T)0;
            continue;
        }
        const double lp = (double)logp[k], od = (double)old[k];
        const double a = (double)(p.adv_per_token ? adv[k] : adv[i]);
        bad |= (lp != lp ? NX_BAD_LOGP : 0) | (od != od ? NX_BAD_OLD : 0) |
               (a != a ? NX_BAD_ADVANTAGE : 0);
        const double delta = lp - od;
        v[4] -= delta;
        v[5] += exp(delta);
        double l, g;
        bool clipped = false;
        if (p.surrogate == 2) {
            l = -a * lp;
            g = -a;
        } else {
            const double r = p.surrogate == 1 ? seq_ratio : exp(nx_clamp(delta, -20.0, 20.0));
            const double dual = p.surrogate == 1 ? 0.0 : p.dual_c;
            bool on = nx_active(a, r, p.clip_low, p.clip_high, dual);
            if (p.surrogate == 0) on = on && fabs(delta) < 20.0;
            l = nx_clipped_loss(a, r, p.clip_low, p.clip_high, dual);
            g = on ? -a * r : 0.0;
            clipped = !on && a != 0.0;
        }
        v[0] += w * l;
        v[3] += clipped ? 1.0 : 0.0;
        double gk = w * g;
        if (p.kl_kind) {
            const double rv = (double)ref[k];
            bad |= rv != rv ? NX_BAD_REF : 0;
            const double d = lp - rv;
            double kv, dk;
            if (p.kl_kind == 1) {
                kv = d;
                dk = 1.0;
            } else if (p.kl_kind == 2) {
                kv = 0.5 * d * d;
                dk = d;
            } else {
                const double x = -d;
                if (p.kl_clamp) {
                    const double xc = nx_clamp(x, -20.0, 20.0);
                    const double k3 = exp(xc) - xc - 1.0;
                    kv = nx_clamp(k3, -10.0, 10.0);
                    dk = (xc == x && kv == k3) ? 1.0 - exp(x) : 0.0;
                } else {
                    const double e = exp(x);
                    kv = e - x - 1.0;
                    dk = 1.0 - e;
                }
            }
            v[1] += w * kv;
            gk += p.kl_coef * w * dk;
        }
        grad[k] = (T)gk;
        if (p.has_ent) {
            const double h = (double)ent[k];
            bad |= h != h ? NX_BAD_ENTROPY : 0;
            v[2] += w * h;
            if (grad_ent) grad_ent[k] = (T)(-p.ent_coef * w);
        } else if (grad_ent) {
            grad_ent[k] = (T)0;
        }
    }
    v[6] = (double)bad;
    // Flags are OR-ed, not summed: gather them separately from the sums.
    __shared__ int flags;
    if (threadIdx.x == 0) flags = 0;
    __syncthreads();
    if (bad) atomicOr(&flags, bad);
    nx_block_sum(v, sh);
    if (threadIdx.x == 0) {
        v[6] = (double)flags;
        for (int k = 0; k < NX_ROW_STATS; k++) row_stats[i * NX_ROW_STATS + k] = v[k];
    }
}

extern "C" __global__ void nx_pg_loss_f32(const float *logp, const float *old, const float *ref,
                                          const float *ent, const unsigned char *mask,
                                          const float *adv, long long rows, long long width,
                                          const int *lens, const long long *totals, PgParams p,
                                          float *grad, float *grad_ent, double *row_stats) {
    nx_pg_row<float>(logp, old, ref, ent, mask, adv, rows, width, lens, totals, p, grad, grad_ent,
                     row_stats);
}

extern "C" __global__ void nx_pg_loss_f64(const double *logp, const double *old,
                                          const double *ref, const double *ent,
                                          const unsigned char *mask, const double *adv,
                                          long long rows, long long width, const int *lens,
                                          const long long *totals, PgParams p, double *grad,
                                          double *grad_ent, double *row_stats) {
    nx_pg_row<double>(logp, old, ref, ent, mask, adv, rows, width, lens, totals, p, grad,
                      grad_ent, row_stats);
}

// The batch scalars from the row sums, in a fixed order: one block. out: loss, loss_pg, kl,
// entropy, clip_fraction, approx_kl, mean_ratio, tokens, rows, bad-input flags.
extern "C" __global__ void nx_pg_finalize(const double *row_stats, long long rows,
                                          const long long *totals, PgParams p, double *out) {
    __shared__ double sh[NX_ROW_STATS][NX_BLOCK];
    __shared__ int flags;
    if (threadIdx.x == 0) flags = 0;
    __syncthreads();
    double v[NX_ROW_STATS];
    for (int k = 0; k < NX_ROW_STATS; k++) v[k] = 0.0;
    int bad = 0;
    for (long long i = threadIdx.x; i < rows; i += blockDim.x) {
        for (int k = 0; k < 6; k++) v[k] += row_stats[i * NX_ROW_STATS + k];
        bad |= (int)row_stats[i * NX_ROW_STATS + 6];
    }
    if (bad) atomicOr(&flags, bad);
    nx_block_sum(v, sh);
    if (threadIdx.x == 0) {
        const double n = (double)totals[0];
        double loss = v[0];
        if (p.kl_kind) loss += p.kl_coef * v[1];
        if (p.has_ent) loss -= p.ent_coef * v[2];
        out[0] = loss;
        out[1] = v[0];
        out[2] = v[1];
        out[3] = v[2];
        out[4] = v[3] / n;
        out[5] = v[4] / n;
        out[6] = v[5] / n;
        out[7] = n;
        out[8] = (double)totals[1];
        out[9] = (double)flags;
    }
}
