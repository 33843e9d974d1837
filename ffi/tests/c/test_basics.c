/* Basics: versions, the NULL conventions of the infallible functions, loading a builtin, its
 * manifest and tasks, reference and null policies, single rollouts, runners (out string and
 * sink), with_judge, and handles freed in any order. */

#include "common.h"

static const char URI[] = "builtin:arithmetic?size=10";

static void versions(void)
{
    char expected[32];
    printf("versions\n");
    CHECK(NENYAX_VERSION_NUMBER ==
          NENYAX_VERSION_MAJOR * 1000000 + NENYAX_VERSION_MINOR * 1000 + NENYAX_VERSION_PATCH);
    snprintf(expected, sizeof expected, "%d.%d.%d", NENYAX_VERSION_MAJOR, NENYAX_VERSION_MINOR,
             NENYAX_VERSION_PATCH);
    CHECK(strcmp(NENYAX_VERSION_STRING, expected) == 0);
    CHECK(nenyax_version() != NULL);
    CHECK(strcmp(nenyax_version(), NENYAX_VERSION_STRING) == 0);
    CHECK(nenyax_version() == nenyax_version()); /* static, never freed */
    CHECK(nenyax_version_number() == NENYAX_VERSION_NUMBER);
    CHECK(nenyax_protocol_version() != NULL);
    CHECK(strcmp(nenyax_protocol_version(), "0.1") == 0);
    CHECK(NENYAX_VTABLE_VERSION == 1);
    CHECK(NENYAX_THREAD_SAFE == 1);
}

static void null_conventions(void)
{
    size_t len = 99;
    nenyax_string_t empty = {NULL, 0};
    printf("NULL conventions of the infallible functions\n");
    CHECK(nenyax_error_code(NULL) == NENYAX_STATUS_OK);
    CHECK(nenyax_error_message(NULL, NULL) != NULL);
    CHECK(strcmp(nenyax_error_message(NULL, NULL), "") == 0);
    CHECK(strcmp(nenyax_error_message(NULL, &len), "") == 0 && len == 0);
    CHECK(nenyax_session_done(NULL) == false);
    CHECK(nenyax_runner_threads(NULL) == 0);
    CHECK(nenyax_reply_set(NULL, "x", 1) == false);
    CHECK(nenyax_reply_set(NULL, NULL, 0) == false);
    /* free(NULL) is a no-op for every free function */
    nenyax_env_free(NULL);
    nenyax_policy_free(NULL);
    nenyax_session_free(NULL);
    nenyax_runner_free(NULL);
    nenyax_error_free(NULL);
    nenyax_string_free(NULL);
    nenyax_string_free(&empty);
    CHECK(empty.ptr == NULL && empty.len == 0);
    printf("  ok    every free function accepted NULL\n");
    /* the status codes are stable */
    CHECK(NENYAX_STATUS_OK == 0 && NENYAX_STATUS_INVALID_ARGUMENT == 1 &&
          NENYAX_STATUS_INVALID_URI == 2 && NENYAX_STATUS_UNKNOWN_SCHEME == 3 &&
          NENYAX_STATUS_DRIVER_UNAVAILABLE == 4 && NENYAX_STATUS_UNKNOWN_TARGET == 5 &&
          NENYAX_STATUS_UNKNOWN_PARAMETER == 6 && NENYAX_STATUS_INVALID_PARAMETER == 7 &&
          NENYAX_STATUS_UNSUPPORTED == 8 && NENYAX_STATUS_POLICY_MISMATCH == 9 &&
          NENYAX_STATUS_POLICY == 10 && NENYAX_STATUS_INVALID_ACTION == 11 &&
          NENYAX_STATUS_ENVIRONMENT == 12 && NENYAX_STATUS_NON_FINITE_SCORE == 13 &&
          NENYAX_STATUS_JUDGE == 14 && NENYAX_STATUS_DEFINE == 15 &&
          NENYAX_STATUS_ENDPOINT == 16 && NENYAX_STATUS_PROTOCOL == 17 &&
          NENYAX_STATUS_CONFIG == 18 && NENYAX_STATUS_IO == 19 &&
          NENYAX_STATUS_CALLBACK == 20 && NENYAX_STATUS_PANIC == 21 &&
          NENYAX_STATUS_CUDA_UNAVAILABLE == 22 && NENYAX_STATUS_CUDA == 23 &&
          NENYAX_STATUS_CAPACITY == 24);
}

static void manifest_and_tasks(const nenyax_env_t *env)
{
    nenyax_string_t s = {NULL, 0};
    char buf[256];
    printf("manifest and tasks\n");
    REQUIRE_OK(nenyax_env_manifest(env, &s));
    CHECK(string_ok(&s));
    CHECK(json_string(s.ptr, s.len, "id", buf, sizeof buf) > 0 && strcmp(buf, URI) == 0);
    CHECK(json_string(s.ptr, s.len, "name", buf, sizeof buf) > 0 &&
          strcmp(buf, "arithmetic") == 0);
    CHECK(json_string(s.ptr, s.len, "mode", buf, sizeof buf) > 0 && strcmp(buf, "step") == 0);
    CHECK(json_string(s.ptr, s.len, "protocol", buf, sizeof buf) > 0 &&
          strcmp(buf, "0.1") == 0);
    CHECK(json_number(s.ptr, s.len, "num_tasks") == 10.0);
    nenyax_string_free(&s);
    CHECK(s.ptr == NULL && s.len == 0);

    REQUIRE_OK(nenyax_env_tasks(env, 3, &s));
    CHECK(string_ok(&s) && s.ptr[0] == '[' && s.ptr[s.len - 1] == ']');
    CHECK(count_bytes(s.ptr, s.len, "{\"id\":") == 3);
    CHECK(find_bytes(s.ptr, s.len, "\"expression\":") != NULL);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_tasks(env, 0, &s)); /* 0: all */
    CHECK(count_bytes(s.ptr, s.len, "{\"id\":") == 10);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_tasks(env, 1000, &s));
    CHECK(count_bytes(s.ptr, s.len, "{\"id\":") == 10);
    nenyax_string_free(&s);
}

static void rollouts(const nenyax_env_t *env)
{
    nenyax_policy_t *reference = NULL, *null_policy = NULL;
    nenyax_string_t s = {NULL, 0};
    char buf[256];
    printf("reference and null policies, single rollouts\n");
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    REQUIRE_OK(nenyax_env_null_policy(env, &null_policy));
    CHECK(reference != NULL && null_policy != NULL);

    REQUIRE_OK(nenyax_env_rollout(env, reference, NULL, 0, &s));
    CHECK(string_ok(&s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    CHECK(json_is_null(s.ptr, s.len, "error"));
    CHECK(json_string(s.ptr, s.len, "env_id", buf, sizeof buf) > 0 && strcmp(buf, URI) == 0);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_rollout(env, null_policy, NULL, 0, &s));
    CHECK(trajectory_score(s.ptr, s.len) == 0.0);
    nenyax_string_free(&s);

    /* options: seed picks the task; an explicit task; max_steps; "" counts as absent */
    REQUIRE_OK(nenyax_env_rollout(env, reference, S("{\"seed\": 7}"), &s));
    CHECK(json_number(s.ptr, s.len, "seed") == 7.0);
    CHECK(find_bytes(s.ptr, s.len, "\"task\":{\"id\":\"7\"") != NULL);
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_rollout(env, reference, S("{\"task\": {\"id\": \"4\"}, \"seed\": 1, "
                                                    "\"max_steps\": 1}"),
                                  &s));
    CHECK(find_bytes(s.ptr, s.len, "\"task\":{\"id\":\"4\"") != NULL);
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_rollout(env, reference, "", 0, &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);

    nenyax_policy_free(reference);
    nenyax_policy_free(null_policy);
}

struct sink_state {
    size_t calls;
    size_t in_order;
    size_t perfect;
};

static int32_t sink(void *user_data, size_t index, const char *traj, size_t len)
{
    struct sink_state *st = user_data;
    st->in_order += index == st->calls;
    st->calls++;
    st->perfect += trajectory_score(traj, len) == 1.0 && json_is_null(traj, len, "error");
    return 0;
}

static void runners(const nenyax_env_t *env)
{
    nenyax_runner_t *two = NULL, *dflt = NULL;
    nenyax_policy_t *reference = NULL;
    nenyax_string_t s = {NULL, 0};
    struct sink_state st = {0, 0, 0};
    printf("runners\n");
    REQUIRE_OK(nenyax_runner_new(2, &two));
    CHECK(nenyax_runner_threads(two) == 2);
    REQUIRE_OK(nenyax_runner_new(0, &dflt));
    CHECK(nenyax_runner_threads(dflt) >= 1);
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));

    /* without a sink: a JSON array in `out` */
    REQUIRE_OK(nenyax_runner_run(two, env, reference, S("{\"n\": 25, \"seed\": 3}"), NULL, NULL,
                                 &s));
    CHECK(string_ok(&s) && s.ptr[0] == '[' && s.ptr[s.len - 1] == ']');
    CHECK(count_bytes(s.ptr, s.len, "\"env_id\":") == 25);
    CHECK(count_bytes(s.ptr, s.len, "\"judgment\":{\"score\":1.0,") == 25);
    CHECK(count_bytes(s.ptr, s.len, "\"error\":null,\"started_at\"") == 25);
    nenyax_string_free(&s);

    /* NULL options: the defaults (n = 10) */
    REQUIRE_OK(nenyax_runner_run(dflt, env, reference, NULL, 0, NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"env_id\":") == 10);
    nenyax_string_free(&s);

    /* n = 0: an empty array */
    REQUIRE_OK(nenyax_runner_run(two, env, reference, S("{\"n\": 0}"), NULL, NULL, &s));
    CHECK(s.ptr != NULL && s.len == 2 && strcmp(s.ptr, "[]") == 0);
    nenyax_string_free(&s);

    /* explicit tasks, cycled */
    REQUIRE_OK(nenyax_runner_run(two, env, reference,
                                 S("{\"n\": 6, \"tasks\": [{\"id\": \"2\"}, {\"id\": \"5\"}]}"),
                                 NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"task\":{\"id\":\"2\"") == 3);
    CHECK(count_bytes(s.ptr, s.len, "\"task\":{\"id\":\"5\"") == 3);
    CHECK(count_bytes(s.ptr, s.len, "\"judgment\":{\"score\":1.0,") == 6);
    nenyax_string_free(&s);

    /* "format": "jsonl": one trajectory per line in job order, every line ended by '\n' */
    REQUIRE_OK(nenyax_runner_run(two, env, reference,
                                 S("{\"n\": 25, \"seed\": 3, \"format\": \"jsonl\"}"), NULL,
                                 NULL, &s));
    CHECK(string_ok(&s) && s.ptr[0] == '{' && s.ptr[s.len - 1] == '\n');
    CHECK(count_bytes(s.ptr, s.len, "\n") == 25 && count_bytes(s.ptr, s.len, "}\n{") == 24);
    CHECK(count_bytes(s.ptr, s.len, "\"judgment\":{\"score\":1.0,") == 25);
    CHECK(json_number(s.ptr, s.len, "seed") == 3.0);
    {
        const char *last = s.ptr + s.len - 1;
        while (last > s.ptr && last[-1] != '\n')
            last--;
        CHECK(json_number(last, (size_t)(s.ptr + s.len - last), "seed") == 27.0);
    }
    nenyax_string_free(&s);

    /* jsonl with n = 0 is empty; "array" is the default's format; any other is refused */
    REQUIRE_OK(nenyax_runner_run(two, env, reference, S("{\"n\": 0, \"format\": \"jsonl\"}"),
                                 NULL, NULL, &s));
    CHECK(s.len == 0);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_runner_run(two, env, reference, S("{\"n\": 2, \"format\": \"array\"}"),
                                 NULL, NULL, &s));
    CHECK(string_ok(&s) && s.ptr[0] == '[' && count_bytes(s.ptr, s.len, "\"env_id\":") == 2);
    nenyax_string_free(&s);
    CHECK_STATUS_MSG(nenyax_runner_run(two, env, reference,
                                       S("{\"n\": 2, \"format\": \"csv\"}"), NULL, NULL, &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "jsonl");

    /* with a sink: every trajectory, in job order; `out` may be NULL */
    REQUIRE_OK(nenyax_runner_run(two, env, reference, S("{\"n\": 100}"), sink, &st, NULL));
    CHECK(st.calls == 100 && st.in_order == 100 && st.perfect == 100);

    /* with a sink and an `out`: `out` is left alone */
    memset(&st, 0, sizeof st);
    REQUIRE_OK(nenyax_runner_run(two, env, reference, S("{\"n\": 5}"), sink, &st, &s));
    CHECK(st.calls == 5 && st.perfect == 5);
    CHECK(s.ptr == NULL && s.len == 0);

    nenyax_policy_free(reference);
    nenyax_runner_free(two);
    nenyax_runner_free(dflt);
}

static void judged(void)
{
    nenyax_env_t *env = NULL, *by_tag = NULL, *whole = NULL;
    nenyax_policy_t *reference = NULL;
    nenyax_string_t s = {NULL, 0};
    char buf[256];
    printf("with_judge from a JSON spec\n");
    REQUIRE_OK(nenyax_env_load(S(URI), &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"exact\", \"extract\": \"answer_tag\"}"),
                                     &by_tag));
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"exact\", \"extract\": \"whole\"}"),
                                     &whole));
    /* the judged environments outlive the one they wrap */
    nenyax_env_free(env);

    REQUIRE_OK(nenyax_env_manifest(by_tag, &s));
    CHECK(json_string(s.ptr, s.len, "id", buf, sizeof buf) > 0 &&
          strcmp(buf, "builtin:arithmetic?size=10+judge") == 0);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_rollout(by_tag, reference, S("{\"seed\": 2}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"judge\":\"exact_match:answer_tag\"") != NULL);
    nenyax_string_free(&s);

    /* the whole reply "<answer>N</answer>" is not the bare answer: re-judged to 0 */
    REQUIRE_OK(nenyax_env_rollout(whole, reference, S("{\"seed\": 2}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 0.0);
    CHECK(find_bytes(s.ptr, s.len, "\"components\":{\"env\":1.0}") != NULL);
    nenyax_string_free(&s);

    nenyax_env_free(by_tag);
    nenyax_env_free(whole);
    nenyax_policy_free(reference);
}

static void any_order(void)
{
    nenyax_env_t *env = NULL, *again = NULL;
    nenyax_policy_t *reference = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t s = {NULL, 0};
    printf("handles freed in any order\n");
    REQUIRE_OK(nenyax_env_load(S(URI), &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    nenyax_env_free(env); /* the policy made from it stays valid */
    REQUIRE_OK(nenyax_env_load(S(URI), &again));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    REQUIRE_OK(nenyax_runner_run(runner, again, reference, S("{\"n\": 8}"), NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"judgment\":{\"score\":1.0,") == 8);
    nenyax_string_free(&s);
    nenyax_runner_free(runner);
    nenyax_policy_free(reference);
    nenyax_env_free(again);
}

int main(void)
{
    nenyax_env_t *env = NULL;
    versions();
    null_conventions();
    REQUIRE_OK(nenyax_env_load(S(URI), &env));
    manifest_and_tasks(env);
    rollouts(env);
    runners(env);
    nenyax_env_free(env);
    judged();
    any_order();
    return finish("test_basics");
}
