/* gemm_table.c — the ZL_GEMM_TABLE file: load, find, save (see gemm_table.h). */
#include "gemm_table.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replace.h" /* zl_replace: the table written whole or not at all */

/* err gets the message; returns -1 (as the loader and saver do on failure). */
static int fail(char *err, int len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)len, fmt, ap);
    va_end(ap);
    return -1;
}

/* A whole number field of o, into *v: 1, or 0 when it is missing, not a whole number or not an int. */
static int int_field(const cJSON *o, const char *name, int *v) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(f) || !(f->valuedouble >= INT_MIN && f->valuedouble <= INT_MAX) ||
        f->valuedouble != (double)(int)f->valuedouble)
        return 0;
    *v = (int)f->valuedouble;
    return 1;
}

/* A transpose, "N" or "T", into *v (0, 1): 1, or 0 when it is neither. */
static int trans_field(const cJSON *o, const char *name, int *v) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(f) || (strcmp(f->valuestring, "N") && strcmp(f->valuestring, "T"))) return 0;
    *v = f->valuestring[0] == 'T';
    return 1;
}

/* The whole file, NUL-terminated (the caller frees it), or NULL with why in err. */
static char *read_all(const char *path, char *err, int len) {
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, len, "cannot open %s: %s", path, strerror(errno)), NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            char *b = realloc(buf, cap = 2 * cap + 4096 + 1);
            if (!b) return free(buf), fclose(f), fail(err, len, "out of host memory reading %s", path), NULL;
            buf = b;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) return free(buf), fail(err, len, "cannot read %s", path), NULL;
    buf[n] = '\0';
    return buf;
}

/* gemms[i] into *e: 0, or -1 with why. */
static int entry_of(const cJSON *g, zl_gemm_entry *e, int i, char *err, int len) {
    const cJSON *what = cJSON_GetObjectItemCaseSensitive(g, "what");
    const cJSON *algo = cJSON_GetObjectItemCaseSensitive(g, "algo");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(g, "dtype");
    zl_gemm_shape *s = &e->shape;
    zl_gemm_algo *a = &e->algo;
    snprintf(e->what, sizeof e->what, "%s", cJSON_IsString(what) ? what->valuestring : "?");
    if (!int_field(g, "m", &s->m) || !int_field(g, "n", &s->n) || !int_field(g, "k", &s->k) ||
        !trans_field(g, "transa", &s->transa) || !trans_field(g, "transb", &s->transb) ||
        !int_field(g, "epilogue", &s->epilogue) || !cJSON_IsString(dtype) ||
        (strcmp(dtype->valuestring, "fp16") && strcmp(dtype->valuestring, "bf16")))
        return fail(err, len, "gemms[%d]: want m, n, k, transa and transb (\"N\" or \"T\"), epilogue, dtype "
                    "(\"fp16\" or \"bf16\")", i);
    s->bf16 = !strcmp(dtype->valuestring, "bf16");
    if (s->m < 1 || s->n < 1 || s->k < 1) return fail(err, len, "gemms[%d]: m, n, k must be positive", i);
    if ((long long)s->m * s->n < ZL_GEMM_MIN_OUTPUTS)
        return fail(err, len, "gemms[%d] (%s): %d x %d outputs, fewer than the %lld a table may hold (the trainer "
                    "keeps the first answer there)", i, e->what, s->m, s->n, ZL_GEMM_MIN_OUTPUTS);
    if (!cJSON_IsObject(algo) || !int_field(algo, "id", &a->id) || !int_field(algo, "tile", &a->tile) ||
        !int_field(algo, "stages", &a->stages) || !int_field(algo, "splitk", &a->splitk) ||
        !int_field(algo, "reduction", &a->reduction) || !int_field(algo, "swizzle", &a->swizzle) ||
        !int_field(algo, "custom", &a->custom) || !int_field(algo, "inner", &a->inner) ||
        !int_field(algo, "cluster", &a->cluster))
        return fail(err, len, "gemms[%d] (%s): want algo {id, tile, stages, splitk, reduction, swizzle, custom, inner, "
                    "cluster}", i, e->what);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(g, "first_ms"), *m = cJSON_GetObjectItemCaseSensitive(g, "ms");
    e->first_ms = cJSON_IsNumber(f) ? f->valuedouble : -1;
    e->ms = cJSON_IsNumber(m) ? m->valuedouble : -1;
    return 0;
}

/* The parsed file into *t: 0, or -1 with why. */
static int table_of(const cJSON *j, zl_gemm_table *t, char *err, int len) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(j, "gpu");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(j, "made_by");
    const cJSON *gemms = cJSON_GetObjectItemCaseSensitive(j, "gemms");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, ZL_GEMM_TABLE_FORMAT))
        return fail(err, len, "want \"format\": \"%s\"", ZL_GEMM_TABLE_FORMAT);
    if (!cJSON_IsString(gpu) || !int_field(j, "cublaslt_version", &t->cublaslt_version) || !cJSON_IsArray(gemms))
        return fail(err, len, "want \"gpu\" (a name), \"cublaslt_version\" (a number) and \"gemms\" (a list)");
    snprintf(t->gpu, sizeof t->gpu, "%s", gpu->valuestring);
    snprintf(t->made_by, sizeof t->made_by, "%s", cJSON_IsString(by) ? by->valuestring : "");
    int n = cJSON_GetArraySize(gemms);
    t->e = calloc((size_t)(n ? n : 1), sizeof *t->e);
    if (!t->e) return fail(err, len, "out of host memory");
    for (int i = 0; i < n; i++) {
        if (entry_of(cJSON_GetArrayItem(gemms, i), &t->e[i], i, err, len)) return -1;
        for (int k = 0; k < i; k++) /* one algorithm a configuration */
            if (!memcmp(&t->e[k].shape, &t->e[i].shape, sizeof t->e[i].shape))
                return fail(err, len, "gemms[%d] and gemms[%d] are the same GEMM", k, i);
        t->n = i + 1;
    }
    return 0;
}

int zl_gemm_table_load(const char *path, zl_gemm_table *t, char *err, int len) {
    memset(t, 0, sizeof *t);
    char *text = read_all(path, err, len);
    if (!text) return -1;
    cJSON *j = cJSON_ParseWithOpts(text, NULL, 1); /* one JSON value, nothing after it */
    free(text);
    if (!j) return fail(err, len, "%s is not one JSON value", path);
    char why[384];
    int rc = table_of(j, t, why, sizeof why);
    cJSON_Delete(j);
    if (rc) {
        zl_gemm_table_free(t);
        return fail(err, len, "%s: %s", path, why);
    }
    return 0;
}

const zl_gemm_entry *zl_gemm_table_find(const zl_gemm_table *t, const zl_gemm_shape *s) {
    for (int i = 0; t && i < t->n; i++)
        if (!memcmp(&t->e[i].shape, s, sizeof *s)) return &t->e[i];
    return NULL;
}

int zl_gemm_table_matches(const zl_gemm_table *t, const char *gpu, int cublaslt_version) {
    return !strcmp(t->gpu, gpu) && t->cublaslt_version == cublaslt_version;
}

static cJSON *entry_json(const zl_gemm_entry *e) {
    const zl_gemm_shape *s = &e->shape;
    const zl_gemm_algo *a = &e->algo;
    cJSON *g = cJSON_CreateObject(), *algo = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "what", e->what);
    cJSON_AddNumberToObject(g, "m", s->m);
    cJSON_AddNumberToObject(g, "n", s->n);
    cJSON_AddNumberToObject(g, "k", s->k);
    cJSON_AddStringToObject(g, "transa", s->transa ? "T" : "N");
    cJSON_AddStringToObject(g, "transb", s->transb ? "T" : "N");
    cJSON_AddNumberToObject(g, "epilogue", s->epilogue);
    cJSON_AddStringToObject(g, "dtype", s->bf16 ? "bf16" : "fp16");
    const char *names[] = {"id", "tile", "stages", "splitk", "reduction", "swizzle", "custom", "inner", "cluster"};
    const int values[] = {a->id,        a->tile,   a->stages, a->splitk, a->reduction,
                          a->swizzle,   a->custom, a->inner,  a->cluster};
    for (int i = 0; i < 9; i++) cJSON_AddNumberToObject(algo, names[i], values[i]);
    cJSON_AddItemToObject(g, "algo", algo);
    cJSON_AddNumberToObject(g, "first_ms", e->first_ms);
    cJSON_AddNumberToObject(g, "ms", e->ms);
    return g;
}

int zl_gemm_table_save(const char *path, const zl_gemm_table *t, char *err, int len) {
    cJSON *j = cJSON_CreateObject(), *gemms = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "format", ZL_GEMM_TABLE_FORMAT);
    cJSON_AddStringToObject(j, "gpu", t->gpu);
    cJSON_AddNumberToObject(j, "cublaslt_version", t->cublaslt_version);
    cJSON_AddStringToObject(j, "made_by", t->made_by);
    for (int i = 0; i < t->n; i++) cJSON_AddItemToArray(gemms, entry_json(&t->e[i]));
    cJSON_AddItemToObject(j, "gemms", gemms);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return fail(err, len, "out of host memory");
    /* whole or not at all (replace.h): a table cut short would be refused on load, and the one it
     * replaced lost */
    zl_replace r;
    int e = zl_replace_resolve(&r, path);
    if (!e) e = zl_replace_begin(&r);
    if (!e && (fputs(text, r.f) < 0 || fputs("\n", r.f) < 0)) e = errno ? errno : EIO;
    free(text);
    if (r.f) e = e ? (zl_replace_discard(&r), e) : zl_replace_commit(&r, NULL);
    return e ? fail(err, len, "cannot write %s: %s", path, strerror(e)) : 0;
}

void zl_gemm_table_free(zl_gemm_table *t) {
    free(t->e);
    t->e = NULL, t->n = 0;
}
