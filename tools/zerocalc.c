/* zerocalc — the ZeRO memory and traffic calculator.
 *
 * Per-device model-state memory for DDP and ZeRO-1/2/3 and the per-step traffic, for any
 * parameter count, number of ranks and precision layout; the paper's Table 1 and Table 2;
 * and a check of every worked example in the five sources (docs/references.md). No MPI, no
 * GPU: it links only the formula, partition and model-layout modules the stage programs use
 * (common/formulas.c, common/partition.c, model/layout.c), so there is one copy of every formula.
 *
 *   zerocalc --params 7.5e9 --ranks 64 [--stage S] [--precision mixed|fp32|custom] [--json]
 *   zerocalc --layers 8 --dim 4096 --ranks 2          (the project's own MLP, with padding)
 *   zerocalc --layers 8 --dim 4096 --batch 8192 --ranks 2 [--accum K] [--checkpoint-activations |
 *            --keep-activations]
 *            [--prefetch P] [--backend cuda|cpu]   (a run's exact per-rank memory and traffic:
 *                                                   the answer key of a lab)
 *   zerocalc --model gpt --layers 48 --dim 1600 --heads 25 --seq 1024 --vocab 50257 --batch 32 --ranks 4
 *                                                     (the GPT: Ψ, model states, ZeRO-3's exact traffic
 *                                                      with the tied embedding gathered twice, and the
 *                                                      activations per rank with and without checkpointing)
 *   zerocalc --paper-table1
 *   zerocalc --max-model --memory 32e9 --ranks 64 [--mp 1]
 *   zerocalc --max-layers --dim 8192 --batch 1024 --ranks 4 --memory B [--host-memory H [--local-ranks R]]
 *                                                     (the largest MLP a program's preflight lets run: every
 *                                                      buffer, activations included; scripts/gpu-table2.sh)
 *   ... --offload   (stages 2-3, ZeRO-Offload: the optimizer state on the host; device / host split)
 *   zerocalc --check-sources [--data tests/data/source_examples.tsv]
 *
 * Exit 0; 2 and one line for bad input; 1 when the report could not be written to stdout (a
 * full disk: common/stdout_check.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/formulas.h"
#include "common/partition.h"
#include "common/stdout_check.h" /* a report lost on the way to stdout (a full disk) exits 1 */
#include "kernels/workspace.h" /* the kernels' workspace bytes, per backend */
#include "model/gpt.h"   /* zl_gpt_activation_terms: the GPT's activations by component */
#include "model/model.h" /* zl_model_partition: the model's units, padded; activation formulas */

enum { MODE_CALC, MODE_TABLE1, MODE_MAX_MODEL, MODE_MAX_LAYERS, MODE_CHECK_SOURCES };

/* v to 4 significant digits with ties rounded up, for the GB columns (printed with %.4g): the
 * sources round half-up (docs/errata.md), and %.4g alone rounds the binary value half to even,
 * so 201.25 GB — exact in binary — would print as 201.2 beside the Korean post's 201.3. */
static double sig4_half_up(double v) {
    if (!(v > 0) || !isfinite(v)) return v;
    double scale = pow(10, 3 - floor(log10(v)));
    return floor(v * scale + 0.5) / scale;
}

typedef struct {
    int mode;
    double psi;         /* --params */
    int layers, dim;    /* --layers/--dim instead of --params */
    int batch, accum;   /* --batch B [--accum K]: a run's exact memory (with --layers/--dim) */
    int checkpoint;     /* --checkpoint-activations */
    int keep;           /* --keep-activations (the MLP's gelu(h) of every block too) */
    int offload;        /* --offload: stages 2-3 keep master, m, v on the host */
    int prefetch;       /* stage 3's --prefetch; -1: the program's default */
    int backend_cpu;    /* --backend cpu: the CPU kernels' workspace (default cuda) */
    int gpt, heads, seq, vocab; /* --model gpt: the transformer's shape (model/gpt.h); B = --batch */
    zl_attention attention; /* --attention; by shape as the programs (fp16): fused at head dim 64, B <= 65535 */
    double ranks;       /* N */
    int stage;          /* -1: all four */
    zl_precision prec;
    char prec_name[16];
    int custom_given;   /* bit 1: --param-bytes, 2: --grad-bytes, 4: --k */
    double memory, mp;  /* --max-model, --max-layers (device bytes free per rank) */
    double host_memory; /* --max-layers: host bytes available on the node (MemAvailable); 0: not checked */
    int local_ranks;    /* --max-layers: ranks sharing that host memory (default N) */
    const char *data;   /* --check-sources */
    int json;
} opts;

static zl_model_shape shape_of(const opts *o) {
    if (o->gpt)
        return (zl_model_shape){.kind = ZL_MODEL_GPT, .layers = o->layers, .dim = o->dim, .rows = o->batch,
                                .micro_batches = o->accum, .seq = o->seq, .heads = o->heads, .vocab = o->vocab,
                                .flash_attention = o->attention == ZL_ATTENTION_FUSED};
    return (zl_model_shape){.kind = ZL_MODEL_MLP, .layers = o->layers, .dim = o->dim, .rows = 1};
}

static const char *const stage_names[4] = {"DDP (stage 0)", "ZeRO-1 P_os", "ZeRO-2 P_os+g", "ZeRO-3 P_os+g+p"};

static void usage(void) {
    printf("usage: zerocalc --params PSI | --layers L --dim D   [--ranks N] [--stage 0-3] [--json]\n"
           "       zerocalc --layers L --dim D --batch B [--accum K] [--checkpoint-activations | --keep-activations]\n"
           "                [--prefetch P]\n"
           "                [--backend cuda|cpu (default cuda: its kernels' workspace)] --ranks N [--stage 0-3] [--json]\n"
           "                (a run's exact bytes per rank)\n"
           "       zerocalc --model gpt --layers L --dim D --heads H --seq T [--vocab V] [--batch B] [--accum K]\n"
           "                [--attention strided|fused]   (default as the programs': fused at hd 64, B <= 65535)\n"
           "                --ranks N [--stage 0-3] [--json]   (the GPT: B sequences per rank per micro-batch)\n"
           "                [--precision mixed|fp32|custom [--param-bytes P --grad-bytes G --k K]]\n"
           "       zerocalc --paper-table1\n"
           "       zerocalc --max-model --memory BYTES --ranks N [--mp K] [--precision ...]\n"
           "       zerocalc --max-layers --dim D --batch B --ranks N --memory BYTES [--host-memory BYTES\n"
           "                [--local-ranks R]] [--accum K] [--checkpoint-activations | --keep-activations]\n"
           "                [--prefetch P] [--backend cuda|cpu] [--stage 0-3] [--offload] [--json]\n"
           "                (the largest L whose every buffer fits: BYTES free per device, as the\n"
           "                 programs' preflight sees it; host BYTES shared by R ranks)\n"
           "       zerocalc --check-sources [--data tests/data/source_examples.tsv]\n"
           "       --offload with any of the above but --paper-table1: stages 2-3 with the optimizer state\n"
           "                (K Psi/N) on the host (ZeRO-Offload): device and host bytes apart\n"
           "Model states per device: P·Psi (/N from stage 3) + G·Psi (/N from stage 2) + K·Psi (/N from stage 1);\n"
           "mixed = the paper's fp16/fp32 Adam (P=2, G=2, K=12),\n"
           "fp32 = the PyTorch from-scratch post's (P=4, G=4, K=8).\n");
}

/* One line, exit 2: the calculator's answer to bad input. */
static void bad(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("zerocalc: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static double number(const char *flag, const char *s, double lo, double hi, int integral) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isspace((unsigned char)*s) || !isfinite(v) || v < lo || v > hi ||
        (integral && v != floor(v)))
        bad("%s: expected %s in [%g, %g], got '%s'", flag, integral ? "a whole number" : "a number", lo, hi, s);
    return v;
}

static void parse(opts *o, int argc, char **argv) {
    *o = (opts){.mode = MODE_CALC, .ranks = 1, .stage = -1, .prec = ZL_PRECISION_MIXED, .mp = 1, .accum = 1,
                .prefetch = -1,
                .data = "tests/data/source_examples.tsv"};
    strcpy(o->prec_name, "mixed");
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) usage(), exit(zl_stdout_check("zerocalc", 0));
        if (!strcmp(f, "--json")) { o->json = 1; continue; }
        if (!strcmp(f, "--paper-table1")) { o->mode = MODE_TABLE1; continue; }
        if (!strcmp(f, "--max-model")) { o->mode = MODE_MAX_MODEL; continue; }
        if (!strcmp(f, "--max-layers")) { o->mode = MODE_MAX_LAYERS; continue; }
        if (!strcmp(f, "--check-sources")) { o->mode = MODE_CHECK_SOURCES; continue; }
        if (!strcmp(f, "--checkpoint-activations")) { o->checkpoint = 1; continue; }
        if (!strcmp(f, "--keep-activations")) { o->keep = 1; continue; }
        if (!strcmp(f, "--offload")) { o->offload = 1; continue; }
        static const char *const valued[] = {"--params", "--layers", "--dim", "--ranks", "--stage", "--precision",
                                             "--param-bytes", "--grad-bytes", "--k", "--memory", "--mp", "--data",
                                             "--batch", "--accum", "--prefetch", "--backend", "--model", "--heads",
                                             "--seq", "--vocab", "--host-memory", "--local-ranks", "--attention"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(f, valued[k]);
        if (!known) bad("unknown flag '%s' (see --help)", f);
        if (i + 1 >= argc) bad("%s: missing value", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--params")) o->psi = number(f, v, 1, 1e18, 1);
        else if (!strcmp(f, "--layers")) o->layers = (int)number(f, v, 1, 1000000, 1);
        else if (!strcmp(f, "--dim")) o->dim = (int)number(f, v, 1, 1 << 24, 1);
        else if (!strcmp(f, "--ranks")) o->ranks = number(f, v, 1, 1e9, 1);
        else if (!strcmp(f, "--stage")) o->stage = (int)number(f, v, 0, 3, 1);
        else if (!strcmp(f, "--memory")) o->memory = number(f, v, 1, 1e18, 0);
        else if (!strcmp(f, "--mp")) o->mp = number(f, v, 1, 1e6, 1);
        else if (!strcmp(f, "--host-memory")) o->host_memory = number(f, v, 1, 1e18, 0);
        else if (!strcmp(f, "--local-ranks")) o->local_ranks = (int)number(f, v, 1, 1e6, 1);
        else if (!strcmp(f, "--data")) o->data = v;
        else if (!strcmp(f, "--batch")) o->batch = (int)number(f, v, 1, 1 << 20, 1);
        else if (!strcmp(f, "--accum")) o->accum = (int)number(f, v, 1, 1024, 1);
        else if (!strcmp(f, "--prefetch")) o->prefetch = (int)number(f, v, 0, 64, 1);
        else if (!strcmp(f, "--backend")) {
            if (strcmp(v, "cuda") && strcmp(v, "cpu")) bad("--backend: expected cuda or cpu, got '%s'", v);
            o->backend_cpu = !strcmp(v, "cpu");
        }
        else if (!strcmp(f, "--model")) {
            if (strcmp(v, "gpt") && strcmp(v, "mlp")) bad("--model: expected mlp or gpt, got '%s'", v);
            o->gpt = !strcmp(v, "gpt");
        } else if (!strcmp(f, "--heads")) o->heads = (int)number(f, v, 1, 1 << 12, 1);
        else if (!strcmp(f, "--seq")) o->seq = (int)number(f, v, 1, 1 << 16, 1);
        else if (!strcmp(f, "--vocab")) o->vocab = (int)number(f, v, 2, 1 << 20, 1);
        else if (!strcmp(f, "--attention")) {
            if (strcmp(v, "strided") && strcmp(v, "fused")) bad("--attention: expected strided or fused, got '%s'", v);
            o->attention = !strcmp(v, "fused") ? ZL_ATTENTION_FUSED : ZL_ATTENTION_STRIDED;
        }
        else if (!strcmp(f, "--param-bytes")) o->prec.param_bytes = number(f, v, 0, 64, 0), o->custom_given |= 1;
        else if (!strcmp(f, "--grad-bytes")) o->prec.grad_bytes = number(f, v, 0, 64, 0), o->custom_given |= 2;
        else if (!strcmp(f, "--k")) o->prec.k = number(f, v, 0, 64, 0), o->custom_given |= 4;
        else if (!strcmp(f, "--precision")) {
            if (strcmp(v, "mixed") && strcmp(v, "fp32") && strcmp(v, "custom"))
                bad("--precision: expected mixed, fp32 or custom, got '%s'", v);
            snprintf(o->prec_name, sizeof o->prec_name, "%s", v);
        }
    }
    int custom = !strcmp(o->prec_name, "custom");
    if (o->custom_given && !custom) bad("--param-bytes/--grad-bytes/--k: only with --precision custom");
    if (custom && o->custom_given != 7) bad("--precision custom: needs --param-bytes, --grad-bytes and --k");
    if (!strcmp(o->prec_name, "fp32")) o->prec = ZL_PRECISION_FP32;
    if (o->mode == MODE_CALC) {
        int by_shape = o->layers || o->dim;
        if (by_shape && o->psi) bad("--params: give either --params or --layers/--dim, not both");
        if (by_shape && !(o->layers && o->dim)) bad("--layers/--dim: give both");
        if (!by_shape && !o->psi) bad("--params: required (or --layers and --dim); see --help");
        if (o->gpt && !(by_shape && o->heads && o->seq)) bad("--model gpt: needs --layers, --dim, --heads and --seq");
        if (o->gpt && o->dim % o->heads) bad("--heads: must divide --dim");
        if (!o->gpt && (o->heads || o->seq || o->vocab || o->attention))
            bad("--heads/--seq/--vocab/--attention: only with --model gpt");
        int fused_runs = o->gpt && zl_gpt_flash_supported(o->dim, o->heads, 0); /* the programs' rule, at fp16 */
        if (o->gpt && o->attention == ZL_ATTENTION_FUSED && !fused_runs)
            bad("--attention fused: needs head dimension 64 (--dim / --heads)");
        if (o->gpt && o->attention == ZL_ATTENTION_FUSED && o->batch > ZL_GPT_FLASH_MAX_BATCH)
            bad("--attention fused: --batch at most %d (got %d)", ZL_GPT_FLASH_MAX_BATCH, o->batch);
        if (o->gpt && o->attention == ZL_ATTENTION_BY_SHAPE)
            o->attention = zl_gpt_flash_by_shape(o->dim, o->heads, 0, o->batch) ? ZL_ATTENTION_FUSED
                                                                                 : ZL_ATTENTION_STRIDED;
        if (o->gpt && (o->prefetch >= 0 || o->backend_cpu)) bad("--prefetch/--backend: the MLP's run table only");
        if (o->gpt && !o->vocab) o->vocab = 256;
        if (o->gpt && !o->batch) o->batch = 1;
        if (o->gpt) o->psi = (double)zl_model_unit_offset(shape_of(o), zl_model_n_units(shape_of(o)));
        else if (by_shape) o->psi = (double)o->layers * (8.0 * o->dim * o->dim + 5.0 * o->dim);
    }
    int run_flags = o->accum > 1 || o->checkpoint || o->keep || o->prefetch >= 0 || o->backend_cpu;
    if (o->keep && o->checkpoint) bad("--keep-activations and --checkpoint-activations: drop one");
    if (o->keep && o->gpt) bad("--keep-activations: the MLP's (the GPT keeps every activation already)");
    if (o->mode == MODE_MAX_LAYERS) {
        if (!o->dim || !o->batch || !o->memory) bad("--max-layers: needs --dim, --batch and --memory (bytes per device)");
        if (o->layers || o->psi) bad("--max-layers: finds --layers; give --dim, not --layers or --params");
        if (o->gpt || o->heads || o->seq || o->vocab) bad("--max-layers: the MLP only");
        if (o->mp > 1) bad("--mp: only with --max-model");
        if (o->ranks > 1e6) bad("--ranks: at most 1e6 with --max-layers");
        if (!o->local_ranks) o->local_ranks = (int)o->ranks; /* one node */
    } else if (o->host_memory || o->local_ranks) bad("--host-memory/--local-ranks: only with --max-layers");
    if ((o->batch || run_flags) && !(o->mode == MODE_MAX_LAYERS || (o->mode == MODE_CALC && o->layers && o->batch)))
        bad("--batch/--accum/--checkpoint-activations/--keep-activations/--prefetch/--backend: a run's bytes need "
            "--layers, --dim and --batch");
    if (o->batch && strcmp(o->prec_name, "mixed")) bad("--batch: the programs train in mixed precision only");
    if (o->mode != MODE_MAX_LAYERS && o->prefetch > o->layers - 1 && o->prefetch > 0)
        bad("--prefetch: expected an integer in [0, %d] (layers - 1), got %d", o->layers - 1, o->prefetch);
    if (o->mode == MODE_MAX_MODEL && !o->memory) bad("--memory: required with --max-model (bytes per device)");
    if (o->json && (o->mode == MODE_TABLE1 || o->mode == MODE_CHECK_SOURCES || o->mode == MODE_MAX_MODEL))
        bad("--json: with --params, --layers/--dim or --max-layers (%s prints a table only)", /* it was ignored */
            o->mode == MODE_TABLE1 ? "--paper-table1" : o->mode == MODE_MAX_MODEL ? "--max-model" : "--check-sources");
    if (o->offload && (o->stage == 0 || o->stage == 1 || o->mode == MODE_TABLE1 || o->mode == MODE_CHECK_SOURCES))
        bad("--offload: stages 2 and 3 only (with --params, --layers/--dim, --max-model or --max-layers)");
}

/* Stages --offload applies to: 2 and 3 (ZeRO-Offload shards the state it moves). */
static int offloads(const opts *o, int stage) { return o->offload && stage >= 2; }

/* ---- plain calculator -------------------------------------------------------------- */

/* The activations of one rank (B sequences), component by component, with and without
 * activation checkpointing (model/gpt_layout.c). */
static void gpt_activations(const opts *o) {
    zl_model_shape s = shape_of(o);
    zl_gpt_dims d = zl_model_gpt_dims(s);
    for (int ck = 0; ck <= 1; ck++) {
        zl_gpt_term t[ZL_GPT_MAX_TERMS];
        int n = zl_gpt_activation_terms(d, o->layers, ck, t);
        double sum = 0;
        if (o->json) printf("%s\"activations%s\": {", ck ? ", " : " ", ck ? "_checkpointed" : "");
        else printf("\nactivations per rank, B = %d sequences of T = %d%s:\n", o->batch, o->seq,
                    ck ? ", with activation checkpointing" : " (saved for backward, 16-bit; stats fp32)");
        for (int i = 0; i < n; i++) {
            sum += t[i].bytes;
            if (o->json) printf("\"%s\": %.17g, ", t[i].name, t[i].bytes);
            else printf("  %-56s %18.0f B %10.3f GB\n", t[i].name, t[i].bytes, t[i].bytes / 1e9);
        }
        if (o->json) printf("\"total\": %.17g}", sum);
        else printf("  %-56s %18.0f B %10.3f GB\n", "= total", sum, sum / 1e9);
    }
}

static void calc(const opts *o) {
    zl_partition part = {0};
    int padded = o->layers && !strcmp(o->prec_name, "mixed") && o->ranks <= 1e6;
    zl_model_shape shape = shape_of(o);
    if (padded && zl_model_partition(&part, shape, (int)o->ranks))
        bad("--layers/--dim: the model's byte counts overflow");
    int s0 = o->stage < 0 ? 0 : o->stage, s1 = o->stage < 0 ? 3 : o->stage;
    if (o->json) {
        printf("{\"params\": %.17g, \"ranks\": %.17g, ", o->psi, o->ranks);
        if (padded) printf("\"params_padded\": %zu, \"params_full\": %zu, ", part.psi_pad, part.full_len);
        printf("\"precision\": {\"name\": \"%s\", \"param_bytes\": %.17g, \"grad_bytes\": %.17g, \"k\": %.17g},\n"
               " \"stages\": [",
               o->prec_name, o->prec.param_bytes, o->prec.grad_bytes, o->prec.k);
    } else {
        printf("Psi = %.0f parameters, N = %.0f ranks, precision %s (P = %g, G = %g, K = %g bytes per parameter)\n",
               o->psi, o->ranks, o->prec_name, o->prec.param_bytes, o->prec.grad_bytes, o->prec.k);
        if (padded) printf("this %s pads each of its %d units to a multiple of N: Psi_pad = %zu; full buffers, units "
                           "on 16-byte lines: Psi_full = %zu\n",
                           o->gpt ? "GPT" : "MLP", part.n_units, part.psi_pad, part.full_len);
        if (o->gpt)
            printf("GPT: L = %d, D = %d, H = %d, T = %d, V = %d padded to %d; largest unit (the embedding) %zu; "
                   "K = %d micro-batches per step; attention %s\n",
                   o->layers, o->dim, o->heads, o->seq, o->vocab, zl_gpt_padded_vocab(o->vocab), part.max_unit,
                   o->accum, o->attention == ZL_ATTENTION_FUSED ? "fused (lse kept)" : "strided (P kept)");
        printf("%-16s | %16s | %16s | %16s | %18s | %10s | %18s\n", "stage", "params B/rank", "grads B/rank",
               "optimizer B/rank", "model states B/rank", "GB (1e9)", "wire B/step/rank");
    }
    for (int s = s0; s <= s1; s++) {
        double parts[3], total = zl_state_bytes(o->psi, o->ranks, s, o->prec, parts);
        double volume = zl_comm_volume_bytes(o->psi, s, o->prec), wire = zl_wire_bytes_step(o->psi, o->ranks, s, o->prec);
        size_t exact = 0;
        double exact_wire = 0;
        if (padded) {
            zl_formula_config fc = {.stage = s, .model = shape};
            zl_mem_formula mf;
            zl_formula_memory(&part, &fc, &mf);
            exact = mf.model_states;
            zl_comm_formula cf;
            zl_formula_comm(&part, &fc, &cf); /* per use: a tied unit gathered twice in ZeRO-3 */
            exact_wire = cf.total;
        }
        if (o->json) {
            printf("%s\n  {\"stage\": %d, \"bytes_per_rank\": %.17g, \"params_bytes\": %.17g, \"grads_bytes\": %.17g, "
                   "\"optimizer_bytes\": %.17g, \"comm_volume_bytes\": %.17g, \"wire_bytes_per_step\": %.17g",
                   s > s0 ? "," : "", s, total, parts[0], parts[1], parts[2], volume, wire);
            if (padded) printf(", \"bytes_per_rank_padded\": %zu", exact);
            if (padded) printf(", \"wire_bytes_per_step_exact\": %.17g", exact_wire);
            if (offloads(o, s)) {
                double host, dev = zl_offload_state_bytes(o->psi, o->ranks, s, o->prec, &host);
                printf(", \"offload\": {\"device_bytes_per_rank\": %.17g, \"host_bytes_per_rank\": %.17g}", dev, host);
            }
            printf("}");
        } else {
            printf("%-16s | %16.0f | %16.0f | %16.0f | %18.0f | %10.4g | %18.0f\n", stage_names[s], parts[0], parts[1],
                   parts[2], total, sig4_half_up(total / 1e9), wire);
            if (padded)
                printf("%-16s | %16s | %16s | %16s | %18zu | %10s | %18.0f\n", "  this program", "", "", "", exact, "",
                       exact_wire);
            if (offloads(o, s)) {
                double host, dev = zl_offload_state_bytes(o->psi, o->ranks, s, o->prec, &host);
                printf("%-16s | %16.0f | %16.0f | %16s | %18.0f | %10.4g | device (host: %.0f B = %.4g GB)\n",
                       "  --offload", parts[0], parts[1], "on the host", dev, sig4_half_up(dev / 1e9), host,
                       sig4_half_up(host / 1e9));
            }
        }
    }
    if (o->json) printf("\n]");
    else
        printf("wire bytes: ring convention, (N-1)/N of the paper's volume (2 Psi for stages 0-2, 3 Psi for stage 3);\n"
               "this program's: per padded unit, ZeRO-3 gathering once per use\n");
    if (o->gpt) {
        if (o->json) printf(",\n");
        gpt_activations(o);
    }
    if (o->json) printf("}\n");
    if (padded) zl_partition_free(&part);
}

/* ---- a run's exact bytes: what a stage program will measure ---------------------------
 * The same formula module the programs check themselves against (common/formulas.c with
 * the model's layout), so every number here is what --check compares to the byte. */

static const char *const run_columns[] = {"model states", "grad buckets", "param gather", "activations",
                                          "scratch", "workspace", "peak total", "wire B/step",
                                          "host states", "host staging", "PCIe B/step"}; /* the last 3: --offload */
enum { RUN_COLUMNS = 8, RUN_COLUMNS_OFFLOAD = 11 };

/* The configuration a stage program builds for its preflight and report, for L layers. */
static zl_formula_config run_config(const opts *o, int stage, int layers) {
    zl_model_shape shape = {.kind = ZL_MODEL_MLP, .layers = layers, .dim = o->dim, .rows = o->batch,
                            .micro_batches = o->accum, .checkpoint = o->checkpoint, .keep = o->keep};
    int prefetch = o->prefetch >= 0 ? o->prefetch : layers > 1 ? 1 : 0; /* the program's default */
    return (zl_formula_config){.stage = stage, .model = shape, .prefetch = stage == 3 ? prefetch : 0,
                               .offload = offloads(o, stage),
                               .workspace_bytes = o->backend_cpu ? zl_workspace_bytes_cpu(o->batch, o->dim)
                                                                 : zl_workspace_bytes_cuda(o->batch, o->dim)};
}

static void run_numbers(const opts *o, const zl_partition *part, int stage, double out[RUN_COLUMNS_OFFLOAD]) {
    zl_formula_config fc = run_config(o, stage, o->layers);
    zl_mem_formula mf;
    zl_comm_formula cf;
    zl_formula_memory(part, &fc, &mf);
    zl_formula_comm(part, &fc, &cf);
    double v[RUN_COLUMNS_OFFLOAD] = {
        (double)mf.model_states, (double)mf.bytes[ZL_MEM_GRAD_BUCKET], (double)mf.bytes[ZL_MEM_PARAM_GATHER],
        (double)mf.bytes[ZL_MEM_ACTIVATIONS], (double)mf.bytes[ZL_MEM_SCRATCH], (double)mf.bytes[ZL_MEM_WORKSPACE],
        (double)mf.peak_total, cf.total, (double)mf.host_states, (double)mf.bytes[ZL_MEM_OFFLOAD_STAGING],
        cf.transfer_total};
    memcpy(out, v, sizeof v);
}

static void calc_run(const opts *o) {
    zl_partition part = {0};
    zl_model_shape shape = {.kind = ZL_MODEL_MLP, .layers = o->layers, .dim = o->dim, .rows = o->batch};
    if (o->ranks > 1e6 || zl_model_partition(&part, shape, (int)o->ranks))
        bad("--layers/--dim/--ranks: the model's byte counts overflow");
    int s0 = o->stage < 0 ? 0 : o->stage, s1 = o->stage < 0 ? 3 : o->stage;
    int n = o->offload ? RUN_COLUMNS_OFFLOAD : RUN_COLUMNS;
    if (o->json) {
        printf("{\"params\": %zu, \"params_padded\": %zu, \"params_full\": %zu, \"ranks\": %.0f, \"layers\": %d, "
               "\"dim\": %d, \"batch\": %d, \"accum\": %d, \"checkpoint_activations\": %s, \"keep_activations\": %s, "
               "\"backend\": \"%s\",\n \"stages\": [",
               part.psi, part.psi_pad, part.full_len, o->ranks, o->layers, o->dim, o->batch, o->accum,
               o->checkpoint ? "true" : "false", o->keep ? "true" : "false", o->backend_cpu ? "cpu" : "cuda");
    } else {
        printf("L = %d, D = %d: Psi = %zu, Psi_pad = %zu, Psi_full = %zu over N = %.0f ranks; B = %d rows x K = %d "
               "micro-batches per rank per step; activations %s; %s kernels\nbytes per rank:\n%-16s",
               o->layers, o->dim, part.psi, part.psi_pad, part.full_len, o->ranks, o->batch, o->accum,
               o->checkpoint ? "checkpointed" : o->keep ? "kept" : "default", o->backend_cpu ? "CPU" : "CUDA", "stage");
        for (int c = 0; c < n; c++) printf(" | %15s", run_columns[c]);
        printf("\n");
    }
    for (int s = s0; s <= s1; s++) {
        double v[RUN_COLUMNS_OFFLOAD];
        run_numbers(o, &part, s, v);
        if (o->json) {
            static const char *const keys[] = {"model_states", "grad_bucket", "param_gather", "activations",
                                               "scratch", "workspace", "peak_total", "wire_bytes_per_step",
                                               "host_states", "offload_staging", "transfer_bytes_per_step"};
            printf("%s\n  {\"stage\": %d", s > s0 ? "," : "", s);
            for (int c = 0; c < n; c++) printf(", \"%s\": %.17g", keys[c], v[c]);
            printf("}");
        } else {
            printf("%-16s", stage_names[s]);
            for (int c = 0; c < n; c++) printf(" | %15.0f", v[c]);
            printf("\n");
        }
    }
    if (o->json) printf("\n]}\n");
    else
        printf("peak total = every device buffer (all allocated before step 1); host staging for param_hash "
               "(2 x the largest unit) is apart.\nwire B/step: gradients and parameters, K micro-batches "
               "(DDP, ZeRO-1: 2(N-1)/N 2Psi_pad; ZeRO-2: (K+1)(N-1)/N 2Psi_pad; ZeRO-3: 3K(N-1)/N 2Psi_pad)\n");
    if (o->offload && !o->json)
        printf("--offload (stages 2-3): model states = the device's; host states 12Psi_pad/N and host staging "
               "2Psi_pad/N are pinned host memory;\nPCIe B/step: 2Psi_pad/N d2h + 2Psi_pad/N h2d (a skipped step "
               "copies no parameters back)\n");
    zl_partition_free(&part);
}

/* ---- the paper's tables ------------------------------------------------------------- */

static void table1(void) {
    static const double models[3] = {7.5e9, 128e9, 1e12};
    static const int nd[6] = {1, 4, 16, 64, 256, 1024};
    printf("Table 1: per-device model-state memory (GB = 1e9 bytes), mixed precision, K = 12,\n"
           "printed in the paper's digits (from 100 up the paper truncates: see the notes below)\n\n");
    printf("%-5s | %-22s | %-22s | %-22s\n", "DP", "7.5B Model (GB)", "128B Model (GB)", "1T Model (GB)");
    printf("%-5s |", "");
    for (int m = 0; m < 3; m++) printf(" %6s %7s %7s |", "P_os", "P_os+g", "+p");
    printf("\n");
    char notes[2048] = "";
    for (int i = 0; i < 6; i++) {
        printf("%-5d |", nd[i]);
        for (int m = 0; m < 3; m++) {
            for (int s = 1; s <= 3; s++) {
                double gb = zl_state_bytes(models[m], nd[i], s, ZL_PRECISION_MIXED, NULL) / 1e9;
                char cell[32];
                zl_paper_digits(gb, cell, sizeof cell);
                printf(" %*s", s == 1 ? 6 : 7, cell);
                if (gb >= 100 && floor(gb + 0.5) != floor(gb)) {
                    char note[160];
                    snprintf(note, sizeof note, "  %s, N_d = %d, stage %d: exactly %.6g, printed %s (rounded: %.0f)\n",
                             m == 0 ? "7.5B" : m == 1 ? "128B" : "1T", nd[i], s, gb, cell, floor(gb + 0.5));
                    strncat(notes, note, sizeof notes - strlen(notes) - 1);
                }
            }
            printf(" |");
        }
        printf("\n");
    }
    printf("\nCells the paper truncates rather than rounds:\n%s", notes);
}

/* "7.6B", "1T", "0.5T": the way Table 2 prints model sizes. */
static void size_digits(double psi, char *buf, size_t n) {
    if (psi >= 5e11) snprintf(buf, n, "%gT", floor(psi / 1e12 * 10 + 0.5) / 10);
    else snprintf(buf, n, "%gB", floor(psi / 1e9 * 10 + 0.5) / 10);
}

static void max_model(const opts *o) {
    double mem = o->memory * o->mp; /* model parallelism of degree mp splits the model over mp more devices */
    printf("largest model whose model states fit %.4g bytes per device, N_d = %.0f data-parallel ranks",
           o->memory, o->ranks);
    if (o->mp > 1) printf(", model parallelism %.0f (%.0f GPUs)", o->mp, o->mp * o->ranks);
    printf(", precision %s\n", o->prec_name);
    printf("%-16s | %22s | %8s\n", "stage", "max Psi", "paper-style");
    for (int s = 0; s <= 3; s++) {
        if (o->stage >= 0 && s != o->stage) continue;
        double psi = zl_max_params(mem, o->ranks, s, o->prec);
        char c[32];
        size_digits(psi, c, sizeof c);
        printf("%-16s | %22.0f | %8s\n", stage_names[s], floor(psi), c);
        if (!offloads(o, s)) continue;
        double host, psi_off = floor(zl_max_params_offload(mem, o->ranks, s, o->prec));
        zl_offload_state_bytes(psi_off, o->ranks, s, o->prec, &host);
        size_digits(psi_off, c, sizeof c);
        printf("%-16s | %22.0f | %8s | host needs %.4g GB per rank for it\n", "  --offload", psi_off, c,
               sig4_half_up(host / 1e9));
    }
}

/* ---- the largest model a program runs: the preflight's answer, searched over L --------- */

typedef struct {
    int layers; /* 0: not even one layer fits */
    zl_need need;
    size_t psi, psi_pad;
} layer_fit;

/* The need at L layers, as the program's preflight computes it (zl_formula_need); *ok = 0 if
 * the model's byte counts overflow or stage 3's --prefetch needs more layers. */
static layer_fit need_at_layers(const opts *o, int stage, int layers, int *ok) {
    layer_fit f = {.layers = layers};
    zl_partition part = {0};
    zl_formula_config fc = run_config(o, stage, layers);
    *ok = !(stage == 3 && fc.prefetch > layers - 1) &&
          zl_model_partition(&part, fc.model, (int)o->ranks) == 0;
    if (!*ok) return f;
    /* on_gpu = 1: --memory is the device's, the host's apart (the CPU backend's pretend device too) */
    f.need = zl_formula_need(&part, &fc, 1);
    f.psi = part.psi, f.psi_pad = part.psi_pad;
    zl_partition_free(&part);
    return f;
}

static int layers_fit(const opts *o, int stage, int layers, layer_fit *f) {
    int ok;
    *f = need_at_layers(o, stage, layers, &ok);
    return ok && zl_need_fits(f->need, o->local_ranks, (size_t)o->memory, (size_t)o->host_memory);
}

/* Largest L that fits (the need grows with L): doubling, then bisection. *next gets L + 1's. */
static layer_fit max_layers_of(const opts *o, int stage, layer_fit *next) {
    layer_fit lo_f = {0}, f;
    int lo = 0, hi = 1;
    while (layers_fit(o, stage, hi, &f)) {
        lo = hi, lo_f = f;
        if (hi >= 1000000) break;
        hi = hi * 2 > 1000000 ? 1000000 : hi * 2;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (layers_fit(o, stage, mid, &f)) lo = mid, lo_f = f;
        else hi = mid;
    }
    int ok;
    *next = need_at_layers(o, stage, lo + 1, &ok);
    return lo_f;
}

/* What stops L + 1: the device, the host (shared by the node's ranks), or neither (overflow). */
static const char *bound_of(const opts *o, const layer_fit *next) {
    if (next->need.device > o->memory) return "device";
    if (o->host_memory && next->need.host * o->local_ranks > o->host_memory) return "host";
    return "size";
}

static void max_layers(const opts *o) {
    int s0 = o->stage < 0 ? 0 : o->stage, s1 = o->stage < 0 ? 3 : o->stage;
    if (o->json)
        printf("{\"dim\": %d, \"batch\": %d, \"accum\": %d, \"ranks\": %.0f, \"memory\": %.17g, "
               "\"host_memory\": %.17g, \"local_ranks\": %d, \"backend\": \"%s\",\n \"stages\": [",
               o->dim, o->batch, o->accum, o->ranks, o->memory, o->host_memory, o->local_ranks,
               o->backend_cpu ? "cpu" : "cuda");
    else
        printf("largest L at D = %d, B = %d rows x K = %d per rank, N = %.0f: every buffer the program allocates "
               "(model states, activations, buffers)\nwithin %.0f device bytes free per rank%s", o->dim, o->batch,
               o->accum, o->ranks, o->memory, o->host_memory ? "" : " (host not checked)\n");
    if (!o->json && o->host_memory)
        printf(" and %.0f host bytes shared by %d rank(s)\n", o->host_memory, o->local_ranks);
    if (!o->json)
        printf("%-16s | %8s | %7s | %14s | %14s | %14s | %14s | %s\n", "stage", "offload", "max L", "Psi",
               "device need B", "host need B", "L+1 device B", "L+1 bound");
    for (int s = s0; s <= s1; s++) {
        layer_fit next, f = max_layers_of(o, s, &next);
        const char *bound = bound_of(o, &next);
        if (o->json)
            printf("%s\n  {\"stage\": %d, \"offload\": %s, \"max_layers\": %d, \"params\": %zu, "
                   "\"params_padded\": %zu, \"need_device\": %.17g, \"need_host\": %.17g, "
                   "\"next_params\": %zu, \"next_need_device\": %.17g, \"next_need_host\": %.17g, "
                   "\"next_bound\": \"%s\"}",
                   s > s0 ? "," : "", s, offloads(o, s) ? "true" : "false", f.layers, f.psi, f.psi_pad, f.need.device,
                   f.need.host, next.psi, next.need.device, next.need.host, bound);
        else
            printf("%-16s | %8s | %7d | %14zu | %14.0f | %14.0f | %14.0f | %s\n", stage_names[s],
                   offloads(o, s) ? "yes" : "no", f.layers, f.psi, f.need.device, f.need.host, next.need.device,
                   bound);
    }
    if (o->json) printf("\n]}\n");
    else
        printf("host need is per rank (x %d ranks against the host bytes); the programs' preflight asks the same "
               "question (common/preflight.c)\n", o->local_ranks);
}

/* ---- the sources' worked examples --------------------------------------------------- */

static double unit_bytes(const char *unit) {
    if (!strcmp(unit, "GB")) return 1e9;
    if (!strcmp(unit, "GiB")) return 1073741824.0;
    if (!strcmp(unit, "TB")) return 1e12;
    if (!strcmp(unit, "MB")) return 1e6;
    return 1; /* B, params, x */
}

static int parse_precision(const char *s, zl_precision *p) {
    if (!strcmp(s, "mixed")) { *p = ZL_PRECISION_MIXED; return 0; }
    if (!strcmp(s, "fp32")) { *p = ZL_PRECISION_FP32; return 0; }
    return sscanf(s, "custom:%lf,%lf,%lf", &p->param_bytes, &p->grad_bytes, &p->k) == 3 ? 0 : -1;
}

/* Per-step volume, with the ZeRO-1 all-reduce variant (the PyTorch from-scratch post) on request. */
static double volume(double psi, int stage, zl_precision p, int variant_ar) {
    if (variant_ar && stage == 1) return 2 * psi * p.grad_bytes + psi * p.param_bytes;
    return zl_comm_volume_bytes(psi, stage, p);
}

/* One term of a ratio expression: states(S), comm(S) or comm(1ar). */
static double term(const char *t, double n, zl_precision p, int *ok) {
    int s;
    if (sscanf(t, "states(%d)", &s) == 1) return zl_state_bytes(1, n, s, p, NULL);
    if (!strncmp(t, "comm(1ar)", 9)) return volume(1, 1, p, 1);
    if (sscanf(t, "comm(%d)", &s) == 1) return volume(1, s, p, 0);
    *ok = 0;
    return NAN;
}

/* "A/B", "1 - A/B" or "A/B - 1" from the note's "expr: ...;" — the sources' ratio claims. */
static double ratio(const char *note, double n, zl_precision p) {
    const char *e = strstr(note, "expr:");
    if (!e) return NAN;
    char expr[128];
    snprintf(expr, sizeof expr, "%s", e + 5);
    expr[strcspn(expr, ";")] = '\0';
    int one_minus = 0, minus_one = 0, ok = 1;
    char *x = expr;
    while (*x == ' ') x++;
    if (!strncmp(x, "1 - ", 4)) one_minus = 1, x += 4;
    char *tail = strstr(x, " - 1");
    if (tail) minus_one = 1, *tail = '\0';
    char *slash = strchr(x, '/');
    if (!slash) return NAN;
    *slash = '\0';
    double v = term(x, n, p, &ok) / term(slash + 1, n, p, &ok);
    if (!ok) return NAN;
    return one_minus ? 1 - v : minus_one ? v - 1 : v;
}

/* The value a row's own formula gives, in the row's unit; NAN if the row cannot be read. */
static double row_value(const char *kind, double psi, double n, int stage, zl_precision p, const char *unit,
                         const char *note) {
    double parts[3], total = zl_state_bytes(psi, n, stage, p, parts), u = unit_bytes(unit);
    int ar = strstr(note, "[variant:ar]") != NULL;
    double ring = isinf(n) ? 1 : (n - 1) / n;
    if (!strcmp(kind, "states")) return total / u;
    if (!strcmp(kind, "params")) return parts[0] / u;
    if (!strcmp(kind, "grads")) return parts[1] / u;
    if (!strcmp(kind, "optim")) return parts[2] / u;
    if (!strcmp(kind, "comm_volume")) return volume(psi, stage, p, ar) / u;
    if (!strcmp(kind, "comm_ring")) return ring * volume(psi, stage, p, ar) / u;
    if (!strcmp(kind, "max_params")) return zl_max_params(psi, n, stage, p) / u;
    if (!strcmp(kind, "ratio")) return ratio(note, n, p) * (!strcmp(unit, "%") ? 100 : 1);
    return NAN;
}

/* Decimals printed in s (of the mantissa for e-notation), and its power-of-ten exponent. */
static int printed_decimals(const char *s, int *exponent) {
    const char *dot = strchr(s, '.'), *e = strpbrk(s, "eE");
    *exponent = e ? atoi(e + 1) : 0;
    return dot ? (int)((e ? e : s + strlen(s)) - dot - 1) : 0;
}

/* Does the computed value agree with the printed one? [exact]: to 1e-9 relative; [le]: the
 * printed value is only a lower bound; otherwise the computed value rounded half-up to the
 * printed digits must equal the printed number (the sources round half-up: 41.25 -> 41.3). */
static int agrees(double v, const char *printed, const char *note) {
    double pv = atof(printed);
    if (strstr(note, "[exact]")) return fabs(v - pv) <= 1e-9 * fmax(1, fabs(pv));
    if (strstr(note, "[le]")) return pv <= v * (1 + 1e-9);
    int ex, d = printed_decimals(printed, &ex);
    double scale = pow(10, d - ex);
    double rounded = floor(v * scale + 0.5 + 1e-9) / scale;
    return fabs(rounded - pv) <= 1e-9 * fmax(1, fabs(pv));
}

static int check_sources(const opts *o) {
    FILE *f = fopen(o->data, "r");
    if (!f) bad("--data: cannot open '%s' (run from the repository root, or pass --data)", o->data);
    struct stat st; /* a directory opens and reads as nothing: "0 of 0 disagree" would read as a pass */
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) bad("--data: '%s' is not a regular file", o->data);
    char line[4096];
    int rows = 0, disagree = 0, lineno = 0;
    printf("%-25s | %-60s | %10s | %14s | %s\n", "source", "where", "printed", "formula gives", "unit");
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\r\n")] = '\0';
        char *col[10] = {0};
        int nc = 0;
        for (char *p = line; nc < 10; nc++) {
            col[nc] = p;
            char *tab = strchr(p, '\t');
            if (!tab) { nc++; break; }
            *tab = '\0';
            p = tab + 1;
        }
        if (nc < 9) bad("--data: %s:%d: expected at least 9 tab-separated columns, found %d", o->data, lineno, nc);
        const char *note = nc > 9 ? col[9] : "";
        zl_precision p;
        if (parse_precision(col[6], &p)) bad("--data: %s:%d: unknown precision '%s'", o->data, lineno, col[6]);
        double psi = atof(col[3]), n = !strcmp(col[4], "inf") ? INFINITY : atof(col[4]);
        double v = row_value(col[2], psi, n, atoi(col[5]), p, col[8], note);
        if (isnan(v)) bad("--data: %s:%d: cannot evaluate kind '%s' (note '%.40s')", o->data, lineno, col[2], note);
        rows++;
        if (!agrees(v, col[7], note)) {
            disagree++;
            printf("%-25.25s | %-60.60s | %10s | %14.6g | %s\n", col[0], col[1], col[7], v, col[8]);
        }
    }
    if (ferror(f)) bad("--data: reading '%s' failed after line %d: %s", o->data, lineno, strerror(errno));
    fclose(f);
    if (!rows) bad("--data: '%s' holds no rows to check", o->data); /* "0 of 0 disagree" would read as a pass */
    printf("%d of %d printed numbers disagree with their own formula (at the printed digits)\n", disagree, rows);
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    parse(&o, argc, argv);
    int status = 0;
    switch (o.mode) {
    case MODE_TABLE1: table1(); break;
    case MODE_MAX_MODEL: max_model(&o); break;
    case MODE_MAX_LAYERS: max_layers(&o); break;
    case MODE_CHECK_SOURCES: status = check_sources(&o); break;
    default: o.batch && !o.gpt ? calc_run(&o) : calc(&o);
    }
    int printed = zl_stdout_check("zerocalc", 0); /* on every path: a lost report is never exit 0 */
    return status ? status : printed;
}
