/* wgrid.h — the weight-grid schema every weight-quantizing plugin shares (rtn, gptq, sparse24),
 * its reader, its storage cost, and wgrid_quantize_linear, choose + apply + record in one call.
 *
 * One schema, one set of defaults, so that `sym`, `granularity`, ... mean the same and default
 * the same in every stage of a config:
 *   bits         2..8.  The default and the top of the range depend on the plugin's purpose,
 *                which is why they are the macro's arguments: quantizers default to 4 (rtn:
 *                2..8, its `weights` switch turns it off; gptq: 16 = leave the weights as they
 *                are); sparse24 defaults to 16, prune only (2..8 quantizes the survivors).
 *   sym          true: symmetric grid, no zero-point; false: the asymmetric min-max grid with a
 *                zero-point (the GPTQ reference's).
 *   sym_scale    qmax | full | signed: the symmetric grid's scale (plugin.h LMP_SYM_*).  qmax:
 *                abs-max/(2^(b-1)-1), the largest weight on level ±(2^(b-1)-1), the level
 *                -2^(b-1) unused (PaddleSlim's; lmpress's default).  full: abs-max/((2^b-1)/2),
 *                all 2^b levels (the GPTQ reference's sym with zero point 2^(b-1), and
 *                compressed-tensors' / llm-compressor's symmetric int).  signed: the largest
 *                weight, with its sign, exactly on level -2^(b-1) (ggml's Q4_0 rule at any bits).
 *   granularity  tensor | channel | group | block, default channel (the OBS solver of gptq and
 *                sparse24 works row by row, so they refuse tensor: wgrid_check_solver).  block
 *                (ABI 6.2): fp8_e4m3 / fp8_e5m2 only, a scale per group_size x group_size tile
 *                (compressed-tensors' strategy "block"; FP8_BLOCK is 128 x 128).
 *   group_size   128 (the tile's side with granularity block).
 *   rounding     half_even | half_away, default half_even.
 *   clip         1: the ratio of the range the grid spans (plugin.h's lmp_wspec.clip).
 *   format       int (the grid above) | q8_0 | q4_0 | q4_1: a GGUF block format, the grid the
 *                file stores (plugin.h).  A GGUF format implies bits (8, 4, 4), sym (Q4_1 has a
 *                min), granularity group and group_size 32, and rounds as ggml does: it
 *                overrides bits, sym, granularity, group_size and rounding (gptq and sparse24's
 *                bits = 16 default does not turn it off); clip still applies.  q5_0, q5_1 and
 *                iq4_nl likewise (5, 5 and 4 bits; IQ4_NL's 16 non-uniform levels).  q2_k, q3_k,
 *                q4_k, q5_k, q6_k: the k-quants (plugin_kquants.h), sub-blocks of 16 or 32 inputs
 *                in super-blocks of 256 (2.625, 3.4375, 4.5, 5.5, 6.5625 bits per weight; clip
 *                must be 1).  A linear whose rows are not a multiple of 256 wide gets what
 *                llama-quantize stores then (lmp_wformat_fallback: q2_k, q3_k -> q4_0,
 *                q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0): wgrid_spec_for.  nf4: bitsandbytes'
 *                NF4 (QLoRA's 16 normal-quantile levels, blocks of 64 with an f32 abs-max: 4.5
 *                bits; clip must be 1, no importance, no file format lmpress writes).
 *                fp8_e4m3, fp8_e5m2: FP8 codes with one scale per slice of granularity /
 *                group_size (tensor, channel or group; the solver's plugins refuse tensor) in
 *                scale_dtype, as compressed-tensors quantizes them (plugin_fpquants.h); bits,
 *                sym and rounding are implied.  nvfp4: E2M1 in groups of 16 with E4M3 scales and
 *                the tensor's global scale; mxfp4, mxfp8: E2M1 / E4M3 in groups of 32 with E8M0
 *                scales (granularity, group_size and scale_dtype implied).  clip applies.
 *                gguf_mxfp4, gguf_nvfp4, q1_0, q2_0: ggml's GGUF types of those names, as its
 *                reference quantizers store them (plugin_fpquants.h: MXFP4 blocks of 32 with an
 *                E8M0 scale, NVFP4 sub-blocks of 16 with a UE4M3 scale and no global scale, Q1_0
 *                signs times the mean |w| of 128, Q2_0 levels -1..2 times the abs-max of 64:
 *                4.25, 4.5, 1.125 and 2.25 bits per weight); no clip, no importance.
 *   importance   none | uniform | calibration | imatrix: GGUF formats only.  none: ggml's reference
 *                grid (llama-quantize without an importance matrix).  calibration: each block's
 *                scale (and min) searched to minimise the error weighted per input column by the
 *                calibration's sum of x^2 over tokens (llama.cpp's imatrix on the same text), as
 *                llama-quantize does with --imatrix (plugin.h lmp_wgrid_fit_block_imp).  uniform:
 *                the same search with every column weighted 1.  imatrix: the same search weighted
 *                by a llama.cpp importance-matrix file the config names (`imatrix = "file";`),
 *                which the host hands over as lmp_stats.imatrix (LMP_STAT_IMATRIX, ABI 4.2): the
 *                weights llama-quantize --imatrix would use with that file, no calibration run.
 *                Needs clip = 1.
 * WGRID_PARAMS(...) expands to the WGRID_COUNT entries in the order of the WGRID_* enum; a
 * plugin puts them anywhere in its schema and hands wgrid_spec a pointer to the first value.
 * The choice lists are static: each file that includes this has its copy. */
#ifndef LMP_PLUGIN_WGRID_H
#define LMP_PLUGIN_WGRID_H

#include "lmpress/plugin.h"

enum {
    WGRID_BITS, WGRID_SYM, WGRID_GRAN, WGRID_GROUP, WGRID_ROUND, WGRID_CLIP, WGRID_FORMAT, WGRID_SCALE_DTYPE,
    WGRID_IMPORTANCE, WGRID_SYM_SCALE, WGRID_COUNT
};
enum { WGRID_IMP_NONE, WGRID_IMP_UNIFORM, WGRID_IMP_CALIBRATION, WGRID_IMP_IMATRIX };

/* In lmp_granularity's order, so the index is the enum value. */
static const char *const wgrid_gran_choices[] = {"tensor", "channel", "group", "block", NULL};
/* In lmp_rounding's order. */
static const char *const wgrid_round_choices[] = {"half_even", "half_away", NULL};
/* In lmp_wformat's order. */
static const char *const wgrid_format_choices[] = {"int",  "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl",
                                                   "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "nf4",
                                                   "fp8_e4m3", "fp8_e5m2", "nvfp4", "mxfp4", "mxfp8",
                                                   "gguf_mxfp4", "gguf_nvfp4", "q1_0", "q2_0", NULL};
/* In lmp_scale_type's order. */
static const char *const wgrid_scale_dtype_choices[] = {"f32", "f16", "bf16", NULL};
/* In LMP_SYM_*'s order, from LMP_SYM_QMAX. */
static const char *const wgrid_sym_scale_choices[] = {"qmax", "full", "signed", NULL};
/* In WGRID_IMP_*'s order. */
static const char *const wgrid_importance_choices[] = {"none", "uniform", "calibration", "imatrix", NULL};

/* default_bits, max_bits (8, or 16 where 16 means "no grid") and bits_help differ by purpose;
 * everything else is the same for every plugin. */
#define WGRID_PARAMS(default_bits, max_bits, bits_help)                                              \
    {"bits", LMP_PARAM_INT, bits_help, default_bits, NULL, 2, max_bits, NULL, 0},                    \
    {"sym", LMP_PARAM_BOOL,                                                                          \
     "symmetric grid (levels -2^(b-1)..2^(b-1)-1, scale as sym_scale says); false: asymmetric "      \
     "min-max grid containing 0 with a zero-point (levels 0..2^b-1), the GPTQ reference's", 1, NULL, \
     0, 1, NULL, 0},                                                                                 \
    {"granularity", LMP_PARAM_ENUM,                                                                  \
     "one grid per tensor, per output channel (row of W[out,in]), per group of group_size "          \
     "input columns of a row, or (fp8 formats) per group_size x group_size block of W", 1, NULL, 0, \
     0, wgrid_gran_choices, 0},                                                                      \
    {"group_size", LMP_PARAM_INT,                                                                    \
     "input columns per group when granularity = \"group\" (a shorter last group is allowed); the "  \
     "block's side when \"block\"", 128,                                                              \
     NULL, 1, 1 << 20, NULL, 0},                                                                     \
    {"rounding", LMP_PARAM_ENUM,                                                                     \
     "half_even (numpy/torch, GPTQ, SmoothQuant) or half_away (paddle.round, C roundf)", 0, NULL, 0, \
     0, wgrid_round_choices, 0},                                                                     \
    {"clip", LMP_PARAM_FLOAT,                                                                        \
     "ratio of each slice's range the grid spans (sym: clip * abs-max; asym: clip * min and max); "  \
     "the weights beyond it saturate", 1.0, NULL, 0.01, 1.0, NULL, 0},                               \
    {"format", LMP_PARAM_ENUM,                                                                       \
     "int: the grid of bits/sym/granularity; q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl: GGUF's blocks of " \
     "32 inputs with an fp16 scale (and min), quantized as ggml does (overrides bits, sym, "          \
     "granularity, group_size, rounding; rows must be a multiple of 32 wide); q2_k .. q6_k: the "     \
     "k-quants' super-blocks of 256 (rows not a multiple of 256 wide take llama-quantize's "          \
     "fallback: q4_0, q4_0, q5_0, q5_1, q8_0); nf4: bitsandbytes' NF4, blocks of 64; fp8_e4m3, "       \
     "fp8_e5m2: FP8 with a scale per slice of granularity (scale_dtype); nvfp4: E2M1, groups of 16, "  \
     "E4M3 scales and a global scale; mxfp4, mxfp8: E2M1 / E4M3, groups of 32, E8M0 scales (as "       \
     "compressed-tensors rounds them); gguf_mxfp4, gguf_nvfp4, q1_0, q2_0: ggml's GGUF types (its "     \
     "reference quantizers)", 0, NULL, 0, 0,                                                           \
     wgrid_format_choices, 0},                                                                       \
    {"scale_dtype", LMP_PARAM_ENUM,                                                                  \
     "int grids: the type the scales are rounded to and stored in (compressed-tensors keeps them in "\
     "the model's dtype: bf16 or f16 for vLLM); the weights are coded with the rounded scale", 0,    \
     NULL, 0, 0, wgrid_scale_dtype_choices, 0},                                                      \
    {"importance", LMP_PARAM_ENUM,                                                                   \
     "GGUF formats: none (ggml's reference grid); calibration (each block's scale searched for the "  \
     "least error weighted by the calibration's sum of x^2 per input, as llama-quantize --imatrix); " \
     "uniform (the same search, unweighted); imatrix (the same search weighted by the llama.cpp "     \
     "importance matrix the config names with imatrix = \"file\", as llama-quantize --imatrix file)", \
     0, NULL, 0, 0, wgrid_importance_choices, 0},                                                    \
    {"sym_scale", LMP_PARAM_ENUM,                                                                    \
     "sym grids: qmax (scale = absmax/(2^(b-1)-1)); full (absmax/((2^b-1)/2): all 2^b levels, the "   \
     "GPTQ reference's and compressed-tensors' symmetric int); signed (the largest weight exactly on "\
     "level -2^(b-1), ggml's Q4_0 rule)", 0, NULL, 0, 0, wgrid_sym_scale_choices, 0}

/* The format the values name (index = lmp_wformat). */
static inline lmp_wformat wgrid_format(const lmp_value *p) { return (lmp_wformat)(int)p[WGRID_FORMAT].num; }

static inline int wgrid_importance(const lmp_value *p) { return (int)p[WGRID_IMPORTANCE].num; }

/* The statistics the grid needs: Σx² per input for importance = calibration, the importance
 * matrix's vector for importance = imatrix (read from its file: no calibration). */
static inline uint32_t wgrid_needs(const lmp_value *p)
{
    const int kind = wgrid_importance(p);
    return kind == WGRID_IMP_CALIBRATION ? LMP_STAT_SQSUM : kind == WGRID_IMP_IMATRIX ? LMP_STAT_IMATRIX : 0;
}

/* importance or sym_scale with a grid they do not apply to: 0, or host->set_error's status
 * naming `where`. */
static inline int wgrid_check_options(const lmp_host *host, void *hctx, const lmp_value *p, const char *plugin,
                                      const char *where)
{
    if ((int)p[WGRID_GRAN].num == LMP_GRAN_BLOCK && wgrid_format(p) != LMP_WFORMAT_FP8_E4M3 &&
        wgrid_format(p) != LMP_WFORMAT_FP8_E5M2)
        return host->set_error(hctx, LMP_EINVAL,
                               "%s: %s: granularity = \"block\" (a scale per group_size x group_size tile) takes "
                               "format fp8_e4m3 or fp8_e5m2, not %s", plugin, where,
                               lmp_wformat_name(wgrid_format(p)));
    if (p[WGRID_SYM_SCALE].num != 0 && (!p[WGRID_SYM].num || wgrid_format(p) != LMP_WFORMAT_INT))
        return host->set_error(hctx, LMP_EINVAL, "%s: %s: sym_scale applies to the int grid with sym = true", plugin,
                               where);
    if (!lmp_wformat_takes_clip(wgrid_format(p)) && p[WGRID_CLIP].num != 1.0)
        return host->set_error(hctx, LMP_EINVAL, "%s: %s: format %s chooses its scales itself: leave clip at 1 (it is %g)",
                               plugin, where, lmp_wformat_name(wgrid_format(p)), p[WGRID_CLIP].num);
    if (wgrid_importance(p) == WGRID_IMP_NONE) return 0;
    if (wgrid_format(p) == LMP_WFORMAT_INT || wgrid_format(p) == LMP_WFORMAT_NF4 || lmp_wformat_is_fp(wgrid_format(p)) ||
        lmp_wformat_is_ggml_new(wgrid_format(p)))
        return host->set_error(hctx, LMP_EINVAL,
                               "%s: %s: importance = \"%s\" searches GGUF block grids: set format to q4_0, q4_1, q5_0, "
                               "q5_1, iq4_nl or a k-quant, or importance = \"none\"", plugin, where,
                               wgrid_importance_choices[wgrid_importance(p)]);
    if (p[WGRID_CLIP].num != 1.0)
        return host->set_error(hctx, LMP_EINVAL,
                               "%s: %s: importance searches the scale itself: leave clip at 1 (it is %g)", plugin, where,
                               p[WGRID_CLIP].num);
    return 0;
}

/* The importance of each of l's inputs for p's importance, into *imp (host->alloc'd [l->in]; the
 * caller host->free's it): 1 (uniform), the calibration's Σx² (stats->sqsum, else the Hessian's
 * diagonal, which is proportional to it), or the importance matrix's vector (stats->imatrix).
 * *imp is NULL for none.  0, or the status of host->set_error (no statistics, out of memory)
 * naming the linear. */
static inline int wgrid_importance_new(const lmp_host *host, void *hctx, const lmp_value *p, const lmp_linear *l,
                                       float **imp)
{
    const int kind = wgrid_importance(p);
    *imp = NULL;
    if (kind == WGRID_IMP_NONE) return 0;
    const float *sq = l->stats ? l->stats->sqsum : NULL, *H = l->stats ? l->stats->hessian : NULL;
    const float *im = l->stats ? l->stats->imatrix : NULL;
    if (kind == WGRID_IMP_CALIBRATION && !sq && !H)
        return host->set_error(hctx, LMP_EINVAL, "%s: no calibration statistics for its importance", l->name);
    if (kind == WGRID_IMP_IMATRIX && !im) /* the host refuses that before any block; a host bug */
        return host->set_error(hctx, LMP_EINVAL, "%s: no importance-matrix entry was handed over", l->name);
    if (!(*imp = host->alloc(hctx, (size_t)l->in * sizeof **imp)))
        return host->set_error(hctx, LMP_ENOMEM, "%s: out of memory for its importance", l->name);
    for (int64_t j = 0; j < l->in; j++)
        (*imp)[j] = kind == WGRID_IMP_UNIFORM ? 1.0f : kind == WGRID_IMP_IMATRIX ? im[j] : sq ? sq[j] : H[j * l->in + j];
    return 0;
}

/* The grid of every slice of W[rows, cols] (leading dimension cols): the backend's
 * choose_weight_grid, or with an importance per input column imp[cols] (a GGUF format) each
 * 32-input block's grid searched on the host (lmp_wgrid_fit_block_imp, σ² from the block's row as
 * W holds it), or each k-quant super-block's (lmp_wgrid_fit_kblock). */
static inline int wgrid_choose(const lmp_backend_i *be, void *bs, const lmp_wspec *spec, int64_t rows, int64_t cols,
                               const float *W, const float *imp, float *scales, float *zeros)
{
    if (!imp || spec->format == LMP_WFORMAT_INT || cols % lmp_wformat_span(spec->format)) /* the backend refuses the last */
        return be->choose_weight_grid(bs, spec, rows, cols, W, scales, zeros);
    if (lmp_wformat_is_k(spec->format)) {
        const int64_t nsub = LMP_WFORMAT_KBLOCK / spec->group;
        for (int64_t r = 0, idx = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c += LMP_WFORMAT_KBLOCK, idx += nsub)
                lmp_wgrid_fit_kblock(spec, W + r * cols + c, imp + c, scales + idx, spec->sym ? NULL : zeros + idx);
        return LMP_OK;
    }
    int64_t idx = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = W + r * cols;
        float sum_x2 = 0;
        for (int64_t j = 0; j < cols; j++) sum_x2 += row[j] * row[j];
        const float sigma2 = sum_x2 / cols;
        for (int64_t c = 0; c < cols; c += LMP_WFORMAT_BLOCK, idx++) {
            float zero;
            lmp_wgrid_fit_block_imp(spec, row + c, imp + c, sigma2, &scales[idx], &zero);
            if (!spec->sym) zeros[idx] = zero;
        }
    }
    return LMP_OK;
}

/* p points at the first of the WGRID_COUNT values.  Returns 0 when there is no grid: bits 16
 * with format int.  A GGUF format gives lmp_wspec_for_format's spec whatever the other values. */
static inline int wgrid_spec(const lmp_value *p, lmp_wspec *spec)
{
    if (wgrid_format(p) == LMP_WFORMAT_FP8_E4M3 || wgrid_format(p) == LMP_WFORMAT_FP8_E5M2) {
        *spec = lmp_wspec_for_format(wgrid_format(p), (float)p[WGRID_CLIP].num);
        spec->gran = (lmp_granularity)(int)p[WGRID_GRAN].num;
        spec->group = (int64_t)p[WGRID_GROUP].num;
        spec->scale_type = (lmp_scale_type)(int)p[WGRID_SCALE_DTYPE].num;
        return 1;
    }
    if (wgrid_format(p) != LMP_WFORMAT_INT) {
        *spec = lmp_wspec_for_format(wgrid_format(p), (float)p[WGRID_CLIP].num);
        return 1;
    }
    *spec = (lmp_wspec){.bits = (int)p[WGRID_BITS].num,
                        .sym = p[WGRID_SYM].num != 0 ? LMP_SYM_QMAX + (int)p[WGRID_SYM_SCALE].num : 0,
                        .gran = (lmp_granularity)(int)p[WGRID_GRAN].num,
                        .group = (int64_t)p[WGRID_GROUP].num,
                        .rounding = (lmp_rounding)(int)p[WGRID_ROUND].num,
                        .clip = (float)p[WGRID_CLIP].num,
                        .format = LMP_WFORMAT_INT,
                        .scale_type = (lmp_scale_type)(int)p[WGRID_SCALE_DTYPE].num};
    return spec->bits != 16;
}

/* wgrid_spec for a linear whose rows are cols wide: a k-quant they do not fit becomes
 * llama-quantize's fallback format (lmp_wformat_fallback). */
static inline int wgrid_spec_for(const lmp_value *p, int64_t cols, lmp_wspec *spec)
{
    const int quantize = wgrid_spec(p, spec);
    if (lmp_wformat_fallback(spec->format, cols) != spec->format)
        *spec = lmp_wspec_for_format(lmp_wformat_fallback(spec->format, cols), spec->clip);
    return quantize;
}

/* wgrid_spec_for for linear l, with NVFP4's global scale taken from its weights as they are now
 * (compressed-tensors' generate_gparam of the weight, before any grid of it is chosen). */
static inline int wgrid_spec_linear(const lmp_value *p, const lmp_linear *l, lmp_wspec *spec)
{
    const int quantize = wgrid_spec_for(p, l->in, spec);
    if (spec->format == LMP_WFORMAT_NVFP4) spec->global_scale = lmp_nvfp4_global_scale(l->w, l->out * l->in);
    return quantize;
}

/* The checks of a plugin whose grid goes through the OBS solver (gptq, sparse24): bits 2..8 or
 * 16, and a grid per channel or per group, the solver's unit being a row.  0, or the status of
 * host->set_error with a message naming the plugin and `where`. */
static inline int wgrid_check_solver(const lmp_host *host, void *hctx, const lmp_value *p, const char *plugin,
                                     const char *where)
{
    int st = wgrid_check_options(host, hctx, p, plugin, where);
    if (!st && lmp_wformat_is_fp(wgrid_format(p)) && (int)p[WGRID_GRAN].num == LMP_GRAN_TENSOR &&
        (wgrid_format(p) == LMP_WFORMAT_FP8_E4M3 || wgrid_format(p) == LMP_WFORMAT_FP8_E5M2))
        return host->set_error(hctx, LMP_EINVAL,
                               "%s: %s: granularity = \"tensor\" is not offered: the solver quantizes row by "
                               "row, so use \"channel\" or \"group\"", plugin, where);
    if (st || wgrid_format(p) != LMP_WFORMAT_INT) return st; /* bits and granularity overridden */
    int b = (int)p[WGRID_BITS].num;
    if (!((b >= 2 && b <= 8) || b == 16))
        return host->set_error(hctx, LMP_EINVAL, "%s: %s: bits = %d: use 2..8, or 16 for no quantization", plugin,
                               where, b);
    if ((int)p[WGRID_GRAN].num == LMP_GRAN_TENSOR)
        return host->set_error(hctx, LMP_EINVAL,
                               "%s: %s: granularity = \"tensor\" is not offered: the solver quantizes row by "
                               "row, so use \"channel\" or \"group\"", plugin, where);
    return 0;
}

/* Storage bits per weight: the codes, an fp16 scale per slice, and for an asymmetric grid a
 * zero-point of `bits` bits per slice (docs/algorithms.md §1).  A GGUF format: its block's bytes
 * over 32 weights, ggml's type sizes (Q8_0 34 bytes: 8.5; Q4_0 and IQ4_NL 18: 4.5; Q4_1 20, an
 * fp16 min rather than a 4-bit zero-point: 5.0; Q5_0 22: 5.5; Q5_1 24: 6.0); a k-quant's
 * super-block bytes over 256 (Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210). */
static inline double wgrid_weight_bits(const lmp_wspec *s, int64_t out, int64_t in)
{
    switch (s->format) {
    case LMP_WFORMAT_GGUF_Q8_0: return 34.0 * 8.0 / LMP_WFORMAT_BLOCK;
    case LMP_WFORMAT_GGUF_Q4_0:
    case LMP_WFORMAT_GGUF_IQ4_NL: return 18.0 * 8.0 / LMP_WFORMAT_BLOCK;
    case LMP_WFORMAT_GGUF_Q4_1: return 20.0 * 8.0 / LMP_WFORMAT_BLOCK;
    case LMP_WFORMAT_GGUF_Q5_0: return 22.0 * 8.0 / LMP_WFORMAT_BLOCK;
    case LMP_WFORMAT_GGUF_Q5_1: return 24.0 * 8.0 / LMP_WFORMAT_BLOCK;
    case LMP_WFORMAT_GGUF_Q2_K: return 84.0 * 8.0 / LMP_WFORMAT_KBLOCK;
    case LMP_WFORMAT_GGUF_Q3_K: return 110.0 * 8.0 / LMP_WFORMAT_KBLOCK;
    case LMP_WFORMAT_GGUF_Q4_K: return 144.0 * 8.0 / LMP_WFORMAT_KBLOCK;
    case LMP_WFORMAT_GGUF_Q5_K: return 176.0 * 8.0 / LMP_WFORMAT_KBLOCK;
    case LMP_WFORMAT_GGUF_Q6_K: return 210.0 * 8.0 / LMP_WFORMAT_KBLOCK;
    case LMP_WFORMAT_NF4: return 4.0 + 32.0 / LMP_WFORMAT_NF4_BLOCK; /* an f32 abs-max per block */
    case LMP_WFORMAT_NVFP4: /* an E4M3 scale per 16, an f32 global scale per tensor */
        return 4.0 + 8.0 / LMP_WFORMAT_NVFP4_GROUP + 32.0 / (double)(out * in);
    case LMP_WFORMAT_MXFP4: return 4.0 + 8.0 / LMP_WFORMAT_MX_GROUP; /* an E8M0 scale per 32 */
    case LMP_WFORMAT_MXFP8: return 8.0 + 8.0 / LMP_WFORMAT_MX_GROUP;
    case LMP_WFORMAT_GGUF_MXFP4: return 17.0 * 8.0 / 32.0; /* ggml's block_mxfp4 */
    case LMP_WFORMAT_GGUF_NVFP4: return 36.0 * 8.0 / 64.0; /* block_nvfp4 */
    case LMP_WFORMAT_GGUF_Q1_0: return 18.0 * 8.0 / 128.0;
    case LMP_WFORMAT_GGUF_Q2_0: return 18.0 * 8.0 / 64.0;
    case LMP_WFORMAT_FP8_E4M3:
    case LMP_WFORMAT_FP8_E5M2: /* a scale of scale_dtype per slice */
        return 8.0 + (double)lmp_wspec_n_scales(s, out, in) * (s->scale_type == LMP_SCALE_F32 ? 32.0 : 16.0) /
                         (double)(out * in);
    case LMP_WFORMAT_INT: break;
    }
    double n_scales = (double)lmp_wspec_n_scales(s, out, in);
    return ((double)s->bits * (double)(out * in) + n_scales * (16.0 + (s->sym ? 0 : s->bits))) / (double)(out * in);
}

/* RTN on the backend for linear i of the block: the grid of every slice of its W chosen from W
 * (wgrid_choose, with imp[in] or NULL), then W <- its dequantized values on it, and the grid
 * recorded on the linear (host->set_weight_grid) for an export.  The scales live only for the
 * call (host->alloc). */
static inline int wgrid_quantize_linear(const lmp_host *host, void *hctx, const lmp_backend_i *be, void *bs,
                                        const lmp_wspec *spec, const float *imp, lmp_block *blk, int i)
{
    lmp_linear *l = &blk->linears[i];
    const int64_t rows = l->out, cols = l->in;
    if (rows <= 0 || cols <= 0) return LMP_OK;
    if ((spec->gran == LMP_GRAN_GROUP || spec->gran == LMP_GRAN_BLOCK) && spec->group < 1) /* before lmp_wspec_n_scales divides by it */
        return host->set_error(hctx, LMP_EINVAL, "group size %lld", (long long)spec->group);
    const size_t n = (size_t)lmp_wspec_n_scales(spec, rows, cols);
    float *scales = host->alloc(hctx, n * sizeof *scales);
    float *zeros = spec->sym ? NULL : host->alloc(hctx, n * sizeof *zeros);
    int st = !scales || (!spec->sym && !zeros) ? host->set_error(hctx, LMP_ENOMEM, "out of memory for %zu scales", n)
                                              : wgrid_choose(be, bs, spec, rows, cols, l->w, imp, scales, zeros);
    if (!st) st = be->apply_weight_grid(bs, spec, rows, cols, l->w, scales, zeros, NULL);
    if (!st) st = host->set_weight_grid(hctx, blk, i, spec, scales, zeros, NULL);
    host->free(hctx, scales);
    if (zeros) host->free(hctx, zeros);
    return st;
}

#endif
