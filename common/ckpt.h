/* ckpt.h — sharded checkpoints: every rank writes what it owns, in parallel; a resume reads
 * only the byte ranges it needs, at any N and from any stage.
 *
 * The format (docs/ARCHITECTURE.md, "Checkpoints"). A checkpoint is a directory:
 *   manifest.json     format version, model (kind, shape), dtype, stage, N, Ψ, unit sizes
 *                     and padding, step, Adam's step, loss scaler, data position, and each
 *                     rank file's size and XXH3-64; its last member is the XXH3-64 of the
 *                     text before it, so one flipped byte anywhere is caught.
 *   rank-00000.bin …  one per rank r of the writing run: category after category (fp32
 *                     master, Adam m, Adam v; fp16/bf16 params only when they are the
 *                     rank's only copy, stage 3), each the rank's slice r of every unit
 *                     under the writing run's partition (partition.h): unit u's slice at
 *                     element slice_off[u], slice_len[u] elements, padding stored as zeros.
 *                     Little-endian, no header: the manifest says where everything is.
 * Whatever the stage, file r holds slice r: DDP ranks hold full copies and each saves
 * only its 1/N of them, so no byte is written twice.
 *
 * Atomic save: the files go to DIR.zl-tmp next to DIR, each fsynced, then the manifest
 * (last, fsynced), the directory fsynced, then DIR.zl-tmp takes DIR's place in one
 * rename(2) (RENAME_EXCHANGE when DIR exists; where the file system lacks it, DIR is
 * renamed to DIR.zl-old first). A save killed at any point leaves the previous DIR
 * intact and loadable. The new DIR gets the previous one's permissions (mode bits).
 *
 * Reshard: a rank of the new run needs, of unit u, either its new slice [begin, end)
 * (ZeRO) or the whole unit (DDP; and every fp16 copy of stages 0-2). Those unpadded
 * element ranges are read from the old ranks whose slices overlap them, with pread,
 * through one fixed staging buffer (category ckpt_staging): nothing is gathered.
 *
 * defines: zl_ckpt (opaque), zl_ckpt_owned, zl_ckpt_progress, zl_ckpt_* (run hooks),
 *          zl_ckpt_manifest + zl_ckpt_read_manifest/verify/... (format; zlckpt uses them). */
#ifndef ZL_CKPT_H
#define ZL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "partition.h"
#include "runtime.h"
#include "scaler.h"
#include "../model/model.h"

#define ZL_CKPT_VERSION 1
#define ZL_CKPT_MANIFEST "manifest.json"

/* The rank files are little-endian and ckpt.c writes and reads the host's own bytes: a
 * big-endian host would write files no other host reads the same. Refused where it is built. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "zerolab checkpoints are little-endian and ckpt.c does not swap bytes: big-endian hosts unsupported");

/* ---- run hooks (collective: every rank calls them) -------------------------------- */

/* Where each buffer keeps unit u: a rank's slices (unit u's slice at part.slice_off[u])
 * or full copies (unit u at part.off_pad[u], part.full_len elements). */
typedef enum { ZL_CKPT_SLICES = 1, ZL_CKPT_FULL = 2 } zl_ckpt_layout;

/* What this rank owns, as a stage file sees it (device pointers; with --offload master, m, v
 * are pinned host memory). Saved: slice r of the
 * fp32 master, m, v; the fp16 params only when they are held as slices (stage 3: their
 * only copy). Restored: whatever the layout asks for; fp16 params that are not in the
 * checkpoint are the master rounded to the storage format (what Adam writes anyway). */
typedef struct {
    float *master, *adam_m, *adam_v;
    zl_ckpt_layout states; /* of master, m, v */
    zl_half *params;
    zl_ckpt_layout params_layout;
} zl_ckpt_owned;

/* Where training stands after `step` steps. Without --resume all zeros (the scaler: the
 * static --loss-scale). */
typedef struct {
    int step;           /* training steps done */
    int adam_step;      /* Adam updates applied: its bias-correction t (steps skipped on overflow don't count) */
    uint64_t data_rows; /* global sample rows consumed: the next step's batch starts there */
    zl_loss_scaler scaler;
} zl_ckpt_progress;

typedef struct zl_ckpt zl_ckpt;

/* Before zl_mem_freeze: the staging buffer (allocated by every run, so a --save-every
 * inside the frozen step loop allocates nothing). */
zl_ckpt *zl_ckpt_create(const zl_runtime *rt, const zl_partition *part, zl_model_shape shape, int stage);
void zl_ckpt_free(zl_ckpt *ck);
/* --resume DIR: overwrite `o` with the checkpoint's state (already checked by zl_preflight)
 * and return where it stands; without --resume, return zeros and touch nothing. */
zl_ckpt_progress zl_ckpt_resume(zl_ckpt *ck, zl_ckpt_owned o, zl_stream s);
/* Is a save due after step `step` of this run (1-based)? (--save DIR: every --save-every
 * steps of training, and after the last step.) */
int zl_ckpt_due(const zl_ckpt *ck, int step);
/* Due at a step before the last: the stage applies that step's update inside the step (its time,
 * its collectives, its trace), where it would otherwise have run at the next step's start. */
int zl_ckpt_due_mid_run(const zl_ckpt *ck, int step);
/* After step `step` of this run (1-based): save to --save DIR if it is due (every
 * --save-every steps of training, and after the last step), with Adam's step count (a
 * skipped step does not count) and the loss scaler's state. */
void zl_ckpt_save_if_due(zl_ckpt *ck, zl_ckpt_owned o, int step, int adam_step, const zl_loss_scaler *scaler,
                         zl_stream s);

/* Collective, before allocation (zl_preflight calls it): with --resume, every rank checks
 * the manifest against this run, and the files' sizes and checksums (rank r hashes files
 * r, r + N, …); on any fault every rank exits 2, one line from the lowest faulty rank. */
void zl_ckpt_check_resume(zl_runtime *rt, zl_model_shape shape);
/* Rank 0, at start-up (outputs.c): can DIR be written, and replaced whole (new, empty, or a
 * checkpoint holding nothing a save does not write)? Nor may the save clear what is still
 * needed: the --resume directory (resume_dir, "" for none) when it is DIR.zl-tmp or DIR.zl-old,
 * or a whole checkpoint in DIR.zl-tmp newer than DIR's (a save cut before its rename).
 * 0, or errno with msg filled. */
int zl_ckpt_probe_dir(const char *dir, const char *resume_dir, char *msg, size_t n);
/* DIR + suffix without DIR's trailing slashes: "ckpt/" + ".zl-tmp" -> "ckpt.zl-tmp", the names a
 * save writes beside DIR ("" for DIR itself as the save renames it). */
void zl_ckpt_sibling(char *out, size_t n, const char *dir, const char *suffix);

/* ---- the format (no MPI, no device: zlckpt and the fuzz test use these) ----------- */

enum { ZL_CKPT_MASTER = 0, ZL_CKPT_M, ZL_CKPT_V, ZL_CKPT_PARAMS, ZL_CKPT_NCAT };
const char *zl_ckpt_cat_name(int cat); /* "master_fp32", "adam_m", "adam_v", "params" */

/* What the GPT trained on: its data stream is the seed's walk over this (--data), so a resumed
 * run must read the same. An MLP's data is the seed's alone: nothing recorded. */
typedef enum { ZL_CKPT_DATA_UNRECORDED = 0, ZL_CKPT_DATA_SYNTHETIC, ZL_CKPT_DATA_TEXT } zl_ckpt_data_kind;
typedef struct {
    zl_ckpt_data_kind kind; /* UNRECORDED: an MLP, or a GPT checkpoint written before this was */
    uint64_t bytes, xxh3;   /* TEXT: the file's size and XXH3-64 */
} zl_ckpt_data;
/* This run's data: the synthetic token stream, or the --data file read and hashed (0, or errno
 * with msg filled). */
int zl_ckpt_data_of(const zl_config *c, zl_ckpt_data *d, char *msg, size_t n);

typedef struct {
    int version;
    zl_model_shape shape; /* kind, layers, dim (GPT: seq, heads, vocab); rows = the writing run's rows per rank */
    zl_dtype dtype;       /* storage format of the fp16/bf16 params */
    int stage, world;
    uint64_t seed;
    zl_ckpt_data data;    /* the GPT's --data ("data" in the manifest; absent in older checkpoints) */
    zl_partition part;    /* the writing run's partition (from the unit sizes and world) */
    int has_params;       /* the params category is present (stage 3) */
    zl_ckpt_progress at;
    size_t file_bytes;    /* every rank file's size */
    uint64_t *file_hash;  /* [world] XXH3-64 of each rank file */
} zl_ckpt_manifest;

/* Bytes of one category in a rank file, and where it starts. */
size_t zl_ckpt_cat_bytes(const zl_ckpt_manifest *m, int cat);
size_t zl_ckpt_cat_offset(const zl_ckpt_manifest *m, int cat);
/* "DIR/rank-00042.bin" */
void zl_ckpt_rank_path(char *out, size_t n, const char *dir, int rank);

/* Parse and check DIR/manifest.json (its own checksum, every field, internal consistency).
 * 0, or -1 with one line in err ("DIR/manifest.json: <problem>"). Free with
 * zl_ckpt_manifest_free in either case. */
int zl_ckpt_read_manifest(const char *dir, zl_ckpt_manifest *m, char *err, size_t n);
void zl_ckpt_manifest_free(zl_ckpt_manifest *m);
/* Rank file r: exists, has the manifest's size and checksum. `buf` (cap bytes) is the
 * read buffer. 0, or -1 with one line in err naming the file. */
int zl_ckpt_verify_file(const char *dir, const zl_ckpt_manifest *m, int r, void *buf, size_t cap, char *err, size_t n);
/* "mlp with L = 8, D = 4096" / "gpt with L = 12, D = 768, T = 1024, H = 12, V = 50257" */
void zl_ckpt_describe_model(char *out, size_t n, zl_model_shape shape);
/* Does a checkpoint fit this run? The same model (kind, L, D; GPT: T, H, V too), same dtype. 0 or -1 (err). */
int zl_ckpt_compatible(const zl_ckpt_manifest *m, const char *dir, zl_model_shape shape, zl_dtype dtype, char *err,
                       size_t n);
/* Write DIR/manifest.json (fsynced) for `m`: the sealed text described above. 0 or errno. */
int zl_ckpt_write_manifest(const char *dir, const zl_ckpt_manifest *m);

/* Streaming reads of the unpadded layout: elements [begin, end) (end <= n[u]) of unit u,
 * category cat, from the files of the old ranks whose slices overlap. Each piece goes
 * through `buf` (cap bytes) and is handed to sink(ctx, offset from begin, data, count).
 * 0, or -1 with err (a short read: the file changed since it was verified). A reader keeps
 * at most 16 rank files open (one when the descriptors run out), whatever the old N. */
/* data is writable: a sink may convert in place */
typedef void (*zl_ckpt_sink)(void *ctx, size_t at, void *data, size_t count);
typedef struct zl_ckpt_reader zl_ckpt_reader;
zl_ckpt_reader *zl_ckpt_reader_open(const char *dir, const zl_ckpt_manifest *m);
void zl_ckpt_reader_close(zl_ckpt_reader *rd);
int zl_ckpt_read_range(zl_ckpt_reader *rd, int cat, int u, size_t begin, size_t end, void *buf, size_t cap,
                       zl_ckpt_sink sink, void *ctx, char *err, size_t n);

#endif
