/* Threads: callbacks registered without NENYAX_THREAD_SAFE run only on the thread that called
 * into the library (compared with pthread_self), even while a runner's workers step in
 * parallel or nenyax_env_check runs its parallel check; NENYAX_THREAD_SAFE callbacks are called
 * from worker threads; several host threads can run batches at once; free_user_data runs once,
 * on the thread that frees the last handle. */

#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* Where a callback ran, relative to the thread expected to call into the library. */
struct where {
    pthread_t home;
    atomic_int calls;
    atomic_int foreign;
    atomic_int freed;
    atomic_int freed_at_home;
};

static void where_init(struct where *w, pthread_t home)
{
    w->home = home;
    atomic_init(&w->calls, 0);
    atomic_init(&w->foreign, 0);
    atomic_init(&w->freed, 0);
    atomic_init(&w->freed_at_home, 0);
}

static void note(struct where *w)
{
    atomic_fetch_add(&w->calls, 1);
    if (!pthread_equal(pthread_self(), w->home)) {
        atomic_fetch_add(&w->foreign, 1);
    }
}

static void where_release(void *user_data)
{
    struct where *w = user_data;
    atomic_fetch_add(&w->freed, 1);
    if (pthread_equal(pthread_self(), w->home)) {
        atomic_fetch_add(&w->freed_at_home, 1);
    }
}

/* The answer to the "What is A op B?" in text[0..len). */
static int solve_text(const char *text, size_t len, long long *out)
{
    const char *p = find_bytes(text, len, "What is ");
    char buf[64];
    long long a, b;
    char op;
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

static int32_t act(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    long long answer;
    char out[64];
    int n;
    note(user_data);
    if (!solve_text(obs, len, &answer)) {
        return 1;
    }
    n = snprintf(out, sizeof out, "\"<answer>%lld</answer>\"", answer);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static int32_t chat(void *user_data, const char *messages, size_t len, nenyax_reply_t *reply)
{
    long long answer;
    char out[64];
    int n;
    note(user_data);
    if (!solve_text(messages, len, &answer)) {
        return 1;
    }
    n = snprintf(out, sizeof out, "<answer>%lld</answer>", answer);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

struct tally {
    size_t calls;
    size_t perfect;
};

static int32_t tally_sink(void *user_data, size_t index, const char *traj, size_t len)
{
    struct tally *t = user_data;
    (void)index;
    t->calls++;
    t->perfect += trajectory_score(traj, len) == 1.0;
    if (trajectory_score(traj, len) != 1.0) {
        printf("        trajectory %zu: %.*s\n", index, (int)(len > 600 ? 600 : len), traj);
    }
    return 0;
}

static void policy_threads(const nenyax_env_t *env, const nenyax_runner_t *runner, int chat_kind,
                           uint32_t flags)
{
    struct where w;
    struct tally t = {0, 0};
    nenyax_policy_t *p = NULL;
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, NULL, NULL, NULL, NULL};
    if (chat_kind) {
        vt.chat = chat;
    } else {
        vt.act = act;
    }
    where_init(&w, pthread_self());
    REQUIRE_OK(nenyax_policy_new(&vt, &w, where_release, flags, &p));
    REQUIRE_OK(nenyax_runner_run(runner, env, p, S("{\"n\": 256}"), tally_sink, &t, NULL));
    printf("        %s policy, flags %u: %d calls, %d on other threads\n",
           chat_kind ? "chat" : "action", (unsigned)flags, atomic_load(&w.calls),
           atomic_load(&w.foreign));
    CHECK(t.calls == 256 && t.perfect == 256);
    CHECK(atomic_load(&w.calls) == 256);
    if (flags & NENYAX_THREAD_SAFE) {
        CHECK(atomic_load(&w.foreign) > 0);
    } else {
        CHECK(atomic_load(&w.foreign) == 0);
    }
    nenyax_policy_free(p);
    CHECK(atomic_load(&w.freed) == 1 && atomic_load(&w.freed_at_home) == 1);
}

/* ------------------------------------------------------------------------------------------
 * callback-defined environments */

static int32_t score(void *user_data, const char *task, size_t task_len, const char *reply,
                     size_t reply_len, double *score_out, nenyax_reply_t *error)
{
    char expected[64], want[96];
    (void)error;
    note(user_data);
    if (json_string(task, task_len, "answer", expected, sizeof expected) < 0) {
        return 1;
    }
    snprintf(want, sizeof want, "<answer>%s</answer>", expected);
    *score_out = find_bytes(reply, reply_len, want) != NULL ? 1.0 : 0.0;
    return 0;
}

static int32_t reference(void *user_data, const char *task, size_t task_len,
                         nenyax_reply_t *reply)
{
    char expected[64], out[96];
    int n;
    note(user_data);
    if (json_string(task, task_len, "answer", expected, sizeof expected) < 0) {
        return 1;
    }
    n = snprintf(out, sizeof out, "<answer>%s</answer>", expected);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

static const char ROWS[] = "[{\"prompt\": \"What is 1 + 1?\", \"answer\": \"2\"},"
                           " {\"prompt\": \"What is 2 + 2?\", \"answer\": \"4\"},"
                           " {\"prompt\": \"What is 3 * 3?\", \"answer\": \"9\"},"
                           " {\"prompt\": \"What is 9 - 4?\", \"answer\": \"5\"}]";

static void task_env_threads(const nenyax_runner_t *runner, uint32_t flags)
{
    struct where w;
    struct tally t = {0, 0};
    nenyax_env_t *env = NULL;
    nenyax_policy_t *ref = NULL;
    nenyax_string_t s = {NULL, 0};
    nenyax_task_vtable_t vt = {NENYAX_VTABLE_VERSION, score, reference};
    char tier[32];
    where_init(&w, pthread_self());
    REQUIRE_OK(nenyax_env_define_tasks(S("sums"), S(ROWS), &vt, &w, where_release, flags, &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &ref));
    REQUIRE_OK(nenyax_runner_run(runner, env, ref, S("{\"n\": 256}"), tally_sink, &t, NULL));
    CHECK(t.calls == 256 && t.perfect == 256);
    printf("        define_tasks, flags %u, batch: %d calls, %d on other threads\n",
           (unsigned)flags, atomic_load(&w.calls), atomic_load(&w.foreign));
    if (flags & NENYAX_THREAD_SAFE) {
        CHECK(atomic_load(&w.foreign) > 0);
    } else {
        CHECK(atomic_load(&w.foreign) == 0);
    }

    /* nenyax_env_check runs a parallel check on its own pool: still only this thread */
    atomic_store(&w.calls, 0);
    atomic_store(&w.foreign, 0);
    REQUIRE_OK(nenyax_env_check(env, S("{\"samples\": 4, \"threads\": 2}"), &s));
    CHECK(json_string(s.ptr, s.len, "tier", tier, sizeof tier) > 0);
    CHECK(find_bytes(s.ptr, s.len, "\"name\":\"parallel_consistent\",\"tier\":\"trainable\","
                                   "\"status\":\"pass\"") != NULL);
    CHECK(find_bytes(s.ptr, s.len, "\"name\":\"verifier_discriminates\",\"tier\":\"audited\","
                                   "\"status\":\"pass\"") != NULL);
    printf("        define_tasks, flags %u, check: %d calls, %d on other threads\n",
           (unsigned)flags, atomic_load(&w.calls), atomic_load(&w.foreign));
    CHECK(atomic_load(&w.calls) > 0);
    if (!(flags & NENYAX_THREAD_SAFE)) {
        CHECK(atomic_load(&w.foreign) == 0);
    }
    nenyax_string_free(&s);
    nenyax_policy_free(ref);
    CHECK(atomic_load(&w.freed) == 0);
    nenyax_env_free(env);
    CHECK(atomic_load(&w.freed) == 1 && atomic_load(&w.freed_at_home) == 1);
}

static int32_t st_reset(void *user_data, int64_t seed, nenyax_reply_t *out)
{
    (void)seed;
    note(user_data);
    return nenyax_reply_set(out, S("{\"n\": 0}")) ? 0 : 1;
}

static int32_t st_observe(void *user_data, const char *state, size_t len, nenyax_reply_t *out)
{
    char buf[48];
    int n = snprintf(buf, sizeof buf, "\"What is %d + 1?\"", (int)json_number(state, len, "n"));
    note(user_data);
    return nenyax_reply_set(out, buf, (size_t)n) ? 0 : 1;
}

static int32_t st_step(void *user_data, const char *state, size_t len, const char *action,
                       size_t action_len, nenyax_reply_t *state_out, double *reward, bool *done)
{
    char buf[48], want[48];
    int n = (int)json_number(state, len, "n");
    int w;
    note(user_data);
    snprintf(want, sizeof want, "<answer>%d</answer>", n + 1);
    *reward = find_bytes(action, action_len, want) != NULL ? 1.0 : 0.0;
    *done = n + 1 >= 2;
    w = snprintf(buf, sizeof buf, "{\"n\": %d}", n + 1);
    return nenyax_reply_set(state_out, buf, (size_t)w) ? 0 : 1;
}

static int32_t count_sink(void *user_data, size_t index, const char *traj, size_t len)
{
    struct tally *t = user_data;
    (void)index;
    t->calls++;
    t->perfect += trajectory_score(traj, len) == 2.0;
    return 0;
}

static void state_env_threads(const nenyax_runner_t *runner, uint32_t flags)
{
    struct where w, pw;
    struct tally t = {0, 0};
    nenyax_env_t *env = NULL;
    nenyax_policy_t *p = NULL;
    nenyax_state_vtable_t vt = {NENYAX_VTABLE_VERSION, st_reset, st_observe, st_step};
    nenyax_policy_vtable_t pv = {NENYAX_VTABLE_VERSION, act, NULL, NULL, NULL};
    where_init(&w, pthread_self());
    where_init(&pw, pthread_self());
    REQUIRE_OK(nenyax_env_define_stateful(S("plus-one"), &vt, &w, where_release, flags, 5, &env));
    REQUIRE_OK(nenyax_policy_new(&pv, &pw, where_release, flags, &p));
    REQUIRE_OK(nenyax_runner_run(runner, env, p, S("{\"n\": 128}"), count_sink, &t, NULL));
    CHECK(t.calls == 128 && t.perfect == 128);
    printf("        define_stateful, flags %u: %d env calls (%d elsewhere), %d policy calls "
           "(%d elsewhere)\n",
           (unsigned)flags, atomic_load(&w.calls), atomic_load(&w.foreign),
           atomic_load(&pw.calls), atomic_load(&pw.foreign));
    CHECK(atomic_load(&pw.calls) == 256);
    if (flags & NENYAX_THREAD_SAFE) {
        CHECK(atomic_load(&w.foreign) > 0 && atomic_load(&pw.foreign) > 0);
    } else {
        CHECK(atomic_load(&w.foreign) == 0 && atomic_load(&pw.foreign) == 0);
    }
    nenyax_policy_free(p);
    nenyax_env_free(env);
    CHECK(atomic_load(&w.freed) == 1 && atomic_load(&pw.freed) == 1);
}

/* ------------------------------------------------------------------------------------------
 * several host threads at once */

struct host_job {
    const nenyax_env_t *env;
    struct where w;
    struct tally t;
    int ok;
};

static void *host_thread(void *arg)
{
    struct host_job *job = arg;
    nenyax_runner_t *runner = NULL;
    nenyax_policy_t *p = NULL;
    nenyax_string_t s = {NULL, 0};
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act, NULL, NULL, NULL};
    nenyax_error_t *err;
    job->ok = 0;
    where_init(&job->w, pthread_self());
    if ((err = nenyax_runner_new(2, &runner)) != NULL) {
        nenyax_error_free(err);
        return NULL;
    }
    if ((err = nenyax_policy_new(&vt, &job->w, where_release, 0, &p)) != NULL) {
        nenyax_error_free(err);
        nenyax_runner_free(runner);
        return NULL;
    }
    err = nenyax_runner_run(runner, job->env, p, S("{\"n\": 200}"), tally_sink, &job->t, NULL);
    job->ok = err == NULL;
    nenyax_error_free(err);
    /* a single rollout on this thread runs the callback here too */
    err = nenyax_env_rollout(job->env, p, NULL, 0, &s);
    job->ok = job->ok && err == NULL && trajectory_score(s.ptr, s.len) == 1.0;
    nenyax_error_free(err);
    nenyax_string_free(&s);
    nenyax_policy_free(p); /* the last handle: free_user_data runs on this thread */
    nenyax_runner_free(runner);
    return NULL;
}

static void concurrent_hosts(const nenyax_env_t *env)
{
    struct host_job jobs[3];
    pthread_t threads[3];
    int i;
    printf("three host threads, each with its own runner and policy, on one environment\n");
    for (i = 0; i < 3; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].env = env;
        REQUIRE(pthread_create(&threads[i], NULL, host_thread, &jobs[i]) == 0);
    }
    for (i = 0; i < 3; i++) {
        REQUIRE(pthread_join(threads[i], NULL) == 0);
    }
    for (i = 0; i < 3; i++) {
        printf("        host %d: %d calls, %d on other threads\n", i, atomic_load(&jobs[i].w.calls),
               atomic_load(&jobs[i].w.foreign));
        CHECK(jobs[i].ok);
        CHECK(jobs[i].t.calls == 200 && jobs[i].t.perfect == 200);
        CHECK(atomic_load(&jobs[i].w.calls) == 201);
        CHECK(atomic_load(&jobs[i].w.foreign) == 0);
        CHECK(atomic_load(&jobs[i].w.freed) == 1 && atomic_load(&jobs[i].w.freed_at_home) == 1);
    }
}

/* A batch started from inside another batch's callback (on the calling thread): the inner
 * batch serves its own callbacks and the outer binding is restored afterwards, so the outer
 * batch still routes its callbacks here and completes. */

struct nested {
    struct where w;
    const nenyax_env_t *env;
    const nenyax_policy_t *inner_policy; /* NULL: the outer policy itself */
    const nenyax_policy_t *self;
    atomic_int inner_runs;
    atomic_int inner_ok;
};

static int32_t act_nested(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    struct nested *n = user_data;
    if (atomic_fetch_add(&n->inner_runs, 1) == 0) {
        nenyax_runner_t *runner = NULL;
        struct tally t = {0, 0};
        const nenyax_policy_t *p = n->inner_policy ? n->inner_policy : n->self;
        nenyax_error_t *err = nenyax_runner_new(2, &runner);
        if (err == NULL) {
            err = nenyax_runner_run(runner, n->env, p, S("{\"n\": 40}"), tally_sink, &t, NULL);
        }
        atomic_store(&n->inner_ok, err == NULL && t.calls == 40 && t.perfect == 40);
        if (err != NULL) {
            printf("        inner batch: %s\n", nenyax_error_message(err, NULL));
        }
        nenyax_error_free(err);
        nenyax_runner_free(runner);
    }
    return act(&n->w, obs, len, reply);
}

static void nested_batches(const nenyax_env_t *env, const nenyax_runner_t *runner, int same)
{
    struct nested n;
    struct where inner_w;
    struct tally t = {0, 0};
    nenyax_policy_t *outer = NULL, *inner = NULL;
    nenyax_policy_vtable_t ov = {NENYAX_VTABLE_VERSION, act_nested, NULL, NULL, NULL};
    nenyax_policy_vtable_t iv = {NENYAX_VTABLE_VERSION, act, NULL, NULL, NULL};
    where_init(&n.w, pthread_self());
    where_init(&inner_w, pthread_self());
    atomic_init(&n.inner_runs, 0);
    atomic_init(&n.inner_ok, 0);
    n.env = env;
    REQUIRE_OK(nenyax_policy_new(&ov, &n, NULL, 0, &outer));
    if (!same) {
        REQUIRE_OK(nenyax_policy_new(&iv, &inner_w, NULL, 0, &inner));
    }
    n.self = outer;
    n.inner_policy = inner;
    REQUIRE_OK(nenyax_runner_run(runner, env, outer, S("{\"n\": 256}"), tally_sink, &t, NULL));
    printf("        nested (%s policy): outer %d calls (%d elsewhere), inner ok %d, %d elsewhere\n",
           same ? "same" : "another", atomic_load(&n.w.calls), atomic_load(&n.w.foreign),
           atomic_load(&n.inner_ok), atomic_load(&inner_w.foreign));
    CHECK(t.calls == 256 && t.perfect == 256);
    CHECK(atomic_load(&n.inner_ok) == 1);
    CHECK(atomic_load(&n.w.foreign) == 0 && atomic_load(&inner_w.foreign) == 0);
    CHECK(atomic_load(&n.w.calls) == (same ? 256 + 40 : 256));
    CHECK(atomic_load(&inner_w.calls) == (same ? 0 : 40));
    nenyax_policy_free(outer);
    nenyax_policy_free(inner);
}

/* free_user_data runs on the thread that frees the last handle */

struct freer {
    nenyax_policy_t *policy;
    pthread_t self;
};

static void *free_elsewhere(void *arg)
{
    struct freer *f = arg;
    f->self = pthread_self();
    nenyax_policy_free(f->policy);
    return NULL;
}

static void free_on_other_thread(void)
{
    struct where w;
    struct freer f;
    pthread_t th;
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act, NULL, NULL, NULL};
    printf("free_user_data runs on the thread that frees the last handle\n");
    where_init(&w, pthread_self());
    REQUIRE_OK(nenyax_policy_new(&vt, &w, where_release, 0, &f.policy));
    REQUIRE(pthread_create(&th, NULL, free_elsewhere, &f) == 0);
    REQUIRE(pthread_join(th, NULL) == 0);
    CHECK(atomic_load(&w.freed) == 1);
    CHECK(atomic_load(&w.freed_at_home) == 0);
}

int main(void)
{
    nenyax_env_t *env = NULL;
    nenyax_runner_t *runner = NULL;
    alarm(300); /* a hang is a failure (SIGALRM), not a stuck test */
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=50"), &env));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    printf("policies: calling thread only, unless NENYAX_THREAD_SAFE (2 workers, 256 jobs)\n");
    policy_threads(env, runner, 0, 0);
    policy_threads(env, runner, 0, NENYAX_THREAD_SAFE);
    policy_threads(env, runner, 1, 0);
    policy_threads(env, runner, 1, NENYAX_THREAD_SAFE);
    printf("callback-defined environments: the same, in batches and in nenyax_env_check\n");
    task_env_threads(runner, 0);
    task_env_threads(runner, NENYAX_THREAD_SAFE);
    state_env_threads(runner, 0);
    state_env_threads(runner, NENYAX_THREAD_SAFE);
    printf("a batch started from inside a batch's callback\n");
    nested_batches(env, runner, 0);
    nested_batches(env, runner, 1);
    concurrent_hosts(env);
    free_on_other_thread();
    nenyax_runner_free(runner);
    nenyax_env_free(env);
    return finish("test_threads");
}
