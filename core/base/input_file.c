/* input_file.c — see input_file.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* O_CLOEXEC, fstat in strict C11 builds (the fuzzers) */
#endif
#include "base/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

static const char *kind_of(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
           : S_ISSOCK(m) ? "a socket" : "an unusual kind of file";
}

/* Access problems return -1, a wrong kind of file -2 (see input_file.h). */
static int refuse(char *why, size_t n, int err, const char *fmt, const char *arg)
{
    snprintf(why, n, fmt, arg);
    errno = err;
    return -1;
}

static int wrong_kind(char *why, size_t n, mode_t m, const char *expected)
{
    snprintf(why, n, "is %s, not %s", kind_of(m), expected);
    errno = S_ISDIR(m) ? EISDIR : S_ISREG(m) ? ENOTDIR : EINVAL;
    return -2;
}

int lmp_input_open(const char *path, char *why, size_t n)
{
    struct stat sb;
    /* stat() first: a device is refused without being opened at all. */
    if (stat(path, &sb) != 0) return refuse(why, n, errno, "%s", strerror(errno));
    if (!S_ISREG(sb.st_mode)) return wrong_kind(why, n, sb.st_mode, "a regular file");
    /* O_NONBLOCK: the path may have been replaced by a FIFO since the stat(); fstat() below
     * sees what was really opened. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return refuse(why, n, errno, "%s", strerror(errno));
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return refuse(why, n, err, "%s", strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return wrong_kind(why, n, sb.st_mode, "a regular file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int err = errno;
        close(fd);
        return refuse(why, n, err, "%s", strerror(err));
    }
    return fd;
}

int lmp_input_check_file(const char *path, char *why, size_t n)
{
    int fd = lmp_input_open(path, why, n);
    if (fd < 0) return fd;
    close(fd);
    return 0;
}

int lmp_input_check_dir(const char *path, char *why, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return refuse(why, n, errno, "%s", strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return wrong_kind(why, n, sb.st_mode, "a directory");
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return refuse(why, n, errno, "%s", strerror(errno));
    close(fd);
    return 0;
}

/* ---- inputs of a kind: messages, caps, reading ------------------------------------------- */

int lmp_input_special_allowed(void)
{
    const char *v = getenv(LMP_ALLOW_SPECIAL_FILES_ENV);
    return v && strcmp(v, "1") == 0;
}

uint64_t lmp_input_cap(lmp_input_kind kind)
{
    switch (kind) {
    case LMP_INPUT_MODEL: return UINT64_MAX;
    case LMP_INPUT_TOKENIZER: return (uint64_t)256 << 20;
    case LMP_INPUT_CONFIG: return (uint64_t)16 << 20;
    case LMP_INPUT_JSON: return (uint64_t)256 << 20;
    case LMP_INPUT_TEXT:
    case LMP_INPUT_IMATRIX: break;
    }
    return (uint64_t)4 << 30;
}

/* "cannot open<label>: ..." keeps the words of the older messages ("cannot open config"). */
static const char *open_label(lmp_input_kind k)
{
    return k == LMP_INPUT_TOKENIZER ? " tokenizer file" : k == LMP_INPUT_CONFIG ? " config"
           : k == LMP_INPUT_IMATRIX ? " imatrix file" : "";
}

static const char *noun(lmp_input_kind k)
{
    return k == LMP_INPUT_MODEL ? "model file" : k == LMP_INPUT_TOKENIZER ? "tokenizer file"
           : k == LMP_INPUT_CONFIG ? "config file" : k == LMP_INPUT_JSON ? "JSON file"
           : k == LMP_INPUT_IMATRIX ? "imatrix file" : "text";
}

static void cap_words(uint64_t cap, char *buf, size_t n)
{
    if (cap % ((uint64_t)1 << 30) == 0) snprintf(buf, n, "%llu GiB", (unsigned long long)(cap >> 30));
    else snprintf(buf, n, "%llu MiB", (unsigned long long)(cap >> 20));
}

static int too_large(const char *path, lmp_input_kind kind, uint64_t size)
{
    char cap[32];
    cap_words(lmp_input_cap(kind), cap, sizeof cap);
    if (size == UINT64_MAX)
        return lmp_fail(LMP_EINVAL, "%s: more than the %s accepted for a %s (reading stopped there)", path, cap,
                        noun(kind));
    return lmp_fail(LMP_EINVAL, "%s: a %s of %llu bytes is larger than the %s accepted", path, noun(kind),
                    (unsigned long long)size, cap);
}

int lmp_input_open_kind(const char *path, lmp_input_kind kind, int *fd_out, uint64_t *size_out)
{
    *fd_out = -1;
    *size_out = 0;
    if (!path) return lmp_fail(LMP_EINVAL, "input path is NULL");
    char why[256];
    int fd = lmp_input_open(path, why, sizeof why);
    if (fd == -1) return lmp_fail(LMP_EIO, "%s: cannot open%s: %s", path, open_label(kind), why);
    struct stat sb;
    if (fd == -2) {
        /* The wrong kind.  A stream may be read on purpose (see input_file.h); a model is mapped,
         * a folder is never a file. */
        int may = kind != LMP_INPUT_MODEL && lmp_input_special_allowed() && stat(path, &sb) == 0 &&
                  (S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode) || S_ISSOCK(sb.st_mode));
        if (!may)
            return lmp_fail(LMP_EINVAL, "%s: %s%s", path, why,
                            kind != LMP_INPUT_MODEL && stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)
                                ? " (set " LMP_ALLOW_SPECIAL_FILES_ENV "=1 to read one on purpose)"
                                : "");
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return lmp_fail(LMP_EIO, "%s: cannot open%s: %s", path, open_label(kind), strerror(errno));
        int fl = fcntl(fd, F_GETFL);
        if (fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode) || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            int err = errno;
            close(fd);
            return lmp_fail(LMP_EIO, "%s: cannot open%s: %s", path, open_label(kind),
                            S_ISDIR(sb.st_mode) ? "is a directory" : strerror(err));
        }
        *fd_out = fd;
        *size_out = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : UINT64_MAX;
        return 0;
    }
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return lmp_fail(LMP_EIO, "%s: cannot open%s: %s", path, open_label(kind), strerror(err));
    }
    if ((uint64_t)sb.st_size > lmp_input_cap(kind)) {
        close(fd);
        return too_large(path, kind, (uint64_t)sb.st_size);
    }
    *fd_out = fd;
    *size_out = (uint64_t)sb.st_size;
    return 0;
}

int lmp_input_read(const char *path, lmp_input_kind kind, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    int st = lmp_input_open_kind(path, kind, &fd, &size);
    if (st) return st;
    uint64_t cap = lmp_input_cap(kind);
    int stream = size == UINT64_MAX;
    if (!stream && size > SIZE_MAX - 1) { /* only where size_t is narrower than the cap */
        close(fd);
        return too_large(path, kind, size);
    }
    /* A regular file: its size (it may still change under us, so never past the cap); a stream:
     * grown as it comes, at most cap + 1 bytes so that "over the cap" can be seen. */
    size_t want = stream ? (size_t)1 << 16 : (size_t)size + 1;
    size_t n = 0;
    char *buf = malloc(want);
    if (!buf) {
        close(fd);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory for %zu bytes", path, want);
    }
    for (;;) {
        if (n + 1 >= want) {
            if (!stream) break; /* read st_size bytes (one more is never asked) */
            size_t grow = want > SIZE_MAX / 2 ? SIZE_MAX : want * 2;
            if ((uint64_t)grow > cap + 2) grow = (size_t)(cap + 2);
            char *nb = grow > want ? realloc(buf, grow) : NULL;
            if (!nb) {
                free(buf);
                close(fd);
                return grow > want ? lmp_fail(LMP_ENOMEM, "%s: out of memory reading the %s", path, noun(kind))
                                   : too_large(path, kind, UINT64_MAX);
            }
            buf = nb;
            want = grow;
        }
        ssize_t got = read(fd, buf + n, want - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int err = errno;
            free(buf);
            close(fd);
            return lmp_fail(LMP_EIO, "%s: cannot read the %s: %s", path, noun(kind), strerror(err));
        }
        if (got == 0) break;
        n += (size_t)got;
        if ((uint64_t)n > cap) {
            free(buf);
            close(fd);
            return too_large(path, kind, UINT64_MAX);
        }
    }
    close(fd);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}
