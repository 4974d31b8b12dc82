/* block_source.h — a model's blocks handed out one at a time.
 *
 * A writer that needs every block of a variant (an export plans all tensors before it writes
 * any) reads them through a source, so memory holds one block however many the model has.  The
 * blocks come from the model's file (the unmodified model), from a block store (a compressed
 * variant kept as codes on disk: block_store.h), or from an array already in memory (tests). */
#ifndef LMP_CORE_BLOCK_SOURCE_H
#define LMP_CORE_BLOCK_SOURCE_H

#include <stdint.h>

#include "model/model.h"

typedef struct lmp_block_source {
    int64_t n;                                          /* blocks */
    /* *out <- block b, a copy the caller frees with lmp_block_free. */
    int (*get)(const void *self, int64_t b, lmp_block *out);
    const void *self;
} lmp_block_source;

/* The model's own blocks, converted from its file (its pages released after each). */
lmp_block_source lmp_block_source_model(const lmp_model *m);
/* blocks[0..n), cloned on each get. */
lmp_block_source lmp_block_source_array(const lmp_block *blocks, int64_t n);

/* The block last asked for, kept until another is: a writer walking its tensors in block
 * order loads each block once. */
typedef struct lmp_block_cursor {
    const lmp_block_source *src;
    int64_t at;                                         /* the block held, or -1 */
    lmp_block blk;
} lmp_block_cursor;

void lmp_block_cursor_init(lmp_block_cursor *c, const lmp_block_source *src);
/* Block b (loaded when it is not the one held); NULL on failure (lmp_last_error says why). */
const lmp_block *lmp_block_cursor_at(lmp_block_cursor *c, int64_t b);
void lmp_block_cursor_free(lmp_block_cursor *c);

#endif
