/* fuzz_imatrix.c — libFuzzer entry for core/formats/imatrix.c (see README.md in this folder).
 *
 * Parses the input as a llama.cpp importance matrix (GGUF or legacy .dat, told apart by the
 * magic, as the reader does); when it parses, checks what the rest of lmpress relies on: the
 * entries are sorted and unique, each is found by its name, holds rows * n values, and every
 * value is a finite number >= 0.  A failure must leave a message naming the input. */
#include "base/error.h"
#include "formats/imatrix.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lmp_imatrix *im = NULL;
    if (lmp_imatrix_parse(data, size, "fuzz.imatrix", &im) != 0) {
        if (im != NULL || strstr(lmp_last_error(), "fuzz.imatrix") == NULL) __builtin_trap();
        return 0;
    }
    if (im->n_entries < 1) __builtin_trap();
    volatile float sink = 0;
    for (int64_t i = 0; i < im->n_entries; i++) {
        const lmp_imatrix_entry *e = &im->entries[i];
        if (lmp_imatrix_find(im, e->name) != e) __builtin_trap();
        if (i && strcmp(im->entries[i - 1].name, e->name) >= 0) __builtin_trap();
        if (e->rows < 1 || e->n < 1 || e->empty_rows < 0 || e->empty_rows > e->rows) __builtin_trap();
        for (int64_t k = 0; k < e->rows * e->n; k++) {
            if (!isfinite(e->values[k]) || e->values[k] < 0) __builtin_trap();
            sink += e->values[k];
        }
    }
    if (im->dataset) sink += (float)strlen(im->dataset);
    (void)sink;
    lmp_imatrix_free(im);
    return 0;
}
