/* safetensors.h — reading Hugging Face safetensors checkpoints, memory-mapped.
 *
 * File layout: uint64 little-endian N; N bytes of UTF-8 JSON (the header), starting with '{'
 * and possibly padded with trailing spaces; then the data section.  The header maps each tensor
 * name to {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]} with offsets
 * relative to the start of the data section, plus an optional "__metadata__" object of
 * strings.  Data is little-endian and row-major: shape[ndim-1] varies fastest (PyTorch order,
 * so a linear weight is [out_features, in_features]).
 *
 * A checkpoint is one file (model.safetensors) or several shards listed by
 * model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor name: shard file}}.
 * lmp_st_open takes a directory (the index is preferred when both exist), a .safetensors file
 * or an index .json file, and gives one set holding the tensors of all shards.
 *
 * Everything is validated before use, and a malformed checkpoint gives one message naming the
 * file, the tensor and the problem, never a crash: N within the file and <= 100,000,000; the
 * header valid JSON; every dtype known; at most 8 dimensions, all non-negative, the element
 * count and byte size without overflow; end - begin == numel * dtype size; offsets inside the
 * data section; no two tensors overlapping and no byte of the data section outside a tensor
 * (the format requires the data section to be fully covered); tensor names unique across the
 * whole checkpoint; for sharded checkpoints, shard names plain file names in the index's
 * directory, every listed tensor present in its shard and every tensor of a shard listed for
 * that shard.  Unknown keys inside a tensor entry are ignored (forward compatibility).
 *
 * Ownership: the set owns everything it points to (names, paths, parsed headers, mappings) until
 * lmp_st_close; tensor data pointers point into the read-only mappings.  Files are mapped with
 * MAP_PRIVATE; truncating one while it is open makes later reads fault (SIGBUS), as with any
 * mmap reader. */
#ifndef LMP_CORE_SAFETENSORS_H
#define LMP_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/json.h"

#define LMP_ST_MAX_DIMS 8
#define LMP_ST_MAX_HEADER 100000000u /* the reference implementation's limit on N */

/* Every byte-sized dtype of the format.  Only F32, F16 and BF16 convert to f32; the others are
 * recognised (so their files open and sizes are checked) but lmp_st_to_f32 refuses them.
 * Sub-byte types (F4, F6_*) are not supported and make the file fail to open. */
typedef enum {
    LMP_ST_BOOL, LMP_ST_U8, LMP_ST_I8, LMP_ST_F8_E5M2, LMP_ST_F8_E4M3, LMP_ST_F8_E8M0,
    LMP_ST_I16, LMP_ST_U16, LMP_ST_F16, LMP_ST_BF16, LMP_ST_I32, LMP_ST_U32, LMP_ST_F32,
    LMP_ST_I64, LMP_ST_U64, LMP_ST_F64, LMP_ST_C64,
    LMP_ST_N_DTYPES
} lmp_st_dtype;

typedef struct lmp_st_tensor {
    const char *name;      /* NUL-terminated (names with an embedded NUL are rejected) */
    const char *file;      /* path of the shard holding it, for messages */
    int shard;             /* index into lmp_safetensors.shards */
    lmp_st_dtype dtype;
    int ndim;              /* 0 (a scalar: one element) .. LMP_ST_MAX_DIMS */
    int64_t shape[LMP_ST_MAX_DIMS]; /* shape[ndim-1] fastest; unused entries 0 */
    int64_t numel;         /* product of the shape (1 for a scalar, 0 if a dimension is 0) */
    uint64_t offset;       /* data_offsets[0], relative to the shard's data section */
    const void *data;      /* inside the mapping; NOT necessarily aligned, little-endian */
    size_t nbytes;         /* numel * dtype size */
} lmp_st_tensor;

typedef struct lmp_st_shard {
    char *path;            /* as opened (directory + file name for index shards) */
    const lmp_json *metadata; /* the header's "__metadata__" object (all values strings), or NULL */
    /* private */
    lmp_json *header;
    const unsigned char *map;
    size_t size;
    int mapped;            /* munmap on close (lmp_st_parse does not own its buffer) */
} lmp_st_shard;

typedef struct lmp_safetensors {
    char *path;            /* what lmp_st_open was given (or lmp_st_parse's `what`) */
    lmp_json *index;       /* the parsed index.json for sharded checkpoints, else NULL */
    lmp_st_shard *shards;
    int n_shards;          /* 1 for a single file; index order of first mention otherwise */
    lmp_st_tensor *tensors; /* shard by shard, each shard's tensors in data-offset order */
    size_t n_tensors;
    /* private: the tensors sorted by name, for lmp_st_find; the names lmp_st_add_prefix made */
    lmp_st_tensor **by_name;
    char *renamed;
} lmp_safetensors;

/* Names every tensor prefix + its name: the names a model class's checkpoint has when the file
 * was saved from its base model without the class's prefix (bigscience's Bloom files: "h.0..."
 * for "transformer.h.0...").  LMP_EINVAL, naming it, when a tensor already has the prefix (a file
 * mixing the two forms). */
int lmp_st_add_prefix(lmp_safetensors *st, const char *prefix);
/* Opens a checkpoint: a directory (model.safetensors.index.json, else model.safetensors), a
 * *.json index, or a single safetensors file.  Close with lmp_st_close. */
int lmp_st_open(const char *path, lmp_safetensors **out);
/* Parses an in-memory single-file image (the fuzzer's entry; `what` names it in messages).
 * data[0..size) is not copied and must outlive the set. */
int lmp_st_parse(const void *data, size_t size, const char *what, lmp_safetensors **out);
void lmp_st_close(lmp_safetensors *st);
/* Drops every mapped shard's pages from resident memory (see lmp_gguf_release_pages). */
void lmp_st_release_pages(const lmp_safetensors *st);

/* The tensor called name, or NULL (O(log n)). */
const lmp_st_tensor *lmp_st_find(const lmp_safetensors *st, const char *name);

/* Converts elements [first, first + n) of t (row-major flat index) to f32 in out[0..n).
 * F32 is copied bit for bit; F16 and BF16 convert exactly (subnormals, infinities, signed
 * zeros and NaN payloads kept).  Other dtypes, or a range outside the tensor, are errors
 * naming the file and the tensor. */
int lmp_st_to_f32(const lmp_st_tensor *t, int64_t first, int64_t n, float *out);

/* The exact IEEE binary16 / bfloat16 -> binary32 conversions used by lmp_st_to_f32 (pure bit
 * manipulation: no floating-point operation, so no dependence on FTZ/DAZ modes, and signaling
 * NaNs stay signaling). */
float lmp_st_f16_to_f32(uint16_t h);
float lmp_st_bf16_to_f32(uint16_t b);

/* "F32", "BF16", ... ("?" when out of range) and the element size in bytes (0 if invalid). */
const char *lmp_st_dtype_name(lmp_st_dtype d);
size_t lmp_st_dtype_size(lmp_st_dtype d);

#endif
