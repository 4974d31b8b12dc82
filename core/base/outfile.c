/* outfile.c — see outfile.h. */
#include "base/outfile.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/tmpname.h"

/* The folder part of path ("." when there is none). */
static void folder_of(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == path) snprintf(out, n, "/");
    else snprintf(out, n, "%.*s", (int)(slash - path), path);
}

int lmp_outfile_is_stdout(const char *path) { return path && strcmp(path, "-") == 0; }

static const char *kind_name(mode_t mode)
{
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a folder";
    return "not a regular file";
}

int lmp_outfile_check_kind(const char *path, const char *what)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return 0;
        return lmp_fail(LMP_EIO, "%s %s: %s", what, path, strerror(errno));
    }
    if (S_ISREG(sb.st_mode)) return 0;
    if (S_ISLNK(sb.st_mode))
        return lmp_fail(LMP_EINVAL, "%s %s: is a symbolic link: lmpress does not replace or follow a link at an output "
                        "path; name its target instead", what, path);
    return lmp_fail(LMP_EINVAL, "%s %s: is %s, not a regular file: refusing to replace it", what, path,
                    kind_name(sb.st_mode));
}

int lmp_outfile_check(const char *path, const char *what)
{
    char dir[4096];
    struct stat sb;
    if (!path || !*path) return lmp_fail(LMP_EINVAL, "%s: the path is empty", what);
    folder_of(path, dir, sizeof dir);
    if (stat(dir, &sb) != 0) return lmp_fail(LMP_EIO, "%s %s: folder %s: %s", what, path, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return lmp_fail(LMP_EIO, "%s %s: %s is not a folder", what, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return lmp_fail(LMP_EIO, "%s %s: folder %s is not writable: %s", what, path, dir, strerror(errno));
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return lmp_fail(LMP_EIO, "%s %s: is a folder", what, path);
    return lmp_outfile_check_kind(path, what);
}

int lmp_outfile_write(const char *path, void (*write)(const void *arg, FILE *f), const void *arg)
{
    char tmp[4200];
    lmp_tmpname_sweep(path);
    int fd = lmp_tmpname_create(path, "tmp", 0, tmp, sizeof tmp);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return lmp_fail(LMP_EIO, "%s: %s", path, strerror(e));
    }
    write(arg, f);
    int failed = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (!failed && fsync(fd) != 0) failed = 1, e = errno;
    /* mkstemp makes the file 0600; a report is an ordinary file. */
    if (!failed) {
        mode_t mask = umask(0);
        umask(mask);
        fchmod(fd, 0666 & ~mask);
    }
    if (fclose(f) != 0 && !failed) failed = 1, e = errno;
    /* something put at the path since the check (a FIFO, a link) is not replaced either */
    if (!failed && lmp_outfile_check_kind(path, "output")) {
        unlink(tmp);
        return LMP_EINVAL;
    }
    if (!failed && rename(tmp, path) != 0) failed = 1, e = errno;
    if (failed) {
        unlink(tmp);
        return lmp_fail(LMP_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return 0;
}

/* path resolved: realpath when it exists, else its folder's realpath + its last name (trailing
 * slashes dropped); the path as given when neither resolves. */
static void resolve(const char *path, char *out, size_t n)
{
    char trimmed[PATH_MAX], dir[PATH_MAX], real[PATH_MAX];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)len, path);
    if (realpath(trimmed, real)) {
        snprintf(out, n, "%s", real);
        return;
    }
    folder_of(trimmed, dir, sizeof dir);
    const char *slash = strrchr(trimmed, '/');
    const char *base = slash ? slash + 1 : trimmed;
    if (realpath(dir, real)) snprintf(out, n, "%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
    else snprintf(out, n, "%s", trimmed);
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[2 * PATH_MAX + 8], rb[2 * PATH_MAX + 8];
    resolve(a, ra, sizeof ra);
    resolve(b, rb, sizeof rb);
    return strcmp(ra, rb) == 0;
}

static int skipped(const lmp_named_path *p) { return !p->path || !*p->path || lmp_outfile_is_stdout(p->path); }

int lmp_outfile_distinct(const lmp_named_path *outputs, int n_outputs, const lmp_named_path *inputs, int n_inputs)
{
    for (int i = 0; i < n_outputs; i++) {
        const lmp_named_path *o = &outputs[i];
        if (skipped(o)) continue;
        for (int k = 0; k < n_inputs; k++)
            if (!skipped(&inputs[k]) && same_file(o->path, inputs[k].path))
                return lmp_fail(LMP_EINVAL, "%s %s: is %s (%s), an input of this run: refusing to overwrite it", o->what,
                                o->path, inputs[k].what, inputs[k].path);
        for (int k = 0; k < i; k++)
            if (!skipped(&outputs[k]) && same_file(o->path, outputs[k].path))
                return lmp_fail(LMP_EINVAL, "%s %s and %s %s: are the same file: each output needs its own", outputs[k].what,
                                outputs[k].path, o->what, o->path);
    }
    return 0;
}
