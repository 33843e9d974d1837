/* jsonl_sink: a Nenyax telemetry sink plugin in C. It appends one JSON line per event to the file
 * named by the environment variable NENYAX_EXAMPLE_SINK_FILE:
 *   {"event":"start","run":{"kind":"run","name":...,"params":{...}}}
 *   {"event":"episode","env_id":"builtin:arithmetic","seed":3,"score":1.0,"model_calls":1}
 *   {"event":"metrics","step":0,"values":{"mean_score":0.9,...}}
 *   {"event":"artifact","name":"report.json","bytes":1234}
 *   {"event":"finish","ok":true,"episodes":20,"flushes":2}
 * It reads the trajectory JSON with a few lines of scanning (no JSON library), includes
 * nenyax.h for the types only and never calls libnenyax (docs/plugins-abi.md).
 *
 * Compile-time switches, used by tests/library_sinks.rs:
 *   -DEXAMPLE_TELEMETRY_VTABLE_VERSION=2  claim another telemetry vtable version (refused)
 *   -DEXAMPLE_FAIL_EPISODES               every episode call fails ("collector unavailable")
 *   -DEXAMPLE_CRASH                       dereference NULL inside episode (a crashing plugin)
 */
#include "../../../include/nenyax.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_TELEMETRY_VTABLE_VERSION
#define EXAMPLE_TELEMETRY_VTABLE_VERSION NENYAX_TELEMETRY_VTABLE_VERSION
#endif

/* ---- just enough JSON scanning to pick top-level members of an object ---- */

static const char *ws(const char *p, const char *end) {
    while (p < end && isspace((unsigned char)*p)) p++;
    return p;
}

/* p at an opening quote: just past the closing one. */
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < end ? p + 1 : end;
}

/* Just past the JSON value at p. */
static const char *skip_value(const char *p, const char *end) {
    p = ws(p, end);
    if (p >= end) return end;
    if (*p == '"') return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < end) {
            if (*p == '"') { p = skip_string(p, end); continue; }
            if (*p == '{' || *p == '[') depth++;
            if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
            p++;
        }
        return end;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && !isspace((unsigned char)*p)) p++;
    return p;
}

/* The value of member `key` of the object at p, or NULL. */
static const char *member(const char *p, const char *end, const char *key) {
    p = ws(p, end);
    if (p >= end || *p != '{') return NULL;
    for (p++;;) {
        p = ws(p, end);
        if (p >= end || *p != '"') return NULL;
        const char *k = p + 1, *after = skip_string(p, end);
        size_t klen = (size_t)(after - 1 - k);
        p = ws(after, end);
        if (p >= end || *p != ':') return NULL;
        p = ws(p + 1, end);
        if (klen == strlen(key) && memcmp(k, key, klen) == 0) return p;
        p = ws(skip_value(p, end), end);
        if (p >= end || *p != ',') return NULL;
        p++;
    }
}

/* The number of items of the array at p (-1: not an array). */
static long count_items(const char *p, const char *end) {
    p = ws(p, end);
    if (p >= end || *p != '[') return -1;
    p = ws(p + 1, end);
    if (p < end && *p == ']') return 0;
    for (long n = 1;; n++) {
        p = ws(skip_value(p, end), end);
        if (p >= end || *p != ',') return n;
        p++;
    }
}

/* Write the JSON value at p as it is, or `null` when absent. */
static void raw(FILE *f, const char *p, const char *end) {
    if (!p) { fputs("null", f); return; }
    fwrite(p, 1, (size_t)(skip_value(p, end) - p), f);
}

/* ---- the sink ---- */

/* One sink per process: the host makes one call at a time (no NENYAX_PLUGIN_THREAD_SAFE). */
static struct {
    FILE *file;
    long episodes, flushes;
} SINK;

static void say(const nenyax_plugin_out_t *out, const char *s) { out->write(out->ctx, s, strlen(s)); }

/* The output file, opened for appending on first use; NULL with a message in `out`. */
static FILE *file(const nenyax_plugin_out_t *out) {
    if (SINK.file) return SINK.file;
    const char *path = getenv("NENYAX_EXAMPLE_SINK_FILE");
    if (!path || !*path) {
        say(out, "set NENYAX_EXAMPLE_SINK_FILE to the file jsonl_sink appends to");
        return NULL;
    }
    SINK.file = fopen(path, "a");
    if (!SINK.file) {
        say(out, "cannot open NENYAX_EXAMPLE_SINK_FILE for appending: ");
        say(out, path);
    }
    return SINK.file;
}

static int32_t start(void *ud, const char *run, size_t len, const nenyax_plugin_out_t *out) {
    (void)ud;
    FILE *f = file(out);
    if (!f) return 1;
    SINK.episodes = SINK.flushes = 0;
    fputs("{\"event\":\"start\",\"run\":", f);
    fwrite(run, 1, len, f);
    fputs("}\n", f);
    return 0;
}

static int32_t episode(void *ud, const char *traj, size_t len, const nenyax_plugin_out_t *out) {
    (void)ud;
#ifdef EXAMPLE_CRASH
    if (traj) {
        volatile int *nowhere = NULL;
        *nowhere = 1;
    }
#endif
#ifdef EXAMPLE_FAIL_EPISODES
    if (traj) { /* always: the rest stays compiled */
        say(out, "collector unavailable");
        return 1;
    }
#endif
    FILE *f = file(out);
    if (!f) return 1;
    const char *end = traj + len;
    const char *judgment = member(traj, end, "judgment");
    const char *calls = member(traj, end, "model_calls");
    fputs("{\"event\":\"episode\",\"env_id\":", f);
    raw(f, member(traj, end, "env_id"), end);
    fputs(",\"seed\":", f);
    raw(f, member(traj, end, "seed"), end);
    fputs(",\"score\":", f);
    raw(f, judgment ? member(judgment, end, "score") : NULL, end);
    fprintf(f, ",\"model_calls\":%ld}\n", calls ? count_items(calls, end) : 0L);
    SINK.episodes++;
    return 0;
}

static int32_t metrics(void *ud, uint64_t step, const char *values, size_t len,
                       const nenyax_plugin_out_t *out) {
    (void)ud;
    FILE *f = file(out);
    if (!f) return 1;
    fprintf(f, "{\"event\":\"metrics\",\"step\":%" PRIu64 ",\"values\":", step);
    fwrite(values, 1, len, f);
    fputs("}\n", f);
    return 0;
}

static int32_t artifact(void *ud, const char *name, const uint8_t *bytes, size_t len,
                        const nenyax_plugin_out_t *out) {
    (void)ud; (void)bytes;
    FILE *f = file(out);
    if (!f) return 1;
    /* Artifact names are file names; one with a quote or backslash is written as "?" */
    fprintf(f, "{\"event\":\"artifact\",\"name\":\"%s\",\"bytes\":%zu}\n",
            strpbrk(name, "\"\\") ? "?" : name, len);
    return 0;
}

static int32_t flush(void *ud, const nenyax_plugin_out_t *out) {
    (void)ud;
    SINK.flushes++;
    if (SINK.file && fflush(SINK.file) != 0) {
        say(out, "cannot write NENYAX_EXAMPLE_SINK_FILE");
        return 1;
    }
    return 0;
}

static int32_t finish(void *ud, int32_t ok, const nenyax_plugin_out_t *out) {
    (void)ud;
    FILE *f = file(out);
    if (!f) return 1;
    fprintf(f, "{\"event\":\"finish\",\"ok\":%s,\"episodes\":%ld,\"flushes\":%ld}\n",
            ok ? "true" : "false", SINK.episodes, SINK.flushes);
    /* Closed, so a later run in this process (or a reader) sees everything. */
    int bad = fclose(f) != 0;
    SINK.file = NULL;
    if (bad) say(out, "cannot write NENYAX_EXAMPLE_SINK_FILE");
    return bad;
}

static const nenyax_telemetry_vtable_t VTABLE = {
    EXAMPLE_TELEMETRY_VTABLE_VERSION, start, episode, metrics, artifact, flush, finish, NULL,
};

static const nenyax_plugin_t PLUGINS[] = {{
    NENYAX_PLUGIN_ABI_VERSION,
    NENYAX_PLUGIN_KIND_TELEMETRY,
    EXAMPLE_TELEMETRY_VTABLE_VERSION,
    0, /* one call at a time: SINK is shared state */
    "jsonl_sink",
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
