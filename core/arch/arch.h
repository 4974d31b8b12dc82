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
 * (docs/architectures.md). */
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
    LMP_BIAS_ALL,         /* GPT-2: every linear */
} lmp_bias_rule;

/* How config.json turns sliding-window attention on (lmpress caps the context at the window,
 * where sliding-window attention is causal attention; transformers 5's layer_types overrides). */
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
};

typedef struct lmp_arch_desc {
    const char *name;                /* "llama", "mistral", "qwen2", "qwen3", "gpt2" */
    lmp_family family;               /* the block's topology */
    const char *hf_class;            /* config.json "architectures"[0] */
    const char *hf_model_type;       /* config.json "model_type" (what an exporter writes) */
    int64_t hf_default_ctx;          /* transformers' default max_position_embeddings */
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
} lmp_arch_desc;

/* The descriptor of a Hugging Face class, a GGUF architecture (the first family that reads it),
 * or by name; NULL when lmpress has none. */
const lmp_arch_desc *lmp_arch_by_hf_class(const char *cls);
const lmp_arch_desc *lmp_arch_by_gguf(const char *arch, size_t len);
const lmp_arch_desc *lmp_arch_by_name(const char *name);
/* "A, B, C": the Hugging Face classes (gguf = 0) or GGUF architectures (1) lmpress reads, for
 * messages. */
const char *lmp_arch_list(char *buf, size_t n, int gguf);

#endif
