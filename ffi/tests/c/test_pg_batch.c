/* nenyax_pg_loss_batch: every policy-loss case of pg-golden.json through one nenyax_pg_batch_t,
 * in f64 and f32 host memory at the golden tolerances (as test_pg_golden.c checks the old entry
 * points); the GPU paths where there is a GPU (else NENYAX_STATUS_CUDA_UNAVAILABLE); and bad
 * version, dtype, memory and device values, each an invalid argument naming its field. */

#include <math.h>

#include "common.h"
#include "pg_golden_cases.h"

#define RTOL 1e-9
#define ATOL 1e-12
#define RTOL32 2e-5
#define ATOL32 2e-6

static int near(double got, double want, int f32)
{
    return fabs(got - want) <= (f32 ? ATOL32 + RTOL32 * fabs(want) : ATOL + RTOL * fabs(want));
}

/* Rounds a golden f64 array to f32 (NULL stays NULL). */
static const float *to_f32(float *dst, const double *src, size_t n)
{
    size_t k;
    if (!src) {
        return NULL;
    }
    for (k = 0; k < n; k++) {
        dst[k] = (float)src[k];
    }
    return dst;
}

/* Arrays of one case in one precision. */
struct arrays {
    float lp[64], old[64], rf[64], ent[64], adv[64], grad32[64];
    double grad64[64];
};

/* A host batch of case `c` in `dtype` (f32 arrays rounded into `a`). */
static nenyax_pg_batch_t batch_of(const pg_case_t *c, uint32_t dtype, uint32_t device,
                                  struct arrays *a)
{
    size_t n = c->rows * c->width;
    nenyax_pg_batch_t b;
    memset(&b, 0, sizeof b);
    b.version = NENYAX_PG_BATCH_VERSION;
    b.dtype = dtype;
    b.memory = NENYAX_MEMORY_HOST;
    b.device = device;
    b.mask = c->mask;
    b.rows = c->rows;
    b.width = c->width;
    if (dtype == NENYAX_DTYPE_F32) {
        b.logp = to_f32(a->lp, c->logp, n);
        b.old_logp = to_f32(a->old, c->old_logp, n);
        b.ref_logp = to_f32(a->rf, c->ref_logp, n);
        b.entropy = to_f32(a->ent, c->entropy, n);
        b.advantages = to_f32(a->adv, c->adv, c->rows);
        b.grad_logp = a->grad32;
    } else {
        b.logp = c->logp;
        b.old_logp = c->old_logp;
        b.ref_logp = c->ref_logp;
        b.entropy = c->entropy;
        b.advantages = c->adv;
        b.grad_logp = a->grad64;
    }
    return b;
}

/* Every golden case in `dtype` on `device`; returns how many matched. */
static size_t golden(uint32_t dtype, uint32_t device, const char *label)
{
    size_t i, k, bad, matched = 0;
    for (i = 0; i < sizeof PG_CASES / sizeof PG_CASES[0]; i++) {
        const pg_case_t *c = &PG_CASES[i];
        struct arrays a;
        nenyax_pg_stats_t stats;
        int f32 = dtype == NENYAX_DTYPE_F32;
        nenyax_pg_batch_t b = batch_of(c, dtype, device, &a);
        REQUIRE_OK(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats));
        for (bad = !near(stats.loss, c->loss, f32), k = 0; k < c->rows * c->width; k++) {
            bad += !near(f32 ? a.grad32[k] : a.grad64[k], c->grad[k], f32);
        }
        check_report(bad == 0, __FILE__, __LINE__, c->name, label);
        matched += bad == 0;
    }
    return matched;
}

int main(void)
{
    const size_t cases = sizeof PG_CASES / sizeof PG_CASES[0];
    const pg_case_t *c = &PG_CASES[0];
    struct arrays a;
    nenyax_pg_stats_t stats;
    nenyax_pg_batch_t b;
    nenyax_string_t device = {0};
    nenyax_error_t *err;

    printf("host memory on the CPU: %zu golden cases, f64 and f32\n", cases);
    CHECK(golden(NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, "f64") == cases);
    CHECK(golden(NENYAX_DTYPE_F32, NENYAX_DEVICE_CPU, "f32") == cases);

    printf("the old entry point gives the same stats as the batch\n");
    {
        nenyax_pg_stats_t old;
        double grad[64];
        b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
        REQUIRE_OK(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats));
        REQUIRE_OK(nenyax_pg_loss(c->logp, c->old_logp, c->ref_logp, c->entropy, c->mask, c->adv,
                                  0, c->rows, c->width, c->config, strlen(c->config), grad, NULL,
                                  &old));
        CHECK(memcmp(&old, &stats, sizeof stats) == 0);
        CHECK(memcmp(grad, a.grad64, c->rows * c->width * sizeof grad[0]) == 0);
    }

    printf("the GPU paths\n");
    err = nenyax_cuda_device(&device);
    if (err) {
        printf("  no GPU: %s\n", nenyax_error_message(err, NULL));
        CHECK(nenyax_error_code(err) == NENYAX_STATUS_CUDA_UNAVAILABLE);
        nenyax_error_free(err);
        b = batch_of(c, NENYAX_DTYPE_F32, NENYAX_DEVICE_CUDA, &a);
        CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                         NENYAX_STATUS_CUDA_UNAVAILABLE, "CUDA unavailable");
        b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CUDA, &a);
        CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                         NENYAX_STATUS_CUDA_UNAVAILABLE, "CUDA unavailable");
        /* Device memory: the pointers are never touched without a GPU. */
        b.memory = NENYAX_MEMORY_CUDA;
        b.stats_device = a.grad64;
        CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), NULL),
                         NENYAX_STATUS_CUDA_UNAVAILABLE, "CUDA unavailable");
    } else {
        printf("  on %s\n", device.ptr);
        nenyax_string_free(&device);
        CHECK(golden(NENYAX_DTYPE_F32, NENYAX_DEVICE_CUDA, "GPU f32") == cases);
        CHECK(golden(NENYAX_DTYPE_F64, NENYAX_DEVICE_CUDA, "GPU f64") == cases);
    }

    printf("bad fields are invalid arguments naming the field\n");
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(NULL, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "batch is NULL");
    b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
    b.version = 2;
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "batch->version 2");
    b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
    b.dtype = 0;
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "batch->dtype 0");
    b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
    b.memory = 7;
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "batch->memory 7");
    b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
    b.device = 9;
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "batch->device 9");
    b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
    b.memory = NENYAX_MEMORY_CUDA;
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "batch->device");
    b = batch_of(c, NENYAX_DTYPE_F64, NENYAX_DEVICE_CPU, &a);
    b.logp = NULL;
    CHECK_STATUS_MSG(nenyax_pg_loss_batch(&b, c->config, strlen(c->config), &stats),
                     NENYAX_STATUS_INVALID_ARGUMENT, "logp is NULL");
    return finish("test_pg_batch");
}
