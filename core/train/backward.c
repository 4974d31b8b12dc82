/* backward.c — see backward.h.  The block's forward (model/forward.c), read bottom up:
 *   y  = x1 + h Wd^T + bd                      dx1 = dy, dh = dy Wd, dWd += dy^T h
 *   h  = silu(g) * u  (GPT-2: gelu(u))         dg = dh u silu'(g), du = dh silu(g)
 *        (Gemma: gelu(g) * u)                  dg = dh u gelu'(g), du = dh gelu(g)
 *   g, u = xn1 Wg^T + bg, xn1 Wu^T + bu        dxn1 = dg Wg + du Wu
 *   xn1 = norm1(x1)                            dx1 += norm1'(dxn1)
 *   x1 = x + att Wo^T + bo                     dx = dx1, datt = dx1 Wo
 *   att = attention(rope(q), rope(k), v)       backend attention_backward, RoPE turned back
 *   q, k = qnorm(q_lin), knorm(k_lin) (Qwen3)  per-head RMSNorm backward over head_dim
 *   q, k, v = xn0 W^T + b                      dxn0 = dq Wq + dk Wk + dv Wv
 *   xn0 = norm0(x)                             dx += norm0'(dxn0)
 * The norms' outputs are recomputed with the forward's own operation rather than kept. */
#include "train/backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int lmp_block_tape_init(lmp_block_tape *tp, const lmp_arch *a, int64_t T)
{
    const int64_t d = a->dim, f = a->hidden, qd = a->n_heads * a->head_dim, kv = a->n_kv_heads * a->head_dim;
    const int64_t lin = a->qk_norm ? qd + kv : 0; /* q_lin, k_lin */
    memset(tp, 0, sizeof *tp);
    tp->buf = malloc((size_t)(T * (2 * d + 2 * qd + 2 * kv + 3 * f + lin)) * sizeof *tp->buf);
    if (!tp->buf) return lmp_fail(LMP_ENOMEM, "out of memory for a block's training tape (%lld tokens)", (long long)T);
    tp->T = T;
    float *p = tp->buf;
    tp->x = p, p += T * d;
    tp->keep.x1 = p, p += T * d;
    tp->keep.q = p, p += T * qd;
    tp->keep.att = p, p += T * qd;
    tp->keep.k = p, p += T * kv;
    tp->keep.v = p, p += T * kv;
    tp->keep.g = p, p += T * f;
    tp->keep.u = p, p += T * f;
    tp->keep.h = p, p += T * f;
    if (a->qk_norm) {
        tp->keep.q_lin = p, p += T * qd;
        tp->keep.k_lin = p;
    }
    return 0;
}

void lmp_block_tape_free(lmp_block_tape *tp)
{
    free(tp->buf);
    memset(tp, 0, sizeof *tp);
}

/* What the forward computes is what the backward follows: norms 0, 1 and, with q/k norms, 2 and 3
 * (a norm beyond them, such as Gemma 2's sandwich norms, the forward does not take either). */
static int check_trainable(const lmp_arch *a, const lmp_block *blk)
{
    const int n_norms = a->qk_norm ? 4 : 2;
    if (blk->n_norms > n_norms)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: a block norm the backward does not know: strategies that learn "
                        "(autoround, qat) cannot run on this architecture", blk->norms[n_norms].name);
    if (blk->n_norms < n_norms)
        return lmp_fail(LMP_EINVAL, "block %d has %d norms, its architecture %d", blk->index, blk->n_norms, n_norms);
    if (a->qk_norm && (blk->norms[2].dim != a->head_dim || blk->norms[3].dim != a->head_dim))
        return lmp_fail(LMP_EINVAL, "%s: a q/k norm of %lld, head_dim is %lld", blk->norms[2].name,
                        (long long)blk->norms[2].dim, (long long)a->head_dim);
    for (int i = 0; i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        if (l->in_shift || l->in_scale || l->shift_bias)
            return lmp_fail(LMP_EUNSUPPORTED,
                            "%s has an explicit input affine (from smoothquant's all_linears or shift on o/down): "
                            "gradients through it are not supported",
                            l->name);
    }
    return 0;
}

int lmp_block_forward_train(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, float *x,
                            lmp_block_tape *tp)
{
    int st = 0;
    /* Within the window, sliding-window attention is causal attention: its backward is exact. */
    if (a->attn_softcap || (lmp_arch_window(a, blk->index) && tp->T > lmp_arch_window(a, blk->index)))
        st = lmp_fail(LMP_EUNSUPPORTED, "block %d: attention %s has no backward yet", blk->index,
                      a->attn_softcap ? "with soft-capped scores (Gemma 2)" : "over more positions than its sliding window");
    if (!st && a->q_scale && a->q_scale != 1.0f)
        st = lmp_fail(LMP_EUNSUPPORTED, "block %d: query_pre_attn_scalar other than head_dim has no backward yet",
                      blk->index);
    if (!st && a->post_norms)
        st = lmp_fail(LMP_EUNSUPPORTED, "block %d: norms on the attention's and MLP's outputs (GLM-4, Gemma 2/3) have "
                      "no backward yet: strategies that learn (autoround, qat) cannot run on this architecture",
                      blk->index);
    if (!st) st = check_trainable(a, blk);
    if (st) return st;
    if (a->qk_norm && (!tp->keep.q_lin || !tp->keep.k_lin))
        return lmp_fail(LMP_EINVAL, "block %d: a training tape made for an architecture without q/k norms",
                        blk->index);
    memcpy(tp->x, x, (size_t)(tp->T * a->dim) * sizeof *x);
    return lmp_block_forward_keep(be, a, blk, tp->T, x, &tp->keep);
}

/* ---- gradient arrays ---------------------------------------------------------------------- */

int lmp_block_grads_alloc(lmp_block_grads *g, const lmp_block *blk, uint32_t linears, int norms)
{
    memset(g, 0, sizeof *g);
    g->n_linears = blk->n_linears;
    g->dw = calloc((size_t)blk->n_linears, sizeof *g->dw);
    g->db = calloc((size_t)blk->n_linears, sizeof *g->db);
    int ok = g->dw && g->db;
    for (int i = 0; ok && i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        if (!(linears >> i & 1u)) continue;
        ok = (g->dw[i] = calloc((size_t)(l->out * l->in), sizeof(float))) != NULL;
        if (ok && l->b) ok = (g->db[i] = calloc((size_t)l->out, sizeof(float))) != NULL;
    }
    for (int n = 0; ok && norms && n < blk->n_norms && n < LMP_BLOCK_GRAD_NORMS; n++) {
        ok = (g->dnorm_w[n] = calloc((size_t)blk->norms[n].dim, sizeof(float))) != NULL;
        if (ok && blk->norms[n].b) ok = (g->dnorm_b[n] = calloc((size_t)blk->norms[n].dim, sizeof(float))) != NULL;
    }
    if (ok) return 0;
    lmp_block_grads_free(g);
    return lmp_fail(LMP_ENOMEM, "out of memory for block %d's gradients", blk->index);
}

void lmp_block_grads_zero(lmp_block_grads *g, const lmp_block *blk)
{
    for (int i = 0; i < g->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        if (g->dw[i]) memset(g->dw[i], 0, (size_t)(l->out * l->in) * sizeof(float));
        if (g->db[i]) memset(g->db[i], 0, (size_t)l->out * sizeof(float));
    }
    for (int n = 0; n < LMP_BLOCK_GRAD_NORMS && n < blk->n_norms; n++) {
        if (g->dnorm_w[n]) memset(g->dnorm_w[n], 0, (size_t)blk->norms[n].dim * sizeof(float));
        if (g->dnorm_b[n]) memset(g->dnorm_b[n], 0, (size_t)blk->norms[n].dim * sizeof(float));
    }
}

void lmp_block_grads_free(lmp_block_grads *g)
{
    for (int i = 0; i < g->n_linears; i++) {
        if (g->dw) free(g->dw[i]);
        if (g->db) free(g->db[i]);
    }
    free(g->dw);
    free(g->db);
    for (int n = 0; n < LMP_BLOCK_GRAD_NORMS; n++) {
        free(g->dnorm_w[n]);
        free(g->dnorm_b[n]);
    }
    memset(g, 0, sizeof *g);
}

/* ---- the pieces --------------------------------------------------------------------------- */

/* For y[T, out] = xq W^T + b, xq the linear's input x[T, in] after its activation quantization:
 * dx = dy W (beta 0) or dx += dy W (beta 1), dW += dy^T xq, db += the column sums of dy.  Any of
 * dx, dW, db may be NULL; qbuf[T, in] is scratch. */
static int linear_backward(const lmp_backend *be, const lmp_linear *l, int64_t T, const float *x, float *qbuf,
                           const float *dy, float *dx, float beta, float *dW, float *db)
{
    int st = 0;
    if (dW) {
        const float *in = x;
        if (l->act.mode != LMP_ACT_NONE) {
            memcpy(qbuf, x, (size_t)(T * l->in) * sizeof *x);
            st = lmp_be_quantize_act(be, &l->act, T, l->in, qbuf);
            in = qbuf;
        }
        if (!st) st = lmp_be_gemm(be, 1, 0, l->out, l->in, T, 1.0f, dy, l->out, in, l->in, 1.0f, dW, l->in);
    }
    if (!st && db)
        for (int64_t o = 0; o < l->out; o++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++) s += dy[t * l->out + o];
            db[o] += (float)s;
        }
    if (!st && dx) st = lmp_be_gemm(be, 0, 0, T, l->in, l->out, 1.0f, dy, l->out, l->w, l->in, beta, dx, l->in);
    if (st) return lmp_fail_prefix(st, "%s backward: ", l->name);
    return 0;
}

/* The norm over rows x[T, C] (RMSNorm, plus its bias when it has one; GPT-2's LayerNorm) for the
 * gradient dn[T, C] of its output: dx += d(input), dw and db (NULL: not wanted) added to.  Per
 * row, with xh the normalized row (before w) and r the reciprocal RMS or standard deviation:
 *   RMSNorm:   dx = r (dn w - xh mean(dn w xh))
 *   LayerNorm: dx = r (dn w - mean(dn w) - xh mean(dn w xh)) */
static void norm_backward(int layer_norm, float eps, int64_t T, int64_t C, const float *x, const float *w,
                          const float *dn, float *dx, float *dw, float *db)
{
    double *acc_w = dw ? calloc((size_t)C, sizeof *acc_w) : NULL; /* column sums in double */
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * C, *gr = dn + t * C;
        double mean = 0, ms = 0;
        if (layer_norm) {
            for (int64_t j = 0; j < C; j++) mean += xr[j];
            mean /= (double)C;
        }
        for (int64_t j = 0; j < C; j++) ms += (xr[j] - mean) * (xr[j] - mean);
        const double r = 1.0 / sqrt(ms / (double)C + eps);
        double m_gw = 0, m_gwx = 0;
        for (int64_t j = 0; j < C; j++) {
            const double xh = (xr[j] - mean) * r, gw = (double)gr[j] * w[j];
            m_gw += gw;
            m_gwx += gw * xh;
            if (acc_w) acc_w[j] += (double)gr[j] * xh;
            else if (dw) dw[j] += (float)((double)gr[j] * xh); /* no scratch: sum in f32 */
        }
        m_gw = layer_norm ? m_gw / (double)C : 0.0;
        m_gwx /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            const double xh = (xr[j] - mean) * r;
            dx[t * C + j] += (float)(r * ((double)gr[j] * w[j] - m_gw - xh * m_gwx));
        }
    }
    if (acc_w)
        for (int64_t j = 0; j < C; j++) dw[j] += (float)acc_w[j];
    free(acc_w);
    if (db)
        for (int64_t j = 0; j < C; j++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++) s += dn[t * C + j];
            db[j] += (float)s;
        }
}

/* The block's norm n over x[T, d] into out, as the forward computes it. */
static int norm_forward(const lmp_backend *be, const lmp_arch *a, const lmp_norm *n, int64_t T, const float *x,
                        float *out)
{
    if (a->family == LMP_FAMILY_GPT2) return lmp_be_layernorm(be, T, a->dim, x, n->w, n->b, a->norm_eps, out);
    int st = lmp_be_rmsnorm(be, T, a->dim, x, n->w, a->norm_eps, out);
    if (!st && n->b)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < a->dim; j++) out[t * a->dim + j] += n->b[j];
    return st;
}

/* RoPE's rotation undone on a gradient dx[T, n_heads*head_dim]: RoPE turns each pair by the
 * angle pos * theta^(-2i/head_dim) (or the table's angle, times its mscale), an orthogonal map
 * (scaled), so its gradient turns back by the same angle (the angles as lmp_ref_rope and
 * lmp_ref_rope_table compute them). */
static void rope_backward(const lmp_arch *a, int64_t layer, int64_t T, int64_t n_heads, float *dx)
{
    const lmp_rope *r = lmp_arch_rope(a, layer);
    const int table = r->n_rot && !r->plain;
    const int64_t hd = a->head_dim, n_rot = table ? r->n_rot : hd;
    const double m = table ? r->mscale : 1.0; /* rope_table scales the turn: its transpose does too */
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n_rot / 2; i++) {
            const double theta = r->n_rot ? r->theta : a->rope_theta;
            const double ang = table ? (double)((float)t * lmp_rope_table_for(r, T)[i])
                                     : (double)t * pow(theta, -2.0 * (double)i / (double)hd);
            const double c = cos(ang) * m, s = sin(ang) * m;
            for (int64_t h = 0; h < n_heads; h++) {
                float *p = dx + t * n_heads * hd + h * hd + 2 * i;
                const double g0 = p[0], g1 = p[1];
                p[0] = (float)(g0 * c + g1 * s);
                p[1] = (float)(-g0 * s + g1 * c);
            }
        }
}

/* h = silu(g) * u: dg = dh u silu'(g), du = dh silu(g), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). */
static void swiglu_backward(int64_t n, const float *g, const float *u, const float *dh, float *dg, float *du)
{
    for (int64_t i = 0; i < n; i++) {
        const double s = 1.0 / (1.0 + exp(-(double)g[i]));
        dg[i] = (float)((double)dh[i] * u[i] * s * (1.0 + g[i] * (1.0 - s)));
        du[i] = (float)((double)dh[i] * g[i] * s);
    }
}

/* h = gelu(u), tanh form: du = dh (0.5 (1 + th) + 0.5 u (1 - th^2) c (1 + 3 k u^2)),
 * th = tanh(c (u + k u^3)), c = sqrt(2/pi), k = 0.044715. */
static void gelu_backward(int64_t n, const float *u, const float *dh, float *du)
{
    const double c = sqrt(2.0 / 3.14159265358979323846), k = 0.044715;
    for (int64_t i = 0; i < n; i++) {
        const double x = u[i], th = tanh(c * (x + k * x * x * x));
        du[i] = (float)((double)dh[i] * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * k * x * x)));
    }
}

/* h = gelu(g) * u (Gemma's GeGLU, tanh form): dg = dh u gelu'(g), du = dh gelu(g). */
static void geglu_backward(int64_t n, const float *g, const float *u, const float *dh, float *dg, float *du)
{
    const double c = sqrt(2.0 / 3.14159265358979323846), k = 0.044715;
    for (int64_t i = 0; i < n; i++) {
        const double x = g[i], th = tanh(c * (x + k * x * x * x));
        const double gelu = 0.5 * x * (1.0 + th);
        const double dgelu = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * k * x * x);
        dg[i] = (float)((double)dh[i] * u[i] * dgelu);
        du[i] = (float)((double)dh[i] * gelu);
    }
}

/* ---- the block ---------------------------------------------------------------------------- */

int lmp_block_backward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_tape *tp,
                       const float *dy, float *dx_out, lmp_block_grads *g)
{
    int st = check_trainable(a, blk);
    if (st) return st;
    const int64_t T = tp->T, d = a->dim, f = a->hidden, qd = a->n_heads * a->head_dim,
                  kv = a->n_kv_heads * a->head_dim, wide = f > qd ? (f > d ? f : d) : (qd > d ? qd : d);
    const int gpt2 = a->family == LMP_FAMILY_GPT2;
    const lmp_block_keep *k = &tp->keep;
    const lmp_linear *L = blk->linears;
    int li[LMP_ROLE_COUNT];
    for (int r = 0; r < LMP_ROLE_COUNT; r++) li[r] = lmp_block_find(blk, (lmp_role)r);
    /* xn[T,d] qbuf[T,wide] dx[T,d] dx1[T,d] dxn[T,d] dh[T,f] dg[T,f] du[T,f] datt[T,qd] dq[T,qd] dk, dv[T,kv],
     * and with q/k norms dq_lin[T,qd] dk_lin[T,kv] */
    const int64_t lin = a->qk_norm ? qd + kv : 0;
    float *buf = malloc((size_t)(T * (4 * d + wide + 3 * f + 2 * qd + 2 * kv + lin)) * sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d backward", blk->index);
    float *xn = buf, *qbuf = xn + T * d, *dx = qbuf + T * wide, *dx1 = dx + T * d, *dxn = dx1 + T * d;
    float *dh = dxn + T * d, *dg = dh + T * f, *du = dg + T * f, *datt = du + T * f, *dq = datt + T * qd;
    float *dk = dq + T * qd, *dv = dk + T * kv, *dq_lin = dv + T * kv, *dk_lin = dq_lin + T * qd;
#define DW(role) (g ? g->dw[li[role]] : NULL)
#define DB(role) (g ? g->db[li[role]] : NULL)
    /* y = x1 + h Wd^T + bd */
    memcpy(dx1, dy, (size_t)(T * d) * sizeof *dy);
    st = linear_backward(be, &L[li[LMP_ROLE_DOWN]], T, k->h, qbuf, dy, dh, 0.0f, DW(LMP_ROLE_DOWN), DB(LMP_ROLE_DOWN));
    /* h = silu(g) * u, or GPT-2's gelu(u); the MLP's input linears over xn1 = norm1(x1) */
    if (!st) st = norm_forward(be, a, &blk->norms[1], T, k->x1, xn);
    if (!st && gpt2) {
        gelu_backward(T * f, k->u, dh, du);
        st = linear_backward(be, &L[li[LMP_ROLE_UP]], T, xn, qbuf, du, dxn, 0.0f, DW(LMP_ROLE_UP), DB(LMP_ROLE_UP));
    } else if (!st) {
        if (a->geglu) geglu_backward(T * f, k->g, k->u, dh, dg, du);
        else swiglu_backward(T * f, k->g, k->u, dh, dg, du);
        st = linear_backward(be, &L[li[LMP_ROLE_GATE]], T, xn, qbuf, dg, dxn, 0.0f, DW(LMP_ROLE_GATE),
                             DB(LMP_ROLE_GATE));
        if (!st)
            st = linear_backward(be, &L[li[LMP_ROLE_UP]], T, xn, qbuf, du, dxn, 1.0f, DW(LMP_ROLE_UP), DB(LMP_ROLE_UP));
    }
    if (st) goto done;
    norm_backward(gpt2, a->norm_eps, T, d, k->x1, blk->norms[1].w, dxn, dx1, g ? g->dnorm_w[1] : NULL,
                  g ? g->dnorm_b[1] : NULL);
    /* x1 = x + att Wo^T + bo */
    memcpy(dx, dx1, (size_t)(T * d) * sizeof *dx);
    st = linear_backward(be, &L[li[LMP_ROLE_O]], T, k->att, qbuf, dx1, datt, 0.0f, DW(LMP_ROLE_O), DB(LMP_ROLE_O));
    /* att = attention(rope(q), rope(k), v) */
    if (!st) st = lmp_be_attention_backward(be, T, a->n_heads, a->n_kv_heads, a->head_dim, k->q, k->k, k->v, datt, dq, dk, dv);
    if (st) goto done;
    if (!gpt2) {
        rope_backward(a, blk->index, T, a->n_heads, dq);
        rope_backward(a, blk->index, T, a->n_kv_heads, dk);
    }
    if (a->qk_norm) { /* q = qnorm(q_lin) per head over head_dim (no bias), k likewise */
        memset(dq_lin, 0, (size_t)(T * lin) * sizeof *dq_lin);
        norm_backward(0, a->norm_eps, T * a->n_heads, a->head_dim, k->q_lin, blk->norms[2].w, dq, dq_lin,
                      g ? g->dnorm_w[2] : NULL, NULL);
        norm_backward(0, a->norm_eps, T * a->n_kv_heads, a->head_dim, k->k_lin, blk->norms[3].w, dk, dk_lin,
                      g ? g->dnorm_w[3] : NULL, NULL);
        dq = dq_lin, dk = dk_lin;
    }
    /* q, k, v over xn0 = norm0(x) */
    st = norm_forward(be, a, &blk->norms[0], T, tp->x, xn);
    if (!st) st = linear_backward(be, &L[li[LMP_ROLE_Q]], T, xn, qbuf, dq, dxn, 0.0f, DW(LMP_ROLE_Q), DB(LMP_ROLE_Q));
    if (!st) st = linear_backward(be, &L[li[LMP_ROLE_K]], T, xn, qbuf, dk, dxn, 1.0f, DW(LMP_ROLE_K), DB(LMP_ROLE_K));
    if (!st) st = linear_backward(be, &L[li[LMP_ROLE_V]], T, xn, qbuf, dv, dxn, 1.0f, DW(LMP_ROLE_V), DB(LMP_ROLE_V));
    if (st) goto done;
    norm_backward(gpt2, a->norm_eps, T, d, tp->x, blk->norms[0].w, dxn, dx, g ? g->dnorm_w[0] : NULL,
                  g ? g->dnorm_b[0] : NULL);
    if (dx_out) memcpy(dx_out, dx, (size_t)(T * d) * sizeof *dx);
#undef DW
#undef DB
done:
    free(buf);
    return st;
}

/* ---- the head ----------------------------------------------------------------------------- */

int lmp_head_backward(const lmp_backend *be, const lmp_model *m, int64_t T, const float *x, const float *dz,
                      float *dx, float *dnorm_w, float *dlm_head)
{
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    if (m->arch.final_softcap)
        return lmp_fail(LMP_EUNSUPPORTED, "the head's backward does not take Gemma 2's soft-capped logits yet");
    if (m->arch.family != LMP_FAMILY_LLAMA)
        return lmp_fail(LMP_EUNSUPPORTED, "the head's backward is written for the LLaMA family only");
    float *xn = malloc((size_t)(2 * T * d) * sizeof *xn), *dxn = xn + T * d;
    if (!xn) return lmp_fail(LMP_ENOMEM, "out of memory in the head's backward");
    int st = lmp_be_rmsnorm(be, T, d, x, m->final_norm_w, m->arch.norm_eps, xn);
    if (!st && dlm_head) st = lmp_be_gemm(be, 1, 0, V, d, T, 1.0f, dz, V, xn, d, 1.0f, dlm_head, d);
    if (!st && (dx || dnorm_w)) st = lmp_be_gemm(be, 0, 0, T, d, V, 1.0f, dz, V, m->lm_head, d, 0.0f, dxn, d);
    if (!st && (dx || dnorm_w)) {
        float *sink = dx ? dx : xn; /* the input's gradient, or scratch when only dnorm_w is wanted */
        memset(sink, 0, (size_t)(T * d) * sizeof *sink);
        norm_backward(0, m->arch.norm_eps, T, d, x, m->final_norm_w, dxn, sink, dnorm_w, NULL);
    }
    free(xn);
    return st;
}
