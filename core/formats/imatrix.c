/* imatrix.c — see imatrix.h.  The arithmetic is llama-quantize's load_imatrix
 * (tools/quantize/quantize.cpp) on what common_imatrix_load (common/imatrix-loader.cpp) reads;
 * the checks are lmpress's: llama.cpp trusts the file, lmpress refuses what would make the
 * search meaningless (NaN, negative or infinite importance) or the reading unsafe. */
#include "formats/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/input_file.h"
#include "formats/gguf.h"
#include "formats/gguf_le.h"

#define SUFFIX_SUM2 ".in_sum2"
#define SUFFIX_COUNTS ".counts"

void lmp_imatrix_free(lmp_imatrix *im)
{
    if (!im) return;
    for (int64_t i = 0; im->entries && i < im->n_entries; i++) {
        free(im->entries[i].name);
        free(im->entries[i].values);
    }
    free(im->entries);
    free(im->dataset);
    free(im->path);
    free(im);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const lmp_imatrix_entry *)a)->name, ((const lmp_imatrix_entry *)b)->name);
}

const lmp_imatrix_entry *lmp_imatrix_find(const lmp_imatrix *im, const char *name)
{
    if (!im || !name || !im->n_entries) return NULL;
    const lmp_imatrix_entry key = {.name = (char *)name};
    return bsearch(&key, im->entries, (size_t)im->n_entries, sizeof key, by_name);
}

/* An importance is a weight in a least-squares search: NaN or infinity would poison every sum
 * of its block, and a negative one would reward error.  Zero is fine (an input that never fires:
 * llama-quantize ignores it too). */
static int check_value(const char *what, const char *entry, const char *field, int64_t j, float v)
{
    if (isfinite(v) && v >= 0.0f) return 0;
    return lmp_fail(LMP_EINVAL, "%s: entry '%s': %s[%lld] is %g: an importance must be a finite number >= 0", what,
                    entry, field, (long long)j, (double)v);
}

/* Sorted by name, so lookups can bisect and a name given twice sits next to itself. */
static int sort_entries(lmp_imatrix *im, const char *what)
{
    qsort(im->entries, (size_t)im->n_entries, sizeof *im->entries, by_name);
    for (int64_t i = 1; i < im->n_entries; i++)
        if (strcmp(im->entries[i - 1].name, im->entries[i].name) == 0)
            return lmp_fail(LMP_EINVAL, "%s: entry '%s' appears twice", what, im->entries[i].name);
    return 0;
}

/* ---- the GGUF form ------------------------------------------------------------------------- */

/* Does `name` end in `suffix` with something before it? */
static int has_suffix(const char *name, const char *suffix)
{
    const size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

static int64_t n_elements(const lmp_gguf_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d]; /* the GGUF reader bounds them by the file */
    return n;
}

/* One pair W.in_sum2 + W.counts into e: in_sum2 / counts per row, as load_imatrix divides. */
static int gguf_entry(const char *what, const lmp_gguf_tensor *sum2, const lmp_gguf_tensor *counts,
                      lmp_imatrix_entry *e)
{
    const char *name = e->name;
    if (sum2->type != LMP_GGML_F32 || counts->type != LMP_GGML_F32)
        return lmp_fail(LMP_EINVAL, "%s: entry '%s': in_sum2 and counts must be F32 (they are %s and %s)", what, name,
                        lmp_ggml_type_name(sum2->type), lmp_ggml_type_name(counts->type));
    const int64_t nval = n_elements(sum2), rows = n_elements(counts);
    if (nval < 1 || rows < 1 || nval % rows != 0)
        return lmp_fail(LMP_EINVAL, "%s: entry '%s': in_sum2 has %lld values, not a whole row for each of its %lld "
                        "counts", what, name, (long long)nval, (long long)rows);
    e->rows = rows;
    e->n = nval / rows;
    if (!(e->values = malloc((size_t)nval * sizeof *e->values)))
        return lmp_fail(LMP_ENOMEM, "%s: out of memory for entry '%s'", what, name);
    const unsigned char *s = sum2->data, *c = counts->data;
    for (int64_t r = 0; r < rows; r++) {
        const float raw = bits_to_f32(ld32(c + 4 * r));
        /* llama.cpp rounds each count to an integer (lround) and divides by it as a float */
        if (!isfinite(raw) || raw < 0.0f || raw > 0x1p62f)
            return lmp_fail(LMP_EINVAL, "%s: entry '%s': counts[%lld] is %g: a count of tokens must be a finite "
                            "number >= 0", what, name, (long long)r, (double)raw);
        const float count = (float)lroundf(raw);
        e->empty_rows += count == 0.0f;
        for (int64_t j = 0; j < e->n; j++) {
            const int64_t k = r * e->n + j;
            const float v = bits_to_f32(ld32(s + 4 * k));
            int st = check_value(what, name, "in_sum2", k, v);
            if (st) return st;
            e->values[k] = count > 0.0f ? v / count : 1.0f; /* a row no token reached: 1s, as llama-quantize */
        }
    }
    return 0;
}

/* llama-quantize refuses a GGUF without its imatrix.* metadata; so does lmpress, which also
 * tells a model file given by mistake from an importance matrix this way. */
static int gguf_metadata(const char *what, const lmp_gguf *g, lmp_imatrix *im)
{
    static const char *const keys[] = {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"};
    for (int i = 0; i < 3; i++)
        if (!lmp_gguf_find_kv(g, keys[i]))
            return lmp_fail(LMP_EINVAL, "%s: not a llama.cpp importance matrix: the key %s is missing (llama-imatrix "
                            "writes imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size; llama-quantize "
                            "refuses a file without them)", what, keys[i]);
    int64_t chunks, chunk_size;
    int st = lmp_gguf_get_int(g, "imatrix.chunk_count", &chunks);
    if (!st) st = lmp_gguf_get_int(g, "imatrix.chunk_size", &chunk_size);
    if (st) return lmp_fail_prefix(st, "%s", what);
    im->chunk_count = chunks;
    const lmp_gguf_kv *ds = lmp_gguf_find_kv(g, "imatrix.datasets");
    if (ds->type != LMP_GGUF_ARRAY || ds->arr_type != LMP_GGUF_STRING)
        return lmp_fail(LMP_EINVAL, "%s: imatrix.datasets is not an array of strings", what);
    if (ds->n > 0) {
        const uint64_t len = ds->str_lens[0];
        if (!(im->dataset = malloc((size_t)len + 1))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
        memcpy(im->dataset, ds->strs[0], (size_t)len);
        im->dataset[len] = 0;
    }
    return 0;
}

static int parse_gguf(const void *data, size_t size, const char *what, lmp_imatrix *im)
{
    lmp_gguf *g = NULL;
    int st = lmp_gguf_parse(data, size, what, &g);
    if (st) return st;
    st = gguf_metadata(what, g, im);
    /* Every in_sum2 with its counts; a counts tensor alone is the same mismatch the other way. */
    int64_t n = 0;
    for (uint64_t i = 0; !st && i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        const int sum2 = has_suffix(name, SUFFIX_SUM2), counts = has_suffix(name, SUFFIX_COUNTS);
        if (!sum2 && !counts) continue; /* llama.cpp ignores other tensors too */
        const size_t stem = strlen(name) - strlen(sum2 ? SUFFIX_SUM2 : SUFFIX_COUNTS);
        char *other = malloc(stem + sizeof SUFFIX_SUM2);
        if (!other) {
            st = lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
            break;
        }
        snprintf(other, stem + sizeof SUFFIX_SUM2, "%.*s%s", (int)stem, name, sum2 ? SUFFIX_COUNTS : SUFFIX_SUM2);
        if (!lmp_gguf_find_tensor(g, other))
            st = lmp_fail(LMP_EINVAL, "%s: entry '%.*s': %s has no %s beside it", what, (int)stem, name,
                          sum2 ? "in_sum2" : "counts", sum2 ? "counts" : "in_sum2");
        free(other);
        n += sum2;
    }
    if (!st && n == 0)
        st = lmp_fail(LMP_EINVAL, "%s: the importance matrix holds no entry (no tensor named <weight>" SUFFIX_SUM2 ")",
                      what);
    if (!st && !(im->entries = calloc((size_t)n, sizeof *im->entries)))
        st = lmp_fail(LMP_ENOMEM, "%s: out of memory for %lld entries", what, (long long)n);
    for (uint64_t i = 0; !st && i < g->n_tensors; i++) {
        const lmp_gguf_tensor *t = &g->tensors[i];
        if (!has_suffix(t->name, SUFFIX_SUM2)) continue;
        const size_t stem = strlen(t->name) - strlen(SUFFIX_SUM2);
        lmp_imatrix_entry *e = &im->entries[im->n_entries++];
        char *counts = malloc(stem + sizeof SUFFIX_COUNTS);
        if (!counts || !(e->name = malloc(stem + 1))) {
            free(counts);
            st = lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
            break;
        }
        memcpy(e->name, t->name, stem);
        e->name[stem] = 0;
        snprintf(counts, stem + sizeof SUFFIX_COUNTS, "%s%s", e->name, SUFFIX_COUNTS);
        st = gguf_entry(what, t, lmp_gguf_find_tensor(g, counts), e); /* there: checked above */
        free(counts);
    }
    lmp_gguf_close(g);
    return st;
}

/* ---- the legacy .dat form -------------------------------------------------------------------- */

typedef struct cursor {
    const unsigned char *p;
    size_t left;
    const char *what;
} cursor;

/* An int32 for `field`, or a message that the file ends before it (`where` says in what). */
static int rd_i32(cursor *c, const char *field, const char *where, int32_t *out)
{
    if (c->left < 4)
        return lmp_fail(LMP_EINVAL, "%s: truncated: the file ends in %s, before its %s", c->what, where, field);
    *out = (int32_t)ld32(c->p);
    c->p += 4;
    c->left -= 4;
    return 0;
}

/* One entry: name, ncall, nval, the values divided by ncall (load_imatrix's legacy branch). */
static int legacy_entry(cursor *c, int32_t index, lmp_imatrix_entry *e)
{
    char where[64];
    snprintf(where, sizeof where, "entry %d", (int)index);
    int32_t len = 0, ncall = 0, nval = 0;
    int st = rd_i32(c, "name length", where, &len);
    if (st) return st;
    if (len < 1 || (size_t)len > c->left)
        return lmp_fail(LMP_EINVAL, "%s: %s: name length %d %s", c->what, where, (int)len,
                        len < 1 ? "is not positive" : "runs past the end of the file (truncated?)");
    if (memchr(c->p, 0, (size_t)len))
        return lmp_fail(LMP_EINVAL, "%s: %s: the name contains a NUL byte", c->what, where);
    if (!(e->name = malloc((size_t)len + 1))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", c->what);
    memcpy(e->name, c->p, (size_t)len);
    e->name[len] = 0;
    c->p += len;
    c->left -= (size_t)len;
    snprintf(where, sizeof where, "entry '%.40s'", e->name);
    if ((st = rd_i32(c, "ncall", where, &ncall)) || (st = rd_i32(c, "value count", where, &nval))) return st;
    if (ncall < 0)
        return lmp_fail(LMP_EINVAL, "%s: %s: ncall is %d, a negative number of chunks", c->what, where, (int)ncall);
    if (nval < 1)
        return lmp_fail(LMP_EINVAL, "%s: %s: %d values: an entry holds at least one", c->what, where, (int)nval);
    if ((size_t)nval > c->left / 4)
        return lmp_fail(LMP_EINVAL, "%s: truncated: %s announces %d values, the file has %zu bytes left", c->what,
                        where, (int)nval, c->left);
    e->rows = 1;
    e->n = nval;
    if (!(e->values = malloc((size_t)nval * sizeof *e->values)))
        return lmp_fail(LMP_ENOMEM, "%s: out of memory for %s", c->what, where);
    for (int32_t j = 0; j < nval; j++) {
        const float v = bits_to_f32(ld32(c->p + 4 * (size_t)j));
        if ((st = check_value(c->what, e->name, "value", j, v))) return st;
        /* the values hold (sum / count) * ncall: llama-quantize divides ncall out again, in f32 */
        e->values[j] = ncall > 0 ? v / (float)ncall : v;
    }
    c->p += 4 * (size_t)nval;
    c->left -= 4 * (size_t)nval;
    return 0;
}

/* The optional trailer: nothing, the chunk count alone (older llama-imatrix), or the chunk count
 * and the dataset's name.  Anything else means a damaged file, which llama.cpp would read past
 * in silence. */
static int legacy_trailer(cursor *c, lmp_imatrix *im)
{
    int32_t chunks = 0, len = 0;
    if (c->left == 0) return 0;
    int st = rd_i32(c, "chunk count", "the trailer", &chunks);
    if (st) return st;
    im->chunk_count = chunks;
    if (c->left == 0) return 0;
    if ((st = rd_i32(c, "dataset name length", "the trailer", &len))) return st;
    if (len < 0 || (size_t)len != c->left)
        return lmp_fail(LMP_EINVAL, "%s: the trailer's dataset name is %d bytes, but %zu bytes follow (a damaged or "
                        "truncated file)", c->what, (int)len, c->left);
    if (len > 0 && !(im->dataset = malloc((size_t)len + 1))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", c->what);
    if (len > 0) {
        memcpy(im->dataset, c->p, (size_t)len);
        im->dataset[len] = 0;
    }
    return 0;
}

static int parse_legacy(const void *data, size_t size, const char *what, lmp_imatrix *im)
{
    cursor c = {.p = data, .left = size, .what = what};
    int32_t n = 0;
    int st = rd_i32(&c, "entry count", "its header", &n);
    if (st) return st;
    /* The smallest entry takes 17 bytes (lengths, a 1-byte name, ncall, nval, one value): a count
     * the file cannot hold is refused before anything is allocated for it. */
    if (n < 1 || (size_t)n > c.left / 17)
        return lmp_fail(LMP_EINVAL, "%s: %s: the header announces %d entries in %zu bytes (neither a GGUF nor a "
                        "legacy llama.cpp importance matrix?)", what, n < 1 ? "no entries" : "truncated", (int)n, size);
    im->legacy = 1;
    if (!(im->entries = calloc((size_t)n, sizeof *im->entries)))
        return lmp_fail(LMP_ENOMEM, "%s: out of memory for %d entries", what, (int)n);
    for (int32_t i = 0; i < n && !st; i++) {
        im->n_entries = i + 1; /* freed from here on */
        st = legacy_entry(&c, i, &im->entries[i]);
    }
    return st ? st : legacy_trailer(&c, im);
}

/* ---- entry points ------------------------------------------------------------------------------ */

int lmp_imatrix_parse(const void *data, size_t size, const char *what, lmp_imatrix **out)
{
    *out = NULL;
    if (!what) what = "<memory>";
    lmp_imatrix *im = calloc(1, sizeof *im);
    if (!im || !(im->path = strdup(what))) {
        free(im);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    im->chunk_count = -1;
    const int gguf = size >= 4 && memcmp(data, "GGUF", 4) == 0;
    int st = gguf ? parse_gguf(data, size, what, im) : parse_legacy(data, size, what, im);
    if (!st) st = sort_entries(im, what);
    if (st) {
        lmp_imatrix_free(im);
        return st;
    }
    *out = im;
    return 0;
}

int lmp_imatrix_load(const char *path, lmp_imatrix **out)
{
    *out = NULL;
    char *data;
    size_t len;
    int st = lmp_input_read(path, LMP_INPUT_IMATRIX, &data, &len);
    if (st) return st;
    st = lmp_imatrix_parse(data, len, path, out);
    free(data);
    return st;
}
