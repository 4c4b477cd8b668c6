/* comm.h — collective wrappers that record what they send.
 *
 * Every collective a stage issues goes through these three calls. Each call is
 * logged with its op, dtype, element count, S (bytes of the full logical tensor),
 * the ring wire bytes one rank sends (the nccl-tests convention):
 *     all-reduce 2(N-1)/N·S,   reduce-scatter and all-gather (N-1)/N·S
 * and a purpose label; events around it on the communication stream give its time.
 * These logs are the report's "measured" traffic: nothing is inferred from sizes
 * the program did not actually send. */
#ifndef ZL_COMM_H
#define ZL_COMM_H

#include <stddef.h>

#include "../kernels/backend.h"

/* The last two are not collectives: --offload's copies between this rank's device and its
 * host (PCIe), logged the same way, their bytes = S (one rank, one copy), kept out of the
 * network totals. */
typedef enum { ZL_OP_ALLREDUCE = 0, ZL_OP_REDUCE_SCATTER, ZL_OP_ALLGATHER, ZL_OP_D2H, ZL_OP_H2D, ZL_NOPS } zl_op;
static inline int zl_op_is_copy(zl_op op) { return op == ZL_OP_D2H || op == ZL_OP_H2D; }

typedef enum {
    ZL_P_GRAD_SYNC = 0,      /* gradient all-reduce / reduce-scatter */
    ZL_P_GATHER_FWD,         /* stage 3: gather a unit before its forward */
    ZL_P_GATHER_BWD,         /* stage 3: gather a unit again before its backward */
    ZL_P_GATHER_STEP,        /* stages 1-2: gather updated fp16 slices after Adam */
    ZL_P_CONTROL,            /* tiny control values: the loss; from ZeRO-1 on also the gradient statistics */
    ZL_P_GATHER_FINAL,       /* stage 3: gather for param_hash after the last step; not per step */
    ZL_P_OFFLOAD_GRADS,      /* --offload: this rank's 16-bit gradient slices, device -> host */
    ZL_P_OFFLOAD_PARAMS,     /* --offload: its new 16-bit parameter slices, host -> device */
    ZL_NPURPOSES
} zl_purpose;

/* Offload copies cross PCIe, not the network: their own total (transfer bytes per step). */
static inline int zl_purpose_is_transfer(zl_purpose p) { return p == ZL_P_OFFLOAD_GRADS || p == ZL_P_OFFLOAD_PARAMS; }
/* The per-step totals (wire_bytes_per_step) count gradient and parameter traffic only:
 * not the tiny control all-reduce, not stage 3's one-off final gather, not offload copies. */
static inline int zl_purpose_in_step_total(zl_purpose p) {
    return p != ZL_P_CONTROL && p != ZL_P_GATHER_FINAL && !zl_purpose_is_transfer(p);
}

const char *zl_op_name(zl_op op);
const char *zl_purpose_name(zl_purpose p);

/* Wire bytes one rank sends for a collective over a tensor of S bytes (ring). */
double zl_wire_bytes(zl_op op, double S, int world);
/* bus bandwidth factor: busbw = algbw · factor */
double zl_busbw_factor(zl_op op, int world);

/* Aggregated over the measured steps, per (op, purpose, dtype). */
typedef struct {
    long calls;           /* total calls */
    double S_bytes;       /* total bytes of the full logical tensors */
    double wire_bytes;    /* total wire bytes sent by this rank */
    double ms;            /* total time (timed steps only) */
    double timed_S_bytes; /* S of the timed calls, for algbw */
    long timed_calls;
} zl_comm_stat;

/* Set up logging: max_per_step collectives (and copies) per step, room for twice as many (a step
 * about to be saved runs two updates); their events are created now, so logging allocates
 * nothing later. world = N. */
void zl_comm_init(int world, int max_per_step);
void zl_comm_finalize(void);

/* Collectives, issued on stream s. Same in-place rules as backend.h. `unit` names the
 * shard unit the tensor belongs to (-1: none, e.g. a control value); the watchdog and
 * the report use it. Each call moves the watchdog's progress mark. */
void zl_allreduce(void *buf, size_t count, zl_dtype t, zl_purpose why, int unit, zl_stream s);
void zl_reduce_scatter(const void *send, void *recv, size_t recv_count, zl_dtype t, zl_purpose why, int unit,
                       zl_stream s);
void zl_allgather(const void *send, void *recv, size_t send_count, zl_dtype t, zl_purpose why, int unit,
                  zl_stream s);
/* --offload's copies of `count` elements, asynchronous on stream s (backend.h), logged like the
 * collectives (op d2h / h2d) and drawn on the timeline's copy lane. */
void zl_copy_d2h(void *host, const void *dev, size_t count, zl_dtype t, zl_purpose why, int unit, zl_stream s);
void zl_copy_h2d(void *dev, const void *host, size_t count, zl_dtype t, zl_purpose why, int unit, zl_stream s);

/* Bracket one training step. step_end must be called once the communication stream
 * has finished (after a zl_stream_sync): it reads the events and folds this step's log
 * into the totals. `timed` = 0 for the warm-up step (bytes counted, time not). */
void zl_comm_step_begin(void); /* also tells the watchdog a new step began */
void zl_comm_step_end(int timed);
/* Fold collectives issued outside the training steps (the last step's update, applied after
 * the loop or at the final save; stage 3's final gather for the hash) into the totals without
 * counting a step or their time. */
void zl_comm_end_extra(void);

/* Totals. stat[op][purpose][dtype] */
const zl_comm_stat *zl_comm_get(zl_op op, zl_purpose why, zl_dtype t);
long zl_comm_steps(void);       /* steps folded in */
long zl_comm_timed_steps(void); /* of which timed */

#endif
