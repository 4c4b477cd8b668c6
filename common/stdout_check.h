/* stdout_check.h — the command-line tools' last word on stdout.
 *
 * A result printed to a full disk, or to a closed or broken stdout, is lost; the stdio buffer
 * hides that until the final flush, so a tool that just returns 0 would report success. The
 * tools (zerocalc, zlckpt) call this once before exiting, the training programs through
 * zl_outputs_close (common/outputs.c). No MPI: zerocalc links it too. */
#ifndef ZL_STDOUT_CHECK_H
#define ZL_STDOUT_CHECK_H

/* fflush(stdout) and check its error flag: 0 if everything printed reached stdout, else one
 * line "PROG: writing the report to stdout failed: <strerror>" on stderr and ZL_EXIT_RUNTIME.
 * earlier: the errno of a flush that failed before (0 if none), the cause the line names. */
int zl_stdout_check(const char *prog, int earlier);

#endif
