/* block_steps.c — the block's steps from the architecture (see block_steps.h). */
#include "model/block_steps.h"

#include <string.h>

#include "base/error.h"

static lmp_block_step *add_step(lmp_block_plan *p, lmp_step_kind kind, int group)
{
    lmp_block_step *s = &p->step[p->n_steps++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->group = group;
    s->norm = -1;
    return s;
}

static void io(lmp_block_step *s, int n_in, const lmp_slot *in, int n_out, const lmp_slot *out)
{
    s->n_in = n_in;
    s->n_out = n_out;
    for (int i = 0; i < n_in; i++) s->in[i] = in[i];
    for (int i = 0; i < n_out; i++) s->out[i] = out[i];
}

/* out = norm kind k (LMP_NORM_*) of in */
static void norm_step(lmp_block_plan *p, const lmp_arch *a, int group, int k, lmp_slot in, lmp_slot out)
{
    lmp_block_step *s = add_step(p, LMP_STEP_NORM, group);
    io(s, 1, &in, 1, &out);
    s->norm = lmp_norm_index(a, k);
    s->layer_norm = a->family == LMP_FAMILY_GPT2 || a->layer_norm;
}

static void linears_step(lmp_block_plan *p, int group, lmp_slot in, int n, const lmp_role *roles, const lmp_slot *outs,
                         int affine)
{
    lmp_block_step *s = add_step(p, LMP_STEP_LINEARS, group);
    io(s, 1, &in, n, outs);
    for (int i = 0; i < n; i++) s->roles[i] = roles[i];
    s->affine = affine;
}

static void add_residual(lmp_block_plan *p, int group, lmp_slot a, lmp_slot b, lmp_slot out)
{
    const lmp_slot in[2] = {a, b};
    io(add_step(p, LMP_STEP_ADD, group), 2, in, 1, &out);
}

void lmp_block_plan_make(lmp_block_plan *p, const lmp_arch *a, int64_t layer)
{
    memset(p, 0, sizeof *p);
    p->layer = layer;
    const int gpt2 = a->family == LMP_FAMILY_GPT2, plain_mlp = gpt2 || a->plain_mlp;
    const int64_t d = a->dim, f = a->hidden, qd = a->n_heads * a->head_dim, kv = a->n_kv_heads * a->head_dim;
    /* group 0: attention over norm_attn(x) */
    /* OLMo 2 has no norm before a branch: its input linears read the stream itself, and their
     * group's input affine (no norm feeds it) is theirs, as o's and down's are */
    const int pre = !a->no_pre_norms;
    if (pre) norm_step(p, a, 0, LMP_NORM_ATTN, LMP_SLOT_X, LMP_SLOT_XN_ATTN);
    if (a->mla) { /* DeepSeek: the whole attention in one step, its own q/k/v inside */
        lmp_block_step *s = add_step(p, LMP_STEP_MLA, 0);
        io(s, 1, (lmp_slot[]){LMP_SLOT_XN_ATTN}, 1, (lmp_slot[]){LMP_SLOT_ATT});
        s->mla_norm[0] = lmp_norm_index(a, LMP_NORM_Q_A);
        s->mla_norm[1] = lmp_norm_index(a, LMP_NORM_KV_A);
        goto attention_out;
    }
    {
        const lmp_role roles[3] = {LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V};
        const lmp_slot outs[3] = {a->qk_norm ? LMP_SLOT_Q_LIN : LMP_SLOT_Q, a->qk_norm ? LMP_SLOT_K_LIN : LMP_SLOT_K,
                                  LMP_SLOT_V};
        linears_step(p, 0, pre ? LMP_SLOT_XN_ATTN : LMP_SLOT_X, 3, roles, outs, !pre);
    }
    if (a->qk_norm) { /* Qwen3, Gemma 3: RMSNorm over each head of q and k, before RoPE; OLMo 2's
                       * over all heads together (one "head" of the whole width) */
        lmp_block_step *s = add_step(p, LMP_STEP_HEAD_NORM, 0);
        io(s, 1, (lmp_slot[]){LMP_SLOT_Q_LIN}, 1, (lmp_slot[]){LMP_SLOT_Q});
        s->norm = lmp_norm_index(a, LMP_NORM_Q);
        s->heads[0] = a->qk_norm_all ? 1 : a->n_heads;
        s = add_step(p, LMP_STEP_HEAD_NORM, 0);
        io(s, 1, (lmp_slot[]){LMP_SLOT_K_LIN}, 1, (lmp_slot[]){LMP_SLOT_K});
        s->norm = lmp_norm_index(a, LMP_NORM_K);
        s->heads[0] = a->qk_norm_all ? 1 : a->n_kv_heads;
    }
    if (!gpt2 && !a->alibi && !a->learned_pos) { /* GPT-2, OPT: learned positions on the embeddings; Bloom: ALiBi */
        lmp_block_step *s = add_step(p, LMP_STEP_ROPE, 0);
        io(s, 2, (lmp_slot[]){LMP_SLOT_Q, LMP_SLOT_K}, 2, (lmp_slot[]){LMP_SLOT_Q, LMP_SLOT_K});
        s->heads[0] = a->n_heads;
        s->heads[1] = a->n_kv_heads;
    }
    if (a->q_scale && a->q_scale != 1.0f) { /* scores scaled by 1/sqrt(query_pre_attn_scalar) */
        lmp_block_step *s = add_step(p, LMP_STEP_SCALE, 0);
        io(s, 1, (lmp_slot[]){LMP_SLOT_Q}, 1, (lmp_slot[]){LMP_SLOT_Q});
        s->scale = a->q_scale;
    }
    if (a->online_r3) { /* R3: q and k per head, after RoPE (q·k unchanged) */
        lmp_block_step *s = add_step(p, LMP_STEP_ROTATE, 0);
        io(s, 2, (lmp_slot[]){LMP_SLOT_Q, LMP_SLOT_K}, 2, (lmp_slot[]){LMP_SLOT_Q, LMP_SLOT_K});
        s->heads[0] = a->n_heads;
        s->heads[1] = a->n_kv_heads;
    }
    {
        lmp_block_step *s = add_step(p, LMP_STEP_ATTENTION, 0);
        io(s, 3, (lmp_slot[]){LMP_SLOT_Q, LMP_SLOT_K, LMP_SLOT_V}, 1, (lmp_slot[]){LMP_SLOT_ATT});
        s->window = lmp_arch_window(a, layer);
        s->softcap = a->attn_softcap;
        s->norm = lmp_norm_index(a, LMP_NORM_SINKS); /* gpt-oss: -1 for the other families */
        s->heads[0] = a->n_heads;
        s->alibi = a->alibi; /* Bloom */
    }
attention_out:
    /* group 1: x1 = x + o(att), through the post-attention norm when there is one */
    linears_step(p, 1, LMP_SLOT_ATT, 1, (lmp_role[]){LMP_ROLE_O}, (lmp_slot[]){LMP_SLOT_ATT_OUT}, 1);
    if (a->post_norms) norm_step(p, a, 1, LMP_NORM_POST_ATTN, LMP_SLOT_ATT_OUT, LMP_SLOT_ATT_POST);
    add_residual(p, 1, LMP_SLOT_X, a->post_norms ? LMP_SLOT_ATT_POST : LMP_SLOT_ATT_OUT, LMP_SLOT_X1);
    /* group 2: the MLP's activation over norm_mlp(x1); a parallel block's over norm_mlp(x), the
     * block's input (GPT-NeoX; Phi-2 and GPT-J's shared norm is norm_attn again, computed anew so
     * that a pass may start here) */
    const lmp_slot mlp_in = !pre ? LMP_SLOT_X1 : LMP_SLOT_XN_MLP;
    if (pre) norm_step(p, a, 2, LMP_NORM_MLP, a->parallel ? LMP_SLOT_X : LMP_SLOT_X1, LMP_SLOT_XN_MLP);
    if (lmp_arch_moe_layer(a, layer)) { /* a sparse layer: the experts in one step */
        lmp_block_step *s = add_step(p, LMP_STEP_MOE, 2);
        io(s, 1, (lmp_slot[]){mlp_in}, 1, (lmp_slot[]){LMP_SLOT_MLP_OUT});
        s->n_experts = a->n_experts;
        s->top_k = a->n_experts_used;
        s->expert_hidden = a->expert_hidden;
        s->shared_hidden = a->shared_hidden;
        s->norm_topk = a->norm_topk;
        s->shared_gate = a->shared_hidden > 0 && a->desc && a->desc->moe && a->desc->moe->hf_shared_gate;
        s->route = a->route;
        s->n_group = a->n_group;
        s->topk_group = a->topk_group;
        s->routed_scale = a->routed_scale;
        s->swiglu_alpha = a->swiglu_alpha;
        s->swiglu_limit = a->swiglu_limit;
    } else if (plain_mlp) { /* GPT-2, GPT-NeoX, Phi-2, GPT-J: h = gelu(up(xn)) */
        linears_step(p, 2, mlp_in, 1, (lmp_role[]){LMP_ROLE_UP}, (lmp_slot[]){LMP_SLOT_UP}, !pre);
        lmp_block_step *s = add_step(p, LMP_STEP_GELU, 2);
        io(s, 1, (lmp_slot[]){LMP_SLOT_UP}, 1, (lmp_slot[]){LMP_SLOT_H});
        s->erf = a->gelu_erf;
        s->relu = a->relu; /* OPT */
    } else {
        linears_step(p, 2, mlp_in, 2, (lmp_role[]){LMP_ROLE_GATE, LMP_ROLE_UP},
                     (lmp_slot[]){LMP_SLOT_GATE, LMP_SLOT_UP}, !pre);
        lmp_block_step *s = add_step(p, LMP_STEP_GLU, 2);
        io(s, 2, (lmp_slot[]){LMP_SLOT_GATE, LMP_SLOT_UP}, 1, (lmp_slot[]){LMP_SLOT_H});
        s->gelu = a->geglu; /* Gemma: gelu_tanh(gate) * up */
    }
    if (a->online_r4) /* R4: down's input turned online; down's weight holds the inverse */
        io(add_step(p, LMP_STEP_ROTATE, 2), 1, (lmp_slot[]){LMP_SLOT_H}, 1, (lmp_slot[]){LMP_SLOT_H});
    /* group 3: y = x1 + down(h), through the post-MLP norm when there is one */
    if (!lmp_arch_moe_layer(a, layer))
        linears_step(p, 3, LMP_SLOT_H, 1, (lmp_role[]){LMP_ROLE_DOWN}, (lmp_slot[]){LMP_SLOT_MLP_OUT}, 1);
    if (a->post_norms) norm_step(p, a, 3, LMP_NORM_POST_MLP, LMP_SLOT_MLP_OUT, LMP_SLOT_MLP_POST);
    add_residual(p, 3, LMP_SLOT_X1, a->post_norms ? LMP_SLOT_MLP_POST : LMP_SLOT_MLP_OUT, LMP_SLOT_Y);

    /* the slots' widths and producers, from what the steps write */
    const int64_t width[LMP_SLOT_COUNT] = {
        [LMP_SLOT_X] = d,       [LMP_SLOT_XN_ATTN] = d,  [LMP_SLOT_Q_LIN] = qd,    [LMP_SLOT_K_LIN] = kv,
        [LMP_SLOT_Q] = qd,      [LMP_SLOT_K] = kv,       [LMP_SLOT_V] = kv,        [LMP_SLOT_ATT] = qd,
        [LMP_SLOT_ATT_OUT] = d, [LMP_SLOT_ATT_POST] = d, [LMP_SLOT_X1] = d,        [LMP_SLOT_XN_MLP] = d,
        [LMP_SLOT_GATE] = f,    [LMP_SLOT_UP] = f,       [LMP_SLOT_H] = f,         [LMP_SLOT_MLP_OUT] = d,
        [LMP_SLOT_MLP_POST] = d, [LMP_SLOT_Y] = d};
    /* MLA's widths for the FLOP count: q's linear input (or q_a's output), kv_a's, q's output,
     * kv_b's; attention writes heads x v_head_dim */
    if (a->mla) {
        const int64_t H = a->n_heads;
        p->mla_qd = (double)(H * (a->mla_nope + a->mla_rope));
        p->mla_q_lora = (double)a->mla_q_lora;
        p->mla_q_in = a->mla_q_lora ? (double)a->mla_q_lora : p->mla_qd;
        p->mla_kv_a = (double)(a->mla_kv_lora + a->mla_rope);
        p->mla_kv_lora = (double)a->mla_kv_lora;
        p->mla_kv_b = (double)(H * (a->mla_nope + a->head_dim));
    }
    for (int i = 0; i < LMP_SLOT_COUNT; i++) p->producer[i] = -1;
    p->width[LMP_SLOT_X] = d;
    for (int i = 0; i < p->n_steps; i++)
        for (int o = 0; o < p->step[i].n_out; o++) {
            const lmp_slot s = p->step[i].out[o];
            p->width[s] = width[s];
            if (p->producer[s] < 0) p->producer[s] = i;
        }
}

/* One linear of the MoE step: present, of [out, in]. */
static int moe_linear_check(const lmp_block *blk, int li, const char *what, int64_t out, int64_t in)
{
    if (li < 0) return lmp_fail(LMP_EINVAL, "block %d has no %s, its architecture's mixture of experts needs one",
                                blk->index, what);
    const lmp_linear *l = &blk->linears[li];
    if (l->out != out || l->in != in)
        return lmp_fail(LMP_EINVAL, "%s is [%lld, %lld], its architecture makes it [%lld, %lld]", l->name,
                        (long long)l->out, (long long)l->in, (long long)out, (long long)in);
    return 0;
}

/* The router, the shared expert and its gate, every routed expert's gate, up and down, and
 * nothing else in the MLP's place. */
static int moe_check(const lmp_block_plan *p, const lmp_block_step *s, const lmp_block *blk)
{
    const int64_t d = p->width[s->in[0]], E = s->n_experts, f = s->expert_hidden, fs = s->shared_hidden;
    if (blk->n_experts != E || blk->n_experts_used != s->top_k)
        return lmp_fail(LMP_EINVAL, "block %d has %d experts, %d per token; its architecture %lld, %lld", blk->index,
                        blk->n_experts, blk->n_experts_used, (long long)E, (long long)s->top_k);
    int st = moe_linear_check(blk, lmp_block_find(blk, LMP_ROLE_ROUTER), "router", E, d);
    if (!st && s->shared_gate) st = moe_linear_check(blk, lmp_block_find(blk, LMP_ROLE_SHARED_GATE), "shared gate", 1, d);
    static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    for (int r = 0; r < 3 && !st; r++) {
        const int down = roles[r] == LMP_ROLE_DOWN;
        if (fs) st = moe_linear_check(blk, lmp_block_find_expert(blk, roles[r], LMP_EXPERT_SHARED, 0), "shared expert",
                                      down ? d : fs, down ? fs : d);
        for (int e = 0; e < E && !st; e++)
            st = moe_linear_check(blk, lmp_block_find_expert(blk, roles[r], LMP_EXPERT_ROUTED, e), "expert linear",
                                  down ? d : f, down ? f : d);
    }
    const int n_attn = 4 + (lmp_block_find(blk, LMP_ROLE_Q_A) >= 0); /* q, k, v, o; MLA q_a, q_b, kv_a, kv_b, o */
    const int want = n_attn + 1 + (s->shared_gate != 0) + 3 * (fs > 0) + 3 * (int)E;
    if (!st && blk->n_linears != want)
        st = lmp_fail(LMP_EINVAL, "block %d has %d linears, its architecture's sparse layer %d", blk->index,
                      blk->n_linears, want);
    return st;
}

/* MLA's linears and latent norms: present and of the shapes their neighbours imply (o's input
 * is heads x v_head_dim, the plan's attention width). */
static int mla_check(const lmp_block_plan *p, const lmp_block_step *s, const lmp_block *blk)
{
    const int qa = lmp_block_find(blk, LMP_ROLE_Q_A), qb = lmp_block_find(blk, LMP_ROLE_Q_B);
    const int q = lmp_block_find(blk, LMP_ROLE_Q), kva = lmp_block_find(blk, LMP_ROLE_KV_A);
    const int kvb = lmp_block_find(blk, LMP_ROLE_KV_B);
    const int64_t d = p->width[s->in[0]];
    if (kva < 0 || kvb < 0 || (s->mla_norm[0] >= 0 ? qa < 0 || qb < 0 || q >= 0 : q < 0 || qa >= 0 || qb >= 0))
        return lmp_fail(LMP_EINVAL, "block %d: its multi-head latent attention needs %s, kv_a and kv_b", blk->index,
                        s->mla_norm[0] >= 0 ? "q_a, q_b (and no q)" : "q (and no q_a, q_b)");
    for (int k = 0; k < 2; k++)
        if (s->mla_norm[k] < 0 ? k == 1 : s->mla_norm[k] >= blk->n_norms)
            return lmp_fail(LMP_EINVAL, "block %d has %d norms, its multi-head latent attention more", blk->index,
                            blk->n_norms);
    const lmp_linear *lq = &blk->linears[qa >= 0 ? qa : q], *la = &blk->linears[kva], *lb = &blk->linears[kvb];
    const int64_t r = blk->norms[s->mla_norm[1]].dim;
    const lmp_linear *qo = &blk->linears[qa >= 0 ? qb : q]; /* the linear that makes q */
    int bad = lq->in != d || la->in != d || la->out <= r || lb->in != r || (double)qo->out != p->mla_qd ||
              (double)la->out != p->mla_kv_a || (double)lb->out != p->mla_kv_b;
    if (qa >= 0) bad |= blk->linears[qb].in != lq->out || blk->norms[s->mla_norm[0]].dim != lq->out;
    if (bad)
        return lmp_fail(LMP_EINVAL, "block %d: its multi-head latent attention's linears and latent norms do not fit "
                        "together (%s [%lld, %lld], %s [%lld, %lld], %s [%lld, %lld])", blk->index, lq->name,
                        (long long)lq->out, (long long)lq->in, la->name, (long long)la->out, (long long)la->in,
                        lb->name, (long long)lb->out, (long long)lb->in);
    return 0;
}

int lmp_block_plan_check(const lmp_block_plan *p, const lmp_block *blk)
{
    unsigned char used[64] = {0};
    for (int i = 0; i < p->n_steps; i++) {
        const lmp_block_step *s = &p->step[i];
        if (s->kind == LMP_STEP_NORM || s->kind == LMP_STEP_HEAD_NORM) {
            const int64_t dim = s->kind == LMP_STEP_NORM ? p->width[s->in[0]] : p->width[s->in[0]] / s->heads[0];
            if (s->norm < 0 || s->norm >= blk->n_norms)
                return lmp_fail(LMP_EINVAL, "block %d has %d norms, its architecture more", blk->index, blk->n_norms);
            if (blk->norms[s->norm].dim != dim)
                return lmp_fail(LMP_EINVAL, "%s: a norm of %lld, the block's %s needs %lld", blk->norms[s->norm].name,
                                (long long)blk->norms[s->norm].dim, lmp_step_kind_name(s->kind), (long long)dim);
            if (s->norm < (int)sizeof used) used[s->norm] = 1;
        }
        if (s->kind == LMP_STEP_ATTENTION && s->norm >= 0) { /* gpt-oss's sinks: one per head */
            if (s->norm >= blk->n_norms)
                return lmp_fail(LMP_EINVAL, "block %d has %d norms, its architecture's attention sinks more", blk->index,
                                blk->n_norms);
            if (blk->norms[s->norm].dim != s->heads[0])
                return lmp_fail(LMP_EINVAL, "%s: %lld attention sinks, the block has %lld heads", blk->norms[s->norm].name,
                                (long long)blk->norms[s->norm].dim, (long long)s->heads[0]);
            if (s->norm < (int)sizeof used) used[s->norm] = 1;
        }
        if (s->kind == LMP_STEP_MOE) {
            int st = moe_check(p, s, blk);
            if (st) return st;
        }
        if (s->kind == LMP_STEP_MLA) {
            int st = mla_check(p, s, blk);
            if (st) return st;
            for (int k = 0; k < 2; k++)
                if (s->mla_norm[k] >= 0 && s->mla_norm[k] < (int)sizeof used) used[s->mla_norm[k]] = 1;
        }
        if (s->kind == LMP_STEP_LINEARS)
            for (int o = 0; o < s->n_out; o++) {
                const int li = lmp_block_find(blk, s->roles[o]);
                if (li < 0) return lmp_fail(LMP_EINVAL, "block %d has no linear of role %d", blk->index, (int)s->roles[o]);
                const lmp_linear *l = &blk->linears[li];
                if (l->in != p->width[s->in[0]] || l->out != p->width[s->out[o]])
                    return lmp_fail(LMP_EINVAL, "%s is [%lld, %lld], its architecture makes it [%lld, %lld]", l->name,
                                    (long long)l->out, (long long)l->in, (long long)p->width[s->out[o]],
                                    (long long)p->width[s->in[0]]);
            }
    }
    for (int n = 0; n < blk->n_norms; n++)
        if (n >= (int)sizeof used || !used[n])
            return lmp_fail(LMP_EUNSUPPORTED, "%s: a block norm the architecture's forward does not take (its steps "
                            "use no norm %d)", blk->norms[n].name, n);
    return 0;
}

int lmp_block_plan_input_group(const lmp_block_plan *p, lmp_role r)
{
    for (int i = 0; i < p->n_steps; i++) {
        const lmp_block_step *s = &p->step[i];
        if (s->kind == LMP_STEP_MOE) { /* the router's and the experts' gate/up inputs, then downs' */
            if (r == LMP_ROLE_ROUTER || r == LMP_ROLE_SHARED_GATE || r == LMP_ROLE_GATE || r == LMP_ROLE_UP)
                return s->group;
            if (r == LMP_ROLE_DOWN) return s->group + 1;
        }
        if (s->kind == LMP_STEP_MLA && (r == LMP_ROLE_Q || r == LMP_ROLE_Q_A || r == LMP_ROLE_Q_B ||
                                        r == LMP_ROLE_KV_A || r == LMP_ROLE_KV_B))
            return s->group; /* every MLA linear up to attention, its latents' too */
        if (s->kind != LMP_STEP_LINEARS) continue;
        for (int o = 0; o < s->n_out; o++)
            if (s->roles[o] == r) return s->group;
    }
    return -1;
}

double lmp_block_plan_flops(const lmp_block_plan *p, int64_t T, int group)
{
    const double t = (double)T;
    double sum = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const lmp_block_step *s = &p->step[i];
        if (s->group >= group) continue;
        if (s->kind == LMP_STEP_LINEARS)
            for (int o = 0; o < s->n_out; o++) sum += 2 * t * (double)p->width[s->in[0]] * (double)p->width[s->out[o]];
        if (s->kind == LMP_STEP_ATTENTION) sum += 2 * (2 * t * t * (double)p->width[LMP_SLOT_Q]);
        if (s->kind == LMP_STEP_MLA) { /* its linears (widths from the arch) and attention over qk + v dims */
            const double d = (double)p->width[s->in[0]], att = (double)p->width[s->out[0]];
            sum += 2 * t * d * (double)(p->mla_q_in + p->mla_kv_a) + 2 * t * (double)p->mla_q_lora * p->mla_qd +
                   2 * t * (double)p->mla_kv_lora * p->mla_kv_b + 2 * t * t * (p->mla_qd + att);
        }
        if (s->kind == LMP_STEP_MOE) { /* the router, k experts a token, the shared expert and its gate */
            const double d = (double)p->width[s->in[0]];
            sum += 2 * t * d * (double)s->n_experts + 2 * t * 3 * d * (double)(s->top_k * s->expert_hidden) +
                   2 * t * 3 * d * (double)s->shared_hidden + (s->shared_gate ? 2 * t * d : 0);
        }
    }
    return sum;
}

const char *lmp_step_kind_name(lmp_step_kind k)
{
    static const char *const names[LMP_STEP_KINDS] = {
        [LMP_STEP_NORM] = "norm",   [LMP_STEP_LINEARS] = "linears", [LMP_STEP_HEAD_NORM] = "q/k norm",
        [LMP_STEP_ROPE] = "rope",   [LMP_STEP_SCALE] = "q scale",   [LMP_STEP_ATTENTION] = "attention",
        [LMP_STEP_GLU] = "gated activation", [LMP_STEP_GELU] = "gelu", [LMP_STEP_ADD] = "residual add",
        [LMP_STEP_MOE] = "mixture of experts", [LMP_STEP_ROTATE] = "online rotation",
        [LMP_STEP_MLA] = "MLA attention"};
    return k >= 0 && k < LMP_STEP_KINDS ? names[k] : "unknown step";
}
