/* st_write.h — writing a safetensors file as a stream: the header first, from the list of tensors
 * (name, dtype, shape), then each tensor's bytes in list order, so a writer needs only one
 * tensor (or one row) in memory at a time.
 *
 * Layout (formats/safetensors.h reads it): uint64 little-endian N, N bytes of JSON header padded
 * with spaces so that the data section starts at a multiple of 8, then the tensors back to back,
 * each "data_offsets" relative to the data section.  The header carries
 * "__metadata__": {"format": "pt"}, which transformers checks before it loads a file.
 *
 * Also here: the exact conversions of an f32 value to the 16-bit types a file may hold. */
#ifndef LMP_CORE_ST_WRITE_H
#define LMP_CORE_ST_WRITE_H

#include <stdint.h>
#include <stdio.h>

#include "formats/safetensors.h"

typedef struct lmp_stw_tensor {
    const char *name;
    lmp_st_dtype dtype;
    int ndim;                  /* 1, 2 or 3 */
    int64_t shape[3];
} lmp_stw_tensor;

/* Bytes of the tensor's data (elements * dtype size). */
uint64_t lmp_stw_nbytes(const lmp_stw_tensor *t);

/* Writes the length prefix and the header of t[0..n) (data in that order, back to back).
 * Returns 0, or LMP_ENOMEM; stream errors are left to the caller's ferror. */
int lmp_stw_header(FILE *f, const lmp_stw_tensor *t, size_t n);

/* The IEEE half / bfloat16 bits of x, rounded to nearest even (plugin.h's lmp_fp16_round and
 * lmp_bf16_round: torch's and numpy's casts).  *changed (may be NULL) is set to 1 when the
 * stored value differs from x (NaN payloads aside), left alone otherwise. */
uint16_t lmp_stw_f16(float x, int *changed);
uint16_t lmp_stw_bf16(float x, int *changed);

#endif
