/* gguf_meta.c — see gguf_meta.h. */
#include "export/gguf_meta.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void lmp_gguf_meta_free(lmp_gguf_meta *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

int lmp_gguf_meta_status(const lmp_gguf_meta *b, const char *what)
{
    return b->failed ? lmp_fail(LMP_ENOMEM, "%s: out of memory building the GGUF header", what) : 0;
}

void lmp_gguf_put_bytes(lmp_gguf_meta *b, const void *p, size_t n)
{
    if (b->failed) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = 1;
                return;
            }
            cap *= 2;
        }
        unsigned char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* Byte by byte, so the file is little-endian whatever the host's order. */
void lmp_gguf_put_u32(lmp_gguf_meta *b, uint32_t v)
{
    const unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                                 (unsigned char)(v >> 24)};
    lmp_gguf_put_bytes(b, le, 4);
}

void lmp_gguf_put_u64(lmp_gguf_meta *b, uint64_t v)
{
    lmp_gguf_put_u32(b, (uint32_t)v);
    lmp_gguf_put_u32(b, (uint32_t)(v >> 32));
}

void lmp_gguf_put_str(lmp_gguf_meta *b, const char *s, size_t n)
{
    lmp_gguf_put_u64(b, n);
    lmp_gguf_put_bytes(b, s, n);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The key and the value's type: the start of every pair. */
static void pair(lmp_gguf_meta *b, const char *key, lmp_gguf_type type)
{
    lmp_gguf_put_str(b, key, strlen(key));
    lmp_gguf_put_u32(b, (uint32_t)type);
    b->n++;
}

void lmp_gguf_kv_u32(lmp_gguf_meta *b, const char *key, uint32_t v)
{
    pair(b, key, LMP_GGUF_UINT32);
    lmp_gguf_put_u32(b, v);
}

void lmp_gguf_kv_f32(lmp_gguf_meta *b, const char *key, float v)
{
    pair(b, key, LMP_GGUF_FLOAT32);
    lmp_gguf_put_u32(b, f32_bits(v));
}

void lmp_gguf_kv_bool(lmp_gguf_meta *b, const char *key, int v)
{
    const unsigned char one = v ? 1 : 0;
    pair(b, key, LMP_GGUF_BOOL);
    lmp_gguf_put_bytes(b, &one, 1);
}

void lmp_gguf_kv_str(lmp_gguf_meta *b, const char *key, const char *s, size_t n)
{
    pair(b, key, LMP_GGUF_STRING);
    lmp_gguf_put_str(b, s, n);
}

static void array(lmp_gguf_meta *b, const char *key, lmp_gguf_type elem, uint64_t n)
{
    pair(b, key, LMP_GGUF_ARRAY);
    lmp_gguf_put_u32(b, (uint32_t)elem);
    lmp_gguf_put_u64(b, n);
}

void lmp_gguf_kv_strs(lmp_gguf_meta *b, const char *key, uint64_t n, const char *const *strs, const size_t *lens)
{
    array(b, key, LMP_GGUF_STRING, n);
    for (uint64_t i = 0; i < n; i++) lmp_gguf_put_str(b, strs[i], lens[i]);
}

void lmp_gguf_kv_f32s(lmp_gguf_meta *b, const char *key, uint64_t n, const float *v)
{
    array(b, key, LMP_GGUF_FLOAT32, n);
    for (uint64_t i = 0; i < n; i++) lmp_gguf_put_u32(b, f32_bits(v[i]));
}

void lmp_gguf_kv_bools(lmp_gguf_meta *b, const char *key, uint64_t n, const unsigned char *v)
{
    array(b, key, LMP_GGUF_BOOL, n);
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char one = v[i] ? 1 : 0;
        lmp_gguf_put_bytes(b, &one, 1);
    }
}

void lmp_gguf_kv_i32s(lmp_gguf_meta *b, const char *key, uint64_t n, const int32_t *v)
{
    array(b, key, LMP_GGUF_INT32, n);
    for (uint64_t i = 0; i < n; i++) lmp_gguf_put_u32(b, (uint32_t)v[i]);
}

/* Bytes of one value of a fixed-size type (the reader has checked the type is one of them). */
static size_t type_size(lmp_gguf_type t)
{
    switch (t) {
    case LMP_GGUF_UINT8: case LMP_GGUF_INT8: case LMP_GGUF_BOOL: return 1;
    case LMP_GGUF_UINT16: case LMP_GGUF_INT16: return 2;
    case LMP_GGUF_UINT32: case LMP_GGUF_INT32: case LMP_GGUF_FLOAT32: return 4;
    case LMP_GGUF_UINT64: case LMP_GGUF_INT64: case LMP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

void lmp_gguf_kv_copy(lmp_gguf_meta *b, const lmp_gguf_kv *kv)
{
    /* The reader keeps a value's bytes as the file had them (little-endian), so they are copied
     * as they are; strings it keeps as (pointer, length) pairs. */
    if (kv->type == LMP_GGUF_ARRAY) array(b, kv->key, kv->arr_type, kv->n);
    else pair(b, kv->key, kv->type);
    if (kv->arr_type == LMP_GGUF_STRING)
        for (uint64_t i = 0; i < kv->n; i++) lmp_gguf_put_str(b, kv->strs[i], (size_t)kv->str_lens[i]);
    else
        lmp_gguf_put_bytes(b, kv->data, (size_t)kv->n * type_size(kv->arr_type));
}
