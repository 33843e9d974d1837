//go:build nenyax_lib

// The C side of the in-process gosums driver: the descriptor and vtable Nenyax reads, and its
// entry point. Only types come from nenyax.h: a plugin never calls nenyax_*.
#include <stddef.h>
#include <stdint.h>
#include "nenyax.h"
#include "_cgo_export.h"

// Instances are cgo handles (integers); the vtable passes them as void *.
static int32_t open_instance(void *ud, void **instance, const nenyax_plugin_out_t *out) {
    (void)ud;
    uintptr_t h = 0;
    int32_t rc = goOpen(&h, (nenyax_plugin_out_t *)out);
    *instance = (void *)h;
    return rc;
}
static int32_t call(void *ud, void *instance, const char *req, size_t len,
                    const nenyax_plugin_out_t *out) {
    (void)ud;
    return goCall((uintptr_t)instance, (char *)req, len, (nenyax_plugin_out_t *)out);
}
static void close_instance(void *ud, void *instance) {
    (void)ud;
    goClose((uintptr_t)instance);
}

static nenyax_driver_vtable_t VTABLE = {
    NENYAX_DRIVER_VTABLE_VERSION,
    open_instance,
    call,
    close_instance,
    NULL, // drop: reserved
};

static nenyax_plugin_t PLUGINS[1];

int32_t nenyax_plugin_entry(uint32_t host_abi_version, const nenyax_plugin_t **plugins,
                            size_t *count) {
    if (host_abi_version != NENYAX_PLUGIN_ABI_VERSION) return 1;
    PLUGINS[0].abi_version = NENYAX_PLUGIN_ABI_VERSION;
    PLUGINS[0].kind = NENYAX_PLUGIN_KIND_DRIVER;
    PLUGINS[0].kind_version = NENYAX_DRIVER_VTABLE_VERSION;
    // GOSUMS_VTABLE_VERSION lets a test build a copy that claims another version.
#ifdef GOSUMS_VTABLE_VERSION
    VTABLE.version = GOSUMS_VTABLE_VERSION;
#endif
    // Instances share nothing, so different ones may run at once (one is never used by two
    // threads at a time: the host's pool hands each to one worker).
    PLUGINS[0].flags = NENYAX_PLUGIN_THREAD_SAFE;
    PLUGINS[0].name = "gosums";
    PLUGINS[0].version = "0.1.0";
    PLUGINS[0].vtable = &VTABLE;
    PLUGINS[0].user_data = NULL;
    *plugins = PLUGINS;
    *count = 1;
    return 0;
}

// Go cannot call a C function pointer; this does it for lib.go.
void gosums_write(const nenyax_plugin_out_t *out, const char *ptr, size_t len) {
    if (out && out->write) out->write(out->ctx, ptr, len);
}
