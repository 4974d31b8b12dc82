/* test_arch_compress.c — every strategy family runs on every architecture lmpress reads (issue 33,
 * point 5): on each tiny fixture (tests/fixtures/arch/NAME/model.gguf, which carries its own
 * vocabulary; a family without a GGUF its hf5/ folder, whose tokenizer.json is its vocabulary), `lmpress compare` runs RTN W4 g32, GPTQ W4 g32 and SmoothQuant + RTN W8A8
 * (dynamic per-token activations) against the unmodified model on a few calibration and
 * evaluation windows.
 *
 * What must hold, each a check that fails on a silent error: the run exits 0 with every variant
 * in the JSON; the unmodified variant's KL divergence is 0 (its forward is the reference's); each
 * compressed variant's is finite and above 0 (it did change the weights) and below 2 nats (the
 * grid's error, not a broken forward: RTN W4 on these random models costs about 0.2);
 * SmoothQuant W8A8's below RTN W4's (eight bits cost less than four). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json.h"
#include "testutil.h"

#define FIXTURES LMP_SOURCE_DIR "/tests/fixtures/arch"
#define TEXTS LMP_SOURCE_DIR "/models/stories260K"

/* NAME, or NAME/FORM for a fixture without a GGUF (its Hugging Face folder) */
static const char *const fixtures[] = {"llama3", "qwen2",  "qwen2-yarn", "qwen3", "mistral", "gemma", "gemma2",
                                       "gemma3", "phi3",   "glm",        "glm4",  "gpt2",    "ernie4_5",
                                       "gptneox", "gptneox-seq/hf5", "phi2", "gptj/hf5",
                                       "stablelm", "stablelm-par", "olmo", "starcoder2",
                                       /* Bloom from its folder and its GGUF ("bloom" pre-tokenizer) */
                                       "bloom/hf5", "bloom", "falcon", "falcon-nda", "falcon-seq/hf5", "opt/hf5", "cohere",
                                       /* ChatGLM2/3 from its folder (THUDM's layout) and its GGUF */
                                       "chatglm2/hf", "chatglm2"};
enum { N_FIXTURES = sizeof fixtures / sizeof *fixtures };

static const char *const variants[] = {"fp32", "rtn-w4-g32", "gptq-w4-g32", "sq-w8a8"};
enum { N_VARIANTS = sizeof variants / sizeof *variants };

/* The variant's KL divergence on the evaluation text, from the report. */
static double variant_kld(const lmp_json *report, const char *name)
{
    const lmp_json *ev = lmp_json_get(lmp_test_variant(report, name), "eval");
    ck_assert_msg(ev && ev->type == LMP_JSON_OBJECT && ev->n == 1, "%s: no evaluation", name);
    const lmp_json *k = lmp_json_get(&ev->items[0], "kld");
    ck_assert_msg(k && k->type == LMP_JSON_NUMBER, "%s: no kld", name);
    return k->number;
}

START_TEST(strategies_run_on_each_architecture)
{
    const char *name = fixtures[_i];
    char dir[64], cfg[128], json[128], args[1024], out[16384];
    lmp_test_tmpdir(dir, sizeof dir, "arch-compress");
    snprintf(cfg, sizeof cfg, "%s/run.cfg", dir);
    snprintf(json, sizeof json, "%s/run.json", dir);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "model = { path = \"%s/%s%s\"; };\n"
            "backend = { name = \"cpu\"; };\n"
            "calibration = { text = \"%s/tinystories-synth-calib.txt\"; samples = 8; seq_len = 48; };\n"
            "eval = { texts = [ \"%s/tinystories-synth-eval.txt\" ]; seq_len = 48; max_windows = 8; };\n"
            "seed = 1;\n"
            "variants = (\n"
            "  { name = \"fp32\"; },\n"
            "  { name = \"rtn-w4-g32\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\";"
            " group_size = 32; }; } ); },\n"
            "  { name = \"gptq-w4-g32\"; pipeline = ( { strategy = \"gptq\"; params = { bits = 4; granularity = \"group\";"
            " group_size = 32; }; } ); },\n"
            "  { name = \"sq-w8a8\"; pipeline = ( { strategy = \"smoothquant\"; params = { alpha = 0.5; }; },\n"
            "      { strategy = \"rtn\"; params = { bits = 8; granularity = \"channel\"; act = \"dynamic_token\"; }; } ); }\n"
            ");\n",
            FIXTURES, name, strchr(name, '/') ? "" : "/model.gguf", TEXTS, TEXTS);
    fclose(f);
    snprintf(args, sizeof args, "--quiet compare '%s' --json '%s' 2>&1", cfg, json);
    const int rc = lmp_test_cli(args, out, sizeof out);
    ck_assert_msg(rc == 0, "%s: compare exited %d:\n%s", name, rc, out);
    size_t len;
    unsigned char *text = lmp_test_slurp(json, &len);
    lmp_json *report = NULL;
    ck_assert_int_eq(lmp_json_parse((const char *)text, len, json, &report), 0);
    double kld[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++) kld[v] = variant_kld(report, variants[v]);
    printf("%-10s KLD  rtn-w4-g32 %.4f  gptq-w4-g32 %.4f  sq-w8a8 %.5f\n", name, kld[1], kld[2], kld[3]);
    ck_assert_msg(kld[0] == 0, "%s: the unmodified variant's KLD is %g", name, kld[0]);
    for (int v = 1; v < N_VARIANTS; v++)
        ck_assert_msg(isfinite(kld[v]) && kld[v] > 0 && kld[v] < 2, "%s: %s's KLD is %g", name, variants[v], kld[v]);
    ck_assert_msg(kld[3] < kld[1], "%s: W8A8 (%g) costs more than W4 (%g)", name, kld[3], kld[1]);
    lmp_json_free(report);
    free(text);
    unlink(cfg);
    unlink(json);
    rmdir(dir);
}
END_TEST

/* OLMo 2's post-norm block (issue 40): RTN and GPTQ compare; SmoothQuant has no norm before q, k,
 * v, gate or up to fold its scales into (one input affine per linear would not be the shared
 * input of q, k and v), so it is refused by name, before any variant's numbers are reported. */
START_TEST(post_norm_block_compares_and_refuses_smoothquant)
{
    char dir[64], cfg[128], json[128], args[1024], out[16384];
    lmp_test_tmpdir(dir, sizeof dir, "arch-compress");
    snprintf(cfg, sizeof cfg, "%s/run.cfg", dir);
    snprintf(json, sizeof json, "%s/run.json", dir);
    for (int sq = 0; sq < 2; sq++) {
        FILE *f = fopen(cfg, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f,
                "model = { path = \"%s/olmo2/model.gguf\"; };\n"
                "backend = { name = \"cpu\"; };\n"
                "calibration = { text = \"%s/tinystories-synth-calib.txt\"; samples = 8; seq_len = 48; };\n"
                "eval = { texts = [ \"%s/tinystories-synth-eval.txt\" ]; seq_len = 48; max_windows = 8; };\n"
                "seed = 1;\n"
                "variants = (\n%s);\n",
                FIXTURES, TEXTS, TEXTS,
                sq ? "  { name = \"sq-w8a8\"; pipeline = ( { strategy = \"smoothquant\"; params = { alpha = 0.5; }; },\n"
                     "      { strategy = \"rtn\"; params = { bits = 8; granularity = \"channel\"; act = \"dynamic_token\"; }; } ); }\n"
                   : "  { name = \"fp32\"; },\n"
                     "  { name = \"rtn-w4-g32\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\";"
                     " group_size = 32; }; } ); },\n"
                     "  { name = \"gptq-w4-g32\"; pipeline = ( { strategy = \"gptq\"; params = { bits = 4; granularity = \"group\";"
                     " group_size = 32; }; } ); }\n");
        fclose(f);
        unlink(json);
        snprintf(args, sizeof args, "--quiet compare '%s' --json '%s' 2>&1", cfg, json);
        const int rc = lmp_test_cli(args, out, sizeof out);
        if (sq) {
            printf("olmo2      sq-w8a8 refused (exit %d): %s", rc, out);
            ck_assert_msg(rc != 0 && strstr(out, "smoothquant") && strstr(out, "no norm before it") &&
                          strstr(out, "q_proj"), "olmo2: smoothquant was not refused by name:\n%s", out);
            continue;
        }
        ck_assert_msg(rc == 0, "olmo2: compare exited %d:\n%s", rc, out);
        size_t len;
        unsigned char *text = lmp_test_slurp(json, &len);
        lmp_json *report = NULL;
        ck_assert_int_eq(lmp_json_parse((const char *)text, len, json, &report), 0);
        const double k0 = variant_kld(report, "fp32"), k1 = variant_kld(report, "rtn-w4-g32"),
                     k2 = variant_kld(report, "gptq-w4-g32");
        printf("%-10s KLD  rtn-w4-g32 %.4f  gptq-w4-g32 %.4f\n", "olmo2", k1, k2);
        ck_assert_msg(k0 == 0, "olmo2: the unmodified variant's KLD is %g", k0);
        ck_assert_msg(isfinite(k1) && k1 > 0 && k1 < 2 && isfinite(k2) && k2 > 0 && k2 < 2, "olmo2: KLD %g, %g", k1, k2);
        lmp_json_free(report);
        free(text);
    }
    unlink(cfg);
    unlink(json);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arch_compress");
    TCase *tc = tcase_create("architectures");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, strategies_run_on_each_architecture, 0, N_FIXTURES);
    tcase_add_test(tc, post_norm_block_compares_and_refuses_smoothquant);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
