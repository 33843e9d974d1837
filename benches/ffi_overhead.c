/*
 * The cost of the C ABI: the same batch of rollouts as benches/rollout_throughput.rs, driven
 * through libnenyax (include/nenyax.h). Run by benches/ffi_compare.sh next to the Rust figures.
 *
 *   cc -O2 -Iinclude benches/ffi_overhead.c -Ltarget/release -lnenyax -lpthread -o ffi_overhead
 *   ./ffi_overhead [reps]                  (default 10 timed repetitions per workload)
 *
 * Every workload is nenyax_runner_run over builtin:arithmetic?size=1000 with options
 * {"n": 1000, "seed": 0} (the jobs of plan(env, 1000, 0), as in the Rust bench), on a runner of
 * 1 and 2 threads:
 *
 *   ffi/reference/sink/T    the env's own reference policy (nenyax_env_reference_policy): no
 *                           host callback, so this is the ABI + JSON cost alone. Each trajectory
 *                           goes to a C sink that only adds up lengths.
 *   ffi/reference/array/T   the same without a sink: the batch comes back as one JSON array.
 *   ffi/callback/sink/T     a C action callback (parses the expression from the observation
 *                           JSON, writes the answer), not thread-safe: every call is handed to
 *                           the calling thread and served there while it waits.
 *   ffi/callback_ts/sink/T  the same callback registered NENYAX_THREAD_SAFE: called on the
 *                           workers directly.
 *
 * and, without a runner, on the calling thread:
 *
 *   ffi/rollout_loop/reference   1000 x nenyax_env_rollout(env, reference, {"seed": i}) (seed i
 *                                is task i), each trajectory returned as JSON and freed.
 *   ffi/rollout_loop/callback    the same with the C callback, not thread-safe: the rollout
 *                                runs on the calling thread, so the callback is called directly.
 *   ffi/rollout_loop/callback_ts the same callback registered NENYAX_THREAD_SAFE (the two must
 *                                be within 1.5x of each other: no thread is started per call).
 *   ffi/rollout_loop/chat        a C chat callback (reads "What is A op B" from the messages
 *                                JSON), not thread-safe: a chat model may be called from the
 *                                recording server's threads, so the rollout runs on a reused
 *                                helper thread and each call is served on the calling thread.
 *   ffi/rollout_loop/chat_ts     the same chat callback registered NENYAX_THREAD_SAFE.
 *   ffi/rollout_loop/pair        callback and callback_ts again, their timed loops interleaved
 *                                (one of each per repetition), so that drift in the machine's
 *                                load falls on both alike: the median of each and their ratio.
 *
 * Rust counterpart of these two: `rollout/serial_loop` (env.rollout in a plain loop with the
 * oracle, task clones made outside the timed region, no JSON); the same work in Rust, JSON
 * included: `ffi_equivalent/serial_json`.
 *
 * Rust counterpart of the runner workloads: `rollout/runner/T` in benches/rollout_throughput.rs
 * (Runner::collect with the env's oracle policy, jobs built outside the timed region,
 * trajectories dropped outside it, no JSON). What the C path does in addition, inside the timed
 * region: parse the options, plan the 1000 jobs (env.tasks(1000): formats 1000 prompts), turn
 * every trajectory into JSON (Trajectory::to_json, on the calling thread: compare with
 * `json/to_json/action`), hand it to the sink, and drop it; the callback workloads also serialise
 * each observation to JSON and parse the action back from JSON. `ffi_equivalent/runner_json/T`
 * does all of that in Rust (plan, run, to_json and drop on the calling thread), so the difference
 * from it is the C boundary alone.
 *
 * Each workload: one untimed validation run (every trajectory must score 1.0 and carry no
 * error), one warm-up run, then `reps` timed runs with CLOCK_MONOTONIC; one JSON line each with
 * the median, best and mean rollouts/s. Also printed: `plan_proxy`, the time of
 * nenyax_env_tasks(env, 1000) (the planning the C path times and the Rust bench does not, plus
 * the JSON of 1000 tasks, so an upper bound).
 */
#define _POSIX_C_SOURCE 199309L
#include "nenyax.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define URI "builtin:arithmetic?size=1000"
#define BATCH 1000
#define MAX_REPS 1000

static void die(nenyax_error_t *e, const char *what) {
    if (e == NULL) return;
    fprintf(stderr, "%s: %s (status %d)\n", what, nenyax_error_message(e, NULL),
            (int)nenyax_error_code(e));
    nenyax_error_free(e);
    exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The action policy: find "expression":"A op B" in the observation JSON, reply
 * "<answer>R</answer>" as a JSON string. */
static int32_t solve(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply) {
    (void)user_data;
    static const char key[] = "\"expression\":\"";
    const char *end = obs + len, *p = obs;
    for (; p + sizeof key - 1 <= end; ++p)
        if (memcmp(p, key, sizeof key - 1) == 0) break;
    if (p + sizeof key - 1 > end) {
        static const char msg[] = "no expression in the observation";
        nenyax_reply_set(reply, msg, sizeof msg - 1);
        return 1;
    }
    p += sizeof key - 1;
    char *q;
    long long a = strtoll(p, &q, 10);
    while (*q == ' ') ++q;
    char op = *q++;
    long long b = strtoll(q, NULL, 10);
    long long r = op == '+' ? a + b : op == '-' ? a - b : a * b;
    char out[64];
    int n = snprintf(out, sizeof out, "\"<answer>%lld</answer>\"", r);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

/* The chat policy: the answer to "What is A op B" in the messages JSON, as reply text. */
static int32_t solve_chat(void *user_data, const char *msgs, size_t len, nenyax_reply_t *reply) {
    (void)user_data;
    static const char key[] = "What is ";
    const char *end = msgs + len, *p = msgs;
    for (; p + sizeof key - 1 <= end; ++p)
        if (memcmp(p, key, sizeof key - 1) == 0) break;
    if (p + sizeof key - 1 > end) return 1;
    p += sizeof key - 1;
    char *q;
    long long a = strtoll(p, &q, 10);
    while (*q == ' ') ++q;
    char op = *q++;
    long long b = strtoll(q, NULL, 10);
    long long r = op == '+' ? a + b : op == '-' ? a - b : a * b;
    char out[64];
    int n = snprintf(out, sizeof out, "<answer>%lld</answer>", r);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

struct sink_state {
    size_t count, bytes, solved;
    int validate;
};

static int32_t sink(void *user_data, size_t index, const char *json, size_t len) {
    struct sink_state *s = user_data;
    (void)index;
    s->count++;
    s->bytes += len;
    if (s->validate && strstr(json, "\"judgment\":{\"score\":1.0") && strstr(json, "\"error\":null"))
        s->solved++;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char OPTIONS[] = "{\"n\": 1000, \"seed\": 0}";

/* One batch; returns the seconds it took. */
static double batch(const nenyax_runner_t *runner, const nenyax_env_t *env,
                    const nenyax_policy_t *policy, int use_sink, struct sink_state *st) {
    nenyax_string_t out = {NULL, 0};
    double t0 = now_s();
    nenyax_error_t *e = nenyax_runner_run(runner, env, policy, OPTIONS, sizeof OPTIONS - 1,
                                          use_sink ? sink : NULL, st, use_sink ? NULL : &out);
    double dt = now_s() - t0;
    die(e, "nenyax_runner_run");
    if (!use_sink) {
        st->count += BATCH;
        st->bytes += out.len;
        if (st->validate) {
            /* Count solved trajectories in the array. */
            for (const char *p = out.ptr; (p = strstr(p, "\"judgment\":{\"score\":1.0")); ++p)
                st->solved++;
        }
        nenyax_string_free(&out); /* freeing is part of consuming it, but after the clock */
    }
    return dt;
}

/* 1000 single rollouts on the calling thread; returns the seconds it took. */
static double loop(const nenyax_env_t *env, const nenyax_policy_t *policy, struct sink_state *st) {
    double t0 = now_s();
    for (int i = 0; i < BATCH; ++i) {
        char opts[32];
        int n = snprintf(opts, sizeof opts, "{\"seed\": %d}", i);
        nenyax_string_t out = {NULL, 0};
        die(nenyax_env_rollout(env, policy, opts, (size_t)n, &out), "nenyax_env_rollout");
        sink(st, (size_t)i, out.ptr, out.len);
        nenyax_string_free(&out);
    }
    return now_s() - t0;
}

static void workload(const char *name, const char *rust, const nenyax_runner_t *runner,
                     const nenyax_env_t *env, const nenyax_policy_t *policy, int use_sink,
                     int reps) {
#define ONE(st) (runner ? batch(runner, env, policy, use_sink, st) : loop(env, policy, st))
    struct sink_state v = {0, 0, 0, 1};
    ONE(&v); /* validation */
    if (v.count != BATCH || v.solved != BATCH) {
        fprintf(stderr, "%s: %zu of %zu trajectories solved; expected all %d\n", name, v.solved,
                v.count, BATCH);
        exit(1);
    }
    struct sink_state s = {0, 0, 0, 0};
    ONE(&s); /* warm-up */
    double t[MAX_REPS], total = 0;
    for (int i = 0; i < reps; ++i) {
        t[i] = ONE(&s);
        total += t[i];
    }
#undef ONE
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    double median = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
    printf("{\"workload\": \"%s\", \"rust_equivalent\": \"%s\", \"threads\": %zu, \"n\": %d, "
           "\"reps\": %d, \"median_rollouts_per_s\": %.0f, \"best_rollouts_per_s\": %.0f, "
           "\"mean_rollouts_per_s\": %.0f, \"worst_rollouts_per_s\": %.0f, "
           "\"json_bytes_per_trajectory\": %.0f}\n",
           name, rust, runner ? nenyax_runner_threads(runner) : 0, BATCH, reps, BATCH / median, BATCH / t[0],
           BATCH * reps / total, BATCH / t[reps - 1], (double)s.bytes / (double)s.count);
    fflush(stdout);
}

/* The loops of two policies interleaved, `reps` each: their medians and the ratio b / a. */
static void pair(const nenyax_env_t *env, const nenyax_policy_t *a, const nenyax_policy_t *b,
                 int reps) {
    struct sink_state s = {0, 0, 0, 0};
    double ta[MAX_REPS], tb[MAX_REPS];
    loop(env, a, &s); /* warm-up */
    loop(env, b, &s);
    for (int i = 0; i < reps; ++i) {
        ta[i] = loop(env, a, &s);
        tb[i] = loop(env, b, &s);
    }
    qsort(ta, (size_t)reps, sizeof ta[0], cmp_double);
    qsort(tb, (size_t)reps, sizeof tb[0], cmp_double);
    double ma = reps % 2 ? ta[reps / 2] : (ta[reps / 2 - 1] + ta[reps / 2]) / 2;
    double mb = reps % 2 ? tb[reps / 2] : (tb[reps / 2 - 1] + tb[reps / 2]) / 2;
    printf("{\"workload\": \"ffi/rollout_loop/pair\", \"reps\": %d, "
           "\"callback_median_rollouts_per_s\": %.0f, \"callback_ts_median_rollouts_per_s\": %.0f, "
           "\"callback_best_rollouts_per_s\": %.0f, \"callback_ts_best_rollouts_per_s\": %.0f, "
           "\"time_ratio_callback_over_ts\": %.3f}\n",
           reps, BATCH / ma, BATCH / mb, BATCH / ta[0], BATCH / tb[0], ma / mb);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: %s [reps 1..%d]\n", argv[0], MAX_REPS);
        return 2;
    }
    nenyax_env_t *env = NULL;
    die(nenyax_env_load(URI, strlen(URI), &env), "nenyax_env_load");
    nenyax_policy_t *reference = NULL, *callback = NULL, *callback_ts = NULL;
    die(nenyax_env_reference_policy(env, &reference), "nenyax_env_reference_policy");
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, solve, NULL, NULL, NULL};
    die(nenyax_policy_new(&vt, NULL, NULL, 0, &callback), "nenyax_policy_new");
    die(nenyax_policy_new(&vt, NULL, NULL, NENYAX_THREAD_SAFE, &callback_ts), "nenyax_policy_new");
    nenyax_policy_t *chat = NULL, *chat_ts = NULL;
    nenyax_policy_vtable_t cvt = {NENYAX_VTABLE_VERSION, NULL, solve_chat, NULL, NULL};
    die(nenyax_policy_new(&cvt, NULL, NULL, 0, &chat), "nenyax_policy_new");
    die(nenyax_policy_new(&cvt, NULL, NULL, NENYAX_THREAD_SAFE, &chat_ts), "nenyax_policy_new");

    /* plan_proxy: nenyax_env_tasks(env, 1000), median of reps (+1 warm-up). */
    {
        double t[MAX_REPS];
        for (int i = -1; i < reps; ++i) {
            nenyax_string_t s = {NULL, 0};
            double t0 = now_s();
            die(nenyax_env_tasks(env, BATCH, &s), "nenyax_env_tasks");
            double dt = now_s() - t0;
            nenyax_string_free(&s);
            if (i >= 0) t[i] = dt;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_double);
        printf("{\"workload\": \"plan_proxy\", \"what\": \"nenyax_env_tasks(env, 1000)\", "
               "\"median_us_per_task\": %.3f}\n",
               t[reps / 2] * 1e6 / BATCH);
    }

    workload("ffi/rollout_loop/reference", "rollout/serial_loop", NULL, env, reference, 1, reps);
    workload("ffi/rollout_loop/callback", "rollout/serial_loop", NULL, env, callback, 1, reps);
    workload("ffi/rollout_loop/callback_ts", "rollout/serial_loop", NULL, env, callback_ts, 1,
             reps);
    pair(env, callback, callback_ts, reps);
    workload("ffi/rollout_loop/chat", "rollout/serial_loop", NULL, env, chat, 1, reps);
    workload("ffi/rollout_loop/chat_ts", "rollout/serial_loop", NULL, env, chat_ts, 1, reps);

    for (size_t threads = 1; threads <= 2; ++threads) {
        nenyax_runner_t *runner = NULL;
        die(nenyax_runner_new(threads, &runner), "nenyax_runner_new");
        char name[64], rust[64];
        snprintf(rust, sizeof rust, "rollout/runner/%zu", threads);
#define RUN(label, policy, use_sink)                                        \
        snprintf(name, sizeof name, "ffi/%s/%zu", label, threads);          \
        workload(name, rust, runner, env, policy, use_sink, reps)
        RUN("reference/sink", reference, 1);
        RUN("reference/array", reference, 0);
        RUN("callback/sink", callback, 1);
        RUN("callback_ts/sink", callback_ts, 1);
#undef RUN
        nenyax_runner_free(runner);
    }
    nenyax_policy_free(chat_ts);
    nenyax_policy_free(chat);
    nenyax_policy_free(callback_ts);
    nenyax_policy_free(callback);
    nenyax_policy_free(reference);
    nenyax_env_free(env);
    return 0;
}
