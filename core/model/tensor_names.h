/* tensor_names.h — the names of a block's tensors, in Hugging Face checkpoints
 * ("model.layers.3.self_attn.q_proj") and in llama.cpp's GGUF files ("blk.3.attn_q.weight"), by
 * role (a linear) or kind (a norm, arch.h's LMP_NORM_*): the one map every part of lmpress that
 * meets such files reads.  The block's tables (model.c lmp_block_init) name their tensors from it;
 * the GGUF loader and writer, the Hugging Face exporter (through those tables) and llama.cpp's
 * importance matrices (whose entries llama-imatrix keys by the weight's GGUF name) do too.
 * Adding a family whose tensors are named differently is an entry here, or in its descriptor
 * (arch.h's hf_norms, hf_fused_*). */
#ifndef LMP_CORE_TENSOR_NAMES_H
#define LMP_CORE_TENSOR_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* The short name of a role, as analyze's units, reports and charts show it ("q", "gate", "down"),
 * NULL for none; and the role of a short name, -1 for none. */
const char *lmp_role_name(lmp_role r);
int lmp_role_by_name(const char *name);

/* The stem of the linear of this role in a model of this family ("attn_q", "ffn_down"), or NULL
 * when llama.cpp's layout of the family has none.  GPT-2's split c_attn (q, k, v) maps back to
 * llama.cpp's fused "attn_qkv": one weight there, one input, so one importance vector. */
const char *lmp_gguf_linear_stem(lmp_family family, lmp_role role);

/* A mixture of experts' linears in GGUF (llama.cpp's names, issue 37): the router ffn_gate_inp,
 * the shared expert's sigmoid gate ffn_gate_inp_shexp and its linears ffn_{gate,up,down}_shexp,
 * the routed experts' ffn_{gate,up,down}_exps (3-D: every expert's weight one after the other);
 * NULL for any other linear.  (Their Hugging Face names are the family's descriptor's:
 * arch.h's lmp_moe_desc.) */
const char *lmp_gguf_moe_stem(const lmp_linear *l);

/* The stem of a fused GGUF tensor (model.h's LMP_FUSED_QKV "attn_qkv", LMP_FUSED_GATE_UP
 * "ffn_up"), NULL for LMP_FUSED_NONE. */
const char *lmp_gguf_fused_stem(int fused);

/* The GGUF name of block norm i (lmp_norm_index's order: "attn_norm", "post_ffw_norm"), NULL when
 * the architecture has no norm i. */
const char *lmp_gguf_norm_name(const lmp_arch *a, int i);

/* "blk.<block>.<stem>.<suffix>" into buf[n] ("weight", "bias"); 0, or -1 when there is no stem
 * or the name does not fit (buf then holds "" or a truncated name, never used). */
int lmp_gguf_linear_name(lmp_family family, int64_t block, lmp_role role, const char *suffix, char *buf, size_t n);

/* Hugging Face: what the block's modules are named after ("model.layers", GPT-2's
 * "transformer.h"), the linear of a role after "<prefix>.N." ("self_attn.q_proj"; GPT-2's split
 * c_attn "attn.c_attn.q"), NULL when the family has none, and norm kind k's (LMP_NORM_*: the
 * family's own from its descriptor's hf_norms, else Llama's or GPT-2's), NULL when none. */
const char *lmp_hf_block_prefix(lmp_family family);
const char *lmp_hf_linear_leaf(lmp_family family, lmp_role role);
const char *lmp_hf_norm_leaf(const lmp_arch *a, int k);
/* The same for architecture a: its descriptor's own names where it has them (GPT-NeoX's
 * "gpt_neox.layers", "attention.query_key_value"; arch.h's hf_block_prefix, hf_linears), else
 * its family's. */
const char *lmp_hf_arch_block_prefix(const lmp_arch *a);
const char *lmp_hf_arch_linear_leaf(const lmp_arch *a, lmp_role role);

#endif
