/* imatrix.h — llama.cpp's importance matrices (what llama-imatrix writes and llama-quantize
 * --imatrix reads), read into the per-input importance llama-quantize quantizes with.
 *
 * Two forms, told apart by the GGUF magic (llama.cpp's common/imatrix-loader.cpp reads both):
 *  - GGUF (llama-imatrix's default): the metadata imatrix.datasets (array of strings),
 *    imatrix.chunk_count and imatrix.chunk_size, which llama-quantize requires, and for each
 *    weight W two F32 tensors, W.in_sum2 (ne = {n, rows}: per row the sums of x^2 over the
 *    tokens that reached W's input) and W.counts (ne = {1, rows}: how many tokens each row
 *    summed); rows is 1 for a dense weight, one per expert for a MoE weight, and a dense pair is
 *    usually stored 1-D.  Importance = in_sum2 / counts, row by row, in f32 (the count rounded
 *    to an integer first), as llama-quantize's load_imatrix computes it; a row whose count is 0
 *    saw no token and gets 1s there.
 *  - legacy .dat (llama-imatrix --output-format dat): int32 n_entries; per entry int32 name
 *    length, the name, int32 ncall, int32 nval, float[nval] holding (sum / count) * ncall; then
 *    optionally int32 the chunk count, and int32 length + the dataset's name.  Importance =
 *    value / ncall in f32, or the value as written when ncall is 0 (llama-quantize's rule).
 * All little-endian.  An entry is named after its weight's GGUF tensor ("blk.3.attn_q.weight":
 * model/tensor_names.h maps lmpress's linears to those names).
 *
 * Everything is checked before use, each failure one message naming the file and, past the
 * header, the entry: a truncated file, a count or length that does not fit, an in_sum2 without
 * its counts (or the reverse), a tensor that is not F32, a value that is NaN, infinite or
 * negative, a negative or non-finite count, a name twice.  A count of 0 is not an error here
 * (llama-imatrix writes one for a MoE expert no token reached); the entry records how many of
 * its rows have one, and whoever quantizes a linear with such a row refuses it. */
#ifndef LMP_CORE_IMATRIX_H
#define LMP_CORE_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct lmp_imatrix_entry {
    char *name;               /* the weight's GGUF name, "blk.3.attn_q.weight" */
    int64_t n;                /* values per row: the weight's input count */
    int64_t rows;             /* 1 for a dense weight; one per expert (GGUF form only) */
    int64_t empty_rows;       /* rows no token reached (count 0): their values are llama-quantize's 1s */
    float *values;            /* [rows * n], the importance llama-quantize uses */
} lmp_imatrix_entry;

typedef struct lmp_imatrix {
    char *path;
    int legacy;               /* the .dat form */
    int64_t chunk_count;      /* imatrix.chunk_count, the legacy trailer's count; -1 when absent */
    char *dataset;            /* the first dataset named (the text it was computed on), or NULL */
    int64_t n_entries;
    lmp_imatrix_entry *entries; /* sorted by name */
} lmp_imatrix;

/* Reads and checks the file at `path` (opened as input_file.h's LMP_INPUT_IMATRIX: a regular
 * file, no FIFO or device unless LMP_ALLOW_SPECIAL_FILES=1, at most 4 GiB). */
int lmp_imatrix_load(const char *path, lmp_imatrix **out);
/* The same from an image in memory (`what` names it in messages: the fuzzer's and the tests'
 * entry); nothing of the image is kept. */
int lmp_imatrix_parse(const void *data, size_t size, const char *what, lmp_imatrix **out);
void lmp_imatrix_free(lmp_imatrix *im);

/* The entry of the weight `name`, or NULL. */
const lmp_imatrix_entry *lmp_imatrix_find(const lmp_imatrix *im, const char *name);

#endif
