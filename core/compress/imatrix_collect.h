/* imatrix_collect.h — an importance matrix of the unmodified model, as llama-imatrix computes
 * one (tools/imatrix/imatrix.cpp in llama.cpp), for `lmpress imatrix`.
 *
 * Chunking, llama-imatrix's: the text's ids (BOS first when the tokenizer adds one) are cut into
 * floor(n / C) chunks of C tokens (at most max_chunks), and the first token of every chunk is
 * replaced by BOS when the tokenizer adds one; each chunk runs from position 0.  For every block
 * linear, every token of every chunk adds x^2 of each input to the weight's in_sum2 and 1 to its
 * count (llama-imatrix's collect_imatrix on each MUL_MAT of a blk.* weight); the entry is named
 * after the weight's GGUF tensor (model/tensor_names.h): q, k and v have three entries with the
 * same sums, GPT-2's fused attn_qkv one.  The head (output.weight) is left out, as llama-imatrix
 * leaves it out without --process-output.  The model runs block by block (eval/stream.h): one
 * block's weights in memory at a time, the chunks' states in memory or spilled to a file. */
#ifndef LMP_CORE_IMATRIX_COLLECT_H
#define LMP_CORE_IMATRIX_COLLECT_H

#include "eval/eval.h"
#include "export/imatrix_write.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "base/ctx.h"

/* The chunks llama-imatrix cuts from ids[n] with C tokens each (max_chunks > 0 caps them), into
 * *chunks (malloc'd, [*n_chunks * C]) with the first id of each replaced by bos when bos >= 0. */
int lmp_imatrix_chunks(const int32_t *ids, int64_t n, int64_t C, int64_t max_chunks, int32_t bos, int32_t **chunks,
                       int64_t *n_chunks);

/* Runs m over chunks[n_chunks * C] and fills *out (its entries, chunk_count = n_chunks,
 * chunk_size = C; dataset left to the caller).  ppl: the perplexity of the chunks' second halves
 * (positions C/2 .. C-2, as llama-imatrix prints its estimate), or NULL. */
int lmp_imatrix_collect(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, int32_t *chunks, int64_t n_chunks,
                        int64_t C, lmp_imatrix_sums *out, lmp_score *ppl);

#endif
