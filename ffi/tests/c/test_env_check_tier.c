/* nenyax_env_check must be able to report the tiers its checks support. An environment defined
 * with nenyax_env_define_tasks has no URI, so nenyax_check_uri cannot check it: its score and
 * reference callbacks can only reach tier "audited" through nenyax_env_check. The same holds for
 * a builtin checked through a loaded handle, which nenyax_check_uri rates "audited". */

#include "common.h"

static int32_t score(void *user_data, const char *task, size_t task_len, const char *reply,
                     size_t reply_len, double *score_out, nenyax_reply_t *error)
{
    char expected[64], want[96];
    (void)user_data;
    if (json_string(task, task_len, "answer", expected, sizeof expected) < 0) {
        nenyax_reply_set(error, S("row has no answer"));
        return 1;
    }
    snprintf(want, sizeof want, "<answer>%s</answer>", expected);
    *score_out = find_bytes(reply, reply_len, want) != NULL ? 1.0 : 0.0;
    return 0;
}

static int32_t reference(void *user_data, const char *task, size_t task_len,
                         nenyax_reply_t *reply)
{
    char expected[64], out[96];
    int n;
    (void)user_data;
    if (json_string(task, task_len, "answer", expected, sizeof expected) < 0) {
        return 1;
    }
    n = snprintf(out, sizeof out, "<answer>%s</answer>", expected);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static void report(const char *what, const nenyax_string_t *r, const char *expected_tier,
                   int line)
{
    char tier[32] = "", fresh[512] = "", claim[160];
    const char *at = find_bytes(r->ptr, r->len, "{\"name\":\"reproducible_fresh\",");
    json_string(r->ptr, r->len, "tier", tier, sizeof tier);
    if (at != NULL) {
        json_string(at, (size_t)(r->ptr + r->len - at), "detail", fresh, sizeof fresh);
    }
    printf("        %s: tier %s (reproducible_fresh: %s)\n", what, tier, fresh);
    snprintf(claim, sizeof claim, "nenyax_env_check rates %s \"%s\" (got \"%s\")", what,
             expected_tier, tier);
    check_report(strcmp(tier, expected_tier) == 0, __FILE__, line, claim, NULL);
}

int main(void)
{
    static const char rows[] = "[{\"prompt\": \"Capital of Kenya?\", \"answer\": \"Nairobi\"},"
                               " {\"prompt\": \"Capital of Peru?\", \"answer\": \"Lima\"},"
                               " {\"prompt\": \"Capital of Chile?\", \"answer\": \"Santiago\"}]";
    nenyax_env_t *defined = NULL, *builtin = NULL;
    nenyax_string_t r = {NULL, 0};
    nenyax_task_vtable_t vt = {NENYAX_VTABLE_VERSION, score, reference};

    printf("define_tasks with score and reference callbacks, checked with nenyax_env_check\n");
    REQUIRE_OK(nenyax_env_define_tasks(S("capitals"), S(rows), &vt, NULL, NULL, 0, &defined));
    REQUIRE_OK(nenyax_env_check(defined, S("{\"samples\": 3}"), &r));
    CHECK(find_bytes(r.ptr, r.len, "\"name\":\"verifier_discriminates\",\"tier\":\"audited\","
                                   "\"status\":\"pass\"") != NULL);
    report("defined:capitals", &r, "audited", __LINE__);
    nenyax_string_free(&r);

    printf("builtin:arithmetic through a loaded handle\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic"), &builtin));
    REQUIRE_OK(nenyax_env_check(builtin, NULL, 0, &r));
    report("builtin:arithmetic", &r, "audited", __LINE__);
    nenyax_string_free(&r);

    nenyax_env_free(defined);
    nenyax_env_free(builtin);
    return finish("test_env_check_tier");
}
