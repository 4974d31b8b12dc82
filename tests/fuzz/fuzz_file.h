/* fuzz_file.h — the loaders under test read files by path, so each fuzz input is written to one
 * per-process file first.  The name ends in `ext` (".cfg", ".json", ".bin", ".jsonl"). */
#ifndef LMP_FUZZ_FILE_H
#define LMP_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size, const char *ext)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/lmpress-fuzz-%d%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), ext);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    return path;
}

#endif
