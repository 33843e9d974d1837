/* The nested-batch race, looped: an outer batch whose (non-thread-safe) policy starts an inner
 * batch with the same policy from inside many of its callbacks. While an inner batch runs, the
 * outer batch's other workers keep calling the policy, so their calls are queued for the
 * calling thread while the inner batch serves it. A call queued just as the inner batch ends
 * must still be served (by the outer batch, once the callback returns): once it was dropped
 * with the inner batch's queue and its episode failed with "a callback routed to the calling
 * thread did not return". One outer batch here holds tens of inner batches, so a lost call
 * shows up within a few seconds (test_threads.c has only one nested batch per run). */

#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define OUTER 400 /* outer jobs */
#define EVERY 2   /* every EVERY-th outer call runs an inner batch */
#define INNER 6   /* jobs per inner batch */
#define ROUNDS 10 /* most outer batches */

struct state {
    pthread_t home;
    const nenyax_env_t *env;
    const nenyax_policy_t *self;
    atomic_int calls;
    atomic_int foreign;
    atomic_int inner_batches;
    atomic_int inner_failed;
};

static int32_t act(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply);

static int32_t count_sink(void *user_data, size_t index, const char *traj, size_t len)
{
    size_t *perfect = user_data;
    (void)index;
    if (trajectory_score(traj, len) == 1.0) {
        ++*perfect;
    } else {
        const char *e = find_bytes(traj, len, "\"error\"");
        printf("        trajectory %zu: %.*s\n", index, e ? (int)(traj + len - e) : 0, e ? e : "");
    }
    return 0;
}

/* The answer to "What is A op B?" in the observation JSON, as an action. */
static int32_t answer(const char *obs, size_t len, nenyax_reply_t *reply)
{
    const char *p = find_bytes(obs, len, "What is ");
    char buf[64], out[64];
    long long a, b;
    char op;
    size_t n;
    int w;
    if (p == NULL) {
        return 1;
    }
    p += 8;
    n = (size_t)(obs + len - p) < sizeof buf - 1 ? (size_t)(obs + len - p) : sizeof buf - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (sscanf(buf, "%lld %c %lld", &a, &op, &b) != 3) {
        return 1;
    }
    w = snprintf(out, sizeof out, "\"<answer>%lld</answer>\"",
                 op == '+' ? a + b : op == '-' ? a - b : a * b);
    return nenyax_reply_set(reply, out, (size_t)w) ? 0 : 1;
}

static int32_t act(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    struct state *s = user_data;
    int call = atomic_fetch_add(&s->calls, 1);
    if (!pthread_equal(pthread_self(), s->home)) {
        atomic_fetch_add(&s->foreign, 1);
    }
    /* Only outer calls start inner batches (inner ones answer directly): the inner batch's
     * own calls are told apart by a thread-local depth. */
    static _Thread_local int depth;
    if (depth == 0 && call % EVERY == 0) {
        nenyax_runner_t *runner = NULL;
        size_t perfect = 0;
        nenyax_error_t *err = nenyax_runner_new(2, &runner);
        depth++;
        if (err == NULL) {
            err = nenyax_runner_run(runner, s->env, s->self, S("{\"n\": 6}"), count_sink,
                                    &perfect, NULL);
        }
        depth--;
        atomic_fetch_add(&s->inner_batches, 1);
        if (err != NULL || perfect != INNER) {
            atomic_fetch_add(&s->inner_failed, 1);
            if (err != NULL) {
                printf("        inner batch: %s\n", nenyax_error_message(err, NULL));
            }
        }
        nenyax_error_free(err);
        nenyax_runner_free(runner);
    }
    return answer(obs, len, reply);
}

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_policy_t *policy = NULL;
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act, NULL, NULL, NULL};
    struct state s;
    size_t perfect = 0;
    char options[64];
    int n, rounds;
    alarm(120); /* a hang is a failure (SIGALRM), not a stuck test */
    s.home = pthread_self();
    atomic_init(&s.calls, 0);
    atomic_init(&s.foreign, 0);
    atomic_init(&s.inner_batches, 0);
    atomic_init(&s.inner_failed, 0);
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=50"), &env));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    REQUIRE_OK(nenyax_policy_new(&vt, &s, NULL, 0, &policy));
    s.env = env;
    s.self = policy;
    n = snprintf(options, sizeof options, "{\"n\": %d}", OUTER);
    /* How many inner batches one outer batch holds depends on scheduling: outer calls served
     * while an inner batch runs answer directly. On a loaded machine there are fewer, so outer
     * batches repeat (up to ROUNDS) until enough nested batches have run to catch the race. */
    for (rounds = 0; rounds < ROUNDS && atomic_load(&s.inner_batches) < OUTER / 20; rounds++) {
        REQUIRE_OK(nenyax_runner_run(runner, env, policy, options, (size_t)n, count_sink,
                                     &perfect, NULL));
    }
    printf("nested batches with the same policy: %d x %d outer jobs, %d inner batches "
           "(%d failed), %d calls, %d on other threads\n",
           rounds, OUTER, atomic_load(&s.inner_batches), atomic_load(&s.inner_failed),
           atomic_load(&s.calls), atomic_load(&s.foreign));
    CHECK(perfect == (size_t)rounds * OUTER);
    CHECK(atomic_load(&s.inner_batches) >= OUTER / 20);
    CHECK(atomic_load(&s.inner_failed) == 0);
    CHECK(atomic_load(&s.foreign) == 0);
    nenyax_policy_free(policy);
    nenyax_runner_free(runner);
    nenyax_env_free(env);
    return finish("test_nested_race");
}
