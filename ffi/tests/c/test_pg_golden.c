/* Every advantage and policy-loss case of pg-golden.json through the header, in f64 at the
 * golden file's float64 tolerance (the cases are generated into pg_golden_cases.h), plus the
 * learners' bad-input errors. */

#include <math.h>

#include "common.h"
#include "pg_golden_cases.h"

#define RTOL 1e-9
#define ATOL 1e-12

static int near(double got, double want)
{
    return fabs(got - want) <= ATOL + RTOL * fabs(want);
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
        REQUIRE_OK(nenyax_pg_loss(c->logp, c->old_logp, c->ref_logp, c->entropy, c->mask, c->adv,
                                  c->rows, c->width, c->config, strlen(c->config), grad, NULL,
                                  &stats));
        for (bad = !near(stats.loss, c->loss), k = 0; k < n; k++) {
            bad += !near(grad[k], c->grad[k]);
        }
        check_report(bad == 0, __FILE__, __LINE__, c->name, NULL);
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
        CHECK_STATUS_MSG(nenyax_pg_loss(c->logp, c->old_logp, NULL, NULL, c->mask, c->adv, c->rows,
                                        c->width,
                                        S("{\"loss\": \"ppo_clip\", \"clip_low\": -0.2, "
                                          "\"clip_high\": 0.2, \"agg\": \"token-mean\"}"),
                                        grad, NULL, &stats),
                         NENYAX_STATUS_CONFIG, "clip_low");
        CHECK_STATUS_MSG(nenyax_pg_loss(c->logp, c->old_logp, NULL, NULL, c->mask, c->adv, c->rows,
                                        c->width,
                                        S("{\"loss\": \"ppo_clip\", \"clip_low\": 0.2, "
                                          "\"clip_high\": 0.2, \"agg\": \"token-mean\", "
                                          "\"kl\": {\"estimator\": \"k3\", \"coef\": 0.1}}"),
                                        grad, NULL, &stats),
                         NENYAX_STATUS_CONFIG, "ref_logp");
    }
    return finish("test_pg_golden");
}
