/* zlbatch.c — write the tokens a GPT run trains on in one step, for a reference outside
 * zerolab (tests/gpu/torch_gpt_reference.py rebuilds the model in PyTorch and needs the batch).
 *
 *   zlbatch --out FILE [--ranks N] [--step S] PROGRAM-FLAGS...
 *
 * PROGRAM-FLAGS are the stage program's own (--preset gpt-tiny --seed 7 --batch 2 --accum 2
 * --data FILE ...), parsed by the same code (common/args.c). FILE receives the global rows of
 * step S (default 1) at N ranks (default 1): rows [(S-1)·N·K·B, S·N·K·B) of the sample stream,
 * each a window of T+1 tokens (model/gpt.h "Data": inputs = the first T, targets = the last
 * T), as int32 little-endian, N·K·B × (T+1). Row order is the stages': rank r, micro-batch j
 * holds the block's rows [(r·K + j)·B, (r·K + j + 1)·B). The rows come from the very function
 * the programs call (zl_gpt_sample_row, on the host in every backend), so the file is what any
 * build trains on. (A --resume'd run continues the stream where the checkpoint left it: not
 * covered.)
 *
 * No MPI job, no device. Exit 0 (also for --help); 2 and one line for bad flags (or a bad ZL_ knob:
 * args.c checks them for every program that parses flags), a --data it cannot read whole or an
 * --out it cannot open; 1 if writing the file fails. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"    /* zl_args_parse: the programs' flags; ZL_EXIT_* */
#include "common/replace.h" /* zl_replace: FILE written whole or not at all */
#include "common/util.h"    /* zl_same_file: --out naming the --data file, by any path */
#include "model/gpt.h"   /* zl_gpt_sample_row: row g of the token stream */

#define USAGE "zlbatch --out FILE [--ranks N] [--step S] PROGRAM-FLAGS... (--model gpt or a GPT preset)"

/* One line, as every program refuses a bad flag. */
static int usage(const char *why) {
    fprintf(stderr, "zlbatch: %s (usage: " USAGE ")\n", why);
    return ZL_EXIT_INPUT;
}

static int help(void) {
    printf("usage: " USAGE "\n"
           "  writes the tokens of step S (default 1) of a run at N ranks (default 1) to FILE: N·K·B rows of\n"
           "  T + 1 int32 little-endian tokens, in the stages' row order. PROGRAM-FLAGS are the stage\n"
           "  programs' own (build/cpu/stage0_ddp --help), e.g. --preset gpt-tiny --seed 7 --data FILE.\n"
           "exit codes: 0 ok | 1 writing FILE failed | 2 bad flags, --data unreadable, --out not writable\n");
    return fflush(stdout) || ferror(stdout) ? ZL_EXIT_RUNTIME : ZL_EXIT_OK;
}

/* A whole decimal integer in [lo, hi] (atoi took "2x" as 2). */
static int parse_count(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!isdigit((unsigned char)*s) || *end || errno || v < lo || v > hi) return 0; /* no ' 3', no '+2' */
    *out = (int)v;
    return 1;
}

/* --data: the whole file in memory (the programs map it; the bytes are the same). NULL with
 * errno where any of it could not be read: part of a text is another text. */
static unsigned char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0, got;
    int e = 0;
    do {
        if (n == cap) {
            unsigned char *grown = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
            if (!grown) {
                e = ENOMEM;
                break;
            }
            buf = grown;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    if (!e && ferror(f)) e = errno ? errno : EIO;
    fclose(f);
    if (e) {
        free(buf), errno = e;
        return NULL;
    }
    *len = n;
    return buf;
}

/* FILE: a regular file is written beside and renamed into place once whole, so a cut write
 * leaves the earlier batch as it was; a device or a pipe is written directly (common/replace.h). */
static int open_out(zl_replace *o, const char *out) {
    int e = zl_replace_resolve(o, out);
    if (!e) e = zl_replace_begin(o);
    if (e) fprintf(stderr, "zlbatch: --out %s: %s\n", out, strerror(e));
    return e;
}

int main(int argc, char **argv) {
    const char *out = NULL;
    int ranks = 1, step = 1;
    char **flags = calloc((size_t)argc + 1, sizeof *flags);
    if (!flags) return usage("out of memory");
    int nf = 0;
    flags[nf++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help();
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
            if (!parse_count(argv[++i], 1, 1 << 20, &ranks)) return usage("--ranks: expected an integer in [1, 1048576]");
        } else if (!strcmp(argv[i], "--step") && i + 1 < argc) {
            if (!parse_count(argv[++i], 1, 1000000, &step)) return usage("--step: expected an integer in [1, 1000000]");
        } else flags[nf++] = argv[i];
    }
    if (!out) return usage("--out FILE is required");
    zl_config c;
    char err[1024];
    int rc = zl_args_parse(&c, 0, nf, flags, err, sizeof err);
    if (rc != ZL_ARGS_OK) return usage(err);
    if (c.model != 1) return usage("only --model gpt has a token stream");

    size_t text_len = 0;
    unsigned char *text = NULL;
    if (c.data_path[0]) {
        if (zl_same_file(out, c.data_path)) return usage("--out names the --data file: refusing to overwrite the input");
        text = read_text(c.data_path, &text_len);
        if (!text) {
            fprintf(stderr, "zlbatch: --data %s: %s\n", c.data_path, strerror(errno));
            return errno == ENOMEM ? ZL_EXIT_RUNTIME : ZL_EXIT_INPUT;
        }
        if (text_len <= (size_t)c.seq) return usage("--data: needs more than --seq bytes");
    }
    const int T = c.seq;
    const uint64_t rows = (uint64_t)ranks * (uint64_t)c.accum * (uint64_t)c.batch, row0 = (uint64_t)(step - 1) * rows;
    zl_replace o;
    if (open_out(&o, out)) return ZL_EXIT_INPUT;
    FILE *f = o.f;
    int32_t *window = malloc(sizeof *window * ((size_t)T + 1));
    if (!window) {
        fprintf(stderr, "zlbatch: out of host memory\n");
        return ZL_EXIT_RUNTIME;
    }
    for (uint64_t g = row0; g < row0 + rows; g++) {
        zl_gpt_sample_row(text, text_len, c.seed, g, T, c.vocab, window);
        for (int t = 0; t <= T; t++) { /* little-endian, whatever the host */
            uint32_t v = (uint32_t)window[t];
            unsigned char b[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};
            if (fwrite(b, 1, 4, f) != 4) break;
        }
    }
    int e = zl_replace_commit(&o, NULL); /* 0, or the write that failed (the file at FILE as it was) */
    if (e) {
        fprintf(stderr, "zlbatch: writing %s: %s\n", out, strerror(e));
        return ZL_EXIT_RUNTIME;
    }
    free(window), free(text), free(flags);
    return ZL_EXIT_OK;
}
