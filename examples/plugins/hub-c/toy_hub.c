/* toy_hub: a Nenyax environment hub plugin in C over a small static catalogue of the built-in
 * environments. `nenyax search toy_hub WORDS` lists the entries whose name or description
 * contains WORDS (case-insensitive substring); `nenyax fetch toy_hub NAME` prints the URI to load.
 * It includes nenyax.h for the types only and never calls libnenyax (docs/plugins-abi.md).
 *
 * Compile-time switches, used by tests/library_sinks.rs:
 *   -DEXAMPLE_HUB_VTABLE_VERSION=2  claim another hub vtable version (Nenyax must refuse it)
 *   -DEXAMPLE_BAD_LISTINGS          reply to search with a JSON object, not a list (plugin-check fails)
 */
#include "../../../include/nenyax.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#ifndef EXAMPLE_HUB_VTABLE_VERSION
#define EXAMPLE_HUB_VTABLE_VERSION NENYAX_HUB_VTABLE_VERSION
#endif

/* The catalogue: what `search` lists and `fetch` resolves. */
static const struct {
    const char *name;
    const char *uri;
    const char *description;
} CATALOGUE[] = {
    {"arithmetic-20", "builtin:arithmetic?size=20", "twenty two-digit arithmetic problems"},
    {"arithmetic-hard", "builtin:arithmetic?size=50&digits=4", "fifty four-digit arithmetic problems"},
    {"digits-max", "builtin:digits?rules=max&length=8", "find the largest of eight digits"},
    {"guess-1000", "builtin:guess?high=1000", "guess a number from 1 to 1000 with hints"},
    {"echo", "builtin:echo", "repeat the prompt back (a smoke test)"},
};
#define CATALOGUE_LEN (sizeof CATALOGUE / sizeof CATALOGUE[0])

static void put(const nenyax_plugin_out_t *out, const char *s) {
    out->write(out->ctx, s, strlen(s));
}

/* Case-insensitive: does `hay` contain the first `len` bytes of `needle`? */
static int contains(const char *hay, const char *needle, size_t len) {
    if (len == 0) return 1;
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < len && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == len) return 1;
    }
    return 0;
}

/* The catalogue's strings hold no quotes or backslashes, so they go into JSON as they are. */
static int32_t search(void *user_data, const char *query, size_t len, size_t limit,
                      const nenyax_plugin_out_t *out) {
    (void)user_data;
#ifdef EXAMPLE_BAD_LISTINGS
    if (limit) { /* always: the rest stays compiled */
        put(out, "{\"name\": \"not a list\"}");
        return 0;
    }
#endif
    size_t shown = 0;
    put(out, "[");
    for (size_t i = 0; i < CATALOGUE_LEN && shown < limit; i++) {
        if (!contains(CATALOGUE[i].name, query, len) && !contains(CATALOGUE[i].description, query, len))
            continue;
        char entry[512];
        snprintf(entry, sizeof entry,
                 "%s{\"name\":\"%s\",\"uri\":\"%s\",\"description\":\"%s\",\"meta\":{\"source\":\"toy_hub\"}}",
                 shown ? "," : "", CATALOGUE[i].name, CATALOGUE[i].uri, CATALOGUE[i].description);
        put(out, entry);
        shown++;
    }
    put(out, "]");
    return 0;
}

static int32_t fetch(void *user_data, const char *name, size_t len, const nenyax_plugin_out_t *out) {
    (void)user_data;
    for (size_t i = 0; i < CATALOGUE_LEN; i++) {
        if (strlen(CATALOGUE[i].name) == len && memcmp(CATALOGUE[i].name, name, len) == 0) {
#ifdef EXAMPLE_UNKNOWN_SCHEME
            put(out, "nosuchdriver:"); /* a URI no driver serves: plugin-check must catch it */
#endif
            put(out, CATALOGUE[i].uri);
            return 0;
        }
    }
    put(out, "toy_hub has no entry named `");
    out->write(out->ctx, name, len);
    put(out, "`; `nenyax search toy_hub` lists them");
    return 1;
}

static const nenyax_hub_vtable_t VTABLE = {
    EXAMPLE_HUB_VTABLE_VERSION, search, fetch, NULL,
};

static const nenyax_plugin_t PLUGINS[] = {{
    NENYAX_PLUGIN_ABI_VERSION,
    NENYAX_PLUGIN_KIND_HUB,
    EXAMPLE_HUB_VTABLE_VERSION,
    NENYAX_PLUGIN_THREAD_SAFE, /* no state: calls may run at once */
    "toy_hub",
    "0.1.0",
    &VTABLE,
    NULL,
}};

int32_t nenyax_plugin_entry(uint32_t host_abi_version, const nenyax_plugin_t **plugins, size_t *count) {
    if (host_abi_version != NENYAX_PLUGIN_ABI_VERSION) return 1;
    *plugins = PLUGINS;
    *count = sizeof PLUGINS / sizeof PLUGINS[0];
    return 0;
}
