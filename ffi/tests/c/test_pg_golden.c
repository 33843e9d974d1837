/* Every advantage, policy-loss, REINFORCE++ and DPO case of pg-golden.json through the header,
 * in f64 at the golden file's float64 tolerance and in f32 at its float32 tolerance (the cases
 * are generated into pg_golden_cases.h), plus the learners' bad-input errors. */

#include <math.h>

#include "common.h"
#include "pg_golden_cases.h"

#define RTOL 1e-9
#define ATOL 1e-12
#define RTOL32 2e-5
#define ATOL32 2e-6

static int near(double got, double want)
{
    return fabs(got - want) <= ATOL + RTOL * fabs(want);
}

static int near32(double got, double want)
{
    return fabs(got - want) <= ATOL32 + RTOL32 * fabs(want);
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

int main(void)
{
    size_t i, k, bad;
    double out[64], grad[64];
    nenyax_pg_stats_t stats;

    printf("advantages: %zu golden vectors\n", sizeof ADV_CASES / sizeof ADV_CASES[0]);
    for (i = 0; i < sizeof ADV_CASES / sizeof ADV_CASES[0]; i++) {
        const adv_case_t *c = &ADV_CASES[i];
        REQUIRE_OK(nenyax_advantages(c->rewards, c->ids, c->n, c->options, strlen(c->options), out));
        for (bad = 0, k = 0; k < c->n; k++) {
            bad += !near(out[k], c->want[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, c->name, NULL);
    }

    printf("policy losses: %zu golden cases\n", sizeof PG_CASES / sizeof PG_CASES[0]);
    for (i = 0; i < sizeof PG_CASES / sizeof PG_CASES[0]; i++) {
        const pg_case_t *c = &PG_CASES[i];
        size_t n = c->rows * c->width;
        float lp[64], old[64], rf[64], ent[64], adv[64], g32[64];
        REQUIRE_OK(nenyax_pg_loss(c->logp, c->old_logp, c->ref_logp, c->entropy, c->mask, c->adv, 0,
                                  c->rows, c->width, c->config, strlen(c->config), grad, NULL,
                                  &stats));
        for (bad = !near(stats.loss, c->loss), k = 0; k < n; k++) {
            bad += !near(grad[k], c->grad[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, c->name, "f64");
        REQUIRE_OK(nenyax_pg_loss_f32(
            to_f32(lp, c->logp, n), to_f32(old, c->old_logp, n), to_f32(rf, c->ref_logp, n),
            to_f32(ent, c->entropy, n), c->mask, to_f32(adv, c->adv, c->rows), c->rows, c->rows,
            c->width, c->config, strlen(c->config), g32, NULL, &stats));
        for (bad = !near32(stats.loss, c->loss), k = 0; k < n; k++) {
            bad += !near32(g32[k], c->grad[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, c->name, "f32");
    }

    printf("REINFORCE++ token advantages\n");
    {
        double adv[RPP_ROWS * RPP_WIDTH];
        REQUIRE_OK(nenyax_reinforce_pp(rpp_rewards, NULL, rpp_mask, RPP_ROWS, RPP_WIDTH, 1.0, adv,
                                       NULL));
        for (bad = 0, k = 0; k < RPP_ROWS * RPP_WIDTH; k++) {
            bad += !near(adv[k], rpp_want[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, "reinforce_pp gamma 1", NULL);
        REQUIRE_OK(nenyax_reinforce_pp(rpp_rewards, rpp_ids, rpp_mask, RPP_ROWS, RPP_WIDTH, 1.0,
                                       adv, NULL));
        for (bad = 0, k = 0; k < RPP_ROWS * RPP_WIDTH; k++) {
            bad += !near(adv[k], rpp_want_baseline[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, "reinforce_pp baseline", NULL);
    }

    printf("DPO on best-vs-worst pairs\n");
    {
        double loss = 0.0;
        size_t pairs = 0;
        REQUIRE_OK(nenyax_dpo_loss(dpo_rewards, dpo_ids, dpo_logp, dpo_ref_logp, dpo_mask, DPO_ROWS,
                                   DPO_WIDTH, DPO_BETA, &loss, grad, &pairs));
        for (bad = !near(loss, DPO_LOSS) + (pairs != 2), k = 0; k < DPO_ROWS * DPO_WIDTH; k++) {
            bad += !near(grad[k], dpo_grad[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, "dpo", NULL);
    }

    printf("DAPO's filter\n");
    {
        const double r[5] = {1.0, 1.0, 0.0, 1.0, 0.5};
        const int64_t g[5] = {7, 7, 8, 8, 9};
        uint8_t keep[5];
        REQUIRE_OK(nenyax_dapo_keep(r, g, 5, keep));
        CHECK(keep[0] == 0 && keep[1] == 0 && keep[2] == 1 && keep[3] == 1 && keep[4] == 1);
    }

    printf("named learners\n");
    {
        nenyax_string_t json = {0};
        REQUIRE_OK(nenyax_learner_json(S("{\"learner\": \"dapo\", \"clip_high\": 0.3}"), &json));
        CHECK(strstr(json.ptr, "\"clip_high\":0.3") != NULL);
        CHECK(strstr(json.ptr, "\"dapo_filter\":true") != NULL);
        nenyax_string_free(&json);
    }

    printf("the CUDA entry points\n");
    {
        nenyax_string_t device = {0};
        nenyax_error_t *err = nenyax_cuda_device(&device);
        if (err) {
            /* No GPU here: say why, and every CUDA entry point must say the same. */
            const pg_case_t *c = &PG_CASES[0];
            float lp[64], adv[64], g32[64];
            size_t n = c->rows * c->width;
            printf("  GPU cases skipped: %s\n", nenyax_error_message(err, NULL));
            CHECK(nenyax_error_code(err) == NENYAX_STATUS_CUDA_UNAVAILABLE);
            nenyax_error_free(err);
            CHECK_STATUS_MSG(nenyax_pg_loss_cuda_host_f32(
                                 to_f32(lp, c->logp, n), lp, NULL, NULL, c->mask,
                                 to_f32(adv, c->adv, c->rows), 0, c->rows, c->width,
                                 c->config, strlen(c->config), g32, NULL, &stats),
                             NENYAX_STATUS_CUDA_UNAVAILABLE, "CUDA unavailable");
        } else {
            printf("  on %s\n", device.ptr);
            nenyax_string_free(&device);
            for (i = 0; i < sizeof PG_CASES / sizeof PG_CASES[0]; i++) {
                const pg_case_t *c = &PG_CASES[i];
                size_t n = c->rows * c->width;
                float lp[64], old[64], rf[64], ent[64], adv[64], g32[64];
                REQUIRE_OK(nenyax_pg_loss_cuda_host_f32(
                    to_f32(lp, c->logp, n), to_f32(old, c->old_logp, n),
                    to_f32(rf, c->ref_logp, n), to_f32(ent, c->entropy, n), c->mask,
                    to_f32(adv, c->adv, c->rows), 0, c->rows, c->width, c->config,
                    strlen(c->config), g32, NULL, &stats));
                for (bad = !near32(stats.loss, c->loss), k = 0; k < n; k++) {
                    bad += !near32(g32[k], c->grad[k]);
                }
                check_report(bad == 0, __FILE__, __LINE__, c->name, "GPU f32");
            }
        }
    }

    printf("bad input names the argument\n");
    {
        const double r[2] = {1.0, NAN};
        const int64_t g[2] = {0, 0};
        const pg_case_t *c = &PG_CASES[0];
        CHECK_STATUS_MSG(nenyax_advantages(r, g, 2, S("{\"estimator\": \"grpo_verl\"}"), out),
                         NENYAX_STATUS_CONFIG, "rewards[1] is NaN");
        CHECK_STATUS_MSG(nenyax_advantages(r, NULL, 2, S("{\"estimator\": \"grpo_verl\"}"), out),
                         NENYAX_STATUS_INVALID_ARGUMENT, "group_ids is NULL");
        CHECK_STATUS_MSG(nenyax_advantages(r, g, 1, S("{\"estimator\": \"grop\"}"), out),
                         NENYAX_STATUS_CONFIG, "unknown estimator");
        CHECK_STATUS_MSG(nenyax_pg_loss(c->logp, c->old_logp, NULL, NULL, c->mask, c->adv, 0, c->rows,
                                        c->width,
                                        S("{\"loss\": \"ppo_clip\", \"clip_low\": -0.2, "
                                          "\"clip_high\": 0.2, \"agg\": \"token-mean\"}"),
                                        grad, NULL, &stats),
                         NENYAX_STATUS_CONFIG, "clip_low");
        CHECK_STATUS_MSG(nenyax_pg_loss(c->logp, c->old_logp, NULL, NULL, c->mask, c->adv, 0, c->rows,
                                        c->width,
                                        S("{\"loss\": \"ppo_clip\", \"clip_low\": 0.2, "
                                          "\"clip_high\": 0.2, \"agg\": \"token-mean\", "
                                          "\"kl\": {\"estimator\": \"k3\", \"coef\": 0.1}}"),
                                        grad, NULL, &stats),
                         NENYAX_STATUS_CONFIG, "ref_logp");
        CHECK_STATUS_MSG(nenyax_pg_loss(c->logp, c->old_logp, NULL, NULL, c->mask, c->adv, 5, c->rows,
                                        c->width, S("{\"learner\": \"dapo\"}"), grad, NULL, &stats),
                         NENYAX_STATUS_CONFIG, "advantages");
        {
            uint8_t none[64] = {0};
            CHECK_STATUS_MSG(nenyax_pg_loss(c->logp, c->old_logp, NULL, NULL, none, c->adv, 0,
                                            c->rows, c->width, S("{\"learner\": \"grpo_trl\", \"kl\": null}"),
                                            grad, NULL, &stats),
                             NENYAX_STATUS_CONFIG, "`mask`: has no valid tokens");
        }
        CHECK_STATUS_MSG(nenyax_advantages(r, g, 0, S("{\"estimator\": \"grpo_verl\"}"), out),
                         NENYAX_STATUS_CONFIG, "`rewards`: is empty");
        CHECK_STATUS_MSG(nenyax_dpo_loss(r, g, c->logp, c->logp, c->mask, 2, c->width, 0.1, NULL,
                                         grad, NULL),
                         NENYAX_STATUS_CONFIG, "rewards[1] is not finite");
    }
    return finish("test_pg_golden");
}
