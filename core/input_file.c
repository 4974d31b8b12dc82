/* input_file.c — see input_file.h. */
#include "input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
