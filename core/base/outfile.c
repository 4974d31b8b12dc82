/* outfile.c — see outfile.h. */
#include "base/outfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

/* The folder part of path ("." when there is none). */
static void folder_of(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == path) snprintf(out, n, "/");
    else snprintf(out, n, "%.*s", (int)(slash - path), path);
}

int lmp_outfile_check(const char *path, const char *what)
{
    char dir[4096];
    struct stat sb;
    folder_of(path, dir, sizeof dir);
    if (stat(dir, &sb) != 0) return lmp_fail(LMP_EIO, "%s %s: folder %s: %s", what, path, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return lmp_fail(LMP_EIO, "%s %s: %s is not a folder", what, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return lmp_fail(LMP_EIO, "%s %s: folder %s is not writable: %s", what, path, dir, strerror(errno));
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return lmp_fail(LMP_EIO, "%s %s: is a folder", what, path);
    return 0;
}

int lmp_outfile_write(const char *path, void (*write)(const void *arg, FILE *f), const void *arg)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
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
    if (!failed && rename(tmp, path) != 0) failed = 1, e = errno;
    if (failed) {
        unlink(tmp);
        return lmp_fail(LMP_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return 0;
}
