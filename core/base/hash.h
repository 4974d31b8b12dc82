/* hash.h — FNV-1a 64 fingerprints: a config's in reports, a block's weights in the calibration
 * states (not for anything an attacker chooses to collide: they tell runs apart, they do not
 * authenticate them). */
#ifndef LMP_CORE_HASH_H
#define LMP_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LMP_FNV1A64_INIT 0xcbf29ce484222325ull

static inline uint64_t lmp_fnv1a64(uint64_t h, const void *data, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)data)[i]) * 0x100000001b3ull;
    return h;
}

/* The same fold a 64-bit word at a time, for large float arrays (8x fewer multiplies), ending
 * with the length; p == NULL folds a marker of its own, so "absent" differs from "empty". */
static inline uint64_t lmp_fnv1a64_words(uint64_t h, const void *p, size_t bytes)
{
    const uint64_t prime = 0x100000001b3ull;
    if (!p) return (h ^ 0x9e3779b97f4a7c15ull) * prime;
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        h = (h ^ w) * prime;
    }
    for (; i < bytes; i++) h = (h ^ c[i]) * prime;
    return (h ^ bytes) * prime;
}

#endif
