/* Plugins through the C ABI: a host registers its own judge (the same descriptor and vtable a
 * plugin library exports) and a define spec picks it with {"type": "plugin", "use": ...};
 * nenyax_env_check audits it, nenyax_env_with_judge re-judges with it, a failing judge's message
 * reaches the trajectory, and registration and loading errors are typed (NENYAX_STATUS_CONFIG
 * naming both ABI versions, clashing names, missing libraries). */

#include "common.h"

struct judge_state {
    int calls;
};

/* The text inside the last <answer></answer> of the trajectory, or "" when there is none. */
static void last_answer(const char *t, size_t len, char *buf, size_t cap)
{
    const char *open = NULL, *p = t, *end = t + len, *close;
    size_t n;
    buf[0] = '\0';
    while ((p = find_bytes(p, (size_t)(end - p), "<answer>")) != NULL) {
        open = p + 8;
        p = open;
    }
    if (open == NULL || (close = find_bytes(open, (size_t)(end - open), "</answer>")) == NULL) {
        return;
    }
    n = (size_t)(close - open);
    if (n + 1 > cap) {
        return;
    }
    memcpy(buf, open, n);
    buf[n] = '\0';
}

static void say(const nenyax_plugin_out_t *out, const char *s)
{
    out->write(out->ctx, s, strlen(s));
}

/* Exact match of the answer tag with the task's metadata "answer" (serialized: flags 0). */
static int32_t c_judge(void *user_data, const char *t, size_t len, const nenyax_plugin_out_t *out)
{
    struct judge_state *st = user_data;
    char got[256], want[256];
    int hit;
    st->calls++;
    if (t[len] != '\0') {
        say(out, "the trajectory is not NUL-terminated");
        return 2;
    }
    last_answer(t, len, got, sizeof got);
    if (json_string(t, len, "answer", want, sizeof want) <= 0) {
        say(out, "c_judge needs the task's metadata `answer`");
        return 1;
    }
    hit = got[0] != '\0' && strcmp(got, want) == 0;
    say(out, hit ? "{\"score\": 1, \"passed\": true}" : "{\"score\": 0, \"passed\": false}");
    return 0;
}

static int32_t c_failing(void *user_data, const char *t, size_t len,
                         const nenyax_plugin_out_t *out)
{
    (void)user_data, (void)t, (void)len;
    say(out, "the grader is down");
    return 5;
}

static const nenyax_judge_vtable_t JUDGE = {NENYAX_JUDGE_VTABLE_VERSION, c_judge, NULL};
static const nenyax_judge_vtable_t FAILING = {NENYAX_JUDGE_VTABLE_VERSION, c_failing, NULL};

static const char SPEC[] =
    "{\"name\": \"caps\", \"judge\": {\"type\": \"plugin\", \"use\": \"c_judge\", "
    "\"extract\": \"answer_tag\"}, \"tasks\": ["
    "{\"prompt\": \"Capital of Peru? Reply in answer tags.\", \"answer\": \"Lima\"},"
    "{\"prompt\": \"Capital of Chad? Reply in answer tags.\", \"answer\": \"NDjamena\"},"
    "{\"prompt\": \"Capital of Fiji? Reply in answer tags.\", \"answer\": \"Suva\"}]}";

int main(void)
{
    struct judge_state st = {0};
    nenyax_plugin_t plugin = {NENYAX_PLUGIN_ABI_VERSION, NENYAX_PLUGIN_KIND_JUDGE,
                              NENYAX_JUDGE_VTABLE_VERSION, 0, "c_judge", "0.0.1", &JUDGE, &st};
    nenyax_plugin_t failing = {NENYAX_PLUGIN_ABI_VERSION, NENYAX_PLUGIN_KIND_JUDGE,
                               NENYAX_JUDGE_VTABLE_VERSION, 0, "c_failing", "0.0.1", &FAILING,
                               NULL};
    nenyax_plugin_t wrong = plugin;
    nenyax_env_t *env = NULL, *judged = NULL, *failing_env = NULL;
    nenyax_policy_t *oracle = NULL;
    nenyax_string_t s = {0, 0};
    char buf[256];

    printf("nenyax_plugin_register\n");
    CHECK_STATUS(nenyax_plugin_register(NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    wrong.abi_version = 2;
    CHECK_STATUS_MSG(nenyax_plugin_register(&wrong), NENYAX_STATUS_CONFIG,
                     "built for plugin ABI version 2; this Nenyax speaks version 1");
    wrong = plugin;
    wrong.kind_version = 7;
    CHECK_STATUS_MSG(nenyax_plugin_register(&wrong), NENYAX_STATUS_CONFIG,
                     "judge vtable version 7; this Nenyax speaks version 1");
    wrong = plugin;
    wrong.kind = 99;
    CHECK_STATUS_MSG(nenyax_plugin_register(&wrong), NENYAX_STATUS_CONFIG, "unknown kind code 99");
    wrong = plugin;
    wrong.name = NULL;
    CHECK_STATUS_MSG(nenyax_plugin_register(&wrong), NENYAX_STATUS_CONFIG, "`name` is NULL");
    REQUIRE_OK(nenyax_plugin_register(&plugin));
    REQUIRE_OK(nenyax_plugin_register(&failing));
    CHECK_STATUS_MSG(nenyax_plugin_register(&plugin), NENYAX_STATUS_CONFIG, "clashes");

    REQUIRE_OK(nenyax_plugins_json(&s));
    CHECK(find_bytes(s.ptr, s.len, "\"name\":\"c_judge\"") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"kind\":\"judge\"") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "registered through the C ABI") != NULL);
    nenyax_string_free(&s);
    CHECK_STATUS(nenyax_plugins_json(NULL), NENYAX_STATUS_INVALID_ARGUMENT);

    printf("a define spec judged by the registered plugin reaches audited\n");
    REQUIRE_OK(nenyax_env_define(S(SPEC), &env));
    REQUIRE_OK(nenyax_env_check(env, S("{\"samples\": 3, \"threads\": 2}"), &s));
    CHECK(json_string(s.ptr, s.len, "tier", buf, sizeof buf) > 0 && strcmp(buf, "audited") == 0);
    if (strcmp(buf, "audited") != 0) {
        printf("%.*s\n", (int)s.len, s.ptr);
    }
    nenyax_string_free(&s);
    CHECK(st.calls > 0);

    printf("nenyax_env_with_judge with a plugin judge\n");
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"plugin\", \"use\": \"c_judge\"}"),
                                     &judged));
    REQUIRE_OK(nenyax_env_reference_policy(judged, &oracle));
    REQUIRE_OK(nenyax_env_rollout(judged, oracle, S("{\"seed\": 1}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"judge\":\"plugin:c_judge\"") != NULL);
    nenyax_string_free(&s);
    CHECK_STATUS_MSG(nenyax_env_with_judge(env, S("{\"type\": \"plugin\", \"use\": \"nope\"}"),
                                           &failing_env),
                     NENYAX_STATUS_CONFIG, "no judge plugin named `nope`");
    CHECK_STATUS_MSG(nenyax_env_with_judge(env, S("{\"type\": \"plugin\"}"), &failing_env),
                     NENYAX_STATUS_CONFIG, "needs `use`");

    printf("a failing plugin judge fails the episode with its message\n");
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"plugin\", \"use\": \"c_failing\"}"),
                                     &failing_env));
    REQUIRE_OK(nenyax_env_rollout(failing_env, oracle, S("{\"seed\": 1}"), &s));
    CHECK(find_bytes(s.ptr, s.len, "judge plugin `c_failing`") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "failed (returned 5): the grader is down") != NULL);
    nenyax_string_free(&s);

    printf("nenyax_plugin_check\n");
    REQUIRE_OK(nenyax_plugin_check(S("judge"), S("c_judge"), &s));
    CHECK(find_bytes(s.ptr, s.len, "\"name\":\"discriminates\",\"passed\":true") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_plugin_check(S("judge"), S("exact"), NULL)); /* built-ins alike */
    CHECK_STATUS_MSG(nenyax_plugin_check(S("judge"), S("c_failing"), NULL), NENYAX_STATUS_CONFIG,
                     "does not conform");
    CHECK_STATUS_MSG(nenyax_plugin_check(S("judges"), S("c_judge"), NULL), NENYAX_STATUS_CONFIG,
                     "unknown plugin kind");
    CHECK_STATUS(nenyax_plugin_check(NULL, 5, S("x"), NULL), NENYAX_STATUS_INVALID_ARGUMENT);

    printf("nenyax_plugin_load\n");
    CHECK_STATUS(nenyax_plugin_load(NULL, 3), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_plugin_load(S("/nonexistent/libnope.so")), NENYAX_STATUS_CONFIG,
                     "cannot be read");

    nenyax_policy_free(oracle);
    nenyax_env_free(failing_env);
    nenyax_env_free(judged);
    nenyax_env_free(env);
    return finish("test_plugin_register");
}
