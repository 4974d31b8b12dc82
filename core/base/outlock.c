/* outlock.c — see outlock.h. */
#include "base/outlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int lmp_outlock_take(lmp_outlock *l, const char *path, const char *what)
{
    l->fd = -1;
    if (snprintf(l->path, sizeof l->path, "%s.lock", path) >= (int)sizeof l->path)
        return lmp_fail(LMP_EINVAL, "%s %s: the path is too long", what, path);
    /* The file may be removed by the run that held it between our open and our flock: then we
     * hold a lock on a name that no longer exists, and a third run could take a new one.  So
     * after the lock, the path must still be the file we locked; else try again. */
    for (int attempt = 0; attempt < 16; attempt++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0) return lmp_fail(LMP_EIO, "%s %s: cannot open its lock file %s: %s", what, path, l->path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char buf[32] = "";
            ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
            close(fd);
            if (e != EWOULDBLOCK) return lmp_fail(LMP_EIO, "%s %s: cannot lock %s: %s", what, path, l->path, strerror(e));
            long pid = got > 0 ? strtol(buf, NULL, 10) : 0;
            char who[48] = "";
            if (pid > 0) snprintf(who, sizeof who, " (pid %ld)", pid);
            return lmp_fail(LMP_EINVAL, "%s %s: another lmpress run%s is writing this report (it holds %s): wait for it "
                            "to finish, or write to another file", what, path, who, l->path);
        }
        struct stat held, now;
        if (fstat(fd, &held) == 0 && stat(l->path, &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
            char pid[32];
            int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)len, 0) == len) { /* the pid is for messages only */
            }
            l->fd = fd;
            return 0;
        }
        close(fd);
    }
    return lmp_fail(LMP_EIO, "%s %s: cannot take the lock %s: it keeps being replaced", what, path, l->path);
}

void lmp_outlock_release(lmp_outlock *l)
{
    if (l->fd <= 0) return;
    unlink(l->path); /* while still held, so no other run locks the name we remove */
    close(l->fd);
    l->fd = -1;
}
