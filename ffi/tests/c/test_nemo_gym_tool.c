/* A NeMo Gym tool task through the header: the stateful counter resources server, whose state
 * lives behind the episode's session cookie. Nothing in the C ABI is specific to NeMo Gym: a
 * URI loads it, a session steps it with tool calls as actions, and the runner rolls it out
 * with the environment's own policies (the reference replays the server's shipped example
 * rollouts through the tool loop, every model call recorded).
 *
 * Needs NENYAX_TEST_NEMO_GYM_URI, the nemo_gym: URI of a running counter server with its
 * example data (ffi/tests/c_programs.rs starts one; .ci/run does for the ASan run); without
 * it the program fails and says so, it never skips. */

#include <stdlib.h>

#include "common.h"

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_policy_t *reference = NULL, *null_policy = NULL;
    nenyax_session_t *session = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t s = {NULL, 0};
    const char *uri = getenv("NENYAX_TEST_NEMO_GYM_URI");

    if (uri == NULL) {
        check_report(0, __FILE__, __LINE__,
                     "NENYAX_TEST_NEMO_GYM_URI is set (cargo test -p nenyax-ffi starts a counter "
                     "server from .venv-nemo-gym; run scripts/setup_nemo_gym.sh first)",
                     NULL);
        return finish("test_nemo_gym_tool");
    }

    printf("load and describe: tools come from the server's OpenAPI document\n");
    REQUIRE_OK(nenyax_env_load(uri, strlen(uri), &env));
    REQUIRE_OK(nenyax_env_manifest(env, &s));
    CHECK(find_bytes(s.ptr, s.len, "\"source_format\":\"nemo_gym\"") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"increment_counter\"") != NULL);
    CHECK(json_number(s.ptr, s.len, "num_tasks") == 5.0);
    nenyax_string_free(&s);

    printf("a session on task 0 (start at 3, add 1 then 2): tool calls are actions\n");
    REQUIRE_OK(nenyax_session_open(env, S("{\"task\": {\"id\": \"0\"}}"), &session));
    REQUIRE_OK(nenyax_session_act(
        session, S("{\"name\": \"increment_counter\", \"arguments\": {\"count\": 1}}"), &s));
    CHECK(find_bytes(s.ptr, s.len, "\"success\":true") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"terminated\":false") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_act(
        session, S("{\"name\": \"increment_counter\", \"arguments\": {\"count\": 2}}"), &s));
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_act(
        session, S("{\"name\": \"get_counter_value\", \"arguments\": {}}"), &s));
    CHECK(find_bytes(s.ptr, s.len, "\"count\":6") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_act(session, S("\"The count is 6.\""), &s));
    CHECK(json_number(s.ptr, s.len, "reward") == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"terminated\":true") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_judgment(session, &s));
    CHECK(find_bytes(s.ptr, s.len, "\"source\":\"verifier\"") != NULL);
    nenyax_string_free(&s);
    nenyax_session_free(session);

    printf("the reference (replayed example rollouts) solves all 5, the null policy none\n");
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    REQUIRE_OK(nenyax_env_null_policy(env, &null_policy));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    REQUIRE_OK(nenyax_runner_run(runner, env, reference, S("{\"n\": 5}"), NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"score\":1.0") == 5);
    CHECK(count_bytes(s.ptr, s.len, "\"error\":\"") == 0);
    CHECK(count_bytes(s.ptr, s.len, "\"model_calls\":[]") == 0);
    CHECK(count_bytes(s.ptr, s.len, "\"stop_reason\":\"no_tool_calls\"") >= 5);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_runner_run(runner, env, null_policy, S("{\"n\": 5}"), NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"score\":0.0") == 5);
    nenyax_string_free(&s);

    nenyax_runner_free(runner);
    nenyax_policy_free(null_policy);
    nenyax_policy_free(reference);
    nenyax_env_free(env);
    return finish("test_nemo_gym_tool");
}
