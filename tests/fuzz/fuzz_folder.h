/* fuzz_folder.h — for loaders that read a folder: one per-process folder under $TMPDIR whose
 * fixed files are symbolic links to files of the repository (set up once), and into which each
 * input is written under one name. */
#ifndef LMP_FUZZ_FOLDER_H
#define LMP_FUZZ_FOLDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The folder; on the first call it is made and holds `links[i]` (absolute paths) under their
 * base names. */
static const char *fuzz_folder(const char *const *links, int n_links)
{
    static char dir[256];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s/lmpress-fuzz-dir-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (mkdir(dir, 0700) != 0) abort();
    for (int i = 0; i < n_links; i++) {
        const char *base = strrchr(links[i], '/');
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, base ? base + 1 : links[i]);
        if (symlink(links[i], path) != 0) abort();
    }
    return dir;
}

/* Writes data[0..size) as dir/name; returns its path. */
static const char *fuzz_folder_file(const char *dir, const char *name, const uint8_t *data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    return path;
}

#endif
