/* util.h — error handling and small helpers shared by every zerolab file.
 *
 * Failures are loud and located: each check prints file:line, the call that failed
 * and the library's own message, then MPI_Abort()s so no rank is left hanging in a
 * collective. Bad user input is a different path (common/args.c): one line, exit 2. */
#ifndef ZL_UTIL_H
#define ZL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Print "zerolab: file:line: <formatted message>" and abort every rank. */
void zl_fatal_at(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define zl_fatal(...) zl_fatal_at(__FILE__, __LINE__, __VA_ARGS__)
/* End the job with `code` once this rank's message is written: MPI_Abort (after a pause that
 * lets the launcher forward stderr) when MPI is up, else exit. */
void zl_abort_job(int code) __attribute__((noreturn));
/* calloc, or zl_fatal ("out of host memory") */
void *zl_host_calloc(size_t n, size_t size);

/* The watchdog is ending the job (exit 5): a failure the main thread meets from now on is
 * a consequence (an aborted communicator), not the cause, so zl_fatal waits quietly for
 * the watchdog's MPI_Abort instead of racing it with exit code 1. */
void zl_set_ending(void);
int zl_is_ending(void);
void zl_wait_for_the_end(void) __attribute__((noreturn));

/* MPI calls return an error code (we install MPI_ERRORS_RETURN); turn it into a message. */
void zl_mpi_check_at(int err, const char *call, const char *file, int line);
#define mpiCheck(call) zl_mpi_check_at((call), #call, __FILE__, __LINE__)

/* FNV-1a 64-bit, streaming: h = zl_fnv1a(ZL_FNV_OFFSET, data, n), then feed more. */
#define ZL_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t zl_fnv1a(uint64_t h, const void *data, size_t n);

double zl_wall_seconds(void); /* monotonic clock */

/* TEST ONLY: a hold hook VAR=r:ms (ZL_TEST_HOLD_RANK, ZL_TEST_HOLD_FINALIZE): ms for rank r, 0 for
 * any other rank, or when VAR is unset or not of that form. */
int zl_test_hold_ms(const char *var, int rank);

/* The median of v[0..n) (n > 0): the middle value, or the mean of the two middle ones. Sorts v. */
double zl_median(double *v, size_t n);

/* Paths. The directory that holds `path`: "a/b/" -> "a", "x" -> ".", "/x" -> "/". */
void zl_path_parent(char *out, size_t n, const char *path);
/* fsync a file or directory by its path: 0 or errno (a directory that cannot be fsynced, EINVAL
 * on some file systems, or opened, in a write-only drop box, counts as done). A rename is durable
 * once its directory is. */
int zl_fsync_path(const char *path);
/* Do two paths name one file or directory (any spelling, through links)? Both must exist. */
int zl_same_file(const char *a, const char *b);
struct stat;
/* One file: the same device and inode, whatever the paths that reached the two stats. */
int zl_same_inode(const struct stat *a, const struct stat *b);
/* Is `dir` the directory `resolved` (an absolute path, from realpath) or one above it? Compared
 * by device and inode while walking up, so any spelling of dir (a link, "..") is caught; "/"
 * itself never counts. */
int zl_path_within(const char *resolved, const struct stat *dir);

#endif
