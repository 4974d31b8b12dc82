/* tokenizer_norm.c — tokenizer.json normalizers (see tokenizer_norm.h).
 *
 * Unicode normalization uses libutf8proc (Debian's libutf8proc-dev) rather than tables generated
 * into unicode_tables.c: NFC/NFKC need the canonical and compatibility decompositions, the
 * combining classes, the composition pairs and the composition exclusions, with the canonical
 * reordering and the Hangul arithmetic — about 6000 table entries and an algorithm with known
 * traps (blocked starters, singleton exclusions).  utf8proc is a small, maintained C library
 * (used by Julia and PostgreSQL) that implements exactly UAX #15, so lmpress keeps no second copy
 * of it.  Its Unicode version can differ from the one `tokenizers` was built with only for
 * characters assigned in between. */
#include "text/tokenizer_norm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_REPLACE, N_PREPEND };

typedef struct {
    int kind;
    char *a;      /* REPLACE: the pattern; PREPEND: the text */
    size_t na;
    char *b;      /* REPLACE: the content */
    size_t nb;
} norm_step;

struct lmp_tok_norm {
    norm_step *steps;
    int n;
};

void lmp_tok_norm_free(lmp_tok_norm *n)
{
    if (!n) return;
    for (int i = 0; i < n->n; i++) {
        free(n->steps[i].a);
        free(n->steps[i].b);
    }
    free(n->steps);
    free(n);
}

static const char *jtype(const lmp_json *o)
{
    const lmp_json *t = o && o->type == LMP_JSON_OBJECT ? lmp_json_get(o, "type") : NULL;
    return t && t->type == LMP_JSON_STRING ? t->str : NULL;
}

/* Refuses a member other than the listed ones: an option this reader does not know may change
 * the text. */
static int only_keys(const lmp_json *o, const char *const *keys, const char *path, const char *what)
{
    for (size_t k = 0; k < o->n; k++) {
        int ok = 0;
        for (const char *const *q = keys; *q && !ok; q++) ok = strcmp(o->keys[k], *q) == 0;
        if (!ok)
            return lmp_fail(LMP_EINVAL, "%s: normalizer %s: option \"%.64s\" is not supported", path, what,
                            o->keys[k]);
    }
    return 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int add_step(lmp_tok_norm *n, norm_step st, const char *path)
{
    norm_step *g = realloc(n->steps, (size_t)(n->n + 1) * sizeof *g);
    if (!g) {
        free(st.a);
        free(st.b);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory reading the normalizer", path);
    }
    n->steps = g;
    n->steps[n->n++] = st;
    return 0;
}

static int parse_one(lmp_tok_norm *n, const lmp_json *j, const char *path, int depth)
{
    const char *type = jtype(j);
    if (!type) return lmp_fail(LMP_EINVAL, "%s: normalizer: an entry has no \"type\"", path);
    if (depth > 16) return lmp_fail(LMP_EINVAL, "%s: normalizer: Sequences nested too deep", path);
    static const char *const just_type[] = {"type", NULL};
    static const struct { const char *name; int kind; } forms[] = {
        {"NFC", N_NFC}, {"NFD", N_NFD}, {"NFKC", N_NFKC}, {"NFKD", N_NFKD}};
    for (size_t k = 0; k < sizeof forms / sizeof *forms; k++)
        if (strcmp(type, forms[k].name) == 0) {
            int rc = only_keys(j, just_type, path, type);
            return rc ? rc : add_step(n, (norm_step){forms[k].kind, NULL, 0, NULL, 0}, path);
        }
    if (strcmp(type, "Sequence") == 0) {
        static const char *const keys[] = {"type", "normalizers", NULL};
        int rc = only_keys(j, keys, path, type);
        if (rc) return rc;
        const lmp_json *list = lmp_json_get(j, "normalizers");
        if (!list || list->type != LMP_JSON_ARRAY)
            return lmp_fail(LMP_EINVAL, "%s: normalizer Sequence has no \"normalizers\" array", path);
        for (size_t k = 0; k < list->n; k++)
            if ((rc = parse_one(n, &list->items[k], path, depth + 1)) != 0) return rc;
        return 0;
    }
    if (strcmp(type, "Replace") == 0) {
        static const char *const keys[] = {"type", "pattern", "content", NULL};
        int rc = only_keys(j, keys, path, type);
        if (rc) return rc;
        const lmp_json *pat = lmp_json_get(j, "pattern"), *content = lmp_json_get(j, "content");
        const lmp_json *lit = pat && pat->type == LMP_JSON_OBJECT ? lmp_json_get(pat, "String") : NULL;
        if (pat && pat->type == LMP_JSON_OBJECT && lmp_json_get(pat, "Regex"))
            return lmp_fail(LMP_EINVAL, "%s: normalizer Replace: a \"Regex\" pattern is not supported", path);
        if (!lit || lit->type != LMP_JSON_STRING || lit->str_len == 0 || !content ||
            content->type != LMP_JSON_STRING)
            return lmp_fail(LMP_EINVAL, "%s: normalizer Replace needs pattern {\"String\": ...} and \"content\"",
                            path);
        norm_step st = {N_REPLACE, dup_n(lit->str, lit->str_len), lit->str_len,
                        dup_n(content->str, content->str_len), content->str_len};
        if (!st.a || !st.b) {
            free(st.a);
            free(st.b);
            return lmp_fail(LMP_ENOMEM, "%s: out of memory reading the normalizer", path);
        }
        return add_step(n, st, path);
    }
    if (strcmp(type, "Prepend") == 0) {
        static const char *const keys[] = {"type", "prepend", NULL};
        int rc = only_keys(j, keys, path, type);
        if (rc) return rc;
        const lmp_json *p = lmp_json_get(j, "prepend");
        if (!p || p->type != LMP_JSON_STRING)
            return lmp_fail(LMP_EINVAL, "%s: normalizer Prepend has no \"prepend\" string", path);
        norm_step st = {N_PREPEND, dup_n(p->str, p->str_len), p->str_len, NULL, 0};
        if (!st.a) return lmp_fail(LMP_ENOMEM, "%s: out of memory reading the normalizer", path);
        return add_step(n, st, path);
    }
    return lmp_fail(LMP_EINVAL,
                    "%s: normalizer \"%.64s\" is not supported (supported: NFC, NFD, NFKC, NFKD, Replace with "
                    "a String pattern, Prepend, Sequence)", path, type);
}

int lmp_tok_norm_parse(const lmp_json *j, const char *path, lmp_tok_norm **out)
{
    *out = NULL;
    if (!j || j->type == LMP_JSON_NULL) return 0;
    lmp_tok_norm *n = calloc(1, sizeof *n);
    if (!n) return lmp_fail(LMP_ENOMEM, "%s: out of memory reading the normalizer", path);
    int rc = parse_one(n, j, path, 0);
    if (rc) {
        lmp_tok_norm_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

int lmp_tok_norm_is_nfc_only(const lmp_tok_norm *n) { return n && n->n == 1 && n->steps[0].kind == N_NFC; }

/* A growable byte buffer. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf;

static int put(buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n) c *= 2;
        unsigned char *g = realloc(b->p, c);
        if (!g) return -1;
        b->p = g;
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* Length of the valid UTF-8 character at s[i], or 0 if the bytes there are not one. */
static size_t valid_char(const unsigned char *s, size_t i, size_t len)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    return k > 0 ? (size_t)k : 0;
}

static int unicode_form(int kind, const unsigned char *s, size_t len, buf *o)
{
    utf8proc_option_t opt = UTF8PROC_STABLE;
    if (kind == N_NFC || kind == N_NFKC) opt |= UTF8PROC_COMPOSE;
    else opt |= UTF8PROC_DECOMPOSE;
    if (kind == N_NFKC || kind == N_NFKD) opt |= UTF8PROC_COMPAT;
    size_t i = 0;
    while (i < len) {
        size_t j = i, k;
        while (j < len && (k = valid_char(s, j, len)) > 0) j += k;
        if (j > i) { /* a valid run */
            utf8proc_uint8_t *r = NULL;
            utf8proc_ssize_t m = utf8proc_map(s + i, (utf8proc_ssize_t)(j - i), &r, opt);
            if (m < 0) { /* only UTF8PROC_ERROR_NOMEM can happen on valid input */
                free(r);
                return -1;
            }
            int rc = put(o, r, (size_t)m);
            free(r);
            if (rc) return -1;
        }
        if (j < len && put(o, s + j, 1)) return -1; /* an invalid byte, as is */
        i = j + (j < len);
    }
    return 0;
}

static int apply_step(const norm_step *st, const unsigned char *s, size_t len, buf *o)
{
    switch (st->kind) {
    case N_REPLACE:
        for (size_t i = 0; i < len;) {
            if (len - i >= st->na && memcmp(s + i, st->a, st->na) == 0) {
                if (put(o, st->b, st->nb)) return -1;
                i += st->na;
            } else {
                if (put(o, s + i, 1)) return -1;
                i++;
            }
        }
        return 0;
    case N_PREPEND:
        if (len && put(o, st->a, st->na)) return -1;
        return put(o, s, len);
    default:
        return unicode_form(st->kind, s, len, o);
    }
}

int lmp_tok_norm_apply(const lmp_tok_norm *n, const unsigned char *s, size_t len, unsigned char **out,
                       size_t *out_len)
{
    buf cur = {0};
    if (put(&cur, s, len) || put(&cur, "", 0)) goto oom;
    if (!cur.p && put(&cur, "\0", 1) == 0) cur.n = 0; /* never NULL */
    for (int i = 0; n && i < n->n; i++) {
        buf next = {0};
        if (apply_step(&n->steps[i], cur.p, cur.n, &next)) {
            free(next.p);
            goto oom;
        }
        if (!next.p && put(&next, "\0", 1) == 0) next.n = 0;
        free(cur.p);
        cur = next;
        if (!cur.p) goto oom;
    }
    *out = cur.p;
    *out_len = cur.n;
    return 0;
oom:
    free(cur.p);
    return -1;
}
