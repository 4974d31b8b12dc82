/* gguf_names.h — the names llama.cpp gives a block's linears in GGUF files ("blk.3.attn_q.weight"),
 * kept in one table for every part of lmpress that meets such files: the GGUF model loader, and
 * llama.cpp's importance matrices, whose entries are named after the weights they were measured
 * for (llama-imatrix keys each entry by the weight's GGUF name). */
#ifndef LMP_CORE_GGUF_NAMES_H
#define LMP_CORE_GGUF_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* The stem of the linear of this role in a model of this family ("attn_q", "ffn_down"), or NULL
 * when llama.cpp's layout of the family has none.  GPT-2's split c_attn (q, k, v) maps back to
 * llama.cpp's fused "attn_qkv": one weight there, one input, so one importance vector. */
const char *lmp_gguf_linear_stem(lmp_family family, lmp_role role);

/* "blk.<block>.<stem>.<suffix>" into buf[n] ("weight", "bias"); 0, or -1 when there is no stem
 * or the name does not fit (buf then holds "" or a truncated name, never used). */
int lmp_gguf_linear_name(lmp_family family, int64_t block, lmp_role role, const char *suffix, char *buf, size_t n);

#endif
