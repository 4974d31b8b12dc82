/* gguf_quant_tables.h — the lookup tables of ggml's i-quants and FP4 formats (values from
 * llama.cpp's ggml-common.h; core/formats/gguf_quant_tables.c is generated from it by
 * tools/ref/gen_quant_tables.py).  Only gguf_quants.c uses them.  A grid entry packs 8 (uint64)
 * or 4 (uint32) values, the j-th in bits 8j..8j+7, as ggml reads them on a little-endian host. */
#ifndef LMP_CORE_GGUF_QUANT_TABLES_H
#define LMP_CORE_GGUF_QUANT_TABLES_H

#include <stdint.h>

extern const uint8_t lmp_ksigns_iq2xs[128]; /* 7 sign bits + their parity as the 8th */
extern const int8_t lmp_kvalues_iq4nl[16];  /* IQ4_NL / IQ4_XS non-linear levels */
extern const int8_t lmp_kvalues_fp4[16];    /* E2M1 values, doubled (MXFP4, NVFP4) */
extern const uint64_t lmp_iq2xxs_grid[256];
extern const uint64_t lmp_iq2xs_grid[512];
extern const uint64_t lmp_iq2s_grid[1024];
extern const uint32_t lmp_iq3xxs_grid[256];
extern const uint32_t lmp_iq3s_grid[512];
extern const uint64_t lmp_iq1s_grid[2048];  /* int8 values -1, 0, 1 */

#endif
