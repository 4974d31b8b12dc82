/* sparse24.c — N:M structured sparsity along the input dimension (docs/algorithms.md §3.9): in every
 * group of m consecutive inputs of an output row at most n weights stay nonzero (2:4 default,
 * 4:8).  Methods:
 *   magnitude  prune the smallest |W_ij| of each group (Paddle ASP mask_1d, Wanda's baseline);
 *   wanda      prune the smallest |W_ij| * ||X_j||_2 (Sun et al. 2024), no weight update;
 *   sparsegpt  the OBS solver of plugins/common/obs.c (Frantar & Alistarh 2023): masks chosen
 *              every m columns by w^2 / U_jj^2 on the updated weights, survivors re-fitted, and
 *              optionally quantized at the same time (bits < 16).
 * Ties prune the lower input first.  The mask goes to the host (host->set_mask), which keeps it
 * with the linear, so a later quantization stage (rtn, gptq) leaves pruned weights at 0. */
#include <math.h>
#include <string.h>

#include "lmpress/plugin.h"
#include "obs.h"
#include "wgrid.h"

enum { P_METHOD, P_N, P_M, P_DAMP, P_BLOCK, P_GRID, P_COUNT = P_GRID + WGRID_COUNT };
enum { M_MAGNITUDE, M_WANDA, M_SPARSEGPT };

static const char *const method_choices[] = {"magnitude", "wanda", "sparsegpt", NULL};

static const lmp_param_spec sparse_params[P_COUNT] = {
    [P_METHOD] = {"method", LMP_PARAM_ENUM, "how the pruned weights are chosen (and, for sparsegpt, the rest re-fitted)",
                  M_SPARSEGPT, NULL, 0, 0, method_choices, 0},
    [P_N] = {"n", LMP_PARAM_INT, "weights kept in each group of m consecutive inputs", 2, NULL, 1, 64, NULL, 0},
    [P_M] = {"m", LMP_PARAM_INT, "group width along the input dimension", 4, NULL, 1, 64, NULL, 0},
    [P_DAMP] = {"damp", LMP_PARAM_FLOAT, "sparsegpt: H += damp * mean(diag H) * I", 0.01, NULL, 0, 100, NULL, 0},
    [P_BLOCK] = {"block_size", LMP_PARAM_INT, "sparsegpt: lazy-batch width in columns (a multiple of m)", 128,
                 NULL, 1, 1 << 16, NULL, 0},
    WGRID_PARAMS(16, 16, "sparsegpt: quantize the survivors to 2..8 bits at the same time; 16 = prune only"),
};

static int check_params(const lmp_host *host, void *hctx, const lmp_value *p, const char *where)
{
    int n = (int)p[P_N].num, m = (int)p[P_M].num, method = (int)p[P_METHOD].num;
    if (n > m) return host->set_error(hctx, LMP_EINVAL, "sparse24: %s: n = %d exceeds m = %d", where, n, m);
    int st = wgrid_check_solver(host, hctx, p + P_GRID, "sparse24", where);
    if (st) return st;
    if ((int)p[P_GRID + WGRID_GRAN].num == LMP_GRAN_BLOCK) /* not taken yet: gptq and rtn are */
        return host->set_error(hctx, LMP_EINVAL, "sparse24: %s: granularity = \"block\" is not offered with pruning; "
                               "quantize the survivors with a later gptq or rtn stage", where);
    if (method != M_SPARSEGPT && (p[P_GRID + WGRID_BITS].num != 16 || wgrid_format(p + P_GRID) != LMP_WFORMAT_INT))
        return host->set_error(hctx, LMP_EINVAL,
                               "sparse24: %s: bits and format apply to method \"sparsegpt\" only; quantize %s masks with a "
                               "later rtn or gptq stage", where, method_choices[method]);
    if (method == M_SPARSEGPT && (int64_t)p[P_BLOCK].num % m)
        return host->set_error(hctx, LMP_EINVAL, "sparse24: %s: block_size %lld is not a multiple of m = %d", where,
                               (long long)p[P_BLOCK].num, m);
    return 0;
}

static int sparse_create(const lmp_host *host, void *hctx, const lmp_value *params, void **self)
{
    *self = NULL;
    return check_params(host, hctx, params, "params");
}

static uint32_t sparse_needs(void *self, const lmp_value *p)
{
    (void)self;
    switch ((int)p[P_METHOD].num) {
    case M_WANDA: return LMP_STAT_SQSUM;
    case M_SPARSEGPT: return LMP_STAT_HESSIAN | (wgrid_needs(p + P_GRID) & LMP_STAT_IMATRIX); /* its joint grid */
    default: return 0;
    }
}

/* keep[out, in]: per row and group of m, the n largest scores survive (ties: the higher input).
 * A shorter last group keeps n of its inputs (Paddle ASP pads it with zeros). */
static void mask_by_score(const lmp_linear *l, const float *col_scale, int n, int m_full, uint8_t *keep)
{
    for (int64_t o = 0; o < l->out; o++)
        for (int64_t j = 0; j < l->in; j += m_full) {
            const int m = j + m_full <= l->in ? m_full : (int)(l->in - j);
            float s[64];
            for (int k = 0; k < m; k++) s[k] = fabsf(l->w[o * l->in + j + k]) * (col_scale ? col_scale[j + k] : 1.0f);
            obs_keep_largest(s, m, n, keep + o * l->in + j, 1);
        }
}

static int prune_linear(const lmp_host *host, void *hctx, lmp_block *blk, int i, uint8_t *keep)
{
    lmp_linear *l = &blk->linears[i];
    const lmp_value *p = l->params;
    const int n = (int)p[P_N].num, m = (int)p[P_M].num, method = (int)p[P_METHOD].num;
    if (method == M_MAGNITUDE) {
        mask_by_score(l, NULL, n, m, keep);
    } else if (method == M_WANDA) {
        if (!l->stats || !l->stats->sqsum)
            return host->set_error(hctx, LMP_EINVAL, "sparse24: %s: no input norms were collected", l->name);
        float *norm = host->alloc(hctx, (size_t)l->in * sizeof *norm);
        if (!norm) return host->set_error(hctx, LMP_ENOMEM, "sparse24: out of memory");
        for (int64_t j = 0; j < l->in; j++) norm[j] = sqrtf(l->stats->sqsum[j]);
        mask_by_score(l, norm, n, m, keep);
        host->free(hctx, norm);
    } else {
        obs_opts o = {.damp = p[P_DAMP].num, .block = (int64_t)p[P_BLOCK].num, .prune_n = m - n, .prune_m = m,
                      .name = l->name};
        o.quantize = wgrid_spec_linear(p + P_GRID, l, &o.spec);
        obs_result r = {.mask = keep};
        float *imp;
        int st = wgrid_importance_new(host, hctx, p + P_GRID, l, &imp);
        if (st) return st;
        o.importance = imp;
        st = obs_solve_linear(host, hctx, &o, blk, i, &r);
        host->free(hctx, imp);
        if (st) return st;
        if (o.quantize) l->weight_bits = wgrid_weight_bits(&o.spec, l->out, l->in);
        host->log(hctx, LMP_LOG_DEBUG, "sparse24: %s: sparsegpt loss %.6g, damp %g, %lld dead inputs", l->name,
                  r.loss, r.damp_used, (long long)r.n_dead);
    }
    return host->set_mask(hctx, blk, i, keep, n, m);
}

static int sparse_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = &blk->linears[i];
        if (!l->params) continue;
        int st = check_params(host, hctx, l->params, l->name);
        if (st) return st;
        uint8_t *keep = host->alloc(hctx, (size_t)(l->out * l->in));
        if (!keep) return host->set_error(hctx, LMP_ENOMEM, "sparse24: out of memory");
        st = prune_linear(host, hctx, blk, i, keep);
        host->free(hctx, keep);
        if (st) return st;
    }
    return LMP_OK;
}

static const lmp_strategy_i sparse_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .create = sparse_create,
    .needs = sparse_needs,
    .apply = sparse_apply,
};

static const lmp_plugin_desc sparse_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "sparse24",
    .version = "0.1.0",
    .summary = "N:M structured sparsity (2:4, 4:8): magnitude, Wanda or SparseGPT (optionally quantizing survivors)",
    .params = sparse_params,
    .n_params = P_COUNT,
    .vtable = &sparse_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &sparse_desc; }
