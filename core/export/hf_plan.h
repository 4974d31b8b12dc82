/* hf_plan.h — what a Hugging Face export writes, decided before anything is written (hf_write.c
 * builds it and refuses what the format cannot hold); hf_config.c writes config.json from it and
 * hf_tensors.c the safetensors shards.  Internal to core/export.
 *
 * compressed-tensors' layout, as compressed-tensors 0.20.0 reads and writes it (and 0.17.1, which
 * this writer's test also reads every export with):
 *   config groups   one per distinct scheme (weights: num_bits, symmetric, strategy tensor |
 *                   channel | group, group_size; input activations), "targets" the exact module
 *                   names (compressed-tensors matches a target by equality, or by re.match for
 *                   "re:"); "ignore" the linears no stage quantized and lm_head.
 *   format          pack-quantized for a weight-only scheme, int-quantized when the scheme also
 *                   quantizes the input: what compressed-tensors infers for the scheme itself
 *                   (infer_module_format), so its own dequantizer picks the same compressor.  A
 *                   model with both says "mixed-precision" and each group names its own format.
 *   codes           compressed-tensors numbers codes as signed ints: symmetric q in
 *                   -2^(b-1)..2^(b-1)-1 as lmpress does; asymmetric q - 2^(b-1) with the zero
 *                   point z - 2^(b-1), so (q - z) * scale is lmpress's value.
 *     pack-quantized  weight_packed int32 [out, ceil(in*b/32)]: code + 2^(b-1) (so lmpress's
 *                   asymmetric code itself) in b bits, element i of a row at bit (i*b) % 32 of
 *                   word (i*b) / 32, low bits first; weight_shape int64 [2] = [out, in].  Only
 *                   b = 2, 4, 8: there the 32/b values per word of 0.17 and before and the
 *                   dense packing of 0.19 on are the same bits; for 3, 5, 6, 7 they differ, so
 *                   such grids are refused.
 *     int-quantized   weight int8 [out, in], the signed codes.
 *   weight_scale    [1] (tensor), [out, 1] (channel), [out, in/group] (group; in must be a
 *                   multiple of group: compressed-tensors refuses a ragged last group), in the
 *                   grid's scale_type (F32, F16, BF16).
 *   weight_zero_point  asymmetric only.  pack-quantized channel/group: the signed zero points,
 *                   offset by 2^(b-1) and packed like codes but down the columns of the
 *                   [out, groups] matrix: int32 [ceil(out*b/32), groups].  Otherwise int8 in the
 *                   scale's shape.
 *   weight_g_idx    int32 [in], the group of each input column, with "actorder": "group"
 *                   (GPTQ's act-order with dynamic groups).  compressed-tensors 0.19 removed
 *                   actorder "group" and no longer reads it; 0.17.1 does.  Written with a
 *                   warning.
 *   input_scale     f32 [1]: a static per-tensor int8 activation scale.
 * q_proj and k_proj rows (and their scales, zero points and biases), and Qwen3's q_norm / k_norm
 * weights, go back from lmpress's adjacent-pair RoPE order to Hugging Face's rotate-half order
 * over the n_rot rotated dims of each head: HF row h*hd + i is row h*hd + 2i, HF row
 * h*hd + n_rot/2 + i is row h*hd + 2i + 1 (lmp_rope_halves_row, the inverse of model_hf.c's load).
 * Gemma's RMSNorm weights are held as 1 + w and written as w.  Phi-3's fused qkv_proj and
 * gate_up_proj are the parts' rows one after the other (q, k, v; gate, up), each part's rows as
 * above, on one scheme (channel or group scales, which are per row).
 * GPT-NeoX's query_key_value is fused per head: HF row (h * 3 + k) * head_dim + i is part k's
 * (q, k, v) row h * head_dim + i (then q's and k's as above).  The long tail's names are their
 * descriptors' (arch.h: hf_block_prefix, hf_linears, hf_norms, hf_embed, hf_final_norm, hf_head);
 * their LayerNorms' biases are <norm>.bias, the head's bias <head>.bias; OLMo's norms without
 * parameters have no tensors (written only while a stage left them 1 and 0).
 * GPT-2 (GPT2LMHeadModel): transformer.wte, transformer.wpe, transformer.h.N.{ln_1, attn.c_attn
 * (q, k, v fused, with its bias), attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj} and transformer.ln_f,
 * LayerNorms with biases, the head tied.  Its linears are transformers' Conv1D, weight [in, out]:
 * written transposed and dense (the quantized weights' exact f32 values), since compressed-tensors
 * quantizes nn.Linear modules only; activation quantization is not carried (a warning says so). */
#ifndef LMP_CORE_HF_PLAN_H
#define LMP_CORE_HF_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "export/export.h"
#include "formats/json.h"
#include "formats/safetensors.h"

/* HF_FMT_FLOAT, NVFP4, MXFP4 (issue 38): the floating-point grids (plugin_fpquants.h), as
 * compressed-tensors 0.20 writes them:
 *   float-quantized       weight float8_e4m3fn [out, in] (the E4M3 codes), weight_scale [1] /
 *                         [out, 1] / [out, in/group] in the grid's scale_type; with FP8 input
 *                         activations (per token, dynamic; or per tensor, static: input_scale
 *                         f32 [1]).  Weight-only it is "naive-quantized", the same tensors:
 *                         compressed-tensors' float-quantized compressor claims only schemes with
 *                         input activations (infer_module_format);
 *   nvfp4-pack-quantized  weight_packed uint8 [out, in/2] (E2M1 nibbles: column 2k in the low
 *                         nibble, 2k+1 in the high one; sign bit 3), weight_scale float8_e4m3fn
 *                         [out, in/16], weight_global_scale f32 [1];
 *   mxfp4-pack-quantized  weight_packed as NVFP4's, weight_scale uint8 [out, in/32] (the E8M0
 *                         exponents).
 * NVFP4 weights may have NVFP4 inputs (W4A4: dynamic local groups of 16, input_global_scale f32
 * [1]), MXFP4 weights MXFP4 inputs (dynamic groups of 32).  int weights with FP8 inputs per token
 * are the W4AFP8 scheme: int-quantized (int8 codes), as compressed-tensors infers it. */
typedef enum {
    HF_FMT_PACK = 0, HF_FMT_INT = 1, HF_FMT_FLOAT = 2, HF_FMT_NVFP4 = 3, HF_FMT_MXFP4 = 4, HF_FMT_NAIVE = 5,
    HF_FMT_MXFP8 = 6 /* mxfp8-quantized: weight float8_e4m3fn, uint8 E8M0 weight_scale per 32 (MXFP8A16) */
} hf_fmt;

/* One config group: a weight scheme and the linear's input scheme. */
typedef struct hf_scheme {
    int bits, sym;
    lmp_granularity gran;
    int64_t group;             /* GROUP only */
    int g_idx;                 /* act-order groups (weight_g_idx) */
    lmp_act_mode act;          /* NONE, DYN_TOKEN or STATIC_TENSOR (8 bits) */
    hf_fmt fmt;
    lmp_wformat wfmt;          /* INT, FP8_E4M3, NVFP4 or MXFP4 */
} hf_scheme;

/* A block's linear, as the plan needs it once its block has been read and freed; its weights
 * are read again (lmp_block_cursor) when its tensors are written. */
typedef struct hf_linear {
    char *name;                /* owned */
    lmp_role role;
    int64_t out, in;
    int64_t block;             /* the block's number, and the linear's index in it */
    int index;
    int has_b, masked;         /* the linear has a bias of its own, an N:M mask */
    lmp_scale_type scale_type; /* its grid's, when it has a scheme */
    int scheme;                /* index into hf_plan.schemes; -1: written dense */
    int64_t head_dim;          /* q, k: rows go back to rotate-half order in heads of head_dim; 0: as they are */
    int64_t n_rot;             /* ... over the first n_rot rows of each head */
    int bias;                  /* write a bias (l->b, or zeros where the architecture wants one) */
    int selection_bias;        /* DeepSeek-V3's router: its b is <router>.e_score_correction_bias,
                                * which only the choice of experts reads, not a Linear's bias */
    int conv1d;                /* GPT-2's Conv1D: the weight is written transposed, [in, out] */
    /* A fused module (Phi-3's qkv_proj, gate_up_proj): this entry is written under the fused name
     * with `out` the members' rows together, members[k] the block's linear index of each part in
     * order (q, k, v or gate, up); the parts' own entries are `merged` and write nothing. */
    int n_members, members[3];
    int merged;
    /* ... laid out per head (GPT-NeoX's query_key_value: [heads][q, k, v][per_head] rows) rather
     * than the parts one after another; 0: one after another */
    int64_t per_head;
    /* ... with this many q heads in each group before its k and v heads (Falcon's query_key_value:
     * [kv groups][q heads of the group, k, v][per_head]); 0: one (GPT-NeoX's, Bloom's) */
    int64_t q_per_group;
} hf_linear;

/* A block's norm (its weights read again when written). */
typedef struct hf_norm {
    char *name;                /* owned */
    int64_t dim, block;
    int index;
    int has_b;                 /* a LayerNorm's bias (GPT-2) */
} hf_norm;

typedef enum {
    HF_T_DENSE,                /* f32 values src[rows, cols] in the plan's dtype (embedding, norms, head) */
    HF_T_WEIGHT,               /* a dense linear's weight */
    HF_T_BIAS,
    HF_T_PACKED,               /* weight_packed */
    HF_T_QWEIGHT,              /* int-quantized weight */
    HF_T_SCALE,
    HF_T_ZERO,
    HF_T_SHAPE,
    HF_T_GIDX,
    HF_T_INPUT_SCALE,
    HF_T_FP8W,                 /* float-quantized weight: E4M3 bytes */
    HF_T_FP4PACK,              /* nvfp4 / mxfp4 weight_packed */
    HF_T_GLOBAL_SCALE,         /* nvfp4 weight_global_scale */
    HF_T_KV_SCALE,             /* the attention's k_scale (norm 0) or v_scale (norm 1) of block `block` */
} hf_tkind;

typedef struct hf_tensor {
    char name[200];
    hf_tkind kind;
    lmp_st_dtype dtype;
    int ndim;
    int64_t shape[3];          /* [ndim]; 3: a per-head KV scale [H, 1, 1] */
    uint64_t nbytes;
    const hf_linear *lin;      /* the linear's tensors */
    const float *src;          /* HF_T_DENSE: the model's own values (embedding, final norm, head) */
    int64_t block;             /* HF_T_DENSE of a block's norm: the block (else -1) and the norm */
    int norm;
    int norm_bias;             /* ... its bias rather than its weight (GPT-2's LayerNorms) */
    int minus_one;             /* HF_T_DENSE norm held as 1 + w (Gemma): written w */
    int64_t halves_hd, n_rot;  /* HF_T_DENSE q/k norm: values back to rotate-half order (0: as they are) */
    int shard;                 /* 0-based */
} hf_tensor;

typedef struct hf_plan {
    const lmp_model *m;
    const lmp_block_source *blocks;
    const lmp_export_opts *o;
    char *src_dir;             /* the folder of a Hugging Face source (config.json, tokenizer), else NULL */
    lmp_json *src_config;      /* its config.json, parsed; NULL for other sources */
    const char *arch;          /* architectures[0] written: the source's, or the family's class */
    const lmp_arch_desc *desc; /* the model's family (core/arch; Llama's for a hand-made arch) */
    lmp_st_dtype dtype;        /* of the unquantized tensors: F32, or the scales' BF16/F16 */
    int attn_bias, mlp_bias;   /* attention_bias, mlp_bias (the families that have the switch) */
    hf_scheme schemes[32];
    int n_schemes;
    hf_linear *lins;           /* every linear of every block, block order */
    int n_lins;
    hf_norm *norms;            /* every norm of every block, block order */
    int n_norms;
    hf_tensor *tensors;
    size_t n_tensors;
    int n_shards;
    uint64_t total_bytes;
    /* N:M sparsity (sparse linears keep their dense weights; config.json says so) */
    int n_sparse, sparse_n, sparse_m, sparse_mixed;
    int warned_gidx;           /* the act-order warning was given */
    int n_dense_quantized;     /* GPT-2: quantized linears written dense, and those with activation */
    int n_dense_act;           /* quantization (not carried) */
    double global_sparsity;
    /* The KV cache's quantization (every block's the same; type LMP_KV_NONE: none): config.json's
     * kv_cache_scheme and each attention module's k_scale / v_scale, F32 [1] per tensor or
     * [n_kv_heads, 1, 1] per head (strategy "attn_head"), as compressed-tensors'
     * initialize_attn_qparams shapes them. */
    lmp_kvspec kv;
} hf_plan;

/* The name of shard s (0-based) of n: model.safetensors, or model-00001-of-00003.safetensors. */
void hf_shard_name(int s, int n, char *buf, size_t size);

/* config.json (hf_config.c). */
int hf_write_config(const hf_plan *p, FILE *f);

/* The tensors of shard s, header and data (hf_tensors.c); polls the interrupt flag between
 * tensors.  Blocks are read through cur (p->blocks).  *done counts the tensors written
 * (progress), *rounded the values that changed when rounded to the plan's dtype. */
int hf_write_shard(lmp_ctx *ctx, const hf_plan *p, int s, FILE *f, lmp_block_cursor *cur, size_t *done,
                   int64_t *rounded);

#endif
