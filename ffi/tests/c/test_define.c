/* Defining environments: from a JSON spec (inline tasks and a tasks_file), from task rows
 * scored by C callbacks (nenyax_env_define_tasks), and from C state callbacks
 * (nenyax_env_define_stateful); their error paths, NaN scores, sessions on them, and
 * free_user_data running exactly once, after the last handle, also when definition fails. */

#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <unistd.h>

struct owned {
    int magic;
    int freed;
    int score_calls;
    int reference_calls;
};

static struct owned *owned_new(void)
{
    struct owned *o = calloc(1, sizeof *o);
    REQUIRE(o != NULL);
    o->magic = 0xd3f;
    return o;
}

static void owned_release(void *user_data)
{
    struct owned *o = user_data;
    o->freed++;
}

/* The text inside the last <answer></answer> of reply[0..len), into buf. */
static int answer_tag(const char *reply, size_t len, char *buf, size_t cap)
{
    const char *open = NULL, *p = reply, *end = reply + len, *close;
    size_t n;
    while ((p = find_bytes(p, (size_t)(end - p), "<answer>")) != NULL) {
        open = p + 8;
        p = open;
    }
    if (open == NULL || (close = find_bytes(open, (size_t)(end - open), "</answer>")) == NULL) {
        return 0;
    }
    n = (size_t)(close - open);
    if (n + 1 > cap) {
        return 0;
    }
    memcpy(buf, open, n);
    buf[n] = '\0';
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * nenyax_env_define_tasks callbacks: exact match of the answer tag with the row's "answer";
 * a row's "mode" makes the scorer misbehave on purpose. */

static int32_t score(void *user_data, const char *task, size_t task_len, const char *reply,
                     size_t reply_len, double *score_out, nenyax_reply_t *error)
{
    struct owned *o = user_data;
    char expected[128], got[128], mode[32];
    if (o->magic != 0xd3f) {
        return 99;
    }
    o->score_calls++;
    if (json_string(task, task_len, "mode", mode, sizeof mode) > 0) {
        if (strcmp(mode, "nan") == 0) {
            *score_out = NAN;
            return 0;
        }
        if (strcmp(mode, "inf") == 0) {
            *score_out = -INFINITY;
            return 0;
        }
        if (strcmp(mode, "fail") == 0) {
            nenyax_reply_set(error, S("the grader is down"));
            return 3;
        }
        if (strcmp(mode, "silent") == 0) {
            return 0; /* no score written */
        }
    }
    if (json_string(task, task_len, "answer", expected, sizeof expected) < 0) {
        nenyax_reply_set(error, S("row has no answer"));
        return 1;
    }
    *score_out = answer_tag(reply, reply_len, got, sizeof got) && strcmp(got, expected) == 0;
    return 0;
}

static int32_t reference(void *user_data, const char *task, size_t task_len,
                         nenyax_reply_t *reply)
{
    struct owned *o = user_data;
    char expected[128], out[160];
    int n;
    o->reference_calls++;
    if (json_string(task, task_len, "answer", expected, sizeof expected) < 0) {
        return 1;
    }
    n = snprintf(out, sizeof out, "The answer is <answer>%s</answer>.", expected);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static int32_t reference_refuses(void *user_data, const char *task, size_t task_len,
                                 nenyax_reply_t *reply)
{
    (void)user_data;
    (void)task;
    (void)task_len;
    nenyax_reply_set(reply, S("no oracle today"));
    return 1;
}

static const char CAPITALS[] = "[{\"prompt\": \"Capital of Kenya?\", \"answer\": \"Nairobi\"},"
                               " {\"prompt\": \"Capital of Peru?\", \"answer\": \"Lima\"},"
                               " {\"prompt\": \"Capital of Chile?\", \"answer\": \"Santiago\"}]";

/* ------------------------------------------------------------------------------------------ */

static void define_from_spec(void)
{
    static const char spec[] =
        "{\"name\": \"capitals\", \"description\": \"Capital cities\","
        " \"tasks\": [{\"prompt\": \"Capital of Kenya? Use <answer></answer>.\", \"answer\": "
        "\"Nairobi\"}, {\"prompt\": \"Capital of Peru?\", \"answer\": \"Lima\"}],"
        " \"judge\": {\"type\": \"exact\", \"field\": \"answer\", \"extract\": \"answer_tag\"}}";
    static const char lines[] = "{\"prompt\": \"2 + 2?\", \"answer\": \"4\"}\n"
                                "{\"prompt\": \"3 + 3?\", \"answer\": \"6\"}\n"
                                "{\"prompt\": \"4 + 4?\", \"answer\": \"8\"}\n";
    nenyax_env_t *env = NULL, *from_file = NULL, *judged = NULL;
    nenyax_policy_t *ref = NULL, *nul = NULL, *file_ref = NULL;
    nenyax_string_t s = {NULL, 0};
    char buf[256], file_spec[256], path[64];
    FILE *f;
    int n;
    printf("nenyax_env_define from a JSON spec\n");
    REQUIRE_OK(nenyax_env_define(S(spec), &env));
    REQUIRE_OK(nenyax_env_manifest(env, &s));
    CHECK(json_string(s.ptr, s.len, "id", buf, sizeof buf) > 0 &&
          strcmp(buf, "defined:capitals") == 0);
    CHECK(json_string(s.ptr, s.len, "description", buf, sizeof buf) > 0 &&
          strcmp(buf, "Capital cities") == 0);
    CHECK(json_string(s.ptr, s.len, "source_format", buf, sizeof buf) > 0 &&
          strcmp(buf, "nenyax.define") == 0);
    CHECK(json_number(s.ptr, s.len, "num_tasks") == 2.0);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_tasks(env, 0, &s));
    CHECK(count_bytes(s.ptr, s.len, "{\"id\":") == 2);
    CHECK(find_bytes(s.ptr, s.len, "\"metadata\":{\"answer\":\"Lima\"}") != NULL);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_reference_policy(env, &ref));
    REQUIRE_OK(nenyax_env_null_policy(env, &nul));
    REQUIRE_OK(nenyax_env_rollout(env, ref, S("{\"task\": {\"id\": \"1\"}}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"action\":\"<answer>Lima</answer>\"") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_rollout(env, nul, NULL, 0, &s));
    CHECK(trajectory_score(s.ptr, s.len) == 0.0);
    nenyax_string_free(&s);

    /* with_judge on a defined environment: a contains judge on the whole reply */
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"contains\", \"extract\": \"whole\"}"),
                                     &judged));
    REQUIRE_OK(nenyax_env_rollout(judged, ref, S("{\"seed\": 0}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);
    nenyax_env_free(judged);

    /* a tasks_file, read relative to the working directory */
    n = snprintf(path, sizeof path, "nenyax-test-define-%ld.jsonl", (long)getpid());
    REQUIRE(n > 0);
    f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(lines, f);
    fclose(f);
    n = snprintf(file_spec, sizeof file_spec,
                 "{\"name\": \"sums\", \"tasks_file\": \"%s\", \"judge\": {\"type\": "
                 "\"numeric\", \"extract\": \"last_number\"}}",
                 path);
    CHECK_OK(nenyax_env_define(file_spec, (size_t)n, &from_file));
    remove(path);
    REQUIRE(from_file != NULL);
    REQUIRE_OK(nenyax_env_tasks(from_file, 0, &s));
    CHECK(count_bytes(s.ptr, s.len, "{\"id\":") == 3);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_reference_policy(from_file, &file_ref));
    REQUIRE_OK(nenyax_env_rollout(from_file, file_ref, S("{\"seed\": 2}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    nenyax_string_free(&s);

    /* the spec's problems are DEFINE errors naming the field */
    printf("nenyax_env_define errors\n");
    CHECK_STATUS(nenyax_env_define(NULL, 3, &judged), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_define(S(spec), NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_env_define(S("{\"name\": \"\xff\"}"), &judged),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    /* malformed JSON is a bad argument; well-formed JSON of the wrong shape is a DEFINE error */
    CHECK_STATUS(nenyax_env_define(S("{\"name\": "), &judged), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"name\": \"x\", \"taks\": []}"), &judged),
                     NENYAX_STATUS_DEFINE, "taks");
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"name\": \"x\"}"), &judged), NENYAX_STATUS_DEFINE,
                     "no tasks");
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"tasks\": [{\"answer\": \"1\"}]}"), &judged),
                     NENYAX_STATUS_DEFINE, "prompt");
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"tasks\": [{\"prompt\": 3, \"answer\": \"3\"}]}"),
                                       &judged),
                     NENYAX_STATUS_DEFINE, "prompt");
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"tasks_file\": \"/nonexistent/t.jsonl\"}"), &judged),
                     NENYAX_STATUS_DEFINE, "tasks_file");
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"tasks_file\": \"t.jsonl\", \"tasks\": [{\"prompt\": "
                                         "\"p\"}]}"),
                                       &judged),
                     NENYAX_STATUS_DEFINE, "not both");
    CHECK_STATUS_MSG(nenyax_env_define(S("{\"tasks\": [{\"prompt\": \"p\"}], \"judge\": "
                                         "{\"type\": \"telepathy\"}}"),
                                       &judged),
                     NENYAX_STATUS_DEFINE, "telepathy");

    nenyax_policy_free(ref);
    nenyax_policy_free(nul);
    nenyax_policy_free(file_ref);
    nenyax_env_free(env);
    nenyax_env_free(from_file);
}

static void define_tasks(void)
{
    nenyax_env_t *env = NULL;
    nenyax_policy_t *ref = NULL, *nul = NULL;
    nenyax_session_t *session = NULL;
    nenyax_string_t s = {NULL, 0};
    struct owned *o = owned_new();
    nenyax_task_vtable_t vt = {NENYAX_VTABLE_VERSION, score, reference};
    char buf[256];
    printf("nenyax_env_define_tasks with score and reference callbacks\n");
    REQUIRE_OK(nenyax_env_define_tasks(S("capitals"), S(CAPITALS), &vt, o, owned_release, 0,
                                       &env));
    REQUIRE_OK(nenyax_env_manifest(env, &s));
    CHECK(json_string(s.ptr, s.len, "id", buf, sizeof buf) > 0 &&
          strcmp(buf, "defined:capitals") == 0);
    CHECK(json_number(s.ptr, s.len, "num_tasks") == 3.0);
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_env_reference_policy(env, &ref));
    CHECK(o->reference_calls >= 3); /* it is asked for every row before an oracle is claimed */
    REQUIRE_OK(nenyax_env_null_policy(env, &nul));
    REQUIRE_OK(nenyax_env_rollout(env, ref, S("{\"task\": {\"id\": \"2\"}}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "<answer>Santiago</answer>") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_rollout(env, nul, S("{\"task\": {\"id\": \"2\"}}"), &s));
    CHECK(trajectory_score(s.ptr, s.len) == 0.0);
    nenyax_string_free(&s);
    CHECK(o->score_calls == 2);

    /* a session: observation, act, done, judgment, act after done */
    REQUIRE_OK(nenyax_session_open(env, S("{\"task\": {\"id\": \"1\"}}"), &session));
    REQUIRE_OK(nenyax_session_observation(session, &s));
    CHECK(json_string(s.ptr, s.len, "text", buf, sizeof buf) > 0 &&
          strcmp(buf, "Capital of Peru?") == 0);
    nenyax_string_free(&s);
    CHECK(!nenyax_session_done(session));
    REQUIRE_OK(nenyax_session_act(session, S("\"I think <answer>Lima</answer>\""), &s));
    CHECK(json_number(s.ptr, s.len, "reward") == 1.0);
    nenyax_string_free(&s);
    CHECK(nenyax_session_done(session));
    REQUIRE_OK(nenyax_session_judgment(session, &s));
    CHECK(json_number(s.ptr, s.len, "score") == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"judge\":\"capitals.score\"") != NULL);
    nenyax_string_free(&s);
    CHECK_STATUS_MSG(nenyax_session_act(session, S("\"again\""), &s), NENYAX_STATUS_ENVIRONMENT,
                     "over");

    /* the environment's handles keep the callbacks alive; user_data goes with the last one */
    nenyax_env_free(env);
    CHECK(o->freed == 0);
    nenyax_policy_free(nul);
    CHECK(o->freed == 0);
    REQUIRE_OK(nenyax_session_judgment(session, &s)); /* still usable */
    nenyax_string_free(&s);
    nenyax_session_free(session);
    CHECK(o->freed == 0);
    nenyax_policy_free(ref);
    CHECK(o->freed == 1);
    free(o);
}

static void scores_that_fail(void)
{
    static const char rows[] = "[{\"prompt\": \"a\", \"answer\": \"1\", \"mode\": \"nan\"},"
                               " {\"prompt\": \"b\", \"answer\": \"2\", \"mode\": \"fail\"},"
                               " {\"prompt\": \"c\", \"answer\": \"3\", \"mode\": \"silent\"},"
                               " {\"prompt\": \"d\", \"answer\": \"4\", \"mode\": \"inf\"},"
                               " {\"prompt\": \"e\", \"answer\": \"5\"}]";
    nenyax_env_t *env = NULL;
    nenyax_policy_t *ref = NULL;
    nenyax_session_t *session = NULL;
    nenyax_string_t s = {NULL, 0};
    struct owned *o = owned_new();
    nenyax_task_vtable_t vt = {NENYAX_VTABLE_VERSION, score, NULL};
    char err[512];
    int i;
    static const char *const expected[] = {"NonFiniteScore", "EnvironmentError: score callback "
                                                             "failed with status 3: the grader "
                                                             "is down",
                                           "NonFiniteScore", "NonFiniteScore"};
    printf("score callbacks: NaN, infinite, failing and silent scores\n");
    REQUIRE_OK(nenyax_env_define_tasks(S("broken"), S(rows), &vt, o, owned_release, 0, &env));
    /* no reference callback: no oracle */
    CHECK_STATUS(nenyax_env_reference_policy(env, &ref), NENYAX_STATUS_UNSUPPORTED);
    REQUIRE_OK(nenyax_env_null_policy(env, &ref));
    for (i = 0; i < 4; i++) {
        char opts[64];
        int n = snprintf(opts, sizeof opts, "{\"task\": {\"id\": \"%d\"}}", i);
        REQUIRE_OK(nenyax_env_rollout(env, ref, opts, (size_t)n, &s));
        CHECK(json_string(s.ptr, s.len, "error", err, sizeof err) > 0 &&
              strstr(err, expected[i]) != NULL);
        printf("        task %d: %s\n", i, err);
        CHECK(json_is_null(s.ptr, s.len, "judgment"));
        nenyax_string_free(&s);
    }
    REQUIRE_OK(nenyax_env_rollout(env, ref, S("{\"task\": {\"id\": \"4\"}}"), &s));
    CHECK(json_is_null(s.ptr, s.len, "error") && trajectory_score(s.ptr, s.len) == 0.0);
    nenyax_string_free(&s);

    /* in a session the NaN is a typed error */
    REQUIRE_OK(nenyax_session_open(env, S("{\"task\": {\"id\": \"0\"}}"), &session));
    CHECK_STATUS(nenyax_session_act(session, S("\"<answer>1</answer>\""), &s),
                 NENYAX_STATUS_NON_FINITE_SCORE);
    nenyax_session_free(session);
    REQUIRE_OK(nenyax_session_open(env, S("{\"task\": {\"id\": \"1\"}}"), &session));
    CHECK_STATUS_MSG(nenyax_session_act(session, S("\"<answer>2</answer>\""), &s),
                     NENYAX_STATUS_ENVIRONMENT, "the grader is down");
    nenyax_session_free(session);

    nenyax_policy_free(ref);
    nenyax_env_free(env);
    CHECK(o->freed == 1);
    free(o);

    /* a reference callback that fails for a row: no oracle is claimed */
    o = owned_new();
    vt.reference = reference_refuses;
    REQUIRE_OK(nenyax_env_define_tasks(S("no-oracle"), S(CAPITALS), &vt, o, owned_release, 0,
                                       &env));
    CHECK_STATUS_MSG(nenyax_env_reference_policy(env, &ref), NENYAX_STATUS_UNSUPPORTED,
                     "reference");
    nenyax_env_free(env);
    CHECK(o->freed == 1);
    free(o);
}

/* A definition that fails with `status` (message containing `needle`) and frees the fresh
 * user_data `o` exactly once. */
#define DEFINE_FAILS(call, status, needle)                                                    \
    do {                                                                                     \
        o = owned_new();                                                                     \
        CHECK_STATUS_MSG(call, status, needle);                                              \
        CHECK(o->freed == 1);                                                                \
        free(o);                                                                             \
    } while (0)

/* Each failing definition frees user_data exactly once. */
static void define_tasks_errors(void)
{
    nenyax_env_t *env = NULL;
    nenyax_task_vtable_t vt = {NENYAX_VTABLE_VERSION, score, reference};
    nenyax_task_vtable_t v9 = {9, score, reference};
    nenyax_task_vtable_t no_score = {NENYAX_VTABLE_VERSION, NULL, reference};
    struct owned *o;
    printf("nenyax_env_define_tasks errors (user_data freed once each time)\n");
    DEFINE_FAILS(nenyax_env_define_tasks(NULL, 3, S(CAPITALS), &vt, o, owned_release, 0, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "name");
    DEFINE_FAILS(nenyax_env_define_tasks(S("\xff"), S(CAPITALS), &vt, o, owned_release, 0, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "UTF-8");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), NULL, 5, &vt, o, owned_release, 0, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "tasks_json");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S("[{\"prompt\": "), &vt, o, owned_release, 0,
                                         &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "tasks_json");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S("{\"prompt\": \"p\"}"), &vt, o, owned_release,
                                         0, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "tasks_json");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S("[\"just text\"]"), &vt, o, owned_release, 0,
                                         &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "tasks_json");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S("[]"), &vt, o, owned_release, 0, &env),
                 NENYAX_STATUS_DEFINE, "no tasks");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S("[{\"prompt\": \"p\"}, {\"q\": 1}]"), &vt, o,
                                         owned_release, 0, &env),
                 NENYAX_STATUS_DEFINE, "tasks[1].prompt");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S(CAPITALS), NULL, o, owned_release, 0, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "vtable");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S(CAPITALS), &v9, o, owned_release, 0, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "version 9");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S(CAPITALS), &no_score, o, owned_release, 0,
                                         &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "score");
    DEFINE_FAILS(nenyax_env_define_tasks(S("x"), S(CAPITALS), &vt, o, owned_release, 0, NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT, "out-parameter");
    CHECK(env == NULL);
}

/* ------------------------------------------------------------------------------------------
 * nenyax_env_define_stateful: count up to 3. State {"n": N, "seed": S}; the observation is the
 * text "count: N"; the right action is N + 1 (reward 1), anything else rewards 0. Seeds from
 * 100 up misbehave on purpose. */

static int32_t st_reset(void *user_data, int64_t seed, nenyax_reply_t *out)
{
    char buf[96];
    int n;
    (void)user_data;
    if (seed == 100) {
        nenyax_reply_set(out, S("cannot reset seed 100"));
        return 4;
    }
    n = snprintf(buf, sizeof buf, "{\"n\": 0, \"seed\": %lld}", (long long)seed);
    return nenyax_reply_set(out, buf, (size_t)n) ? 0 : 1;
}

static int32_t st_observe(void *user_data, const char *state, size_t len, nenyax_reply_t *out)
{
    char buf[64];
    int n;
    (void)user_data;
    if (json_number(state, len, "seed") == 101.0) {
        nenyax_reply_set(out, S("count: {"));
        return 0;
    }
    n = snprintf(buf, sizeof buf, "\"count: %d\"", (int)json_number(state, len, "n"));
    return nenyax_reply_set(out, buf, (size_t)n) ? 0 : 1;
}

static int32_t st_step(void *user_data, const char *state, size_t len, const char *action,
                       size_t action_len, nenyax_reply_t *state_out, double *reward, bool *done)
{
    char buf[96], act[32];
    int n = (int)json_number(state, len, "n");
    long long seed = (long long)json_number(state, len, "seed");
    int written;
    (void)user_data;
    if (action_len >= sizeof act) {
        return 1;
    }
    memcpy(act, action, action_len);
    act[action_len] = '\0';
    *reward = atoi(act) == n + 1 ? 1.0 : 0.0;
    if (seed == 102) {
        *reward = NAN;
    }
    *done = n + 1 >= 3;
    written = snprintf(buf, sizeof buf, "{\"n\": %d, \"seed\": %lld}", n + 1, seed);
    return nenyax_reply_set(state_out, buf, (size_t)written) ? 0 : 1;
}

/* The counting policy: reads "count: N" from the observation's text, replies N + 1. */
static int32_t count_up(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    char text[64], out[16];
    int n;
    (void)user_data;
    if (json_string(obs, len, "text", text, sizeof text) < 0 || strncmp(text, "count: ", 7) != 0) {
        nenyax_reply_set(reply, S("no count in the observation"));
        return 1;
    }
    n = snprintf(out, sizeof out, "%d", atoi(text + 7) + 1);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static void define_stateful(void)
{
    nenyax_env_t *env = NULL, *short_env = NULL;
    nenyax_policy_t *policy = NULL, *p = NULL;
    nenyax_session_t *session = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t s = {NULL, 0};
    struct owned *o = owned_new();
    nenyax_state_vtable_t vt = {NENYAX_VTABLE_VERSION, st_reset, st_observe, st_step};
    nenyax_state_vtable_t no_step = {NENYAX_VTABLE_VERSION, st_reset, st_observe, NULL};
    nenyax_state_vtable_t v0 = {0, st_reset, st_observe, st_step};
    nenyax_policy_vtable_t pv = {NENYAX_VTABLE_VERSION, count_up, NULL, NULL, NULL};
    char buf[256];
    printf("nenyax_env_define_stateful\n");
    REQUIRE_OK(nenyax_env_define_stateful(S("counter"), &vt, o, owned_release, 0, 10, &env));
    REQUIRE_OK(nenyax_policy_new(&pv, NULL, NULL, 0, &policy));
    REQUIRE_OK(nenyax_env_manifest(env, &s));
    CHECK(json_string(s.ptr, s.len, "id", buf, sizeof buf) > 0 &&
          strcmp(buf, "defined:counter") == 0);
    CHECK(find_bytes(s.ptr, s.len, "\"reward_timing\":\"per_step\"") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_tasks(env, 0, &s));
    CHECK(strcmp(s.ptr, "[]") == 0);
    nenyax_string_free(&s);

    /* no oracle, no null policy */
    CHECK_STATUS(nenyax_env_reference_policy(env, &p), NENYAX_STATUS_UNSUPPORTED);
    CHECK_STATUS(nenyax_env_null_policy(env, &p), NENYAX_STATUS_UNSUPPORTED);

    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\": 7}"), &s));
    CHECK(json_is_null(s.ptr, s.len, "error"));
    CHECK(count_bytes(s.ptr, s.len, "\"reward\":1.0") == 3);
    CHECK(trajectory_score(s.ptr, s.len) == 3.0);
    CHECK(find_bytes(s.ptr, s.len, "\"text\":\"count: 3\"") != NULL);
    nenyax_string_free(&s);

    /* a step limit from the options */
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\": 7, \"max_steps\": 2}"), &s));
    CHECK(count_bytes(s.ptr, s.len, "\"reward\":1.0") == 2);
    CHECK(trajectory_score(s.ptr, s.len) == 2.0);
    nenyax_string_free(&s);

    /* and from the definition */
    REQUIRE_OK(nenyax_env_define_stateful(S("short"), &vt, NULL, NULL, 0, 1, &short_env));
    REQUIRE_OK(nenyax_env_rollout(short_env, policy, NULL, 0, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"reward\":") == 1);
    nenyax_string_free(&s);
    nenyax_env_free(short_env);

    /* a batch */
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    REQUIRE_OK(nenyax_runner_run(runner, env, policy, S("{\"n\": 20, \"seed\": 1}"), NULL, NULL,
                                 &s));
    CHECK(count_bytes(s.ptr, s.len, "\"judgment\":{\"score\":3.0,") == 20);
    nenyax_string_free(&s);
    nenyax_runner_free(runner);

    /* callbacks that fail: in a rollout the trajectory carries it */
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\": 100}"), &s));
    CHECK(json_string(s.ptr, s.len, "error", buf, sizeof buf) > 0 &&
          strstr(buf, "reset callback failed with status 4: cannot reset seed 100") != NULL);
    printf("        error: %s\n", buf);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\": 101}"), &s));
    CHECK(json_string(s.ptr, s.len, "error", buf, sizeof buf) > 0 &&
          strstr(buf, "observe callback replied with invalid JSON") != NULL);
    printf("        error: %s\n", buf);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\": 102}"), &s));
    CHECK(!json_is_null(s.ptr, s.len, "error"));
    CHECK(json_is_null(s.ptr, s.len, "judgment"));
    nenyax_string_free(&s);

    /* sessions */
    printf("sessions on a stateful environment\n");
    CHECK_STATUS_MSG(nenyax_session_open(env, S("{\"seed\": 100}"), &session),
                     NENYAX_STATUS_ENVIRONMENT, "cannot reset seed 100");
    REQUIRE_OK(nenyax_session_open(env, S("{\"seed\": 5}"), &session));
    REQUIRE_OK(nenyax_session_observation(session, &s));
    CHECK(json_string(s.ptr, s.len, "text", buf, sizeof buf) > 0 && strcmp(buf, "count: 0") == 0);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_act(session, S("1"), &s));
    CHECK(json_number(s.ptr, s.len, "reward") == 1.0);
    CHECK(find_bytes(s.ptr, s.len, "\"terminated\":false") != NULL);
    nenyax_string_free(&s);
    REQUIRE_OK(nenyax_session_act(session, S("7"), &s));
    CHECK(json_number(s.ptr, s.len, "reward") == 0.0);
    nenyax_string_free(&s);
    CHECK(!nenyax_session_done(session));
    REQUIRE_OK(nenyax_session_act(session, S("3"), &s));
    CHECK(find_bytes(s.ptr, s.len, "\"terminated\":true") != NULL);
    nenyax_string_free(&s);
    CHECK(nenyax_session_done(session));
    REQUIRE_OK(nenyax_session_judgment(session, &s));
    CHECK(json_number(s.ptr, s.len, "score") == 2.0);
    nenyax_string_free(&s);
    CHECK_STATUS(nenyax_session_act(session, S("4"), &s), NENYAX_STATUS_ENVIRONMENT);
    nenyax_session_free(session);

    REQUIRE_OK(nenyax_session_open(env, S("{\"seed\": 102}"), &session));
    CHECK_STATUS_MSG(nenyax_session_act(session, S("1"), &s), NENYAX_STATUS_ENVIRONMENT,
                     "non-finite reward");
    nenyax_session_free(session);

    nenyax_policy_free(policy);
    nenyax_env_free(env);
    CHECK(o->freed == 1);
    free(o);

    printf("nenyax_env_define_stateful errors (user_data freed once each time)\n");
    DEFINE_FAILS(nenyax_env_define_stateful(NULL, 2, &vt, o, owned_release, 0, 5, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "name");
    DEFINE_FAILS(nenyax_env_define_stateful(S("\xc0"), &vt, o, owned_release, 0, 5, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "UTF-8");
    DEFINE_FAILS(nenyax_env_define_stateful(S("x"), NULL, o, owned_release, 0, 5, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "vtable");
    DEFINE_FAILS(nenyax_env_define_stateful(S("x"), &v0, o, owned_release, 0, 5, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "version 0");
    DEFINE_FAILS(nenyax_env_define_stateful(S("x"), &no_step, o, owned_release, 0, 5, &env),
                 NENYAX_STATUS_INVALID_ARGUMENT, "step");
    DEFINE_FAILS(nenyax_env_define_stateful(S("x"), &vt, o, owned_release, 0, 5, NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT, "out-parameter");
}

int main(void)
{
    define_from_spec();
    define_tasks();
    scores_that_fail();
    define_tasks_errors();
    define_stateful();
    return finish("test_define");
}
