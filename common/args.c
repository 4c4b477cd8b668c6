/* args.c — strict flag parsing (see args.h). Numbers must be complete (no trailing
 * junk), in range, and the model they describe must have byte counts that fit. */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_table.h"
#include "util.h"
#include "../model/model.h"          /* zl_model_n_uses: how far --prefetch can reach */
#include "../kernels/gpt_kernels.h" /* zl_gpt_flash_supported, zl_gpt_flash_by_shape */

static const char *const stage_prog[4] = {"stage0_ddp", "stage1", "stage2", "stage3"};

typedef struct {
    const char *name;
    int layers, dim, batch, steps;
    int model, seq, heads, vocab; /* model 1: the GPT (model/gpt.h) */
} preset;

/* tiny: the test preset; demo: make demo; lab-1b: D = 4096, L = 8 (Ψ = 1,073,905,664).
 * GPT: gpt-tiny (CI), GPT-2 small (124M with the padded vocabulary 50304) and the ZeRO
 * paper's 1.5B (L = 48, D = 1600, H = 25, T = 1024). */
static const preset presets[] = {
    {"tiny", 2, 32, 4, 10, 0, 0, 0, 0},
    {"demo", 4, 256, 32, 20, 0, 0, 0, 0},
    {"lab-1b", 8, 4096, 8192, 10, 0, 0, 0, 0},
    {"gpt-tiny", 2, 32, 4, 10, 1, 32, 2, 256},
    {"gpt2-124m", 12, 768, 8, 10, 1, 1024, 12, 50257},
    {"gpt2-1.5b", 48, 1600, 8, 10, 1, 1024, 25, 50257},
};
#define PRESET_NAMES "tiny, demo, lab-1b, gpt-tiny, gpt2-124m, gpt2-1.5b"
#define N_PRESETS (int)(sizeof presets / sizeof presets[0])

/* --accum × --layers at most this: the per-step bookkeeping stays under ~100 MB (check_sizes). */
#define ZL_MAX_ACCUM_LAYERS 65536

static int fail(char *err, int len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, int len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)len, fmt, ap);
    va_end(ap);
    return ZL_ARGS_ERROR;
}

/* Digits, a minus sign first at most: strtol would also skip white space and take a '+' (' 3',
 * '+2'), which the seed and the ZL_ knobs refuse as well. */
static int parse_int(const char *flag, const char *s, long lo, long hi, int *out, char *err, int len) {
    char *end = (char *)s;
    errno = 0;
    long v = 0;
    if (isdigit((unsigned char)s[s[0] == '-'])) v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return fail(err, len, "%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    *out = (int)v;
    return ZL_ARGS_OK;
}

/* At most 2^53: the JSON report's numbers are doubles, exact up to there (a larger seed would be
 * written as another one, and a run repeated from its report would train other data). */
#define ZL_SEED_MAX (1ull << 53)
static int parse_seed(const char *flag, const char *s, uint64_t *out, char *err, int len) {
    char *end;
    errno = 0;
    unsigned long long v = 0;
    if (isdigit((unsigned char)*s)) v = strtoull(s, &end, 10); /* a digit first: strtoull skips white space, takes a sign */
    if (!isdigit((unsigned char)*s) || errno || end == s || *end || v > ZL_SEED_MAX)
        return fail(err, len, "%s: expected an integer in [0, %llu] (2^53), got '%s'", flag, ZL_SEED_MAX, s);
    *out = (uint64_t)v;
    return ZL_ARGS_OK;
}

/* lo_open: the lower bound is excluded; hi_open likewise. The range is checked on the
 * value as stored (a float), not on the double that was parsed: 0.99999999999 rounds to
 * 1.0f, and a β of 1 or a scale of 0 would give NaN after one step. A non-zero value
 * that becomes 0 in a float is refused for the same reason. */
static int parse_float(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open, float *out,
                       char *err, int len) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int parsed = end != s && !*end && !isspace((unsigned char)*s) && isfinite(v) && (errno == 0 || errno == ERANGE);
    float f = (float)v;
    double stored = (double)f;
    int ok = parsed && isfinite(f) && (lo_open ? stored > lo : stored >= lo) && (hi_open ? stored < hi : stored <= hi) &&
             !(v != 0 && f == 0);
    if (ok) {
        *out = f;
        return ZL_ARGS_OK;
    }
    if (parsed && stored != v)
        return fail(err, len, "%s: expected a number in %c%g, %g%c, got '%s' (%.9g as a 32-bit float)", flag,
                    lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']', s, stored);
    return fail(err, len, "%s: expected a number in %c%g, %g%c, got '%s'", flag, lo_open ? '(' : '[', lo, hi,
                hi_open ? ')' : ']', s);
}

/* "3,7": increasing step numbers, one comma between each two (checked against --steps once it
 * is known; an empty item, a repeat or a value longer than the buffer is a typo, not something
 * to guess at). */
static int parse_steps(const char *flag, const char *s, zl_config *c, char *err, int len) {
    char buf[256];
    const char *form = "expected increasing step numbers separated by single commas (e.g. 3,7)";
    if (!*s || strlen(s) >= sizeof buf || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        return fail(err, len, "%s: %s, got '%.60s'", flag, form, s);
    snprintf(buf, sizeof buf, "%s", s);
    c->n_inject = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (c->n_inject == (int)(sizeof c->inject_steps / sizeof c->inject_steps[0]))
            return fail(err, len, "%s: at most %d steps", flag, c->n_inject);
        int *step = &c->inject_steps[c->n_inject++];
        if (parse_int(flag, tok, 1, 1000000, step, err, len) || (c->n_inject > 1 && *step <= step[-1]))
            return fail(err, len, "%s: %s, got '%s'", flag, form, s);
    }
    return ZL_ARGS_OK;
}

/* T, H, V as gpt-tiny has them: what --model gpt uses without a GPT preset or those flags. */
static void gpt_defaults(zl_config *c) { c->seq = 32, c->heads = 2, c->vocab = 256; }

static void set_defaults(zl_config *c, int stage) {
    memset(c, 0, sizeof *c);
    c->stage = stage;
    c->layers = presets[0].layers, c->dim = presets[0].dim, c->batch = presets[0].batch, c->steps = presets[0].steps;
    strcpy(c->preset, "tiny");
    c->seed = 1234;
    c->loss_scale = -1.0f; /* by dtype, once known: dynamic from 65536 (fp16), static 1 (bf16) */
    c->loss_scale_static = c->loss_scale_init = -1.0f;
    c->loss_scale_dynamic = -1;
    c->loss_scale_window = -1; /* 1000 unless given (finish_config: a static scale refuses it) */
    c->dtype = ZL_F16;
    c->lr = -1.0f, c->beta1 = 0.9f, c->beta2 = 0.999f, c->eps = 1e-8f, c->weight_decay = 0.0f;
    c->prefetch = -1; /* min(1, L-1) once L is known */
    c->accum = 1;
    c->timeout_s = 300;
    gpt_defaults(c);
}

static int apply_preset(zl_config *c, const char *name, char *err, int len) {
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcmp(presets[i].name, name)) continue;
        c->layers = presets[i].layers, c->dim = presets[i].dim;
        c->batch = presets[i].batch, c->steps = presets[i].steps;
        /* the whole model, not only its sizes: a later --preset tiny after gpt-tiny trains the MLP
         * (it trained a GPT), with the GPT's fields as set_defaults left them */
        c->model = presets[i].model;
        if (c->model) c->seq = presets[i].seq, c->heads = presets[i].heads, c->vocab = presets[i].vocab;
        else gpt_defaults(c);
        snprintf(c->preset, sizeof c->preset, "%s", name);
        return ZL_ARGS_OK;
    }
    return fail(err, len, "--preset: expected one of tiny, demo, lab-1b, gpt-tiny, gpt2-124m, gpt2-1.5b, got '%s'",
                name);
}

/* Byte counts of the largest buffers must fit in size_t, and kernel index math in int. */
static int check_sizes(const zl_config *c, char *err, int len) {
    size_t D = (size_t)c->dim, L = (size_t)c->layers, B = (size_t)c->batch, unit, psi, bytes, act;
    /* a layer: the MLP's 8D² + 5D, a GPT block's 12D² + 13D (and its embeddings, (Vp + T)·D + 2D) */
    int gpt = c->model == 1;
    size_t edge = gpt ? (((size_t)c->vocab + 63) / 64 * 64 + (size_t)c->seq + 2) * D : 0;
    if (__builtin_mul_overflow(D, D, &unit) || __builtin_mul_overflow(unit, (size_t)(gpt ? 12 : 8), &unit) ||
        __builtin_add_overflow(unit, (gpt ? 13 : 5) * D, &unit) || __builtin_mul_overflow(unit, L, &psi) ||
        __builtin_add_overflow(psi, edge, &psi) || __builtin_add_overflow(psi, (L + 3) * 64, &psi) /* padding */ ||
        __builtin_mul_overflow(psi, (size_t)16, &bytes))
        return fail(err, len, "--layers/--dim: a model of %d layers of dim %d has byte counts that overflow 64 bits",
                    c->layers, c->dim);
    /* Each step's bookkeeping (the collectives' events, the timeline's spans) grows with the
     * micro-batches times the layers and is not in the preflight: bounded here (past 2^31 its
     * int counts overflowed; at 1.6 M it took 2.4 GB of host memory before the first step). */
    if ((size_t)c->accum * L > ZL_MAX_ACCUM_LAYERS)
        return fail(err, len, "--accum/--layers: %d micro-batches of %d layers: at most %d a step (the step's "
                    "bookkeeping grows with both)", c->accum, c->layers, ZL_MAX_ACCUM_LAYERS);
    if (B * 4 * D > 2147483647u)
        return fail(err, len, "--batch: rows*4*dim must be below 2^31 (got %d rows at dim %d)", c->batch, c->dim);
    if (__builtin_mul_overflow(B * D, (9 * L + 8) * 2, &act))
        return fail(err, len, "--batch: activation bytes overflow 64 bits");
    return ZL_ARGS_OK;
}

/* The transformer's flags: heads divide the width; every kernel index (rows × the widest
 * row, B·H·T² scores) fits; the byte counts fit 64 bits. */
static int check_gpt(const zl_config *c, char *err, int len) {
    if (c->dim % c->heads)
        return fail(err, len, "--heads: must divide --dim (got %d heads for dim %d)", c->heads, c->dim);
    size_t R = (size_t)c->batch * (size_t)c->seq, D = (size_t)c->dim, Vp = ((size_t)c->vocab + 63) / 64 * 64;
    size_t widest = 4 * D > Vp ? 4 * D : Vp, scores;
    if (R * widest > 2147483647u || Vp * D > 2147483647u)
        return fail(err, len, "--batch/--seq/--dim/--vocab: batch*seq*max(4*dim, vocab) must be below 2^31");
    if (__builtin_mul_overflow(R * (size_t)c->heads, (size_t)c->seq, &scores) || scores > 2147483647u)
        return fail(err, len, "--batch/--heads/--seq: batch*heads*seq^2 must be below 2^31");
    if (c->data_path[0] && c->vocab < 256) /* its tokens are bytes: folded modulo V they would be other text */
        return fail(err, len, "--data: its tokens are the text's bytes, 0..255: --vocab must be at least 256 (got %d)",
                    c->vocab);
    if (c->attention == ZL_ATTENTION_FUSED && !zl_gpt_flash_supported(c->dim, c->heads, 0))
        return fail(err, len, "--attention fused: needs head dimension 64 (--dim / --heads, got %d)", c->dim / c->heads);
    if (c->attention == ZL_ATTENTION_FUSED && !zl_gpt_flash_supported(c->dim, c->heads, c->dtype == ZL_BF16))
        return fail(err, len, "--attention fused: fp16 only (got --dtype bf16); --attention strided takes both");
    if (c->attention == ZL_ATTENTION_FUSED && c->batch > ZL_GPT_FLASH_MAX_BATCH)
        return fail(err, len, "--attention fused: --batch at most %d (got %d); --attention strided has no such bound",
                    ZL_GPT_FLASH_MAX_BATCH, c->batch);
    return ZL_ARGS_OK;
}

static int flag_belongs(const char *flag, int stage) {
    if (!strcmp(flag, "--prefetch")) return stage == 3;
    if (!strcmp(flag, "--grad-sync")) return stage == 1;
    if (!strcmp(flag, "--offload")) return stage >= 2; /* ZeRO-Offload shards what it moves */
    return 1;
}

/* Control characters in an echoed value would break the one-line message: escape them. */
static void escape_controls(char *err, int len) {
    char out[1024];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)err; *p && o + 5 < sizeof out; p++) {
        if (*p >= 0x20 && *p != 0x7f) out[o++] = (char)*p;
        else o += (size_t)snprintf(out + o, sizeof out - o, *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : "\\x%02x", *p);
    }
    out[o] = '\0';
    snprintf(err, (size_t)len, "%s", out);
}

/* Split "--flag=value" into its name (copied into name) and value; "--flag" leaves *value NULL. */
static const char *flag_name(const char *arg, char *name, size_t cap, const char **value) {
    const char *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
    *value = NULL;
    if (!eq) return arg;
    snprintf(name, cap, "%.*s", (int)(eq - arg), arg);
    *value = eq + 1;
    return name;
}

static const char *const valued_flags[] = {"--layers", "--dim", "--batch", "--steps", "--seed", "--loss-scale",
                                           "--lr", "--beta1", "--beta2", "--eps", "--weight-decay", "--json",
                                           "--dump-params", "--trace", "--preset", "--prefetch", "--grad-sync", "--timeout",
                                           "--loss-scale-init", "--loss-scale-window", "--clip-grad-norm", "--dtype",
                                           "--inject-overflow", "--accum", "--model", "--seq", "--heads", "--attention",
                                           "--vocab", "--data", "--peak-tflops"};
static const char *const switch_flags[] = {"--quiet", "--no-preflight", "--check", "--checkpoint-activations",
                                           "--keep-activations", "--offload", "--no-param-hash"};

/* ---- checkpoint flags (common/ckpt.h): --save DIR, --save-every K, --resume DIR ---- */
static const char *const ckpt_flags[] = {"--save", "--save-every", "--resume"};

static int apply_ckpt_flag(zl_config *c, const char *f, const char *v, char *err, int len) {
    if (!strcmp(f, "--save-every")) return parse_int(f, v, 1, 1000000, &c->save_every, err, len);
    if (!*v || strlen(v) >= ZL_PATH_MAX - 16) /* room for the ".zl-tmp" sibling */
        return fail(err, len, "%s: expected a directory path of 1 to %d characters", f, ZL_PATH_MAX - 17);
    snprintf(!strcmp(f, "--save") ? c->save_dir : c->resume_dir, ZL_PATH_MAX, "%s", v);
    return ZL_ARGS_OK;
}

static int check_ckpt_flags(const zl_config *c, char *err, int len) {
    if (c->save_every && !c->save_dir[0]) return fail(err, len, "--save-every: needs --save DIR");
    return ZL_ARGS_OK;
}

static uint64_t hash_ckpt_flags(uint64_t h, const zl_config *c) {
    h = zl_fnv1a(h, c->save_dir, strlen(c->save_dir));
    h = zl_fnv1a(h, &c->save_every, sizeof c->save_every);
    return zl_fnv1a(h, c->resume_dir, strlen(c->resume_dir));
}
#define CKPT_USAGE                                                                                                   \
    "  --save DIR      write a sharded checkpoint to DIR after the last step (atomically; every rank its file)\n"  \
    "  --save-every K  also after every K-th step of training\n"                                                     \
    "  --resume DIR    continue from checkpoint DIR (any stage, any N: resharded on load); --steps more steps\n"
/* ---- end of checkpoint flags ---- */

static int is_one_of(const char *f, const char *const *list, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(f, list[k])) return 1;
    return 0;
}
#define IS_ONE_OF(f, list) is_one_of(f, list, sizeof list / sizeof list[0])

static int apply_switch(zl_config *c, const char *f) {
    if (!strcmp(f, "--quiet")) c->quiet = 1;
    else if (!strcmp(f, "--no-preflight")) c->no_preflight = 1;
    else if (!strcmp(f, "--check")) c->check = 1;
    else if (!strcmp(f, "--checkpoint-activations")) c->checkpoint_activations = 1;
    else if (!strcmp(f, "--keep-activations")) c->keep_activations = 1;
    else if (!strcmp(f, "--offload")) c->offload = 1;
    else if (!strcmp(f, "--no-param-hash")) c->no_param_hash = 1;
    return ZL_ARGS_OK;
}

static int apply_value(zl_config *c, const char *f, const char *v, char *err, int len) {
    if (IS_ONE_OF(f, ckpt_flags)) return apply_ckpt_flag(c, f, v, err, len);
    if (!strcmp(f, "--layers")) return parse_int(f, v, 1, 1000000, &c->layers, err, len);
    if (!strcmp(f, "--dim")) return parse_int(f, v, 1, 1 << 24, &c->dim, err, len);
    if (!strcmp(f, "--batch")) return parse_int(f, v, 1, 1 << 20, &c->batch, err, len);
    if (!strcmp(f, "--steps")) return parse_int(f, v, 1, 1000000, &c->steps, err, len);
    if (!strcmp(f, "--accum")) return parse_int(f, v, 1, 1024, &c->accum, err, len);
    if (!strcmp(f, "--seed")) return parse_seed(f, v, &c->seed, err, len);
    if (!strcmp(f, "--loss-scale")) {
        if (!strcmp(v, "dynamic")) return c->loss_scale_dynamic = 1, ZL_ARGS_OK;
        c->loss_scale_dynamic = 0;
        /* at least FLT_MIN: the gradients are divided by it, and 1/K must be finite (1e-45 diverged) */
        if (parse_float(f, v, FLT_MIN, 0, 65536, 0, &c->loss_scale_static, err, len) == ZL_ARGS_OK) return ZL_ARGS_OK;
        if (strstr(err, "32-bit float")) return ZL_ARGS_ERROR; /* keep the narrowing explanation */
        return fail(err, len, "--loss-scale: expected dynamic or a number in [1.18e-38, 65536] (2^-126 up), got '%s'",
                    v);
    }
    if (!strcmp(f, "--loss-scale-init")) {
        if (c->loss_scale_dynamic < 0) c->loss_scale_dynamic = 1;
        return parse_float(f, v, 1, 0, 16777216, 0, &c->loss_scale_init, err, len);
    }
    if (!strcmp(f, "--loss-scale-window")) return parse_int(f, v, 1, 100000000, &c->loss_scale_window, err, len);
    if (!strcmp(f, "--clip-grad-norm")) return parse_float(f, v, 0, 1, 1e9, 0, &c->clip_grad_norm, err, len);
    if (!strcmp(f, "--dtype")) {
        if (!strcmp(v, "fp16")) c->dtype = ZL_F16;
        else if (!strcmp(v, "bf16")) c->dtype = ZL_BF16;
        else return fail(err, len, "--dtype: expected fp16 or bf16, got '%s'", v);
        return ZL_ARGS_OK;
    }
    if (!strcmp(f, "--inject-overflow")) return parse_steps(f, v, c, err, len);
    if (!strcmp(f, "--lr")) return parse_float(f, v, 0, 1, 10, 0, &c->lr, err, len);
    if (!strcmp(f, "--beta1")) return parse_float(f, v, 0, 0, 1, 1, &c->beta1, err, len);
    if (!strcmp(f, "--beta2")) return parse_float(f, v, 0, 0, 1, 1, &c->beta2, err, len);
    if (!strcmp(f, "--eps")) return parse_float(f, v, 0, 1, 1, 0, &c->eps, err, len);
    if (!strcmp(f, "--weight-decay")) return parse_float(f, v, 0, 0, 1, 0, &c->weight_decay, err, len);
    if (!strcmp(f, "--preset")) return ZL_ARGS_OK; /* applied in the first pass */
    /* ---- the model: --model, and the GPT's shape and data ---- */
    if (!strcmp(f, "--model")) {
        if (!strcmp(v, "mlp")) c->model = 0;
        else if (!strcmp(v, "gpt")) c->model = 1;
        else return fail(err, len, "--model: expected mlp or gpt, got '%s'", v);
        return ZL_ARGS_OK;
    }
    if (!strcmp(f, "--seq")) return parse_int(f, v, 1, 1 << 16, &c->seq, err, len);
    if (!strcmp(f, "--heads")) return parse_int(f, v, 1, 1 << 12, &c->heads, err, len);
    if (!strcmp(f, "--attention")) {
        if (!strcmp(v, "strided")) c->attention = ZL_ATTENTION_STRIDED;
        else if (!strcmp(v, "fused")) c->attention = ZL_ATTENTION_FUSED;
        else return fail(err, len, "--attention: expected strided or fused, got '%s'", v);
        return ZL_ARGS_OK;
    }
    if (!strcmp(f, "--vocab")) return parse_int(f, v, 2, 1 << 20, &c->vocab, err, len);
    if (!strcmp(f, "--data")) {
        if (!*v || strlen(v) >= ZL_PATH_MAX)
            return fail(err, len, "--data: expected a file path of 1 to %d characters", ZL_PATH_MAX - 1);
        snprintf(c->data_path, ZL_PATH_MAX, "%s", v);
        return ZL_ARGS_OK;
    }
    if (!strcmp(f, "--prefetch")) return parse_int(f, v, 0, 64, &c->prefetch, err, len);
    if (!strcmp(f, "--timeout")) return parse_int(f, v, 0, 7 * 86400, &c->timeout_s, err, len);
    if (!strcmp(f, "--peak-tflops")) { /* kept as the double given: MFU divides by that very number */
        float in_range;
        if (parse_float(f, v, 0, 1, 1e6, 0, &in_range, err, len) != ZL_ARGS_OK) return ZL_ARGS_ERROR;
        c->peak_tflops = strtod(v, NULL);
        return ZL_ARGS_OK;
    }
    if (!strcmp(f, "--grad-sync")) {
        if (!strcmp(v, "reducescatter")) c->grad_sync_allreduce = 0;
        else if (!strcmp(v, "allreduce")) c->grad_sync_allreduce = 1;
        else return fail(err, len, "--grad-sync: expected reducescatter or allreduce, got '%s'", v);
        return ZL_ARGS_OK;
    }
    /* --json, --dump-params, --trace */
    if (!*v || strlen(v) >= ZL_PATH_MAX)
        return fail(err, len, "%s: expected a file path of 1 to %d characters", f, ZL_PATH_MAX - 1);
    snprintf(!strcmp(f, "--json") ? c->json_path : !strcmp(f, "--trace") ? c->trace_path : c->dump_path,
             ZL_PATH_MAX, "%s", v);
    return ZL_ARGS_OK;
}

/* Defaults that depend on other flags, and cross-flag checks. */
static int finish_config(zl_config *c, int stage, char *err, int len) {
    /* Default learning rate: 1e-3, scaled down for wide layers. Adam's first steps move
     * every weight by about lr in a direction shared across a row (GELU outputs are mostly
     * positive), so a layer's output moves by ~fan_in·lr·mean(a); at D = 4096 a fixed 1e-3
     * sends the lab-1b model to inf in one step. */
    if (c->lr < 0) c->lr = 1e-3f * (c->dim > 256 ? 256.0f / (float)c->dim : 1.0f);
    /* fp16 needs a loss scale (small gradients underflow); bf16 has fp32's exponent range. */
    if (c->loss_scale_dynamic < 0) c->loss_scale_dynamic = c->dtype == ZL_F16;
    /* The dynamic scaler's own flags with a static scale: which one wins would hang on the flags'
     * order (--loss-scale-init), or the flag would be ignored (the window is 0 when static). */
    const char *dynamic_only = c->loss_scale_init > 0     ? "--loss-scale-init: the first scale of dynamic loss scaling"
                               : c->loss_scale_window > 0 ? "--loss-scale-window: the clean steps before a dynamic "
                                                            "scale doubles"
                                                          : NULL;
    if (!c->loss_scale_dynamic && dynamic_only)
        return fail(err, len, "%s; this run's scale is static (--loss-scale %g%s): drop one", dynamic_only,
                    c->loss_scale_static > 0 ? c->loss_scale_static : 1.0,
                    c->loss_scale_static > 0 ? "" : ", the default for bf16");
    if (c->loss_scale_window < 0) c->loss_scale_window = 1000;
    c->loss_scale = c->loss_scale_dynamic ? (c->loss_scale_init > 0 ? c->loss_scale_init : 65536.0f)
                                          : (c->loss_scale_static > 0 ? c->loss_scale_static : 1.0f);
    for (int i = 0; i < c->n_inject; i++)
        if (c->inject_steps[i] > c->steps)
            return fail(err, len, "--inject-overflow: step %d is beyond --steps %d", c->inject_steps[i], c->steps);
    /* One use gathered ahead, unless there is no later use to gather: a step's uses are the
     * model's (the MLP's L blocks; the GPT's embedding, L blocks, final LN and tied LM head). */
    int later_uses = zl_model_n_uses(zl_model_shape_of(c)) - 1;
    if (c->prefetch < 0) c->prefetch = stage == 3 && later_uses > 0 ? 1 : 0;
    if (stage == 3 && c->prefetch > later_uses && c->prefetch > 0)
        return fail(err, len, "--prefetch: expected an integer in [0, %d] (this model's uses a step - 1), got %d",
                    later_uses, c->prefetch);
    if (c->keep_activations && c->checkpoint_activations)
        return fail(err, len, "--keep-activations and --checkpoint-activations: keep everything or only each "
                    "block's input; drop one");
    if (c->keep_activations && c->model == 1)
        return fail(err, len, "--keep-activations: the GPT keeps every activation its backward reads already; "
                    "the flag is the MLP's");
    if (c->json_path[0] && !strcmp(c->json_path, c->dump_path))
        return fail(err, len, "--json and --dump-params name the same path '%s'", c->json_path);
    if (c->no_param_hash && c->dump_path[0]) /* the dump is written by the same pass as the hash */
        return fail(err, len, "--no-param-hash: --dump-params needs the final parameters copied out; drop one");
    if (check_ckpt_flags(c, err, len)) return ZL_ARGS_ERROR;
    if (c->trace_path[0] && (!strcmp(c->trace_path, c->json_path) || !strcmp(c->trace_path, c->dump_path)))
        return fail(err, len, "--trace and %s name the same path '%s'",
                    !strcmp(c->trace_path, c->json_path) ? "--json" : "--dump-params", c->trace_path);
    if (c->model == 1 && c->attention == ZL_ATTENTION_BY_SHAPE)
        c->attention = zl_gpt_flash_by_shape(c->dim, c->heads, c->dtype == ZL_BF16, c->batch) ? ZL_ATTENTION_FUSED
                                                                                              : ZL_ATTENTION_STRIDED;
    if (c->model == 1) return check_gpt(c, err, len) ? ZL_ARGS_ERROR : check_sizes(c, err, len);
    if (c->model_flag_seen)
        return fail(err, len, "%s: only --model gpt takes this flag", c->model_flag_seen == 1 ? "--seq" :
                    c->model_flag_seen == 2 ? "--heads" : c->model_flag_seen == 3 ? "--vocab" :
                    c->model_flag_seen == 4 ? "--data" : c->model_flag_seen == 5 ? "--peak-tflops" :
                    "--attention");
    return check_sizes(c, err, len);
}

static int parse(zl_config *c, int stage, int argc, char **argv, char *err, int len) {
    set_defaults(c, stage);
    err[0] = '\0';
    char name[64];
    const char *v;
    /* The preset is applied first so explicit flags override it wherever they appear. */
    for (int i = 1; i < argc; i++) {
        const char *f = flag_name(argv[i], name, sizeof name, &v);
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return ZL_ARGS_HELP;
        if (strcmp(f, "--preset")) continue;
        if (!v && i + 1 >= argc) return fail(err, len, "--preset: missing value (" PRESET_NAMES ")");
        if (apply_preset(c, v ? v : argv[i + 1], err, len)) return ZL_ARGS_ERROR;
    }
    for (int i = 1; i < argc; i++) {
        const char *f = flag_name(argv[i], name, sizeof name, &v);
        int valued = IS_ONE_OF(f, valued_flags) || IS_ONE_OF(f, ckpt_flags);
        if (!valued && !IS_ONE_OF(f, switch_flags)) return fail(err, len, "unknown flag '%s' (see --help)", argv[i]);
        if (!flag_belongs(f, stage))
            return fail(err, len, "%s: only %s take%s this flag; %s does not", f,
                        !strcmp(f, "--prefetch") ? "stage3" : !strcmp(f, "--offload") ? "stage2 and stage3" : "stage1",
                        !strcmp(f, "--offload") ? "" : "s", stage_prog[stage]);
        if (!valued) {
            if (v) return fail(err, len, "%s takes no value, got '%s'", f, argv[i]);
            apply_switch(c, f);
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) return fail(err, len, "%s: missing value", f);
            v = argv[++i];
        }
        if (apply_value(c, f, v, err, len)) return ZL_ARGS_ERROR;
        int gpt_flag = !strcmp(f, "--seq") ? 1 : !strcmp(f, "--heads") ? 2 : !strcmp(f, "--vocab") ? 3 :
                       !strcmp(f, "--data") ? 4 : !strcmp(f, "--peak-tflops") ? 5 :
                       !strcmp(f, "--attention") ? 6 : 0;
        if (gpt_flag && !c->model_flag_seen) c->model_flag_seen = gpt_flag;
    }
    return finish_config(c, stage, err, len);
}

/* The ZL_ environment knobs (README's table) are checked with the flags: a typo must not pass
 * unseen, and a bad value is bad input like a bad flag — exit 2 before anything is allocated,
 * not a runtime error halfway through set-up. Where the backends read them they are then
 * well formed. A knob for the other backend is checked too (a script may set it for both). */
typedef struct {
    const char *name;
    long lo, hi;       /* a whole integer in [lo, hi] */
    const char *word;  /* or this word (NULL: none) */
    const char *means; /* for the error line */
    long unset;        /* what the backend takes when it is not set (the ranks compare meanings); −1:
                        * a default chosen elsewhere (NCCL's CTA policy, which its own variable may
                        * set; the windows and the policy the backend picks for a stage, backend.h) */
} env_knob;
static const env_knob env_knobs[] = {
    {"ZL_GEMM_TUNE", 0, 1, "log", "0 (heuristic), 1 (the same-bits choice) or log", 1},
    {"ZL_CUBLASLT_EPILOGUES", 0, 31, NULL, "a mask of the five epilogue bits (kernels/cuda/cuda_common.cuh)", 27},
    {"ZL_NCCL_CTA_POLICY", 0, 2, NULL, "0 default, 1 efficiency, 2 zero-CTA", -1},
    {"ZL_NCCL_WINDOWS", 0, 1, NULL, "1: the all-gathers' buffers as NCCL windows, 0: not", -1},
};

/* ZL_GEMM_TABLE=PATH: a table of GEMM algorithms (gemm_table.h). A file that does not load is
 * bad input: exit 2 now, not a runtime error at the first GEMM. */
static int check_gemm_table(char *err, int len) {
    const char *path = getenv("ZL_GEMM_TABLE"), *tune = getenv("ZL_GEMM_TUNE");
    if (!path || !*path) return ZL_ARGS_OK;
    if (tune && !strcmp(tune, "0"))
        return fail(err, len, "ZL_GEMM_TABLE=%s with ZL_GEMM_TUNE=0: 0 keeps every first answer, the table would not "
                    "be used", path);
    zl_gemm_table t;
    char why[512];
    if (zl_gemm_table_load(path, &t, why, sizeof why)) return fail(err, len, "ZL_GEMM_TABLE: %s", why);
    zl_gemm_table_free(&t);
    return ZL_ARGS_OK;
}

/* ZL_CPU_DEVICE_BYTES=B (a test hook, backend_cpu.c): bytes, at least 1 (1e6 is fine). A typo
 * would leave the CPU backend without its pretend device, and a test relying on it would pass
 * for another reason. */
static int check_pretend_device(char *err, int len) {
    const char *e = getenv("ZL_CPU_DEVICE_BYTES");
    if (!e || !*e) return ZL_ARGS_OK;
    char *end;
    errno = 0;
    double v = strtod(e, &end);
    if (isspace((unsigned char)*e) || end == e || *end || errno || !(v >= 1 && v < 0x1p63))
        return fail(err, len, "ZL_CPU_DEVICE_BYTES=%s: want a number of bytes, at least 1 (e.g. 1e6)", e);
    return ZL_ARGS_OK;
}

static int check_env_knobs(char *err, int len) {
    int rc = check_gemm_table(err, len);
    if (rc == ZL_ARGS_OK) rc = check_pretend_device(err, len);
    if (rc != ZL_ARGS_OK) return rc;
    for (size_t i = 0; i < sizeof env_knobs / sizeof env_knobs[0]; i++) {
        const env_knob *k = &env_knobs[i];
        const char *e = getenv(k->name);
        long v;
        if (!e || !*e || (k->word && !strcmp(e, k->word))) continue;
        if (zl_env_int(k->name, k->lo, k->hi, &v) > 0) continue;
        return fail(err, len, "%s=%s: want %ld..%ld%s%s (%s)", k->name, e, k->lo, k->hi, k->word ? " or " : "",
                    k->word ? k->word : "", k->means);
    }
    return ZL_ARGS_OK;
}

/* Names a ZL_ variable may have besides the knobs of numbers: ZL_GEMM_TABLE (a path, checked by
 * check_gemm_table), the test hooks (README) and what the test harness sets for itself
 * (tests/zl_test_util.h), which reaches the ranks too. */
static const char *const env_other[] = {"ZL_GEMM_TABLE", "ZL_CPU_DEVICE_BYTES", "ZL_CKPT_TEST_SLEEP_MS", "ZL_TEST_",
                                         "ZL_BUILD",      "ZL_REFERENCE_BUILD",  "ZL_MPIEXEC",            "ZL_MAX_WORLD",
                                         "ZL_CKPT_FUZZ_N"};

static int env_name_known(const char *var) { /* var: "NAME=value" */
    size_t n = strcspn(var, "=");
    for (size_t i = 0; i < sizeof env_knobs / sizeof env_knobs[0]; i++)
        if (strlen(env_knobs[i].name) == n && !strncmp(var, env_knobs[i].name, n)) return 1;
    for (size_t i = 0; i < sizeof env_other / sizeof env_other[0]; i++) {
        size_t k = strlen(env_other[i]);
        int prefix = env_other[i][k - 1] == '_';
        if ((prefix ? n > k : n == k) && !strncmp(var, env_other[i], k)) return 1;
    }
    return 0;
}

const char *zl_args_knob_set(size_t i, const char **value) {
    if (i >= sizeof env_knobs / sizeof env_knobs[0]) return NULL;
    const char *e = getenv(env_knobs[i].name);
    *value = e && *e ? e : NULL; /* set and empty reads as unset, as in the checks above */
    return env_knobs[i].name;
}

extern char **environ; /* POSIX */
void zl_args_warn_unknown_knobs(const char *prog) {
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "ZL_", 3) && !env_name_known(*e))
            fprintf(stderr, "%s: warning: %.*s is set but is no variable zerolab reads (a typo, or a knob since "
                            "removed? README: environment variables)\n", prog, (int)strcspn(*e, "="), *e);
}

int zl_args_parse(zl_config *c, int stage, int argc, char **argv, char *err, int len) {
    int rc = parse(c, stage, argc, argv, err, len);
    if (rc == ZL_ARGS_OK) rc = check_env_knobs(err, len);
    if (rc == ZL_ARGS_ERROR) escape_controls(err, len);
    return rc;
}

void zl_args_usage(const char *prog, int stage) {
    printf("usage: mpiexec -n N %s [flags]   (without mpiexec: N = 1; --help: this text)\n"
           "  --preset tiny|demo|lab-1b   model/batch shorthand (default tiny: L=2 D=32 B=4 steps=10;\n"
           "                              demo: L=4 D=256 B=32 steps=20; lab-1b: L=8 D=4096 B=8192 steps=10)\n"
           "  --layers L      residual MLP blocks (shard units), 1..1000000\n"
           "  --dim D         model width, 1..16777216 (Psi = L*(8D^2+5D))\n"
           "  --batch B       rows per rank per micro-batch, 1..1048576 (global batch = N*K*B)\n"
           "  --accum K       micro-batches per step (gradient accumulation), 1..1024 (default 1); K*L <= 65536\n"
           "  --checkpoint-activations  keep each block's input only; recompute its forward in backward\n"
           "  --keep-activations  keep every block's gelu(h) too (2*(L-1)*B*4D bytes more); backward recomputes\n"
           "                      nothing (by default it recomputes gelu(h) from the kept h, one pass a block)\n"
           "  --steps S       training steps, 1..1000000\n"
           "  --seed X        init and data seed, 0..2^53 (results never depend on N)\n"
           "  --dtype fp16|bf16   16-bit format of params, grads, activations (default fp16, the paper's)\n"
           "  --loss-scale dynamic|K  dynamic loss scaling (default for fp16) or a static scale in [2^-126, 65536]\n"
           "                      (default for bf16: static 1)\n"
           "  --loss-scale-init K    dynamic: the first scale, [1, 2^24] (default 65536)\n"
           "  --loss-scale-window W  dynamic: clean steps before the scale doubles (default 1000)\n"
           "  --clip-grad-norm C  clip the global L2 norm of the unscaled gradient to C (default off)\n"
           "  --inject-overflow S1,S2  fault injection (tests, labs): at these steps rank N-1 writes +inf\n"
           "                      into a gradient element owned by rank 0\n"
           "  --lr --beta1 --beta2 --eps --weight-decay   AdamW (1e-3*min(1, 256/D), 0.9, 0.999, 1e-8, 0)\n"
           "  --json PATH     write the full report as JSON (rank 0)\n"
           "  --dump-params PATH  write the final 16-bit parameters (--dtype), unpadded, raw (rank 0)\n"
           CKPT_USAGE
           "  --trace PATH    write a timeline of steps 2..S, every rank, as Chrome trace-event JSON\n"
           "                  (open in https://ui.perfetto.dev or chrome://tracing)\n"
           "  --quiet         no per-step lines\n"
           "  --timeout S     end the job if a rank makes no progress for S seconds (default 300, 0 = off)\n"
           "  --check         exit 4 if any measured memory or traffic number differs from its formula\n"
           "  --no-preflight  skip the check that the run fits in memory (to watch a real out-of-memory)\n"
           "  --no-param-hash skip param_hash (the final parameters' FNV-1a, ~1 GB/s on the host: a minute\n"
           "                  or more for tens of billions of parameters)\n"
           "  --flag=value works as well as --flag value\n"
           "  --model mlp|gpt  the residual MLP (default) or the GPT-2-like transformer (model/gpt.h)\n"
           "  --preset gpt-tiny|gpt2-124m|gpt2-1.5b   GPT shorthand (gpt-tiny: L=2 D=32 H=2 T=32 V=256 B=4;\n"
           "                  gpt2-124m: L=12 D=768 H=12 T=1024 V=50257; gpt2-1.5b: L=48 D=1600 H=25 T=1024)\n"
           "  --seq T --heads H --vocab V   GPT sequence length, heads (divide D), vocabulary (default 32, 2,\n"
           "                  256 byte-level; padded to a multiple of 64, the padding counted in Psi)\n"
           "  --attention strided|fused  GPT attention: cuBLASLt strided-batched GEMMs keeping P (B*H*T^2), or\n"
           "                  the fused FlashAttention-2-style kernels keeping one log-sum-exp a row (default:\n"
           "                  fused where they run: head dimension 64, fp16, --batch <= 65535; else strided)\n"
           "  --data FILE     GPT: train on the bytes of FILE (e.g. data/persuasion.txt); default: synthetic tokens\n"
           "  --peak-tflops P GPT: the device's peak TFLOP/s, for MFU (default: 989 on H100/H200 SXM, else no MFU)\n",
           prog);
    if (stage == 1) printf("  --grad-sync reducescatter|allreduce  ZeRO-1 gradient sync variant\n");
    if (stage == 3)
        printf("  --prefetch K    visits gathered ahead (a visit: a use of a unit, forward or backward),\n"
               "                  0..min(uses-1, 64) (default min(1, uses-1)); uses a pass: layers (mlp),\n"
               "                  layers + 3 (gpt: embedding, blocks, final LN, tied LM head)\n");
    if (stage >= 2)
        printf("  --offload       ZeRO-Offload: fp32 master, Adam m and v in pinned host memory, Adam on the host\n");
    printf("exit codes: 0 ok | 1 runtime error (CUDA/NCCL/MPI with file:line; a lost output with its path)\n"
           "            | 2 bad input or does not fit (before anything is allocated) | 3 training diverged\n"
           "            | 4 --check mismatch | 5 watchdog; a finished run with several exits with the first of 1, 3, 4\n");
}

uint64_t zl_args_hash(const zl_config *c) {
    uint64_t h = ZL_FNV_OFFSET;
#define H(field) h = zl_fnv1a(h, &c->field, sizeof c->field)
    H(stage), H(layers), H(dim), H(batch), H(steps), H(seed), H(loss_scale), H(lr), H(beta1), H(beta2), H(eps),
        H(weight_decay), H(prefetch), H(grad_sync_allreduce), H(timeout_s), H(no_preflight), H(no_param_hash), H(check),
        H(loss_scale_dynamic), H(loss_scale_window), H(clip_grad_norm), H(dtype), H(n_inject), H(inject_steps),
        H(accum), H(checkpoint_activations), H(keep_activations), H(model), H(seq), H(heads), H(vocab), H(offload),
        H(peak_tflops), H(attention);
#undef H
    h = zl_fnv1a(h, c->json_path, strlen(c->json_path));
    h = zl_fnv1a(h, c->dump_path, strlen(c->dump_path));
    h = zl_fnv1a(h, c->trace_path, strlen(c->trace_path));
    h = zl_fnv1a(h, c->data_path, strlen(c->data_path));
    for (size_t i = 0; i < sizeof env_knobs / sizeof env_knobs[0]; i++) { /* e.g. ZL_NCCL_WINDOWS: */
        const env_knob *k = &env_knobs[i]; /* one rank registering windows alone would hang */
        const char *e = getenv(k->name);
        long v = k->unset; /* what it means (checked above): unset and the default alike */
        char word[32] = "";
        if (e && *e && k->word && !strcmp(e, k->word)) snprintf(word, sizeof word, "%s", k->word);
        else if (e && *e && zl_env_int(k->name, k->lo, k->hi, &v) <= 0) snprintf(word, sizeof word, "%.31s", e);
        h = zl_fnv1a(h, &v, sizeof v);
        h = zl_fnv1a(h, word, strlen(word) + 1);
    }
    return hash_ckpt_flags(h, c);
}
