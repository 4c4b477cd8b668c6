/* util.c — fatal errors with location, MPI error strings, FNV-1a, a monotonic clock. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile int g_ending;
void zl_set_ending(void) { g_ending = 1; }
int zl_is_ending(void) { return g_ending; }
void zl_wait_for_the_end(void) {
    for (;;) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
}

void zl_fatal_at(const char *file, int line, const char *fmt, ...) {
    if (g_ending) zl_wait_for_the_end();
    int rank = -1, inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* One write: when every rank fails at once (out of memory), another rank's MPI_Abort can end
     * this one between two writes and leave half a line. */
    char msg[2048];
    int n = snprintf(msg, sizeof msg - 1, "zerolab[rank %d]: %s:%d: ", rank, file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && n < (int)sizeof msg - 1) vsnprintf(msg + n, sizeof msg - 1 - (size_t)n, fmt, ap);
    va_end(ap);
    strcat(msg, "\n");
    fputs(msg, stderr);
    zl_abort_job(1);
}

void zl_abort_job(int code) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    fflush(stdout);
    fflush(stderr);
    if (inited && !finalized) {
        /* MPICH's launcher ends every process the moment one aborts, and drops what they wrote
         * and it had not forwarded yet: at N = 2 on a loaded 2-core machine, 1 out-of-memory
         * failure in 30 ended with exit 1 and not one line. A quarter second lets it read the
         * pipes first. */
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    exit(code);
}

void zl_mpi_check_at(int err, const char *call, const char *file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    zl_fatal_at(file, line, "MPI call failed: %s: %.*s", call, len, msg);
}

uint64_t zl_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

double zl_wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double zl_median(double *v, size_t n) {
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void *zl_host_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) zl_fatal("out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

int zl_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    /* a directory one may write but not read (a drop box, mode 1733) cannot be opened to sync:
     * the rename in it is done, and failing now would report a finished output as lost */
    if (fd < 0) return errno == EACCES || errno == EPERM ? 0 : errno;
    int e = fsync(fd) ? errno : 0;
    close(fd);
    return e == EINVAL ? 0 : e;
}

int zl_test_hold_ms(const char *var, int rank) {
    const char *v = getenv(var);
    int r, ms;
    return v && sscanf(v, "%d:%d", &r, &ms) == 2 && r == rank && ms > 0 ? ms : 0;
}

int zl_same_inode(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

int zl_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && zl_same_inode(&sa, &sb);
}

void zl_path_parent(char *out, size_t n, const char *path) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    while (slash && slash > out && slash[1] == '\0') *slash = '\0', slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

int zl_path_within(const char *resolved, const struct stat *dir) {
    char *p = strdup(resolved);
    if (!p) zl_fatal("out of host memory");
    int hit = 0;
    for (char *slash; !hit;) {
        struct stat st;
        hit = !stat(p, &st) && zl_same_inode(&st, dir);
        if (!(slash = strrchr(p, '/')) || slash == p) break; /* "/" itself is not walked to */
        *slash = '\0';
    }
    free(p);
    return hit;
}
