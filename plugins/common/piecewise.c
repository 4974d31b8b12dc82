/* piecewise.c — see piecewise.h.  Shapes: a[C], W[O, C], X[S, C], scales f[C]. */
#include "piecewise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void column_absmax(int64_t O, int64_t C, const float *W, float *wmax)
{
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < C; j++) wmax[j] = fmaxf(wmax[j], fabsf(W[o * C + j]));
}

static float formula(float a, float w, double alpha)
{
    double s = pow((double)a, alpha) / pow(fmax((double)w, 1e-5), 1.0 - alpha);
    return (float)fmax(s, 1e-5);
}

void smooth_scales(int64_t C, const float *a, const float *wmax, double alpha, float *s)
{
    for (int64_t j = 0; j < C; j++) s[j] = formula(a[j], wmax[j], alpha);
}

/* ---- optimal 1-D k-means ------------------------------------------------------------------
 * Clusters of sorted values are contiguous, so dynamic programming over split points finds the
 * minimum within-cluster sum of squares exactly (PaddleSlim runs sklearn's unseeded KMeans;
 * this is deterministic).  order[] receives the channels sorted by value (stable), first[g] the
 * start of cluster g in that order (first[K] = C). */
static int kmeans_1d(int64_t C, const float *a, int K, int64_t *order, int64_t *first)
{
    for (int64_t j = 0; j < C; j++) order[j] = j;
    for (int64_t j = 1; j < C; j++) { /* insertion sort: stable, C is at most a few thousand */
        int64_t v = order[j], i = j;
        while (i > 0 && a[order[i - 1]] > a[v]) { order[i] = order[i - 1]; i--; }
        order[i] = v;
    }
    double *P = malloc((size_t)(C + 1) * sizeof *P), *Q = malloc((size_t)(C + 1) * sizeof *Q);
    double *D = malloc((size_t)((K + 1) * (C + 1)) * sizeof *D);
    int64_t *arg = malloc((size_t)((K + 1) * (C + 1)) * sizeof *arg);
    if (!P || !Q || !D || !arg) {
        free(P), free(Q), free(D), free(arg);
        return LMP_ENOMEM;
    }
    P[0] = Q[0] = 0;
    for (int64_t j = 0; j < C; j++) {
        double v = a[order[j]];
        P[j + 1] = P[j] + v;
        Q[j + 1] = Q[j] + v * v;
    }
#define COST(i, j) ((Q[j] - Q[i]) - (P[j] - P[i]) * (P[j] - P[i]) / (double)((j) - (i)))
    for (int64_t j = 0; j <= C; j++) D[j] = j == 0 ? 0 : INFINITY;
    for (int k = 1; k <= K; k++)
        for (int64_t j = 0; j <= C; j++) {
            double best = INFINITY;
            int64_t bi = k - 1;
            for (int64_t i = k - 1; i < j; i++) { /* strict <: the earliest boundary wins ties */
                double c = D[(k - 1) * (C + 1) + i] + COST(i, j);
                if (c < best) best = c, bi = i;
            }
            D[k * (C + 1) + j] = best;
            arg[k * (C + 1) + j] = bi;
        }
#undef COST
    first[K] = C;
    for (int k = K, j = (int)C; k >= 1; k--) {
        first[k - 1] = arg[k * (C + 1) + j];
        j = (int)first[k - 1];
    }
    free(P), free(Q), free(D), free(arg);
    return 0;
}

/* ---- the search loss ----------------------------------------------------------------------- */
typedef struct search_ctx {
    const lmp_backend_i *be;
    void *be_self;
    int64_t C, O, S;
    const float *W, *X;
    float *Y0;        /* [S, O] = X W^T */
    float *xq, *wq;   /* [S, C], [O, C] */
    float *Y;         /* [S, O] */
} search_ctx;

/* paddle.round rounds halves away from zero, as roundf does; this is the same rounding in
 * operations the compiler vectorises (the search's hot loop).  |r| <= 127 here, so r - t is
 * exact. */
static inline float fake_quant(float v, float T)
{
    float r = v / T * 127.0f;
    int i = (int)r;
    float d = r - (float)i;
    i += (d >= 0.5f) - (d <= -0.5f);
    i = i < -128 ? -128 : i > 127 ? 127 : i;
    return (float)i * T / 127.0f;
}

/* max |v[i]|, with independent accumulators so the loop is not one long dependency chain */
static float absmax_of(const float *v, int64_t n)
{
    float m[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = fabsf(v[i + k]) > m[k] ? fabsf(v[i + k]) : m[k];
    for (; i < n; i++) m[0] = fabsf(v[i]) > m[0] ? fabsf(v[i]) : m[0];
    for (int k = 1; k < 8; k++) m[0] = m[k] > m[0] ? m[k] : m[0];
    return m[0];
}

static int search_loss(search_ctx *c, const float *f, double *loss)
{
    const int64_t C = c->C, O = c->O, S = c->S;
    for (int64_t t = 0; t < S; t++)
        for (int64_t j = 0; j < C; j++) c->xq[t * C + j] = c->X[t * C + j] / f[j];
    float T = absmax_of(c->xq, S * C);
    if (T == 0) T = 1e-8f;
    for (int64_t i = 0; i < S * C; i++) c->xq[i] = fake_quant(c->xq[i], T);
    for (int64_t o = 0; o < O; o++) {
        float *row = c->wq + o * C;
        for (int64_t j = 0; j < C; j++) row[j] = c->W[o * C + j] * f[j];
        float To = absmax_of(row, C);
        if (To == 0) To = 1e-8f;
        for (int64_t j = 0; j < C; j++) row[j] = fake_quant(row[j], To);
    }
    int st = c->be->gemm(c->be_self, 0, 1, S, O, C, 1.0f, c->xq, C, c->wq, C, 0.0f, c->Y, O);
    if (st) return st;
    double sum = 0;
    for (int64_t i = 0; i < S * O; i++) {
        double d = (double)c->Y[i] - (double)c->Y0[i];
        sum += d * d;
    }
    *loss = sum / (double)(S * O);
    return 0;
}

/* ---- the search ------------------------------------------------------------------------------ */
/* Next candidate after alpha (PaddleSlim after cafd9859): 0.01 steps below 1 until alpha_max,
 * then the constant scales from scale_min in steps of 0.5; 0 when the sequence ends. */
static double next_candidate(const piecewise_opts *o, double alpha)
{
    double top = o->scale_max > 0 ? o->scale_max : o->alpha_max;
    if (!(alpha <= top)) return 0;
    if (alpha < 1) {
        alpha += 0.01;
        if (alpha >= o->alpha_max) {
            if (o->scale_min <= 0) return 0;
            alpha = o->scale_min;
        }
    } else {
        alpha += 0.5;
    }
    return round(alpha * 100.0) / 100.0;
}

int piecewise_search(const lmp_host *host, void *hctx, const piecewise_opts *o, int64_t C,
                     int64_t O, int64_t S, const float *a, const float *W, const float *X,
                     float *s, piecewise_result *res)
{
    search_ctx c = {.C = C, .O = O, .S = S, .W = W, .X = X};
    c.be = host->backend(hctx, &c.be_self);
    if (!c.be || !c.be->gemm) return host->set_error(hctx, LMP_EUNSUPPORTED, "piecewise search: no backend");
    const int Kmax = o->k_piece < C ? o->k_piece : (int)C;
    float *wmax = calloc((size_t)C, sizeof *wmax), *s_out = malloc((size_t)C * sizeof *s_out);
    float *full = malloc((size_t)C * sizeof *full), *keep = malloc((size_t)C * sizeof *keep);
    float *cand = malloc((size_t)C * sizeof *cand);
    int64_t *order = malloc((size_t)C * sizeof *order), *first = malloc((size_t)(Kmax + 1) * sizeof *first);
    c.Y0 = malloc((size_t)(S * O) * sizeof *c.Y0);
    c.Y = malloc((size_t)(S * O) * sizeof *c.Y);
    c.xq = malloc((size_t)(S * C) * sizeof *c.xq);
    c.wq = malloc((size_t)(O * C) * sizeof *c.wq);
    int st = 0;
    if (!wmax || !s_out || !full || !keep || !cand || !order || !first || !c.Y0 || !c.Y || !c.xq || !c.wq) {
        st = host->set_error(hctx, LMP_ENOMEM, "piecewise search: out of memory");
        goto done;
    }
    column_absmax(O, C, W, wmax);
    if ((st = c.be->gemm(c.be_self, 0, 1, S, O, C, 1.0f, X, C, W, C, 0.0f, c.Y0, O))) goto done;
    smooth_scales(C, a, wmax, 0.5, full);
    if ((st = search_loss(&c, full, &res->alpha_loss))) goto done;
    double global = INFINITY;
    res->candidates = 0;
    for (int64_t j = 0; j < C; j++) s[j] = 1.0f;
    memset(s_out, 0, (size_t)C * sizeof *s_out);
    for (int K = o->search_piece ? 1 : Kmax; K <= Kmax && !st; K++) {
        if (!o->carry_s_out) memset(s_out, 0, (size_t)C * sizeof *s_out);
        if ((st = kmeans_1d(C, a, K, order, first))) {
            st = host->set_error(hctx, st, "piecewise search: out of memory");
            break;
        }
        double best = INFINITY;
        for (int g = 0; g < K && !st; g++) { /* pieces in ascending-centroid order */
            best = INFINITY;
            for (int64_t j = 0; j < C; j++) keep[j] = 0;
            for (double alpha = next_candidate(o, o->alpha_min); alpha > 0 && !st; alpha = next_candidate(o, alpha)) {
                memset(cand, 0, (size_t)C * sizeof *cand);
                for (int64_t i = first[g]; i < first[g + 1]; i++) {
                    int64_t j = order[i];
                    cand[j] = alpha < 1 ? formula(a[j], wmax[j], alpha) : (float)alpha;
                }
                /* full = S_out + cand + (1 - in_g)[S_out == 0]: decided pieces keep S_out, this piece
                 * tries cand (never 0), undecided pieces use 1 */
                for (int64_t j = 0; j < C; j++) full[j] = s_out[j] + cand[j] + (s_out[j] == 0 && cand[j] == 0 ? 1.0f : 0.0f);
                double loss;
                if ((st = search_loss(&c, full, &loss))) break;
                res->candidates++;
                if (loss <= best) { /* ties go to the later candidate */
                    best = loss;
                    memcpy(keep, cand, (size_t)C * sizeof *keep);
                }
            }
            for (int64_t i = first[g]; best == INFINITY && i < first[g + 1]; i++) keep[order[i]] = 1.0f; /* no candidates */
            for (int64_t j = 0; j < C; j++) s_out[j] += keep[j];
        }
        if (!st && best < global) {
            global = best;
            memcpy(s, s_out, (size_t)C * sizeof *s);
            res->pieces = K;
        }
    }
    res->loss = global;
done:
    free(wmax), free(s_out), free(full), free(keep), free(cand), free(order), free(first);
    free(c.Y0), free(c.Y), free(c.xq), free(c.wq);
    return st;
}
