/* Judge plugins that misbehave on purpose, for tests/library_plugins.rs: each reply or
 * descriptor defect must come back as a clean error naming the plugin, never a crash.
 * Built with -DDEFECT=<n> to make the library's descriptor itself defective:
 *   1 NULL name, 2 unknown kind code, 3 judge vtable version 9, 4 NULL vtable,
 *   5 entry point fails, 6 NULL judge function, 7 non-UTF-8 name. */
#include "../../include/nenyax.h"

#include <string.h>

#ifndef DEFECT
#define DEFECT 0
#endif

static void say(const nenyax_plugin_out_t *out, const char *s) { out->write(out->ctx, s, strlen(s)); }

static int32_t garbage(void *u, const char *t, size_t n, const nenyax_plugin_out_t *out) {
  (void)u, (void)t, (void)n;
  say(out, "this is not json");
  return 0;
}
static int32_t fails(void *u, const char *t, size_t n, const nenyax_plugin_out_t *out) {
  (void)u, (void)t, (void)n;
  say(out, "no answer ");
  say(out, "in this trajectory");
  return 3;
}
static int32_t silent(void *u, const char *t, size_t n, const nenyax_plugin_out_t *out) {
  (void)u, (void)t, (void)n, (void)out;
  return 1;
}
static int32_t wrong_shape(void *u, const char *t, size_t n, const nenyax_plugin_out_t *out) {
  (void)u, (void)t, (void)n;
  say(out, "{\"score\": \"high\"}");
  return 0;
}
static int32_t huge(void *u, const char *t, size_t n, const nenyax_plugin_out_t *out) {
  (void)u, (void)t, (void)n;
  say(out, "{\"score\": 1e999}");
  return 0;
}
/* Echoes the length it was given and checks the NUL convention: score = 1 when t[n] == 0. */
static int32_t counts(void *u, const char *t, size_t n, const nenyax_plugin_out_t *out) {
  (void)u;
  say(out, t[n] == 0 && strlen(t) == n ? "{\"score\": 1, \"details\": {\"user\": \"ok\"}}"
                                       : "{\"score\": 0}");
  return 0;
}

#define VT(f) {NENYAX_JUDGE_VTABLE_VERSION, f, NULL}
static const nenyax_judge_vtable_t V_GARBAGE = VT(garbage), V_FAILS = VT(fails), V_SILENT = VT(silent),
                                   V_WRONG = VT(wrong_shape), V_HUGE = VT(huge), V_COUNTS = VT(counts);
static const nenyax_judge_vtable_t V_BAD_VERSION = {9, garbage, NULL};
static const nenyax_judge_vtable_t V_NO_FN = {NENYAX_JUDGE_VTABLE_VERSION, NULL, NULL};

#define P(name, vt) {NENYAX_PLUGIN_ABI_VERSION, NENYAX_PLUGIN_KIND_JUDGE, NENYAX_JUDGE_VTABLE_VERSION, 0, name, "1.2.3", vt, NULL}
static const nenyax_plugin_t GOOD[] = {
    P("odd_garbage", &V_GARBAGE), P("odd_fails", &V_FAILS), P("odd_silent", &V_SILENT),
    P("odd_wrong_shape", &V_WRONG), P("odd_huge", &V_HUGE), P("odd_counts", &V_COUNTS),
};
static const nenyax_plugin_t BAD[] = {
    P(NULL, &V_GARBAGE),
    {NENYAX_PLUGIN_ABI_VERSION, 42, 1, 0, "odd_kind", "1", &V_GARBAGE, NULL},
    P("odd_vt_version", &V_BAD_VERSION),
    P("odd_null_vtable", NULL),
    P("odd_entry_fails", &V_GARBAGE),
    P("odd_no_fn", &V_NO_FN),
    P("odd_\xff\xfe", &V_GARBAGE),
};

int32_t nenyax_plugin_entry(uint32_t host, const nenyax_plugin_t **plugins, size_t *count) {
  (void)host;
  if (DEFECT == 0) {
    *plugins = GOOD;
    *count = sizeof GOOD / sizeof GOOD[0];
    return 0;
  }
  if (DEFECT == 5) return 17;
  *plugins = &BAD[DEFECT - 1];
  *count = 1;
  return 0;
}
