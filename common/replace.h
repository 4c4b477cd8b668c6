/* replace.h — a file written whole or not at all.
 *
 * The bytes go to PATH.zl-tmp beside the file, which is flushed to the disk and renamed over
 * PATH once complete: a reader never sees half a file, and a write cut short (a kill, the
 * watchdog, a full disk) leaves the earlier file as it was. A killed writer leaves PATH.zl-tmp,
 * which the next write of PATH replaces. Used by the trainer's --json/--trace/--dump-params
 * (common/outputs.c, which also decides when a file is better written in place), zlckpt export
 * --out, zlbatch --out and the GEMM table's save. A character device or a pipe (/dev/null,
 * /dev/stdout, a FIFO) cannot be replaced — a rename would put a regular file where the node was,
 * and neither can hold half a file — so it is written directly, through the same four calls. */
#ifndef ZL_REPLACE_H
#define ZL_REPLACE_H

#include <limits.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
    FILE *f;                /* open for writing between begin and commit: the temporary file, */
    int direct;             /* ... or the device or pipe itself (target; tmp is "") */
    int replaces;           /* an existing file: what replaces it gets its permissions, */
    mode_t mode;            /* ... these (a 0600 file stays 0600) */
    char target[PATH_MAX];  /* the file written: the path with its links resolved */
    char tmp[PATH_MAX + 8]; /* target + ".zl-tmp" */
} zl_replace;

/* Where `path` is written: an existing regular file (through symbolic links: the file they
 * name is replaced), a new one in an existing directory, or a character device or pipe (direct).
 * 0, or an errno: EISDIR (a directory, or a path ending in '/'), EINVAL (none of those: a block
 * device, a socket), ENAMETOOLONG, or what stat/realpath said of the file or its directory.
 * Nothing is created yet. */
int zl_replace_resolve(zl_replace *r, const char *path);
/* Create r->tmp (a regular file left there by a killed writer is removed first) and open it as
 * r->f, or open the device or pipe: 0 or an errno. */
int zl_replace_begin(zl_replace *r);
/* Flush r->f to the disk, close it and rename it onto r->target, then sync the directory (a
 * rename is durable once its directory is); a device or pipe is flushed and closed. 0, or the
 * errno of the step that failed (named in *step when step is not NULL), the temporary file then
 * removed. A write error seen by r->f (ferror) fails it too. r->tmp is "" once the rename is
 * done: a failure with r->tmp[0] == '\0' (the directory's sync) left the new file in place. */
int zl_replace_commit(zl_replace *r, const char **step);
/* Close and remove the temporary file: a write abandoned or failed. */
void zl_replace_discard(zl_replace *r);

#endif
