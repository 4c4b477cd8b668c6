/* gpt.h — a GPT-2-like transformer, the second model behind the unit interface (model.h).
 *
 * Architecture (GPT-2): token + position embeddings; L pre-LN blocks
 *     x_mid = x + proj(attn(LN1(x)))        causal multi-head attention, fused QKV
 *     y     = x_mid + W_proj·gelu(W_fc·LN2(x_mid))   MLP of width 4D, tanh GELU
 * a final LayerNorm, and the LM head tied to the token embedding: logits = LN_f(x)·wteᵀ,
 * next-token cross-entropy. Kernels: kernels/gpt_kernels.h.
 *
 * Shard units (n_units = L + 2):  0 the embedding (wte Vp×D, then wpe T×D) · 1..L the blocks ·
 * L+1 the final LayerNorm (g, b).
 * Uses (n_uses = L + 3):  0 embedding lookup (unit 0) · 1..L blocks · L+1 final LN · L+2 the
 * LM head (unit 0 again). The tied embedding is used twice, so ZeRO-3 gathers it twice
 * forward and twice backward. Backward visits the LM head first: that use keeps its part of
 * wte's gradient inside the model ("head", scratch, Vp×D) and writes nothing into the
 * stage's gradient buffer (zl_model_grads_final is 0 there); the embedding-lookup use, the
 * unit's last backward use, stores the whole gradient: dwte = head + scatter of dx, dwpe —
 * written, or added to what the gradient buffer holds (ZL_GRADS_ADD: accumulation over
 * micro-batches; head is this micro-batch's part only, so each micro-batch adds both parts
 * exactly once).
 *
 * Vocabulary. V real entries (256 byte-level by default), padded to Vp = a multiple of 64
 * (GEMM-friendly; 50257 -> 50304, as llm.c does). The padding rows are real parameters
 * (counted in Ψ, initialised to zero); the loss masks their logits, so their gradient is 0
 * and they stay 0. Data is byte-level: token = byte (or the synthetic stream, below).
 *
 * Data. Row g of the sample stream is a window of T+1 tokens (inputs = the first T,
 * targets = the last T), a function of (seed, g) only, so rank r's micro-batch depends on
 * (seed, step, rank) alone and N × B rows train like 1 × N·B:
 *   synthetic (default): a first token from the hash, then each next token is 7·tok + 1
 *     (mod V) with probability 3/4, else a hashed token: a learnable bigram stream;
 *   --data FILE: the window starting at hash(seed, g) mod (len - T) of the file's bytes
 *     (memory-mapped read-only: the page cache, not an allocation).
 *
 * Memory (bytes per rank, 16-bit S = 2; R = B·T rows of one micro-batch; everything
 * allocated once; A = the attention's saved state per block: 2·B·H·T² for P with
 * --attention strided, 4·B·H·T for the fp32 row log-sum-exps with --attention fused):
 *   activations  2·[(L+1)·RD + 15·L·RD + RD + R·Vp] + L·A + 4·[4·L·R + 2·R]
 *       per block: LN1 out, qkv (3), attention out, x_mid, LN2 out, h (4), a (4) = 15·RD,
 *       A, and LN mean/rstd (fp32); plus the block inputs (L+1), the final LN's
 *       output and stats, and the logits (R·Vp, overwritten by their gradient by the loss).
 *       With checkpoint (--checkpoint-activations) the per-block terms are allocated for one
 *       block: forward keeps only the block inputs, and backward first recomputes the block's
 *       forward (all but its last GEMM, whose output is the next block's input) into them.
 *       The recompute is the same kernels on the same inputs: the same bits, so training is
 *       bitwise identical with and without checkpointing.
 *   scratch      2·[9·RD + Vp·D] + 4·[3R + Vp + 1] + 4·(R + K)
 *                + strided 2·[3·RD + B·H·T²] | fused 4·B·H·T
 *       dres, dln, dh (4), qkv|dqkv (3), the LM head's wte gradient; strided: a qkvr-sized
 *       buffer (3) and dP; fused: Dl, backward's rowsum(dout ⊙ out); tokens, targets, order
 *       (R each) and bucket (Vp+1) as int32; row losses and the K losses of a step (one per
 *       micro-batch, model.h)
 *   host staging 4·[3R + Vp + 1]: the batch prepared on the host (model.h: zl_model_host_bytes)
 *
 * defines: zl_gpt_* (layout inline; buffers and kernels in gpt.c, token streams in gpt_data.c). */
#ifndef ZL_GPT_H
#define ZL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"
#include "../kernels/gpt_kernels.h"

/* ---- layout ---------------------------------------------------------------------------- */
static inline int zl_gpt_padded_vocab(int V) { return (V + 63) / 64 * 64; }

static inline size_t zl_gpt_embed_params(size_t Vp, size_t T, size_t D) { return (Vp + T) * D; }
static inline size_t zl_gpt_block_params(size_t D) { return 12 * D * D + 13 * D; }
static inline size_t zl_gpt_final_params(size_t D) { return 2 * D; }

/* Offsets of a block's tensors inside its unit. */
static inline size_t zl_gpt_off_ln1_g(size_t D) { (void)D; return 0; }
static inline size_t zl_gpt_off_ln1_b(size_t D) { return D; }
static inline size_t zl_gpt_off_Wqkv(size_t D) { return 2 * D; }              /* D×3D */
static inline size_t zl_gpt_off_bqkv(size_t D) { return 2 * D + 3 * D * D; }   /* 3D */
static inline size_t zl_gpt_off_Wo(size_t D) { return 5 * D + 3 * D * D; }     /* D×D */
static inline size_t zl_gpt_off_bo(size_t D) { return 5 * D + 4 * D * D; }
static inline size_t zl_gpt_off_ln2_g(size_t D) { return 6 * D + 4 * D * D; }
static inline size_t zl_gpt_off_ln2_b(size_t D) { return 7 * D + 4 * D * D; }
static inline size_t zl_gpt_off_Wfc(size_t D) { return 8 * D + 4 * D * D; }   /* D×4D */
static inline size_t zl_gpt_off_bfc(size_t D) { return 8 * D + 8 * D * D; }    /* 4D */
static inline size_t zl_gpt_off_Wproj(size_t D) { return 12 * D + 8 * D * D; } /* 4D×D */
static inline size_t zl_gpt_off_bproj(size_t D) { return 12 * D + 12 * D * D; }

/* One named term of a byte formula (zerocalc prints them; the sum is the formula). */
typedef struct {
    const char *name;
    double bytes;
} zl_gpt_term;
#define ZL_GPT_MAX_TERMS 16

/* The activation terms without checkpointing (see the top of this file); returns the count.
 * With checkpoint = 1: what activation checkpointing keeps instead — every block's input
 * (L+1)·RD, the final LN and logits as before, plus one block's full activations, alive
 * while that block is recomputed for its backward (ZeRO paper §3.2: ~33% more compute). */
int zl_gpt_activation_terms(zl_gpt_dims d, int layers, int checkpoint, zl_gpt_term *out);
double zl_gpt_activation_sum(zl_gpt_dims d, int layers, int checkpoint);
size_t zl_gpt_scratch_bytes(zl_gpt_dims d, size_t micro_batches);
size_t zl_gpt_host_bytes(zl_gpt_dims d);

/* ---- running ----------------------------------------------------------------------------- */
typedef struct {
    int L, K;
    int checkpoint;      /* 1: the per-block activations below hold one block (recomputed in backward) */
    zl_gpt_dims d;
    const unsigned char *text; /* --data: the file, mapped read-only; NULL: the synthetic stream */
    size_t text_len;
    /* activations (saved by forward for backward), block b at b × the per-block size (at 0
     * when checkpointing) */
    zl_half *x;          /* (L+1)·R·D: block inputs; x[L] is the final LN's input */
    zl_half *ln1, *ln2;  /* L·R·D each: LayerNorm outputs */
    float *ln1_stat, *ln2_stat; /* L·2R each: mean (R) then rstd (R) */
    zl_half *qkvr;       /* L·3·R·D: q, k, v — per head, [3][B][H][T][hd] (strided); qkv's R×3D (fused) */
    zl_half *P;          /* L·B·H·T·T: attention probabilities (strided attention; else NULL) */
    float *lse;          /* L·B·H·T: each query row's log-sum-exp (fused attention; else NULL) */
    zl_half *atty;       /* L·R·D: attention output, before the projection */
    zl_half *xmid;       /* L·R·D: x + attention branch */
    zl_half *h, *a;      /* L·R·4D each: MLP pre-activation and gelu(h) */
    zl_half *lnf;        /* R·D */
    float *lnf_stat;     /* 2R */
    zl_half *logits;     /* R·Vp: logits, then (after the loss) their gradient */
    /* scratch */
    int32_t *tokens, *targets, *order, *bucket; /* R, R, R, Vp+1 */
    zl_half *dres, *dln; /* R·D each: residual-stream gradient, a LayerNorm's output gradient */
    zl_half *dh;         /* R·4D */
    zl_half *buf3;       /* R·3D: qkv (forward), dqkv (backward) */
    zl_half *buf3r;      /* 3·R·D: attention output per head (forward), dqkvr (backward); strided only */
    zl_half *dP;         /* B·H·T·T; strided only */
    float *Dl;           /* B·H·T: backward's rowsum(dout ⊙ out); fused only */
    zl_half *head;       /* Vp·D: the LM head's part of wte's gradient, until use 0's backward */
    float *row_loss;     /* R */
    float *loss;         /* K: one per micro-batch of the step (device) */
    float *loss_host;    /* K: their copy on the host (untracked, like the MLP's) */
    void *workspace;     /* zl_gpt_workspace_bytes(d) */
    int32_t *host;       /* host staging: tokens, targets, order, bucket (3R + Vp + 1) */
} zl_gpt;

void zl_gpt_create(zl_gpt *m, int layers, zl_gpt_dims d, int micro_batches, int checkpoint, const char *data_path);
/* --data: a regular file of more than T bytes that opens. 0, or -1 with one line in err. */
int zl_gpt_check_data(const char *path, int T, char *err, size_t n);
void zl_gpt_free(zl_gpt *m);
void zl_gpt_init_range(int layers, zl_gpt_dims d, int u, size_t unit_off, size_t begin, size_t end, uint64_t seed,
                       zl_half *dst, zl_stream s);
void zl_gpt_load_batch(zl_gpt *m, uint64_t seed, uint64_t row0, zl_stream s);
void zl_gpt_forward(zl_gpt *m, int k, const zl_half *p, zl_stream s);
float *zl_gpt_loss(zl_gpt *m, int micro, float loss_scale, zl_stream s);
float zl_gpt_loss_sum(zl_gpt *m, zl_stream s);
void zl_gpt_backward(zl_gpt *m, int k, const zl_half *p, zl_half *g, zl_grads_mode mode, zl_stream s);

/* gpt_data.c: row g's window of T+1 tokens (host), and the stable token order of a batch. */
void zl_gpt_sample_row(const unsigned char *text, size_t text_len, uint64_t seed, uint64_t g, int T, int V,
                       int32_t *window);
void zl_gpt_token_order(const int32_t *tokens, int R, int Vp, int32_t *order, int32_t *bucket);

#endif
