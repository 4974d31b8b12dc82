/* cpu_ref.c — see cpu_ref.h.  Clarity over speed: every kernel is the textbook loop. */
#include "cpu_ref.h"

#include <math.h>
#include <stdlib.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static int bad_dims2(int64_t a, int64_t b) { return a < 0 || b < 0; }

/* A matrix argument with `rows` x `cols` elements (ld between rows) is usable. */
static int bad_mat(const float *p, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows == 0 || cols == 0) return 0;
    return p == NULL || ld < cols;
}

/* plugin.h's, so weights and activations round the same way. */
float lmp_ref_round(float x, lmp_rounding r) { return lmp_wgrid_round(x, r); }

static float clampf(float x, float lo, float hi) { return lmp_wgrid_clampf(x, lo, hi); }

/* ---- linear algebra ----------------------------------------------------------------------- */

int lmp_ref_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M < 0 || N < 0 || K < 0) return LMP_EINVAL;
    if (bad_mat(A, ta ? K : M, ta ? M : K, lda) || bad_mat(B, tb ? N : K, tb ? K : N, ldb) ||
        bad_mat(C, M, N, ldc))
        return LMP_EINVAL;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            if (alpha != 0.0f) {
                for (int64_t p = 0; p < K; p++) {
                    double a = ta ? A[p * lda + i] : A[i * lda + p]; /* op(A)[i,p] */
                    double b = tb ? B[j * ldb + p] : B[p * ldb + j]; /* op(B)[p,j] */
                    s += a * b;
                }
            }
            double c = (double)alpha * s;
            if (beta != 0.0f) c += (double)beta * C[i * ldc + j];
            C[i * ldc + j] = (float)c;
        }
    }
    return LMP_OK;
}

int lmp_ref_xtx_accum(int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    if (bad_dims2(n, c)) return LMP_EINVAL;
    if (c > 0 && (H == NULL || (n > 0 && X == NULL))) return LMP_EINVAL;
    for (int64_t i = 0; i < c; i++) {
        for (int64_t j = 0; j < c; j++) {
            double s = 0.0;
            for (int64_t r = 0; r < n; r++) s += (double)X[r * c + i] * X[r * c + j];
            H[i * c + j] = (float)(H[i * c + j] + (double)alpha * s);
        }
    }
    return LMP_OK;
}

int lmp_ref_cholesky(int64_t n, float *A, int64_t *bad_pivot)
{
    if (n < 0 || (n > 0 && A == NULL)) return LMP_EINVAL;
    /* Cholesky–Banachiewicz, row by row: L[i,j] for j <= i only needs rows < i and row i's
     * earlier entries, so the lower triangle of A is overwritten in place. */
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j <= i; j++) {
            double s = A[i * n + j];
            for (int64_t k = 0; k < j; k++) s -= (double)A[i * n + k] * A[j * n + k];
            if (i == j) {
                if (!(s > 0.0)) { /* also catches NaN */
                    if (bad_pivot) *bad_pivot = i;
                    return LMP_ENOTSPD;
                }
                A[i * n + i] = (float)sqrt(s);
            } else {
                A[i * n + j] = (float)(s / A[j * n + j]);
            }
        }
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) A[i * n + j] = 0.0f;
    return LMP_OK;
}

int lmp_ref_chol_inverse(int64_t n, float *L)
{
    if (n < 0 || (n > 0 && L == NULL)) return LMP_EINVAL;
    if (n == 0) return LMP_OK;
    for (int64_t i = 0; i < n; i++)
        if (L[i * n + i] == 0.0f) return LMP_ENOTSPD;
    /* Li = L^-1 (lower) by forward substitution on the columns of I, in double. */
    double *Li = calloc((size_t)n * (size_t)n, sizeof *Li);
    if (!Li) return LMP_ENOMEM;
    for (int64_t j = 0; j < n; j++) {
        Li[j * n + j] = 1.0 / L[j * n + j];
        for (int64_t i = j + 1; i < n; i++) {
            double s = 0.0;
            for (int64_t k = j; k < i; k++) s += (double)L[i * n + k] * Li[k * n + j];
            Li[i * n + j] = -s / L[i * n + i];
        }
    }
    /* (L L^T)^-1 = L^-T L^-1:  inv[i,j] = sum_{k >= max(i,j)} Li[k,i] Li[k,j]. */
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j <= i; j++) {
            double s = 0.0;
            for (int64_t k = i; k < n; k++) s += Li[k * n + i] * Li[k * n + j];
            L[i * n + j] = L[j * n + i] = (float)s;
        }
    }
    free(Li);
    return LMP_OK;
}

int lmp_ref_trsm_lower(int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    if (bad_dims2(n, nrhs)) return LMP_EINVAL;
    if (n > 0 && (L == NULL || (nrhs > 0 && B == NULL))) return LMP_EINVAL;
    for (int64_t r = 0; r < nrhs; r++) { /* one right-hand side (column of B) at a time */
        if (!trans) { /* L x = b: forward substitution */
            for (int64_t i = 0; i < n; i++) {
                double s = B[i * nrhs + r];
                for (int64_t k = 0; k < i; k++) s -= (double)L[i * n + k] * B[k * nrhs + r];
                B[i * nrhs + r] = (float)(s / L[i * n + i]);
            }
        } else { /* L^T x = b: backward substitution, (L^T)[i,k] = L[k,i] */
            for (int64_t i = n - 1; i >= 0; i--) {
                double s = B[i * nrhs + r];
                for (int64_t k = i + 1; k < n; k++) s -= (double)L[k * n + i] * B[k * nrhs + r];
                B[i * nrhs + r] = (float)(s / L[i * n + i]);
            }
        }
    }
    return LMP_OK;
}

/* ---- transformer pieces ------------------------------------------------------------------- */

int lmp_ref_rmsnorm(int64_t T, int64_t C, const float *x, const float *w, float eps, float *out)
{
    if (bad_dims2(T, C)) return LMP_EINVAL;
    if (T > 0 && C > 0 && (!x || !w || !out)) return LMP_EINVAL;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * C;
        float *o = out + t * C;
        double ss = 0.0;
        for (int64_t i = 0; i < C; i++) ss += (double)xr[i] * xr[i];
        double inv = 1.0 / sqrt(ss / (double)C + (double)eps);
        for (int64_t i = 0; i < C; i++) o[i] = (float)((double)xr[i] * inv * w[i]);
    }
    return LMP_OK;
}

int lmp_ref_rope(int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
                 float *x)
{
    if (T < 0 || n_heads < 0 || head_dim < 0 || head_dim % 2 != 0) return LMP_EINVAL;
    if (T > 0 && n_heads > 0 && head_dim > 0 && x == NULL) return LMP_EINVAL;
    int64_t dim = n_heads * head_dim;
    for (int64_t t = 0; t < T; t++) {
        double pos = (double)(pos0 + t);
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + t * dim + h * head_dim;
            for (int64_t i = 0; i < head_dim / 2; i++) {
                double ang = pos * pow((double)theta, -2.0 * (double)i / (double)head_dim);
                double c = cos(ang), s = sin(ang);
                double x0 = xh[2 * i], x1 = xh[2 * i + 1];
                xh[2 * i] = (float)(x0 * c - x1 * s);
                xh[2 * i + 1] = (float)(x0 * s + x1 * c);
            }
        }
    }
    return LMP_OK;
}

int lmp_ref_hadamard(int64_t rows, int64_t n, float *x)
{
    if (rows < 0 || n < 1 || (n & (n - 1)) != 0) return LMP_EINVAL;
    if (rows > 0 && !x) return LMP_EINVAL;
    double *y = malloc((size_t)n * sizeof *y);
    if (!y) return LMP_ENOMEM;
    const double norm = 1.0 / sqrt((double)n);
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * n;
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t i = 0; i < n; i++) acc += __builtin_parityll((unsigned long long)(i & j)) ? -row[i] : row[i];
            y[j] = acc * norm;
        }
        for (int64_t j = 0; j < n; j++) row[j] = (float)y[j];
    }
    free(y);
    return LMP_OK;
}

int lmp_ref_rope_table(int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0,
                       const float *inv_freq, float mscale, float *x)
{
    if (T < 0 || n_heads < 0 || head_dim < 0 || n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0) return LMP_EINVAL;
    if (T > 0 && n_heads > 0 && n_rot > 0 && (!x || !inv_freq)) return LMP_EINVAL;
    const int64_t dim = n_heads * head_dim;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + t * dim + h * head_dim;
            for (int64_t i = 0; i < n_rot / 2; i++) {
                const double ang = (double)((float)(pos0 + t) * inv_freq[i]);
                const double c = cos(ang) * mscale, s = sin(ang) * mscale;
                const double x0 = xh[2 * i], x1 = xh[2 * i + 1];
                xh[2 * i] = (float)(x0 * c - x1 * s);
                xh[2 * i + 1] = (float)(x0 * s + x1 * c);
            }
        }
    return LMP_OK;
}

int lmp_ref_attention(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, const float *q,
                      const float *k, const float *v, float *out)
{
    return lmp_ref_attention_window(T, n_heads, n_kv_heads, hd, 0, 0.0f, q, k, v, out);
}

static int attention_scored(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                            float softcap, const float *slopes, const float *q, const float *k, const float *v,
                            float *out);

int lmp_ref_attention_window(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                             float softcap, const float *q, const float *k, const float *v, float *out)
{
    return attention_scored(T, n_heads, n_kv_heads, hd, window, softcap, NULL, q, k, v, out);
}

int lmp_ref_attention_alibi(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                            const float *slopes, const float *q, const float *k, const float *v, float *out)
{
    if (!slopes && T > 0 && n_heads > 0) return LMP_EINVAL;
    return attention_scored(T, n_heads, n_kv_heads, hd, window, 0.0f, slopes, q, k, v, out);
}

/* Both: a score is q.k / sqrt(hd), soft-capped, plus slopes[h] (j - t) when slopes. */
static int attention_scored(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                            float softcap, const float *slopes, const float *q, const float *k, const float *v,
                            float *out)
{
    if (T < 0 || n_heads < 0 || n_kv_heads <= 0 || hd <= 0 || n_heads % n_kv_heads != 0 || window < 0 || softcap < 0)
        return LMP_EINVAL;
    if (T == 0 || n_heads == 0) return LMP_OK;
    if (!q || !k || !v || !out) return LMP_EINVAL;
    int64_t qdim = n_heads * hd, kvdim = n_kv_heads * hd, group = n_heads / n_kv_heads;
    double scale = 1.0 / sqrt((double)hd);
    double *p = malloc((size_t)T * sizeof *p); /* scores, then probabilities, of one query */
    double *acc = malloc((size_t)hd * sizeof *acc);
    if (!p || !acc) {
        free(p);
        free(acc);
        return LMP_ENOMEM;
    }
    for (int64_t h = 0; h < n_heads; h++) {
        int64_t kh = h / group;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * qdim + h * hd;
            double mx = -INFINITY;
            const int64_t lo = window && t - window + 1 > 0 ? t - window + 1 : 0; /* keys lo..t */
            for (int64_t j = lo; j <= t; j++) {
                const float *kj = k + j * kvdim + kh * hd;
                double s = 0.0;
                for (int64_t d = 0; d < hd; d++) s += (double)qt[d] * kj[d];
                p[j] = s * scale;
                if (softcap > 0) p[j] = softcap * tanh(p[j] / softcap);
                if (slopes) p[j] += (double)slopes[h] * (double)(j - t);
                if (p[j] > mx) mx = p[j];
            }
            double sum = 0.0;
            for (int64_t j = lo; j <= t; j++) { /* subtract the max so exp cannot overflow */
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (int64_t d = 0; d < hd; d++) acc[d] = 0.0;
            for (int64_t j = lo; j <= t; j++) {
                const float *vj = v + j * kvdim + kh * hd;
                for (int64_t d = 0; d < hd; d++) acc[d] += p[j] * vj[d];
            }
            float *ot = out + t * qdim + h * hd;
            for (int64_t d = 0; d < hd; d++) ot[d] = (float)(acc[d] / sum);
        }
    }
    free(p);
    free(acc);
    return LMP_OK;
}

int lmp_ref_attention_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, const float *q,
                               const float *k, const float *v, const float *dout, float *dq, float *dk, float *dv)
{
    if (T < 0 || n_heads < 0 || n_kv_heads <= 0 || hd <= 0 || n_heads % n_kv_heads != 0) return LMP_EINVAL;
    if (T == 0 || n_heads == 0) return LMP_OK;
    if (!q || !k || !v || !dout || !dq || !dk || !dv) return LMP_EINVAL;
    const int64_t qdim = n_heads * hd, kvdim = n_kv_heads * hd, group = n_heads / n_kv_heads;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
    double *dq_t = malloc((size_t)hd * sizeof *dq_t);
    double *dkv = calloc((size_t)(2 * T * kvdim), sizeof *dkv); /* dk, then dv */
    if (!p || !dp || !dq_t || !dkv) {
        free(p);
        free(dp);
        free(dq_t);
        free(dkv);
        return LMP_ENOMEM;
    }
    for (int64_t h = 0; h < n_heads; h++) {
        const int64_t kh = h / group;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * qdim + h * hd, *gt = dout + t * qdim + h * hd;
            double mx = -INFINITY, sum = 0.0, pdp = 0.0;
            for (int64_t j = 0; j <= t; j++) {
                const float *kj = k + j * kvdim + kh * hd, *vj = v + j * kvdim + kh * hd;
                double s = 0.0, g = 0.0;
                for (int64_t d = 0; d < hd; d++) {
                    s += (double)qt[d] * kj[d];
                    g += (double)gt[d] * vj[d];
                }
                p[j] = s * scale;
                dp[j] = g;
                if (p[j] > mx) mx = p[j];
            }
            for (int64_t j = 0; j <= t; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (int64_t j = 0; j <= t; j++) {
                p[j] /= sum;
                pdp += p[j] * dp[j];
            }
            for (int64_t d = 0; d < hd; d++) dq_t[d] = 0.0;
            for (int64_t j = 0; j <= t; j++) {
                const double ds = p[j] * (dp[j] - pdp) * scale;
                const float *kj = k + j * kvdim + kh * hd;
                double *dkj = dkv + j * kvdim + kh * hd, *dvj = dkv + T * kvdim + j * kvdim + kh * hd;
                for (int64_t d = 0; d < hd; d++) {
                    dq_t[d] += ds * kj[d];
                    dkj[d] += ds * qt[d];
                    dvj[d] += p[j] * gt[d];
                }
            }
            for (int64_t d = 0; d < hd; d++) dq[t * qdim + h * hd + d] = (float)dq_t[d];
        }
    }
    for (int64_t i = 0; i < T * kvdim; i++) {
        dk[i] = (float)dkv[i];
        dv[i] = (float)dkv[T * kvdim + i];
    }
    free(p);
    free(dp);
    free(dq_t);
    free(dkv);
    return LMP_OK;
}

int lmp_ref_layernorm(int64_t T, int64_t C, const float *x, const float *w, const float *b,
                      float eps, float *out)
{
    if (bad_dims2(T, C)) return LMP_EINVAL;
    if (T > 0 && C > 0 && (!x || !w || !out)) return LMP_EINVAL;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * C;
        float *o = out + t * C;
        double mean = 0.0, var = 0.0;
        for (int64_t i = 0; i < C; i++) mean += xr[i];
        mean /= (double)C;
        for (int64_t i = 0; i < C; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        double inv = 1.0 / sqrt(var / (double)C + (double)eps);
        for (int64_t i = 0; i < C; i++)
            o[i] = (float)(((double)xr[i] - mean) * inv * w[i] + (b ? (double)b[i] : 0.0));
    }
    return LMP_OK;
}

int lmp_ref_gelu(int64_t n, const float *x, float *out)
{
    if (n < 0) return LMP_EINVAL;
    if (n > 0 && (!x || !out)) return LMP_EINVAL;
    const double k = 0.79788456080286535588; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        out[i] = (float)(0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v))));
    }
    return LMP_OK;
}

int lmp_ref_swiglu(int64_t n, const float *gate, const float *up, float *out)
{
    if (n < 0) return LMP_EINVAL;
    if (n > 0 && (!gate || !up || !out)) return LMP_EINVAL;
    for (int64_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * (double)up[i]);
    }
    return LMP_OK;
}

int lmp_ref_log_softmax(int64_t rows, int64_t cols, const float *x, float *out)
{
    if (bad_dims2(rows, cols)) return LMP_EINVAL;
    if (rows > 0 && cols > 0 && (!x || !out)) return LMP_EINVAL;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        double mx = -INFINITY;
        for (int64_t j = 0; j < cols; j++)
            if (xr[j] > mx) mx = xr[j];
        double sum = 0.0;
        for (int64_t j = 0; j < cols; j++) sum += exp((double)xr[j] - mx);
        double lse = mx + log(sum); /* log(sum exp x) without overflow */
        for (int64_t j = 0; j < cols; j++) o[j] = (float)((double)xr[j] - lse);
    }
    return LMP_OK;
}

int lmp_ref_reduce_cols(lmp_reduce kind, int64_t n, int64_t c, const float *X, float *out)
{
    if (bad_dims2(n, c)) return LMP_EINVAL;
    if (kind < LMP_REDUCE_ABSMAX || kind > LMP_REDUCE_SUM) return LMP_EINVAL;
    if (c > 0 && (!out || (n > 0 && !X))) return LMP_EINVAL;
    for (int64_t j = 0; j < c; j++) {
        if (kind == LMP_REDUCE_SUM) {
            double s = out[j];
            for (int64_t i = 0; i < n; i++) s += X[i * c + j];
            out[j] = (float)s;
            continue;
        }
        float m = out[j];
        for (int64_t i = 0; i < n; i++) {
            float x = X[i * c + j];
            if (kind == LMP_REDUCE_ABSMAX) x = fabsf(x);
            /* written as "replace when strictly better" so a NaN x never replaces m */
            if (kind == LMP_REDUCE_MIN ? x < m : x > m) m = x;
        }
        out[j] = m;
    }
    return LMP_OK;
}

/* ---- quantization (docs/algorithms.md §1, plugin.h) -------------------------------------------- */

/* The checks both weight-grid ops share: a spec the formulas of plugin.h cover. */
static int bad_wspec(const lmp_wspec *s)
{
    if (!s || s->bits < (s->format == LMP_WFORMAT_GGUF_Q1_0 ? 1 : 2) || s->bits > 8) return 1;
    if (s->rounding != LMP_ROUND_HALF_EVEN && s->rounding != LMP_ROUND_HALF_AWAY) return 1;
    if (s->gran != LMP_GRAN_TENSOR && s->gran != LMP_GRAN_CHANNEL && s->gran != LMP_GRAN_GROUP && s->gran != LMP_GRAN_BLOCK)
        return 1;
    if ((s->gran == LMP_GRAN_GROUP || s->gran == LMP_GRAN_BLOCK) && s->group <= 0) return 1;
    if (!(s->clip >= 0.0f && s->clip <= 1.0f)) return 1; /* also NaN; 0 means 1 */
    return !lmp_wspec_format_ok(s);
}

/* The slices of W[rows, cols] in the order their scales are stored: [nr, nc] blocks, the last
 * of a row possibly narrower (and with LMP_GRAN_BLOCK the last of a column shorter: the tiles
 * compressed-tensors pads with zeros, which change no abs-max). */
static void wslices(const lmp_wspec *s, int64_t rows, int64_t cols, int64_t *nr, int64_t *nc)
{
    *nr = s->gran == LMP_GRAN_TENSOR ? rows : s->gran == LMP_GRAN_BLOCK ? s->group : 1;
    *nc = s->gran == LMP_GRAN_GROUP || s->gran == LMP_GRAN_BLOCK ? s->group : cols;
}

int lmp_ref_choose_weight_grid(const lmp_wspec *spec, int64_t rows, int64_t cols, const float *W,
                               float *scales, float *zeros)
{
    if (bad_wspec(spec) || bad_dims2(rows, cols)) return LMP_EINVAL;
    if (cols % lmp_wformat_span(spec->format)) return LMP_EINVAL;
    if (rows == 0 || cols == 0) return LMP_OK;
    if (!W || !scales || (!spec->sym && !zeros)) return LMP_EINVAL;
    if (lmp_wformat_is_k(spec->format)) { /* a super-block of 256 at a time, its sub-blocks in row order */
        const int64_t nsub = LMP_WFORMAT_KBLOCK / spec->group;
        for (int64_t i = 0, idx = 0; i < rows; i++)
            for (int64_t c = 0; c < cols; c += LMP_WFORMAT_KBLOCK, idx += nsub)
                lmp_wgrid_fit_kblock(spec, W + i * cols + c, NULL, scales + idx, spec->sym ? NULL : zeros + idx);
        return LMP_OK;
    }
    if (spec->format != LMP_WFORMAT_INT && !lmp_wformat_is_fp(spec->format)) { /* GGUF blocks (NF4's): 32 (64) inputs of a row, in row order */
        int64_t idx = 0;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t c = 0; c < cols; c += spec->group, idx++) {
                float d, m;
                lmp_wgrid_fit_block(spec, W + i * cols + c, spec->group, &d, &m);
                scales[idx] = d;
                if (!spec->sym) zeros[idx] = m;
            }
        return LMP_OK;
    }
    int64_t nr, nc, idx = 0;
    wslices(spec, rows, cols, &nr, &nc);
    for (int64_t r = 0; r < rows; r += nr) {
        const int64_t re = r + nr <= rows ? r + nr : rows;
        for (int64_t c = 0; c < cols; c += nc) {
            const int64_t ncw = c + nc <= cols ? nc : cols - c;
            float mn = 0.0f, mx = 0.0f, amax = 0.0f; /* 0 belongs to every asym range anyway */
            for (int64_t i = r; i < re; i++) {
                for (int64_t j = c; j < c + ncw; j++) {
                    float w = W[i * cols + j];
                    if (w < mn) mn = w;
                    if (w > mx) mx = w;
                    if (fabsf(w) > amax) amax = fabsf(w);
                }
            }
            float scale, zero = 0.0f;
            if (lmp_wformat_is_fp(spec->format)) /* the floating-point grids: INT's slices, their own scale */
                scale = lmp_wgrid_fit_fp(spec, amax);
            else
                lmp_wgrid_fit(spec, mn, mx, amax, &scale, &zero);
            scales[idx] = scale;
            if (!spec->sym) zeros[idx] = zero;
            idx++;
        }
    }
    return LMP_OK;
}

int lmp_ref_apply_weight_grid(const lmp_wspec *spec, int64_t rows, int64_t cols, float *W,
                              const float *scales, const float *zeros, int32_t *codes)
{
    if (bad_wspec(spec) || bad_dims2(rows, cols)) return LMP_EINVAL;
    if (cols % lmp_wformat_span(spec->format)) return LMP_EINVAL;
    if (rows == 0 || cols == 0) return LMP_OK;
    if (!W || !scales || (!spec->sym && !zeros)) return LMP_EINVAL;
    /* a GGUF format's spec is a group-32 grid (a k-quant's: its sub-blocks) (bad_wspec), so its blocks are these slices and
     * lmp_wgrid_code/value do the format's arithmetic */
    int64_t nr, nc, idx = 0;
    wslices(spec, rows, cols, &nr, &nc);
    for (int64_t r = 0; r < rows; r += nr) {
        const int64_t re = r + nr <= rows ? r + nr : rows;
        for (int64_t c = 0; c < cols; c += nc) {
            const int64_t ncw = c + nc <= cols ? nc : cols - c;
            const float scale = scales[idx], zero = spec->sym ? 0.0f : zeros[idx];
            idx++;
            for (int64_t i = r; i < re; i++) {
                for (int64_t j = c; j < c + ncw; j++) {
                    float q = lmp_wgrid_code(spec, W[i * cols + j], scale, zero);
                    W[i * cols + j] = lmp_wgrid_value(spec, q, scale, zero);
                    if (codes) codes[i * cols + j] = lmp_wgrid_code_i32(q);
                }
            }
        }
    }
    return LMP_OK;
}

/* x' = clamp(round(x/s), -qmax, qmax) * s over n values. */
static void act_quantize(float *x, int64_t n, float s, float qmax, lmp_rounding r)
{
    for (int64_t i = 0; i < n; i++) x[i] = clampf(lmp_ref_round(x[i] / s, r), -qmax, qmax) * s;
}

static float absmax(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(x[i]) > m) m = fabsf(x[i]);
    return m;
}

/* The floating-point activations (lmp_act_mode 4..7, plugin.h): X[T, C] in place, each slice (the tensor, a token, a group
 * of 16 or 32 of a token) on the weight formula above of its abs-max, as compressed-tensors'
 * forward_quantize computes them (calculate_qparams of the slice's min and max, then
 * fake_quantize; an FP8 scale 0 becomes f32's eps).  LMP_ACT_FP8_STATIC_TENSOR and LMP_ACT_NVFP4
 * need spec->scale > 0 (the static scale, NVFP4's global scale).  LMP_EINVAL otherwise (C not a
 * multiple of the group). */
static int act_quantize_fp(const lmp_aspec *a, int64_t T, int64_t C, float *X)
{
    lmp_wspec s = lmp_wspec_for_format(a->mode == LMP_ACT_NVFP4   ? LMP_WFORMAT_NVFP4
                                       : a->mode == LMP_ACT_MXFP4 ? LMP_WFORMAT_MXFP4
                                                                  : LMP_WFORMAT_FP8_E4M3, 1.0f);
    const int64_t group = a->mode == LMP_ACT_NVFP4 ? 16 : a->mode == LMP_ACT_MXFP4 ? 32 : C;
    if (a->mode == LMP_ACT_NVFP4) s.global_scale = a->scale;
    if ((a->mode == LMP_ACT_FP8_STATIC_TENSOR || a->mode == LMP_ACT_NVFP4) && !(a->scale > 0.0f && a->scale < INFINITY))
        return LMP_EINVAL;
    if (group <= 0 || C % group) return LMP_EINVAL;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c += group) {
            float *x = X + t * C + c, amax = 0.0f;
            for (int64_t j = 0; j < group; j++)
                if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
            const float scale = a->mode == LMP_ACT_FP8_STATIC_TENSOR ? a->scale : lmp_wgrid_fit_fp(&s, amax);
            for (int64_t j = 0; j < group; j++) x[j] = lmp_wgrid_value_fp(&s, lmp_wgrid_code_fp(&s, x[j], scale), scale);
        }
    return LMP_OK;
}

int lmp_ref_quantize_act(const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    if (!spec || bad_dims2(T, C)) return LMP_EINVAL;
    if (spec->mode == LMP_ACT_NONE) return LMP_OK;
    if (spec->mode >= LMP_ACT_FP8_STATIC_TENSOR && spec->mode <= LMP_ACT_MXFP4) /* plugin_fpquants.h */
        return T == 0 || C == 0 ? LMP_OK : !X ? LMP_EINVAL : act_quantize_fp(spec, T, C, X);
    if (spec->mode < LMP_ACT_STATIC_TENSOR || spec->mode > LMP_ACT_DYN_TOKEN) return LMP_EINVAL;
    if (spec->bits < 2 || spec->bits > 16) return LMP_EINVAL;
    if (spec->rounding != LMP_ROUND_HALF_EVEN && spec->rounding != LMP_ROUND_HALF_AWAY)
        return LMP_EINVAL;
    if (spec->mode == LMP_ACT_STATIC_TENSOR && !(spec->scale > 0.0f && isfinite(spec->scale)))
        return LMP_EINVAL;
    if (T == 0 || C == 0) return LMP_OK;
    if (!X) return LMP_EINVAL;
    float qmax = (float)((1 << (spec->bits - 1)) - 1);
    switch (spec->mode) {
    case LMP_ACT_STATIC_TENSOR:
        act_quantize(X, T * C, spec->scale, qmax, spec->rounding);
        break;
    case LMP_ACT_DYN_TENSOR:
        act_quantize(X, T * C, fmaxf(absmax(X, T * C), 1e-5f) / qmax, qmax, spec->rounding);
        break;
    default: /* LMP_ACT_DYN_TOKEN: one scale per row */
        for (int64_t t = 0; t < T; t++) {
            float *xr = X + t * C;
            act_quantize(xr, C, fmaxf(absmax(xr, C), 1e-5f) / qmax, qmax, spec->rounding);
        }
        break;
    }
    return LMP_OK;
}
