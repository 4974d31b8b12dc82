/* gguf_quants.h — ggml's tensor storage types decoded to f32, for gguf.c's lmp_gguf_dequantize.
 *
 * For each type it reads, a decoder turns nb consecutive blocks (the block sizes are gguf.c's
 * type table) into floats, bit for bit what ggml's reference C dequantize_row_* gives.  The
 * caller has checked that the nb blocks lie in bounds. */
#ifndef LMP_CORE_GGUF_QUANTS_H
#define LMP_CORE_GGUF_QUANTS_H

#include <stdint.h>

typedef void (*lmp_ggml_decode_fn)(const unsigned char *x, int64_t nb, float *y);

/* The decoder of ggml type t, or NULL when lmpress has none. */
lmp_ggml_decode_fn lmp_ggml_decoder(uint32_t t);

#endif
