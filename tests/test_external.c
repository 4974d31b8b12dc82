/* test_external.c — external variants (`model = "x.gguf";` instead of a pipeline): another tool's
 * file evaluated against the same base model in the same table.  stories260K is written as GGUF by
 * tools/ref/llama2c_to_gguf.py (the PyPI gguf package from build/pydeps, as tools/test.sh sets it
 * up): as F32 it must score exactly as the unmodified model, as Q8_0 differently but plausibly,
 * with bits per weight and the format name from the block linears' GGUF types; a file whose own
 * head (or final norm) is the base's times 1/2 must score differently from the base, and exactly
 * alike (every logit halved); a file with one token string changed must be refused before any
 * variant runs; and a variant with both `pipeline` and `model`, or a missing file, is refused
 * when the config is loaded. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/json.h"
#include "testutil.h"

#define SDIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL SDIR "/stories260K.bin"
#define TOK SDIR "/tok512.bin"
#define EVAL_TEXT SDIR "/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"
#define PYDEPS LMP_BINARY_DIR "/pydeps"

static char tmpdir[256];
static char output[1 << 20];

static void setup(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "external");
}

static void teardown(void)
{
    lmp_test_rmtree(tmpdir);
}

static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

/* stories260K as GGUF in the test's folder; extra: more arguments of llama2c_to_gguf.py. */
static void make_gguf(const char *name, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s/tools/ref/llama2c_to_gguf.py' '%s' '%s' '%s' %s", PYDEPS,
             lmp_test_python(), LMP_SOURCE_DIR, MODEL, TOK, tmp(name), extra);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

/* A config of stories260K (relative external paths resolve against the test's folder). */
static const char *config(const char *variants)
{
    char text[8192];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 6;\n"
             "         lambada = \"%s\"; lambada_max = 40; };\n"
             "variants = (\n%s\n);\n",
             MODEL, TOK, EVAL_TEXT, LAMBADA, variants);
    const char *p = tmp("x.cfg");
    lmp_test_spit(p, text, strlen(text));
    return p;
}

static int run(const char *args)
{
    return lmp_test_cli_all(args, output, sizeof output);
}


static double num(const lmp_json *j, const char *key)
{
    double v;
    ck_assert_msg(lmp_json_get_number(j, key, "report", &v) == 0, "%s", key);
    return v;
}

START_TEST(gguf_f32_equals_fp32_and_q8_differs)
{
    if (!lmp_test_have_gguf("gguf_f32_equals_fp32_and_q8_differs")) return;
    make_gguf("f32.gguf", "--type F32");
    make_gguf("q8.gguf", "--type Q8_0");
    const char *cfg = config("{ name = \"fp32\"; },\n"
                             "{ name = \"ext-f32\"; model = \"f32.gguf\"; },\n"
                             "{ name = \"ext-q8\"; model = \"q8.gguf\"; }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json %s", cfg, tmp("r.json"));
    ck_assert_msg(run(args) == 0, "%s", output);
    size_t n;
    char *text = (char *)lmp_test_slurp(tmp("r.json"), &n);
    lmp_json *j = NULL;
    ck_assert_int_eq(lmp_json_parse(text, n, "r.json", &j), 0);
    const lmp_json *fp = lmp_test_variant(j, "fp32"), *f32 = lmp_test_variant(j, "ext-f32"), *q8 = lmp_test_variant(j, "ext-q8");
    const char *s = NULL;
    ck_assert_int_eq(lmp_json_get_string(f32, "model", "ext-f32", &s), 0);
    ck_assert_ptr_nonnull(strstr(s, "f32.gguf"));
    ck_assert_int_eq(lmp_json_get_string(q8, "format", "ext-q8", &s), 0);
    ck_assert_str_eq(s, "GGUF v3 Q8_0/F32 mix"); /* most parameters first */
    ck_assert_int_eq(lmp_json_get_string(f32, "format", "ext-f32", &s), 0);
    ck_assert_str_eq(s, "GGUF v3 F32");
    ck_assert_ptr_null(lmp_json_get(fp, "model"));
    /* bits per weight: the block linears' storage, ggml's type sizes.  Q8_0 is 34 bytes per 32
     * weights (8.5 bits); ffn_down (172 inputs, not a multiple of 32) stays F32. */
    const lmp_json *mj = lmp_json_get(j, "model");
    const double d = num(mj, "dim"), h = num(mj, "hidden"), kv = d / num(mj, "heads") * num(mj, "kv_heads");
    const double q8_params = d * d * 2 + kv * d * 2 + h * d * 2, down = d * h;
    const double q8_bits = (q8_params * 8.5 + down * 32) / (q8_params + down);
    ck_assert_msg(num(f32, "bits_per_weight") == 32, "%.17g", num(f32, "bits_per_weight"));
    ck_assert_msg(fabs(num(q8, "bits_per_weight") - q8_bits) < 1e-12, "%.17g vs %.17g", num(q8, "bits_per_weight"), q8_bits);
    /* and per linear in the JSON */
    const lmp_json *lins = lmp_json_get(q8, "linears");
    ck_assert_ptr_nonnull(lins);
    int seen = 0;
    for (size_t i = 0; i < lins->n; i++) {
        const char *name = NULL;
        ck_assert_int_eq(lmp_json_get_string(&lins->items[i], "name", "linear", &name), 0);
        double want = strstr(name, "down_proj") ? 32 : 8.5;
        ck_assert_msg(num(&lins->items[i], "weight_bits") == want, "%s: %g", name, num(&lins->items[i], "weight_bits"));
        seen++;
    }
    ck_assert_int_eq(seen, 5 * 7);
    const lmp_json *efp = lmp_json_get(lmp_json_get(fp, "eval"), "tinystories-synth-eval.txt");
    const lmp_json *ef = lmp_json_get(lmp_json_get(f32, "eval"), "tinystories-synth-eval.txt");
    const lmp_json *eq = lmp_json_get(lmp_json_get(q8, "eval"), "tinystories-synth-eval.txt");
    ck_assert_ptr_nonnull(efp);
    ck_assert_ptr_nonnull(ef);
    ck_assert_ptr_nonnull(eq);
    /* F32: the very same weights, so exactly the unmodified model's numbers */
    ck_assert_msg(num(ef, "nll_sum") == num(efp, "nll_sum"), "%.17g vs %.17g", num(ef, "nll_sum"), num(efp, "nll_sum"));
    ck_assert_msg(num(ef, "kld_sum") == 0, "%g", num(ef, "kld_sum"));
    ck_assert_msg(num(ef, "top1") == 1.0, "%g", num(ef, "top1"));
    /* Q8_0: close but not equal */
    ck_assert_msg(num(eq, "kld") > 0 && num(eq, "kld") < 0.05, "kld %g", num(eq, "kld"));
    ck_assert_msg(num(eq, "top1") < 1.0 && num(eq, "top1") > 0.9, "top1 %g", num(eq, "top1"));
    ck_assert_msg(num(eq, "nll_sum") != num(efp, "nll_sum"), "Q8_0 scored exactly as fp32");
    double pq = num(eq, "ppl"), pf = num(efp, "ppl");
    ck_assert_msg(pq > 0.9 * pf && pq < 1.1 * pf, "ppl %g vs %g", pq, pf);
    /* LAMBADA ran for the external variants too */
    ck_assert_ptr_nonnull(lmp_json_get(f32, "lambada"));
    ck_assert_ptr_nonnull(lmp_json_get(q8, "lambada"));
    lmp_json_free(j);
    free(text);
}
END_TEST

/* The file's own head and final norm are used: halving either halves every logit exactly (a power
 * of two), so both rows are equal to each other, differ from the base's (the distribution is
 * flatter), and keep every argmax. */
START_TEST(own_head_and_final_norm_are_used)
{
    if (!lmp_test_have_gguf("own_head_and_final_norm_are_used")) return;
    make_gguf("head.gguf", "--head-scale 0.5");
    make_gguf("norm.gguf", "--norm-scale 0.5");
    const char *cfg = config("{ name = \"fp32\"; },\n"
                             "{ name = \"ext-head\"; model = \"head.gguf\"; },\n"
                             "{ name = \"ext-norm\"; model = \"norm.gguf\"; }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json %s", cfg, tmp("r.json"));
    ck_assert_msg(run(args) == 0, "%s", output);
    ck_assert_msg(!strstr(output, "base model's"), "a warning about the base's head is left:\n%s", output);
    size_t n;
    char *text = (char *)lmp_test_slurp(tmp("r.json"), &n);
    lmp_json *j = NULL;
    ck_assert_int_eq(lmp_json_parse(text, n, "r.json", &j), 0);
    const char *key = "tinystories-synth-eval.txt";
    const lmp_json *efp = lmp_json_get(lmp_json_get(lmp_test_variant(j, "fp32"), "eval"), key);
    const lmp_json *eh = lmp_json_get(lmp_json_get(lmp_test_variant(j, "ext-head"), "eval"), key);
    const lmp_json *en = lmp_json_get(lmp_json_get(lmp_test_variant(j, "ext-norm"), "eval"), key);
    ck_assert_ptr_nonnull(efp);
    ck_assert_ptr_nonnull(eh);
    ck_assert_ptr_nonnull(en);
    ck_assert_msg(num(eh, "nll_sum") != num(efp, "nll_sum"), "the file's head was not used: %.17g", num(eh, "nll_sum"));
    ck_assert_msg(num(eh, "kld") > 0, "kld %g", num(eh, "kld"));
    ck_assert_msg(num(eh, "top1") == 1.0, "top1 %g", num(eh, "top1"));
    ck_assert_msg(num(en, "nll_sum") == num(eh, "nll_sum"), "%.17g vs %.17g", num(en, "nll_sum"), num(eh, "nll_sum"));
    ck_assert_msg(num(en, "kld_sum") == num(eh, "kld_sum"), "%.17g vs %.17g", num(en, "kld_sum"), num(eh, "kld_sum"));
    /* LAMBADA runs the file's head too: argmax unchanged, so the same passages are right */
    double a_fp, a_h;
    ck_assert_int_eq(lmp_json_get_number(lmp_json_get(lmp_test_variant(j, "fp32"), "lambada"), "acc", "fp32", &a_fp), 0);
    ck_assert_int_eq(lmp_json_get_number(lmp_json_get(lmp_test_variant(j, "ext-head"), "lambada"), "acc", "ext-head", &a_h), 0);
    ck_assert_msg(a_fp == a_h, "%g vs %g", a_fp, a_h);
    lmp_json_free(j);
    free(text);
}
END_TEST

START_TEST(other_vocabulary_refused_before_any_variant)
{
    if (!lmp_test_have_gguf("other_vocabulary_refused_before_any_variant")) return;
    make_gguf("bad.gguf", "--change-token 300 zzqq");
    const char *cfg = config("{ name = \"fp32\"; },\n{ name = \"odd\"; model = \"bad.gguf\"; }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s", cfg);
    ck_assert_int_ne(run(args), 0);
    ck_assert_msg(strstr(output, "variant 'odd'") && strstr(output, "bad.gguf") && strstr(output, "token 300") &&
                      strstr(output, "zzqq"),
                  "unclear refusal:\n%s", output);
    ck_assert_msg(!strstr(output, "variant 1/2"), "a variant ran before the refusal:\n%s", output);
}
END_TEST

START_TEST(pipeline_and_model_or_missing_file_refused_at_load)
{
    const char *cfg = config("{ name = \"fp32\"; },\n"
                             "{ name = \"both\"; model = \"q.gguf\";\n"
                             "  pipeline = ( { strategy = \"rtn\"; } ); }");
    char args[1024];
    snprintf(args, sizeof args, "check %s", cfg);
    ck_assert_int_ne(run(args), 0);
    ck_assert_msg(strstr(output, "x.cfg:6: variants[1].model: ") && strstr(output, "not both"), "%s", output);
    cfg = config("{ name = \"fp32\"; },\n{ name = \"gone\"; model = \"missing.gguf\"; }");
    snprintf(args, sizeof args, "check %s", cfg);
    ck_assert_int_ne(run(args), 0);
    ck_assert_msg(strstr(output, "x.cfg:6: variants[1].model: ") && strstr(output, "missing.gguf: cannot open"), "%s",
                  output);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("external");
    TCase *tc = tcase_create("external");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, gguf_f32_equals_fp32_and_q8_differs);
    tcase_add_test(tc, own_head_and_final_norm_are_used);
    tcase_add_test(tc, other_vocabulary_refused_before_any_variant);
    tcase_add_test(tc, pipeline_and_model_or_missing_file_refused_at_load);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
