/* A reasoning-gym dataset through the header, as a C trainer would reach it: nothing in the
 * C ABI is specific to the Python bridge, a URI is a URI. Needs NENYAX_PYTHON pointing at an
 * interpreter with reasoning-gym 0.1.25 (scripts/test.sh and .ci/run set it); without it the
 * program fails and says so, it never skips. */

#include <stdlib.h>

#include "common.h"

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_policy_t *reference = NULL, *null_policy = NULL;
    nenyax_session_t *session = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t s = {NULL, 0};
    char text[512] = "", tier[32] = "", err[512] = "";

    if (getenv("NENYAX_PYTHON") == NULL) {
        check_report(0, __FILE__, __LINE__,
                     "NENYAX_PYTHON is set (run scripts/test.sh, which installs reasoning-gym "
                     "into .venv)",
                     NULL);
        return finish("test_reasoning_gym");
    }

    printf("load and describe\n");
    REQUIRE_OK(nenyax_env_load(S("reasoning_gym:basic_arithmetic?size=4&seed=7&workers=1"), &env));
    REQUIRE_OK(nenyax_env_manifest(env, &s));
    CHECK(find_bytes(s.ptr, s.len, "\"source_format\":\"reasoning_gym\"") != NULL);
    CHECK(json_number(s.ptr, s.len, "num_tasks") == 4.0);
    nenyax_string_free(&s);

    printf("a session: the question in, a wrong reply scored 0 by the dataset's own verifier\n");
    REQUIRE_OK(nenyax_session_open(env, S("{\"task\": {\"id\": \"1\"}}"), &session));
    REQUIRE_OK(nenyax_session_observation(session, &s));
    json_string(s.ptr, s.len, "text", text, sizeof text);
    printf("        question: %.60s...\n", text);
    CHECK(find_bytes(text, strlen(text), "<answer></answer>") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_act(session, S("\"<answer>not a number</answer>\""), &s));
    CHECK(json_number(s.ptr, s.len, "reward") == 0.0);
    CHECK(find_bytes(s.ptr, s.len, "\"terminated\":true") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_judgment(session, &s));
    CHECK(find_bytes(s.ptr, s.len, "\"source\":\"verifier\"") != NULL);
    nenyax_string_free(&s);
    nenyax_session_free(session);

    printf("the reference policy solves every task, the null policy none, in one batch each\n");
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    REQUIRE_OK(nenyax_env_null_policy(env, &null_policy));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    REQUIRE_OK(nenyax_runner_run(runner, env, reference, S("{\"n\": 4}"), NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"score\":1.0") == 4);
    CHECK(count_bytes(s.ptr, s.len, "\"error\":null") == 4);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_runner_run(runner, env, null_policy, S("{\"n\": 4}"), NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"score\":0.0") == 4);
    nenyax_string_free(&s);

    printf("conformance through the header\n");
    REQUIRE_OK(nenyax_env_check(env, S("{\"samples\": 4}"), &s));
    json_string(s.ptr, s.len, "tier", tier, sizeof tier);
    printf("        tier %s\n", tier);
    CHECK(strcmp(tier, "audited") == 0);
    nenyax_string_free(&s);

    printf("a bad dataset name is a typed error naming it\n");
    {
        nenyax_env_t *bad = NULL;
        nenyax_error_t *e = nenyax_env_load(S("reasoning_gym:basic_arithmeticc"), &bad);
        CHECK(e != NULL && nenyax_error_code(e) == NENYAX_STATUS_UNKNOWN_TARGET);
        if (e != NULL) {
            size_t len = 0;
            const char *m = nenyax_error_message(e, &len);
            snprintf(err, sizeof err, "%.*s", (int)len, m);
            printf("        %s\n", err);
            CHECK(find_bytes(err, strlen(err), "basic_arithmeticc") != NULL);
            nenyax_error_free(e);
        }
        CHECK(bad == NULL);
    }

    nenyax_runner_free(runner);
    nenyax_policy_free(null_policy);
    nenyax_policy_free(reference);
    nenyax_env_free(env);
    return finish("test_reasoning_gym");
}
