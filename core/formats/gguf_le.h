/* gguf_le.h — the little-endian loads gguf.c and gguf_quants.c read GGUF images with: bytes
 * assembled by hand, so neither the host's byte order nor a value's (often odd) alignment
 * inside the image matters. */
#ifndef LMP_CORE_GGUF_LE_H
#define LMP_CORE_GGUF_LE_H

#include <stdint.h>
#include <string.h>

static inline uint16_t ld16(const unsigned char *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }

static inline uint32_t ld32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ld64(const unsigned char *p) { return ld32(p) | (uint64_t)ld32(p + 4) << 32; }

static inline float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
