/* json_write.h — writing JSON (RFC 8259) to a stdio stream: strings escaped, numbers that read
 * back to the value they came from, and a parsed lmp_json tree written back (a config.json copied
 * with some members replaced).
 *
 * Numbers: a double is written with the fewest significant digits (up to 17) that strtod reads
 * back to the same double; lmp_jw_float does the same for a float (so the float 1e-5f is written
 * "1e-05", not the double 9.99999974737875e-06 it widens to: a reader that stores it in a float
 * gets the same float back).  Non-finite values have no JSON form and are written as null.
 * Errors are the stream's (ferror), checked by whoever closes it. */
#ifndef LMP_CORE_JSON_WRITE_H
#define LMP_CORE_JSON_WRITE_H

#include <stdio.h>

#include "formats/json.h"

/* s[0..len) as a JSON string: '"' '\\' and every control character escaped, other bytes as
 * they are (UTF-8 passes through). */
void lmp_jw_string_n(FILE *f, const char *s, size_t len);
void lmp_jw_string(FILE *f, const char *s);
void lmp_jw_double(FILE *f, double x);
void lmp_jw_float(FILE *f, float x);
/* A newline and `depth` levels of two-space indentation (depth < 0: nothing, compact output). */
void lmp_jw_indent(FILE *f, int depth);
/* The tree j, nested `depth` levels deep (< 0: on one line).  Integer literals are written as
 * integers, other numbers with lmp_jw_double. */
void lmp_jw_tree(FILE *f, const lmp_json *j, int depth);

#endif
