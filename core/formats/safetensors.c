/* safetensors.c — see safetensors.h.
 *
 * Opening is three passes: (1) each shard's header is parsed and every tensor entry checked on
 * its own (dtype, shape, sizes, bounds), then the shard's tensors are sorted by data offset;
 * (2) a name index over all shards finds duplicate names; (3) each shard's sorted tensors must
 * tile its data section exactly, which catches overlaps and gaps in one walk.  Sharded
 * checkpoints then check the index's weight_map against what the shards hold. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open/mmap/fstat when built with -std=c11 outside CMake */
#endif
#include "formats/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/input_file.h"
#include "base/textfile.h"

static const struct {
    const char *name;
    size_t size;
} dtype_info[LMP_ST_N_DTYPES] = {
    [LMP_ST_BOOL] = {"BOOL", 1},       [LMP_ST_U8] = {"U8", 1},
    [LMP_ST_I8] = {"I8", 1},           [LMP_ST_F8_E5M2] = {"F8_E5M2", 1},
    [LMP_ST_F8_E4M3] = {"F8_E4M3", 1}, [LMP_ST_F8_E8M0] = {"F8_E8M0", 1},
    [LMP_ST_I16] = {"I16", 2},         [LMP_ST_U16] = {"U16", 2},
    [LMP_ST_F16] = {"F16", 2},         [LMP_ST_BF16] = {"BF16", 2},
    [LMP_ST_I32] = {"I32", 4},         [LMP_ST_U32] = {"U32", 4},
    [LMP_ST_F32] = {"F32", 4},         [LMP_ST_I64] = {"I64", 8},
    [LMP_ST_U64] = {"U64", 8},         [LMP_ST_F64] = {"F64", 8},
    [LMP_ST_C64] = {"C64", 8},
};

const char *lmp_st_dtype_name(lmp_st_dtype d)
{
    return (unsigned)d < LMP_ST_N_DTYPES ? dtype_info[d].name : "?";
}

size_t lmp_st_dtype_size(lmp_st_dtype d) { return (unsigned)d < LMP_ST_N_DTYPES ? dtype_info[d].size : 0; }

/* ---- element conversion ------------------------------------------------------------------ */

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float lmp_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mant << 13)); /* inf, NaN payload */
    if (exp != 0) return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
    if (mant == 0) return f32_from_bits(sign); /* +-0 */
    /* Subnormal: mant * 2^-24.  Shift the leading 1 up to the implicit-bit position (bit 10),
     * lowering the exponent once per shift; every f16 subnormal is a normal f32. */
    uint32_t e = 127 - 14;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return f32_from_bits(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

/* bfloat16 is the top half of a binary32, so widening is exact for every value. */
float lmp_st_bf16_to_f32(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

static uint64_t rd64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

int lmp_st_to_f32(const lmp_st_tensor *t, int64_t first, int64_t n, float *out)
{
    if (!t) return lmp_fail(LMP_EINVAL, "lmp_st_to_f32: no tensor");
    if (first < 0 || n < 0 || first > t->numel || n > t->numel - first)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": cannot convert %lld elements from element %lld: it has %lld",
                        t->file, t->name, (long long)n, (long long)first, (long long)t->numel);
    /* Byte-wise little-endian reads: the data need not be aligned, and the host need not be
     * little-endian.  Compilers turn these into plain loads on x86/ARM. */
    const unsigned char *p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case LMP_ST_F32:
        p += 4 * (size_t)first;
        for (int64_t i = 0; i < n; i++, p += 4)
            out[i] = f32_from_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                   (uint32_t)p[3] << 24);
        return 0;
    case LMP_ST_F16:
        p += 2 * (size_t)first;
        for (int64_t i = 0; i < n; i++, p += 2) out[i] = lmp_st_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        return 0;
    case LMP_ST_BF16:
        p += 2 * (size_t)first;
        for (int64_t i = 0; i < n; i++, p += 2) out[i] = lmp_st_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
        return 0;
    default:
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: tensor \"%s\": unsupported dtype %s for conversion to f32 (F32, F16 "
                        "and BF16 are supported)",
                        t->file, t->name, lmp_st_dtype_name(t->dtype));
    }
}

/* ---- header parsing ---------------------------------------------------------------------- */

static void fmt_shape(const lmp_st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Non-negative int64 from a JSON number node, or -1 if it is not one (negative values are
 * reported by the caller, which knows what they mean). */
static int json_uint(const lmp_json *v, int64_t *out)
{
    if (!v || v->type != LMP_JSON_NUMBER || !v->is_integer) return -1;
    *out = v->integer;
    return 0;
}

/* Checks one tensor entry of shard si's header and fills *t (data pointer set later). */
static int parse_entry(lmp_safetensors *st, int si, const char *name, const lmp_json *e,
                       uint64_t data_size, lmp_st_tensor *t)
{
    const char *file = st->shards[si].path;
    memset(t, 0, sizeof *t);
    t->name = name;
    t->file = file;
    t->shard = si;
    if (e->type != LMP_JSON_OBJECT)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": entry is not an object", file, name);

    const lmp_json *dt = lmp_json_get(e, "dtype");
    if (!dt || dt->type != LMP_JSON_STRING)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": missing \"dtype\" string", file, name);
    int found = 0;
    for (int d = 0; d < LMP_ST_N_DTYPES; d++)
        if (strlen(dtype_info[d].name) == dt->str_len && !memcmp(dtype_info[d].name, dt->str, dt->str_len)) {
            t->dtype = (lmp_st_dtype)d;
            found = 1;
        }
    if (!found) return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": unknown dtype \"%s\"", file, name, dt->str);
    uint64_t esize = dtype_info[t->dtype].size;

    const lmp_json *sh = lmp_json_get(e, "shape");
    if (!sh || sh->type != LMP_JSON_ARRAY)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": missing \"shape\" array", file, name);
    if (sh->n > LMP_ST_MAX_DIMS)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": shape has %zu dimensions (at most %d supported)",
                        file, name, sh->n, LMP_ST_MAX_DIMS);
    t->ndim = (int)sh->n;
    int64_t numel = 1;
    int overflow = 0;
    for (size_t d = 0; d < sh->n; d++) {
        int64_t v;
        if (json_uint(&sh->items[d], &v))
            return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": shape entry %zu is not an integer", file, name, d);
        if (v < 0)
            return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": negative dimension %lld in shape", file, name,
                            (long long)v);
        t->shape[d] = v;
        /* A zero dimension makes the product 0 whatever follows; overflow is only an error
         * when the final count is not 0. */
        if (v == 0) numel = 0;
        else if (numel > INT64_MAX / v) overflow = 1;
        else numel *= v;
    }
    char shape_s[256];
    fmt_shape(t, shape_s, sizeof shape_s);
    if (numel != 0 && (overflow || (uint64_t)numel > (uint64_t)INT64_MAX / esize || (uint64_t)numel * esize > SIZE_MAX))
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": shape %s is too large (size overflows)", file, name,
                        shape_s);
    t->numel = numel;
    uint64_t need = (uint64_t)numel * esize;

    const lmp_json *off = lmp_json_get(e, "data_offsets");
    int64_t b, en;
    if (!off || off->type != LMP_JSON_ARRAY || off->n != 2 || json_uint(&off->items[0], &b) ||
        json_uint(&off->items[1], &en) || b < 0 || en < 0)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": \"data_offsets\" must be two non-negative integers",
                        file, name);
    if (en < b)
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\": data_offsets [%lld, %lld] end before they begin",
                        file, name, (long long)b, (long long)en);
    uint64_t have = (uint64_t)en - (uint64_t)b;
    if (have != need)
        return lmp_fail(LMP_EINVAL,
                        "%s: tensor \"%s\": data_offsets [%lld, %lld] hold %llu bytes but dtype %s with "
                        "shape %s needs %llu bytes",
                        file, name, (long long)b, (long long)en, (unsigned long long)have,
                        dtype_info[t->dtype].name, shape_s, (unsigned long long)need);
    if ((uint64_t)en > data_size)
        return lmp_fail(LMP_EINVAL,
                        "%s: tensor \"%s\": data_offsets [%lld, %lld] run past the end of the data "
                        "section (%llu bytes)",
                        file, name, (long long)b, (long long)en, (unsigned long long)data_size);
    t->offset = (uint64_t)b;
    t->nbytes = (size_t)need;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const lmp_st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1; /* empty ones first */
    return strcmp(x->name, y->name); /* names are unique per shard (checked later): a total order */
}

/* Parses shard si's image (map/size/path already set) and appends its tensors. */
static int parse_shard(lmp_safetensors *st, int si)
{
    lmp_st_shard *sh = &st->shards[si];
    const char *file = sh->path;
    if (sh->size < 8)
        return lmp_fail(LMP_EINVAL, "%s: file too small (%zu bytes) for the 8-byte header length", file,
                        sh->size);
    uint64_t n = rd64le(sh->map);
    if (n > LMP_ST_MAX_HEADER)
        return lmp_fail(LMP_EINVAL, "%s: header length %llu exceeds the limit of %u bytes", file,
                        (unsigned long long)n, LMP_ST_MAX_HEADER);
    if (n > sh->size - 8)
        return lmp_fail(LMP_EINVAL, "%s: header length %llu runs past the end of the file (%zu bytes)", file,
                        (unsigned long long)n, sh->size);
    const char *hdr = (const char *)sh->map + 8;
    if (n == 0 || hdr[0] != '{')
        return lmp_fail(LMP_EINVAL, "%s: header does not start with '{' (not a safetensors file?)", file);
    size_t wlen = strlen(file) + sizeof " header";
    char *what = malloc(wlen);
    if (!what) return lmp_fail(LMP_ENOMEM, "%s: out of memory", file);
    snprintf(what, wlen, "%s header", file);
    int rc = lmp_json_parse(hdr, (size_t)n, what, &sh->header);
    free(what);
    if (rc) return rc;

    const lmp_json *h = sh->header;
    uint64_t data_size = sh->size - 8 - n;
    const unsigned char *data = sh->map + 8 + n;
    lmp_st_tensor *grown = realloc(st->tensors, (st->n_tensors + h->n + 1) * sizeof *grown);
    if (!grown) return lmp_fail(LMP_ENOMEM, "%s: out of memory for %zu tensors", file, h->n);
    st->tensors = grown;
    size_t first = st->n_tensors;
    for (size_t i = 0; i < h->n; i++) {
        const char *key = h->keys[i];
        if (strlen(key) != h->key_lens[i])
            return lmp_fail(LMP_EINVAL, "%s: a tensor name contains a NUL character", file);
        if (!strcmp(key, "__metadata__")) {
            const lmp_json *m = &h->items[i];
            if (sh->metadata) return lmp_fail(LMP_EINVAL, "%s: \"__metadata__\" appears twice", file);
            if (m->type != LMP_JSON_OBJECT)
                return lmp_fail(LMP_EINVAL, "%s: \"__metadata__\" is not an object", file);
            for (size_t k = 0; k < m->n; k++)
                if (m->items[k].type != LMP_JSON_STRING)
                    return lmp_fail(LMP_EINVAL, "%s: \"__metadata__\" value of \"%s\" is not a string", file,
                                    m->keys[k]);
            sh->metadata = m;
            continue;
        }
        rc = parse_entry(st, si, key, &h->items[i], data_size, &st->tensors[st->n_tensors]);
        if (rc) return rc;
        st->n_tensors++;
    }
    qsort(st->tensors + first, st->n_tensors - first, sizeof *st->tensors, by_offset);
    for (size_t i = first; i < st->n_tensors; i++) st->tensors[i].data = data + st->tensors[i].offset;
    return 0;
}

/* The shard's tensors (sorted by offset) must tile [0, data_size) exactly: the format forbids
 * holes, and an overlap would let two tensors alias the same bytes. */
static int check_coverage(const lmp_safetensors *st, int si, size_t first, size_t end)
{
    const lmp_st_shard *sh = &st->shards[si];
    uint64_t n = rd64le(sh->map), data_size = sh->size - 8 - n, pos = 0;
    const lmp_st_tensor *prev = NULL;
    for (size_t i = first; i < end; i++) {
        const lmp_st_tensor *t = &st->tensors[i];
        if (t->offset < pos)
            return lmp_fail(LMP_EINVAL, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap",
                            sh->path, prev->name, (unsigned long long)prev->offset,
                            (unsigned long long)(prev->offset + prev->nbytes), t->name,
                            (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes));
        if (t->offset > pos)
            return lmp_fail(LMP_EINVAL,
                            "%s: bytes [%llu, %llu) of the data section belong to no tensor (before \"%s\"); "
                            "the format requires the data to be fully covered",
                            sh->path, (unsigned long long)pos, (unsigned long long)t->offset, t->name);
        pos = t->offset + t->nbytes;
        prev = t;
    }
    if (pos != data_size)
        return lmp_fail(LMP_EINVAL,
                        "%s: the data section has %llu bytes but its tensors cover only the first %llu; "
                        "the format requires the data to be fully covered",
                        sh->path, (unsigned long long)data_size, (unsigned long long)pos);
    return 0;
}

static int by_name_cmp(const void *a, const void *b)
{
    const lmp_st_tensor *x = *(const lmp_st_tensor *const *)a, *y = *(const lmp_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Name index, duplicate names, then per-shard coverage.  `what` names the checkpoint (the index
 * file for a sharded one) in the message about a name in two shards. */
static int finish(lmp_safetensors *st, const char *what)
{
    st->by_name = malloc((st->n_tensors + 1) * sizeof *st->by_name);
    if (!st->by_name) return lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < st->n_tensors; i++) st->by_name[i] = &st->tensors[i];
    qsort(st->by_name, st->n_tensors, sizeof *st->by_name, by_name_cmp);
    for (size_t i = 1; i < st->n_tensors; i++) {
        const lmp_st_tensor *a = st->by_name[i - 1], *b = st->by_name[i];
        if (strcmp(a->name, b->name)) continue;
        if (a->shard == b->shard)
            return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\" appears twice in the header", a->file, a->name);
        return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\" is in both %s and %s", what, a->name, a->file,
                        b->file);
    }
    size_t i = 0;
    for (int si = 0; si < st->n_shards; si++) {
        size_t first = i;
        while (i < st->n_tensors && st->tensors[i].shard == si) i++;
        int rc = check_coverage(st, si, first, i);
        if (rc) return rc;
    }
    return 0;
}

const lmp_st_tensor *lmp_st_find(const lmp_safetensors *st, const char *name)
{
    if (!st || !name || !st->by_name) return NULL;
    size_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->by_name[mid]->name, name);
        if (c == 0) return st->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int lmp_st_add_prefix(lmp_safetensors *st, const char *prefix)
{
    const size_t pl = strlen(prefix);
    size_t total = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        if (!strncmp(st->tensors[i].name, prefix, pl))
            return lmp_fail(LMP_EINVAL, "%s: tensor \"%s\" has the prefix \"%s\" its other tensors lack",
                            st->tensors[i].file, st->tensors[i].name, prefix);
        total += pl + strlen(st->tensors[i].name) + 1;
    }
    char *buf = malloc(total ? total : 1), *at = buf;
    if (!buf) return lmp_fail(LMP_ENOMEM, "%s: out of memory", st->path);
    for (size_t i = 0; i < st->n_tensors; i++) {
        const size_t n = strlen(st->tensors[i].name) + 1;
        memcpy(at, prefix, pl);
        memcpy(at + pl, st->tensors[i].name, n);
        st->tensors[i].name = at;
        at += pl + n;
    }
    free(st->renamed);
    st->renamed = buf;
    /* one prefix on every name keeps their order: by_name stays sorted */
    return 0;
}

/* ---- files ------------------------------------------------------------------------------- */

static int map_file(const char *path, lmp_st_shard *sh)
{
    /* input_file.h: a FIFO or a device is refused without blocking; the file is mapped. */
    int fd;
    uint64_t fsize;
    int st = lmp_input_open_kind(path, LMP_INPUT_MODEL, &fd, &fsize);
    if (st) return st;
    if (fsize > SIZE_MAX) {
        close(fd);
        return lmp_fail(LMP_EIO, "%s: too large to map", path);
    }
    sh->size = (size_t)fsize;
    if (sh->size > 0) {
        void *m = mmap(NULL, sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return lmp_fail(LMP_EIO, "%s: cannot map %zu bytes: %s", path, sh->size, strerror(e));
        }
        sh->map = m;
        sh->mapped = 1;
    }
    close(fd); /* the mapping keeps the file alive */
    return 0;
}

void lmp_st_release_pages(const lmp_safetensors *st)
{
    for (int i = 0; st && i < st->n_shards; i++)
        if (st->shards[i].mapped && st->shards[i].map) madvise((void *)st->shards[i].map, st->shards[i].size, MADV_DONTNEED);
}

void lmp_st_close(lmp_safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n_shards; i++) {
        lmp_st_shard *sh = &st->shards[i];
        if (sh->mapped) munmap((void *)sh->map, sh->size);
        lmp_json_free(sh->header);
        free(sh->path);
    }
    free(st->shards);
    lmp_json_free(st->index);
    free(st->tensors);
    free(st->by_name);
    free(st->renamed);
    free(st->path);
    free(st);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* dir + "/" + name (just name when dir is empty). */
static char *join(const char *dir, size_t dir_len, const char *name)
{
    size_t n = strlen(name);
    char *p = malloc(dir_len + 1 + n + 1);
    if (!p) return NULL;
    size_t k = 0;
    if (dir_len) {
        memcpy(p, dir, dir_len);
        k = dir_len;
        if (p[k - 1] != '/') p[k++] = '/';
    }
    memcpy(p + k, name, n + 1);
    return p;
}

static lmp_safetensors *new_set(const char *path, int n_shards)
{
    lmp_safetensors *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->path = dup_str(path);
    st->shards = calloc((size_t)n_shards + 1, sizeof *st->shards);
    if (!st->path || !st->shards) {
        lmp_st_close(st);
        return NULL;
    }
    st->n_shards = n_shards;
    return st;
}

int lmp_st_parse(const void *data, size_t size, const char *what, lmp_safetensors **out)
{
    *out = NULL;
    if (!what) what = "safetensors";
    lmp_safetensors *st = new_set(what, 1);
    if (!st || !(st->shards[0].path = dup_str(what))) {
        lmp_st_close(st);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
    }
    st->shards[0].map = data;
    st->shards[0].size = data ? size : 0;
    int rc = parse_shard(st, 0);
    if (!rc) rc = finish(st, what);
    if (rc) {
        lmp_st_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

static int open_single(lmp_safetensors *st, const char *file)
{
    lmp_st_shard *sh = &st->shards[0];
    if (!(sh->path = dup_str(file))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", file);
    int rc = map_file(file, sh);
    if (!rc) rc = parse_shard(st, 0);
    if (!rc) rc = finish(st, file);
    return rc;
}

/* A shard name from the index must be a plain file name in the index's directory. */
static int valid_shard_name(const lmp_json *v)
{
    return v->str_len > 0 && strlen(v->str) == v->str_len && !strchr(v->str, '/') && strcmp(v->str, ".") &&
           strcmp(v->str, "..");
}

static int open_index(lmp_safetensors *st, const char *file)
{
    char *text;
    size_t len;
    int rc = lmp_input_read(file, LMP_INPUT_JSON, &text, &len);
    if (rc) return rc;
    rc = lmp_json_parse(text, len, file, &st->index);
    free(text);
    if (rc) return rc;
    const lmp_json *wm = lmp_json_get(st->index, "weight_map");
    if (!wm || wm->type != LMP_JSON_OBJECT)
        return lmp_fail(LMP_EINVAL, "%s: missing \"weight_map\" object (not a safetensors index?)", file);

    /* Distinct shard names in order of first mention; shard_of[i] is entry i's shard. */
    const lmp_json **names = malloc((wm->n + 1) * sizeof *names);
    size_t *first_entry = malloc((wm->n + 1) * sizeof *first_entry);
    int *shard_of = malloc((wm->n + 1) * sizeof *shard_of);
    char *listed = NULL;
    int n_shards = 0;
    if (!names || !first_entry || !shard_of) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory", file);
        goto done;
    }
    for (size_t i = 0; i < wm->n; i++) {
        const lmp_json *v = &wm->items[i];
        if (strlen(wm->keys[i]) != wm->key_lens[i]) {
            rc = lmp_fail(LMP_EINVAL, "%s: a weight_map tensor name contains a NUL character", file);
            goto done;
        }
        if (v->type != LMP_JSON_STRING || !valid_shard_name(v)) {
            rc = lmp_fail(LMP_EINVAL,
                          "%s: weight_map entry for tensor \"%s\" is not a plain shard file name in the "
                          "index's directory",
                          file, wm->keys[i]);
            goto done;
        }
        int s = 0;
        while (s < n_shards && strcmp(names[s]->str, v->str)) s++;
        if (s == n_shards) {
            names[n_shards] = v;
            first_entry[n_shards++] = i;
        }
        shard_of[i] = s;
    }

    /* new_set sized the shards for one; resize for the real count. */
    lmp_st_shard *shards = calloc((size_t)n_shards + 1, sizeof *shards);
    if (!shards) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory", file);
        goto done;
    }
    free(st->shards);
    st->shards = shards;
    st->n_shards = n_shards;
    const char *slash = strrchr(file, '/');
    size_t dir_len = slash ? (size_t)(slash - file) + 1 : 0;
    for (int s = 0; s < n_shards; s++) {
        lmp_st_shard *sh = &st->shards[s];
        if (!(sh->path = join(file, dir_len, names[s]->str))) {
            rc = lmp_fail(LMP_ENOMEM, "%s: out of memory", file);
            goto done;
        }
        rc = map_file(sh->path, sh);
        if (rc) {
            rc = lmp_fail_prefix(rc, "%s: shard \"%s\" (listed for tensor \"%s\")", file, names[s]->str,
                                 wm->keys[first_entry[s]]);
            goto done;
        }
        if ((rc = parse_shard(st, s))) goto done;
    }
    if ((rc = finish(st, file))) goto done;

    /* Every listed tensor must be in the shard the index names, and every stored tensor listed. */
    if (!(listed = calloc(st->n_tensors + 1, 1))) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory", file);
        goto done;
    }
    for (size_t i = 0; i < wm->n; i++) {
        const lmp_st_tensor *t = lmp_st_find(st, wm->keys[i]);
        if (!t) {
            rc = lmp_fail(LMP_EINVAL, "%s: tensor \"%s\" is listed in shard \"%s\" but %s has no such tensor",
                          file, wm->keys[i], wm->items[i].str, st->shards[shard_of[i]].path);
            goto done;
        }
        if (t->shard != shard_of[i]) {
            rc = lmp_fail(LMP_EINVAL, "%s: tensor \"%s\" is listed in shard \"%s\" but is stored in %s", file,
                          wm->keys[i], wm->items[i].str, t->file);
            goto done;
        }
        listed[t - st->tensors] = 1;
    }
    for (size_t i = 0; i < st->n_tensors; i++)
        if (!listed[i]) {
            rc = lmp_fail(LMP_EINVAL, "%s: tensor \"%s\" in %s is not listed in weight_map", file,
                          st->tensors[i].name, st->tensors[i].file);
            goto done;
        }
    rc = 0;
done:
    free(names);
    free(first_entry);
    free(shard_of);
    free(listed);
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int is_regular(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int lmp_st_open(const char *path, lmp_safetensors **out)
{
    *out = NULL;
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return lmp_fail(LMP_EIO, "%s: cannot open: %s", path ? path : "(null)", strerror(errno));
    char *file;
    int is_index;
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path);
        file = join(path, n, "model.safetensors.index.json");
        if (!file) return lmp_fail(LMP_ENOMEM, "%s: out of memory", path);
        is_index = is_regular(file);
        if (!is_index) {
            free(file);
            if (!(file = join(path, n, "model.safetensors"))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", path);
            if (!is_regular(file)) {
                free(file);
                return lmp_fail(LMP_EIO, "%s: no model.safetensors.index.json or model.safetensors in this "
                                         "directory", path);
            }
        }
    } else {
        if (!(file = dup_str(path))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", path);
        is_index = ends_with(path, ".json");
    }
    lmp_safetensors *st = new_set(path, 1);
    if (!st) {
        free(file);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory", path);
    }
    int rc = is_index ? open_index(st, file) : open_single(st, file);
    free(file);
    if (rc) {
        lmp_st_close(st);
        return rc;
    }
    *out = st;
    return 0;
}
