/* json.c — see json.h.  A strict RFC 8259 recursive-descent parser.
 *
 * Decisions beyond the RFC's grammar (RFC 8259 leaves these to the implementation):
 *   - A UTF-8 byte order mark at the start is rejected with its own message (the RFC says
 *     senders MUST NOT add one; Python's json.loads and serde_json reject it too, and a BOM in a
 *     safetensors header is a broken file).
 *   - Numbers too large for a double (1e400) become +-inf and tiny ones underflow to 0 or a
 *     subnormal, as strtod and Python's json module do; the RFC allows any range limit, and
 *     refusing such a file would help nobody.  `is_integer` is set only for literals without
 *     fraction or exponent that fit int64 exactly ("-0" included: integer 0, number -0.0).
 *   - Strings must be valid UTF-8 (no overlong forms, no encoded surrogates, nothing past
 *     U+10FFFF), and \u escapes must not leave a lone surrogate, so every decoded string is
 *     valid UTF-8.  Bytes >= 0x80 outside strings are errors like any other stray byte.
 *   - Duplicate object keys are kept in order; lmp_json_get returns the first.
 *   - Error columns are 1-based byte columns (what gcc and most editors' "col" show).
 *
 * Linear time: containers collect their children on one shared scratch stack and get an
 * exactly-sized array when they close (each node is copied once); strings without escapes are
 * copied straight from the input, others are decoded into a reused scratch buffer.  Line and
 * column are only computed when an error is reported. */
#include "formats/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define JSON_MAX_DEPTH 512

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    const char *what;
    /* Children of all open containers, innermost last; a container owns [base, n) of these. */
    lmp_json *nodes;
    size_t n_nodes, cap_nodes;
    /* Keys of all open objects, likewise. */
    char **keys;
    size_t *key_lens;
    size_t n_keys, cap_keys;
    /* Decoding buffer for strings with escapes and for long number literals. */
    char *buf;
    size_t buf_len, buf_cap;
} parser;

/* Reports an error at byte offset `at` as "what:line:col: message (byte N)". */
static int perr(parser *p, size_t at, const char *fmt, ...) LMP_PRINTF(3, 4);
static int perr(parser *p, size_t at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at > p->len) at = p->len;
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at; i++)
        if (p->s[i] == '\n') {
            line++;
            line_start = i + 1;
        }
    return lmp_fail(LMP_EINVAL, "%s:%zu:%zu: %s (byte %zu)", p->what, line, at - line_start + 1,
                    msg, at);
}

static int oom(parser *p) { return lmp_fail(LMP_ENOMEM, "%s: out of memory while parsing JSON", p->what); }

/* Describes the byte at pos for messages: "'x'", "byte 0xC3" or "end of input". */
static const char *describe(parser *p, size_t pos, char tmp[16])
{
    if (pos >= p->len) return "end of input";
    unsigned c = p->s[pos];
    if (c >= 0x21 && c < 0x7F)
        snprintf(tmp, 16, "'%c'", (char)c);
    else
        snprintf(tmp, 16, "byte 0x%02X", c);
    return tmp;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int push_node(parser *p, const lmp_json *v)
{
    if (p->n_nodes == p->cap_nodes) {
        size_t cap = p->cap_nodes ? 2 * p->cap_nodes : 64;
        lmp_json *n = realloc(p->nodes, cap * sizeof *n);
        if (!n) return -1;
        p->nodes = n;
        p->cap_nodes = cap;
    }
    p->nodes[p->n_nodes++] = *v;
    return 0;
}

static int push_key(parser *p, char *key, size_t len)
{
    if (p->n_keys == p->cap_keys) {
        size_t cap = p->cap_keys ? 2 * p->cap_keys : 64;
        char **k = realloc(p->keys, cap * sizeof *k);
        if (!k) return -1;
        p->keys = k;
        size_t *l = realloc(p->key_lens, cap * sizeof *l);
        if (!l) return -1;
        p->key_lens = l;
        p->cap_keys = cap;
    }
    p->keys[p->n_keys] = key;
    p->key_lens[p->n_keys] = len;
    p->n_keys++;
    return 0;
}

static int buf_reserve(parser *p, size_t extra)
{
    if (p->buf_cap - p->buf_len >= extra) return 0;
    size_t cap = p->buf_cap ? p->buf_cap : 256;
    while (cap - p->buf_len < extra) {
        if (cap > ((size_t)-1) / 2) return -1;
        cap *= 2;
    }
    char *b = realloc(p->buf, cap);
    if (!b) return -1;
    p->buf = b;
    p->buf_cap = cap;
    return 0;
}

static int buf_append(parser *p, const void *data, size_t n)
{
    if (n == 0) return 0; /* the buffer may still be NULL, and memcpy(NULL, ., 0) is undefined */
    if (buf_reserve(p, n)) return -1;
    memcpy(p->buf + p->buf_len, data, n);
    p->buf_len += n;
    return 0;
}

/* Frees what a node owns (not the node itself: nodes live inside their parent's array). */
static void free_contents(lmp_json *j)
{
    if (j->type == LMP_JSON_STRING) free(j->str);
    if (j->type == LMP_JSON_ARRAY || j->type == LMP_JSON_OBJECT) {
        for (size_t i = 0; i < j->n; i++) free_contents(&j->items[i]);
        free(j->items);
    }
    if (j->type == LMP_JSON_OBJECT) {
        for (size_t i = 0; i < j->n; i++) free(j->keys[i]);
        free(j->keys);
        free(j->key_lens);
    }
}

void lmp_json_free(lmp_json *j)
{
    if (!j) return;
    free_contents(j);
    free(j);
}

/* Length of the valid UTF-8 sequence at s[i] (first byte >= 0x80), or 0 if it is not one.
 * Table 3-7 of the Unicode standard: no overlongs, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t i, size_t len)
{
    unsigned c = s[i];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return 0;
    if (len - i <= need) return 0;
    if (s[i + 1] < lo || s[i + 1] > hi) return 0;
    for (size_t k = 2; k <= need; k++)
        if ((s[i + k] & 0xC0) != 0x80) return 0;
    return need + 1;
}

static int hex4(const unsigned char *s, size_t i, size_t len, unsigned *out)
{
    if (len - i < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = s[i + k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

static size_t utf8_encode(unsigned cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses the string whose opening quote is at p->pos into a malloc'd NUL-terminated copy. */
static int parse_string(parser *p, char **out, size_t *out_len)
{
    const unsigned char *s = p->s;
    size_t len = p->len, open = p->pos, i = p->pos + 1, seg = i;
    int escaped = 0;
    p->buf_len = 0;
    for (;;) {
        if (i >= len) return perr(p, open, "unterminated string");
        unsigned c = s[i];
        if (c == '"') break;
        if (c < 0x20) return perr(p, i, "control character 0x%02X in string (must be escaped)", c);
        if (c >= 0x80) {
            size_t n = utf8_seq(s, i, len);
            if (!n) return perr(p, i, "invalid UTF-8 byte 0x%02X in string", c);
            i += n;
            continue;
        }
        if (c != '\\') {
            i++;
            continue;
        }
        /* An escape: flush the plain run before it, then append the decoded character. */
        escaped = 1;
        if (buf_append(p, s + seg, i - seg)) return oom(p);
        if (i + 1 >= len) return perr(p, open, "unterminated string");
        char e = (char)s[i + 1], ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': ch = 0; break;
        default: {
            char tmp[16];
            return perr(p, i, "invalid escape '\\' followed by %s in string", describe(p, i + 1, tmp));
        }
        }
        if (e != 'u') {
            if (buf_append(p, &ch, 1)) return oom(p);
            i += 2;
            seg = i;
            continue;
        }
        unsigned cp;
        if (hex4(s, i + 2, len, &cp)) return perr(p, i, "invalid \\u escape (expected 4 hex digits)");
        size_t end = i + 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return perr(p, i, "lone low surrogate \\u%04X in string", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (len - end < 6 || s[end] != '\\' || s[end + 1] != 'u' || hex4(s, end + 2, len, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return perr(p, i, "high surrogate \\u%04X not followed by a low surrogate \\uDC00-\\uDFFF",
                            cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            end += 6;
        }
        char u[4];
        if (buf_append(p, u, utf8_encode(cp, u))) return oom(p);
        i = end;
        seg = i;
    }
    const char *src;
    size_t n;
    if (escaped) {
        if (buf_append(p, s + seg, i - seg)) return oom(p);
        src = p->buf;
        n = p->buf_len;
    } else {
        src = (const char *)s + open + 1; /* no escapes: the input bytes are the string */
        n = i - open - 1;
    }
    char *str = malloc(n + 1);
    if (!str) return oom(p);
    memcpy(str, src, n);
    str[n] = 0;
    *out = str;
    *out_len = n;
    p->pos = i + 1;
    return 0;
}

static int is_digit(parser *p, size_t i) { return i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; }

static int parse_number(parser *p, lmp_json *v)
{
    const unsigned char *s = p->s;
    size_t start = p->pos, i = start;
    int neg = 0;
    if (s[i] == '-') {
        neg = 1;
        i++;
    }
    if (!is_digit(p, i)) return perr(p, i, "invalid number: expected a digit after '-'");
    if (s[i] == '0') {
        i++;
        if (is_digit(p, i)) return perr(p, start, "invalid number: leading zero");
    } else {
        while (is_digit(p, i)) i++;
    }
    size_t int_end = i;
    int integral = 1;
    if (i < p->len && s[i] == '.') {
        integral = 0;
        i++;
        if (!is_digit(p, i)) return perr(p, i, "invalid number: expected a digit after '.'");
        while (is_digit(p, i)) i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
        if (!is_digit(p, i)) return perr(p, i, "invalid number: expected a digit in the exponent");
        while (is_digit(p, i)) i++;
    }
    size_t n = i - start;

    memset(v, 0, sizeof *v);
    v->type = LMP_JSON_NUMBER;
    if (integral) {
        /* Exact int64: accumulate the magnitude, which may be 2^63 for a negative literal. */
        uint64_t mag = 0, limit = neg ? (uint64_t)1 << 63 : ((uint64_t)1 << 63) - 1;
        int fits = 1;
        for (size_t k = start + (size_t)neg; k < int_end && fits; k++) {
            unsigned d = s[k] - '0';
            if (mag > (limit - d) / 10) fits = 0;
            else mag = mag * 10 + d;
        }
        if (fits) {
            v->is_integer = 1;
            /* -(2^63) is representable although +2^63 is not, so it cannot be negated. */
            if (!neg) v->integer = (int64_t)mag;
            else v->integer = mag == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)mag;
            /* Up to 2^53 the double is exact, so strtod (the slow part of a vocabulary file
             * full of ids) can be skipped; -0 stays -0.0. */
            if (mag <= (uint64_t)1 << 53) {
                v->number = neg ? -(double)mag : (double)mag;
                p->pos = i;
                return 0;
            }
        }
    }
    /* strtod needs a NUL-terminated copy (the input is not terminated and may go on). */
    char small[64], *num = small;
    if (n >= sizeof small) {
        p->buf_len = 0;
        if (buf_reserve(p, n + 1)) return oom(p);
        num = p->buf;
    }
    memcpy(num, s + start, n);
    num[n] = 0;
    char *end;
    errno = 0;
    v->number = strtod(num, &end);
    /* ERANGE is fine (see the top of the file); a short parse would mean a locale whose
     * decimal point is not '.', which must not silently give wrong values. */
    if (end != num + n)
        return perr(p, start, "number not understood by strtod (LC_NUMERIC is not \"C\"?)");
    p->pos = i;
    return 0;
}

static int parse_value(parser *p, int depth, lmp_json *v);

static int parse_array(parser *p, int depth, lmp_json *v)
{
    size_t open = p->pos, base = p->n_nodes;
    if (depth >= JSON_MAX_DEPTH) return perr(p, open, "nesting deeper than %d", JSON_MAX_DEPTH);
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
    } else {
        for (;;) {
            lmp_json child;
            skip_ws(p);
            if (p->pos >= p->len) return perr(p, open, "unterminated array");
            int rc = parse_value(p, depth + 1, &child);
            if (rc) return rc;
            if (push_node(p, &child)) {
                free_contents(&child);
                return oom(p);
            }
            skip_ws(p);
            if (p->pos >= p->len) return perr(p, open, "unterminated array");
            char c = (char)p->s[p->pos];
            if (c == ']') {
                p->pos++;
                break;
            }
            if (c != ',') return perr(p, p->pos, "expected ',' or ']' in array");
            p->pos++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ']')
                return perr(p, p->pos, "trailing comma before ']' in array");
        }
    }
    size_t n = p->n_nodes - base;
    memset(v, 0, sizeof *v);
    v->type = LMP_JSON_ARRAY;
    if (n) {
        v->items = malloc(n * sizeof *v->items);
        if (!v->items) return oom(p);
        memcpy(v->items, p->nodes + base, n * sizeof *v->items);
    }
    v->n = n;
    p->n_nodes = base;
    return 0;
}

static int parse_object(parser *p, int depth, lmp_json *v)
{
    size_t open = p->pos, base = p->n_nodes, kbase = p->n_keys;
    if (depth >= JSON_MAX_DEPTH) return perr(p, open, "nesting deeper than %d", JSON_MAX_DEPTH);
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            if (p->pos >= p->len) return perr(p, open, "unterminated object");
            if (p->s[p->pos] != '"') {
                char tmp[16];
                return perr(p, p->pos, "expected a string key in object, found %s",
                            describe(p, p->pos, tmp));
            }
            char *key;
            size_t klen;
            int rc = parse_string(p, &key, &klen);
            if (rc) return rc;
            if (push_key(p, key, klen)) {
                free(key);
                return oom(p);
            }
            skip_ws(p);
            if (p->pos >= p->len) return perr(p, open, "unterminated object");
            if (p->s[p->pos] != ':') return perr(p, p->pos, "expected ':' after object key");
            p->pos++;
            skip_ws(p);
            if (p->pos >= p->len) return perr(p, open, "unterminated object");
            lmp_json child;
            rc = parse_value(p, depth + 1, &child);
            if (rc) return rc;
            if (push_node(p, &child)) {
                free_contents(&child);
                return oom(p);
            }
            skip_ws(p);
            if (p->pos >= p->len) return perr(p, open, "unterminated object");
            char c = (char)p->s[p->pos];
            if (c == '}') {
                p->pos++;
                break;
            }
            if (c != ',') return perr(p, p->pos, "expected ',' or '}' in object");
            p->pos++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == '}')
                return perr(p, p->pos, "trailing comma before '}' in object");
        }
    }
    size_t n = p->n_nodes - base;
    memset(v, 0, sizeof *v);
    v->type = LMP_JSON_OBJECT;
    if (n) {
        v->items = malloc(n * sizeof *v->items);
        v->keys = malloc(n * sizeof *v->keys);
        v->key_lens = malloc(n * sizeof *v->key_lens);
        if (!v->items || !v->keys || !v->key_lens) {
            free(v->items);
            free(v->keys);
            free(v->key_lens);
            return oom(p);
        }
        memcpy(v->items, p->nodes + base, n * sizeof *v->items);
        memcpy(v->keys, p->keys + kbase, n * sizeof *v->keys);
        memcpy(v->key_lens, p->key_lens + kbase, n * sizeof *v->key_lens);
    }
    v->n = n;
    p->n_nodes = base;
    p->n_keys = kbase;
    return 0;
}

static int literal(parser *p, const char *word, size_t n)
{
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return perr(p, p->pos, "invalid literal (expected true, false or null)");
    p->pos += n;
    return 0;
}

/* Parses one value at p->pos (after whitespace) into *v; `depth` counts the enclosing
 * containers.  On failure *v owns nothing: partial children stay on the scratch stacks, which
 * lmp_json_parse frees. */
static int parse_value(parser *p, int depth, lmp_json *v)
{
    skip_ws(p);
    if (p->pos >= p->len) return perr(p, p->pos, "unexpected end of input, expected a value");
    unsigned char c = p->s[p->pos];
    int rc;
    switch (c) {
    case '{': return parse_object(p, depth, v);
    case '[': return parse_array(p, depth, v);
    case '"': {
        char *str;
        size_t n;
        if ((rc = parse_string(p, &str, &n))) return rc;
        memset(v, 0, sizeof *v);
        v->type = LMP_JSON_STRING;
        v->str = str;
        v->str_len = n;
        return 0;
    }
    case 't':
    case 'f':
        if ((rc = literal(p, c == 't' ? "true" : "false", c == 't' ? 4 : 5))) return rc;
        memset(v, 0, sizeof *v);
        v->type = LMP_JSON_BOOL;
        v->boolean = c == 't';
        return 0;
    case 'n':
        if ((rc = literal(p, "null", 4))) return rc;
        memset(v, 0, sizeof *v);
        v->type = LMP_JSON_NULL;
        return 0;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
        {
            char tmp[16];
            if (c == ']' || c == '}' || c == ',')
                return perr(p, p->pos, "unexpected '%c', expected a value", c);
            return perr(p, p->pos, "unexpected %s, expected a value", describe(p, p->pos, tmp));
        }
    }
}

int lmp_json_parse(const char *text, size_t len, const char *what, lmp_json **out)
{
    *out = NULL;
    parser p;
    memset(&p, 0, sizeof p);
    p.s = (const unsigned char *)text;
    p.len = text ? len : 0;
    p.what = what ? what : "JSON";
    int rc;
    if (p.len >= 3 && p.s[0] == 0xEF && p.s[1] == 0xBB && p.s[2] == 0xBF) {
        rc = perr(&p, 0, "UTF-8 byte order mark at the start (not allowed in JSON; save the file "
                         "without a BOM)");
        goto done;
    }
    skip_ws(&p);
    if (p.pos >= p.len) {
        rc = perr(&p, p.pos, "empty document (no JSON value)");
        goto done;
    }
    lmp_json v;
    if ((rc = parse_value(&p, 0, &v))) goto done;
    skip_ws(&p);
    if (p.pos < p.len) {
        char tmp[16];
        free_contents(&v);
        rc = perr(&p, p.pos, "trailing characters after the JSON value (%s)", describe(&p, p.pos, tmp));
        goto done;
    }
    lmp_json *root = malloc(sizeof *root);
    if (!root) {
        free_contents(&v);
        rc = oom(&p);
        goto done;
    }
    *root = v;
    *out = root;
done:
    /* After a failure the scratch stacks hold the finished children of the open containers. */
    for (size_t i = 0; i < p.n_nodes; i++) free_contents(&p.nodes[i]);
    for (size_t i = 0; i < p.n_keys; i++) free(p.keys[i]);
    free(p.nodes);
    free(p.keys);
    free(p.key_lens);
    free(p.buf);
    return rc;
}

const lmp_json *lmp_json_get(const lmp_json *j, const char *key)
{
    if (!j || j->type != LMP_JSON_OBJECT || !key) return NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < j->n; i++)
        if (j->key_lens[i] == klen && memcmp(j->keys[i], key, klen) == 0) return &j->items[i];
    return NULL;
}

static const char *type_name(lmp_json_type t)
{
    switch (t) {
    case LMP_JSON_NULL: return "null";
    case LMP_JSON_BOOL: return "a boolean";
    case LMP_JSON_NUMBER: return "a number";
    case LMP_JSON_STRING: return "a string";
    case LMP_JSON_ARRAY: return "an array";
    case LMP_JSON_OBJECT: return "an object";
    }
    return "?";
}

/* The member, or an error naming the document and key. */
static int member(const lmp_json *j, const char *key, const char *what, lmp_json_type type,
                  const lmp_json **m)
{
    if (!what) what = "JSON";
    if (!j || j->type != LMP_JSON_OBJECT)
        return lmp_fail(LMP_EINVAL, "%s: cannot look up \"%s\": not an object", what, key);
    *m = lmp_json_get(j, key);
    if (!*m) return lmp_fail(LMP_EINVAL, "%s: missing key \"%s\"", what, key);
    if ((*m)->type != type)
        return lmp_fail(LMP_EINVAL, "%s: \"%s\" is %s, expected %s", what, key, type_name((*m)->type),
                        type_name(type));
    return 0;
}

int lmp_json_get_int(const lmp_json *j, const char *key, const char *what, int64_t *out)
{
    const lmp_json *m;
    int rc = member(j, key, what, LMP_JSON_NUMBER, &m);
    if (rc) return rc;
    if (m->is_integer) {
        *out = m->integer;
        return 0;
    }
    /* Some writers emit integral values as 4096.0 or 1e3: accept those while the double holds
     * the integer exactly (|x| <= 2^53); anything else is not an integer. */
    double x = m->number;
    if (x == x && x >= -9007199254740992.0 && x <= 9007199254740992.0 && x == (double)(int64_t)x) {
        *out = (int64_t)x;
        return 0;
    }
    return lmp_fail(LMP_EINVAL, "%s: \"%s\" is %.17g, expected an integer", what ? what : "JSON", key,
                    x);
}

int lmp_json_get_number(const lmp_json *j, const char *key, const char *what, double *out)
{
    const lmp_json *m;
    int rc = member(j, key, what, LMP_JSON_NUMBER, &m);
    if (rc) return rc;
    *out = m->number;
    return 0;
}

int lmp_json_get_string(const lmp_json *j, const char *key, const char *what, const char **out)
{
    const lmp_json *m;
    int rc = member(j, key, what, LMP_JSON_STRING, &m);
    if (rc) return rc;
    *out = m->str;
    return 0;
}
