/* outfile.h — writing an output file so that its path always holds a complete document.
 *
 * The content goes to a temporary file in the destination's folder, is flushed and fsync'd, and
 * is renamed over the destination only when every byte is written: a full disk, a file size
 * limit or an interrupt leaves the previous file (or none) in place, never a truncated one. */
#ifndef LMP_CORE_OUTFILE_H
#define LMP_CORE_OUTFILE_H

#include <stdio.h>

/* Before any work: the folder that will hold `path` exists and is writable, and `path` is not a
 * folder.  The message names `what` (e.g. "--json"). */
int lmp_outfile_check(const char *path, const char *what);

/* Writes `path` through write(arg, f).  Failures name the path and give errno's text. */
int lmp_outfile_write(const char *path, void (*write)(const void *arg, FILE *f), const void *arg);

#endif
