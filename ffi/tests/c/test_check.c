/* Conformance through the C ABI: nenyax_check_uri runs the full suite (tier "audited" for
 * builtin:arithmetic); nenyax_env_check runs it on a loaded handle, honours its options and
 * reports every check. (Whether nenyax_env_check can reach "audited" is test_env_check_tier.c.) */

#include "common.h"

/* The status of check `name` in a report, into buf; -1 when absent. */
static int check_status(const nenyax_string_t *report, const char *name, char *buf, size_t cap)
{
    char key[96];
    const char *at;
    snprintf(key, sizeof key, "{\"name\":\"%s\",", name);
    at = find_bytes(report->ptr, report->len, key);
    if (at == NULL) {
        return -1;
    }
    return json_string(at, (size_t)(report->ptr + report->len - at), "status", buf, cap);
}

static const char *const CHECKS[] = {"manifest",           "session_opens",
                                     "rollout_completes",  "reproducible",
                                     "reproducible_fresh", "parallel_consistent",
                                     "learning_signal",    "verifier_discriminates"};

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_string_t r = {NULL, 0};
    char buf[256];
    size_t i;

    printf("nenyax_check_uri: the full suite\n");
    REQUIRE_OK(nenyax_check_uri(S("builtin:arithmetic"), NULL, 0, &r));
    CHECK(json_string(r.ptr, r.len, "env_id", buf, sizeof buf) > 0 &&
          strcmp(buf, "builtin:arithmetic") == 0);
    CHECK(json_string(r.ptr, r.len, "mode", buf, sizeof buf) > 0 && strcmp(buf, "step") == 0);
    CHECK(json_string(r.ptr, r.len, "tier", buf, sizeof buf) > 0 && strcmp(buf, "audited") == 0);
    for (i = 0; i < sizeof CHECKS / sizeof CHECKS[0]; i++) {
        int found = check_status(&r, CHECKS[i], buf, sizeof buf);
        printf("        %-24s %s\n", CHECKS[i], found > 0 ? buf : "(missing)");
        CHECK(found > 0 && strcmp(buf, "pass") == 0);
    }
    CHECK(count_bytes(r.ptr, r.len, "\"duration_s\":") == 8);
    nenyax_string_free(&r);

    REQUIRE_OK(nenyax_check_uri(S("builtin:guess?high=50"), S("{\"samples\": 2, \"threads\": 3}"),
                                &r));
    CHECK(json_string(r.ptr, r.len, "tier", buf, sizeof buf) > 0);
    printf("        builtin:guess?high=50: tier %s\n", buf);
    CHECK(find_bytes(r.ptr, r.len, "\"detail\":\"2 episodes on 3 threads matched serial\"") !=
          NULL);
    nenyax_string_free(&r);

    printf("nenyax_env_check on a loaded handle\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=30"), &env));
    REQUIRE_OK(nenyax_env_check(env, NULL, 0, &r));
    CHECK(json_string(r.ptr, r.len, "env_id", buf, sizeof buf) > 0 &&
          strcmp(buf, "builtin:arithmetic?size=30") == 0);
    CHECK(json_string(r.ptr, r.len, "tier", buf, sizeof buf) > 0);
    printf("        tier %s\n", buf);
    for (i = 0; i < sizeof CHECKS / sizeof CHECKS[0]; i++) {
        CHECK(check_status(&r, CHECKS[i], buf, sizeof buf) > 0);
        printf("        %-24s %s\n", CHECKS[i], buf);
        if (strcmp(CHECKS[i], "reproducible_fresh") != 0) {
            CHECK(strcmp(buf, "pass") == 0);
        }
    }
    CHECK(find_bytes(r.ptr, r.len, "\"detail\":\"8 episodes, mean score 1.000\"") != NULL);
    nenyax_string_free(&r);

    REQUIRE_OK(nenyax_env_check(env, S("{\"samples\": 3, \"threads\": 2}"), &r));
    CHECK(find_bytes(r.ptr, r.len, "\"detail\":\"3 episodes, mean score 1.000\"") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "\"detail\":\"3 episodes on 2 threads matched serial\"") !=
          NULL);
    nenyax_string_free(&r);

    /* samples 0 is raised to 1 */
    REQUIRE_OK(nenyax_env_check(env, S("{\"samples\": 0}"), &r));
    CHECK(find_bytes(r.ptr, r.len, "\"detail\":\"1 episode, mean score 1.000\"") != NULL);
    nenyax_string_free(&r);

    nenyax_env_free(env);
    return finish("test_check");
}
