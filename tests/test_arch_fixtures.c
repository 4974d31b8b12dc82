/* test_arch_fixtures.c — every architecture fixture (tests/fixtures/arch, made with PyPI
 * transformers and llama.cpp's own converter by tools/ref/arch_fixtures.py) read from each of its
 * forms: the Hugging Face folder as transformers 5 writes it (hf5/), as transformers 4 writes it
 * (hf4/), and llama.cpp's GGUF (model.gguf).
 *
 * The rule this suite holds: a form either loads and gives transformers' log-probabilities to
 * 1e-5 (max |d| / max |logprob|), or is refused with a message that names the file.  A form that
 * loads and gives other numbers fails, whatever the table below expected: a silently wrong
 * number is the one outcome never allowed.  The table says which forms lmpress reads today
 * (MATCH) and which it refuses (REFUSED, with a word the message must hold); a form that starts
 * to load is then a change to make here on purpose.
 *
 * A golden of fewer rows than the fixture's 48 tokens (phi3's logprobs_short.f64) is the model
 * run on that many first tokens alone.  A perturbation control shows that the tolerance sees a
 * 0.1 % error in one weight matrix. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/llama_logits.h"
#include "model/forward.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "base/ctx.h"
#include "plugin/registry.h"
#include "archfix.h"
#include "testutil.h"

#define TOLERANCE 1e-5

typedef enum { MATCH, REFUSED } expect;
typedef struct arch_case {
    const char *fixture, *form, *golden; /* form: hf5, hf4 or model.gguf */
    expect want;
    const char *needle;                  /* REFUSED: a word the message holds */
} arch_case;

static const arch_case cases[] = {
    {"llama3", "hf5", "logprobs.f64", MATCH, NULL},
    {"llama3", "hf4", "logprobs.f64", MATCH, NULL},
    {"llama3", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"qwen2", "hf5", "logprobs.f64", MATCH, NULL},
    {"qwen2", "hf4", "logprobs.f64", MATCH, NULL},
    {"qwen2", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"qwen2-yarn", "hf5", "logprobs.f64", MATCH, NULL},
    {"qwen2-yarn", "hf4", "logprobs.f64", MATCH, NULL},
    {"qwen2-yarn", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"qwen3", "hf5", "logprobs.f64", MATCH, NULL},
    {"qwen3", "hf4", "logprobs.f64", MATCH, NULL},
    {"qwen3", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"mistral", "hf5", "logprobs.f64", MATCH, NULL},
    {"mistral", "hf4", "logprobs.f64", MATCH, NULL},
    /* llama.cpp's converter writes no sliding window for Mistral: the GGUF means full attention */
    {"mistral", "model.gguf", "logprobs_gguf.f64", MATCH, NULL},
    {"gemma", "hf5", "logprobs.f64", MATCH, NULL},
    {"gemma", "hf4", "logprobs.f64", MATCH, NULL},
    {"gemma", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"gemma2", "hf5", "logprobs.f64", MATCH, NULL},
    {"gemma2", "hf4", "logprobs.f64", MATCH, NULL},
    {"gemma2", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"gemma3", "hf5", "logprobs.f64", MATCH, NULL},
    {"gemma3", "hf4", "logprobs.f64", MATCH, NULL},
    /* llama.cpp's converter writes no sliding pattern: llama.cpp assumes 5 local : 1 global, so
     * both layers are local (logprobs_gguf.f64) */
    {"gemma3", "model.gguf", "logprobs_gguf.f64", MATCH, NULL},
    /* LongRoPE: a window past original_max_position_embeddings (32) turns with the long factors
     * (logprobs.f64, 48 tokens), a window within it with the short ones (logprobs_short.f64, the
     * first 32 tokens alone) */
    {"phi3", "hf5", "logprobs.f64", MATCH, NULL},
    {"phi3", "hf4", "logprobs.f64", MATCH, NULL},
    {"phi3", "hf5", "logprobs_short.f64", MATCH, NULL},
    {"phi3", "hf4", "logprobs_short.f64", MATCH, NULL},
    {"phi3", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"phi3", "model.gguf", "logprobs_short.f64", MATCH, NULL},
    {"glm", "hf5", "logprobs.f64", MATCH, NULL},
    {"glm", "hf4", "logprobs.f64", MATCH, NULL},
    {"glm", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"glm4", "hf5", "logprobs.f64", MATCH, NULL},
    {"glm4", "hf4", "logprobs.f64", MATCH, NULL},
    {"glm4", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"gpt2", "hf5", "logprobs.f64", MATCH, NULL},
    {"gpt2", "hf4", "logprobs.f64", MATCH, NULL},
    {"gpt2", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"ernie4_5", "hf5", "logprobs.f64", MATCH, NULL},
    {"ernie4_5", "hf4", "logprobs.f64", MATCH, NULL},
    {"ernie4_5", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* mixtures of experts (issue 37): per-expert linears in the folders, llama.cpp's 3-D expert
     * tensors in the GGUF (Mixtral's as arch "llama" with llama.expert_count) */
    {"mixtral", "hf5", "logprobs.f64", MATCH, NULL},
    {"mixtral", "hf4", "logprobs.f64", MATCH, NULL},
    {"mixtral", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"qwen2moe", "hf5", "logprobs.f64", MATCH, NULL},
    {"qwen2moe", "hf4", "logprobs.f64", MATCH, NULL},
    {"qwen2moe", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"qwen3moe", "hf5", "logprobs.f64", MATCH, NULL},
    {"qwen3moe", "hf4", "logprobs.f64", MATCH, NULL},
    {"qwen3moe", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* a dense first layer, then a sparse one (no GGUF: llama.cpp's converter cannot write it) */
    {"qwen2moe-dense0", "hf5", "logprobs.f64", MATCH, NULL},
    {"qwen2moe-dense0", "hf4", "logprobs.f64", MATCH, NULL},
    /* the experts fused into 3-D gate_up_proj / down_proj, as transformers 5 holds them in memory
     * (the same weights as qwen3moe: its golden) */
    {"qwen3moe-fused", "hf5", "logprobs.f64", MATCH, NULL},
    /* DeepSeek-V2 / V3: multi-head latent attention (V2 without q_lora_rank, V3 with it), a dense
     * first layer, V2's softmax group_limited_greedy and V3's sigmoid noaux_tc routing with a
     * non-zero selection bias, shared experts, routed_scaling_factor; and llama.cpp's deepseek2
     * GGUF of each (attn_k_b / attn_v_b recombined into kv_b, exp_probs_b, the routing keys).  The
     * V2 GGUF means another model to llama.cpp (no group_limited_greedy, mscale = mscale_all_dim):
     * it is converted from a copy saying so, whose transformers golden is logprobs_gguf.f64. */
    {"deepseek_v2", "hf5", "logprobs.f64", MATCH, NULL},
    {"deepseek_v2", "hf4", "logprobs.f64", MATCH, NULL},
    {"deepseek_v2", "model.gguf", "logprobs_gguf.f64", MATCH, NULL},
    {"deepseek_v3", "hf5", "logprobs.f64", MATCH, NULL},
    {"deepseek_v3", "hf4", "logprobs.f64", MATCH, NULL},
    {"deepseek_v3", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* the long tail (issue 40): GPT-NeoX's parallel block (its hf4/ spells rotary_pct and
     * rotary_emb_base, as the Pythia checkpoints do; the GGUF is converted from it), and made
     * sequential; Phi-2's shared LayerNorm and head bias; GPT-J's interleaved partial RoPE (no GGUF:
     * llama.cpp's converter has no GPT-J) */
    {"gptneox", "hf5", "logprobs.f64", MATCH, NULL},
    {"gptneox", "hf4", "logprobs.f64", MATCH, NULL},
    {"gptneox", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"gptneox-seq", "hf5", "logprobs.f64", MATCH, NULL},
    {"gptneox-seq", "hf4", "logprobs.f64", MATCH, NULL},
    {"phi2", "hf5", "logprobs.f64", MATCH, NULL},
    {"phi2", "hf4", "logprobs.f64", MATCH, NULL},
    {"phi2", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"gptj", "hf5", "logprobs.f64", MATCH, NULL},
    {"gptj", "hf4", "logprobs.f64", MATCH, NULL},
    /* StableLM 2 (LayerNorms in the SwiGLU block, quarter-head RoPE, use_qkv_bias), and parallel
     * (one LayerNorm; llama.cpp: blocks without ffn_norm); OLMo's parameter-free LayerNorms */
    {"stablelm", "hf5", "logprobs.f64", MATCH, NULL},
    {"stablelm", "hf4", "logprobs.f64", MATCH, NULL},
    {"stablelm", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"stablelm-par", "hf5", "logprobs.f64", MATCH, NULL},
    {"stablelm-par", "hf4", "logprobs.f64", MATCH, NULL},
    {"stablelm-par", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"olmo", "hf5", "logprobs.f64", MATCH, NULL},
    {"olmo", "hf4", "logprobs.f64", MATCH, NULL},
    {"olmo", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* StarCoder2: LayerNorms and a gate-less tanh-GELU MLP in the RoPE block, use_bias, tied head */
    {"starcoder2", "hf5", "logprobs.f64", MATCH, NULL},
    {"starcoder2", "hf4", "logprobs.f64", MATCH, NULL},
    {"starcoder2", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* Bloom: ALiBi (no rotary positions), the embeddings' LayerNorm, q/k/v fused per head, the tanh
     * GELU, biases, tied head; the GGUF as llama.cpp's converter writes it (attn_qkv as [q; k; v],
     * token_embd_norm) */
    {"bloom", "hf5", "logprobs.f64", MATCH, NULL},
    {"bloom", "hf4", "logprobs.f64", MATCH, NULL},
    {"bloom", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* the same weights named as bigscience's files name them, saved from BloomModel without
     * "transformer." ("h.0.input_layernorm.weight") */
    {"bloom-base", "hf5", "logprobs.f64", MATCH, NULL},
    /* Falcon-7B's block (parallel, one LayerNorm, multi-query, fused [q heads, k, v]; its GGUF
     * converted from a copy saying num_kv_heads 1, see tools/ref/arch_fixtures.py), Falcon-40B's
     * (new_decoder_architecture: ln_attn and ln_mlp, 2 kv groups; GGUF attn_norm_2), and the
     * sequential block (post_attention_layernorm, q/k/v per head; llama.cpp has none) */
    {"falcon", "hf5", "logprobs.f64", MATCH, NULL},
    {"falcon", "hf4", "logprobs.f64", MATCH, NULL},
    {"falcon", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"falcon-nda", "hf5", "logprobs.f64", MATCH, NULL},
    {"falcon-nda", "hf4", "logprobs.f64", MATCH, NULL},
    {"falcon-nda", "model.gguf", "logprobs.f64", MATCH, NULL},
    {"falcon-seq", "hf5", "logprobs.f64", MATCH, NULL},
    {"falcon-seq", "hf4", "logprobs.f64", MATCH, NULL},
    /* OPT: learned positions from row 2, ReLU, LayerNorms (no GGUF: llama.cpp's converter has no OPT) */
    {"opt", "hf5", "logprobs.f64", MATCH, NULL},
    {"opt", "hf4", "logprobs.f64", MATCH, NULL},
    /* OLMo 2: no pre-norms, RMSNorms on both branches' outputs, q/k norms over all heads */
    {"olmo2", "hf5", "logprobs.f64", MATCH, NULL},
    {"olmo2", "hf4", "logprobs.f64", MATCH, NULL},
    {"olmo2", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* Cohere / Command-R: parallel block under one LayerNorm without bias, interleaved RoPE,
     * logit_scale (0.25) */
    {"cohere", "hf5", "logprobs.f64", MATCH, NULL},
    {"cohere", "hf4", "logprobs.f64", MATCH, NULL},
    {"cohere", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* ChatGLM2/3 (THUDM's ChatGLMModel, no transformers class: the golden is tools/ref/chatglm_ref.py's
     * numpy forward): Megatron's names, query_key_value as [q heads; k groups; v groups], gate and
     * up in dense_h_to_4h, rotary on half of each head in interleaved pairs, base 10000 x rope_ratio
     * (2 here); the GGUF llama.cpp's "chatglm" with attn_qkv */
    {"chatglm2", "hf", "logprobs.f64", MATCH, NULL},
    {"chatglm2", "model.gguf", "logprobs.f64", MATCH, NULL},
    /* gpt-oss: attention sinks, sliding (window 16 < T) and full layers alternating, q/k/v/o
     * biases, head_dim 32 with hidden 64, YaRN (truncate false), the router's bias, top 2 of 4
     * then softmax, fused transposed experts with gate/up interleaved and biases, the clamped
     * SwiGLU acting (limit 1.5); Hugging Face only (its GGUF is not read yet) */
    {"gpt_oss", "hf5", "logprobs.f64", MATCH, NULL},
    {"gpt_oss", "hf4", "logprobs.f64", MATCH, NULL},
    /* its GGUF as llama.cpp reads it: swiglu_limit 7.0 (no key), YaRN truncated (logprobs_gguf) */
    {"gpt_oss", "model.gguf", "logprobs_gguf.f64", MATCH, NULL},
};
enum { N_CASES = sizeof cases / sizeof *cases };

/* ---- lmpress's log-probabilities ---------------------------------------------------------- */
static float *log_probs(lmp_model *m, const lmp_block *blocks, const int32_t *tok, int64_t T)
{
    lmp_ctx ctx;
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    lmp_registry reg;
    lmp_backend be;
    ck_assert_int_eq(lmp_registry_init(&reg, &ctx, NULL, 0), 0);
    ck_assert_msg(lmp_backend_open(&ctx, &reg, "cpu", NULL, &be) == 0, "%s", lmp_last_error());
    float *out = malloc((size_t)(T * m->arch.vocab) * sizeof *out);
    ck_assert_msg(lmp_forward(&be, m, blocks, tok, T, 1, out) == 0, "%s", lmp_last_error());
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
    return out;
}

/* ---- the cases ---------------------------------------------------------------------------- */
START_TEST(each_form_matches_or_is_refused)
{
    const arch_case *c = &cases[_i];
    char path[600];
    snprintf(path, sizeof path, "%s/%s/%s", FIXTURES, c->fixture, c->form);
    lmp_model *m = NULL;
    const int st = lmp_model_load(path, &m);
    if (st) {
        const char *msg = lmp_last_error();
        printf("%-10s %-10s refused: %s\n", c->fixture, c->form, msg);
        ck_assert_msg(c->want == REFUSED, "%s: expected to load, refused: %s", path, msg);
        ck_assert_msg(strstr(msg, c->fixture) != NULL || strstr(msg, "/tests/fixtures/arch/") != NULL,
                      "%s: the refusal does not name the file: %s", path, msg);
        ck_assert_msg(strstr(msg, c->needle) != NULL, "%s: the refusal does not say \"%s\": %s", path, c->needle, msg);
        return;
    }
    int64_t T, rows;
    int32_t *tok = archfix_tokens(c->fixture, &T);
    double *gold = archfix_golden(c->fixture, c->golden, m->arch.vocab, &rows);
    /* the golden's window: all T tokens, or its first `rows` alone (phi3's short golden) */
    int64_t n = T < m->arch.seq_len ? T : m->arch.seq_len;
    if (rows < n) n = rows;
    lmp_block *blocks = lmp_model_blocks(m);
    ck_assert_msg(blocks != NULL, "%s", lmp_last_error());
    float *lp = log_probs(m, blocks, tok, n);
    const double rel = archfix_rel_diff(lp, gold, n * m->arch.vocab);
    printf("%-10s %-10s loads: %lld of %lld rows, relative difference %.2e (tolerance %g)%s\n", c->fixture, c->form,
           (long long)n, (long long)T, rel, TOLERANCE, n < T ? ", the golden's first tokens alone" : "");
    /* A form that loads must be right, whatever the table expected. */
    ck_assert_msg(rel <= TOLERANCE, "%s loads but differs from transformers: relative %g", path, rel);
    ck_assert_msg(c->want == MATCH, "%s: expected a refusal, but it loads and matches: update the table", path);
    free(lp);
    free(gold);
    free(tok);
    lmp_model_free(m);
}
END_TEST

/* ChatGLM2 against llama.cpp's own forward, a reference independent of tools/ref/chatglm_ref.py:
 * tests/fixtures/arch/chatglm2/llamacpp_logprobs.bin is what llama-perplexity (llama.cpp 0c1e570)
 * saved for model.gguf with --kl-divergence-base (-c 48 --chunks 8 -fa off -ctk f32 -ctv f32: the
 * CPU's flash attention computes in F16), 16-bit codes of the log-probabilities of each chunk's
 * second half (log p = scale q + min, min at most 16 below the largest).  lmpress, from the folder
 * and from the GGUF, runs each chunk (no BOS: the converter writes add_bos_token false) and must
 * agree on every entry above the clamp within the code's step plus 1e-4 (the reference does:
 * max 1.24e-4 against a step of 2.44e-4). */
START_TEST(chatglm2_matches_llama_cpp)
{
    static const char *const forms[] = {"hf", "model.gguf"};
    char path[600];
    snprintf(path, sizeof path, "%s/chatglm2/llamacpp_logprobs.bin", FIXTURES);
    lmp_llama_logits f;
    ck_assert_msg(lmp_llama_logits_open(path, &f) == 0, "%s", lmp_last_error());
    for (int k = 0; k < 2; k++) {
        char mp[600];
        snprintf(mp, sizeof mp, "%s/chatglm2/%s", FIXTURES, forms[k]);
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(mp, &m) == 0, "%s", lmp_last_error());
        ck_assert_int_eq(f.n_vocab, m->arch.vocab);
        lmp_block *blocks = lmp_model_blocks(m);
        ck_assert_ptr_nonnull(blocks);
        float *base = malloc((size_t)(f.rows * f.n_vocab) * sizeof *base);
        double worst = 0, step = 0;
        int64_t entries = 0;
        for (int64_t c = 0; c < f.n_chunk; c++) {
            ck_assert_msg(lmp_llama_logits_chunk(&f, c, base) == 0, "%s", lmp_last_error());
            float *lp = log_probs(m, blocks, f.tokens + c * f.n_ctx, f.n_ctx);
            for (int64_t r = 0; r < f.rows; r++) {
                const float *b = base + r * f.n_vocab, *got = lp + (f.n_ctx / 2 + r) * f.n_vocab;
                float lo = b[0], hi = b[0];
                for (int64_t v = 1; v < f.n_vocab; v++) lo = b[v] < lo ? b[v] : lo, hi = b[v] > hi ? b[v] : hi;
                const double row_step = (hi - lo) / 65535.0;
                for (int64_t v = 0; v < f.n_vocab; v++) {
                    if (b[v] <= lo) continue; /* at the clamp */
                    const double d = fabs((double)got[v] - (double)b[v]);
                    entries++;
                    if (d > worst) worst = d, step = row_step;
                }
            }
            free(lp);
        }
        printf("chatglm2 %-10s against llama.cpp's log-probs: %lld entries, max |d| %.3e (the code's step there %.2e)\n",
               forms[k], (long long)entries, worst, step);
        ck_assert_msg(entries > 0 && worst <= step + 1e-4, "%s: %g from llama.cpp's log-probs", mp, worst);
        free(base);
        lmp_model_free(m);
    }
    lmp_llama_logits_close(&f);
}
END_TEST

/* The control: a 0.1 % error in one matrix (block 0's q, each weight times 1 + 1e-3 u, u uniform
 * in [-sqrt 3, sqrt 3]) must move the log-probabilities by more than the tolerance. */
START_TEST(tolerance_sees_a_small_weight_error)
{
    char path[600];
    snprintf(path, sizeof path, "%s/llama3/hf5", FIXTURES);
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
    int64_t T, rows;
    int32_t *tok = archfix_tokens("llama3", &T);
    double *gold = archfix_golden("llama3", "logprobs.f64", m->arch.vocab, &rows);
    lmp_block *blocks = lmp_model_blocks(m);
    ck_assert_ptr_nonnull(blocks);
    lmp_linear *q = &blocks[0].linears[lmp_block_find(&blocks[0], LMP_ROLE_Q)];
    uint64_t s = 12345;
    for (int64_t i = 0; i < q->out * q->in; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = ((double)(s >> 11) / 9007199254740992.0 * 2 - 1) * sqrt(3.0);
        q->w[i] = (float)(q->w[i] * (1 + 1e-3 * u));
    }
    float *lp = log_probs(m, blocks, tok, T);
    const double rel = archfix_rel_diff(lp, gold, T * m->arch.vocab);
    printf("control: block 0's q with a 0.1 %% error: relative difference %.2e (tolerance %g)\n", rel, TOLERANCE);
    ck_assert_msg(rel > TOLERANCE, "a 0.1 %% weight error gives only %g: the tolerance cannot see it", rel);
    free(lp);
    free(gold);
    free(tok);
    lmp_model_free(m);
}
END_TEST

/* The same control on a mixture of experts: a 0.1 % error in one routed expert's down (block 0,
 * expert 1 of Mixtral's 4), which only the tokens routed to it see, or in the router.  (Either
 * also flips a near tie of the router's top 2 for a token of the fixture, which then moves its
 * log-probabilities by far more than the weight error itself.) */
START_TEST(tolerance_sees_a_small_expert_error)
{
    char path[600];
    snprintf(path, sizeof path, "%s/mixtral/model.gguf", FIXTURES);
    for (int which = 0; which < 2; which++) {
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
        int64_t T, rows;
        int32_t *tok = archfix_tokens("mixtral", &T);
        double *gold = archfix_golden("mixtral", "logprobs.f64", m->arch.vocab, &rows);
        lmp_block *blocks = lmp_model_blocks(m);
        ck_assert_ptr_nonnull(blocks);
        const int li = which ? lmp_block_find(&blocks[0], LMP_ROLE_ROUTER)
                             : lmp_block_find_expert(&blocks[0], LMP_ROLE_DOWN, LMP_EXPERT_ROUTED, 1);
        ck_assert_int_ge(li, 0);
        lmp_linear *l = &blocks[0].linears[li];
        float *lp = log_probs(m, blocks, tok, T);
        const double exact = archfix_rel_diff(lp, gold, T * m->arch.vocab);
        free(lp);
        uint64_t s = 12345;
        for (int64_t i = 0; i < l->out * l->in; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const double u = ((double)(s >> 11) / 9007199254740992.0 * 2 - 1) * sqrt(3.0);
            l->w[i] = (float)(l->w[i] * (1 + 1e-3 * u));
        }
        lp = log_probs(m, blocks, tok, T);
        const double rel = archfix_rel_diff(lp, gold, T * m->arch.vocab);
        printf("control: %s with a 0.1 %% error: relative difference %.2e (unperturbed %.2e, tolerance %g)\n", l->name,
               rel, exact, TOLERANCE);
        ck_assert(exact <= TOLERANCE);
        ck_assert_msg(rel > TOLERANCE, "a 0.1 %% error in %s gives only %g: the tolerance cannot see it", l->name, rel);
        free(lp);
        free(gold);
        free(tok);
        lmp_model_free(m);
    }
}
END_TEST

/* Every mixture of experts of issue 37 is read from llama.cpp's GGUF too: deepseek2 (DeepSeek-V2
 * and V3, told apart by expert_gating_func) and gpt-oss are no longer refused by name. */
START_TEST(moe_gguf_architectures_are_read)
{
    static const char *const archs[2] = {"deepseek2", "gpt-oss"};
    for (int i = 0; i < 2; i++) {
        ck_assert_ptr_nonnull(lmp_arch_by_gguf(archs[i], strlen(archs[i])));
        ck_assert_ptr_null(lmp_arch_refused_gguf(archs[i], strlen(archs[i])));
    }
    ck_assert_ptr_nonnull(lmp_arch_by_hf_class("GptOssForCausalLM"));
    ck_assert_ptr_null(lmp_arch_refused_hf("GptOssForCausalLM"));
    /* V3's GGUF reads as DeepSeek-V3 (sigmoid gating), V2's as DeepSeek-V2 */
    const char *fix[2] = {"deepseek_v2", "deepseek_v3"}, *cls[2] = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s/model.gguf", FIXTURES, fix[i]);
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
        ck_assert_str_eq(m->arch.desc->hf_class, cls[i]);
        ck_assert_int_eq(m->arch.mla, 1);
        ck_assert_int_eq(m->arch.dense_layer[0], 1);
        ck_assert_int_eq(m->arch.dense_layer[1], 0);
        lmp_model_free(m);
    }
}
END_TEST

/* The fixture's model.gguf with one mutation by the PyPI gguf package (tools/ref/gguf_mutate.py),
 * written as dir/m<c>.gguf (its path in out) and loaded: lmp_model_load's status. */
static int load_mutated(const char *dir, size_t c, const char *fixture, const char *mutation, char *out, size_t n,
                        lmp_model **m)
{
    char cmd[2048];
    snprintf(out, n, "%s/m%zu.gguf", dir, c);
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s/tools/ref/gguf_mutate.py' '%s/%s/model.gguf' '%s' '%s'",
             LMP_TEST_PYDEPS, lmp_test_python(), LMP_SOURCE_DIR, FIXTURES, fixture, out, mutation);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    *m = NULL;
    const int st = lmp_model_load(out, m);
    printf("%s gguf + %-40s %s\n", fixture, mutation, st ? lmp_last_error() : "loads");
    return st;
}

/* A mutated file's load (status st) was refused, naming needle and the file. */
static void expect_refused(int st, const char *mutation, const char *needle, const char *out)
{
    ck_assert_msg(st != 0, "%s: loaded", mutation);
    ck_assert_msg(strstr(lmp_last_error(), needle) && strstr(lmp_last_error(), out),
                  "%s: the refusal does not say \"%s\" and the file: %s", mutation, needle, lmp_last_error());
}

/* What llama.cpp's deepseek2 can say and lmpress's DeepSeek routings do not compute, added to the
 * fixtures' GGUFs by the PyPI gguf package (tools/ref/gguf_mutate.py): refused by name. */
START_TEST(deepseek2_gguf_keys_not_implemented_are_refused)
{
    if (!lmp_test_have_gguf("deepseek2_gguf_keys_not_implemented_are_refused")) return;
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "arch-ds2");
    const struct { const char *fixture, *mutation, *needle; } cases[] = {
        {"deepseek_v2", "key:deepseek2.expert_group_count=3", "expert_group_count 3 with softmax gating"},
        {"deepseek_v2", "key:deepseek2.expert_gating_func=3", "expert_gating_func = 3 is not supported"},
        {"deepseek_v2", "tensor:blk.1.exp_probs_b.bias=6x1", "with softmax gating is not supported"},
        {"deepseek_v3", "key:deepseek2.expert_group_used_count=4", "expert_group_used_count 4"},
        {"deepseek_v3", "tensor:blk.0.attn_q_a.bias=24x1", "tensor 'blk.0.attn_q_a.bias' is not read"},
        {"deepseek_v3", "key:deepseek2.attention.temperature_scale=2", "temperature_scale' is not read"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char out[128];
        lmp_model *m;
        const int st = load_mutated(dir, c, cases[c].fixture, cases[c].mutation, out, sizeof out, &m);
        expect_refused(st, cases[c].mutation, cases[c].needle, out);
        unlink(out);
    }
    rmdir(dir);
}
END_TEST

/* The gpt-oss fixture's controls: its attention sinks, set to -inf (no sink), and its clamped
 * SwiGLU, unclamped (limit 1e30), each move the log-probabilities by more than the tolerance,
 * so the match above needs both. */
START_TEST(gpt_oss_sinks_and_clamps_matter)
{
    char path[600];
    snprintf(path, sizeof path, "%s/gpt_oss/hf5", FIXTURES);
    for (int which = 0; which < 2; which++) {
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
        int64_t T, rows;
        int32_t *tok = archfix_tokens("gpt_oss", &T);
        double *gold = archfix_golden("gpt_oss", "logprobs.f64", m->arch.vocab, &rows);
        lmp_block *blocks = lmp_model_blocks(m);
        ck_assert_ptr_nonnull(blocks);
        if (which == 0) {
            const int k = lmp_norm_index(&m->arch, LMP_NORM_SINKS);
            ck_assert_int_ge(k, 0);
            for (int64_t l = 0; l < m->arch.n_layers; l++)
                for (int64_t h = 0; h < blocks[l].norms[k].dim; h++) blocks[l].norms[k].w[h] = -INFINITY;
        } else {
            m->arch.swiglu_limit = 1e30f;
        }
        float *lp = log_probs(m, blocks, tok, T);
        const double rel = archfix_rel_diff(lp, gold, T * m->arch.vocab);
        printf("control: gpt_oss %s: relative difference %.2e (tolerance %g)\n",
               which ? "without the SwiGLU clamps" : "without sinks", rel, TOLERANCE);
        ck_assert_msg(rel > TOLERANCE, "gpt_oss %s still matches (%g)", which ? "unclamped" : "without sinks", rel);
        free(lp);
        free(gold);
        free(tok);
        lmp_model_free(m);
    }
}
END_TEST

/* What DeepSeek's config.json can say that lmpress does not implement is refused by its key:
 * the fixture's config with one value changed, its weights linked. */
START_TEST(deepseek_config_keys_not_implemented_are_refused)
{
    static const struct {
        const char *fixture, *from, *to, *needle;
    } cases[] = {
        {"deepseek_v3", "\"rope_interleave\": true", "\"rope_interleave\": false", "rope_interleave"},
        {"deepseek_v3", "\"n_group\": 4", "\"n_group\": 4, \"topk_method\": \"greedy\"", "topk_method"},
        {"deepseek_v3", "\"n_group\": 4", "\"n_group\": 4, \"scoring_func\": \"softmax\"", "scoring_func"},
        {"deepseek_v3", "\"n_group\": 4", "\"n_group\": 4, \"moe_layer_freq\": 2", "moe_layer_freq"},
        {"deepseek_v3", "\"rope_type\": \"default\"", "\"rope_type\": \"linear\", \"factor\": 2.0", "RoPE type"},
        {"deepseek_v3", "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 2", "num_key_value_heads"},
        {"deepseek_v2", "\"norm_topk_prob\": false", "\"norm_topk_prob\": true", "norm_topk_prob"},
        {"deepseek_v2", "\"topk_method\": \"group_limited_greedy\"", "\"topk_method\": \"noaux_tc\"",
         "topk_method"},
        {"deepseek_v2", "\"n_group\": 3", "\"n_group\": 3, \"some_new_key\": 1", "some_new_key"},
        /* gpt-oss: the Hub's MXFP4 experts, and transformers' defaults that are not assumed */
        {"gpt_oss", "\"swiglu_limit\": 1.5,", "\"swiglu_limit\": 1.5, \"quantization_config\": {\"quant_method\": \"mxfp4\"},",
         "mxfp4"},
        {"gpt_oss", "\"sliding_window\": 16,", "", "sliding_window"},
        {"gpt_oss", "\"num_experts_per_tok\": 2,", "\"num_experts_per_tok\": 5,", "num_experts_per_tok"},
        {"gpt_oss", "\"num_experts_per_tok\": 2,", "\"num_experts_per_tok\": 2, \"experts_per_token\": 3,",
         "experts_per_token"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char dir[64], src[512], dst[600], *text = NULL;
        lmp_test_tmpdir(dir, sizeof dir, "arch-deepseek-keys");
        snprintf(src, sizeof src, "%s/%s/hf5/config.json", LMP_SOURCE_DIR "/tests/fixtures/arch", cases[c].fixture);
        FILE *f = fopen(src, "rb");
        ck_assert_ptr_nonnull(f);
        text = calloc(1, 1 << 16);
        const size_t n = fread(text, 1, (1 << 16) - 1, f);
        fclose(f);
        ck_assert_int_gt(n, 0);
        char *at = strstr(text, cases[c].from);
        ck_assert_msg(at != NULL, "%s: no %s in its config.json", cases[c].fixture, cases[c].from);
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        f = fopen(dst, "wb");
        ck_assert_ptr_nonnull(f);
        fwrite(text, 1, (size_t)(at - text), f);
        fputs(cases[c].to, f);
        fputs(at + strlen(cases[c].from), f);
        fclose(f);
        snprintf(src, sizeof src, "%s/%s/hf5/model.safetensors", LMP_SOURCE_DIR "/tests/fixtures/arch",
                 cases[c].fixture);
        snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
        ck_assert_int_eq(symlink(src, dst), 0);
        lmp_model *m = NULL;
        const int st = lmp_model_load(dir, &m);
        printf("%s with %s: %s\n", cases[c].fixture, cases[c].to, st ? lmp_last_error() : "LOADED");
        ck_assert_msg(st != 0, "%s: %s loads", cases[c].fixture, cases[c].to);
        ck_assert_msg(strstr(lmp_last_error(), cases[c].needle) && strstr(lmp_last_error(), "config.json"),
                      "%s", lmp_last_error());
        unlink(dst);
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        unlink(dst);
        rmdir(dir);
        free(text);
    }
}
END_TEST

/* The long tail's config.json keys that change the forward and that lmpress does not run are
 * refused by name (issue 40): Phi-2's qk_layernorm true, OLMo's clip_qkv, two spellings of one
 * GPT-NeoX setting that differ (transformers 4.57 writes both rotary_pct and
 * partial_rotary_factor), and a Llama key a GPT-NeoX class would not read (rms_norm_eps beside
 * none of its own).  The control, the file rewritten unchanged beside the same weights, loads. */
START_TEST(long_tail_config_keys_are_refused_by_name)
{
    static const struct {
        const char *fixture, *form, *from, *to, *needle; /* from NULL: insert `to` after the opening brace */
    } cases[] = {
        {"phi2", "hf5", "\"qk_layernorm\": false", "\"qk_layernorm\": true", "qk_layernorm"},
        {"olmo", "hf5", "\"clip_qkv\": null", "\"clip_qkv\": 8.0", "clip_qkv"},
        {"gptneox", "hf4", "\"rotary_pct\": 0.25", "\"rotary_pct\": 0.5", "differ"},
        {"gptneox", "hf5", NULL, "\"rms_norm_eps\": 1e-06, ", "rms_norm_eps"},
        {"gptneox", "hf5", "\"use_parallel_residual\": true", "\"use_parallel_residual\": true", NULL},
        /* Bloom's and Falcon's residual after the norm, Falcon-RW's ALiBi, OPT's post-norm (opt-350m)
         * and projected embeddings */
        {"bloom", "hf5", "\"apply_residual_connection_post_layernorm\": false",
         "\"apply_residual_connection_post_layernorm\": true", "apply_residual_connection_post_layernorm"},
        {"falcon", "hf5", "\"alibi\": false", "\"alibi\": true", "alibi"},
        {"opt", "hf5", "\"do_layer_norm_before\": true", "\"do_layer_norm_before\": false", "do_layer_norm_before"},
        {"opt", "hf5", "\"word_embed_proj_dim\": 64", "\"word_embed_proj_dim\": 32", "project_in"},
        {"opt", "hf5", "\"_remove_final_layer_norm\": false", "\"_remove_final_layer_norm\": true",
         "_remove_final_layer_norm"},
        /* ChatGLM2/3: its remote code's switches lmpress does not run, and a Llama key it never reads */
        {"chatglm2", "hf", "\"multi_query_attention\": true", "\"multi_query_attention\": false",
         "multi_query_attention"},
        {"chatglm2", "hf", "\"rmsnorm\": true", "\"rmsnorm\": false", "rmsnorm"},
        {"chatglm2", "hf", "\"add_bias_linear\": false", "\"add_bias_linear\": true", "add_bias_linear"},
        {"chatglm2", "hf", "\"post_layer_norm\": true", "\"post_layer_norm\": false", "post_layer_norm"},
        {"chatglm2", "hf", "\"apply_residual_connection_post_layernorm\": false",
         "\"apply_residual_connection_post_layernorm\": true", "apply_residual_connection_post_layernorm"},
        {"chatglm2", "hf", NULL, "\"pre_seq_len\": 16, ", "pre_seq_len"},
        {"chatglm2", "hf", NULL, "\"quantization_bit\": 4, ", "quantization_bit"},
        {"chatglm2", "hf", NULL, "\"rope_theta\": 500000.0, ", "rope_theta"},
        {"chatglm2", "hf", "\"padded_vocab_size\": 320", "\"padded_vocab_size\": 384", "differ"},
        {"chatglm2", "hf", "\"rope_ratio\": 2.0", "\"rope_ratio\": 2.0", NULL},
        {"falcon", "hf5", "\"alibi\": false", "\"alibi\": false", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char dir[64], src[512], path[600], st[600];
        lmp_test_tmpdir(dir, sizeof dir, "arch-long-tail");
        snprintf(src, sizeof src, "%s/%s/%s", FIXTURES, cases[i].fixture, cases[i].form);
        snprintf(path, sizeof path, "%s/config.json", src);
        size_t len;
        char *text = (char *)lmp_test_slurp(path, &len);
        const char *at = cases[i].from ? strstr(text, cases[i].from) : strchr(text, '{') + 1;
        ck_assert_msg(at != NULL, "%s: no %s", path, cases[i].from);
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "%.*s%s%s", (int)(at - text), text, cases[i].to, at + (cases[i].from ? strlen(cases[i].from) : 0));
        fclose(f);
        free(text);
        snprintf(st, sizeof st, "%s/model.safetensors", dir);
        snprintf(path, sizeof path, "%s/model.safetensors", src);
        ck_assert_int_eq(symlink(path, st), 0);
        lmp_model *m = NULL;
        const int rc = lmp_model_load(dir, &m);
        if (cases[i].needle) {
            ck_assert_msg(rc != 0, "%s/%s with %s loaded", cases[i].fixture, cases[i].form, cases[i].to);
            printf("%s/%s with %s: %s\n", cases[i].fixture, cases[i].form, cases[i].to, lmp_last_error());
            ck_assert_msg(strstr(lmp_last_error(), cases[i].needle) && strstr(lmp_last_error(), "config.json"), "%s",
                          lmp_last_error());
        } else {
            ck_assert_msg(rc == 0, "control: %s", lmp_last_error());
            lmp_model_free(m);
        }
        unlink(st);
        snprintf(path, sizeof path, "%s/config.json", dir);
        unlink(path);
        rmdir(dir);
    }
}
END_TEST

/* What a real GGUF can hold that changes the numbers, added to the llama3 fixture's file by the
 * PyPI gguf package (tools/ref/gguf_mutate.py): each is refused, naming it.  The control, a
 * harmless general.* key, loads and still matches transformers, so the copy itself is faithful. */
START_TEST(gguf_additions_are_refused)
{
    if (!lmp_test_have_gguf("gguf_additions_are_refused")) return;
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "arch-gguf");
    const struct { const char *mutation, *needle; } cases[] = {
        {"key:general.note=1", NULL},
        {"key:llama.attention.scale_hint=3", "metadata 'llama.attention.scale_hint' is not read"},
        /* a "llama" file with experts reads as Mixtral, which needs the rest of the experts' keys */
        {"key:llama.expert_count=8", "metadata 'llama.expert_used_count' is missing"},
        {"key:adapter.lora.alpha=16", "metadata 'adapter.lora.alpha' is not read"},
        {"tensor:blk.0.attn_q_norm.weight=16x1", "tensor 'blk.0.attn_q_norm.weight' is not read"},
        {"tensor:blk.1.ffn_gate_exps.weight=8x64", "tensor 'blk.1.ffn_gate_exps.weight' is not read"},
        /* llama.cpp scales cos and sin by it; 1 (the control above's default) is what lmpress runs */
        {"key:llama.rope.scaling.attn_factor=2", "llama.rope.scaling.attn_factor 2 is not supported"},
        {"key:llama.rope.scaling.attn_factor=1", NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char out[128];
        lmp_model *m;
        const int st = load_mutated(dir, c, "llama3", cases[c].mutation, out, sizeof out, &m);
        if (!cases[c].needle) {
            ck_assert_msg(st == 0, "%s: %s", cases[c].mutation, lmp_last_error());
            int64_t T, rows;
            int32_t *tok = archfix_tokens("llama3", &T);
            double *gold = archfix_golden("llama3", "logprobs.f64", m->arch.vocab, &rows);
            lmp_block *blocks = lmp_model_blocks(m);
            ck_assert_ptr_nonnull(blocks);
            float *lp = log_probs(m, blocks, tok, T);
            ck_assert(archfix_rel_diff(lp, gold, T * m->arch.vocab) <= TOLERANCE);
            free(lp);
            free(gold);
            free(tok);
            lmp_model_free(m);
        } else {
            expect_refused(st, cases[c].mutation, cases[c].needle, out);
        }
        unlink(out);
    }
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arch_fixtures");
    TCase *tc = tcase_create("forms");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, each_form_matches_or_is_refused, 0, N_CASES);
    tcase_add_test(tc, tolerance_sees_a_small_weight_error);
    tcase_add_test(tc, tolerance_sees_a_small_expert_error);
    tcase_add_test(tc, moe_gguf_architectures_are_read);
    tcase_add_test(tc, deepseek2_gguf_keys_not_implemented_are_refused);
    tcase_add_test(tc, gpt_oss_sinks_and_clamps_matter);
    tcase_add_test(tc, deepseek_config_keys_not_implemented_are_refused);
    tcase_add_test(tc, gguf_additions_are_refused);
    tcase_add_test(tc, long_tail_config_keys_are_refused_by_name);
    tcase_add_test(tc, chatglm2_matches_llama_cpp);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
