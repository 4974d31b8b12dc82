/* fuzz_safetensors.c — libFuzzer entry for core/formats/safetensors.c's in-memory lmp_st_parse (see
 * README.md here).
 *
 * Any input must give either a set or one error, never a crash or sanitizer report.  An
 * accepted set is checked against the format's promises: each tensor found by name, inside the
 * input, nbytes == numel * dtype size, the tensors of the shard tiling the data section, and
 * every F32/F16/BF16 tensor converting in full (ASan checks each byte read is inside the input). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lmp_safetensors *st = NULL;
    int rc = lmp_st_parse(data, size, "fuzz.safetensors", &st);
    if (rc != 0) {
        if (st != NULL || lmp_last_error()[0] == 0) abort();
        return 0;
    }
    float buf[256];
    const uint8_t *end = data + size, *prev_end = NULL;
    for (size_t i = 0; i < st->n_tensors; i++) {
        const lmp_st_tensor *t = &st->tensors[i];
        if (lmp_st_find(st, t->name) != t) abort();
        if (t->nbytes != (size_t)t->numel * lmp_st_dtype_size(t->dtype)) abort();
        const uint8_t *p = t->data;
        if (p < data || p > end || t->nbytes > (size_t)(end - p)) abort();
        if (prev_end && p != prev_end) abort(); /* offset order, no gaps or overlaps */
        prev_end = p + t->nbytes;
        int convertible = t->dtype == LMP_ST_F32 || t->dtype == LMP_ST_F16 || t->dtype == LMP_ST_BF16;
        for (int64_t first = 0; first < t->numel; first += 256) {
            int64_t n = t->numel - first < 256 ? t->numel - first : 256;
            if ((lmp_st_to_f32(t, first, n, buf) == 0) != convertible) abort();
        }
    }
    if (st->n_tensors && prev_end != end) abort(); /* the data section is fully covered */
    lmp_st_close(st);
    return 0;
}
