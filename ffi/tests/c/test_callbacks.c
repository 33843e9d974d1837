/* Host callbacks: policy vtables (version, act/chat exclusivity), callbacks that fail, that
 * return 0 without a reply, that reply invalid JSON or invalid UTF-8; nenyax_reply_set inside a
 * callback; chat policies; trajectory sinks that stop a batch; and free_user_data running
 * exactly once, also when the constructor fails. */

#include "common.h"

/* ------------------------------------------------------------------------------------------
 * user data with a free counter */

struct owned {
    int magic;
    int freed;
};

static struct owned *owned_new(void)
{
    struct owned *o = calloc(1, sizeof *o);
    REQUIRE(o != NULL);
    o->magic = 0x5eed;
    return o;
}

/* Frees nothing: counts, so the test can read the count afterwards. */
static void owned_release(void *user_data)
{
    struct owned *o = user_data;
    o->freed++;
}

/* ------------------------------------------------------------------------------------------
 * arithmetic from an observation or a conversation */

/* "A op B" after `"key":"` (observation data) or after "What is " (prompt text). */
static int solve_text(const char *text, size_t len, long long *out)
{
    const char *p = find_bytes(text, len, "What is ");
    long long a, b;
    char op;
    char buf[64];
    size_t n;
    if (p == NULL) {
        return 0;
    }
    p += 8;
    n = (size_t)(text + len - p) < sizeof buf - 1 ? (size_t)(text + len - p) : sizeof buf - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (sscanf(buf, "%lld %c %lld", &a, &op, &b) != 3) {
        return 0;
    }
    *out = op == '+' ? a + b : op == '-' ? a - b : a * b;
    return 1;
}

static int task_id(const char *obs, size_t len)
{
    char buf[32];
    const char *info = json_value(obs, len, "info");
    if (info == NULL ||
        json_string(info, (size_t)(obs + len - info), "task_id", buf, sizeof buf) < 0) {
        return -1;
    }
    return atoi(buf);
}

/* Solves odd tasks, fails even ones with a message. */
static int32_t act_fail_even(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    struct owned *o = user_data;
    long long answer;
    char out[96];
    int id = task_id(obs, len), n;
    if (o->magic != 0x5eed) {
        return 99;
    }
    if (id % 2 == 0) {
        n = snprintf(out, sizeof out, "no luck for task %d", id);
        nenyax_reply_set(reply, out, (size_t)n);
        return 7;
    }
    if (!solve_text(obs, len, &answer)) {
        return 98;
    }
    n = snprintf(out, sizeof out, "\"<answer>%lld</answer>\"", answer);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static int32_t act_no_reply(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    (void)user_data;
    (void)obs;
    (void)len;
    (void)reply;
    return 0;
}

static int32_t act_fail_silently(void *user_data, const char *obs, size_t len,
                                 nenyax_reply_t *reply)
{
    (void)user_data;
    (void)obs;
    (void)len;
    (void)reply;
    return -3;
}

static int32_t act_bad_json(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    (void)user_data;
    (void)obs;
    (void)len;
    nenyax_reply_set(reply, S("<answer>1</answer>")); /* not JSON: a string needs quotes */
    return 0;
}

static int32_t act_bad_utf8(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    (void)user_data;
    (void)obs;
    (void)len;
    nenyax_reply_set(reply, S("\"\xc3\x28\""));
    return 0;
}

/* nenyax_reply_set's own contract, exercised on a live reply slot; then the right answer. */
static int reply_set_results[4];
static int32_t act_reply_rules(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    long long answer;
    char out[64];
    int n;
    (void)user_data;
    reply_set_results[0] = nenyax_reply_set(reply, NULL, 5);  /* false: NULL data, len > 0 */
    reply_set_results[1] = nenyax_reply_set(reply, NULL, 0);  /* true: empty */
    reply_set_results[2] = nenyax_reply_set(reply, S("\"junk\"")); /* replaced below */
    if (!solve_text(obs, len, &answer)) {
        return 1;
    }
    n = snprintf(out, sizeof out, "\"<answer>%lld</answer>\"", answer);
    reply_set_results[3] = nenyax_reply_set(reply, out, (size_t)n);
    return 0;
}

/* Chat: the conversation is a JSON array of messages; the reply is plain text. */
static int32_t chat_solve(void *user_data, const char *messages, size_t len,
                          nenyax_reply_t *reply)
{
    long long answer;
    char out[64];
    int n;
    int *calls = user_data;
    (*calls)++;
    if (len == 0 || messages[0] != '[' || find_bytes(messages, len, "\"role\":\"user\"") == NULL) {
        nenyax_reply_set(reply, S("not a conversation"));
        return 1;
    }
    if (!solve_text(messages, len, &answer)) {
        nenyax_reply_set(reply, S("no question found"));
        return 2;
    }
    n = snprintf(out, sizeof out, "Easy. <answer>%lld</answer>", answer);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static int32_t chat_refuse(void *user_data, const char *messages, size_t len,
                           nenyax_reply_t *reply)
{
    (void)user_data;
    (void)messages;
    (void)len;
    nenyax_reply_set(reply, S("rate limited"));
    return 429;
}

/* ------------------------------------------------------------------------------------------ */

struct collected {
    size_t calls;
    size_t ok;
    size_t failed_as_expected;
};

static int32_t sink_even_odd(void *user_data, size_t index, const char *traj, size_t len)
{
    struct collected *c = user_data;
    char err[512];
    char want[64];
    c->calls++;
    if (index % 2 == 1) {
        c->ok += trajectory_score(traj, len) == 1.0 && json_is_null(traj, len, "error");
        return 0;
    }
    snprintf(want, sizeof want, "no luck for task %zu", index % 8); /* size=8, cycled */
    if (json_string(traj, len, "error", err, sizeof err) > 0 &&
        strncmp(err, "PolicyError: ", 13) == 0 && strstr(err, "status 7") != NULL &&
        strstr(err, want) != NULL && json_is_null(traj, len, "judgment") &&
        find_bytes(traj, len, "\"error_kind\":\"PolicyError\"") != NULL) {
        c->failed_as_expected++;
    } else {
        printf("        unexpected trajectory %zu: %.*s\n", index, (int)len, traj);
    }
    return 0;
}

static void vtable_validation(void)
{
    nenyax_policy_t *p = NULL;
    struct owned *o;
    nenyax_policy_vtable_t v0 = {0, act_no_reply, NULL, NULL, NULL};
    nenyax_policy_vtable_t v3 = {NENYAX_POLICY_VTABLE_VERSION + 1, act_no_reply, NULL, NULL, NULL};
    nenyax_policy_vtable_t both = {NENYAX_VTABLE_VERSION, act_no_reply, chat_refuse, NULL, NULL};
    nenyax_policy_vtable_t neither = {NENYAX_VTABLE_VERSION, NULL, NULL, NULL, NULL};
    nenyax_policy_vtable_t good = {NENYAX_VTABLE_VERSION, act_no_reply, NULL, NULL, NULL};
    static int sentinel;
    printf("policy vtables; user_data is the library's from the call on, also on failure\n");

    o = owned_new();
    CHECK_STATUS_MSG(nenyax_policy_new(&v0, o, owned_release, 0, &p),
                     NENYAX_STATUS_INVALID_ARGUMENT, "version 0");
    CHECK(o->freed == 1);
    free(o);

    o = owned_new();
    CHECK_STATUS_MSG(nenyax_policy_new(&v3, o, owned_release, NENYAX_THREAD_SAFE, &p),
                     NENYAX_STATUS_INVALID_ARGUMENT, "version 3");
    CHECK(o->freed == 1);
    free(o);

    o = owned_new();
    CHECK_STATUS_MSG(nenyax_policy_new(&both, o, owned_release, 0, &p),
                     NENYAX_STATUS_INVALID_ARGUMENT, "exactly one");
    CHECK(o->freed == 1);
    free(o);

    o = owned_new();
    CHECK_STATUS_MSG(nenyax_policy_new(&neither, o, owned_release, 0, &p),
                     NENYAX_STATUS_INVALID_ARGUMENT, "exactly one");
    CHECK(o->freed == 1);
    free(o);

    o = owned_new();
    CHECK_STATUS(nenyax_policy_new(NULL, o, owned_release, 0, &p), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(o->freed == 1);
    free(o);

    o = owned_new();
    CHECK_STATUS(nenyax_policy_new(&good, o, owned_release, 0, NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(o->freed == 1);
    free(o);

    CHECK(p == NULL);

    /* success: freed once, when the policy is freed */
    o = owned_new();
    REQUIRE_OK(nenyax_policy_new(&good, o, owned_release, 0, &p));
    CHECK(o->freed == 0);
    nenyax_policy_free(p);
    CHECK(o->freed == 1);
    free(o);

    /* no free function: nothing is called */
    REQUIRE_OK(nenyax_policy_new(&good, &sentinel, NULL, 0, &p));
    nenyax_policy_free(p);
    CHECK_STATUS(nenyax_policy_new(&v0, NULL, NULL, 0, &p), NENYAX_STATUS_INVALID_ARGUMENT);
}

static void failing_callbacks(const nenyax_env_t *env, const nenyax_runner_t *runner)
{
    nenyax_policy_t *p = NULL;
    nenyax_string_t s = {NULL, 0};
    struct collected c = {0, 0, 0};
    struct owned *o = owned_new();
    char err[512];
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act_fail_even, NULL, NULL, NULL};
    printf("a callback that fails fails its episode only\n");
    REQUIRE_OK(nenyax_policy_new(&vt, o, owned_release, 0, &p));

    /* a single rollout: the call succeeds, the trajectory carries the error */
    REQUIRE_OK(nenyax_env_rollout(env, p, S("{\"task\": {\"id\": \"2\"}}"), &s));
    CHECK(json_string(s.ptr, s.len, "error", err, sizeof err) > 0 &&
          strcmp(err, "PolicyError: action callback failed with status 7: no luck for task 2") ==
              0);
    printf("        error: %s\n", err);
    CHECK(json_is_null(s.ptr, s.len, "judgment"));
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_rollout(env, p, S("{\"task\": {\"id\": \"3\"}}"), &s));
    CHECK(json_is_null(s.ptr, s.len, "error"));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);

    /* a batch: the even episodes fail, the odd ones are unaffected */
    REQUIRE_OK(nenyax_runner_run(runner, env, p, S("{\"n\": 40}"), sink_even_odd, &c, NULL));
    CHECK(c.calls == 40);
    CHECK(c.ok == 20);
    CHECK(c.failed_as_expected == 20);

    nenyax_policy_free(p);
    CHECK(o->freed == 1);
    free(o);
}

/* Roll out once with `act` and return (in err) the trajectory's error. */
static void rollout_error(const nenyax_env_t *env, nenyax_act_fn act, char *err, size_t cap)
{
    nenyax_policy_t *p = NULL;
    nenyax_string_t s = {NULL, 0};
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, NULL, NULL, NULL, NULL};
    vt.act = act;
    err[0] = '\0';
    REQUIRE_OK(nenyax_policy_new(&vt, NULL, NULL, 0, &p));
    REQUIRE_OK(nenyax_env_rollout(env, p, NULL, 0, &s));
    if (json_string(s.ptr, s.len, "error", err, cap) < 0) {
        snprintf(err, cap, "(no error)");
    }
    CHECK(json_is_null(s.ptr, s.len, "judgment"));
    printf("        error: %s\n", err);
    nenyax_string_free(&s);
    nenyax_policy_free(p);
}

static void bad_replies(const nenyax_env_t *env)
{
    char err[512];
    printf("callbacks that return 0 without a reply, or reply badly\n");
    rollout_error(env, act_no_reply, err, sizeof err);
    CHECK(strncmp(err, "PolicyError: ", 13) == 0 && strstr(err, "set no reply") != NULL &&
          strstr(err, "nenyax_reply_set") != NULL);
    rollout_error(env, act_fail_silently, err, sizeof err);
    CHECK(strncmp(err, "PolicyError: ", 13) == 0 && strstr(err, "status -3") != NULL &&
          strstr(err, "no message") != NULL);
    rollout_error(env, act_bad_json, err, sizeof err);
    CHECK(strncmp(err, "PolicyError: ", 13) == 0 && strstr(err, "invalid JSON") != NULL &&
          strstr(err, "<answer>1</answer>") != NULL);
    rollout_error(env, act_bad_utf8, err, sizeof err);
    CHECK(strncmp(err, "PolicyError: ", 13) == 0 && strstr(err, "invalid UTF-8") != NULL);
}

static void reply_rules(const nenyax_env_t *env)
{
    nenyax_policy_t *p = NULL;
    nenyax_string_t s = {NULL, 0};
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act_reply_rules, NULL, NULL, NULL};
    printf("nenyax_reply_set inside a callback\n");
    REQUIRE_OK(nenyax_policy_new(&vt, NULL, NULL, 0, &p));
    REQUIRE_OK(nenyax_env_rollout(env, p, NULL, 0, &s));
    CHECK(reply_set_results[0] == 0);
    CHECK(reply_set_results[1] == 1);
    CHECK(reply_set_results[2] == 1);
    CHECK(reply_set_results[3] == 1);
    /* the last reply replaced the earlier ones */
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);
    nenyax_policy_free(p);
}

static int32_t sink_count(void *user_data, size_t index, const char *traj, size_t len)
{
    struct collected *c = user_data;
    (void)index;
    c->calls++;
    c->ok += trajectory_score(traj, len) == 1.0;
    return 0;
}

static void chat_policies(const nenyax_env_t *env, const nenyax_runner_t *runner)
{
    nenyax_policy_t *p = NULL;
    nenyax_string_t s = {NULL, 0};
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, NULL, chat_solve, NULL, NULL};
    nenyax_policy_vtable_t refuse = {NENYAX_VTABLE_VERSION, NULL, chat_refuse, NULL, NULL};
    struct collected c = {0, 0, 0};
    int calls = 0;
    char err[512];
    printf("chat policies\n");
    REQUIRE_OK(nenyax_policy_new(&vt, &calls, NULL, 0, &p));
    REQUIRE_OK(nenyax_env_rollout(env, p, S("{\"seed\": 5}"), &s));
    CHECK(calls == 1);
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"role\":\"assistant\",\"content\":\"Easy. <answer>") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_runner_run(runner, env, p, S("{\"n\": 30}"), sink_count, &c, NULL));
    CHECK(c.calls == 30 && c.ok == 30);
    CHECK(calls == 31);
    nenyax_policy_free(p);

    REQUIRE_OK(nenyax_policy_new(&refuse, NULL, NULL, 0, &p));
    REQUIRE_OK(nenyax_env_rollout(env, p, NULL, 0, &s));
    CHECK(json_string(s.ptr, s.len, "error", err, sizeof err) > 0 &&
          strstr(err, "chat callback failed with status 429: rate limited") != NULL);
    printf("        error: %s\n", err);
    nenyax_string_free(&s);
    nenyax_policy_free(p);
}

struct stopper {
    size_t calls;
    size_t stop_at;
};

static int32_t sink_stop(void *user_data, size_t index, const char *traj, size_t len)
{
    struct stopper *st = user_data;
    (void)traj;
    (void)len;
    st->calls++;
    return index == st->stop_at ? -1 : 0;
}

static int32_t act_solve_threadsafe(void *user_data, const char *obs, size_t len,
                                    nenyax_reply_t *reply)
{
    long long answer;
    char out[64];
    int n;
    (void)user_data;
    if (!solve_text(obs, len, &answer)) {
        return 1;
    }
    n = snprintf(out, sizeof out, "\"<answer>%lld</answer>\"", answer);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static void sinks_that_stop(const nenyax_env_t *env, const nenyax_runner_t *runner)
{
    nenyax_policy_t *reference = NULL, *p = NULL;
    nenyax_string_t s = {NULL, 0};
    struct stopper st = {0, 10};
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act_solve_threadsafe, NULL, NULL, NULL};
    printf("a trajectory sink that returns non-zero stops the batch\n");
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    CHECK_STATUS_MSG(nenyax_runner_run(runner, env, reference, S("{\"n\": 5000}"), sink_stop, &st,
                                       &s),
                     NENYAX_STATUS_CALLBACK, "job 10");
    CHECK(st.calls == 11);
    CHECK(s.ptr == NULL);

    /* a NENYAX_THREAD_SAFE callback policy: same */
    REQUIRE_OK(nenyax_policy_new(&vt, NULL, NULL, NENYAX_THREAD_SAFE, &p));
    st.calls = 0;
    st.stop_at = 0;
    CHECK_STATUS_MSG(nenyax_runner_run(runner, env, p, S("{\"n\": 3000}"), sink_stop, &st, NULL),
                     NENYAX_STATUS_CALLBACK, "returned -1 at job 0");
    CHECK(st.calls == 1);
    /* the runner and policy stay usable */
    st.calls = 0;
    st.stop_at = (size_t)-1;
    CHECK_OK(nenyax_runner_run(runner, env, p, S("{\"n\": 50}"), sink_stop, &st, NULL));
    CHECK(st.calls == 50);
    nenyax_policy_free(p);
    nenyax_policy_free(reference);
}

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_runner_t *runner = NULL;
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=8"), &env));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    vtable_validation();
    failing_callbacks(env, runner);
    bad_replies(env);
    reply_rules(env);
    chat_policies(env, runner);
    sinks_that_stop(env, runner);
    nenyax_runner_free(runner);
    nenyax_env_free(env);
    return finish("test_callbacks");
}
