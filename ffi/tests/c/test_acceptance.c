/* Acceptance: what a new user writes from include/nenyax.h alone.
 *
 * Load builtin:arithmetic, run 64 rollouts in parallel with a C policy callback that reads the
 * expression from the observation JSON and replies "<answer>N</answer>" (as a JSON string),
 * read every trajectory's score (all 1.0), run the conformance check and read its tier
 * ("audited"), then free everything. Self-contained on purpose: no shared test helpers, no JSON
 * library. */

#include "nenyax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

/* Print what is checked; count failures. */
#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (cond) {                                                                             \
            printf("  ok    %s:%d  %s\n", __FILE__, __LINE__, #cond);                           \
        } else {                                                                                \
            failures++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                                       \
    } while (0)

/* A call that must succeed (return NULL): stop here otherwise. */
#define MUST(call)                                                                              \
    do {                                                                                        \
        nenyax_error_t *must_err_ = (call);                                                     \
        if (must_err_ == NULL) {                                                                \
            printf("  ok    %s:%d  %s\n", __FILE__, __LINE__, #call);                           \
        } else {                                                                                \
            fprintf(stderr, "%s:%d: %s failed (status %d: %s)\n", __FILE__, __LINE__, #call,   \
                    (int)nenyax_error_code(must_err_), nenyax_error_message(must_err_, NULL));  \
            nenyax_error_free(must_err_);                                                       \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

/* The text right after `"key":` in json[0..len), or NULL. Enough for compact JSON whose key
 * occurs once before the value we want. */
static const char *find_field(const char *json, size_t len, const char *key)
{
    char pattern[64];
    size_t n, i;
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    n = strlen(pattern);
    for (i = 0; i + n <= len; i++) {
        if (memcmp(json + i, pattern, n) == 0) {
            return json + i + n;
        }
    }
    return NULL;
}

/* Copy the text after `"key":` (at most cap - 1 bytes, up to the end of json[0..len)) into buf
 * as a NUL-terminated string. The library's strings are (pointer, length) pairs: they are not
 * NUL-terminated, so never run sscanf or strtod on them directly. */
static int copy_field(const char *json, size_t len, const char *key, char *buf, size_t cap)
{
    const char *v = find_field(json, len, key);
    size_t n;
    if (v == NULL) {
        return 0;
    }
    n = (size_t)(json + len - v);
    n = n < cap - 1 ? n : cap - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return 1;
}

/* Action callback: observation JSON -> "\"<answer>N</answer>\"". The observation's data is
 * {"expression": "A op B"}. Stateless, so it is registered as NENYAX_THREAD_SAFE. */
static int32_t solve(void *user_data, const char *obs, size_t obs_len, nenyax_reply_t *reply)
{
    char expr[64];
    long long a, b, result;
    char op;
    char action[64];
    int n;
    (void)user_data;
    if (!copy_field(obs, obs_len, "expression", expr, sizeof expr) ||
        sscanf(expr, "\"%lld %c %lld\"", &a, &op, &b) != 3) {
        static const char msg[] = "no expression in the observation";
        nenyax_reply_set(reply, msg, sizeof msg - 1);
        return 1;
    }
    result = op == '+' ? a + b : op == '-' ? a - b : a * b;
    n = snprintf(action, sizeof action, "\"<answer>%lld</answer>\"", result);
    return nenyax_reply_set(reply, action, (size_t)n) ? 0 : 1;
}

struct scores {
    size_t count;
    size_t perfect;
    size_t in_order;
};

/* Trajectory sink: called once per rollout, in job order, on this thread. */
static int32_t collect(void *user_data, size_t index, const char *traj, size_t len)
{
    struct scores *s = user_data;
    const char *judgment = find_field(traj, len, "judgment");
    char score[32];
    s->in_order += index == s->count;
    s->count++;
    if (judgment != NULL &&
        copy_field(judgment, len - (size_t)(judgment - traj), "score", score, sizeof score) &&
        strtod(score, NULL) == 1.0) {
        s->perfect++;
    } else {
        fprintf(stderr, "trajectory %zu was not scored 1.0: %.*s\n", index, (int)len, traj);
    }
    return 0;
}

int main(void)
{
    static const char uri[] = "builtin:arithmetic";
    static const char options[] = "{\"n\": 64, \"seed\": 0}";
    nenyax_env_t *env = NULL;
    nenyax_policy_t *policy = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t report = {NULL, 0};
    nenyax_policy_vtable_t vtable = {NENYAX_VTABLE_VERSION, solve, NULL, NULL, NULL};
    struct scores scores = {0, 0, 0};
    char tier[32] = "";
    const char *t;

    printf("nenyax %s (header %s), protocol %s\n", nenyax_version(), NENYAX_VERSION_STRING,
           nenyax_protocol_version());
    CHECK(nenyax_version_number() == NENYAX_VERSION_NUMBER);

    MUST(nenyax_env_load(uri, sizeof uri - 1, &env));
    MUST(nenyax_policy_new(&vtable, NULL, NULL, NENYAX_THREAD_SAFE, &policy));
    MUST(nenyax_runner_new(4, &runner));
    CHECK(nenyax_runner_threads(runner) == 4);

    MUST(nenyax_runner_run(runner, env, policy, options, sizeof options - 1, collect, &scores,
                           NULL));
    printf("  %zu trajectories, %zu scored 1.0\n", scores.count, scores.perfect);
    CHECK(scores.count == 64);
    CHECK(scores.perfect == 64);
    CHECK(scores.in_order == 64);

    /* The full conformance suite (fresh instances included) needs the URI. */
    MUST(nenyax_check_uri(uri, sizeof uri - 1, NULL, 0, &report));
    /* a nenyax_string_t is NUL-terminated, so this one may be scanned in place */
    t = find_field(report.ptr, report.len, "tier");
    if (t != NULL) {
        sscanf(t, "\"%31[a-z]\"", tier);
    }
    printf("  check: tier %s\n", tier);
    CHECK(strcmp(tier, "audited") == 0);

    nenyax_string_free(&report);
    CHECK(report.ptr == NULL && report.len == 0);
    nenyax_runner_free(runner);
    nenyax_policy_free(policy);
    nenyax_env_free(env);

    printf("test_acceptance: %s\n", failures == 0 ? "passed" : "FAILED");
    return failures == 0 ? 0 : 1;
}
