/* spill.c — see spill.h. */
#include "base/spill.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"

int lmp_spill_init(lmp_ctx *ctx, lmp_spill *s, int64_t n, int64_t budget_bytes, const char *what)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->n = n;
    s->what = what;
    const int64_t bytes = n * (int64_t)sizeof(float);
    const char *env = getenv("LMPRESS_SPILL_MB");
    if (env && *env) budget_bytes = (int64_t)(atof(env) * 1048576.0);
    if (bytes <= budget_bytes) {
        s->mem = malloc((size_t)bytes + 1);
        return s->mem ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for %.0f MB of %s", (double)bytes / 1e6, what);
    }
    s->fd = lmp_spill_tmpfile(ctx, (double)bytes, what);
    return s->fd < 0 ? LMP_EIO : 0;
}

int lmp_spill_tmpfile(lmp_ctx *ctx, double bytes, const char *what)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/lmpress-spill-XXXXXX", dir);
    const int fd = mkstemp(path);
    if (fd < 0) {
        char size[48] = ""; /* a store that grows as it is written (bytes 0) has no size yet */
        if (bytes > 0) snprintf(size, sizeof size, "%.0f MB of ", bytes / 1e6);
        lmp_fail(LMP_EIO, "%s: cannot create a temporary file for %s%s: %s (set TMPDIR to a writable folder)", path,
                 size, what, strerror(errno));
        return -1;
    }
    unlink(path);
    lmp_log(ctx, LMP_LOG_DEBUG, "%s: %.0f MB in an unlinked file in %s", what, bytes / 1e6, dir);
    return fd;
}

void lmp_spill_free(lmp_spill *s)
{
    free(s->mem);
    if (s->fd >= 0) close(s->fd);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

int lmp_spill_fd_io(int fd, int writing, void *buf, size_t bytes, int64_t at, const char *what)
{
    char *p = buf;
    while (bytes) { /* pread and pwrite may move fewer bytes than asked */
        ssize_t k = writing ? pwrite(fd, p, bytes, (off_t)at) : pread(fd, p, bytes, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return lmp_fail(LMP_EIO, "the temporary file of %s: %s", what, k < 0 ? strerror(errno) : "short read");
        p += k;
        bytes -= (size_t)k;
        at += k;
    }
    return 0;
}

static int file_io(const lmp_spill *s, int writing, float *buf, int64_t off, int64_t count)
{
    return lmp_spill_fd_io(s->fd, writing, buf, (size_t)count * sizeof *buf, off * (int64_t)sizeof *buf, s->what);
}

int lmp_spill_read(const lmp_spill *s, int64_t off, int64_t count, float *buf)
{
    if (off < 0 || count < 0 || off + count > s->n) return lmp_fail(LMP_EINVAL, "%s: read out of range", s->what);
    if (s->mem) {
        if (buf != s->mem + off) memcpy(buf, s->mem + off, (size_t)count * sizeof *buf);
        return 0;
    }
    return file_io(s, 0, buf, off, count);
}

int lmp_spill_write(lmp_spill *s, int64_t off, int64_t count, const float *buf)
{
    if (off < 0 || count < 0 || off + count > s->n) return lmp_fail(LMP_EINVAL, "%s: write out of range", s->what);
    if (s->mem) {
        if (buf != s->mem + off) memcpy(s->mem + off, buf, (size_t)count * sizeof *buf);
        return 0;
    }
    return file_io(s, 1, (float *)buf, off, count);
}

int lmp_spill_check_dir(double bytes, const char *what)
{
    const char *env = getenv("TMPDIR");
    const char *dir = env && *env ? env : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/lmpress-spill-XXXXXX", dir);
    const int fd = mkstemp(path);
    if (fd < 0)
        return lmp_fail(LMP_EIO, "%s%s: cannot create a temporary file there: %s; the run keeps about %.0f MB of %s "
                        "in it: set TMPDIR to a writable folder with room", env && *env ? "$TMPDIR " : "", dir,
                        strerror(errno), bytes / 1e6, what);
    unlink(path);
    struct statvfs vfs;
    int st = 0;
    if (fstatvfs(fd, &vfs) == 0) {
        const double room = (double)vfs.f_bavail * (double)vfs.f_frsize;
        if (room < bytes)
            st = lmp_fail(LMP_EIO, "%s%s: %.0f MB free, but the run keeps about %.0f MB of %s there: set TMPDIR to a "
                          "folder with room", env && *env ? "$TMPDIR " : "", dir, room / 1e6, bytes / 1e6, what);
    }
    close(fd);
    return st;
}
