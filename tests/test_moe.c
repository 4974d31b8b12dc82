/* test_moe.c — compressing mixtures of experts (issue 37) on the tiny fixtures of
 * tests/fixtures/arch (Mixtral, Qwen2-MoE, Qwen3-MoE; made with PyPI transformers, whose forward
 * test_arch_fixtures checks to 1e-5).
 *
 * What is held here:
 *   - each routed expert's statistics come from the tokens the router sent it: every token goes
 *     to exactly k experts, so the experts' Hessians sum to k times the router's (which sees
 *     every token), and their token counts to k N;
 *   - calibration.experts = "all" is really wired: every expert then sees every token (its gate's
 *     Hessian is the router's), the statistics differ from the routed ones, and the block's
 *     output does not change by a bit; through the pipeline, a GPTQ variant's experts differ and
 *     its attention does not;
 *   - an expert that receives no token (one calibration token: k experts get it) gets the declared
 *     fallback: its Hessian the identity, which makes GPTQ exactly RTN on the same grid (checked
 *     against the rtn plugin weight for weight), recorded on the linear (calib_tokens 0,
 *     calib_fallback); with expert_min_tokens above every count, every expert is RTN;
 *   - the router is never quantized unless a target names it;
 *   - RTN and GPTQ variants run on each family and are measured against the unmodified model;
 *   - RTN and GPTQ variants on GGUF's Q4_0 grid export as llama.cpp's 3-D expert tensors, read back
 *     by lmpress to the logits it evaluated and by gguf-py to the weights it held (routers F32);
 *   - AutoRound learns on expert blocks (its backward checked in test_train_grad);
 *   - what is not written yet is refused by name: a Hugging Face folder from a GGUF source, a GGUF llama.cpp could not read (a dense layer in
 *     qwen2moe);
 *   - the same variants (RTN, GPTQ routed and all experts) as Hugging Face folders
 *     (compressed-tensors, routers in its ignore list), DeepSeek-V2/V3 included, read back by
 *     lmpress and, with LMP_CT_PYTHON, loaded by transformers + compressed-tensors to lmpress's
 *     logits (tools/ref/moe_ct_logits_check.py);
 *   - a block's routed experts streamed a group at a time (memory.expert_group_mb) give the
 *     blocks compressed whole bit for bit (RTN, GPTQ routed / all experts / true_sequential on the
 *     compressed and on the original inputs, on
 *     every family, fused 3-D experts and dense first layers included), and their paged forward
 *     the whole block's output; what cannot be streamed is computed whole;
 *   - DeepSeek-V2/V3 (multi-head latent attention, their routings): RTN and GPTQ compress every
 *     linear but the router, q_a/q_b/kv_a/kv_b included, and compare with a finite KL above 0;
 *     the same on llama.cpp's deepseek2 GGUFs of the fixtures (the weights the folders' bit for
 *     bit); GGUF export as llama.cpp's deepseek2 (kv_b split into attn_k_b / attn_v_b,
 *     exp_probs_b): the unmodified model's file as the converter's (tensors and keys, gguf-py),
 *     its variants read back with difference 0, and what llama.cpp would run otherwise
 *     (group_limited_greedy, the V2 folder's YaRN mscale) refused by name;
 *   - AutoRound (a few steps) lowers every block's output MSE below RTN's on DeepSeek-V2/V3 and
 *     gpt-oss, and QAT after RTN runs on gpt-oss (their backward: test_train_grad);
 *   - gpt-oss: its variants export as llama.cpp's gpt-oss GGUF (biases, sinks) and read back by
 *     lmpress and gguf-py; its Hugging Face folder (fused 3-D experts compressed-tensors cannot
 *     quantize) and a GGUF llama.cpp would run otherwise (swiglu_limit, YaRN truncate) are
 *     refused by name. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/error.h"
#include "base/textfile.h"
#include "compare/compare.h"
#include "compress/calib_stats.h"
#include "export/export.h"
#include "model/block_source.h"
#include "model/expert_pager.h"
#include "model/forward.h"
#include "model/rotate.h"

#include "teststage.h"
#include "testutil.h"

#define FIXTURES LMP_SOURCE_DIR "/tests/fixtures/arch"

/* The fixture's form: hf5 (its transformers 5 folder) or model.gguf (llama.cpp's converter's). */
static lmp_model *load_form(const char *name, const char *form)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", FIXTURES, name, form);
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
    ck_assert_int_gt(m->arch.n_experts, 0);
    return m;
}

static lmp_model *load(const char *name) { return load_form(name, "hf5"); }
static lmp_model *load_gguf(const char *name) { return load_form(name, "model.gguf"); }

/* Block 0's inputs on windows w: the embeddings. */
static float *embed_windows(const lmp_model *m, const lmp_windows *w)
{
    const int64_t per = w->T * m->arch.dim;
    float *X = malloc((size_t)(w->n * per) * sizeof *X);
    for (int64_t i = 0; i < w->n; i++) lmp_embed(m, w->tokens + i * w->T, w->T, X + i * per);
    return X;
}

static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        r = fmax(r, fabs((double)b[i]));
    }
    return d / r;
}

/* The Hessian of every linear of the model's block b over windows w (routed, or all); block b's
 * inputs are the embeddings through the blocks before it. */
static void block_hessians(lmp_model *m, int64_t b, const lmp_windows *w, int all, lmp_block_stats *bs)
{
    const lmp_block *blocks = lmp_model_blocks(m), *blk = &blocks[b];
    float *X = embed_windows(m, w);
    for (int64_t p = 0; p < b; p++)
        for (int64_t i = 0; i < w->n; i++)
            ck_assert_int_eq(lmp_block_forward(&be, &m->arch, &blocks[p], w->T, X + i * w->T * m->arch.dim, NULL, NULL), 0);
    ck_assert_int_eq(lmp_block_stats_init(bs, blk->n_linears), 0);
    for (int i = 0; i < blk->n_linears; i++) bs->needs[i] = LMP_STAT_HESSIAN;
    bs->all_experts = all;
    ck_assert_msg(lmp_block_stats_collect(NULL, &be, &m->arch, blk, X, w->n, w->T, NULL, bs) == 0, "%s",
                  lmp_last_error());
    free(X);
}

/* Routed: every token reaches k experts, so the routed experts' gate Hessians sum to k times the
 * router's (the same input).  Returns the largest difference relative to k H(router); *tokens
 * gets the experts' token count, k N. */
static double experts_vs_router(const lmp_block *blk, const lmp_block_stats *bs, int64_t d, int64_t k, int64_t *tokens)
{
    const float *Hr = bs->stats[lmp_block_find(blk, LMP_ROLE_ROUTER)].hessian;
    float *sum = calloc((size_t)(d * d), sizeof *sum);
    ck_assert_ptr_nonnull(sum);
    *tokens = 0;
    for (int e = 0; e < blk->n_experts; e++) {
        const lmp_stats *s = &bs->stats[lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e)];
        *tokens += s->n_tokens;
        for (int64_t i = 0; s->hessian && i < d * d; i++) sum[i] += s->hessian[i];
    }
    double off = 0, ref = 0;
    for (int64_t i = 0; i < d * d; i++) {
        off = fmax(off, fabs(sum[i] - (float)k * Hr[i]));
        ref = fmax(ref, fabs(k * Hr[i]));
    }
    free(sum);
    return off / ref;
}

START_TEST(routed_statistics_follow_the_router)
{
    const char *names[3] = {"mixtral", "qwen2moe", "qwen3moe"};
    for (int f = 0; f < 3; f++) {
        lmp_model *m = load(names[f]);
        const lmp_windows w = windows(8, 32, m->arch.vocab, 1);
        const int64_t N = w.n * w.T, k = m->arch.n_experts_used, E = m->arch.n_experts, d = m->arch.dim;
        const lmp_block *blk = &lmp_model_blocks(m)[0];
        const int router = lmp_block_find(blk, LMP_ROLE_ROUTER);
        lmp_block_stats routed, all;
        block_hessians(m, 0, &w, 0, &routed);
        block_hessians(m, 0, &w, 1, &all);
        ck_assert_int_eq(routed.stats[router].n_tokens, N);
        double down_change = 0;
        for (int e = 0; e < E; e++) {
            const int g = lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, e);
            const int u = lmp_block_find_expert(blk, LMP_ROLE_UP, LMP_EXPERT_ROUTED, e);
            const int dn = lmp_block_find_expert(blk, LMP_ROLE_DOWN, LMP_EXPERT_ROUTED, e);
            const lmp_stats *s = &routed.stats[g];
            ck_assert(s->n_tokens > 0 && s->n_tokens < N);
            ck_assert_int_eq(routed.stats[u].n_tokens, s->n_tokens); /* up shares gate's input */
            ck_assert_int_eq(routed.stats[dn].n_tokens, s->n_tokens);
            /* all: every token at every expert; its gate's input is the router's */
            ck_assert_int_eq(all.stats[g].n_tokens, N);
            ck_assert_int_eq(all.stats[dn].n_tokens, N);
            ck_assert_msg(rel_diff(all.stats[g].hessian, all.stats[router].hessian, d * d) < 1e-6,
                          "%s expert %d: with calibration.experts = all its gate's Hessian is not the router's", names[f],
                          e);
            const int64_t fi = blk->linears[dn].in;
            down_change = fmax(down_change, rel_diff(routed.stats[dn].hessian, all.stats[dn].hessian, fi * fi));
        }
        int64_t tokens;
        const double rel = experts_vs_router(blk, &routed, d, k, &tokens);
        printf("%s block 0: %lld tokens, routed to the %lld experts %lld times (k N = %lld); sum of the experts' "
               "Hessians vs k H(router): %.2e relative; down's Hessian routed vs all: %.2e\n",
               names[f], (long long)N, (long long)E, (long long)tokens, (long long)(k * N), rel, down_change);
        ck_assert_int_eq(tokens, k * N);
        ck_assert_msg(rel < 1e-5, "%s: the experts' Hessians do not sum to k times the router's (%g)", names[f], rel);
        ck_assert_msg(down_change > 1e-2, "%s: calibration.experts = all leaves down's statistics as they were",
                      names[f]);
        lmp_block_stats_free(&routed, blk->n_linears);
        lmp_block_stats_free(&all, blk->n_linears);
        free(w.tokens);
        lmp_model_free(m);
    }
}
END_TEST

/* DeepSeek's sparse layer (block 1, after the dense first layer; its inputs block 0's outputs):
 * with both routings (V2's grouped softmax, V3's sigmoid with a selection bias) every token
 * reaches exactly k distinct experts, so the experts' Hessians sum to k times the router's; the
 * latent projections' statistics (q_b's, kv_b's inputs: the latents through their norms) cover
 * every token. */
START_TEST(deepseek_routed_statistics_follow_the_router)
{
    const char *names[2] = {"deepseek_v2", "deepseek_v3"};
    for (int f = 0; f < 2; f++) {
        lmp_model *m = load(names[f]);
        const lmp_windows w = windows(8, 32, m->arch.vocab, 1);
        const int64_t N = w.n * w.T, k = m->arch.n_experts_used, E = m->arch.n_experts, d = m->arch.dim;
        const lmp_block *blocks = lmp_model_blocks(m), *blk = &blocks[1];
        ck_assert_int_eq(blocks[0].n_experts, 0);
        ck_assert_int_eq(blk->n_experts, (int)E);
        lmp_block_stats bs;
        block_hessians(m, 1, &w, 0, &bs);
        const int router = lmp_block_find(blk, LMP_ROLE_ROUTER), kvb = lmp_block_find(blk, LMP_ROLE_KV_B);
        ck_assert_int_eq(bs.stats[router].n_tokens, N);
        ck_assert_int_eq(bs.stats[kvb].n_tokens, N);
        ck_assert_ptr_nonnull(bs.stats[kvb].hessian);
        if (m->arch.mla_q_lora) ck_assert_int_eq(bs.stats[lmp_block_find(blk, LMP_ROLE_Q_B)].n_tokens, N);
        int64_t tokens;
        const double rel = experts_vs_router(blk, &bs, d, k, &tokens);
        printf("%s block 1: %lld tokens routed to the %lld experts %lld times (k N = %lld); sum of the experts' "
               "Hessians vs k H(router): %.2e relative\n", names[f], (long long)N, (long long)E, (long long)tokens,
               (long long)(k * N), rel);
        ck_assert_int_eq(tokens, k * N);
        ck_assert_msg(rel < 1e-5, "%s: the experts' Hessians do not sum to k times the router's (%g)", names[f], rel);
        lmp_block_stats_free(&bs, blk->n_linears);
        free(w.tokens);
        lmp_model_free(m);
    }
}
END_TEST

/* An observer that answers the experts' question and counts the rows expert 0's gate saw. */
typedef struct asking {
    int all;
    int gate0;
    int64_t rows;
} asking;

static int ask(void *ud, const int *lins, int n, const float *x, int64_t T, int64_t C)
{
    (void)x, (void)C;
    asking *a = ud;
    if (n == 0) return a->all ? LMP_OBSERVE_ALL_EXPERTS : 0;
    if (lins[0] == a->gate0) a->rows += T;
    return 0;
}

START_TEST(all_experts_changes_no_output)
{
    const char *names[3] = {"mixtral", "qwen2moe", "qwen3moe"};
    for (int f = 0; f < 3; f++) {
        lmp_model *m = load(names[f]);
        const lmp_windows w = windows(1, 48, m->arch.vocab, 2);
        const int64_t n = w.T * m->arch.dim;
        const lmp_block *blk = &lmp_model_blocks(m)[0];
        float *x0 = embed_windows(m, &w), *xr = malloc((size_t)n * sizeof *xr), *xa = malloc((size_t)n * sizeof *xa);
        memcpy(xr, x0, (size_t)n * sizeof *xr);
        memcpy(xa, x0, (size_t)n * sizeof *xa);
        asking r = {.all = 0, .gate0 = lmp_block_find_expert(blk, LMP_ROLE_GATE, LMP_EXPERT_ROUTED, 0)};
        asking a = {.all = 1, .gate0 = r.gate0};
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, blk, w.T, x0, NULL, NULL), 0);
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, blk, w.T, xr, ask, &r), 0);
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, blk, w.T, xa, ask, &a), 0);
        printf("%s: expert 0's gate observed %lld of %lld rows routed, %lld with all; outputs %s\n", names[f],
               (long long)r.rows, (long long)w.T, (long long)a.rows,
               memcmp(xr, x0, (size_t)n * 4) || memcmp(xa, x0, (size_t)n * 4) ? "DIFFER" : "identical bit for bit");
        ck_assert_int_eq(a.rows, w.T);
        ck_assert(r.rows > 0 && r.rows < w.T);
        ck_assert(memcmp(xr, x0, (size_t)n * sizeof *x0) == 0 && memcmp(xa, x0, (size_t)n * sizeof *x0) == 0);
        free(x0);
        free(xr);
        free(xa);
        free(w.tokens);
        lmp_model_free(m);
    }
}
END_TEST

/* ---- through the pipeline ----------------------------------------------------------------- */

/* A stage of `plugin` with "name=value" settings, on every linear (target NULL) or those `target`
 * matches, as variant v (calibration.experts, expert_min_tokens set by the caller). */
static lmp_block *compress_v(const lmp_model *m, const char *plugin, const char *const *settings, const char *target,
                             int all, int64_t min_tokens, const lmp_windows *w)
{
    one_stage os;
    make_stage(&reg, &os, plugin, settings, target);
    os.v.calib_experts_all = all;
    os.v.expert_min_tokens = min_tokens;
    lmp_block *out = NULL;
    ck_assert_msg(lmp_compress(&ctx, &be, m, &os.v, w, &out) == 0, "%s", lmp_last_error());
    free(os.stage.params);
    return out;
}

static int same_weights(const lmp_linear *a, const lmp_linear *b)
{
    return a->out == b->out && a->in == b->in && !memcmp(a->w, b->w, (size_t)(a->out * a->in) * sizeof *a->w);
}

static const char *const W4[] = {"bits=4", "granularity=group", "group_size=32", NULL};

START_TEST(all_experts_is_wired_through_the_pipeline)
{
    lmp_model *m = load("qwen3moe");
    const lmp_windows w = windows(8, 32, m->arch.vocab, 3);
    lmp_block *routed = compress_v(m, "gptq", W4, NULL, 0, 0, &w), *all = compress_v(m, "gptq", W4, NULL, 1, 0, &w);
    int experts_differ = 0, others_same = 1;
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < routed[b].n_linears; i++) {
            const lmp_linear *r = &routed[b].linears[i], *a = &all[b].linears[i];
            if (r->expert_kind == LMP_EXPERT_ROUTED) experts_differ += !same_weights(r, a);
            else if (b == 0) others_same &= same_weights(r, a); /* block 0's inputs do not depend on the mode */
            if (r->expert_kind == LMP_EXPERT_ROUTED && r->role != LMP_ROLE_DOWN)
                ck_assert_int_eq(a->calib_tokens, w.n * w.T);
        }
    printf("qwen3moe GPTQ W4: %d of %lld expert linears differ between routed and all; block 0's attention and "
           "router %s\n", experts_differ, (long long)(3 * m->arch.n_experts * m->arch.n_layers),
           others_same ? "identical" : "DIFFER");
    ck_assert_int_gt(experts_differ, 0);
    ck_assert(others_same);
    lmp_blocks_free(routed, m->arch.n_layers);
    lmp_blocks_free(all, m->arch.n_layers);
    free(w.tokens);
    lmp_model_free(m);
}
END_TEST

/* One calibration token: the router sends it to k of the E experts of each block, and the
 * others receive none (a real calibration set leaves rarely-chosen experts of a large model
 * likewise empty).  With expert_min_tokens 0 (at least 1 token), the empty experts get the
 * fallback, which must be RTN on the same grid; the chosen ones GPTQ on their one token.  With
 * expert_min_tokens above every count, every expert falls back. */
START_TEST(an_expert_without_tokens_gets_the_declared_fallback)
{
    lmp_model *m = load("mixtral");
    const lmp_windows w = windows(1, 1, m->arch.vocab, 4);
    lmp_block *g = compress_v(m, "gptq", W4, NULL, 0, 0, &w), *r = compress_v(m, "rtn", W4, NULL, 0, 0, &w);
    for (int64_t b = 0; b < m->arch.n_layers; b++) {
        int starved = 0, fed = 0;
        for (int i = 0; i < g[b].n_linears; i++) {
            const lmp_linear *l = &g[b].linears[i];
            if (l->expert_kind != LMP_EXPERT_ROUTED) continue;
            if (l->role == LMP_ROLE_GATE)
                printf("block %lld expert %d: %lld calibration token%s%s\n", (long long)b, l->expert,
                       (long long)l->calib_tokens, l->calib_tokens == 1 ? "" : "s",
                       l->calib_fallback ? ", fallback (identity Hessian: RTN on the grid)" : "");
            if (l->calib_tokens == 0) {
                starved += l->role == LMP_ROLE_GATE;
                ck_assert_int_eq(l->calib_fallback, 1);
                ck_assert_msg(same_weights(l, &r[b].linears[i]), "%s: the fallback is not RTN on the same grid", l->name);
            } else {
                fed += l->role == LMP_ROLE_GATE;
                ck_assert_int_eq(l->calib_tokens, 1);
                ck_assert_int_eq(l->calib_fallback, 0);
                ck_assert_msg(!same_weights(l, &r[b].linears[i]), "%s: GPTQ gave RTN's weights", l->name);
            }
        }
        ck_assert_int_eq(fed, m->arch.n_experts_used);
        ck_assert_int_eq(starved, m->arch.n_experts - m->arch.n_experts_used);
    }
    lmp_blocks_free(g, m->arch.n_layers);
    /* a static activation scale needs the abs-max of an expert that saw nothing: refused by name */
    one_stage os;
    static const char *const stat[] = {"act=static_tensor", NULL};
    make_stage(&reg, &os, "rtn", stat, NULL);
    lmp_block *none = NULL;
    ck_assert_int_eq(lmp_compress(&ctx, &be, m, &os.v, &w, &none), LMP_EUNSUPPORTED);
    printf("rtn static activations: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "received no calibration token"));
    free(os.stage.params);
    const lmp_windows w8 = windows(8, 32, m->arch.vocab, 4);
    g = compress_v(m, "gptq", W4, NULL, 0, 1 << 20, &w8);
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < g[b].n_linears; i++) {
            const lmp_linear *l = &g[b].linears[i];
            if (l->expert_kind != LMP_EXPERT_ROUTED) continue;
            ck_assert(l->calib_tokens > 0 && l->calib_fallback == 1);
            ck_assert_msg(same_weights(l, &r[b].linears[i]), "%s: the fallback is not RTN", l->name);
        }
    lmp_blocks_free(g, m->arch.n_layers);
    lmp_blocks_free(r, m->arch.n_layers);
    free(w.tokens);
    free(w8.tokens);
    lmp_model_free(m);
}
END_TEST

START_TEST(the_router_stays_float_unless_named)
{
    lmp_model *m = load("qwen2moe");
    lmp_block *orig = lmp_model_blocks(m);
    const lmp_windows none = {0};
    lmp_block *all = compress_v(m, "rtn", W4, NULL, 0, 0, &none);
    lmp_block *named = compress_v(m, "rtn", W4, "re:\\.mlp\\.gate$", 0, 0, &none);
    for (int64_t b = 0; b < m->arch.n_layers; b++) {
        const int r = lmp_block_find(&orig[b], LMP_ROLE_ROUTER), s = lmp_block_find(&orig[b], LMP_ROLE_SHARED_GATE);
        const int e = lmp_block_find_expert(&orig[b], LMP_ROLE_UP, LMP_EXPERT_ROUTED, 1);
        ck_assert(r >= 0 && s >= 0 && e >= 0);
        ck_assert_msg(same_weights(&all[b].linears[r], &orig[b].linears[r]), "an untargeted stage quantized the router");
        ck_assert_msg(same_weights(&all[b].linears[s], &orig[b].linears[s]), "an untargeted stage quantized the shared gate");
        ck_assert(!same_weights(&all[b].linears[e], &orig[b].linears[e]));
        ck_assert_msg(!same_weights(&named[b].linears[r], &orig[b].linears[r]), "a target naming the router left it");
        ck_assert(same_weights(&named[b].linears[e], &orig[b].linears[e]));
    }
    lmp_blocks_free(all, m->arch.n_layers);
    lmp_blocks_free(named, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

/* KL(unmodified || variant) per token over windows w, in nats. */
static double kl_per_token(lmp_model *m, const lmp_block *blocks, const lmp_windows *w)
{
    const int64_t V = m->arch.vocab, T = w->T;
    float *p = malloc((size_t)(T * V) * sizeof *p), *q = malloc((size_t)(T * V) * sizeof *q);
    double kl = 0;
    for (int64_t i = 0; i < w->n; i++) {
        ck_assert_int_eq(lmp_forward(&be, m, lmp_model_blocks(m), w->tokens + i * T, T, 1, p), 0);
        ck_assert_int_eq(lmp_forward(&be, m, blocks, w->tokens + i * T, T, 1, q), 0);
        for (int64_t j = 0; j < T * V; j++) kl += exp((double)p[j]) * ((double)p[j] - q[j]);
    }
    free(p);
    free(q);
    return kl / (double)(w->n * T);
}

/* RTN and GPTQ W4 g32 (routed and all experts) of one model on 16 windows of 32 calibration
 * tokens, and each one's KL per token to the unmodified model on 4 windows of 48: finite and above
 * 0 (printed); three_free releases them. */
typedef struct three_variants {
    lmp_windows cal, ev;
    lmp_block *rtn, *gr, *ga;
    double k_rtn, k_gr, k_ga;
} three_variants;

static three_variants three_compress(lmp_model *m, const char *name)
{
    three_variants t = {.cal = windows(16, 32, m->arch.vocab, 5), .ev = windows(4, 48, m->arch.vocab, 6)};
    t.rtn = compress_v(m, "rtn", W4, NULL, 0, 0, &t.cal);
    t.gr = compress_v(m, "gptq", W4, NULL, 0, 0, &t.cal);
    t.ga = compress_v(m, "gptq", W4, NULL, 1, 0, &t.cal);
    t.k_rtn = kl_per_token(m, t.rtn, &t.ev), t.k_gr = kl_per_token(m, t.gr, &t.ev), t.k_ga = kl_per_token(m, t.ga, &t.ev);
    printf("%s W4 g32, KL to the unmodified model per token: RTN %.5f, GPTQ routed %.5f, GPTQ all experts %.5f\n", name,
           t.k_rtn, t.k_gr, t.k_ga);
    ck_assert(isfinite(t.k_rtn) && isfinite(t.k_gr) && isfinite(t.k_ga) && t.k_rtn > 0 && t.k_gr > 0 && t.k_ga > 0);
    return t;
}

static void three_free(lmp_model *m, three_variants *t)
{
    lmp_blocks_free(t->rtn, m->arch.n_layers);
    lmp_blocks_free(t->gr, m->arch.n_layers);
    lmp_blocks_free(t->ga, m->arch.n_layers);
    free(t->cal.tokens);
    free(t->ev.tokens);
}

START_TEST(rtn_and_gptq_compare_on_each_family)
{
    const char *names[3] = {"mixtral", "qwen2moe", "qwen3moe"};
    for (int f = 0; f < 3; f++) {
        lmp_model *m = load(names[f]);
        three_variants t = three_compress(m, names[f]);
        ck_assert_msg(t.k_gr < t.k_rtn, "%s: GPTQ (%g) is not better than RTN (%g)", names[f], t.k_gr, t.k_rtn);
        three_free(m, &t);
        lmp_model_free(m);
    }
}
END_TEST

/* Raw f32 of n values to dir/name. */
static void dump(const char *dir, const char *name, const float *v, int64_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(v, sizeof *v, (size_t)n, f), (size_t)n);
    fclose(f);
}

/* Block l's router (with selection_bias, DeepSeek-V3's bias as exp_probs_b) and its routed
 * experts stacked as llama.cpp's ffn_{gate,up,down}_exps, into refdir for gguf_moe_check.py;
 * plain marks the unmodified model's experts (F32 in the file). */
static void dump_router_and_experts(const char *refdir, const lmp_block *blk, int64_t l, int selection_bias, int plain)
{
    char name[96];
    const lmp_linear *r = &blk->linears[lmp_block_find(blk, LMP_ROLE_ROUTER)];
    snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.f32", (long long)l);
    dump(refdir, name, r->w, r->out * r->in);
    if (selection_bias && r->b) {
        snprintf(name, sizeof name, "blk.%lld.exp_probs_b.bias.f32", (long long)l);
        dump(refdir, name, r->b, r->out);
    }
    static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    static const char *const stems[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int k = 0; k < 3; k++) {
        const lmp_linear *e0 = &blk->linears[lmp_block_find_expert(blk, roles[k], LMP_EXPERT_ROUTED, 0)];
        const int64_t n = e0->out * e0->in;
        float *all = malloc((size_t)(n * blk->n_experts) * sizeof *all);
        for (int e = 0; e < blk->n_experts; e++)
            memcpy(all + e * n, blk->linears[lmp_block_find_expert(blk, roles[k], LMP_EXPERT_ROUTED, e)].w,
                   (size_t)n * sizeof *all);
        snprintf(name, sizeof name, "blk.%lld.%s.f32", (long long)l, stems[k]);
        dump(refdir, name, all, n * blk->n_experts);
        if (plain) { /* the unmodified model's experts: F32 (gguf_moe_check.py's marker) */
            snprintf(name, sizeof name, "blk.%lld.%s.f32plain", (long long)l, stems[k]);
            dump(refdir, name, all, 0);
        }
        free(all);
    }
}

/* gguf-py (tools/ref/gguf_moe_check.py) reads the GGUF out lmpress wrote from model m as
 * llama.cpp's converter wrote refdir's: the same expert tensors, routers and biases. */
static void expect_gguf_py_reads_as(const char *out, const char *refdir, const lmp_model *m, const char *same)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s/tools/ref/gguf_moe_check.py' '%s' '%s' '%s' %lld %lld %s%s%s 2>&1",
             LMP_TEST_PYDEPS, lmp_test_python(), LMP_SOURCE_DIR, out, refdir, m->arch.desc->gguf_arch,
             (long long)m->arch.n_experts, (long long)m->arch.n_experts_used, same ? "'" : "", same ? same : "",
             same ? "'" : "");
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[2048];
    while (fgets(line, sizeof line, p)) printf("    %s", line);
    const int st = pclose(p);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gguf-py does not read %s as lmpress wrote it", out);
}

/* (and, with same, as llama.cpp's converter wrote that file's tensors) */
static void expect_gguf_py_reads(const char *out, const char *refdir, const lmp_model *m)
{
    expect_gguf_py_reads_as(out, refdir, m, NULL);
}

/* GPTQ and RTN on GGUF's Q4_0 grid (routed and all experts), exported as llama.cpp's 3-D expert
 * tensors: lmpress reads the file back to the logits it evaluated, and gguf-py dequantizes every
 * expert's weights and the float router to the values lmpress held. */
START_TEST(variants_export_to_gguf_and_read_back)
{
    const char *names[3] = {"mixtral", "qwen2moe", "qwen3moe"};
    static const char *const q4[] = {"format=q4_0", NULL};
    const int have_gguf = lmp_test_have_gguf("variants_export_to_gguf_and_read_back (gguf-py part)");
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "moe-export");
    for (int f = 0; f < 3; f++)
        for (int v = 0; v < 3; v++) {
            lmp_model *m = load(names[f]);
            const lmp_windows cal = windows(8, 32, m->arch.vocab, 8), ev = windows(1, 48, m->arch.vocab, 9);
            const char *plugin = v == 0 ? "rtn" : "gptq";
            lmp_block *blocks = compress_v(m, plugin, q4, NULL, v == 2, 0, &cal);
            char out[128];
            snprintf(out, sizeof out, "%s/%s-%d.gguf", dir, names[f], v);
            const lmp_block_source src = lmp_block_source_array(blocks, m->arch.n_layers);
            lmp_export_opts o = {.path = out, .variant = plugin, .pipeline = "[]"};
            ck_assert_msg(lmp_export_model(&ctx, m, &src, &o) == 0, "%s", lmp_last_error());
            lmp_model *x = NULL;
            ck_assert_msg(lmp_model_load(out, &x) == 0, "%s", lmp_last_error());
            const int64_t V = m->arch.vocab, T = ev.T;
            float *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
            ck_assert_int_eq(lmp_forward(&be, m, blocks, ev.tokens, T, 1, a), 0);
            lmp_block *xb = lmp_model_blocks(x);
            ck_assert_ptr_nonnull(xb);
            ck_assert_int_eq(lmp_forward(&be, x, xb, ev.tokens, T, 1, b), 0);
            const double rel = rel_diff(b, a, T * V);
            printf("%s %s%s -> %s (%s): read back by lmpress, log-probs %.2e relative to the evaluated variant\n",
                   names[f], plugin, v == 2 ? " all-experts" : "", out, x->format, rel);
            ck_assert_msg(rel <= 1e-6, "%s reads back %g away from what lmpress evaluated", out, rel);
            /* the weights lmpress held, for gguf-py */
            char refdir[160];
            snprintf(refdir, sizeof refdir, "%s/%s-%d.ref", dir, names[f], v);
            ck_assert_int_eq(mkdir(refdir, 0700), 0);
            for (int64_t l = 0; l < m->arch.n_layers; l++) dump_router_and_experts(refdir, &blocks[l], l, 0, 0);
            if (have_gguf) expect_gguf_py_reads(out, refdir, m);
            char cmd[700];
            snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", refdir, out);
            ck_assert_int_eq(system(cmd), 0);
            free(a);
            free(b);
            lmp_model_free(x);
            lmp_blocks_free(blocks, m->arch.n_layers);
            free(cal.tokens);
            free(ev.tokens);
            lmp_model_free(m);
        }
    rmdir(dir);
}
END_TEST

/* An interpreter with transformers and compressed-tensors (LMP_CT_PYTHON), or NULL after saying
 * why that part is skipped. */
static const char *ct_python(const char *test)
{
    const char *py = getenv("LMP_CT_PYTHON");
    char cmd[1024];
    if (py && *py) snprintf(cmd, sizeof cmd, "'%s' -c 'import compressed_tensors, torch, transformers' >/dev/null 2>&1", py);
    if (!py || !*py || system(cmd) != 0) {
        lmp_test_skip("SKIPPED %s (transformers + compressed-tensors part): LMP_CT_PYTHON %s\n", test,
                      py && *py ? "cannot import compressed_tensors, torch and transformers" : "is not set");
        return NULL;
    }
    return py;
}

/* Beside the export `out`, for tools/ref/moe_ct_logits_check.py: out.tokens (ev's window) and
 * out.logits (lmpress's forward of `blocks` on it); out is appended to list[n], quoted. */
static void ct_logits_files(lmp_model *m, const lmp_block *blocks, const lmp_windows *ev, const char *out,
                            char *list, size_t n)
{
    const int64_t V = m->arch.vocab, T = ev->T;
    float *lg = malloc((size_t)(T * V) * sizeof *lg);
    ck_assert_ptr_nonnull(lg);
    ck_assert_int_eq(lmp_forward(&be, m, blocks, ev->tokens, T, 0, lg), 0);
    char path[300];
    snprintf(path, sizeof path, "%s.tokens", out);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int64_t t = 0; t < T; t++) fprintf(f, "%d ", ev->tokens[t]);
    fclose(f);
    snprintf(path, sizeof path, "%s.logits", out);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(lg, sizeof *lg, (size_t)(T * V), f), (size_t)(T * V));
    fclose(f);
    free(lg);
    const size_t used = strlen(list);
    ck_assert_int_lt(snprintf(list + used, n - used, " '%s'", out), (int)(n - used));
}

/* tools/ref/moe_ct_logits_check.py over the exports in list (one interpreter: importing torch and
 * transformers takes seconds): transformers (compressed-tensors dequantizing on load) gives the
 * logits lmpress gave, to 1e-5. */
static void ct_logits_check(const char *py, const char *list)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/moe_ct_logits_check.py' 1e-5 %s 2>&1", py, LMP_SOURCE_DIR, list);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[2048];
    while (fgets(line, sizeof line, p)) printf("    %s", line);
    const int st = pclose(p);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "transformers + compressed-tensors do not read the exports to "
                  "lmpress's logits");
}

/* The same variants (compressed-tensors' int W4 g32; DeepSeek's g8) as Hugging Face folders, the
 * experts under their own names: lmpress reads each back to the logits it evaluated, config.json's
 * quantization_config keeps every router (and shared gate) in float through its ignore list, and
 * (LMP_CT_PYTHON) transformers + compressed-tensors give lmpress's logits to 1e-5.
 * qwen2moe-dense0's blocks differ (a dense first layer); DeepSeek-V3's router bias is its
 * e_score_correction_bias. */
START_TEST(variants_export_to_hf_and_read_back)
{
    const char *names[6] = {"mixtral", "qwen2moe", "qwen3moe", "qwen2moe-dense0", "deepseek_v2", "deepseek_v3"};
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "moe-hf");
    const char *ct = ct_python("variants_export_to_hf_and_read_back");
    char list[4096] = "";
    for (int f = 0; f < 6; f++)
        for (int v = 0; v < 3; v++) {
            lmp_model *m = load(names[f]);
            const lmp_windows cal = windows(8, 32, m->arch.vocab, 10), ev = windows(1, 48, m->arch.vocab, 11);
            const char *plugin = v == 0 ? "rtn" : "gptq";
            /* DeepSeek's fixtures have linears of 24 and 48 inputs (V3's q_b, V2's o_proj), which
             * compressed-tensors' groups must divide */
            static const char *const w4g8[] = {"bits=4", "granularity=group", "group_size=8", NULL};
            lmp_block *blocks = compress_v(m, plugin, m->arch.mla ? w4g8 : W4, NULL, v == 2, 0, &cal);
            char out[128];
            snprintf(out, sizeof out, "%s/%s-%d", dir, names[f], v);
            const lmp_block_source src = lmp_block_source_array(blocks, m->arch.n_layers);
            lmp_export_opts o = {.path = out, .variant = plugin, .pipeline = "[]"};
            ck_assert_msg(lmp_export_model(&ctx, m, &src, &o) == 0, "%s", lmp_last_error());
            lmp_model *x = NULL;
            ck_assert_msg(lmp_model_load(out, &x) == 0, "%s", lmp_last_error());
            const int64_t V = m->arch.vocab, T = ev.T;
            float *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
            ck_assert_int_eq(lmp_forward(&be, m, blocks, ev.tokens, T, 1, a), 0);
            lmp_block *xb = lmp_model_blocks(x);
            ck_assert_ptr_nonnull(xb);
            ck_assert_int_eq(lmp_forward(&be, x, xb, ev.tokens, T, 1, b), 0);
            const double rel = rel_diff(b, a, T * V);
            /* the routers in quantization_config.ignore, no expert there */
            char cfg[200], *text = NULL;
            size_t len = 0;
            snprintf(cfg, sizeof cfg, "%s/config.json", out);
            ck_assert_int_eq(lmp_read_file(cfg, &text, &len), 0);
            int routers = 0, ignored = 0;
            for (int64_t l = 0; l < m->arch.n_layers; l++)
                for (int i = 0; i < xb[l].n_linears; i++) {
                    const lmp_linear *q = &xb[l].linears[i];
                    char quoted[200];
                    snprintf(quoted, sizeof quoted, "\"%s\"", q->name);
                    const char *ign = strstr(text, "\"ignore\"");
                    ck_assert_ptr_nonnull(ign);
                    const int in_ignore = strstr(ign, quoted) != NULL;
                    if (q->role == LMP_ROLE_ROUTER || q->role == LMP_ROLE_SHARED_GATE) {
                        routers++;
                        ignored += in_ignore;
                        ck_assert_msg(same_weights(q, &blocks[l].linears[i]), "%s is not float", q->name);
                    } else if (q->expert_kind != LMP_EXPERT_NONE) {
                        ck_assert_msg(!in_ignore, "%s is in the ignore list", q->name);
                    }
                }
            printf("%s %s%s -> %s (%s): read back by lmpress, log-probs %.2e relative to the evaluated variant; %d "
                   "of %d routers and shared gates in quantization_config.ignore\n", names[f], plugin,
                   v == 2 ? " all-experts" : "", out, x->format, rel, ignored, routers);
            ck_assert_msg(rel <= 1e-6, "%s reads back %g away from what lmpress evaluated", out, rel);
            ck_assert_int_eq(ignored, routers);
            ck_assert_int_gt(routers, 0);
            free(text);
            if (ct) { /* kept for transformers + compressed-tensors, after the loop */
                ct_logits_files(m, blocks, &ev, out, list, sizeof list);
            } else {
                char cmd[300];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
                ck_assert_int_eq(system(cmd), 0);
            }
            free(a);
            free(b);
            lmp_model_free(x);
            lmp_blocks_free(blocks, m->arch.n_layers);
            free(cal.tokens);
            free(ev.tokens);
            lmp_model_free(m);
        }
    if (ct) {
        ct_logits_check(ct, list);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    rmdir(dir);
}
END_TEST

/* The strategies that learn run on expert blocks (their backward: test_train_grad's
 * moe_blocks_match_finite_differences): AutoRound on the same grid as RTN ends closer to the
 * unmodified model, and QAT after RTN moves the weights and stays finite. */
START_TEST(strategies_that_learn_run_on_experts)
{
    lmp_model *m = load("qwen3moe");
    const lmp_windows cal = windows(8, 32, m->arch.vocab, 12), ev = windows(4, 48, m->arch.vocab, 13);
    static const char *const ar[] = {"bits=4", "granularity=group", "group_size=32", "steps=40", NULL};
    lmp_block *rtn = compress_v(m, "rtn", W4, NULL, 0, 0, &cal), *aro = compress_v(m, "autoround", ar, NULL, 0, 0, &cal);
    const double k_rtn = kl_per_token(m, rtn, &ev), k_ar = kl_per_token(m, aro, &ev);
    printf("qwen3moe W4 g32: KL per token RTN %.5f, AutoRound (40 steps) %.5f\n", k_rtn, k_ar);
    ck_assert(isfinite(k_ar) && k_ar > 0);
    ck_assert_msg(k_ar < k_rtn, "AutoRound (%g) is not better than RTN (%g) on the experts", k_ar, k_rtn);
    lmp_blocks_free(aro, m->arch.n_layers);
    lmp_blocks_free(rtn, m->arch.n_layers);
    free(cal.tokens);
    free(ev.tokens);
    lmp_model_free(m);
}
END_TEST

/* Block b's output of `blocks` against the unmodified model's, as a mean squared error over
 * windows w, block b's inputs the unmodified model's hidden states. */
static double block_mse(lmp_model *m, const lmp_block *blocks, int64_t b, const lmp_windows *w)
{
    const lmp_block *orig = lmp_model_blocks(m);
    const int64_t per = w->T * m->arch.dim;
    float *X = embed_windows(m, w), *Y = malloc((size_t)per * sizeof *Y), *Z = malloc((size_t)per * sizeof *Z);
    double se = 0;
    for (int64_t i = 0; i < w->n; i++) {
        float *x = X + i * per;
        for (int64_t p = 0; p < b; p++) ck_assert_int_eq(lmp_block_forward(&be, &m->arch, &orig[p], w->T, x, NULL, NULL), 0);
        memcpy(Y, x, (size_t)per * sizeof *Y);
        memcpy(Z, x, (size_t)per * sizeof *Z);
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, &orig[b], w->T, Y, NULL, NULL), 0);
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, &blocks[b], w->T, Z, NULL, NULL), 0);
        for (int64_t j = 0; j < per; j++) se += ((double)Y[j] - Z[j]) * ((double)Y[j] - Z[j]);
    }
    free(X), free(Y), free(Z);
    return se / (double)(w->n * per);
}

/* The strategies that learn on the rest of issue 37's families, whose backward test_train_grad's
 * mla_sinks_and_routing_blocks_match_finite_differences checks: DeepSeek-V2 (MLA without
 * q_lora_rank, softmax group-limited routing), DeepSeek-V3 (q_lora_rank, sigmoid routing with a
 * selection bias) and gpt-oss (sinks, windows, top-k softmax router, clamped SwiGLU).  AutoRound
 * W4 g32 with a few steps lowers every block's output MSE below RTN's on the same grid (AutoRound
 * with no step is RTN), on its calibration windows; QAT after RTN (30 steps) lowers RTN's KL to
 * the unmodified model on the windows it learns from, and leaves the routers as loaded. */
START_TEST(strategies_that_learn_run_on_mla_sinks_and_their_routings)
{
    const char *names[3] = {"deepseek_v2", "deepseek_v3", "gpt_oss"};
    static const char *const ar[] = {"bits=4", "granularity=group", "group_size=32", "steps=20", NULL};
    for (int f = 0; f < 3; f++) {
        lmp_model *m = load(names[f]);
        const lmp_windows cal = windows(4, 32, m->arch.vocab, 12);
        lmp_block *rtn = compress_v(m, "rtn", W4, NULL, 0, 0, &cal), *aro = compress_v(m, "autoround", ar, NULL, 0, 0, &cal);
        for (int64_t b = 0; b < m->arch.n_layers; b++) {
            const double e_rtn = block_mse(m, rtn, b, &cal), e_ar = block_mse(m, aro, b, &cal);
            printf("%s block %lld W4 g32: output MSE RTN %.4g, AutoRound (20 steps) %.4g\n", names[f], (long long)b,
                   e_rtn, e_ar);
            ck_assert(isfinite(e_ar) && e_ar > 0);
            ck_assert_msg(e_ar < e_rtn, "%s block %lld: AutoRound (%g) does not lower RTN's block MSE (%g)", names[f],
                          (long long)b, e_ar, e_rtn);
        }
        { /* QAT after RTN (its grid) */
            one_stage r, q;
            make_stage(&reg, &r, "rtn", W4, NULL);
            /* the default lr 1e-4 moves no code of these tiny weights (KL as RTN's to 6 digits) */
            static const char *const qs[] = {"steps=30", "lr=1e-3", NULL};
            make_stage(&reg, &q, "qat", qs, NULL);
            lmp_stage stages[2] = {r.stage, q.stage};
            lmp_variant v = {.name = "rtn-then-qat", .stages = stages, .n_stages = 2};
            lmp_block *out = NULL;
            ck_assert_msg(lmp_compress(&ctx, &be, m, &v, &cal, &out) == 0, "%s", lmp_last_error());
            int moved = 0;
            for (int64_t b = 0; b < m->arch.n_layers; b++)
                for (int i = 0; i < out[b].n_linears; i++) {
                    const lmp_linear *l = &out[b].linears[i];
                    for (int64_t j = 0; j < l->out * l->in; j++) ck_assert(isfinite(l->w[j]));
                    moved += !same_weights(l, &rtn[b].linears[i]);
                    if (l->role == LMP_ROLE_ROUTER) /* learned only where a target names it */
                        ck_assert_msg(same_weights(l, &lmp_model_blocks(m)[b].linears[i]), "%s was learned", l->name);
                }
            /* on the windows it learns from (4 windows of 32 tokens: on others it overfits, measured
             * on DeepSeek-V2: 0.463 -> 0.488 on 2 windows of 48) */
            const double k_qat = kl_per_token(m, out, &cal), k_rtn = kl_per_token(m, rtn, &cal);
            printf("%s: QAT after RTN moved %d linears, KL per token on its windows RTN %.5f, QAT %.5f\n", names[f],
                   moved, k_rtn, k_qat);
            ck_assert(moved > 0 && isfinite(k_qat) && k_qat > 0);
            ck_assert_msg(k_qat < k_rtn, "%s: QAT (%g) does not lower RTN's KL (%g)", names[f], k_qat, k_rtn);
            lmp_blocks_free(out, m->arch.n_layers);
            free(r.stage.params);
            free(q.stage.params);
        }
        lmp_blocks_free(aro, m->arch.n_layers);
        lmp_blocks_free(rtn, m->arch.n_layers);
        free(cal.tokens);
        lmp_model_free(m);
    }
}
END_TEST

/* DeepSeek-V2 (MLA without q_lora_rank, softmax group_limited_greedy) and V3 (q_lora_rank,
 * sigmoid routing with a selection bias): RTN and GPTQ W4 g32 (routed and all experts) compress
 * every linear but the router (the latent projections q_a, q_b, kv_a, kv_b included) and compare
 * against the unmodified model with a finite KL above 0. */
START_TEST(deepseek_rtn_and_gptq_compare)
{
    const char *names[4] = {"deepseek_v2", "deepseek_v3", "deepseek_v2", "deepseek_v3"};
    for (int f = 0; f < 4; f++) {
        /* the Hugging Face folders, then llama.cpp's deepseek2 GGUFs of the same weights: every
         * linear (kv_b recombined from attn_k_b / attn_v_b), norm and the selection bias as the
         * folder's, bit for bit (the GGUFs are F32) */
        lmp_model *m = f < 2 ? load(names[f]) : load_gguf(names[f]);
        char what[64];
        snprintf(what, sizeof what, "%s %s", names[f], f < 2 ? "hf5" : "model.gguf");
        ck_assert(m->arch.mla);
        if (f >= 2) {
            lmp_model *h = load(names[f]);
            const lmp_block *hb = lmp_model_blocks(h), *gb = lmp_model_blocks(m);
            for (int64_t b = 0; b < m->arch.n_layers; b++) {
                ck_assert_int_eq(gb[b].n_linears, hb[b].n_linears);
                ck_assert_int_eq(gb[b].n_norms, hb[b].n_norms);
                for (int i = 0; i < gb[b].n_linears; i++) {
                    const lmp_linear *g = &gb[b].linears[i], *x = &hb[b].linears[i];
                    ck_assert_int_eq(g->role, x->role);
                    ck_assert_msg(same_weights(g, x), "%s: %s differs from the folder's", what, x->name);
                    ck_assert_int_eq(!g->b, !x->b);
                    ck_assert(!g->b || !memcmp(g->b, x->b, (size_t)g->out * sizeof *g->b));
                }
                for (int i = 0; i < gb[b].n_norms; i++)
                    ck_assert(!memcmp(gb[b].norms[i].w, hb[b].norms[i].w, (size_t)gb[b].norms[i].dim * sizeof(float)));
            }
            lmp_model_free(h);
        }
        three_variants t = three_compress(m, what);
        const lmp_block *orig = lmp_model_blocks(m);
        int latent = 0;
        for (int64_t b = 0; b < m->arch.n_layers; b++)
            for (int i = 0; i < orig[b].n_linears; i++) {
                const lmp_linear *l = &orig[b].linears[i];
                const int changed = !same_weights(l, &t.rtn[b].linears[i]) && !same_weights(l, &t.gr[b].linears[i]);
                if (l->role == LMP_ROLE_ROUTER) ck_assert_msg(!changed && same_weights(l, &t.gr[b].linears[i]), "%s", l->name);
                else ck_assert_msg(changed, "%s was not compressed", l->name);
                latent += l->role == LMP_ROLE_Q_A || l->role == LMP_ROLE_Q_B || l->role == LMP_ROLE_KV_A ||
                          l->role == LMP_ROLE_KV_B;
            }
        ck_assert_int_eq(latent, (int)m->arch.n_layers * (m->arch.mla_q_lora ? 4 : 2));
        three_free(m, &t);
        lmp_model_free(m);
    }
}
END_TEST

/* What llama.cpp's deepseek2 would run otherwise is refused by name, never a wrong file: the V2
 * fixture's group_limited_greedy (llama.cpp ranks groups by their two best scores) and its YaRN
 * with mscale 1 beside mscale_all_dim 0.707 (llama.cpp takes mscale = mscale_all_dim). */
START_TEST(deepseek_exports_llama_cpp_would_run_otherwise_are_refused_by_name)
{
    lmp_model *m = load("deepseek_v3");
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), 0); /* deepseek_exports_to_gguf_and_read_back */
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x-hf"), 0);   /* variants_export_to_hf_and_read_back */
    lmp_model_free(m);
    m = load("deepseek_v2");
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "group_limited_greedy"));
    m->arch.n_group = 0; /* without its groups, its YaRN */
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "YaRN"));
    lmp_model_free(m);
}
END_TEST

/* The weights lmpress holds for block l's router (and selection bias), routed experts and MLA
 * kv_b split as llama.cpp's converter splits it, into refdir for gguf_moe_check.py. */
static void dump_deepseek_refs(const char *refdir, const lmp_model *m, const lmp_block *blk, int64_t l, int plain)
{
    char name[96];
    const lmp_arch *a = &m->arch;
    const lmp_linear *kvb = &blk->linears[lmp_block_find(blk, LMP_ROLE_KV_B)];
    const int64_t H = a->n_heads, nope = a->mla_nope, v = a->head_dim, kv = a->mla_kv_lora;
    float *kb = malloc((size_t)(H * kv * nope) * sizeof *kb), *vb = malloc((size_t)(H * v * kv) * sizeof *vb);
    for (int64_t h = 0; h < H; h++) { /* k_b [H][kv][nope], v_b [H][v][kv] */
        for (int64_t c = 0; c < kv; c++)
            for (int64_t j = 0; j < nope; j++) kb[(h * kv + c) * nope + j] = kvb->w[(h * (nope + v) + j) * kv + c];
        for (int64_t j = 0; j < v; j++)
            for (int64_t c = 0; c < kv; c++) vb[(h * v + j) * kv + c] = kvb->w[(h * (nope + v) + nope + j) * kv + c];
    }
    snprintf(name, sizeof name, "blk.%lld.attn_k_b.f32", (long long)l);
    dump(refdir, name, kb, H * kv * nope);
    snprintf(name, sizeof name, "blk.%lld.attn_v_b.f32", (long long)l);
    dump(refdir, name, vb, H * v * kv);
    free(kb);
    free(vb);
    if (lmp_arch_moe_layer(a, l)) dump_router_and_experts(refdir, blk, l, 1, plain);
}

/* DeepSeek-V2 and V3 as llama.cpp's deepseek2 GGUF (kv_b split into attn_k_b / attn_v_b, the
 * selection bias as exp_probs_b, the routing keys), from the converter's GGUFs and from the V3
 * folder: the unmodified model's file holds exactly the converter's tensors (gguf-py), and it and
 * the RTN / GPTQ routed / GPTQ all-experts variants on GGUF's Q4_0 grid read back by lmpress to
 * the log-probabilities it evaluated (printed), and by gguf-py to the weights it held. */
START_TEST(deepseek_exports_to_gguf_and_read_back)
{
    const char *names[3] = {"deepseek_v2", "deepseek_v3", "deepseek_v3"};
    static const char *const q4[] = {"format=q4_0", NULL};
    const int have_gguf = lmp_test_have_gguf("deepseek_exports_to_gguf_and_read_back (gguf-py part)");
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "ds-gguf");
    for (int f = 0; f < 3; f++)
        for (int v = 0; v < 4; v++) { /* unmodified, RTN, GPTQ routed, GPTQ all experts */
            lmp_model *m = f < 2 ? load_gguf(names[f]) : load(names[f]);
            const lmp_windows cal = windows(8, 32, m->arch.vocab, 8), ev = windows(1, 48, m->arch.vocab, 9);
            const char *plugin = v == 0 ? "none" : v == 1 ? "rtn" : "gptq";
            /* every linear whose rows fit Q4_0's blocks of 32 (not V3's q_b of 24 inputs nor V2's o of
             * 48), the latent ones included (kv_b then written in F32 as its split needs), not the router */
            static const char *const fit = "re:^(?!.*(q_b_proj|o_proj|mlp\\.gate$))";
            lmp_block *owned = v ? compress_v(m, plugin, q4, fit, v == 3, 0, &cal) : NULL;
            const lmp_block *blocks = v ? owned : lmp_model_blocks(m);
            char out[128];
            snprintf(out, sizeof out, "%s/%s-%d-%d.gguf", dir, names[f], f, v);
            const lmp_block_source src = lmp_block_source_array((lmp_block *)blocks, m->arch.n_layers);
            lmp_export_opts o = {.path = out, .variant = plugin, .pipeline = "[]"};
            ck_assert_msg(lmp_export_model(&ctx, m, &src, &o) == 0, "%s", lmp_last_error());
            lmp_model *x = NULL;
            ck_assert_msg(lmp_model_load(out, &x) == 0, "%s", lmp_last_error());
            ck_assert_str_eq(x->arch.desc->hf_class, m->arch.desc->hf_class);
            const int64_t V = m->arch.vocab, T = ev.T;
            float *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
            ck_assert_int_eq(lmp_forward(&be, m, blocks, ev.tokens, T, 1, a), 0);
            lmp_block *xb = lmp_model_blocks(x);
            ck_assert_ptr_nonnull(xb);
            ck_assert_int_eq(lmp_forward(&be, x, xb, ev.tokens, T, 1, b), 0);
            double d = 0;
            for (int64_t i = 0; i < T * V; i++) d = fmax(d, fabs((double)a[i] - b[i]));
            printf("%s (%s) %s%s -> %s (%s): read back by lmpress, max |log-prob difference| %.3g\n", names[f],
                   f < 2 ? "model.gguf" : "hf5", plugin, v == 3 ? " all-experts" : "", out, x->format, d);
            ck_assert_msg(d <= 1e-6, "%s reads back %g away from what lmpress evaluated", out, d);
            char refdir[160], same[600] = "";
            snprintf(refdir, sizeof refdir, "%s/%s-%d-%d.ref", dir, names[f], f, v);
            ck_assert_int_eq(mkdir(refdir, 0700), 0);
            for (int64_t l = 0; l < m->arch.n_layers; l++) dump_deepseek_refs(refdir, m, &blocks[l], l, v == 0);
            if (v == 0) snprintf(same, sizeof same, "%s/%s/model.gguf", FIXTURES, names[f]);
            if (have_gguf) expect_gguf_py_reads_as(out, refdir, m, v == 0 ? same : NULL);
            char cmd[700];
            snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", refdir, out);
            ck_assert_int_eq(system(cmd), 0);
            free(a);
            free(b);
            lmp_model_free(x);
            if (owned) lmp_blocks_free(owned, m->arch.n_layers);
            free(cal.tokens);
            free(ev.tokens);
            lmp_model_free(m);
        }
    rmdir(dir);
}
END_TEST

/* gpt-oss (sinks, alternating windows, biased router and experts, clamped SwiGLU): RTN and GPTQ
 * W4 g32 (routed and all experts) compress every linear but the router, whose weight and bias
 * stay as loaded, and compare against the unmodified model with a finite KL above 0. */
START_TEST(gpt_oss_rtn_and_gptq_compare)
{
    lmp_model *m = load("gpt_oss");
    ck_assert(m->arch.attn_sinks && m->arch.swiglu_limit > 0);
    three_variants t = three_compress(m, "gpt_oss");
    const lmp_block *orig = lmp_model_blocks(m);
    int routers = 0;
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < orig[b].n_linears; i++) {
            const lmp_linear *l = &orig[b].linears[i];
            const int changed = !same_weights(l, &t.rtn[b].linears[i]) && !same_weights(l, &t.gr[b].linears[i]) &&
                                !same_weights(l, &t.ga[b].linears[i]);
            if (l->role == LMP_ROLE_ROUTER) {
                ck_assert_msg(same_weights(l, &t.rtn[b].linears[i]) && same_weights(l, &t.gr[b].linears[i]) &&
                                  same_weights(l, &t.ga[b].linears[i]), "%s was quantized", l->name);
                ck_assert(l->b && !memcmp(l->b, t.gr[b].linears[i].b, (size_t)l->out * sizeof *l->b));
                routers++;
            } else {
                ck_assert_msg(changed, "%s was not compressed", l->name);
            }
        }
    ck_assert_int_eq(routers, (int)m->arch.n_layers);
    three_free(m, &t);
    lmp_model_free(m);
}
END_TEST

/* gpt-oss as llama.cpp's gpt-oss GGUF (from the converter's own GGUF of the fixture, whose YaRN is
 * llama.cpp's): RTN and GPTQ (routed, all experts) on Q4_0 for every linear but the routers and
 * the experts' down (its 24 inputs fit no 32-wide block: left in float), exported with the
 * routers' and experts' biases and the sinks; lmpress reads the file back to the logits it
 * evaluated, and gguf-py dequantizes every expert tensor, bias and router to the values lmpress
 * held. */
START_TEST(gpt_oss_exports_to_gguf_and_reads_back)
{
    static const char *const q4[] = {"format=q4_0", NULL};
    static const char *const target = "re:(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|attn_q|attn_k|attn_v|"
                                      "attn_output|ffn_gate_exps|ffn_up_exps)[^.]*(\\.[0-9]+)?$";
    const int have_gguf = lmp_test_have_gguf("gpt_oss_exports_to_gguf_and_reads_back (gguf-py part)");
    char dir[64], path[512];
    lmp_test_tmpdir(dir, sizeof dir, "gptoss-gguf");
    snprintf(path, sizeof path, "%s/gpt_oss/model.gguf", FIXTURES);
    for (int v = 0; v < 3; v++) {
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
        const lmp_windows cal = windows(8, 32, m->arch.vocab, 14), ev = windows(1, 48, m->arch.vocab, 15);
        const char *plugin = v == 0 ? "rtn" : "gptq";
        lmp_block *blocks = compress_v(m, plugin, q4, target, v == 2, 0, &cal);
        int quantized = 0, n_lin = 0;
        for (int64_t l = 0; l < m->arch.n_layers; l++)
            for (int i = 0; i < blocks[l].n_linears; i++) {
                const lmp_linear *q = &blocks[l].linears[i];
                const int down = q->role == LMP_ROLE_DOWN, router = q->role == LMP_ROLE_ROUTER;
                n_lin++;
                quantized += q->grid != NULL;
                ck_assert_msg((q->grid != NULL) == !(down || router), "%s: %s", q->name,
                              q->grid ? "quantized" : "left in float");
            }
        char out[128];
        snprintf(out, sizeof out, "%s/gpt_oss-%d.gguf", dir, v);
        const lmp_block_source src = lmp_block_source_array(blocks, m->arch.n_layers);
        lmp_export_opts o = {.path = out, .variant = plugin, .pipeline = "[]"};
        ck_assert_msg(lmp_export_model(&ctx, m, &src, &o) == 0, "%s", lmp_last_error());
        lmp_model *x = NULL;
        ck_assert_msg(lmp_model_load(out, &x) == 0, "%s", lmp_last_error());
        ck_assert(x->arch.attn_sinks && x->arch.swiglu_limit > 0);
        const int64_t V = m->arch.vocab, T = ev.T;
        float *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
        ck_assert_int_eq(lmp_forward(&be, m, blocks, ev.tokens, T, 1, a), 0);
        lmp_block *xb = lmp_model_blocks(x);
        ck_assert_ptr_nonnull(xb);
        ck_assert_int_eq(lmp_forward(&be, x, xb, ev.tokens, T, 1, b), 0);
        const double rel = rel_diff(b, a, T * V);
        printf("gpt_oss %s%s (%d of %d linears on Q4_0) -> %s (%s): read back by lmpress, log-probs %.2e relative to "
               "the evaluated variant\n", plugin, v == 2 ? " all-experts" : "", quantized, n_lin, out, x->format, rel);
        ck_assert_msg(rel <= 1e-6, "%s reads back %g away from what lmpress evaluated", out, rel);
        /* the weights and biases lmpress held, for gguf-py */
        char refdir[160], name[128];
        snprintf(refdir, sizeof refdir, "%s/gpt_oss-%d.ref", dir, v);
        ck_assert_int_eq(mkdir(refdir, 0700), 0);
        static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
        static const char *const stems[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int64_t l = 0; l < m->arch.n_layers; l++) {
            const lmp_block *blk = &blocks[l];
            const lmp_linear *r = &blk->linears[lmp_block_find(blk, LMP_ROLE_ROUTER)];
            ck_assert_ptr_nonnull(r->b);
            snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.f32", (long long)l);
            dump(refdir, name, r->w, r->out * r->in);
            snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.bias.f32", (long long)l);
            dump(refdir, name, r->b, r->out);
            for (int k = 0; k < 3; k++) {
                const lmp_linear *e0 = &blk->linears[lmp_block_find_expert(blk, roles[k], LMP_EXPERT_ROUTED, 0)];
                const int64_t n = e0->out * e0->in;
                float *all = malloc((size_t)(n * blk->n_experts) * sizeof *all),
                      *bias = malloc((size_t)(e0->out * blk->n_experts) * sizeof *bias);
                for (int e = 0; e < blk->n_experts; e++) {
                    const lmp_linear *q = &blk->linears[lmp_block_find_expert(blk, roles[k], LMP_EXPERT_ROUTED, e)];
                    ck_assert_ptr_nonnull(q->b);
                    memcpy(all + e * n, q->w, (size_t)n * sizeof *all);
                    memcpy(bias + e * e0->out, q->b, (size_t)e0->out * sizeof *bias);
                }
                snprintf(name, sizeof name, "blk.%lld.%s.f32", (long long)l, stems[k]);
                dump(refdir, name, all, n * blk->n_experts);
                if (roles[k] == LMP_ROLE_DOWN) { /* left in float: gguf_moe_check.py's marker */
                    snprintf(name, sizeof name, "blk.%lld.%s.f32plain", (long long)l, stems[k]);
                    dump(refdir, name, all, 0);
                }
                snprintf(name, sizeof name, "blk.%lld.%s.bias.f32", (long long)l, stems[k]);
                dump(refdir, name, bias, e0->out * blk->n_experts);
                free(all);
                free(bias);
            }
        }
        if (have_gguf) expect_gguf_py_reads(out, refdir, m);
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", refdir, out);
        ck_assert_int_eq(system(cmd), 0);
        free(a);
        free(b);
        lmp_model_free(x);
        lmp_blocks_free(blocks, m->arch.n_layers);
        free(cal.tokens);
        free(ev.tokens);
        lmp_model_free(m);
    }
    rmdir(dir);
}
END_TEST

/* What gpt-oss cannot do yet is refused by name: its exports, and the rotations. */
START_TEST(gpt_oss_exports_and_rotation_are_refused_by_name)
{
    lmp_model *m = load("gpt_oss");
    /* (its GGUF: gpt_oss_exports_to_gguf_and_reads_back; this HF source's swiglu_limit 1.5 and
     * YaRN with truncate false are not llama.cpp's gpt-oss) */
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "swiglu_limit 1.5"));
    m->arch.swiglu_limit = 7.0f; /* llama.cpp's: then its YaRN */
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "truncate"));
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x-hf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "not Linear modules: compressed-tensors cannot quantize"));
    const lmp_rotate_opts ro = {.r1 = LMP_ROT_HADAMARD};
    ck_assert_int_eq(lmp_model_rotate(m, &ro), LMP_EUNSUPPORTED);
    printf("rotate: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "attention sinks"));
    lmp_model_free(m);
}
END_TEST

START_TEST(what_is_not_written_yet_is_refused_by_name)
{
    lmp_model *m = NULL;
    /* a Hugging Face folder of experts from a GGUF source (no config.json to keep); a GGUF of a
     * qwen2moe with a dense layer (llama.cpp has none) */
    char path[512];
    snprintf(path, sizeof path, "%s/qwen3moe/model.gguf", FIXTURES);
    ck_assert_int_eq(lmp_model_load(path, &m), 0);
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x-hf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "qwen3moe"));
    lmp_model_free(m);
    /* a Qwen3-MoE without norm_topk_prob: llama.cpp's qwen3moe always renormalizes */
    m = load("qwen3moe");
    m->arch.norm_topk = 0;
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "norm_topk_prob false"));
    lmp_model_free(m);
    m = load("qwen2moe");
    m->arch.norm_topk = 1;
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "never renormalizes"));
    lmp_model_free(m);
    m = load("qwen2moe-dense0");
    m->arch.norm_topk = 0; /* its dense layer is what is refused here */
    ck_assert_int_eq(lmp_export_check_arch(m, "/tmp/x.gguf"), LMP_EUNSUPPORTED);
    printf("export: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "dense MLP in layer 0"));
    lmp_model_free(m);
}
END_TEST

/* ---- a block's routed experts a group at a time (memory.expert_group_mb; model/expert_pager.h) ---- */

/* What a streamed compression hands out, checked against the same variant compressed whole
 * (want[L]): every linear of every block equal bit for bit (weights, scales, token counts,
 * fallbacks: block b+1's equal weights also say that block b's streamed forward gave the next
 * inputs bit for bit), and each streamed block's paged forward equal to the whole block's. */
typedef struct streamed_check {
    const lmp_model *m;
    const lmp_block *want;
    const float *x;          /* [T, dim] a block input */
    int64_t T;
    int paged_blocks;        /* blocks that came through block_done_paged */
    int64_t loads;           /* groups the pagers loaded */
} streamed_check;

static void same_linear(const lmp_linear *a, const lmp_linear *b)
{
    ck_assert_msg(same_weights(a, b), "%s differs when its experts are streamed", a->name);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->calib_tokens, b->calib_tokens);
    ck_assert_int_eq(a->calib_fallback, b->calib_fallback);
    ck_assert((a->b == NULL) == (b->b == NULL));
    if (a->b) ck_assert(!memcmp(a->b, b->b, (size_t)a->out * sizeof *a->b));
    ck_assert((a->grid == NULL) == (b->grid == NULL));
    if (a->grid) {
        ck_assert_int_eq(a->grid->n_scales, b->grid->n_scales);
        ck_assert(!memcmp(a->grid->scales, b->grid->scales, (size_t)a->grid->n_scales * sizeof(float)));
    }
    ck_assert(a->weight_bits == b->weight_bits);
}

static int whole_done(void *ud, int64_t b, const lmp_block *blk)
{
    const streamed_check *c = ud;
    const lmp_block *w = &c->want[b];
    ck_assert_int_eq(blk->n_linears, w->n_linears);
    for (int i = 0; i < blk->n_linears; i++) same_linear(&blk->linears[i], &w->linears[i]);
    return 0;
}

static int paged_done(void *ud, int64_t b, const lmp_block *skel, lmp_expert_pager *experts)
{
    streamed_check *c = ud;
    const lmp_block *w = &c->want[b];
    int k = 0, n_routed = 0;
    for (int i = 0; i < w->n_linears; i++) {
        const lmp_linear *l = &w->linears[i];
        if (l->expert_kind != LMP_EXPERT_ROUTED) {
            same_linear(&skel->linears[k++], l);
            continue;
        }
        const lmp_linear *gud[3];
        ck_assert_int_eq(lmp_expert_pager_expert(experts, l->expert, gud), 0);
        same_linear(gud[l->role == LMP_ROLE_GATE ? 0 : l->role == LMP_ROLE_UP ? 1 : 2], l);
        n_routed++;
    }
    ck_assert_int_eq(k, skel->n_linears);
    ck_assert_int_eq(n_routed, 3 * c->m->arch.n_experts);
    /* the evaluation's forward: the experts read back a group at a time, the output the whole block's */
    const int64_t n = c->T * c->m->arch.dim;
    float *xw = malloc((size_t)n * sizeof *xw), *xp = malloc((size_t)n * sizeof *xp);
    memcpy(xw, c->x, (size_t)n * sizeof *xw);
    memcpy(xp, c->x, (size_t)n * sizeof *xp);
    ck_assert_int_eq(lmp_block_forward(&be, &c->m->arch, w, c->T, xw, NULL, NULL), 0);
    const int64_t before = experts->loads;
    ck_assert_msg(lmp_block_forward_paged(&be, &c->m->arch, skel, experts, c->T, 0, xp, NULL, NULL, NULL) == 0, "%s",
                  lmp_last_error());
    ck_assert_int_gt(experts->loads, before);
    ck_assert_msg(!memcmp(xw, xp, (size_t)n * sizeof *xw), "block %lld's paged forward differs", (long long)b);
    free(xw);
    free(xp);
    c->paged_blocks++;
    c->loads += experts->loads;
    return 0;
}

/* One variant of `plugin` compressed whole, then with expert groups of `per` experts (budget
 * per experts' f32 bytes): the same blocks; returns how many blocks were streamed. */
static int streamed_equals_whole(const lmp_model *m, const char *plugin, const char *const *settings, int all,
                                 const lmp_windows *cal, int64_t per, int original)
{
    one_stage os;
    make_stage(&reg, &os, plugin, settings, NULL);
    os.v.calib_experts_all = all;
    os.v.expert_min_tokens = 0;
    if (original) os.v.calib_inputs = LMP_CALIB_INPUTS_ORIGINAL;
    lmp_block *want = NULL;
    ck_assert_msg(lmp_compress(&ctx, &be, m, &os.v, cal, &want) == 0, "%s", lmp_last_error());
    const float *x0 = embed_windows(m, cal);
    streamed_check c = {.m = m, .want = want, .x = x0, .T = cal->T};
    const int64_t saved = ctx.expert_group_bytes;
    ctx.expert_group_bytes = per * lmp_expert_f32_bytes(&m->arch);
    lmp_compress_watch watch = {.block_done = whole_done, .block_done_paged = paged_done, .ud = &c};
    ck_assert_msg(lmp_compress_watched(&ctx, &be, m, &os.v, cal, &watch, NULL) == 0, "%s", lmp_last_error());
    ctx.expert_group_bytes = saved;
    free(os.stage.params);
    free((float *)x0);
    lmp_blocks_free(want, m->arch.n_layers);
    return c.paged_blocks;
}

START_TEST(streamed_experts_give_the_same_blocks_bit_for_bit)
{
    static const char *const seq[] = {"bits=4", "granularity=group", "group_size=32", "true_sequential=1", NULL};
    const char *names[] = {"mixtral", "qwen2moe", "qwen3moe", "qwen3moe-fused", "qwen2moe-dense0", "deepseek_v2",
                           "deepseek_v3", "gpt_oss"};
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        lmp_model *m = load(names[f]);
        lmp_windows cal = windows(4, 32, m->arch.vocab, 7);
        int moe_layers = 0;
        for (int64_t b = 0; b < m->arch.n_layers; b++) moe_layers += lmp_arch_moe_layer(&m->arch, b);
        /* groups of 3 (the last one shorter when E is no multiple of 3), and of 1 */
        const int per = m->arch.n_experts > 3 ? 3 : 1;
        ck_assert_int_eq(streamed_equals_whole(m, "rtn", W4, 0, &cal, per, 0), moe_layers);
        ck_assert_int_eq(streamed_equals_whole(m, "gptq", W4, 0, &cal, per, 0), moe_layers);
        ck_assert_int_eq(streamed_equals_whole(m, "gptq", W4, 1, &cal, 1, 0), moe_layers);
        ck_assert_int_eq(streamed_equals_whole(m, "gptq", seq, 0, &cal, per, 0), moe_layers);
        /* calibrated on the original inputs: the experts see the attention as the model has it,
         * and the next block's inputs come from the block as the model has it */
        ck_assert_int_eq(streamed_equals_whole(m, "gptq", seq, 0, &cal, per, 1), moe_layers);
        printf("%s: RTN, GPTQ routed / all experts / true_sequential (on compressed and original inputs) W4, %d sparse block%s streamed in groups of %d "
               "(and 1): the same blocks and forwards bit for bit\n", names[f], moe_layers, moe_layers == 1 ? "" : "s",
               per);
        free(cal.tokens);
        lmp_model_free(m);
    }
}
END_TEST

/* What cannot be streamed is computed whole (and the log says why): a caller that reads whole
 * blocks, or keeps every block. */
START_TEST(what_is_not_streamed_is_said_and_whole)
{
    lmp_model *m = load("qwen3moe");
    lmp_windows cal = windows(4, 32, m->arch.vocab, 7);
    lmp_block *want = compress_v(m, "rtn", W4, NULL, 0, 0, &cal);
    streamed_check c = {.m = m, .want = want};
    one_stage os;
    make_stage(&reg, &os, "rtn", W4, NULL);
    ctx.expert_group_bytes = lmp_expert_f32_bytes(&m->arch);
    lmp_compress_watch watch = {.block_done = whole_done, .ud = &c}; /* no block_done_paged: whole blocks */
    ck_assert_int_eq(lmp_compress_watched(&ctx, &be, m, &os.v, &cal, &watch, NULL), 0);
    ck_assert_int_eq(c.paged_blocks, 0);
    lmp_block *out = NULL; /* every block kept: whole, the same */
    ck_assert_int_eq(lmp_compress(&ctx, &be, m, &os.v, &cal, &out), 0);
    for (int64_t b = 0; b < m->arch.n_layers; b++) whole_done(&c, b, &out[b]);
    lmp_blocks_free(out, m->arch.n_layers);
    lmp_blocks_free(want, m->arch.n_layers);
    free(os.stage.params);
    free(cal.tokens);
    lmp_model_free(m);
}
END_TEST

/* compare on qwen2moe (a shared expert beside the routed ones): the unmodified model's reference
 * pass, RTN, GPTQ (true_sequential, its default) and GPTQ over all experts, with every block's
 * experts a group of one at a time, give the report of the run with whole blocks: the same
 * sums (NLL, KL, top-1), bits per weight and per-linear outcomes (weight error, tokens seen). */
static lmp_report *compare_run(const char *cfg_text, const char *path, lmp_run_config **cfg)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(cfg_text, f);
    fclose(f);
    lmp_ctx run_ctx;
    lmp_ctx_init(&run_ctx);
    lmp_host_set_verbosity(&run_ctx, LMP_LOG_ERROR);
    lmp_run_config *c;
    ck_assert_msg(lmp_config_load(&run_ctx, path, &c) == 0, "%s", lmp_last_error());
    lmp_compare_opts o = {0};
    lmp_report *r;
    ck_assert_msg(lmp_run_compare(&run_ctx, c, &o, &r) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(run_ctx.expert_group_bytes, (int64_t)(c->expert_group_mb * 1048576.0));
    lmp_ctx_clear(&run_ctx);
    *cfg = c;
    return r;
}

START_TEST(compare_streamed_equals_whole)
{
    char dir[] = "/tmp/lmpress-moe-stream-XXXXXX", cfg[8192], path[600];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *variants =
        "variants = ( { name = \"fp32\"; },\n"
        "  { name = \"rtn\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); },\n"
        "  { name = \"gptq\"; pipeline = ( { strategy = \"gptq\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); },\n"
        "  { name = \"gptq-all\"; calibration = { experts = \"all\"; };\n"
        "    pipeline = ( { strategy = \"gptq\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); } );\n";
    lmp_report *r[2];
    lmp_run_config *rc[2];
    for (int k = 0; k < 2; k++) {
        snprintf(cfg, sizeof cfg,
                 "model = { path = \"%s/qwen2moe/hf5\"; tokenizer = \"%s/qwen2moe/hf5/tokenizer.json\"; };\n"
                 "backend = { name = \"cpu\"; };\ncalibration = { text = \"%s/models/stories260K/tinystories-synth-calib.txt\"; "
                 "samples = 4; seq_len = 64; };\neval = { texts = [ \"%s/models/stories260K/tinystories-synth-eval.txt\" ]; "
                 "seq_len = 64; max_windows = 6; };\nseed = 5;\n%s%s",
                 FIXTURES, FIXTURES, LMP_SOURCE_DIR, LMP_SOURCE_DIR, k ? "memory = { expert_group_mb = 0.000001; };\n" : "",
                 variants);
        snprintf(path, sizeof path, "%s/run%d.cfg", dir, k);
        r[k] = compare_run(cfg, path, &rc[k]);
        unlink(path);
    }
    rmdir(dir);
    ck_assert_int_eq(r[0]->n_results, 4);
    for (int i = 0; i < r[0]->n_results; i++) {
        const lmp_variant_result *a = &r[0]->results[i], *b = &r[1]->results[i];
        ck_assert(a->scores[0].nll_sum == b->scores[0].nll_sum && a->scores[0].kld_sum == b->scores[0].kld_sum);
        ck_assert_int_eq(a->scores[0].top1_hits, b->scores[0].top1_hits);
        ck_assert_int_eq(a->scores[0].scored, b->scores[0].scored);
        ck_assert(a->bits_per_weight == b->bits_per_weight);
        ck_assert_int_eq(a->n_linears, b->n_linears);
        for (int j = 0; j < a->n_linears; j++) {
            const lmp_linear_outcome *x = &a->linears[j], *y = &b->linears[j];
            ck_assert_str_eq(x->name, y->name);
            ck_assert(x->weight_err == y->weight_err || (isnan(x->weight_err) && isnan(y->weight_err)));
            ck_assert_int_eq(x->calib_tokens, y->calib_tokens);
            ck_assert_int_eq(x->calib_fallback, y->calib_fallback);
        }
        if (i) ck_assert(a->scores[0].kld_sum > 0);
        printf("qwen2moe compare %-9s KL sum %.6f, %d linears: whole and streamed in groups of 1 expert the same\n",
               a->v->name, a->scores[0].kld_sum, a->n_linears);
    }
    for (int k = 0; k < 2; k++) {
        lmp_report_free(r[k]);
        lmp_config_free(rc[k]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("experts");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, routed_statistics_follow_the_router);
    tcase_add_test(tc, all_experts_changes_no_output);
    tcase_add_test(tc, all_experts_is_wired_through_the_pipeline);
    tcase_add_test(tc, an_expert_without_tokens_gets_the_declared_fallback);
    tcase_add_test(tc, the_router_stays_float_unless_named);
    tcase_add_test(tc, rtn_and_gptq_compare_on_each_family);
    tcase_add_test(tc, variants_export_to_gguf_and_read_back);
    tcase_add_test(tc, variants_export_to_hf_and_read_back);
    tcase_add_test(tc, gpt_oss_exports_to_gguf_and_reads_back);
    tcase_add_test(tc, strategies_that_learn_run_on_experts);
    tcase_add_test(tc, strategies_that_learn_run_on_mla_sinks_and_their_routings);
    tcase_add_test(tc, what_is_not_written_yet_is_refused_by_name);
    tcase_add_test(tc, deepseek_rtn_and_gptq_compare);
    tcase_add_test(tc, deepseek_routed_statistics_follow_the_router);
    tcase_add_test(tc, deepseek_exports_llama_cpp_would_run_otherwise_are_refused_by_name);
    tcase_add_test(tc, deepseek_exports_to_gguf_and_read_back);
    tcase_add_test(tc, gpt_oss_rtn_and_gptq_compare);
    tcase_add_test(tc, gpt_oss_exports_and_rotation_are_refused_by_name);
    tcase_add_test(tc, streamed_experts_give_the_same_blocks_bit_for_bit);
    tcase_add_test(tc, what_is_not_streamed_is_said_and_whole);
    tcase_add_test(tc, compare_streamed_equals_whole);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
