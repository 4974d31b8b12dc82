/* textfile.h — reading a whole file into memory with a clear error. */
#ifndef LMP_CORE_TEXTFILE_H
#define LMP_CORE_TEXTFILE_H

#include <stddef.h>

/* *data is malloc'd and NUL-terminated (the NUL is not counted in *len).  A text input: read
 * through lmp_input_read (input_file.h), so a FIFO or device is refused without blocking and
 * the size is capped at 4 GiB; other kinds of input call lmp_input_read with their own kind. */
int lmp_read_file(const char *path, char **data, size_t *len);
/* The part of a path after its last '/'. */
const char *lmp_basename(const char *path);

#endif
