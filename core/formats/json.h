/* json.h — a small JSON reader (RFC 8259) for safetensors headers, config.json and
 * tokenizer.json: the whole document is parsed into a tree of lmp_json nodes.
 *
 * Strings are decoded to UTF-8 (\uXXXX escapes and surrogate pairs included) and NUL-terminated;
 * their byte length is kept too, since a decoded string may contain "\u0000".  Numbers keep
 * their double value and whether the literal was an integer (then `integer` holds it exactly up
 * to 2^63).  Object members keep their order; lookups are linear (fine for these documents) or
 * by a key index built on request.  Parse errors give the byte offset, line and column. */
#ifndef LMP_CORE_JSON_H
#define LMP_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LMP_JSON_NULL, LMP_JSON_BOOL, LMP_JSON_NUMBER, LMP_JSON_STRING, LMP_JSON_ARRAY,
               LMP_JSON_OBJECT } lmp_json_type;

typedef struct lmp_json lmp_json;
struct lmp_json {
    lmp_json_type type;
    int boolean;
    double number;
    int is_integer;        /* the literal had no fraction or exponent and fits int64 */
    int64_t integer;
    char *str;             /* STRING: decoded UTF-8, NUL-terminated */
    size_t str_len;
    lmp_json *items;       /* ARRAY elements / OBJECT values, n of them */
    char **keys;           /* OBJECT keys (decoded), n of them */
    size_t *key_lens;
    size_t n;
};

/* Parses text[0..len).  `what` names the document in error messages ("x/config.json").
 * Nesting deeper than 512 is an error.  Free with lmp_json_free. */
int lmp_json_parse(const char *text, size_t len, const char *what, lmp_json **out);
void lmp_json_free(lmp_json *j);

/* Object member by key, NULL if absent or j is not an object. */
const lmp_json *lmp_json_get(const lmp_json *j, const char *key);
/* Typed getters: return 0 and set *out, or a negative status with a message naming `what`
 * and the key when the member is missing or of the wrong type. */
int lmp_json_get_int(const lmp_json *j, const char *key, const char *what, int64_t *out);
int lmp_json_get_number(const lmp_json *j, const char *key, const char *what, double *out);
int lmp_json_get_string(const lmp_json *j, const char *key, const char *what, const char **out);

#endif
