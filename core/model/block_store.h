/* block_store.h — a variant's compressed blocks kept as their codes, in a temporary file.
 *
 * An export writes a variant only after its last block is compressed, but memory must hold one
 * block (design.md, "Memory").  So each finished block is put here and read back when the writer
 * reaches it.  A weight on the grid its stage recorded (lmp_linear.grid) is stored as its code,
 * in 4 bits when the grid has at most 16 codes and 8 bits otherwise (every grid lmpress has: at
 * most 256 codes); the scales, biases, norms and any weight without a grid as f32; an N:M mask as
 * bits.  A W4 g128 variant takes about 1/6 of its f32 size (4-bit codes, the -0 marks below,
 * f32 scales).
 *
 * Reading a block back gives the block that was put, bit for bit: each code is checked with
 * grid_codes.h's test, a linear whose weights are not all on its grid is stored as f32, and the
 * weights -0 whose code gives +0 (a symmetric grid's small negatives) are marked with a bit
 * each, in the linears that have any.  The file is unlinked at once ($TMPDIR, or /tmp), so it is gone
 * with the process however the process ends. */
#ifndef LMP_CORE_BLOCK_STORE_H
#define LMP_CORE_BLOCK_STORE_H

#include <stdint.h>

#include "base/ctx.h"
#include "model/block_source.h"

typedef struct lmp_block_store lmp_block_store;

/* A store for n_blocks blocks; `what` names it in messages and must outlive it. */
int lmp_block_store_open(lmp_ctx *ctx, int64_t n_blocks, const char *what, lmp_block_store **out);
/* Stores blk (blk->index says which); a block stored twice keeps the later. */
int lmp_block_store_put(lmp_block_store *s, const lmp_block *blk);
/* The stored blocks as a source: getting a block never stored is an error. */
lmp_block_source lmp_block_store_source(const lmp_block_store *s);
/* Bytes in the file, and what the same blocks take in f32 (for the log). */
int64_t lmp_block_store_bytes(const lmp_block_store *s);
int64_t lmp_block_store_f32_bytes(const lmp_block_store *s);
void lmp_block_store_free(lmp_block_store *s);

#endif
