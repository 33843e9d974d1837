#include "shims.h"
#include "_cgo_export.h"

static int32_t go_act(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply) {
    return nenyaxGoAct((uintptr_t)user_data, (char *)obs, len, reply);
}

static int32_t go_chat(void *user_data, const char *messages, size_t len, nenyax_reply_t *reply) {
    return nenyaxGoChat((uintptr_t)user_data, (char *)messages, len, reply);
}

static void go_free(void *user_data) { nenyaxGoFree((uintptr_t)user_data); }

static int32_t go_sink(void *user_data, size_t index, const char *json, size_t len) {
    return nenyaxGoSink((uintptr_t)user_data, index, (char *)json, len);
}

nenyax_error_t *nenyax_go_policy_new(int chat, uintptr_t handle, nenyax_policy_t **out) {
    nenyax_policy_vtable_t vt;
    vt.version = NENYAX_VTABLE_VERSION;
    vt.act = chat ? NULL : go_act;
    vt.chat = chat ? go_chat : NULL;
    return nenyax_policy_new(&vt, (void *)handle, go_free, 0, out);
}

nenyax_error_t *nenyax_go_runner_run(const nenyax_runner_t *runner, const nenyax_env_t *env,
                                     const nenyax_policy_t *policy, const char *options_json,
                                     size_t options_len, uintptr_t sink, nenyax_string_t *out) {
    return nenyax_runner_run(runner, env, policy, options_json, options_len,
                             sink ? go_sink : NULL, (void *)sink, out);
}

nenyax_error_t *nenyax_go_policy_new_flags(int chat, uintptr_t handle, uint32_t flags,
                                           nenyax_policy_t **out) {
    nenyax_policy_vtable_t vt;
    vt.version = NENYAX_VTABLE_VERSION;
    vt.act = chat ? NULL : go_act;
    vt.chat = chat ? go_chat : NULL;
    return nenyax_policy_new(&vt, (void *)handle, go_free, flags, out);
}

static int32_t go_act_episode(void *user_data, const nenyax_episode_t *episode, const char *obs,
                              size_t len, nenyax_reply_t *reply, nenyax_reply_t *record) {
    return nenyaxGoActEpisode((uintptr_t)user_data, (nenyax_episode_t *)episode, (char *)obs, len,
                              reply, record);
}

static int32_t go_chat_episode(void *user_data, const nenyax_episode_t *episode,
                               const char *messages, size_t len, nenyax_reply_t *reply,
                               nenyax_reply_t *record) {
    return nenyaxGoChatEpisode((uintptr_t)user_data, (nenyax_episode_t *)episode, (char *)messages,
                               len, reply, record);
}

nenyax_error_t *nenyax_go_episode_policy_new(int chat, uintptr_t handle, uint32_t flags,
                                             nenyax_policy_t **out) {
    nenyax_policy_vtable_t vt;
    vt.version = NENYAX_POLICY_VTABLE_VERSION;
    vt.act = NULL;
    vt.chat = NULL;
    vt.act_episode = chat ? NULL : go_act_episode;
    vt.chat_episode = chat ? go_chat_episode : NULL;
    return nenyax_policy_new(&vt, (void *)handle, go_free, flags, out);
}

static int32_t go_logprobs(void *user_data, const nenyax_trace_batch_t *batch, bool reference,
                           double *out, nenyax_reply_t *error) {
    return nenyaxGoTrainerLogprobs((uintptr_t)user_data, (nenyax_trace_batch_t *)batch, reference,
                                   out, error);
}

static int32_t go_apply(void *user_data, const nenyax_trace_batch_t *batch, const double *grad,
                        nenyax_reply_t *error) {
    return nenyaxGoTrainerApply((uintptr_t)user_data, (nenyax_trace_batch_t *)batch,
                                (double *)grad, error);
}

static int32_t go_snapshot(void *user_data, nenyax_reply_t *error) {
    return nenyaxGoSnapshot((uintptr_t)user_data, error);
}

static int32_t go_restore(void *user_data, nenyax_reply_t *error) {
    return nenyaxGoRestore((uintptr_t)user_data, error);
}

static int32_t go_update(void *user_data, const char *groups, size_t len, nenyax_reply_t *report) {
    return nenyaxGoLearnerUpdate((uintptr_t)user_data, (char *)groups, len, report);
}

nenyax_error_t *nenyax_go_learner_new(const char *config, size_t config_len,
                                      const nenyax_env_t *env, const nenyax_policy_t *policy,
                                      uintptr_t trainer, int snapshots, nenyax_learner_t **out) {
    nenyax_trainer_vtable_t vt;
    if (!trainer) {
        return nenyax_learner_new(config, config_len, env, policy, NULL, NULL, NULL, out);
    }
    vt.version = NENYAX_TRAINER_VTABLE_VERSION;
    vt.logprobs = go_logprobs;
    vt.apply = go_apply;
    vt.snapshot = snapshots ? go_snapshot : NULL;
    vt.restore = snapshots ? go_restore : NULL;
    return nenyax_learner_new(config, config_len, env, policy, &vt, (void *)trainer, go_free, out);
}

nenyax_error_t *nenyax_go_learner_custom(const char *name, size_t name_len, uintptr_t handle,
                                         int snapshots, const nenyax_policy_t *policy,
                                         nenyax_learner_t **out) {
    nenyax_learner_vtable_t vt;
    vt.version = NENYAX_LEARNER_VTABLE_VERSION;
    vt.update = go_update;
    vt.snapshot = snapshots ? go_snapshot : NULL;
    vt.restore = snapshots ? go_restore : NULL;
    return nenyax_learner_custom(name, name_len, &vt, (void *)handle, go_free, policy, out);
}

static int32_t go_score(void *user_data, const char *task, size_t task_len, const char *reply,
                        size_t reply_len, double *score_out, nenyax_reply_t *error) {
    return nenyaxGoScore((uintptr_t)user_data, (char *)task, task_len, (char *)reply, reply_len,
                         score_out, error);
}

static int32_t go_reference(void *user_data, const char *task, size_t len, nenyax_reply_t *reply) {
    return nenyaxGoReference((uintptr_t)user_data, (char *)task, len, reply);
}

static int32_t go_reset(void *user_data, int64_t seed, nenyax_reply_t *state_out) {
    return nenyaxGoReset((uintptr_t)user_data, seed, state_out);
}

static int32_t go_observe(void *user_data, const char *state, size_t len,
                          nenyax_reply_t *observation_out) {
    return nenyaxGoObserve((uintptr_t)user_data, (char *)state, len, observation_out);
}

static int32_t go_step(void *user_data, const char *state, size_t state_len, const char *action,
                       size_t action_len, nenyax_reply_t *state_out, double *reward_out,
                       bool *done_out) {
    return nenyaxGoStep((uintptr_t)user_data, (char *)state, state_len, (char *)action, action_len,
                        state_out, reward_out, done_out);
}

nenyax_error_t *nenyax_go_define_tasks(const char *name, size_t name_len, const char *tasks,
                                       size_t tasks_len, uintptr_t handle, int reference,
                                       nenyax_env_t **out) {
    nenyax_task_vtable_t vt;
    vt.version = NENYAX_VTABLE_VERSION;
    vt.score = go_score;
    vt.reference = reference ? go_reference : NULL;
    return nenyax_env_define_tasks(name, name_len, tasks, tasks_len, &vt, (void *)handle, go_free,
                                   NENYAX_THREAD_SAFE, out);
}

nenyax_error_t *nenyax_go_define_stateful(const char *name, size_t name_len, uintptr_t handle,
                                          size_t max_steps, nenyax_env_t **out) {
    nenyax_state_vtable_t vt;
    vt.version = NENYAX_VTABLE_VERSION;
    vt.reset = go_reset;
    vt.observe = go_observe;
    vt.step = go_step;
    return nenyax_env_define_stateful(name, name_len, &vt, (void *)handle, go_free,
                                      NENYAX_THREAD_SAFE, max_steps, out);
}

nenyax_error_t *nenyax_go_pg_loss_batch(const nenyax_pg_batch_t *b, const char *config,
                                        size_t config_len, nenyax_pg_stats_t *stats) {
#ifdef NENYAX_GO_HEADER_HAS_PG_BATCH
    return nenyax_pg_loss_batch(b, config, config_len, stats);
#else
    const int f64 = b->dtype == NENYAX_DTYPE_F64;
    if (b->memory == NENYAX_MEMORY_CUDA) {
        return f64 ? nenyax_pg_loss_cuda_f64(b->logp, b->old_logp, b->ref_logp, b->entropy, b->mask,
                                             b->advantages, b->advantages_len, b->rows, b->width,
                                             config, config_len, b->grad_logp, b->grad_entropy,
                                             b->stats_device, b->stream)
                   : nenyax_pg_loss_cuda_f32(b->logp, b->old_logp, b->ref_logp, b->entropy, b->mask,
                                             b->advantages, b->advantages_len, b->rows, b->width,
                                             config, config_len, b->grad_logp, b->grad_entropy,
                                             b->stats_device, b->stream);
    }
    if (b->device == NENYAX_DEVICE_CUDA && !f64) {
        return nenyax_pg_loss_cuda_host_f32(b->logp, b->old_logp, b->ref_logp, b->entropy, b->mask,
                                            b->advantages, b->advantages_len, b->rows, b->width,
                                            config, config_len, b->grad_logp, b->grad_entropy,
                                            stats);
    }
    return f64 ? nenyax_pg_loss(b->logp, b->old_logp, b->ref_logp, b->entropy, b->mask,
                                b->advantages, b->advantages_len, b->rows, b->width, config,
                                config_len, b->grad_logp, b->grad_entropy, stats)
               : nenyax_pg_loss_f32(b->logp, b->old_logp, b->ref_logp, b->entropy, b->mask,
                                    b->advantages, b->advantages_len, b->rows, b->width, config,
                                    config_len, b->grad_logp, b->grad_entropy, stats);
#endif
}
