/* test_block_steps.c — the block's one list of steps (core/model/block_steps.h) on every
 * architecture fixture (tests/fixtures/arch/NAME, the Hugging Face folder and the GGUF), and what
 * is derived from it:
 *  - each block of each fixture has what its steps use and nothing else (lmp_block_plan_check);
 *  - the steps read each linear once, in forward order, in the input groups the topology has
 *    (q, k, v 0; o 1; gate, up 2; down 3), which lmp_block_plan_input_group reports; the norms feed (lmp_norm.fed, what SmoothQuant and Shift fold into) exactly the
 *    linears whose group reads their output: norm_attn q, k, v; norm_mlp gate, up (GPT-2: c_fc);
 *    q/k and post norms none;
 *  - the FLOP count against the block's shapes written out here (each GEMM 2·T·in·out, attention
 *    2·2·T²·qd);
 *  - the steps' features follow the architecture: q/k norms, post norms, the q scale, windows
 *    on the sliding layers only, soft-caps, GeGLU;
 *  - a pass started at each group from the state an earlier one left is the whole forward bit
 *    for bit (lmp_block_forward_from), on the fixtures with post norms and windows. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "model/forward.h"
#include "base/ctx.h"
#include "plugin/registry.h"

#include "archfix.h"
#include "testutil.h"

static const char *const fixtures[] = {"llama3", "mistral", "qwen2", "qwen2-yarn", "qwen3", "gemma", "gemma2",
                                       "gemma3", "phi3",   "glm",     "glm4",  "gpt2",       "ernie4_5",
                                       "gptneox", "gptneox-seq", "phi2", "gptj",
                                       "stablelm", "stablelm-par", "olmo", "starcoder2", "bloom",
                                       "falcon", "falcon-nda", "falcon-seq", "opt", "olmo2", "cohere"};
#define N_FIXTURES (int)(sizeof fixtures / sizeof fixtures[0])

static lmp_ctx g_ctx;
static lmp_registry g_reg;
static lmp_backend g_be;

static void setup(void)
{
    lmp_ctx_init(&g_ctx);
    lmp_host_set_verbosity(&g_ctx, LMP_LOG_ERROR);
    ck_assert_int_eq(lmp_registry_init(&g_reg, &g_ctx, NULL, 0), 0);
    ck_assert_int_eq(lmp_backend_open(&g_ctx, &g_reg, "cpu", NULL, &g_be), 0);
}

static void teardown(void)
{
    lmp_backend_close(&g_be);
    lmp_registry_free(&g_reg);
    lmp_ctx_clear(&g_ctx);
}

static lmp_model *load(const char *fixture, const char *form)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s/%s", FIXTURES, fixture, form);
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s: %s", path, lmp_last_error());
    return m;
}

/* The input group a linear of this role reads in every topology lmpress has: one input shared by
 * q, k and v, then o's, then the MLP's input linears', then down's. */
static int expected_group(lmp_role r)
{
    switch (r) {
    case LMP_ROLE_Q: case LMP_ROLE_K: case LMP_ROLE_V: return 0;
    case LMP_ROLE_O: return 1;
    case LMP_ROLE_GATE: case LMP_ROLE_UP: return 2;
    default: return 3;
    }
}

static int count_kind(const lmp_block_plan *p, lmp_step_kind k)
{
    int n = 0;
    for (int i = 0; i < p->n_steps; i++) n += p->step[i].kind == k;
    return n;
}

/* The checks on block b of model m (label: fixture and form). */
static void check_block(const lmp_model *m, const lmp_block *blk, const char *label)
{
    const lmp_arch *a = &m->arch;
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    ck_assert_msg(lmp_block_plan_check(&p, blk) == 0, "%s block %d: %s", label, blk->index, lmp_last_error());
    /* each linear read once, in its input group, groups in forward order */
    int seen[16] = {0}, last_group = 0;
    for (int i = 0; i < p.n_steps; i++) {
        const lmp_block_step *s = &p.step[i];
        ck_assert_msg(s->group >= last_group, "%s: step %d (%s) of group %d after group %d", label, i,
                      lmp_step_kind_name(s->kind), s->group, last_group);
        last_group = s->group;
        for (int o = 0; s->kind == LMP_STEP_LINEARS && o < s->n_out; o++) {
            const int li = lmp_block_find(blk, s->roles[o]);
            ck_assert_int_ge(li, 0);
            seen[li]++;
            ck_assert_msg(expected_group(s->roles[o]) == s->group, "%s: role %d in group %d, not %d", label,
                          (int)s->roles[o], s->group, expected_group(s->roles[o]));
            ck_assert_int_eq(lmp_block_plan_input_group(&p, s->roles[o]), s->group);
        }
    }
    for (int i = 0; i < blk->n_linears; i++) ck_assert_msg(seen[i] == 1, "%s: %s read %d times", label, blk->linears[i].name, seen[i]);
    /* what each norm feeds */
    const int gpt2 = a->family == LMP_FAMILY_GPT2, plain = gpt2 || a->plain_mlp; /* no gate: up, GELU, down */
    if (a->no_pre_norms) { /* OLMo 2: no norm feeds a linear; the input linears take their group's affine */
        ck_assert_int_eq(lmp_norm_index(a, LMP_NORM_ATTN), -1);
        ck_assert_int_eq(lmp_norm_index(a, LMP_NORM_MLP), -1);
        for (int i = 0; i < blk->n_norms; i++) ck_assert_int_eq(blk->norms[i].n_fed, 0);
        for (int i = 0; i < p.n_steps; i++)
            if (p.step[i].kind == LMP_STEP_LINEARS) ck_assert_int_eq(p.step[i].affine, 1);
        ck_assert_int_eq(blk->norms[lmp_norm_index(a, LMP_NORM_Q)].dim, a->n_heads * a->head_dim);
        ck_assert_int_eq(blk->norms[lmp_norm_index(a, LMP_NORM_K)].dim, a->n_kv_heads * a->head_dim);
        goto flops;
    }
    const lmp_norm *n0 = &blk->norms[lmp_norm_index(a, LMP_NORM_ATTN)], *n1 = &blk->norms[lmp_norm_index(a, LMP_NORM_MLP)];
    if (a->shared_norm) { /* Phi-2, GPT-J, StableLM's parallel form: one norm feeds q, k, v and (gate,) up */
        ck_assert_int_eq(n0->n_fed, plain ? 4 : 5);
        ck_assert_ptr_eq(n0, n1);
        ck_assert_int_eq(blk->linears[n0->fed[3]].role, plain ? LMP_ROLE_UP : LMP_ROLE_GATE);
        if (!plain) ck_assert_int_eq(blk->linears[n0->fed[4]].role, LMP_ROLE_UP);
    } else {
        ck_assert_int_eq(n0->n_fed, 3);
        ck_assert_int_eq(n1->n_fed, plain ? 1 : 2);
        ck_assert_int_eq(blk->linears[n1->fed[0]].role, plain ? LMP_ROLE_UP : LMP_ROLE_GATE);
        if (!plain) ck_assert_int_eq(blk->linears[n1->fed[1]].role, LMP_ROLE_UP);
    }
    for (int f = 0; f < 3; f++) ck_assert_int_eq(lmp_block_plan_input_group(&p, blk->linears[n0->fed[f]].role), 0);
    for (int k = LMP_NORM_Q; k < LMP_NORM_KINDS; k++)
        if (lmp_norm_index(a, k) >= 0) ck_assert_int_eq(blk->norms[lmp_norm_index(a, k)].n_fed, 0);
flops:; /* the FLOPs, from the shapes */
    const double T = 48, d = (double)a->dim, f = (double)a->hidden, qd = (double)(a->n_heads * a->head_dim),
                 kv = (double)(a->n_kv_heads * a->head_dim);
    const double part[4] = {2 * T * d * (qd + 2 * kv) + 4 * T * T * qd, 2 * T * qd * d, 2 * T * d * f * (plain ? 1 : 2),
                            2 * T * f * d};
    double sum = 0;
    for (int g = 0; g <= 4; g++) {
        ck_assert_msg(lmp_block_flops(a, 48, g) == sum, "%s: FLOPs to group %d %.17g, the shapes say %.17g", label, g,
                      lmp_block_flops(a, 48, g), sum);
        if (g < 4) sum += part[g];
    }
    /* the features */
    ck_assert_int_eq(count_kind(&p, LMP_STEP_HEAD_NORM), a->qk_norm ? 2 : 0);
    ck_assert_int_eq(count_kind(&p, LMP_STEP_NORM), (a->no_pre_norms ? 0 : 2) + (a->post_norms ? 2 : 0));
    ck_assert_int_eq(count_kind(&p, LMP_STEP_SCALE), a->q_scale && a->q_scale != 1.0f);
    ck_assert_int_eq(count_kind(&p, LMP_STEP_ROPE), !gpt2 && !a->alibi && !a->learned_pos); /* Bloom, OPT: none */
    ck_assert_int_eq(count_kind(&p, LMP_STEP_GELU), plain);
    ck_assert_int_eq(count_kind(&p, LMP_STEP_GLU), !plain);
    for (int i = 0; i < p.n_steps; i++) {
        const lmp_block_step *s = &p.step[i];
        if (s->kind == LMP_STEP_ATTENTION) {
            ck_assert_int_eq(s->window, lmp_arch_window(a, blk->index));
            ck_assert(s->softcap == a->attn_softcap);
            ck_assert_int_eq(s->alibi, a->alibi);
        }
        if (s->kind == LMP_STEP_GLU) ck_assert_int_eq(s->gelu, a->geglu);
    }
}

START_TEST(fixture_blocks_follow_their_steps)
{
    for (int i = 0; i < N_FIXTURES; i++)
        for (int form = 0; form < 2; form++) {
            char label[96], gguf[600];
            snprintf(gguf, sizeof gguf, "%s/%s/model.gguf", FIXTURES, fixtures[i]);
            if (form && access(gguf, R_OK) != 0) continue; /* gptneox-seq, gptj: Hugging Face folders only */
            snprintf(label, sizeof label, "%s %s", fixtures[i], form ? "model.gguf" : "hf5");
            lmp_model *m = load(fixtures[i], form ? "model.gguf" : "hf5");
            for (int64_t b = 0; b < m->arch.n_layers; b++) {
                lmp_block blk;
                ck_assert_int_eq(lmp_model_block_copy(m, b, &blk), 0);
                check_block(m, &blk, label);
                lmp_block_free(&blk);
            }
            lmp_model_free(m);
        }
}
END_TEST

/* The fixtures' features reach the steps (so that the checks above see them): Gemma 2 soft-caps
 * and slides on layer 0 only, Gemma 3 has q/k and post norms, GLM-4 post norms, GPT-2 none. */
START_TEST(fixture_features_reach_the_steps)
{
    lmp_model *m = load("gemma2", "hf5");
    lmp_block_plan p0, p1;
    lmp_block_plan_make(&p0, &m->arch, 0);
    lmp_block_plan_make(&p1, &m->arch, 1);
    int64_t w0 = -1, w1 = -1;
    for (int i = 0; i < p0.n_steps; i++)
        if (p0.step[i].kind == LMP_STEP_ATTENTION) {
            w0 = p0.step[i].window;
            ck_assert(p0.step[i].softcap == 50.0f);
        }
    for (int i = 0; i < p1.n_steps; i++)
        if (p1.step[i].kind == LMP_STEP_ATTENTION) w1 = p1.step[i].window;
    ck_assert_int_eq(w0, 16);
    ck_assert_int_eq(w1, 0);
    ck_assert_int_eq(count_kind(&p0, LMP_STEP_NORM), 4);
    lmp_model_free(m);
    m = load("gemma3", "hf5");
    lmp_block_plan_make(&p0, &m->arch, 0);
    ck_assert_int_eq(count_kind(&p0, LMP_STEP_HEAD_NORM), 2);
    ck_assert_int_eq(count_kind(&p0, LMP_STEP_NORM), 4);
    lmp_model_free(m);
    m = load("gpt2", "hf5");
    lmp_block_plan_make(&p0, &m->arch, 0);
    ck_assert_int_eq(count_kind(&p0, LMP_STEP_NORM), 2);
    ck_assert_int_eq(count_kind(&p0, LMP_STEP_ROPE), 0);
    ck_assert(p0.step[0].layer_norm);
    lmp_model_free(m);
}
END_TEST

/* gpt-oss (HF and GGUF): the sinks reach the attention step as the block's last norm entry (one
 * a head, feeding no linear), the windows alternate from layer 0, the MoE step carries the
 * clamped SwiGLU and the top-k-then-softmax routing; a block whose sinks do not match its heads,
 * or which lacks them, is refused by the plan check. */
START_TEST(gpt_oss_features_reach_the_steps)
{
    for (int form = 0; form < 2; form++) {
        lmp_model *m = load("gpt_oss", form ? "model.gguf" : "hf5");
        const int k = lmp_norm_index(&m->arch, LMP_NORM_SINKS);
        ck_assert_int_eq(k, 2);
        for (int64_t b = 0; b < m->arch.n_layers; b++) {
            lmp_block_plan p;
            lmp_block_plan_make(&p, &m->arch, b);
            int seen = 0;
            for (int i = 0; i < p.n_steps; i++) {
                const lmp_block_step *s = &p.step[i];
                if (s->kind == LMP_STEP_ATTENTION) {
                    ck_assert_int_eq(s->norm, k);
                    ck_assert_int_eq(s->window, b % 2 ? 0 : 16);
                    seen++;
                }
                if (s->kind == LMP_STEP_MOE) {
                    ck_assert(s->route == LMP_ROUTE_TOPK_SOFTMAX);
                    ck_assert(fabsf(s->swiglu_alpha - 1.702f) < 1e-6f);
                    ck_assert(s->swiglu_limit == (form ? 7.0f : 1.5f)); /* llama.cpp fixes 7.0 */
                    seen++;
                }
            }
            ck_assert_int_eq(seen, 2);
            lmp_block blk;
            ck_assert_int_eq(lmp_model_block_copy(m, b, &blk), 0);
            ck_assert_int_eq(blk.norms[k].dim, m->arch.n_heads);
            ck_assert_int_eq(blk.norms[k].n_fed, 0);
            ck_assert_int_eq(lmp_block_plan_check(&p, &blk), 0);
            blk.norms[k].dim = m->arch.n_heads - 1;
            ck_assert_int_ne(lmp_block_plan_check(&p, &blk), 0);
            ck_assert_ptr_nonnull(strstr(lmp_last_error(), "attention sinks"));
            blk.norms[k].dim = m->arch.n_heads;
            blk.n_norms--; /* no sinks */
            ck_assert_int_ne(lmp_block_plan_check(&p, &blk), 0);
            blk.n_norms++;
            lmp_block_free(&blk);
        }
        lmp_model_free(m);
    }
}
END_TEST

/* lmp_block_forward_from: stopped at each group g by the observer, then resumed from g on the
 * state it left, equals the whole forward bit for bit (the walker's segments are the groups). */
typedef struct stop_at {
    int group;
    const lmp_block *blk;
    lmp_block_plan plan;
} stop_at;

static int stop_observer(void *ud, const int *lins, int n_lins, const float *x, int64_t T, int64_t C)
{
    (void)n_lins, (void)x, (void)T, (void)C;
    const stop_at *s = ud;
    return lmp_block_plan_input_group(&s->plan, s->blk->linears[lins[0]].role) == s->group ? LMP_FORWARD_STOP : 0;
}

START_TEST(resumed_passes_are_the_forward)
{
    const char *names[3] = {"gemma2", "gemma3", "glm4"};
    for (int i = 0; i < 3; i++) {
        lmp_model *m = load(names[i], "hf5");
        int64_t T;
        int32_t *tok = archfix_tokens(names[i], &T);
        const int64_t d = m->arch.dim, n = T * d;
        float *x = malloc((size_t)n * 4), *whole = malloc((size_t)n * 4), *part = malloc((size_t)n * 4);
        float *x1 = malloc((size_t)n * 4), *mid = malloc((size_t)(T * lmp_arch_mid_width(&m->arch)) * 4);
        lmp_embed(m, tok, T, x);
        for (int64_t b = 0; b < m->arch.n_layers; b++) {
            lmp_block blk;
            ck_assert_int_eq(lmp_model_block_copy(m, b, &blk), 0);
            memcpy(whole, x, (size_t)n * 4);
            ck_assert_int_eq(lmp_block_forward(&g_be, &m->arch, &blk, T, whole, NULL, NULL), 0);
            for (int g = 1; g < 4; g++) {
                const lmp_block_state st = {.x1 = x1, .mid = mid};
                stop_at s = {.group = g, .blk = &blk};
                lmp_block_plan_make(&s.plan, &m->arch, b);
                memcpy(part, x, (size_t)n * 4);
                ck_assert_int_eq(lmp_block_forward_from(&g_be, &m->arch, &blk, T, 0, part, &st, stop_observer, &s),
                                 LMP_FORWARD_STOP);
                memcpy(part, x, (size_t)n * 4);
                ck_assert_int_eq(lmp_block_forward_from(&g_be, &m->arch, &blk, T, g, part, &st, NULL, NULL), 0);
                ck_assert_msg(memcmp(part, whole, (size_t)n * 4) == 0, "%s block %lld resumed at group %d differs",
                              names[i], (long long)b, g);
            }
            memcpy(x, whole, (size_t)n * 4);
            lmp_block_free(&blk);
        }
        free(x), free(whole), free(part), free(x1), free(mid), free(tok);
        lmp_model_free(m);
    }
}
END_TEST

/* DeepSeek's blocks (multi-head latent attention, tests/fixtures/arch/deepseek_v2, deepseek_v3):
 * one MLA step from the attention norm to o's input, every latent linear in input group 0 and
 * read by that step only, the attention norm feeding q (or q_a) and kv_a, the latents' norms
 * feeding nothing (nothing may be folded into them), the layers after first_k_dense_replace
 * sparse, and a block without kv_b refused by its plan. */
START_TEST(mla_blocks_follow_their_steps)
{
    static const char *const names[2] = {"deepseek_v2", "deepseek_v3"};
    for (int f = 0; f < 2; f++) {
        lmp_model *m = load(names[f], "hf5");
        const lmp_arch *a = &m->arch;
        ck_assert(a->mla);
        const lmp_block *blocks = lmp_model_blocks(m);
        ck_assert_ptr_nonnull(blocks);
        for (int64_t b = 0; b < a->n_layers; b++) {
            const lmp_block *blk = &blocks[b];
            lmp_block_plan p;
            lmp_block_plan_make(&p, a, b);
            ck_assert_msg(lmp_block_plan_check(&p, blk) == 0, "%s block %lld: %s", names[f], (long long)b,
                          lmp_last_error());
            ck_assert_int_eq(count_kind(&p, LMP_STEP_MLA), 1);
            ck_assert_int_eq(count_kind(&p, LMP_STEP_ATTENTION) + count_kind(&p, LMP_STEP_ROPE), 0);
            ck_assert_int_eq(count_kind(&p, LMP_STEP_MOE), b >= 1); /* first_k_dense_replace 1 */
            ck_assert_int_eq(blk->n_experts, b >= 1 ? (int)a->n_experts : 0);
            ck_assert_int_eq(lmp_block_find(blk, LMP_ROLE_K), -1);
            ck_assert_int_eq(lmp_block_find(blk, LMP_ROLE_V), -1);
            const lmp_role latent[5] = {LMP_ROLE_Q, LMP_ROLE_Q_A, LMP_ROLE_Q_B, LMP_ROLE_KV_A, LMP_ROLE_KV_B};
            int n_latent = 0;
            for (int r = 0; r < 5; r++)
                if (lmp_block_find(blk, latent[r]) >= 0) {
                    n_latent++;
                    ck_assert_int_eq(lmp_block_plan_input_group(&p, latent[r]), 0);
                }
            ck_assert_int_eq(n_latent, a->mla_q_lora ? 4 : 3);
            ck_assert_int_eq(lmp_block_plan_input_group(&p, LMP_ROLE_O), 1);
            const lmp_norm *n0 = &blk->norms[lmp_norm_index(a, LMP_NORM_ATTN)];
            ck_assert_int_eq(n0->n_fed, 2);
            ck_assert_int_eq(blk->linears[n0->fed[0]].role, a->mla_q_lora ? LMP_ROLE_Q_A : LMP_ROLE_Q);
            ck_assert_int_eq(blk->linears[n0->fed[1]].role, LMP_ROLE_KV_A);
            ck_assert_int_eq(blk->n_norms, 2 + 1 + (a->mla_q_lora > 0));
            ck_assert_int_eq(blk->norms[lmp_norm_index(a, LMP_NORM_KV_A)].dim, a->mla_kv_lora);
            ck_assert_int_eq(blk->norms[lmp_norm_index(a, LMP_NORM_KV_A)].n_fed, 0);
            if (a->mla_q_lora) ck_assert_int_eq(blk->norms[lmp_norm_index(a, LMP_NORM_Q_A)].n_fed, 0);
            /* the FLOPs grow group by group; group 0 counts the latent linears and attention */
            const double T = 48, d = (double)a->dim, H = (double)a->n_heads, qk = (double)(a->mla_nope + a->mla_rope);
            const double q_in = a->mla_q_lora ? (double)a->mla_q_lora : H * qk;
            const double g0 = 2 * T * d * (q_in + (double)(a->mla_kv_lora + a->mla_rope)) +
                              2 * T * (double)a->mla_q_lora * H * qk +
                              2 * T * (double)a->mla_kv_lora * H * (double)(a->mla_nope + a->head_dim) +
                              2 * T * T * (H * qk + H * (double)a->head_dim);
            lmp_block_plan_make(&p, a, b);
            ck_assert_msg(fabs(lmp_block_plan_flops(&p, 48, 1) - g0) <= 1e-9 * g0, "%s: group 0 FLOPs %.17g, the shapes "
                          "say %.17g", names[f], lmp_block_plan_flops(&p, 48, 1), g0);
            ck_assert(lmp_block_plan_flops(&p, 48, 4) > lmp_block_plan_flops(&p, 48, 1));
            /* a block without kv_b is refused by its plan, naming what MLA needs */
            lmp_block broken;
            ck_assert_int_eq(lmp_block_clone(blk, &broken), 0);
            broken.linears[lmp_block_find(&broken, LMP_ROLE_KV_B)].role = LMP_ROLE_V;
            ck_assert_int_ne(lmp_block_plan_check(&p, &broken), 0);
            ck_assert_ptr_nonnull(strstr(lmp_last_error(), "kv_b"));
            lmp_block_free(&broken);
        }
        lmp_model_free(m);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("block_steps");
    TCase *tc = tcase_create("block_steps");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fixture_blocks_follow_their_steps);
    tcase_add_test(tc, fixture_features_reach_the_steps);
    tcase_add_test(tc, resumed_passes_are_the_forward);
    tcase_add_test(tc, mla_blocks_follow_their_steps);
    tcase_add_test(tc, gpt_oss_features_reach_the_steps);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
