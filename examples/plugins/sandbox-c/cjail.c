/* cjail: a Nenyax sandbox backend in C, loaded as a library plugin. It is a jail, like Nenyax's
 * built-in `jail` backend: every command runs as PID 1's child in new PID, mount, IPC, UTS and
 * network namespaces, under a read-only view of the host's top-level directories, a private
 * /dev, /proc and hostname, its limits (rlimits), and as `nobody` (or as root of a user
 * namespace that is `nobody` on the host). Linux only; it needs root. It includes nenyax.h for
 * the types only and never calls libnenyax (docs/plugins-abi.md, "The sandbox vtable").
 *
 * How a command runs (cj_exec):
 *   host thread --clone(new namespaces)--> init (PID 1): mounts the new root, pivots into it,
 *                                           forks the command, reaps everything, reports
 *   init --fork--> command: limits, drops to nobody (or enters a user namespace), execs
 * When init exits, the kernel kills whatever is left in its PID namespace: that is how a
 * detached (setsid) child dies with its command and how a timeout (SIGKILL to init) kills all.
 *
 * The host process is multi-threaded, so between clone and exec only system calls run, on data
 * prepared beforehand (the "plan"): no allocation, no locks, no glibc wrappers that broadcast to
 * threads (setuid and friends are raw syscalls here).
 *
 * Compile-time switch, used by tests/library_sandbox.rs:
 *   -DCJAIL_VTABLE_VERSION=2   claim another sandbox vtable version (Nenyax must refuse it)
 */
#define _GNU_SOURCE
#include "../../../include/nenyax.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CJAIL_VTABLE_VERSION
#define CJAIL_VTABLE_VERSION NENYAX_SANDBOX_VTABLE_VERSION
#endif

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef PR_SET_MM
#define PR_SET_MM 35
#endif
#ifndef PR_SET_MM_ARG_END
#define PR_SET_MM_ARG_END 9
#endif

/* The user commands run as on the host (`nobody`), and what root of a jail maps to. */
#define SANDBOX_ID 65534
#define BASE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define INIT_NAME "nenyax-init"
/* Setup failed before the command ran (the message is on its stderr), as the built-in jail. */
#define SETUP_FAILED 125

/* ---------------------------------------------------------------------------------------------
 * Growable buffers and string vectors (host side only).
 */

/* Bytes being built; `oom` makes every later append a no-op, checked once at the end. */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} buf_t;

static void buf_add(buf_t *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void buf_str(buf_t *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_fmt(buf_t *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A NULL-terminated array of owned strings (argv, envp, paths kept for the child). */
typedef struct {
    char **v;
    size_t n, cap;
    int oom;
} vec_t;

/* Append an owned copy of `s` (`len` bytes) and return it (NULL when out of memory). */
static char *vec_pushn(vec_t *a, const char *s, size_t len) {
    if (a->oom) return NULL;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        char **v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = 1;
            return NULL;
        }
        a->v = v;
        a->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) {
        a->oom = 1;
        return NULL;
    }
    memcpy(c, s, len);
    c[len] = 0;
    a->v[a->n++] = c;
    a->v[a->n] = NULL;
    return c;
}

static char *vec_push(vec_t *a, const char *s) { return vec_pushn(a, s, strlen(s)); }

static void vec_free(vec_t *a) {
    for (size_t i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

/* Set KEY=VALUE in an environment vector, replacing an earlier KEY. */
static int env_set(vec_t *env, const char *key, size_t klen, const char *val, size_t vlen) {
    char *kv = malloc(klen + vlen + 2);
    if (!kv) return -1;
    memcpy(kv, key, klen);
    kv[klen] = '=';
    memcpy(kv + klen + 1, val, vlen);
    kv[klen + 1 + vlen] = 0;
    for (size_t i = 0; i < env->n; i++) {
        if (strncmp(env->v[i], kv, klen + 1) == 0) {
            free(env->v[i]);
            env->v[i] = kv;
            return 0;
        }
    }
    int ok = vec_pushn(env, kv, klen + vlen + 1) != NULL;
    free(kv);
    return ok ? 0 : -1;
}

static void say(const nenyax_plugin_out_t *out, const char *s) { out->write(out->ctx, s, strlen(s)); }

/* Write a formatted message to `out` and return 1 (the vtable's failure). */
static int32_t fail(const nenyax_plugin_out_t *out, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    say(out, msg);
    return 1;
}

/* Append `s` (`n` bytes) as a JSON string: invalid UTF-8 becomes U+FFFD (maximal subparts, as
 * Rust's from_utf8_lossy), control characters are escaped. */
static void json_string(buf_t *b, const unsigned char *s, size_t n) {
    static const char *hex = "0123456789abcdef";
    buf_add(b, "\"", 1);
    size_t i = 0, run = 0; /* [i - run, i) is plain text not yet appended */
    while (i < n) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            i++;
            run++;
            continue;
        }
        buf_add(b, s + i - run, run);
        run = 0;
        if (c < 0x80) {
            char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
            size_t len = 2;
            switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                memcpy(esc + 1, "u00", 3);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                len = 6;
            }
            buf_add(b, esc, len);
            i++;
            continue;
        }
        /* A multi-byte sequence: its length and the allowed range of its second byte. */
        size_t need = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        size_t k = 1;
        if (need) {
            while (k < need && i + k < n) {
                unsigned char d = s[i + k];
                unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
                if (d < l || d > h) break;
                k++;
            }
        }
        if (need && k == need) buf_add(b, s + i, k);
        else buf_add(b, "\xEF\xBF\xBD", 3);
        i += k;
    }
    buf_add(b, s + i - run, run);
    buf_add(b, "\"", 1);
}

/* ---------------------------------------------------------------------------------------------
 * A minimal JSON parser for the shapes the host sends: objects, arrays, strings (with escapes,
 * \uXXXX and surrogate pairs), numbers, booleans and null.
 */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct json {
    int type;
    int boolean;
    double num;
    char *str;   /* J_STR: the bytes, NUL-terminated (may hold NULs: see len) */
    size_t len;  /* J_STR: bytes; J_ARR, J_OBJ: items */
    struct json *items;
    char **keys; /* J_OBJ */
} json;

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
    char err[200];
} parser;

static void json_free(json *v) {
    if (v->type == J_STR) free(v->str);
    if (v->type == J_ARR || v->type == J_OBJ) {
        for (size_t i = 0; i < v->len; i++) {
            json_free(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

static int perr(parser *p, const char *what) {
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "invalid JSON at byte %zu: %s", p->i, what);
    return -1;
}

static void skip_ws(parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(parser *p, unsigned *out) {
    if (p->i + 4 > p->n) return perr(p, "a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return perr(p, "a \\u escape needs four hex digits");
    }
    *out = v;
    return 0;
}

static void put_utf8(buf_t *b, unsigned cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | ((cp >> 6) & 63)),
        u[2] = (unsigned char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (unsigned char)(0xF0 | cp >> 18), u[1] = (unsigned char)(0x80 | ((cp >> 12) & 63)),
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)), u[3] = (unsigned char)(0x80 | (cp & 63)), n = 4;
    buf_add(b, u, n);
}

static int parse_string(parser *p, char **out, size_t *len) {
    buf_t b = {0};
    p->i++; /* the opening quote */
    for (;;) {
        if (p->i >= p->n) {
            free(b.p);
            return perr(p, "a string does not end");
        }
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"') break;
        if (c < 0x20) {
            free(b.p);
            return perr(p, "a control character in a string");
        }
        if (c != '\\') {
            buf_add(&b, &c, 1);
            continue;
        }
        if (p->i >= p->n) break;
        char e = p->s[p->i++];
        unsigned cp;
        switch (e) {
        case '"': case '\\': case '/': buf_add(&b, &e, 1); break;
        case 'b': buf_add(&b, "\b", 1); break;
        case 'f': buf_add(&b, "\f", 1); break;
        case 'n': buf_add(&b, "\n", 1); break;
        case 'r': buf_add(&b, "\r", 1); break;
        case 't': buf_add(&b, "\t", 1); break;
        case 'u':
            if (hex4(p, &cp)) {
                free(b.p);
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->i + 2 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                    p->i += 2;
                    if (hex4(p, &lo)) {
                        free(b.p);
                        return -1;
                    }
                    if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else {
                        put_utf8(&b, 0xFFFD);
                        cp = lo;
                    }
                } else cp = 0xFFFD;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) cp = 0xFFFD;
            put_utf8(&b, cp);
            break;
        default:
            free(b.p);
            return perr(p, "an unknown escape in a string");
        }
    }
    if (b.oom) {
        free(b.p);
        return perr(p, "out of memory");
    }
    if (!b.p) {
        b.p = calloc(1, 1);
        if (!b.p) return perr(p, "out of memory");
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

static int parse_value(parser *p, json *v);

static int parse_list(parser *p, json *v, int object) {
    char close = object ? '}' : ']';
    size_t cap = 0;
    v->type = object ? J_OBJ : J_ARR;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return 0;
    }
    for (;;) {
        if (v->len == cap) {
            cap = cap ? cap * 2 : 8;
            json *items = realloc(v->items, cap * sizeof *items);
            if (!items) return perr(p, "out of memory");
            v->items = items;
            if (object) {
                char **keys = realloc(v->keys, cap * sizeof *keys);
                if (!keys) return perr(p, "out of memory");
                v->keys = keys;
            }
        }
        skip_ws(p);
        char *key = NULL;
        if (object) {
            size_t klen;
            if (p->i >= p->n || p->s[p->i] != '"') return perr(p, "an object key must be a string");
            if (parse_string(p, &key, &klen)) return -1;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(key);
                return perr(p, "expected `:` after an object key");
            }
            p->i++;
        }
        json item;
        if (parse_value(p, &item)) {
            free(key);
            return -1;
        }
        v->items[v->len] = item;
        if (object) v->keys[v->len] = key;
        v->len++;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return 0;
        }
        return perr(p, object ? "expected `,` or `}`" : "expected `,` or `]`");
    }
}

static int parse_value(parser *p, json *v) {
    memset(v, 0, sizeof *v);
    skip_ws(p);
    if (p->i >= p->n) return perr(p, "a value is missing");
    if (++p->depth > 64) return perr(p, "nested too deeply");
    int r = 0;
    char c = p->s[p->i];
    if (c == '{' || c == '[') r = parse_list(p, v, c == '{');
    else if (c == '"') {
        v->type = J_STR;
        r = parse_string(p, &v->str, &v->len);
    } else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "null", 4)) {
        v->type = J_NULL;
        p->i += 4;
    } else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "true", 4)) {
        v->type = J_BOOL;
        v->boolean = 1;
        p->i += 4;
    } else if (p->n - p->i >= 5 && !memcmp(p->s + p->i, "false", 5)) {
        v->type = J_BOOL;
        p->i += 5;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        char tmp[64];
        size_t k = 0;
        while (p->i < p->n && k < sizeof tmp - 1 && strchr("+-0123456789.eE", p->s[p->i])) tmp[k++] = p->s[p->i++];
        tmp[k] = 0;
        char *end;
        v->type = J_NUM;
        v->num = strtod(tmp, &end);
        if (*end || k == 0) r = perr(p, "a malformed number");
    } else r = perr(p, "an unexpected character");
    p->depth--;
    if (r) json_free(v);
    return r;
}

/* Parse `len` bytes of JSON into `v`; on failure the message is in `err`. */
static int json_parse(const char *s, size_t len, json *v, char *err, size_t errlen) {
    parser p = {s, len, 0, 0, {0}};
    if (parse_value(&p, v) == 0) {
        skip_ws(&p);
        if (p.i == p.n) return 0;
        json_free(v);
        perr(&p, "trailing characters after the value");
    }
    snprintf(err, errlen, "%s", p.err);
    return -1;
}

static const json *json_get(const json *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (size_t i = 0; i < obj->len; i++)
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

/* A string without NUL bytes (argv, env, paths), or NULL. */
static const char *json_cstr(const json *v) {
    if (!v || v->type != J_STR || strlen(v->str) != v->len) return NULL;
    return v->str;
}

/* ---------------------------------------------------------------------------------------------
 * The sandbox: its configuration and its host directory.
 */

typedef struct {
    char *id, *workdir;
    vec_t dirs;  /* private directory names */
    vec_t env;   /* KEY=VALUE of the sandbox */
    int network, root;
    long long cpu_s, memory_bytes, open_files, processes, file_size_bytes; /* -1: no limit */
    double wall_s;                                                         /* < 0: none */
    size_t output_bytes;
} config_t;

typedef struct {
    config_t cfg;
    char *config_json; /* kept for fork */
    size_t config_len;
    char *dir;         /* the host directory: one subdirectory per private dir, and .root */
    int host_root;     /* nenyax runs as root: files belong to nobody, commands run as nobody */
} sandbox_t;

static void config_free(config_t *c) {
    free(c->id);
    free(c->workdir);
    vec_free(&c->dirs);
    vec_free(&c->env);
    memset(c, 0, sizeof *c);
}

static int is_private(const config_t *c, const char *name, size_t len) {
    for (size_t i = 0; i < c->dirs.n; i++)
        if (strlen(c->dirs.v[i]) == len && !memcmp(c->dirs.v[i], name, len)) return 1;
    return 0;
}

/* A limit: a non-negative integer or null (-1). */
static int limit_of(const json *limits, const char *key, long long *out, char *err, size_t errlen) {
    const json *v = json_get(limits, key);
    *out = -1;
    if (!v || v->type == J_NULL) return 0;
    if (v->type != J_NUM || v->num < 0 || v->num > 9.2e18) {
        snprintf(err, errlen, "limits.%s must be a non-negative integer or null", key);
        return -1;
    }
    *out = (long long)v->num;
    return 0;
}

/* Names that cannot be private directories: the jail mounts its own there. */
static int reserved_dir(const char *d) {
    static const char *const RESERVED[] = {"proc", "sys", "dev", ".root", ".", "..", NULL};
    for (int i = 0; RESERVED[i]; i++)
        if (!strcmp(d, RESERVED[i])) return 1;
    return 0;
}

static int parse_config(const char *text, size_t len, config_t *c, char *err, size_t errlen) {
    json v;
    memset(c, 0, sizeof *c);
    if (json_parse(text, len, &v, err, errlen)) return -1;
    int r = -1;
    const char *id = json_cstr(json_get(&v, "id"));
    const char *workdir = json_cstr(json_get(&v, "workdir"));
    const json *dirs = json_get(&v, "private_dirs"), *env = json_get(&v, "env");
    const json *limits = json_get(&v, "limits");
    if (v.type != J_OBJ) {
        snprintf(err, errlen, "the sandbox configuration must be a JSON object");
        goto out;
    }
    if (!id || !workdir || workdir[0] != '/') {
        snprintf(err, errlen, "the sandbox configuration needs \"id\" and an absolute \"workdir\"");
        goto out;
    }
    c->id = strdup(id);
    c->workdir = strdup(workdir);
    if (!dirs || dirs->type != J_ARR || dirs->len == 0) {
        snprintf(err, errlen, "\"private_dirs\" must be a non-empty array of directory names");
        goto out;
    }
    for (size_t i = 0; i < dirs->len; i++) {
        const char *d = json_cstr(&dirs->items[i]);
        if (!d || !*d || strchr(d, '/') || reserved_dir(d)) {
            snprintf(err, errlen, "private directory %zu must be a plain name other than proc, sys, dev and .root", i);
            goto out;
        }
        vec_push(&c->dirs, d);
    }
    if (env && env->type == J_OBJ) {
        for (size_t i = 0; i < env->len; i++) {
            const char *val = json_cstr(&env->items[i]);
            const char *key = env->keys[i];
            if (!val || !*key || strchr(key, '=')) {
                snprintf(err, errlen, "env `%s`: names must be non-empty without `=`, values strings without NUL", key);
                goto out;
            }
            if (env_set(&c->env, key, strlen(key), val, strlen(val))) c->env.oom = 1;
        }
    } else if (env && env->type != J_NULL) {
        snprintf(err, errlen, "\"env\" must be an object of strings");
        goto out;
    }
    const json *net = json_get(&v, "network"), *root = json_get(&v, "root");
    c->network = net && net->type == J_BOOL && net->boolean;
    c->root = root && root->type == J_BOOL && root->boolean;
    if (limit_of(limits, "cpu_s", &c->cpu_s, err, errlen) || limit_of(limits, "memory_bytes", &c->memory_bytes, err, errlen) ||
        limit_of(limits, "open_files", &c->open_files, err, errlen) || limit_of(limits, "processes", &c->processes, err, errlen) ||
        limit_of(limits, "file_size_bytes", &c->file_size_bytes, err, errlen))
        goto out;
    const json *wall = json_get(limits, "wall_s"), *ob = json_get(limits, "output_bytes");
    c->wall_s = wall && wall->type == J_NUM && wall->num >= 0 ? wall->num : -1;
    c->output_bytes = ob && ob->type == J_NUM && ob->num >= 0 ? (size_t)ob->num : (size_t)1 << 20;
    if (!c->id || !c->workdir || c->dirs.oom || c->env.oom) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    r = 0;
out:
    json_free(&v);
    if (r) config_free(c);
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * Readiness: root, and namespaces that can be made (probed once per process).
 */

static pthread_once_t READY_ONCE = PTHREAD_ONCE_INIT, USERNS_ONCE = PTHREAD_ONCE_INIT;
static char READY_WHY[300], USERNS_WHY[300]; /* written once under their pthread_once */

static pid_t raw_clone(unsigned long flags) {
    /* No stack: fork semantics (the child continues here on a copy of the memory). */
    return (pid_t)syscall(SYS_clone, flags, (void *)0, (void *)0, (void *)0, 0UL);
}

static unsigned long jail_flags(int network) {
    unsigned long f = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    if (!network) f |= CLONE_NEWNET;
    return f;
}

/* Run `flags` in a child that exits at once: "" when that works, else why not in `why`. */
static void probe(unsigned long flags, int userns, char *why, size_t len, const char *what) {
    pid_t pid = raw_clone(flags | SIGCHLD);
    if (pid == 0) {
        if (userns && syscall(SYS_unshare, CLONE_NEWUSER) != 0) syscall(SYS_exit_group, 1);
        syscall(SYS_exit_group, 0);
    }
    if (pid < 0) {
        snprintf(why, len, "cannot create %s (%s)", what, strerror(errno));
        return;
    }
    int st = 0;
    while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) snprintf(why, len, "a probe in %s failed", what);
}

static void probe_ready(void) {
    if (geteuid() != 0) {
        snprintf(READY_WHY, sizeof READY_WHY,
                 "cjail needs root (CAP_SYS_ADMIN) to make mount, PID, IPC, UTS and network namespaces; "
                 "run nenyax as root, or use the process backend");
        return;
    }
    probe(jail_flags(0), 0, READY_WHY, sizeof READY_WHY, "mount, PID, IPC, UTS and network namespaces");
}

static void probe_userns(void) {
    probe(0, 1, USERNS_WHY, sizeof USERNS_WHY, "a user namespace (check that user.max_user_namespaces is above 0)");
}

static int32_t cj_ready(void *user_data, const nenyax_plugin_out_t *out) {
    (void)user_data;
    pthread_once(&READY_ONCE, probe_ready);
    if (READY_WHY[0]) return fail(out, "%s", READY_WHY);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Host paths of sandbox paths: an absolute path whose first component is a private directory,
 * without `..`, walked component by component without following symlinks (a command may plant
 * one to make the host write elsewhere).
 */

typedef struct {
    int dfd;         /* the parent directory of the leaf (or -1) */
    char leaf[NAME_MAX + 1];
    int is_top;      /* the path is a private directory itself */
} where_t;

static void where_close(where_t *w) {
    if (w->dfd >= 0) close(w->dfd);
    w->dfd = -1;
}

/* Resolve `path`; `create` makes missing parents (owned by nobody when nenyax is root). Returns
 * 0, 1 with a message, or 2 when a parent is missing (not created). */
static int resolve(const sandbox_t *sb, const char *path, int create, where_t *w, const nenyax_plugin_out_t *out) {
    w->dfd = -1;
    w->is_top = 0;
    if (path[0] != '/')
        return fail(out, "sandbox path `%s` is not absolute (the host resolves relative paths against the workdir)", path);
    char comps[64][NAME_MAX + 1];
    size_t n = 0;
    for (const char *p = path; *p;) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 1 && p[0] == '.') {
            p += len;
            continue;
        }
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return fail(out, "sandbox path `%s` uses `..`: give a path inside the private directories", path);
        if (len > NAME_MAX || n == 64) return fail(out, "sandbox path `%s` is too long", path);
        memcpy(comps[n], p, len);
        comps[n][len] = 0;
        n++;
        p += len;
    }
    if (n == 0 || !is_private(&sb->cfg, comps[0], strlen(comps[0]))) {
        buf_t dirs = {0};
        for (size_t i = 0; i < sb->cfg.dirs.n; i++) buf_fmt(&dirs, "%s/%s", i ? ", " : "", sb->cfg.dirs.v[i]);
        fail(out, "sandbox path `%s` is outside the sandbox's private directories: use %s", path, dirs.p ? dirs.p : "");
        free(dirs.p);
        return 1;
    }
    int dfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return fail(out, "cannot open the sandbox directory %s: %s", sb->dir, strerror(errno));
    for (size_t i = 0; i + 1 < n; i++) {
        int next = openat(dfd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, comps[i], 0755) != 0 && errno != EEXIST) {
                int e = errno;
                close(dfd);
                return fail(out, "cannot create a directory of `%s`: %s", path, strerror(e));
            }
            if (sb->host_root) fchownat(dfd, comps[i], SANDBOX_ID, SANDBOX_ID, AT_SYMLINK_NOFOLLOW);
            next = openat(dfd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (next < 0) {
            int e = errno;
            close(dfd);
            if (e == ENOENT) return 2;
            if (e == ELOOP || e == ENOTDIR)
                return fail(out, "`%s`: `%s` is not a directory (or is a symbolic link, which is not followed)", path, comps[i]);
            return fail(out, "`%s`: %s", path, strerror(e));
        }
        close(dfd);
        dfd = next;
    }
    w->dfd = dfd;
    w->is_top = n == 1;
    snprintf(w->leaf, sizeof w->leaf, "%s", comps[n - 1]);
    return 0;
}

static int32_t cj_put(void *user_data, void *handle, const char *path, const uint8_t *data, size_t len, uint32_t mode,
                      const nenyax_plugin_out_t *out) {
    (void)user_data;
    sandbox_t *sb = handle;
    where_t w;
    int r = resolve(sb, path, 1, &w, out);
    if (r) return r == 2 ? fail(out, "cannot write `%s`: a parent is missing", path) : 1;
    if (w.is_top) {
        where_close(&w);
        return fail(out, "cannot write `%s`: it is a private directory", path);
    }
    int fd = openat(w.dfd, w.leaf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        where_close(&w);
        return fail(out, "cannot write `%s`: %s", path, e == ELOOP ? "it is a symbolic link" : strerror(e));
    }
    size_t done = 0;
    while (done < len) {
        ssize_t k = write(fd, data + done, len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            close(fd);
            where_close(&w);
            return fail(out, "cannot write `%s`: %s", path, strerror(e));
        }
        done += (size_t)k;
    }
    int ok = fchmod(fd, mode & 07777) == 0 && (!sb->host_root || fchown(fd, SANDBOX_ID, SANDBOX_ID) == 0);
    int e = errno;
    close(fd);
    where_close(&w);
    return ok ? 0 : fail(out, "cannot set the mode or owner of `%s`: %s", path, strerror(e));
}

static int32_t cj_get(void *user_data, void *handle, const char *path, const nenyax_plugin_out_t *out) {
    (void)user_data;
    where_t w;
    int r = resolve(handle, path, 0, &w, out);
    if (r) return r == 2 ? fail(out, "cannot read `%s`: no such file", path) : 1;
    int fd = openat(w.dfd, w.leaf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    where_close(&w);
    if (fd < 0)
        return fail(out, "cannot read `%s`: %s", path,
                    e == ENOENT ? "no such file" : e == ELOOP ? "it is a symbolic link" : strerror(e));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(out, "cannot read `%s`: not a regular file", path);
    }
    char chunk[65536];
    for (;;) {
        ssize_t k = read(fd, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            e = errno;
            close(fd);
            return fail(out, "cannot read `%s`: %s", path, strerror(e));
        }
        if (k == 0) break;
        out->write(out->ctx, chunk, (size_t)k);
    }
    close(fd);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int32_t cj_list(void *user_data, void *handle, const char *path, const nenyax_plugin_out_t *out) {
    (void)user_data;
    where_t w;
    int r = resolve(handle, path, 0, &w, out);
    if (r) return r == 2 ? fail(out, "cannot list `%s`: no such directory", path) : 1;
    int fd = openat(w.dfd, w.leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    where_close(&w);
    if (fd < 0) return fail(out, "cannot list `%s`: %s", path, e == ENOENT ? "no such directory" : strerror(e));
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return fail(out, "cannot list `%s`: %s", path, strerror(errno));
    }
    vec_t names = {0};
    struct dirent *ent;
    while ((ent = readdir(d)))
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) vec_push(&names, ent->d_name);
    if (names.n) qsort(names.v, names.n, sizeof *names.v, cmp_names);
    buf_t b = {0};
    buf_add(&b, "[", 1);
    for (size_t i = 0; i < names.n; i++) {
        struct stat st;
        if (fstatat(dirfd(d), names.v[i], &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (b.n > 1) buf_add(&b, ",", 1);
        buf_str(&b, "{\"name\":");
        json_string(&b, (const unsigned char *)names.v[i], strlen(names.v[i]));
        buf_fmt(&b, ",\"dir\":%s,\"size\":%lld}", S_ISDIR(st.st_mode) ? "true" : "false",
                S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
    }
    buf_add(&b, "]", 1);
    closedir(d);
    int oom = b.oom || names.oom;
    vec_free(&names);
    if (oom) {
        free(b.p);
        return fail(out, "cannot list `%s`: out of memory", path);
    }
    out->write(out->ctx, b.p, b.n);
    free(b.p);
    return 0;
}

/* Remove everything inside the directory `name` of `dfd` (not following symlinks). */
static int empty_dir_at(int dfd, const char *name) {
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int r = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
        struct stat st;
        if (fstatat(fd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (empty_dir_at(fd, ent->d_name) || unlinkat(fd, ent->d_name, AT_REMOVEDIR)) r = -1;
        } else if (unlinkat(fd, ent->d_name, 0)) r = -1;
    }
    closedir(d);
    return r;
}

static int32_t cj_remove(void *user_data, void *handle, const char *path, const nenyax_plugin_out_t *out) {
    (void)user_data;
    where_t w;
    int r = resolve(handle, path, 0, &w, out);
    if (r == 2) return 0; /* a missing parent: nothing to remove */
    if (r) return 1;
    struct stat st;
    int ok = 1;
    if (fstatat(w.dfd, w.leaf, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode))
            /* A private directory itself is emptied: the jail mounts it. */
            ok = empty_dir_at(w.dfd, w.leaf) == 0 && (w.is_top || unlinkat(w.dfd, w.leaf, AT_REMOVEDIR) == 0);
        else ok = unlinkat(w.dfd, w.leaf, 0) == 0;
    }
    int e = errno;
    where_close(&w);
    return ok ? 0 : fail(out, "cannot remove `%s`: %s", path, strerror(e));
}

/* ---------------------------------------------------------------------------------------------
 * create, fork, destroy.
 */

static void sandbox_free(sandbox_t *sb) {
    if (!sb) return;
    if (sb->dir) {
        /* The directory's own parent is the temp dir: remove its contents, then it. */
        char *slash = strrchr(sb->dir, '/');
        int pfd = -1;
        if (slash && slash != sb->dir) {
            *slash = 0;
            pfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            *slash = '/';
        }
        if (pfd >= 0) {
            empty_dir_at(pfd, slash + 1);
            unlinkat(pfd, slash + 1, AT_REMOVEDIR);
            close(pfd);
        }
    }
    config_free(&sb->cfg);
    free(sb->config_json);
    free(sb->dir);
    free(sb);
}

static int32_t cj_create(void *user_data, const char *config, size_t len, void **handle, const nenyax_plugin_out_t *out) {
    (void)user_data;
    char err[512];
    if (cj_ready(NULL, out)) return 1;
    sandbox_t *sb = calloc(1, sizeof *sb);
    if (!sb) return fail(out, "out of memory");
    if (parse_config(config, len, &sb->cfg, err, sizeof err)) {
        free(sb);
        return fail(out, "cjail: bad sandbox configuration: %s", err);
    }
    if (sb->cfg.root) {
        pthread_once(&USERNS_ONCE, probe_userns);
        if (USERNS_WHY[0]) {
            sandbox_free(sb);
            return fail(out, "cjail runs root: true as root of a user namespace, which cannot be made here: %s; use root: false", USERNS_WHY);
        }
    }
    sb->config_json = malloc(len + 1);
    if (!sb->config_json) {
        sandbox_free(sb);
        return fail(out, "out of memory");
    }
    memcpy(sb->config_json, config, len);
    sb->config_json[len] = 0;
    sb->config_len = len;
    sb->host_root = geteuid() == 0;
    const char *tmp = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/nenyax-cjail-XXXXXX", tmp && *tmp == '/' ? tmp : "/tmp");
    if (!mkdtemp(tmpl)) {
        sandbox_free(sb);
        return fail(out, "cjail: cannot create the sandbox directory %s: %s", tmpl, strerror(errno));
    }
    sb->dir = strdup(tmpl);
    if (!sb->dir) {
        rmdir(tmpl);
        sandbox_free(sb);
        return fail(out, "out of memory");
    }
    int dfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int ok = dfd >= 0 && fchmod(dfd, 0755) == 0 && mkdirat(dfd, ".root", 0755) == 0;
    for (size_t i = 0; ok && i < sb->cfg.dirs.n; i++) {
        const char *d = sb->cfg.dirs.v[i];
        int tmpdir = !strcmp(d, "tmp");
        ok = mkdirat(dfd, d, 0755) == 0 && (!sb->host_root || fchownat(dfd, d, SANDBOX_ID, SANDBOX_ID, 0) == 0) &&
             (!tmpdir || fchmodat(dfd, d, 01777, 0) == 0);
    }
    int e = errno;
    if (dfd >= 0) close(dfd);
    if (!ok) {
        sandbox_free(sb);
        return fail(out, "cjail: cannot lay out the sandbox directory: %s", strerror(e));
    }
    *handle = sb;
    return 0;
}

/* Copy the directory tree `src` of `sfd` into the existing directory `dst` of `dfd`. */
static int copy_tree_at(int sfd, const char *src, int dfd, const char *dst, int chown_ids, const nenyax_plugin_out_t *out) {
    int from = openat(sfd, src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int to = openat(dfd, dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = from >= 0 ? fdopendir(from) : NULL;
    if (!d || to < 0) {
        int e = errno;
        if (d) closedir(d);
        else if (from >= 0) close(from);
        if (to >= 0) close(to);
        return fail(out, "cjail fork: cannot open `%s`: %s", src, strerror(e));
    }
    int r = 0;
    struct dirent *ent;
    while (!r && (ent = readdir(d))) {
        const char *n = ent->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        struct stat st;
        if (fstatat(from, n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t k = readlinkat(from, n, target, sizeof target - 1);
            if (k < 0 || (target[k] = 0, symlinkat(target, to, n) != 0))
                r = fail(out, "cjail fork: cannot copy the link `%s`: %s", n, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            if (mkdirat(to, n, 0700) != 0 || fchmodat(to, n, (st.st_mode & 07777) | 0700, 0) != 0)
                r = fail(out, "cjail fork: cannot create `%s`: %s", n, strerror(errno));
            else r = copy_tree_at(from, n, to, n, chown_ids, out);
        } else if (S_ISREG(st.st_mode)) {
            int in = openat(from, n, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            int o = openat(to, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            char chunk[65536];
            ssize_t k = 0;
            while (in >= 0 && o >= 0 && (k = read(in, chunk, sizeof chunk)) > 0) {
                ssize_t done = 0;
                while (done < k) {
                    ssize_t w = write(o, chunk + done, (size_t)(k - done));
                    if (w <= 0) break;
                    done += w;
                }
                if (done < k) {
                    k = -1;
                    break;
                }
            }
            if (in < 0 || o < 0 || k < 0 || fchmod(o, (st.st_mode & 07777) | 0600) != 0)
                r = fail(out, "cjail fork: cannot copy `%s`: %s", n, strerror(errno));
            if (in >= 0) close(in);
            if (o >= 0) close(o);
        } else {
            r = fail(out, "cjail fork: `%s` is not a regular file, directory or symlink (a FIFO, socket or device)", n);
        }
        if (!r && chown_ids) fchownat(to, n, SANDBOX_ID, SANDBOX_ID, AT_SYMLINK_NOFOLLOW);
    }
    closedir(d);
    close(to);
    return r;
}

static int32_t cj_fork(void *user_data, void *handle, void **child, const nenyax_plugin_out_t *out) {
    sandbox_t *sb = handle;
    void *made = NULL;
    if (cj_create(user_data, sb->config_json, sb->config_len, &made, out)) return 1;
    sandbox_t *c = made;
    int sfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = sfd < 0 || dfd < 0 ? fail(out, "cjail fork: cannot open the sandbox directories") : 0;
    for (size_t i = 0; !r && i < sb->cfg.dirs.n; i++)
        r = copy_tree_at(sfd, sb->cfg.dirs.v[i], dfd, sb->cfg.dirs.v[i], c->host_root, out);
    if (sfd >= 0) close(sfd);
    if (dfd >= 0) close(dfd);
    if (r) {
        sandbox_free(c);
        return 1;
    }
    *child = c;
    return 0;
}

/* Every command's PID namespace died with its init, so nothing runs: remove the files. */
static void cj_destroy(void *user_data, void *handle) {
    (void)user_data;
    sandbox_free(handle);
}

/* ---------------------------------------------------------------------------------------------
 * exec: the plan (prepared on the host thread), the child side (system calls only), the host's
 * capture loop.
 */

/* One setup step of the jail's init, interpreted after clone. */
enum { OP_MKDIR, OP_SYMLINK, OP_BIND, OP_READONLY, OP_MOUNT, OP_TOUCH, OP_REMOUNT };

typedef struct {
    int op;
    const char *a, *b, *c; /* paths and mount data, owned by plan_t.strings */
    unsigned long flags;
    const char *what;      /* for the message when it fails */
} op_t;

typedef struct {
    vec_t strings; /* owns every path and mount option below (argv and envp are the caller's) */
    op_t *ops;
    size_t nops, capops;
    int oom;
    const char *root;   /* host_dir/.root, the jail's root once mounted */
    const char *cwd;
    char **argv, **envp;
    const char *path;   /* the PATH to search argv[0] in */
    char *exe_buf;      /* PATH search scratch, preallocated */
    size_t exe_len;
    long long cpu_s, memory_bytes, open_files, processes, file_size_bytes;
    int drop;           /* setresuid to nobody */
    int userns;         /* root: true: a user namespace mapped to `map` */
    const char *map;    /* "0 65534 1\n" */
    unsigned long args[4]; /* arg_start, arg_end, env_start, env_end of this process; 0: unknown */
} plan_t;

static const char *S(plan_t *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[PATH_MAX * 2];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    const char *s = vec_push(&p->strings, tmp);
    if (!s) p->oom = 1;
    return s ? s : "";
}

static void add_op(plan_t *p, int op, const char *a, const char *b, const char *c, unsigned long flags, const char *what) {
    if (p->nops == p->capops) {
        size_t cap = p->capops ? p->capops * 2 : 64;
        op_t *ops = realloc(p->ops, cap * sizeof *ops);
        if (!ops) {
            p->oom = 1;
            return;
        }
        p->ops = ops;
        p->capops = cap;
    }
    p->ops[p->nops++] = (op_t){op, a, b, c, flags, what};
}

static void plan_free(plan_t *p) {
    vec_free(&p->strings);
    free(p->ops);
    free(p->argv);
    free(p->envp);
    free(p->exe_buf);
}

/* Where this process's argv and environment strings lie (/proc/self/stat fields 48-51): the
 * jail's init is a copy of it and blanks them, so /proc/1 shows nothing of the host. */
static void arg_area(unsigned long out[4]) {
    memset(out, 0, 4 * sizeof *out);
    char stat[4096];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0) return;
    stat[n] = 0;
    char *p = strrchr(stat, ')');
    if (!p) return;
    p++;
    unsigned long f[4];
    for (int field = 3, k = 0; k < 4; field++) {
        while (*p == ' ') p++;
        if (!*p) return;
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (field >= 48) f[k++] = v;
        p = end;
        while (*p && *p != ' ') p++;
    }
    if (f[0] < f[1] && f[2] <= f[3]) memcpy(out, f, sizeof f);
}

/* The devices a jail gets, bound one by one into its private /dev, and its /dev symlinks. */
static const char *const DEVICES[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};
static const char *const DEV_LINKS[][2] = {
    {"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
    {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}, {NULL, NULL},
};

/* Lay out the jail: the host's top-level directories read-only (its symlinks recreated), /sys
 * read-only, the private directories read-write, a private /dev and /proc, and the new root
 * itself read-only. */
static int plan_mounts(plan_t *p, const sandbox_t *sb, const nenyax_plugin_out_t *out) {
    const char *R = p->root = S(p, "%s/.root", sb->dir);
    add_op(p, OP_MOUNT, "tmpfs", R, "size=1m,mode=755", MS_NOSUID | MS_NODEV, "mount the new root");
    DIR *d = opendir("/");
    if (!d) return fail(out, "cjail: cannot list /: %s", strerror(errno));
    static const char *const SKIP[] = {"proc", "sys", "dev", "tmp", "lost+found", NULL};
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *n = ent->d_name;
        int skip = !strcmp(n, ".") || !strcmp(n, "..") || is_private(&sb->cfg, n, strlen(n));
        for (int i = 0; SKIP[i] && !skip; i++) skip = !strcmp(n, SKIP[i]);
        if (skip) continue;
        char host[PATH_MAX];
        snprintf(host, sizeof host, "/%s", n);
        struct stat st;
        if (lstat(host, &st) != 0) continue;
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t k = readlink(host, target, sizeof target - 1);
            if (k <= 0) continue;
            target[k] = 0;
            add_op(p, OP_SYMLINK, S(p, "%s", target), S(p, "%s/%s", R, n), NULL, 0, "recreate a top-level symlink");
        } else if (S_ISDIR(st.st_mode)) {
            const char *at = S(p, "%s/%s", R, n);
            add_op(p, OP_MKDIR, at, NULL, NULL, 0, "create a mount point");
            add_op(p, OP_BIND, S(p, "%s", host), at, NULL, MS_REC, "bind a host directory");
            add_op(p, OP_READONLY, at, NULL, NULL, 0, "make a host directory read-only");
        }
    }
    closedir(d);
    const char *sys = S(p, "%s/sys", R);
    add_op(p, OP_MKDIR, sys, NULL, NULL, 0, "create /sys");
    add_op(p, OP_BIND, "/sys", sys, NULL, MS_REC, "bind /sys");
    add_op(p, OP_READONLY, sys, NULL, NULL, 0, "make /sys read-only");
    for (size_t i = 0; i < sb->cfg.dirs.n; i++) {
        const char *at = S(p, "%s/%s", R, sb->cfg.dirs.v[i]);
        add_op(p, OP_MKDIR, at, NULL, NULL, 0, "create a private directory's mount point");
        add_op(p, OP_BIND, S(p, "%s/%s", sb->dir, sb->cfg.dirs.v[i]), at, NULL, MS_REC, "bind a private directory");
    }
    const char *dev = S(p, "%s/dev", R);
    add_op(p, OP_MKDIR, dev, NULL, NULL, 0, "create /dev");
    add_op(p, OP_MOUNT, "tmpfs", dev, "size=64k,mode=755", MS_NOSUID | MS_NOEXEC, "mount /dev");
    for (int i = 0; DEVICES[i]; i++) {
        char host[64];
        snprintf(host, sizeof host, "/dev/%s", DEVICES[i]);
        if (access(host, F_OK) != 0) continue;
        const char *node = S(p, "%s/%s", dev, DEVICES[i]);
        add_op(p, OP_TOUCH, node, NULL, NULL, 0, "create a /dev node");
        add_op(p, OP_BIND, S(p, "%s", host), node, NULL, 0, "bind a host device");
    }
    const char *shm = S(p, "%s/shm", dev), *pts = S(p, "%s/pts", dev);
    add_op(p, OP_MKDIR, shm, NULL, NULL, 0, "create /dev/shm");
    add_op(p, OP_MOUNT, "tmpfs", shm, "size=67108864,mode=1777", MS_NOSUID | MS_NODEV, "mount /dev/shm");
    add_op(p, OP_MKDIR, pts, NULL, NULL, 0, "create /dev/pts");
    add_op(p, OP_MOUNT, "devpts", pts, "newinstance,ptmxmode=0666,mode=0620", MS_NOSUID | MS_NOEXEC, "mount /dev/pts");
    for (int i = 0; DEV_LINKS[i][0]; i++)
        add_op(p, OP_SYMLINK, DEV_LINKS[i][1], S(p, "%s/%s", dev, DEV_LINKS[i][0]), NULL, 0, "create a /dev symlink");
    add_op(p, OP_REMOUNT, dev, NULL, NULL, MS_RDONLY | MS_NOSUID | MS_NOEXEC, "make /dev read-only");
    const char *proc = S(p, "%s/proc", R);
    add_op(p, OP_MKDIR, proc, NULL, NULL, 0, "create /proc");
    add_op(p, OP_MOUNT, "proc", proc, NULL, MS_NOSUID | MS_NODEV | MS_NOEXEC, "mount /proc");
    add_op(p, OP_REMOUNT, R, NULL, NULL, MS_RDONLY | MS_NOSUID | MS_NODEV, "make the new root read-only");
    return p->oom ? fail(out, "out of memory") : 0;
}

/* --- The child side: only system calls from here to the end of child_init. --- */

static void wr(int fd, const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static void die(const char *a, const char *b, int err, int code) {
    wr(2, "cjail: ");
    wr(2, a);
    if (b) {
        wr(2, ": ");
        wr(2, b);
    }
    if (err) {
        char num[24], *q = num + sizeof num - 1;
        unsigned v = (unsigned)err;
        *q = 0;
        do *--q = (char)('0' + v % 10);
        while (v /= 10);
        wr(2, " failed (errno ");
        wr(2, q);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
        const char *name = strerrorname_np(err);
        if (name) {
            wr(2, " ");
            wr(2, name);
        }
#endif
        wr(2, ")");
    }
    wr(2, "\n");
    syscall(SYS_exit_group, code);
    for (;;) {
    }
}

/* Make `dst` and every mount under it read-only (mount_setattr, Linux 5.12+); older kernels
 * get the top mount only. */
static int read_only(const char *dst) {
    unsigned long long attr[4] = {1 /* MOUNT_ATTR_RDONLY */, 0, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, dst, AT_RECURSIVE, attr, sizeof attr) == 0) return 0;
    return mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
}

static void run_ops(const plan_t *p) {
    for (size_t i = 0; i < p->nops; i++) {
        const op_t *o = &p->ops[i];
        int r = 0, fd;
        switch (o->op) {
        case OP_MKDIR: r = mkdir(o->a, 0755) != 0 && errno != EEXIST ? -1 : 0; break;
        case OP_SYMLINK: r = symlink(o->a, o->b); break;
        case OP_BIND: r = mount(o->a, o->b, NULL, MS_BIND | o->flags, NULL); break;
        case OP_READONLY: r = read_only(o->a); break;
        case OP_MOUNT: r = mount(o->a, o->b, o->a, o->flags, o->c); break;
        case OP_TOUCH:
            fd = open(o->a, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
            r = fd < 0 ? -1 : close(fd);
            break;
        case OP_REMOUNT: r = mount(NULL, o->a, NULL, MS_BIND | MS_REMOUNT | o->flags, NULL); break;
        }
        if (r != 0) die("could not set up the jail", o->what, errno, SETUP_FAILED);
    }
}

static void close_from(unsigned from) {
    if (syscall(SYS_close_range, from, ~0U, 0) != 0)
        for (int fd = (int)from; fd < 4096; fd++) close(fd);
}

static void set_limit(int resource, long long v, long long hard) {
    if (v < 0) return;
    struct rlimit rl = {(rlim_t)v, (rlim_t)hard};
    if (setrlimit(resource, &rl) != 0) die("could not set a limit", NULL, errno, SETUP_FAILED);
}

/* Write `data` to /proc/<pid>/<file> (the path is built without allocation). */
static int write_proc(pid_t pid, const char *file, const char *data) {
    char path[64] = "/proc/", num[16], *q = num + sizeof num - 1;
    unsigned v = (unsigned)pid;
    *q = 0;
    do *--q = (char)('0' + v % 10);
    while (v /= 10);
    size_t n = 6;
    for (const char *s = q; *s; s++) path[n++] = *s;
    path[n++] = '/';
    for (const char *s = file; *s && n < sizeof path - 1; s++) path[n++] = *s;
    path[n] = 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len = strlen(data);
    ssize_t k = write(fd, data, len);
    close(fd);
    return k == (ssize_t)len ? 0 : -1;
}

/* The command: limits, its user, a clean signal state, then exec (searching PATH). */
static void child_command(const plan_t *p, int ready_w, int go_r) {
    sigset_t none;
    sigemptyset(&none);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
    /* The kernel's struct sigaction (handler, flags, restorer, mask): all zero is SIG_DFL. A
     * host that ignores SIGPIPE (Rust programs do) must not pass that on to the command. */
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        unsigned long mask;
    } dfl = {0, 0, 0, 0};
    for (int s = 1; s < _NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) syscall(SYS_rt_sigaction, s, &dfl, NULL, sizeof dfl.mask);
    close(3); /* init's status pipe */
    /* Soft CPU limit first (SIGXCPU), the hard one a second later (SIGKILL). */
    set_limit(RLIMIT_CPU, p->cpu_s, p->cpu_s + 1);
    set_limit(RLIMIT_AS, p->memory_bytes, p->memory_bytes);
    set_limit(RLIMIT_NOFILE, p->open_files, p->open_files);
    set_limit(RLIMIT_NPROC, p->processes, p->processes);
    set_limit(RLIMIT_FSIZE, p->file_size_bytes, p->file_size_bytes);
    /* No supplementary group of the host's root survives, in a user namespace or not. */
    if ((p->drop || p->userns) && syscall(SYS_setgroups, 0, NULL) != 0) die("could not drop groups", NULL, errno, SETUP_FAILED);
    if (p->userns) {
        /* Root of a user namespace whose uid and gid 0 are nobody on the host: init (outside
         * it) writes the maps. Its capabilities cover only that namespace; the jail's mounts
         * belong to the host's, so it can neither remount them nor unlock them. */
        if (syscall(SYS_unshare, CLONE_NEWUSER) != 0) die("could not create a user namespace", NULL, errno, SETUP_FAILED);
        char b = 1;
        if (write(ready_w, &b, 1) != 1 || read(go_r, &b, 1) != 1 || b != 1)
            die("could not map the user namespace", NULL, 0, SETUP_FAILED);
        if (syscall(SYS_setresgid, 0, 0, 0) != 0 || syscall(SYS_setresuid, 0, 0, 0) != 0)
            die("could not become root of the user namespace", NULL, errno, SETUP_FAILED);
    } else if (p->drop) {
        if (syscall(SYS_setresgid, SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) != 0 ||
            syscall(SYS_setresuid, SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) != 0)
            die("could not become nobody", NULL, errno, SETUP_FAILED);
    }
    if (ready_w >= 0) close(ready_w);
    if (go_r >= 0) close(go_r);
    /* The host's setuid programs are visible in the jail: running one must not make the
     * command root again. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("could not set no_new_privs", NULL, errno, SETUP_FAILED);
    const char *prog = p->argv[0];
    int has_slash = 0;
    for (const char *s = prog; *s; s++) has_slash |= *s == '/';
    if (has_slash) {
        execve(prog, p->argv, p->envp);
        die("cannot run", prog, errno, errno == ENOENT ? 127 : 126);
    }
    int denied = 0;
    for (const char *s = p->path; s;) {
        const char *e = s;
        while (*e && *e != ':') e++;
        size_t dl = (size_t)(e - s), pl = strlen(prog);
        if (dl + pl + 2 <= p->exe_len) {
            char *b = p->exe_buf;
            size_t k = 0;
            for (size_t i = 0; i < dl; i++) b[k++] = s[i];
            if (dl == 0) b[k++] = '.';
            b[k++] = '/';
            for (size_t i = 0; i <= pl; i++) b[k++] = prog[i];
            execve(b, p->argv, p->envp);
            if (errno == EACCES) denied = 1;
            else if (errno != ENOENT && errno != ENOTDIR) die("cannot run", prog, errno, 126);
        }
        s = *e ? e + 1 : NULL;
    }
    die(denied ? "permission denied running" : "command not found", prog, 0, denied ? 126 : 127);
}

/* PID 1 of the new PID namespace: set up the jail, start the command, reap every orphan until
 * the command ends, and report how it ended on fd 3 (then the namespace dies with it). */
static void child_init(plan_t *p, int fds[4]) {
    /* The command's stdio on 0-2 and the status pipe on 3; every other descriptor of the
     * (multi-threaded) host is closed. */
    int tmp[4];
    for (int i = 0; i < 4; i++)
        if ((tmp[i] = fcntl(fds[i], F_DUPFD, 16)) < 0) syscall(SYS_exit_group, SETUP_FAILED);
    for (int i = 0; i < 4; i++)
        if (dup2(tmp[i], i) != i) syscall(SYS_exit_group, SETUP_FAILED);
    close_from(4);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("could not make the mounts private", NULL, errno, SETUP_FAILED);
    run_ops(p);
    if (sethostname("nenyax", 6) != 0) die("could not set the hostname", NULL, errno, SETUP_FAILED);
    /* Make the new root the namespace's root and detach the host's, so no path (not even the
     * chroot escape of root in a user namespace) leads back to the host's file system. */
    if (chdir(p->root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
        die("could not enter the new root", NULL, errno, SETUP_FAILED);
    if (chdir(p->cwd) != 0) die("could not enter the working directory", p->cwd, errno, SETUP_FAILED);
    /* Nothing of the host's nenyax shows through /proc/1: not dumpable (its memory and environ
     * stay closed), its argv and environment blanked, its name nenyax-init. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_NAME, (unsigned long)INIT_NAME, 0, 0, 0);
    if (p->args[1]) {
        size_t room = p->args[1] - p->args[0], name = room < sizeof INIT_NAME ? room - 1 : sizeof INIT_NAME - 1;
        memset((void *)p->args[0], 0, room);
        memset((void *)p->args[2], 0, p->args[3] - p->args[2]);
        /* As much of the name as the host's argv area holds; then shrink argv to it. */
        memcpy((void *)p->args[0], INIT_NAME, name);
        prctl(PR_SET_MM, PR_SET_MM_ARG_END, p->args[0] + name + 1, 0, 0);
    }
    int ready[2] = {-1, -1}, go[2] = {-1, -1};
    if (p->userns && (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0))
        die("could not set up the jail", "pipe2", errno, SETUP_FAILED);
    pid_t cmd = raw_clone(SIGCHLD);
    if (cmd < 0) die("could not start the command", NULL, errno, SETUP_FAILED);
    if (cmd == 0) {
        if (ready[0] >= 0) close(ready[0]);
        if (go[1] >= 0) close(go[1]);
        child_command(p, ready[1], go[0]);
    }
    /* Init keeps no copy of the command's stdio: the host sees the streams end with it. */
    close(0);
    close(1);
    if (p->userns) {
        /* Only the command's ends stay open over there: if it dies before it asks, the read
         * sees the end instead of waiting forever. */
        close(ready[1]);
        close(go[0]);
        char b = 0;
        if (read(ready[0], &b, 1) == 1) {
            b = write_proc(cmd, "setgroups", "deny") == 0 && write_proc(cmd, "uid_map", p->map) == 0 &&
                write_proc(cmd, "gid_map", p->map) == 0;
            if (write(go[1], &b, 1) != 1) b = 0;
        }
        close(ready[0]);
        close(go[1]);
    }
    close(2);
    int report[4] = {0, 127, 0, 0}; /* kind (0 exit, 1 signal), value, CPU milliseconds (lo, hi) */
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, __WALL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) break;
        if (w == cmd && WIFEXITED(st)) {
            report[0] = 0, report[1] = WEXITSTATUS(st);
            break;
        }
        if (w == cmd && WIFSIGNALED(st)) {
            report[0] = 1, report[1] = WTERMSIG(st);
            break;
        }
    }
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
        long long ms = (long long)ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 +
                       (long long)ru.ru_stime.tv_sec * 1000 + ru.ru_stime.tv_usec / 1000;
        report[2] = (int)(ms & 0x7fffffff);
        report[3] = (int)(ms >> 31);
    }
    if (write(3, report, sizeof report) != (ssize_t)sizeof report) syscall(SYS_exit_group, 1);
    syscall(SYS_exit_group, 0);
}

/* --- The host side. --- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A captured stream: up to `cap` bytes kept, the rest counted. */
typedef struct {
    int fd;
    buf_t kept;
} stream_t;

static void drain(stream_t *s, size_t cap, unsigned long long *dropped) {
    char chunk[65536];
    for (;;) {
        ssize_t k = read(s->fd, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) return;
        if (k <= 0) {
            close(s->fd);
            s->fd = -1;
            return;
        }
        size_t room = s->kept.n < cap ? cap - s->kept.n : 0, keep = (size_t)k < room ? (size_t)k : room;
        buf_add(&s->kept, chunk, keep);
        *dropped += (unsigned long long)k - keep;
    }
}

static int32_t cj_exec(void *user_data, void *handle, const char *request, size_t len, const nenyax_plugin_out_t *out) {
    (void)user_data;
    sandbox_t *sb = handle;
    const config_t *cfg = &sb->cfg;
    char err[512];
    json req;
    if (json_parse(request, len, &req, err, sizeof err)) return fail(out, "cjail: bad exec request: %s", err);
    plan_t p;
    memset(&p, 0, sizeof p);
    vec_t argv = {0}, env = {0};
    int32_t rc = 1;
    const json *jargv = json_get(&req, "argv"), *shell = json_get(&req, "shell"), *jenv = json_get(&req, "env");
    const json *jstdin = json_get(&req, "stdin"), *jtimeout = json_get(&req, "timeout_s"), *jout = json_get(&req, "output_bytes");
    const char *cwd = json_cstr(json_get(&req, "cwd"));
    if (req.type != J_OBJ) {
        fail(out, "cjail: an exec request must be a JSON object");
        goto done;
    }
    /* The command line. */
    if (shell && shell->type == J_STR && (!jargv || jargv->type == J_NULL || (jargv->type == J_ARR && jargv->len == 0))) {
        if (!json_cstr(shell)) {
            fail(out, "cjail: the shell command holds a NUL byte");
            goto done;
        }
        vec_push(&argv, access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh");
        vec_push(&argv, "-c");
        vec_push(&argv, shell->str);
    } else if (jargv && jargv->type == J_ARR && jargv->len > 0 && (!shell || shell->type == J_NULL)) {
        for (size_t i = 0; i < jargv->len; i++) {
            const char *a = json_cstr(&jargv->items[i]);
            if (!a) {
                fail(out, "cjail: argv[%zu] must be a string without NUL bytes", i);
                goto done;
            }
            vec_push(&argv, a);
        }
    } else {
        fail(out, "cjail: an exec needs exactly one of argv (non-empty) or shell");
        goto done;
    }
    /* The environment: the documented base, then the sandbox's and the command's variables;
     * nothing of the host's. */
    env_set(&env, "PATH", 4, BASE_PATH, strlen(BASE_PATH));
    env_set(&env, "HOME", 4, "/tmp", 4);
    env_set(&env, "LANG", 4, "C.UTF-8", 7);
    env_set(&env, "TMPDIR", 6, "/tmp", 4);
    env_set(&env, "NENYAX_SANDBOX", 14, cfg->id, strlen(cfg->id));
    for (size_t i = 0; i < cfg->env.n; i++) {
        const char *eq = strchr(cfg->env.v[i], '=');
        env_set(&env, cfg->env.v[i], (size_t)(eq - cfg->env.v[i]), eq + 1, strlen(eq + 1));
    }
    if (jenv && jenv->type == J_OBJ) {
        for (size_t i = 0; i < jenv->len; i++) {
            const char *val = json_cstr(&jenv->items[i]), *key = jenv->keys[i];
            if (!val || !*key || strchr(key, '=')) {
                fail(out, "cjail: env `%s`: names must be non-empty without `=`, values strings without NUL", key);
                goto done;
            }
            env_set(&env, key, strlen(key), val, strlen(val));
        }
    }
    for (size_t i = 0; i < env.n; i++)
        if (!strncmp(env.v[i], "PATH=", 5)) p.path = env.v[i] + 5;
    /* The working directory: inside a private directory, and there. */
    if (!cwd) cwd = cfg->workdir;
    {
        where_t w;
        int r = resolve(sb, cwd, 0, &w, out);
        if (r == 2) {
            fail(out, "working directory `%s` does not exist in the sandbox; create it first (put or mkdir)", cwd);
            goto done;
        }
        if (r) goto done;
        struct stat st;
        int there = fstatat(w.dfd, w.leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        where_close(&w);
        if (!there) {
            fail(out, "working directory `%s` does not exist in the sandbox; create it first (put or mkdir)", cwd);
            goto done;
        }
    }
    if (argv.oom || env.oom) {
        fail(out, "out of memory");
        goto done;
    }
    /* The plan. */
    if (plan_mounts(&p, sb, out)) goto done;
    p.cwd = S(&p, "%s", cwd);
    p.argv = argv.v;
    p.envp = env.v;
    p.exe_len = PATH_MAX * 2;
    p.exe_buf = malloc(p.exe_len);
    p.cpu_s = cfg->cpu_s;
    p.memory_bytes = cfg->memory_bytes;
    p.open_files = cfg->open_files;
    p.processes = cfg->processes;
    p.file_size_bytes = cfg->file_size_bytes;
    p.userns = cfg->root;
    p.drop = !cfg->root && sb->host_root;
    p.map = sb->host_root ? "0 65534 1\n" : S(&p, "0 %u 1\n", (unsigned)geteuid());
    arg_area(p.args);
    if (!p.exe_buf || p.oom) {
        fail(out, "out of memory");
        goto done;
    }
    double timeout = jtimeout && jtimeout->type == J_NUM ? jtimeout->num : cfg->wall_s;
    size_t cap = jout && jout->type == J_NUM && jout->num >= 0 ? (size_t)jout->num : cfg->output_bytes;
    const char *in_data = jstdin && jstdin->type == J_STR ? jstdin->str : "";
    size_t in_len = jstdin && jstdin->type == J_STR ? jstdin->len : 0;

    /* Pipes: stdin, stdout, stderr, status (close-on-exec on the host, so other threads'
     * children do not keep them open). */
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, pst[2] = {-1, -1};
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC) || pipe2(pst, O_CLOEXEC)) {
        fail(out, "cjail: cannot make pipes: %s", strerror(errno));
        int all[8] = {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1], pst[0], pst[1]};
        for (int i = 0; i < 8; i++)
            if (all[i] >= 0) close(all[i]);
        goto done;
    }
    /* SIGPIPE from writing stdin to a command that has gone must not kill the host. */
    sigset_t pipe_set, old_mask;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
    double t0 = now_s();
    int child_fds[4] = {pin[0], pout[1], perr[1], pst[1]};
    pid_t pid = raw_clone(jail_flags(cfg->network) | SIGCHLD);
    if (pid == 0) child_init(&p, child_fds);
    int clone_errno = errno;
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    close(pst[1]);
    if (pid < 0) {
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        close(pst[0]);
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        fail(out, "cjail: cannot start the jail (clone): %s", strerror(clone_errno));
        goto done;
    }
    stream_t streams[2] = {{pout[0], {0}}, {perr[0], {0}}};
    int in_fd = pin[1];
    size_t in_done = 0;
    fcntl(pout[0], F_SETFL, O_NONBLOCK);
    fcntl(perr[0], F_SETFL, O_NONBLOCK);
    fcntl(in_fd, F_SETFL, O_NONBLOCK);
    unsigned long long dropped = 0;
    int timed_out = 0, reaped = 0, status = 0, epipe = 0;
    double reaped_at = 0;
    for (;;) {
        if (in_fd >= 0 && in_done == in_len) {
            close(in_fd);
            in_fd = -1;
        }
        struct pollfd pfd[3];
        int n = 0;
        for (int i = 0; i < 2; i++)
            if (streams[i].fd >= 0) pfd[n++] = (struct pollfd){streams[i].fd, POLLIN, 0};
        if (in_fd >= 0) pfd[n++] = (struct pollfd){in_fd, POLLOUT, 0};
        if (n) poll(pfd, (nfds_t)n, 20);
        for (int i = 0; i < 2; i++)
            if (streams[i].fd >= 0) drain(&streams[i], cap, &dropped);
        if (in_fd >= 0) {
            ssize_t k = write(in_fd, in_data + in_done, in_len - in_done);
            if (k > 0) in_done += (size_t)k;
            else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                epipe |= errno == EPIPE;
                in_done = in_len;
            }
        }
        if (!reaped) {
            pid_t w = waitpid(pid, &status, WNOHANG | __WALL);
            /* ECHILD: a host that reaps every child (a SIGCHLD handler) got there first; the
             * status pipe still tells how the command ended. */
            if (w == pid || (w < 0 && errno == ECHILD)) {
                if (w < 0) status = 126 << 8; /* unknown: exited 126 unless the pipe says */
                reaped = 1;
                reaped_at = now_s();
            }
        }
        if (reaped && streams[0].fd < 0 && streams[1].fd < 0) break;
        /* Nothing outlives init, so its streams end with it; never wait long for them. */
        if (reaped && now_s() - reaped_at > 2.0) break;
        if (!reaped && !timed_out && timeout >= 0 && now_s() - t0 >= timeout) {
            kill(pid, SIGKILL);
            timed_out = 1;
        }
        if (!n && !reaped) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    double duration = now_s() - t0;
    if (in_fd >= 0) close(in_fd);
    for (int i = 0; i < 2; i++)
        if (streams[i].fd >= 0) close(streams[i].fd);
    if (epipe) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    int report[4];
    ssize_t got = read(pst[0], report, sizeof report);
    close(pst[0]);
    /* How it ended: the command's status from init, else init's own (a setup failure, 125). */
    int exited, value;
    long long cpu_ms = 0;
    if (got == (ssize_t)sizeof report) {
        exited = report[0] == 0;
        value = report[1];
        cpu_ms = (long long)report[2] | ((long long)report[3] << 31);
    } else if (timed_out || WIFSIGNALED(status)) {
        exited = 0;
        value = timed_out ? SIGKILL : WTERMSIG(status);
    } else {
        exited = 1;
        value = WIFEXITED(status) ? WEXITSTATUS(status) : 127;
    }
    const char *killed = "null";
    if (timed_out) killed = "\"timeout\"";
    else if (!exited) {
        if (value == SIGXCPU || (value == SIGKILL && cfg->cpu_s >= 0 && cpu_ms + 100 >= cfg->cpu_s * 1000))
            killed = "\"cpu_limit\"";
        else if (value == SIGXFSZ) killed = "\"file_size_limit\"";
        else killed = "\"signal\"";
    }
    buf_t o = {0};
    if (exited) buf_fmt(&o, "{\"exit_code\":%d,\"signal\":null,\"stdout\":", value);
    else buf_fmt(&o, "{\"exit_code\":null,\"signal\":%d,\"stdout\":", value);
    json_string(&o, (const unsigned char *)(streams[0].kept.p ? streams[0].kept.p : ""), streams[0].kept.n);
    buf_str(&o, ",\"stderr\":");
    json_string(&o, (const unsigned char *)(streams[1].kept.p ? streams[1].kept.p : ""), streams[1].kept.n);
    buf_fmt(&o, ",\"dropped_bytes\":%llu,\"duration_s\":%.6f,\"killed\":%s}", dropped, duration, killed);
    free(streams[0].kept.p);
    free(streams[1].kept.p);
    if (o.oom) fail(out, "out of memory");
    else {
        out->write(out->ctx, o.p, o.n);
        rc = 0;
    }
    free(o.p);
done:
    /* argv and env are owned by their vectors; the plan only borrowed their arrays. */
    p.argv = NULL;
    p.envp = NULL;
    plan_free(&p);
    vec_free(&argv);
    vec_free(&env);
    json_free(&req);
    return rc;
}

static const nenyax_sandbox_vtable_t VTABLE = {
    CJAIL_VTABLE_VERSION,
    NENYAX_ISOLATION_JAIL,
    cj_ready,
    cj_create,
    cj_exec,
    cj_put,
    cj_get,
    cj_list,
    cj_remove,
    cj_fork,
    NULL, /* url: a jail has no network to reach */
    cj_destroy,
    NULL,
};

static const nenyax_plugin_t PLUGINS[] = {{
    NENYAX_PLUGIN_ABI_VERSION,
    NENYAX_PLUGIN_KIND_SANDBOX,
    CJAIL_VTABLE_VERSION,
    NENYAX_PLUGIN_THREAD_SAFE, /* no shared mutable state: each exec is its own jail */
    "cjail",
    "0.1.0",
    &VTABLE,
    NULL,
}};

/* What Nenyax looks up in the library: the one descriptor, for a host of this plugin ABI. */
int32_t nenyax_plugin_entry(uint32_t host_abi_version, const nenyax_plugin_t **plugins, size_t *count) {
    if (host_abi_version != NENYAX_PLUGIN_ABI_VERSION) return 1;
    *plugins = PLUGINS;
    *count = sizeof PLUGINS / sizeof PLUGINS[0];
    return 0;
}
