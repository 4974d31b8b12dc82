/* model.h — a loaded model: architecture numbers, mmap'd weights, and its blocks.
 *
 * Llama family (RMSNorm, RoPE, GQA, SwiGLU).  Each block is an lmp_block (plugin.h) whose
 * linears are, in this order, q k v o gate up down (index == lmp_role), and whose norms are
 * 0 = input_layernorm (feeds q, k, v) and 1 = post_attention_layernorm (feeds gate, up).
 * Names follow Hugging Face: "model.layers.N.self_attn.q_proj", "model.layers.N.mlp.down_proj".
 * The model's own blocks point into the read-only file mapping; a variant works on clones. */
#ifndef LMP_CORE_MODEL_H
#define LMP_CORE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "lmpress/plugin.h"

typedef struct lmp_arch {
    int64_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    int64_t head_dim;     /* dim / n_heads */
    float norm_eps;       /* RMSNorm epsilon (llama2.c: 1e-5) */
    float rope_theta;     /* 10000 for llama2.c */
} lmp_arch;

typedef struct lmp_model {
    char *path;
    const char *format;   /* "llama2.c v0" */
    lmp_arch arch;
    void *map;
    size_t map_size;
    const float *tok_emb;     /* [vocab, dim] */
    const float *final_norm;  /* [dim] */
    const float *lm_head;     /* [vocab, dim]; == tok_emb when tied */
    lmp_block *blocks;        /* [n_layers], weights in the mapping: never written */
} lmp_model;

/* Opens a model file; the format is recognised from its contents. */
int lmp_model_load(const char *path, lmp_model **out);
void lmp_model_free(lmp_model *m);

/* Parameters of the linears inside the blocks (what compression acts on). */
int64_t lmp_model_block_linear_params(const lmp_model *m);

/* Deep copy of a block into owned memory: a variant's working weights. */
int lmp_block_clone(const lmp_block *src, lmp_block *dst);
/* Frees what lmp_block_clone allocated. */
void lmp_block_free(lmp_block *b);

#endif
