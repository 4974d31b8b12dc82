/* lmpress/plugin.h — the one header a plugin includes.
 *
 * A plugin is a shared object that exports one symbol, lmp_plugin_entry, returning a static,
 * code-free descriptor (lmp_plugin_desc).  Plugins link nothing from the core: everything they
 * need from the host comes through the lmp_host services table.
 *
 * ABI rules (checked by the loader, in this order, each with its own message):
 *   - the file opens (dlopen RTLD_NOW|RTLD_LOCAL) and exports lmp_plugin_entry;
 *   - desc->abi_major == LMP_ABI_MAJOR and desc->abi_minor <= LMP_ABI_MINOR;
 *   - desc->struct_size and the vtable's struct_size cover what the host calls;
 *   - desc->kind matches the slot the config uses it for; the name is unique;
 *   - desc->probe (if any) returns > 0 on this machine.
 * Appending fields to a struct the host hands over by pointer bumps LMP_ABI_MINOR; anything
 * else bumps LMP_ABI_MAJOR, including growing lmp_linear or lmp_norm, which the host hands over
 * as arrays (a plugin built for the old size would step through them with the wrong stride).
 * ABI 2.0 (lmp_linear grew a sparsity mask): plugins built for 1.x are refused.
 * ABI 3.0: quantize_weight split into choose_weight_grid + apply_weight_grid; lmp_wspec grew
 * clip and format (int, and GGUF's Q8_0 / Q4_0 / Q4_1 blocks); plugins built for 2.x are refused.
 * A format added later is a minor bump, and the host must then keep it from backends built
 * before it (they would answer LMP_EINVAL for it rather than LMP_EUNSUPPORTED).
 * ABI 4.0: lmp_wspec grew scale_type (scales rounded to f16 or bf16, as a compressed-tensors file
 * stores them); lmp_linear grew grid, the storage grid a stage recorded with the new
 * host->set_weight_grid, which is what an exported file holds.  Plugins built for 3.x are refused.
 * ABI 4.1: the formats GGUF Q5_0, Q5_1 and IQ4_NL, lmp_wgrid_fit_block_imp (a block's grid
 * chosen with an importance per input column, as llama-quantize does with an imatrix), and the
 * symmetric scales LMP_SYM_FULL and LMP_SYM_SIGNED (lmp_wspec.sym 2 and 3).
 * ABI 4.2: the k-quant formats GGUF Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (lmpress/plugin_kquants.h),
 * NF4 (LMP_WFORMAT_NF4), lmp_wformat_span, lmp_wformat_fallback, lmp_wformat_takes_clip.
 * ABI 4.2 also: LMP_STAT_IMATRIX and lmp_stats.imatrix, the importance per input column that
 * a llama.cpp importance-matrix file named in the config gives a linear (no calibration needed).
 * ABI 4.3: host->learn_block and LMP_NEED_CALIB_INPUTS, host->learn_model, LMP_NEED_WHOLE_MODEL and
 * lmp_strategy_i.finish (strategies that learn: lmp_learn_*), and
 * the backend operation attention_backward, appended to lmp_backend_i.  A backend built
 * for 4.2 (its vtable ends before it: LMP_BACKEND_I_MIN_SIZE) is still loaded, and the host runs
 * the CPU backend's version of the operations its vtable does not reach.
 *
 * ABI 4.4: the backend operations rope_table (RoPE from a per-pair frequency table, partial
 * rotary and an attention factor: the RoPE scalings of Llama 3, YaRN and LongRoPE) and
 * attention_window (sliding-window attention and Gemma 2's soft-capped scores), appended to
 * lmp_backend_i; a backend built before them runs the CPU backend's.
 *
 * ABI 4.5: a block on the device.  lmp_backend_i grew two optional entries after the operations:
 * block_run (a whole block's forward over a batch of windows, its weights uploaded once and the
 * calibration statistics accumulated where it runs: lmp_block_job) and bytes_moved (what the
 * backend copied between host and device).  A backend without them runs the block op by op, as
 * before (the core falls back where block_run is NULL or answers LMP_EUNSUPPORTED).
 * Also the backend operation hadamard (the fast Walsh-Hadamard transform: the online rotations
 * of core/model/rotate.h), appended to the operations; a backend built before it runs the CPU
 * backend's.
 * And the floating-point formats FP8 E4M3 and E5M2, NVFP4, MXFP4 and MXFP8, and ggml's
 * GGUF MXFP4, NVFP4, Q1_0 and Q2_0 (lmpress/plugin_fpquants.h; Q1_0's spec is 1 bit), and
 * lmp_wspec.global_scale (NVFP4's per-tensor scale), appended to lmp_wspec; a backend built
 * before them answers LMP_EINVAL for them, so the host keeps them on the CPU backend's grid
 * operations (devbe answers LMP_EUNSUPPORTED for every non-INT format).  The activation modes
 * LMP_ACT_FP8_STATIC_TENSOR, LMP_ACT_FP8_DYN_TOKEN, LMP_ACT_NVFP4 and LMP_ACT_MXFP4 likewise
 * run on the CPU backend's quantize_act.
 *
 * ABI 5.0 (after 4.5; mixtures of experts, docs/plugin-guide.md "Blocks with experts"): a block's linears
 * are counted tensor kinds rather than 7 fixed roles.  lmp_role grew LMP_ROLE_ROUTER (the
 * router's [n_experts, dim] logits, Hugging Face's mlp.gate) and LMP_ROLE_SHARED_GATE (the
 * shared expert's [1, dim] sigmoid gate); lmp_linear grew expert_kind and expert (a gate, up or
 * down linear of routed expert e, or of the shared expert); lmp_block grew n_experts and
 * n_experts_used; lmp_norm.fed became a pointer to n_fed indices (a norm feeds the router and
 * every expert); lmp_learn_problem.linears became a per-linear array instead of a 32-bit mask;
 * the core's 16-linear cap is gone.  A block may hold hundreds of linears, and blocks of one
 * model may differ (dense first layers).  A strategy that loops over blk->linears keeps working:
 * an expert's linear is an ordinary lmp_linear whose statistics come from the tokens routed to
 * it.  Plugins built for 4.x are refused (lmp_linear and lmp_norm changed size).
 * ABI 5.1: lmp_role grew LMP_ROLE_Q_A, LMP_ROLE_Q_B, LMP_ROLE_KV_A and LMP_ROLE_KV_B, the
 * low-rank projections of DeepSeek-V2/V3's multi-head latent attention (appended before
 * LMP_ROLE_COUNT; a 5.0 plugin never sees them unless it loops over blk->linears, where they are
 * ordinary linears).
 *
 * ABI 6.0 (issue 38): lmp_block grew kv, the KV-cache quantization the host simulates inside
 * attention (lmp_kvspec: FP8 E4M3 or int8, per tensor or per KV head, static or dynamic scales),
 * set from a variant's kv_cache after its stages; strategies leave it alone.  lmp_block is handed
 * over as an array (learn_model, finish), so plugins built for 5.x are refused.
 * ABI 6.1 (issue 40): the backend operation attention_alibi (Bloom's ALiBi: each head's scores
 * biased by slope * (j - t)), in LMP_BACKEND_OPS_6_1, whose entries come after block_run and
 * bytes_moved in lmp_backend_i (so that a 6.0 backend's vtable, which ends before them, keeps its
 * layout); a backend built for 6.0 runs the CPU backend's.
 *
 * ABI 6.2 (issue 38): the granularity LMP_GRAN_BLOCK (FP8 weights in group x group tiles, 128 x 128
 * being what llm-compressor's FP8_BLOCK and DeepSeek-V3's checkpoints use), appended to
 * lmp_granularity; lmp_wspec_n_scales and lmp_wgrid_slice count its tiles.  Only the CPU
 * backend's grid operations take it: a device backend answers LMP_EUNSUPPORTED for every FP
 * format (devbe), so the host runs the CPU backend's.
 * ABI 6.3 (issue 39): the KV cache's LMP_KV_INT4 (appended to lmp_kv_type) and per_head's value
 * LMP_KV_PER_TOKEN_HEAD (dynamic scales per token and KV head), for W4A4KV4.  Strategies leave kv
 * alone, so a 6.2 plugin sees nothing new.
 *
 * Conventions: every matrix is f32, row-major, in host memory.  A linear's weight is
 * W[out, in] (PyTorch layout) and computes y = x W^T + b for activations x[T, in].
 * Functions return 0 (LMP_OK) or a negative LMP_E* status, with detail text set through
 * host->set_error.  Plugins never exit() or abort().
 */
#ifndef LMPRESS_PLUGIN_H
#define LMPRESS_PLUGIN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LMP_ABI_MAJOR 6
#define LMP_ABI_MINOR 3

#if defined(__GNUC__)
#define LMP_EXPORT __attribute__((visibility("default")))
#else
#define LMP_EXPORT
#endif

#define LMP_ENTRY_SYMBOL "lmp_plugin_entry"

/* ---- status codes ---------------------------------------------------------------------- */
enum {
    LMP_OK = 0,
    LMP_EINVAL = -1,       /* bad argument or shape */
    LMP_ENOMEM = -2,
    LMP_EUNSUPPORTED = -3, /* operation not offered: the host may fall back to the CPU backend */
    LMP_ENOTSPD = -4,      /* Cholesky found a non-positive pivot */
    LMP_EIO = -5,
    LMP_EABORTED = -6,
};

/* ---- parameter schema ------------------------------------------------------------------ */
typedef enum {
    LMP_PARAM_BOOL = 1,
    LMP_PARAM_INT = 2,
    LMP_PARAM_FLOAT = 3,
    LMP_PARAM_ENUM = 4,   /* one of choices[], NULL-terminated */
    LMP_PARAM_STRING = 5,
} lmp_param_type;

#define LMP_PARAM_REQUIRED 1u /* no default: the config must set it */

typedef struct lmp_param_spec {
    const char *name;
    lmp_param_type type;
    const char *help;
    double def_num;            /* default of BOOL (0/1), INT, FLOAT; index of choice for ENUM */
    const char *def_str;       /* default of STRING */
    double min, max;           /* inclusive range of INT and FLOAT */
    const char *const *choices;/* ENUM choices, NULL-terminated */
    uint32_t flags;
} lmp_param_spec;

/* A validated value, one per schema entry, in schema order.  ENUM: num = index, str = choice. */
typedef struct lmp_value {
    double num;
    const char *str;
} lmp_value;

/* ---- quantization specs (shared by strategies and backends) ---------------------------- */
typedef enum { LMP_ROUND_HALF_EVEN = 0, LMP_ROUND_HALF_AWAY = 1 } lmp_rounding;
/* ABI 6.2: LMP_GRAN_BLOCK, a scale per group x group tile of W[out, in] (compressed-tensors'
 * strategy "block", block_structure [group, group]; the tiles at the bottom and right edges may be
 * smaller, as compressed-tensors pads W with zeros to whole tiles).  FP8 formats only
 * (lmp_wspec_format_ok). */
typedef enum { LMP_GRAN_TENSOR = 0, LMP_GRAN_CHANNEL = 1, LMP_GRAN_GROUP = 2, LMP_GRAN_BLOCK = 3 } lmp_granularity;

/* Weight grids.  Every weight-quantizing plugin works in two steps on the backend: choose a
 * grid for each slice of W (choose_weight_grid: scales, and zero-points when asymmetric), then
 * apply a given grid (apply_weight_grid: codes and the dequantized weights).  Splitting them lets
 * a plugin steer the grid (a clip ratio, a search over clip ratios, grids fitted on other data,
 * GPTQ's grids taken at the start of a batch) without touching the weights to do it.
 *
 * LMP_WFORMAT_INT, the only format so far, is the uniform integer grid of docs/algorithms.md §1:
 * sym:  scale = T/qmax, qmax = 2^(b-1)-1, T = clip * abs-max of the slice (0 -> 1e-8),
 *       q = clamp(round(w/scale), -qmax-1, qmax), w' = q*scale.  (sym = LMP_SYM_QMAX)
 *       ABI 4.1, sym = LMP_SYM_FULL: scale = T/((2^b-1)/2), so the 2^b levels span -T..T as in
 *       the GPTQ reference's sym grid (zero point 2^(b-1)) and compressed-tensors' symmetric
 *       int; sym = LMP_SYM_SIGNED: scale = -M/2^(b-1) with M = clip * the slice's signed value
 *       of largest magnitude (the positive one on a tie; 0 -> 1e-8), so that weight lands exactly
 *       on the level -2^(b-1), as ggml's Q4_0 does for any bits and slice.  Codes and values as
 *       for LMP_SYM_QMAX (the scale is negative when M is positive).
 * asym: lo = clip * min(0, min), hi = clip * max(0, max) (both 0 -> [-1, 1]), maxq = 2^b-1,
 *       scale = (hi-lo)/maxq, zero = round(-lo/scale), q = clamp(round(w/scale)+zero, 0, maxq),
 *       w' = scale*(q-zero).
 * A slice is the whole tensor, one output row, or `group` consecutive input columns of one row
 * (the last group of a row may be shorter).
 *
 * The GGUF block formats are grids a file stores exactly (ggml's reference quantizers,
 * ggml-quants.c quantize_row_q*_ref, which gguf-py's quants.py ports to numpy bit for bit), so a
 * strategy quantizing onto them produces the weights a reader of the file gets.  A block is 32
 * consecutive inputs of one row: a spec of such a format is always gran = GROUP, group = 32 with
 * the bits and sym it implies (lmp_wspec_for_format), `rounding` is not used (ggml rounds its own
 * way), and a row width not a multiple of 32 is refused.  choose gives each block's f32 d (and
 * for Q4_1 its f32 min, in zeros) as ggml computes them before storing them as fp16; apply
 * codes with ggml's id = 1/d of that f32 d and dequantizes with the fp16-rounded d (and min):
 *   Q8_0: d = amax/127; q = roundf(w*id) in -127..127 (int8); w' = fp16(d)*q.
 *   Q4_0: max = the value of largest magnitude (the first on ties); d = max/-8;
 *         q = min(15, trunc(w*id + 8.5)) in 0..15 (a nibble); w' = fp16(d)*(q-8).
 *   Q4_1: min, max of the block; d = (max-min)/15; q = min(15, trunc((w-min)*id + 0.5)) in
 *         0..15; w' = fp16(d)*q + fp16(min).
 *   Q5_0: as Q4_0 with d = max/-16, q = min(31, trunc(w*id + 16.5)); w' = fp16(d)*(q-16).
 *   Q5_1: as Q4_1 with d = (max-min)/31, q in 0..31.
 *   IQ4_NL: a 16-value codebook v (lmp_iq4nl_values, -127..113); d is searched: the least-squares
 *         d of the codes nearest x/d0 for 15 trial d0 around -max/v[0], the best of them weighted
 *         by x^2 (ggml's quantize_row_iq4_nl_impl, ntry 7); q = the index of the value nearest
 *         w*id; w' = fp16(d)*v[q].
 * clip scales amax, max, or min and max, as for INT (Q4_1 does not fold 0 into its range, as
 * ggml does not); the codes of the weights then beyond the range saturate (Q4_0/Q4_1 at 0 too).
 * With clip = 1 every step is ggml's.
 * ABI 4.2, the k-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (lmpress/plugin_kquants.h): a slice is a
 * sub-block of 16 or 32 inputs whose scale (and min) is exact, an integer times the fp16 d of its
 * super-block of 256; choose works a super-block at a time (rows in multiples of 256) and takes no
 * clip. */
typedef enum {
    LMP_WFORMAT_INT = 0,
    LMP_WFORMAT_GGUF_Q8_0 = 1,
    LMP_WFORMAT_GGUF_Q4_0 = 2,
    LMP_WFORMAT_GGUF_Q4_1 = 3,
    LMP_WFORMAT_GGUF_Q5_0 = 4,   /* ABI 4.1 */
    LMP_WFORMAT_GGUF_Q5_1 = 5,   /* ABI 4.1 */
    LMP_WFORMAT_GGUF_IQ4_NL = 6, /* ABI 4.1 */
    LMP_WFORMAT_GGUF_Q2_K = 7,   /* ABI 4.2: the k-quants, lmpress/plugin_kquants.h */
    LMP_WFORMAT_GGUF_Q3_K = 8,
    LMP_WFORMAT_GGUF_Q4_K = 9,
    LMP_WFORMAT_GGUF_Q5_K = 10,
    LMP_WFORMAT_GGUF_Q6_K = 11,
    LMP_WFORMAT_NF4 = 12,        /* ABI 4.2: bitsandbytes' NF4 (QLoRA), below */
    LMP_WFORMAT_FP8_E4M3 = 13,   /* ABI 4.5: the floating-point grids, lmpress/plugin_fpquants.h */
    LMP_WFORMAT_FP8_E5M2 = 14,
    LMP_WFORMAT_NVFP4 = 15,
    LMP_WFORMAT_MXFP4 = 16,
    LMP_WFORMAT_MXFP8 = 17,
    LMP_WFORMAT_GGUF_MXFP4 = 18, /* ABI 4.5: ggml's own MXFP4, NVFP4, Q1_0 and Q2_0, plugin_fpquants.h */
    LMP_WFORMAT_GGUF_NVFP4 = 19,
    LMP_WFORMAT_GGUF_Q1_0 = 20,
    LMP_WFORMAT_GGUF_Q2_0 = 21
} lmp_wformat;

/* NF4's 16 values (bitsandbytes' table, as f32), ascending.  A block of 64 consecutive inputs of
 * a row keeps its f32 abs-max a: q = the number of midpoints (v[i] + v[i+1]) / 2 below
 * clamp(w * (1 / max(a, 1e-38)), -1, 1) (torch.bucketize: a value on a midpoint takes the lower),
 * w' = v[q] * a, as bitsandbytes' quantize_4bit / dequantize_4bit compute them (blocksize 64, no
 * double quantization of a: 4.5 bits per weight).  No GGUF or compressed-tensors type holds it. */
static const float lmp_nf4_values[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                         -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                         0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                                         0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                                         0.7229568362236023f, 1.0f};
#define LMP_WFORMAT_NF4_BLOCK 64

/* IQ4_NL's codebook (ggml-common.h's kvalues_iq4nl), ascending. */
static const int8_t lmp_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/* The type an INT grid's scales are stored in.  A file keeps each scale in its own type:
 * compressed-tensors in the model's dtype (bf16 or f16 for what vLLM runs), so a grid meant for
 * such a file rounds its scales to that type when it chooses them (round to nearest even, as
 * torch's and numpy's casts do), and every weight is then coded and dequantized with the rounded
 * scale.  A scale that rounds to 0 in f16 becomes f16's smallest subnormal, 2^-24. */
typedef enum { LMP_SCALE_F32 = 0, LMP_SCALE_F16 = 1, LMP_SCALE_BF16 = 2 } lmp_scale_type;

/* Inputs per block of every GGUF format above (ggml's QK8_0, QK4_0, QK4_1, QK5_0, QK5_1, QK4_NL). */
#define LMP_WFORMAT_BLOCK 32

/* lmp_wspec.sym: 0 asymmetric; else which symmetric scale (above). */
enum { LMP_SYM_QMAX = 1, LMP_SYM_FULL = 2, LMP_SYM_SIGNED = 3 };

typedef struct lmp_wspec {
    int bits;                  /* 2..8 */
    int sym;                   /* LMP_SYM_*: symmetric, no zero-point; 0 asymmetric min-max with zero-point */
    lmp_granularity gran;
    int64_t group;             /* columns per group when gran == LMP_GRAN_GROUP */
    lmp_rounding rounding;
    /* Ratio in (0, 1] applied to the slice's range before the scale is computed (the values
     * beyond it saturate).  0 means 1, so an initialiser that leaves it out keeps the plain
     * abs-max / min-max grid. */
    float clip;
    lmp_wformat format;        /* LMP_WFORMAT_INT (0), or a GGUF block format */
    lmp_scale_type scale_type; /* INT and FP8: the type scales are stored in (0: f32) */
    /* ABI 4.5: NVFP4's per-tensor global scale (plugin_fpquants.h), > 0; 0 for every other format. */
    float global_scale;
} lmp_wspec;

/* The format's name as configs spell it ("int", "q8_0", "q4_0", ...); NULL if unknown. */
static inline const char *lmp_wformat_name(lmp_wformat f)
{
    switch (f) {
    case LMP_WFORMAT_INT: return "int";
    case LMP_WFORMAT_GGUF_Q8_0: return "q8_0";
    case LMP_WFORMAT_GGUF_Q4_0: return "q4_0";
    case LMP_WFORMAT_GGUF_Q4_1: return "q4_1";
    case LMP_WFORMAT_GGUF_Q5_0: return "q5_0";
    case LMP_WFORMAT_GGUF_Q5_1: return "q5_1";
    case LMP_WFORMAT_GGUF_IQ4_NL: return "iq4_nl";
    case LMP_WFORMAT_GGUF_Q2_K: return "q2_k";
    case LMP_WFORMAT_GGUF_Q3_K: return "q3_k";
    case LMP_WFORMAT_GGUF_Q4_K: return "q4_k";
    case LMP_WFORMAT_GGUF_Q5_K: return "q5_k";
    case LMP_WFORMAT_GGUF_Q6_K: return "q6_k";
    case LMP_WFORMAT_NF4: return "nf4";
    case LMP_WFORMAT_FP8_E4M3: return "fp8_e4m3";
    case LMP_WFORMAT_FP8_E5M2: return "fp8_e5m2";
    case LMP_WFORMAT_NVFP4: return "nvfp4";
    case LMP_WFORMAT_MXFP4: return "mxfp4";
    case LMP_WFORMAT_MXFP8: return "mxfp8";
    case LMP_WFORMAT_GGUF_MXFP4: return "gguf_mxfp4";
    case LMP_WFORMAT_GGUF_NVFP4: return "gguf_nvfp4";
    case LMP_WFORMAT_GGUF_Q1_0: return "q1_0";
    case LMP_WFORMAT_GGUF_Q2_0: return "q2_0";
    }
    return NULL;
}

/* ABI 4.2.  The k-quants' super-blocks: 256 consecutive inputs of a row whose sub-block scales
 * (and mins) are small integers times one fp16 d (and dmin) per super-block (ggml's QK_K). */
#define LMP_WFORMAT_KBLOCK 256

static inline int lmp_wformat_is_k(lmp_wformat f) { return f >= LMP_WFORMAT_GGUF_Q2_K && f <= LMP_WFORMAT_GGUF_Q6_K; }

/* ABI 4.5: NVFP4's groups of 16 inputs, MXFP4's and MXFP8's of 32. */
#define LMP_WFORMAT_NVFP4_GROUP 16
#define LMP_WFORMAT_MX_GROUP 32

/* The inputs whose grid is chosen together, and what a row's width must be a multiple of: 256
 * for a k-quant, 32 for the other GGUF formats and MX, 16 for NVFP4, 1 for INT and FP8 (whose
 * slices are those of INT). */
static inline int64_t lmp_wformat_span(lmp_wformat f)
{
    return lmp_wformat_is_k(f) ? LMP_WFORMAT_KBLOCK
           : f == LMP_WFORMAT_NF4 || f == LMP_WFORMAT_GGUF_NVFP4 || f == LMP_WFORMAT_GGUF_Q2_0 ? 64
           : f == LMP_WFORMAT_GGUF_Q1_0 ? 128
           : f == LMP_WFORMAT_NVFP4 ? LMP_WFORMAT_NVFP4_GROUP
           : f == LMP_WFORMAT_INT || f == LMP_WFORMAT_FP8_E4M3 || f == LMP_WFORMAT_FP8_E5M2 ? 1
                                  : LMP_WFORMAT_BLOCK;
}

/* Whether a format's scale takes a clip ratio: the k-quants, NF4 and ggml's MXFP4, NVFP4, Q1_0 and
 * Q2_0 choose theirs (clip 1). */
static inline int lmp_wformat_takes_clip(lmp_wformat f)
{
    return !lmp_wformat_is_k(f) && f != LMP_WFORMAT_NF4 && !(f >= LMP_WFORMAT_GGUF_MXFP4 && f <= LMP_WFORMAT_GGUF_Q2_0);
}

/* What llama-quantize stores instead when a row's width is not a multiple of a k-quant's 256
 * (llama-quant.cpp's tensor_type_fallback): Q2_K and Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0; f itself when it fits (or is not a k-quant). */
static inline lmp_wformat lmp_wformat_fallback(lmp_wformat f, int64_t cols)
{
    if (!lmp_wformat_is_k(f) || cols % LMP_WFORMAT_KBLOCK == 0) return f;
    switch (f) {
    case LMP_WFORMAT_GGUF_Q4_K: return LMP_WFORMAT_GGUF_Q5_0;
    case LMP_WFORMAT_GGUF_Q5_K: return LMP_WFORMAT_GGUF_Q5_1;
    case LMP_WFORMAT_GGUF_Q6_K: return LMP_WFORMAT_GGUF_Q8_0;
    default: return LMP_WFORMAT_GGUF_Q4_0;
    }
}

/* The spec of a GGUF block format: its bits and sym, a group of 32, and the clip ratio given. */
static inline lmp_wspec lmp_wspec_for_format(lmp_wformat f, float clip)
{
    lmp_wspec s; /* assigned field by field: cuda_kernels.cu reads this header as C++ */
    switch (f) {
    case LMP_WFORMAT_GGUF_Q8_0: s.bits = 8; break;
    case LMP_WFORMAT_GGUF_Q5_0: case LMP_WFORMAT_GGUF_Q5_1: case LMP_WFORMAT_GGUF_Q5_K: s.bits = 5; break;
    case LMP_WFORMAT_GGUF_Q2_K: case LMP_WFORMAT_GGUF_Q2_0: s.bits = 2; break;
    case LMP_WFORMAT_GGUF_Q1_0: s.bits = 1; break;
    case LMP_WFORMAT_GGUF_Q3_K: s.bits = 3; break;
    case LMP_WFORMAT_GGUF_Q6_K: s.bits = 6; break;
    case LMP_WFORMAT_FP8_E4M3: case LMP_WFORMAT_FP8_E5M2: case LMP_WFORMAT_MXFP8: s.bits = 8; break;
    default: s.bits = 4;
    }
    s.sym = f != LMP_WFORMAT_GGUF_Q4_1 && f != LMP_WFORMAT_GGUF_Q5_1 && f != LMP_WFORMAT_GGUF_Q2_K &&
            f != LMP_WFORMAT_GGUF_Q4_K && f != LMP_WFORMAT_GGUF_Q5_K;
    s.gran = LMP_GRAN_GROUP;
    /* a k-quant's slice is its sub-block: 16 inputs (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K) */
    s.group = f == LMP_WFORMAT_GGUF_Q2_K || f == LMP_WFORMAT_GGUF_Q3_K || f == LMP_WFORMAT_GGUF_Q6_K ? 16
              : f == LMP_WFORMAT_NF4                                                             ? LMP_WFORMAT_NF4_BLOCK
              : f == LMP_WFORMAT_NVFP4 || f == LMP_WFORMAT_GGUF_NVFP4                            ? LMP_WFORMAT_NVFP4_GROUP
              : f == LMP_WFORMAT_GGUF_Q1_0                                                       ? 128
              : f == LMP_WFORMAT_GGUF_Q2_0                                                       ? 64
                                                                                                    : LMP_WFORMAT_BLOCK;
    if (f == LMP_WFORMAT_FP8_E4M3 || f == LMP_WFORMAT_FP8_E5M2) s.gran = LMP_GRAN_CHANNEL; /* the caller may change it */
    s.rounding = LMP_ROUND_HALF_AWAY; /* not used: ggml's own rounding */
    s.clip = clip;
    s.format = f;
    s.scale_type = LMP_SCALE_F32; /* not used: ggml stores fp16 d itself */
    s.global_scale = 0.0f;        /* NVFP4: set from the tensor (lmp_nvfp4_global_scale) */
    return s;
}

/* 1 when s->format is INT, or a known block format whose bits, sym, gran and group are the ones
 * it implies (lmp_wspec_for_format): then lmp_wspec_n_scales counts its blocks and s->sym says
 * whether it has zeros (Q4_1's and Q5_1's mins). */
static inline int lmp_wspec_format_ok(const lmp_wspec *s)
{
    if (s->format == LMP_WFORMAT_INT)
        return s->scale_type >= LMP_SCALE_F32 && s->scale_type <= LMP_SCALE_BF16 && s->sym >= 0 && s->sym <= LMP_SYM_SIGNED &&
               s->gran != LMP_GRAN_BLOCK;
    if (!lmp_wformat_name(s->format)) return 0;
    if (s->format == LMP_WFORMAT_NVFP4 && !(s->global_scale > 0.0f && s->global_scale < INFINITY)) return 0;
    if (s->format != LMP_WFORMAT_NVFP4 && s->global_scale != 0.0f) return 0;
    if (s->format == LMP_WFORMAT_FP8_E4M3 || s->format == LMP_WFORMAT_FP8_E5M2) /* INT's slices or tiles, a scale type */
        return s->bits == 8 && s->sym == LMP_SYM_QMAX && s->scale_type >= LMP_SCALE_F32 && s->scale_type <= LMP_SCALE_BF16 &&
               (s->gran != LMP_GRAN_BLOCK || s->group > 0);
    if (s->gran == LMP_GRAN_BLOCK) return 0; /* tiles: FP8 only */
    lmp_wspec f = lmp_wspec_for_format(s->format, s->clip);
    return s->bits == f.bits && s->sym == f.sym && s->gran == f.gran && s->group == f.group &&
           s->scale_type == LMP_SCALE_F32 && (lmp_wformat_takes_clip(s->format) || s->clip == 0.0f || s->clip == 1.0f);
}

/* Number of scales (and zero-points) of a [rows, cols] weight: the slices, in storage order
 * ([1] per tensor, [rows] per channel, [rows, ceil(cols/group)] per group, [ceil(rows/group),
 * ceil(cols/group)] per block, row-major). */
static inline int64_t lmp_wspec_n_scales(const lmp_wspec *s, int64_t rows, int64_t cols)
{
    if (s->gran == LMP_GRAN_TENSOR) return 1;
    if (s->gran == LMP_GRAN_CHANNEL) return rows;
    if (s->gran == LMP_GRAN_BLOCK) return ((rows + s->group - 1) / s->group) * ((cols + s->group - 1) / s->group);
    return rows * ((cols + s->group - 1) / s->group);
}

/* The grid formulas above, written once for every implementation on the host (the CPU
 * reference, plugins quantizing column by column).  Every step is an f32 operation in this
 * order: a division, not a multiplication by a reciprocal, and no fused multiply-add (ISO C
 * mode contracts nothing; build a plugin with -ffp-contract=off otherwise), so any f32
 * implementation of the same steps (numpy, the device kernels) gets the same bits. */

/* The rounding of spec->rounding: nearbyintf rounds half to even in the default FP mode;
 * roundf rounds half away from zero (paddle.round). */
static inline float lmp_wgrid_round(float x, lmp_rounding r)
{
    return r == LMP_ROUND_HALF_AWAY ? roundf(x) : nearbyintf(x);
}

/* Written as two comparisons so that a NaN passes through (and stays NaN in w'). */
static inline float lmp_wgrid_clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* spec->clip with 0 read as 1. */
static inline float lmp_wspec_clip(const lmp_wspec *s) { return s->clip == 0.0f ? 1.0f : s->clip; }

/* f32 -> IEEE half -> f32, as a GGUF file stores a scale: GGML_FP32_TO_FP16 (F16C's
 * _cvtss_sh, or ggml_compute_fp32_to_fp16 without it) and numpy's astype(float16) both round to
 * nearest even, keep subnormal halves and overflow to infinity; NaN stays NaN.  This is ggml's
 * portable version (Maratyszcza's FP16 library): the two scalings make the FPU do the rounding,
 * and the decode is exact.  The unions are C11's way to read a float's bits. */
static inline float lmp_fp16_round(float f)
{
    union { float f; uint32_t u; } w = {f}, b, e;
    const uint32_t shl1 = w.u + w.u, sign = w.u & 0x80000000u;
    uint32_t bias = shl1 & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    /* 2^112 and 2^-110, exactly (decimal: cuda_kernels.cu reads this header as C++, where hex
     * floats are C++17's) */
    float base = (fabsf(f) * 5192296858534827628530496329220096.0f) * 7.703719777548943e-34f;
    b.u = (bias >> 1) + 0x07800000u;
    b.f = b.f + base;
    const uint32_t h = (sign >> 16) | (shl1 > 0xFF000000u ? 0x7E00u : ((b.u >> 13) & 0x7C00u) + (b.u & 0x0FFFu));
    /* and back: exponent 0 is a subnormal (or zero), m * 2^-24 exactly; 31 infinity or NaN */
    const uint32_t ex = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (ex == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */
        return (h & 0x8000u) ? -v : v;
    }
    e.u = ((h & 0x8000u) << 16) | (ex == 31 ? 0x7F800000u | (m << 13) : ((ex + 112u) << 23) | (m << 13));
    return e.f;
}

/* f32 -> bfloat16 -> f32, round to nearest even (torch's .to(torch.bfloat16)); NaN stays NaN. */
static inline float lmp_bf16_round(float f)
{
    union { float f; uint32_t u; } w = {f};
    if (f != f) return f;
    w.u = (w.u + 0x7FFFu + ((w.u >> 16) & 1u)) & 0xFFFF0000u;
    return w.f;
}

/* An INT grid's scale as its type stores it (lmp_scale_type). */
static inline float lmp_scale_round(float scale, lmp_scale_type t)
{
    if (t == LMP_SCALE_BF16) return lmp_bf16_round(scale);
    if (t == LMP_SCALE_F16) {
        const float h = lmp_fp16_round(scale);
        return h != 0.0f || scale == 0.0f ? h : 5.9604644775390625e-08f; /* 2^-24: never a 0 scale */
    }
    return scale;
}

/* ggml's reciprocal of a block scale: 1/d, or 0 for an all-zero block (whose codes are then 0,
 * 8 for Q4_0's offset, 0 for Q4_1). */
static inline float lmp_wgrid_inv(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* ggml's nearest_int: round half to even through the float adder (|x| < 2^22). */
static inline int lmp_wgrid_nearest_int(float x)
{
    union { float f; int32_t i; } v;
    v.f = x + 12582912.0f;
    return (v.i & 0x007fffff) - 0x00400000;
}

/* ggml's best_index_int8 over IQ4_NL's codebook: the index of the value nearest x (the lower on
 * a tie; a NaN x, like ggml's, ends at 15). */
static inline int lmp_iq4nl_index(float x)
{
    const int8_t *v = lmp_iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < v[mav]) mu = mav;
        else ml = mav;
    }
    return x - v[mu - 1] < v[mu] - x ? mu - 1 : mu;
}

/* IQ4_NL's d for a block x[0..n) (n <= 32) with weights w: ggml's quantize_row_iq4_nl_impl search
 * (ntry 7) in its steps and order. */
static inline float lmp_wgrid_search_iq4nl(const float *x, int n, const float *w)
{
    const int8_t *v = lmp_iq4nl_values;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < 1e-15f) return 0.0f; /* ggml's GROUP_MAX_EPS */
    float d = -max / v[0], id = 1 / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < n; j++) {
        const float q = v[lmp_iq4nl_index(id * x[j])];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; ++itry) {
        id = (itry + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < n; j++) {
            const float q = v[lmp_iq4nl_index(id * x[j])];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The grid of one block x[0..n) of a GGUF format (s->format != INT), in ggml's steps and order
 * (its reference quantizers, which llama-quantize uses without an importance matrix): *scale
 * the f32 d, *zero the f32 min (Q4_1, Q5_1) or 0.  NaN comparisons go as ggml's do.  NF4 (n 64):
 * *scale its abs-max, bitsandbytes' absmax. */
static inline float lmp_wgrid_fit_ggml_block(const lmp_wspec *s, const float *x, int64_t n); /* plugin_fpquants.h */

static inline void lmp_wgrid_fit_block(const lmp_wspec *s, const float *x, int64_t n, float *scale, float *zero)
{
    const float clip = lmp_wspec_clip(s);
    *zero = 0.0f;
    if (s->format >= LMP_WFORMAT_GGUF_MXFP4 && s->format <= LMP_WFORMAT_GGUF_Q2_0) {
        *scale = lmp_wgrid_fit_ggml_block(s, x, n);
        return;
    }
    if (s->format == LMP_WFORMAT_GGUF_Q8_0 || s->format == LMP_WFORMAT_NF4) {
        float amax = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float a = fabsf(x[j]);
            amax = amax > a ? amax : a; /* ggml's MAX(amax, a) */
        }
        *scale = s->format == LMP_WFORMAT_NF4 ? amax : (clip * amax) / 127.0f;
    } else if (s->format == LMP_WFORMAT_GGUF_Q4_0 || s->format == LMP_WFORMAT_GGUF_Q5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int64_t j = 0; j < n; j++)
            if (amax < fabsf(x[j])) { /* strictly: the first of equal magnitudes wins */
                amax = fabsf(x[j]);
                max = x[j];
            }
        *scale = (clip * max) / (s->format == LMP_WFORMAT_GGUF_Q4_0 ? -8.0f : -16.0f);
    } else if (s->format == LMP_WFORMAT_GGUF_IQ4_NL) {
        float w[LMP_WFORMAT_BLOCK];
        for (int64_t j = 0; j < n && j < LMP_WFORMAT_BLOCK; j++) w[j] = x[j] * x[j];
        *scale = clip * lmp_wgrid_search_iq4nl(x, (int)n, w);
    } else { /* Q4_1, Q5_1 */
        float min = 3.40282347e+38f, max = -3.40282347e+38f; /* ggml's FLT_MAX, -FLT_MAX */
        for (int64_t j = 0; j < n; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        min = clip * min;
        max = clip * max;
        *scale = (max - min) / (s->format == LMP_WFORMAT_GGUF_Q4_1 ? 15.0f : 31.0f);
        *zero = min;
    }
}

/* ggml's make_qx_quants(n, nmax, x, L, rmse_type 1, w): the scale of the sign-aware symmetric
 * grid (levels -nmax..nmax-1) that minimises sum w (x - d q)^2 over 19 trial inverse scales
 * around -nmax/max, each d the least-squares one for its codes.  L (NULL: not wanted) receives
 * the best trial's codes + nmax, as ggml's L does (the k-quants store them as integer scales). */
static inline float lmp_wgrid_search_qx(const float *x, int n, int nmax, const float *w, int8_t *L)
{
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; ++i)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) {
        for (int i = 0; L && i < n; ++i) L[i] = 0;
        return 0.0f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = lmp_wgrid_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
        if (L) L[i] = (int8_t)(l + nmax);
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = lmp_wgrid_nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
            sumlx += w[i] * x[i] * l;
            suml2 += w[i] * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; L && i < n; ++i) {
                const int l = lmp_wgrid_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's make_qkx2_quants and make_qkx3_quants (n <= 32, weights w; the two differ only in their
 * arguments): the scale and min (<= 0) of the grid min + d q, q in 0..nmax, minimising
 * sum w |x - min - d q|^p (p = 1 with use_mad, else 2) over nstep + 1 trial inverse scales
 * (rmin + rdelta * is + nmax) / (max - min), each (d, min) the weighted least-squares fit of its
 * codes.  ggml returns -min as "the_min"; *min_out is min itself. */
static inline void lmp_wgrid_search_qkx(const float *x, int n, int nmax, const float *w, float rmin, float rdelta,
                                        int nstep, int use_mad, float *scale_out, float *min_out)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        *scale_out = 0.0f;
        *min_out = min;
        return;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_mad = 0;
    for (int i = 0; i < n; ++i) {
        int l = lmp_wgrid_nearest_int(iscale * (x[i] - min));
        l = l < 0 ? 0 : (l > nmax ? nmax : l);
        const float diff = scale * l + min - x[i];
        best_mad += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        uint8_t laux[LMP_WFORMAT_BLOCK];
        for (int i = 0; i < n; ++i) {
            int l = lmp_wgrid_nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : (l > nmax ? nmax : l);
            laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = this_scale * laux[i] + this_min - x[i];
                mad += w[i] * (use_mad ? fabsf(diff) : diff * diff);
            }
            if (mad < best_mad) {
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *scale_out = scale;
    *min_out = min;
}

/* The grid of one block x[0..32) of a GGUF format as llama-quantize chooses it with an importance
 * matrix: imp[0..32) the importance of the block's input columns (llama.cpp's imatrix: the mean
 * of x^2 over the calibration tokens; any positive multiple gives the same grid), row_sigma2 the
 * mean of w^2 over the block's whole row.  Each weight counts imp * sqrt(sigma2 + w^2), and
 *   Q4_0, Q5_0: lmp_wgrid_search_qx (ggml's quantize_row_q4_0_impl, q5_0_impl);
 *   Q4_1, Q5_1: lmp_wgrid_search_qkx as make_qkx3_quants (quantize_row_q4_1_impl, q5_1_impl);
 *   IQ4_NL: lmp_wgrid_search_iq4nl, sigma2 then the block's 2 * mean of w^2 (quantize_iq4_nl);
 *   Q8_0: ggml takes no importance: lmp_wgrid_fit_block.
 * ggml keeps the codes of the best trial; here apply_weight_grid codes every weight to the level
 * nearest it on the chosen grid, which can only lower the (weighted) error.  Needs clip = 1. */
static inline void lmp_wgrid_fit_block_imp(const lmp_wspec *s, const float *x, const float *imp, float row_sigma2,
                                           float *scale, float *zero)
{
    const int n = LMP_WFORMAT_BLOCK;
    float w[LMP_WFORMAT_BLOCK], sigma2 = row_sigma2;
    *zero = 0.0f;
    if (s->format == LMP_WFORMAT_GGUF_Q8_0) {
        lmp_wgrid_fit_block(s, x, n, scale, zero);
        return;
    }
    if (s->format == LMP_WFORMAT_GGUF_IQ4_NL) {
        sigma2 = 0;
        for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
        sigma2 *= 2.f / n;
    }
    for (int j = 0; j < n; ++j) w[j] = imp[j] * sqrtf(sigma2 + x[j] * x[j]);
    if (s->format == LMP_WFORMAT_GGUF_Q4_0 || s->format == LMP_WFORMAT_GGUF_Q5_0)
        *scale = lmp_wgrid_search_qx(x, n, s->format == LMP_WFORMAT_GGUF_Q4_0 ? 8 : 16, w, NULL);
    else if (s->format == LMP_WFORMAT_GGUF_IQ4_NL) *scale = lmp_wgrid_search_iq4nl(x, n, w);
    else lmp_wgrid_search_qkx(x, n, s->format == LMP_WFORMAT_GGUF_Q4_1 ? 15 : 31, w, -0.9f, 0.05f, 36, 0, scale, zero);
}

#include "lmpress/plugin_kquants.h"
#include "lmpress/plugin_fpquants.h"

/* The grid of a slice from its min and max (0 folded in: mn <= 0 <= mx) and its abs-max.
 * *zero is 0 when symmetric. */
static inline void lmp_wgrid_fit(const lmp_wspec *s, float mn, float mx, float amax, float *scale, float *zero)
{
    const float clip = lmp_wspec_clip(s);
    if (s->sym) {
        const float signed_max = -mn > mx ? mn : mx;
        float t = clip * (s->sym == LMP_SYM_SIGNED ? signed_max : amax);
        float div = s->sym == LMP_SYM_FULL     ? (float)((1 << s->bits) - 1) / 2.0f
                    : s->sym == LMP_SYM_SIGNED ? -(float)(1 << (s->bits - 1))
                                               : (float)((1 << (s->bits - 1)) - 1);
        *scale = lmp_scale_round((t == 0.0f ? 1e-8f : t) / div, s->scale_type);
        *zero = 0.0f;
    } else {
        float maxq = (float)((1 << s->bits) - 1);
        float lo = clip * mn, hi = clip * mx;
        if (lo == 0.0f && hi == 0.0f) {
            lo = -1.0f;
            hi = 1.0f;
        }
        *scale = lmp_scale_round((hi - lo) / maxq, s->scale_type);
        /* clamped: with a rounded scale -lo/scale may pass maxq by a hair */
        *zero = lmp_wgrid_clampf(lmp_wgrid_round(-lo / *scale, s->rounding), 0.0f, maxq);
    }
}

/* The code of w on the grid (scale, zero), as an f32 holding an integer (sym -qmax-1..qmax,
 * asym 0..maxq; Q8_0 -127..127, Q4_0, Q4_1 and IQ4_NL 0..15, Q5_0 and Q5_1 0..31): f32 so that a NaN weight stays NaN
 * through lmp_wgrid_value, as it always has. */
/* The levels of a k-quant's codes before their offset: -2^(b-1)..2^(b-1)-1 for Q3_K and Q6_K,
 * 0..2^b-1 for the formats with a min. */
static inline int lmp_wgrid_k_lo(const lmp_wspec *s) { return s->sym ? -(1 << (s->bits - 1)) : 0; }

/* A k-quant's code (ggml's quantize_row_q*_K: nearest_int((w + m) / d) clamped to the levels, d
 * the sub-block's scale, m its min or 0), offset to start at 0 as the file stores it (Q3_K + 4,
 * Q6_K + 32).  A sub-block whose scale is 0 gets code 0, as ggml's search leaves an all-zero
 * sub-block (ggml keeps its search's codes wherever the scale is 0; every code dequantizes to
 * the same number there, code 0 also to the same sign of zero when the sub-block is all zero,
 * the usual case).  The quotient is clamped to one step beyond the
 * levels first, so ggml's nearest_int stays in the range it is exact in. */
static inline float lmp_wgrid_code_k(const lmp_wspec *s, float w, float scale, float zero)
{
    const int lo = lmp_wgrid_k_lo(s), hi = s->sym ? (1 << (s->bits - 1)) - 1 : (1 << s->bits) - 1;
    if (w != w) return w; /* a NaN weight keeps a NaN code */
    if (scale == 0.0f) return 0.0f;
    int l = lmp_wgrid_nearest_int(lmp_wgrid_clampf((w + zero) / scale, (float)lo - 1.0f, (float)hi + 1.0f));
    l = l < lo ? lo : (l > hi ? hi : l);
    return (float)(l - lo);
}

/* NF4's code of w in a block of abs-max a (lmp_nf4_values). */
static inline float lmp_wgrid_code_nf4(float w, float a)
{
    if (w != w) return w;
    const float x = lmp_wgrid_clampf(w * (1.0f / (a > 1e-38f ? a : 1e-38f)), -1.0f, 1.0f);
    int q = 0;
    while (q < 15 && (lmp_nf4_values[q] + lmp_nf4_values[q + 1]) / 2.0f < x) q++;
    return (float)q;
}

static inline float lmp_wgrid_code(const lmp_wspec *s, float w, float scale, float zero)
{
    if (lmp_wformat_is_fp(s->format)) return lmp_wgrid_code_fp(s, w, scale);
    if (lmp_wformat_is_ggml_new(s->format)) return lmp_wgrid_code_ggml(s, w, scale);
    if (lmp_wformat_is_k(s->format)) return lmp_wgrid_code_k(s, w, scale, zero);
    if (s->format == LMP_WFORMAT_NF4) return lmp_wgrid_code_nf4(w, scale);
    if (s->format == LMP_WFORMAT_GGUF_IQ4_NL) /* a NaN weight keeps a NaN code */
        return w == w ? (float)lmp_iq4nl_index(lmp_wgrid_inv(scale) * w) : w;
    if (s->format != LMP_WFORMAT_INT) { /* scale: the block's f32 d; zero: Q4_1's/Q5_1's f32 min */
        const float id = lmp_wgrid_inv(scale);
        float t; /* ggml's value before its conversion to an integer */
        if (s->format == LMP_WFORMAT_GGUF_Q8_0) t = roundf(w * id);
        else if (s->format == LMP_WFORMAT_GGUF_Q4_0) t = truncf(w * id + 8.5f);
        else if (s->format == LMP_WFORMAT_GGUF_Q5_0) t = truncf(w * id + 16.5f);
        else t = truncf((w - zero) * id + 0.5f);
        /* A t that is not finite from a weight that is not NaN: d is so small (f32 subnormal)
         * that 1/d overflows (inf, or 0 * inf = NaN at the block's min); fp16(d) is then 0.
         * ggml's conversion of such a t is undefined in C; on x86 (ggml's cvttss2si, numpy's
         * astype) it is the integer indefinite, whose low byte is 0: code 0.  A NaN weight keeps
         * a NaN code, as on the INT grid. */
        if (!(t - t == 0.0f) && w == w) return 0.0f;
        /* + 0: roundf of a small negative is -0, but the file holds an int8 0, which reads +0.
         * ggml: (int8_t)roundf(x), MIN(15, (int8_t)t): truncf is that cast for t in 0..127; the
         * clamps only matter with clip < 1 (ggml's t then stays inside them) */
        if (s->format == LMP_WFORMAT_GGUF_Q8_0) return lmp_wgrid_clampf(t + 0.0f, -127.0f, 127.0f);
        return lmp_wgrid_clampf(t, 0.0f, s->bits == 5 ? 31.0f : 15.0f);
    }
    if (s->sym) {
        float qmax = (float)((1 << (s->bits - 1)) - 1);
        return lmp_wgrid_clampf(lmp_wgrid_round(w / scale, s->rounding), -qmax - 1.0f, qmax);
    }
    float maxq = (float)((1 << s->bits) - 1);
    return lmp_wgrid_clampf(lmp_wgrid_round(w / scale, s->rounding) + zero, 0.0f, maxq);
}

/* The dequantized weight of a code (an int32_t code converts exactly). */
static inline float lmp_wgrid_value(const lmp_wspec *s, float code, float scale, float zero)
{
    if (lmp_wformat_is_fp(s->format)) return lmp_wgrid_value_fp(s, code, scale);
    if (lmp_wformat_is_ggml_new(s->format)) return lmp_wgrid_value_ggml(s, code, scale);
    if (s->format == LMP_WFORMAT_NF4) return code == code ? lmp_nf4_values[(int)code] * scale : code;
    if (lmp_wformat_is_k(s->format)) /* the sub-block's scale and min are exact already */
        return s->sym ? scale * (code + (float)lmp_wgrid_k_lo(s)) : scale * code - zero;
    if (s->format != LMP_WFORMAT_INT) { /* the fp16 d (and min) the file holds, as ggml dequantizes */
        if (s->format == LMP_WFORMAT_GGUF_Q8_0) return lmp_fp16_round(scale) * code;
        if (s->format == LMP_WFORMAT_GGUF_Q4_0) return lmp_fp16_round(scale) * (code - 8.0f);
        if (s->format == LMP_WFORMAT_GGUF_Q5_0) return lmp_fp16_round(scale) * (code - 16.0f);
        if (s->format == LMP_WFORMAT_GGUF_IQ4_NL)
            return code == code ? lmp_fp16_round(scale) * lmp_iq4nl_values[(int)code] : code;
        return lmp_fp16_round(scale) * code + lmp_fp16_round(zero);
    }
    return s->sym ? code * scale : scale * (code - zero);
}

/* A code for an int32_t array: the only non-integer lmp_wgrid_code gives is NaN (a NaN weight),
 * stored as 0 rather than converted (undefined behaviour). */
static inline int32_t lmp_wgrid_code_i32(float code) { return code == code ? (int32_t)code : 0; }

/* Simulated activation quantization of a linear's input x[T, C], symmetric:
 * q = clamp(round(x/s), -qmax, qmax), qmax = 2^(b-1)-1, x' = q*s, with
 *   STATIC:        s = the stored scale (calibration abs-max / qmax)
 *   DYN_TENSOR:    s = max(absmax(x), 1e-5) / qmax over the whole x
 *   DYN_TOKEN:     s = max(absmax(row), 1e-5) / qmax per token row. */
typedef enum {
    LMP_ACT_NONE = 0,
    LMP_ACT_STATIC_TENSOR = 1,
    LMP_ACT_DYN_TENSOR = 2,
    LMP_ACT_DYN_TOKEN = 3,
    /* ABI 4.5: floating-point activations, as compressed-tensors' forward_quantize simulates them
     * (the CPU reference, backends/cpu/cpu_ref.c act_quantize_fp; bits and rounding are not used): */
    LMP_ACT_FP8_STATIC_TENSOR = 4, /* E4M3, s = the stored scale (calibration abs-max / 448) */
    LMP_ACT_FP8_DYN_TOKEN = 5,     /* E4M3, s = abs-max of each token / 448 */
    LMP_ACT_NVFP4 = 6,             /* E2M1 in groups of 16, E4M3 scales of each group's abs-max, the
                                    * stored scale the global scale (2688 / calibration abs-max) */
    LMP_ACT_MXFP4 = 7,             /* E2M1 in groups of 32 with E8M0 scales */
} lmp_act_mode;

typedef struct lmp_aspec {
    lmp_act_mode mode;
    int bits;
    lmp_rounding rounding;
    float scale;               /* LMP_ACT_STATIC_TENSOR only */
} lmp_aspec;

/* ---- model view handed to strategies: one block at a time ------------------------------ */
typedef enum {
    LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V, LMP_ROLE_O,
    LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN,
    LMP_ROLE_ROUTER,      /* ABI 5: the router, [n_experts, dim]: logits over the routed experts */
    LMP_ROLE_SHARED_GATE, /* ABI 5: the shared expert's gate, [1, dim], through a sigmoid (Qwen2-MoE) */
    /* ABI 5.1: multi-head latent attention (DeepSeek-V2/V3), whose block has no k or v linear:
     * q_a [q_lora_rank, dim] and q_b [heads * qk_head_dim, q_lora_rank] in place of q (a model
     * without q_lora_rank keeps LMP_ROLE_Q), kv_a [kv_lora_rank + qk_rope_head_dim, dim] (the
     * latent and the shared rotary key), kv_b [heads * (qk_nope_head_dim + v_head_dim),
     * kv_lora_rank]; q_b and kv_b read the latents through their own RMSNorms. */
    LMP_ROLE_Q_A, LMP_ROLE_Q_B, LMP_ROLE_KV_A, LMP_ROLE_KV_B,
    LMP_ROLE_COUNT
} lmp_role;

/* ABI 5: which MLP a gate, up or down linear belongs to.  LMP_EXPERT_NONE for the attention's
 * linears, a dense block's MLP, the router and the shared gate. */
typedef enum {
    LMP_EXPERT_NONE = 0,
    LMP_EXPERT_ROUTED = 1,     /* routed expert lmp_linear.expert, 0 <= expert < lmp_block.n_experts */
    LMP_EXPERT_SHARED = 2,     /* the shared expert, which every token goes through */
} lmp_expert_kind;

/* Statistics over the calibration tokens that reached a linear's input x[N, in] (after the
 * linear's input affine, if it has one).  A "window" is one calibration sequence of T tokens,
 * the unit the block sees at once (PaddleSlim's "batch"). */
enum {
    LMP_STAT_ABSMAX = 1u << 0, /* per input channel: max |x| */
    LMP_STAT_MINMAX = 1u << 1, /* per input channel: min x, max x */
    LMP_STAT_MEAN = 1u << 2,   /* per input channel: mean x */
    LMP_STAT_SAMPLE = 1u << 3, /* a token sample: rows of x, evenly spaced over the calibration
                                * tokens (row i is token floor(i*N/S)); S from sample_tokens() */
    LMP_STAT_WINDOWS = 1u << 4,/* also per window: MINMAX and MEAN as [n_windows, in] (ABI 1.1) */
    LMP_STAT_HESSIAN = 1u << 5,/* H[in, in] = (2 / n_windows) * sum over tokens of x x^T (GPTQ) */
    LMP_STAT_SQSUM = 1u << 6,  /* per input channel: sum over tokens of x^2 (Wanda's ||X_j||^2) */
    LMP_STAT_IMATRIX = 1u << 7,/* ABI 4.2: per input channel, the importance of the run's llama.cpp
                                * imatrix file (read from it: no calibration is run for it) */
    /* Not a statistic: ask the host to run the stage once per distinct linear input of the
     * block, in forward order (q,k,v; o; gate,up; down), collecting the statistics of each
     * group on the block as the earlier groups left it (GPTQ's true_sequential). */
    LMP_NEED_SEQUENTIAL = 1u << 31,
    /* ABI 4.3.  Not a statistic: the stage learns on the block's calibration inputs through
     * host->learn_block, so the host keeps them for it (no observer runs for this alone). */
    LMP_NEED_CALIB_INPUTS = 1u << 30,
    /* ABI 4.3.  Not a statistic: the stage works on the whole model once every block has been
     * through the variant's stages (its finish(), e.g. host->learn_model); the core then keeps
     * every block of the variant until it returns. */
    LMP_NEED_WHOLE_MODEL = 1u << 29,
};

typedef struct lmp_stats {
    int64_t n_tokens;
    float *absmax;             /* [in] when LMP_STAT_ABSMAX was asked for, else NULL */
    float *min, *max;          /* [in] when LMP_STAT_MINMAX */
    float *mean;               /* [in] when LMP_STAT_MEAN */
    /* ABI 1.1 */
    int64_t n_sample;          /* rows of sample */
    float *sample;             /* [n_sample, in] when LMP_STAT_SAMPLE */
    int64_t n_windows;
    float *win_min, *win_max;  /* [n_windows, in] when LMP_STAT_WINDOWS | LMP_STAT_MINMAX */
    float *win_mean;           /* [n_windows, in] when LMP_STAT_WINDOWS | LMP_STAT_MEAN */
    /* ABI 2.0 */
    float *hessian;            /* [in, in] when LMP_STAT_HESSIAN, both triangles */
    float *sqsum;              /* [in] when LMP_STAT_SQSUM */
    /* ABI 4.2: [in] when LMP_STAT_IMATRIX: the entry of this linear's weight in the importance
     * matrix the config names (`imatrix = "file";`), as llama-quantize reads it: in_sum2 / counts,
     * the mean x^2 of each input over the tokens llama-imatrix ran.  The host's: read only.  The
     * host refuses the run before any block is compressed when the file has no entry of the
     * linear's input width. */
    const float *imatrix;
} lmp_stats;

/* ABI 4.0: the storage grid a linear's weights lie on, as a stage recorded it
 * (host->set_weight_grid): the spec, and the scales (and zeros) choose_weight_grid gave, one per
 * slice in lmp_wspec_n_scales's order (a GGUF format's f32 d and min, which the file rounds to
 * fp16).  g_idx[in] gives the group of each input column when the groups are not consecutive
 * (GPTQ's act-order with dynamic groups), else it is NULL and column j is in group j / group.
 * An exporter writes each weight's code on this grid and checks that the code dequantizes to the
 * weight exactly. */
typedef struct lmp_wgrid {
    lmp_wspec spec;
    int64_t n_scales;
    float *scales;             /* [n_scales] */
    float *zeros;              /* [n_scales], NULL when spec.sym */
    int32_t *g_idx;            /* [in] or NULL */
} lmp_wgrid;

/* The slice of weight (r, c) of an [out, in] linear on grid g: its index into scales and zeros. */
static inline int64_t lmp_wgrid_slice(const lmp_wgrid *g, int64_t in, int64_t r, int64_t c)
{
    const lmp_wspec *s = &g->spec;
    if (s->gran == LMP_GRAN_TENSOR) return 0;
    if (s->gran == LMP_GRAN_CHANNEL) return r;
    if (s->gran == LMP_GRAN_BLOCK) return (r / s->group) * ((in + s->group - 1) / s->group) + c / s->group;
    return r * ((in + s->group - 1) / s->group) + (g->g_idx ? g->g_idx[c] : c / s->group);
}

typedef struct lmp_linear {
    const char *name;          /* e.g. "model.layers.3.self_attn.q_proj" */
    lmp_role role;
    int64_t out, in;
    float *w;                  /* [out, in], the block's working copy: strategies rewrite it */
    float *b;                  /* [out] or NULL */
    lmp_aspec act;             /* simulated quantization of this linear's input */
    double weight_bits;        /* storage bits per weight, scales included (32 = unquantized) */
    const lmp_value *params;   /* this stage's parameters for this linear; NULL = not targeted */
    const lmp_stats *stats;    /* statistics the stage asked for; NULL if none */
    /* ABI 1.1: an explicit per-channel affine on the input, x -> (x - in_shift) / in_scale,
     * run before the activation quantization (PaddleSlim's ShiftSmoothHelpLayer).  Either may be
     * NULL (0 and 1).  Only linears no norm feeds have one; add it with host->add_input_affine. */
    float *in_shift, *in_scale; /* [in] */
    /* ABI 2.0: an N:M sparsity pattern, 1 = kept, 0 = pruned (and the weight is exactly 0);
     * NULL = dense.  Set with host->set_mask; a later stage keeps pruned weights at 0. */
    uint8_t *mask;             /* [out, in] */
    int sparse_n, sparse_m;    /* at most sparse_n nonzeros in each sparse_m consecutive inputs */
    /* ABI 2.0: W z for the input affine's shift, kept in double (host->add_input_affine fills
     * it; NULL if there is no shift).  The forward adds it to the output in double: see
     * core/model/forward.c for why it is not folded into the f32 bias. */
    double *shift_bias;        /* [out] */
    /* ABI 4.0: the grid the weights were quantized onto, NULL when no stage recorded one (set
     * with host->set_weight_grid; an edit of W by the host drops it). */
    lmp_wgrid *grid;
    /* ABI 5: the MLP this linear belongs to, and for a routed expert its index.  Its statistics
     * come from the calibration tokens the router sent to it (stats->n_tokens of them; with
     * calibration.experts = "all", every token). */
    lmp_expert_kind expert_kind;
    int expert;
    /* ABI 5, the host's record (read only): the calibration tokens a routed expert's statistics
     * came from in its last observing stage (-1: none observed), and whether it got the declared
     * fallback for too few of them (calibration.expert_min_tokens: its Hessian the identity, so
     * GPTQ rounds it to its grid as RTN would). */
    int64_t calib_tokens;
    int calib_fallback;
} lmp_linear;

/* gpt-oss's attention sinks (one learned logit per head) are held as the block's last lmp_norm
 * ("model.layers.N.self_attn.sinks", dim = heads, n_fed 0): a strategy that rewrites norm weights
 * must touch only those that feed the linears it folds into (n_fed > 0), as awq and the rotations do. */
typedef struct lmp_norm {
    const char *name;          /* e.g. "model.layers.3.input_layernorm" */
    int64_t dim;
    float *w;                  /* [dim] */
    float *b;                  /* [dim] or NULL.  An RMSNorm may have one too: added after it
                                * (host->fold_norm_shift creates it) */
    int n_fed;
    int *fed;                  /* ABI 5: [n_fed] indices into lmp_block.linears of the linears this
                                * norm feeds (the host's: read only); NULL when n_fed is 0 */
} lmp_norm;

/* ABI 6.0: the KV cache's simulated quantization (docs/formats.md "KV cache").  K (after RoPE,
 * and after the online rotation R3 when there is one) and V are quantized where attention reads
 * them, as compressed-tensors' QuantizedKVCache does with a kv_cache_scheme: per slice (the whole
 * of K, or one KV head's [T, head_dim]) with scale s,
 *   FP8 E4M3:  x' = e4m3(clamp(x / s, -448, 448)) * s    (round to nearest even, torch's cast)
 *   INT8:      x' = clamp(round_half_even(x / s), -128, 127) * s
 *   INT4:      x' = clamp(round_half_even(x / s), -8, 7) * s                       (ABI 6.3)
 * s = amax / 448 (FP8), amax / 127.5 (INT8) or amax / 7.5 (INT4: compressed-tensors'
 * calculate_qparams, bit range 255 or 15 over 2), f32's eps where amax is 0; amax is the slice's
 * abs-max over the calibration tokens (static: k_scale, v_scale hold s) or over the window itself
 * (dynamic).  ABI 6.3: per_head = LMP_KV_PER_TOKEN_HEAD makes each token's [head_dim] of one KV
 * head a slice, dynamic only: how QuaRot and SpinQuant quantize a 4-bit cache (a value, not a new
 * field, because lmp_block is handed over as an array and must not grow). */
typedef enum { LMP_KV_NONE = 0, LMP_KV_FP8_E4M3 = 1, LMP_KV_INT8 = 2, LMP_KV_INT4 = 3 } lmp_kv_type;
#define LMP_KV_MAX_HEADS 256
#define LMP_KV_PER_TOKEN_HEAD 2
typedef struct lmp_kvspec {
    lmp_kv_type type;
    int per_head;              /* 1: a scale per KV head; LMP_KV_PER_TOKEN_HEAD: per token and KV head;
                                * 0: one for all of K (one for V) */
    int dynamic;               /* scales from each window's own abs-max, else k_scale / v_scale */
    float k_scale[LMP_KV_MAX_HEADS], v_scale[LMP_KV_MAX_HEADS]; /* static: [n_kv_heads] or [1] */
} lmp_kvspec;

typedef struct lmp_block {
    int index;                 /* 0-based block number */
    int n_blocks;              /* blocks in the model */
    int n_linears;
    lmp_linear *linears;
    int n_norms;
    lmp_norm *norms;
    /* ABI 5: routed experts in this block and how many each token goes through (0, 0: a dense
     * block); its linears include the router and E x {gate, up, down} expert linears. */
    int n_experts, n_experts_used;
    /* ABI 6.0: the KV cache's simulated quantization (type LMP_KV_NONE: none), the host's */
    lmp_kvspec kv;
} lmp_block;

/* ---- learning within a block (ABI 4.3; docs/plugin-guide.md, "Strategies that learn") ---- */
typedef enum { LMP_OPT_SIGN_SGD = 0, LMP_OPT_ADAM = 1 } lmp_optimizer;
typedef enum { LMP_LR_CONSTANT = 0, LMP_LR_LINEAR = 1, LMP_LR_COSINE = 2 } lmp_lr_schedule;
typedef enum { LMP_LOSS_KL = 0, LMP_LOSS_CE = 1 } lmp_loss;

/* How to learn.  Step s (0-based) uses the rate lr * f(s): constant f = 1, linear
 * f = 1 - s/steps (to 0, as AutoRound's LinearLR), cosine f = (1 + cos(pi s/steps)) / 2.
 * Signed SGD: p -= lr sign(g).  Adam: the usual bias-corrected moments. */
typedef struct lmp_learn_spec {
    lmp_optimizer optimizer;
    lmp_lr_schedule schedule;
    int64_t steps;
    int64_t batch;             /* calibration windows per step, drawn without replacement with the
                                * host's seeded RNG; 0, or more than there are: all of them */
    double lr;
    double beta1, beta2, eps;  /* Adam; 0 means 0.9, 0.999, 1e-8 */
    int keep_best;             /* end with the parameters of the step whose batch loss was least
                                * (AutoRound's choice), rather than the last ones */
    lmp_loss loss;             /* learn_model only: LMP_LOSS_KL (distillation, 0) or LMP_LOSS_CE */
    int64_t seq_len;           /* learn_model only: train on pieces of this many tokens cut from the
                                * calibration windows (each window's shorter tail dropped); 0: whole
                                * windows */
} lmp_learn_spec;

/* What a plugin learns, and how its parameters make the block's weights.  The host owns the
 * loop; the plugin owns the parameters and the map from them to W (e.g. fake quantization with a
 * straight-through estimator). */
typedef struct lmp_learn_problem {
    int n_params;
    float *const *params;      /* [n_params] arrays the optimizer updates in place */
    const int64_t *sizes;      /* [n_params] their lengths */
    float *const *grads;       /* [n_params] same lengths: the host zeroes them before each step,
                                * pullback adds to them */
    const uint8_t *linears;    /* ABI 5: [blk->n_linears], nonzero: blk->linears[i] is learned
                                * (its dL/dW is wanted) */
    /* Writes the linears' weights from the parameters: what the forward then runs. */
    int (*materialize)(void *ud, lmp_block *blk);
    /* Adds dL/dparameters given dL/dW: dw[i] [out, in] for each learned linear i, else NULL. */
    int (*pullback)(void *ud, const lmp_block *blk, float *const *dw);
    /* After every step: bring the parameters back into their ranges.  May be NULL. */
    void (*project)(void *ud);
    void *ud;
} lmp_learn_problem;

typedef struct lmp_learn_result {
    double loss_first;         /* the loss over all windows before the first step: the block-output
                                * MSE (learn_block), the model's KL or cross-entropy (learn_model) */
    double loss_final;         /* the same with the parameters kept */
    double best_batch_loss;    /* the least batch loss seen, and its step */
    int64_t best_step;
    double seconds;
} lmp_learn_result;

/* ---- host services ---------------------------------------------------------------------- */
enum { LMP_LOG_ERROR = 0, LMP_LOG_WARN = 1, LMP_LOG_INFO = 2, LMP_LOG_DEBUG = 3 };

struct lmp_backend_i;

typedef struct lmp_host {
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;
    void (*log)(void *ctx, int level, const char *fmt, ...);
    /* Stores the message and returns status, so `return host->set_error(ctx, LMP_EINVAL, ...)`. */
    int (*set_error)(void *ctx, int status, const char *fmt, ...);
    void *(*alloc)(void *ctx, size_t n);      /* zeroed, 64-byte aligned; NULL on failure */
    void (*free)(void *ctx, void *p);
    void (*progress)(void *ctx, const char *what, int64_t done, int64_t total);
    uint64_t (*rng_u64)(void *ctx);           /* seeded from the config */
    /* The active backend; *self receives its instance for the vtable's calls. */
    const struct lmp_backend_i *(*backend)(void *ctx, void **self);
    /* Block editing: multiply the norm's output channel j by 1/s[j] (w and b) and input column j
     * of every linear it feeds by s[j]; the block's function is unchanged. */
    int (*fold_norm_scale)(void *ctx, lmp_block *blk, int norm, const float *s);
    /* ABI 1.1.  Subtract z[j] from the norm's output channel j (its bias; an RMSNorm gets a zero
     * bias first) and add W z to the bias of every linear it feeds (a zero bias is created where
     * there is none): the block's function is unchanged (docs/algorithms.md §2.2). */
    int (*fold_norm_shift)(void *ctx, lmp_block *blk, int norm, const float *z);
    /* ABI 1.1.  For a linear no norm feeds (o, down): shift_bias += W z, then W <- W diag(s), and
     * x -> (x - z) / s runs on its input after any earlier input affine (the two are composed
     * into lmp_linear.in_shift/in_scale).  z or s may be NULL (no shift, no scale).  The block's
     * function is unchanged. */
    int (*add_input_affine)(void *ctx, lmp_block *blk, int linear, const float *z, const float *s);
    /* ABI 2.0.  Give the linear the pattern mask[out, in] (copied; 1 = kept), checking that
     * every group of m consecutive inputs of a row (the last may be shorter) keeps at most n,
     * and zero the pruned weights.  Replaces an earlier mask. */
    int (*set_mask)(void *ctx, lmp_block *blk, int linear, const uint8_t *mask, int n, int m);
    /* ABI 4.0.  Record that the linear's weights now lie on this grid (copied: spec, scales and,
     * when asymmetric, zeros as choose_weight_grid laid them out; g_idx[in] or NULL as in
     * lmp_wgrid).  Every plugin that quantizes weights calls it, so that an export writes the
     * codes and scales the strategy chose.  Replaces an earlier grid. */
    int (*set_weight_grid)(void *ctx, lmp_block *blk, int linear, const lmp_wspec *spec, const float *scales,
                           const float *zeros, const int32_t *g_idx);
    /* ABI 4.3 (check struct_size before calling).  From apply() of a stage that asked for
     * LMP_NEED_CALIB_INPUTS: learn p's parameters so that blk's output matches the unmodified
     * block's (block blk->index as the model has it, before any stage) on the calibration inputs
     * the stage was given, by block-output MSE, backpropagated through the block (core/train) and
     * stepped with spec's optimizer and schedule.  Memory: the block, its gradients and the
     * unmodified outputs, n_windows x T x dim floats.  On return p's parameters are the kept
     * ones and materialize has written them into blk. */
    int (*learn_block)(void *ctx, lmp_block *blk, const lmp_learn_spec *spec, const lmp_learn_problem *p,
                       lmp_learn_result *out);
    /* ABI 4.3.  From finish() of a stage that asked for LMP_NEED_WHOLE_MODEL: learn p's
     * parameters end to end over blocks[0..n_blocks) on the calibration windows, by distillation
     * (KL of the model's next-token distribution to the unmodified model's, averaged over every
     * position) or, with p's loss LMP_LOSS_CE, next-token cross-entropy.  materialize and
     * pullback are called once per block (blk->index says which; the same linears bit set for
     * every block).  The losses in *out are over all calibration windows.  Memory: the
     * variant's blocks, the unmodified model's (f32), one tape per block of one window, the
     * gradients of the learned linears, and p's own parameters. */
    int (*learn_model)(void *ctx, lmp_block *blocks, int n_blocks, const lmp_learn_spec *spec,
                       const lmp_learn_problem *p, lmp_learn_result *out);
} lmp_host;

/* ---- backend interface ------------------------------------------------------------------ */
/* Coarse operations on host f32 memory.  A device backend stages data itself.  Any entry may
 * be NULL or return LMP_EUNSUPPORTED; the host then runs the CPU backend's version. */
typedef enum { LMP_REDUCE_ABSMAX = 0, LMP_REDUCE_MIN = 1, LMP_REDUCE_MAX = 2, LMP_REDUCE_SUM = 3 } lmp_reduce;

/* The backend operations, written once: OP(name, (parameters after self), (their names), n_flops),
 * n_flops being the floating-point operations of one call where the host counts them (else 0).
 * lmp_backend_i gets one entry `int (*name)(void *self, parameters...)` per line, in this order;
 * the core generates its dispatching wrappers, the vtable it hands to strategies, the op names
 * and the per-op counters from the same list (core/plugin/backend.c).  Adding an operation is a
 * line here plus the backends that implement it (the CPU backend, the fallback, must).  Every
 * op returns LMP_OK or a negative LMP_E* status. */
#define LMP_BACKEND_OPS(OP)                                                                       \
    /* C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C; ta/tb != 0 transposes (row-major). */    \
    OP(gemm, (int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,         \
             int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc),         \
      (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), 2.0 * (double)M * (double)N * (double)K) \
    /* H[c,c] += alpha * X^T X for X[n,c]; both triangles are written. */                          \
    OP(xtx_accum, (int64_t n, int64_t c, const float *X, float alpha, float *H), (n, c, X, alpha, H), \
      (double)n * (double)c * (double)(c + 1)) /* SYRK's count */                                  \
    /* In place A[n,n] = L L^T, L lower; the strict upper triangle is zeroed.  On failure returns  \
     * LMP_ENOTSPD and, if bad_pivot != NULL, the 0-based failing column. */                       \
    OP(cholesky, (int64_t n, float *A, int64_t *bad_pivot), (n, A, bad_pivot), 0)                   \
    /* Given the lower Cholesky factor L[n,n], overwrite it with (L L^T)^-1 (full, symmetric). */  \
    OP(chol_inverse, (int64_t n, float *L), (n, L), 0)                                              \
    /* B[n,nrhs] <- L^-1 B (trans = 0) or L^-T B (trans = 1), L[n,n] lower triangular. */          \
    OP(trsm_lower, (int trans, int64_t n, int64_t nrhs, const float *L, float *B),                  \
      (trans, n, nrhs, L, B), 0)                                                                   \
    /* out[T,C] = x / sqrt(mean(x^2) + eps) * w, per row. */                                       \
    OP(rmsnorm, (int64_t T, int64_t C, const float *x, const float *w, float eps, float *out),      \
      (T, C, x, w, eps, out), 0)                                                                   \
    /* Rotary embedding in place on x[T, n_heads*head_dim], row t at position pos0+t, rotating     \
     * the adjacent pairs (2i, 2i+1) of each head by angle pos * theta^(-2i/head_dim). */          \
    OP(rope, (int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta, float *x),   \
      (T, n_heads, head_dim, pos0, theta, x), 0)                                                   \
    /* Causal attention: q[T, nh*hd], k,v[T, nkv*hd] -> out[T, nh*hd]; head h reads kv head        \
     * h / (nh/nkv); scores scaled by 1/sqrt(hd). */                                               \
    OP(attention, (int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, const float *q,      \
                  const float *k, const float *v, float *out),                                     \
      (T, n_heads, n_kv_heads, hd, q, k, v, out), 0)                                               \
    /* out[i] = silu(gate[i]) * up[i] */                                                           \
    OP(swiglu, (int64_t n, const float *gate, const float *up, float *out), (n, gate, up, out), 0)  \
    /* out[r,:] = log_softmax(x[r,:]) */                                                           \
    OP(log_softmax, (int64_t rows, int64_t cols, const float *x, float *out), (rows, cols, x, out), 0) \
    /* Accumulating column reduction of X[n,c] into out[c]: max/min fold into out, SUM adds.       \
     * ABSMAX folds max|x|.  The caller initialises out. */                                        \
    OP(reduce_cols, (lmp_reduce kind, int64_t n, int64_t c, const float *X, float *out),            \
      (kind, n, c, X, out), 0)                                                                     \
    /* The grid of every slice of W[rows, cols] (only read): scales[] and, when asymmetric,        \
     * zeros[] get lmp_wspec_n_scales() entries (zeros may be NULL when sym: untouched). */        \
    OP(choose_weight_grid, (const lmp_wspec *spec, int64_t rows, int64_t cols, const float *W,     \
                           float *scales, float *zeros),                                           \
      (spec, rows, cols, W, scales, zeros), 0)                                                     \
    /* W <- its dequantized values on the given grid (scales, and zeros when asym, as              \
     * choose_weight_grid lays them out); codes[rows, cols] (NULL: not wanted) the integer codes.  \
     * choose_weight_grid then apply_weight_grid is RTN. */                                        \
    OP(apply_weight_grid, (const lmp_wspec *spec, int64_t rows, int64_t cols, float *W,            \
                          const float *scales, const float *zeros, int32_t *codes),                \
      (spec, rows, cols, W, scales, zeros, codes), 0)                                              \
    /* Fake-quantize activations X[T, C] in place on the grid of *spec (mode != NONE). */          \
    OP(quantize_act, (const lmp_aspec *spec, int64_t T, int64_t C, float *X), (spec, T, C, X), 0)   \
    /* out[T,C] = (x - mean) / sqrt(var + eps) * w + b per row (biased variance; b may be NULL). */ \
    OP(layernorm, (int64_t T, int64_t C, const float *x, const float *w, const float *b, float eps, \
                  float *out),                                                                     \
      (T, C, x, w, b, eps, out), 0)                                                                \
    /* out[i] = gelu(x[i]), tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */         \
    OP(gelu, (int64_t n, const float *x, float *out), (n, x, out), 0)                               \
    /* ABI 4.3.  The gradients of `attention` (same shapes and head mapping) for the gradient      \
     * dout[T, nh*hd] of its output: dq[T, nh*hd], dk[T, nkv*hd] and dv[T, nkv*hd] are            \
     * overwritten (a kv head sums over the query heads that read it).  The probabilities are      \
     * recomputed from q and k, so nothing of the forward is kept. */                              \
    OP(attention_backward, (int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,            \
                           const float *q, const float *k, const float *v, const float *dout,     \
                           float *dq, float *dk, float *dv),                                       \
      (T, n_heads, n_kv_heads, hd, q, k, v, dout, dq, dk, dv), 0)                                  \
    /* ABI 4.4.  Rotary embedding from a table, in place on x[T, n_heads*head_dim], row t at       \
     * position p = pos0+t: the adjacent pairs (2i, 2i+1) with i < n_rot/2 of each head turn by    \
     * the angle p * inv_freq[i] (the product rounded to f32, as transformers computes it) and are \
     * scaled by mscale (YaRN's and LongRoPE's attention factor); a head's dims from n_rot on are  \
     * left as they are (partial rotary).  RoPE scaling (linear, llama3, YaRN, LongRoPE) is only a \
     * different table; `rope` is inv_freq[i] = theta^(-2i/head_dim), n_rot = head_dim. */          \
    OP(rope_table, (int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0,      \
                    const float *inv_freq, float mscale, float *x),                                 \
      (T, n_heads, head_dim, n_rot, pos0, inv_freq, mscale, x), 0)                                 \
    /* ABI 4.4.  `attention` with a sliding window and soft-capped scores: query t reads keys j   \
     * with t - window < j <= t (window 0: every j <= t), each score s (already scaled by          \
     * 1/sqrt(hd)) taken as softcap * tanh(s / softcap) before the softmax (softcap 0: as is).    \
     * With window 0 and softcap 0 it is `attention`. */                                            \
    OP(attention_window, (int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window, \
                          float softcap, const float *q, const float *k, const float *v, float *out),  \
      (T, n_heads, n_kv_heads, hd, window, softcap, q, k, v, out), 0)                             \
    /* ABI 4.5.  The fast Walsh-Hadamard transform in place: each row of x[rows, n] <- row H / sqrt(n), \
     * H Sylvester's n×n Hadamard matrix (H_1 = [1], H_2k = [[H_k, H_k], [H_k, -H_k]]: entry (i, j) \
     * is (-1)^popcount(i & j)); n a power of 2, else LMP_EINVAL.  H / sqrt(n) is orthogonal and    \
     * its own inverse. */                                                                          \
    OP(hadamard, (int64_t rows, int64_t n, float *x), (rows, n, x), 0)

/* ABI 6.1: operations after lmp_backend_i's block_run and bytes_moved (a vtable built for 6.0 ends
 * before them: LMP_BACKEND_I_HAS says no, and the host runs the CPU backend's). */
#define LMP_BACKEND_OPS_6_1(OP)                                                                    \
    /* ABI 6.1.  `attention_window` without soft-cap, each score (already scaled by 1/sqrt(hd))    \
     * of query t on key j of head h biased by slopes[h] * (j - t) (ALiBi, Bloom; slopes[n_heads]). \
     * With every slope 0 it is attention_window with softcap 0. */                               \
    OP(attention_alibi, (int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window, \
                         const float *slopes, const float *q, const float *k, const float *v,      \
                         float *out),                                                              \
      (T, n_heads, n_kv_heads, hd, window, slopes, q, k, v, out), 0)

/* Every operation, in the order the host's tables list them. */
#define LMP_BACKEND_ALL_OPS(OP) LMP_BACKEND_OPS(OP) LMP_BACKEND_OPS_6_1(OP)

/* ---- a block on the device (ABI 4.5) ---------------------------------------------------- */
/* One block's forward as a program the core makes from the block's steps (core/model/
 * block_steps.h) with every weight resolved, for a backend that keeps the block on its device:
 * it uploads the weights once, runs the ops window after window on buffers of its own, folds the
 * statistics of the OBSERVE ops into device copies of the lmp_bstat arrays, and copies back only
 * the statistics (at the end) and, when y is not NULL, each window's output.  Buffers are
 * [T, buf_cols[i]] per window.  A backend answers LMP_EUNSUPPORTED (with a reason through
 * host->set_error, naming the op kind or the size) for anything it does not run; the core then
 * runs the block op by op, so an op kind added later is refused by a backend built before it. */
typedef enum {
    LMP_BOP_RMSNORM = 0,   /* out[T*rows, cols] = rmsnorm(in0; w, eps) (+ b per column when b) */
    LMP_BOP_LAYERNORM = 1, /* out[T, cols] = layernorm(in0; w, b, eps) */
    LMP_BOP_LINEAR = 2,    /* out[T, n_out] = in0[T, cols] W[n_out, cols]^T (+ b) */
    LMP_BOP_ROPE = 3,      /* in0[T, rows*head_dim] in place: pairs (2i, 2i+1), i < n_rot/2, of each
                            * of the rows heads turned by table[T, n_rot/2, 2] (cos, sin) */
    LMP_BOP_SCALE = 4,     /* in0[T, cols] *= scale, in place */
    LMP_BOP_ATTENTION = 5, /* out[T, heads*head_dim] = attention_window(q = in0, k = in1, v = in2;
                            * heads, kv_heads, head_dim, window, softcap) */
    LMP_BOP_SWIGLU = 6,    /* out = silu(in0) * in1, elementwise over [T, cols] */
    LMP_BOP_GEGLU = 7,     /* out = gelu_tanh(in0) * in1 */
    LMP_BOP_GELU = 8,      /* out = gelu_tanh(in0) */
    LMP_BOP_ADD = 9,       /* out = in0 + in1 */
    LMP_BOP_OBSERVE = 10,  /* fold in0[T, cols] into job->stats[stat] */
    LMP_BOP_KINDS
} lmp_bop_kind;

typedef struct lmp_bop {
    lmp_bop_kind kind;
    int in[3], out;             /* buffer indices; out is in[0] for the in-place ops */
    int64_t rows;               /* RMSNORM: rows per token (a q/k norm: the heads), else 1; ROPE: heads */
    int64_t cols;               /* columns of in[0] per row */
    int64_t n_out;              /* LINEAR: the output width */
    const float *w, *b;         /* the norm's weight and bias (b may be NULL); LINEAR: W, b (b may be NULL) */
    float eps, scale, softcap;
    int64_t window;             /* ATTENTION: keys after t - window (0: every earlier one) */
    int64_t heads, kv_heads, head_dim, n_rot;
    const float *table;         /* ROPE: [T, n_rot/2, 2], the same for every window */
    int stat;                   /* OBSERVE */
} lmp_bop;

/* One input's statistics over every token of every window; each array NULL when not wanted, else
 * initialised by the caller and folded into (max, min, absmax fold; sum, sqsum, hessian add). */
typedef struct lmp_bstat {
    int64_t cols;
    float *hessian;             /* [cols, cols] += alpha X^T X, both triangles */
    float alpha;
    float *absmax, *min, *max;  /* [cols] */
    float *sum, *sqsum;         /* [cols]: sum x and sum x^2 over the tokens */
} lmp_bstat;

#define LMP_BJOB_MAX_BUFS 24
typedef struct lmp_block_job {
    uint32_t struct_size;
    int64_t n_windows, T;
    int n_bufs;
    int64_t buf_cols[LMP_BJOB_MAX_BUFS];
    int n_ops;
    const lmp_bop *ops;
    int n_stats;
    lmp_bstat *stats;
    int x_buf, y_buf;           /* the block's input and output buffers */
    const float *x;             /* [n_windows, T, buf_cols[x_buf]] */
    float *y;                   /* [n_windows, T, buf_cols[y_buf]], or NULL: not wanted (y may be x) */
} lmp_block_job;

#define LMP_UNPAREN(...) __VA_ARGS__
#define LMP_BACKEND_I_ENTRY(name, params, args, n_flops) int (*name)(void *self, LMP_UNPAREN params);

typedef struct lmp_backend_i {
    uint32_t struct_size;
    int (*create)(const lmp_host *host, void *hctx, const lmp_value *params, void **self);
    void (*destroy)(void *self);
    LMP_BACKEND_OPS(LMP_BACKEND_I_ENTRY)
    /* ABI 4.5, optional (NULL: the core runs the block op by op).  Runs job (lmp_block_job). */
    int (*block_run)(void *self, const lmp_block_job *job);
    /* ABI 4.5, optional: bytes copied host -> device (moved[0]) and device -> host (moved[1])
     * since create(), for the benchmarks.  NULL for a backend with no device (the CPU's). */
    void (*bytes_moved)(void *self, uint64_t moved[2]);
    LMP_BACKEND_OPS_6_1(LMP_BACKEND_I_ENTRY)
} lmp_backend_i;

/* The size of an ABI 4.2 backend vtable: what the host requires of every backend.  An entry at
 * or past a vtable's struct_size is treated as NULL (LMP_BACKEND_I_HAS). */
#define LMP_BACKEND_I_MIN_SIZE offsetof(lmp_backend_i, attention_backward)
#define LMP_BACKEND_I_HAS(vt, name) \
    (offsetof(lmp_backend_i, name) < (vt)->struct_size && (vt)->name != NULL)

/* ---- strategy interface ----------------------------------------------------------------- */
typedef struct lmp_strategy_i {
    uint32_t struct_size;
    /* Optional per-stage state; params are the stage's validated values.  May be NULL. */
    int (*create)(const lmp_host *host, void *hctx, const lmp_value *params, void **self);
    void (*destroy)(void *self);
    /* Which LMP_STAT_* the stage needs on the input of a linear with these parameters. */
    uint32_t (*needs)(void *self, const lmp_value *params);
    /* Rewrite the block: every linear with params != NULL is targeted by this stage. */
    int (*apply)(void *self, const lmp_host *host, void *hctx, lmp_block *blk);
    /* ABI 1.1, may be NULL: rows of the token sample LMP_STAT_SAMPLE asks for. */
    int64_t (*sample_tokens)(void *self, const lmp_value *params);
    /* ABI 4.3, may be NULL: for a stage that asked for LMP_NEED_WHOLE_MODEL, called once after
     * apply() has run on every block, with all the variant's blocks and each targeted linear's
     * params set as for apply() (the stage must be the variant's last). */
    int (*finish)(void *self, const lmp_host *host, void *hctx, lmp_block *blocks, int n_blocks);
} lmp_strategy_i;

/* The size of an ABI 1.0 strategy vtable: what the host requires of every strategy. */
#define LMP_STRATEGY_I_MIN_SIZE offsetof(lmp_strategy_i, sample_tokens)

/* ---- the descriptor --------------------------------------------------------------------- */
typedef enum { LMP_PLUGIN_STRATEGY = 1, LMP_PLUGIN_BACKEND = 2 } lmp_plugin_kind;

typedef struct lmp_plugin_desc {
    uint32_t struct_size;      /* sizeof(lmp_plugin_desc) when the plugin was built */
    uint16_t abi_major, abi_minor;
    lmp_plugin_kind kind;
    const char *name;          /* unique: "rtn", "cpu" */
    const char *version;       /* the plugin's own version */
    const char *summary;
    const lmp_param_spec *params;
    uint32_t n_params;
    const void *vtable;        /* const lmp_strategy_i * or const lmp_backend_i * */
    /* > 0: usable here; 0: not here (reason through host->set_error).  NULL: always usable. */
    int (*probe)(const lmp_host *host, void *hctx);
} lmp_plugin_desc;

typedef const lmp_plugin_desc *(*lmp_plugin_entry_fn)(void);

/* Every plugin defines exactly this, returning a pointer to static data. */
LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void);

#ifdef __cplusplus
}
#endif
#endif /* LMPRESS_PLUGIN_H */
