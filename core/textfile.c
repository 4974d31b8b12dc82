/* textfile.c — see textfile.h. */
#include "textfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"

int lmp_read_file(const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lmp_fail(LMP_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return lmp_fail(LMP_EIO, "%s: not a regular file", path);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        fclose(f);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory for %lld bytes", path, (long long)sb.st_size);
    }
    size_t n = fread(buf, 1, (size_t)sb.st_size, f);
    int err = ferror(f);
    fclose(f);
    if (err || n != (size_t)sb.st_size) {
        free(buf);
        return lmp_fail(LMP_EIO, "%s: read error", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

const char *lmp_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}
