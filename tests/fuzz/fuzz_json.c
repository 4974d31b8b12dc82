/* fuzz_json.c — libFuzzer entry for core/formats/json.c's lmp_json_parse (see README.md here).
 *
 * Any input must give either a tree or one error message, never a crash, leak or sanitizer
 * report; an accepted tree must be well formed: strings NUL-terminated at str_len, object keys
 * likewise, lookups of every key finding a member with that key, and a second parse of the same
 * bytes succeeding too (the parser keeps no state between calls). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/json.h"

static void walk(const lmp_json *j, int depth)
{
    if (depth > 513) abort(); /* the nesting limit is 512 */
    switch (j->type) {
    case LMP_JSON_STRING:
        if (!j->str || j->str[j->str_len] != 0) abort();
        break;
    case LMP_JSON_ARRAY:
        if (j->n && !j->items) abort();
        for (size_t i = 0; i < j->n; i++) walk(&j->items[i], depth + 1);
        break;
    case LMP_JSON_OBJECT:
        for (size_t i = 0; i < j->n; i++) {
            if (j->keys[i][j->key_lens[i]] != 0) abort();
            /* lookup finds the first member with this key, which is this one or an earlier
             * duplicate (a key with an embedded NUL cannot be named by a C string: skip it) */
            if (strlen(j->keys[i]) == j->key_lens[i]) {
                const lmp_json *m = lmp_json_get(j, j->keys[i]);
                if (!m || m > &j->items[i]) abort();
                size_t k = (size_t)(m - j->items);
                if (j->key_lens[k] != j->key_lens[i] || memcmp(j->keys[k], j->keys[i], j->key_lens[i])) abort();
            }
            walk(&j->items[i], depth + 1);
        }
        break;
    case LMP_JSON_NUMBER:
        /* both are the correctly rounded double of the same exact integer */
        if (j->is_integer && (double)j->integer != j->number) abort();
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lmp_json *j = NULL;
    int rc = lmp_json_parse((const char *)data, size, "fuzz.json", &j);
    if (rc == 0) {
        walk(j, 0);
        int64_t i;
        double d;
        const char *s;
        (void)lmp_json_get_int(j, "a", "fuzz.json", &i);
        (void)lmp_json_get_number(j, "a", "fuzz.json", &d);
        (void)lmp_json_get_string(j, "a", "fuzz.json", &s);
        lmp_json_free(j);
        j = NULL;
        if (lmp_json_parse((const char *)data, size, "fuzz.json", &j) != 0) abort();
        lmp_json_free(j);
    } else if (j != NULL || lmp_last_error()[0] == 0) {
        abort();
    }
    return 0;
}
