/* Endpoint policies: nenyax_policy_endpoint against an unreachable URL (nothing listens on
 * 127.0.0.1:9) gives trajectories with an EndpointError, in a single rollout and in a batch;
 * the options are validated (malformed, unknown fields, bad numbers, a missing key variable). */

#define _POSIX_C_SOURCE 200809L

#include "common.h"

static const char UNREACHABLE[] =
    "{\"base_url\": \"http://127.0.0.1:9/v1\", \"model\": \"nobody-home\", \"retries\": 0,"
    " \"timeout_s\": 5, \"backoff_s\": 0, \"params\": {\"temperature\": 0, \"max_tokens\": 8}}";

static int32_t sink(void *user_data, size_t index, const char *traj, size_t len)
{
    size_t *endpoint_errors = user_data;
    char err[512];
    (void)index;
    if (json_string(traj, len, "error", err, sizeof err) > 0 &&
        strncmp(err, "EndpointError: ", 15) == 0 && json_is_null(traj, len, "judgment")) {
        (*endpoint_errors)++;
    }
    return 0;
}

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_policy_t *p = NULL, *keyed = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t s = {NULL, 0};
    char err[512];
    size_t endpoint_errors = 0;

    printf("an endpoint nobody listens on\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=4"), &env));
    REQUIRE_OK(nenyax_policy_endpoint(S(UNREACHABLE), &p));
    REQUIRE_OK(nenyax_env_rollout(env, p, NULL, 0, &s));
    CHECK(json_string(s.ptr, s.len, "error", err, sizeof err) > 0);
    printf("        error: %s\n", err);
    CHECK(strncmp(err, "EndpointError: ", 15) == 0);
    CHECK(strstr(err, "127.0.0.1:9") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"error_kind\":\"EndpointError\"") != NULL);
    CHECK(json_is_null(s.ptr, s.len, "judgment"));
    /* the failed call is recorded, with the request as sent */
    CHECK(find_bytes(s.ptr, s.len, "\"model_calls\":[{\"request\":") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"model\":\"nobody-home\"") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"response\":null") != NULL);
    /* the conversation so far is kept */
    CHECK(find_bytes(s.ptr, s.len, "\"messages\":[{\"role\":\"user\"") != NULL);
    nenyax_string_free(&s);

    printf("in a batch, every episode fails the same way and the call still succeeds\n");
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    REQUIRE_OK(nenyax_runner_run(runner, env, p, S("{\"n\": 6}"), sink, &endpoint_errors, NULL));
    CHECK(endpoint_errors == 6);

    printf("an API key variable that is set\n");
    REQUIRE(setenv("NENYAX_TEST_ENDPOINT_KEY", "sk-test", 1) == 0);
    CHECK_OK(nenyax_policy_endpoint(S("{\"base_url\": \"http://127.0.0.1:9/v1\", \"model\": \"m\","
                                      " \"api_key_env\": \"NENYAX_TEST_ENDPOINT_KEY\","
                                      " \"retries\": 0}"),
                                    &keyed));
    CHECK(keyed != NULL);
    nenyax_policy_free(keyed);
    keyed = NULL;

    printf("options that do not fit\n");
    CHECK_STATUS(nenyax_policy_endpoint(S("{\"base_url\": \"http://127.0.0.1:9/v1\", \"model\": "
                                          "\"m\", \"retries\": -1}"),
                                        &keyed),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_policy_endpoint(S("{\"base_url\": \"http://127.0.0.1:9/v1\", \"model\": "
                                          "\"m\", \"backoff_s\": -0.5}"),
                                        &keyed),
                 NENYAX_STATUS_CONFIG);
    CHECK_STATUS(nenyax_policy_endpoint(S("{\"base_url\": \"http://127.0.0.1:9/v1\", \"model\": "
                                          "\"m\", \"params\": [1]}"),
                                        &keyed),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_policy_endpoint(S("[]"), &keyed), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_policy_endpoint("", 0, &keyed), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(keyed == NULL);

    nenyax_runner_free(runner);
    nenyax_policy_free(p);
    nenyax_env_free(env);
    return finish("test_endpoint");
}
