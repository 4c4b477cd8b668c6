/* gemm_table.h — cuBLASLt algorithms chosen ahead of time for given GEMMs (ZL_GEMM_TABLE).
 *
 * The trainer runs the heuristic's first answer for each GEMM configuration, or a candidate of
 * its top 8 with the same bits that is at least 10 % faster when timed on the configuration's
 * first call (kernels_cuda.cu). A few launches at start-up cannot rank candidates a few percent
 * apart at the clock a training step runs at — the power cap — but seconds of each alone can
 * (bench_gemm_tune --sustain). This table carries that ranking from the benchmark to the
 * trainer: bench_gemm_tune --sustain S --table PATH writes, for each GEMM whose fastest
 * same-bits candidate (not the first answer's own configuration, splitting k as it does) beat
 * the first answer alone by 2 % or more, that candidate's configuration; the trainer, given
 * ZL_GEMM_TABLE=PATH, takes it where the heuristic offers it and it writes the first answer's
 * bits on the call's own operands (a hash of every output), else keeps the first answer and says
 * why. The table names the GPU and the cuBLASLt version it was made on; on another it is not
 * used. What keeps the results is the same check as the step-1 choice's: equal output hashes on
 * the first call's operands, over at least ZL_GEMM_MIN_OUTPUTS outputs — evidence of the same
 * order of accumulation, not proof (the GPU tests compare param_hash with and without).
 *
 * The format is JSON (cJSON): {"format": "zerolab gemm table 1", "gpu": name,
 * "cublaslt_version": v, "made_by": command, "gemms": [{"what", "m", "n", "k", "transa",
 * "transb" ("N"/"T"), "epilogue" (cublasLtEpilogue_t), "dtype" ("fp16"/"bf16"), "algo": {"id",
 * "tile", "stages", "splitk", "reduction", "swizzle", "custom", "inner", "cluster"} (the
 * CUBLASLT_ALGO_CONFIG_* values), "first_ms", "ms" (a launch alone at the cap, the first answer
 * and this one)}]}.
 *
 * defines: zl_gemm_shape, zl_gemm_algo, zl_gemm_entry, zl_gemm_table and their load / find /
 * save / free (plain C: args.c checks the file before anything is allocated). */
#ifndef ZL_GEMM_TABLE_H
#define ZL_GEMM_TABLE_H

#define ZL_GEMM_TABLE_FORMAT "zerolab gemm table 1"
/* Below this many outputs (m·n) a GEMM keeps the heuristic's first answer, table or not: equal
 * bits on a few hundred outputs are no evidence of the same order of accumulation (why:
 * kernels_cuda.cu). A table with a smaller GEMM is refused. */
#define ZL_GEMM_MIN_OUTPUTS (1ll << 20)

#ifdef __cplusplus
extern "C" { /* kernels_cuda.cu and bench_gemm_tune read it too */
#endif

typedef struct {
    int m, n, k, transa, transb; /* column-major, as cuBLASLt sees it; trans: 0 N, 1 T */
    int epilogue;                /* cublasLtEpilogue_t */
    int bf16;                    /* operands' format: 0 fp16, 1 bf16 */
} zl_gemm_shape;

typedef struct {
    int id, tile, stages, splitk, reduction, swizzle, custom, inner, cluster; /* CUBLASLT_ALGO_CONFIG_* */
} zl_gemm_algo;

typedef struct {
    char what[64]; /* the benchmark's name for it ("bwd dh"): for people */
    zl_gemm_shape shape;
    zl_gemm_algo algo;
    double first_ms, ms; /* a launch alone at the cap: the first answer, this algorithm */
} zl_gemm_entry;

typedef struct {
    char gpu[256];
    int cublaslt_version;
    char made_by[512];
    int n;
    zl_gemm_entry *e; /* [n] */
} zl_gemm_table;

/* 0, or -1 with why in err (the file, the field, the entry). */
int zl_gemm_table_load(const char *path, zl_gemm_table *t, char *err, int len);
int zl_gemm_table_save(const char *path, const zl_gemm_table *t, char *err, int len);
const zl_gemm_entry *zl_gemm_table_find(const zl_gemm_table *t, const zl_gemm_shape *s); /* NULL: none */
/* 1 if the table was made on this GPU (its name) and cuBLASLt version: only then is it used. */
int zl_gemm_table_matches(const zl_gemm_table *t, const char *gpu, int cublaslt_version);
void zl_gemm_table_free(zl_gemm_table *t);

#ifdef __cplusplus
}
#endif
#endif
