/* out_dir.c — see out_dir.h. */
#include "export/out_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int lmp_outdir_state_of(const char *path, lmp_outdir_state *state)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) {
            *state = LMP_OUTDIR_ABSENT;
            return 0;
        }
        return lmp_fail(LMP_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode)) {
        *state = LMP_OUTDIR_OTHER;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return lmp_fail(LMP_EIO, "%s: cannot read the folder: %s", path, strerror(errno));
    *state = LMP_OUTDIR_EMPTY;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            *state = LMP_OUTDIR_FULL;
            break;
        }
    closedir(d);
    return 0;
}

/* fsync of a folder, so that the names created in it (or renamed into it) survive a crash. */
static int sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: %s", path, strerror(errno));
    int st = fsync(fd) != 0 && errno != EINVAL ? lmp_fail(LMP_EIO, "%s: fsync: %s", path, strerror(errno)) : 0;
    close(fd);
    return st;
}

static void parent_of(const char *path, char *buf, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, n, ".");
    else if (slash == path) snprintf(buf, n, "/");
    else snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

int lmp_outdir_begin(lmp_outdir *od, const char *dest)
{
    size_t n = strlen(dest);
    while (n > 1 && dest[n - 1] == '/') n--; /* "out/" names the folder out */
    od->tmp[0] = 0;
    if (n == 0 || n >= sizeof od->dest - 1) return lmp_fail(LMP_EINVAL, "%s: the path is empty or too long", dest);
    memcpy(od->dest, dest, n);
    od->dest[n] = 0;
    lmp_tmpname_sweep(od->dest); /* what killed runs left beside it (base/tmpname.h) */
    if (lmp_tmpname_create(od->dest, "tmp", 1, od->tmp, sizeof od->tmp) != 0) {
        int e = errno;
        od->tmp[0] = 0;
        return lmp_fail(LMP_EIO, "%s: cannot create a temporary folder beside it: %s", od->dest, strerror(e));
    }
    /* mkdtemp makes it 0700; the finished folder is an ordinary one. */
    mode_t mask = umask(0);
    umask(mask);
    if (chmod(od->tmp, 0777 & ~mask) != 0) {
        int e = errno;
        lmp_outdir_abort(od);
        return lmp_fail(LMP_EIO, "%s: %s", od->dest, strerror(e));
    }
    return 0;
}

const char *lmp_outdir_path(const lmp_outdir *od, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", od->tmp, name);
    return buf;
}

int lmp_outdir_create(lmp_outdir *od, const char *name, FILE **f)
{
    char path[4400];
    lmp_outdir_path(od, name, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s/%s: cannot create: %s", od->dest, name, strerror(errno));
    *f = fdopen(fd, "wb");
    if (!*f) {
        int e = errno;
        close(fd);
        return lmp_fail(LMP_EIO, "%s/%s: %s", od->dest, name, strerror(e));
    }
    return 0;
}

int lmp_outdir_close(lmp_outdir *od, const char *name, FILE *f)
{
    int failed = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (!failed && fsync(fileno(f)) != 0) failed = 1, e = errno;
    if (fclose(f) != 0 && !failed) failed = 1, e = errno;
    /* named by where it is going, not by the temporary folder the user never sees */
    return failed ? lmp_fail(LMP_EIO, "%s/%s: write failed: %s", od->dest, name, strerror(e ? e : EIO)) : 0;
}

int lmp_outdir_copy(lmp_outdir *od, const char *src, const char *name)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return lmp_fail(LMP_EIO, "%s: cannot open: %s", src, strerror(errno));
    struct stat sb;
    if (fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(in);
        return lmp_fail(LMP_EINVAL, "%s: not a regular file", src);
    }
    FILE *out;
    int st = lmp_outdir_create(od, name, &out);
    if (st) {
        close(in);
        return st;
    }
    char buf[1 << 16];
    for (;;) {
        ssize_t got = read(in, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            st = lmp_fail(LMP_EIO, "%s: read failed: %s", src, strerror(errno));
            break;
        }
        if (got == 0) break;
        if (fwrite(buf, 1, (size_t)got, out) != (size_t)got) break; /* reported by close */
    }
    close(in);
    int cst = lmp_outdir_close(od, name, out);
    return st ? st : cst;
}

/* Swaps the two folders in one step (renameat2's RENAME_EXCHANGE, Linux 3.15, on the local
 * filesystems: ext4, xfs, btrfs, tmpfs, ...).  -1 where the kernel or the filesystem has no such
 * rename (ENOSYS, EINVAL) or it fails: the caller falls back to two renames. */
static int exchange(const char *a, const char *b)
{
#if defined(__linux__) && defined(RENAME_EXCHANGE)
    if (getenv("LMP_TEST_NO_RENAME_EXCHANGE")) return -1; /* the tests' way to the fallback */
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0 ? 0 : -1;
#else
    (void)a;
    (void)b;
    return -1;
#endif
}

int lmp_outdir_commit(lmp_outdir *od)
{
    char parent[4096], old[4200] = "";
    parent_of(od->dest, parent, sizeof parent);
    int st = sync_dir(od->tmp);
    lmp_outdir_state state = LMP_OUTDIR_ABSENT;
    if (!st) st = lmp_outdir_state_of(od->dest, &state);
    if (!st && state == LMP_OUTDIR_OTHER)
        st = lmp_fail(LMP_EINVAL, "%s: exists and is not a folder", od->dest);
    if (!st && state == LMP_OUTDIR_FULL && exchange(od->tmp, od->dest) == 0) {
        /* one atomic step: the new folder is at dest, the earlier one where the new one was */
        snprintf(old, sizeof old, "%s", od->tmp);
        od->tmp[0] = 0;
    } else if (!st && state == LMP_OUTDIR_FULL) {
        /* no RENAME_EXCHANGE here (an old kernel, a filesystem without it): rename() replaces
         * only an empty folder, so the earlier one steps aside first, onto an empty folder of a
         * unique name; a kill between the two renames leaves the earlier export there, as
         * DEST.old-HOST-PID-*, which the next run's sweep removes (out_dir.h) */
        if (lmp_tmpname_create(od->dest, "old", 1, old, sizeof old) != 0) {
            st = lmp_fail(LMP_EIO, "%s: cannot create a folder beside it: %s", od->dest, strerror(errno));
            old[0] = 0;
        } else if (rename(od->dest, old) != 0) {
            st = lmp_fail(LMP_EIO, "%s: cannot move the earlier export aside: %s", od->dest, strerror(errno));
            rmdir(old);
            old[0] = 0;
        }
    }
    if (!st && od->tmp[0] && rename(od->tmp, od->dest) != 0) {
        st = lmp_fail(LMP_EIO, "%s: cannot rename the finished folder into place: %s", od->dest, strerror(errno));
        if (old[0] && rename(old, od->dest) == 0) old[0] = 0; /* put the earlier one back */
    }
    if (st) {
        lmp_outdir_abort(od);
        return st;
    }
    od->tmp[0] = 0;
    if (old[0] && lmp_rmtree(old) != 0) return LMP_EIO; /* the new folder is in place; the message names old */
    return sync_dir(parent);
}

void lmp_outdir_abort(lmp_outdir *od)
{
    if (!od->tmp[0]) return;
    char why[2048];
    snprintf(why, sizeof why, "%s", lmp_last_error()); /* the failure that led here stays the message */
    lmp_rmtree(od->tmp);
    lmp_fail(0, "%s", why);
    od->tmp[0] = 0;
}

const char *lmp_variant_file_name(const char *name, char *buf, size_t n)
{
    if (n == 0) return buf;
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n && k < LMP_VARIANT_FILE_MAX; p++) {
        const unsigned char c = (unsigned char)*p;
        const int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                         strchr("._-+=,@:", c) != NULL;
        buf[k] = keep && !(k == 0 && c == '.') ? (char)c : '_';
        k++;
    }
    if (k == 0 && n > 1) buf[k++] = '_';
    buf[k] = 0;
    return buf;
}
