// Runs the CUDA C of core/src/kernels/pg.cu on the CPU: each CUDA thread of a block is an OS
// thread, __syncthreads is a barrier, __shared__ arrays are statics shared by the block's
// threads, and blocks run one after another. That checks the kernels' maths, indexing and
// block reductions on every golden case without a GPU (tests/kernels.rs builds and runs this);
// the real launch path is checked by scripts/gpu_check.sh on a GPU machine.
//
// The launch sequence below mirrors pg_loss_device in core/src/kernels/mod.rs: row_lens, totals,
// the fused row pass, finalize.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <thread>
#include <vector>

struct nx_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
static nx_dim3 blockIdx, blockDim, gridDim;
static thread_local nx_dim3 threadIdx;
static pthread_barrier_t nx_barrier;

#define __global__
#define __device__
#define __shared__ static
#define __syncthreads() pthread_barrier_wait(&nx_barrier)
using std::exp;
using std::fabs;
using std::fmax;
using std::fmin;
static int atomicOr(int *a, int v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }

#include "pg.cu"
#include "pg_golden_cases.h"

template <class Body> static void launch(unsigned grid, unsigned block, Body body) {
    blockDim.x = block;
    gridDim.x = grid;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        pthread_barrier_init(&nx_barrier, nullptr, block);
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([=] {
                threadIdx.x = t;
                body();
            });
        for (auto &th : threads) th.join();
        pthread_barrier_destroy(&nx_barrier);
    }
}

// The value after `"key": ` in the case's config JSON (flat keys are unique in these configs).
static const char *field(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    return p ? p + strlen(pat) : nullptr;
}
static double num(const char *json, const char *key, double dflt) {
    const char *v = field(json, key);
    return v && *v != 'n' ? strtod(v, nullptr) : dflt;
}
static bool is(const char *json, const char *key, const char *value) {
    const char *v = field(json, key);
    return v && strncmp(v, value, strlen(value)) == 0;
}

// Mirrors PgParams::new in core/src/kernels/mod.rs.
static PgParams params_of(const char *cfg) {
    PgParams p;
    memset(&p, 0, sizeof p);
    p.surrogate = is(cfg, "loss", "\"gspo\"") ? 1 : is(cfg, "loss", "\"reinforce\"") ? 2 : 0;
    p.clip_low = num(cfg, "clip_low", 0);
    p.clip_high = num(cfg, "clip_high", 0);
    p.dual_c = p.surrogate == 0 ? num(cfg, "dual_clip_c", 0) : 0;
    p.agg = is(cfg, "agg", "\"token-mean\"")                ? 0
            : is(cfg, "agg", "\"seq-mean-token-sum\"")      ? 1
            : is(cfg, "agg", "\"seq-mean-token-mean\"")     ? 2
                                                            : 3;
    p.trl_rows = is(cfg, "trl_rows", "true");
    p.divisor = num(cfg, "agg_divisor", 0);
    if (field(cfg, "coef")) {
        p.kl_kind = is(cfg, "estimator", "\"k1\"") ? 1 : is(cfg, "estimator", "\"k2\"") ? 2 : 3;
        p.kl_coef = num(cfg, "coef", 0);
        p.kl_clamp = !is(cfg, "clamp", "false");
    }
    p.ent_coef = num(cfg, "entropy_coef", 0);
    p.has_ent = p.ent_coef != 0;
    return p;
}

static int failures = 0, checks = 0;
static void expect(bool ok, const char *name, const char *what, size_t k, double got, double want) {
    ++checks;
    if (!ok) {
        ++failures;
        fprintf(stderr, "FAIL %s %s[%zu]: got %.12g want %.12g\n", name, what, k, got, want);
    }
}

template <class T>
static void run_case(const pg_case_t &c, unsigned block, double rtol, double atol, bool poison) {
    const size_t n = c.rows * c.width;
    std::vector<T> logp(n), old(n), ref(n), ent(n), adv(c.rows), grad(n, T(99)), gent(n, T(99));
    for (size_t k = 0; k < n; ++k) {
        logp[k] = (T)c.logp[k];
        old[k] = (T)c.old_logp[k];
        ref[k] = c.ref_logp ? (T)c.ref_logp[k] : T(0);
        ent[k] = c.entropy ? (T)c.entropy[k] : T(0);
    }
    for (size_t i = 0; i < c.rows; ++i) adv[i] = (T)c.adv[i];
    size_t poisoned = n;
    if (poison) {  // a NaN on the first valid token of the last row that has one
        for (size_t k = n; k-- > 0;)
            if (c.mask[k]) poisoned = k;
        logp[poisoned] = NAN;
    }
    PgParams p = params_of(c.config);
    std::vector<int> lens(c.rows);
    long long totals[2];
    std::vector<double> row_stats(c.rows * NX_ROW_STATS);
    double out[10];
    long long rows = c.rows, width = c.width;
    launch(c.rows, block, [&] { nx_row_lens(c.mask, width, lens.data()); });
    launch(1, block, [&] { nx_totals(lens.data(), rows, totals); });
    launch(c.rows, block, [&] {
        if constexpr (sizeof(T) == 4)
            nx_pg_loss_f32(logp.data(), old.data(), p.kl_kind ? ref.data() : nullptr,
                           p.has_ent ? ent.data() : nullptr, c.mask, adv.data(), rows, width,
                           lens.data(), totals, p, grad.data(), gent.data(), row_stats.data());
        else
            nx_pg_loss_f64(logp.data(), old.data(), p.kl_kind ? ref.data() : nullptr,
                           p.has_ent ? ent.data() : nullptr, c.mask, adv.data(), rows, width,
                           lens.data(), totals, p, grad.data(), gent.data(), row_stats.data());
    });
    launch(1, block, [&] { nx_pg_finalize(row_stats.data(), rows, totals, p, out); });
    if (poison) {
        expect(((int)out[9] & NX_BAD_LOGP) != 0, c.name, "NaN flag", poisoned, out[9], 1);
        return;
    }
    expect(out[9] == 0, c.name, "flags", 0, out[9], 0);
    expect(fabs(out[0] - c.loss) <= atol + rtol * fabs(c.loss), c.name, "loss", 0, out[0], c.loss);
    for (size_t k = 0; k < n; ++k) {
        const double g = (double)grad[k];
        expect(fabs(g - c.grad[k]) <= atol + rtol * fabs(c.grad[k]), c.name, "grad", k, g,
               c.grad[k]);
        if (!c.mask[k]) expect(g == 0.0, c.name, "masked grad", k, g, 0);
    }
}

int main() {
    const size_t cases = sizeof PG_CASES / sizeof PG_CASES[0];
    for (size_t i = 0; i < cases; ++i) {
        // 32 threads per block covers rows longer and shorter than a block; every 8th case
        // also runs at the full 256 the library launches with.
        for (unsigned block : {32u, 256u}) {
            if (block == 256 && i % 8) continue;
            run_case<double>(PG_CASES[i], block, 1e-9, 1e-12, false);
            run_case<float>(PG_CASES[i], block, 2e-5, 2e-6, false);
        }
    }
    run_case<float>(PG_CASES[0], 32, 2e-5, 2e-6, true);
    printf("emulated kernels: %zu golden cases, %d checks, %d failed\n", cases, checks, failures);
    return failures != 0;
}
