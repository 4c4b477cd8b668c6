/* test_ckpt_format.c — the checkpoint format in-process (no MPI job, no device): rank files
 * and their manifest written here by an independent writer that follows the documented layout
 * (ckpt.h, docs/ARCHITECTURE.md), the resharding range reader against element values known in
 * advance, and the loader fuzz:
 * thousands of mutated checkpoints (flipped bytes, truncations, missing files, garbage,
 * and re-sealed manifests with fields replaced by junk) must each be refused with one line
 * naming a file, or — re-sealed and still meaningful — accepted; never a crash or a
 * sanitizer report (this file also runs in the ASan + UBSan build).
 *
 * ZL_CKPT_FUZZ_N sets the number of mutations (default 2000; scripts/fuzz-ckpt.sh: 10000+). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/ckpt.h"

/* ---- an independent writer ------------------------------------------------------------ */

static void write_all_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Seal a manifest given as JSON (a seal member in it dropped first): the rest printed by
 * `print`, its closing brace replaced by the seal member, computed here by the documented rule
 * (the XXH3-64 of every byte before the key; not the module's code). */
static void seal(const char *path, cJSON *j, char *(*print)(const cJSON *)) {
    cJSON_DeleteItemFromObjectCaseSensitive(j, "manifest_xxh3_64");
    char *body = print(j);
    size_t len = strlen(body);
    while (len && body[len - 1] != '}') len--;
    len--;
    while (len && (body[len - 1] == '\n' || body[len - 1] == '\t')) len--;
    size_t cap = len + 80;
    char *t = malloc(cap);
    int prefix = snprintf(t, cap, "%.*s,\n\t", (int)len, body);
    snprintf(t + prefix, cap - (size_t)prefix, "\"manifest_xxh3_64\":\t\"%016llx\"\n}\n",
             (unsigned long long)XXH3_64bits(t, (size_t)prefix));
    write_all_file(path, t, strlen(t));
    free(t), free(body);
}

/* Re-seal a manifest edited as JSON, printed indented as ckpt.c prints it. */
static void reseal(const char *path, cJSON *j) { seal(path, j, cJSON_Print); }

/* Value of element i of unit u in category cat: distinct everywhere, exact in fp32. */
static float value_of(int cat, int u, size_t i) { return (float)(cat * 1000000 + u * 100000 + (int)i); }

/* DIR/manifest.json from docs/ARCHITECTURE.md's layout, written here member by member (not by
 * ckpt.c's writer) and sealed by the documented rule; its body printed compact, where ckpt.c
 * prints it indented: the reader must take any JSON layout before the seal. */
static void write_manifest(const char *dir, const zl_ckpt_manifest *m, int n_cats) {
    static const char *const cats[] = {"master_fp32", "adam_m", "adam_v", "params"};
    char hex[17], name[32], path[512];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "zerolab-checkpoint");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON *model = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(model, "kind", "mlp");
    cJSON_AddNumberToObject(model, "layers", m->shape.layers);
    cJSON_AddNumberToObject(model, "dim", m->shape.dim);
    cJSON_AddStringToObject(j, "dtype", "fp16");
    cJSON_AddNumberToObject(j, "stage", m->stage);
    cJSON_AddNumberToObject(j, "world", m->world);
    cJSON_AddNumberToObject(j, "rows_per_rank", m->shape.rows);
    snprintf(name, sizeof name, "%llu", (unsigned long long)m->seed);
    cJSON_AddStringToObject(j, "seed", name);
    cJSON_AddNumberToObject(j, "params", (double)m->part.psi);
    cJSON_AddNumberToObject(j, "params_padded", (double)m->part.psi_pad);
    cJSON *units = cJSON_AddObjectToObject(j, "units");
    const size_t *v[3] = {m->part.n, m->part.n_pad, m->part.slice_len};
    const char *keys[3] = {"n", "n_pad", "slice_len"};
    for (int k = 0; k < 3; k++) {
        cJSON *sizes = cJSON_AddArrayToObject(units, keys[k]);
        for (int u = 0; u < m->part.n_units; u++) cJSON_AddItemToArray(sizes, cJSON_CreateNumber((double)v[k][u]));
    }
    cJSON *list = cJSON_AddArrayToObject(j, "categories");
    for (int c = 0; c < n_cats; c++) cJSON_AddItemToArray(list, cJSON_CreateString(cats[c]));
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
        snprintf(name, sizeof name, "rank-%05d.bin", r);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)m->file_hash[r]);
        cJSON_AddStringToObject(f, "name", name);
        cJSON_AddStringToObject(f, "xxh3_64", hex);
        cJSON_AddItemToArray(files, f);
    }
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    seal(path, j, cJSON_PrintUnformatted);
    cJSON_Delete(j);
}

/* A checkpoint of an MLP (L, D) as written by `world` ranks: file r holds, per category,
 * slice r of every unit at element slice_off[u], padding as zeros. */
static void write_checkpoint(const char *dir, int L, int D, int world, int stage, zl_ckpt_manifest *m) {
    mkdir(dir, 0777);
    memset(m, 0, sizeof *m);
    m->version = ZL_CKPT_VERSION;
    m->shape = (zl_model_shape){.kind = ZL_MODEL_MLP, .layers = L, .dim = D, .rows = 3};
    m->dtype = ZL_F16, m->stage = stage, m->world = world, m->seed = 42;
    cr_assert_eq(zl_model_partition(&m->part, m->shape, world), 0);
    m->has_params = stage == 3;
    m->at = (zl_ckpt_progress){.step = 7, .adam_step = 7, .data_rows = 7 * 3 * (uint64_t)world};
    zl_scaler_init(&m->at.scaler, 0, 1024.0f, 0);
    m->file_hash = calloc((size_t)world, sizeof(uint64_t));
    int n_cats = m->has_params ? 4 : 3;
    size_t bytes = 0;
    for (int c = 0; c < n_cats; c++) bytes += (c == ZL_CKPT_PARAMS ? 2 : 4) * m->part.shard_len;
    unsigned char *file = malloc(bytes);
    for (int r = 0; r < world; r++) {
        size_t o = 0;
        for (int cat = 0; cat < n_cats; cat++)
            for (int u = 0; u < m->part.n_units; u++)
                for (size_t j = 0; j < m->part.slice_len[u]; j++) {
                    size_t i = (size_t)r * m->part.slice_len[u] + j;
                    if (cat == ZL_CKPT_PARAMS) {
                        uint16_t h = (uint16_t)(i < m->part.n[u] ? (i & 0x3ff) : 0); /* some fp16 bits */
                        memcpy(file + o, &h, 2), o += 2;
                    } else {
                        float v = i < m->part.n[u] ? value_of(cat, u, i) : 0.0f;
                        memcpy(file + o, &v, 4), o += 4;
                    }
                }
        cr_assert_eq(o, bytes);
        char path[512];
        zl_ckpt_rank_path(path, sizeof path, dir, r);
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        cr_assert_eq(fwrite(file, 1, bytes, f), bytes);
        fclose(f);
        m->file_hash[r] = XXH3_64bits(file, bytes);
    }
    free(file);
    m->file_bytes = bytes;
    write_manifest(dir, m, n_cats);
}

static void remove_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static void temp_dir(char *out, size_t n, const char *tag) { snprintf(out, n, "/tmp/zl_ckfmt_%s_%d", tag, getpid()); }

/* Manifest read + every file verified: 0 (sound) or -1 with err. */
static int load_all(const char *dir, char *err, size_t n) {
    static unsigned char buf[4096];
    zl_ckpt_manifest m;
    int rc = zl_ckpt_read_manifest(dir, &m, err, n);
    for (int r = 0; !rc && r < m.world; r++) rc = zl_ckpt_verify_file(dir, &m, r, buf, sizeof buf, err, n);
    zl_ckpt_manifest_free(&m);
    return rc;
}

Test(ckpt_format, written_by_hand_reads_back) {
    char dir[256], err[1024];
    temp_dir(dir, sizeof dir, "hand");
    remove_dir(dir);
    zl_ckpt_manifest w;
    write_checkpoint(dir, 2, 5, 3, 3, &w);
    cr_assert_eq(load_all(dir, err, sizeof err), 0, "%s", err);
    zl_ckpt_manifest m;
    cr_assert_eq(zl_ckpt_read_manifest(dir, &m, err, sizeof err), 0, "%s", err);
    cr_expect_eq(m.world, 3);
    cr_expect_eq(m.stage, 3);
    cr_expect_eq(m.has_params, 1);
    cr_expect_eq(m.at.step, 7);
    cr_expect_eq(m.at.data_rows, 63);
    cr_expect_eq(m.part.psi, 2 * (8 * 25 + 5 * 5));
    cr_expect_eq(m.file_bytes, w.file_bytes);
    /* 2 units of 225 -> slices of 75 at N = 3: 3 fp32 categories + 1 fp16 */
    cr_expect_eq(m.file_bytes, 150 * (4 + 4 + 4 + 2));
    zl_ckpt_manifest_free(&m);
    zl_ckpt_manifest_free(&w);
    remove_dir(dir);
}

/* ---- resharding: every rank of every new N reads exactly its elements ------------------ */

typedef struct {
    float *out;
    size_t n;
    size_t pieces;
} collect;

static void collect_sink(void *ctx, size_t at, void *data, size_t count) {
    collect *c = ctx;
    cr_assert(at + count <= c->n, "piece [%zu, %zu) outside the range of %zu", at, at + count, c->n);
    memcpy(c->out + at, data, count * sizeof(float));
    c->pieces++;
}

Test(ckpt_format, any_range_reads_from_the_old_ranks_that_hold_it) {
    char dir[256], err[1024];
    temp_dir(dir, sizeof dir, "range");
    remove_dir(dir);
    for (int old_n = 1; old_n <= 5; old_n++) {
        zl_ckpt_manifest w;
        write_checkpoint(dir, 3, 4, old_n, 1, &w); /* units of 148: ragged slices for most N */
        zl_ckpt_reader *rd = zl_ckpt_reader_open(dir, &w);
        unsigned char buf[40]; /* 10 floats: forces many chunks */
        size_t n = w.part.n[0];
        float *out = malloc(n * sizeof(float));
        /* every [begin, end) of unit u: the reader hands back exactly value_of(...) */
        for (int u = 0; u < 3; u++)
            for (size_t begin = 0; begin < n; begin += 7)
                for (size_t end = begin + 1; end <= n; end += 13) {
                    collect c = {out, end - begin, 0};
                    memset(out, 0xff, n * sizeof(float));
                    cr_assert_eq(zl_ckpt_read_range(rd, ZL_CKPT_V, u, begin, end, buf, sizeof buf, collect_sink, &c,
                                                    err, sizeof err),
                                 0, "%s", err);
                    for (size_t i = begin; i < end; i++)
                        cr_assert_eq(out[i - begin], value_of(ZL_CKPT_V, u, i), "old N=%d unit %d [%zu,%zu) elem %zu",
                                     old_n, u, begin, end, i);
                    /* pieces: one per overlapped old slice, per 10-element chunk */
                    size_t L = w.part.slice_len[u], expect = 0;
                    for (size_t q = begin / L; q * L < end; q++) {
                        size_t a = begin > q * L ? begin : q * L, b = end < (q + 1) * L ? end : (q + 1) * L;
                        expect += (b - a + 9) / 10;
                    }
                    cr_assert_eq(c.pieces, expect);
                }
        free(out);
        zl_ckpt_reader_close(rd);
        zl_ckpt_manifest_free(&w);
        remove_dir(dir);
    }
}

/* ---- refusals, each one line naming the file -------------------------------------------- */

static void expect_refused(const char *dir, const char *what, const char *needle) {
    char err[1024] = "";
    cr_expect_eq(load_all(dir, err, sizeof err), -1, "%s: accepted", what);
    cr_expect(strchr(err, '\n') == NULL && strstr(err, dir), "%s: '%s' is not one line naming the file", what, err);
    if (needle) cr_expect(strstr(err, needle), "%s: '%s' lacks '%s'", what, err, needle);
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc(*len + 1);
    cr_assert_eq(fread(t, 1, *len, f), *len);
    t[*len] = '\0';
    fclose(f);
    return t;
}

static cJSON *load_json(const char *path) {
    size_t len;
    char *t = read_all(path, &len);
    cJSON *j = cJSON_Parse(t);
    free(t);
    cr_assert(j);
    return j;
}

Test(ckpt_format, each_fault_is_refused_with_one_line) {
    char dir[256], man[300], rank1[300];
    temp_dir(dir, sizeof dir, "bad");
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    zl_ckpt_rank_path(rank1, sizeof rank1, dir, 1);
    zl_ckpt_manifest w;
#define FRESH() (remove_dir(dir), write_checkpoint(dir, 2, 5, 3, 3, &w), zl_ckpt_manifest_free(&w))
    FRESH();
    unlink(rank1);
    expect_refused(dir, "missing rank file", "missing");
    FRESH();
    cr_assert_eq(truncate(rank1, file_size(rank1) - 1), 0);
    expect_refused(dir, "truncated rank file", "truncated");
    FRESH();
    flip_byte(rank1, 100);
    expect_refused(dir, "flipped byte in a rank file", "checksum mismatch");
    FRESH();
    flip_byte(man, 40);
    expect_refused(dir, "flipped byte in the manifest", "damaged");
    FRESH();
    write_all_file(man, "\x7f" "ELF garbage", 12);
    expect_refused(dir, "garbage manifest", "manifest.json");
    FRESH();
    unlink(man);
    expect_refused(dir, "no manifest", "manifest.json");
    FRESH();
    cJSON *j = load_json(man);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "version", cJSON_CreateNumber(2));
    reseal(man, j);
    cJSON_Delete(j);
    expect_refused(dir, "unknown version", "unknown format version 2");
    FRESH();
    j = load_json(man);
    cJSON *bad_pad = cJSON_CreateIntArray((int[]){225, 226}, 2);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(j, "units"), "n_pad", bad_pad);
    reseal(man, j);
    cJSON_Delete(j);
    expect_refused(dir, "inconsistent padding", "n_pad");
    FRESH(); /* an entry that is no object: the message still names the file that belongs there */
    j = load_json(man);
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(j, "files"), 1, cJSON_CreateNumber(7));
    reseal(man, j);
    cJSON_Delete(j);
    expect_refused(dir, "files[1] not an object", "files[1]: expected {\"name\": \"rank-00001.bin\"");
    remove_dir(dir);
}

/* The format is little-endian and the code writes native bytes: a big-endian build stops at
 * compile time with a sentence saying so (ckpt.h), instead of writing files that read back
 * byte-swapped elsewhere. Checked by compiling ckpt.h with the byte order redefined (needs a
 * C compiler and the source tree: run from the repository root). */
Test(ckpt_format, a_big_endian_build_is_refused) {
    if (access("common/ckpt.h", R_OK) || system("cc --version >/dev/null 2>&1"))
        cr_skip_test("no C compiler or not at the repository root");
    char err[128], cmd[512], text[4096] = "";
    snprintf(err, sizeof err, "/tmp/zl_be_%d.txt", getpid());
    const char *compile = "echo '#include \"common/ckpt.h\"' | cc -std=c11 -fsyntax-only -I. -Ikernels -x c -";
    snprintf(cmd, sizeof cmd, "%s 2>%s", compile, err);
    cr_assert_eq(system(cmd), 0, "ckpt.h does not compile as it is");
    snprintf(cmd, sizeof cmd, "%s -U__BYTE_ORDER__ -D__BYTE_ORDER__=__ORDER_BIG_ENDIAN__ 2>%s", compile, err);
    int rc = system(cmd);
    FILE *f = fopen(err, "r");
    if (f) text[fread(text, 1, sizeof text - 1, f)] = '\0', fclose(f);
    unlink(err);
    cr_expect_neq(rc, 0, "a big-endian build compiled");
    cr_expect(strstr(text, "big-endian hosts unsupported"), "no sentence saying why: %s", text);
}

Test(ckpt_format, wrong_model_or_dtype_is_incompatible) {
    char dir[256], err[1024];
    temp_dir(dir, sizeof dir, "compat");
    remove_dir(dir);
    zl_ckpt_manifest w, m;
    write_checkpoint(dir, 2, 5, 2, 1, &w);
    cr_assert_eq(zl_ckpt_read_manifest(dir, &m, err, sizeof err), 0, "%s", err);
    zl_model_shape same = {.kind = ZL_MODEL_MLP, .layers = 2, .dim = 5, .rows = 9}; /* rows may differ: a resume may change B */
    cr_expect_eq(zl_ckpt_compatible(&m, dir, same, ZL_F16, err, sizeof err), 0, "%s", err);
    zl_model_shape wider = {.kind = ZL_MODEL_MLP, .layers = 2, .dim = 6, .rows = 3};
    zl_model_shape deeper = {.kind = ZL_MODEL_MLP, .layers = 3, .dim = 5, .rows = 3};
    cr_expect_eq(zl_ckpt_compatible(&m, dir, wider, ZL_F16, err, sizeof err), -1);
    cr_expect(strstr(err, "D = 5") && strstr(err, "D = 6"), "%s", err);
    cr_expect_eq(zl_ckpt_compatible(&m, dir, deeper, ZL_F16, err, sizeof err), -1);
    cr_expect_eq(zl_ckpt_compatible(&m, dir, same, ZL_BF16, err, sizeof err), -1);
    cr_expect(strstr(err, "bf16") && strstr(err, "fp16"), "%s", err);
    zl_ckpt_manifest_free(&m);
    zl_ckpt_manifest_free(&w);
    remove_dir(dir);
}

/* ---- the fuzz ------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* splitmix64: reproducible */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static cJSON *junk_value(void) {
    switch (rnd() % 10) {
    case 0: return cJSON_CreateNull();
    case 1: return cJSON_CreateString("x\x01y");
    case 2: return cJSON_CreateNumber(-1);
    case 3: return cJSON_CreateNumber(1e300);
    case 4: return cJSON_CreateNumber(0.5);
    case 5: return cJSON_CreateNumber((double)(rnd() % 5));
    case 6: return cJSON_CreateArray();
    case 7: return cJSON_CreateObject();
    case 8: return cJSON_CreateNumber(9007199254740993.0);
    default: return cJSON_CreateNumber((double)(rnd() % 100000));
    }
}

/* Replace one random member (at any depth, arrays included) by junk, or delete it. */
static void mutate_tree(cJSON *j) {
    cJSON *node = j;
    for (int depth = 0; depth < 4; depth++) {
        int n = cJSON_GetArraySize(node);
        if (n == 0) break;
        cJSON *child = cJSON_GetArrayItem(node, (int)(rnd() % (uint64_t)n));
        if ((cJSON_IsObject(child) || cJSON_IsArray(child)) && rnd() % 2) {
            node = child;
            continue;
        }
        int at = 0;
        for (cJSON *c = node->child; c != child; c = c->next) at++;
        if (rnd() % 8 == 0) cJSON_DeleteItemFromArray(node, at);
        else cJSON_ReplaceItemInArray(node, at, junk_value());
        return;
    }
}

typedef struct {
    int refused, accepted_resealed, raw;
} fuzz_counts;

/* One mutation of a sound checkpoint in dir (whose pristine files are in `orig`). */
static void fuzz_once(const char *dir, const char *man, const char *const orig_man, size_t orig_len, fuzz_counts *fc) {
    char rank[300], err[1024];
    int r = (int)(rnd() % 3);
    zl_ckpt_rank_path(rank, sizeof rank, dir, r);
    char *t = malloc(orig_len + 1);
    memcpy(t, orig_man, orig_len + 1);
    int kind = (int)(rnd() % 8), raw = kind != 7;
    switch (kind) {
    case 0: /* one flipped byte (any bit) in the manifest */
        t[rnd() % orig_len] ^= (char)(1u << (rnd() % 8));
        write_all_file(man, t, orig_len);
        break;
    case 1: /* a few random bytes in the manifest */
        for (int k = 0; k < 1 + (int)(rnd() % 4); k++) t[rnd() % orig_len] = (char)(rnd() % 256);
        if (!memcmp(t, orig_man, orig_len)) t[0] ^= 1;
        write_all_file(man, t, orig_len);
        break;
    case 2: /* the manifest cut short */
        write_all_file(man, t, rnd() % orig_len);
        break;
    case 3: { /* garbage of random length */
        size_t n = rnd() % 2048;
        char *g = malloc(n + 1);
        for (size_t i = 0; i < n; i++) g[i] = (char)(rnd() % 256);
        write_all_file(man, g, n);
        free(g);
        break;
    }
    case 4: /* one flipped bit in a rank file */
        flip_byte(rank, (long)(rnd() % (uint64_t)file_size(rank)));
        break;
    case 5: /* a rank file cut short or made longer */
        if (rnd() % 2) cr_assert_eq(truncate(rank, (off_t)(rnd() % (uint64_t)file_size(rank))), 0);
        else {
            FILE *f = fopen(rank, "ab");
            fputc(0, f);
            fclose(f);
        }
        break;
    case 6: /* a rank file missing */
        unlink(rank);
        break;
    default: { /* a member replaced by junk, the manifest re-sealed: the field checks alone */
        cJSON *j = cJSON_Parse(t);
        mutate_tree(j);
        reseal(man, j);
        cJSON_Delete(j);
    }
    }
    free(t);
    err[0] = '\0';
    int rc = load_all(dir, err, sizeof err);
    if (rc) {
        fc->refused++;
        cr_assert(err[0] && !strchr(err, '\n') && strstr(err, dir), "kind %d: message '%s'", kind, err);
    } else {
        cr_assert(!raw, "kind %d: a damaged checkpoint was accepted", kind);
        fc->accepted_resealed++;
    }
    fc->raw += raw;
}

Test(ckpt_fuzz, mutated_checkpoints_are_refused_never_crash, .timeout = 600) {
    const char *env = getenv("ZL_CKPT_FUZZ_N");
    int n = env && *env ? atoi(env) : 2000;
    char dir[256], man[300], orig_dir[300];
    temp_dir(dir, sizeof dir, "fuzz");
    snprintf(orig_dir, sizeof orig_dir, "%s.orig", dir);
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    remove_dir(dir), remove_dir(orig_dir);
    zl_ckpt_manifest w;
    write_checkpoint(orig_dir, 2, 3, 3, 3, &w);
    zl_ckpt_manifest_free(&w);
    char orig_man_path[400];
    snprintf(orig_man_path, sizeof orig_man_path, "%s/manifest.json", orig_dir);
    size_t orig_len;
    char *orig_man = read_all(orig_man_path, &orig_len);
    fuzz_counts fc = {0};
    for (int i = 0; i < n; i++) {
        mkdir(dir, 0777);
        for (int r = -1; r < 3; r++) { /* restore the pristine files (no shell: thousands of rounds) */
            char from[400], to[400];
            if (r < 0) snprintf(from, sizeof from, "%s", orig_man_path), snprintf(to, sizeof to, "%s", man);
            else zl_ckpt_rank_path(from, sizeof from, orig_dir, r), zl_ckpt_rank_path(to, sizeof to, dir, r);
            size_t len;
            char *data = read_all(from, &len);
            write_all_file(to, data, len);
            free(data);
        }
        fuzz_once(dir, man, orig_man, orig_len, &fc);
    }
    free(orig_man);
    printf("ckpt fuzz: %d mutated checkpoints: %d refused (all %d raw byte-level mutations among them), "
           "%d re-sealed field edits accepted as still meaningful\n",
           n, fc.refused, fc.raw, fc.accepted_resealed);
    remove_dir(dir), remove_dir(orig_dir);
}
