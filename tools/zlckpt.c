/* zlckpt.c — look inside, check and export a zerolab checkpoint (common/ckpt.h).
 *
 *   zlckpt inspect DIR                  the manifest, and bytes per rank and category
 *   zlckpt verify DIR                   every file's size and XXH3-64, the manifest's
 *                                       own seal and consistency; exit 0, or 2 and one line
 *   zlckpt export DIR --out FILE [--dtype fp32|fp16|bf16]
 *                                       the full unpadded parameter vector from the fp32
 *                                       master slices (what other ZeRO implementations need
 *                                       a zero_to_fp32 script for), little-endian, raw;
 *                                       --out's rules in help_text
 *
 * Exit 0; 1 when a write fails (the export, or the report on stdout: a full disk); 2 for bad
 * input (flags, a bad checkpoint, a refused --out), before the export is written.
 *
 * No MPI job, no device: one process reads the files with the checkpoint module's own
 * range reader (the same code a resharding --resume uses). */
#define _XOPEN_SOURCE 700 /* lstat */
#include <errno.h>
#include <limits.h> /* PATH_MAX */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* STDOUT_FILENO */

#include "common/args.h" /* ZL_EXIT_*, ZL_PATH_MAX */
#include "common/ckpt.h" /* zl_ckpt_manifest, zl_ckpt_read_manifest, zl_ckpt_verify_file, zl_ckpt_read_range */
#include "common/stdout_check.h" /* a report lost on the way to stdout (a full disk) exits 1 */
#include "common/replace.h"      /* zl_replace: --out written whole or not at all */
#include "common/util.h"         /* zl_path_within, zl_same_inode: is --out inside the checkpoint, or stdout? */
#include "kernels/zl_math.h" /* zl_round_storage: fp32 -> fp16 / bf16 */

static const char *const prog_of_stage[4] = {"stage0_ddp", "stage1", "stage2", "stage3"};
enum { BUF_BYTES = 4 << 20 };

static const char help_text[] =
    "usage: zlckpt inspect DIR | verify DIR | export DIR --out FILE [--dtype fp32|fp16|bf16]\n"
    "  inspect DIR  the manifest, and bytes per rank and category\n"
    "  verify DIR   every rank file's size and XXH3-64, the manifest's seal and consistency\n"
    "  export DIR --out FILE [--dtype fp32|fp16|bf16]\n"
    "               the full unpadded parameter vector (from the fp32 master), little-endian, raw.\n"
    "               A regular FILE, new or existing (through symbolic links), is written as\n"
    "               FILE.zl-tmp and renamed into place; a character device or a pipe (/dev/null,\n"
    "               /dev/stdout, a FIFO) is written directly, and when it is stdout the summary line\n"
    "               goes to stderr. Refused up front, nothing written (exit 2): a FILE inside DIR,\n"
    "               a directory, a dangling symbolic link, any other kind of file.\n"
    "exit: 0 ok; 1 a write failed (FILE, or stdout); 2 bad input (flags, checkpoint, --out)\n";

static int usage(void) {
    fprintf(stderr, "usage: zlckpt inspect DIR | verify DIR | export DIR --out FILE [--dtype fp32|fp16|bf16]"
                    " (zlckpt --help)\n");
    return ZL_EXIT_INPUT;
}

static int open_manifest(const char *dir, zl_ckpt_manifest *m) {
    char err[ZL_PATH_MAX + 256];
    if (!zl_ckpt_read_manifest(dir, m, err, sizeof err)) return 0;
    fprintf(stderr, "zlckpt: %s\n", err);
    zl_ckpt_manifest_free(m);
    return -1;
}

static int inspect(const char *dir) {
    zl_ckpt_manifest m;
    if (open_manifest(dir, &m)) return ZL_EXIT_INPUT;
    const zl_partition *p = &m.part;
    printf("checkpoint %s (zerolab-checkpoint version %d)\n", dir, m.version);
    char model[128];
    zl_ckpt_describe_model(model, sizeof model, m.shape);
    printf("  model       %s: %d shard units, %zu params (%zu padded for N = %d)\n", model, p->n_units, p->psi,
           p->psi_pad, m.world);
    printf("  written by  %s at N = %d, %d rows per rank, seed %llu; params stored as %s\n", prog_of_stage[m.stage],
           m.world, m.shape.rows, (unsigned long long)m.seed, zl_dtype_name(m.dtype));
    if (m.data.kind == ZL_CKPT_DATA_SYNTHETIC) printf("  data        the synthetic token stream\n");
    if (m.data.kind == ZL_CKPT_DATA_TEXT)
        printf("  data        a --data text of %llu bytes, XXH3-64 %016llx\n", (unsigned long long)m.data.bytes,
               (unsigned long long)m.data.xxh3);
    printf("  progress    step %d, Adam step %d, %llu data rows consumed\n", m.at.step, m.at.adam_step,
           (unsigned long long)m.at.data_rows);
    printf("  loss scale  %g (%s", m.at.scaler.scale, m.at.scaler.dynamic ? "dynamic" : "static");
    if (m.at.scaler.dynamic)
        printf(", window %d, %d clean steps, %ld skipped", m.at.scaler.window, m.at.scaler.clean_steps,
               m.at.scaler.skipped);
    printf(")\n  units       ");
    for (int u = 0; u < p->n_units && u < 4; u++)
        printf("%s%d: %zu (+%zu padding, slices of %zu)", u ? "; " : "", u, p->n[u], p->n_pad[u] - p->n[u],
               p->slice_len[u]);
    printf("%s\n", p->n_units > 4 ? "; ..." : "");
    printf("  per rank    ");
    for (int c = 0; c < ZL_CKPT_NCAT; c++)
        if (zl_ckpt_cat_bytes(&m, c))
            printf("%s%s %zu B", c ? ", " : "", zl_ckpt_cat_name(c), zl_ckpt_cat_bytes(&m, c));
    printf(" = %zu B per file\n", m.file_bytes);
    printf("  total       %d files, %.0f B (%.3f GB)\n", m.world, (double)m.file_bytes * m.world,
           (double)m.file_bytes * m.world / 1e9);
    for (int r = 0; r < m.world && r < 8; r++)
        printf("  rank %-5d  rank-%05d.bin  %zu B  xxh3_64 %016llx\n", r, r, m.file_bytes,
               (unsigned long long)m.file_hash[r]);
    if (m.world > 8) printf("  ...         (%d more)\n", m.world - 8);
    zl_ckpt_manifest_free(&m);
    return ZL_EXIT_OK;
}

static int verify(const char *dir) {
    zl_ckpt_manifest m;
    if (open_manifest(dir, &m)) return ZL_EXIT_INPUT;
    static unsigned char buf[BUF_BYTES];
    char err[ZL_PATH_MAX + 256];
    int status = ZL_EXIT_OK;
    for (int r = 0; r < m.world && status == ZL_EXIT_OK; r++)
        if (zl_ckpt_verify_file(dir, &m, r, buf, sizeof buf, err, sizeof err)) {
            fprintf(stderr, "zlckpt: %s\n", err);
            status = ZL_EXIT_INPUT;
        }
    if (status == ZL_EXIT_OK)
        printf("ok: %s: manifest sealed and consistent; %d rank files of %zu B match their sizes and XXH3-64\n", dir,
               m.world, m.file_bytes);
    zl_ckpt_manifest_free(&m);
    return status;
}

typedef struct {
    FILE *out;
    zl_dtype dtype;
    int failed;
} export_sink;

/* fp32 elements in, the export format out (in place: element i of 2 bytes lands below
 * element i + 1 of 4). */
static void write_elements(void *ctx, size_t at, void *data, size_t count) {
    (void)at; /* ranges arrive in order */
    export_sink *s = ctx;
    size_t esz = s->dtype == ZL_F32 ? 4 : 2;
    if (s->dtype != ZL_F32) {
        const float *f = data;
        uint16_t *h = data;
        for (size_t i = 0; i < count; i++) h[i] = zl_round_storage(f[i], s->dtype == ZL_BF16);
    }
    if (fwrite(data, esz, count, s->out) != count) s->failed = errno ? errno : EIO;
}

/* Where the export goes (common/replace.h): a regular file (new or existing, through symbolic
 * links) is written beside and renamed into place once whole, so no reader ever sees half a
 * vector; a character device or a pipe (/dev/null, /dev/stdout, a FIFO) is written directly. */
typedef struct {
    int is_stdout; /* a device or pipe that is stdout: the summary line goes to stderr */
    zl_replace file;
} export_target;

static int refuse_out(const char *out, const char *why) {
    fprintf(stderr, "zlckpt: --out '%s': %s\n", out, why);
    return ZL_EXIT_INPUT;
}

/* Decide, before any checkpoint file is read, where --out goes, or refuse it (exit 2): a path
 * inside the checkpoint (renaming over a rank file would destroy it), a directory, anything
 * that is neither a regular file nor a character device nor a pipe. */
static int resolve_out(export_target *t, const char *out, const char *dir) {
    memset(t, 0, sizeof *t);
    struct stat ck, st;
    if (stat(dir, &ck)) return refuse_out(out, "the checkpoint directory cannot be examined");
    int e = zl_replace_resolve(&t->file, out);
    char why[PATH_MAX + 64], parent[PATH_MAX];
    if (e == EISDIR) return refuse_out(out, "names a directory; --out is a file");
    if (e == EINVAL) return refuse_out(out, "not a regular file, a character device or a pipe");
    if (e == ENOENT && !lstat(out, &st) && S_ISLNK(st.st_mode)) return refuse_out(out, "a symbolic link to nothing");
    if (e == ENAMETOOLONG) return refuse_out(out, "path too long");
    if (e && stat(out, &st) && errno == ENOENT) { /* a new file: what failed was its directory */
        zl_path_parent(parent, sizeof parent, out);
        snprintf(why, sizeof why, "its directory '%s': %s", parent, strerror(e));
        return refuse_out(out, why);
    }
    if (e) return refuse_out(out, strerror(e));
    if (t->file.direct) {
        struct stat so;
        t->is_stdout = !fstat(STDOUT_FILENO, &so) && !stat(out, &st) && zl_same_inode(&so, &st);
        return ZL_EXIT_OK;
    }
    zl_path_parent(parent, sizeof parent, t->file.target);
    if (zl_path_within(parent, &ck)) return refuse_out(out, "inside the checkpoint directory being exported");
    return ZL_EXIT_OK;
}

/* Open the target now, before the checkpoint is read: a directory that cannot be written is
 * bad input found up front, not a failure after the work. */
static int open_target(export_target *t) {
    const zl_replace *r = &t->file;
    int e = zl_replace_begin(&t->file);
    if (e) fprintf(stderr, "zlckpt: --out: cannot write '%s': %s\n", r->direct ? r->target : r->tmp, strerror(e));
    return e;
}

/* The vector written: a file put in --out's place once whole and on the disk; a device or pipe closed. */
static int finish_target(export_target *t, const char *out, int failed) {
    const char *step = "write";
    int e = failed;
    if (e) zl_replace_discard(&t->file);
    else e = zl_replace_commit(&t->file, &step);
    if (!e) return ZL_EXIT_OK;
    fprintf(stderr, "zlckpt: --out '%s': %s failed: %s\n", out, step, strerror(e));
    return ZL_EXIT_RUNTIME;
}

static int export_params(const char *dir, const char *out, zl_dtype dtype) {
    zl_ckpt_manifest m;
    if (open_manifest(dir, &m)) return ZL_EXIT_INPUT;
    export_target t;
    int status = resolve_out(&t, out, dir);
    if (!status && open_target(&t)) status = ZL_EXIT_INPUT;
    export_sink s = {t.file.f, dtype, 0};
    static unsigned char buf[BUF_BYTES];
    char err[ZL_PATH_MAX + 256];
    for (int r = 0; r < m.world && status == ZL_EXIT_OK; r++) /* check before writing anything */
        if (zl_ckpt_verify_file(dir, &m, r, buf, sizeof buf, err, sizeof err)) {
            fprintf(stderr, "zlckpt: %s\n", err);
            status = ZL_EXIT_INPUT;
        }
    zl_ckpt_reader *rd = status ? NULL : zl_ckpt_reader_open(dir, &m);
    for (int u = 0; rd && u < m.part.n_units && status == ZL_EXIT_OK; u++)
        if (zl_ckpt_read_range(rd, ZL_CKPT_MASTER, u, 0, m.part.n[u], buf, sizeof buf, write_elements, &s, err,
                               sizeof err)) {
            fprintf(stderr, "zlckpt: %s\n", err);
            status = ZL_EXIT_RUNTIME;
        }
    zl_ckpt_reader_close(rd);
    if (!status) status = finish_target(&t, out, s.failed);
    else zl_replace_discard(&t.file); /* a device or pipe is closed, never removed */
    if (!status) /* --out /dev/stdout carries the data: the summary must not join it */
        fprintf(t.is_stdout ? stderr : stdout, "exported %zu params (%s, %zu B) from %s to %s\n", m.part.psi,
                zl_dtype_name(dtype), m.part.psi * zl_dtype_size(dtype), dir, out);
    zl_ckpt_manifest_free(&m);
    return status;
}

/* The command's exit status, before stdout is checked. */
static int run_command(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(help_text, stdout);
        return ZL_EXIT_OK;
    }
    if (argc < 3) return usage();
    const char *cmd = argv[1], *dir = argv[2];
    if (!strcmp(cmd, "inspect") && argc == 3) return inspect(dir);
    if (!strcmp(cmd, "verify") && argc == 3) return verify(dir);
    if (strcmp(cmd, "export")) return usage();
    const char *out = NULL;
    zl_dtype dtype = ZL_F32;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            if (!strcmp(d, "fp32")) dtype = ZL_F32;
            else if (!strcmp(d, "fp16")) dtype = ZL_F16;
            else if (!strcmp(d, "bf16")) dtype = ZL_BF16;
            else {
                fprintf(stderr, "zlckpt: --dtype: expected fp32, fp16 or bf16, got '%s'\n", d);
                return ZL_EXIT_INPUT;
            }
        } else return usage();
    }
    if (!out) return usage();
    return export_params(dir, out, dtype);
}

int main(int argc, char **argv) {
    int status = run_command(argc, argv);
    int printed = zl_stdout_check("zlckpt", 0); /* an inspect or verify report lost is never exit 0 */
    return status ? status : printed;
}
