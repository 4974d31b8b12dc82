/* input_file.h — checking and opening a file the user named as an input (a model, a text, a
 * tokenizer) so that a FIFO, a device or a folder where a file is expected is refused at once:
 * a plain open() of a FIFO would block until a writer appears, and opening a device can have
 * side effects, so the kind is read with stat() first and the open itself is non-blocking. */
#ifndef LMP_CORE_INPUT_FILE_H
#define LMP_CORE_INPUT_FILE_H

#include <stddef.h>

/* Opens `path` read-only if it is a readable regular file; the descriptor is returned in
 * blocking mode.  Otherwise returns -1 when it cannot be reached or opened (why[n] gets
 * strerror's text: "No such file or directory", "Permission denied"), or -2 when it is the wrong
 * kind of file (why: "is a FIFO, not a regular file"); errno is set either way. */
int lmp_input_open(const char *path, char *why, size_t n);

/* 0 if `path` is a readable regular file (it is opened and closed again), else -1 or -2 and why[]. */
int lmp_input_check_file(const char *path, char *why, size_t n);

/* 0 if `path` is a folder that can be read, else -1 or -2 (not a folder) and why[]. */
int lmp_input_check_dir(const char *path, char *why, size_t n);

#endif
