/* test_model_hf.c — Hugging Face checkpoints (core/model/model_hf.c) against tools/ref/hf_fixtures.py,
 * a numpy reference that shares no code with the loader:
 *   - stories260K converted to a LlamaForCausalLM folder (rotate-half q/k rows, made at test time
 *     into the build tree) gives the same weights, bit for bit, and the same logits as the
 *     llama2.c .bin;
 *   - a tiny random GPT2LMHeadModel (Conv1D, fused c_attn, learned positions, F32/F16/BF16) and a
 *     tiny random Qwen2ForCausalLM (q/k/v biases, GQA, BF16, sharded, untied head) match the
 *     logits numpy computed with Hugging Face's conventions (tests/golden/{gpt2,qwen2}-tiny);
 *   - malformed folders fail with a message naming the file and the tensor. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "model/forward.h"
#include "base/ctx.h"
#include "model/model.h"
#include "plugin/registry.h"
#include "formats/safetensors.h"
#include "testutil.h"

#define GOLDEN LMP_SOURCE_DIR "/tests/golden"
#define STORIES_BIN LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define STORIES_HF LMP_BINARY_DIR "/fixtures/stories260K-hf"

/* ---- helpers ----------------------------------------------------------------------------- */
/* logits[T, vocab] of the model on tok[0..T) with the CPU backend. */
static float *run_logits(lmp_model *m, const int32_t *tok, int64_t T)
{
    lmp_ctx ctx; /* quiet: only errors */
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    lmp_registry reg;
    lmp_backend be;
    ck_assert_int_eq(lmp_registry_init(&reg, &ctx, NULL, 0), 0);
    ck_assert_msg(lmp_backend_open(&ctx, &reg, "cpu", NULL, &be) == 0, "%s", lmp_last_error());
    float *out = malloc((size_t)(T * m->arch.vocab) * sizeof *out);
    ck_assert_ptr_nonnull(out);
    lmp_block *blocks = lmp_model_blocks(m);
    ck_assert_msg(blocks != NULL, "%s", lmp_last_error());
    ck_assert_msg(lmp_forward(&be, m, blocks, tok, T, 0, out) == 0, "%s", lmp_last_error());
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
    return out;
}

/* max |a - b| / max |ref| over n values; *abs_diff gets max |a - b|. */
static double rel_diff(const float *a, const double *ref, int64_t n, double *abs_diff)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d; /* NaN propagates */
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    *abs_diff = md;
    return md / mr;
}

static lmp_model *load_ok(const char *path)
{
    lmp_model *m = NULL;
    int st = lmp_model_load(path, &m);
    ck_assert_msg(st == 0, "loading %s: %s", path, lmp_last_error());
    ck_assert_str_eq(m->format, "safetensors");
    return m;
}

/* Loading must fail and the message must contain every non-NULL needle. */
#define load_fails(path, n1, n2, n3) load_fails_at(__LINE__, path, n1, n2, n3)
static void load_fails_at(int line, const char *path, const char *n1, const char *n2, const char *n3)
{
    lmp_model *m = NULL;
    lmp_clear_error();
    int st = lmp_model_load(path, &m);
    ck_assert_msg(st < 0, "line %d: %s loaded but should not have", line, path);
    ck_assert_ptr_null(m);
    const char *e = lmp_last_error();
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(!needles[i] || strstr(e, needles[i]), "line %d: message lacks \"%s\": %s", line, needles[i], e);
}

/* A golden logits.txt: "tokens N ids...", "vocab V", then N rows of V values. */
typedef struct golden {
    int64_t T, V;
    int32_t *tok;
    double *logits;
} golden;

static golden read_golden(const char *path)
{
    golden g = {0};
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    int c;
    while ((c = fgetc(f)) == '#')
        while ((c = fgetc(f)) != '\n' && c != EOF) {}
    ungetc(c, f);
    long long T, V;
    ck_assert_int_eq(fscanf(f, " tokens %lld", &T), 1);
    ck_assert(T > 0 && T < 4096);
    g.T = T;
    g.tok = malloc((size_t)T * sizeof *g.tok);
    for (int64_t t = 0; t < T; t++) ck_assert_int_eq(fscanf(f, "%d", &g.tok[t]), 1);
    ck_assert_int_eq(fscanf(f, " vocab %lld", &V), 1);
    g.V = V;
    g.logits = malloc((size_t)(T * V) * sizeof *g.logits);
    for (int64_t i = 0; i < T * V; i++) ck_assert_int_eq(fscanf(f, "%lf", &g.logits[i]), 1);
    fclose(f);
    return g;
}

/* ---- writing small checkpoints --------------------------------------------------------- */
typedef struct wtensor {
    char name[128];
    const char *dtype;   /* "F32" when NULL */
    int ndim;
    int64_t shape[4];
    const void *data;    /* NULL: f32 values 0.01 * (i % 13) */
    size_t nbytes;       /* with data */
} wtensor;

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* A safetensors file holding t[0..n), written from the format's description. */
static void write_safetensors(const char *path, const wtensor *t, int n)
{
    size_t cap = 1 << 16, len = 0;
    char *h = malloc(cap);
    uint64_t off = 0;
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
        size_t nb = t[i].data ? t[i].nbytes : (size_t)numel * 4;
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                                t[i].name, t[i].dtype ? t[i].dtype : "F32");
        for (int d = 0; d < t[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                                (unsigned long long)(off + nb));
        off += nb;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    ck_assert_uint_lt(len + 8, cap);
    while (len % 8) h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    uint64_t hl = len; /* little-endian hosts only, like the loader */
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, len, f);
    for (int i = 0; i < n; i++) {
        if (t[i].data) {
            fwrite(t[i].data, 1, t[i].nbytes, f);
            continue;
        }
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
        for (int64_t j = 0; j < numel; j++) {
            float v = 0.01f * (float)(j % 13);
            fwrite(&v, 4, 1, f);
        }
    }
    fclose(f);
    free(h);
}

/* A fresh empty folder under the build tree. */
static const char *new_dir(const char *tag)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/fixtures", LMP_BINARY_DIR);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/fixtures/hf-%s-XXXXXX", LMP_BINARY_DIR, tag);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp %s: %s", path, strerror(errno));
    return path;
}

static void remove_dir(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A tiny Llama (hidden 8, 2 heads of 4, 1 kv head, ffn 16, 1 layer, vocab 10) into dir.
 * omit: a tensor left out; reshape: a tensor given shape [8, 8]; extra: an added [8] tensor. */
static const char tiny_llama_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, \"intermediate_size\": 16,\n"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,\n"
    " \"vocab_size\": 10, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-5%s}\n";

static void write_tiny_llama(const char *dir, const char *config_extra, const char *omit, const char *reshape,
                             const char *extra)
{
    char path[700], cfg[1024];
    snprintf(cfg, sizeof cfg, tiny_llama_config, config_extra ? config_extra : "");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    static const struct { const char *name; int64_t r, c; } spec[] = {
        {"model.embed_tokens.weight", 10, 8},
        {"model.layers.0.input_layernorm.weight", 8, 0},
        {"model.layers.0.self_attn.q_proj.weight", 8, 8},
        {"model.layers.0.self_attn.k_proj.weight", 4, 8},
        {"model.layers.0.self_attn.v_proj.weight", 4, 8},
        {"model.layers.0.self_attn.o_proj.weight", 8, 8},
        {"model.layers.0.post_attention_layernorm.weight", 8, 0},
        {"model.layers.0.mlp.gate_proj.weight", 16, 8},
        {"model.layers.0.mlp.up_proj.weight", 16, 8},
        {"model.layers.0.mlp.down_proj.weight", 8, 16},
        {"model.norm.weight", 8, 0}};
    wtensor t[16];
    int n = 0;
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        if (omit && strcmp(spec[i].name, omit) == 0) continue;
        wtensor w = {.ndim = spec[i].c ? 2 : 1, .shape = {spec[i].r, spec[i].c}};
        snprintf(w.name, sizeof w.name, "%s", spec[i].name);
        if (reshape && strcmp(spec[i].name, reshape) == 0) w.shape[0] = w.shape[1] = 8;
        t[n++] = w;
    }
    if (extra) {
        t[n] = (wtensor){.ndim = 1, .shape = {8}};
        snprintf(t[n++].name, sizeof t[0].name, "%s", extra);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_safetensors(path, t, n);
}

/* Both models' logits on tok[T] agree to 1e-5 relative (max abs diff / max abs logit); frees both. */
static void expect_same_logits(lmp_model *ref, lmp_model *hf, const int32_t *tok, int64_t T, const char *what)
{
    const int64_t n = T * ref->arch.vocab;
    float *lr = run_logits(ref, tok, T), *lh = run_logits(hf, tok, T);
    double *rd = malloc((size_t)n * sizeof *rd), absd;
    for (int64_t i = 0; i < n; i++) rd[i] = lr[i];
    double rel = rel_diff(lh, rd, n, &absd);
    printf("%s: max abs diff %.3g, relative %.3g (tolerance 1e-5)\n", what, absd, rel);
    ck_assert_msg(rel <= 1e-5, "%s: relative difference %g", what, rel);
    free(rd);
    free(lr);
    free(lh);
    lmp_model_free(ref);
    lmp_model_free(hf);
}

/* ---- (a') SmolLM2: the GGUF vs its Hugging Face conversion by the PyPI gguf package ---------- */
#define SMOLLM2_GGUF LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
#define SMOLLM2_HF LMP_BINARY_DIR "/fixtures/smollm2-hf"
#define PYDEPS LMP_BINARY_DIR "/pydeps"

START_TEST(smollm2_matches_gguf)
{
    if (access(SMOLLM2_GGUF, R_OK) != 0) {
        lmp_test_skip("SKIPPED smollm2_matches_gguf: %s is missing (run tools/fetch_smollm2.sh)\n", SMOLLM2_GGUF);
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' -c 'import numpy, gguf' >/dev/null 2>&1", PYDEPS, lmp_test_python());
    if (system(cmd) != 0) {
        lmp_test_skip("SKIPPED smollm2_matches_gguf: %s cannot import numpy and gguf with PYTHONPATH=%s (tools/test.sh "
               "unpacks the PyPI gguf package there; it needs numpy and PyYAML)\n", lmp_test_python(), PYDEPS);
        return;
    }
    snprintf(cmd, sizeof cmd, "test -s '%s/model.safetensors' || PYTHONPATH='%s' '%s' '%s/tools/ref/hf_fixtures.py' smollm2 '%s' >/dev/null",
             SMOLLM2_HF, PYDEPS, lmp_test_python(), LMP_SOURCE_DIR, SMOLLM2_HF);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    lmp_model *ref = NULL, *hf = load_ok(SMOLLM2_HF);
    ck_assert_msg(lmp_model_load(SMOLLM2_GGUF, &ref) == 0, "%s", lmp_last_error());
    ck_assert(ref->arch.dim == hf->arch.dim && ref->arch.n_layers == hf->arch.n_layers && ref->arch.vocab == hf->arch.vocab);
    ck_assert_float_eq(ref->arch.rope_theta, hf->arch.rope_theta);
    enum { T = 64 };
    int32_t tok[T];
    uint32_t x = 777;
    for (int t = 0; t < T; t++) {
        x = x * 1664525u + 1013904223u;
        tok[t] = (int32_t)((x >> 8) % (uint32_t)ref->arch.vocab);
    }
    expect_same_logits(ref, hf, tok, T, "SmolLM2 HF (gguf package) vs GGUF");
}
END_TEST

/* ---- (a) stories260K: llama2.c .bin vs its Hugging Face conversion ----------------------- */
START_TEST(stories260K_matches_llama2c)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", lmp_test_python());
    if (system(cmd) != 0)
        ck_abort_msg("%s with numpy is needed to make the stories260K Hugging Face fixture: "
                     "install python3-numpy (apt-get install python3-numpy; tools/setup.sh installs it)", lmp_test_python());
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/hf_fixtures.py' stories260K '%s' >/dev/null", lmp_test_python(),
             LMP_SOURCE_DIR, STORIES_HF);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);

    lmp_model *ref = NULL, *hf = load_ok(STORIES_HF);
    ck_assert_msg(lmp_model_load(STORIES_BIN, &ref) == 0, "%s", lmp_last_error());
    const lmp_arch *a = &ref->arch, *b = &hf->arch;
    ck_assert_int_eq(b->family, LMP_FAMILY_LLAMA);
    ck_assert(a->dim == b->dim && a->hidden == b->hidden && a->n_layers == b->n_layers &&
              a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads && a->vocab == b->vocab &&
              a->seq_len == b->seq_len && a->head_dim == b->head_dim);
    ck_assert_float_eq(b->norm_eps, 1e-5f);
    ck_assert_float_eq(b->rope_theta, 10000.0f);
    ck_assert_ptr_eq(hf->lm_head, hf->tok_emb); /* tied: the file has no lm_head.weight */

    /* The row permutation undoes the fixture's: every weight equal bit for bit. */
    lmp_block *rb = lmp_model_blocks(ref), *hb = lmp_model_blocks(hf);
    ck_assert(rb && hb);
    for (int64_t l = 0; l < a->n_layers; l++) {
        for (int i = 0; i < rb[l].n_linears; i++) {
            const lmp_linear *x = &rb[l].linears[i], *y = &hb[l].linears[i];
            ck_assert_str_eq(x->name, y->name);
            ck_assert(x->out == y->out && x->in == y->in);
            ck_assert_ptr_null(y->b);
            ck_assert_msg(memcmp(x->w, y->w, (size_t)(x->out * x->in) * sizeof *x->w) == 0, "%s differs", y->name);
        }
        for (int i = 0; i < 2; i++)
            ck_assert(memcmp(rb[l].norms[i].w, hb[l].norms[i].w, (size_t)a->dim * sizeof(float)) == 0);
    }
    ck_assert(memcmp(ref->tok_emb, hf->tok_emb, (size_t)(a->vocab * a->dim) * sizeof(float)) == 0);

    /* A 64-token window: BOS, then a fixed pseudo-random sequence. */
    enum { T = 64 };
    int32_t tok[T];
    uint32_t x = 12345;
    tok[0] = 1;
    for (int t = 1; t < T; t++) {
        x = x * 1664525u + 1013904223u;
        tok[t] = (int32_t)((x >> 8) % (uint32_t)a->vocab);
    }
    expect_same_logits(ref, hf, tok, T, "stories260K HF vs llama2.c");
}
END_TEST

/* ---- (b) tiny GPT-2, (c) tiny Qwen2 against numpy ------------------------------------------ */
static void check_golden(const char *dir, const char *label, double tol)
{
    char path[600];
    snprintf(path, sizeof path, "%s/logits.txt", dir);
    golden g = read_golden(path);
    lmp_model *m = load_ok(dir);
    ck_assert_int_eq(m->arch.vocab, g.V);
    float *out = run_logits(m, g.tok, g.T);
    double absd, rel = rel_diff(out, g.logits, g.T * g.V, &absd);
    printf("%s vs numpy: max abs diff %.3g, relative %.3g (tolerance %g)\n", label, absd, rel, tol);
    ck_assert_msg(rel <= tol, "%s: relative difference %g", label, rel);
    free(out);
    free(g.tok);
    free(g.logits);
    lmp_model_free(m);
}

START_TEST(gpt2_tiny_matches_numpy)
{
    lmp_model *m = load_ok(GOLDEN "/gpt2-tiny");
    const lmp_arch *a = &m->arch;
    ck_assert_int_eq(a->family, LMP_FAMILY_GPT2);
    ck_assert(a->dim == 32 && a->n_layers == 2 && a->n_heads == 4 && a->n_kv_heads == 4 && a->head_dim == 8 &&
              a->hidden == 128 && a->vocab == 96 && a->seq_len == 64);
    ck_assert_float_eq(a->norm_eps, 1e-5f);
    ck_assert_ptr_nonnull(m->pos_emb);
    ck_assert_ptr_nonnull(m->final_norm_b);
    ck_assert_ptr_eq(m->lm_head, m->tok_emb);
    lmp_block blk;
    ck_assert_int_eq(lmp_model_block_copy(m, 1, &blk), 0);
    ck_assert_int_eq(blk.n_linears, 6);
    for (int i = 0; i < blk.n_linears; i++) ck_assert_ptr_nonnull(blk.linears[i].b);
    ck_assert_str_eq(blk.linears[0].name, "transformer.h.1.attn.c_attn.q");
    ck_assert_ptr_nonnull(blk.norms[0].b);
    lmp_block_free(&blk);
    lmp_model_free(m);
    check_golden(GOLDEN "/gpt2-tiny", "gpt2-tiny", 1e-4);
}
END_TEST

/* The golden GPT-2 rewritten with "transformer."-prefixed names (as GPT2LMHeadModel.state_dict()
 * gives them) and opened through its .safetensors file: the same logits. */
START_TEST(gpt2_prefixed_names_and_file_path)
{
    lmp_safetensors *st;
    ck_assert_int_eq(lmp_st_open(GOLDEN "/gpt2-tiny/model.safetensors", &st), 0);
    wtensor *t = calloc(st->n_tensors, sizeof *t);
    static const char *const dtype_name[] = {[LMP_ST_F32] = "F32", [LMP_ST_F16] = "F16", [LMP_ST_BF16] = "BF16"};
    for (size_t i = 0; i < st->n_tensors; i++) {
        const lmp_st_tensor *s = &st->tensors[i];
        snprintf(t[i].name, sizeof t[i].name, "transformer.%s", s->name);
        t[i].dtype = dtype_name[s->dtype];
        t[i].ndim = s->ndim;
        memcpy(t[i].shape, s->shape, (size_t)s->ndim * sizeof *s->shape);
        t[i].data = s->data;
        t[i].nbytes = s->nbytes;
    }
    const char *dir = new_dir("gpt2prefix");
    char path[700], file[700], cmd[1500];
    snprintf(file, sizeof file, "%s/weights.safetensors", dir);
    write_safetensors(file, t, (int)st->n_tensors);
    free(t);
    lmp_st_close(st);
    snprintf(cmd, sizeof cmd, "cp '%s/gpt2-tiny/config.json' '%s/gpt2-tiny/logits.txt' '%s/'", GOLDEN, GOLDEN, dir);
    ck_assert_int_eq(system(cmd), 0);
    lmp_model *m = load_ok(file);
    ck_assert_int_eq(m->arch.family, LMP_FAMILY_GPT2);
    lmp_model_free(m);
    snprintf(path, sizeof path, "%s/logits.txt", dir);
    golden g = read_golden(path);
    m = load_ok(file);
    float *out = run_logits(m, g.tok, g.T);
    double absd, rel = rel_diff(out, g.logits, g.T * g.V, &absd);
    printf("gpt2-tiny, prefixed names, by file: max abs diff %.3g, relative %.3g\n", absd, rel);
    ck_assert(rel <= 1e-4);
    free(out);
    free(g.tok);
    free(g.logits);
    lmp_model_free(m);
    remove_dir(dir);
}
END_TEST

START_TEST(qwen2_tiny_matches_numpy)
{
    lmp_model *m = load_ok(GOLDEN "/qwen2-tiny");
    const lmp_arch *a = &m->arch;
    ck_assert_int_eq(a->family, LMP_FAMILY_LLAMA);
    ck_assert(a->dim == 32 && a->n_layers == 2 && a->n_heads == 4 && a->n_kv_heads == 2 && a->head_dim == 8 &&
              a->hidden == 64 && a->vocab == 96 && a->seq_len == 64);
    ck_assert_float_eq(a->rope_theta, 1e6f);
    ck_assert_float_eq(a->norm_eps, 1e-6f);
    ck_assert_ptr_null(m->pos_emb);
    ck_assert_ptr_ne(m->lm_head, m->tok_emb); /* untied */
    lmp_block blk;
    ck_assert_int_eq(lmp_model_block_copy(m, 0, &blk), 0);
    for (int i = 0; i < blk.n_linears; i++) {
        lmp_role r = blk.linears[i].role;
        ck_assert_msg((blk.linears[i].b != NULL) == (r == LMP_ROLE_Q || r == LMP_ROLE_K || r == LMP_ROLE_V),
                      "%s bias", blk.linears[i].name);
    }
    lmp_block_free(&blk);
    lmp_model_free(m);
    check_golden(GOLDEN "/qwen2-tiny", "qwen2-tiny", 1e-4);
}
END_TEST

/* The same checkpoint with config.json as transformers 5 writes it: rope_parameters holds the
 * base (1e6 here), no top-level rope_theta.  Read as the default 10000 it would be silently
 * wrong: the golden logits (theta 1e6) catch that. */
START_TEST(qwen2_tiny_config_v5_matches_numpy)
{
    const char *dir = new_dir("qwen2v5");
    char cmd[1500], cfg[700];
    snprintf(cmd, sizeof cmd, "cp '%s/qwen2-tiny/'*.safetensors* '%s/qwen2-tiny/logits.txt' '%s/'", GOLDEN, GOLDEN, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    write_text(cfg, "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_act\": \"silu\","
                    " \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
                    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 64,"
                    " \"vocab_size\": 96, \"rms_norm_eps\": 1e-06,"
                    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0},"
                    " \"sliding_window\": null, \"use_sliding_window\": false, \"max_window_layers\": 2,"
                    " \"layer_types\": [\"full_attention\", \"full_attention\"],"
                    " \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\", \"transformers_version\": \"5.0.0\"}");
    lmp_model *m = load_ok(dir);
    ck_assert_float_eq(m->arch.rope_theta, 1e6f);
    ck_assert(m->arch.rope.plain && m->arch.rope.n_rot == 8);
    lmp_model_free(m);
    check_golden(dir, "qwen2-tiny, transformers 5 config", 1e-4);
    remove_dir(dir);
}
END_TEST

/* ---- (d) malformed checkpoints ------------------------------------------------------------ */
START_TEST(malformed_checkpoints)
{
    const char *dir = new_dir("bad");
    char st_file[700], cfg_file[700];
    snprintf(st_file, sizeof st_file, "%s/model.safetensors", dir);
    snprintf(cfg_file, sizeof cfg_file, "%s/config.json", dir);

    /* The writer's well-formed model loads (so the failures below are the intended ones). */
    write_tiny_llama(dir, NULL, NULL, NULL, NULL);
    lmp_model *m = load_ok(dir);
    ck_assert_int_eq(m->arch.n_kv_heads, 1);
    ck_assert_ptr_nonnull(lmp_model_blocks(m));
    lmp_model_free(m);

    /* config.json missing */
    unlink(cfg_file);
    load_fails(dir, "config.json", NULL, NULL);

    /* an architecture we do not know */
    write_text(cfg_file, "{\"architectures\": [\"BertModel\"], \"hidden_size\": 8}");
    load_fails(dir, "config.json", "unknown architecture 'BertModel'", "LlamaForCausalLM");
    write_text(cfg_file, "{\"hidden_size\": 8}");
    load_fails(dir, "config.json", "architectures", NULL);

    /* a tensor missing */
    write_tiny_llama(dir, NULL, "model.layers.0.self_attn.k_proj.weight", NULL, NULL);
    load_fails(dir, "model.safetensors", "model.layers.0.self_attn.k_proj.weight", "missing");
    write_tiny_llama(dir, NULL, "model.norm.weight", NULL, NULL);
    load_fails(dir, "model.safetensors", "model.norm.weight", "missing");

    /* a tensor with the wrong shape */
    write_tiny_llama(dir, NULL, NULL, "model.layers.0.self_attn.k_proj.weight", NULL);
    load_fails(dir, st_file, "model.layers.0.self_attn.k_proj.weight has shape [8, 8], expected [4, 8]", NULL);

    /* a bias the config does not announce is not silently dropped */
    write_tiny_llama(dir, NULL, NULL, NULL, "model.layers.0.self_attn.o_proj.bias");
    load_fails(dir, st_file, "model.layers.0.self_attn.o_proj.bias", NULL);
    /* a tensor the loader does not read (a q/k norm Llama lacks, an expert) is refused by name */
    write_tiny_llama(dir, NULL, NULL, NULL, "model.layers.0.self_attn.q_norm.weight");
    load_fails(dir, st_file, "tensor model.layers.0.self_attn.q_norm.weight is not read by lmpress for LlamaForCausalLM",
               NULL);
    write_tiny_llama(dir, NULL, NULL, NULL, "model.layers.0.mlp.experts.0.up_proj.weight");
    load_fails(dir, st_file, "model.layers.0.mlp.experts.0.up_proj.weight is not read", NULL);
    write_tiny_llama(dir, NULL, NULL, NULL, "model.layers.0.self_attn.rotary_emb.inv_freq");
    m = load_ok(dir); /* a derived buffer older checkpoints saved */
    lmp_model_free(m);
    /* ... but is used when it does (Llama's attention_bias: q, k, v and o) */
    write_tiny_llama(dir, ", \"attention_bias\": true", NULL, NULL, NULL);
    load_fails(dir, "model.safetensors", "model.layers.0.self_attn.q_proj.bias", "missing");

    /* unsupported configurations, and RoPE parameters that are incomplete or unknown */
    write_tiny_llama(dir, ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", NULL, NULL, NULL);
    load_fails(dir, "config.json", "rope_scaling needs \"low_freq_factor\"", NULL);
    write_tiny_llama(dir, ", \"rope_scaling\": {\"type\": \"su\", \"factor\": 8.0}", NULL, NULL, NULL);
    load_fails(dir, "config.json", "rope_type \"su\" is not supported", NULL);
    write_tiny_llama(dir, ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"beta_fast\": 4}", NULL,
                     NULL, NULL);
    load_fails(dir, "config.json", "rope_parameters.beta_fast is not read for rope type \"linear\"", NULL);
    write_tiny_llama(dir, ", \"rope_parameters\": {\"chunked_attention\": {\"rope_type\": \"default\"}}", NULL, NULL, NULL);
    load_fails(dir, "config.json", "rope_parameters.chunked_attention", "only full_attention and sliding_attention");
    write_tiny_llama(dir, ", \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1e6}, \"sliding_attention\":"
                          " {\"rope_theta\": 1e4}}", NULL, NULL, NULL);
    load_fails(dir, "config.json", "no layer_types saying which layers slide", NULL);
    write_tiny_llama(dir, ", \"rope_parameters\": {\"rope_type\": \"default\"}, \"rope_scaling\": {\"type\": \"linear\"}",
                     NULL, NULL, NULL);
    load_fails(dir, "config.json", "both rope_parameters and rope_scaling", NULL);
    write_tiny_llama(dir, ", \"partial_rotary_factor\": 0.3", NULL, NULL, NULL);
    load_fails(dir, "config.json", "partial_rotary_factor", "must be even");
    /* a key lmpress does not read is refused by name, not ignored */
    write_tiny_llama(dir, ", \"attn_logit_softcapping\": 50.0", NULL, NULL, NULL);
    load_fails(dir, "config.json", "key \"attn_logit_softcapping\" is not read by lmpress for LlamaForCausalLM", NULL);
    /* ... while bookkeeping and generation defaults are not */
    write_tiny_llama(dir, ", \"use_cache\": true, \"temperature\": 0.7, \"transformers_version\": \"5.1.0\"", NULL, NULL,
                     NULL);
    m = load_ok(dir);
    lmp_model_free(m);
    /* llama3 scaling is read: a table, no longer the plain rotation */
    write_tiny_llama(dir, ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
                          " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}", NULL, NULL, NULL);
    m = load_ok(dir);
    ck_assert(!m->arch.rope.plain && !strcmp(m->arch.rope.type, "llama3"));
    lmp_model_free(m);
    write_tiny_llama(dir, ", \"rope_scaling\": null, \"head_dim\": 4", NULL, NULL, NULL);
    m = load_ok(dir); /* null rope_scaling and a consistent head_dim are fine */
    lmp_model_free(m);
    write_tiny_llama(dir, ", \"head_dim\": 8", NULL, NULL, NULL);
    load_fails(dir, "config.json", "head_dim", "not supported");
    write_text(cfg_file, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, \"intermediate_size\": 16,"
                         " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 3,"
                         " \"vocab_size\": 10}");
    load_fails(dir, "config.json", "kv heads", NULL);
    write_tiny_llama(dir, ", \"hidden_act\": \"gelu\"", NULL, NULL, NULL);
    load_fails(dir, "config.json", "hidden_act", NULL);

    /* Mistral's sliding window: every layer attends to the 16 latest positions; the context stays */
    write_tiny_llama(dir, NULL, NULL, NULL, NULL);
    write_text(cfg_file, "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 8, \"intermediate_size\": 16,"
                         " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
                         " \"vocab_size\": 10, \"max_position_embeddings\": 32, \"sliding_window\": 16}");
    m = load_ok(dir);
    ck_assert_int_eq(m->arch.seq_len, 32);
    ck_assert_int_eq(m->arch.window, 16);
    ck_assert_int_eq(lmp_arch_window(&m->arch, 0), 16);
    ck_assert_float_eq(m->arch.norm_eps, 1e-6f);
    lmp_model_free(m);

    /* a folder with config.json but no safetensors */
    unlink(st_file);
    load_fails(dir, dir, "model.safetensors", NULL);
    remove_dir(dir);

    /* GPT-2: a missing tensor, a bad activation */
    dir = new_dir("badgpt2");
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "cp '%s/gpt2-tiny/model.safetensors' '%s/'", GOLDEN, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cfg_file, sizeof cfg_file, "%s/config.json", dir);
    write_text(cfg_file, "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 32, \"n_layer\": 3, \"n_head\": 4,"
                         " \"vocab_size\": 96, \"n_positions\": 64}");
    load_fails(dir, "model.safetensors", "h.2.ln_1.weight", "missing");
    write_text(cfg_file, "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4,"
                         " \"vocab_size\": 96, \"n_positions\": 64, \"n_inner\": 64}");
    load_fails(dir, "model.safetensors", "h.0.mlp.c_fc.weight has shape [32, 128], expected [32, 64]", NULL);
    write_text(cfg_file, "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4,"
                         " \"vocab_size\": 96, \"n_positions\": 64, \"activation_function\": \"relu\"}");
    load_fails(dir, "config.json", "relu", NULL);
    write_text(cfg_file, "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4,"
                         " \"vocab_size\": 96, \"n_positions\": 64, \"n_inner\": null}");
    m = load_ok(dir);
    ck_assert_int_eq(m->arch.hidden, 128);
    lmp_model_free(m);
    remove_dir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_hf");
    TCase *tc = tcase_create("model_hf");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, stories260K_matches_llama2c);
    tcase_add_test(tc, smollm2_matches_gguf);
    tcase_add_test(tc, gpt2_tiny_matches_numpy);
    tcase_add_test(tc, gpt2_prefixed_names_and_file_path);
    tcase_add_test(tc, qwen2_tiny_matches_numpy);
    tcase_add_test(tc, qwen2_tiny_config_v5_matches_numpy);
    tcase_add_test(tc, malformed_checkpoints);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
