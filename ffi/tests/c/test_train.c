/* Training through the C ABI: per-episode policies (act_episode, chat_episode) with their
 * episode context and records, version-1 policy vtables, host trainers (their batches, their
 * failures, NaN log-probs), host learners, the built-in policy, and typed errors.
 *
 * The environment is builtin:guess (guess a number from 1 to 16 in 4 guesses). The policy
 * guesses uniformly inside the bounds the observation shows, from the episode's sample seed,
 * and records its prompt ("low", "high" as tokens 100 + low, 200 + high) and its guess. */

/* mmap's MAP_ANONYMOUS and sysconf, under -std=c11. */
#define _DEFAULT_SOURCE

#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static const char GUESS[] = "builtin:guess?high=16&max_guesses=4&size=64";

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static void reply_text(nenyax_reply_t *reply, const char *text)
{
    nenyax_reply_set(reply, text, strlen(text));
}

/* ------------------------------------------------------------------------------------------
 * the per-episode action policy */

struct pol {
    pthread_mutex_t lock;
    pthread_t home;
    uint64_t digest; /* order-free sum over calls of mix(episode, step, seed, guess) */
    long calls, off_home, no_task, train_calls, eval_calls, bad_version;
    uint32_t max_member, max_round;
    uint64_t last_seed, last_sample_seed[8];
    nenyax_episode_t last;
    int record; /* write a record */
};

static void pol_init(struct pol *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    p->home = pthread_self();
    p->record = 1;
}

static int32_t act_guess(void *user_data, const nenyax_episode_t *ep, const char *obs, size_t len,
                         nenyax_reply_t *reply, nenyax_reply_t *record)
{
    struct pol *p = user_data;
    double lo = json_number(obs, len, "low"), hi = json_number(obs, len, "high");
    long low = (long)lo, high = (long)hi, n, guess;
    uint64_t h;
    char action[32], rec[256];
    if (isnan(lo) || isnan(hi) || low < 1 || high < low) {
        reply_text(reply, "no low/high in the observation");
        return 1;
    }
    n = high - low + 1;
    guess = low + (long)(mix(ep->sample_seed) % (uint64_t)n);
    h = mix(mix(mix(mix(mix(ep->phase + 1) ^ ep->round) ^ ep->group) ^ ep->member) ^ ep->step);
    h = mix(h ^ ep->sample_seed ^ (uint64_t)guess);
    pthread_mutex_lock(&p->lock);
    p->digest += h;
    p->calls++;
    p->off_home += !pthread_equal(pthread_self(), p->home);
    p->no_task += ep->task_id == NULL || ep->task_id_len != strlen(ep->task_id) || !ep->has_seed;
    p->train_calls += ep->phase == NENYAX_PHASE_TRAIN;
    p->eval_calls += ep->phase == NENYAX_PHASE_EVAL;
    p->bad_version += ep->version != NENYAX_EPISODE_VERSION;
    if (ep->member > p->max_member) p->max_member = ep->member;
    if (ep->round > p->max_round) p->max_round = ep->round;
    if (ep->step < 8) p->last_sample_seed[ep->step] = ep->sample_seed;
    p->last = *ep;
    p->last.task_id = NULL; /* valid only during the call */
    pthread_mutex_unlock(&p->lock);
    snprintf(action, sizeof action, "%ld", guess);
    reply_text(reply, action);
    if (p->record) {
        snprintf(rec, sizeof rec,
                 "{\"prompt_token_ids\":[%ld,%ld],\"completion_token_ids\":[%ld],"
                 "\"completion_logprobs\":[%.17g]}",
                 100 + low, 200 + high, guess - 1, -log((double)n));
        reply_text(record, rec);
    }
    return 0;
}

/* Bisection, for version-1 vtables. */
static int32_t act_bisect(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    long low = (long)json_number(obs, len, "low"), high = (long)json_number(obs, len, "high");
    char action[32];
    (void)user_data;
    snprintf(action, sizeof action, "%ld", low + (high - low) / 2);
    reply_text(reply, action);
    return 0;
}

static int32_t act_never(void *user_data, const nenyax_episode_t *ep, const char *obs,
                         size_t len, nenyax_reply_t *reply, nenyax_reply_t *record)
{
    (void)user_data, (void)ep, (void)obs, (void)len, (void)record;
    reply_text(reply, "act_episode of a version-1 vtable must never be called");
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * the host trainer: the uniform-in-bounds policy's exact log-probs; apply checks gradients */

struct trainer {
    long logprobs_calls, reference_calls, apply_calls, snapshots, restores;
    long bad_layout, bad_grad, observation, masked;
    long fail_after_applies; /* logprobs fails once this many applies happened (-1: never) */
    long nan_after_applies;  /* logprobs writes NaN once this many applies happened */
    int chat;                /* rows are chat calls (16 choices, context from 0) */
};

static void trainer_init(struct trainer *t)
{
    memset(t, 0, sizeof *t);
    t->fail_after_applies = -1;
    t->nan_after_applies = -1;
}

static int32_t tr_logprobs(void *user_data, const nenyax_trace_batch_t *b, bool reference,
                           double *out, nenyax_reply_t *error)
{
    struct trainer *t = user_data;
    size_t r, i;
    t->logprobs_calls++;
    t->reference_calls += reference;
    if (b->version != NENYAX_TRACE_BATCH_VERSION || b->rows_json[b->rows_json_len] != '\0') {
        t->bad_layout++;
    }
    /* This policy records prompt tokens, so rows_json carries no observation (it is given
     * only where it is the whole prompt). */
    if (find_bytes(b->rows_json, b->rows_json_len, "\"observation\":") != NULL) {
        t->observation++;
    }
    if (t->fail_after_applies >= 0 && t->apply_calls >= t->fail_after_applies) {
        reply_text(error, "simulated trainer failure: out of GPU memory");
        return 3;
    }
    for (r = 0; r < b->rows; r++) {
        if (b->lengths[r] < 1 || (size_t)b->lengths[r] > b->width) t->bad_layout++;
        for (i = 0; i < b->width; i++) {
            size_t at = r * b->width + i;
            int64_t c = b->context_start[at];
            if (!b->mask[at]) continue;
            t->masked++;
            if (t->nan_after_applies >= 0 && t->apply_calls >= t->nan_after_applies) {
                out[at] = NAN;
                continue;
            }
            if (t->chat) {
                out[at] = -log(16.0);
                if (c != 0) t->bad_layout++;
                continue;
            }
            /* An action call: [100 + low, 200 + high, guess - 1], conditioned on itself. */
            if (c < 0 || (size_t)c + 2 != i || b->tokens[r * b->width + c] < 101 ||
                b->tokens[r * b->width + c + 1] < 201) {
                t->bad_layout++;
                out[at] = -1.0;
                continue;
            }
            {
                long low = (long)b->tokens[r * b->width + c] - 100;
                long high = (long)b->tokens[r * b->width + c + 1] - 200;
                long g = (long)b->tokens[at] + 1;
                if (g < low || g > high) t->bad_layout++;
                out[at] = -log((double)(high - low + 1));
                /* The sampler recorded the same value. */
                if (fabs(b->sampled_logp[at] - out[at]) > 1e-12) t->bad_layout++;
            }
        }
    }
    return 0;
}

static int32_t tr_apply(void *user_data, const nenyax_trace_batch_t *b, const double *grad,
                        nenyax_reply_t *error)
{
    struct trainer *t = user_data;
    size_t k, nonzero = 0;
    (void)error;
    t->apply_calls++;
    for (k = 0; k < b->rows * b->width; k++) {
        if (!isfinite(grad[k]) || (!b->mask[k] && grad[k] != 0.0)) t->bad_grad++;
        nonzero += grad[k] != 0.0;
    }
    if (nonzero == 0) t->bad_grad++; /* a group with differing rewards gives a gradient */
    return 0;
}

static int32_t tr_snapshot(void *user_data, nenyax_reply_t *error)
{
    (void)error;
    ((struct trainer *)user_data)->snapshots++;
    return 0;
}

static int32_t tr_restore(void *user_data, nenyax_reply_t *error)
{
    (void)error;
    ((struct trainer *)user_data)->restores++;
    return 0;
}

static void count_free(void *user_data)
{
    ++*(int *)user_data;
}

/* ------------------------------------------------------------------------------------------
 * report helpers (the report's objects have their keys in alphabetical order) */

/* The values of every `"key":` in json, concatenated (to compare two reports' figures). */
static void all_values(const char *json, size_t len, const char *key, char *buf, size_t cap)
{
    char pat[64];
    const char *p = json, *end = json + len;
    size_t n = 0;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    buf[0] = '\0';
    while ((p = find_bytes(p, (size_t)(end - p), pat)) != NULL) {
        p += strlen(pat);
        while (p < end && *p != ',' && *p != '}' && n + 2 < cap) buf[n++] = *p++;
        buf[n++] = ';';
        buf[n] = '\0';
    }
}

static nenyax_policy_t *episode_policy(struct pol *p, uint32_t flags)
{
    nenyax_policy_vtable_t vt = {NENYAX_POLICY_VTABLE_VERSION, NULL, NULL, act_guess, NULL};
    nenyax_policy_t *policy = NULL;
    REQUIRE_OK(nenyax_policy_new(&vt, p, NULL, flags, &policy));
    return policy;
}

static const nenyax_trainer_vtable_t TRAINER = {NENYAX_TRAINER_VTABLE_VERSION, tr_logprobs,
                                                tr_apply, tr_snapshot, tr_restore};

/* Train grpo over the C trainer; the report in *out. */
static void train_grpo(nenyax_env_t *env, nenyax_policy_t *policy, struct trainer *t,
                       const char *options, nenyax_string_t *out)
{
    nenyax_learner_t *learner = NULL;
    REQUIRE_OK(nenyax_learner_new(S("grpo"), env, policy, &TRAINER, t, NULL, &learner));
    REQUIRE_OK(nenyax_train(env, learner, options, strlen(options), out));
    nenyax_learner_free(learner);
}

/* ------------------------------------------------------------------------------------------ */

static void episodes_are_deterministic_whatever_the_threads(nenyax_env_t *env)
{
    struct pol p1, p3, p7;
    struct trainer t1, t3, t7;
    nenyax_policy_t *a, *b, *c;
    nenyax_string_t r1 = {NULL, 0}, r3 = {NULL, 0}, r7 = {NULL, 0};
    char v1[4096], v3[4096];
    const char *o1 = "{\"rounds\":3,\"group_size\":4,\"batch\":3,\"eval_tasks\":8,\"seed\":7,"
                     "\"concurrency\":1}";
    const char *o3 = "{\"rounds\":3,\"group_size\":4,\"batch\":3,\"eval_tasks\":8,\"seed\":7,"
                     "\"concurrency\":3}";
    const char *o7 = "{\"rounds\":3,\"group_size\":4,\"batch\":3,\"eval_tasks\":8,\"seed\":8,"
                     "\"concurrency\":3}";
    printf("act_episode: the same seed gives the same episodes on 1 and 3 threads\n");
    pol_init(&p1), pol_init(&p3), pol_init(&p7);
    trainer_init(&t1), trainer_init(&t3), trainer_init(&t7);
    a = episode_policy(&p1, 0), b = episode_policy(&p3, 0), c = episode_policy(&p7, 0);
    train_grpo(env, a, &t1, o1, &r1);
    train_grpo(env, b, &t3, o3, &r3);
    train_grpo(env, c, &t7, o7, &r7);

    CHECK(p1.calls > 0 && p1.calls == p3.calls);
    CHECK(p1.digest == p3.digest);  /* the same calls, with the same seeds and guesses */
    CHECK(p1.digest != p7.digest);  /* another run seed: other draws */
    all_values(r1.ptr, r1.len, "train_score", v1, sizeof v1);
    all_values(r3.ptr, r3.len, "train_score", v3, sizeof v3);
    CHECK(strcmp(v1, v3) == 0 && strlen(v1) > 4);
    all_values(r1.ptr, r1.len, "eval_score", v1, sizeof v1);
    all_values(r3.ptr, r3.len, "eval_score", v3, sizeof v3);
    CHECK(strcmp(v1, v3) == 0);
    /* The context: train and eval phases, 4 members (0..3), rounds up to 3, a task and seed. */
    CHECK(p3.train_calls > 0 && p3.eval_calls > 0);
    CHECK(p3.max_member == 3 && p3.max_round == 3);
    CHECK(p3.no_task == 0 && p3.bad_version == 0);
    /* Non-thread-safe callbacks ran on this (the calling) thread only, trainer included. */
    CHECK(p3.off_home == 0);
    /* The trainer saw well-formed action rows (their prompt tokens, no observations), KL asked for the
     * reference, gradients only on sampled tokens, and every round kept (gate: snapshots). */
    CHECK(t3.logprobs_calls >= 3 && t3.reference_calls >= 3 && t3.apply_calls == 3);
    CHECK(t3.bad_layout == 0 && t3.bad_grad == 0 && t3.observation == 0 && t3.masked > 0);
    CHECK(t3.snapshots == 3);
    CHECK(count_bytes(r3.ptr, r3.len, "\"outcome\":\"failed\"") == 0);
    CHECK(find_bytes(r3.ptr, r3.len, "\"text\":\"train builtin:guess") != NULL);
    CHECK(!isnan(json_number(r3.ptr, r3.len, "overhead_fraction")));
    nenyax_string_free(&r1), nenyax_string_free(&r3), nenyax_string_free(&r7);
    nenyax_policy_free(a), nenyax_policy_free(b), nenyax_policy_free(c);
}

static void thread_safe_episode_callbacks_run_on_workers(nenyax_env_t *env)
{
    struct pol p;
    struct trainer t;
    nenyax_policy_t *policy;
    nenyax_string_t r = {NULL, 0};
    const char *o = "{\"rounds\":1,\"group_size\":2,\"batch\":4,\"eval_tasks\":4,\"concurrency\":2}";
    printf("act_episode with NENYAX_THREAD_SAFE runs on the rollout threads\n");
    pol_init(&p);
    trainer_init(&t);
    policy = episode_policy(&p, NENYAX_THREAD_SAFE);
    train_grpo(env, policy, &t, o, &r);
    CHECK(p.calls > 0 && p.off_home == p.calls);
    nenyax_string_free(&r);
    nenyax_policy_free(policy);
}

static void rollout_context_reaches_the_callback(nenyax_env_t *env)
{
    struct pol p;
    nenyax_policy_t *policy;
    nenyax_string_t t1 = {NULL, 0}, t2 = {NULL, 0};
    uint64_t d1;
    const char *opts = "{\"seed\":5,\"context\":{\"phase\":\"train\",\"round\":2,\"group\":1,"
                       "\"member\":3}}";
    printf("nenyax_env_rollout passes its context to act_episode\n");
    pol_init(&p);
    policy = episode_policy(&p, 0);
    REQUIRE_OK(nenyax_env_rollout(env, policy, opts, strlen(opts), &t1));
    CHECK(p.last.phase == NENYAX_PHASE_TRAIN && p.last.round == 2 && p.last.group == 1 &&
          p.last.member == 3);
    CHECK(p.last.has_seed && p.last.seed == 5);
    CHECK(p.calls >= 1 && p.last.step == (uint64_t)(p.calls - 1));
    CHECK(p.calls < 2 || p.last_sample_seed[0] != p.last_sample_seed[1]);
    /* The record became an action call of the trajectory, training-ready. */
    CHECK(find_bytes(t1.ptr, t1.len, "\"prompt_token_ids\":[101,216]") != NULL);
    CHECK(find_bytes(t1.ptr, t1.len, "\"episode\":{") != NULL);
    d1 = p.digest;
    REQUIRE_OK(nenyax_env_rollout(env, policy, opts, strlen(opts), &t2));
    CHECK(p.digest == 2 * d1); /* the same draws again */
    nenyax_string_free(&t1), nenyax_string_free(&t2);
    nenyax_policy_free(policy);
}

static void version_one_vtables_still_work(nenyax_env_t *env)
{
    /* A version-1 vtable is three fields; placed against an inaccessible page, any read past
     * them would crash this program. */
    struct v1 {
        uint32_t version;
        nenyax_act_fn act;
        nenyax_chat_fn chat;
    } *vt;
    long page = sysconf(_SC_PAGESIZE);
    char *mem = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    nenyax_policy_t *policy = NULL;
    nenyax_string_t t = {NULL, 0};
    nenyax_policy_vtable_t v2_as_v1 = {NENYAX_VTABLE_VERSION, act_bisect, NULL, act_never, NULL};
    printf("version-1 policy vtables are read only as far as their three fields\n");
    REQUIRE(mem != MAP_FAILED);
    REQUIRE(mprotect(mem + page, (size_t)page, PROT_NONE) == 0);
    vt = (struct v1 *)(mem + page - sizeof *vt);
    vt->version = NENYAX_VTABLE_VERSION;
    vt->act = act_bisect;
    vt->chat = NULL;
    REQUIRE_OK(nenyax_policy_new((const nenyax_policy_vtable_t *)(const void *)vt, NULL, NULL, 0,
                                 &policy));
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\":3}"), &t));
    CHECK(json_is_null(t.ptr, t.len, "error"));
    CHECK(trajectory_score(t.ptr, t.len) >= 0.0);
    nenyax_string_free(&t);
    nenyax_policy_free(policy);
    munmap(mem, (size_t)page * 2);

    /* A full struct saying version 1: act_episode is not even looked at. */
    policy = NULL;
    REQUIRE_OK(nenyax_policy_new(&v2_as_v1, NULL, NULL, 0, &policy));
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\":3}"), &t));
    CHECK(json_is_null(t.ptr, t.len, "error"));
    nenyax_string_free(&t);
    nenyax_policy_free(policy);
}

static void failing_and_nan_trainers_fail_their_rounds(nenyax_env_t *env)
{
    struct pol p;
    struct trainer t;
    nenyax_policy_t *policy;
    nenyax_string_t r = {NULL, 0};
    const char *o = "{\"rounds\":3,\"group_size\":4,\"batch\":3,\"eval_tasks\":4,\"concurrency\":2}";
    printf("a trainer whose logprobs fails, or returns NaN, fails its rounds (in the report)\n");
    pol_init(&p);
    policy = episode_policy(&p, 0);

    trainer_init(&t);
    t.fail_after_applies = 1; /* round 1 updates; rounds 2 and 3 fail */
    train_grpo(env, policy, &t, o, &r);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"kept\",\"round\":1,") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"failed\",\"round\":2,") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"failed\",\"round\":3,") != NULL);
    CHECK(count_bytes(r.ptr, r.len, "\"error\":\"TrainingError: ") == 2);
    CHECK(count_bytes(r.ptr, r.len, "out of GPU memory") >= 2);
    CHECK(t.restores == 2); /* what the failed rounds did was undone */
    nenyax_string_free(&r);

    trainer_init(&t);
    t.nan_after_applies = 1;
    train_grpo(env, policy, &t, o, &r);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"kept\",\"round\":1,") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"failed\",\"round\":2,") != NULL);
    CHECK(count_bytes(r.ptr, r.len, "\"error\":\"TrainingError: ") == 2);
    CHECK(find_bytes(r.ptr, r.len, "log-probabilities NaN") != NULL);
    nenyax_string_free(&r);
    nenyax_policy_free(policy);
}

/* ------------------------------------------------------------------------------------------
 * a host learner */

struct learner {
    long updates, snapshots, restores, groups, trajectories;
    long fail_at; /* update number (1-based) that fails; 0: none */
};

static int32_t hl_update(void *user_data, const char *groups, size_t len, nenyax_reply_t *report)
{
    struct learner *l = user_data;
    char text[128];
    long g = (long)count_bytes(groups, len, "\"trajectories\":");
    long t = (long)count_bytes(groups, len, "\"env_id\":");
    l->updates++;
    l->groups += g;
    l->trajectories += t;
    if (l->updates == l->fail_at) {
        reply_text(report, "simulated learner failure");
        return 2;
    }
    snprintf(text, sizeof text, "{\"metrics\":{\"groups_seen\":%ld,\"trajectories_seen\":%ld}}",
             g, t);
    reply_text(report, text);
    return 0;
}

static int32_t hl_snapshot(void *user_data, nenyax_reply_t *error)
{
    (void)error;
    ((struct learner *)user_data)->snapshots++;
    return 0;
}

static int32_t hl_restore(void *user_data, nenyax_reply_t *error)
{
    (void)error;
    ((struct learner *)user_data)->restores++;
    return 0;
}

static void a_host_learner_is_called_with_its_groups(nenyax_env_t *env)
{
    nenyax_learner_vtable_t vt = {NENYAX_LEARNER_VTABLE_VERSION, hl_update, hl_snapshot,
                                  hl_restore};
    nenyax_policy_vtable_t pv = {NENYAX_VTABLE_VERSION, act_bisect, NULL, NULL, NULL};
    nenyax_policy_t *policy = NULL;
    nenyax_learner_t *learner = NULL;
    nenyax_string_t r = {NULL, 0};
    struct learner l;
    int freed = 0;
    const char *o = "{\"rounds\":3,\"group_size\":3,\"batch\":2,\"eval_tasks\":4,\"concurrency\":2}";
    printf("a host learner: update gets every round's groups, snapshot/restore gate it\n");
    memset(&l, 0, sizeof l);
    REQUIRE_OK(nenyax_policy_new(&pv, NULL, NULL, 0, &policy));
    REQUIRE_OK(nenyax_learner_custom(S("recorder"), &vt, &l, count_free, policy, &learner));
    (void)freed;
    REQUIRE_OK(nenyax_train(env, learner, o, strlen(o), &r));
    CHECK(l.updates == 3 && l.groups == 6 && l.trajectories == 18);
    CHECK(l.snapshots == 3);
    CHECK(find_bytes(r.ptr, r.len, "\"groups_seen\":2.0") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "\"name\":\"recorder\"") != NULL);
    nenyax_string_free(&r);
    nenyax_learner_free(learner);

    /* A failing update fails its round, which is restored; the next round runs. */
    memset(&l, 0, sizeof l);
    l.fail_at = 2;
    learner = NULL;
    REQUIRE_OK(nenyax_learner_custom(S("flaky"), &vt, &l, count_free, policy, &learner));
    REQUIRE_OK(nenyax_train(env, learner, o, strlen(o), &r));
    CHECK(l.updates == 3 && l.restores == 1);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"failed\",\"round\":2,") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "simulated learner failure") != NULL);
    CHECK(find_bytes(r.ptr, r.len, "\"outcome\":\"kept\",\"round\":3,") != NULL);
    nenyax_string_free(&r);
    nenyax_learner_free(learner);
    nenyax_policy_free(policy);
}

/* ------------------------------------------------------------------------------------------
 * a per-episode chat policy: one token per message, so turns join */

static int64_t token_of(const char *role, const char *content)
{
    uint64_t h = 1469598103934665603ULL;
    const char *s;
    for (s = role; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ 0xFF) * 1099511628211ULL;
    for (s = content; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (int64_t)(h % 1000000) + 1000;
}

static long chat_calls_off_home;
static pthread_t chat_home;

static int32_t chat_guess(void *user_data, const nenyax_episode_t *ep, const char *messages,
                          size_t len, nenyax_reply_t *reply, nenyax_reply_t *record)
{
    char content[2048], role[32], text[16], rec[4096];
    const char *p = messages, *end = messages + len;
    size_t n;
    long guess = 1 + (long)(mix(ep->sample_seed) % 16);
    (void)user_data;
    chat_calls_off_home += !pthread_equal(pthread_self(), chat_home);
    n = (size_t)snprintf(rec, sizeof rec, "{\"prompt_token_ids\":[");
    /* Messages serialise as {"content": ..., "role": ...}. */
    while ((p = find_bytes(p, (size_t)(end - p), "\"content\":")) != NULL) {
        const char *r;
        if (json_string_at(p + 10, end, content, sizeof content) < 0) break;
        r = find_bytes(p, (size_t)(end - p), "\"role\":");
        if (r == NULL || json_string_at(r + 7, end, role, sizeof role) < 0) break;
        n += (size_t)snprintf(rec + n, sizeof rec - n, "%s%lld", rec[n - 1] == '[' ? "" : ",",
                              (long long)token_of(role, content));
        p = r + 7;
    }
    snprintf(text, sizeof text, "%ld", guess);
    snprintf(rec + n, sizeof rec - n,
             "],\"completion_token_ids\":[%lld],\"completion_logprobs\":[%.17g]}",
             (long long)token_of("assistant", text), -log(16.0));
    reply_text(reply, text);
    reply_text(record, rec);
    return 0;
}

static void chat_episode_turns_join_into_rows(nenyax_env_t *env)
{
    nenyax_policy_vtable_t vt = {NENYAX_POLICY_VTABLE_VERSION, NULL, NULL, NULL, chat_guess};
    nenyax_policy_t *policy = NULL;
    nenyax_string_t t = {NULL, 0}, r = {NULL, 0};
    struct trainer tr;
    const char *o = "{\"rounds\":2,\"group_size\":4,\"batch\":3,\"eval_tasks\":4,\"concurrency\":2}";
    printf("chat_episode: the recorded token ids make joined, trainable chat rows\n");
    chat_home = pthread_self();
    REQUIRE_OK(nenyax_policy_new(&vt, NULL, NULL, 0, &policy));
    REQUIRE_OK(nenyax_env_rollout(env, policy, S("{\"seed\":11}"), &t));
    CHECK(json_is_null(t.ptr, t.len, "error"));
    CHECK(count_bytes(t.ptr, t.len, "\"prompt_token_ids\":[") >= 1);
    CHECK(count_bytes(t.ptr, t.len, "\"completion_logprobs\":[-2.77") >= 1);
    nenyax_string_free(&t);

    trainer_init(&tr);
    tr.chat = 1;
    train_grpo(env, policy, &tr, o, &r);
    CHECK(count_bytes(r.ptr, r.len, "\"outcome\":\"failed\"") == 0);
    CHECK(count_bytes(r.ptr, r.len, "\"masked\":{}") == 2); /* every trace joined, both rounds */
    CHECK(tr.apply_calls == 2 && tr.bad_layout == 0 && tr.bad_grad == 0 && tr.masked > 0);
    CHECK(chat_calls_off_home == 0);
    nenyax_string_free(&r);
    nenyax_policy_free(policy);
}

/* ------------------------------------------------------------------------------------------ */

static void the_builtin_policy_trains_without_a_host_trainer(nenyax_env_t *env)
{
    nenyax_learner_t *learner = NULL;
    nenyax_string_t r = {NULL, 0};
    const char *o = "{\"rounds\":2,\"group_size\":4,\"batch\":4,\"eval_tasks\":4}";
    printf("the built-in softmax policy (trainer NULL)\n");
    REQUIRE_OK(nenyax_learner_new(S("{\"use\":\"reinforce\",\"trainer\":{\"lr\":0.05}}"), env,
                                  NULL, NULL, NULL, NULL, &learner));
    REQUIRE_OK(nenyax_train(env, learner, o, strlen(o), &r));
    CHECK(count_bytes(r.ptr, r.len, "\"outcome\":\"failed\"") == 0);
    CHECK(find_bytes(r.ptr, r.len, "softmax-linear") != NULL);
    nenyax_string_free(&r);
    nenyax_learner_free(learner);
}

static void bad_setups_are_typed_errors(nenyax_env_t *env)
{
    struct pol p;
    struct trainer t;
    nenyax_policy_t *policy, *chat = NULL;
    nenyax_learner_t *learner = NULL;
    nenyax_string_t r = {NULL, 0};
    nenyax_trainer_vtable_t v9 = {9, tr_logprobs, tr_apply, NULL, NULL};
    nenyax_trainer_vtable_t half = {NENYAX_TRAINER_VTABLE_VERSION, tr_logprobs, tr_apply,
                                    tr_snapshot, NULL};
    nenyax_learner_vtable_t lv = {NENYAX_LEARNER_VTABLE_VERSION, NULL, NULL, NULL};
    int freed = 0;
    printf("bad learners, knobs, options and NULLs are typed errors\n");
    /* nenyax_learner_json takes every knob nenyax_pg_loss takes (a bare loss config is a `pg`
     * learner) and refuses a typo, naming it and the knob it meant. */
    CHECK_OK(nenyax_learner_json(
        S("{\"loss\": \"ppo_clip\", \"clip_low\": 0.2, \"clip_high\": 0.28, \"dual_clip_c\": 3, "
          "\"agg\": \"seq-mean-token-sum-norm\", \"agg_divisor\": 64, \"kl\": {\"estimator\": "
          "\"k3\", \"coef\": 0.01, \"clamp\": true}, \"entropy_coef\": 0.001}"),
        &r));
    CHECK(r.ptr && strstr(r.ptr, "\"learner\":\"pg\"") && strstr(r.ptr, "\"agg_divisor\":64"));
    nenyax_string_free(&r);
    CHECK_STATUS_MSG(nenyax_learner_json(S("{\"learner\": \"dapo\", \"clip_hi\": 0.3}"), &r),
                     NENYAX_STATUS_CONFIG, "did you mean `clip_high`");
    pol_init(&p);
    trainer_init(&t);
    policy = episode_policy(&p, 0);

    CHECK_STATUS_MSG(nenyax_learner_new(S("grpoo"), env, policy, &TRAINER, &t, NULL, &learner),
                     NENYAX_STATUS_CONFIG, "did you mean `grpo`");
    CHECK_STATUS_MSG(nenyax_learner_new(S("{\"use\":\"grpo\",\"epoch\":2}"), env, policy, &TRAINER,
                                        &t, NULL, &learner),
                     NENYAX_STATUS_CONFIG, "`epochs`");
    CHECK_STATUS_MSG(nenyax_learner_new(S("tinker"), env, NULL, NULL, NULL, NULL, &learner),
                     NENYAX_STATUS_DRIVER_UNAVAILABLE, "tinker");
    CHECK_STATUS_MSG(nenyax_learner_new(S("grpo"), env, NULL, &TRAINER, &t, NULL, &learner),
                     NENYAX_STATUS_INVALID_ARGUMENT, "sampling policy");
    CHECK_STATUS_MSG(nenyax_learner_new(S("grpo"), env, policy, NULL, NULL, NULL, &learner),
                     NENYAX_STATUS_INVALID_ARGUMENT, "without a trainer");
    CHECK_STATUS_MSG(nenyax_learner_new(S("grpo"), NULL, NULL, NULL, NULL, NULL, &learner),
                     NENYAX_STATUS_CONFIG, "environment");
    CHECK_STATUS_MSG(nenyax_learner_new(S("incontext"), env, policy, NULL, NULL, NULL, &learner),
                     NENYAX_STATUS_INVALID_ARGUMENT, "chat policy");
    CHECK_STATUS_MSG(nenyax_learner_new(S("grpo"), env, policy, &v9, &freed, count_free, &learner),
                     NENYAX_STATUS_INVALID_ARGUMENT, "version 9");
    CHECK(freed == 1); /* user_data is the library's from the call on, also on failure */
    CHECK_STATUS_MSG(nenyax_learner_new(S("grpo"), env, policy, &half, &t, NULL, &learner),
                     NENYAX_STATUS_INVALID_ARGUMENT, "->restore");
    CHECK_STATUS(nenyax_learner_new(NULL, 4, env, policy, &TRAINER, &t, NULL, &learner),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_learner_new(S("grpo"), env, policy, &TRAINER, &t, NULL, NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(learner == NULL);
    freed = 0;
    CHECK_STATUS_MSG(nenyax_learner_custom(S("x"), &lv, &freed, count_free, policy, &learner),
                     NENYAX_STATUS_INVALID_ARGUMENT, "update");
    CHECK(freed == 1);
    CHECK_STATUS(nenyax_learner_custom(S("x"), NULL, NULL, NULL, policy, &learner),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_learner_custom(S("x"), &lv, NULL, NULL, NULL, &learner),
                 NENYAX_STATUS_INVALID_ARGUMENT);

    /* A chat policy for incontext is accepted; group_size 1 with grpo is not. */
    {
        nenyax_policy_vtable_t cv = {NENYAX_POLICY_VTABLE_VERSION, NULL, NULL, NULL, chat_guess};
        REQUIRE_OK(nenyax_policy_new(&cv, NULL, NULL, 0, &chat));
        CHECK_STATUS_MSG(nenyax_learner_new(S("incontext"), env, chat, NULL, NULL, NULL, &learner),
                         NENYAX_STATUS_INVALID_ARGUMENT, "per-episode");
        nenyax_policy_free(chat);
    }
    REQUIRE_OK(nenyax_learner_new(S("{\"use\":\"grpo\",\"epochs\":2}"), env, policy, &TRAINER,
                                  &t, NULL, &learner));
    CHECK_STATUS_MSG(nenyax_train(env, learner, S("{\"group_size\":1}"), &r),
                     NENYAX_STATUS_CONFIG, "group_size");
    CHECK_STATUS_MSG(nenyax_train(env, learner, S("{\"roundz\":1}"), &r), NENYAX_STATUS_CONFIG,
                     "roundz");
    CHECK_STATUS(nenyax_train(env, learner, S("{\"rounds\":"), &r),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_train(env, learner, S("[1]"), &r), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_train(NULL, learner, NULL, 0, &r), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_train(env, NULL, NULL, 0, &r), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_train(env, learner, NULL, 0, NULL), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(r.ptr == NULL);
    CHECK(t.logprobs_calls == 0); /* nothing ran */
    nenyax_learner_free(learner);
    nenyax_learner_free(NULL);
    nenyax_policy_free(policy);
}

/* A run config file read as `nenyax train --config` reads it: normalised JSON a program can
 * hand to nenyax_learner_new and nenyax_train; overrides by dotted key; a typo names the file,
 * the line and the key. */
static void a_config_file_is_read_checked_and_overridden(void)
{
    char path[] = "/tmp/nenyax-test-config-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const char *good = "[env]\nuri = \"builtin:guess?size=40\"\n[learner]\nuse = \"grpo\"\n"
                       "trainer = \"host\"\n[train]\nrounds = 3\n";
    REQUIRE(write(fd, good, strlen(good)) == (ssize_t)strlen(good));
    close(fd);
    nenyax_string_t out = {0};
    CHECK_OK(nenyax_config_load(path, strlen(path), S("{\"train.gate\": false}"), &out));
    CHECK(out.ptr && strstr(out.ptr, "\"uri\":\"builtin:guess?size=40\""));
    CHECK(out.ptr && strstr(out.ptr, "\"rounds\":3"));
    CHECK(out.ptr && strstr(out.ptr, "\"gate\":false"));
    CHECK(out.ptr && strstr(out.ptr, "\"trainer\":\"host\""));
    nenyax_string_free(&out);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("[env]\nuri = \"builtin:guess\"\n[train]\nrouns = 3\n", f);
    fclose(f);
    CHECK_STATUS_MSG(nenyax_config_load(path, strlen(path), NULL, 0, &out), NENYAX_STATUS_CONFIG,
                     ":4:");
    CHECK_STATUS_MSG(nenyax_config_load(path, strlen(path), NULL, 0, &out), NENYAX_STATUS_CONFIG,
                     "rounds");
    CHECK_STATUS(nenyax_config_load(path, strlen(path), S("[1]"), &out),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_config_load(NULL, 3, NULL, 0, &out), NENYAX_STATUS_INVALID_ARGUMENT);
    unlink(path);
}

int main(void)
{
    nenyax_env_t *env = NULL;
    REQUIRE_OK(nenyax_env_load(GUESS, strlen(GUESS), &env));
    episodes_are_deterministic_whatever_the_threads(env);
    thread_safe_episode_callbacks_run_on_workers(env);
    rollout_context_reaches_the_callback(env);
    version_one_vtables_still_work(env);
    failing_and_nan_trainers_fail_their_rounds(env);
    a_host_learner_is_called_with_its_groups(env);
    chat_episode_turns_join_into_rows(env);
    the_builtin_policy_trains_without_a_host_trainer(env);
    bad_setups_are_typed_errors(env);
    a_config_file_is_read_checked_and_overridden();
    nenyax_env_free(env);
    return finish("test_train");
}
