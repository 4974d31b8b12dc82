/* json_write.c — see json_write.h. */
#include "formats/json_write.h"

#include <math.h>
#include <stdlib.h>

void lmp_jw_string_n(FILE *f, const char *s, size_t len)
{
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch == '\r') fputs("\\r", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch); /* NUL included: a decoded "\u0000" */
        else fputc(ch, f);
    }
    fputc('"', f);
}

void lmp_jw_string(FILE *f, const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    lmp_jw_string_n(f, s, n);
}

void lmp_jw_double(FILE *f, double x)
{
    if (!isfinite(x)) {
        fputs("null", f);
        return;
    }
    char buf[40];
    if (x == floor(x) && fabs(x) < 1e15) { /* 10000.0, not 1e+04: as Python writes it */
        fprintf(f, "%.1f", x);
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    fputs(buf, f);
}

void lmp_jw_float(FILE *f, float x)
{
    if (!isfinite(x)) {
        fputs("null", f);
        return;
    }
    char buf[40];
    if (x == floorf(x) && fabsf(x) < 1e7f) {
        fprintf(f, "%.1f", (double)x);
        return;
    }
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    fputs(buf, f);
}

void lmp_jw_indent(FILE *f, int depth)
{
    if (depth < 0) return;
    fputc('\n', f);
    for (int i = 0; i < depth; i++) fputs("  ", f);
}

void lmp_jw_tree(FILE *f, const lmp_json *j, int depth)
{
    switch (j->type) {
    case LMP_JSON_NULL: fputs("null", f); return;
    case LMP_JSON_BOOL: fputs(j->boolean ? "true" : "false", f); return;
    case LMP_JSON_NUMBER:
        if (j->is_integer) fprintf(f, "%lld", (long long)j->integer);
        else lmp_jw_double(f, j->number);
        return;
    case LMP_JSON_STRING: lmp_jw_string_n(f, j->str, j->str_len); return;
    case LMP_JSON_ARRAY:
    case LMP_JSON_OBJECT: break;
    }
    const int obj = j->type == LMP_JSON_OBJECT;
    fputc(obj ? '{' : '[', f);
    for (size_t i = 0; i < j->n; i++) {
        if (i) fputc(',', f);
        if (depth >= 0) lmp_jw_indent(f, depth + 1);
        if (obj) {
            lmp_jw_string_n(f, j->keys[i], j->key_lens[i]);
            fputs(": ", f);
        }
        lmp_jw_tree(f, &j->items[i], depth < 0 ? -1 : depth + 1);
    }
    if (j->n && depth >= 0) lmp_jw_indent(f, depth);
    fputc(obj ? '}' : ']', f);
}
