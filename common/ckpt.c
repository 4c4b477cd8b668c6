/* ckpt.c — sharded checkpoints: the format, its checks, the parallel save and the
 * resharding load (see ckpt.h; the format is drawn in docs/ARCHITECTURE.md). */
#define _GNU_SOURCE /* renameat2 */
#include "ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h> /* flock */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* header-only: XXH3_state_t on the stack, no library to link or ship */
#include <xxhash.h>

#include "alloc.h"
#include "util.h"
#include "watchdog.h"
#include "../kernels/kernels.h"

#define SEAL_KEY "\"manifest_xxh3_64\""
#define MANIFEST_MAX ((size_t)256 << 20) /* a million units fit in a few tens of MB */

static const char *const cat_names[ZL_CKPT_NCAT] = {"master_fp32", "adam_m", "adam_v", "params"};
const char *zl_ckpt_cat_name(int cat) { return cat >= 0 && cat < ZL_CKPT_NCAT ? cat_names[cat] : "?"; }
static size_t cat_elem_bytes(int cat) { return cat == ZL_CKPT_PARAMS ? 2 : 4; }

static int msg(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int msg(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- layout of a rank file ------------------------------------------------------- */

size_t zl_ckpt_cat_bytes(const zl_ckpt_manifest *m, int cat) {
    if (cat == ZL_CKPT_PARAMS && !m->has_params) return 0;
    return cat_elem_bytes(cat) * m->part.shard_len;
}

size_t zl_ckpt_cat_offset(const zl_ckpt_manifest *m, int cat) {
    size_t off = 0;
    for (int c = 0; c < cat; c++) off += zl_ckpt_cat_bytes(m, c);
    return off;
}

void zl_ckpt_rank_path(char *out, size_t n, const char *dir, int rank) {
    snprintf(out, n, "%s/rank-%05d.bin", dir, rank);
}

/* DIR.zl-tmp, DIR.zl-old: the save's names beside DIR */
void zl_ckpt_sibling(char *out, size_t n, const char *dir, const char *suffix) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--; /* "ckpt/" -> "ckpt.zl-tmp", not "ckpt/.zl-tmp" */
    snprintf(out, n, "%.*s%s", (int)len, dir, suffix);
}

static const char *rank_name(int rank, char *buf, size_t n) {
    snprintf(buf, n, "rank-%05d.bin", rank);
    return buf;
}

static void hex64(char out[17], uint64_t v) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

static int parse_hex64(const char *s, uint64_t *v) {
    if (!s || strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16) return -1;
    *v = strtoull(s, NULL, 16);
    return 0;
}

/* ---- manifest: write ----------------------------------------------------------------- */

static cJSON *int_array(const size_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static cJSON *manifest_json(const zl_ckpt_manifest *m) {
    char buf[32], name[32];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "zerolab-checkpoint");
    cJSON_AddNumberToObject(j, "version", m->version);
    cJSON *model = cJSON_AddObjectToObject(j, "model");
    int gpt = m->shape.kind == ZL_MODEL_GPT;
    cJSON_AddStringToObject(model, "kind", gpt ? "gpt" : "mlp");
    cJSON_AddNumberToObject(model, "layers", m->shape.layers);
    cJSON_AddNumberToObject(model, "dim", m->shape.dim);
    if (gpt) { /* the unit sizes hang on T and V; H on how the parameters are used */
        cJSON_AddNumberToObject(model, "seq", m->shape.seq);
        cJSON_AddNumberToObject(model, "heads", m->shape.heads);
        cJSON_AddNumberToObject(model, "vocab", m->shape.vocab);
    }
    cJSON_AddStringToObject(j, "dtype", zl_dtype_name(m->dtype));
    cJSON_AddNumberToObject(j, "stage", m->stage);
    cJSON_AddNumberToObject(j, "world", m->world);
    cJSON_AddNumberToObject(j, "rows_per_rank", m->shape.rows);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)m->seed);
    cJSON_AddStringToObject(j, "seed", buf);
    if (m->data.kind == ZL_CKPT_DATA_SYNTHETIC) cJSON_AddStringToObject(j, "data", "synthetic");
    if (m->data.kind == ZL_CKPT_DATA_TEXT) {
        cJSON *d = cJSON_AddObjectToObject(j, "data");
        cJSON_AddNumberToObject(d, "bytes", (double)m->data.bytes);
        hex64(buf, m->data.xxh3);
        cJSON_AddStringToObject(d, "xxh3_64", buf);
    }
    cJSON_AddNumberToObject(j, "params", (double)m->part.psi);
    cJSON_AddNumberToObject(j, "params_padded", (double)m->part.psi_pad);
    cJSON *units = cJSON_AddObjectToObject(j, "units");
    cJSON_AddItemToObject(units, "n", int_array(m->part.n, m->part.n_units));
    cJSON_AddItemToObject(units, "n_pad", int_array(m->part.n_pad, m->part.n_units));
    cJSON_AddItemToObject(units, "slice_len", int_array(m->part.slice_len, m->part.n_units));
    cJSON *cats = cJSON_AddArrayToObject(j, "categories");
    for (int c = 0; c < ZL_CKPT_NCAT; c++)
        if (zl_ckpt_cat_bytes(m, c)) cJSON_AddItemToArray(cats, cJSON_CreateString(cat_names[c]));
    cJSON_AddNumberToObject(j, "step", m->at.step);
    cJSON_AddNumberToObject(j, "adam_step", m->at.adam_step);
    cJSON_AddNumberToObject(j, "data_rows", (double)m->at.data_rows);
    cJSON *sc = cJSON_AddObjectToObject(j, "loss_scaler");
    cJSON_AddNumberToObject(sc, "dynamic", m->at.scaler.dynamic);
    cJSON_AddNumberToObject(sc, "scale", m->at.scaler.scale);
    cJSON_AddNumberToObject(sc, "window", m->at.scaler.window);
    cJSON_AddNumberToObject(sc, "clean_steps", m->at.scaler.clean_steps);
    cJSON_AddNumberToObject(sc, "skipped", (double)m->at.scaler.skipped);
    cJSON_AddNumberToObject(j, "file_bytes", (double)m->file_bytes);
    cJSON *files = cJSON_AddArrayToObject(j, "files");
    for (int r = 0; r < m->world; r++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", rank_name(r, name, sizeof name));
        hex64(buf, m->file_hash[r]);
        cJSON_AddStringToObject(f, "xxh3_64", buf);
        cJSON_AddItemToArray(files, f);
    }
    return j;
}

/* The JSON text with a last member holding the XXH3-64 of every byte before that member. */
static char *sealed_text(const zl_ckpt_manifest *m) {
    cJSON *j = manifest_json(m);
    char *body = cJSON_Print(j);
    cJSON_Delete(j);
    if (!body) return NULL;
    size_t len = strlen(body);
    while (len && body[len - 1] != '}') len--; /* drop the closing brace: the seal goes before it */
    if (len) len--;
    while (len && (body[len - 1] == '\n' || body[len - 1] == '\t')) len--;
    size_t cap = len + 64;
    char *text = malloc(cap);
    if (!text) return free(body), NULL;
    int prefix = snprintf(text, cap, "%.*s,\n\t", (int)len, body);
    char h[17];
    hex64(h, XXH3_64bits(text, (size_t)prefix));
    snprintf(text + prefix, cap - (size_t)prefix, SEAL_KEY ":\t\"%s\"\n}\n", h);
    free(body);
    return text;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : EIO;
        c += w, n -= (size_t)w;
    }
    return 0;
}

int zl_ckpt_write_manifest(const char *dir, const zl_ckpt_manifest *m) {
    char path[ZL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, ZL_CKPT_MANIFEST);
    char *text = sealed_text(m);
    if (!text) return ENOMEM;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int e = fd < 0 ? errno : write_all(fd, text, strlen(text));
    if (fd >= 0 && !e && fsync(fd)) e = errno;
    if (fd >= 0 && close(fd) && !e) e = errno;
    free(text);
    return e;
}

/* ---- manifest: read and check -------------------------------------------------------- */

typedef struct {
    const char *file; /* for messages: DIR/manifest.json */
    char *err;
    size_t n;
} ctx;

static cJSON *field(ctx *c, const cJSON *obj, const char *key) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) msg(c->err, c->n, "%s: field '%s' is missing", c->file, key);
    return v;
}

/* An integer in [lo, hi] (exact in a double: |v| <= 2^53). */
static int get_int(ctx *c, const cJSON *obj, const char *key, double lo, double hi, double *out) {
    cJSON *v = field(c, obj, key);
    if (!v) return -1;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return msg(c->err, c->n, "%s: field '%s': expected an integer in [%.0f, %.0f]", c->file, key, lo, hi);
    *out = d;
    return 0;
}

static const char *get_str(ctx *c, const cJSON *obj, const char *key) {
    cJSON *v = field(c, obj, key);
    if (!v) return NULL;
    if (!cJSON_IsString(v) || !v->valuestring) {
        msg(c->err, c->n, "%s: field '%s': expected a string", c->file, key);
        return NULL;
    }
    return v->valuestring;
}

/* units.key: an array of exactly n integers in [0, 2^53]. */
static int get_sizes(ctx *c, const cJSON *units, const char *key, int n, size_t *out) {
    cJSON *a = field(c, units, key);
    if (!a) return -1;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return msg(c->err, c->n, "%s: units.%s: expected an array of %d unit sizes", c->file, key, n);
    int i = 0;
    for (cJSON *v = a->child; v; v = v->next, i++) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d))
            return msg(c->err, c->n, "%s: units.%s[%d]: expected a non-negative integer", c->file, key, i);
        out[i] = (size_t)d;
    }
    return 0;
}

/* The seal: the text ends with  "manifest_xxh3_64":\t"<16 hex>"\n}\n  and those 16 hex
 * digits are the XXH3-64 of every byte before the key. */
static int check_seal(ctx *c, const char *text, size_t len) {
    const char *key = NULL;
    for (const char *p = text; (p = strstr(p, SEAL_KEY)); p++) key = p;
    if (!key) return msg(c->err, c->n, "%s: not a zerolab checkpoint manifest (no " SEAL_KEY ")", c->file);
    char want_hex[17], tail[64];
    const char *hex = key + strlen(SEAL_KEY ":\t\"");
    if ((size_t)(hex - text) + 16 > len) return msg(c->err, c->n, "%s: truncated after " SEAL_KEY, c->file);
    memcpy(want_hex, hex, 16), want_hex[16] = '\0';
    snprintf(tail, sizeof tail, SEAL_KEY ":\t\"%s\"\n}\n", want_hex);
    uint64_t want;
    if (parse_hex64(want_hex, &want) || strlen(key) != strlen(tail) || memcmp(key, tail, strlen(tail)))
        return msg(c->err, c->n, "%s: damaged: the text after " SEAL_KEY " is not its 16 hex digits and '}'", c->file);
    uint64_t got = XXH3_64bits(text, (size_t)(key - text));
    if (got != want)
        return msg(c->err, c->n, "%s: damaged: its text hashes to %016llx, its seal says %s", c->file,
                   (unsigned long long)got, want_hex);
    return 0;
}

static int read_text(ctx *c, const char *path, char **text, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return msg(c->err, c->n, "%s: cannot open: %s", c->file, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size > MANIFEST_MAX) {
        close(fd);
        return msg(c->err, c->n, "%s: not a regular file of at most %zu bytes", c->file, MANIFEST_MAX);
    }
    *len = (size_t)st.st_size;
    *text = malloc(*len + 1);
    size_t got = 0;
    while (*text && got < *len) {
        ssize_t r = read(fd, *text + got, *len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!*text || got != *len) return msg(c->err, c->n, "%s: read failed", c->file);
    (*text)[*len] = '\0';
    if (strlen(*text) != *len) return msg(c->err, c->n, "%s: contains a NUL byte", c->file);
    return 0;
}

static int parse_model(ctx *c, const cJSON *j, zl_ckpt_manifest *m) {
    double v;
    const char *s = get_str(c, j, "format");
    if (!s) return -1;
    if (strcmp(s, "zerolab-checkpoint"))
        return msg(c->err, c->n, "%s: format '%.40s' is not zerolab-checkpoint", c->file, s);
    if (get_int(c, j, "version", -1e15, 1e15, &v)) return -1;
    if (v != ZL_CKPT_VERSION)
        return msg(c->err, c->n, "%s: unknown format version %.0f (this build reads version %d)", c->file, v,
                   ZL_CKPT_VERSION);
    m->version = (int)v;
    cJSON *model = field(c, j, "model");
    if (!model) return -1;
    if (!cJSON_IsObject(model)) return msg(c->err, c->n, "%s: field 'model': expected an object", c->file);
    if (!(s = get_str(c, model, "kind"))) return -1;
    if (strcmp(s, "mlp") && strcmp(s, "gpt"))
        return msg(c->err, c->n, "%s: model kind '%.40s' is unknown (this build: mlp, gpt)", c->file, s);
    m->shape.kind = strcmp(s, "gpt") ? ZL_MODEL_MLP : ZL_MODEL_GPT;
    if (get_int(c, model, "layers", 1, 1000000, &v)) return -1;
    m->shape.layers = (int)v;
    if (get_int(c, model, "dim", 1, 1 << 24, &v)) return -1;
    m->shape.dim = (int)v;
    if (m->shape.kind == ZL_MODEL_GPT) { /* the ranges of --seq, --heads, --vocab */
        if (get_int(c, model, "seq", 1, 1 << 16, &v)) return -1;
        m->shape.seq = (int)v;
        if (get_int(c, model, "heads", 1, 1 << 12, &v)) return -1;
        m->shape.heads = (int)v;
        if (get_int(c, model, "vocab", 2, 1 << 20, &v)) return -1;
        m->shape.vocab = (int)v;
    }
    if (get_int(c, j, "rows_per_rank", 1, 1 << 20, &v)) return -1;
    m->shape.rows = (int)v;
    if (!(s = get_str(c, j, "dtype"))) return -1;
    if (strcmp(s, "fp16") && strcmp(s, "bf16"))
        return msg(c->err, c->n, "%s: dtype '%.40s': expected fp16 or bf16", c->file, s);
    m->dtype = strcmp(s, "bf16") ? ZL_F16 : ZL_BF16;
    if (get_int(c, j, "stage", 0, 3, &v)) return -1;
    m->stage = (int)v;
    if (get_int(c, j, "world", 1, 1 << 20, &v)) return -1;
    m->world = (int)v;
    if (!(s = get_str(c, j, "seed"))) return -1;
    char *end;
    errno = 0;
    m->seed = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || *s == '+' || *s == ' ')
        return msg(c->err, c->n, "%s: field 'seed': expected a decimal 64-bit integer", c->file);
    return 0;
}

/* Unit sizes: the model's own, and the padding N implies, or the manifest is inconsistent. */
static int parse_units(ctx *c, const cJSON *j, zl_ckpt_manifest *m) {
    int nu = zl_model_n_units(m->shape);
    cJSON *units = field(c, j, "units");
    if (!units) return -1;
    if (!cJSON_IsObject(units)) return msg(c->err, c->n, "%s: field 'units': expected an object", c->file);
    size_t *n = calloc((size_t)nu, sizeof *n), *n_pad = calloc((size_t)nu, sizeof *n),
           *slice = calloc((size_t)nu, sizeof *n);
    int bad = !n || !n_pad || !slice;
    if (bad) msg(c->err, c->n, "%s: out of host memory", c->file);
    bad = bad || get_sizes(c, units, "n", nu, n) || get_sizes(c, units, "n_pad", nu, n_pad) ||
          get_sizes(c, units, "slice_len", nu, slice);
    for (int u = 0; !bad && u < nu; u++)
        if (n[u] != zl_model_unit_params(m->shape, u))
            bad = msg(c->err, c->n, "%s: units.n[%d] = %zu, but unit %d of this model has %zu parameters", c->file, u,
                      n[u], u, zl_model_unit_params(m->shape, u));
    if (!bad && zl_partition_init(&m->part, n, nu, m->world))
        bad = msg(c->err, c->n, "%s: unit sizes overflow", c->file);
    for (int u = 0; !bad && u < nu; u++)
        if (n_pad[u] != m->part.n_pad[u] || slice[u] != m->part.slice_len[u])
            bad = msg(c->err, c->n, "%s: unit %d: n_pad %zu, slice_len %zu do not match N = %d (expected %zu, %zu)",
                      c->file, u, n_pad[u], slice[u], m->world, m->part.n_pad[u], m->part.slice_len[u]);
    free(n), free(n_pad), free(slice);
    if (bad) return -1;
    double psi, psi_pad;
    if (get_int(c, j, "params", 0, 9007199254740992.0, &psi) ||
        get_int(c, j, "params_padded", 0, 9007199254740992.0, &psi_pad))
        return -1;
    if ((size_t)psi != m->part.psi || (size_t)psi_pad != m->part.psi_pad)
        return msg(c->err, c->n, "%s: params %.0f / params_padded %.0f do not add up (units: %zu / %zu)", c->file, psi,
                   psi_pad, m->part.psi, m->part.psi_pad);
    return 0;
}

static int parse_categories(ctx *c, const cJSON *j, zl_ckpt_manifest *m) {
    cJSON *cats = field(c, j, "categories");
    if (!cats) return -1;
    m->has_params = m->stage == 3;
    int want = m->has_params ? 4 : 3, i = 0;
    if (!cJSON_IsArray(cats) || cJSON_GetArraySize(cats) != want)
        return msg(c->err, c->n, "%s: categories: a stage-%d checkpoint holds %d", c->file, m->stage, want);
    for (cJSON *v = cats->child; v; v = v->next, i++)
        if (!cJSON_IsString(v) || strcmp(v->valuestring, cat_names[i]))
            return msg(c->err, c->n, "%s: categories[%d]: expected '%s'", c->file, i, cat_names[i]);
    return 0;
}

/* "data" (the GPT's; absent in an MLP's and in checkpoints written before it was recorded):
 * "synthetic", or {"bytes", "xxh3_64"} of the --data text. */
static int parse_data(ctx *c, const cJSON *j, zl_ckpt_manifest *m) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
    double bytes;
    const char *h;
    if (!d) return 0;
    if (m->shape.kind != ZL_MODEL_GPT) return msg(c->err, c->n, "%s: field 'data': only a GPT reads a text", c->file);
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "synthetic")) return m->data.kind = ZL_CKPT_DATA_SYNTHETIC, 0;
    if (!cJSON_IsObject(d) || get_int(c, d, "bytes", 1, 9007199254740992.0, &bytes) ||
        !(h = get_str(c, d, "xxh3_64")) || parse_hex64(h, &m->data.xxh3))
        return msg(c->err, c->n, "%s: field 'data': expected \"synthetic\" or {\"bytes\": n, \"xxh3_64\": 16 hex "
                   "digits}", c->file);
    m->data.kind = ZL_CKPT_DATA_TEXT, m->data.bytes = (uint64_t)bytes;
    return 0;
}

static int parse_progress(ctx *c, const cJSON *j, zl_ckpt_manifest *m) {
    double v;
    if (get_int(c, j, "step", 0, 2e9, &v)) return -1;
    m->at.step = (int)v;
    if (get_int(c, j, "adam_step", 0, m->at.step, &v)) return -1;
    m->at.adam_step = (int)v;
    if (get_int(c, j, "data_rows", 0, 9007199254740992.0, &v)) return -1;
    m->at.data_rows = (uint64_t)v;
    cJSON *sc = field(c, j, "loss_scaler");
    if (!sc) return -1;
    if (!cJSON_IsObject(sc)) return msg(c->err, c->n, "%s: field 'loss_scaler': expected an object", c->file);
    double dyn, window, clean, skipped;
    cJSON *scale = field(c, sc, "scale");
    if (!scale || get_int(c, sc, "dynamic", 0, 1, &dyn) || get_int(c, sc, "window", 0, 1e9, &window) ||
        get_int(c, sc, "clean_steps", 0, 1e9, &clean) || get_int(c, sc, "skipped", 0, m->at.step, &skipped))
        return -1;
    if (!cJSON_IsNumber(scale) || zl_scaler_init(&m->at.scaler, (int)dyn, (float)scale->valuedouble, (int)window) ||
        (dyn && clean >= window))
        return msg(c->err, c->n, "%s: loss_scaler: not a valid scaler state", c->file);
    m->at.scaler.clean_steps = (int)clean;
    m->at.scaler.skipped = (long)skipped;
    return 0;
}

static int parse_files(ctx *c, const cJSON *j, zl_ckpt_manifest *m) {
    double bytes;
    m->file_bytes = 0;
    for (int k = 0; k < ZL_CKPT_NCAT; k++) m->file_bytes += zl_ckpt_cat_bytes(m, k);
    if (get_int(c, j, "file_bytes", 0, 9007199254740992.0, &bytes)) return -1;
    if ((size_t)bytes != m->file_bytes)
        return msg(c->err, c->n, "%s: file_bytes %.0f, but the categories need %zu per rank", c->file, bytes,
                   m->file_bytes);
    cJSON *files = field(c, j, "files");
    if (!files) return -1;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) != m->world)
        return msg(c->err, c->n, "%s: files: expected %d entries, one per rank", c->file, m->world);
    m->file_hash = calloc((size_t)m->world, sizeof *m->file_hash);
    if (!m->file_hash) return msg(c->err, c->n, "%s: out of host memory", c->file);
    int r = 0;
    for (cJSON *f = files->child; f; f = f->next, r++) {
        char want[32]; /* named before the check: the message prints it whichever test failed */
        rank_name(r, want, sizeof want);
        const char *name = cJSON_IsObject(f) ? get_str(c, f, "name") : NULL;
        const char *h = name ? get_str(c, f, "xxh3_64") : NULL;
        if (!h || strcmp(name, want) || parse_hex64(h, &m->file_hash[r]))
            return msg(c->err, c->n, "%s: files[%d]: expected {\"name\": \"%s\", \"xxh3_64\": 16 hex digits}",
                       c->file, r, want);
    }
    return 0;
}

/* DIR is gone but DIR.zl-old holds a checkpoint: a save on a file system without
 * RENAME_EXCHANGE was cut between its two renames (publish). Say where the checkpoints are,
 * after err's text; 1 if that is so. */
static int note_cut_save(const char *dir, char *err, size_t n) {
    char old[ZL_PATH_MAX + 32], tmp[ZL_PATH_MAX + 32], probe[ZL_PATH_MAX + 64];
    struct stat st;
    zl_ckpt_sibling(old, sizeof old, dir, ".zl-old");
    snprintf(probe, sizeof probe, "%s/%s", old, ZL_CKPT_MANIFEST);
    if (!stat(dir, &st) || stat(probe, &st)) return 0;
    zl_ckpt_sibling(tmp, sizeof tmp, dir, ".zl-tmp");
    snprintf(probe, sizeof probe, "%s/%s", tmp, ZL_CKPT_MANIFEST);
    size_t len = strlen(err);
    if (stat(probe, &st))
        snprintf(err + len, n - len, "; a save was cut short: '%s' holds the checkpoint before it: rename it to '%s'",
                 old, dir);
    else
        snprintf(err + len, n - len, "; a save was cut short: '%s' holds the checkpoint before it, '%s' the one it "
                 "was saving (whole if zlckpt verify passes): rename one of them to '%s'", old, tmp, dir);
    return 1;
}

int zl_ckpt_read_manifest(const char *dir, zl_ckpt_manifest *m, char *err, size_t n) {
    memset(m, 0, sizeof *m);
    char path[ZL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, ZL_CKPT_MANIFEST);
    ctx c = {path, err, n};
    char *text = NULL;
    size_t len = 0;
    int rc = read_text(&c, path, &text, &len) || check_seal(&c, text, len) ? -1 : 0;
    if (rc && !text) (void)note_cut_save(dir, err, n);
    cJSON *j = rc ? NULL : cJSON_ParseWithLength(text, len);
    if (!rc && !cJSON_IsObject(j)) rc = msg(err, n, "%s: not a JSON object", path);
    if (!rc)
        rc = parse_model(&c, j, m) || parse_data(&c, j, m) || parse_units(&c, j, m) || parse_categories(&c, j, m) ||
                     parse_progress(&c, j, m) || parse_files(&c, j, m)
                 ? -1
                 : 0;
    cJSON_Delete(j);
    free(text);
    return rc;
}

void zl_ckpt_manifest_free(zl_ckpt_manifest *m) {
    zl_partition_free(&m->part);
    free(m->file_hash);
    m->file_hash = NULL;
}

/* XXH3-64 of fd's next `limit` bytes (SIZE_MAX: to its end), read through buf (cap bytes);
 * *done the bytes read. 0, or the read's errno. */
static int hash_fd(int fd, void *buf, size_t cap, size_t limit, uint64_t *hash, size_t *done) {
    XXH3_state_t s;
    XXH3_64bits_reset(&s);
    int e = 0;
    for (*done = 0; *done < limit;) {
        ssize_t got = read(fd, buf, cap < limit - *done ? cap : limit - *done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) e = errno;
        if (got <= 0) break;
        XXH3_64bits_update(&s, buf, (size_t)got);
        *done += (size_t)got;
    }
    *hash = XXH3_64bits_digest(&s);
    return e;
}

int zl_ckpt_data_of(const zl_config *c, zl_ckpt_data *d, char *err, size_t n) {
    *d = (zl_ckpt_data){ZL_CKPT_DATA_UNRECORDED, 0, 0};
    if (c->model != ZL_MODEL_GPT) return 0;
    if (!c->data_path[0]) return d->kind = ZL_CKPT_DATA_SYNTHETIC, 0;
    /* O_NONBLOCK: a FIFO would block the open; the model refuses anything but a file too */
    int fd = open(c->data_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), e = fd < 0 ? errno : 0;
    if (fd < 0) return msg(err, n, "--data '%s': %s", c->data_path, strerror(e)), e;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        return close(fd), msg(err, n, "--data '%s': not a regular file", c->data_path), EINVAL;
    unsigned char buf[1 << 16];
    size_t bytes;
    e = hash_fd(fd, buf, sizeof buf, SIZE_MAX, &d->xxh3, &bytes);
    close(fd);
    if (e) return msg(err, n, "--data '%s': %s", c->data_path, strerror(e)), e;
    d->kind = ZL_CKPT_DATA_TEXT, d->bytes = (uint64_t)bytes;
    return 0;
}

int zl_ckpt_verify_file(const char *dir, const zl_ckpt_manifest *m, int r, void *buf, size_t cap, char *err, size_t n) {
    char path[ZL_PATH_MAX + 32];
    zl_ckpt_rank_path(path, sizeof path, dir, r);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return msg(err, n, "%s: %s", path, errno == ENOENT ? "missing (the manifest lists it)" : strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return msg(err, n, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size != m->file_bytes) {
        close(fd);
        return msg(err, n, "%s: %s: %lld bytes, the manifest says %zu", path,
                   (size_t)st.st_size < m->file_bytes ? "truncated" : "too long", (long long)st.st_size, m->file_bytes);
    }
    uint64_t h;
    size_t done;
    int e = hash_fd(fd, buf, cap, m->file_bytes, &h, &done);
    close(fd);
    if (e || done != m->file_bytes) return msg(err, n, "%s: read failed after %zu bytes", path, done);
    if (h != m->file_hash[r])
        return msg(err, n, "%s: checksum mismatch: XXH3-64 %016llx, the manifest says %016llx", path,
                   (unsigned long long)h, (unsigned long long)m->file_hash[r]);
    return 0;
}

void zl_ckpt_describe_model(char *out, size_t n, zl_model_shape s) {
    if (s.kind == ZL_MODEL_GPT)
        snprintf(out, n, "gpt with L = %d, D = %d, T = %d, H = %d, V = %d", s.layers, s.dim, s.seq, s.heads,
                 s.vocab);
    else
        snprintf(out, n, "mlp with L = %d, D = %d", s.layers, s.dim);
}

int zl_ckpt_compatible(const zl_ckpt_manifest *m, const char *dir, zl_model_shape s, zl_dtype dtype, char *err,
                       size_t n) {
    int gpt = s.kind == ZL_MODEL_GPT;
    if (m->shape.kind != s.kind || m->shape.layers != s.layers || m->shape.dim != s.dim ||
        (gpt && (m->shape.seq != s.seq || m->shape.heads != s.heads || m->shape.vocab != s.vocab))) {
        char was[128], is[128];
        zl_ckpt_describe_model(was, sizeof was, m->shape);
        zl_ckpt_describe_model(is, sizeof is, s);
        return msg(err, n, "%s: a checkpoint of the %s; this run has the %s", dir, was, is);
    }
    if (m->dtype != dtype)
        return msg(err, n, "%s: a checkpoint with %s params; this run stores %s", dir, zl_dtype_name(m->dtype),
                   zl_dtype_name(dtype));
    return 0;
}

/* ---- reading ranges of the unpadded layout ------------------------------------------ */

/* A few old rank files stay open (the least recently read one closed first): a whole unit
 * walks every old rank once per category, and reopening each file for each unit would cost
 * n_units·N_old opens; one descriptor per old rank would run out of them past `ulimit -n`. */
#define ZL_CKPT_OPEN_FILES 16
struct zl_ckpt_reader {
    const char *dir;
    const zl_ckpt_manifest *m;
    int fd[ZL_CKPT_OPEN_FILES];     /* old rank file rank[i], or -1 */
    size_t rank[ZL_CKPT_OPEN_FILES];
    unsigned long used[ZL_CKPT_OPEN_FILES], tick; /* when each was last read */
};

zl_ckpt_reader *zl_ckpt_reader_open(const char *dir, const zl_ckpt_manifest *m) {
    zl_ckpt_reader *rd = calloc(1, sizeof *rd);
    if (!rd) zl_fatal("out of host memory");
    rd->dir = dir, rd->m = m;
    for (int i = 0; i < ZL_CKPT_OPEN_FILES; i++) rd->fd[i] = -1;
    return rd;
}

void zl_ckpt_reader_close(zl_ckpt_reader *rd) {
    if (!rd) return;
    for (int i = 0; i < ZL_CKPT_OPEN_FILES; i++)
        if (rd->fd[i] >= 0) close(rd->fd[i]);
    free(rd);
}

/* The open file of old rank q (the one open before it closed first): its descriptor, or -1
 * with err. */
static int reader_file(zl_ckpt_reader *rd, size_t q, char *err, size_t n) {
    for (int i = 0; i < ZL_CKPT_OPEN_FILES; i++)
        if (rd->fd[i] >= 0 && rd->rank[i] == q) return rd->used[i] = ++rd->tick, rd->fd[i];
    int slot = 0; /* a free one, else the least recently read */
    for (int i = 0; i < ZL_CKPT_OPEN_FILES && rd->fd[slot] >= 0; i++)
        if (rd->fd[i] < 0 || rd->used[i] < rd->used[slot]) slot = i;
    if (rd->fd[slot] >= 0) close(rd->fd[slot]), rd->fd[slot] = -1; /* not closed twice below */
    char path[ZL_PATH_MAX + 32];
    zl_ckpt_rank_path(path, sizeof path, rd->dir, (int)q);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) { /* the process's limit: keep only this one */
        for (int i = 0; i < ZL_CKPT_OPEN_FILES; i++)
            if (rd->fd[i] >= 0) close(rd->fd[i]), rd->fd[i] = -1;
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    rd->fd[slot] = fd, rd->rank[slot] = q, rd->used[slot] = ++rd->tick;
    if (fd < 0) return msg(err, n, "%s: %s", path, strerror(errno));
    return fd;
}

static int pread_all(int fd, void *buf, size_t n, size_t off) {
    char *c = buf;
    while (n) {
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r, n -= (size_t)r, off += (size_t)r;
    }
    return 0;
}

/* Old rank q holds elements [q·L, (q+1)·L) of unit u (L = its slice_len[u]), at element
 * slice_off[u] of each category in its file. The new range [begin, end) overlaps some
 * consecutive q: read exactly the overlap from each, chunk by chunk through buf. */
int zl_ckpt_read_range(zl_ckpt_reader *rd, int cat, int u, size_t begin, size_t end, void *buf, size_t cap,
                       zl_ckpt_sink sink, void *ctx_, char *err, size_t n) {
    const zl_ckpt_manifest *m = rd->m;
    const zl_partition *p = &m->part;
    size_t L = p->slice_len[u], esz = cat_elem_bytes(cat), chunk = cap / esz;
    if (begin >= end) return 0;
    for (size_t q = begin / L; q * L < end; q++) {
        size_t a = begin > q * L ? begin : q * L, b = end < (q + 1) * L ? end : (q + 1) * L;
        int fd = reader_file(rd, q, err, n);
        if (fd < 0) return -1;
        size_t file_off = zl_ckpt_cat_offset(m, cat) + (p->slice_off[u] + (a - q * L)) * esz;
        for (size_t done = 0; done < b - a; done += chunk) {
            size_t cnt = b - a - done < chunk ? b - a - done : chunk;
            if (pread_all(fd, buf, cnt * esz, file_off + done * esz))
                return msg(err, n, "%s/rank-%05zu.bin: short read (changed since it was verified?)", rd->dir, q);
            sink(ctx_, a - begin + done, buf, cnt);
        }
    }
    return 0;
}

/* ---- the run hooks -------------------------------------------------------------------- */

struct zl_ckpt {
    const zl_runtime *rt;
    const zl_partition *part;
    zl_model_shape shape;
    int stage;
    void *staging; /* host, staging_bytes: category ckpt_staging */
    size_t staging_bytes;
    zl_ckpt_progress start; /* where this run started */
    zl_ckpt_data data;      /* rank 0, with --save: what the GPT reads, for the manifest */
};

zl_ckpt *zl_ckpt_create(const zl_runtime *rt, const zl_partition *part, zl_model_shape shape, int stage) {
    zl_ckpt *ck = zl_host_calloc(1, sizeof *ck);
    *ck = (zl_ckpt){rt, part, shape, stage, NULL, 0, {0}, {0}};
    size_t elems = part->max_unit_pad < ZL_CKPT_CHUNK_ELEMS ? part->max_unit_pad : ZL_CKPT_CHUNK_ELEMS;
    ck->staging_bytes = 4 * elems;
    ck->staging = zl_mem_alloc(ZL_MEM_CKPT_STAGING, ck->staging_bytes, "checkpoint staging (host)");
    char err[ZL_PATH_MAX + 128];
    int e = rt->rank == 0 && rt->cfg.save_dir[0] ? zl_ckpt_data_of(&rt->cfg, &ck->data, err, sizeof err) : 0;
    if (e) zl_fatal("%s", err); /* the model read it moments ago */
    return ck;
}

void zl_ckpt_free(zl_ckpt *ck) { free(ck); } /* the staging buffer goes with zl_mem_free_all */

static zl_ckpt_progress fresh_progress(const zl_config *c) {
    zl_ckpt_progress at = {0};
    zl_scaler_init(&at.scaler, 0, c->loss_scale, 0); /* the static --loss-scale */
    return at;
}

/* Where an owned buffer keeps this rank's part of unit u: [begin, end) of the unit
 * (clipped to its unpadded size) at element dst of the buffer. */
static int owned_range(const zl_ckpt *ck, zl_ckpt_layout layout, int u, size_t *begin, size_t *end, size_t *dst) {
    const zl_partition *p = ck->part;
    if (layout == ZL_CKPT_FULL) {
        *begin = 0, *end = p->n[u], *dst = p->off_pad[u];
    } else {
        zl_partition_slice_range(p, u, ck->rt->rank, begin, end);
        *dst = p->slice_off[u];
        if (*end > p->n[u]) *end = p->n[u];
    }
    return *begin < *end;
}

typedef struct {
    char *dev; /* device destination of element 0 of the range */
    size_t esz;
    int to_storage; /* fp32 in, the storage format (fp16/bf16) out */
    zl_stream s;
} copy_sink;

static void to_device(void *c_, size_t at, void *data, size_t count) {
    zl_progress_in("reading the checkpoint"); /* a slow file system is progress, not a hang */
    copy_sink *c = c_;
    if (c->to_storage) { /* in place: half i lands at bytes 2i, below float i + 1's bytes */
        const float *f = data;
        zl_half *h = data;
        for (size_t i = 0; i < count; i++) h[i] = zl_storage_from_float(f[i]);
    }
    zl_memcpy_h2d(c->dev + at * c->esz, data, count * c->esz, c->s);
}

/* Category cat into the owned buffer `base`; returns the bytes read from the checkpoint's files
 * (the unpadded elements, at the file's element size: fp32 master read to rebuild fp16 params
 * counts 4 bytes an element). */
static size_t load_category(zl_ckpt *ck, zl_ckpt_reader *rd, int cat, void *base, zl_ckpt_layout layout,
                            int to_storage, zl_stream s) {
    size_t esz = to_storage || cat == ZL_CKPT_PARAMS ? 2 : 4, read = 0;
    char err[ZL_PATH_MAX + 256];
    for (int u = 0; u < ck->part->n_units; u++) {
        size_t begin, end, dst;
        if (!owned_range(ck, layout, u, &begin, &end, &dst)) continue;
        copy_sink sink = {(char *)base + dst * esz, esz, to_storage, s};
        if (zl_ckpt_read_range(rd, cat, u, begin, end, ck->staging, ck->staging_bytes, to_device, &sink, err,
                               sizeof err))
            zl_fatal("--resume: %s", err);
        read += (end - begin) * cat_elem_bytes(cat);
    }
    return read;
}

/* Bytes of an owned buffer of fp32 (esz 4) or fp16 (esz 2) elements. */
static size_t owned_bytes(const zl_ckpt *ck, zl_ckpt_layout layout, size_t esz) {
    return esz * (layout == ZL_CKPT_FULL ? ck->part->full_len : ck->part->shard_len);
}

/* One line on rank 0: how long the slowest rank took, and the bytes per rank and in all. */
static void report_io(const zl_runtime *rt, const char *what, const char *dir, int step, double secs, double bytes) {
    double slowest = secs, total = bytes;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    if (rt->rank) return;
    printf("checkpoint: %s step %d %s %s: %.0f bytes on rank 0, %.0f in all, %.3f s (slowest rank): "
           "%.2f GB/s per rank, %.2f GB/s in all\n",
           what, step, !strcmp(what, "saved") ? "to" : "from", dir, bytes, total, slowest,
           slowest > 0 ? bytes / slowest / 1e9 : 0, slowest > 0 ? total / slowest / 1e9 : 0);
    fflush(stdout);
}

/* Which checkpoint a manifest describes: its step and every rank file's hash. The start-up
 * check (zl_ckpt_check_resume) verified that one; the load reads the directory again and must
 * find the same (another job saving into DIR in between would swap it). */
static uint64_t checkpoint_id(const zl_ckpt_manifest *m) {
    return XXH3_64bits_withSeed(m->file_hash, sizeof *m->file_hash * (size_t)m->world, (uint64_t)m->at.step);
}
static uint64_t g_checked_id; /* the checkpoint zl_ckpt_check_resume verified */

zl_ckpt_progress zl_ckpt_resume(zl_ckpt *ck, zl_ckpt_owned o, zl_stream s) {
    const zl_config *c = &ck->rt->cfg;
    ck->start = fresh_progress(c);
    if (!c->resume_dir[0]) return ck->start;
    double t0 = zl_wall_seconds();
    zl_ckpt_manifest m;
    char err[ZL_PATH_MAX + 256];
    if (zl_ckpt_read_manifest(c->resume_dir, &m, err, sizeof err) ||
        zl_ckpt_compatible(&m, c->resume_dir, ck->shape, zl_kernels_dtype(), err, sizeof err))
        zl_fatal("--resume: %s (changed since start-up?)", err);
    if (checkpoint_id(&m) != g_checked_id)
        zl_fatal("--resume: '%s' holds another checkpoint than start-up verified (step %d now): did another job "
                 "save into it?", c->resume_dir, m.at.step);
    zl_ckpt_reader *rd = zl_ckpt_reader_open(c->resume_dir, &m);
    float *state[3] = {o.master, o.adam_m, o.adam_v};
    size_t read = 0; /* bytes read from the files */
    for (int cat = ZL_CKPT_MASTER; cat <= ZL_CKPT_V; cat++) {
        zl_memset_async(state[cat], 0, owned_bytes(ck, o.states, 4), s); /* the padding: zeros, as at init */
        read += load_category(ck, rd, cat, state[cat], o.states, 0, s);
    }
    zl_memset_async(o.params, 0, owned_bytes(ck, o.params_layout, 2), s);
    if (m.has_params) read += load_category(ck, rd, ZL_CKPT_PARAMS, o.params, o.params_layout, 0, s);
    else read += load_category(ck, rd, ZL_CKPT_MASTER, o.params, o.params_layout, 1, s); /* params = storage(master) */
    zl_stream_sync(s);
    zl_ckpt_reader_close(rd);
    ck->start = m.at;
    report_io(ck->rt, "resumed", c->resume_dir, m.at.step, zl_wall_seconds() - t0, (double)read);
    zl_ckpt_manifest_free(&m);
    return ck->start;
}

/* ---- saving ----------------------------------------------------------------------------- */

/* A name a save writes: the manifest or a rank file. */
static int checkpoint_file_name(const char *name) {
    size_t len = strlen(name);
    return !strcmp(name, ZL_CKPT_MANIFEST) || (!strncmp(name, "rank-", 5) && len > 9 && !strcmp(name + len - 4, ".bin"));
}

/* Remove a checkpoint directory: only the files a checkpoint holds, then the directory
 * (left in place, with a warning, if anything else is inside). */
static void remove_checkpoint_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[ZL_PATH_MAX + 300];
    for (struct dirent *e; (e = readdir(d));) {
        if (!checkpoint_file_name(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    if (rmdir(dir) && errno != ENOENT)
        fprintf(stderr, "zerolab: warning: could not remove '%s': %s\n", dir, strerror(errno));
}

/* Files in dir other than "." and ".."; foreign: how many of them a save would not have written,
 * the first one's name in first (n bytes). */
static int count_entries(const char *dir, int *foreign, char *first, size_t n) {
    DIR *d = opendir(dir);
    int entries = 0;
    *foreign = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        entries++;
        if (checkpoint_file_name(e->d_name)) continue;
        if (!(*foreign)++) snprintf(first, n, "%s", e->d_name);
    }
    for (char *c = first; *foreign && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?'; /* the message naming it stays one line */
    if (d) closedir(d);
    return entries;
}

/* A save first clears DIR.zl-tmp (what a killed save left), and on a file system without
 * RENAME_EXCHANGE DIR.zl-old: neither may be the checkpoint this run resumes from. */
static int resume_is_scratch(const char *dir, const char *resume, char *m, size_t n) {
    char path[ZL_PATH_MAX + 32];
    if (!resume[0]) return 0;
    static const char *const scratch[] = {".zl-tmp", ".zl-old"};
    for (int i = 0; i < 2; i++) {
        zl_ckpt_sibling(path, sizeof path, dir, scratch[i]);
        if (zl_same_file(resume, path))
            return msg(m, n, "--resume '%s': a save into '%s' may clear this directory (as '%s') before its new "
                       "checkpoint is in place: rename it first, or save elsewhere", resume, dir, path);
    }
    return 0;
}

/* DIR.zl-tmp holds a whole checkpoint newer than DIR's (or DIR has none): a save ended between
 * its manifest and its rename, and the next save would clear the newest state there is. */
static int newer_in_tmp(const char *dir, char *m, size_t n) {
    char tmp[ZL_PATH_MAX + 32], e[ZL_PATH_MAX + 256];
    zl_ckpt_sibling(tmp, sizeof tmp, dir, ".zl-tmp");
    zl_ckpt_manifest t, d;
    int whole = !zl_ckpt_read_manifest(tmp, &t, e, sizeof e), has = !zl_ckpt_read_manifest(dir, &d, e, sizeof e);
    int newer = whole && (!has || t.at.step > d.at.step);
    if (newer && has)
        msg(m, n, "--save: '%s' holds a whole checkpoint at step %d, newer than '%s' (step %d): a save that ended "
            "before its rename, or the one a rollback replaced: rename it to '%s' (zlckpt verify first) or remove it",
            tmp, t.at.step, dir, d.at.step, dir);
    else if (newer)
        msg(m, n, "--save: '%s' holds a whole checkpoint that no save put in place, and '%s' none: rename it to '%s' "
            "(zlckpt verify first) or remove it", tmp, dir, dir);
    zl_ckpt_manifest_free(&t), zl_ckpt_manifest_free(&d);
    return newer;
}

/* One job a DIR: two jobs saving into it at once would share DIR.zl-tmp, one publishing the
 * other's files under its manifest. Rank 0 holds an flock on DIR.zl-lock (an empty file, left in
 * place) from start-up to its exit; a file system without flock (some cluster mounts) goes
 * unlocked. */
static int lock_save_dir(const char *dir, char *m, size_t n) {
    char path[ZL_PATH_MAX + 32];
    zl_ckpt_sibling(path, sizeof path, dir, ".zl-lock");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        msg(m, n, "--save: cannot write '%s' (the lock beside it): %s", path, strerror(e));
        return e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS)
        return 0; /* fd stays open: the lock lasts as long as this process */
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK) {
        msg(m, n, "--save: cannot lock '%s': %s", path, strerror(e));
        return e;
    }
    msg(m, n, "--save: another running job saves into '%s' (it holds '%s'): give this one another directory", dir,
        path);
    return EBUSY;
}

int zl_ckpt_probe_dir(const char *dir, const char *resume_dir, char *m, size_t n) {
    struct stat st;
    char path[ZL_PATH_MAX + 32], name[ZL_PATH_MAX];
    zl_ckpt_sibling(name, sizeof name, dir, ""); /* without trailing slashes, as the save names it */
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    if (!strcmp(base, ".") || !strcmp(base, "..") || !*base) { /* the save renames DIR: it needs a name */
        msg(m, n, "--save: give the checkpoint directory by its name, not '%s'", dir);
        return EINVAL;
    }
    if (!lstat(name, &st) && S_ISLNK(st.st_mode)) { /* a rename would replace the link, not what it points to */
        msg(m, n, "--save: '%s' is a symbolic link; give the directory it points to", dir);
        return EINVAL;
    }
    int foreign = 0, missing = stat(dir, &st) ? errno : 0;
    char foreign_name[256] = "";
    if (missing == ENOENT) { /* no DIR: was a save cut between its renames? */
        msg(m, n, "--save: '%s' is missing", dir);
        if (note_cut_save(dir, m, n)) return EEXIST; /* the next save would clear what the cut one left */
        snprintf(path, sizeof path, "%s.zl-tmp/%s", name, ZL_CKPT_MANIFEST);
        if (!stat(path, &st)) { /* a first save ended between its manifest and its rename */
            msg(m, n, "--save: '%s.zl-tmp' holds a whole checkpoint no save put in place (its job ended before "
                "the rename): rename it to '%s' (zlckpt verify first) or remove it", name, name);
            return EEXIST;
        }
        m[0] = '\0';
    } else if (!missing) {
        snprintf(path, sizeof path, "%s/%s", dir, ZL_CKPT_MANIFEST);
        int entries = S_ISDIR(st.st_mode) ? count_entries(dir, &foreign, foreign_name, sizeof foreign_name) : 0;
        if (!S_ISDIR(st.st_mode) || (entries && access(path, F_OK))) {
            msg(m, n, "--save: '%s' exists and is not a zerolab checkpoint (no %s); refusing to replace it", dir,
                ZL_CKPT_MANIFEST);
            return EEXIST;
        }
        if (foreign) { /* the swap would carry it into DIR.zl-tmp, which no save may clear: the next save fails */
            msg(m, n, "--save: '%s' holds '%s', which a save does not write (a save replaces the whole directory): "
                "move it out", dir, foreign_name);
            return EEXIST;
        }
        if (newer_in_tmp(dir, m, n)) return EEXIST;
        if (access(dir, W_OK | X_OK)) { /* the save swaps DIR out and empties it: found after training, too late */
            int e = errno;
            msg(m, n, "--save: cannot write '%s': %s", dir, strerror(e));
            return e;
        }
    }
    if (resume_is_scratch(dir, resume_dir, m, n)) return EINVAL;
    zl_ckpt_sibling(path, sizeof path, dir, ".zl-tmp");
    if (!lstat(path, &st) &&
        (!S_ISDIR(st.st_mode) || (count_entries(path, &foreign, foreign_name, sizeof foreign_name), foreign))) {
        /* a killed save leaves a directory of checkpoint files only; the next save clears those */
        if (S_ISDIR(st.st_mode))
            msg(m, n, "--save: '%s' (the temporary directory a save writes first) exists and holds '%s', which a "
                "save does not write: remove it", path, foreign_name);
        else
            msg(m, n, "--save: '%s' (the temporary directory a save writes first) exists and is not a directory: "
                "remove it", path);
        return EEXIST;
    }
    if (mkdir(path, 0777) && errno != EEXIST) {
        int e = errno;
        msg(m, n, "--save: cannot write '%s' (the temporary directory next to it): %s", path, strerror(e));
        return e;
    }
    if (access(path, W_OK)) {
        int e = errno;
        msg(m, n, "--save: cannot write '%s': %s", path, strerror(e));
        return e;
    }
    rmdir(path); /* fails harmlessly if a killed save left files there: the next save clears them */
    return lock_save_dir(dir, m, n);
}

/* This rank's file: category after category, slice r of every unit, hashed as written. */
static int write_rank_file(zl_ckpt *ck, zl_ckpt_owned o, const char *path, uint64_t *hash, zl_stream s) {
    const zl_partition *p = ck->part;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return errno;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    const void *base[ZL_CKPT_NCAT] = {o.master, o.adam_m, o.adam_v, o.params};
    zl_ckpt_layout layout[ZL_CKPT_NCAT] = {o.states, o.states, o.states, o.params_layout};
    int n_cats = o.params_layout == ZL_CKPT_SLICES ? 4 : 3, e = 0;
    for (int cat = 0; cat < n_cats && !e; cat++) {
        size_t esz = cat_elem_bytes(cat), chunk = ck->staging_bytes / esz;
        for (int u = 0; u < p->n_units && !e; u++) {
            size_t at = layout[cat] == ZL_CKPT_FULL ? p->off_pad[u] + (size_t)ck->rt->rank * p->slice_len[u]
                                                    : p->slice_off[u];
            for (size_t done = 0; done < p->slice_len[u] && !e; done += chunk) {
                size_t cnt = p->slice_len[u] - done < chunk ? p->slice_len[u] - done : chunk;
                zl_progress_in("writing its checkpoint file"); /* the watchdog: a slow disk is not a hang */
                zl_memcpy_d2h(ck->staging, (const char *)base[cat] + (at + done) * esz, cnt * esz, s);
                XXH3_64bits_update(&st, ck->staging, cnt * esz);
                e = write_all(fd, ck->staging, cnt * esz);
            }
        }
    }
    if (!e && fsync(fd)) e = errno;
    if (close(fd) && !e) e = errno;
    *hash = XXH3_64bits_digest(&st);
    return e;
}

/* Rank 0: manifest last, then the new directory takes DIR's place in one rename. */
static int publish(zl_ckpt *ck, int has_params, zl_ckpt_progress at, const uint64_t *hashes, const char *tmp,
                   char *what, size_t n) {
    const char *dir = ck->rt->cfg.save_dir;
    zl_ckpt_manifest m = {.version = ZL_CKPT_VERSION, .shape = ck->shape, .dtype = zl_kernels_dtype(),
                          .stage = ck->stage, .world = ck->rt->world, .seed = ck->rt->cfg.seed, .data = ck->data,
                          .part = *ck->part,
                          .has_params = has_params, .at = at, .file_hash = (uint64_t *)hashes};
    for (int c = 0; c < ZL_CKPT_NCAT; c++) m.file_bytes += zl_ckpt_cat_bytes(&m, c);
    char old[ZL_PATH_MAX + 32], parent[ZL_PATH_MAX];
    zl_ckpt_sibling(old, sizeof old, dir, ".zl-old");
    zl_path_parent(parent, sizeof parent, dir);
    int e;
    if ((e = zl_ckpt_write_manifest(tmp, &m))) return snprintf(what, n, "%s/%s", tmp, ZL_CKPT_MANIFEST), e;
    struct stat st;
    int had = !stat(dir, &st);
    if (had && chmod(tmp, st.st_mode & 07777)) /* the previous DIR's permissions: a chmod 700 stays */
        return snprintf(what, n, "chmod %s", tmp), errno;
    if ((e = zl_fsync_path(tmp))) return snprintf(what, n, "%s", tmp), e;
    /* The previous checkpoint is removed only once the rename that replaced it is on disk. */
    const char *previous = NULL;
    if (!had) { /* no previous checkpoint */
        if (rename(tmp, dir)) return snprintf(what, n, "rename %s -> %s", tmp, dir), errno;
    } else if (!renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE)) {
        previous = tmp; /* it now holds the previous checkpoint */
    } else { /* no RENAME_EXCHANGE here: the previous checkpoint steps aside first */
        remove_checkpoint_dir(old);
        if (rename(dir, old)) return snprintf(what, n, "rename %s -> %s", dir, old), errno;
        if (rename(tmp, dir)) return snprintf(what, n, "rename %s -> %s", tmp, dir), errno;
        previous = old;
    }
    if ((e = zl_fsync_path(parent))) return snprintf(what, n, "%s", parent), e;
    if (previous) remove_checkpoint_dir(previous);
    return 0;
}

/* Test hook: ZL_CKPT_TEST_SLEEP_MS holds every rank between its file and the manifest,
 * so a test can kill the job mid-save. */
static void test_pause(void) {
    const char *ms = getenv("ZL_CKPT_TEST_SLEEP_MS");
    if (!ms || !*ms) return;
    long v = atol(ms);
    struct timespec ts = {v / 1000, (v % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void save(zl_ckpt *ck, zl_ckpt_owned o, zl_ckpt_progress at, zl_stream s) {
    const zl_runtime *rt = ck->rt;
    double t0 = zl_wall_seconds();
    char tmp[ZL_PATH_MAX + 32], path[ZL_PATH_MAX + 64], what[2 * ZL_PATH_MAX + 64] = "";
    zl_ckpt_sibling(tmp, sizeof tmp, rt->cfg.save_dir, ".zl-tmp");
    int e = 0;
    if (rt->rank == 0) {
        remove_checkpoint_dir(tmp); /* what a killed save left behind */
        struct stat st; /* replacing DIR: private until publish gives it DIR's own permissions */
        if (mkdir(tmp, stat(rt->cfg.save_dir, &st) ? 0777 : 0700)) e = errno;
    }
    mpiCheck(MPI_Bcast(&e, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (e) zl_fatal("--save: cannot create '%s': %s", tmp, strerror(e));
    zl_ckpt_rank_path(path, sizeof path, tmp, rt->rank);
    uint64_t hash = 0;
    if ((e = write_rank_file(ck, o, path, &hash, s))) zl_fatal("--save: writing '%s' failed: %s", path, strerror(e));
    test_pause();
    /* Ranks that finished wait here for the slowest file: past --timeout, the watchdog says so. */
    zl_progress_in("waiting for the other ranks' checkpoint files (a slow file system? a longer --timeout)");
    /* The N hashes land in the staging buffer, free again (4·max_unit_pad >= 8N bytes unless
     * every unit is smaller than 2N; then a few bytes of host bookkeeping). */
    int fits = (size_t)rt->world * sizeof(uint64_t) <= ck->staging_bytes;
    uint64_t *hashes = rt->rank != 0 ? NULL : fits ? ck->staging : malloc(sizeof(uint64_t) * (size_t)rt->world);
    if (rt->rank == 0 && !hashes) zl_fatal("out of host memory");
    mpiCheck(MPI_Gather(&hash, 1, MPI_UINT64_T, hashes, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (rt->rank == 0) zl_progress_in("publishing the checkpoint");
    if (rt->rank == 0) e = publish(ck, o.params_layout == ZL_CKPT_SLICES, at, hashes, tmp, what, sizeof what);
    if (rt->rank == 0 && hashes != ck->staging) free(hashes);
    /* rank 0 has published: a wait from here on is for a peer (a stopped rank), not for its disk */
    zl_progress_in(rt->rank == 0 ? "waiting for the other ranks after publishing the checkpoint"
                                 : "waiting for rank 0 to publish the checkpoint");
    mpiCheck(MPI_Bcast(&e, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (e) { /* rank 0 knows what failed: every rank's line names it */
        mpiCheck(MPI_Bcast(what, (int)sizeof what, MPI_CHAR, 0, MPI_COMM_WORLD));
        zl_fatal("--save: %s: %s", what, strerror(e));
    }
    struct stat st;
    zl_ckpt_rank_path(path, sizeof path, rt->cfg.save_dir, rt->rank);
    report_io(rt, "saved", rt->cfg.save_dir, at.step, zl_wall_seconds() - t0, stat(path, &st) ? 0 : (double)st.st_size);
}

int zl_ckpt_due(const zl_ckpt *ck, int step) {
    const zl_config *c = &ck->rt->cfg;
    int global = ck->start.step + step;
    return c->save_dir[0] && (step == c->steps || (c->save_every && global % c->save_every == 0));
}

int zl_ckpt_due_mid_run(const zl_ckpt *ck, int step) { return step < ck->rt->cfg.steps && zl_ckpt_due(ck, step); }

void zl_ckpt_save_if_due(zl_ckpt *ck, zl_ckpt_owned o, int step, int adam_step, const zl_loss_scaler *scaler,
                         zl_stream s) {
    const zl_config *c = &ck->rt->cfg;
    int global = ck->start.step + step;
    if (!zl_ckpt_due(ck, step)) return;
    zl_ckpt_progress at = ck->start;
    at.step = global;
    at.adam_step = adam_step;
    at.scaler = *scaler;
    at.data_rows = ck->start.data_rows + (uint64_t)step * (uint64_t)ck->rt->world * (uint64_t)c->accum *
                                             (uint64_t)ck->shape.rows; /* N·K·B rows per step */
    save(ck, o, at, s);
}

/* ---- before allocation: is the checkpoint to resume sound? -------------------------- */

/* A resumed run continues the checkpoint's training: the data stream of its seed and its loss
 * scaler (the scale, the clean steps, the window). A flag that says otherwise would be ignored
 * while the report printed it, so it is refused and the flag to give is named. */
static void scale_flag(char *out, size_t n, int dynamic, float scale) {
    if (dynamic) snprintf(out, n, "dynamic");
    else snprintf(out, n, "%g", scale);
}

/* The GPT's data stream walks its --data text (or the synthetic tokens): another text, or none,
 * would continue from the same row of different data. */
static void data_words(char *out, size_t n, const zl_ckpt_data *d, const char *path) {
    if (d->kind == ZL_CKPT_DATA_SYNTHETIC) snprintf(out, n, "the synthetic token stream without --data");
    else if (path) snprintf(out, n, "--data '%s' of %llu bytes, XXH3-64 %016llx", path, (unsigned long long)d->bytes,
                            (unsigned long long)d->xxh3);
    else snprintf(out, n, "a --data text of %llu bytes, XXH3-64 %016llx", (unsigned long long)d->bytes,
                  (unsigned long long)d->xxh3);
}

static int same_data(const zl_ckpt_manifest *m, const char *dir, const zl_config *c, char *err, size_t n) {
    if (m->data.kind == ZL_CKPT_DATA_UNRECORDED) return 0; /* an MLP, or written before it was recorded */
    zl_ckpt_data d;
    char e[ZL_PATH_MAX + 128], was[ZL_PATH_MAX + 96], is[ZL_PATH_MAX + 96];
    if (zl_ckpt_data_of(c, &d, e, sizeof e)) return msg(err, n, "%s", e);
    if (d.kind == m->data.kind && d.bytes == m->data.bytes && d.xxh3 == m->data.xxh3) return 0;
    data_words(was, sizeof was, &m->data, NULL);
    data_words(is, sizeof is, &d, c->data_path);
    return msg(err, n, "%s: trained on %s, this run reads %s (%s to continue it)", dir, was, is,
               m->data.kind == ZL_CKPT_DATA_SYNTHETIC ? "drop --data" : "give --data the same text");
}

static int same_training(const zl_ckpt_manifest *m, const char *dir, const zl_config *c, char *err, size_t n) {
    const zl_loss_scaler *sc = &m->at.scaler;
    if (m->seed != c->seed)
        return msg(err, n, "%s: trained with --seed %llu, this run has --seed %llu (give --seed %llu to continue it)",
                   dir, (unsigned long long)m->seed, (unsigned long long)c->seed, (unsigned long long)m->seed);
    if (sc->dynamic != c->loss_scale_dynamic || (!sc->dynamic && sc->scale != c->loss_scale)) {
        char was[32], is[32];
        scale_flag(was, sizeof was, sc->dynamic, sc->scale);
        scale_flag(is, sizeof is, c->loss_scale_dynamic, c->loss_scale);
        return msg(err, n, "%s: trained with --loss-scale %s, this run has --loss-scale %s (give --loss-scale %s to "
                   "continue it)", dir, was, is, was);
    }
    if (sc->dynamic && c->loss_scale_init > 0 && c->loss_scale_init != sc->scale) /* the same scale: says the same */
        return msg(err, n, "%s: --loss-scale-init %g: a resumed run continues at the checkpoint's scale %g (drop the "
                   "flag, or give %g)", dir, c->loss_scale_init, sc->scale, sc->scale);
    if (sc->dynamic && sc->window != c->loss_scale_window)
        return msg(err, n, "%s: its loss scaler doubles after %d clean steps, this run's after %d (give "
                   "--loss-scale-window %d to continue it)", dir, sc->window, c->loss_scale_window, sc->window);
    return same_data(m, dir, c, err, n);
}

void zl_ckpt_check_resume(zl_runtime *rt, zl_model_shape shape) {
    const char *dir = rt->cfg.resume_dir;
    if (!dir[0]) return;
    static unsigned char buf[1 << 20]; /* hashing only: nothing is allocated before preflight */
    char err[ZL_PATH_MAX + 256] = "";
    zl_ckpt_manifest m;
    int bad = zl_ckpt_read_manifest(dir, &m, err, sizeof err) ||
              zl_ckpt_compatible(&m, dir, shape, zl_kernels_dtype(), err, sizeof err) ||
              same_training(&m, dir, &rt->cfg, err, sizeof err);
    for (int r = rt->rank; !bad && r < m.world; r += rt->world)
        bad = zl_ckpt_verify_file(dir, &m, r, buf, sizeof buf, err, sizeof err);
    if (!bad) g_checked_id = checkpoint_id(&m);
    zl_ckpt_manifest_free(&m);
    char line[sizeof err + 16] = "";
    if (bad) snprintf(line, sizeof line, "--resume: %s", err);
    zl_runtime_refuse_if_any(rt, bad, line);
}
