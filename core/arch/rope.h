/* rope.h — how a model's RoPE turns q and k: the per-pair frequency table every RoPE scaling
 * reduces to, read from a Hugging Face config.json (transformers 4's rope_theta + rope_scaling,
 * transformers 5's rope_parameters) or from GGUF metadata (rope.freq_base, rope.scaling.*,
 * rope_freqs.weight).
 *
 * Every scaling transformers implements is one table inv_freq[n_rot/2] and one factor on cos and
 * sin (modeling_rope_utils.py):
 *   default   inv_freq[i] = theta^(-2i/n_rot)
 *   linear    default / factor
 *   llama3    default, long wavelengths / factor, a smooth ramp between (Llama 3.1-3.3)
 *   yarn      a ramp between default and default / factor; mscale 0.1 ln(factor) + 1 (Qwen2.5)
 *   longrope  default / short_factor[i] up to original_max_position_embeddings positions,
 *             default / long_factor[i] for a longer window; mscale sqrt(1 + ln(s)/ln(original))
 *             (Phi-3)
 *   dynamic   default up to max_position_embeddings (it changes only past it): capped likewise
 * Any other type, or a key of the scaling this reader does not know, is refused by name: a
 * number that is silently wrong is worse than none. */
#ifndef LMP_CORE_ARCH_ROPE_H
#define LMP_CORE_ARCH_ROPE_H

#include <stdint.h>

#define LMP_ROPE_MAX_PAIRS 256

typedef struct lmp_rope {
    char type[16];        /* "default", "linear", "llama3", "yarn", "longrope", "dynamic" */
    float theta;          /* the base */
    int64_t n_rot;        /* dims turned in each head (even, <= head_dim): partial rotary below it */
    float mscale;         /* cos and sin are multiplied by it (1 but for yarn and longrope) */
    /* Whether this is the classic rotation, theta^(-2i/head_dim) over the whole head and no
     * factor: then the forward runs the `rope` op, bit for bit what lmpress always computed;
     * otherwise the `rope_table` op with inv_freq. */
    int plain;
    /* What the table was made from, for the exporters to write it back: linear's and YaRN's
     * factor (the one applied), YaRN's original context (0 when not recorded). */
    double factor, orig_ctx;
    float inv_freq[LMP_ROPE_MAX_PAIRS];
    /* LongRoPE: a window of more than long_after positions turns with inv_freq_long instead (as
     * transformers picks the long factors for a sequence past original_max_position_embeddings,
     * and llama.cpp for a context past it); 0: one table. */
    int64_t long_after;
    float inv_freq_long[LMP_ROPE_MAX_PAIRS];
} lmp_rope;

/* The table a window of T positions turns with. */
static inline const float *lmp_rope_table_for(const lmp_rope *r, int64_t T)
{
    return r->long_after && T > r->long_after ? r->inv_freq_long : r->inv_freq;
}

struct lmp_json;

/* The classic rotation over n_rot dims of each head (plain when n_rot == head_dim). */
void lmp_rope_default(lmp_rope *r, float theta, int64_t n_rot, int64_t head_dim);

/* From config.json `cfg` (named `what` in messages): rope_parameters (transformers 5), else
 * rope_theta and rope_scaling (transformers 4), and partial_rotary_factor.  max_pos is
 * max_position_embeddings; *ctx is lowered to where the table stops being exact (dynamic).  *local gets the sliding-window layers' own rotation where the config has one
 * (Gemma 3: rope_parameters per layer type, or transformers 4's rope_local_base_freq), else
 * n_rot 0.  Refuses unknown types and keys. */
typedef struct lmp_rope_hf_names {
    const char *theta;      /* the base's top-level key: "rope_theta" (GPT-NeoX: "rotary_emb_base") */
    const char *partial;    /* partial_rotary_factor's (GPT-NeoX: "rotary_pct") */
    double partial_default; /* the class's default factor when no key gives one (0: 1) */
    const char *rotary_dim; /* a key giving the rotated dims instead (GPT-J's "rotary_dim"), or NULL */
} lmp_rope_hf_names;
/* family: how the family's config.json spells the top-level keys (NULL: Llama's). */
int lmp_rope_from_hf(const struct lmp_json *cfg, const char *what, int64_t head_dim, int64_t max_pos,
                     const lmp_rope_hf_names *family, lmp_rope *r, lmp_rope *local, int64_t *ctx);

/* Llama 3's table as llama.cpp's converter stores it: GGUF rope_freqs.weight, one divisor per
 * pair (inv_freq[i] = theta^(-2i/n_rot) / factors[i]). */
int lmp_rope_with_factors(lmp_rope *r, const char *what, const float *factors, int64_t n);

/* YaRN's table (transformers' and llama.cpp's alike): a ramp between the plain frequencies and
 * those divided by factor over the pairs whose wavelength lies between beta_fast and beta_slow
 * turns within `orig` positions; mscale is the caller's.  lmp_rope_yarn_mscale is the default
 * attention factor 0.1 ln(factor) + 1. */
void lmp_rope_yarn(lmp_rope *r, double factor, double orig, double beta_fast, double beta_slow, int truncate);
double lmp_rope_yarn_mscale(double factor);

/* Linear scaling (GGUF rope.scaling.type "linear"): inv_freq /= factor. */
void lmp_rope_linear(lmp_rope *r, double factor);

#endif
