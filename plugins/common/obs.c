/* obs.c — see obs.h.  Layout: the solver works on Wt[cols, rows], W transposed and in visiting
 * order, so a column of W is a contiguous row and every update is a unit-stride axpy. */
#include "obs.h"
#include "wgrid.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The columns whose grids are chosen together: a k-quant's super-block of 256, else a group. */
static int64_t grid_span(const lmp_wspec *spec)
{
    return lmp_wformat_is_k(spec->format) ? LMP_WFORMAT_KBLOCK : spec->group;
}

int64_t obs_n_groups(const lmp_wspec *spec, int64_t cols)
{
    return spec->gran == LMP_GRAN_GROUP || spec->gran == LMP_GRAN_BLOCK ? (cols + spec->group - 1) / spec->group : 1;
}

typedef struct solver {
    const lmp_host *host;
    void *hctx;
    const lmp_backend_i *be;
    void *bs;
    const obs_opts *o;
    int64_t rows, cols, ng;
    float *Wt, *U, *Hp, *Et, *tmp, *sc, *zc, *col_sc, *col_zc;
    int32_t *codes_t, *perm;
    uint8_t *keep_t;               /* [cols, rows] visiting-order mask, when pruning or given */
} solver;

/* The grid of the visiting-order columns [p, p + len) as Wt holds them now, into columns
 * g.. of sc/zc [rows, ng]: the columns gathered row-major into tmp[rows, len], one slice per row
 * (the backend's channel grid of those columns, so the grid RTN would choose for them).  A GGUF
 * format keeps its own spec: len is then its 32-wide block (check_opts), one block per row, so
 * each row gets the f32 d (and min) ggml would compute for the block as it stands now; or a
 * k-quant's super-block of 256, whose sub-blocks' grids fill columns g..g+nsub-1. */
static int grids_from_wt(solver *S, int64_t p, int64_t len, int64_t g)
{
    for (int64_t r = 0; r < S->rows; r++)
        for (int64_t k = 0; k < len; k++) S->tmp[r * len + k] = S->Wt[(p + k) * S->rows + r];
    lmp_wspec ch = S->o->spec;
    if (ch.format == LMP_WFORMAT_INT) ch.gran = LMP_GRAN_CHANNEL;
    const int64_t nsub = lmp_wspec_n_scales(&ch, 1, len);
    int st = 0;
    if (S->o->importance && lmp_wformat_is_k(ch.format)) /* σ² from the super-block, inside */
        for (int64_t r = 0; r < S->rows; r++)
            lmp_wgrid_fit_kblock(&ch, S->tmp + r * len, S->o->importance + p, S->col_sc + r * nsub,
                                 ch.sym ? NULL : S->col_zc + r * nsub);
    else if (S->o->importance && ch.format != LMP_WFORMAT_INT) /* ggml's σ² is its whole row's */
        for (int64_t r = 0; r < S->rows; r++) {
            float sum_x2 = 0;
            for (int64_t k = 0; k < S->cols; k++) sum_x2 += S->Wt[k * S->rows + r] * S->Wt[k * S->rows + r];
            lmp_wgrid_fit_block_imp(&ch, S->tmp + r * len, S->o->importance + p, sum_x2 / S->cols, &S->col_sc[r],
                                    &S->col_zc[r]);
        }
    else
        st = S->be->choose_weight_grid(S->bs, &ch, S->rows, len, S->tmp, S->col_sc, S->col_zc);
    for (int64_t r = 0; !st && r < S->rows; r++)
        for (int64_t k = 0; k < nsub; k++) {
            S->sc[r * S->ng + g + k] = S->col_sc[r * nsub + k];
            S->zc[r * S->ng + g + k] = ch.sym ? 0.0f : S->col_zc[r * nsub + k];
        }
    return st;
}

/* The tiles' grid of W[rows, cols] (the backend's choose_weight_grid), spread over S->sc [rows,
 * ng]: row r takes tile row r / group (zc stays 0: FP8 is symmetric). */
static int block_grids(solver *S, const float *W)
{
    const int64_t g = S->o->spec.group, nt = lmp_wspec_n_scales(&S->o->spec, S->rows, S->cols);
    float *tiles = S->host->alloc(S->hctx, (size_t)nt * sizeof *tiles);
    if (!tiles) return S->host->set_error(S->hctx, LMP_ENOMEM, "%s: out of memory for %lld tile scales", S->o->name,
                                          (long long)nt);
    int st = S->be->choose_weight_grid(S->bs, &S->o->spec, S->rows, S->cols, W, tiles, NULL);
    for (int64_t r = 0; !st && r < S->rows; r++)
        for (int64_t k = 0; k < S->ng; k++) {
            S->sc[r * S->ng + k] = tiles[(r / g) * S->ng + k];
            S->zc[r * S->ng + k] = 0.0f;
        }
    S->host->free(S->hctx, tiles);
    return st;
}

/* act_order's visiting order: decreasing H_jj, equal diagonals in original column order.  The
 * index is the last key, so the order is total and any sort gives the same permutation. */
typedef struct diag_index {
    float d;
    int32_t j;
} diag_index;

static int by_diag_desc(const void *a, const void *b)
{
    const diag_index *x = a, *y = b;
    if (x->d != y->d) return x->d > y->d ? -1 : 1;
    return x->j < y->j ? -1 : (x->j > y->j);
}

/* U <- upper Cholesky factor of (Hp + lambda I)^-1, raising lambda tenfold while H + lambda I
 * is not positive definite (logged, never skipped). */
static int factorise(solver *S, obs_result *res)
{
    const int64_t n = S->cols;
    double mean = 0;
    for (int64_t j = 0; j < n; j++) mean += S->Hp[j * n + j];
    mean /= (double)n;
    double damp = S->o->damp;
    for (int attempt = 0; attempt < 8; attempt++, damp *= 10) {
        memcpy(S->U, S->Hp, (size_t)(n * n) * sizeof *S->U);
        for (int64_t j = 0; j < n; j++) S->U[j * n + j] += (float)(damp * mean);
        int64_t bad = -1;
        int st = S->be->cholesky(S->bs, n, S->U, &bad);
        if (!st) st = S->be->chol_inverse(S->bs, n, S->U);
        if (!st) st = S->be->cholesky(S->bs, n, S->U, &bad);
        if (!st) {
            for (int64_t j = 0; j < n; j++) /* lower L of H^-1 = L L^T, so U = L^T */
                for (int64_t k = j + 1; k < n; k++) {
                    S->U[j * n + k] = S->U[k * n + j];
                    S->U[k * n + j] = 0.0f;
                }
            res->damp_used = damp;
            return 0;
        }
        if (st != LMP_ENOTSPD) return st;
        S->host->log(S->hctx, LMP_LOG_WARN,
                     "%s: H + %g*mean(diag H)*I is not positive definite (pivot %lld); retrying with %g",
                     S->o->name, damp, (long long)bad, damp * 10);
        res->retries++;
    }
    return S->host->set_error(S->hctx, LMP_ENOTSPD, "%s: the Hessian is not positive definite even with damping %g",
                              S->o->name, damp / 10);
}

void obs_keep_largest(const float *score, int m, int keep, uint8_t *out, int64_t stride)
{
    int idx[64];
    for (int k = 0; k < m; k++) {
        idx[k] = k;
        out[k * stride] = 1;
    }
    for (int a = 1; a < m; a++) /* insertion sort, ascending, stable */
        for (int b = a; b > 0 && score[idx[b]] < score[idx[b - 1]]; b--) {
            int t = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = t;
        }
    for (int k = 0; k < m - keep; k++) out[idx[k] * stride] = 0;
}

/* SparseGPT: for visiting positions [p, p+m), prune the n smallest w^2/U_jj^2 of each row.  A
 * shorter last group (inputs not a multiple of m) keeps m - n of its inputs, as if padded with
 * zeros (Paddle ASP). */
static void choose_mask(solver *S, int64_t p)
{
    const int64_t R = S->rows, C = S->cols;
    const int m = p + S->o->prune_m <= C ? S->o->prune_m : (int)(C - p);
    for (int64_t r = 0; r < R; r++) {
        float score[64];
        for (int k = 0; k < m; k++) {
            float w = S->Wt[(p + k) * R + r], d = S->U[(p + k) * C + p + k];
            score[k] = (w * w) / (d * d);
        }
        obs_keep_largest(score, m, S->o->prune_m - S->o->prune_n, S->keep_t + p * R + r, R);
    }
}

/* The lazy-batch loop over visiting positions. */
static int columns(solver *S, obs_result *res)
{
    const obs_opts *o = S->o;
    const int64_t R = S->rows, C = S->cols, B = o->block, g = o->spec.group;
    const int dyn_groups = o->quantize && o->spec.gran == LMP_GRAN_GROUP && !o->static_groups;
    const int64_t span = grid_span(&o->spec);
    int st = 0;
    for (int64_t i1 = 0; i1 < C && !st; i1 += B) {
        const int64_t i2 = i1 + B < C ? i1 + B : C;
        double t0 = now();
        /* Every group (k-quant super-block) starting in this batch takes its grid from the
         * batch-start columns. */
        for (int64_t p = dyn_groups ? (i1 + span - 1) / span * span : i2; p < i2 && !st; p += span)
            st = grids_from_wt(S, p, p + span <= C ? span : C - p, p / g);
        for (int64_t p = i1; p < i2 && !st; p++) {
            float *w = S->Wt + p * R, *e = S->Et + (p - i1) * R;
            const float d = S->U[p * C + p];
            if (o->prune_n > 0 && (p - i1) % o->prune_m == 0) choose_mask(S, p);
            const int64_t gi = !o->quantize || (o->spec.gran != LMP_GRAN_GROUP && o->spec.gran != LMP_GRAN_BLOCK) ? 0
                               : o->static_groups || o->spec.gran == LMP_GRAN_BLOCK ? S->perm[p] / g : p / g;
            double loss = 0;
            for (int64_t r = 0; r < R; r++) {
                int32_t code = 0;
                float q = w[r];
                if (S->keep_t && !S->keep_t[p * R + r]) q = 0.0f;
                else if (o->quantize) {
                    const float sc = S->sc[r * S->ng + gi], zc = S->zc[r * S->ng + gi];
                    const float c = lmp_wgrid_code(&o->spec, w[r], sc, zc);
                    q = lmp_wgrid_value(&o->spec, c, sc, zc);
                    code = lmp_wgrid_code_i32(c);
                }
                float diff = w[r] - q;
                loss += (double)diff * diff / ((double)d * d);
                e[r] = diff / d;
                w[r] = q;
                S->codes_t[p * R + r] = code;
            }
            res->loss += loss / 2;
            for (int64_t k = p + 1; k < i2; k++) { /* rank-1 update inside the batch */
                const float u = S->U[p * C + k];
                float *wk = S->Wt + k * R;
                for (int64_t r = 0; r < R; r++) wk[r] -= e[r] * u;
            }
        }
        double t1 = now();
        res->t_columns += t1 - t0;
        if (!st && i2 < C) /* Wt[i2:, :] -= U[i1:i2, i2:]^T Et */
            st = S->be->gemm(S->bs, 1, 0, C - i2, R, i2 - i1, -1.0f, S->U + i1 * C + i2, C, S->Et, R, 1.0f,
                             S->Wt + i2 * R, R);
        res->t_update += now() - t1;
    }
    return st;
}

static int check_opts(const lmp_host *host, void *hctx, const obs_opts *o, int64_t rows, int64_t cols)
{
    const char *nm = o->name ? o->name : "obs";
    if (rows <= 0 || cols <= 0 || o->block < 1 || !(o->damp >= 0))
        return host->set_error(hctx, LMP_EINVAL, "%s: bad shape %lld x %lld or options", nm, (long long)rows, (long long)cols);
    if (o->quantize && o->spec.gran != LMP_GRAN_CHANNEL && o->spec.gran != LMP_GRAN_GROUP && o->spec.gran != LMP_GRAN_BLOCK)
        return host->set_error(hctx, LMP_EINVAL, "%s: the grid must be per channel, per group or per block", nm);
    if (o->quantize && (o->spec.gran == LMP_GRAN_GROUP || o->spec.gran == LMP_GRAN_BLOCK) && o->spec.group < 1)
        return host->set_error(hctx, LMP_EINVAL, "%s: group size %lld", nm, (long long)o->spec.group);
    if (o->quantize && o->spec.format != LMP_WFORMAT_INT) {
        const char *f = lmp_wformat_name(o->spec.format);
        if (!f || !lmp_wspec_format_ok(&o->spec))
            return host->set_error(hctx, LMP_EINVAL, "%s: bad spec for weight format %d", nm, (int)o->spec.format);
        const int64_t span = lmp_wformat_span(o->spec.format);
        if (cols % span)
            return host->set_error(hctx, LMP_EINVAL,
                                   "%s: format %s stores rows in blocks of %lld inputs; this weight's rows have "
                                   "%lld, not a multiple of %lld", nm, f, (long long)span, (long long)cols,
                                   (long long)span);
        /* dynamic groups in act-order would be 32 visited columns, not the file's 32 consecutive
         * inputs; static groups are taken in original column order */
        if (o->act_order && !o->static_groups)
            return host->set_error(hctx, LMP_EINVAL,
                                   "%s: format %s with act_order needs static_groups: its blocks are 32 "
                                   "consecutive inputs, not 32 columns in visiting order", nm, f);
    }
    if (o->prune_n > 0) {
        if (o->prune_m > 64 || o->prune_n > o->prune_m || o->block % o->prune_m || o->act_order)
            return host->set_error(hctx, LMP_EINVAL,
                                   "%s: pruning %d of %d needs M <= 64, a block (%lld) multiple of M, no act_order",
                                   nm, o->prune_n, o->prune_m, (long long)o->block);
    }
    return 0;
}

int obs_solve(const lmp_host *host, void *hctx, const obs_opts *o, int64_t rows, int64_t cols,
              float *W, const float *H, obs_result *res)
{
    res->loss = 0;
    res->n_dead = 0;
    res->retries = 0;
    res->damp_used = o->damp;
    res->t_factor = res->t_columns = res->t_update = 0;
    int st = check_opts(host, hctx, o, rows, cols);
    if (st) return st;
    solver S = {.host = host, .hctx = hctx, .o = o, .rows = rows, .cols = cols};
    S.be = host->backend(hctx, &S.bs);
    if (!S.be) return host->set_error(hctx, LMP_EUNSUPPORTED, "%s: no backend", o->name);
    S.ng = o->quantize ? obs_n_groups(&o->spec, cols) : 1;
    const size_t RC = (size_t)(rows * cols), CC = (size_t)(cols * cols);
    const int masked = o->prune_n > 0 || o->keep;
    /* Dynamic groups gather their columns into tmp to choose their grids in the loop. */
    const int dyn_groups = o->quantize && o->spec.gran == LMP_GRAN_GROUP && !o->static_groups;
    const int64_t span = grid_span(&o->spec), gw = dyn_groups && span < cols ? span : cols;
    const int64_t nsub = lmp_wformat_is_k(o->spec.format) ? span / o->spec.group : 1; /* grids per row of a span */
    S.Wt = host->alloc(hctx, RC * sizeof(float));
    S.tmp = dyn_groups ? host->alloc(hctx, (size_t)(rows * gw) * sizeof(float)) : NULL;
    S.U = host->alloc(hctx, CC * sizeof(float));
    S.Hp = host->alloc(hctx, CC * sizeof(float));
    S.Et = host->alloc(hctx, (size_t)(o->block * rows) * sizeof(float));
    S.sc = host->alloc(hctx, (size_t)(rows * S.ng) * sizeof(float));
    S.zc = host->alloc(hctx, (size_t)(rows * S.ng) * sizeof(float));
    S.col_sc = dyn_groups ? host->alloc(hctx, (size_t)(rows * nsub) * sizeof(float)) : NULL;
    S.col_zc = dyn_groups ? host->alloc(hctx, (size_t)(rows * nsub) * sizeof(float)) : NULL;
    S.codes_t = host->alloc(hctx, RC * sizeof(int32_t));
    S.perm = host->alloc(hctx, (size_t)cols * sizeof(int32_t));
    S.keep_t = masked ? host->alloc(hctx, RC) : NULL;
    float *diag = host->alloc(hctx, (size_t)cols * sizeof(float));
    diag_index *order = o->act_order ? host->alloc(hctx, (size_t)cols * sizeof *order) : NULL;
    if (!S.Wt || !S.U || !S.Hp || !S.Et || !S.sc || !S.zc || !S.codes_t || !S.perm || !diag ||
        (dyn_groups && (!S.tmp || !S.col_sc || !S.col_zc)) || (masked && !S.keep_t) || (o->act_order && !order)) {
        st = host->set_error(hctx, LMP_ENOMEM, "%s: out of memory for a %lld x %lld solve", o->name,
                             (long long)rows, (long long)cols);
        goto out;
    }
    /* Per-channel grid from W as given (before dead inputs are zeroed, as the reference); sc/zc
     * are [rows, 1], the backend's layout (zc stays 0 when sym). */
    if (o->quantize && o->spec.gran == LMP_GRAN_CHANNEL &&
        (st = S.be->choose_weight_grid(S.bs, &o->spec, rows, cols, W, S.sc, S.zc)))
        goto out;
    /* Blocks (FP8 tiles of group x group) likewise from W as given: llm-compressor's GPTQ takes
     * every qparam from its observer on the weight before the solve (before dead inputs are
     * zeroed) and quantizes column j of row r on tile (r / group, j / group) of those
     * (column_scale_window).  sc/zc are [rows, ng] here, each row a copy of its tile row's
     * scales; obs_solve_linear records the tiles. */
    if (o->quantize && o->spec.gran == LMP_GRAN_BLOCK && (st = block_grids(&S, W))) goto out;
    for (int64_t j = 0; j < cols; j++) {
        diag[j] = H[j * cols + j];
        if (diag[j] != 0.0f) continue;
        diag[j] = 1.0f; /* dead input: no signal, so no weight */
        res->n_dead++;
        for (int64_t r = 0; r < rows; r++) W[r * cols + j] = 0.0f;
    }
    /* Static groups: from W after that, in original column order; [rows, ng] is again the
     * backend's layout. */
    if (o->quantize && o->spec.gran == LMP_GRAN_GROUP && o->static_groups &&
        (st = wgrid_choose(S.be, S.bs, &o->spec, rows, cols, W, o->importance, S.sc, S.zc)))
        goto out;
    if (o->act_order) {
        for (int64_t j = 0; j < cols; j++) order[j] = (diag_index){diag[j], (int32_t)j};
        qsort(order, (size_t)cols, sizeof *order, by_diag_desc);
        for (int64_t p = 0; p < cols; p++) S.perm[p] = order[p].j;
    } else {
        for (int64_t p = 0; p < cols; p++) S.perm[p] = (int32_t)p;
    }
    for (int64_t p = 0; p < cols; p++) {
        const int64_t j = S.perm[p];
        for (int64_t k = 0; k < cols; k++) S.Hp[p * cols + k] = p == k ? diag[j] : H[j * cols + S.perm[k]];
        for (int64_t r = 0; r < rows; r++) {
            S.Wt[p * rows + r] = W[r * cols + j];
            if (o->keep) S.keep_t[p * rows + r] = o->keep[r * cols + j] != 0;
        }
    }
    double t0 = now();
    st = factorise(&S, res);
    res->t_factor = now() - t0;
    if (!st) st = columns(&S, res);
    if (st) goto out;
    for (int64_t p = 0; p < cols; p++) {
        const int64_t j = S.perm[p];
        for (int64_t r = 0; r < rows; r++) {
            W[r * cols + j] = S.Wt[p * rows + r];
            if (res->codes) res->codes[r * cols + j] = S.codes_t[p * rows + r];
            if (res->mask) res->mask[r * cols + j] = masked ? S.keep_t[p * rows + r] : 1;
        }
        if (res->perm) res->perm[p] = (int32_t)j;
    }
    if (res->U) memcpy(res->U, S.U, CC * sizeof(float));
    if (res->scales && o->quantize) memcpy(res->scales, S.sc, (size_t)(rows * S.ng) * sizeof(float));
    if (res->zeros && o->quantize && !o->spec.sym) memcpy(res->zeros, S.zc, (size_t)(rows * S.ng) * sizeof(float));
out:
    host->free(hctx, S.Wt);
    host->free(hctx, S.tmp);
    host->free(hctx, S.U);
    host->free(hctx, S.Hp);
    host->free(hctx, S.Et);
    host->free(hctx, S.sc);
    host->free(hctx, S.zc);
    host->free(hctx, S.col_sc);
    host->free(hctx, S.col_zc);
    host->free(hctx, S.codes_t);
    host->free(hctx, S.perm);
    host->free(hctx, S.keep_t);
    host->free(hctx, diag);
    host->free(hctx, order);
    return st;
}

int obs_solve_linear(const lmp_host *host, void *hctx, const obs_opts *o, lmp_block *blk, int i, obs_result *res)
{
    lmp_linear *l = &blk->linears[i];
    if (!l->stats || !l->stats->hessian)
        return host->set_error(hctx, LMP_EINVAL, "%s: no Hessian was collected", l->name);
    if (!o->quantize) return obs_solve(host, hctx, o, l->out, l->in, l->w, l->stats->hessian, res);
    const int64_t ng = obs_n_groups(&o->spec, l->in), n = l->out * ng;
    float *sc = host->alloc(hctx, (size_t)n * sizeof *sc), *zc = host->alloc(hctx, (size_t)n * sizeof *zc);
    int32_t *perm = host->alloc(hctx, (size_t)l->in * sizeof *perm), *g_idx = NULL;
    int st = !sc || !zc || !perm ? host->set_error(hctx, LMP_ENOMEM, "%s: out of memory for its grid", l->name) : 0;
    if (!st) {
        res->scales = sc;
        res->zeros = zc;
        res->perm = perm;
        st = obs_solve(host, hctx, o, l->out, l->in, l->w, l->stats->hessian, res);
        res->scales = res->zeros = NULL;
        res->perm = NULL;
    }
    /* Dynamic groups taken in act-order are numbered in visiting order: column perm[p] is in
     * group p / group_size.  Otherwise column j is in group j / group_size (g_idx NULL). */
    if (!st && o->act_order && !o->static_groups && o->spec.gran == LMP_GRAN_GROUP) {
        if (!(g_idx = host->alloc(hctx, (size_t)l->in * sizeof *g_idx)))
            st = host->set_error(hctx, LMP_ENOMEM, "%s: out of memory for its g_idx", l->name);
        for (int64_t p = 0; !st && p < l->in; p++) g_idx[perm[p]] = (int32_t)(p / o->spec.group);
    }
    /* Blocks: row r of sc holds tile row r / group's scales; the grid keeps one row per tile row */
    if (!st && o->spec.gran == LMP_GRAN_BLOCK)
        for (int64_t r = 0; r < l->out; r += o->spec.group)
            memmove(sc + (r / o->spec.group) * ng, sc + r * ng, (size_t)ng * sizeof *sc);
    if (!st) st = host->set_weight_grid(hctx, blk, i, &o->spec, sc, o->spec.sym ? NULL : zc, g_idx);
    host->free(hctx, sc);
    host->free(hctx, zc);
    host->free(hctx, perm);
    host->free(hctx, g_idx);
    return st;
}
