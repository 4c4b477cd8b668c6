/* formulas.h — what each rank *should* hold and send, from first principles.
 *
 * Every number here is computed from the unit sizes, N, the stage and the model's
 * shape only — never from anything the program measured — so a test comparing the
 * two can fail. Two flavours:
 *   exact: this program's buffers, padding included (measured must equal it to the byte)
 *   paper: the ZeRO paper's idealised model states (2Ψ + 2Ψ + 12Ψ, /N where sharded)
 * Stages: 0 = DDP, 1 = P_os, 2 = P_os+g, 3 = P_os+g+p. */
#ifndef ZL_FORMULAS_H
#define ZL_FORMULAS_H

#include <stddef.h>

#include "alloc.h"
#include "comm.h"
#include "partition.h"
#include "../model/model.h"

typedef struct {
    int stage;            /* 0..3 */
    zl_model_shape model; /* its activation and scratch bytes come from the model's formulas */
    int prefetch;         /* stage 3: units gathered ahead (gather buffers = 1 + prefetch) */
    int grad_sync_allreduce; /* stage 1 variant: all-reduce + all-gather (the PyTorch from-scratch post) */
    size_t workspace_bytes; /* what the backend's kernels declare they need */
    int steps, skipped_steps; /* steps run, and how many skipped their update (no gather after Adam) */
    int offload;              /* stages 2-3 --offload: master, m, v on the host (common/offload.h) */
    int early_update;         /* --offload with the update known (numerics.h): host Adam ran in the
                               * backward, and the copy up ran in a step that diverged too */
    int diverged;             /* 1: the last step diverged (counted in skipped_steps: no gather after it) */
    int no_param_hash;        /* --no-param-hash: no final gather for the hash (stage 3) */
} zl_formula_config;

/* Exact per-category bytes for one rank; model_states = first five (on the device);
 * peak_total = sum of device categories (everything is allocated before step 1 and kept).
 * With --offload the master, m and v move to their host categories:
 *     device model states  stage 2: 2Ψ_full + 2Ψ_pad/N    stage 3: 4Ψ_pad/N
 *     host                 12Ψ_pad/N (master, m, v) + 2Ψ_pad/N pinned staging */
typedef struct {
    size_t bytes[ZL_MEM_NCAT];
    size_t model_states;
    size_t host_states; /* --offload: host master + m + v */
    size_t peak_total;
} zl_mem_formula;

void zl_formula_memory(const zl_partition *p, const zl_formula_config *c, zl_mem_formula *out);

/* What one rank allocates before step 1, by where it lives — the preflight's "needed"
 * (common/preflight.c) and zerocalc --max-layers's, so the two cannot disagree. on_gpu = 0:
 * the CPU backend, whose device buffers are host memory too. device = peak_total (0 on the
 * CPU backend); host = the host categories (+ peak_total on the CPU backend). */
typedef struct {
    double device, host, states, activations, buffers;
    double host_states; /* of host: --offload's fp32 master, Adam m and v */
} zl_need;
zl_need zl_formula_need(const zl_partition *p, const zl_formula_config *c, int on_gpu);
/* Does one rank's need fit its share: device <= dev_free (per GPU) and host x local_ranks <=
 * host_avail (per node, shared by its ranks)? 0 for either = unknown: not checked. */
int zl_need_fits(zl_need n, int local_ranks, size_t dev_free, size_t host_avail);

/* Host staging for param_hash/dump: one unpadded unit of fp16. */
size_t zl_formula_host_staging_bytes(const zl_partition *p);
/* Checkpoint staging (host): ZL_CKPT_CHUNK_ELEMS fp32 elements, or the largest padded unit
 * if smaller. Every run allocates it, so a save inside the step loop allocates nothing. */
size_t zl_formula_ckpt_staging_bytes(const zl_partition *p);

/* The paper's per-device model states for Ψ parameters, N ranks, mixed precision
 * (K = 12): bytes[0..4] = params, grads, master, m, v; returns their sum:
 * stage 0: 16Ψ, 1: 4Ψ + 12Ψ/N, 2: 2Ψ + 14Ψ/N, 3: 16Ψ/N. */
double zl_paper_model_states(double psi, int world, int stage, double bytes[5]);

/* Wire bytes one rank sends per training step of K micro-batches (--accum), by purpose
 * (nccl-tests ring convention):
 *   DDP, ZeRO-1   2(N-1)/N·2Ψ_pad        gradients accumulate locally, one sync per step
 *   ZeRO-2        (K+1)(N-1)/N·2Ψ_pad    a reduce-scatter per micro-batch + one all-gather
 *   ZeRO-3        3K(N-1)/N·2Ψ_pad       gather fwd, gather bwd, reduce-scatter per micro-batch
 *                 --model gpt: + 2K(N-1)/N·2E_pad, E_pad = the embedding unit (wte, wpe) padded:
 *                 the tied LM head is a second use of it, gathered again forward and backward
 *   ZeRO-1 with --grad-sync allreduce: 3(N-1)/N·2Ψ_pad.
 * ZL_P_CONTROL is the fp32 loss all-reduce, once per micro-batch, and from ZeRO-1 on one 16-byte
 * all-reduce of the gradient statistics a step. total excludes control.
 * --offload adds copies, not network traffic: every step its 16-bit gradient slices d2h
 * (2Ψ_pad/N, after the last micro-batch), and each applied step the new 16-bit parameter
 * slices h2d (2Ψ_pad/N; a skipped step copies none back). */
typedef struct {
    double bytes[ZL_NPURPOSES];
    double calls[ZL_NPURPOSES];
    double total; /* sum over all purposes but control (and the final gather) */
    double transfer_total; /* --offload's PCIe copies: 2Ψ_pad/N d2h + (applied) 2Ψ_pad/N h2d */
} zl_comm_formula;

void zl_formula_comm(const zl_partition *p, const zl_formula_config *c, zl_comm_formula *out);
/* The paper's per-step volume (§7): 2Ψ elements for stages 0-2, 3Ψ for stage 3 —
 * in this project's units: bytes sent per rank, (N-1)/N · 2 bytes · that volume. */
double zl_paper_wire_bytes(double psi, int world, int stage);

/* ---- any precision layout (zerocalc, the sources' worked examples) --------------------
 * Bytes per parameter: P for the parameters, G for the gradients, K for optimizer state
 * (everything Adam keeps, including an fp32 master copy where there is one).
 *   mixed: P = 2, G = 2, K = 12 (the paper);  fp32: P = 4, G = 4, K = 8 (the PyTorch from-scratch post). */
typedef struct {
    double param_bytes, grad_bytes, k;
} zl_precision;
#define ZL_PRECISION_MIXED ((zl_precision){2, 2, 12})
#define ZL_PRECISION_FP32 ((zl_precision){4, 4, 8})

/* Model states per device for Ψ parameters on N ranks: P·Ψ·(1/N if stage ≥ 3) +
 * G·Ψ·(1/N if stage ≥ 2) + K·Ψ·(1/N if stage ≥ 1). parts (may be NULL) gets the three terms. */
double zl_state_bytes(double psi, double world, int stage, zl_precision p, double parts[3]);
/* Per-step communication volume as the paper counts it (§7), per device: DDP all-reduces the
 * gradients (2Ψ·G); stages 1-2 reduce-scatter gradients and all-gather parameters (Ψ·G + Ψ·P);
 * stage 3 gathers parameters twice (Ψ·G + 2Ψ·P). */
double zl_comm_volume_bytes(double psi, int stage, zl_precision p);
/* Ring wire bytes per rank per step: (N-1)/N of the volume. */
double zl_wire_bytes_step(double psi, double world, int stage, zl_precision p);
/* The largest Ψ whose model states fit in `memory` bytes per device (the paper's Table 2). */
double zl_max_params(double memory, double world, int stage, zl_precision p);
/* ZeRO-Offload (stages 2-3, --offload): the optimizer state K·Ψ/N moves to the host. Returns
 * the device's model states, P·Ψ (/N at stage 3) + G·Ψ/N; *host gets K·Ψ/N. */
double zl_offload_state_bytes(double psi, double world, int stage, zl_precision p, double *host);
/* The largest Ψ whose device model states fit in `memory` bytes with --offload. */
double zl_max_params_offload(double memory, double world, int stage, zl_precision p);
/* A value (e.g. in GB) in the digits of the paper's Table 1: below 10 two decimals, below
 * 100 one decimal (half-up, trailing zeros dropped), from 100 up the integer part — the
 * paper truncates there (docs/errata.md). */
void zl_paper_digits(double v, char *buf, size_t n);

#endif
