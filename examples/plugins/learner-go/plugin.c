// The C side of the Go learner: the descriptor and vtable Nenyax reads, and the entry point it
// calls. Definitions live here rather than in main.go's preamble because cgo allows only
// declarations there once a file uses //export. Only types come from nenyax.h: a plugin never
// calls nenyax_* (it is loaded by nenyax itself, which exports nothing to it).
#include <stddef.h>
#include <stdint.h>
#include "nenyax.h"
#include "_cgo_export.h"

// cgo exports take non-const pointers; these shims give the vtable its exact signatures.
static int32_t act(void *ud, const char *in, size_t len, const nenyax_plugin_out_t *out) {
    return goAct(ud, (char *)in, len, (nenyax_plugin_out_t *)out);
}
static int32_t update(void *ud, const char *in, size_t len, const nenyax_plugin_out_t *out) {
    return goUpdate(ud, (char *)in, len, (nenyax_plugin_out_t *)out);
}
static int32_t snapshot(void *ud, const nenyax_plugin_out_t *out) {
    return goSnapshot(ud, (nenyax_plugin_out_t *)out);
}
static int32_t restore(void *ud, const nenyax_plugin_out_t *out) {
    return goRestore(ud, (nenyax_plugin_out_t *)out);
}

static nenyax_learner_plugin_vtable_t VTABLE = {
    NENYAX_LEARNER_PLUGIN_VTABLE_VERSION,
    act,      // act: the tabular policy
    NULL,     // chat: a step-environment learner has none
    update,   // update: REINFORCE with the group's mean score as baseline
    snapshot, // snapshot / restore: gating can revert a bad update
    restore,
    NULL,     // drop: reserved
};

static nenyax_plugin_t PLUGINS[1];

int32_t nenyax_plugin_entry(uint32_t host_abi_version, const nenyax_plugin_t **plugins,
                            size_t *count) {
    if (host_abi_version != NENYAX_PLUGIN_ABI_VERSION) return 1;
    PLUGINS[0].abi_version = NENYAX_PLUGIN_ABI_VERSION;
    PLUGINS[0].kind = NENYAX_PLUGIN_KIND_LEARNER;
    // GOTAB_VTABLE_VERSION lets a test build a copy that claims another version.
#ifdef GOTAB_VTABLE_VERSION
    VTABLE.version = GOTAB_VTABLE_VERSION;
#endif
    PLUGINS[0].kind_version = NENYAX_LEARNER_PLUGIN_VTABLE_VERSION;
    PLUGINS[0].flags = 0; // not thread-safe: the host makes one call at a time
    PLUGINS[0].name = goName();
    PLUGINS[0].version = "0.1.0";
    PLUGINS[0].vtable = &VTABLE;
    PLUGINS[0].user_data = NULL;
    *plugins = PLUGINS;
    *count = 1;
    return 0;
}

// Go cannot call a C function pointer; this does it for main.go.
void gotab_write(const nenyax_plugin_out_t *out, const char *ptr, size_t len) {
    if (out && out->write) out->write(out->ctx, ptr, len);
}
