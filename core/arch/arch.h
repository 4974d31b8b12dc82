/* arch.h — the architecture table: one descriptor per model family, one small file each
 * (core/arch/<family>.c), as llama.cpp keeps one row and one file per architecture.
 *
 * A descriptor says what the loaders and the forward need to know about a family that the
 * file's hyper-parameters do not: which Hugging Face classes and which GGUF architecture it is,
 * which block topology it has (lmp_family: Llama-style RMSNorm + RoPE + SwiGLU, or GPT-2-style
 * LayerNorm + learned positions + GELU), its biases, its per-head q/k norms, how its config.json
 * says "sliding window", and how llama.cpp stores its q/k rows.  The loaders read everything
 * else (sizes, RoPE, epsilon) from the file, and refuse what they do not read.
 *
 * Adding a family that fits an existing topology is a new file here plus fixtures
 * (docs/architectures.md).  The RoPE block's options (LMP_ARCH_*) cover LayerNorms, a parallel
 * residual, a gate-less MLP and a head bias too (issue 40: GPT-NeoX, Phi-2, GPT-J, StableLM, OLMo,
 * StarCoder2 are one file each), and ALiBi, an embedding norm and learned positions in place of
 * RoPE (Bloom, OPT; Falcon needs only its file and its config's rules). */
#ifndef LMP_CORE_ARCH_ARCH_H
#define LMP_CORE_ARCH_ARCH_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LMP_FAMILY_LLAMA = 0, LMP_FAMILY_GPT2 = 1 } lmp_family;

/* Which linears carry a bias in a Hugging Face checkpoint. */
typedef enum {
    LMP_BIAS_CONFIG,      /* Llama: q,k,v,o when attention_bias, gate,up,down when mlp_bias */
    LMP_BIAS_QKV,         /* Qwen2: always q, k and v */
    LMP_BIAS_ATTN_CONFIG, /* Qwen3: q,k,v,o when attention_bias */
    LMP_BIAS_QKV_CONFIG,  /* GLM: q,k,v when attention_bias (o never) */
    LMP_BIAS_ALL,         /* GPT-2, Phi-2: every linear */
    LMP_BIAS_NEOX,        /* GPT-NeoX: q,k,v,o when attention_bias (default true); up, down always */
    LMP_BIAS_MLP,         /* GPT-J: up and down (fc_in, fc_out) only */
    LMP_BIAS_ALL_CONFIG,  /* StarCoder2: every linear when attention_bias (its use_bias; default true) */
    LMP_BIAS_ALL_FLAG,    /* Falcon: every linear when attention_bias (its bias; default false) */
} lmp_bias_rule;

/* How config.json turns sliding-window attention on (the sliding layers then attend within the
 * window: attention_window; transformers 5's layer_types overrides). */
typedef enum {
    LMP_SLIDING_NONE,     /* the family has none */
    LMP_SLIDING_ALWAYS,   /* Mistral: whenever sliding_window is set */
    LMP_SLIDING_FLAG,     /* Qwen2/3: when use_sliding_window is true */
} lmp_sliding_rule;

enum {
    LMP_ARCH_QK_NORM = 1u << 0,     /* RMSNorm over each head of q and k before RoPE (Qwen3) */
    LMP_ARCH_GEGLU = 1u << 1,       /* the MLP is gelu_tanh(gate) * up, not silu(gate) * up (Gemma) */
    LMP_ARCH_EMBED_SCALE = 1u << 2, /* the embeddings are multiplied by sqrt(hidden) (Gemma; the tied
                                     * head reads them unscaled) */
    LMP_ARCH_NORM_PLUS_ONE = 1u << 3, /* a Hugging Face RMSNorm multiplies by 1 + w (Gemma): the
                                       * loader adds 1; llama.cpp's converter already did */
    LMP_ARCH_HEAD_DIM = 1u << 4,    /* head_dim may differ from hidden / heads (Qwen3, Gemma 7B) */
    LMP_ARCH_POST_NORMS = 1u << 5,  /* RMSNorms on the attention's and the MLP's outputs before each
                                     * residual add ("sandwich": GLM-4, Gemma 2/3) */
    /* The long tail of dense families (issue 40) in a RoPE block (family LLAMA): */
    LMP_ARCH_LAYER_NORM = 1u << 6,  /* the block's and the final norms are LayerNorms with a bias
                                     * (GPT-NeoX, Phi-2, GPT-J, StableLM) rather than RMSNorms */
    LMP_ARCH_NORM_NO_PARAMS = 1u << 7, /* those LayerNorms have no weight and no bias (OLMo): the
                                        * loader makes them 1 and 0 */
    LMP_ARCH_PARALLEL = 1u << 8,    /* parallel residual: y = x + attn(norm_attn(x)) + mlp(norm_mlp(x))
                                     * (GPT-NeoX: config.json's use_parallel_residual may turn it off) */
    LMP_ARCH_SHARED_NORM = 1u << 9, /* with PARALLEL: one norm feeds attention and the MLP (Phi-2, GPT-J):
                                     * the block has no norm_mlp of its own */
    LMP_ARCH_PLAIN_MLP = 1u << 10,  /* the MLP is down(act(up(x))), no gate; act from config.json (GELU) */
    LMP_ARCH_HEAD_BIAS = 1u << 11,  /* lm_head has a bias (Phi-2, GPT-J) */
    LMP_ARCH_MLA = 1u << 12,        /* multi-head latent attention (DeepSeek-V2/V3): q through an
                                     * optional low-rank q_a/q_b, k and v from one latent (kv_a,
                                     * kv_b) and a rotary key shared by the heads */
    LMP_ARCH_SINKS = 1u << 13,      /* a learned logit per head in each softmax's denominator
                                     * (gpt-oss's attention sinks: self_attn.sinks [heads]) */
    /* issue 40's position encodings and embeddings (Bloom, OPT): */
    LMP_ARCH_ALIBI = 1u << 14,      /* no RoPE: each head's scores get slope_h * (j - t) added (ALiBi,
                                     * Bloom; the slopes from the head count: lmp_alibi_slopes) */
    LMP_ARCH_EMBED_NORM = 1u << 15, /* a LayerNorm (weight, bias) on the token embeddings before the
                                     * first block (Bloom's word_embeddings_layernorm) */
    LMP_ARCH_LEARNED_POS = 1u << 16, /* no RoPE: learned positions added to the embeddings, row
                                      * t + hf_pos_offset for position t (OPT: offset 2) */
    /* issue 40's post-norm-only and bias-free LayerNorm blocks (OLMo 2, Cohere): */
    LMP_ARCH_NO_PRE_NORMS = 1u << 17, /* no norm before attention or the MLP: q, k, v read the stream
                                       * x, the MLP's input linears x1 (OLMo 2, with POST_NORMS: norms
                                       * on the branches' outputs only) */
    LMP_ARCH_QK_NORM_ALL = 1u << 18, /* with QK_NORM: the q and k norms are RMSNorms over all of q's
                                      * (k's) heads together, [heads x head_dim] weights (OLMo 2),
                                      * not over each head */
    LMP_ARCH_NORM_NO_BIAS = 1u << 19, /* with LAYER_NORM: the LayerNorms have a weight and no bias
                                       * (Cohere): the loaders make the bias 0, the writers write none */
};

/* The block's norms in lmp_block's order: before attention, before the MLP, then q and k (with
 * LMP_ARCH_QK_NORM), then after attention and after the MLP (with LMP_ARCH_POST_NORMS). */
enum {
    LMP_NORM_ATTN, LMP_NORM_MLP, LMP_NORM_Q, LMP_NORM_K, LMP_NORM_POST_ATTN, LMP_NORM_POST_MLP,
    LMP_NORM_Q_A, LMP_NORM_KV_A, /* MLA: q_a_layernorm [q_lora_rank] (when q is low-rank) and
                                  * kv_a_layernorm [kv_lora_rank], after the norms above */
    LMP_NORM_SINKS,              /* LMP_ARCH_SINKS: not a norm but the attention sinks [heads],
                                  * kept in the block's norm table (its w) so that they travel
                                  * with the block; they feed no linear */
    LMP_NORM_KINDS
};

/* How a mixture of experts turns the router's logits into k experts and their weights. */
typedef enum {
    LMP_ROUTE_SOFTMAX,     /* softmax, the k largest (renormalized with norm_topk): Mixtral, Qwen */
    LMP_ROUTE_SOFTMAX_GROUPS, /* DeepSeek-V2: softmax; with n_group, only the topk_group groups of the
                            * largest maximum compete (group_limited_greedy); times routed_scale */
    LMP_ROUTE_SIGMOID_BIAS, /* DeepSeek-V3 (noaux_tc): sigmoid scores; the choice (groups by the sum
                            * of their two best, then the k best) on score + the selection bias
                            * (the router linear's b), the weights the scores without it,
                            * renormalized with norm_topk, times routed_scale */
    LMP_ROUTE_TOPK_SOFTMAX, /* gpt-oss: the k largest logits (the router linear has a bias), then
                            * a softmax over those k */
} lmp_route_kind;

/* A mixture-of-experts family (issue 37): where its Hugging Face checkpoint keeps the router,
 * the routed experts and the shared expert of a sparse layer, and how the router's top-k
 * probabilities are weighted.  The GGUF names are llama.cpp's for every family:
 * ffn_gate_inp (router), ffn_{gate,up,down}_exps (3-D: [E, out, in]), ffn_{gate,up,down}_shexp and
 * ffn_gate_inp_shexp. */
typedef struct lmp_moe_desc {
    const char *hf_router;          /* "block_sparse_moe.gate" (Mixtral), "mlp.gate" (Qwen) */
    const char *hf_experts;         /* the experts' module: expert e's linears are <it>.<e>.<leaf> */
    const char *hf_expert_leaf[3];  /* gate, up, down: "w1", "w3", "w2" (Mixtral), "*_proj" (Qwen) */
    const char *hf_shared;          /* the shared expert's module (its gate_proj, up_proj, down_proj),
                                     * NULL when the family has none */
    const char *hf_shared_gate;     /* its [1, dim] sigmoid gate, NULL when none */
    /* The top-k probabilities renormalized to sum to 1: 1 always (Mixtral), or config.json's
     * norm_topk_prob (norm_topk -1; its default hf_norm_topk_default). */
    int norm_topk, hf_norm_topk_default;
    /* What llama.cpp assumes for the family's GGUF (it has no key): qwen2moe no, qwen3moe yes. */
    int gguf_norm_topk;
    /* Sparse layers chosen by mlp_only_layers and decoder_sparse_step (Qwen), else all. */
    int hf_sparse_step;
    /* DeepSeek: its config.json says the routing (lmp_route_kind), the shared experts' count
     * (n_shared_experts x moe_intermediate_size, no gate) and the dense first layers
     * (first_k_dense_replace). */
    int hf_deepseek;
    lmp_route_kind route;
    /* gpt-oss: the experts are stored fused and transposed, <experts>.gate_up_proj [E, d, 2 f]
     * (gate and up interleaved by column: gate = [..., ::2], up = [..., 1::2]) and
     * <experts>.down_proj [E, f, d], each with a <name>_bias [E, out]; the activation is the
     * clamped SwiGLU (up + 1) * g * sigmoid(alpha g), g = min(gate, limit), up within +-limit
     * (config.json's swiglu_alpha, swiglu_limit). */
    int hf_gpt_oss;
} lmp_moe_desc;

typedef struct lmp_arch_desc {
    const char *name;                /* "llama", "mistral", "qwen2", "qwen3", "gpt2" */
    lmp_family family;               /* the block's topology */
    const char *hf_class;            /* config.json "architectures"[0] */
    const char *hf_model_type;       /* config.json "model_type" (what an exporter writes) */
    int64_t hf_default_ctx;          /* transformers' default max_position_embeddings */
    int hf_tied_default;             /* transformers' default tie_word_embeddings (a tied class
                                      * ignores a stored lm_head.weight) */
    lmp_bias_rule bias;
    lmp_sliding_rule sliding;
    unsigned flags;                  /* LMP_ARCH_* */
    const char *gguf_arch;           /* general.architecture, the prefix of the hyper-parameters;
                                      * NULL when lmpress reads no GGUF of the family */
    /* llama.cpp's converter permutes q/k rows to adjacent RoPE pairs for "llama" only; its other
     * architectures keep transformers' rotate-half order (llama.cpp's NEOX rope), which the
     * loader then permutes as it does for Hugging Face files. */
    int gguf_rope_halves;
    /* Hugging Face files that fuse linears: q,k,v in one [q + 2 kv, hidden] weight, gate and up
     * in one [2 hidden_ffn, hidden] weight (Phi-3); NULL when separate.  Split at load. */
    const char *hf_fused_qkv, *hf_fused_gate_up;
    /* llama.cpp fuses gate and up into ffn_up [2 hidden_ffn, hidden] for this arch (GLM, Phi-3),
     * and q, k, v into attn_qkv [q + 2 kv, hidden] (Phi-3, GPT-2). */
    int gguf_fused_gate_up, gguf_fused_qkv;
    /* The Hugging Face checkpoint already turns adjacent pairs (GLM's interleaved rotary): its q/k
     * rows are used as stored. */
    int hf_rope_adjacent;
    /* The norms' names after "model.layers.N." by LMP_NORM_*; NULL: Llama's (input_layernorm,
     * post_attention_layernorm, self_attn.q_norm, self_attn.k_norm). */
    const char *const *hf_norms;
    /* config.json keys this family reads beyond the Llama block's (NULL-terminated; NULL: none):
     * the same key in another family's config is refused, since its class would ignore it. */
    const char *const *hf_extra_keys;
    /* What llama.cpp assumes of this arch's GGUF where the file says nothing (Gemma 2, 3): every
     * layer but each gguf_swa_pattern-th slides (0: all slide when the file has a window), and
     * turns with base gguf_swa_base (0: the global base; the file's rope.freq_base_swa wins);
     * the attention is scaled by 1/sqrt(hidden/heads) rather than 1/sqrt(head_dim) for a model
     * of gguf_scale_by_width_layers layers (the 27B ones: llama.cpp has no key for Gemma's
     * query_pre_attn_scalar). */
    int gguf_swa_pattern;
    double gguf_swa_base;
    int64_t gguf_scale_by_width_layers;
    /* llama.cpp's name of the norm before the MLP when not ffn_norm (gpt-oss: post_attention_norm;
     * Falcon-40B: attn_norm), and of the norm before attention when not attn_norm (Falcon-40B:
     * attn_norm_2, its ln_attn) */
    const char *gguf_mlp_norm, *gguf_attn_norm;
    /* A mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE); NULL: a dense family. */
    const lmp_moe_desc *moe;
    /* Hugging Face names of a family whose checkpoint is not laid out as Llama's (NULL: Llama's):
     * the blocks' prefix ("gpt_neox.layers"), the linears' leaves by lmp_role, the embeddings, the
     * final norm and the head (without ".weight"). */
    const char *hf_block_prefix;
    const char *const *hf_linears;
    const char *hf_embed, *hf_final_norm, *hf_head;
    /* GPT-NeoX's fused query_key_value is laid out per head: [heads][q, k, v][head_dim] rows. */
    int hf_fused_qkv_per_head;
    /* config.json keys this family spells otherwise: pairs {Llama's name, the family's}, ended by
     * {NULL, NULL} (GPT-NeoX: {"rms_norm_eps", "layer_norm_eps"}).  The reader then reads the
     * family's name where it reads Llama's. */
    const char *const (*hf_key_names)[2];
    /* transformers' default partial_rotary_factor for the class when config.json has none (0: 1);
     * GPT-J's rotary_dim instead (hf_rotary_dim: config.json gives the rotated dims). */
    double hf_partial_rotary_default;
    int hf_rotary_dim;
    /* transformers' default hidden_act for the class when config.json has none (NULL: the block's
     * own: SiLU, or Gemma's tanh GELU; "gelu" for GPT-NeoX, "gelu_new" for Phi-2 and GPT-J). */
    const char *hf_act_default;
    /* llama.cpp computes this family's GELU with the erf (GPT-NeoX: transformers' "gelu"); the
     * GGUF has no key for it. */
    int gguf_gelu_erf;
    /* Bloom: the embeddings' LayerNorm (LMP_ARCH_EMBED_NORM); OPT: the learned positions' table
     * (LMP_ARCH_LEARNED_POS) and the rows it has before position 0 (without ".weight"). */
    const char *hf_embed_norm, *hf_pos_embed;
    int hf_pos_offset;
    /* The class's base-model prefix ("transformer."), which a checkpoint saved from the base model
     * lacks (bigscience's Bloom files: "h.0...", "word_embeddings..."): the loader adds it when
     * hf_embed is found only without it.  NULL: names as given. */
    const char *hf_base_prefix;
    /* Falcon: config.json's multi_query, new_decoder_architecture (then lmp_arch_falcon_nda's block),
     * parallel_attn, num_kv_heads and alibi say the block (model_hf.c). */
    int hf_falcon;
    /* llama.cpp's architecture has no grouped-query attention and its converter writes no
     * attention.head_count_kv (gptneox): the GGUF writer leaves the key out */
    int gguf_no_kv_heads;
    /* The logits are multiplied by config.json's logit_scale (GGUF: <arch>.logit_scale), of this
     * default when it has none (Cohere: 0.0625); 0: the family has no such scale. */
    double hf_logit_scale_default;
    /* ChatGLM2/3 (THUDM's ChatGLMModel): config.json's multi_query_attention, rmsnorm, rope_ratio
     * and the switches of its remote code say the block (model_hf.c's parse_chatglm). */
    int hf_chatglm;
    /* A top-level buffer the checkpoint carries that the config derives (ChatGLM's
     * transformer.rotary_pos_emb.inv_freq): read by no one, and not refused as unknown. */
    const char *hf_derived_buffer;
    /* Why lmpress's exporters refuse the family (NULL: they write it). */
    const char *export_refused;
} lmp_arch_desc;

/* Falcon-40B's layout (new_decoder_architecture: ln_attn and ln_mlp), which the loaders switch to
 * from lmp_arch_falcon (core/arch/falcon.c) when the file says so. */
extern const lmp_arch_desc lmp_arch_falcon_nda;
/* ChatGLM2/3 (core/arch/chatglm.c), which the GGUF loader switches to from lmp_arch_glm (both are
 * llama.cpp's "chatglm") when q, k and v are fused in attn_qkv. */
extern const lmp_arch_desc lmp_arch_chatglm;

/* The descriptor of a Hugging Face class, a GGUF architecture (the first family that reads it),
 * or by name; NULL when lmpress has none. */
const lmp_arch_desc *lmp_arch_by_hf_class(const char *cls);
const lmp_arch_desc *lmp_arch_by_gguf(const char *arch, size_t len);
const lmp_arch_desc *lmp_arch_by_name(const char *name);
/* Why lmpress refuses a Hugging Face class or GGUF architecture it knows of but does not run
 * (Cohere2), NULL for any other name. */
const char *lmp_arch_refused_hf(const char *cls);
const char *lmp_arch_refused_gguf(const char *arch, size_t len);
/* "A, B, C": the Hugging Face classes (gguf = 0) or GGUF architectures (1) lmpress reads, for
 * messages. */
const char *lmp_arch_list(char *buf, size_t n, int gguf);

#endif
