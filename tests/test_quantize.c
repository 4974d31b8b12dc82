/* test_quantize.c — `lmpress quantize MODEL OUT PRESET` (tools/cmd_quantize.c), run as users run
 * it, the real binary:
 *   - a mistyped preset, option or method gets "did you mean"; awq, MXFP8 and FP8 blocks are "not
 *     yet"; NVFP4 (W4A4) without --calib is refused naming it;
 *   - the FP8 preset on stories260K writes a float-quantized folder (E4M3 weights per channel, FP8
 *     inputs per token) that compressed-tensors reads (LMP_CT_PYTHON: ct_load_check.py);
 *   - --print-config prints a config that `lmpress run` turns into the very same file, and that
 *     text is the file's lmpress.config_text;
 *   - an export that cannot hold the variant is refused before the first block (no block was
 *     compressed: no "variant 1/1" line, no output), and a config without eval writes with
 *     --output and is refused without it;
 *   - SmolLM2 (skipped when tools/fetch_smollm2.sh has not fetched it): a Q4_K_M GGUF in one line
 *     whose every tensor has the type llama-quantize's recipe gives it (llama.cpp's
 *     src/llama-quant.cpp, written out again below from its source, not from lmpress's), whose
 *     size is that recipe's within 5 % (and llama-quantize's own file's, when
 *     build-llamacpp/bin/llama-quantize exists), and that llama-perplexity runs (when
 *     build-llamacpp/bin/llama-perplexity exists); a W4A16 folder that compressed-tensors reads
 *     (LMP_CT_PYTHON, as tests/test_export_hf.c). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define SMOL LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
#define LLAMACPP LMP_SOURCE_DIR "/build-llamacpp/bin"
#define WIKI LMP_SOURCE_DIR "/data/wikitext-2/wiki.test.raw"
#define CT_CHECK LMP_SOURCE_DIR "/tools/ref/ct_load_check.py"

static char tmpdir[256];
static char out[1 << 16];

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "quantize"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

static const char *in_tmp(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

/* lmpress ARGS (stderr too) into out; the exit code. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    strncat(args, " 2>&1", sizeof args - strlen(args) - 1);
    int rc = lmp_test_cli(args, out, sizeof out);
    ck_assert_msg(rc >= 0, "lmpress %s crashed:\n%s", args, out);
    return rc;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

START_TEST(typos_get_did_you_mean)
{
    ck_assert_int_eq(run("quantize '%s' '%s' Q4KM", MODEL, in_tmp("x.gguf")), 2);
    ck_assert_msg(strstr(out, "unknown preset Q4KM") && strstr(out, "did you mean Q4_K_M?"), "%s", out);
    ck_assert_int_eq(count_lines(out), 1);
    ck_assert_int_eq(run("quantize '%s' '%s' w4a61", MODEL, in_tmp("x")), 2);
    ck_assert_msg(strstr(out, "did you mean W4A16?"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' Q4_K_M --methd rtn", MODEL, in_tmp("x.gguf")), 2);
    ck_assert_msg(strstr(out, "did you mean --method?"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' Q4_K_M --method gtpq", MODEL, in_tmp("x.gguf")), 2);
    ck_assert_msg(strstr(out, "did you mean gptq?"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' Q4_K_M --method awq", MODEL, in_tmp("x.gguf")), 2);
    ck_assert_msg(strstr(out, "not yet") && strstr(out, "issue 39"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' MXFP8", MODEL, in_tmp("x")), 2);
    ck_assert_msg(strstr(out, "not yet") && strstr(out, "issue 38"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' FP8-block", MODEL, in_tmp("x")), 2);
    ck_assert_msg(strstr(out, "not yet"), "%s", out);
    ck_assert_int_ne(run("quantize '%s' '%s' NVFP4 --tokenizer '%s'", MODEL, in_tmp("x"), TOK), 0);
    ck_assert_msg(strstr(out, "--calib"), "%s", out);
    /* stories260K's down_proj (172 inputs) is no whole group of 16: said before any work */
    ck_assert_int_ne(run("quantize '%s' '%s' NVFP4A16 --tokenizer '%s'", MODEL, in_tmp("x"), TOK), 0);
    ck_assert_msg(strstr(out, "groups of 16") && strstr(out, "down_proj"), "%s", out);
    ck_assert_int_ne(access(in_tmp("x"), F_OK), 0);
    /* a preset whose format is not OUT's, and a method that needs text without it */
    ck_assert_int_eq(run("quantize '%s' '%s' W4A16", MODEL, in_tmp("x.gguf")), 2);
    ck_assert_msg(strstr(out, "OUT must be a folder"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' Q4_0", MODEL, in_tmp("x")), 2);
    ck_assert_msg(strstr(out, "OUT must be a .gguf"), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' Q4_0 --method gptq", MODEL, in_tmp("x.gguf")), 2);
    ck_assert_msg(strstr(out, "--calib"), "%s", out);
    ck_assert_int_ne(access(in_tmp("x.gguf"), F_OK), 0);
    /* the command itself */
    ck_assert_int_eq(run("quantise"), 2);
    ck_assert_msg(strstr(out, "did you mean quantize?"), "%s", out);
}
END_TEST

/* The FP8 preset (llm-compressor's FP8_DYNAMIC) on stories260K: a float-quantized folder whose
 * config says E4M3 weights per channel and FP8 inputs per token, read by compressed-tensors. */
START_TEST(fp8_preset_folder)
{
    ck_assert_int_eq(run("quantize '%s' '%s' FP8 --tokenizer '%s' --print-config", MODEL, in_tmp("fp8"), TOK), 0);
    ck_assert_msg(strstr(out, "format = \"fp8_e4m3\"") && strstr(out, "act = \"fp8_dynamic_token\""), "%s", out);
    ck_assert_int_eq(run("quantize '%s' '%s' W8A8-FP8 --tokenizer '%s'", MODEL, in_tmp("fp8"), TOK), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", in_tmp("fp8"));
    size_t n;
    char *cfg = (char *)lmp_test_slurp(path, &n);
    ck_assert_msg(strstr(cfg, "float-quantized") && strstr(cfg, "\"token\"") && strstr(cfg, "\"float\""), "%s", cfg);
    free(cfg);
    const char *py = getenv("LMP_CT_PYTHON");
    if (!py || !*py) {
        lmp_test_skip("SKIPPED fp8_preset_folder (compressed-tensors side): LMP_CT_PYTHON is not set\n");
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2>&1", py, CT_CHECK, in_tmp("fp8"));
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    out[fread(out, 1, sizeof out - 1, p)] = 0;
    const int rc = pclose(p);
    printf("%s", out);
    ck_assert_msg(rc == 0, "%s\n%s", cmd, out);
}
END_TEST

/* The GGUF string `key` of path, NUL-terminated into a malloc'd copy. */
static char *gguf_string(const char *path, const char *key)
{
    lmp_gguf *g;
    ck_assert_msg(lmp_gguf_open(path, &g) == 0, "%s", path);
    const char *s;
    size_t n;
    ck_assert_msg(lmp_gguf_get_string(g, key, &s, &n) == 0, "%s: no %s", path, key);
    char *copy = strndup(s, n);
    lmp_gguf_close(g);
    return copy;
}

/* quantize, then run on the config --print-config prints, named as quantize names its own (the
 * file name is metadata too): the two files are the same bytes, and the text is in the file. */
START_TEST(print_config_round_trip)
{
    const char *presets[] = {"Q4_K_M", "Q3_K_M", "IQ4_NL"};
    for (int k = 0; k < 3; k++) {
        char a[512], b[512], cfg_dir[512], cfg[600];
        snprintf(a, sizeof a, "%s/%s-a.gguf", tmpdir, presets[k]);
        snprintf(b, sizeof b, "%s/%s-b.gguf", tmpdir, presets[k]);
        snprintf(cfg_dir, sizeof cfg_dir, "%s/cfg-%s", tmpdir, presets[k]);
        ck_assert_int_eq(mkdir(cfg_dir, 0755), 0);
        snprintf(cfg, sizeof cfg, "%s/lmpress-quantize.cfg", cfg_dir);
        ck_assert_msg(run("quantize '%s' '%s' %s --tokenizer '%s'", MODEL, a, presets[k], TOK) == 0, "%s", out);
        ck_assert_msg(strstr(out, "bits per weight over all") && strstr(out, "(embeddings included)"), "%s", out);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "quantize '%s' '%s' %s --tokenizer '%s' --print-config > '%s'", MODEL, a, presets[k],
                 TOK, cfg);
        ck_assert_int_eq(lmp_test_cli(cmd, out, sizeof out), 0);
        ck_assert_msg(run("run '%s' -o '%s'", cfg, b) == 0, "%s", out);
        size_t na, nb, nc;
        unsigned char *da = lmp_test_slurp(a, &na), *db = lmp_test_slurp(b, &nb), *dc = lmp_test_slurp(cfg, &nc);
        ck_assert_msg(na == nb && memcmp(da, db, na) == 0, "%s: run on the printed config wrote another file", presets[k]);
        char *text = gguf_string(a, "lmpress.config_text");
        ck_assert_str_eq(text, (const char *)dc);
        free(text);
        free(da), free(db), free(dc);
    }
}
END_TEST

/* A group size vLLM cannot take (128 does not divide stories260K's 64-wide rows): refused
 * before the first block is compressed.  Before the pre-flight the writer refused it after the
 * whole compression (SmolLM2 with GPTQ: 14 minutes). */
START_TEST(preflight_refuses_before_any_block)
{
    FILE *f = fopen(in_tmp("g128.cfg"), "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
               "calibration = { text = \"%s/models/stories260K/tinystories-synth-calib.txt\"; samples = 4; seq_len = 64; };\n"
               "variants = ( { name = \"g128\"; pipeline = ( { strategy = \"gptq\";\n"
               "  params = { bits = 4; granularity = \"group\"; group_size = 128; }; } ); } );\n",
            MODEL, TOK, LMP_SOURCE_DIR);
    fclose(f);
    ck_assert_int_eq(run("--verbose run '%s' -o '%s'", in_tmp("g128.cfg"), in_tmp("g128-out")), 1);
    ck_assert_msg(strstr(out, "groups of 128") && strstr(out, "no shorter last group"), "%s", out);
    ck_assert_msg(!strstr(out, "variant 1/1") && !strstr(out, "compressed in"), "work was done before the refusal:\n%s", out);
    ck_assert_int_ne(access(in_tmp("g128-out"), F_OK), 0);
    /* the preset adapts its groups instead; on stories260K (down_proj 172 wide) no group of 32
     * fits, said at once */
    ck_assert_int_eq(run("quantize '%s' '%s' W4A16 --tokenizer '%s'", MODEL, in_tmp("w4"), TOK), 1);
    ck_assert_msg(strstr(out, "multiple of 32"), "%s", out);
    /* a GGUF of a format that divides no row: lmp_run_check_model, also before any block */
    f = fopen(in_tmp("q4k.cfg"), "w");
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
               "variants = ( { name = \"q4\"; pipeline = ( { strategy = \"rtn\"; params = { format = \"q4_0\"; }; } ); } );\n",
            MODEL, TOK);
    fclose(f);
    ck_assert_int_eq(run("--verbose run '%s' -o '%s'", in_tmp("q4k.cfg"), in_tmp("q4.gguf")), 1);
    ck_assert_msg(strstr(out, "blocks of 32") && !strstr(out, "variant 1/1"), "%s", out);
}
END_TEST

/* eval is optional when the variant is written; compare without eval and without an export is
 * refused (nothing to measure), naming what to add. */
START_TEST(eval_optional_with_output)
{
    FILE *f = fopen(in_tmp("noeval.cfg"), "w");
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
               "variants = ( { name = \"q8\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; } ); } );\n",
            MODEL, TOK);
    fclose(f);
    ck_assert_msg(run("run '%s' -o '%s'", in_tmp("noeval.cfg"), in_tmp("q8")) == 0, "%s", out);
    ck_assert_int_eq(access(in_tmp("q8/config.json"), F_OK), 0);
    ck_assert_msg(strstr(out, "no evaluation"), "%s", out);
    ck_assert_int_eq(run("compare '%s'", in_tmp("noeval.cfg")), 1);
    ck_assert_msg(strstr(out, "no eval section"), "%s", out);
}
END_TEST

/* ---- SmolLM2 ------------------------------------------------------------------------------- */

/* llama.cpp's use_more_bits (src/llama-quant.cpp). */
static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* ggml's block size and bytes of the types the recipe uses (ggml-common.h). */
static void type_block(lmp_ggml_type t, int *qk, int *bytes)
{
    switch (t) {
    case LMP_GGML_Q8_0: *qk = 32, *bytes = 34; return;
    case LMP_GGML_Q5_0: *qk = 32, *bytes = 22; return;
    case LMP_GGML_Q4_K: *qk = 256, *bytes = 144; return;
    case LMP_GGML_Q6_K: *qk = 256, *bytes = 210; return;
    case LMP_GGML_F32: *qk = 1, *bytes = 4; return;
    default: ck_abort_msg("type %d not in the Q4_K_M recipe", t);
    }
}

/* llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q4_K_M on a Llama model without experts, then
 * tensor_type_fallback (Q4_K -> Q5_0, Q6_K -> Q8_0 on rows not a multiple of 256). */
static lmp_ggml_type q4_k_m_type(const char *name, int64_t ne0, int n_layer, int tied)
{
    lmp_ggml_type t = LMP_GGML_Q4_K;
    int layer = -1;
    if (strstr(name, "_norm") || !strstr(name, ".weight")) return LMP_GGML_F32;
    if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"))) t = LMP_GGML_Q6_K;
    else if (sscanf(name, "blk.%d.", &layer) == 1 && (strstr(name, "attn_v.") || strstr(name, "ffn_down.")) &&
             use_more_bits(layer, n_layer))
        t = LMP_GGML_Q6_K;
    int qk, bytes;
    type_block(t, &qk, &bytes);
    if (ne0 % qk) t = t == LMP_GGML_Q4_K ? LMP_GGML_Q5_0 : LMP_GGML_Q8_0;
    return t;
}

static int have_smollm2(void)
{
    if (access(SMOL, R_OK) == 0) return 1;
    lmp_test_skip("SKIPPED: %s is missing (run tools/fetch_smollm2.sh)", SMOL);
    return 0;
}

START_TEST(smollm2_q4_k_m_gguf)
{
    if (!have_smollm2()) return;
    const char *gguf = in_tmp("smollm2-Q4_K_M.gguf");
    ck_assert_msg(run("quantize '%s' '%s' Q4_K_M", SMOL, gguf) == 0, "%s", out);
    const char *size_line = strstr(out, "MiB), ");
    ck_assert_msg(size_line && strstr(size_line, "(embeddings included)"), "%s", out);
    printf("  lmpress: %.*s\n", (int)strcspn(size_line + 6, "\n"), size_line + 6);
    lmp_gguf *g;
    ck_assert_int_eq(lmp_gguf_open(gguf, &g), 0);
    int64_t n_layer = 0;
    ck_assert_int_eq(lmp_gguf_get_int(g, "llama.block_count", &n_layer), 0);
    const int tied = lmp_gguf_find_tensor(g, "output.weight") == NULL;
    uint64_t recipe_bytes = 0, bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const lmp_gguf_tensor *t = &g->tensors[i];
        const lmp_ggml_type want = q4_k_m_type(t->name, t->ne[0], (int)n_layer, tied);
        ck_assert_msg(t->type == want, "%s: %s, llama-quantize's Q4_K_M gives %s", t->name, lmp_ggml_type_name(t->type),
                      lmp_ggml_type_name(want));
        int qk, b;
        type_block(want, &qk, &b);
        uint64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= (uint64_t)t->ne[d];
        recipe_bytes += n / (uint64_t)qk * (uint64_t)b;
        bytes += t->nbytes;
    }
    lmp_gguf_close(g);
    struct stat st;
    ck_assert_int_eq(stat(gguf, &st), 0);
    printf("  Q4_K_M: %lld bytes (tensors %llu; llama-quantize's recipe %llu)\n", (long long)st.st_size,
           (unsigned long long)bytes, (unsigned long long)recipe_bytes);
    ck_assert_msg(bytes == recipe_bytes, "tensors of %llu bytes against the recipe's %llu", (unsigned long long)bytes,
                  (unsigned long long)recipe_bytes);
    /* the file: the tensors and a header (the tokenizer: 1.8 MB of SmolLM2's 105 MB) */
    ck_assert_msg(fabs((double)st.st_size / (double)recipe_bytes - 1.0) < 0.05, "size %lld against the recipe's %llu",
                  (long long)st.st_size, (unsigned long long)recipe_bytes);

    /* llama.cpp's own: llama-quantize's file of the same source (RTN is ggml's reference
     * quantizer, so every tensor is the same bytes), and llama-perplexity on ours */
    if (access(LLAMACPP "/llama-quantize", X_OK) == 0) {
        char cmd[2048];
        const char *theirs = in_tmp("llama-Q4_K_M.gguf");
        snprintf(cmd, sizeof cmd, "'%s/llama-quantize' --allow-requantize '%s' '%s' Q4_K_M 2 >/dev/null 2>&1", LLAMACPP,
                 SMOL, theirs);
        ck_assert_msg(system(cmd) == 0, "%s", cmd);
        struct stat ls;
        ck_assert_int_eq(stat(theirs, &ls), 0);
        printf("  llama-quantize Q4_K_M: %lld bytes; lmpress / llama-quantize = %.6f\n", (long long)ls.st_size,
               (double)st.st_size / (double)ls.st_size);
        ck_assert_msg(fabs((double)st.st_size / (double)ls.st_size - 1.0) < 0.05, "%lld against llama-quantize's %lld",
                      (long long)st.st_size, (long long)ls.st_size);
        lmp_gguf *a, *b;
        ck_assert_int_eq(lmp_gguf_open(gguf, &a), 0);
        ck_assert_int_eq(lmp_gguf_open(theirs, &b), 0);
        ck_assert_uint_eq(a->n_tensors, b->n_tensors);
        for (uint64_t i = 0; i < b->n_tensors; i++) {
            const lmp_gguf_tensor *y = &b->tensors[i], *x = lmp_gguf_find_tensor(a, y->name);
            ck_assert_msg(x && x->type == y->type, "%s: %s, llama-quantize's %s", y->name,
                          x ? lmp_ggml_type_name(x->type) : "missing", lmp_ggml_type_name(y->type));
            ck_assert_msg(x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0,
                          "%s: not llama-quantize's bytes", y->name);
        }
        printf("  all %llu tensors are llama-quantize's, byte for byte\n", (unsigned long long)b->n_tensors);
        lmp_gguf_close(a);
        lmp_gguf_close(b);
    } else {
        lmp_test_skip("SKIPPED smollm2_q4_k_m_gguf (llama-quantize's file): no %s/llama-quantize "
                      "(tools/bench/llamacpp_build.sh builds it)", LLAMACPP);
    }
    if (access(LLAMACPP "/llama-perplexity", X_OK) == 0) {
        /* the source first: a llama-perplexity that cannot run here (a build for another CPU dies
         * with Illegal instruction) says nothing about lmpress's file */
        double ppl[2] = {0, 0};
        int rc[2] = {0, 0};
        const char *files[2] = {SMOL, gguf};
        for (int k = 0; k < 2; k++) {
            char cmd[2048], line[4096];
            snprintf(cmd, sizeof cmd, "'%s/llama-perplexity' -m '%s' -f '%s' -c 512 --chunks 4 -t 2 2>&1", LLAMACPP,
                     files[k], WIKI);
            FILE *p = popen(cmd, "r");
            ck_assert_ptr_nonnull(p);
            while (fgets(line, sizeof line, p)) {
                const char *at = strstr(line, "Final estimate: PPL = ");
                if (at) ppl[k] = atof(at + 22);
            }
            rc[k] = pclose(p);
            if (k == 0 && rc[0] != 0) break;
        }
        if (rc[0] != 0) {
            lmp_test_skip("SKIPPED smollm2_q4_k_m_gguf (llama.cpp loading it): %s/llama-perplexity fails on the source "
                          "model too (wait status %d): it cannot run on this machine", LLAMACPP, rc[0]);
        } else {
            ck_assert_msg(rc[1] == 0, "llama-perplexity failed on %s", gguf);
            printf("  llama-perplexity (4 chunks of 512, WikiText-2 test): source %.4f, Q4_K_M %.4f\n", ppl[0], ppl[1]);
            ck_assert_msg(ppl[1] > 1 && ppl[1] < 2 * ppl[0], "PPL %g against the source's %g", ppl[1], ppl[0]);
        }
    } else {
        lmp_test_skip("SKIPPED smollm2_q4_k_m_gguf (llama.cpp loading it): no %s/llama-perplexity "
                      "(tools/bench/llamacpp_build.sh builds it)", LLAMACPP);
    }
}
END_TEST

START_TEST(smollm2_w4a16_folder)
{
    if (!have_smollm2()) return;
    const char *dir = in_tmp("smollm2-W4A16");
    ck_assert_msg(run("quantize '%s' '%s' W4A16", SMOL, dir) == 0, "%s", out);
    ck_assert_msg(strstr(out, "groups of 64, not 128"), "%s", out); /* 576-wide rows */
    size_t n;
    char *cfg = (char *)lmp_test_slurp(in_tmp("smollm2-W4A16/config.json"), &n);
    ck_assert_msg(strstr(cfg, "\"quant_method\": \"compressed-tensors\"") && strstr(cfg, "\"group_size\": 64") &&
                  strstr(cfg, "\"config_text\""), "%s", cfg);
    free(cfg);
    const char *py = getenv("LMP_CT_PYTHON");
    if (!py || !*py) {
        lmp_test_skip("SKIPPED smollm2_w4a16_folder (compressed-tensors side): LMP_CT_PYTHON is not set (an "
                      "interpreter with compressed-tensors, torch and safetensors)");
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2>&1", py, CT_CHECK, dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[4096];
    while (fgets(line, sizeof line, p)) fputs(line, stdout);
    ck_assert_msg(pclose(p) == 0, "%s", cmd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quantize");
    TCase *tc = tcase_create("cli"); /* stories260K: seconds */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, typos_get_did_you_mean);
    tcase_add_test(tc, fp8_preset_folder);
    tcase_add_test(tc, print_config_round_trip);
    tcase_add_test(tc, preflight_refuses_before_any_block);
    tcase_add_test(tc, eval_optional_with_output);
    suite_add_tcase(s, tc);
    TCase *smol = tcase_create("smollm2"); /* CK_RUN_CASE=smollm2 runs these alone */
    tcase_add_checked_fixture(smol, setup, teardown);
    tcase_set_timeout(smol, 2000);
    tcase_add_test(smol, smollm2_q4_k_m_gguf);
    tcase_add_test(smol, smollm2_w4a16_folder);
    suite_add_tcase(s, smol);
    return lmp_test_main(s);
}
