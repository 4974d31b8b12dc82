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
#include "model/alibi.h"
#include "model/expert_pager.h"
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

void lmp_gelu_erf(int64_t n, const float *in, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        const double x = in[i];
        out[i] = (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440)));
    }
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

/* out[T, heads * hd] = causal attention of q over k, v (GQA: n_heads / n_kv_heads heads per kv
 * head; keys within `window` of the query, 0: all earlier) with gpt-oss's sinks: head h's softmax
 * denominator also holds exp(sinks[h]), a logit no value goes with, as transformers 5.24's
 * eager_attention_forward (the sink joins the scores, the max is taken over both, its column
 * dropped after the softmax).  Sums in double, as the CPU backend's reference. */
static int attention_sinks(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                           const float *sinks, const float *q, const float *k, const float *v, float *out)
{
    const int64_t qdim = n_heads * hd, kvdim = n_kv_heads * hd, group = n_heads / n_kv_heads;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc((size_t)(T + hd) * sizeof *p), *acc = p ? p + T : NULL;
    if (!p) return lmp_fail(LMP_ENOMEM, "out of memory in attention with sinks");
    for (int64_t h = 0; h < n_heads; h++) {
        const int64_t kh = h / group;
        const double sink = (double)sinks[h];
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * qdim + h * hd;
            const int64_t lo = window && t - window + 1 > 0 ? t - window + 1 : 0; /* keys lo..t */
            double mx = sink;
            for (int64_t j = lo; j <= t; j++) {
                const float *kj = k + j * kvdim + kh * hd;
                double sc = 0.0;
                for (int64_t c = 0; c < hd; c++) sc += (double)qt[c] * kj[c];
                p[j] = sc * scale;
                if (p[j] > mx) mx = p[j];
            }
            double sum = exp(sink - mx);
            for (int64_t j = lo; j <= t; j++) sum += p[j] = exp(p[j] - mx);
            for (int64_t c = 0; c < hd; c++) acc[c] = 0.0;
            for (int64_t j = lo; j <= t; j++) {
                const float *vj = v + j * kvdim + kh * hd;
                for (int64_t c = 0; c < hd; c++) acc[c] += p[j] * vj[c];
            }
            float *ot = out + t * qdim + h * hd;
            for (int64_t c = 0; c < hd; c++) ot[c] = (float)(acc[c] / sum);
        }
    }
    free(p);
    return 0;
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

void lmp_moe_route_topk_softmax(const float *logits, int64_t T, int64_t E, int64_t k, int *sel, float *wt)
{
    for (int64_t t = 0; t < T; t++) {
        const float *z = logits + t * E;
        for (int64_t j = 0; j < k; j++) { /* the k largest logits, largest first (torch.topk) */
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= sel[t * k + i] == (int)e;
                if (!taken && (best < 0 || z[e] > z[best])) best = e;
            }
            sel[t * k + j] = (int)best;
        }
        const double mx = z[sel[t * k]];
        double sum = 0;
        for (int64_t j = 0; j < k; j++) sum += exp((double)z[sel[t * k + j]] - mx);
        for (int64_t j = 0; j < k; j++) wt[t * k + j] = (float)(exp((double)z[sel[t * k + j]] - mx) / sum);
    }
}

/* DeepSeek's routings (LMP_ROUTE_SOFTMAX_GROUPS, LMP_ROUTE_SIGMOID_BIAS) as transformers 5.24's
 * DeepseekV2TopkRouter / DeepseekV3TopkRouter: scores (softmax or sigmoid of the f32 logits),
 * the choice on scores (+ bias for V3) within the topk_group best groups (V2: by the group's
 * largest score, the others' scores set to 0; V3: by the sum of its two largest choice scores,
 * the others' excluded), the k largest; weights the chosen scores (V3: renormalized with
 * norm_topk, + 1e-20), times routed_scale. */
static int route_deepseek(const lmp_block_step *s, const float *logits, const float *bias, int64_t T, int *sel,
                          float *wt)
{
    const int64_t E = s->n_experts, k = s->top_k, G = s->n_group > 0 ? s->n_group : 1, per = E / G;
    const int v3 = s->route == LMP_ROUTE_SIGMOID_BIAS;
    double *score = malloc((size_t)(2 * E + G) * sizeof *score);
    if (!score) return lmp_fail(LMP_ENOMEM, "out of memory in a router");
    double *choice = score + E, *gscore = choice + E;
    for (int64_t t = 0; t < T; t++) {
        const float *z = logits + t * E;
        if (v3) {
            for (int64_t e = 0; e < E; e++) {
                score[e] = (double)(float)(1.0 / (1.0 + exp(-(double)z[e]))); /* f32, as transformers */
                choice[e] = (double)(float)(score[e] + (bias ? (double)bias[e] : 0.0));
            }
        } else {
            double mx = z[0], sum = 0;
            for (int64_t e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
            for (int64_t e = 0; e < E; e++) sum += score[e] = exp((double)z[e] - mx);
            for (int64_t e = 0; e < E; e++) choice[e] = score[e] = (double)(float)(score[e] / sum);
        }
        if (s->n_group > 0 && s->topk_group < G) { /* only the best topk_group groups compete */
            for (int64_t g = 0; g < G; g++) {
                double b1 = -INFINITY, b2 = -INFINITY;
                for (int64_t e = g * per; e < (g + 1) * per; e++) {
                    const double c = choice[e];
                    if (c > b1) b2 = b1, b1 = c;
                    else if (c > b2) b2 = c;
                }
                gscore[g] = v3 ? b1 + (per > 1 ? b2 : 0) : b1;
            }
            for (int64_t j = 0; j < s->topk_group; j++) { /* mark the kept groups with +inf */
                int64_t best = -1;
                for (int64_t g = 0; g < G; g++)
                    if (gscore[g] != INFINITY && (best < 0 || gscore[g] > gscore[best])) best = g;
                gscore[best] = INFINITY;
            }
            for (int64_t g = 0; g < G; g++)
                for (int64_t e = g * per; gscore[g] != INFINITY && e < (g + 1) * per; e++)
                    choice[e] = v3 ? -INFINITY : 0.0; /* V2 masks with 0, V3 with -inf */
        }
        double top = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (choice[e] != -INFINITY && (best < 0 || choice[e] > choice[best])) best = e;
            sel[t * k + j] = (int)best;
            wt[t * k + j] = (float)score[best];
            top += (double)(float)score[best];
            choice[best] = -INFINITY; /* taken */
        }
        const double scale = s->routed_scale > 0 ? (double)s->routed_scale : 1.0;
        for (int64_t j = 0; j < k; j++) {
            double w = wt[t * k + j];
            if (v3 && s->norm_topk) w = (double)(float)(w / (top + 1e-20));
            wt[t * k + j] = (float)(w * scale);
        }
    }
    free(score);
    return 0;
}

int lmp_moe_route_step(const lmp_block_step *s, const float *logits, const float *router_bias, int64_t T, int *sel,
                       float *wt)
{
    switch (s->route) {
    case LMP_ROUTE_SIGMOID_BIAS: return route_deepseek(s, logits, router_bias, T, sel, wt);
    case LMP_ROUTE_SOFTMAX_GROUPS: return route_deepseek(s, logits, NULL, T, sel, wt);
    case LMP_ROUTE_TOPK_SOFTMAX: lmp_moe_route_topk_softmax(logits, T, s->n_experts, s->top_k, sel, wt); return 0;
    case LMP_ROUTE_SOFTMAX: break;
    }
    lmp_moe_route(logits, T, s->n_experts, s->top_k, s->norm_topk, sel, wt);
    return 0;
}

/* Gathers the rows of x[T, C] listed in rows[n] into out[n, C]. */
static void gather_rows(const float *x, int64_t C, const int64_t *rows, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) memcpy(out + i * C, x + rows[i] * C, (size_t)C * sizeof *out);
}

/* One expert's SwiGLU MLP on x[n, d]: h[n, f] = silu(gate x) * up x (observed by obs as the gate's
 * and up's input when obs_x is x), then y[n, d] = down h.  g is [n, f] scratch. */
static int expert_mlp(const lmp_backend *be, const lmp_block_step *s, const lmp_linear *gate, const lmp_linear *up,
                      const lmp_linear *down, int64_t n, const float *x, float *g, float *h, float *qbuf, float *y)
{
    int st = run_linear(be, gate, n, x, qbuf, g);
    if (!st) st = run_linear(be, up, n, x, qbuf, h);
    if (!st && s && s->swiglu_limit > 0) { /* gpt-oss (routed experts only: it has no shared one) */
        const double lim = s->swiglu_limit, alpha = s->swiglu_alpha;
        for (int64_t i = 0; i < n * gate->out; i++) {
            const double gv = g[i] < lim ? (double)g[i] : lim;
            const double uv = h[i] < -lim ? -lim : h[i] > lim ? lim : (double)h[i];
            h[i] = (float)((uv + 1.0) * gv / (1.0 + exp(-alpha * gv)));
        }
    } else if (!st) {
        st = lmp_be_swiglu(be, n * gate->out, g, h, h);
    }
    if (!st && y) st = run_linear(be, down, n, h, qbuf, y);
    return st;
}

/* out[T, d] = the mixture of experts on xn[T, d] (block_steps.h).  The observer sees, in this
 * order: the router's input (shared by the shared expert's gate, up and sigmoid gate), each
 * expert's gate/up input (the rows routed to it, or every row when it asks for
 * LMP_OBSERVE_ALL_EXPERTS), then each expert's down input, then the shared expert's.  A
 * LMP_FORWARD_STOP is honoured once every input of its group has been observed (an expert's
 * statistics are not cut short at the first expert). */
static int run_moe(const lmp_backend *be, const lmp_block *blk, const lmp_block_step *s, lmp_expert_pager *pager,
                   int64_t T, const float *xn, float *out, lmp_observe_fn obs, void *ud)
{
    const int64_t d = blk->linears[0].in, E = s->n_experts, k = s->top_k, f = s->expert_hidden, fs = s->shared_hidden;
    const int64_t fw = f > fs ? f : fs, wide = fw > d ? fw : d;
    const int router = lmp_block_find(blk, LMP_ROLE_ROUTER), sgate = lmp_block_find(blk, LMP_ROLE_SHARED_GATE);
    int sh[3] = {-1, -1, -1};
    static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    for (int r = 0; fs && r < 3; r++) sh[r] = lmp_block_find_expert(blk, roles[r], LMP_EXPERT_SHARED, 0);
    /* an observer names the linears it sees by their index in blk: a paged expert has none */
    if (pager && obs) return lmp_fail(LMP_EUNSUPPORTED, "block %d: its routed experts are held a group at a time "
                                      "(memory.expert_group_mb), and this forward observes them", blk->index);
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
    if (!st && s->route == LMP_ROUTE_SIGMOID_BIAS) { /* the router's b is the selection bias, not the logits' */
        lmp_linear r = blk->linears[router];
        r.b = NULL;
        st = run_linear(be, &r, T, xn, qbuf, logits);
    } else if (!st) {
        st = run_linear(be, &blk->linears[router], T, xn, qbuf, logits);
    }
    if (!st) st = lmp_moe_route_step(s, logits, blk->linears[router].b, T, sel, wt);
    for (int e = 0; obs && !st && e < E; e++) {
        const int gi = lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e);
        if (gi < 0) continue; /* a part of the block (expert_pager.h): not one of its experts */
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
        const int gi = lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e);
        const lmp_linear *gud[3];
        int di = -1;
        if (gi >= 0) {
            gud[0] = &blk->linears[gi];
            gud[1] = &blk->linears[lmp_block_find_expert(blk, LMP_ROLE_UP, LMP_EXPERT_ROUTED, e)];
            di = lmp_block_find_expert(blk, LMP_ROLE_DOWN, LMP_EXPERT_ROUTED, e);
            gud[2] = &blk->linears[di];
        } else if (!pager) {
            continue; /* a part of the block, for its experts' statistics: this one adds nothing */
        } else if ((st = lmp_expert_pager_expert(pager, e, gud))) {
            break; /* the same expert, the same floats, only read from its group (expert_pager.h) */
        }
        const lmp_linear *G = gud[0], *U = gud[1];
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (sel[t * k + j] == e) rows[n] = t, slot[n++] = t * k + j;
        if (all && obs) { /* statistics only: every token through the expert; the output below is the routed one */
            st = expert_mlp(be, s, G, U, NULL, T, xn, g, h, qbuf, NULL);
            if (!st) st = obs(ud, &di, 1, h, T, f);
            if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
        }
        if (st || !n) continue;
        gather_rows(xn, d, rows, n, xe);
        st = expert_mlp(be, s, G, U, NULL, n, xe, g, h, qbuf, NULL);
        if (!st && obs && !all) st = obs(ud, &di, 1, h, n, f);
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
        if (!st) st = run_linear(be, gud[2], n, h, qbuf, ye);
        for (int64_t i = 0; !st && i < n; i++) { /* transformers: index_add_ of y * weight, expert by expert */
            const float w = wt[slot[i]];
            for (int64_t c = 0; c < d; c++) out[rows[i] * d + c] += ye[i * d + c] * w;
        }
    }
    /* the shared expert on every token, times sigmoid(its gate) */
    if (!st && fs) {
        st = expert_mlp(be, NULL, &blk->linears[sh[0]], &blk->linears[sh[1]], NULL, T, xn, g, h, qbuf, NULL);
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

/* ---- multi-head latent attention (LMP_STEP_MLA, DeepSeek-V2/V3) -------------------------------- */

int lmp_mla_rope(const lmp_backend *be, const lmp_arch *a, int64_t layer, int64_t T, int64_t n_heads, float *x)
{
    const lmp_rope *r = lmp_arch_rope(a, layer);
    const int64_t hd = a->mla_rope;
    if (!r->n_rot) return lmp_be_rope(be, T, n_heads, hd, 0, a->rope_theta, x);
    if (r->plain) return lmp_be_rope(be, T, n_heads, hd, 0, r->theta, x);
    return lmp_be_rope_table(be, T, n_heads, hd, r->n_rot, 0, lmp_rope_table_for(r, T), r->mscale, x);
}

/* att[T, H * dv] = MLA on xn[T, d] (block_steps.h), as transformers' DeepseekV2/V3Attention:
 *   q = q(xn) or q_b(rmsnorm(q_a(xn)))               [T, H * (dn + dr)], per head nope then rope
 *   [c, k_rot] = kv_a(xn)                            [T, r + dr]
 *   [k_nope, v] per head = kv_b(rmsnorm(c))          [T, H * (dn + dv)]
 *   RoPE on each head's q_rot and on k_rot (one head, shared by all);
 *   attention of q = [q_nope, q_rot] against k = [k_nope, k_rot] scaled by 1/sqrt(dn + dr), on v.
 * The attention runs as the backend's with head_dim dn + dr, v zero-padded to that width (its
 * scale is then MLA's).  The observer sees q's (or q_a's) and kv_a's input, then q_b's, then
 * kv_b's, all of group 0; a LMP_FORWARD_STOP is honoured after the last of them. */
static int run_mla(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_step *s,
                   int64_t layer, int64_t T, const float *xn, float *att, lmp_observe_fn obs, void *ud)
{
    const int64_t d = a->dim, H = a->n_heads, dn = a->mla_nope, dr = a->mla_rope, dv = a->head_dim;
    const int64_t dq = dn + dr, r = a->mla_kv_lora, rq = a->mla_q_lora;
    const int qa = lmp_block_find(blk, LMP_ROLE_Q_A), qb = lmp_block_find(blk, LMP_ROLE_Q_B);
    const int qi = lmp_block_find(blk, LMP_ROLE_Q), kva = lmp_block_find(blk, LMP_ROLE_KV_A);
    const int kvb = lmp_block_find(blk, LMP_ROLE_KV_B);
    const int64_t wide_in = d > r ? (d > rq ? d : rq) : (r > rq ? r : rq);
    /* q, k, v, o [T, H dq]; ckv [T, r + dr]; cn [T, r]; qa [T, rq]; kv [T, H (dn + dv)]; pe
     * [T, H dr]; qbuf [T, wide_in] */
    const size_t n = (size_t)(T * (4 * H * dq + (r + dr) + 2 * r + 2 * rq + H * (dn + dv) + H * dr + wide_in));
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d's latent attention", blk->index);
    float *q = buf, *k = q + T * H * dq, *v = k + T * H * dq, *o = v + T * H * dq, *ckv = o + T * H * dq;
    float *craw = ckv + T * (r + dr), *cn = craw + T * r, *qraw = cn + T * r, *qlat = qraw + T * rq;
    float *kv = qlat + T * rq, *pe = kv + T * H * (dn + dv), *qbuf = pe + T * H * dr;
    int st = 0, stop = 0;
    /* group 0's inputs: xn for q (or q_a) and kv_a */
    if (obs) {
        const int lins[2] = {qa >= 0 ? qa : qi, kva};
        st = obs(ud, lins, 2, xn, T, d);
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
    }
    if (!st && qa >= 0) { /* q_b(norm(q_a(xn))) */
        st = run_linear(be, &blk->linears[qa], T, xn, qbuf, qraw);
        if (!st) st = lmp_be_rmsnorm(be, T, rq, qraw, blk->norms[s->mla_norm[0]].w, a->mla_norm_eps, qlat);
        if (!st && obs) st = obs(ud, &qb, 1, qlat, T, rq);
        if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
        if (!st) st = run_linear(be, &blk->linears[qb], T, qlat, qbuf, q);
    } else if (!st) {
        st = run_linear(be, &blk->linears[qi], T, xn, qbuf, q);
    }
    if (!st) st = run_linear(be, &blk->linears[kva], T, xn, qbuf, ckv);
    for (int64_t t = 0; !st && t < T; t++) memcpy(craw + t * r, ckv + t * (r + dr), (size_t)r * sizeof *cn);
    if (!st) st = lmp_be_rmsnorm(be, T, r, craw, blk->norms[s->mla_norm[1]].w, a->mla_norm_eps, cn);
    if (!st && obs) st = obs(ud, &kvb, 1, cn, T, r);
    if (st == LMP_FORWARD_STOP) stop = 1, st = 0;
    if (!st && stop) { /* everything asked for is seen */
        free(buf);
        return LMP_FORWARD_STOP;
    }
    if (!st) st = run_linear(be, &blk->linears[kvb], T, cn, qbuf, kv);
    /* RoPE on q's rotary parts (gathered per head) and on the shared k_rot */
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(pe + (t * H + h) * dr, q + t * H * dq + h * dq + dn, (size_t)dr * sizeof *pe);
    if (!st) st = lmp_mla_rope(be, a, layer, T, H, pe);
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(q + t * H * dq + h * dq + dn, pe + (t * H + h) * dr, (size_t)dr * sizeof *pe);
    for (int64_t t = 0; !st && t < T; t++) memcpy(pe + t * dr, ckv + t * (r + dr) + r, (size_t)dr * sizeof *pe);
    if (!st) st = lmp_mla_rope(be, a, layer, T, 1, pe);
    /* k = [k_nope, k_rot] per head, v padded with zeros to dq */
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *src = kv + t * H * (dn + dv) + h * (dn + dv);
            float *kh = k + t * H * dq + h * dq, *vh = v + t * H * dq + h * dq;
            memcpy(kh, src, (size_t)dn * sizeof *kh);
            memcpy(kh + dn, pe + t * dr, (size_t)dr * sizeof *kh);
            memcpy(vh, src + dn, (size_t)dv * sizeof *vh);
            for (int64_t j = dv; j < dq; j++) vh[j] = 0.0f;
        }
    if (!st && a->mla_q_scale && a->mla_q_scale != 1.0f) /* YaRN's mscale_all_dim^2 on the softmax scale */
        for (int64_t i = 0; i < T * H * dq; i++) q[i] *= a->mla_q_scale;
    if (!st) st = lmp_be_attention(be, T, H, H, dq, q, k, v, o);
    for (int64_t t = 0; !st && t < T; t++)
        for (int64_t h = 0; h < H; h++) memcpy(att + t * H * dv + h * dv, o + t * H * dq + h * dq, (size_t)dv * sizeof *att);
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
        if (s->norm >= 0) { /* gpt-oss's sinks (no soft-cap: the loader sets none with them) */
            if (s->softcap) return lmp_fail(LMP_EUNSUPPORTED, "block %d: soft-capped scores with sinks", blk->index);
            return attention_sinks(T, a->n_heads, a->n_kv_heads, a->head_dim, s->window, blk->norms[s->norm].w, in,
                                   slot[s->in[1]], slot[s->in[2]], out);
        }
        if (s->alibi) { /* Bloom: the backend's attention_alibi (ABI 6.1; the CPU backend's where it has none) */
            if (s->softcap) return lmp_fail(LMP_EUNSUPPORTED, "block %d: soft-capped scores with ALiBi", blk->index);
            float *slopes = malloc((size_t)a->n_heads * sizeof *slopes);
            if (!slopes) return lmp_fail(LMP_ENOMEM, "out of memory in block %d's attention", blk->index);
            lmp_alibi_slopes(a->n_heads, slopes);
            st = lmp_be_attention_alibi(be, T, a->n_heads, a->n_kv_heads, a->head_dim, s->window, slopes, in,
                                        slot[s->in[1]], slot[s->in[2]], out);
            free(slopes);
            return st;
        }
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
        if (s->relu) { /* OPT */
            for (int64_t i = 0; i < T * C; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
            return 0;
        }
        if (!s->erf) return lmp_be_gelu(be, T * C, in, out);
        lmp_gelu_erf(T * C, in, out); /* GPT-NeoX's exact GELU: no backend op, the slots are host memory */
        return 0;
    case LMP_STEP_ADD:
        for (int64_t i = 0; i < T * C; i++) out[i] = in[i] + slot[s->in[1]][i];
        return 0;
    case LMP_STEP_ROTATE:
        return lmp_rotate_online(be, a, s, T, slot, 0);
    case LMP_STEP_MOE:
        return run_moe(be, blk, s, p->pager, T, in, out, obs, ud);
    case LMP_STEP_MLA: /* its k and v are made inside the step: no KV cache to quantize there yet */
        if (blk->kv.type != LMP_KV_NONE)
            return lmp_fail(LMP_EUNSUPPORTED, "block %d: kv_cache (the KV cache's simulated quantization) is not "
                            "supported on multi-head latent attention (DeepSeek-V2/V3)", blk->index);
        return run_mla(be, a, blk, s, p->layer, T, in, out, obs, ud);
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
    /* a parallel block reads x after x1 is made (norm_mlp(x)): x1 then has a home of its own */
    const int x1_own = a->parallel && !(given && given[LMP_SLOT_X1]);
    float *buf = malloc((size_t)(T * (2 * d + qd + 2 * kv + 2 * f + (own ? 3 : 2) * wide + (x1_own ? d : 0))) *
                        sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d forward", blk->index);
    float *xn = buf, *q = xn + T * d, *k = q + T * qd, *v = k + T * kv, *g = v + T * kv, *u = g + T * f;
    float *qbuf = u + T * f, *y = qbuf + T * wide, *work = y + T * d, *mid = own ? work + T * wide : NULL;
    float *slot[LMP_SLOT_COUNT];
    slot_homes(slot, x, xn, q, k, v, mid, y, g, u);
    if (x1_own) slot[LMP_SLOT_X1] = work + T * wide + (own ? T * wide : 0);
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

int lmp_block_forward_paged(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, lmp_expert_pager *pager,
                            int64_t T, int from, float *x, const lmp_block_state *state, lmp_observe_fn obs, void *ud)
{
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    p.pager = pager;
    float *given[LMP_SLOT_COUNT] = {0};
    if (state) { /* what a later pass resumes from: x1, and `mid` (attention's output, then the activation) */
        given[LMP_SLOT_X1] = state->x1;
        given[LMP_SLOT_ATT] = given[LMP_SLOT_H] = state->mid;
    }
    return lmp_block_run(be, a, blk, &p, T, from, x, given, obs, ud);
}

int lmp_block_forward_from(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T, int from,
                           float *x, const lmp_block_state *state, lmp_observe_fn obs, void *ud)
{
    return lmp_block_forward_paged(be, a, blk, NULL, T, from, x, state, obs, ud);
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
        float *xt = x + t * d;
        memcpy(xt, m->tok_emb + (int64_t)tok[t] * d, (size_t)d * sizeof *x);
        if (m->arch.embed_scale) /* Gemma: the embedding times sqrt(dim); the tied head reads it unscaled */
            for (int64_t i = 0; i < d; i++) xt[i] *= m->arch.embed_scale;
        if (m->pos_emb) /* GPT-2, OPT: learned position t */
            for (int64_t i = 0; i < d; i++) xt[i] += m->pos_emb[t * d + i];
        if (m->embed_norm_w) { /* Bloom: a LayerNorm on the embeddings (host, double sums); nothing before
                                * it learns, so it has no backward */
            double mean = 0, var = 0;
            for (int64_t i = 0; i < d; i++) mean += xt[i];
            mean /= (double)d;
            for (int64_t i = 0; i < d; i++) var += ((double)xt[i] - mean) * ((double)xt[i] - mean);
            const double inv = 1.0 / sqrt(var / (double)d + (double)m->arch.norm_eps);
            for (int64_t i = 0; i < d; i++)
                xt[i] = (float)(((double)xt[i] - mean) * inv * m->embed_norm_w[i] + (m->embed_norm_b ? m->embed_norm_b[i] : 0.0));
        }
    }
}

int lmp_head(const lmp_backend *be, const lmp_model *m, int64_t T, const float *x, int normalize,
             float *out)
{
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    float *xn = malloc((size_t)(T * d) * sizeof *xn);
    if (!xn) return lmp_fail(LMP_ENOMEM, "out of memory in the model head");
    int st = m->arch.family == LMP_FAMILY_GPT2 || m->arch.layer_norm
                 ? lmp_be_layernorm(be, T, d, x, m->final_norm_w, m->final_norm_b, m->arch.norm_eps, xn)
                 : lmp_be_rmsnorm(be, T, d, x, m->final_norm_w, m->arch.norm_eps, xn);
    if (st) goto done;
    /* Cohere: z = logit_scale (W xn) */
    st = lmp_be_gemm(be, 0, 1, T, V, d, m->arch.logit_scale ? m->arch.logit_scale : 1.0f, xn, d, m->lm_head, d, 0.0f,
                     out, V);
    if (st) goto done;
    for (int64_t t = 0; m->lm_head_b && t < T; t++) /* Phi-2, GPT-J: the head's bias */
        for (int64_t v = 0; v < V; v++) out[t * V + v] += m->lm_head_b[v];
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
