/* gguf_meta.h — the byte sections of a GGUF file built in memory: metadata pairs and tensor
 * infos, little-endian, in the layout formats/gguf.h describes.  A writer collects every pair
 * here first, so it knows the header's size (and every tensor's offset) before it writes a byte.
 *
 * An out-of-memory append sets `failed` and turns every later append into a no-op, so a caller
 * adds a run of pairs and checks once (lmp_gguf_meta_status). */
#ifndef LMP_CORE_GGUF_META_H
#define LMP_CORE_GGUF_META_H

#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"

typedef struct lmp_gguf_meta {
    unsigned char *data;
    size_t len, cap;
    uint64_t n;   /* metadata pairs (or tensor infos) appended */
    int failed;   /* an append ran out of memory */
} lmp_gguf_meta;

void lmp_gguf_meta_free(lmp_gguf_meta *b);
/* 0, or LMP_ENOMEM with a message naming `what` when an append failed. */
int lmp_gguf_meta_status(const lmp_gguf_meta *b, const char *what);

/* Raw little-endian pieces (tensor infos, the file header). */
void lmp_gguf_put_u32(lmp_gguf_meta *b, uint32_t v);
void lmp_gguf_put_u64(lmp_gguf_meta *b, uint64_t v);
void lmp_gguf_put_bytes(lmp_gguf_meta *b, const void *p, size_t n);
/* A gguf string: uint64 length + bytes. */
void lmp_gguf_put_str(lmp_gguf_meta *b, const char *s, size_t n);

/* One metadata pair each (n counts it). */
void lmp_gguf_kv_u32(lmp_gguf_meta *b, const char *key, uint32_t v);
void lmp_gguf_kv_f32(lmp_gguf_meta *b, const char *key, float v);
void lmp_gguf_kv_bool(lmp_gguf_meta *b, const char *key, int v);
void lmp_gguf_kv_str(lmp_gguf_meta *b, const char *key, const char *s, size_t n);
/* Arrays: strings (n of them, lens[i] bytes each), float32, int32. */
void lmp_gguf_kv_strs(lmp_gguf_meta *b, const char *key, uint64_t n, const char *const *strs, const size_t *lens);
void lmp_gguf_kv_f32s(lmp_gguf_meta *b, const char *key, uint64_t n, const float *v);
void lmp_gguf_kv_bools(lmp_gguf_meta *b, const char *key, uint64_t n, const unsigned char *v);
void lmp_gguf_kv_i32s(lmp_gguf_meta *b, const char *key, uint64_t n, const int32_t *v);
/* A pair read from another GGUF, value and type as they were (any type, arrays included). */
void lmp_gguf_kv_copy(lmp_gguf_meta *b, const lmp_gguf_kv *kv);

#endif
