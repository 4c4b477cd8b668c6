/* stdout_check.c — a tool's output lost on the way to stdout is an error (stdout_check.h). */
#include "stdout_check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "args.h" /* ZL_EXIT_*: plain enums, no MPI */

int zl_stdout_check(const char *prog, int earlier) {
    /* fflush first: its errno names the cause (ENOSPC, EBADF, EPIPE). A printf that failed
     * earlier leaves only the error flag, its cause gone: EIO stands for it — unless the caller
     * kept the errno of an earlier failed flush, which names it. */
    int e = fflush(stdout) ? (errno ? errno : EIO) : ferror(stdout) ? EIO : 0;
    if (earlier) e = earlier;
    if (!e) return ZL_EXIT_OK;
    fprintf(stderr, "%s: writing the report to stdout failed: %s\n", prog, strerror(e));
    return ZL_EXIT_RUNTIME;
}
