/* forward.c — see forward.h.  LLAMA mirrors llama2.c's run.c forward(), batched over T positions:
 *   xn = rmsnorm(x) ; q,k,v = xn Wq^T, xn Wk^T, xn Wv^T ; rope(q, k) ;
 *   x += attention(q, k, v) Wo^T ;
 *   xn = rmsnorm(x) ; x += (silu(xn Wg^T) * (xn Wu^T)) Wd^T
 * GPT2 is the same with LayerNorm, no RoPE (positions are added to the embeddings), biases, and
 *   x += gelu(xn Wfc^T + bfc) Wproj^T + bproj. */
#include "model/forward.h"

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

/* The block's norm: RMSNorm for LLAMA (plus the bias a shift may have given it), LayerNorm
 * with bias for GPT2. */
static int norm(const lmp_backend *be, const lmp_arch *a, const lmp_norm *n, int64_t T,
                const float *x, float *out)
{
    if (a->family == LMP_FAMILY_GPT2) return lmp_be_layernorm(be, T, a->dim, x, n->w, n->b, a->norm_eps, out);
    int st = lmp_be_rmsnorm(be, T, a->dim, x, n->w, a->norm_eps, out);
    if (st) return st;
    if (!n->b) return 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < a->dim; j++) out[t * a->dim + j] += n->b[j];
    return 0;
}

/* x[rows, head_dim] <- rmsnorm(x) * n->w row by row (through work[rows, head_dim]): a q or k norm. */
static int head_norm(const lmp_backend *be, const lmp_arch *a, const lmp_norm *n, int64_t rows, float *x, float *work)
{
    int st = lmp_be_rmsnorm(be, rows, a->head_dim, x, n->w, a->norm_eps, work);
    if (!st) memcpy(x, work, (size_t)(rows * a->head_dim) * sizeof *x);
    return st;
}

/* y[T, dim] <- norm(y) (through work[T, dim]): a norm on the attention's or the MLP's output
 * before the residual add (GLM-4, Gemma 2/3). */
static int post_norm(const lmp_backend *be, const lmp_arch *a, const lmp_norm *n, int64_t T, float *y, float *work)
{
    int st = norm(be, a, n, T, y, work);
    if (!st) memcpy(y, work, (size_t)(T * a->dim) * sizeof *y);
    return st;
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

/* lmp_block_forward_from, and with keep != NULL (from 0, no state) lmp_block_forward_keep: the
 * same operations in the same order, only into the buffers keep names. */
static int block_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T, int from,
                         float *x, const lmp_block_state *state, const lmp_block_keep *keep, lmp_observe_fn obs,
                         void *ud)
{
    const int64_t d = a->dim, kv = a->n_kv_heads * a->head_dim, f = a->hidden, qd = a->n_heads * a->head_dim;
    const int64_t wide = lmp_arch_mid_width(a);
    const int gpt2 = a->family == LMP_FAMILY_GPT2;
    int li[LMP_ROLE_COUNT]; /* linear index by role */
    for (int r = 0; r < LMP_ROLE_COUNT; r++) li[r] = lmp_block_find(blk, (lmp_role)r);
    const lmp_linear *L = blk->linears;
    /* xn[T,d] q[T,qd] k[T,kv] v[T,kv] g[T,f] u[T,f] qbuf[T,wide] y[T,d] work[T,wide], and without
     * a state mid[T,wide] (x1 is then x itself: the residual stream in place) */
    const int own = !state;
    float *buf = malloc((size_t)(T * (2 * d + qd + 2 * kv + 2 * f + (own ? 3 : 2) * wide)) * sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory in block %d forward", blk->index);
    float *xn = buf, *q = xn + T * d, *k = q + T * qd, *v = k + T * kv, *g = v + T * kv, *u = g + T * f;
    float *qbuf = u + T * f, *y = qbuf + T * wide, *work = y + T * d;
    float *mid = own ? work + T * wide : state->mid, *x1 = own ? x : state->x1;
    float *att = mid, *h = mid; /* the two values `mid` holds in turn, kept apart for a backward */
    if (keep) {
        q = keep->q, k = keep->k, v = keep->v, g = keep->g, u = keep->u;
        att = keep->att, h = keep->h, x1 = keep->x1;
    }
    const int qkv[] = {li[LMP_ROLE_Q], li[LMP_ROLE_K], li[LMP_ROLE_V]}, o[] = {li[LMP_ROLE_O]},
              gu[] = {gpt2 ? li[LMP_ROLE_UP] : li[LMP_ROLE_GATE], li[LMP_ROLE_UP]},
              dn[] = {li[LMP_ROLE_DOWN]};
    const float *in;
    int st = 0;
    if (from <= 0) { /* segment 0: mid = attention(rope(q), rope(k), v) over norm0(x) */
        st = norm(be, a, &blk->norms[0], T, x, xn);
        if (!st) st = observe(obs, ud, qkv, 3, xn, T, d);
        if (!st) st = run_linear(be, &L[qkv[0]], T, xn, qbuf, q);
        if (!st) st = run_linear(be, &L[qkv[1]], T, xn, qbuf, k);
        if (!st) st = run_linear(be, &L[qkv[2]], T, xn, qbuf, v);
        if (!st && a->qk_norm) { /* Qwen3: RMSNorm over each head of q and k, before RoPE */
            if (keep) { /* the norms' backward reads their input */
                memcpy(keep->q_lin, q, (size_t)(T * qd) * sizeof *q);
                memcpy(keep->k_lin, k, (size_t)(T * kv) * sizeof *k);
            }
            st = head_norm(be, a, &blk->norms[lmp_norm_index(a, LMP_NORM_Q)], T * a->n_heads, q, work);
            if (!st) st = head_norm(be, a, &blk->norms[lmp_norm_index(a, LMP_NORM_K)], T * a->n_kv_heads, k, work);
        }
        if (!st && !gpt2) { /* GPT-2 has learned positions instead, added to the embeddings */
            st = lmp_rope_heads(be, a, blk->index, T, a->n_heads, q);
            if (!st) st = lmp_rope_heads(be, a, blk->index, T, a->n_kv_heads, k);
        }
        if (!st && a->q_scale && a->q_scale != 1.0f) { /* scores scaled by 1/sqrt(query_pre_attn_scalar) */
            for (int64_t i = 0; i < T * qd; i++) q[i] *= a->q_scale;
        }
        const int64_t window = lmp_arch_window(a, blk->index);
        if (!st && (window || a->attn_softcap))
            st = lmp_be_attention_window(be, T, a->n_heads, a->n_kv_heads, a->head_dim, window, a->attn_softcap, q, k,
                                         v, att);
        else if (!st)
            st = lmp_be_attention(be, T, a->n_heads, a->n_kv_heads, a->head_dim, q, k, v, att);
        if (st) goto done;
    }
    if (from <= 1) { /* segment 1: x1 = x + mid Wo^T */
        in = affine_input(&L[o[0]], T, att, work);
        st = observe(obs, ud, o, 1, in, T, qd);
        if (!st) st = run_linear(be, &L[o[0]], T, in, qbuf, y);
        if (!st && a->post_norms) st = post_norm(be, a, &blk->norms[lmp_norm_index(a, LMP_NORM_POST_ATTN)], T, y, work);
        if (st) goto done;
        for (int64_t i = 0; i < T * d; i++) x1[i] = x[i] + y[i];
    }
    if (from <= 2) { /* segment 2: mid = h over norm1(x1); h = silu(xn Wg^T) * (xn Wu^T), GPT-2's gelu(xn Wfc^T + b) */
        st = norm(be, a, &blk->norms[1], T, x1, xn);
        if (!st) st = observe(obs, ud, gu + gpt2, 2 - gpt2, xn, T, d);
        if (!st && gpt2) {
            st = run_linear(be, &L[gu[1]], T, xn, qbuf, u);
            if (!st) st = lmp_be_gelu(be, T * f, u, h);
        } else if (!st) {
            st = run_linear(be, &L[gu[0]], T, xn, qbuf, g);
            if (!st) st = run_linear(be, &L[gu[1]], T, xn, qbuf, u);
            if (!st && a->geglu) { /* Gemma: gelu_tanh(gate) * up */
                st = lmp_be_gelu(be, T * f, g, h);
                for (int64_t i = 0; !st && i < T * f; i++) h[i] *= u[i];
            } else if (!st) {
                st = lmp_be_swiglu(be, T * f, g, u, h);
            }
        }
        if (st) goto done;
    }
    /* segment 3: x = x1 + mid Wd^T (down_proj; GPT-2's c_proj) */
    in = affine_input(&L[dn[0]], T, h, work);
    st = observe(obs, ud, dn, 1, in, T, f);
    if (!st) st = run_linear(be, &L[dn[0]], T, in, qbuf, y);
    if (!st && a->post_norms) st = post_norm(be, a, &blk->norms[lmp_norm_index(a, LMP_NORM_POST_MLP)], T, y, work);
    if (!st)
        for (int64_t i = 0; i < T * d; i++) x[i] = x1[i] + y[i];
done:
    free(buf);
    return st;
}

int lmp_block_forward_from(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T, int from,
                           float *x, const lmp_block_state *state, lmp_observe_fn obs, void *ud)
{
    return block_forward(be, a, blk, T, from, x, state, NULL, obs, ud);
}

int lmp_block_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T,
                      float *x, lmp_observe_fn obs, void *ud)
{
    return block_forward(be, a, blk, T, 0, x, NULL, NULL, obs, ud);
}

int lmp_block_forward_keep(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T, float *x,
                           const lmp_block_keep *keep)
{
    return block_forward(be, a, blk, T, 0, x, NULL, keep, NULL, NULL);
}

double lmp_block_flops(const lmp_arch *a, int64_t T, int group)
{
    const double t = (double)T, d = (double)a->dim, f = (double)a->hidden;
    const double hd = (double)(a->n_heads * a->head_dim), kv = (double)(a->n_kv_heads * a->head_dim);
    const double part[4] = {
        2 * t * d * (hd + 2 * kv) + 2 * (2 * t * t * hd),          /* q,k,v and attention: o's input */
        2 * t * hd * d,                                             /* o: gate,up's input */
        2 * t * d * f * (a->family == LMP_FAMILY_GPT2 ? 1 : 2),     /* gate,up (GPT-2: fc): down's input */
        2 * t * f * d,                                              /* down: the block's output */
    };
    double sum = 0;
    for (int g = 0; g < group && g < 4; g++) sum += part[g];
    return sum;
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
