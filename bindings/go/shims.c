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
