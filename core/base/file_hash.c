/* file_hash.c — see file_hash.h. */
#include "base/file_hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/hash.h"

/* Folds bytes [off, off + n) of fd. */
static int fold_range(int fd, const char *path, int64_t off, int64_t n, unsigned char *buf, size_t cap, uint64_t *h)
{
    while (n > 0) {
        size_t want = (size_t)(n < (int64_t)cap ? n : (int64_t)cap);
        ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return lmp_fail(LMP_EIO, "%s: cannot read it to fingerprint the run: %s", path,
                            got < 0 ? strerror(errno) : "it became shorter");
        *h = lmp_fnv1a64_words(*h, buf, (size_t)got);
        off += got;
        n -= got;
    }
    return 0;
}

static int fold_file(const char *path, const struct stat *sb, uint64_t *h)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: cannot open it to fingerprint the run: %s", path, strerror(errno));
    const size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap);
    int st = buf ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    const int64_t size = (int64_t)sb->st_size;
    *h = lmp_fnv1a64(*h, &size, sizeof size);
    if (!st && size <= LMP_FILE_HASH_WHOLE) {
        st = fold_range(fd, path, 0, size, buf, cap, h);
    } else if (!st) {
        const int64_t mtime[2] = {(int64_t)sb->st_mtim.tv_sec, (int64_t)sb->st_mtim.tv_nsec};
        *h = lmp_fnv1a64(*h, mtime, sizeof mtime);
        st = fold_range(fd, path, 0, LMP_FILE_HASH_EDGE, buf, cap, h);
        if (!st) st = fold_range(fd, path, size - LMP_FILE_HASH_EDGE, LMP_FILE_HASH_EDGE, buf, cap, h);
    }
    free(buf);
    close(fd);
    return st;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int fold_dir(const char *path, uint64_t *h)
{
    DIR *d = opendir(path);
    if (!d) return lmp_fail(LMP_EIO, "%s: cannot list it to fingerprint the run: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int st = 0;
    for (struct dirent *e; !st && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **more = realloc(names, cap * sizeof *names);
            if (!more) st = lmp_fail(LMP_ENOMEM, "out of memory");
            else names = more;
        }
        if (!st && !(names[n++] = strdup(e->d_name))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    }
    closedir(d);
    if (!st && n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && !st; i++) {
        char *p = malloc(strlen(path) + strlen(names[i]) + 2);
        if (!p) {
            st = lmp_fail(LMP_ENOMEM, "out of memory");
            break;
        }
        sprintf(p, "%s/%s", path, names[i]);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) { /* sub-folders and special files are no model's */
            *h = lmp_fnv1a64(*h, names[i], strlen(names[i]) + 1);
            st = fold_file(p, &sb, h);
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

int lmp_file_hash_fold(const char *path, uint64_t *h)
{
    if (!path) {
        *h = lmp_fnv1a64_words(*h, NULL, 0);
        return 0;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) return lmp_fail(LMP_EIO, "%s: cannot fingerprint it: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return fold_dir(path, h);
    if (!S_ISREG(sb.st_mode)) { /* a pipe given on purpose: its content cannot be read twice */
        *h = lmp_fnv1a64(*h, "special", 8);
        return 0;
    }
    return fold_file(path, &sb, h);
}
