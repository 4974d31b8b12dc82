/* test_export_arch.c — each architecture's fixture (tests/fixtures/arch: tiny random checkpoints
 * made with PyPI transformers, and llama.cpp's own GGUF conversions) exported by lmpress to GGUF
 * and to a Hugging Face folder, and each export read back.
 *
 * The rule, as in test_arch_fixtures.c: an export either is written and reads back (by lmpress)
 * to transformers' log-probabilities within 1e-5 (max |d| / max |logprob|), or is refused with a
 * message naming the model and what cannot be written.  Each export is also held against the
 * format's own reference, by tools/ref/arch_export_check.py: a GGUF, read with the PyPI gguf
 * package (llama.cpp's gguf-py), must have llama.cpp's architecture, keys and tensor names and
 * the very tensors llama.cpp's converter wrote for the same model (q/k rows in the architecture's
 * order, Gemma's 1 + w norms, rope_freqs); a Hugging Face folder must have transformers' class,
 * model_type and config, and the tensors of the folder transformers saved (Gemma's w, q/k norms
 * in rotate-half order).  Without gguf in build/pydeps (tools/test.sh) those GGUF checks print
 * SKIPPED; the Hugging Face ones need only numpy.
 *
 * Compressed variants (RTN on Q8_0 blocks for GGUF, 4-bit groups of 32 for compressed-tensors'
 * pack-quantized) of Llama 3, Qwen3 and Gemma, and of Phi-3 (4-bit groups, 8-bit asymmetric
 * channels) in its fused modules, are exported and read back: lmpress's log-probs of
 * the file equal those of the variant it evaluated, and every dequantized weight lies within
 * 0.6 of a grid step of the reference's (a wrong row order or norm offset cannot).
 *
 * Every family's GPTQ W4 and SmoothQuant W8A8 variants go to both formats too
 * (variants_of_each_architecture_export, below: what GGUF holds of each, and how it is checked);
 * what a format cannot say of an architecture is refused by name, and `compare --output-dir`
 * refuses it before any variant runs.
 *
 * With LMP_TRANSFORMERS_PYTHON naming a Python with torch and transformers (not needed in CI; e.g.
 * build/arch-venv/bin/python from tools/ref/arch_fixtures.sh), each unmodified Hugging Face export
 * is also loaded by transformers and its log-probs compared with the golden file
 * (tools/ref/arch_export_tf_check.py); otherwise that part prints SKIPPED. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "export/export.h"
#include "model/block_source.h"
#include "model/forward.h"
#include "model/model.h"
#include "teststage.h"
#include "archfix.h"
#include "testutil.h"

#define CHECK LMP_SOURCE_DIR "/tools/ref/arch_export_check.py"
#define TF_CHECK LMP_SOURCE_DIR "/tools/ref/arch_export_tf_check.py"
#define CT_CHECK LMP_SOURCE_DIR "/tools/ref/arch_export_ct_check.py"
#define TOLERANCE 1e-5

typedef enum { MATCH, REFUSED } expect;
typedef struct export_case {
    const char *fixture, *form;  /* the source: hf5 or model.gguf */
    const char *out;             /* "gguf" or "hf" */
    const char *golden;          /* what the export must give */
    expect want;
    const char *needle;          /* REFUSED: a word the message holds */
    const char *check_args;      /* more arguments for arch_export_check.py */
} export_case;

/* The vocabulary of a SentencePiece family's hf5/ is its tokenizer.model, which lmpress does not
 * read: a GGUF export of it takes the vocabulary llama.cpp's converter made from it (model.gguf),
 * as `--tokenizer` would give it. */
static const char *gguf_tokenizer(const char *fixture, const char *form, char *buf, size_t n)
{
    static const char *const sentencepiece[] = {"gemma", "gemma2", "gemma3", "mistral", "phi3", "ernie4_5"};
    int sp = 0;
    for (size_t i = 0; i < sizeof sentencepiece / sizeof *sentencepiece; i++) sp |= !strcmp(fixture, sentencepiece[i]);
    if (strcmp(form, "hf5") || !sp) return NULL;
    snprintf(buf, n, "%s/%s/model.gguf", FIXTURES, fixture);
    return buf;
}

static const export_case cases[] = {
    {"llama3", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"llama3", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"llama3", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    /* llama3's factor, low/high_freq_factor and original context are not in a GGUF */
    {"llama3", "model.gguf", "hf", "logprobs.f64", REFUSED, "llama3", ""},
    {"qwen2", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2", "model.gguf", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2-yarn", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2-yarn", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2-yarn", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen2-yarn", "model.gguf", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen3", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen3", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen3", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"qwen3", "model.gguf", "hf", "logprobs.f64", MATCH, NULL, ""},
    /* lmpress caps Mistral's context at its window (16): the GGUF says so in context_length */
    /* a GGUF of llama.cpp's "llama" says no sliding window: it would mean full attention */
    {"mistral", "hf5", "gguf", "logprobs.f64", REFUSED, "sliding window of 16 positions", ""},
    {"mistral", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    /* the converter's GGUF means full attention ("llama"): a LlamaForCausalLM folder */
    {"mistral", "model.gguf", "gguf", "logprobs_gguf.f64", MATCH, NULL, ""},
    {"mistral", "model.gguf", "hf", "logprobs_gguf.f64", MATCH, NULL, "--class LlamaForCausalLM:llama"},
    {"gemma", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"gemma", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"gemma", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"gemma", "model.gguf", "hf", "logprobs.f64", MATCH, NULL, ""},
    /* Phi-3: fused qkv_proj / gate_up_proj in a folder whose config (LongRoPE) is the source's;
     * read back on the first 32 tokens alone, where LongRoPE takes the short factors */
    {"phi3", "hf5", "hf", "logprobs_short.f64", MATCH, NULL, ""},
    /* llama.cpp's phi3: attn_qkv, ffn_up of twice the width, rope_factors_short / _long; all 48
     * tokens (past original_context_length 32: the long factors) and the first 32 (the short) */
    {"phi3", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"phi3", "hf5", "gguf", "logprobs_short.f64", MATCH, NULL, ""},
    {"phi3", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    /* Gemma 2: sandwich norms, soft-caps, layer 0 sliding (llama.cpp's default pattern) */
    {"gemma2", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"gemma2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    /* Gemma 3: layer_types [sliding, full] is not llama.cpp's default (5 local : 1 global), so the
     * export says it in attention.sliding_window_pattern, which the converter's file lacks */
    {"gemma3", "hf5", "gguf", "logprobs.f64", MATCH, NULL, "--ignore gemma3.attention.sliding_window_pattern"},
    {"gemma3", "model.gguf", "gguf", "logprobs_gguf.f64", MATCH, NULL, ""},
    /* GLM: the converter writes context_length = hidden size (64) for lack of the key it looks
     * for; lmpress keeps the config's max_position_embeddings (256) */
    {"glm", "hf5", "gguf", "logprobs.f64", MATCH, NULL, "--ignore chatglm.context_length"},
    {"glm", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"glm4", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"glm4", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"ernie4_5", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"ernie4_5", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    /* Hugging Face folders of the families whose config carries their own keys: from a Hugging
     * Face source (its config.json kept), refused from a GGUF */
    {"gemma2", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"gemma2", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
    {"gemma3", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"glm", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"glm4", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"glm4", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
    {"ernie4_5", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"gpt2", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"gpt2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    /* GPT-2 as transformers' GPT2LMHeadModel (Conv1D linears, written dense), from either source */
    {"gpt2", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"gpt2", "model.gguf", "hf", "logprobs.f64", MATCH, NULL, ""},
    /* the long tail (issue 40), written from their descriptors: LayerNorms with biases, parallel
     * blocks, shared norms, gate-less MLPs, head biases, partial rotary; GPT-NeoX's per-head
     * query_key_value in the folder, llama.cpp's attn_qkv in the GGUF; OLMo's norms as no tensor */
    {"gptneox", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"gptneox", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"gptneox", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"gptneox", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
    {"gptneox-seq", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"phi2", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"phi2", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"phi2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"phi2", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
    {"gptj", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"gptj", "hf5", "gguf", "logprobs.f64", REFUSED, "llama.cpp has no architecture for", ""},
    {"stablelm", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"stablelm", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"stablelm", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"stablelm-par", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"stablelm-par", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"stablelm-par", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"olmo", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"olmo", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"olmo", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"starcoder2", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"starcoder2", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"starcoder2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    /* OLMo 2's post-norms and all-heads q/k norms; Cohere's bias-less LayerNorm and logit_scale
     * (the converter's rope.scaling.type "none" is llama.cpp's default, not written here) */
    {"olmo2", "hf5", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"olmo2", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"olmo2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"cohere", "hf5", "gguf", "logprobs.f64", MATCH, NULL, "--ignore command-r.rope.scaling.type"},
    {"cohere", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"cohere", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, "--ignore command-r.rope.scaling.type"},
    /* Bloom: ALiBi (no RoPE keys, q/k rows as stored), the embeddings' LayerNorm
     * (word_embeddings_layernorm, token_embd_norm), per-head query_key_value in the folder and
     * llama.cpp's [q; k; v] attn_qkv in the GGUF.  The converter writes context_length = hidden
     * size (64) for lack of seq_length; lmpress keeps transformers' default context (2048) */
    {"bloom", "hf5", "gguf", "logprobs.f64", MATCH, NULL, "--ignore bloom.context_length"},
    {"bloom", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"bloom", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"bloom", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
    /* OPT: learned positions (embed_positions with its 2 rows before position 0), ReLU fc1 / fc2,
     * every bias on enable_bias; llama.cpp has no OPT: its GGUF is refused by name */
    {"opt", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"opt", "hf5", "gguf", "logprobs.f64", REFUSED, "llama.cpp has no architecture for", ""},
    /* Falcon: query_key_value by kv group ([q heads of the group, k, v]: multi-query in falcon,
     * GQA in falcon-nda, one group a head in falcon-seq) in the folder, [q; k; v] ("jploski") in
     * the GGUF; falcon-nda's ln_attn / ln_mlp as attn_norm_2 / attn_norm; no RoPE keys (llama.cpp's
     * default).  The converter writes context_length 2048 whatever the config says */
    {"falcon", "hf5", "gguf", "logprobs.f64", MATCH, NULL, "--ignore falcon.context_length"},
    {"falcon", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"falcon", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"falcon", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
    {"falcon-nda", "hf5", "gguf", "logprobs.f64", MATCH, NULL, "--ignore falcon.context_length"},
    {"falcon-nda", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"falcon-nda", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"falcon-seq", "hf5", "hf", "logprobs.f64", MATCH, NULL, ""},
    /* ChatGLM2/3 (THUDM's layout, golden from tools/ref/chatglm_ref.py): query_key_value fused with
     * its bias in both formats (attn_qkv in the GGUF, read back as chatglm rather than GLM); its
     * folder from a Hugging Face source only (the config made here would not say ChatGLM's keys) */
    {"chatglm2", "hf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"chatglm2", "hf", "hf", "logprobs.f64", MATCH, NULL, ""},
    {"chatglm2", "model.gguf", "gguf", "logprobs.f64", MATCH, NULL, ""},
    {"chatglm2", "model.gguf", "hf", "logprobs.f64", REFUSED, "from a Hugging Face source only", ""},
};
enum { N_CASES = sizeof cases / sizeof *cases };

static char tmpdir[256];

static void open_fixture(void)
{
    setup();
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "export-arch");
}

static void close_fixture(void)
{
    lmp_test_rmtree(tmpdir);
    teardown();
}

/* ---- log-probabilities -------------------------------------------------------------------- */
static float *log_probs(const lmp_model *m, const lmp_block *blocks, const int32_t *tok, int64_t T)
{
    float *out = malloc((size_t)(T * m->arch.vocab) * sizeof *out);
    ck_assert_msg(lmp_forward(&be, m, blocks, tok, T, 1, out) == 0, "%s", lmp_last_error());
    return out;
}

static double rel_diff_f(const float *a, const float *ref, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= md)) md = d;
        if (fabs((double)ref[i]) > mr) mr = fabs((double)ref[i]);
    }
    return md / mr;
}

static lmp_model *load(const char *path)
{
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s: %s", path, lmp_last_error());
    return m;
}

/* The export of m's blocks from src to path. */
static int export_to(const lmp_model *m, const lmp_block_source *src, const char *path, const char *variant,
                     const char *tokenizer)
{
    lmp_export_opts o = {.path = path, .variant = variant, .pipeline = "[]",
                         .tokenizer_path = lmp_export_is_gguf(path) ? tokenizer : NULL};
    return lmp_export_model(&ctx, m, src, &o);
}

/* arch_export_check.py on an export; 0 when it says ok.  GGUF checks need gguf in build/pydeps:
 * without it, 77 (the caller prints SKIPPED). */
static int run_check(const char *kind, const char *path, const char *ref, const char *extra)
{
    if (!strcmp(kind, "gguf") && !lmp_test_have_gguf("the gguf-py check")) return 77;
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' %s '%s' '%s' %s 2>&1", LMP_TEST_PYDEPS, lmp_test_python(),
             CHECK, kind, path, ref, extra);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[2048];
    while (fgets(line, sizeof line, p)) printf("    %s", line);
    const int st = pclose(p);
    fflush(stdout);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* transformers loads an unmodified Hugging Face export and gives the golden log-probs (only with
 * LMP_TRANSFORMERS_PYTHON; CI does not need torch). */
static void transformers_check(const char *dir, const char *fixture, const char *golden, int64_t rows)
{
    const char *py = getenv("LMP_TRANSFORMERS_PYTHON");
    if (!py || !*py) {
        printf("    SKIPPED transformers check: LMP_TRANSFORMERS_PYTHON names no Python with torch and transformers\n");
        return;
    }
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s/%s' '%s' %lld 2>&1", py, TF_CHECK, dir, FIXTURES, fixture, golden,
             (long long)rows);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[2048];
    while (fgets(line, sizeof line, p)) printf("    %s", line);
    const int st = pclose(p);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: transformers does not reproduce %s", dir, golden);
}

/* transformers with compressed-tensors loads a compressed Hugging Face export and gives want[n x
 * vocab], lmpress's log-probs of the variant with its activations unquantized
 * (tools/ref/arch_export_ct_check.py; only with LMP_TRANSFORMERS_PYTHON). */
static void ct_check(const char *dir, const int32_t *tok, int64_t n, const float *want, int64_t vocab)
{
    const char *py = getenv("LMP_TRANSFORMERS_PYTHON");
    if (!py || !*py) {
        printf("    SKIPPED compressed-tensors check: LMP_TRANSFORMERS_PYTHON names no Python with torch, transformers "
               "and compressed-tensors\n");
        return;
    }
    char tok_path[700], want_path[700], cmd[3000];
    snprintf(tok_path, sizeof tok_path, "%s.tokens.txt", dir);
    snprintf(want_path, sizeof want_path, "%s.want.f32", dir);
    FILE *f = fopen(tok_path, "w");
    ck_assert_ptr_nonnull(f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%d\n", (int)tok[i]);
    fclose(f);
    f = fopen(want_path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(want, sizeof *want, (size_t)(n * vocab), f), (size_t)(n * vocab));
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' '%s' %lld 2>&1", py, CT_CHECK, dir, tok_path, want_path, (long long)n);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[2048];
    while (fgets(line, sizeof line, p)) printf("    %s", line);
    const int st = pclose(p);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: transformers + compressed-tensors do not give the "
                  "variant's log-probs", dir);
}

/* LMP_EXPORT_ARCH_ONLY=bloom,opt runs only the table cases of those fixtures (a family's cases
 * while it is being written; the full suite takes minutes with LMP_TRANSFORMERS_PYTHON). */
static int skipped(const char *fixture)
{
    const char *only = getenv("LMP_EXPORT_ARCH_ONLY");
    if (!only || !*only) return 0;
    const size_t n = strlen(fixture);
    for (const char *s = only; *s;) {
        const size_t len = strcspn(s, ",");
        if (len == n && !strncmp(s, fixture, n)) return 0;
        s += len + (s[len] == ',');
    }
    return 1;
}

/* ---- unmodified exports ------------------------------------------------------------------- */
START_TEST(each_export_matches_or_is_refused)
{
    const export_case *c = &cases[_i];
    if (skipped(c->fixture)) return;
    char src_path[600], out[600];
    snprintf(src_path, sizeof src_path, "%s/%s/%s", FIXTURES, c->fixture, c->form);
    snprintf(out, sizeof out, "%s/%s-%s.%s", tmpdir, c->fixture, strcmp(c->form, "model.gguf") ? c->form : "gguf",
             strcmp(c->out, "gguf") ? "hf" : "gguf");
    lmp_model *m = load(src_path);
    const lmp_block_source src = lmp_block_source_model(m);
    char tok_buf[600];
    const int st = export_to(m, &src, out, c->fixture, gguf_tokenizer(c->fixture, c->form, tok_buf, sizeof tok_buf));
    if (st) {
        const char *msg = lmp_last_error();
        printf("%-10s %-10s -> %-4s refused: %s\n", c->fixture, c->form, c->out, msg);
        ck_assert_msg(c->want == REFUSED, "%s -> %s: expected an export, refused: %s", src_path, c->out, msg);
        ck_assert_msg(strstr(msg, "/tests/fixtures/arch/") != NULL || strstr(msg, out) != NULL,
                      "the refusal names neither the model nor the export: %s", msg);
        ck_assert_msg(strstr(msg, c->needle) != NULL, "the refusal does not say \"%s\": %s", c->needle, msg);
        lmp_model_free(m);
        return;
    }
    ck_assert_msg(c->want == MATCH, "%s -> %s: expected a refusal (\"%s\"), but it was exported", src_path, c->out,
                  c->needle);
    /* lmpress reads the export back and gives transformers' numbers */
    lmp_model *e = load(out);
    /* (Falcon-40B's layout is falcon_nda in both formats, ChatGLM's chatglm: the loaders switch to
     * them) */
    ck_assert_str_eq(e->arch.desc->name, m->arch.desc->hf_falcon || m->arch.desc->hf_chatglm ? m->arch.desc->name : lmp_export_is_gguf(out) ? lmp_arch_by_gguf(m->arch.desc->gguf_arch,
                     strlen(m->arch.desc->gguf_arch))->name : lmp_arch_by_hf_class(
                     !strcmp(c->form, "hf5") || strcmp(m->arch.desc->name, "mistral") ? m->arch.desc->hf_class
                                                                                      : "LlamaForCausalLM")->name);
    int64_t T, rows;
    int32_t *tok = archfix_tokens(c->fixture, &T);
    double *gold = archfix_golden(c->fixture, c->golden, e->arch.vocab, &rows);
    /* all T tokens, or the golden's first `rows` alone (phi3's short golden) */
    int64_t n = T < e->arch.seq_len ? T : e->arch.seq_len;
    if (rows < n) n = rows;
    lmp_block *blocks = lmp_model_blocks(e);
    ck_assert_msg(blocks != NULL, "%s", lmp_last_error());
    float *lp = log_probs(e, blocks, tok, n);
    const double rel = archfix_rel_diff(lp, gold, n * e->arch.vocab);
    printf("%-10s %-10s -> %-4s read back: %lld of %lld rows, relative difference %.2e (tolerance %g)\n", c->fixture,
           c->form, c->out, (long long)n, (long long)T, rel, TOLERANCE);
    ck_assert_msg(rel <= TOLERANCE, "%s read back differs from transformers: relative %g", out, rel);
    /* the format's own reference: the converter's GGUF, transformers' folder */
    char ref[600];
    const int gguf = lmp_export_is_gguf(out);
    /* (a folder not written by transformers, ChatGLM's "hf", is its own reference) */
    snprintf(ref, sizeof ref, "%s/%s/%s", FIXTURES, c->fixture,
             gguf ? "model.gguf" : strcmp(c->form, "model.gguf") ? c->form : "hf5");
    const int ck = run_check(gguf ? "gguf" : "hf", out, ref, c->check_args);
    if (ck == 77) printf("    SKIPPED the gguf-py check of %s\n", out);
    else ck_assert_msg(ck == 0, "%s: arch_export_check.py finds problems (above)", out);
    if (!gguf && m->arch.desc->hf_chatglm) printf("    SKIPPED transformers check: %s has no transformers class\n",
                                                  m->arch.desc->hf_class);
    else if (!gguf) transformers_check(out, c->fixture, c->golden, n);
    free(lp);
    free(gold);
    free(tok);
    lmp_model_free(e);
    lmp_model_free(m);
}
END_TEST

/* ---- compressed variants ------------------------------------------------------------------ */
typedef struct quant_case {
    const char *fixture, *out;
    const char *settings[4];
} quant_case;

static const quant_case qcases[] = {
    {"llama3", "gguf", {"format=q8_0", NULL}},
    {"qwen3", "gguf", {"format=q8_0", NULL}},
    {"gemma", "gguf", {"format=q8_0", NULL}},
    {"llama3", "hf", {"bits=4", "granularity=group", "group_size=32", NULL}},
    {"qwen3", "hf", {"bits=4", "granularity=group", "group_size=32", NULL}},
    {"gemma", "hf", {"bits=4", "granularity=group", "group_size=32", NULL}},
    /* Phi-3's parts joined into qkv_proj / gate_up_proj, scales and codes row by row */
    {"phi3", "hf", {"bits=4", "granularity=group", "group_size=32", NULL}},
    {"phi3", "hf", {"bits=8", "granularity=channel", "sym=false", NULL}},
};
enum { N_QCASES = sizeof qcases / sizeof *qcases };

START_TEST(compressed_variant_reads_back)
{
    const quant_case *c = &qcases[_i];
    if (skipped(c->fixture)) return;
    char src_path[600], out[600];
    snprintf(src_path, sizeof src_path, "%s/%s/hf5", FIXTURES, c->fixture);
    snprintf(out, sizeof out, "%s/%s-rtn.%s", tmpdir, c->fixture, strcmp(c->out, "gguf") ? "hf" : "gguf");
    lmp_model *m = load(src_path);
    lmp_block *var = compress_stage(m, "rtn", c->settings, NULL, 0);
    lmp_block_store *store;
    const lmp_block_source src = stored_blocks(var, m->arch.n_layers, &store);
    char tok_buf[600];
    ck_assert_msg(export_to(m, &src, out, "rtn", gguf_tokenizer(c->fixture, "hf5", tok_buf, sizeof tok_buf)) == 0,
                  "%s: %s", out, lmp_last_error());
    lmp_block_store_free(store);
    int64_t T;
    int32_t *tok = archfix_tokens(c->fixture, &T);
    int64_t n = T < m->arch.seq_len ? T : m->arch.seq_len;
    if (!strcmp(c->fixture, "phi3") && n > 32) n = 32; /* its short golden, for the moved check below */
    float *want = log_probs(m, var, tok, n);
    lmp_model *e = load(out);
    printf("%-10s rtn %s -> %s: read back as %s\n", c->fixture, c->settings[0], c->out, e->format);
    lmp_block *blocks = lmp_model_blocks(e);
    ck_assert_msg(blocks != NULL, "%s", lmp_last_error());
    float *got = log_probs(e, blocks, tok, n);
    const double rel = rel_diff_f(got, want, n * m->arch.vocab);
    printf("%-10s rtn -> %-4s read back: relative difference to the variant lmpress evaluated %.2e\n", c->fixture,
           c->out, rel);
    ck_assert_msg(rel <= TOLERANCE, "%s read back differs from the variant: relative %g", out, rel);
    /* and the variant really differs from the unmodified model (the grid was written) */
    int64_t rows;
    double *gold = archfix_golden(c->fixture, strcmp(c->fixture, "phi3") ? "logprobs.f64" : "logprobs_short.f64",
                               m->arch.vocab, &rows);
    const double moved = archfix_rel_diff(got, gold, n * m->arch.vocab);
    printf("%-10s rtn -> %-4s differs from the unmodified model by %.2e\n", c->fixture, c->out, moved);
    ck_assert_msg(moved > TOLERANCE, "%s: the quantized export gives the unmodified numbers", out);
    char ref[600];
    const int gguf = lmp_export_is_gguf(out);
    snprintf(ref, sizeof ref, "%s/%s/%s", FIXTURES, c->fixture, gguf ? "model.gguf" : "hf5");
    const int ck = run_check(gguf ? "gguf" : "hf", out, ref, "--quantized");
    if (ck == 77) printf("    SKIPPED the gguf-py check of %s\n", out);
    else ck_assert_msg(ck == 0, "%s: arch_export_check.py finds problems (above)", out);
    free(gold);
    free(got);
    free(want);
    free(tok);
    lmp_blocks_free(var, m->arch.n_layers);
    lmp_model_free(e);
    lmp_model_free(m);
}
END_TEST

/* ---- GPTQ W4 and SmoothQuant W8A8 on every architecture ------------------------------------ */
/* Each architecture's GPTQ W4 and SmoothQuant W8A8 variants, exported to GGUF and to a Hugging
 * Face folder.  GGUF holds GPTQ W4 as Q4_0 (4-bit blocks of 32 with an f16 scale) and W8A8 as
 * SmoothQuant's smoothing folded into the norms with the weights on Q8_0 blocks: GGUF has no
 * activation quantization (llama.cpp quantizes activations itself for its dot products), so the
 * file is held against the variant with its activations unquantized.  The Hugging Face folder
 * holds both exactly (compressed-tensors pack-quantized int4 groups of 32; int-quantized int8
 * channels with dynamic per-token int8 activations).
 *
 * Each export is read back by lmpress (log-probs equal to the variant's within 1e-5, and apart
 * from the unmodified model's), and by the format's own reader: gguf-py's dequantization (or
 * compressed-tensors' layout unpacked with numpy) of every quantized tensor must equal the same
 * variant exported with F32 weights (arch_export_check.py --exact), whose names, keys and
 * layout the unmodified cases above hold against llama.cpp's converter and transformers. */
typedef enum { V_GPTQ_W4, V_SQ_W8A8 } variant_kind;
typedef struct variant_case {
    const char *fixture, *form, *out;
    variant_kind kind;
} variant_case;

static const variant_case vcases[] = {
#define BOTH(fx, form_gguf, form_hf)                                                                            \
    {fx, form_gguf, "gguf", V_GPTQ_W4}, {fx, form_gguf, "gguf", V_SQ_W8A8}, {fx, form_hf, "hf", V_GPTQ_W4},     \
    {fx, form_hf, "hf", V_SQ_W8A8}
    BOTH("llama3", "hf5", "hf5"), BOTH("qwen2", "hf5", "hf5"), BOTH("qwen2-yarn", "hf5", "hf5"),
    BOTH("qwen3", "hf5", "hf5"), BOTH("gemma", "hf5", "hf5"), BOTH("gemma2", "hf5", "hf5"),
    BOTH("gemma3", "hf5", "hf5"), BOTH("phi3", "hf5", "hf5"), BOTH("glm", "hf5", "hf5"), BOTH("glm4", "hf5", "hf5"),
    BOTH("ernie4_5", "hf5", "hf5"),
    /* Mistral's window: GGUF from the converter's file (full attention, llama.cpp's llama) */
    BOTH("mistral", "model.gguf", "hf5"),
    /* GPT-2: its Hugging Face folder holds the quantized weights dense, activations unquantized */
    BOTH("gpt2", "hf5", "hf5"),
    /* the long tail (issue 40): SmoothQuant folds into their LayerNorms' weights and biases (one
     * shared norm for attention and the MLP in Phi-2, GPT-J and StableLM's parallel block) */
    BOTH("gptneox", "hf5", "hf5"), BOTH("gptneox-seq", "hf5", "hf5"), BOTH("phi2", "hf5", "hf5"),
    BOTH("stablelm", "hf5", "hf5"), BOTH("stablelm-par", "hf5", "hf5"), BOTH("starcoder2", "hf5", "hf5"),
    /* GPT-J: no GGUF (llama.cpp has no GPT-J) */
    {"gptj", "hf5", "hf", V_GPTQ_W4}, {"gptj", "hf5", "hf", V_SQ_W8A8},
    /* OLMo: GPTQ only; its norms have no parameters to fold SmoothQuant into
     * (olmo_smoothquant_is_refused) */
    {"olmo", "hf5", "gguf", V_GPTQ_W4}, {"olmo", "hf5", "hf", V_GPTQ_W4},
    /* OLMo 2: GPTQ only (SmoothQuant refuses its norm-less inputs: test_arch_compress.c) */
    {"olmo2", "hf5", "gguf", V_GPTQ_W4}, {"olmo2", "hf5", "hf", V_GPTQ_W4}, BOTH("cohere", "hf5", "hf5"),
    /* Bloom: SmoothQuant folds into its LayerNorms (the embeddings' one is left as it is) */
    BOTH("bloom", "hf5", "hf5"),
    /* OPT: no GGUF (llama.cpp has no OPT) */
    {"opt", "hf5", "hf", V_GPTQ_W4}, {"opt", "hf5", "hf", V_SQ_W8A8},
    /* Falcon: SmoothQuant folds into the one norm before both branches (falcon), or each branch's
     * (falcon-nda), or the sequential block's two (falcon-seq, a Hugging Face folder only) */
    /* (GPTQ W4 to a folder: refused by name, falcon_packed_folder_is_refused) */
    {"falcon", "hf5", "gguf", V_GPTQ_W4}, {"falcon", "hf5", "gguf", V_SQ_W8A8}, {"falcon", "hf5", "hf", V_SQ_W8A8},
    {"falcon-nda", "hf5", "gguf", V_GPTQ_W4}, {"falcon-nda", "hf5", "gguf", V_SQ_W8A8},
    {"falcon-nda", "hf5", "hf", V_SQ_W8A8}, {"falcon-seq", "hf5", "hf", V_SQ_W8A8},
    /* ChatGLM2/3: SmoothQuant folds into its RMSNorms; q, k, v (and gate, up) joined again into
     * query_key_value (dense_h_to_4h), one scheme per fused module */
    BOTH("chatglm2", "hf", "hf"),
#undef BOTH
};
enum { N_VCASES = sizeof vcases / sizeof *vcases };

/* The variant's stages: GPTQ W4 (Q4_0 for GGUF, int4 groups of 32 for compressed-tensors), or
 * SmoothQuant (alpha 0.5) then RTN W8 with dynamic per-token int8 activations (Q8_0 for GGUF,
 * int8 channels for compressed-tensors); on 8 synthetic calibration windows of 32 tokens. */
static lmp_block *compress_variant(const lmp_model *m, variant_kind kind, int gguf)
{
    static const char *const gptq_gguf[] = {"format=q4_0", NULL};
    static const char *const gptq_hf[] = {"bits=4", "granularity=group", "group_size=32", NULL};
    static const char *const sq[] = {"alpha=0.5", NULL};
    static const char *const w8_gguf[] = {"format=q8_0", "act=dynamic_token", NULL};
    static const char *const w8_hf[] = {"bits=8", "granularity=channel", "act=dynamic_token", NULL};
    one_stage a, b;
    lmp_stage stages[2];
    int n = 1;
    if (kind == V_GPTQ_W4) {
        make_stage(&reg, &a, "gptq", gguf ? gptq_gguf : gptq_hf, NULL);
        stages[0] = a.stage;
    } else {
        make_stage(&reg, &a, "smoothquant", sq, NULL);
        make_stage(&reg, &b, "rtn", gguf ? w8_gguf : w8_hf, NULL);
        stages[0] = a.stage;
        stages[1] = b.stage;
        n = 2;
    }
    lmp_variant v = {.name = kind == V_GPTQ_W4 ? "gptq-w4" : "sq-w8a8", .stages = stages, .n_stages = n};
    lmp_windows w = windows(8, 32, m->arch.vocab, 3);
    lmp_block *out = NULL;
    const int st = lmp_compress(&ctx, &be, m, &v, &w, &out);
    ck_assert_msg(st == 0, "%s: %s", v.name, lmp_last_error());
    free(w.tokens);
    free(a.stage.params);
    if (n == 2) free(b.stage.params);
    return out;
}

/* A copy of the variant's blocks with the same weights stored as F32 (no grid, 32 bits) and its
 * activations unquantized. */
static lmp_block *dense_copy(const lmp_block *var, int64_t n)
{
    lmp_block *c = calloc((size_t)n, sizeof *c);
    for (int64_t b = 0; b < n; b++) {
        ck_assert_int_eq(lmp_block_clone(&var[b], &c[b]), 0);
        for (int i = 0; i < c[b].n_linears; i++) {
            lmp_linear *l = &c[b].linears[i];
            if (l->grid) lmp_wgrid_free(l->grid);
            l->grid = NULL;
            l->weight_bits = 32.0;
            l->act.mode = LMP_ACT_NONE;
        }
    }
    return c;
}

START_TEST(variants_of_each_architecture_export)
{
    const variant_case *c = &vcases[_i];
    if (skipped(c->fixture)) return;
    const int gguf = !strcmp(c->out, "gguf");
    const char *vname = c->kind == V_GPTQ_W4 ? "gptq-w4" : "sq-w8a8";
    char src_path[600], out[600], ref[600];
    snprintf(src_path, sizeof src_path, "%s/%s/%s", FIXTURES, c->fixture, c->form);
    snprintf(out, sizeof out, "%s/%s-%s%s", tmpdir, c->fixture, vname, gguf ? ".gguf" : "");
    snprintf(ref, sizeof ref, "%s/%s-%s-f32%s", tmpdir, c->fixture, vname, gguf ? ".gguf" : "");
    lmp_model *m = load(src_path);
    lmp_block *var = compress_variant(m, c->kind, gguf);
    char tok_buf[600];
    const char *tokenizer = gguf_tokenizer(c->fixture, c->form, tok_buf, sizeof tok_buf);
    lmp_block_store *store;
    lmp_block_source src = stored_blocks(var, m->arch.n_layers, &store);
    ck_assert_msg(export_to(m, &src, out, vname, tokenizer) == 0, "%s: %s", out, lmp_last_error());
    lmp_block_store_free(store);
    /* the same variant with F32 weights: the reference the format's reader is held against */
    lmp_block *dense = dense_copy(var, m->arch.n_layers);
    src = stored_blocks(dense, m->arch.n_layers, &store);
    ck_assert_msg(export_to(m, &src, ref, vname, tokenizer) == 0, "%s: %s", ref, lmp_last_error());
    lmp_block_store_free(store);
    /* lmpress reads the export back: the variant's log-probs */
    int64_t T;
    int32_t *tok = archfix_tokens(c->fixture, &T);
    int64_t n = T < m->arch.seq_len ? T : m->arch.seq_len;
    /* what the file carries: GGUF and GPT-2's dense folder run the activations unquantized */
    const int act_dropped = gguf || m->arch.family == LMP_FAMILY_GPT2;
    float *want = log_probs(m, act_dropped ? dense : var, tok, n);
    lmp_block *orig = lmp_model_blocks(m);
    ck_assert_msg(orig != NULL, "%s", lmp_last_error());
    float *unmodified = log_probs(m, orig, tok, n);
    lmp_model *e = load(out);
    lmp_block *blocks = lmp_model_blocks(e);
    ck_assert_msg(blocks != NULL, "%s", lmp_last_error());
    float *got = log_probs(e, blocks, tok, n);
    const double rel = rel_diff_f(got, want, n * m->arch.vocab), moved = rel_diff_f(got, unmodified, n * m->arch.vocab);
    printf("%-10s %-7s -> %-4s read back as %s: relative difference to the variant %.2e, to the unmodified model "
           "%.2e\n", c->fixture, vname, c->out, e->format, rel, moved);
    ck_assert_msg(rel <= TOLERANCE, "%s read back differs from the variant: relative %g", out, rel);
    ck_assert_msg(moved > TOLERANCE, "%s: the quantized export gives the unmodified numbers", out);
    const int ck = run_check(c->out, out, ref, "--exact");
    if (ck == 77) printf("    SKIPPED the gguf-py check of %s\n", out);
    else ck_assert_msg(ck == 0, "%s: arch_export_check.py --exact finds problems (above)", out);
    /* the long tail's compressed folders (issue 40) through compressed-tensors in transformers */
    if (!gguf && m->arch.family != LMP_FAMILY_GPT2 && (m->arch.layer_norm || m->arch.plain_mlp || m->arch.no_pre_norms)) {
        float *plain = log_probs(m, dense, tok, n);
        ct_check(out, tok, n, plain, m->arch.vocab);
        free(plain);
    }
    free(got);
    free(want);
    free(unmodified);
    free(tok);
    lmp_blocks_free(dense, m->arch.n_layers);
    lmp_blocks_free(var, m->arch.n_layers);
    lmp_model_free(e);
    lmp_model_free(m);
}
END_TEST

/* Phi-3's q, k and v are one module in the file: quantized unlike each other, they are refused,
 * naming the part. */
START_TEST(fused_parts_quantized_unlike_are_refused)
{
    char src_path[600], out[600];
    snprintf(src_path, sizeof src_path, "%s/phi3/hf5", FIXTURES);
    snprintf(out, sizeof out, "%s/phi3-q-only", tmpdir);
    lmp_model *m = load(src_path);
    const char *const set[] = {"bits=4", "granularity=group", "group_size=32", NULL};
    lmp_block *var = compress_stage(m, "rtn", set, "q_proj", 0);
    lmp_block_store *store;
    const lmp_block_source src = stored_blocks(var, m->arch.n_layers, &store);
    const int st = export_to(m, &src, out, "q-only", NULL);
    const char *msg = lmp_last_error();
    printf("phi3 rtn on q_proj only -> hf refused: %s\n", st ? msg : "(not refused)");
    ck_assert_msg(st != 0 && strstr(msg, "quantized differently") && strstr(msg, "qkv_proj"),
                  "expected a refusal naming the fused module: %s", st ? msg : "exported");
    ck_assert_msg(access(out, F_OK) != 0, "%s exists after a refusal", out);
    lmp_block_store_free(store);
    lmp_blocks_free(var, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

/* Falcon's packed (W4) compressed-tensors folder: transformers' FalconForCausalLM initializes
 * every FalconLinear's .weight at load, which a pack-quantized module lacks (transformers 5.24 +
 * compressed-tensors 0.20.1: AttributeError 'FalconLinear' object has no attribute 'weight'), so
 * the export is refused by name. */
START_TEST(falcon_packed_folder_is_refused)
{
    char src_path[600], out[600];
    snprintf(src_path, sizeof src_path, "%s/falcon/hf5", FIXTURES);
    snprintf(out, sizeof out, "%s/falcon-w4", tmpdir);
    lmp_model *m = load(src_path);
    const char *const set[] = {"bits=4", "granularity=group", "group_size=32", NULL};
    lmp_block *var = compress_stage(m, "rtn", set, NULL, 0);
    lmp_block_store *store;
    const lmp_block_source src = stored_blocks(var, m->arch.n_layers, &store);
    const int st = export_to(m, &src, out, "w4", NULL);
    const char *msg = lmp_last_error();
    printf("falcon rtn w4 -> hf refused: %s\n", st ? msg : "(not refused)");
    ck_assert_msg(st != 0 && strstr(msg, "FalconLinear") && strstr(msg, "query_key_value"), "%s", msg);
    lmp_block_store_free(store);
    lmp_blocks_free(var, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

/* OLMo's LayerNorms have no parameters in either format: SmoothQuant's scales, folded into them,
 * have nowhere to go, so the variant is refused by name (and nothing is left at the path). */
START_TEST(olmo_smoothquant_is_refused)
{
    char src_path[600];
    snprintf(src_path, sizeof src_path, "%s/olmo/hf5", FIXTURES);
    lmp_model *m = load(src_path);
    lmp_block *var = compress_variant(m, V_SQ_W8A8, 1);
    for (int gguf = 0; gguf < 2; gguf++) {
        char out[600];
        snprintf(out, sizeof out, "%s/olmo-sq%s", tmpdir, gguf ? ".gguf" : "");
        lmp_block_store *store;
        const lmp_block_source src = stored_blocks(var, m->arch.n_layers, &store);
        const int st = export_to(m, &src, out, "sq", NULL);
        const char *msg = lmp_last_error();
        printf("olmo smoothquant -> %s refused: %s\n", gguf ? "gguf" : "hf", st ? msg : "(not refused)");
        ck_assert_msg(st != 0 && strstr(msg, "no weight or bias") && strstr(msg, "layernorm"),
                      "expected a refusal naming the norm: %s", st ? msg : "exported");
        ck_assert_msg(access(out, F_OK) != 0, "%s exists after a refusal", out);
        lmp_block_store_free(store);
    }
    lmp_blocks_free(var, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

/* ---- what cannot be written is refused by name ------------------------------------------- */
/* Each a fixture loaded and changed as another model would differ (so each refusal is reached by
 * a real model's state); nothing may be left at the path. */
typedef enum { MUT_YARN_ATTN, MUT_LLAMA3_ON_QWEN2, MUT_GEMMA_UNTIED, MUT_PARTIAL_ROTARY, MUT_YARN_CTX,
               MUT_LONGROPE, MUT_NO_SOFTCAP, MUT_Q_SCALE, MUT_WINDOW, MUT_SOFTCAP } mutation;
typedef struct refusal_case {
    const char *fixture, *form, *out;
    mutation mut;
    const char *needle;
} refusal_case;

static const refusal_case rcases[] = {
    /* a YaRN attention_factor other than 0.1 ln(factor) + 1: GGUF has no key for it */
    {"qwen2-yarn", "hf5", "x.gguf", MUT_YARN_ATTN, "YaRN"},
    /* rope_freqs is llama's only */
    {"llama3", "hf5", "x.gguf", MUT_LLAMA3_ON_QWEN2, "llama3"},
    /* llama.cpp's gemma has no output tensor */
    {"gemma", "hf5", "x.gguf", MUT_GEMMA_UNTIED, "head of its own"},
    /* a config.json made from a GGUF says no partial rotary */
    {"qwen2", "model.gguf", "x-hf", MUT_PARTIAL_ROTARY, "partial rotary"},
    /* transformers reads YaRN's factor as max_position_embeddings / original: 128 / 64 is not 4 */
    {"qwen2-yarn", "model.gguf", "x-hf", MUT_YARN_CTX, "YaRN"},
    /* LongRoPE on a family that is written otherwise */
    {"phi3", "hf5", "x.gguf", MUT_LONGROPE, "LongRoPE"},
    /* llama.cpp's gemma2 always soft-caps (50 / 30 when the file is silent) */
    {"gemma2", "hf5", "x.gguf", MUT_NO_SOFTCAP, "soft-capping"},
    /* a query_pre_attn_scalar other than head_dim: llama.cpp has no key for it */
    {"gemma2", "hf5", "x.gguf", MUT_Q_SCALE, "query_pre_attn_scalar"},
    {"gemma2", "hf5", "x.gguf", MUT_GEMMA_UNTIED, "head of its own"},
    /* windows where llama.cpp's architecture runs none (Qwen2's use_sliding_window, Phi-3's
     * window, which llama.cpp turns off) */
    {"qwen2", "hf5", "x.gguf", MUT_WINDOW, "sliding window of 8 positions, which llama.cpp's qwen2"},
    {"phi3", "hf5", "x.gguf", MUT_WINDOW, "sliding window of 8 positions, which llama.cpp's phi3"},
    /* attention soft-capping outside gemma2 */
    {"glm", "hf5", "x.gguf", MUT_SOFTCAP, "soft-caps its attention scores"},
};
enum { N_RCASES = sizeof rcases / sizeof *rcases };

START_TEST(what_cannot_be_written_is_refused)
{
    const refusal_case *c = &rcases[_i];
    char src_path[600], out[600];
    snprintf(src_path, sizeof src_path, "%s/%s/%s", FIXTURES, c->fixture, c->form);
    snprintf(out, sizeof out, "%s/%s", tmpdir, c->out);
    lmp_model *m = load(src_path);
    float *head = NULL;
    switch (c->mut) {
    case MUT_YARN_ATTN: m->arch.rope.mscale *= 1.01f; break;
    case MUT_LLAMA3_ON_QWEN2: m->arch.desc = lmp_arch_by_name("qwen2"); break;
    case MUT_GEMMA_UNTIED:
        head = malloc((size_t)(m->arch.vocab * m->arch.dim) * sizeof *head);
        memcpy(head, m->tok_emb, (size_t)(m->arch.vocab * m->arch.dim) * sizeof *head);
        m->lm_head = head;
        break;
    case MUT_PARTIAL_ROTARY:
        lmp_rope_default(&m->arch.rope, m->arch.rope.theta, m->arch.head_dim / 2, m->arch.head_dim);
        break;
    case MUT_YARN_CTX: m->arch.seq_len = 128; break;
    case MUT_LONGROPE: m->arch.desc = lmp_arch_by_name("llama"); break;
    case MUT_NO_SOFTCAP: m->arch.attn_softcap = 0; break;
    case MUT_Q_SCALE: m->arch.q_scale = 0.5f; break;
    case MUT_WINDOW:
        m->arch.window = 8;
        for (int64_t l = 0; l < m->arch.n_layers; l++) m->arch.sliding_layer[l] = 1;
        break;
    case MUT_SOFTCAP: m->arch.attn_softcap = 50; break;
    }
    const lmp_block_source src = lmp_block_source_model(m);
    const int st = export_to(m, &src, out, c->fixture, NULL);
    const char *msg = lmp_last_error();
    printf("%-10s %-10s -> %-6s refused: %s\n", c->fixture, c->form, c->out, st ? msg : "(not refused)");
    ck_assert_msg(st != 0, "%s -> %s: exported, but the file cannot say what lmpress evaluated", src_path, c->out);
    ck_assert_msg(strstr(msg, c->needle) != NULL && strstr(msg, src_path) != NULL,
                  "the refusal does not name the model and \"%s\": %s", c->needle, msg);
    ck_assert_msg(access(out, F_OK) != 0, "%s exists after a refusal", out);
    if (head) m->lm_head = m->tok_emb;
    free(head);
    lmp_model_free(m);
}
END_TEST

/* compare with --output-dir on a model whose architecture the format cannot say (Mistral's
 * window in a GGUF): refused once the model is read, before any variant is compressed.  Without
 * that early check the variant would be compressed and evaluated, its export reported as failed
 * and the run would go on to write the report: so no report may exist here. */
START_TEST(architecture_refused_before_any_work)
{
    char cfg[600], json[600], outdir[600], args[3000], out[16384];
    snprintf(cfg, sizeof cfg, "%s/mistral.cfg", tmpdir);
    snprintf(json, sizeof json, "%s/mistral.json", tmpdir);
    snprintf(outdir, sizeof outdir, "%s/mistral-out", tmpdir);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "model = { path = \"%s/mistral/hf5\"; tokenizer = \"%s/mistral/model.gguf\"; };\n"
            "backend = { name = \"cpu\"; };\n"
            "calibration = { text = \"%s/models/stories260K/tinystories-synth-calib.txt\"; samples = 4; seq_len = 16; };\n"
            "eval = { texts = [ \"%s/models/stories260K/tinystories-synth-eval.txt\" ]; seq_len = 16; max_windows = 2; };\n"
            "variants = ( { name = \"gptq\"; pipeline = ( { strategy = \"gptq\"; params = { format = \"q4_0\"; }; } ); } );\n",
            FIXTURES, FIXTURES, LMP_SOURCE_DIR, LMP_SOURCE_DIR);
    fclose(f);
    snprintf(args, sizeof args, "compare '%s' --json '%s' --output-dir '%s' 2>&1", cfg, json, outdir);
    const int rc = lmp_test_cli(args, out, sizeof out);
    printf("mistral compare --output-dir (gguf): exit %d: %s", rc, out);
    ck_assert_msg(rc != 0, "the run went on: %s", out);
    ck_assert_msg(strstr(out, "sliding window of 16 positions") && strstr(out, "llama"), "%s", out);
    ck_assert_msg(access(json, F_OK) != 0, "%s was written: the variant ran before the refusal", json);
}
END_TEST

/* The checks before any work let through what the writers carry: GPT-2 as a GGUF through
 * `lmpress run -o` (a stale family check there refused it after the writer learned it). */
START_TEST(gpt2_gguf_through_the_cli)
{
    char cfg[600], gguf[600], args[2000], out[16384];
    snprintf(cfg, sizeof cfg, "%s/gpt2.cfg", tmpdir);
    snprintf(gguf, sizeof gguf, "%s/gpt2-q8_0.gguf", tmpdir);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "model = { path = \"%s/gpt2/hf5\"; };\n"
               "variants = ( { name = \"rtn\"; pipeline = ( { strategy = \"rtn\"; params = { format = \"q8_0\"; }; } ); } );\n",
            FIXTURES);
    fclose(f);
    snprintf(args, sizeof args, "run '%s' -o '%s' 2>&1", cfg, gguf);
    const int rc = lmp_test_cli(args, out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(access(gguf, F_OK) == 0 && strstr(out, "bits per weight"), "%s", out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("export_arch");
    TCase *tc = tcase_create("exports");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, open_fixture, close_fixture);
    tcase_add_loop_test(tc, each_export_matches_or_is_refused, 0, N_CASES);
    tcase_add_loop_test(tc, compressed_variant_reads_back, 0, N_QCASES);
    tcase_add_loop_test(tc, what_cannot_be_written_is_refused, 0, N_RCASES);
    tcase_add_test(tc, fused_parts_quantized_unlike_are_refused);
    tcase_add_test(tc, olmo_smoothquant_is_refused);
    tcase_add_test(tc, falcon_packed_folder_is_refused);
    tcase_add_loop_test(tc, variants_of_each_architecture_export, 0, N_VCASES);
    tcase_add_test(tc, architecture_refused_before_any_work);
    tcase_add_test(tc, gpt2_gguf_through_the_cli);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    const int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
