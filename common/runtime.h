/* runtime.h — process start-up and shut-down shared by the four programs:
 * MPI, argument checks agreed by all ranks, node-local rank and CPU share, backend init. */
#ifndef ZL_RUNTIME_H
#define ZL_RUNTIME_H

#include <stdint.h>
#include <stdio.h>

#include "args.h"
#include "../kernels/backend.h"

typedef struct {
    int rank, world, local_rank, local_size;
    int host_threads;  /* --offload: this rank's share of its node's CPUs (zl_offload_threads), host Adam's */
    const char *prog;
    int argc;          /* the command line as given, for the report's "run" record */
    char *const *argv;
    zl_config cfg;
} zl_runtime;

/* MPI_Init, parse and validate flags on every rank, agree on the outcome (a bad flag
 * on any rank, or different flags on different ranks, stops all of them with exit 2
 * and one line from the lowest such rank; --help on any rank prints the usage once and
 * exits 0 on all), open the output files (outputs.h), start the watchdog
 * (watchdog.h), find the node's ranks and, with --offload, this rank's share of their CPUs (host_threads),
 * then initialise the backend. Nothing is allocated before the flags are
 * known to be good. */
void zl_runtime_start(zl_runtime *rt, int stage, int argc, char **argv);
/* Collective: stop the watchdog, shut the backend and MPI down; returns `status`, the
 * program's exit code (main: `return zl_runtime_finish(&rt, status);`). */
int zl_runtime_finish(zl_runtime *rt, int status);
/* Every rank stops with `code` before anything was allocated (the lowest rank that
 * has a reason prints it; see zl_preflight). Collective. */
void zl_runtime_exit(zl_runtime *rt, int code) __attribute__((noreturn));
/* Bad input that some ranks found (bad = 1 on those): the lowest such rank prints
 * "<prog>: <err>" (one line) and every rank stops with exit 2 (zl_runtime_exit). Returns
 * where no rank found any. Collective: the flags, the launch, the preflight, --resume. */
void zl_runtime_refuse_if_any(zl_runtime *rt, int bad, const char *err);

/* Streaming FNV-1a over the full, unpadded fp16 parameter vector, unit by unit, with
 * an optional raw dump (rank 0). The unit is copied to host staging first. */
typedef struct {
    uint64_t hash;
    FILE *dump;
} zl_param_digest;
void zl_digest_begin(zl_param_digest *d, const zl_runtime *rt);
void zl_digest_unit(zl_param_digest *d, const zl_half *dev_unit, size_t n, zl_half *host_staging, zl_stream s);
uint64_t zl_digest_end(zl_param_digest *d);

#endif
