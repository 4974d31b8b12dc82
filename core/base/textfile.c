/* textfile.c — see textfile.h. */
#include "base/textfile.h"

#include <string.h>

#include "base/input_file.h"

int lmp_read_file(const char *path, char **data, size_t *len)
{
    return lmp_input_read(path, LMP_INPUT_TEXT, data, len);
}

const char *lmp_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}
