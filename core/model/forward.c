/* forward.c — see forward.h.  A block is its steps (model/block_steps.h) run top down by
 * lmp_block_run; for LLAMA that is llama2.c's run.c forward(), batched over T positions:
 *   xn = rmsnorm(x) ; q,k,v = xn Wq^T, xn Wk^T, xn Wv^T ; rope(q, k) ;
 *   x += attention(q, k, v) Wo^T ;
 *   xn = rmsnorm(x) ; x += (silu(xn Wg^T) * (xn Wu^T)) Wd^T
 * GPT2 is the same with LayerNorm, no RoPE (positions are added to the embeddings), biases, and
 *   x += gelu(xn Wfc^T + bfc) Wproj^T + bproj.
 * The newer families' features (q/k norms, post norms, GeGLU, the q scale, windows, soft-capped
 * scores) are steps of the same list. */
#include "model/forward.h"
#include "model/kv_quant.h"
#include "model/rotate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* y[T, out] = x'[T, in] W^T + b + W z for a linear with an explicit input shift z, x' being
 * (x - z)/s.  Where z is large (massive activations: |z| ~ 1e3 on SmolLM2's down_proj input),
 * every ordinary token has x'_j ~ -z_j/s_j, so W x' and W z nearly cancel and f32 would keep
 * only ~|W z| * 6e-8 of each output.  Those columns (|z_j/s_j| above 8x the RMS over j, so at
 * most in/64 of them) are therefore summed in double together with b and W z (as an integer
 * GEMM with a float epilogue would be exact there too); the rest goes through the GEMM. */
static int shifted_linear(const lmp_backend *be, const lmp_linear *l, int64_t T, const float *in, float *y)
{
    const int64_t C = l->in, O = l->out;
    double ms = 0;
    for (int64_t j = 0; j < C; j++) {
        double r = l->in_shift[j] / (l->in_scale ? l->in_scale[j] : 1.0f);
        ms += r * r / (double)C;
    }
    int64_t *J = malloc((size_t)C * sizeof *J), nJ = 0;
    float *rest = malloc((size_t)(T * C) * sizeof *rest);
    if (!J || !rest) {
        free(J);
        free(rest);
        return lmp_fail(LMP_ENOMEM, "out of memory in %s", l->name);
    }
    for (int64_t j = 0; j < C; j++) {
        double r = l->in_shift[j] / (l->in_scale ? l->in_scale[j] : 1.0f);
        if (r * r > 64.0 * ms) J[nJ++] = j;
    }
    memcpy(rest, in, (size_t)(T * C) * sizeof *rest);
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < nJ; k++) rest[t * C + J[k]] = 0.0f;
    int st = lmp_be_linear(be, T, C, O, rest, l->w, NULL, y);
    if (st) goto done;
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < O; o++) {
            double acc = (double)y[t * O + o] + l->shift_bias[o] + (l->b ? l->b[o] : 0.0);
            for (int64_t k = 0; k < nJ; k++) acc += (double)l->w[o * C + J[k]] * (double)in[t * C + J[k]];
            y[t * O + o] = (float)acc;
        }
done:
    free(J);
    free(rest);
    return st;
}

/* y[T, l->out] = act_quant(x)[T, l->in] W^T + b; qbuf holds the quantized copy of x. */
static int run_linear(const lmp_backend *be, const lmp_linear *l, int64_t T, const float *x,
                      float *qbuf, float *y)
{
    const float *in = x;
    if (l->act.mode != LMP_ACT_NONE) {
        memcpy(qbuf, x, (size_t)(T * l->in) * sizeof *x);
        int st = lmp_be_quantize_act(be, &l->act, T, l->in, qbuf);
        if (st) return st;
        in = qbuf;
    }
    if (l->shift_bias) return shifted_linear(be, l, T, in, y);
    return lmp_be_linear(be, T, l->in, l->out, in, l->w, l->b, y);
}

static int observe(lmp_observe_fn obs, void *ud, const int *lins, int n, const float *x,
                   int64_t T, int64_t C)
{
    return obs ? obs(ud, lins, n, x, T, C) : 0;
}

/* x[T, C] <- (x - in_shift) / in_scale in place: the input affine of a linear no norm feeds. */
static void input_affine(const lmp_linear *l, int64_t T, float *x)
{
    if (!l->in_shift && !l->in_scale) return;
    const int64_t C = l->in;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < C; j++) {
            float v = x[t * C + j];
            if (l->in_shift) v -= l->in_shift[j];
            if (l->in_scale) v /= l->in_scale[j];
            x[t * C + j] = v;
        }
}

/* in[T, C] as linear l takes it: through its input affine, on a copy in work when it has one (the
 * state a later pass resumes from is not changed in place). */
static const float *affine_input(const lmp_linear *l, int64_t T, const float *in, float *work)
{
    if (!l->in_shift && !l->in_scale) return in;
    memcpy(work, in, (size_t)(T * l->in) * sizeof *in);
    input_affine(l, T, work);
    return work;
}

int lmp_rope_heads(const lmp_backend *be, const lmp_arch *a, int64_t layer, int64_t T, int64_t n_heads, float *x)
{
    const lmp_rope *r = lmp_arch_rope(a, layer);
    if (!r->n_rot) return lmp_be_rope(be, T, n_heads, a->head_dim, 0, a->rope_theta, x);
    if (r->plain) return lmp_be_rope(be, T, n_heads, a->head_dim, 0, r->theta, x);
    return lmp_be_rope_table(be, T, n_heads, a->head_dim, r->n_rot, 0, lmp_rope_table_for(r, T), r->mscale, x);
}

/* ---- the walker: a block's steps (model/block_steps.h) run top down ----------------------- */

/* out[T, C] <- RMSNorm or LayerNorm of in (s->in[0]) with norm n, through work when out is in. */
static int run_norm(const lmp_backend *be, const lmp_arch *a, const lmp_block_step *s, const lmp_norm *n, int64_t T,
                    int64_t C, const float *in, float *out, float *work)
{
    float *to = out == in ? work : out;
    int st = 0;
    if (s->kind == LMP_STEP_HEAD_NORM) {
        st = lmp_be_rmsnorm(be, T * s->heads[0], C / s->heads[0], in, n->w, a->norm_eps, to);
    } else if (s->layer_norm) {
        st = lmp_be_layernorm(be, T, C, in, n->w, n->b, a->norm_eps, to);
    } else {
        st = lmp_be_rmsnorm(be, T, C, in, n->w, a->norm_eps, to);
        if (!st && n->b) /* the bias a shift may have given an RMSNorm */
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < C; j++) to[t * C + j] += n->b[j];
    }
    if (!st && to != out) memcpy(out, to, (size_t)(T * C) * sizeof *out);
    return st;
}

/* The steps' buffers: where no slot is given, a slot lives in its home, shared with the slots
 * whose lives do not overlap its own (x: the stream in place; xn: both norms before linears;
 * y: the branches' outputs; mid: attention's output, then the activation). */
static void slot_homes(float *slot[LMP_SLOT_COUNT], float *x, float *xn, float *q, float *k, float *v, float *mid,
                       float *y, float *g, float *u)
{
    slot[LMP_SLOT_X] = slot[LMP_SLOT_X1] = slot[LMP_SLOT_Y] = x;
    slot[LMP_SLOT_XN_ATTN] = slot[LMP_SLOT_XN_MLP] = xn;
    slot[LMP_SLOT_Q_LIN] = slot[LMP_SLOT_Q] = q;
    slot[LMP_SLOT_K_LIN] = slot[LMP_SLOT_K] = k;
    slot[LMP_SLOT_V] = v;
    slot[LMP_SLOT_ATT] = slot[LMP_SLOT_H] = mid;
    slot[LMP_SLOT_ATT_OUT] = slot[LMP_SLOT_ATT_POST] = slot[LMP_SLOT_MLP_OUT] = slot[LMP_SLOT_MLP_POST] = y;
    slot[LMP_SLOT_GATE] = g;
    slot[LMP_SLOT_UP] = u;
}

/* ---- a mixture of experts (LMP_STEP_MOE) ----------------------------------------------------- */

void lmp_moe_route(const float *logits, int64_t T, int64_t E, int64_t k, int norm_topk, int *sel, float *wt)
{
    double *p = malloc((size_t)E * sizeof *p);
    for (int64_t t = 0; p && t < T; t++) {
        const float *z = logits + t * E;
        double mx = z[0], sum = 0;
        for (int64_t e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        for (int64_t e = 0; e < E; e++) sum += p[e] = exp((double)z[e] - mx);
        double top = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (p[e] >= 0 && (best < 0 || p[e] > p[best])) best = e;
            sel[t * k + j] = (int)best;
            wt[t * k + j] = (float)(p[best] / sum);
            top += p[best] / sum;
            p[best] = -1; /* taken */
        }
        for (int64_t j = 0; norm_topk && j < k; j++) wt[t * k + j] = (float)((double)wt[t * k + j] / top);
    }
    free(p);
}

/* Gathers the rows of x[T, C] listed in rows[n] into out[n, C]. */
static void gather_rows(const float *x, int64_t C, const int64_t *rows, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) memcpy(out + i * C, x + rows[i] * C, (size_t)C * sizeof *out);
}

/* One expert's SwiGLU MLP on x[n, d]: h[n, f] = silu(gate x) * up x (observed by obs as the gate's
 * and up's input when obs_x is x), then y[n, d] = down h.  g is [n, f] scratch. */
static int expert_mlp(const lmp_backend *be, const lmp_linear *gate, const lmp_linear *up, const lmp_linear *down,
                      int64_t n, const float *x, float *g, float *h, float *qbuf, float *y)
{
    int st = run_linear(be, gate, n, x, qbuf, g);
    if (!st) st = run_linear(be, up, n, x, qbuf, h);
    if (!st) st = lmp_be_swiglu(be, n * gate->out, g, h, h);
    if (!st && y) st = run_linear(be, down, n, h, qbuf, y);
    return st;
}

/* out[T, d] = the mixture of experts on xn[T, d] (block_steps.h).  The observer sees, in this
 * order: the router's input (shared by the shared expert's gate, up and sigmoid gate), each
 * expert's gate/up input (the rows routed to it, or every row when it asks for
 * LMP_OBSERVE_ALL_EXPERTS), then each expert's down input, then the shared expert's.  A
 * LMP_FORWARD_STOP is honoured once every input of its group has been observed (an expert's
 * statistics are not cut short at the first expert). */
static int run_moe(const lmp_backend *be, const lmp_block *blk, const lmp_block_step *s, int64_t T, const float *xn,
                   float *out, lmp_observe_fn obs, void *ud)
{
    const int64_t d = blk->linears[0].in, E = s->n_experts, k = s->top_k, f = s->expert_hidden, fs = s->shared_hidden;
    const int64_t fw = f > fs ? f : fs, wide = fw > d ? fw : d;
    const int router = lmp_block_find(blk, LMP_ROLE_ROUTER), sgate = lmp_block_find(blk, LMP_ROLE_SHARED_GATE);
    int sh[3] = {-1, -1, -1};
    static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    for (int r = 0; fs && r < 3; r++) sh[r] = lmp_block_find_expert(blk, roles[r], LMP_EXPERT_SHARED, 0);
    const int all = obs && obs(ud, NULL, 0, NULL, 0, 0) == LMP_OBSERVE_ALL_EXPERTS;
    float *logits = malloc((size_t)(T * E) * sizeof *logits), *wt = malloc((size_t)(T * k) * sizeof *wt);
    int *sel = malloc((size_t)(T * k) * sizeof *sel);
    int64_t *rows = malloc((size_t)T * sizeof *rows), *slot = malloc((size_t)T * sizeof *slot);
    /* xe[T, d] the rows of one expert, g, h [T, fw], ye [T, d], qbuf [T, wide], gate [T] */
    float *buf = malloc((size_t)(T * (2 * d + 2 * fw + wide + 1)) * sizeof *buf);
    int st = logits && wt && sel && rows && slot && buf ? 0 : lmp_fail(LMP_ENOMEM, "out of memory in block %d's experts",
                                                                        blk->index);
    float *xe = buf, *g = xe + T * d, *h = g + T * fw, *ye = h + T * fw, *qbuf = ye + T * d, *sg = qbuf + T * wide;
    int stop = 0;
    /* group 2: the router's input, then each expert's gate/up input */
    if (!st && obs) {
        int lins[4], n = 0;
        lins[n++] = router;
        if (sgate >= 0) lins[n++] = sgate;
        if (sh[0] >= 0) lins[n++] = sh[0], lins[n++] = sh[1];
        st = obs(ud, lins, n, xn, T, d);
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
    }
    if (!st) st = run_linear(be, &blk->linears[router], T, xn, qbuf, logits);
    if (!st) lmp_moe_route(logits, T, E, k, s->norm_topk, sel, wt);
    for (int e = 0; obs && !st && e < E; e++) {
        const int gi = lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e);
        const int lins[2] = {gi, lmp_block_find_expert(blk, LMP_ROLE_UP, LMP_EXPERT_ROUTED, e)};
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (sel[t * k + j] == e) rows[n++] = t;
        if (all) st = obs(ud, lins, 2, xn, T, d);
        else if (n) {
            gather_rows(xn, d, rows, n, xe);
            st = obs(ud, lins, 2, xe, n, d);
        }
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
    }
    if (!st && stop) st = LMP_FORWARD_STOP;
    /* the experts, each on its rows, weighted into out; their down inputs observed (group 3) */
    if (!st) memset(out, 0, (size_t)(T * d) * sizeof *out);
    for (int e = 0; !st && e < E; e++) {
        const lmp_linear *G = &blk->linears[lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e)];
        const lmp_linear *U = &blk->linears[lmp_block_find_expert(blk, LMP_ROLE_UP, LMP_EXPERT_ROUTED, e)];
        const int di = lmp_block_find_expert(blk, LMP_ROLE_DOWN, LMP_EXPERT_ROUTED, e);
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (sel[t * k + j] == e) rows[n] = t, slot[n++] = t * k + j;
        if (all && obs) { /* statistics only: every token through the expert; the output below is the routed one */
            st = expert_mlp(be, G, U, NULL, T, xn, g, h, qbuf, NULL);
            if (!st) st = obs(ud, &di, 1, h, T, f);
            if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
        }
        if (st || !n) continue;
        gather_rows(xn, d, rows, n, xe);
        st = expert_mlp(be, G, U, NULL, n, xe, g, h, qbuf, NULL);
        if (!st && obs && !all) st = obs(ud, &di, 1, h, n, f);
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
        if (!st) st = run_linear(be, &blk->linears[di], n, h, qbuf, ye);
        for (int64_t i = 0; !st && i < n; i++) { /* transformers: index_add_ of y * weight, expert by expert */
            const float w = wt[slot[i]];
            for (int64_t c = 0; c < d; c++) out[rows[i] * d + c] += ye[i * d + c] * w;
        }
    }
    /* the shared expert on every token, times sigmoid(its gate) */
    if (!st && fs) {
        st = expert_mlp(be, &blk->linears[sh[0]], &blk->linears[sh[1]], NULL, T, xn, g, h, qbuf, NULL);
        if (!st && obs) st = obs(ud, &sh[2], 1, h, T, fs);
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
        if (!st) st = run_linear(be, &blk->linears[sh[2]], T, h, qbuf, ye);
        if (!st && sgate >= 0) st = run_linear(be, &blk->linears[sgate], T, xn, qbuf, sg);
        for (int64_t t = 0; !st && t < T; t++) {
            const float gate = sgate >= 0 ? (float)(1.0 / (1.0 + exp(-(double)sg[t]))) : 1.0f;
            for (int64_t c = 0; c < d; c++) out[t * d + c] += gate * ye[t * d + c];
        }
    }
    if (!st && stop) st = LMP_FORWARD_STOP;
    free(logits);
    free(wt);
    free(sel);
    free(rows);
    free(slot);
    free(buf);
    return st;
}

/* Step s forward on the slots' buffers. */
static int run_step(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_plan *p,
                    const lmp_block_step *s, int64_t T, float *const *slot, float *qbuf, float *work,
                    lmp_observe_fn obs, void *ud)
{
    float *in = slot[s->in[0]], *out = s->n_out ? slot[s->out[0]] : NULL;
    const int64_t C = p->width[s->in[0]];
    int st = 0;
    switch (s->kind) {
    case LMP_STEP_NORM:
    case LMP_STEP_HEAD_NORM:
        return run_norm(be, a, s, &blk->norms[s->norm], T, C, in, out, work);
    case LMP_STEP_LINEARS: {
        int lins[LMP_STEP_MAX_IO];
        for (int i = 0; i < s->n_out; i++) lins[i] = lmp_block_find(blk, s->roles[i]);
        const float *x = s->affine ? affine_input(&blk->linears[lins[0]], T, in, work) : in;
        st = observe(obs, ud, lins, s->n_out, x, T, C);
        for (int i = 0; !st && i < s->n_out; i++) st = run_linear(be, &blk->linears[lins[i]], T, x, qbuf, slot[s->out[i]]);
        return st;
    }
    case LMP_STEP_ROPE:
        st = lmp_rope_heads(be, a, p->layer, T, s->heads[0], slot[s->in[0]]);
        return st ? st : lmp_rope_heads(be, a, p->layer, T, s->heads[1], slot[s->in[1]]);
    case LMP_STEP_SCALE:
        for (int64_t i = 0; i < T * C; i++) in[i] *= s->scale;
        return 0;
    case LMP_STEP_ATTENTION:
        /* the KV cache's simulated quantization: K and V as the cache would hold them */
        if (blk->kv.type != LMP_KV_NONE &&
            (st = lmp_kv_quantize(&blk->kv, T, a->n_kv_heads, a->head_dim, slot[s->in[1]], slot[s->in[2]])))
            return lmp_fail_prefix(st, "block %d", blk->index);
        if (s->window || s->softcap)
            return lmp_be_attention_window(be, T, a->n_heads, a->n_kv_heads, a->head_dim, s->window, s->softcap, in,
                                           slot[s->in[1]], slot[s->in[2]], out);
        return lmp_be_attention(be, T, a->n_heads, a->n_kv_heads, a->head_dim, in, slot[s->in[1]], slot[s->in[2]], out);
    case LMP_STEP_GLU:
        if (!s->gelu) return lmp_be_swiglu(be, T * C, in, slot[s->in[1]], out);
        st = lmp_be_gelu(be, T * C, in, out); /* Gemma: gelu_tanh(gate) * up */
        for (int64_t i = 0; !st && i < T * C; i++) out[i] *= slot[s->in[1]][i];
        return st;
    case LMP_STEP_GELU:
        return lmp_be_gelu(be, T * C, in, out);
    case LMP_STEP_ADD:
        for (int64_t i = 0; i < T * C; i++) out[i] = in[i] + slot[s->in[1]][i];
        return 0;
    case LMP_STEP_ROTATE:
        return lmp_rotate_online(be, a, s, T, slot, 0);
    case LMP_STEP_MOE:
        return run_moe(be, blk, s, T, in, out, obs, ud);
    case LMP_STEP_KINDS:
        break;
    }
    return lmp_fail(LMP_EINVAL, "block %d: a step of unknown kind %d", blk->index, (int)s->kind);
}

int lmp_block_run(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_plan *p, int64_t T,
                  int from, float *x, float *const given[LMP_SLOT_COUNT], lmp_observe_fn obs, void *ud)
{
    const int64_t d = a->dim, kv = a->n_kv_heads * a->head_dim, f = a->hidden, qd = a->n_heads * a->head_dim;
    const int64_t wide = lmp_arch_mid_width(a);
    /* xn[T,d] q[T,qd] k[T,kv] v[T,kv] g[T,f] u[T,f] qbuf[T,wide] y[T,d] work[T,wide], and mid[T,wide]
     * unless both its slots are given */
    const int own = !given || !given[LMP_SLOT_ATT] || !given[LMP_SLOT_H];
    float *buf = malloc((size_t)(T * (2 * d + qd + 2 * kv + 2 * f + (own ? 3 : 2) * wide)) * sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d forward", blk->index);
    float *xn = buf, *q = xn + T * d, *k = q + T * qd, *v = k + T * kv, *g = v + T * kv, *u = g + T * f;
    float *qbuf = u + T * f, *y = qbuf + T * wide, *work = y + T * d, *mid = own ? work + T * wide : NULL;
    float *slot[LMP_SLOT_COUNT];
    slot_homes(slot, x, xn, q, k, v, mid, y, g, u);
    for (int i = 0; given && i < LMP_SLOT_COUNT; i++)
        if (given[i]) slot[i] = given[i];
    int st = 0;
    for (int i = 0; !st && i < p->n_steps; i++)
        if (p->step[i].group >= from) st = run_step(be, a, blk, p, &p->step[i], T, slot, qbuf, work, obs, ud);
    free(buf);
    return st;
}

int lmp_block_step_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_plan *p,
                           int i, int64_t T, float *const slot[LMP_SLOT_COUNT], float *qbuf, float *work)
{
    return run_step(be, a, blk, p, &p->step[i], T, slot, qbuf, work, NULL, NULL);
}

int lmp_block_forward_from(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T, int from,
                           float *x, const lmp_block_state *state, lmp_observe_fn obs, void *ud)
{
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    float *given[LMP_SLOT_COUNT] = {0};
    if (state) { /* what a later pass resumes from: x1, and `mid` (attention's output, then the activation) */
        given[LMP_SLOT_X1] = state->x1;
        given[LMP_SLOT_ATT] = given[LMP_SLOT_H] = state->mid;
    }
    return lmp_block_run(be, a, blk, &p, T, from, x, given, obs, ud);
}

int lmp_block_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T,
                      float *x, lmp_observe_fn obs, void *ud)
{
    return lmp_block_forward_from(be, a, blk, T, 0, x, NULL, obs, ud);
}

double lmp_block_flops(const lmp_arch *a, int64_t T, int group)
{
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, 0);
    return lmp_block_plan_flops(&p, T, group);
}

void lmp_embed(const lmp_model *m, const int32_t *tok, int64_t T, float *x)
{
    const int64_t d = m->arch.dim;
    for (int64_t t = 0; t < T; t++) {
        memcpy(x + t * d, m->tok_emb + (int64_t)tok[t] * d, (size_t)d * sizeof *x);
        if (m->arch.embed_scale) /* Gemma: the embedding times sqrt(dim); the tied head reads it unscaled */
            for (int64_t i = 0; i < d; i++) x[t * d + i] *= m->arch.embed_scale;
        if (m->pos_emb) /* GPT-2: learned position t */
            for (int64_t i = 0; i < d; i++) x[t * d + i] += m->pos_emb[t * d + i];
    }
}

int lmp_head(const lmp_backend *be, const lmp_model *m, int64_t T, const float *x, int normalize,
             float *out)
{
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    float *xn = malloc((size_t)(T * d) * sizeof *xn);
    if (!xn) return lmp_fail(LMP_ENOMEM, "out of memory in the model head");
    int st = m->arch.family == LMP_FAMILY_GPT2
                 ? lmp_be_layernorm(be, T, d, x, m->final_norm_w, m->final_norm_b, m->arch.norm_eps, xn)
                 : lmp_be_rmsnorm(be, T, d, x, m->final_norm_w, m->arch.norm_eps, xn);
    if (st) goto done;
    st = lmp_be_gemm(be, 0, 1, T, V, d, 1.0f, xn, d, m->lm_head, d, 0.0f, out, V);
    if (st) goto done;
    const float cap = m->arch.final_softcap; /* Gemma 2: logits through cap tanh(z / cap) */
    for (int64_t i = 0; cap > 0 && i < T * V; i++) out[i] = cap * tanhf(out[i] / cap);
    if (normalize) st = lmp_be_log_softmax(be, T, V, out, out);
done:
    free(xn);
    return st;
}

int lmp_forward(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks,
                const int32_t *tok, int64_t T, int normalize, float *out)
{
    float *x = malloc((size_t)(T * m->arch.dim) * sizeof *x);
    if (!x) return lmp_fail(LMP_ENOMEM, "out of memory in forward");
    lmp_embed(m, tok, T, x);
    int st = 0;
    for (int64_t l = 0; l < m->arch.n_layers; l++) {
        st = lmp_block_forward(be, &m->arch, &blocks[l], T, x, NULL, NULL);
        if (st) goto done;
    }
    st = lmp_head(be, m, T, x, normalize, out);
done:
    free(x);
    return st;
}
