/* piecewise.h — SmoothQuant's scale formula and PaddleSlim's PieceWiseSearch (docs/algorithms.md
 * §3.2, §3.6), on one group of linears sharing an input.  Compiled into each smoothing plugin;
 * it uses only plugin.h. */
#ifndef LMP_PLUGIN_PIECEWISE_H
#define LMP_PLUGIN_PIECEWISE_H

#include "lmpress/plugin.h"

/* s_j = max(a_j^alpha / max(w_j, 1e-5)^(1-alpha), 1e-5), w_j = max_o |W[o, j]| given as wmax. */
void smooth_scales(int64_t C, const float *a, const float *wmax, double alpha, float *s);

/* wmax[j] = max over the rows of W[O, C] of |W[o, j]|, folded into wmax (caller zeroes it). */
void column_absmax(int64_t O, int64_t C, const float *W, float *wmax);

typedef struct piecewise_opts {
    int k_piece;             /* pieces (k-means clusters of the channel abs-max) */
    int search_piece;        /* try K = 1..k_piece and keep the best (else K = k_piece only) */
    double alpha_min, alpha_max;
    double scale_min, scale_max; /* constant-scale grid; <= 0 means None */
    int carry_s_out;         /* PaddleSlim: S_out is not reset between K (quirk 7) */
} piecewise_opts;

typedef struct piecewise_result {
    double loss;             /* search loss of the returned scales */
    double alpha_loss;       /* loss of the alpha = 0.5 formula, for the log */
    int pieces;              /* K of the returned scales */
    int candidates;          /* evaluations */
} piecewise_result;

/* The search for inputs a[C] (calibration abs-max), W[O, C] (the group's weights, rows of all
 * its linears) and the token sample X[S, C]: s[C] receives the scales.  The loss of a scale
 * vector f is mean((Qa(X/f) Qw(W diag f)^T - X W^T)^2), Qa per-tensor abs-max, Qw per output row
 * abs-max, both 8-bit with halves rounded away from zero (§1.1). */
int piecewise_search(const lmp_host *host, void *hctx, const piecewise_opts *o, int64_t C,
                     int64_t O, int64_t S, const float *a, const float *W, const float *X,
                     float *s, piecewise_result *res);

#endif
