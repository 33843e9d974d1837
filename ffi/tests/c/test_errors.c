/* Error paths: every fallible function with NULL handles, NULL out-parameters, invalid UTF-8,
 * malformed JSON and unknown JSON fields; URI errors with their distinct statuses; and the
 * convention that out-parameters are written only on success. */

#include "common.h"

/* Invalid UTF-8 (a lone continuation byte and an overlong encoding). */
static const char BAD_UTF8[] = "builtin:\x80\xc0\xaf";
static const char BAD_UTF8_JSON[] = "{\"seed\": \"\xff\"}";

/* Sentinels: out-parameters must be left alone when a call fails. */
#define SENTINEL_PTR ((void *)&sentinel_target)
static int sentinel_target;

static int32_t act_noop(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    (void)user_data;
    (void)obs;
    (void)len;
    return nenyax_reply_set(reply, S("\"<answer>0</answer>\"")) ? 0 : 1;
}

static int32_t sink_noop(void *user_data, size_t index, const char *traj, size_t len)
{
    (void)user_data;
    (void)index;
    (void)traj;
    (void)len;
    return 0;
}

static void uris(void)
{
    nenyax_env_t *env = SENTINEL_PTR;
    printf("nenyax_env_load: arguments and URI errors\n");
    CHECK_STATUS(nenyax_env_load(NULL, 5, &env), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_load(S("builtin:arithmetic"), NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_load(S(BAD_UTF8), &env), NENYAX_STATUS_INVALID_ARGUMENT, "UTF-8");
    CHECK_STATUS(nenyax_env_load("", 0, &env), NENYAX_STATUS_INVALID_URI);
    CHECK_STATUS(nenyax_env_load(S("no-colon"), &env), NENYAX_STATUS_INVALID_URI);
    CHECK_STATUS(nenyax_env_load(S("bad scheme:x"), &env), NENYAX_STATUS_INVALID_URI);
    CHECK_STATUS(nenyax_env_load(S("builtin:arithmetic?size=%zz"), &env),
                 NENYAX_STATUS_INVALID_URI);
    CHECK_STATUS_MSG(nenyax_env_load(S("bultin:arithmetic"), &env), NENYAX_STATUS_UNKNOWN_SCHEME,
                     "builtin");
    CHECK_STATUS(nenyax_env_load(S("verifiers:gsm8k?python=/nonexistent/python3"), &env),
                 NENYAX_STATUS_DRIVER_UNAVAILABLE);
    CHECK_STATUS_MSG(nenyax_env_load(S("harbor:./tasks/x"), &env), NENYAX_STATUS_ENVIRONMENT,
                     "is not a directory");
    CHECK_STATUS_MSG(nenyax_env_load(S("builtin:nope"), &env), NENYAX_STATUS_UNKNOWN_TARGET,
                     "arithmetic");
    CHECK_STATUS_MSG(nenyax_env_load(S("builtin:arithmetic?sise=3"), &env),
                     NENYAX_STATUS_UNKNOWN_PARAMETER, "size");
    CHECK_STATUS(nenyax_env_load(S("builtin:arithmetic?digits=99"), &env),
                 NENYAX_STATUS_INVALID_PARAMETER);
    CHECK_STATUS(nenyax_env_load(S("builtin:arithmetic?size=x"), &env),
                 NENYAX_STATUS_INVALID_PARAMETER);
    CHECK_STATUS(nenyax_env_load(S("define:/nonexistent/nenyax-tasks.toml"), &env),
                 NENYAX_STATUS_DEFINE);
    /* the URI is (ptr, len): bytes past len are not read, no NUL needed */
    {
        static const char two[] = "builtin:arithmeticXXXX";
        nenyax_env_t *ok = NULL;
        CHECK_OK(nenyax_env_load(two, sizeof two - 1 - 4, &ok));
        CHECK(ok != NULL);
        nenyax_env_free(ok);
    }
    CHECK(env == SENTINEL_PTR);
}

static void env_functions(const nenyax_env_t *env)
{
    nenyax_string_t s = {SENTINEL_PTR, 42};
    nenyax_policy_t *p = SENTINEL_PTR;
    nenyax_env_t *e = SENTINEL_PTR;
    printf("environment functions: NULL handles and out-parameters\n");
    CHECK_STATUS_MSG(nenyax_env_manifest(NULL, &s), NENYAX_STATUS_INVALID_ARGUMENT, "env");
    CHECK_STATUS_MSG(nenyax_env_manifest(env, NULL), NENYAX_STATUS_INVALID_ARGUMENT,
                     "out-parameter");
    CHECK_STATUS(nenyax_env_tasks(NULL, 0, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_tasks(env, 0, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_reference_policy(NULL, &p), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_reference_policy(env, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_null_policy(NULL, &p), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_null_policy(env, NULL), NENYAX_STATUS_INVALID_ARGUMENT);

    printf("nenyax_env_with_judge\n");
    CHECK_STATUS(nenyax_env_with_judge(NULL, S("{\"type\":\"exact\"}"), &e),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_with_judge(env, NULL, 3, &e), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_with_judge(env, S("{\"type\":\"exact\"}"), NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_with_judge(env, S("{\"type\":\"\xfe\"}"), &e),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    /* malformed JSON is a bad argument; unknown fields and bad values in the spec are CONFIG */
    CHECK_STATUS(nenyax_env_with_judge(env, S("{\"type\": "), &e), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_with_judge(env, S("{\"type\":\"exact\",\"bogus\":1}"), &e),
                     NENYAX_STATUS_CONFIG, "bogus");
    CHECK_STATUS_MSG(nenyax_env_with_judge(env, S("{\"type\":\"nope\"}"), &e),
                     NENYAX_STATUS_CONFIG, "nope");
    CHECK_STATUS(nenyax_env_with_judge(env, S("{\"type\":\"exact\",\"extract\":\"sideways\"}"),
                                       &e),
                 NENYAX_STATUS_CONFIG);

    CHECK(s.ptr == SENTINEL_PTR && s.len == 42);
    CHECK(p == SENTINEL_PTR);
    CHECK(e == SENTINEL_PTR);
}

static void rollout_and_check(const nenyax_env_t *env, const nenyax_policy_t *policy)
{
    nenyax_string_t s = {SENTINEL_PTR, 42};
    printf("nenyax_env_rollout\n");
    CHECK_STATUS(nenyax_env_rollout(NULL, policy, NULL, 0, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_rollout(env, NULL, NULL, 0, &s), NENYAX_STATUS_INVALID_ARGUMENT,
                     "policy");
    CHECK_STATUS(nenyax_env_rollout(env, policy, NULL, 0, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_rollout(env, policy, S("{\"seed\": "), &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "options_json");
    CHECK_STATUS_MSG(nenyax_env_rollout(env, policy, S("{\"sede\": 1}"), &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "sede");
    CHECK_STATUS(nenyax_env_rollout(env, policy, S("{\"seed\": \"one\"}"), &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_rollout(env, policy, S("[1, 2]"), &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_rollout(env, policy, S(BAD_UTF8_JSON), &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "UTF-8");

    printf("nenyax_env_check and nenyax_check_uri\n");
    CHECK_STATUS(nenyax_env_check(NULL, NULL, 0, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_check(env, NULL, 0, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_check(env, S("{\"samples\": }"), &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_check(env, S("{\"sample\": 2}"), &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "sample");
    CHECK_STATUS(nenyax_env_check(env, S("{\"samples\": -1}"), &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_check(env, S(BAD_UTF8_JSON), &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_check_uri(NULL, 3, NULL, 0, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_check_uri(S("builtin:arithmetic"), NULL, 0, NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_check_uri(S(BAD_UTF8), NULL, 0, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_check_uri(S("builtin:arithmetic"), S("{"), &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_check_uri(S("builtin:arithmetic"), S("{\"threads\": 2, \"x\": 1}"),
                                      &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "x");
    CHECK_STATUS(nenyax_check_uri(S("nosuchscheme:x"), NULL, 0, &s),
                 NENYAX_STATUS_UNKNOWN_SCHEME);
    CHECK_STATUS(nenyax_check_uri(S("builtin:nope"), NULL, 0, &s), NENYAX_STATUS_UNKNOWN_TARGET);
    CHECK(s.ptr == SENTINEL_PTR && s.len == 42);
}

static void sessions(const nenyax_env_t *env)
{
    nenyax_session_t *session = SENTINEL_PTR, *live = NULL;
    nenyax_string_t s = {SENTINEL_PTR, 42};
    printf("sessions\n");
    CHECK_STATUS(nenyax_session_open(NULL, NULL, 0, &session), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_session_open(env, NULL, 0, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_session_open(env, S("{\"seed\": 1"), &session),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_session_open(env, S("{\"max_step\": 1}"), &session),
                     NENYAX_STATUS_INVALID_ARGUMENT, "max_step");
    CHECK_STATUS(nenyax_session_open(env, S(BAD_UTF8_JSON), &session),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(session == SENTINEL_PTR);

    CHECK_STATUS(nenyax_session_observation(NULL, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_session_act(NULL, S("\"x\""), &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_session_judgment(NULL, &s), NENYAX_STATUS_INVALID_ARGUMENT);

    REQUIRE_OK(nenyax_session_open(env, NULL, 0, &live));
    CHECK_STATUS(nenyax_session_observation(live, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_session_judgment(live, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_session_act(live, NULL, 3, &s), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_session_act(live, S("<answer>1</answer>"), &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "action_json");
    CHECK_STATUS(nenyax_session_act(live, S("\"\xff\""), &s), NENYAX_STATUS_INVALID_ARGUMENT);
    /* a well-formed action the environment refuses (it wants the reply text) */
    CHECK_STATUS(nenyax_session_act(live, S("42"), &s), NENYAX_STATUS_INVALID_ACTION);
    CHECK(!nenyax_session_done(live));
    /* a NULL out is refused (whether the step was taken is not specified) */
    CHECK_STATUS(nenyax_session_act(live, S("\"<answer>0</answer>\""), NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(s.ptr == SENTINEL_PTR && s.len == 42);
    nenyax_session_free(live);
}

static void policies(void)
{
    nenyax_policy_t *p = SENTINEL_PTR;
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act_noop, NULL, NULL, NULL};
    printf("policies\n");
    CHECK_STATUS_MSG(nenyax_policy_new(NULL, NULL, NULL, 0, &p), NENYAX_STATUS_INVALID_ARGUMENT,
                     "vtable");
    CHECK_STATUS(nenyax_policy_new(&vt, NULL, NULL, 0, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_policy_endpoint(NULL, 4, &p), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_policy_endpoint(S("{\"base_url\": \"http://127.0.0.1:9/v1\", "
                                          "\"model\": \"m\"}"),
                                        NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_policy_endpoint(S("{\"base_url\": "), &p),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_policy_endpoint(S("{\"base_url\": \"http://x/v1\"}"), &p),
                     NENYAX_STATUS_INVALID_ARGUMENT, "model");
    CHECK_STATUS_MSG(nenyax_policy_endpoint(S("{\"base_url\": \"http://x/v1\", \"model\": \"m\", "
                                              "\"temperature\": 0}"),
                                            &p),
                     NENYAX_STATUS_INVALID_ARGUMENT, "temperature");
    CHECK_STATUS(nenyax_policy_endpoint(S("{\"base_url\": \"http://x/v1\", \"model\": \"\xff\"}"),
                                        &p),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_policy_endpoint(S("{\"base_url\": \"http://x/v1\", \"model\": \"m\", "
                                              "\"timeout_s\": -1}"),
                                            &p),
                     NENYAX_STATUS_CONFIG, "timeout_s");
    CHECK_STATUS_MSG(nenyax_policy_endpoint(S("{\"base_url\": \"http://x/v1\", \"model\": \"m\", "
                                              "\"api_key_env\": \"NENYAX_TEST_UNSET_KEY_VAR\"}"),
                                            &p),
                     NENYAX_STATUS_CONFIG, "NENYAX_TEST_UNSET_KEY_VAR");
    CHECK(p == SENTINEL_PTR);
}

static void runners(const nenyax_env_t *env, const nenyax_policy_t *policy)
{
    nenyax_runner_t *r = NULL, *rs = SENTINEL_PTR;
    nenyax_string_t s = {SENTINEL_PTR, 42};
    printf("runners\n");
    CHECK_STATUS(nenyax_runner_new(2, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(rs == SENTINEL_PTR);
    REQUIRE_OK(nenyax_runner_new(1, &r));
    CHECK_STATUS_MSG(nenyax_runner_run(NULL, env, policy, NULL, 0, NULL, NULL, &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "runner");
    CHECK_STATUS_MSG(nenyax_runner_run(r, NULL, policy, NULL, 0, NULL, NULL, &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "env");
    CHECK_STATUS_MSG(nenyax_runner_run(r, env, NULL, NULL, 0, NULL, NULL, &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "policy");
    CHECK_STATUS_MSG(nenyax_runner_run(r, env, policy, NULL, 0, NULL, NULL, NULL),
                     NENYAX_STATUS_INVALID_ARGUMENT, "sink");
    CHECK_STATUS(nenyax_runner_run(r, env, policy, S("{\"n\": 2"), NULL, NULL, &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_runner_run(r, env, policy, S("{\"count\": 2}"), NULL, NULL, &s),
                     NENYAX_STATUS_INVALID_ARGUMENT, "count");
    CHECK_STATUS(nenyax_runner_run(r, env, policy, S("{\"n\": -2}"), sink_noop, NULL, NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_runner_run(r, env, policy, S("{\"tasks\": [{\"id\": 3}]}"), NULL, NULL,
                                   &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_runner_run(r, env, policy, S(BAD_UTF8_JSON), NULL, NULL, &s),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(s.ptr == SENTINEL_PTR && s.len == 42);
    nenyax_runner_free(r);
}

static void messages(void)
{
    nenyax_env_t *env = NULL;
    nenyax_error_t *err;
    size_t len = 0;
    const char *msg;
    printf("error objects\n");
    err = nenyax_env_load(S("builtin:arithmetic?sise=3"), &env);
    REQUIRE(err != NULL);
    CHECK(nenyax_error_code(err) == NENYAX_STATUS_UNKNOWN_PARAMETER);
    msg = nenyax_error_message(err, &len);
    CHECK(msg != NULL && len == strlen(msg) && len > 0);
    /* the message starts with the error's kind and is stable while the error lives */
    CHECK(strncmp(msg, "UnknownParameter: ", 18) == 0);
    CHECK(nenyax_error_message(err, NULL) == msg);
    nenyax_error_free(err);
    CHECK(env == NULL);
}

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_policy_t *policy = NULL;
    uris();
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=5"), &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &policy));
    env_functions(env);
    rollout_and_check(env, policy);
    sessions(env);
    policies();
    runners(env, policy);
    messages();
    nenyax_policy_free(policy);
    nenyax_env_free(env);
    return finish("test_errors");
}
