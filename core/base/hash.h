/* hash.h — FNV-1a 64: a config's fingerprint in reports (not for anything an attacker chooses
 * to collide: it tells runs apart, it does not authenticate them). */
#ifndef LMP_CORE_HASH_H
#define LMP_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LMP_FNV1A64_INIT 0xcbf29ce484222325ull

static inline uint64_t lmp_fnv1a64(uint64_t h, const void *data, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)data)[i]) * 0x100000001b3ull;
    return h;
}

#endif
