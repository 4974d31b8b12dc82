/* tmpname.c — see tmpname.h. */
#include "base/tmpname.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

/* This machine's name as it appears in a temporary name: letters and digits, others '_'. */
static void host_tag(char *buf, size_t n)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    size_t k = 0;
    for (const char *p = host; *p && k + 1 < n && k < 64; p++, k++)
        buf[k] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
    buf[k] = 0;
}

int lmp_tmpname_create(const char *dest, const char *kind, int folder, char *buf, size_t n)
{
    char host[80];
    host_tag(host, sizeof host);
    int len = snprintf(buf, n, "%s.%s-%s-%ld-XXXXXX", dest, kind, host, (long)getpid());
    if (len < 0 || (size_t)len >= n) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (folder) return mkdtemp(buf) ? 0 : -1;
    return mkostemp(buf, O_CLOEXEC);
}

int lmp_tmpname_is_stale(const char *dest_base, const char *name, long *pid)
{
    const size_t nb = strlen(dest_base);
    if (strncmp(name, dest_base, nb) != 0) return 0;
    const char *rest = name + nb;
    if (strncmp(rest, ".tmp-", 5) != 0 && strncmp(rest, ".old-", 5) != 0) return 0;
    rest += 5;
    char host[80];
    host_tag(host, sizeof host);
    const size_t nh = strlen(host);
    if (strncmp(rest, host, nh) != 0 || rest[nh] != '-') return 0; /* another machine's, or not ours */
    rest += nh + 1;
    char *end;
    errno = 0;
    long p = strtol(rest, &end, 10);
    if (errno || end == rest || p <= 0 || *end != '-' || strlen(end + 1) != 6) return 0;
    *pid = p;
    if (p == (long)getpid()) return 0; /* this process's own, in use */
    return kill((pid_t)p, 0) != 0 && errno == ESRCH;
}

int lmp_tmpname_sweep(const char *dest)
{
    char folder[4096], base[4096];
    size_t n = strlen(dest);
    while (n > 1 && dest[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof base) return 0;
    memcpy(base, dest, n);
    base[n] = 0;
    const char *slash = strrchr(base, '/');
    if (!slash) snprintf(folder, sizeof folder, ".");
    else if (slash == base) snprintf(folder, sizeof folder, "/");
    else snprintf(folder, sizeof folder, "%.*s", (int)(slash - base), base);
    const char *name = slash ? slash + 1 : base;
    DIR *d = opendir(folder);
    if (!d) return 0;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long pid;
        if (!lmp_tmpname_is_stale(name, e->d_name, &pid)) continue;
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        char why[2048];
        snprintf(why, sizeof why, "%s", lmp_last_error()); /* a sweep's failure is not the run's message */
        if (lmp_rmtree(path) == 0) removed++;
        lmp_fail(0, "%s", why);
    }
    closedir(d);
    return removed;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 ? -1 : 0;
}

int lmp_rmtree(const char *path)
{
    /* FTW_DEPTH: a folder after its contents; FTW_PHYS: a link is removed, never followed */
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return lmp_fail(LMP_EIO, "%s: cannot remove it: %s", path, strerror(errno));
    return 0;
}
