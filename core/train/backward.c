/* backward.c — see backward.h.  The block's steps (model/block_steps.h) read bottom up, each
 * kind with its derivative; every derivative adds to the gradients of the step's inputs, which
 * start at zero (a value read by several steps, such as a norm's output feeding q, k and v, or x
 * feeding norm_attn and the residual add, sums what each reader sends back):
 *   ADD        out = a + b                     da += dout, db += dout
 *   LINEARS    out_i = in W_i^T + b_i          din += dout_i W_i, dW_i += dout_i^T in, db_i += sum dout_i
 *   NORM       out = norm(in)                  din += norm'(dout), dw, db
 *   HEAD_NORM  per head of head_dim            likewise, per head
 *   GLU        h = act(g) * u                  dg += dh u act'(g), du += dh act(g)
 *   ATTENTION  att = attn(q, k, v)             backend attention_backward, or attention_grad.h's
 *                                              over a window / with soft-capped scores / ALiBi /
 *                                              gpt-oss's sinks (and the sinks' own gradient)
 *   GELU       h = gelu(u) or relu(u)          du += dh gelu'(u) (relu: dh where u > 0)
 *   ROPE       q, k turned in place            the gradients turned back by the same angles
 *   SCALE      q *= s in place                 dq *= s
 *   MOE        out = sum_j w_j E_j(x) + g S(x)  each expert's MLP on its tokens (recomputed; gpt-oss's
 *                                              clamped SwiGLU: 0 where clamped), the routing weights
 *                                              into the router (route_backward: softmax and top-k
 *                                              renormalization, DeepSeek-V2's scaled softmax, V3's
 *                                              sigmoid, gpt-oss's softmax of the top k), the shared
 *                                              expert and its sigmoid gate; the choice (top k, groups,
 *                                              V3's selection bias) is piecewise constant (no
 *                                              gradient), as in transformers
 *   MLA        att = mla(xn)                   DeepSeek's latent attention recomputed, then backend
 *                                              attention_backward, RoPE turned back, kv_b, the
 *                                              latents' norms, kv_a and q (or q_b, q_a): mla_backward
 * A value the tape does not keep (a norm's output) is recomputed by its own step's forward. */
#include "train/backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/alibi.h"
#include "model/rotate.h"
#include "train/attention_grad.h"

/* Whether a derivative reads the value of slot `sl` (so the tape keeps it), given plan p: the
 * inputs of norms, linears, attention and the activations, except a norm's output, which is
 * recomputed rather than kept (O(T·d), and it saves a [T, d] per norm). */
static int tape_keeps(const lmp_block_plan *p, lmp_slot sl)
{
    if (p->producer[sl] >= 0 && p->step[p->producer[sl]].kind == LMP_STEP_NORM) return 0;
    for (int i = 0; i < p->n_steps; i++) {
        const lmp_block_step *s = &p->step[i];
        const int reads = s->kind == LMP_STEP_NORM || s->kind == LMP_STEP_HEAD_NORM || s->kind == LMP_STEP_LINEARS ||
                          s->kind == LMP_STEP_ATTENTION || s->kind == LMP_STEP_GLU || s->kind == LMP_STEP_GELU ||
                          s->kind == LMP_STEP_MOE || s->kind == LMP_STEP_MLA;
        for (int j = 0; reads && j < s->n_in; j++)
            if (s->in[j] == sl) return 1;
    }
    return 0;
}

int lmp_block_tape_init(lmp_block_tape *tp, const lmp_arch *a, int64_t T)
{
    /* which slots are kept depends on the layer only where a mixture of experts keeps dense
     * layers (a sparse layer keeps no MLP slot): the union, as the widest layer */
    lmp_block_plan p, q;
    lmp_block_plan_make(&p, a, 0);
    for (int64_t l = 1; a->n_experts > 0 && l < a->n_layers; l++) {
        lmp_block_plan_make(&q, a, l);
        for (int sl = 0; sl < LMP_SLOT_COUNT; sl++)
            if (!(p.width[sl] && tape_keeps(&p, (lmp_slot)sl)) && q.width[sl] && tape_keeps(&q, (lmp_slot)sl)) p = q;
    }
    memset(tp, 0, sizeof *tp);
    int64_t n = 0;
    for (int sl = 0; sl < LMP_SLOT_COUNT; sl++)
        if (sl != LMP_SLOT_Y && p.width[sl] && tape_keeps(&p, (lmp_slot)sl)) n += T * p.width[sl];
    tp->buf = malloc((size_t)(n ? n : 1) * sizeof *tp->buf);
    if (!tp->buf) return lmp_fail(LMP_ENOMEM, "out of memory for a block's training tape (%lld tokens)", (long long)T);
    tp->T = T;
    float *at = tp->buf;
    for (int sl = 0; sl < LMP_SLOT_COUNT; sl++)
        if (sl != LMP_SLOT_Y && p.width[sl] && tape_keeps(&p, (lmp_slot)sl)) {
            tp->slot[sl] = at;
            at += T * p.width[sl];
        }
    return 0;
}

void lmp_block_tape_free(lmp_block_tape *tp)
{
    free(tp->buf);
    memset(tp, 0, sizeof *tp);
}

/* What the backward follows is what the forward computes: the block has what the steps use and no
 * norm they do not (block_steps.c), and no linear with an explicit input affine. */
static int check_trainable(const lmp_block_plan *p, const lmp_block *blk)
{
    int st = lmp_block_plan_check(p, blk);
    if (st) {
        if (st == LMP_EUNSUPPORTED) lmp_fail_prefix(st, "strategies that learn (autoround, qat) cannot run: ");
        return st;
    }
    /* Refused up front (before any forward), never a wrong gradient: a soft-cap beside sinks
     * (no family has both; the forward refuses it too) */
    for (int i = 0; i < p->n_steps; i++) {
        const lmp_block_step *s = &p->step[i];
        if (s->kind == LMP_STEP_ATTENTION && s->norm >= 0 && (s->softcap || s->alibi))
            return lmp_fail(LMP_EUNSUPPORTED, "block %d: strategies that learn (autoround, qat) cannot run: attention "
                            "sinks together with soft-capped scores or ALiBi have no backward", blk->index);
    }
    if (blk->kv.type != LMP_KV_NONE) /* its rounding has no derivative here: refused, not skipped */
        return lmp_fail(LMP_EUNSUPPORTED, "block %d: the KV cache's simulated quantization (kv_cache) has no backward: "
                        "strategies that learn over the whole model (qat, autoround's learn_model) cannot run on a "
                        "variant with kv_cache", blk->index);
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
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    int st = check_trainable(&p, blk);
    if (st) return st;
    for (int sl = 0; sl < LMP_SLOT_COUNT; sl++)
        if (sl != LMP_SLOT_Y && p.width[sl] && tape_keeps(&p, (lmp_slot)sl) && !tp->slot[sl])
            return lmp_fail(LMP_EINVAL, "block %d: a training tape made for another architecture", blk->index);
    memcpy(tp->slot[LMP_SLOT_X], x, (size_t)(tp->T * a->dim) * sizeof *x);
    return lmp_block_run(be, a, blk, &p, tp->T, 0, x, tp->slot, NULL, NULL);
}

/* ---- gradient arrays ---------------------------------------------------------------------- */

int lmp_block_grads_alloc(lmp_block_grads *g, const lmp_block *blk, const uint8_t *linears, int norms)
{
    memset(g, 0, sizeof *g);
    g->n_linears = blk->n_linears;
    g->dw = calloc((size_t)blk->n_linears, sizeof *g->dw);
    g->db = calloc((size_t)blk->n_linears, sizeof *g->db);
    int ok = g->dw && g->db;
    for (int i = 0; ok && i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        if (linears && !linears[i]) continue;
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

/* RoPE's rotation undone on a gradient dx[T, n_heads*hd]: RoPE turns each pair by the angle
 * pos * theta^(-2i/hd) (or the table's angle, times its mscale), an orthogonal map (scaled), so
 * its gradient turns back by the same angle (the angles as lmp_ref_rope and lmp_ref_rope_table
 * compute them).  hd is head_dim, or MLA's rotary width (forward.c mla_rope). */
static void rope_backward(const lmp_arch *a, int64_t layer, int64_t T, int64_t n_heads, int64_t hd, float *dx)
{
    const lmp_rope *r = lmp_arch_rope(a, layer);
    const int table = r->n_rot && !r->plain;
    const int64_t n_rot = table ? r->n_rot : hd;
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

/* h = silu(g) * u: dg += dh u silu'(g), du += dh silu(g), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). */
static void swiglu_backward(int64_t n, const float *g, const float *u, const float *dh, float *dg, float *du)
{
    for (int64_t i = 0; i < n; i++) {
        const double s = 1.0 / (1.0 + exp(-(double)g[i]));
        dg[i] += (float)((double)dh[i] * u[i] * s * (1.0 + g[i] * (1.0 - s)));
        du[i] += (float)((double)dh[i] * g[i] * s);
    }
}

/* gpt-oss's clamped SwiGLU (forward.c expert_mlp): gc = min(g, lim), uc = clamp(u, -lim, lim),
 * h = (uc + 1) gc sigmoid(alpha gc).  A clamped input has derivative 0 (as torch.clamp's):
 *   dg += dh (uc + 1) (s + alpha gc s (1 - s)) where g < lim,  du += dh gc s where |u| <= lim. */
static void swiglu_clamp_backward(int64_t n, double alpha, double lim, const float *g, const float *u, const float *dh,
                                  float *dg, float *du)
{
    for (int64_t i = 0; i < n; i++) {
        const double gc = g[i] < lim ? (double)g[i] : lim;
        const double uc = u[i] < -lim ? -lim : u[i] > lim ? lim : (double)u[i];
        const double sg = 1.0 / (1.0 + exp(-alpha * gc));
        if (g[i] < lim) dg[i] += (float)((double)dh[i] * (uc + 1.0) * sg * (1.0 + alpha * gc * (1.0 - sg)));
        if (u[i] >= -lim && u[i] <= lim) du[i] += (float)((double)dh[i] * gc * sg);
    }
}

/* h = gelu(u), tanh form: du += dh (0.5 (1 + th) + 0.5 u (1 - th^2) c (1 + 3 k u^2)),
 * th = tanh(c (u + k u^3)), c = sqrt(2/pi), k = 0.044715. */
static void gelu_backward(int64_t n, const float *u, const float *dh, float *du)
{
    const double c = sqrt(2.0 / 3.14159265358979323846), k = 0.044715;
    for (int64_t i = 0; i < n; i++) {
        const double x = u[i], th = tanh(c * (x + k * x * x * x));
        du[i] += (float)((double)dh[i] * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * k * x * x)));
    }
}

/* h = the erf GELU of u (GPT-NeoX): du += dh (Phi(x) + x phi(x)), Phi and phi the normal's CDF and
 * density. */
static void gelu_erf_backward(int64_t n, const float *u, const float *dh, float *du)
{
    for (int64_t i = 0; i < n; i++) {
        const double x = u[i];
        const double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
        const double pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
        du[i] += (float)((double)dh[i] * (cdf + x * pdf));
    }
}

/* h = gelu(g) * u (Gemma's GeGLU, tanh form): dg += dh u gelu'(g), du += dh gelu(g). */
static void geglu_backward(int64_t n, const float *g, const float *u, const float *dh, float *dg, float *du)
{
    const double c = sqrt(2.0 / 3.14159265358979323846), k = 0.044715;
    for (int64_t i = 0; i < n; i++) {
        const double x = g[i], th = tanh(c * (x + k * x * x * x));
        const double gelu = 0.5 * x * (1.0 + th);
        const double dgelu = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * k * x * x);
        dg[i] += (float)((double)dh[i] * u[i] * dgelu);
        du[i] += (float)((double)dh[i] * gelu);
    }
}

/* ---- the block ---------------------------------------------------------------------------- */

/* One backward pass: the plan, the tape, the gradient of every slot (dslot[Y] the caller's dy), the
 * scratch, and the norm output recomputed last (a one-slot cache). */
typedef struct backward_run {
    const lmp_backend *be;
    const lmp_arch *a;
    const lmp_block *blk;
    const lmp_block_plan *p;
    const lmp_block_tape *tp;
    int64_t T;
    float *dslot[LMP_SLOT_COUNT];
    float *qbuf, *work;      /* [T, wide] each */
    float *redo;             /* [T, d]: a norm's output recomputed */
    int redo_slot;           /* which slot redo holds, -1: none */
    float *dattn;            /* [T, qd + 2 kv]: attention's gradients before they are added */
    lmp_block_grads *g;
} backward_run;

/* The value of slot sl as the forward made it: kept in the tape, or recomputed by its producer
 * (a norm, whose input the tape keeps). */
static int slot_value(backward_run *r, lmp_slot sl, const float **out)
{
    if (r->tp->slot[sl]) {
        *out = r->tp->slot[sl];
        return 0;
    }
    const int i = r->p->producer[sl];
    if (i < 0 || r->p->step[i].kind != LMP_STEP_NORM || !r->tp->slot[r->p->step[i].in[0]])
        return lmp_fail(LMP_EINVAL, "block %d: the training tape holds no value of slot %d", r->blk->index, (int)sl);
    if (r->redo_slot != (int)sl) {
        float *slots[LMP_SLOT_COUNT];
        for (int k = 0; k < LMP_SLOT_COUNT; k++) slots[k] = r->tp->slot[k];
        slots[sl] = r->redo;
        const int st = lmp_block_step_forward(r->be, r->a, r->blk, r->p, i, r->T, slots, r->qbuf, r->work);
        if (st) return st;
        r->redo_slot = (int)sl;
    }
    *out = r->redo;
    return 0;
}

static void add_to(float *acc, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] += v[i];
}

/* y[n, out] = act_quant(x) W^T + b, as the forward's linears compute it (the MoE's recomputation). */
static int linear_forward(const lmp_backend *be, const lmp_linear *l, int64_t n, const float *x, float *qbuf, float *y)
{
    const float *in = x;
    if (l->act.mode != LMP_ACT_NONE) {
        memcpy(qbuf, x, (size_t)(n * l->in) * sizeof *x);
        int st = lmp_be_quantize_act(be, &l->act, n, l->in, qbuf);
        if (st) return st;
        in = qbuf;
    }
    return lmp_be_linear(be, n, l->in, l->out, in, l->w, l->b, y);
}

/* One SwiGLU MLP (gate G, up U, down D) on x[n, d] with dy[n, d] the gradient of its output:
 * recomputed, then dx[n, d] = its input's gradient (overwritten), the weights' added.  y[n, d]
 * (NULL: not wanted) gets its output; scratch: g, u, h, dh, dg, du [n, f], qbuf [n, max(d, f)].
 * clamp: the MoE step when its SwiGLU is gpt-oss's clamped one (swiglu_limit > 0), else NULL. */
static int mlp_backward(backward_run *r, const lmp_block_step *clamp, int gi, int ui, int di, int64_t n,
                        const float *x, const float *dy, float *dx, float *y, float *g, float *u, float *h, float *dh,
                        float *dg, float *du, float *qbuf)
{
    const lmp_block *blk = r->blk;
    const lmp_linear *G = &blk->linears[gi], *U = &blk->linears[ui], *D = &blk->linears[di];
    lmp_block_grads *gr = r->g;
    const int64_t f = G->out;
    int st = linear_forward(r->be, G, n, x, qbuf, g);
    if (!st) st = linear_forward(r->be, U, n, x, qbuf, u);
    const double lim = clamp ? clamp->swiglu_limit : 0.0, alpha = clamp ? clamp->swiglu_alpha : 0.0;
    for (int64_t i = 0; !st && i < n * f; i++) {
        if (lim > 0) { /* as forward.c expert_mlp, in the same order */
            const double gc = g[i] < lim ? (double)g[i] : lim;
            const double uc = u[i] < -lim ? -lim : u[i] > lim ? lim : (double)u[i];
            h[i] = (float)((uc + 1.0) * gc / (1.0 + exp(-alpha * gc)));
        } else {
            h[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        }
    }
    if (!st && y) st = linear_forward(r->be, D, n, h, qbuf, y);
    if (!st) st = linear_backward(r->be, D, n, h, qbuf, dy, dh, 0.0f, gr ? gr->dw[di] : NULL, gr ? gr->db[di] : NULL);
    if (st) return st;
    memset(dg, 0, (size_t)(n * f) * sizeof *dg);
    memset(du, 0, (size_t)(n * f) * sizeof *du);
    if (lim > 0) swiglu_clamp_backward(n * f, alpha, lim, g, u, dh, dg, du);
    else swiglu_backward(n * f, g, u, dh, dg, du);
    st = linear_backward(r->be, G, n, x, qbuf, dg, dx, 0.0f, gr ? gr->dw[gi] : NULL, gr ? gr->db[gi] : NULL);
    if (!st) st = linear_backward(r->be, U, n, x, qbuf, du, dx, 1.0f, gr ? gr->dw[ui] : NULL, gr ? gr->db[ui] : NULL);
    return st;
}

/* One token's routing weights wt[k] (of the chosen sel[k]) back into its router logits z[E]:
 * dwt[k] = dL/dwt -> dz[E] (overwritten; 0 for what no weight reads), p[E] scratch.  The choice
 * itself (top k, DeepSeek's groups and selection bias) is piecewise constant: no gradient, as in
 * transformers.  Per route (forward.c lmp_moe_route_step):
 *   SOFTMAX          p = softmax(z), w_j = p_j (/ S = sum_k p_k with norm_topk):
 *                    dp_j = dw_j (or (dw_j - sum_k w_k dw_k) / S), dz = p (dp - sum p dp)
 *   SOFTMAX_GROUPS   (DeepSeek-V2) w_j = c p_j, c = routed_scale: dp_j = c dw_j, then as SOFTMAX
 *   SIGMOID_BIAS     (DeepSeek-V3) s = sigmoid(z), w_j = c s_j (/ (S + 1e-20) with norm_topk):
 *                    ds_j = c dw_j (or c (dw_j - sum_k (w_k / c) dw_k) / (S + 1e-20)),
 *                    dz_j = ds_j s_j (1 - s_j)
 *   TOPK_SOFTMAX     (gpt-oss) w = softmax over the k chosen logits: dz_j = w_j (dw_j - sum w dw) */
static void route_backward(const lmp_block_step *s, const float *z, const int *sel, const float *wt, const float *dwt,
                           double *p, float *dz)
{
    const int64_t E = s->n_experts, k = s->top_k;
    const double c = s->routed_scale > 0 ? (double)s->routed_scale : 1.0;
    for (int64_t e = 0; e < E; e++) dz[e] = 0;
    if (s->route == LMP_ROUTE_TOPK_SOFTMAX) {
        double wdw = 0;
        for (int64_t j = 0; j < k; j++) wdw += (double)wt[j] * dwt[j];
        for (int64_t j = 0; j < k; j++) dz[sel[j]] = (float)((double)wt[j] * ((double)dwt[j] - wdw));
        return;
    }
    if (s->route == LMP_ROUTE_SIGMOID_BIAS) {
        double top = 0, wdw = 0;
        for (int64_t j = 0; j < k; j++) {
            const double sj = 1.0 / (1.0 + exp(-(double)z[sel[j]]));
            top += sj;
            p[j] = sj;
        }
        for (int64_t j = 0; j < k; j++) wdw += p[j] / (top + 1e-20) * dwt[j];
        for (int64_t j = 0; j < k; j++) {
            const double ds = s->norm_topk ? c * ((double)dwt[j] - wdw) / (top + 1e-20) : c * dwt[j];
            dz[sel[j]] = (float)(ds * p[j] * (1.0 - p[j]));
        }
        return;
    }
    /* softmax over every logit: Mixtral/Qwen's (renormalized with norm_topk), DeepSeek-V2's (scaled) */
    const int v2 = s->route == LMP_ROUTE_SOFTMAX_GROUPS, renorm = !v2 && s->norm_topk;
    double mx = z[0], sum = 0, top = 0, wdw = 0, pdp = 0;
    for (int64_t e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += p[e] = exp((double)z[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] /= sum;
    for (int64_t j = 0; j < k; j++) top += p[sel[j]], wdw += (double)wt[j] * dwt[j];
    for (int64_t j = 0; j < k; j++) { /* dp of the chosen; 0 for the others */
        const double dp = renorm ? ((double)dwt[j] - wdw) / top : v2 ? c * dwt[j] : (double)dwt[j];
        dz[sel[j]] = (float)dp;
        pdp += p[sel[j]] * dp;
    }
    for (int64_t e = 0; e < E; e++) dz[e] = (float)(p[e] * ((double)dz[e] - pdp));
}

/* The mixture of experts' derivative (block_steps.h LMP_STEP_MOE; forward.c run_moe): the
 * routing made again from the router's logits (lmp_moe_route_step), each expert's MLP on its
 * tokens recomputed and differentiated with its output scaled by the token's weight w (gpt-oss's
 * clamped SwiGLU with its clamp); dL/dw = dy . y_e goes through the routing into the router
 * (route_backward); the shared expert's output times sigmoid(its gate) likewise. */
static int moe_backward(backward_run *r, const lmp_block_step *s)
{
    const lmp_block *blk = r->blk;
    lmp_block_grads *gr = r->g;
    const int64_t T = r->T, d = r->p->width[s->in[0]], E = s->n_experts, k = s->top_k;
    const int64_t f = s->expert_hidden > s->shared_hidden ? s->expert_hidden : s->shared_hidden;
    const int64_t wide = (f > d ? f : d) > E ? (f > d ? f : d) : E;
    const float *xn;
    int st = slot_value(r, s->in[0], &xn);
    if (st) return st;
    float *dxn = r->dslot[s->in[0]];
    const float *dy = r->dslot[s->out[0]];
    const int router = lmp_block_find(blk, LMP_ROLE_ROUTER), sgate = lmp_block_find(blk, LMP_ROLE_SHARED_GATE);
    float *buf = malloc((size_t)(T * (2 * E + 2 * k + 4 * d + 6 * f + wide + 1)) * sizeof *buf);
    int *sel = malloc((size_t)(T * k) * sizeof *sel);
    int64_t *rows = malloc((size_t)(2 * T) * sizeof *rows);
    double *p = malloc((size_t)E * sizeof *p);
    if (!buf || !sel || !rows || !p) {
        free(buf), free(sel), free(rows), free(p);
        return lmp_fail(LMP_ENOMEM, "out of memory in block %d's experts backward", blk->index);
    }
    int64_t *slot = rows + T;
    float *logits = buf, *dz = logits + T * E, *wt = dz + T * E, *dwt = wt + T * k, *xe = dwt + T * k;
    float *ye = xe + T * d, *dye = ye + T * d, *dxe = dye + T * d, *g = dxe + T * d, *u = g + T * f, *h = u + T * f;
    float *dh = h + T * f, *dg = dh + T * f, *du = dg + T * f, *qbuf = du + T * f, *sg = qbuf + T * wide;
    /* DeepSeek-V3's router bias is its selection bias: not in the logits (forward.c run_moe) */
    lmp_linear rl = blk->linears[router];
    const int selection_bias = s->route == LMP_ROUTE_SIGMOID_BIAS;
    if (selection_bias) rl.b = NULL;
    st = linear_forward(r->be, &rl, T, xn, qbuf, logits);
    if (!st) st = lmp_moe_route_step(s, logits, blk->linears[router].b, T, sel, wt);
    /* each expert on its tokens: its weights' gradients, the input's, and dL/dw of each choice */
    for (int e = 0; !st && e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (sel[t * k + j] == e) rows[n] = t, slot[n++] = t * k + j;
        if (!n) continue;
        for (int64_t i = 0; i < n; i++) {
            memcpy(xe + i * d, xn + rows[i] * d, (size_t)d * sizeof *xe);
            for (int64_t c = 0; c < d; c++) dye[i * d + c] = dy[rows[i] * d + c] * wt[slot[i]];
        }
        st = mlp_backward(r, s->swiglu_limit > 0 ? s : NULL, lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e),
                          lmp_block_find_expert(blk, LMP_ROLE_UP, LMP_EXPERT_ROUTED, e),
                          lmp_block_find_expert(blk, LMP_ROLE_DOWN, LMP_EXPERT_ROUTED, e), n, xe, dye, dxe, ye, g, u, h,
                          dh, dg, du, qbuf);
        for (int64_t i = 0; !st && i < n; i++) {
            double dw = 0;
            for (int64_t c = 0; c < d; c++) {
                dw += (double)dy[rows[i] * d + c] * ye[i * d + c];
                dxn[rows[i] * d + c] += dxe[i * d + c];
            }
            dwt[slot[i]] = (float)dw;
        }
    }
    /* the weights back through the routing into the router's logits */
    for (int64_t t = 0; !st && t < T; t++) route_backward(s, logits + t * E, sel + t * k, wt + t * k, dwt + t * k, p, dz + t * E);
    /* (the selection bias only moves the choice: no gradient) */
    if (!st)
        st = linear_backward(r->be, &rl, T, xn, qbuf, dz, dxn, 1.0f, gr ? gr->dw[router] : NULL,
                             gr && !selection_bias ? gr->db[router] : NULL);
    /* the shared expert on every token, times sigmoid(its gate) */
    if (!st && s->shared_hidden) {
        const int gi = lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_SHARED, 0);
        const int ui = lmp_block_find_expert(blk, LMP_ROLE_UP, LMP_EXPERT_SHARED, 0);
        const int di = lmp_block_find_expert(blk, LMP_ROLE_DOWN, LMP_EXPERT_SHARED, 0);
        if (sgate >= 0) st = linear_forward(r->be, &blk->linears[sgate], T, xn, qbuf, sg);
        /* its output first (for the gate's gradient), then its backward with dy times the gate */
        if (!st) st = linear_forward(r->be, &blk->linears[gi], T, xn, qbuf, g);
        if (!st) st = linear_forward(r->be, &blk->linears[ui], T, xn, qbuf, u);
        for (int64_t i = 0; !st && i < T * s->shared_hidden; i++)
            h[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        if (!st) st = linear_forward(r->be, &blk->linears[di], T, h, qbuf, ye);
        for (int64_t t = 0; !st && t < T; t++) {
            const double gate = sgate >= 0 ? 1.0 / (1.0 + exp(-(double)sg[t])) : 1.0;
            double dgate = 0;
            for (int64_t c = 0; c < d; c++) {
                dgate += (double)dy[t * d + c] * ye[t * d + c];
                dye[t * d + c] = (float)(gate * dy[t * d + c]);
            }
            sg[t] = (float)(dgate * gate * (1.0 - gate)); /* now the gate logit's gradient */
        }
        if (!st && sgate >= 0)
            st = linear_backward(r->be, &blk->linears[sgate], T, xn, qbuf, sg, dxn, 1.0f, gr ? gr->dw[sgate] : NULL,
                                 gr ? gr->db[sgate] : NULL);
        if (!st) st = mlp_backward(r, NULL, gi, ui, di, T, xn, dye, dxe, NULL, g, u, h, dh, dg, du, qbuf);
        for (int64_t i = 0; !st && i < T * d; i++) dxn[i] += dxe[i];
    }
    free(buf), free(sel), free(rows), free(p);
    return st;
}

/* Multi-head latent attention's derivative (block_steps.h LMP_STEP_MLA; forward.c run_mla,
 * whose values are made again here by the same operations in the same order):
 *   q = q(xn) or q_b(rmsnorm(q_a(xn))), [c, k_rot] = kv_a(xn), [k_nope, v] = kv_b(rmsnorm(c)),
 *   RoPE on q's rotary parts and k_rot, q scaled, attention on head_dim dn + dr with v padded.
 * Bottom up: datt padded to the attention's width (v's padding has no gradient to keep), the
 * backend's causal attention_backward; dq times the scale, its rotary parts turned back; dk's
 * nope parts and dv into kv_b's output, dk's rotary parts summed over the heads (k_rot is one
 * head shared by all) and turned back into kv_a's last dr outputs; then kv_b, the kv norm, kv_a,
 * and q (or q_b, the q norm, q_a), each adding to xn's gradient and its weights'. */
static int mla_backward(backward_run *r, const lmp_block_step *s)
{
    const lmp_arch *a = r->a;
    const lmp_block *blk = r->blk;
    lmp_block_grads *gr = r->g;
    const int64_t T = r->T, d = a->dim, H = a->n_heads, dn = a->mla_nope, dr = a->mla_rope, dv = a->head_dim;
    const int64_t dq = dn + dr, rk = a->mla_kv_lora, rq = a->mla_q_lora, kvw = H * (dn + dv);
    const int qa = lmp_block_find(blk, LMP_ROLE_Q_A), qb = lmp_block_find(blk, LMP_ROLE_Q_B);
    const int qi = lmp_block_find(blk, LMP_ROLE_Q), kva = lmp_block_find(blk, LMP_ROLE_KV_A);
    const int kvb = lmp_block_find(blk, LMP_ROLE_KV_B);
    const int64_t wide_in = d > rk ? (d > rq ? d : rq) : (rk > rq ? rk : rq);
    const float *xn;
    int st = slot_value(r, s->in[0], &xn);
    if (st) return st;
    float *dxn = r->dslot[s->in[0]];
    const float *datt = r->dslot[s->out[0]];
    /* q, k, v, do, dQ, dK, dV [T, H dq]; ckv, dckv [T, rk + dr]; craw, cn, dcn, dcraw [T, rk];
     * qraw, qlat, dqlat, dqraw [T, rq]; kv, dkv [T, kvw]; pe [T, H dr]; qbuf [T, wide_in] */
    const size_t n = (size_t)(T * (7 * H * dq + 2 * (rk + dr) + 4 * rk + 4 * rq + 2 * kvw + H * dr + wide_in));
    float *buf = calloc(n ? n : 1, sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d's latent attention backward", blk->index);
    float *q = buf, *k = q + T * H * dq, *v = k + T * H * dq, *dout = v + T * H * dq, *dQ = dout + T * H * dq;
    float *dK = dQ + T * H * dq, *dV = dK + T * H * dq, *ckv = dV + T * H * dq, *dckv = ckv + T * (rk + dr);
    float *craw = dckv + T * (rk + dr), *cn = craw + T * rk, *dcn = cn + T * rk, *dcraw = dcn + T * rk;
    float *qraw = dcraw + T * rk, *qlat = qraw + T * rq, *dqlat = qlat + T * rq, *dqraw = dqlat + T * rq;
    float *kv = dqraw + T * rq, *dkv = kv + T * kvw, *pe = dkv + T * kvw, *qbuf = pe + T * H * dr;
    const lmp_norm *qnorm = qa >= 0 ? &blk->norms[s->mla_norm[0]] : NULL, *kvnorm = &blk->norms[s->mla_norm[1]];
    float *dqnorm = gr && qa >= 0 && s->mla_norm[0] < LMP_BLOCK_GRAD_NORMS ? gr->dnorm_w[s->mla_norm[0]] : NULL;
    float *dkvnorm = gr && s->mla_norm[1] < LMP_BLOCK_GRAD_NORMS ? gr->dnorm_w[s->mla_norm[1]] : NULL;
    /* the forward again: q, k, v as the attention read them */
    if (qa >= 0) {
        st = linear_forward(r->be, &blk->linears[qa], T, xn, qbuf, qraw);
        if (!st) st = lmp_be_rmsnorm(r->be, T, rq, qraw, qnorm->w, a->mla_norm_eps, qlat);
        if (!st) st = linear_forward(r->be, &blk->linears[qb], T, qlat, qbuf, q);
    } else {
        st = linear_forward(r->be, &blk->linears[qi], T, xn, qbuf, q);
    }
    if (!st) st = linear_forward(r->be, &blk->linears[kva], T, xn, qbuf, ckv);
    for (int64_t t = 0; !st && t < T; t++) memcpy(craw + t * rk, ckv + t * (rk + dr), (size_t)rk * sizeof *craw);
    if (!st) st = lmp_be_rmsnorm(r->be, T, rk, craw, kvnorm->w, a->mla_norm_eps, cn);
    if (!st) st = linear_forward(r->be, &blk->linears[kvb], T, cn, qbuf, kv);
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(pe + (t * H + h) * dr, q + t * H * dq + h * dq + dn, (size_t)dr * sizeof *pe);
    if (!st) st = lmp_mla_rope(r->be, a, r->p->layer, T, H, pe);
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(q + t * H * dq + h * dq + dn, pe + (t * H + h) * dr, (size_t)dr * sizeof *pe);
    for (int64_t t = 0; !st && t < T; t++) memcpy(pe + t * dr, ckv + t * (rk + dr) + rk, (size_t)dr * sizeof *pe);
    if (!st) st = lmp_mla_rope(r->be, a, r->p->layer, T, 1, pe);
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *src = kv + t * kvw + h * (dn + dv);
            float *kh = k + t * H * dq + h * dq, *vh = v + t * H * dq + h * dq;
            memcpy(kh, src, (size_t)dn * sizeof *kh);
            memcpy(kh + dn, pe + t * dr, (size_t)dr * sizeof *kh);
            memcpy(vh, src + dn, (size_t)dv * sizeof *vh); /* the padding stays 0 (calloc) */
        }
    const float qs = a->mla_q_scale && a->mla_q_scale != 1.0f ? a->mla_q_scale : 1.0f;
    if (!st && qs != 1.0f)
        for (int64_t i = 0; i < T * H * dq; i++) q[i] *= qs;
    /* attention: its output's gradient padded like v, then the backend's backward */
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(dout + t * H * dq + h * dq, datt + t * H * dv + h * dv, (size_t)dv * sizeof *dout);
    if (!st) st = lmp_be_attention_backward(r->be, T, H, H, dq, q, k, v, dout, dQ, dK, dV);
    /* q: the scale, then the rotary parts turned back (in pe) */
    if (!st && qs != 1.0f)
        for (int64_t i = 0; i < T * H * dq; i++) dQ[i] *= qs;
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(pe + (t * H + h) * dr, dQ + t * H * dq + h * dq + dn, (size_t)dr * sizeof *pe);
    if (!st) rope_backward(a, r->p->layer, T, H, dr, pe);
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(dQ + t * H * dq + h * dq + dn, pe + (t * H + h) * dr, (size_t)dr * sizeof *pe);
    /* k and v: into kv_b's output and k_rot's (summed over the heads, turned back) */
    for (int64_t t = 0; !st && t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
            memcpy(dkv + t * kvw + h * (dn + dv), dK + t * H * dq + h * dq, (size_t)dn * sizeof *dkv);
            memcpy(dkv + t * kvw + h * (dn + dv) + dn, dV + t * H * dq + h * dq, (size_t)dv * sizeof *dkv);
        }
        for (int64_t c = 0; c < dr; c++) {
            double acc = 0;
            for (int64_t h = 0; h < H; h++) acc += dK[t * H * dq + h * dq + dn + c];
            pe[t * dr + c] = (float)acc;
        }
    }
    if (!st) rope_backward(a, r->p->layer, T, 1, dr, pe);
    /* kv_b, the kv norm, kv_a */
    if (!st)
        st = linear_backward(r->be, &blk->linears[kvb], T, cn, qbuf, dkv, dcn, 0.0f, gr ? gr->dw[kvb] : NULL,
                             gr ? gr->db[kvb] : NULL);
    if (!st) norm_backward(0, a->mla_norm_eps, T, rk, craw, kvnorm->w, dcn, dcraw, dkvnorm, NULL);
    for (int64_t t = 0; !st && t < T; t++) {
        memcpy(dckv + t * (rk + dr), dcraw + t * rk, (size_t)rk * sizeof *dckv);
        memcpy(dckv + t * (rk + dr) + rk, pe + t * dr, (size_t)dr * sizeof *dckv);
    }
    if (!st)
        st = linear_backward(r->be, &blk->linears[kva], T, xn, qbuf, dckv, dxn, 1.0f, gr ? gr->dw[kva] : NULL,
                             gr ? gr->db[kva] : NULL);
    /* q: q_b, the q norm, q_a; or q */
    if (!st && qa >= 0) {
        st = linear_backward(r->be, &blk->linears[qb], T, qlat, qbuf, dQ, dqlat, 0.0f, gr ? gr->dw[qb] : NULL,
                             gr ? gr->db[qb] : NULL);
        if (!st) norm_backward(0, a->mla_norm_eps, T, rq, qraw, qnorm->w, dqlat, dqraw, dqnorm, NULL);
        if (!st)
            st = linear_backward(r->be, &blk->linears[qa], T, xn, qbuf, dqraw, dxn, 1.0f, gr ? gr->dw[qa] : NULL,
                                 gr ? gr->db[qa] : NULL);
    } else if (!st) {
        st = linear_backward(r->be, &blk->linears[qi], T, xn, qbuf, dQ, dxn, 1.0f, gr ? gr->dw[qi] : NULL,
                             gr ? gr->db[qi] : NULL);
    }
    free(buf);
    return st;
}

/* Step s's derivative: its outputs' gradients into its inputs' (and its parameters'). */
static int step_backward(backward_run *r, const lmp_block_step *s)
{
    const lmp_arch *a = r->a;
    const int64_t T = r->T, C = r->p->width[s->in[0]];
    float *const *ds = r->dslot;
    lmp_block_grads *g = r->g;
    const float *in = NULL, *in1 = NULL, *in2 = NULL;
    int st = 0;
    switch (s->kind) {
    case LMP_STEP_MOE:
        return moe_backward(r, s);
    case LMP_STEP_ADD:
        add_to(ds[s->in[0]], ds[s->out[0]], T * C);
        add_to(ds[s->in[1]], ds[s->out[0]], T * C);
        return 0;
    case LMP_STEP_NORM:
    case LMP_STEP_HEAD_NORM: {
        const lmp_norm *n = &r->blk->norms[s->norm];
        const int64_t heads = s->kind == LMP_STEP_HEAD_NORM ? s->heads[0] : 1;
        st = slot_value(r, s->in[0], &in);
        if (st) return st;
        norm_backward(s->layer_norm, a->norm_eps, T * heads, C / heads, in, n->w, ds[s->out[0]], ds[s->in[0]],
                      g ? g->dnorm_w[s->norm] : NULL, g && n->b ? g->dnorm_b[s->norm] : NULL);
        return 0;
    }
    case LMP_STEP_LINEARS:
        st = slot_value(r, s->in[0], &in);
        for (int o = 0; !st && o < s->n_out; o++) {
            const int li = lmp_block_find(r->blk, s->roles[o]);
            st = linear_backward(r->be, &r->blk->linears[li], T, in, r->qbuf, ds[s->out[o]], ds[s->in[0]], 1.0f,
                                 g ? g->dw[li] : NULL, g ? g->db[li] : NULL);
        }
        return st;
    case LMP_STEP_ROPE:
        rope_backward(a, r->p->layer, T, s->heads[0], a->head_dim, ds[s->in[0]]);
        rope_backward(a, r->p->layer, T, s->heads[1], a->head_dim, ds[s->in[1]]);
        return 0;
    case LMP_STEP_SCALE:
        for (int64_t i = 0; i < T * C; i++) ds[s->in[0]][i] *= s->scale;
        return 0;
    case LMP_STEP_ROTATE: /* an orthogonal map: its derivative is the transposed map */
        return lmp_rotate_online(r->be, a, s, T, ds, 1);
    case LMP_STEP_ATTENTION: {
        const int64_t qd = r->p->width[s->in[0]], kv = r->p->width[s->in[1]];
        float *dq = r->dattn, *dk = dq + T * qd, *dv = dk + T * kv;
        st = slot_value(r, s->in[0], &in);
        if (!st) st = slot_value(r, s->in[1], &in1);
        if (!st) st = slot_value(r, s->in[2], &in2);
        if (st) return st;
        if (s->norm >= 0) { /* gpt-oss's sinks (the forward takes no soft-cap with them), and their gradient */
            const lmp_norm *sk = &r->blk->norms[s->norm];
            float *dsinks = g && s->norm < LMP_BLOCK_GRAD_NORMS ? g->dnorm_w[s->norm] : NULL;
            st = lmp_attention_sinks_backward(T, a->n_heads, a->n_kv_heads, a->head_dim, s->window, sk->w, in, in1,
                                              in2, ds[s->out[0]], dq, dk, dv, dsinks);
        } else if (s->alibi) { /* Bloom: the biased scores' gradient, on the host */
            float *slopes = malloc((size_t)a->n_heads * sizeof *slopes);
            if (!slopes) return lmp_fail(LMP_ENOMEM, "out of memory in block %d's attention backward", r->blk->index);
            lmp_alibi_slopes(a->n_heads, slopes);
            st = lmp_attention_alibi_backward(T, a->n_heads, a->n_kv_heads, a->head_dim, s->window, slopes, in, in1,
                                              in2, ds[s->out[0]], dq, dk, dv);
            free(slopes);
        } else if (!s->softcap && (!s->window || s->window >= T)) /* within its window (and without a cap)
                                                                    * sliding-window attention is causal */
            st = lmp_be_attention_backward(r->be, T, a->n_heads, a->n_kv_heads, a->head_dim, in, in1, in2,
                                           ds[s->out[0]], dq, dk, dv);
        else
            st = lmp_attention_window_backward(T, a->n_heads, a->n_kv_heads, a->head_dim, s->window, s->softcap, in,
                                               in1, in2, ds[s->out[0]], dq, dk, dv);
        if (st) return st;
        add_to(ds[s->in[0]], dq, T * qd);
        add_to(ds[s->in[1]], dk, T * kv);
        add_to(ds[s->in[2]], dv, T * kv);
        return 0;
    }
    case LMP_STEP_GLU:
        st = slot_value(r, s->in[0], &in);
        if (!st) st = slot_value(r, s->in[1], &in1);
        if (st) return st;
        if (s->gelu) geglu_backward(T * C, in, in1, ds[s->out[0]], ds[s->in[0]], ds[s->in[1]]);
        else swiglu_backward(T * C, in, in1, ds[s->out[0]], ds[s->in[0]], ds[s->in[1]]);
        return 0;
    case LMP_STEP_GELU:
        st = slot_value(r, s->in[0], &in);
        if (!st && s->relu) /* OPT: du += dh where u > 0 */
            for (int64_t i = 0; i < T * C; i++) ds[s->in[0]][i] += in[i] > 0.0f ? ds[s->out[0]][i] : 0.0f;
        else if (!st && s->erf) gelu_erf_backward(T * C, in, ds[s->out[0]], ds[s->in[0]]);
        else if (!st) gelu_backward(T * C, in, ds[s->out[0]], ds[s->in[0]]);
        return st;
    case LMP_STEP_MLA:
        return mla_backward(r, s);
    case LMP_STEP_KINDS:
        break;
    }
    return lmp_fail(LMP_EUNSUPPORTED, "block %d: a %s step has no backward", r->blk->index, lmp_step_kind_name(s->kind));
}

int lmp_block_backward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_tape *tp,
                       const float *dy, float *dx_out, lmp_block_grads *g)
{
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    int st = check_trainable(&p, blk);
    if (st) return st;
    const int64_t T = tp->T, d = a->dim, wide = lmp_arch_mid_width(a);
    const int64_t qd = a->n_heads * a->head_dim, kv = a->n_kv_heads * a->head_dim;
    /* the gradient of every slot but y (dy), zeroed; qbuf[T,wide] work[T,wide] redo[T,d] dattn[T,qd+2kv] */
    int64_t n = 2 * wide + d + qd + 2 * kv;
    for (int sl = 0; sl < LMP_SLOT_COUNT; sl++)
        if (sl != LMP_SLOT_Y) n += p.width[sl];
    float *buf = calloc((size_t)(T * n), sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d backward", blk->index);
    backward_run r = {.be = be, .a = a, .blk = blk, .p = &p, .tp = tp, .T = T, .redo_slot = -1, .g = g};
    float *at = buf;
    for (int sl = 0; sl < LMP_SLOT_COUNT; sl++)
        if (sl != LMP_SLOT_Y && p.width[sl]) r.dslot[sl] = at, at += T * p.width[sl];
    r.dslot[LMP_SLOT_Y] = (float *)dy; /* read only: no step adds to the block's output */
    r.qbuf = at, at += T * wide;
    r.work = at, at += T * wide;
    r.redo = at, at += T * d;
    r.dattn = at;
    for (int i = p.n_steps - 1; !st && i >= 0; i--) st = step_backward(&r, &p.step[i]);
    if (!st && dx_out) memcpy(dx_out, r.dslot[LMP_SLOT_X], (size_t)(T * d) * sizeof *dx_out);
    free(buf);
    return st;
}

/* ---- the head ----------------------------------------------------------------------------- */

int lmp_head_backward(const lmp_backend *be, const lmp_model *m, int64_t T, const float *x, const float *dz,
                      float *dx, float *dnorm_w, float *dlm_head)
{
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    const float cap = m->arch.final_softcap;
    if (m->arch.family != LMP_FAMILY_LLAMA)
        return lmp_fail(LMP_EUNSUPPORTED, "the head's backward is written for the LLaMA family only");
    /* GPT-NeoX, Phi-2, GPT-J, StableLM, OLMo, StarCoder2: a final LayerNorm; Phi-2, GPT-J: a head
     * bias, which shifts the logits (in z0 under a cap) and sends no gradient to x */
    const int ln = m->arch.layer_norm;
    const float scale = m->arch.logit_scale ? m->arch.logit_scale : 1.0f; /* Cohere: z = s (W xn) */
    float *xn = malloc((size_t)(2 * T * d) * sizeof *xn), *dxn = xn + T * d;
    float *dz_cap = cap > 0 ? malloc((size_t)(T * V) * sizeof *dz_cap) : NULL;
    if (!xn || (cap > 0 && !dz_cap)) {
        free(xn);
        free(dz_cap);
        return lmp_fail(LMP_ENOMEM, "out of memory in the head's backward");
    }
    int st = ln ? lmp_be_layernorm(be, T, d, x, m->final_norm_w, m->final_norm_b, m->arch.norm_eps, xn)
                : lmp_be_rmsnorm(be, T, d, x, m->final_norm_w, m->arch.norm_eps, xn);
    if (!st && cap > 0) { /* z = cap tanh(z0 / cap) (Gemma 2): dz0 = dz (1 - tanh^2), z0 made again */
        st = lmp_be_gemm(be, 0, 1, T, V, d, scale, xn, d, m->lm_head, d, 0.0f, dz_cap, V);
        for (int64_t i = 0; !st && m->lm_head_b && i < T * V; i++) dz_cap[i] += m->lm_head_b[i % V];
        for (int64_t i = 0; !st && i < T * V; i++) {
            const double th = tanh((double)dz_cap[i] / cap);
            dz_cap[i] = (float)((double)dz[i] * (1.0 - th * th));
        }
        dz = dz_cap;
    }
    if (!st && dlm_head) st = lmp_be_gemm(be, 1, 0, V, d, T, scale, dz, V, xn, d, 1.0f, dlm_head, d);
    if (!st && (dx || dnorm_w)) st = lmp_be_gemm(be, 0, 0, T, d, V, scale, dz, V, m->lm_head, d, 0.0f, dxn, d);
    if (!st && (dx || dnorm_w)) {
        float *sink = dx ? dx : xn; /* the input's gradient, or scratch when only dnorm_w is wanted */
        memset(sink, 0, (size_t)(T * d) * sizeof *sink);
        norm_backward(ln, m->arch.norm_eps, T, d, x, m->final_norm_w, dxn, sink, dnorm_w, NULL);
    }
    free(xn);
    free(dz_cap);
    return st;
}
