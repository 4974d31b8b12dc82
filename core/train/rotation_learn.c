/* rotation_learn.c — see rotation_learn.h. */
#include "train/rotation_learn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "model/forward.h"
#include "plugin/host_services.h"
#include "train/backward.h"
#include "train/loss.h"
#include "train/model_grad.h"

struct lmp_rotlearn {
    const lmp_backend *be;
    lmp_model *m;          /* the fixed-rotated model: its embeddings, head and f32 blocks are the base */
    lmp_model tm;          /* a shallow copy whose embeddings and head are E and H below */
    const lmp_block *base; /* [L] the fixed-rotated blocks (m's) */
    lmp_block *train;      /* [L] what the training forward runs: base turned by R1/R2, fake-quantized */
    int64_t d, hd, L, V, T;
    int learn_r1, learn_r2, w_bits, a_bits;
    int fresh;             /* train, E and H were made from the current R1/R2 */
    double *R1, *R2;       /* [d, d], [L, hd, hd] */
    float *R1f, *R2f;      /* their f32 copies, for the GEMMs */
    float *dR1, *dR2;      /* gradients, same shapes */
    float *E, *H;          /* [V, d] embeddings and head turned by R1 (when learn_r1) */
    float *dH;             /* [V, d] the head's gradient over one call */
    float *tmp, *tmp2;     /* [max out·in] scratch */
    float *x0;             /* [T, d] the base embeddings of a window */
    float *lp, *ref;       /* [T, V] */
    lmp_model_tape mt;
    lmp_block_grads *g;    /* [L] */
    lmp_block_grads **gp;
};

static int is_writer(lmp_role r) { return r == LMP_ROLE_O || r == LMP_ROLE_DOWN; }
static int quantized(lmp_role r) { return r != LMP_ROLE_ROUTER && r != LMP_ROLE_SHARED_GATE; }

double *lmp_rotlearn_r1(lmp_rotlearn *s) { return s->learn_r1 ? s->R1 : NULL; }
double *lmp_rotlearn_r2(lmp_rotlearn *s) { return s->learn_r2 ? s->R2 : NULL; }
void lmp_rotlearn_touch(lmp_rotlearn *s) { s->fresh = 0; }
const float *lmp_rotlearn_grad_r1(const lmp_rotlearn *s) { return s->learn_r1 ? s->dR1 : NULL; }
const float *lmp_rotlearn_grad_r2(const lmp_rotlearn *s) { return s->learn_r2 ? s->dR2 : NULL; }

void lmp_rotlearn_zero_grad(lmp_rotlearn *s)
{
    if (s->learn_r1) memset(s->dR1, 0, (size_t)(s->d * s->d) * sizeof *s->dR1);
    if (s->learn_r2) memset(s->dR2, 0, (size_t)(s->L * s->hd * s->hd) * sizeof *s->dR2);
}

void lmp_rotlearn_free(lmp_rotlearn *s)
{
    if (!s) return;
    for (int64_t l = 0; s->train && l < s->L; l++) lmp_block_free(&s->train[l]);
    free(s->train);
    for (int64_t l = 0; s->g && l < s->L; l++) lmp_block_grads_free(&s->g[l]);
    free(s->g);
    free(s->gp);
    lmp_model_tape_free(&s->mt);
    free(s->R1), free(s->R2), free(s->R1f), free(s->R2f), free(s->dR1), free(s->dR2);
    free(s->E), free(s->H), free(s->dH), free(s->tmp), free(s->tmp2), free(s->x0), free(s->lp);
    free(s);
}

int lmp_rotlearn_init(const lmp_backend *be, lmp_model *m, int learn_r1, int learn_r2, int w_bits, int a_bits,
                      int64_t T, lmp_rotlearn **out)
{
    *out = NULL;
    if (w_bits < 0 || w_bits == 1 || w_bits > 8 || a_bits < 0 || a_bits == 1 || a_bits > 8)
        return lmp_fail(LMP_EINVAL, "learned rotations: w_bits %d and a_bits %d must be 0 (not quantized) or 2..8",
                        w_bits, a_bits);
    if (!m->rotation) return lmp_fail(LMP_EINVAL, "learned rotations: %s is not rotated (lmp_model_rotate first)", m->path);
    lmp_rotlearn *s = calloc(1, sizeof *s);
    if (!s) return lmp_fail(LMP_ENOMEM, "out of memory");
    const lmp_arch *a = &m->arch;
    s->be = be, s->m = m, s->tm = *m;
    s->d = a->dim, s->hd = a->head_dim, s->L = a->n_layers, s->V = a->vocab, s->T = T;
    s->learn_r1 = learn_r1, s->learn_r2 = learn_r2, s->w_bits = w_bits, s->a_bits = a_bits;
    const int64_t d = s->d, hd = s->hd, L = s->L, V = s->V;
    int st = 0;
    if (!(s->base = lmp_model_blocks(m))) st = lmp_fail_prefix(LMP_ENOMEM, "learned rotations: the model's blocks: ");
    int64_t most = 0;
    for (int64_t l = 0; !st && l < L; l++)
        for (int i = 0; i < s->base[l].n_linears; i++)
            if (s->base[l].linears[i].out * s->base[l].linears[i].in > most)
                most = s->base[l].linears[i].out * s->base[l].linears[i].in;
    if (!st) {
        s->R1 = calloc((size_t)(d * d), sizeof *s->R1);
        s->R2 = calloc((size_t)(L * hd * hd), sizeof *s->R2);
        s->R1f = malloc((size_t)(d * d) * sizeof *s->R1f);
        s->R2f = malloc((size_t)(L * hd * hd) * sizeof *s->R2f);
        s->dR1 = calloc((size_t)(d * d), sizeof *s->dR1);
        s->dR2 = calloc((size_t)(L * hd * hd), sizeof *s->dR2);
        s->tmp = malloc((size_t)most * sizeof *s->tmp);
        s->tmp2 = malloc((size_t)most * sizeof *s->tmp2);
        s->x0 = malloc((size_t)(T * d) * sizeof *s->x0);
        s->lp = malloc((size_t)(2 * T * V) * sizeof *s->lp);
        s->train = calloc((size_t)L, sizeof *s->train);
        s->g = calloc((size_t)L, sizeof *s->g);
        s->gp = calloc((size_t)L, sizeof *s->gp);
        if (learn_r1) {
            s->E = malloc((size_t)(V * d) * sizeof *s->E);
            s->H = malloc((size_t)(V * d) * sizeof *s->H);
            s->dH = malloc((size_t)(V * d) * sizeof *s->dH);
        }
        if (!s->R1 || !s->R2 || !s->R1f || !s->R2f || !s->dR1 || !s->dR2 || !s->tmp || !s->tmp2 || !s->x0 || !s->lp ||
            !s->train || !s->g || !s->gp || (learn_r1 && (!s->E || !s->H || !s->dH)))
            st = lmp_fail(LMP_ENOMEM, "out of memory to learn rotations");
    }
    if (!st) {
        s->ref = s->lp + T * V;
        for (int64_t i = 0; i < d; i++) s->R1[i * d + i] = 1.0;
        for (int64_t l = 0; l < L; l++)
            for (int64_t i = 0; i < hd; i++) s->R2[l * hd * hd + i * hd + i] = 1.0;
        if (learn_r1) s->tm.tok_emb = s->E, s->tm.lm_head = s->H;
    }
    for (int64_t l = 0; !st && l < L; l++) {
        st = lmp_block_clone(&s->base[l], &s->train[l]);
        if (!st) st = lmp_block_grads_alloc(&s->g[l], &s->train[l], LMP_ALL_LINEARS, 0);
        s->gp[l] = &s->g[l];
        for (int i = 0; !st && i < s->train[l].n_linears; i++)
            if (a_bits > 0 && quantized(s->train[l].linears[i].role))
                s->train[l].linears[i].act = (lmp_aspec){.mode = LMP_ACT_DYN_TOKEN, .bits = a_bits};
    }
    if (!st) st = lmp_model_tape_init(&s->mt, &s->tm, T);
    if (st) {
        lmp_rotlearn_free(s);
        return st;
    }
    *out = s;
    return 0;
}

/* The weights of base linear bl turned by R1 and block l's R2 into tl (before quantization). */
static int turn_linear(lmp_rotlearn *s, int64_t l, const lmp_linear *bl, lmp_linear *tl)
{
    const lmp_backend *be = s->be;
    const int64_t out = bl->out, in = bl->in, hd = s->hd;
    const float *R1 = s->R1f, *R2 = s->R2f + l * hd * hd;
    const int r1 = s->learn_r1, r2 = s->learn_r2 && (bl->role == LMP_ROLE_V || bl->role == LMP_ROLE_O);
    int st = 0;
    if (!is_writer(bl->role)) { /* W R1, then v's heads R2^T W_h */
        float *y = r2 ? s->tmp : tl->w;
        if (r1) st = lmp_be_gemm(be, 0, 0, out, in, in, 1.0f, bl->w, in, R1, in, 0.0f, y, in);
        else memcpy(y, bl->w, (size_t)(out * in) * sizeof *y);
        for (int64_t h = 0; r2 && !st && h < out / hd; h++)
            st = lmp_be_gemm(be, 1, 0, hd, in, hd, 1.0f, R2, hd, y + h * hd * in, in, 0.0f, tl->w + h * hd * in, in);
        if (bl->b) memcpy(tl->b, bl->b, (size_t)out * sizeof *tl->b);
        for (int64_t h = 0; r2 && bl->b && !st && h < out / hd; h++)
            st = lmp_be_gemm(be, 0, 0, 1, hd, hd, 1.0f, bl->b + h * hd, hd, R2, hd, 0.0f, tl->b + h * hd, hd);
        return st;
    }
    /* R1^T W, then o's heads W_h R2; the bias b R1 */
    float *y = r2 ? s->tmp : tl->w;
    if (r1) st = lmp_be_gemm(be, 1, 0, out, in, out, 1.0f, R1, out, bl->w, in, 0.0f, y, in);
    else memcpy(y, bl->w, (size_t)(out * in) * sizeof *y);
    for (int64_t h = 0; r2 && !st && h < in / hd; h++)
        st = lmp_be_gemm(be, 0, 0, out, hd, hd, 1.0f, y + h * hd, in, R2, hd, 0.0f, tl->w + h * hd, in);
    if (!st && bl->b) {
        if (r1) st = lmp_be_gemm(be, 0, 0, 1, out, out, 1.0f, bl->b, out, R1, out, 0.0f, tl->b, out);
        else memcpy(tl->b, bl->b, (size_t)out * sizeof *tl->b);
    }
    return st;
}

/* Everything the training forward runs, from the current R1 and R2. */
static int materialize(lmp_rotlearn *s)
{
    if (s->fresh) return 0;
    const int64_t d = s->d, hd = s->hd, V = s->V;
    for (int64_t i = 0; i < d * d; i++) s->R1f[i] = (float)s->R1[i];
    for (int64_t i = 0; i < s->L * hd * hd; i++) s->R2f[i] = (float)s->R2[i];
    int st = 0;
    if (s->learn_r1) {
        st = lmp_be_gemm(s->be, 0, 0, V, d, d, 1.0f, s->m->tok_emb, d, s->R1f, d, 0.0f, s->E, d);
        if (!st) st = lmp_be_gemm(s->be, 0, 0, V, d, d, 1.0f, s->m->lm_head, d, s->R1f, d, 0.0f, s->H, d);
    }
    for (int64_t l = 0; !st && l < s->L; l++)
        for (int i = 0; !st && i < s->base[l].n_linears; i++) {
            lmp_linear *tl = &s->train[l].linears[i];
            st = turn_linear(s, l, &s->base[l].linears[i], tl);
            if (st || s->w_bits == 0 || !quantized(tl->role)) continue;
            /* RTN, symmetric per output channel: the grid the W4A4 variants use */
            const lmp_wspec spec = {.bits = s->w_bits, .sym = LMP_SYM_QMAX, .gran = LMP_GRAN_CHANNEL};
            st = lmp_be_choose_weight_grid(s->be, &spec, tl->out, tl->in, tl->w, s->tmp2, NULL);
            if (!st) st = lmp_be_apply_weight_grid(s->be, &spec, tl->out, tl->in, tl->w, s->tmp2, NULL, NULL);
        }
    if (!st) s->fresh = 1;
    return st;
}

/* dL/dR1 and dL/dR2 from block l's linear i: G = dL/dW (straight through the quantization),
 * gb = dL/db (NULL: none). */
static int pull_linear(lmp_rotlearn *s, int64_t l, const lmp_linear *bl, const float *G, const float *gb)
{
    const lmp_backend *be = s->be;
    const int64_t out = bl->out, in = bl->in, hd = s->hd;
    const float *R1 = s->R1f, *R2 = s->R2f + l * hd * hd;
    float *dR2 = s->dR2 + l * hd * hd;
    const int r1 = s->learn_r1, r2 = s->learn_r2 && (bl->role == LMP_ROLE_V || bl->role == LMP_ROLE_O);
    int st = 0;
    if (!is_writer(bl->role)) {
        /* W' = B2^T (W R1):  dR1 += W^T (B2 G);  dR2 += sum_h (W R1)_h G_h^T;  b'_h = b_h R2: dR2 += b_h^T gb_h */
        const float *G1 = G;
        if (r1 && r2) {
            for (int64_t h = 0; !st && h < out / hd; h++)
                st = lmp_be_gemm(be, 0, 0, hd, in, hd, 1.0f, R2, hd, G + h * hd * in, in, 0.0f, s->tmp + h * hd * in, in);
            G1 = s->tmp;
        }
        if (r1 && !st) st = lmp_be_gemm(be, 1, 0, in, in, out, 1.0f, bl->w, in, G1, in, 1.0f, s->dR1, in);
        if (r2 && !st) {
            const float *Y = bl->w;
            if (r1) {
                st = lmp_be_gemm(be, 0, 0, out, in, in, 1.0f, bl->w, in, R1, in, 0.0f, s->tmp2, in);
                Y = s->tmp2;
            }
            for (int64_t h = 0; !st && h < out / hd; h++)
                st = lmp_be_gemm(be, 0, 1, hd, hd, in, 1.0f, Y + h * hd * in, in, G + h * hd * in, in, 1.0f, dR2, hd);
            for (int64_t h = 0; !st && bl->b && gb && h < out / hd; h++)
                st = lmp_be_gemm(be, 1, 0, hd, hd, 1, 1.0f, bl->b + h * hd, hd, gb + h * hd, hd, 1.0f, dR2, hd);
        }
        return st;
    }
    /* W' = R1^T W B2:  dR1 += W (G B2^T)^T;  dR2 += sum_h (R1^T W)_h^T G_h;  b' = b R1: dR1 += b^T gb */
    const float *G1 = G;
    if (r1 && r2) {
        for (int64_t h = 0; !st && h < in / hd; h++)
            st = lmp_be_gemm(be, 0, 1, out, hd, hd, 1.0f, G + h * hd, in, R2, hd, 0.0f, s->tmp + h * hd, in);
        G1 = s->tmp;
    }
    if (r1 && !st) st = lmp_be_gemm(be, 0, 1, out, out, in, 1.0f, bl->w, in, G1, in, 1.0f, s->dR1, out);
    if (r1 && !st && bl->b && gb) st = lmp_be_gemm(be, 1, 0, out, out, 1, 1.0f, bl->b, out, gb, out, 1.0f, s->dR1, out);
    if (r2 && !st) {
        const float *Z = bl->w;
        if (r1) {
            st = lmp_be_gemm(be, 1, 0, out, in, out, 1.0f, R1, out, bl->w, in, 0.0f, s->tmp2, in);
            Z = s->tmp2;
        }
        for (int64_t h = 0; !st && h < in / hd; h++)
            st = lmp_be_gemm(be, 1, 0, hd, hd, out, 1.0f, Z + h * hd, in, G + h * hd, in, 1.0f, dR2, hd);
    }
    return st;
}

/* KL(ref || model) per position averaged over T, or next-token cross-entropy over T-1, from
 * log-probabilities lp[T, V] (as learn.c's piece_loss). */
static double loss_of(const float *lp, const float *ref, const int32_t *tok, int64_t T, int64_t V)
{
    double sum = 0;
    for (int64_t t = 0; t < (ref ? T : T - 1); t++)
        if (!ref) sum -= lp[t * V + tok[t + 1]];
        else
            for (int64_t v = 0; v < V; v++) {
                const double pr = exp((double)ref[t * V + v]);
                if (pr > 0) sum += pr * ((double)ref[t * V + v] - lp[t * V + v]);
            }
    return sum / (double)(ref ? T : T - 1);
}

int lmp_rotlearn_loss(lmp_rotlearn *s, const int32_t *tok, const float *ref_logp, double *loss)
{
    int st = materialize(s);
    if (!st) st = lmp_forward(s->be, &s->tm, s->train, tok, s->T, 1, s->lp);
    if (!st) *loss = loss_of(s->lp, ref_logp, tok, s->T, s->V);
    return st;
}

int lmp_rotlearn_loss_grad(lmp_rotlearn *s, const int32_t *tok, const float *ref_logp, int want_grad, double *loss)
{
    if (!want_grad) return lmp_rotlearn_loss(s, tok, ref_logp, loss);
    const int64_t T = s->T, d = s->d, V = s->V;
    int st = materialize(s);
    for (int64_t l = 0; !st && l < s->L; l++) lmp_block_grads_zero(&s->g[l], &s->train[l]);
    if (!st) st = lmp_model_loss_grad(s->be, &s->tm, s->train, tok, ref_logp, &s->mt, s->gp, loss);
    if (!st && s->learn_r1) {
        /* embeddings: x0 = e(tok) R1, mt.dx = dL/dx0: dR1 += e(tok)^T dx0 */
        lmp_embed(s->m, tok, T, s->x0);
        st = lmp_be_gemm(s->be, 1, 0, d, d, T, 1.0f, s->x0, d, s->mt.dx, d, 1.0f, s->dR1, d);
        /* head: H' = H R1: dR1 += H^T dH' (mt.z holds dL/dlogits, mt.x the last block's output) */
        if (!st) memset(s->dH, 0, (size_t)(V * d) * sizeof *s->dH);
        if (!st) st = lmp_head_backward(s->be, &s->tm, T, s->mt.x, s->mt.z, NULL, NULL, s->dH);
        if (!st) st = lmp_be_gemm(s->be, 1, 0, d, d, V, 1.0f, s->m->lm_head, d, s->dH, d, 1.0f, s->dR1, d);
    }
    for (int64_t l = 0; !st && l < s->L; l++)
        for (int i = 0; !st && i < s->base[l].n_linears; i++)
            st = pull_linear(s, l, &s->base[l].linears[i], s->g[l].dw[i], s->g[l].db ? s->g[l].db[i] : NULL);
    return st;
}

/* ---- the Cayley step ------------------------------------------------------------------------ */
void lmp_cayley_skew(int64_t n, const double *G, const double *R, double *A)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double gr = 0, rg = 0; /* (G R^T)_ij, (R G^T)_ij */
            for (int64_t k = 0; k < n; k++) gr += G[i * n + k] * R[j * n + k], rg += R[i * n + k] * G[j * n + k];
            A[i * n + j] = gr - rg;
        }
}

/* B[n, n] <- M^{-1} B by Gaussian elimination with partial pivoting (M is overwritten).  M = I + S
 * with S skew is never singular: its eigenvalues are 1 + i·lambda. */
static void solve(int64_t n, double *M, double *B)
{
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(M[r * n + c]) > fabs(M[p * n + c])) p = r;
        if (p != c)
            for (int64_t k = 0; k < n; k++) {
                double t = M[c * n + k];
                M[c * n + k] = M[p * n + k], M[p * n + k] = t;
                t = B[c * n + k];
                B[c * n + k] = B[p * n + k], B[p * n + k] = t;
            }
        for (int64_t r = c + 1; r < n; r++) {
            const double f = M[r * n + c] / M[c * n + c];
            if (f == 0) continue;
            for (int64_t k = c; k < n; k++) M[r * n + k] -= f * M[c * n + k];
            for (int64_t k = 0; k < n; k++) B[r * n + k] -= f * B[c * n + k];
        }
    }
    for (int64_t c = n - 1; c >= 0; c--) {
        for (int64_t k = 0; k < n; k++) B[c * n + k] /= M[c * n + c];
        for (int64_t r = 0; r < c; r++) {
            const double f = M[r * n + c];
            if (f != 0)
                for (int64_t k = 0; k < n; k++) B[r * n + k] -= f * B[c * n + k];
        }
    }
}

void lmp_cayley_apply(int64_t n, const double *A, double a, double *R, double *work)
{
    double *M = work, *B = work + n * n;
    for (int64_t i = 0; i < n; i++) { /* M = I + a/2 A, B = (I - a/2 A) R, R read row by row */
        double *b = B + i * n;
        memcpy(b, R + i * n, (size_t)n * sizeof *b);
        for (int64_t k = 0; k < n; k++) {
            M[i * n + k] = (i == k) + 0.5 * a * A[i * n + k];
            const double f = 0.5 * a * A[i * n + k], *Rk = R + k * n;
            if (f != 0)
                for (int64_t j = 0; j < n; j++) b[j] -= f * Rk[j];
        }
    }
    solve(n, M, B);
    memcpy(R, B, (size_t)(n * n) * sizeof *R);
}

/* One Cayley SGD step of R[n, n] with gradient G (f32, scaled by gscale): a = min(lr, 1/||A||). */
static void cayley_step(int64_t n, double *R, const float *G, double gscale, double lr, double *work)
{
    double *Gd = work, *A = work + n * n;
    for (int64_t i = 0; i < n * n; i++) Gd[i] = gscale * G[i];
    lmp_cayley_skew(n, Gd, R, A);
    double norm = 0;
    for (int64_t i = 0; i < n * n; i++) norm += A[i] * A[i];
    norm = sqrt(norm);
    if (!(norm > 0)) return;
    const double a = fmin(lr, 1.0 / norm);
    lmp_cayley_apply(n, A, a, R, work + 2 * n * n);
}

/* ---- the loop -------------------------------------------------------------------------------- */
static int mean_loss(lmp_rotlearn *s, const lmp_windows *w, int kl, double *out)
{
    double sum = 0, l;
    for (int64_t i = 0; i < w->n; i++) {
        const int32_t *tok = w->tokens + i * w->T;
        int st = kl ? lmp_forward(s->be, s->m, s->base, tok, w->T, 1, s->ref) : 0;
        if (!st) st = lmp_rotlearn_loss(s, tok, kl ? s->ref : NULL, &l);
        if (st) return st;
        sum += l;
    }
    *out = sum / (double)w->n;
    return 0;
}

int lmp_rotation_learn(lmp_ctx *ctx, const lmp_backend *be, lmp_model *m, const lmp_windows *w,
                       const lmp_rotate_opts *o, lmp_learn_result *res)
{
    const int learn_r1 = o->r1 == LMP_ROT_LEARNED, learn_r2 = o->r2 == LMP_ROT_LEARNED;
    lmp_learn_result local;
    lmp_learn_result *out = res ? res : &local;
    memset(out, 0, sizeof *out);
    if (!learn_r1 && !learn_r2) return 0;
    const lmp_rotate_learn_opts *lo = &o->learn;
    if (!w || w->n <= 0) return lmp_fail(LMP_EINVAL, "model.rotate: learned rotations need calibration windows");
    if (lo->steps < 0 || lo->batch < 0 || !(lo->lr >= 0 && isfinite(lo->lr)))
        return lmp_fail(LMP_EINVAL, "model.rotate.learn: steps %lld, batch %lld and lr %g must be >= 0",
                        (long long)lo->steps, (long long)lo->batch, lo->lr);
    const double t0 = lmp_now_s();
    const int kl = lo->loss == LMP_LOSS_KL;
    const int had_blocks = m->blocks != NULL;
    lmp_rotlearn *s;
    int st = lmp_rotlearn_init(be, m, learn_r1, learn_r2, lo->w_bits, lo->a_bits, w->T, &s);
    if (st) return st;
    const int64_t n = w->n, batch = lo->batch > 0 && lo->batch < n ? lo->batch : n;
    const int64_t d = s->d, hd = s->hd, L = s->L, nmax = d > hd ? d : hd;
    const size_t r1_n = (size_t)(d * d), r2_n = (size_t)(L * hd * hd);
    int64_t *order = malloc((size_t)n * sizeof *order);
    double *work = malloc((size_t)(4 * nmax * nmax) * sizeof *work);
    double *best = lo->keep_best ? malloc((r1_n + r2_n) * sizeof *best) : NULL;
    if (!order || !work || (lo->keep_best && !best)) st = lmp_fail(LMP_ENOMEM, "out of memory to learn rotations");
    for (int64_t i = 0; !st && i < n; i++) order[i] = i;
    out->best_batch_loss = INFINITY;
    out->best_step = -1;
    if (!st) st = mean_loss(s, w, kl, &out->loss_first);
    const lmp_host *h = lmp_host_services();
    for (int64_t step = 0; step < lo->steps && !st; step++) {
        lmp_progress(ctx, "learn the rotations: step", step, lo->steps);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        for (int64_t i = 0; i < batch && batch < n; i++) { /* the step's windows: a partial shuffle */
            const int64_t j = i + (int64_t)(h->rng_u64(ctx) % (uint64_t)(n - i)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        lmp_rotlearn_zero_grad(s);
        double batch_loss = 0, l = 0;
        for (int64_t i = 0; i < batch && !st; i++) {
            const int32_t *tok = w->tokens + order[i] * w->T;
            if (kl) st = lmp_forward(be, m, s->base, tok, w->T, 1, s->ref);
            if (!st) st = lmp_rotlearn_loss_grad(s, tok, kl ? s->ref : NULL, 1, &l);
            batch_loss += l / (double)batch;
        }
        if (st) break;
        if (batch_loss < out->best_batch_loss) {
            out->best_batch_loss = batch_loss;
            out->best_step = step;
            if (best) memcpy(best, s->R1, r1_n * sizeof *best), memcpy(best + r1_n, s->R2, r2_n * sizeof *best);
        }
        lmp_log(ctx, LMP_LOG_DEBUG, "learn the rotations: step %lld: batch loss %.6f", (long long)step, batch_loss);
        /* SpinQuant's cosine schedule */
        const double lr = lo->lr * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)step / (double)lo->steps));
        if (learn_r1) cayley_step(d, s->R1, s->dR1, 1.0 / (double)batch, lr, work);
        for (int64_t ly = 0; learn_r2 && ly < L; ly++)
            cayley_step(hd, s->R2 + ly * hd * hd, s->dR2 + ly * hd * hd, 1.0 / (double)batch, lr, work);
        lmp_rotlearn_touch(s);
    }
    if (!st && lo->steps > 0) lmp_progress(ctx, "learn the rotations: step", lo->steps, lo->steps);
    if (!st && best && out->best_step >= 0) {
        memcpy(s->R1, best, r1_n * sizeof *best), memcpy(s->R2, best + r1_n, r2_n * sizeof *best);
        lmp_rotlearn_touch(s);
    }
    if (!st) st = mean_loss(s, w, kl, &out->loss_final);
    out->seconds = lmp_now_s() - t0;
    if (!st)
        lmp_log(ctx, LMP_LOG_INFO,
                "model.rotate: learned %s%s%s in %lld steps (%.1f s): the W%dA%d model's %s over the %lld calibration "
                "windows %.6f -> %.6f",
                learn_r1 ? "R1" : "", learn_r1 && learn_r2 ? " and " : "", learn_r2 ? "R2" : "", (long long)lo->steps,
                out->seconds, lo->w_bits, lo->a_bits, kl ? "KL to the unquantized model" : "cross-entropy",
                (long long)n, out->loss_first, out->loss_final);
    if (!st && out->loss_final > out->loss_first)
        lmp_log(ctx, LMP_LOG_WARN,
                "model.rotate: the learned rotations ended with a higher loss than the Hadamard they started from "
                "(%.6f > %.6f): more steps, a smaller lr, a larger batch or keep_best = true",
                out->loss_final, out->loss_first);
    if (!st) st = lmp_model_rotate_set_learned(m, learn_r1 ? s->R1 : NULL, learn_r2 ? s->R2 : NULL);
    lmp_rotlearn_free(s);
    if (!st && !had_blocks) lmp_model_blocks_release(m);
    free(order), free(work), free(best);
    return st;
}
