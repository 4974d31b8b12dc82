/* imatrix_write.h — writing an importance matrix in llama.cpp's current GGUF form, the one
 * llama-imatrix writes by default and llama-quantize --imatrix reads (formats/imatrix.h describes
 * it and reads it back):
 *   metadata, in llama-imatrix's order: general.type = "imatrix", imatrix.datasets (the text's
 *   name), imatrix.chunk_count and imatrix.chunk_size (uint32);
 *   per weight, in name order: <name>.in_sum2 (F32, ne = {n}: the sums of x^2 of each input over
 *   the tokens) and <name>.counts (F32, ne = {1}: the tokens), a dense weight's pair 1-D as
 *   ggml stores a {n, 1} tensor; data aligned to 32 bytes.
 * Given the same sums, the bytes are those llama-imatrix writes (gguf_write_to_file). */
#ifndef LMP_CORE_IMATRIX_WRITE_H
#define LMP_CORE_IMATRIX_WRITE_H

#include <stdint.h>

typedef struct lmp_imatrix_sum {
    char name[128];            /* the weight's GGUF name, "blk.3.attn_q.weight" */
    int64_t n;                 /* its inputs */
    double *sum2;              /* [n]: sum over the tokens of x^2 (written as f32) */
    int64_t count;             /* tokens summed */
} lmp_imatrix_sum;

typedef struct lmp_imatrix_sums {
    int64_t n_entries;
    lmp_imatrix_sum *entries;
    int64_t chunk_count, chunk_size;
    const char *dataset;       /* imatrix.datasets[0]: the calibration text as named */
} lmp_imatrix_sums;

void lmp_imatrix_sums_free(lmp_imatrix_sums *s);

/* Writes s to path through a temporary file renamed when complete (base/outfile.h); entries are
 * sorted by name first.  A name twice, a chunk count or size beyond uint32, or an entry with no
 * input is refused before anything is written. */
int lmp_imatrix_write(const char *path, lmp_imatrix_sums *s);

#endif
