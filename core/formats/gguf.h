/* gguf.h — reading llama.cpp's GGUF files (versions 2 and 3), memory-mapped.
 *
 * File layout (little-endian): magic "GGUF", uint32 version, uint64 n_tensors, uint64 n_kv;
 * n_kv metadata pairs {gguf string key, uint32 type, value}; n_tensors tensor infos
 * {gguf string name, uint32 n_dims, uint64 ne[n_dims], uint32 ggml_type, uint64 offset};
 * padding to general.alignment (default 32); the tensor data, each offset relative to the start
 * of the data section and aligned.  A gguf string is uint64 length + bytes (no NUL).
 * ne[0] is the fastest-varying dimension: a PyTorch weight [out, in] has ne = {in, out}.
 *
 * Every size, count, offset and string is checked against the file before use; a malformed
 * file gives one message naming the file and the problem, never a crash. */
#ifndef LMP_CORE_GGUF_H
#define LMP_CORE_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types (gguf_type). */
typedef enum {
    LMP_GGUF_UINT8 = 0, LMP_GGUF_INT8 = 1, LMP_GGUF_UINT16 = 2, LMP_GGUF_INT16 = 3,
    LMP_GGUF_UINT32 = 4, LMP_GGUF_INT32 = 5, LMP_GGUF_FLOAT32 = 6, LMP_GGUF_BOOL = 7,
    LMP_GGUF_STRING = 8, LMP_GGUF_ARRAY = 9, LMP_GGUF_UINT64 = 10, LMP_GGUF_INT64 = 11,
    LMP_GGUF_FLOAT64 = 12,
} lmp_gguf_type;

/* Tensor data types (ggml_type numbering; the holes are types ggml retired). */
typedef enum {
    LMP_GGML_F32 = 0, LMP_GGML_F16 = 1, LMP_GGML_Q4_0 = 2, LMP_GGML_Q4_1 = 3,
    LMP_GGML_Q5_0 = 6, LMP_GGML_Q5_1 = 7, LMP_GGML_Q8_0 = 8, LMP_GGML_Q8_1 = 9,
    LMP_GGML_Q2_K = 10, LMP_GGML_Q3_K = 11, LMP_GGML_Q4_K = 12, LMP_GGML_Q5_K = 13,
    LMP_GGML_Q6_K = 14, LMP_GGML_Q8_K = 15, LMP_GGML_IQ2_XXS = 16, LMP_GGML_IQ2_XS = 17,
    LMP_GGML_IQ3_XXS = 18, LMP_GGML_IQ1_S = 19, LMP_GGML_IQ4_NL = 20, LMP_GGML_IQ3_S = 21,
    LMP_GGML_IQ2_S = 22, LMP_GGML_IQ4_XS = 23, LMP_GGML_I8 = 24, LMP_GGML_I16 = 25,
    LMP_GGML_I32 = 26, LMP_GGML_I64 = 27, LMP_GGML_F64 = 28, LMP_GGML_IQ1_M = 29,
    LMP_GGML_BF16 = 30, LMP_GGML_TQ1_0 = 34, LMP_GGML_TQ2_0 = 35, LMP_GGML_MXFP4 = 39,
    LMP_GGML_NVFP4 = 40, LMP_GGML_Q1_0 = 41, LMP_GGML_Q2_0 = 42,
} lmp_ggml_type;

typedef struct lmp_gguf_kv {
    char *key;
    lmp_gguf_type type;       /* for arrays: LMP_GGUF_ARRAY, element type in arr_type */
    lmp_gguf_type arr_type;
    uint64_t n;               /* array length (1 for a scalar) */
    const void *data;         /* scalar or array payload inside the mapping (not for strings) */
    const char **strs;        /* STRING or array of STRING: n pointers (not NUL-terminated) ... */
    const uint64_t *str_lens; /* ... with their lengths */
} lmp_gguf_kv;

typedef struct lmp_gguf_tensor {
    char *name;
    int n_dims;
    int64_t ne[4];            /* ne[0] fastest */
    lmp_ggml_type type;
    const void *data;         /* inside the mapping */
    size_t nbytes;
} lmp_gguf_tensor;

typedef struct lmp_gguf {
    char *path;
    uint32_t version;
    void *map;
    size_t size;
    size_t alignment;
    lmp_gguf_kv *kv;
    uint64_t n_kv;
    lmp_gguf_tensor *tensors;
    uint64_t n_tensors;
} lmp_gguf;

int lmp_gguf_open(const char *path, lmp_gguf **out);
void lmp_gguf_close(lmp_gguf *g);
/* Drops the file's mapped pages from the process's resident memory (they are read again from
 * the page cache when touched): after a block is converted, so that resident memory does not
 * grow with the model.  A parsed in-memory image is left alone. */
void lmp_gguf_release_pages(const lmp_gguf *g);
/* Parses an in-memory image (the fuzzer's entry; `what` names it in messages). */
int lmp_gguf_parse(const void *data, size_t size, const char *what, lmp_gguf **out);

const lmp_gguf_kv *lmp_gguf_find_kv(const lmp_gguf *g, const char *key);
const lmp_gguf_tensor *lmp_gguf_find_tensor(const lmp_gguf *g, const char *name);
/* Scalar metadata as int64 / double / string (any integer type converts; a missing key or
 * another type is an error naming the key). */
int lmp_gguf_get_int(const lmp_gguf *g, const char *key, int64_t *out);
int lmp_gguf_get_float(const lmp_gguf *g, const char *key, double *out);
int lmp_gguf_get_string(const lmp_gguf *g, const char *key, const char **s, size_t *len);

/* Name of a ggml type ("Q4_1"), or "unknown". */
const char *lmp_ggml_type_name(lmp_ggml_type t);
/* Elements per block of a ggml type (1 for F32, 32 for Q4_0, 256 for Q4_K), or 0 if unknown. */
int lmp_ggml_type_block(lmp_ggml_type t);
/* 0 when lmp_gguf_dequantize reads t's type: every float and quantized type of ggml but Q8_1 and
 * Q8_K (ggml's intermediates, not written to files), the integer types and F64 (Q1_0 and Q2_0,
 * which the PyPI gguf package cannot decode, are held to ggml's own dequantize_row_q1_0 / _q2_0:
 * tests/test_ggml_fp4.c); otherwise LMP_EUNSUPPORTED with a message naming the tensor and its
 * type. */
int lmp_gguf_check_dequantize(const lmp_gguf_tensor *t);
/* Dequantizes n consecutive elements (n a multiple of the type's block size) starting at
 * element `first` of tensor t into out[n] f32, bit for bit as ggml's reference C does. */
int lmp_gguf_dequantize(const lmp_gguf_tensor *t, int64_t first, int64_t n, float *out);

#endif
