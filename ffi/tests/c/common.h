/* Shared helpers for the C ABI tests in this directory: CHECK macros and a tiny JSON field
 * search (no JSON library). Only include/nenyax.h and the C standard library are used, plus
 * POSIX where a test needs threads or alarm(). Every helper is static: each test is one
 * translation unit. */

#ifndef NENYAX_TEST_COMMON_H
#define NENYAX_TEST_COMMON_H

#include "nenyax.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks_run;
static int checks_failed;

static inline void check_report(int ok, const char *file, int line, const char *what,
                                const char *detail)
{
    checks_run++;
    if (ok) {
        printf("  ok    %s:%d  %s\n", file, line, what);
        return;
    }
    checks_failed++;
    printf("  FAIL  %s:%d  %s%s%s\n", file, line, what, detail ? "\n        " : "",
           detail ? detail : "");
    fprintf(stderr, "%s:%d: CHECK failed: %s%s%s\n", file, line, what, detail ? ": " : "",
            detail ? detail : "");
    fflush(stdout);
}

/* A condition: reported, and the test goes on. */
#define CHECK(cond) check_report((cond) ? 1 : 0, __FILE__, __LINE__, #cond, NULL)

/* A condition the rest of the program depends on: a failure ends the program now. */
#define REQUIRE(cond)                                                                        \
    do {                                                                                     \
        int required_ok_ = (cond) ? 1 : 0;                                                   \
        check_report(required_ok_, __FILE__, __LINE__, #cond, NULL);                         \
        if (!required_ok_) {                                                                 \
            fprintf(stderr, "%s:%d: stopping: a required check failed\n", __FILE__, __LINE__); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* Report (and free) an error returned by a call; returns 1 when the call succeeded. */
static inline int expect_ok(nenyax_error_t *err, const char *file, int line, const char *what)
{
    char detail[2048];
    if (err == NULL) {
        check_report(1, file, line, what, NULL);
        return 1;
    }
    snprintf(detail, sizeof detail, "status %d: %s", (int)nenyax_error_code(err),
             nenyax_error_message(err, NULL));
    check_report(0, file, line, what, detail);
    nenyax_error_free(err);
    return 0;
}

/* Check that a call failed with `status`; prints the message, frees the error. Returns 1 when
 * it failed as expected. `needle`, when not NULL, must occur in the message. */
static inline int expect_status(nenyax_error_t *err, nenyax_status_t status, const char *needle,
                         const char *file, int line, const char *what)
{
    char detail[2048];
    int ok;
    if (err == NULL) {
        snprintf(detail, sizeof detail, "the call succeeded; expected status %d", (int)status);
        check_report(0, file, line, what, detail);
        return 0;
    }
    {
        size_t len = 12345;
        const char *msg = nenyax_error_message(err, &len);
        nenyax_status_t got = nenyax_error_code(err);
        ok = got == status && msg != NULL && strlen(msg) == len && len > 0 &&
             (needle == NULL || strstr(msg, needle) != NULL);
        snprintf(detail, sizeof detail, "status %d (expected %d), message: %s%s%s%s", (int)got,
                 (int)status, msg ? msg : "(null)", needle ? " (expected to contain \"" : "",
                 needle ? needle : "", needle ? "\")" : "");
        check_report(ok, file, line, what, ok ? NULL : detail);
        if (ok) {
            printf("          -> status %d: %s\n", (int)got, msg);
        }
    }
    nenyax_error_free(err);
    return ok;
}

/* CHECK_OK(call): the call returns NULL (success). */
#define CHECK_OK(call) expect_ok((call), __FILE__, __LINE__, #call)
/* REQUIRE_OK(call): as CHECK_OK, but a failure ends the program. */
#define REQUIRE_OK(call)                                                                     \
    do {                                                                                     \
        if (!expect_ok((call), __FILE__, __LINE__, #call)) {                                 \
            fprintf(stderr, "%s:%d: stopping: a required call failed\n", __FILE__, __LINE__); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
/* CHECK_STATUS(call, status): the call fails with that status (and a non-empty message). */
#define CHECK_STATUS(call, status) expect_status((call), (status), NULL, __FILE__, __LINE__, #call)
/* CHECK_STATUS_MSG(call, status, needle): ... and the message contains `needle`. */
#define CHECK_STATUS_MSG(call, status, needle)                                               \
    expect_status((call), (status), (needle), __FILE__, __LINE__, #call)

/* Print the summary; the exit status of the program. */
static inline int finish(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, checks_run, checks_failed);
    fflush(stdout);
    return checks_failed == 0 ? 0 : 1;
}

/* Length of a C string literal, for (ptr, len) arguments. */
#define S(lit) (lit), (sizeof(lit) - 1)

/* --------------------------------------------------------------------------------------------
 * A tiny JSON field search over compact JSON (what the library writes): no allocation, no
 * parser; enough to read a field whose name is unique in the text. */

/* Where `needle` (NUL-terminated) first occurs in text[0..len), or NULL. */
static inline const char *find_bytes(const char *text, size_t len, const char *needle)
{
    size_t n = strlen(needle), i;
    if (n == 0 || n > len) {
        return NULL;
    }
    for (i = 0; i + n <= len; i++) {
        if (text[i] == needle[0] && memcmp(text + i, needle, n) == 0) {
            return text + i;
        }
    }
    return NULL;
}

/* Number of times `needle` occurs in text[0..len). */
static inline size_t count_bytes(const char *text, size_t len, const char *needle)
{
    size_t count = 0, n = strlen(needle);
    const char *p = text, *end = text + len;
    while (p < end && (p = find_bytes(p, (size_t)(end - p), needle)) != NULL) {
        count++;
        p += n;
    }
    return count;
}

/* The value of the first `"key":` in json[0..len) (skipping spaces), or NULL. */
static inline const char *json_value(const char *json, size_t len, const char *key)
{
    char pattern[128];
    const char *p, *end = json + len;
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    p = find_bytes(json, len, pattern);
    if (p == NULL) {
        return NULL;
    }
    p += strlen(pattern);
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) {
        p++;
    }
    return p < end ? p : NULL;
}

/* Decode the JSON string at `v` (which must start with '"') into buf (NUL-terminated);
 * handles the escapes \" \\ \/ \n \t \r \b \f and \u00XX. Returns the decoded length, or -1. */
static inline int json_string_at(const char *v, const char *end, char *buf, size_t cap)
{
    size_t n = 0;
    if (v == NULL || v >= end || *v != '"' || cap == 0) {
        return -1;
    }
    for (v++; v < end && *v != '"'; v++) {
        char c = *v;
        if (c == '\\') {
            if (++v >= end) {
                return -1;
            }
            switch (*v) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                char hex[5] = {0};
                if (end - v < 5) {
                    return -1;
                }
                memcpy(hex, v + 1, 4);
                c = (char)strtol(hex, NULL, 16);
                v += 4;
                break;
            }
            default: c = *v; break; /* \" \\ \/ */
            }
        }
        if (n + 1 >= cap) {
            return -1;
        }
        buf[n++] = c;
    }
    if (v >= end) {
        return -1;
    }
    buf[n] = '\0';
    return (int)n;
}

/* The string field `key` of json[0..len) into buf; -1 when absent or not a string. */
static inline int json_string(const char *json, size_t len, const char *key, char *buf, size_t cap)
{
    return json_string_at(json_value(json, len, key), json + len, buf, cap);
}

/* The number field `key` of json[0..len); NAN when absent or not a number. */
static inline double json_number(const char *json, size_t len, const char *key)
{
    const char *v = json_value(json, len, key);
    char buf[64];
    size_t n = 0;
    char *stop = NULL;
    double x;
    if (v == NULL) {
        return NAN;
    }
    while (v + n < json + len && n + 1 < sizeof buf && strchr("+-0123456789.eE", v[n]) != NULL) {
        buf[n] = v[n];
        n++;
    }
    buf[n] = '\0';
    if (n == 0) {
        return NAN;
    }
    x = strtod(buf, &stop);
    return *stop == '\0' ? x : NAN;
}

/* Whether field `key` of json[0..len) is JSON null. */
static inline int json_is_null(const char *json, size_t len, const char *key)
{
    const char *v = json_value(json, len, key);
    return v != NULL && (size_t)(json + len - v) >= 4 && memcmp(v, "null", 4) == 0;
}

/* The trajectory's judged score: "score" inside "judgment"; NAN when not judged. */
static inline double trajectory_score(const char *json, size_t len)
{
    const char *j = json_value(json, len, "judgment");
    if (j == NULL || *j != '{') {
        return NAN;
    }
    return json_number(j, (size_t)(json + len - j), "score");
}

/* Whether a nenyax_string_t holds a non-empty NUL-terminated string of its length. */
static inline int string_ok(const nenyax_string_t *s)
{
    return s->ptr != NULL && s->len > 0 && strlen(s->ptr) == s->len;
}

#endif /* NENYAX_TEST_COMMON_H */
