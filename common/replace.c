/* replace.c — a file written whole or not at all (see replace.h). */
#define _GNU_SOURCE /* realpath */
#include "replace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h" /* zl_path_parent, zl_fsync_path */

static int name_tmp(zl_replace *r) {
    return snprintf(r->tmp, sizeof r->tmp, "%s.zl-tmp", r->target) >= (int)sizeof r->tmp ? ENAMETOOLONG : 0;
}

/* A new file: its directory must exist; the name is kept as given, the directory resolved. */
static int resolve_new(zl_replace *r, const char *path) {
    char parent[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    if (strlen(path) >= sizeof parent) return ENAMETOOLONG;
    zl_path_parent(parent, sizeof parent, path);
    if (!realpath(parent, real)) return errno;
    struct stat st;
    if (!lstat(path, &st)) return ENOENT; /* a symbolic link to nothing: replacing it would drop the link */
    if (snprintf(r->target, sizeof r->target, "%s/%s", strcmp(real, "/") ? real : "", name) >= (int)sizeof r->target)
        return ENAMETOOLONG;
    return name_tmp(r);
}

int zl_replace_resolve(zl_replace *r, const char *path) {
    memset(r, 0, sizeof *r);
    size_t len = strlen(path);
    if (!len) return ENOENT;
    if (path[len - 1] == '/') return EISDIR; /* the rename would aim at the directory */
    struct stat st;
    if (stat(path, &st)) return errno == ENOENT ? resolve_new(r, path) : errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) { /* written in place, as given */
        r->direct = 1;
        return snprintf(r->target, sizeof r->target, "%s", path) >= (int)sizeof r->target ? ENAMETOOLONG : 0;
    }
    if (!S_ISREG(st.st_mode)) return EINVAL;
    if (!realpath(path, r->target)) return errno;
    r->replaces = 1, r->mode = st.st_mode & 07777;
    return name_tmp(r);
}

int zl_replace_begin(zl_replace *r) {
    if (r->direct) return (r->f = fopen(r->target, "w")) ? 0 : errno;
    struct stat old;
    /* a killed writer's leftover goes; anything else of that name (a link, a directory) stays,
     * and O_EXCL fails */
    if (!lstat(r->tmp, &old) && S_ISREG(old.st_mode) && unlink(r->tmp)) return errno;
    /* replacing a file: private (0600) until it has that file's permissions (fchmod ignores the
     * umask, as the file did) */
    int fd = open(r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, r->replaces ? 0600 : 0666);
    if (fd < 0) return errno;
    if ((r->replaces && fchmod(fd, r->mode)) || !(r->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd), unlink(r->tmp);
        return e;
    }
    return 0;
}

static int fail(zl_replace *r, const char **step, const char *what, int e) {
    if (step) *step = what;
    zl_replace_discard(r);
    return e ? e : EIO;
}

int zl_replace_commit(zl_replace *r, const char **step) {
    if (!r->f) return fail(r, step, "open", EBADF);
    if (fflush(r->f) || ferror(r->f)) return fail(r, step, "write", errno);
    if (r->direct) { /* a device or pipe: nothing to sync or rename */
        FILE *f = r->f;
        r->f = NULL;
        return fclose(f) ? fail(r, step, "write", errno) : 0;
    }
    /* EINVAL, ENOTSUP: a file system that cannot sync (some FUSE ones); the bytes are written */
    if (fsync(fileno(r->f)) && errno != EINVAL && errno != ENOTSUP) return fail(r, step, "fsync", errno);
    FILE *f = r->f;
    r->f = NULL;
    if (fclose(f)) return fail(r, step, "close", errno);
    if (rename(r->tmp, r->target)) return fail(r, step, "rename", errno);
    r->tmp[0] = '\0'; /* in place: nothing left to remove */
    char dir[PATH_MAX];
    zl_path_parent(dir, sizeof dir, r->target);
    int e = zl_fsync_path(dir);
    if (e && step) *step = "fsync of the directory"; /* the file is in place; only its durability is in doubt */
    return e;
}

void zl_replace_discard(zl_replace *r) {
    if (r->f) fclose(r->f), r->f = NULL;
    if (r->tmp[0]) (void)unlink(r->tmp);
}
