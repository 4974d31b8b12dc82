/* gguf.c — see gguf.h.
 *
 * lmp_gguf_parse() is the whole reader: it walks an in-memory image once, checking every
 * length, count and offset against the bytes that are actually left before using it, and
 * builds the tables of gguf.h whose payload pointers point back into the image (nothing is
 * copied except keys and tensor names, which get a NUL).  lmp_gguf_open() only mmaps the file
 * and calls it, so opening a 100 MB model touches just its header pages.
 *
 * Rules (llama.cpp's gguf.cpp is the reference for what a valid file is):
 *  - little-endian; versions 2 and 3 (version 1 had 32-bit counts and is refused);
 *  - metadata keys and tensor names are unique and contain no NUL byte;
 *  - array elements may be of any type but ARRAY (nested arrays are refused);
 *  - general.alignment, when present, is an integer power of two (default 32);
 *  - n_dims <= 4; every ne fits int64 and so does their product; ne[0] is a multiple of the
 *    type's block size; the type is one ggml knows (its block and byte sizes are in the table
 *    below; gguf_quants.c decodes nearly all of them to f32);
 *  - each tensor's offset is a multiple of the alignment and [offset, offset + nbytes) lies
 *    inside the data section, which starts at the first aligned byte after the tensor infos.
 *    A vocab-only file (no tensors) may end without that padding, as llama.cpp writes it.
 * All multi-byte reads assemble little-endian bytes by hand, so neither the host's byte order
 * nor the (often odd) alignment of values inside the image matters.
 *
 * The image must stay valid while the handle is open (lmp_gguf_parse does not copy it). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, O_CLOEXEC, fstat in strict C11 builds (the fuzzer) */
#endif

#include "formats/gguf.h"

#include "base/error.h"
#include "base/input_file.h"
#include "formats/gguf_le.h"
#include "formats/gguf_quants.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
/* Smallest possible encodings, used to reject absurd counts before allocating anything:
 * a metadata pair is an (empty) key length, a type and at least one value byte; a tensor info
 * is an (empty) name length, n_dims = 0, the type and the offset. */
#define GGUF_MIN_KV_BYTES (8 + 4 + 1)
#define GGUF_MIN_TENSOR_INFO_BYTES (8 + 4 + 4 + 8)

/* ---- ggml types: block size (elements) and block bytes ------------------------------------ */

typedef struct {
    const char *name;
    int blck;  /* elements per block (0: no such type) */
    int bytes; /* bytes per block */
} type_info;

/* ggml's numbering and sizes (ggml.h, ggml.c's type_traits); the holes are retired types.  gguf-py's
 * GGML_QUANT_SIZES agrees but for Q8_1 (40 bytes there, from its old float fields; an intermediate
 * of ggml's dot products, never in a file) and lacks Q2_0. */
static const type_info type_table[] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},       [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},    [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},   [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136},  [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},    [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},    [39] = {"MXFP4", 32, 17},    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},     [42] = {"Q2_0", 64, 18},
};

static const type_info *ggml_type_info(uint32_t t)
{
    if (t >= sizeof type_table / sizeof *type_table || type_table[t].blck == 0) return NULL;
    return &type_table[t];
}

const char *lmp_ggml_type_name(lmp_ggml_type t)
{
    const type_info *ti = ggml_type_info((uint32_t)t);
    return ti ? ti->name : "unknown";
}

/* ---- metadata value types ------------------------------------------------------------------ */

static const char *const gguf_type_names[] = {"UINT8",  "INT8",    "UINT16", "INT16", "UINT32",
                                              "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                              "UINT64", "INT64",   "FLOAT64"};

static const char *gguf_type_name(uint32_t t)
{
    return t < sizeof gguf_type_names / sizeof *gguf_type_names ? gguf_type_names[t] : "unknown";
}

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and unknown types. */
static size_t gguf_type_size(uint32_t t)
{
    switch (t) {
    case LMP_GGUF_UINT8: case LMP_GGUF_INT8: case LMP_GGUF_BOOL: return 1;
    case LMP_GGUF_UINT16: case LMP_GGUF_INT16: return 2;
    case LMP_GGUF_UINT32: case LMP_GGUF_INT32: case LMP_GGUF_FLOAT32: return 4;
    case LMP_GGUF_UINT64: case LMP_GGUF_INT64: case LMP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- the handle ------------------------------------------------------------------------------ */

/* Open-addressing hash of names -> index, for duplicate detection while parsing and O(1)
 * lookups afterwards.  slot[i] holds index + 1; 0 is empty. */
typedef struct {
    size_t *slot;
    size_t mask;
} name_index;

/* The public struct is the first member, so a lmp_gguf * is a gguf_impl *. */
typedef struct {
    lmp_gguf pub;
    int mapped; /* pub.map came from mmap (lmp_gguf_open) and is unmapped by close */
    name_index kv_index, tensor_index;
} gguf_impl;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int index_init(name_index *ix, uint64_t n)
{
    size_t cap = 16;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof *ix->slot) return -1;
        cap *= 2;
    }
    ix->slot = calloc(cap, sizeof *ix->slot);
    if (!ix->slot) return -1;
    ix->mask = cap - 1;
    return 0;
}

/* `names` is an array of structs of `stride` bytes whose first member is the char * name
 * (lmp_gguf_kv.key, lmp_gguf_tensor.name). */
static const char *name_at(const void *names, size_t stride, size_t i)
{
    const char *const *p = (const char *const *)(const void *)((const char *)names + i * stride);
    return *p;
}

static size_t index_find(const name_index *ix, const void *names, size_t stride, const char *s)
{
    if (!ix->slot) return SIZE_MAX;
    for (size_t h = (size_t)hash_name(s) & ix->mask;; h = (h + 1) & ix->mask) {
        size_t v = ix->slot[h];
        if (v == 0) return SIZE_MAX;
        if (strcmp(name_at(names, stride, v - 1), s) == 0) return v - 1;
    }
}

/* Inserts entry i; returns SIZE_MAX, or the index of an earlier entry with the same name. */
static size_t index_insert(name_index *ix, const void *names, size_t stride, size_t i)
{
    const char *s = name_at(names, stride, i);
    size_t h = (size_t)hash_name(s) & ix->mask;
    for (; ix->slot[h]; h = (h + 1) & ix->mask)
        if (strcmp(name_at(names, stride, ix->slot[h] - 1), s) == 0) return ix->slot[h] - 1;
    ix->slot[h] = i + 1;
    return SIZE_MAX;
}

void lmp_gguf_release_pages(const lmp_gguf *g)
{
    if (g && ((const gguf_impl *)g)->mapped && g->map) madvise(g->map, g->size, MADV_DONTNEED);
}

void lmp_gguf_close(lmp_gguf *g)
{
    if (!g) return;
    gguf_impl *impl = (gguf_impl *)g;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            /* strs lives in the same block as str_lens (see read_strings) */
            free((void *)(uintptr_t)g->kv[i].str_lens);
        }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(impl->kv_index.slot);
    free(impl->tensor_index.slot);
    if (impl->mapped && g->map) munmap(g->map, g->size);
    free(g->path);
    free(impl);
}

/* ---- the reader -------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    size_t size, pos;
    const char *what; /* the file's name, first in every message */
    char ctx[160];    /* the item being read: "metadata pair 7 ('general.name')" */
} reader;

static size_t left(const reader *r) { return r->size - r->pos; }

/* "truncated" message for a read of `need` bytes at r->pos; `field` says what it was for. */
static int fail_trunc(const reader *r, uint64_t need, const char *field)
{
    return lmp_fail(LMP_EINVAL,
                    "%s: truncated at byte %zu while reading %s of %s (%" PRIu64
                    " bytes needed from byte %zu)",
                    r->what, r->size, field, r->ctx, need, r->pos);
}

static int take(reader *r, size_t n, const char *field, const unsigned char **out)
{
    if (n > left(r)) return fail_trunc(r, n, field);
    *out = r->p + r->pos;
    r->pos += n;
    return 0;
}

static int rd_u32(reader *r, const char *field, uint32_t *v)
{
    const unsigned char *b = NULL;
    int st = take(r, 4, field, &b);
    if (!st) *v = ld32(b);
    return st;
}

static int rd_u64(reader *r, const char *field, uint64_t *v)
{
    const unsigned char *b = NULL;
    int st = take(r, 8, field, &b);
    if (!st) *v = ld64(b);
    return st;
}

/* A gguf string: its length is checked against the rest of the image before anything else. */
static int rd_str(reader *r, const char *field, const unsigned char **s, uint64_t *len)
{
    int st = rd_u64(r, field, len);
    if (st) return st;
    if (*len > left(r))
        return lmp_fail(LMP_EINVAL,
                        "%s: string length %" PRIu64 " of %s of %s is larger than the %zu bytes "
                        "left in the file (at byte %zu)",
                        r->what, *len, field, r->ctx, left(r), r->pos);
    *s = r->p + r->pos;
    r->pos += (size_t)*len;
    return 0;
}

/* Copies a key or tensor name into a C string; NUL bytes would make it unreachable by name. */
static int dup_name(const reader *r, const char *field, const unsigned char *s, uint64_t len,
                    char **out)
{
    if (memchr(s, 0, (size_t)len))
        return lmp_fail(LMP_EINVAL, "%s: %s of %s contains a NUL byte", r->what, field, r->ctx);
    char *c = malloc((size_t)len + 1);
    if (!c) return lmp_fail(LMP_ENOMEM, "%s: out of memory", r->what);
    memcpy(c, s, (size_t)len);
    c[len] = 0;
    *out = c;
    return 0;
}

/* n strings (a STRING value or an array of them).  Two passes: the first only validates the
 * lengths, so the pointer tables are allocated for strings that are known to be there. */
static int read_strings(reader *r, lmp_gguf_kv *kv, uint64_t n)
{
    if (n > left(r) / 8)
        return lmp_fail(LMP_EINVAL,
                        "%s: array length %" PRIu64 " of %s is larger than the file allows: "
                        "%" PRIu64 " strings need at least 8 bytes each, %zu bytes are left",
                        r->what, n, r->ctx, n, left(r));
    size_t start = r->pos;
    for (uint64_t i = 0; i < n; i++) {
        if (left(r) < 8) {
            char field[64];
            snprintf(field, sizeof field, "string %" PRIu64, i);
            return fail_trunc(r, 8, field);
        }
        uint64_t len = ld64(r->p + r->pos);
        r->pos += 8;
        if (len > left(r))
            return lmp_fail(LMP_EINVAL,
                            "%s: string length %" PRIu64 " of string %" PRIu64 " of %s is larger "
                            "than the %zu bytes left in the file (at byte %zu)",
                            r->what, len, i, r->ctx, left(r), r->pos);
        r->pos += (size_t)len;
    }
    /* n <= size / 8, so this cannot overflow on 64-bit; checked for 32-bit hosts. */
    size_t per = sizeof(uint64_t) + sizeof(char *);
    if (n > SIZE_MAX / per) return lmp_fail(LMP_ENOMEM, "%s: out of memory", r->what);
    /* one block: the uint64 lengths first (so both arrays are naturally aligned) */
    unsigned char *blk = malloc(n ? (size_t)n * per : 1);
    if (!blk) return lmp_fail(LMP_ENOMEM, "%s: out of memory", r->what);
    uint64_t *lens = (uint64_t *)(void *)blk;
    const char **strs = (const char **)(void *)(blk + (size_t)n * sizeof(uint64_t));
    size_t pos = start;
    for (uint64_t i = 0; i < n; i++) {
        lens[i] = ld64(r->p + pos);
        strs[i] = (const char *)r->p + pos + 8;
        pos += 8 + (size_t)lens[i];
    }
    kv->str_lens = lens;
    kv->strs = strs;
    kv->data = NULL;
    return 0;
}

static int read_kv(reader *r, gguf_impl *g, uint64_t i)
{
    lmp_gguf_kv *kv = &g->pub.kv[i];
    snprintf(r->ctx, sizeof r->ctx, "metadata pair %" PRIu64, i);
    const unsigned char *s = NULL;
    uint64_t len = 0;
    int st = rd_str(r, "the key", &s, &len);
    if (st || (st = dup_name(r, "the key", s, len, &kv->key))) return st;
    g->pub.n_kv = i + 1; /* from here on close() frees this pair */
    size_t prev = index_insert(&g->kv_index, g->pub.kv, sizeof *kv, (size_t)i);
    if (prev != SIZE_MAX)
        return lmp_fail(LMP_EINVAL, "%s: duplicate metadata key '%.100s' (pairs %zu and %" PRIu64 ")",
                        r->what, kv->key, prev, i);
    snprintf(r->ctx, sizeof r->ctx, "metadata pair %" PRIu64 " ('%.100s')", i, kv->key);

    uint32_t type = 0, etype = 0;
    uint64_t n = 1;
    if ((st = rd_u32(r, "the value type", &type))) return st;
    if (type == LMP_GGUF_ARRAY) {
        if ((st = rd_u32(r, "the array element type", &etype))) return st;
        if ((st = rd_u64(r, "the array length", &n))) return st;
        if (etype == LMP_GGUF_ARRAY)
            return lmp_fail(LMP_EINVAL, "%s: %s: nested arrays are not supported", r->what, r->ctx);
        if (etype != LMP_GGUF_STRING && gguf_type_size(etype) == 0)
            return lmp_fail(LMP_EINVAL, "%s: %s: unknown array element type %" PRIu32, r->what,
                            r->ctx, etype);
    } else {
        if (type != LMP_GGUF_STRING && gguf_type_size(type) == 0)
            return lmp_fail(LMP_EINVAL, "%s: %s: unknown value type %" PRIu32, r->what, r->ctx,
                            type);
        etype = type;
    }
    kv->type = (lmp_gguf_type)type;
    kv->arr_type = (lmp_gguf_type)etype;
    kv->n = n;
    if (etype == LMP_GGUF_STRING) return read_strings(r, kv, n);

    size_t esize = gguf_type_size(etype);
    if (n > left(r) / esize)
        return lmp_fail(LMP_EINVAL,
                        "%s: %s: array length %" PRIu64 " of %s is larger than the file allows "
                        "(%zu bytes left at byte %zu)",
                        r->what, r->ctx, n, gguf_type_name(etype), left(r), r->pos);
    kv->data = r->p + r->pos;
    r->pos += (size_t)n * esize;
    return 0;
}

/* Integer value of a scalar metadata pair (any integer type, or BOOL as 0/1). */
static int kv_int(const lmp_gguf_kv *kv, int64_t *out, int *too_big)
{
    const unsigned char *p = kv->data;
    *too_big = 0;
    if (kv->type == LMP_GGUF_ARRAY || !p) return -1;
    switch (kv->type) {
    case LMP_GGUF_UINT8: *out = p[0]; return 0;
    case LMP_GGUF_BOOL: *out = p[0] != 0; return 0;
    case LMP_GGUF_INT8: *out = (int8_t)p[0]; return 0;
    case LMP_GGUF_UINT16: *out = ld16(p); return 0;
    case LMP_GGUF_INT16: *out = (int16_t)ld16(p); return 0;
    case LMP_GGUF_UINT32: *out = ld32(p); return 0;
    case LMP_GGUF_INT32: *out = (int32_t)ld32(p); return 0;
    case LMP_GGUF_INT64: *out = (int64_t)ld64(p); return 0;
    case LMP_GGUF_UINT64: {
        uint64_t u = ld64(p);
        if (u > INT64_MAX) { *too_big = 1; return -1; }
        *out = (int64_t)u;
        return 0;
    }
    default: return -1;
    }
}

static int read_alignment(reader *r, gguf_impl *g)
{
    g->pub.alignment = GGUF_DEFAULT_ALIGNMENT;
    const lmp_gguf_kv *kv = lmp_gguf_find_kv(&g->pub, "general.alignment");
    if (!kv) return 0;
    int64_t a;
    int too_big;
    if (kv->type == LMP_GGUF_BOOL || kv_int(kv, &a, &too_big) != 0)
        return lmp_fail(LMP_EINVAL, "%s: general.alignment is %s%s%s, not an integer", r->what,
                        gguf_type_name(kv->type), kv->type == LMP_GGUF_ARRAY ? " of " : "",
                        kv->type == LMP_GGUF_ARRAY ? gguf_type_name(kv->arr_type) : "");
    if (a <= 0 || (a & (a - 1)) != 0 || (uint64_t)a > SIZE_MAX / 2)
        return lmp_fail(LMP_EINVAL, "%s: bad general.alignment %" PRId64 ": not a power of two",
                        r->what, a);
    g->pub.alignment = (size_t)a;
    return 0;
}

static int read_tensor_info(reader *r, gguf_impl *g, uint64_t i, uint64_t *offset)
{
    lmp_gguf_tensor *t = &g->pub.tensors[i];
    snprintf(r->ctx, sizeof r->ctx, "tensor info %" PRIu64, i);
    const unsigned char *s = NULL;
    uint64_t len = 0;
    int st = rd_str(r, "the name", &s, &len);
    if (st || (st = dup_name(r, "the name", s, len, &t->name))) return st;
    g->pub.n_tensors = i + 1; /* from here on close() frees this name */
    size_t prev = index_insert(&g->tensor_index, g->pub.tensors, sizeof *t, (size_t)i);
    if (prev != SIZE_MAX)
        return lmp_fail(LMP_EINVAL, "%s: duplicate tensor name '%.100s' (tensors %zu and %" PRIu64 ")",
                        r->what, t->name, prev, i);
    snprintf(r->ctx, sizeof r->ctx, "tensor info %" PRIu64 " ('%.100s')", i, t->name);

    uint32_t n_dims = 0, type = 0;
    if ((st = rd_u32(r, "n_dims", &n_dims))) return st;
    if (n_dims > GGUF_MAX_DIMS)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%.100s': n_dims %" PRIu32 " > %d", r->what,
                        t->name, n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if ((uint32_t)d < n_dims && (st = rd_u64(r, "the dimensions", &ne))) return st;
        if (ne > INT64_MAX)
            return lmp_fail(LMP_EINVAL, "%s: tensor '%.100s': ne[%d] = %" PRIu64 " is negative "
                            "as int64", r->what, t->name, d, ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((st = rd_u32(r, "the type", &type))) return st;
    if ((st = rd_u64(r, "the data offset", offset))) return st;
    const type_info *ti = ggml_type_info(type);
    if (!ti)
        return lmp_fail(LMP_EINVAL, "%s: unsupported tensor type %" PRIu32 " for '%.100s'",
                        r->what, type, t->name);
    t->type = (lmp_ggml_type)type;

    int64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] != 0 && nel > INT64_MAX / t->ne[d])
            return lmp_fail(LMP_EINVAL, "%s: tensor '%.100s': element count overflows int64 "
                            "(ne = %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 ")",
                            r->what, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        nel *= t->ne[d];
    }
    if (t->ne[0] % ti->blck != 0)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%.100s': ne[0] = %" PRId64 " is not a multiple "
                        "of the %s block size %d", r->what, t->name, t->ne[0], ti->name, ti->blck);
    /* rows hold whole blocks, so the whole tensor is nel / blck blocks */
    uint64_t nblocks = (uint64_t)nel / (uint64_t)ti->blck;
    if (nblocks > UINT64_MAX / (uint64_t)ti->bytes ||
        nblocks * (uint64_t)ti->bytes > SIZE_MAX)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%.100s': data size overflows (%" PRId64
                        " elements of %s)", r->what, t->name, nel, ti->name);
    t->nbytes = (size_t)(nblocks * (uint64_t)ti->bytes);
    if (*offset % g->pub.alignment != 0)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%.100s': data offset %" PRIu64 " is unaligned "
                        "(not a multiple of the alignment %zu)", r->what, t->name, *offset,
                        g->pub.alignment);
    return 0;
}

/* Tensors lie one after the other in the data section, each padded to the alignment (how
 * llama.cpp and gguf-py write them; llama.cpp's reader requires it).  So the span from a tensor's
 * offset to the next tensor's offset (or to the end of the data, for the last one) must hold its
 * bytes with less than one alignment to spare.  A tensor whose type or shape was changed reads
 * garbage otherwise (its neighbour's bytes, or part of its own): refused, naming the tensor. */
typedef struct span_entry {
    uint64_t off;
    uint64_t i;
} span_entry;

static int span_cmp(const void *a, const void *b)
{
    const span_entry *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->i < y->i ? -1 : x->i > y->i;
}

static int check_spans(gguf_impl *g, const uint64_t *offsets, size_t data_size, const char *what)
{
    uint64_t n = g->pub.n_tensors;
    span_entry *e = malloc((size_t)n * sizeof *e);
    if (!e) return lmp_fail(LMP_ENOMEM, "%s: out of memory checking %" PRIu64 " tensors", what, n);
    for (uint64_t i = 0; i < n; i++) e[i] = (span_entry){offsets[i], i};
    qsort(e, (size_t)n, sizeof *e, span_cmp);
    int st = 0;
    for (uint64_t k = 0; k < n && !st; k++) {
        const lmp_gguf_tensor *t = &g->pub.tensors[e[k].i];
        uint64_t end = k + 1 < n ? e[k + 1].off : (uint64_t)data_size, span = end - e[k].off;
        if (t->nbytes <= span && span - t->nbytes < g->pub.alignment) continue;
        char shape[96] = "";
        for (int d = 0; d < t->n_dims; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? " x " : "",
                     (long long)t->ne[d]);
        char next[160];
        if (k + 1 < n)
            snprintf(next, sizeof next, "the next tensor ('%.100s') at offset %" PRIu64,
                     g->pub.tensors[e[k + 1].i].name, end);
        else
            snprintf(next, sizeof next, "the end of the data at offset %" PRIu64, end);
        st = lmp_fail(LMP_EINVAL, "%s: tensor '%.100s' of type %s and shape [%s] needs %zu bytes, but the span "
                      "from its offset %" PRIu64 " to %s is %" PRIu64 " bytes (%s): its type or shape does not "
                      "match its data", what, t->name, lmp_ggml_type_name(t->type), shape, t->nbytes,
                      e[k].off, next, span, t->nbytes > span ? "it would read past its span" :
                      "more than one alignment of unused bytes");
    }
    free(e);
    return st;
}

static int parse_image(const unsigned char *p, size_t size, const char *what, gguf_impl **out)
{
    *out = NULL;
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g) return lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
    g->pub.path = malloc(strlen(what) + 1);
    if (!g->pub.path) {
        free(g);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
    }
    strcpy(g->pub.path, what);
    g->pub.map = (void *)(uintptr_t)p;
    g->pub.size = size;
    g->pub.alignment = GGUF_DEFAULT_ALIGNMENT;

    reader rd = {.p = p, .size = size, .pos = 0, .what = what}, *r = &rd;
    snprintf(r->ctx, sizeof r->ctx, "the header");
    int st = 0;
    const unsigned char *b = NULL;
    uint32_t version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    uint64_t *offsets = NULL;

    if (size == 0) {
        st = lmp_fail(LMP_EINVAL, "%s: empty file, not a GGUF file (wrong magic)", what);
        goto fail;
    }
    if ((st = take(r, 4, "the magic", &b))) goto fail;
    if (memcmp(b, "GGUF", 4) != 0) {
        st = lmp_fail(LMP_EINVAL, "%s: wrong magic %02x %02x %02x %02x: not a GGUF file "
                      "(expected \"GGUF\")", what, b[0], b[1], b[2], b[3]);
        goto fail;
    }
    if ((st = rd_u32(r, "the version", &version))) goto fail;
    if (version != 2 && version != 3) {
        if ((version & 0xffffu) == 0 && version != 0)
            st = lmp_fail(LMP_EINVAL, "%s: GGUF version 0x%08" PRIx32 " looks byte-swapped: "
                          "big-endian GGUF files are not supported", what, version);
        else
            st = lmp_fail(LMP_EINVAL, "%s: unsupported GGUF version %" PRIu32 " (versions 2 "
                          "and 3 are supported)", what, version);
        goto fail;
    }
    g->pub.version = version;
    if ((st = rd_u64(r, "the tensor count", &n_tensors))) goto fail;
    if ((st = rd_u64(r, "the metadata count", &n_kv))) goto fail;
    /* Absurd counts are refused before anything is allocated for them: each item needs a
     * minimum number of bytes, so the rest of the file bounds both counts. */
    if (n_kv > left(r) / GGUF_MIN_KV_BYTES) {
        st = lmp_fail(LMP_EINVAL, "%s: metadata count %" PRIu64 " is absurd: the %zu bytes left "
                      "hold at most %zu pairs", what, n_kv, left(r), left(r) / GGUF_MIN_KV_BYTES);
        goto fail;
    }
    size_t after_kv = left(r) - (size_t)n_kv * GGUF_MIN_KV_BYTES;
    if (n_tensors > after_kv / GGUF_MIN_TENSOR_INFO_BYTES) {
        st = lmp_fail(LMP_EINVAL, "%s: tensor count %" PRIu64 " is absurd: the %zu bytes left "
                      "hold at most %zu tensor infos", what, n_tensors, after_kv,
                      after_kv / GGUF_MIN_TENSOR_INFO_BYTES);
        goto fail;
    }
    if (n_kv > SIZE_MAX / sizeof *g->pub.kv || n_tensors > SIZE_MAX / sizeof *g->pub.tensors ||
        n_tensors > SIZE_MAX / sizeof *offsets) {
        st = lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
        goto fail;
    }

    if (n_kv) {
        g->pub.kv = calloc((size_t)n_kv, sizeof *g->pub.kv);
        if (!g->pub.kv || index_init(&g->kv_index, n_kv) != 0) {
            st = lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
            goto fail;
        }
    }
    for (uint64_t i = 0; i < n_kv; i++)
        if ((st = read_kv(r, g, i))) goto fail;
    g->pub.n_kv = n_kv;
    if ((st = read_alignment(r, g))) goto fail;

    if (n_tensors) {
        g->pub.tensors = calloc((size_t)n_tensors, sizeof *g->pub.tensors);
        offsets = malloc((size_t)n_tensors * sizeof *offsets);
        if (!g->pub.tensors || !offsets || index_init(&g->tensor_index, n_tensors) != 0) {
            st = lmp_fail(LMP_ENOMEM, "%s: out of memory", what);
            goto fail;
        }
    }
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = read_tensor_info(r, g, i, &offsets[i]))) goto fail;
    g->pub.n_tensors = n_tensors;

    /* The data section starts at the next multiple of the alignment. */
    size_t a = g->pub.alignment, pad = (a - r->pos % a) % a;
    if (n_tensors > 0) {
        snprintf(r->ctx, sizeof r->ctx, "the tensor data section");
        if (pad > left(r)) {
            st = fail_trunc(r, pad, "the padding before the tensor data");
            goto fail;
        }
        size_t data_start = r->pos + pad, data_size = size - data_start;
        for (uint64_t i = 0; i < n_tensors; i++) {
            lmp_gguf_tensor *t = &g->pub.tensors[i];
            uint64_t off = offsets[i];
            if (off > data_size || t->nbytes > data_size - off) {
                if (off > UINT64_MAX - t->nbytes)
                    st = lmp_fail(LMP_EINVAL, "%s: tensor '%.100s' data offset %" PRIu64 " + size "
                                  "%zu overflows: past the end of the file (size %zu)", what,
                                  t->name, off, t->nbytes, size);
                else
                    st = lmp_fail(LMP_EINVAL, "%s: tensor '%.100s' data [%" PRIu64 ", %" PRIu64
                                  ") past the end of the file (size %zu; offsets are relative to "
                                  "the data section at byte %zu, which holds %zu bytes)", what,
                                  t->name, off, off + t->nbytes, size, data_start, data_size);
                goto fail;
            }
            t->data = p + data_start + (size_t)off;
        }
        if ((st = check_spans(g, offsets, data_size, what))) goto fail;
    }
    free(offsets);
    *out = g;
    return 0;

fail:
    free(offsets);
    g->pub.map = NULL; /* the caller owns the image */
    lmp_gguf_close(&g->pub);
    return st;
}

int lmp_gguf_parse(const void *data, size_t size, const char *what, lmp_gguf **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_gguf_parse: out is NULL");
    *out = NULL;
    if (!what) what = "<memory>";
    if (!data && size) return lmp_fail(LMP_EINVAL, "%s: no data", what);
    static const unsigned char empty[1];
    gguf_impl *g;
    int st = parse_image(data ? data : empty, size, what, &g);
    if (!st) *out = &g->pub;
    return st;
}

int lmp_gguf_open(const char *path, lmp_gguf **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return lmp_fail(LMP_EINVAL, "lmp_gguf_open: path is NULL");
    /* input_file.h: a FIFO or a device is refused without blocking; the file is mapped. */
    int fd;
    uint64_t fsize;
    int ost = lmp_input_open_kind(path, LMP_INPUT_MODEL, &fd, &fsize);
    if (ost) return ost;
    if (fsize > SIZE_MAX) {
        close(fd);
        return lmp_fail(LMP_EIO, "%s: file too large to map (%" PRIu64 " bytes)", path, fsize);
    }
    size_t size = (size_t)fsize;
    if (size == 0) { /* mmap refuses length 0; the parser gives the message */
        close(fd);
        return lmp_gguf_parse(NULL, 0, path, out);
    }
    /* Read-only private mapping: the tensors are read in place.  (A file truncated by someone
     * else while mapped would raise SIGBUS on access; no reader can guard against that.) */
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) return lmp_fail(LMP_EIO, "%s: mmap failed: %s", path, strerror(err));
    gguf_impl *g;
    int st = parse_image(map, size, path, &g);
    if (st) {
        munmap(map, size);
        return st;
    }
    g->mapped = 1;
    *out = &g->pub;
    return 0;
}

/* ---- lookups --------------------------------------------------------------------------------- */

const lmp_gguf_kv *lmp_gguf_find_kv(const lmp_gguf *g, const char *key)
{
    if (!g || !key) return NULL;
    size_t i = index_find(&((const gguf_impl *)g)->kv_index, g->kv, sizeof *g->kv, key);
    return i == SIZE_MAX ? NULL : &g->kv[i];
}

const lmp_gguf_tensor *lmp_gguf_find_tensor(const lmp_gguf *g, const char *name)
{
    if (!g || !name) return NULL;
    size_t i = index_find(&((const gguf_impl *)g)->tensor_index, g->tensors,
                          sizeof *g->tensors, name);
    return i == SIZE_MAX ? NULL : &g->tensors[i];
}

static const lmp_gguf_kv *need_kv(const lmp_gguf *g, const char *key)
{
    if (!g || !key) {
        lmp_fail(LMP_EINVAL, "gguf: NULL handle or key");
        return NULL;
    }
    const lmp_gguf_kv *kv = lmp_gguf_find_kv(g, key);
    if (!kv) lmp_fail(LMP_EINVAL, "%s: metadata key '%s' not found", g->path, key);
    return kv;
}

static int wrong_type(const lmp_gguf *g, const char *key, const lmp_gguf_kv *kv, const char *want)
{
    if (kv->type == LMP_GGUF_ARRAY)
        return lmp_fail(LMP_EINVAL, "%s: metadata '%s' is an array of %s, not %s", g->path, key,
                        gguf_type_name(kv->arr_type), want);
    return lmp_fail(LMP_EINVAL, "%s: metadata '%s' is %s, not %s", g->path, key,
                    gguf_type_name(kv->type), want);
}

int lmp_gguf_get_int(const lmp_gguf *g, const char *key, int64_t *out)
{
    const lmp_gguf_kv *kv = need_kv(g, key);
    if (!kv) return LMP_EINVAL;
    int too_big;
    int64_t v;
    if (kv_int(kv, &v, &too_big) != 0) {
        if (too_big)
            return lmp_fail(LMP_EINVAL, "%s: metadata '%s' = %" PRIu64 " does not fit in int64",
                            g->path, key, ld64(kv->data));
        return wrong_type(g, key, kv, "an integer");
    }
    if (out) *out = v;
    return 0;
}

int lmp_gguf_get_float(const lmp_gguf *g, const char *key, double *out)
{
    const lmp_gguf_kv *kv = need_kv(g, key);
    if (!kv) return LMP_EINVAL;
    double v;
    int64_t iv;
    int too_big;
    if (kv->type == LMP_GGUF_FLOAT32) {
        v = bits_to_f32(ld32(kv->data));
    } else if (kv->type == LMP_GGUF_FLOAT64) {
        uint64_t u = ld64(kv->data);
        memcpy(&v, &u, sizeof v);
    } else if (kv->type == LMP_GGUF_UINT64 && kv_int(kv, &iv, &too_big) != 0 && too_big) {
        v = (double)ld64(kv->data);
    } else if (kv->type != LMP_GGUF_BOOL && kv_int(kv, &iv, &too_big) == 0) {
        v = (double)iv; /* integers convert too: a "float" hyperparameter written as int */
    } else {
        return wrong_type(g, key, kv, "a number");
    }
    if (out) *out = v;
    return 0;
}

int lmp_gguf_get_string(const lmp_gguf *g, const char *key, const char **s, size_t *len)
{
    const lmp_gguf_kv *kv = need_kv(g, key);
    if (!kv) return LMP_EINVAL;
    if (kv->type != LMP_GGUF_STRING) return wrong_type(g, key, kv, "a string");
    /* the bytes are not NUL-terminated, so the length is not optional */
    if (!len) return lmp_fail(LMP_EINVAL, "%s: lmp_gguf_get_string('%s'): len is NULL", g->path, key);
    if (s) *s = kv->strs[0];
    *len = (size_t)kv->str_lens[0];
    return 0;
}

/* ---- dequantization (the decoders are gguf_quants.c's) ------------------------------------- */

int lmp_ggml_type_block(lmp_ggml_type t)
{
    const type_info *ti = ggml_type_info((uint32_t)t);
    return ti ? ti->blck : 0;
}

int lmp_gguf_check_dequantize(const lmp_gguf_tensor *t)
{
    if (!t) return lmp_fail(LMP_EINVAL, "lmp_gguf_dequantize: tensor is NULL");
    const char *name = t->name ? t->name : "?";
    const type_info *ti = ggml_type_info((uint32_t)t->type);
    if (!ti)
        return lmp_fail(LMP_EINVAL, "tensor '%.100s': unsupported tensor type %d", name,
                        (int)t->type);
    if (lmp_ggml_decoder((uint32_t)t->type)) return 0;
    char known[512] = ""; /* the list, from the decoders there are */
    size_t n = 0;
    for (uint32_t k = 0; k < sizeof type_table / sizeof *type_table; k++)
        if (type_table[k].blck && lmp_ggml_decoder(k) && n < sizeof known)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", type_table[k].name);
    return lmp_fail(LMP_EUNSUPPORTED, "tensor '%.100s': dequantizing %s is not supported (lmpress "
                    "reads %s)", name, ti->name, known);
}

int lmp_gguf_dequantize(const lmp_gguf_tensor *t, int64_t first, int64_t n, float *out)
{
    int st = lmp_gguf_check_dequantize(t);
    if (st) return st;
    const char *name = t->name ? t->name : "?";
    const type_info *ti = ggml_type_info((uint32_t)t->type);
    /* Re-derive the element count: the struct is public and may not come from the parser. */
    int64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] < 0 || (t->ne[d] != 0 && nel > INT64_MAX / t->ne[d]))
            return lmp_fail(LMP_EINVAL, "tensor '%.100s': bad shape", name);
        nel *= t->ne[d];
    }
    if (first < 0 || n < 0 || first % ti->blck != 0 || n % ti->blck != 0)
        return lmp_fail(LMP_EINVAL, "tensor '%.100s': dequantize range start %" PRId64 ", count %"
                        PRId64 " is not a whole number of %s blocks of %d", name, first, n,
                        ti->name, ti->blck);
    if (first > nel || n > nel - first)
        return lmp_fail(LMP_EINVAL, "tensor '%.100s': dequantize range [%" PRId64 ", %" PRId64
                        " + %" PRId64 ") is past its %" PRId64 " elements", name, first, first, n,
                        nel);
    int64_t b0 = first / ti->blck, nb = n / ti->blck;
    if ((uint64_t)(b0 + nb) > t->nbytes / (uint64_t)ti->bytes)
        return lmp_fail(LMP_EINVAL, "tensor '%.100s': %zu data bytes are too few for its shape",
                        name, t->nbytes);
    if (n == 0) return 0;
    if (!out || !t->data) return lmp_fail(LMP_EINVAL, "tensor '%.100s': NULL data or output", name);
    lmp_ggml_decoder((uint32_t)t->type)((const unsigned char *)t->data + (size_t)b0 * (size_t)ti->bytes, nb, out);
    return 0;
}
