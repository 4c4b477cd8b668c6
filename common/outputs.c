/* outputs.c — output files opened early, failures reported late (see outputs.h). */
#define _GNU_SOURCE /* realpath */
#include "outputs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "replace.h"
#include "stdout_check.h"
#include "util.h"

typedef struct {
    const char *flag;
    const char *path;
    FILE *f;     /* an existing file, kept open; NULL for a new one until the run writes it */
    int started; /* zl_output_begin was called: the file now holds this run's output */
    int created; /* the file did not exist: created to prove it can be, removed at once, created
                  * again when the run writes it — so a job killed before then (MPI_Abort runs no
                  * atexit handler) leaves no empty file where a result is expected */
    int err;     /* first errno of a failed write, 0 if none */
    int beside;  /* written into rep.tmp and renamed onto the file at `path` (replace.h); 0: in place */
    zl_replace rep; /* rep.tmp "" once renamed (a later failure did not keep the earlier file) */
} output;

static output g_out[ZL_OUT_N];
static int g_stdout_err; /* first errno of a failed flush of stdout */
static const char *g_prog = "zerolab";

/* A character device such as /dev/full accepts open() and fails at the first write:
 * try one byte now. (A regular file is only truncated later, when the run writes it.) */
static int probe_device(output *o) {
    struct stat st;
    if (fstat(fileno(o->f), &st) || !S_ISCHR(st.st_mode)) return 0;
    if (fputc('\n', o->f) == EOF || fflush(o->f)) return errno ? errno : EIO;
    return 0;
}

static int open_one(output *o, char *msg, size_t n) {
    int fd = open(o->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    o->created = fd >= 0;
    /* kept as it is until written; O_NONBLOCK: a FIFO no one reads would block here, before the
     * watchdog runs, for ever (ENXIO instead), and is cleared at once for the writes */
    if (fd < 0 && errno == EEXIST) fd = open(o->path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    int e = fd < 0 ? errno : 0;
    if (!e && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) e = errno, close(fd);
    if (!e && !(o->f = fdopen(fd, "w"))) e = errno, close(fd);
    if (!e) e = probe_device(o);
    if (e == ENXIO) snprintf(msg, n, "%s: '%s' is a FIFO no process reads: start its reader first", o->flag, o->path);
    else if (e) snprintf(msg, n, "%s: cannot write '%s': %s", o->flag, o->path, strerror(e));
    return e;
}

/* Is the file `st` the one at `path` (NULL or empty: no file)? */
static int is_at(const struct stat *st, const char *path) {
    struct stat sp;
    return path && *path && !stat(path, &sp) && zl_same_inode(st, &sp);
}

/* An output that is the file this run's stdout or stderr goes to (a shell's `> out.txt`): the
 * output truncates it when written and the report then writes over the output. */
static const char *is_terminal_stream(const output *o) {
    struct stat so, ss;
    if (!o->f || fstat(fileno(o->f), &so) || !S_ISREG(so.st_mode)) return NULL;
    for (int fd = 1; fd <= 2; fd++)
        if (!fstat(fd, &ss) && zl_same_inode(&ss, &so)) return fd == 1 ? "stdout" : "stderr";
    return NULL;
}

/* Two flags naming one file (also through a link or another spelling of the path). */
static int same_file(const output *a, const output *b) {
    struct stat sa, sb;
    return a->f && b->f && !fstat(fileno(a->f), &sa) && !fstat(fileno(b->f), &sb) && zl_same_inode(&sa, &sb) &&
           S_ISREG(sa.st_mode);
}

/* Is the file `st` one of the run's inputs: the --data text, the GEMM table or a file of the
 * --resume checkpoint (writing it would destroy what the run reads)? */
static int is_input_file(const struct stat *st, const zl_config *c, const char **what) {
    *what = "--data";
    if (is_at(st, c->data_path)) return 1;
    *what = "ZL_GEMM_TABLE";
    if (is_at(st, getenv("ZL_GEMM_TABLE"))) return 1;
    *what = "--resume";
    DIR *d = c->resume_dir[0] ? opendir(c->resume_dir) : NULL;
    int hit = 0;
    char path[ZL_PATH_MAX + 300];
    for (struct dirent *e; d && !hit && (e = readdir(d));) {
        snprintf(path, sizeof path, "%s/%s", c->resume_dir, e->d_name);
        hit = is_at(st, path);
    }
    if (d) closedir(d);
    return hit;
}

/* An output that is one of the run's inputs. Only an existing file can be. */
static int is_input(const output *o, const zl_config *c, const char **what) {
    struct stat so;
    if (o->created || !o->f || fstat(fileno(o->f), &so) || !S_ISREG(so.st_mode)) return 0;
    return is_input_file(&so, c, what);
}

/* An output inside the --save directory, or its DIR.zl-tmp or DIR.zl-old, or one of them itself
 * (a DIR that does not exist yet is the file the output just created): the save replaces that
 * directory as a whole and writes and clears the other two. */
static int inside_save_dir(const output *o, const zl_config *c) {
    if (!c->save_dir[0]) return 0;
    char dir[ZL_PATH_MAX], real[PATH_MAX], name[ZL_PATH_MAX + 16];
    struct stat save, out;
    zl_path_parent(dir, sizeof dir, o->path);
    int have_out = o->f && !fstat(fileno(o->f), &out);
    static const char *const suffix[] = {"", ".zl-tmp", ".zl-old"};
    for (int i = 0; i < 3; i++) {
        zl_ckpt_sibling(name, sizeof name, c->save_dir, suffix[i]);
        if (stat(name, &save)) continue;
        if (have_out && zl_same_inode(&save, &out)) return 1;
        if (realpath(dir, real) && zl_path_within(real, &save)) return 1;
    }
    return 0;
}

/* A file this run reads or writes (another output), which must not be taken for a leftover. */
static int in_use(const struct stat *st, const zl_config *c) {
    const char *what;
    struct stat so;
    for (int i = 0; i < ZL_OUT_N; i++)
        if (g_out[i].f && !fstat(fileno(g_out[i].f), &so) && zl_same_inode(&so, st)) return 1;
    return is_input_file(st, c, &what);
}

/* A regular file is written beside it, in PATH.zl-tmp, and renamed over it once whole, so a run
 * ended while it writes (a kill, the watchdog, a full disk) leaves the earlier result as it was.
 * In place instead: a device or pipe; a file with other hard links (they would keep the old
 * content); a directory this user cannot add a file to; a PATH.zl-tmp that is not a killed run's
 * leftover (not a regular file, or a file this run uses). A link's target is what gets replaced. */
static void choose_beside(output *o, const zl_config *c) {
    struct stat st, old;
    o->beside = 0;
    if (!o->f || fstat(fileno(o->f), &st) || !S_ISREG(st.st_mode) || st.st_nlink > 1) return;
    if (zl_replace_resolve(&o->rep, o->path)) return;
    const char *tmp = o->rep.tmp;
    if (!lstat(tmp, &old) && (!S_ISREG(old.st_mode) || in_use(&old, c) || unlink(tmp))) return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600); /* can the directory take it? */
    if (fd < 0) return;
    close(fd);
    o->beside = !unlink(tmp);
}

static int open_all(const zl_runtime *rt, char *msg, size_t n) {
    if (rt->cfg.save_dir[0] && zl_ckpt_probe_dir(rt->cfg.save_dir, rt->cfg.resume_dir, msg, n)) return 1; /* --save DIR */
    g_out[ZL_OUT_JSON] = (output){.flag = "--json", .path = rt->cfg.json_path};
    g_out[ZL_OUT_DUMP] = (output){.flag = "--dump-params", .path = rt->cfg.dump_path};
    g_out[ZL_OUT_TRACE] = (output){.flag = "--trace", .path = rt->cfg.trace_path};
    const char *input;
    for (int i = 0; i < ZL_OUT_N; i++) {
        output *o = &g_out[i];
        if (!o->path[0]) continue;
        if (open_one(o, msg, n)) return 1;
        for (int j = 0; j < i; j++)
            if (same_file(o, &g_out[j])) {
                snprintf(msg, n, "%s and %s name the same file '%s'", g_out[j].flag, o->flag, o->path);
                return 1;
            }
        if (is_input(o, &rt->cfg, &input)) {
            snprintf(msg, n, "%s '%s' is a file this run reads (%s): refusing to overwrite it", o->flag, o->path, input);
            return 1;
        }
        if (inside_save_dir(o, &rt->cfg)) {
            snprintf(msg, n, "%s '%s' is (inside) the --save directory '%s' or the DIR.zl-tmp, DIR.zl-old beside it, "
                     "which the save replaces as a whole", o->flag, o->path, rt->cfg.save_dir);
            return 1;
        }
        const char *stream = is_terminal_stream(o);
        if (stream) {
            snprintf(msg, n, "%s '%s' is the file this run's %s goes to: the two would write over each other", o->flag,
                     o->path, stream);
            return 1;
        }
    }
    for (int i = 0; i < ZL_OUT_N; i++) choose_beside(&g_out[i], &rt->cfg);
    for (int i = 0; i < ZL_OUT_N; i++) /* every check passed: a new file waits until it is written */
        if (g_out[i].created) fclose(g_out[i].f), g_out[i].f = NULL, (void)unlink(g_out[i].path);
    return 0;
}

/* At exit on rank 0 (a refusal, an exit with a message): files this run created and never wrote
 * are removed (a later refusal may come after open_all kept them open), and so is a PATH.zl-tmp
 * not renamed (zl_outputs_close clears `beside` once done). */
static void remove_unwritten(void) {
    for (int i = 0; i < ZL_OUT_N; i++) {
        if (g_out[i].created && g_out[i].f && !g_out[i].started) (void)unlink(g_out[i].path);
        if (g_out[i].started && g_out[i].beside && g_out[i].rep.tmp[0]) (void)unlink(g_out[i].rep.tmp);
    }
}

void zl_outputs_open(const zl_runtime *rt) {
    g_prog = rt->prog;
    if (rt->rank == 0) atexit(remove_unwritten);
    char msg[ZL_PATH_MAX + 256] = "";
    int bad = rt->rank == 0 ? open_all(rt, msg, sizeof msg) : 0;
    mpiCheck(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (!bad) return;
    if (rt->rank == 0) {
        fprintf(stderr, "%s: %s\n", rt->prog, msg);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(ZL_EXIT_INPUT);
}

/* The run's output goes to PATH.zl-tmp; the file at PATH stays as it is until the rename. */
static FILE *begin_beside(output *o, zl_output_id id) {
    o->started = 1;
    if (o->f) fclose(o->f), o->f = NULL; /* the earlier file, kept open for the start-up checks */
    o->rep.replaces = o->rep.replaces && !o->created; /* a file this run created has the umask's mode already */
    int e = zl_replace_begin(&o->rep);
    if (e) zl_output_failed(id, e);
    return o->f = o->rep.f;
}

FILE *zl_output_begin(zl_output_id id) {
    output *o = &g_out[id];
    if (o->beside) return o->started ? o->f : begin_beside(o, id);
    if (o->created && !o->started && !o->err) { /* created again now (open_all removed it) */
        int fd = open(o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
            zl_output_failed(id, errno);
            if (fd >= 0) close(fd);
            return NULL;
        }
    }
    if (!o->f) return NULL;
    if (!o->started) {
        o->started = 1;
        /* Truncate now, not at open: ftruncate fails (harmlessly) on devices and pipes. */
        struct stat st; /* a regular file not truncated would keep the old output's tail */
        if (fflush(o->f) == 0 && ftruncate(fileno(o->f), 0) && !fstat(fileno(o->f), &st) && S_ISREG(st.st_mode))
            zl_output_failed(id, errno);
        rewind(o->f);
    }
    return o->f;
}

void zl_output_failed(zl_output_id id, int err) {
    if (!g_out[id].err) g_out[id].err = err ? err : EIO;
}

void zl_stdout_flush(void) {
    if (fflush(stdout) && !g_stdout_err) g_stdout_err = errno ? errno : EIO;
}

/* A whole PATH.zl-tmp (flushed to the disk) replaces PATH; one that failed is removed. */
static void finish_beside(output *o, zl_output_id id) {
    o->f = NULL; /* rep.f: the commit or the discard closes it */
    if (o->err) zl_replace_discard(&o->rep);
    else {
        int e = zl_replace_commit(&o->rep, NULL);
        if (e) zl_output_failed(id, e);
    }
    o->beside = 0;
}

int zl_outputs_close(void) {
    int status = 0;
    for (int i = 0; i < ZL_OUT_N; i++) {
        output *o = &g_out[i];
        int beside = o->started && o->beside;
        if (beside) finish_beside(o, (zl_output_id)i); /* the commit sees a write error (ferror) itself */
        else if (o->f) {
            int had_error = ferror(o->f);
            if (fclose(o->f)) zl_output_failed((zl_output_id)i, errno);
            if (had_error) zl_output_failed((zl_output_id)i, 0);
        }
        o->f = NULL;
        if (o->err) {
            fprintf(stderr, "%s: %s: writing '%s' failed: %s%s\n", g_prog, o->flag, o->path, strerror(o->err),
                    beside && !o->created && o->rep.tmp[0] ? " (the earlier file is kept as it was)" : "");
            status = ZL_EXIT_RUNTIME;
        }
    }
    /* The report itself: stdout redirected to a full disk must not exit 0. */
    if (zl_stdout_check(g_prog, g_stdout_err)) status = ZL_EXIT_RUNTIME;
    fflush(stderr);
    return status;
}
