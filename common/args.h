/* args.h — command line: presets, flags, strict validation.
 *
 * Every bad value produces one line naming the flag and its allowed range and exit
 * code 2, before anything is allocated. Flags that belong to another stage are
 * refused by name. zl_args_hash() fingerprints the parsed configuration so all
 * ranks can check they were launched with the same arguments. */
#ifndef ZL_ARGS_H
#define ZL_ARGS_H

#include <stdint.h>

#include "../kernels/backend.h" /* zl_dtype */

#define ZL_PATH_MAX 1024

/* Exit codes of the four programs (README, --help). */
enum {
    ZL_EXIT_OK = 0,
    ZL_EXIT_RUNTIME = 1,  /* CUDA/NCCL/MPI failure (file:line, the library's text) or a lost output (its path, errno's text) */
    ZL_EXIT_INPUT = 2,    /* bad input or does not fit, before anything is allocated */
    ZL_EXIT_DIVERGED = 3, /* training diverged */
    ZL_EXIT_CHECK = 4,    /* --check: a measured number differs from its formula */
    ZL_EXIT_WATCHDOG = 5  /* --timeout: a rank made no progress */
};

/* --attention (the GPT): ZL_ATTENTION_BY_SHAPE until finish_config picks fused where its
 * kernels run (zl_gpt_flash_supported: head dimension 64, fp16; and --batch at most
 * ZL_GPT_FLASH_MAX_BATCH), else strided. */
typedef enum { ZL_ATTENTION_BY_SHAPE = 0, ZL_ATTENTION_STRIDED = 1, ZL_ATTENTION_FUSED = 2 } zl_attention;

typedef struct {
    int stage; /* which program is parsing: 0..3 */
    int layers, dim, batch, steps;
    int accum;                  /* micro-batches per step (K): global batch N·K·B */
    int checkpoint_activations; /* keep each unit's input only; recompute in backward */
    int keep_activations;       /* the MLP: keep gelu(h) of every block too; backward recomputes nothing */
    uint64_t seed;
    float loss_scale; /* the scale the run starts at: static K, or the dynamic scaler's first (set by
                       * finish_config from the two below) */
    int loss_scale_dynamic; /* 1: dynamic loss scaling (default for fp16); -1 until parsed */
    float loss_scale_static; /* --loss-scale K: -1 if not given (the last --loss-scale wins) */
    float loss_scale_init;   /* --loss-scale-init K: -1 if not given */
    int loss_scale_window;  /* clean steps before a dynamic scale doubles */
    float clip_grad_norm;   /* 0: off */
    zl_dtype dtype;         /* ZL_F16 (default, the paper's) or ZL_BF16 */
    int n_inject;           /* --inject-overflow: steps at which rank N-1 writes +inf into a gradient */
    int inject_steps[32];
    float lr, beta1, beta2, eps, weight_decay;
    int prefetch;            /* stage 3; -1 until parsed: default min(1, L-1) */
    int grad_sync_allreduce; /* stage 1 */
    int offload;             /* stages 2-3: fp32 master, Adam m, v on the host (common/offload.h) */
    int quiet;
    int timeout_s;    /* watchdog: seconds without progress before the job is ended (0 = off) */
    int no_preflight; /* skip the fits-in-memory check before allocation */
    int no_param_hash; /* skip param_hash: the final fp16 parameters are not copied out and hashed */
    int check;        /* exit 4 if any measured number differs from its formula */
    double peak_tflops; /* --peak-tflops: the device's peak for MFU (common/throughput.h); 0 = by device name */
    /* the model (model/model.h): --model mlp|gpt; the GPT's sequence length, heads, vocabulary
     * and training text (empty: the synthetic token stream) */
    int model; /* ZL_MODEL_MLP = 0, ZL_MODEL_GPT = 1 */
    int seq, heads, vocab;
    int attention; /* --attention, a zl_attention: by shape until resolved (fused where its kernels run) */
    int model_flag_seen; /* a GPT-only flag given (1 --seq, 2 --heads, 3 --vocab, 4 --data, 5 --peak-tflops,
                          6 --attention): refused for the MLP */
    char data_path[ZL_PATH_MAX];
    char preset[16];
    char json_path[ZL_PATH_MAX];
    char dump_path[ZL_PATH_MAX];
    /* checkpoints (common/ckpt.h) */
    char save_dir[ZL_PATH_MAX];   /* --save DIR: "" = none */
    int save_every;               /* --save-every K: also after every K-th step of training (0 = only the last) */
    char resume_dir[ZL_PATH_MAX]; /* --resume DIR: "" = start from the seed */
    char trace_path[ZL_PATH_MAX]; /* --trace: Chrome trace-event JSON of steps 2..S (common/trace.h) */
} zl_config;

enum { ZL_ARGS_OK = 0, ZL_ARGS_HELP = 1, ZL_ARGS_ERROR = 2 };

/* Parse argv for program `stage`, and check the ZL_ knobs of the environment (args.c's
 * env_knobs: README's table) the same way. On error, writes one line (no newline) into err;
 * control characters of echoed values are escaped, so it stays one line.
 * Both `--flag value` and `--flag=value` are accepted. */
int zl_args_parse(zl_config *cfg, int stage, int argc, char **argv, char *err, int err_len);
void zl_args_usage(const char *prog, int stage);
/* One warning line on stderr for each ZL_ variable that is neither a knob nor a test hook: a
 * misspelt knob would otherwise change nothing, silently. (Rank 0 calls it.) */
void zl_args_warn_unknown_knobs(const char *prog);
/* The i-th ZL_ knob of README's table (ZL_GEMM_TUNE .. ZL_NCCL_WINDOWS; ZL_GEMM_TABLE has its own
 * report): its name, and in *value what this environment sets it to, or NULL where it is unset or
 * empty (the default). NULL past the last knob. For the report: a run says what it ran under. */
const char *zl_args_knob_set(size_t i, const char **value);
/* Hash of every field that changes what the program computes or writes, and of the ZL_ knobs'
 * values (the environment: a rank with other collectives or buffers would hang the others). */
uint64_t zl_args_hash(const zl_config *cfg);

#endif
