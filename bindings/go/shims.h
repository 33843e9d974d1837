/* C side of the Go callbacks: trampolines with the exact nenyax.h signatures, which forward to
 * the //export-ed Go functions in callbacks.go. user_data is a runtime/cgo.Handle (never 0). */
#ifndef NENYAX_GO_SHIMS_H
#define NENYAX_GO_SHIMS_H

#include <stdint.h>
#include "nenyax.h"

/* nenyax_policy_new with the Go trampolines (act, or chat when `chat` is non-zero), the handle as
 * user_data, and flags 0 (not NENYAX_THREAD_SAFE). */
nenyax_error_t *nenyax_go_policy_new(int chat, uintptr_t handle, nenyax_policy_t **out);

/* nenyax_runner_run with the Go trajectory sink when `sink` is non-zero. */
nenyax_error_t *nenyax_go_runner_run(const nenyax_runner_t *runner, const nenyax_env_t *env,
                                     const nenyax_policy_t *policy, const char *options_json,
                                     size_t options_len, uintptr_t sink, nenyax_string_t *out);

/* nenyax_policy_new as nenyax_go_policy_new, with `flags` (NENYAX_THREAD_SAFE for a Go function
 * that may run on the library's threads). */
nenyax_error_t *nenyax_go_policy_new_flags(int chat, uintptr_t handle, uint32_t flags,
                                           nenyax_policy_t **out);

/* nenyax_env_define_tasks with the Go score (and, when `reference` is non-zero, reference)
 * trampolines, the handle as user_data, and NENYAX_THREAD_SAFE. */
nenyax_error_t *nenyax_go_define_tasks(const char *name, size_t name_len, const char *tasks,
                                       size_t tasks_len, uintptr_t handle, int reference,
                                       nenyax_env_t **out);

/* nenyax_env_define_stateful with the Go reset/observe/step trampolines and NENYAX_THREAD_SAFE. */
nenyax_error_t *nenyax_go_define_stateful(const char *name, size_t name_len, uintptr_t handle,
                                          size_t max_steps, nenyax_env_t **out);

/* nenyax_policy_new with the Go per-episode trampoline (act_episode, or chat_episode when
 * `chat` is non-zero), the handle as user_data, and `flags`. */
nenyax_error_t *nenyax_go_episode_policy_new(int chat, uintptr_t handle, uint32_t flags,
                                             nenyax_policy_t **out);

/* nenyax_learner_new with the Go trainer trampolines when `trainer` is non-zero (a handle;
 * snapshot/restore too when `snapshots` is non-zero), else no trainer. */
nenyax_error_t *nenyax_go_learner_new(const char *config, size_t config_len,
                                      const nenyax_env_t *env, const nenyax_policy_t *policy,
                                      uintptr_t trainer, int snapshots, nenyax_learner_t **out);

/* nenyax_learner_custom with the Go learner trampolines (snapshot/restore when `snapshots`). */
nenyax_error_t *nenyax_go_learner_custom(const char *name, size_t name_len, uintptr_t handle,
                                         int snapshots, const nenyax_policy_t *policy,
                                         nenyax_learner_t **out);

#ifdef NENYAX_PG_BATCH_VERSION
#define NENYAX_GO_HEADER_HAS_PG_BATCH 1
#else
/* A nenyax.h from before nenyax_pg_batch_t: the same constants and struct (copied from the
 * header that introduced them), so this package builds against either; nenyax_go_pg_loss_batch
 * then runs the batch through the per-case functions. */
#define NENYAX_PG_BATCH_VERSION 1
#define NENYAX_DTYPE_F32 1
#define NENYAX_DTYPE_F64 2
#define NENYAX_MEMORY_HOST 0
#define NENYAX_MEMORY_CUDA 1
#define NENYAX_DEVICE_CPU 0
#define NENYAX_DEVICE_CUDA 1
typedef struct nenyax_pg_batch_t {
  uint32_t version, dtype, memory, device;
  const void *logp, *old_logp, *ref_logp, *entropy;
  const uint8_t *mask;
  const void *advantages;
  size_t advantages_len, rows, width;
  void *grad_logp, *grad_entropy;
  double *stats_device;
  void *stream;
} nenyax_pg_batch_t;
#endif

/* nenyax_pg_loss_batch (or, with an older header, the per-case function it stands for). */
nenyax_error_t *nenyax_go_pg_loss_batch(const nenyax_pg_batch_t *batch, const char *config,
                                        size_t config_len, nenyax_pg_stats_t *stats);

#endif
