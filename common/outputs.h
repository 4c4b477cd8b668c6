/* outputs.h — every file a run writes, checked before anything is allocated.
 *
 * A run that ends with "cannot open --json" after an hour has lost its result. So each
 * output path (--json, --dump-params, --trace, and any later output flag) is opened on the rank
 * that writes it right after the ranks agree on the arguments; the verdict is shared,
 * and a path that cannot be written stops every rank with one line naming the flag,
 * the path and strerror(errno), exit 2. Two flags naming the same file are refused, and so is
 * an output that is an input of the run (--data, a --resume file) or lies inside the --save
 * directory. An existing file is not truncated until the run writes it, so a run refused for
 * another reason does not destroy an earlier result; a new file is created to prove it can be,
 * removed, and created again when the run writes it, so a run that dies first leaves none.
 * A regular file is written beside itself (PATH.zl-tmp) and renamed over PATH once whole and on
 * the disk, so a run ended while it writes (a kill, the watchdog, a full disk) leaves the earlier
 * result as it was; devices, pipes, hard-linked files and directories this user cannot add a file
 * to are written in place. Write failures later (disk full) are remembered, the report is still
 * printed, and the program exits 1 naming them. */
#ifndef ZL_OUTPUTS_H
#define ZL_OUTPUTS_H

#include <stdio.h>

#include "runtime.h"

typedef enum { ZL_OUT_JSON = 0, ZL_OUT_DUMP, ZL_OUT_TRACE, ZL_OUT_N } zl_output_id;

/* Collective. Rank 0 opens every requested output; on failure all ranks exit 2. */
void zl_outputs_open(const zl_runtime *rt);
/* The output's stream, truncated and positioned at the start; NULL if this rank does
 * not write it (not requested, or not rank 0). */
FILE *zl_output_begin(zl_output_id id);
/* A write to the output failed with errno `err` (kept: the first failure per output). */
void zl_output_failed(zl_output_id id, int err);
/* fflush(stdout), remembering the first failure (a report written to a full disk). */
void zl_stdout_flush(void);
/* Close every output; print one line per failed one to stderr. Returns 0, or
 * ZL_EXIT_RUNTIME if any write (or stdout) failed. Local: call on every rank. */
int zl_outputs_close(void);

#endif
