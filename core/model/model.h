/* model.h — a loaded model: its architecture, where its weights live, and its blocks.
 *
 * Families:
 *   LLAMA  RMSNorm, RoPE on q and k (adjacent pairs (2i, 2i+1) of each head, as llama2.c and
 *          llama.cpp's GGUF layout; Hugging Face's rotate-half checkpoints are converted by
 *          permuting the rows of q and k at load), GQA, SwiGLU.  Linears q k v o gate up down,
 *          named like Hugging Face: "model.layers.N.self_attn.q_proj", "model.layers.N.mlp.up_proj".
 *   GPT2   LayerNorm with bias, learned positions, tanh GELU, biases on every linear.  The fused
 *          c_attn is split into q, k, v ("transformer.h.N.attn.c_attn.q"), then o
 *          ("...attn.c_proj"), up ("...mlp.c_fc"), down ("...mlp.c_proj").
 * In both, norm 0 feeds q, k, v and norm 1 feeds the first MLP linear(s).  With q/k norms
 * (arch.qk_norm, Qwen3) norms 2 and 3 ("...self_attn.q_norm", "k_norm", [head_dim]) feed no
 * linear: they act on each head of q and k after the projection, before RoPE.
 *
 * Weights stay in the file (mapped) in its own format.  lmp_model_block_copy() converts one block
 * to f32 (compression and streamed evaluation: one block at a time) and drops the file's mapped
 * pages after it; lmp_model_blocks() gives f32 views of all blocks at once, for generate on a
 * small model and the backend benchmark: converted once and kept until lmp_model_blocks_release
 * or the model is freed (a llama2.c file's point into its mapping). */
#ifndef LMP_CORE_MODEL_H
#define LMP_CORE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "arch/rope.h"
#include "lmpress/plugin.h"

#define LMP_MAX_LAYERS 1024

typedef struct lmp_arch {
    lmp_family family;    /* the block's topology (arch/arch.h) */
    const lmp_arch_desc *desc; /* the family's descriptor; NULL for a hand-made arch (tests) */
    int64_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    int64_t head_dim;     /* dim / n_heads unless the file says otherwise (Qwen3) */
    int qk_norm;          /* an RMSNorm over each head of q and k before RoPE: the block's norms 2, 3 */
    int geglu;            /* the MLP is gelu_tanh(gate) * up (Gemma), else silu(gate) * up */
    int post_norms;       /* RMSNorms on the attention's and MLP's outputs (LMP_ARCH_POST_NORMS) */
    /* The long tail (issue 40), in the LLAMA family's RoPE block: LayerNorms (with a bias) rather
     * than RMSNorms; a parallel residual (x + attn(norm_attn(x)) + mlp(norm_mlp(x))), with one norm
     * for both (shared_norm: the block's norm 1 is then absent); an MLP without a gate
     * (down(gelu(up x))), its GELU the erf one (gelu_erf) or the tanh one. */
    int layer_norm, parallel, shared_norm, plain_mlp, gelu_erf;
    /* Bloom: no RoPE; ALiBi, slope_h * (j - t) added to head h's scores (lmp_alibi_slopes).
     * OPT: no RoPE either (learned positions, m->pos_emb); its gate-less MLP's activation is
     * ReLU (relu) rather than a GELU. */
    int alibi, learned_pos, relu;
    /* OLMo 2 (arch.h LMP_ARCH_NO_PRE_NORMS, LMP_ARCH_QK_NORM_ALL): no norm before attention or the
     * MLP (the block's norms are then the q/k and post norms), and q/k norms over all heads */
    int no_pre_norms, qk_norm_all;
    float logit_scale;    /* the logits are multiplied by it (Cohere's logit_scale); 0 = 1 */
    float embed_scale;    /* the embeddings are multiplied by it (Gemma: sqrt(dim)); 0 = 1 */
    float norm_eps;       /* RMSNorm or LayerNorm epsilon */
    float rope_theta;     /* LLAMA only: the base of the classic rotation */
    /* The rotation as the file describes it (core/arch/rope.h); n_rot == 0 (never filled) means
     * the classic rotation over the whole head with rope_theta. */
    lmp_rope rope;
    /* Sliding-window attention: layer l with sliding_layer[l] attends to the `window` latest
     * positions (window 0: none); with rope_local.n_rot (Gemma 3) those layers also turn with
     * their own RoPE base. */
    int64_t window;
    unsigned char sliding_layer[LMP_MAX_LAYERS];
    lmp_rope rope_local;
    float attn_softcap;   /* Gemma 2: scores through c tanh(s / c) (0: none) */
    float final_softcap;  /* Gemma 2: logits likewise */
    float q_scale;        /* q is multiplied by it before attention (Gemma's query_pre_attn_scalar:
                           * sqrt(head_dim / scalar)); 0 = 1 */
    /* Online rotations (model/rotate.h), steps of the block's forward: online_r3 turns q and k
     * per head after RoPE by H/sqrt(head_dim); online_r4 (NULL: none) turns down_proj's input,
     * whose weight holds the inverse (set by lmp_model_rotate). */
    int online_r3;
    const struct lmp_rotation *online_r4;
    /* A mixture of experts (desc->moe; issue 37): the sparse layers' MLP is n_experts routed
     * experts of expert_hidden, n_experts_used per token (softmax over the router's logits, the
     * top k, renormalized when norm_topk), plus a shared expert of shared_hidden (0: none) behind
     * a sigmoid gate.  dense_layer[l]: layer l keeps a dense MLP of `hidden` (Qwen's
     * mlp_only_layers).  n_experts 0: a dense model. */
    int64_t n_experts, n_experts_used, expert_hidden, shared_hidden;
    int norm_topk;
    unsigned char dense_layer[LMP_MAX_LAYERS];
    /* How the router's logits choose and weigh (arch.h lmp_route_kind; 0: softmax, top k): with
     * n_group > 0 only topk_group groups of n_experts / n_group compete; the weights are then
     * multiplied by routed_scale (0 = 1).  LMP_ROUTE_SIGMOID_BIAS's selection bias is the router
     * linear's b (DeepSeek-V3's e_score_correction_bias), which never enters the weights. */
    lmp_route_kind route;
    int64_t n_group, topk_group;
    float routed_scale;
    /* gpt-oss: the routed experts' clamped SwiGLU, (clamp(up, +-limit) + 1) * g * sigmoid(alpha g)
     * with g = min(gate, limit) (swiglu_limit 0: the plain silu(gate) * up); and the attention
     * sinks (LMP_ARCH_SINKS), a learned logit per head that joins each softmax's denominator,
     * kept as the block's LMP_NORM_SINKS entry. */
    float swiglu_alpha, swiglu_limit;
    int attn_sinks;
    /* Multi-head latent attention (LMP_ARCH_MLA, DeepSeek-V2/V3).  Each of the n_heads heads has
     * q and k of mla_nope + mla_rope dims and v of head_dim (= v_head_dim: o reads n_heads x
     * head_dim); q comes from q (mla_q_lora 0) or q_b(norm(q_a(x))); kv_a(x) gives a latent of
     * mla_kv_lora (through its norm, then kv_b: each head's k nope part and v) and one rotary key
     * of mla_rope dims shared by every head.  `rope` turns mla_rope dims, in adjacent pairs (as
     * transformers' interleaved rotary); scores are scaled by mla_q_scale/sqrt(mla_nope + mla_rope).  The
     * latents' norms take mla_norm_eps (transformers' default 1e-6, not rms_norm_eps). */
    int mla;
    int64_t mla_q_lora, mla_kv_lora, mla_nope, mla_rope;
    float mla_norm_eps;
    float mla_q_scale; /* the softmax scale's factor beyond 1/sqrt(qk dims): YaRN's mscale_all_dim^2 (0 = 1) */
} lmp_arch;

/* The attention's linears of architecture a in block order, o last: q, k, v, o, or with MLA
 * (q | q_a, q_b), kv_a, kv_b, o; their count. */
int lmp_arch_attn_roles(const lmp_arch *a, lmp_role roles[5]);

/* Whether layer l's MLP is a mixture of experts. */
int lmp_arch_moe_layer(const lmp_arch *a, int64_t layer);

/* The sliding window layer l attends within (0: all earlier positions). */
int64_t lmp_arch_window(const lmp_arch *a, int64_t layer);
/* The rotation layer l turns q and k with. */
const lmp_rope *lmp_arch_rope(const lmp_arch *a, int64_t layer);

typedef struct lmp_model lmp_model;

/* What a file format provides. */
typedef struct lmp_model_source {
    /* Fills *out with an owned f32 copy of block b (lmp_block_free frees it). */
    int (*block_copy)(const lmp_model *m, int64_t b, lmp_block *out);
    void (*close)(lmp_model *m);
    /* Storage bits per weight of linear l of block b as the file holds it (NULL: 32, an f32
     * file); see lmp_model_linear_bits. */
    double (*linear_bits)(const lmp_model *m, int64_t b, const lmp_linear *l);
    /* Drops the file's mapped pages from resident memory (NULL: nothing mapped); called after
     * each block_copy, so that reading a model block by block keeps one block resident. */
    void (*release_pages)(const lmp_model *m);
    /* Block b with only the linears lmp_block_keep_experts keeps (model/expert_pager.h): the
     * skeleton and/or routed experts [e0, e1), only those tensors converted.  NULL: the format
     * reads its blocks whole (a mixture of experts' block is then held whole, and said so). */
    int (*block_copy_experts)(const lmp_model *m, int64_t b, int others, int64_t e0, int64_t e1, lmp_block *out);
} lmp_model_source;

struct lmp_model {
    char *path;
    const char *format;       /* "llama2.c v0", "GGUF v3 Q4_0/Q6_K mix", "safetensors" */
    char format_buf[96];      /* a format name made at load ("GGUF v3 Q8_0"): this model's own,
                               * as two models of different files may be open at once */
    lmp_arch arch;
    const lmp_model_source *src;
    void *src_data;           /* the format's own state */
    const float *tok_emb;     /* [vocab, dim] f32 */
    const float *pos_emb;     /* [seq_len, dim] f32: GPT2's positions, OPT's from its offset row on */
    const float *embed_norm_w, *embed_norm_b; /* [dim] the embeddings' LayerNorm (Bloom), else NULL */
    const float *final_norm_w, *final_norm_b;  /* [dim]; b NULL for RMSNorm */
    const float *lm_head;     /* [vocab, dim] f32; == tok_emb when tied */
    const float *lm_head_b;   /* [vocab] the head's bias (Phi-2, GPT-J), else NULL */
    lmp_block *blocks;        /* f32 views, NULL until lmp_model_blocks() */
    int blocks_owned;         /* blocks were converted (free them) rather than mapped */
    void *owned[8];           /* f32 buffers the loader converted (freed with the model) */
    int n_owned;
    /* model/rotate.h's state when the model was rotated (its source then wraps the file's);
     * NULL otherwise */
    void *rotation;
};

/* Opens a model: a llama2.c .bin, a .gguf, a .safetensors file or a Hugging Face folder
 * (config.json + *.safetensors); the format is recognised from the contents. */
int lmp_model_load(const char *path, lmp_model **out);
void lmp_model_free(lmp_model *m);

/* f32 views of every block (see above); NULL on failure (lmp_last_error says why). */
lmp_block *lmp_model_blocks(lmp_model *m);
/* Frees the f32 blocks lmp_model_blocks converted (views into a mapping stay); the next
 * lmp_model_blocks converts them again. */
void lmp_model_blocks_release(lmp_model *m);
/* An owned f32 copy of block b: a variant's working weights.  A block holding a NaN or an
 * infinity is refused, naming the tensor (as the tensors outside the blocks are at load). */
int lmp_model_block_copy(const lmp_model *m, int64_t b, lmp_block *out);
/* Whether any weight or bias of b (linears and norms) is NaN or infinite: the first one's
 * tensor name ("<linear>.weight") into name[size], its element and value. */
int lmp_block_find_nonfinite(const lmp_block *b, char *name, size_t size, int64_t *at, float *value);

/* Storage bits per weight of linear l of block b in the model's file: every byte of the tensors
 * the weight is rebuilt from (codes, scales, zero-points, group indices; a GGUF type's blocks,
 * an F16 tensor's 16 bits) * 8 over out * in.  The f32 views say 32 whatever the file holds
 * (they are what compression starts from); this says what an external variant really stores. */
double lmp_model_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l);
/* "<prefix> T1/T2 mix" (or "<prefix> T1" for one type) into buf[n] (prefix may be buf): the k
 * storage types names[] of the block linears, the one holding most parameters first.  For
 * format loaders. */
void lmp_model_format_types(char *buf, size_t n, const char *prefix, int k, const char *const *names,
                            const int64_t *params);

/* Index in lmp_block.norms of the norm of kind k (LMP_NORM_*), -1 when the architecture has none. */
int lmp_norm_index(const lmp_arch *a, int k);

/* The widest activation inside a block: max(dim, hidden, n_heads * head_dim). */
int64_t lmp_arch_mid_width(const lmp_arch *a);

/* Parameters of the linears inside the blocks (what compression acts on). */
int64_t lmp_model_block_linear_params(const lmp_model *m);

/* Fills the names, roles, shapes and norm->linear map of block `index` for the family; weights
 * stay NULL.  For format loaders. */
int lmp_block_init(lmp_block *b, int index, const lmp_arch *a);
/* Rows of w[rows, cols] (rows = heads * hd) from transformers' rotate-half RoPE order to the
 * adjacent pairs the forward turns, per head, over the first n_rot dims: new row 2i = old row i,
 * new row 2i+1 = old row i + n_rot/2 (what llama.cpp's converter does for "llama").  q and k get
 * the same permutation, so every attention score is unchanged.  cols = 1 for a bias or a q/k norm. */
int lmp_rope_permute_rows(float *w, int64_t rows, int64_t cols, int64_t hd, int64_t n_rot);
/* The inverse, one row at a time, for the exporters: the internal (adjacent-pair) row that row r
 * of a rotate-half file (Hugging Face, llama.cpp's NEOX architectures) is.  Within each head of
 * hd rows, row i < n_rot/2 is row 2i, row n_rot/2 + i is row 2i + 1, rows from n_rot on stay. */
int64_t lmp_rope_halves_row(int64_t r, int64_t hd, int64_t n_rot);
/* Where linear l lies when the file fuses q, k, v into one [q + 2 kv, dim] weight (fused_qkv) or
 * gate, up into one [2 hidden, dim] (fused_gate_up): rows [*r0, *r0 + l->out) of *rows.  Returns
 * LMP_FUSED_QKV or LMP_FUSED_GATE_UP for such a part, else LMP_FUSED_NONE (*r0 0, *rows l->out). */
enum { LMP_FUSED_NONE, LMP_FUSED_QKV, LMP_FUSED_GATE_UP };
int lmp_fused_rows(const lmp_arch *a, const lmp_linear *l, int fused_qkv, int fused_gate_up, int64_t *r0,
                   int64_t *rows);
/* Index of the linear with this role in the block that is no expert's (attention, a dense MLP,
 * the router), -1 if the block has none. */
int lmp_block_find(const lmp_block *b, lmp_role role);
/* Index of the gate, up or down linear of routed expert e (kind LMP_EXPERT_ROUTED) or of the
 * shared expert (LMP_EXPERT_SHARED, e ignored), -1 if the block has none. */
int lmp_block_find_expert(const lmp_block *b, lmp_role role, lmp_expert_kind kind, int e);
/* The linears of blocks[0..n) together (blocks of one model may differ: dense first layers, then
 * experts), and where the g-th of them in model order lies: block *b, linear *i (0, or -1 when
 * g is out of range). */
int64_t lmp_blocks_linear_count(const lmp_block *blocks, int64_t n);
int lmp_blocks_linear_at(const lmp_block *blocks, int64_t n, int64_t g, int64_t *b, int *i);
/* An owned copy of a norm's fed[n] (NULL when n is 0, or out of memory). */
int *lmp_fed_dup(const int *fed, int n);
/* Deep copy of a block into owned memory. */
int lmp_block_clone(const lmp_block *src, lmp_block *dst);
/* An owned copy of the grid of a [out, in] weight (plugin.h's lmp_wgrid; NULL when out of
 * memory), and its release.  A block frees its linears' grids. */
lmp_wgrid *lmp_wgrid_new(const lmp_wspec *spec, int64_t out, int64_t in, const float *scales, const float *zeros,
                         const int32_t *g_idx);
void lmp_wgrid_free(lmp_wgrid *g);
/* Frees a block made by lmp_block_clone / a block_copy (tables and weights). */
void lmp_block_free(lmp_block *b);
/* Frees only the tables of a block made by lmp_block_init whose weights are borrowed. */
void lmp_block_free_tables(lmp_block *b);
/* Registers an f32 buffer the model owns; returns it (NULL stays NULL). */
float *lmp_model_own(lmp_model *m, float *buf);
/* A LayerNorm without parameters (OLMo) as the parameters it stands for: *w = 1 and *b = 0 over
 * dim, both freed again when one allocation fails. */
int lmp_norm_identity(int64_t dim, float **w, float **b);

/* Format loaders (model_*.c), called by lmp_model_load on a file it recognised. */
int lmp_model_open_llama2c(lmp_model *m, int fd, size_t size);
int lmp_model_open_gguf(lmp_model *m);
int lmp_model_open_hf(lmp_model *m);
/* Whether m was opened from a Hugging Face folder or .safetensors file (its tokenizer.json). */
int lmp_model_is_hf(const lmp_model *m);

#endif
