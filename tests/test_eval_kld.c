/* test_eval_kld.c — `lmpress eval MODEL --kl-divergence-base BASE` (tools/cmd_eval_kld.c) and
 * its statistics (core/eval/kld_stats.c):
 *  - a model against itself: KLD exactly 0, every top token the same, PPL(Q) = PPL(base);
 *  - a quantized export of stories260K (rtn q4_0 through `run -o`) against stories260K: the KLD,
 *    ppl and top-1 equal, bit for bit, what `compare` reports for the same pair as an external
 *    variant with the same text, seq_len and max_windows;
 *  - the llama-perplexity statistics (uncertainties, correlation, ratios, percentiles, Δp, same
 *    top p) of random log-probabilities equal tools/ref/kld_stats_ref.py's numpy statement of
 *    llama.cpp's definitions;
 *  - --score-second-half scores positions L/2 .. L-2 of each window, against the base too;
 *  - BASE as llama-perplexity's logits file (tools/ref/llama2c_ref.py logits-file writes one from
 *    its own forward): the model against its own logits differs only by their 16-bit coding;
 *  - usage errors and a model of another vocabulary: one line each. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/kld_stats.h"
#include "formats/json.h"
#include "testutil.h"

#define MODEL_DIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL MODEL_DIR "/stories260K.bin"
#define TOK MODEL_DIR "/tok512.bin"
#define EVAL_TEXT MODEL_DIR "/tinystories-synth-eval.txt"
#define CALIB_TEXT MODEL_DIR "/tinystories-synth-calib.txt"
#define GPT2 LMP_SOURCE_DIR "/tests/golden/gpt2-tiny"
#define REF LMP_SOURCE_DIR "/tools/ref/kld_stats_ref.py"
#define WINDOWS "--seq-len 64 --max-windows 8"

static char tmpdir[256];
static char output[1 << 17];

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "evalkld"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

/* `lmpress ARGS` with stdout and stderr into output; the exit code. */
static int run(const char *args)
{
    return lmp_test_cli_all(args, output, sizeof output);
}

/* `lmpress ARGS` that must succeed and print one JSON document; parsed into *out. */
static void run_json(const char *args, lmp_json **out)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s 2>/dev/null", args);
    int rc = lmp_test_cli(cmd, output, sizeof output);
    ck_assert_msg(rc == 0, "lmpress %s: exit %d\n%s", args, rc, output);
    ck_assert_msg(lmp_json_parse(output, strlen(output), args, out) == 0, "not JSON: %s", output);
}

static double num(const lmp_json *j, const char *key)
{
    double v;
    ck_assert_msg(lmp_json_get_number(j, key, "output", &v) == 0, "no number '%s'", key);
    return v;
}

START_TEST(model_against_itself_is_zero)
{
    lmp_json *j;
    run_json("eval " MODEL " --kl-divergence-base " MODEL " --text " EVAL_TEXT " " WINDOWS " --json", &j);
    const lmp_json *st = lmp_json_get(j, "stats");
    ck_assert_ptr_nonnull(st);
    ck_assert_msg(num(j, "kld") == 0.0, "KLD(model, itself) = %.17g", num(j, "kld"));
    ck_assert_msg(num(st, "kld") == 0.0 && num(st, "kld_err") == 0.0, "stats kld %.17g", num(st, "kld"));
    ck_assert_msg(num(j, "top1") == 1.0 && num(st, "same_top") == 1.0, "top tokens differ from themselves");
    ck_assert_msg(num(j, "ppl") == num(j, "ppl_base"), "ppl %.17g vs base %.17g", num(j, "ppl"), num(j, "ppl_base"));
    ck_assert_msg(num(st, "dp_rms") == 0.0, "RMS dp %.17g", num(st, "dp_rms"));
    ck_assert_int_eq((int)num(j, "scored"), 8 * 63);
    lmp_json_free(j);
}
END_TEST

/* The numbers compare prints for variant "x" on the one eval text: ppl, kld, top1. */
static void compare_row(const char *json_path, double out[3])
{
    size_t n;
    char *text = (char *)lmp_test_slurp(json_path, &n);
    lmp_json *j;
    ck_assert_int_eq(lmp_json_parse(text, n, json_path, &j), 0);
    const lmp_json *vs = lmp_json_get(j, "variants");
    ck_assert_ptr_nonnull(vs);
    const lmp_json *row = NULL;
    for (size_t i = 0; i < vs->n; i++) {
        const char *name;
        if (lmp_json_get_string(&vs->items[i], "name", "variant", &name) == 0 && strcmp(name, "x") == 0)
            row = &vs->items[i];
    }
    ck_assert_msg(row != NULL, "no variant x in %s", text);
    const lmp_json *ev = lmp_json_get(lmp_json_get(row, "eval"), "tinystories-synth-eval.txt");
    ck_assert_ptr_nonnull(ev);
    out[0] = num(ev, "ppl"), out[1] = num(ev, "kld"), out[2] = num(ev, "top1");
    lmp_json_free(j);
    free(text);
}

START_TEST(kld_equals_compare)
{
    /* a quantized export of stories260K: lmpress's own q4_0 through run -o */
    char cfg[512], q4[512], table[512], text[4096];
    snprintf(cfg, sizeof cfg, "%s/q4.cfg", tmpdir);
    snprintf(q4, sizeof q4, "%s/q4.gguf", tmpdir);
    snprintf(table, sizeof table, "%s/table.json", tmpdir);
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s\"; samples = 2; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 8; };\n"
             "variants = ( { name = \"q4\"; pipeline = ( { strategy = \"rtn\"; params = { format = \"q4_0\"; };\n"
             "  targets = \"re:\\\\.(q|k|v|o|gate|up)_proj$\"; } ); } );\n",
             MODEL, TOK, CALIB_TEXT, EVAL_TEXT);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    char args[2048];
    snprintf(args, sizeof args, "--quiet run %s -o %s", cfg, q4);
    ck_assert_msg(run(args) == 0, "run -o: %s", output);
    /* compare, the same file as an external variant beside the unmodified model */
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 8; };\n"
             "variants = ( { name = \"fp32\"; }, { name = \"x\"; model = \"%s\"; } );\n",
             MODEL, TOK, EVAL_TEXT, q4);
    snprintf(cfg, sizeof cfg, "%s/pair.cfg", tmpdir);
    f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    snprintf(args, sizeof args, "--quiet compare %s --json %s", cfg, table);
    ck_assert_msg(run(args) == 0, "compare: %s", output);
    double want[3];
    compare_row(table, want);
    lmp_json *j;
    snprintf(args, sizeof args, "eval %s --kl-divergence-base %s --text %s %s --json", q4, MODEL, EVAL_TEXT, WINDOWS);
    run_json(args, &j);
    const double got[3] = {num(j, "ppl"), num(j, "kld"), num(j, "top1")};
    const char *what[3] = {"ppl", "kld", "top1"};
    for (int k = 0; k < 3; k++)
        ck_assert_msg(got[k] == want[k], "%s: eval %.17g, compare %.17g", what[k], got[k], want[k]);
    ck_assert_msg(want[1] > 1e-3, "the q4_0 export is too close to the model to test anything (kld %g)", want[1]);
    /* the statistics' mean is the same number; the base's ppl is the unmodified model's */
    const lmp_json *st = lmp_json_get(j, "stats");
    ck_assert_msg(num(st, "kld") == want[1] && num(st, "kld_err") > 0, "stats kld %.17g", num(st, "kld"));
    ck_assert_msg(num(st, "ppl") > num(st, "ppl_base"), "ppl %g, base %g", num(st, "ppl"), num(st, "ppl_base"));
    lmp_json_free(j);
    /* the text form prints llama-perplexity's sections */
    snprintf(args, sizeof args, "eval %s --kl-divergence-base %s --text %s %s", q4, MODEL, EVAL_TEXT, WINDOWS);
    ck_assert_int_eq(run(args), 0);
    const char *needles[] = {"Mean PPL(Q)", "Mean PPL(base)", "Cor(ln(PPL(Q)), ln(PPL(base)))", "Mean    KLD:",
                             "99.9%   KLD:", "Median  KLD:", "Mean    Δp:", "RMS Δp    :", "Same top p:"};
    for (size_t k = 0; k < sizeof needles / sizeof *needles; k++)
        ck_assert_msg(strstr(output, needles[k]), "'%s' missing:\n%s", needles[k], output);
    /* --score-second-half: positions 32 .. 62 of each window, against a base scored the same way */
    snprintf(args, sizeof args, "eval %s --kl-divergence-base %s --text %s %s --score-second-half --json", q4, MODEL,
             EVAL_TEXT, WINDOWS);
    run_json(args, &j);
    ck_assert_int_eq((int)num(j, "scored"), 8 * 31);
    ck_assert_msg(num(j, "kld") > 0 && num(j, "kld") != want[1], "second-half kld %.17g", num(j, "kld"));
    lmp_json_free(j);
    snprintf(args, sizeof args, "eval %s --kl-divergence-base %s --text %s %s --score-second-half --json", MODEL, MODEL,
             EVAL_TEXT, WINDOWS);
    run_json(args, &j);
    ck_assert_msg(num(j, "kld") == 0.0 && num(j, "scored") == 8 * 31, "second half of itself: kld %.17g",
                  num(j, "kld"));
    lmp_json_free(j);
}
END_TEST

/* BASE as llama-perplexity's logits file (--kl-divergence-base FILE, llama.cpp's first step),
 * written by tools/ref/llama2c_ref.py logits-file from its float64 forward of stories260K in
 * llama.cpp's layout and 16-bit coding: stories260K against it scores the file's chunks' second
 * halves and differs from it only by that coding and f32 arithmetic. */
#define LOGITS_REF "'%s' " LMP_SOURCE_DIR "/tools/ref/llama2c_ref.py logits-file " EVAL_TEXT " %s -c 64 --chunks 6"

START_TEST(llama_logits_file_base)
{
    const char *file = lmp_test_path(tmpdir, "base.logits");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, LOGITS_REF " >/dev/null", lmp_test_python(), file);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    lmp_json *j;
    snprintf(cmd, sizeof cmd, "eval " MODEL " --kl-divergence-base %s --json", file);
    run_json(cmd, &j);
    ck_assert_int_eq((int)num(j, "scored"), 6 * 31);
    ck_assert_int_eq((int)num(j, "windows"), 6);
    ck_assert_msg(num(j, "kld") >= 0 && num(j, "kld") < 1e-5, "kld against its own logits %.3g", num(j, "kld"));
    ck_assert_msg(fabs(num(j, "ppl") / num(j, "ppl_base") - 1) < 1e-4, "ppl %.9g, base %.9g", num(j, "ppl"),
                  num(j, "ppl_base"));
    ck_assert_msg(num(j, "top1") > 0.99, "top1 %g", num(j, "top1"));
    lmp_json_free(j);
    /* --max-windows caps the chunks */
    snprintf(cmd, sizeof cmd, "eval " MODEL " --kl-divergence-base %s --max-windows 2 --json", file);
    run_json(cmd, &j);
    ck_assert_int_eq((int)num(j, "scored"), 2 * 31);
    lmp_json_free(j);
    /* what does not fit: --text, another --seq-len, a truncated file */
    snprintf(cmd, sizeof cmd, "eval " MODEL " --kl-divergence-base %s --text " EVAL_TEXT, file);
    ck_assert_int_eq(run(cmd), 1);
    ck_assert_msg(strstr(output, "holds its own tokens (leave out --text)"), "%s", output);
    snprintf(cmd, sizeof cmd, "eval " MODEL " --kl-divergence-base %s --seq-len 32", file);
    ck_assert_int_eq(run(cmd), 1);
    ck_assert_msg(strstr(output, "computed with chunks of 64"), "%s", output);
    snprintf(cmd, sizeof cmd, "truncate -s -2 %s", file);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "eval " MODEL " --kl-divergence-base %s", file);
    ck_assert_int_eq(run(cmd), 1);
    ck_assert_msg(strstr(output, "but its header (n_ctx 64, n_vocab 512, n_chunk 6) says"), "%s", output);
}
END_TEST

/* ---- the statistics against the numpy statement of llama.cpp's definitions ---------------- */

static void log_softmax(float *x, int64_t V)
{
    double m = x[0], s = 0;
    for (int64_t v = 1; v < V; v++) m = fmax(m, x[v]);
    for (int64_t v = 0; v < V; v++) s += exp(x[v] - m);
    for (int64_t v = 0; v < V; v++) x[v] = (float)(x[v] - m - log(s));
}

static void close_to(const char *what, double got, double want)
{
    ck_assert_msg(fabs(got - want) <= 1e-9 * fabs(want) + 1e-12, "%s: %.17g, reference %.17g", what, got, want);
}

START_TEST(statistics_match_reference)
{
    enum { W = 5, L = 40, V = 11 };
    static float ref[W * L * V], var[W * L * V];
    static int32_t tok[W * L];
    uint64_t seed = 12345;
    for (int i = 0; i < W * L * V; i++) {
        ref[i] = 2.0f * lmp_test_normal(&seed);
        var[i] = ref[i] + 0.4f * lmp_test_normal(&seed); /* Q: the base's logits disturbed */
    }
    for (int i = 0; i < W * L; i++) tok[i] = (int32_t)(lmp_test_uniform(&seed) * V);
    for (int r = 0; r < W * L; r++) log_softmax(ref + r * V, V), log_softmax(var + r * V, V);
    const char *path = lmp_test_path(tmpdir, "logprobs.bin");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const int32_t head[3] = {W, L, V};
    fwrite(head, sizeof head, 1, f);
    fwrite(ref, sizeof ref, 1, f);
    fwrite(var, sizeof var, 1, f);
    fwrite(tok, sizeof tok, 1, f);
    fclose(f);
    lmp_kld_stats s = {0};
    for (int w = 0; w < W; w++)
        ck_assert_int_eq(lmp_kld_stats_window(&s, ref + w * L * V, var + w * L * V, tok + w * L, L, V), 0);
    lmp_kld_summary k;
    lmp_kld_summarize(&s, &k);
    lmp_kld_stats_free(&s);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", lmp_test_python(), REF, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(output, 1, sizeof output - 1, p);
    output[n] = 0;
    ck_assert_msg(pclose(p) == 0, "%s failed:\n%s", cmd, output);
    lmp_json *j;
    ck_assert_int_eq(lmp_json_parse(output, n, "kld_stats_ref.py", &j), 0);
    ck_assert_int_eq((int)k.count, (int)num(j, "count"));
    const struct {
        const char *key;
        lmp_mean_err v;
    } pairs[] = {{"ppl", k.ppl},         {"ppl_base", k.ppl_base}, {"ln_ppl_ratio", k.ln_ppl_ratio},
                 {"ppl_ratio", k.ppl_ratio}, {"ppl_diff", k.ppl_diff}, {"kld", k.kld},
                 {"dp", k.dp},           {"dp_rms", k.dp_rms},     {"same_top", k.same_top}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char err_key[64];
        snprintf(err_key, sizeof err_key, "%s_err", pairs[i].key);
        close_to(pairs[i].key, pairs[i].v.mean, num(j, pairs[i].key));
        close_to(err_key, pairs[i].v.err, num(j, err_key));
        ck_assert_msg(pairs[i].v.err > 0, "%s: no uncertainty", err_key);
    }
    close_to("ln_ppl_cor", k.ln_ppl_cor, num(j, "ln_ppl_cor"));
    const lmp_json *kp = lmp_json_get(j, "kld_percentiles"), *dq = lmp_json_get(j, "dp_percentiles");
    ck_assert_msg(kp && kp->n == LMP_KLD_N_PCT && dq && dq->n == LMP_DP_N_PCT, "percentile lists");
    for (int i = 0; i < LMP_KLD_N_PCT; i++) close_to("kld percentile", k.kld_pct[i], kp->items[i].number);
    for (int i = 0; i < LMP_DP_N_PCT; i++) close_to("dp percentile", k.dp_pct[i], dq->items[i].number);
    ck_assert_msg(k.kld_pct[0] > k.kld_pct[5] && k.kld_pct[5] > k.kld_pct[10], "percentiles not ordered");
    ck_assert_msg(k.same_top.mean > 0.2 && k.same_top.mean < 1.0, "same top %g: a degenerate case", k.same_top.mean);
    lmp_json_free(j);
}
END_TEST

START_TEST(usage_and_bad_pairs)
{
    ck_assert_int_eq(run("eval " MODEL " --kl-divergence-base " MODEL " --lambada x.jsonl"), 2);
    ck_assert_msg(strstr(output, "--kl-divergence-base compares on --text FILE") && strstr(output, "'lmpress eval --help'"),
                  "%s", output);
    ck_assert_int_eq(run("eval --kl-divergence-base"), 2);
    ck_assert_msg(strstr(output, "option --kl-divergence-base needs a value"), "%s", output);
    ck_assert_int_eq(run("eval --kl-divergence-bas " MODEL " --text " EVAL_TEXT), 2);
    ck_assert_msg(strstr(output, "(did you mean --kl-divergence-base?)"), "%s", output);
    /* another vocabulary: refused before any forward, naming the file */
    ck_assert_int_eq(run("eval " GPT2 " --kl-divergence-base " MODEL " --text " EVAL_TEXT " " WINDOWS), 1);
    ck_assert_msg(strstr(output, "lmpress: error: ") && strstr(output, "gpt2-tiny") && strstr(output, "tokens"), "%s",
                  output);
    ck_assert_int_eq(run("eval " MODEL " --kl-divergence-base /nonexistent/base.gguf --text " EVAL_TEXT), 1);
    ck_assert_msg(strstr(output, "/nonexistent/base.gguf"), "%s", output);
    ck_assert_int_eq(run("eval " MODEL " --kl-divergence-base " MODEL " --text " EVAL_TEXT " --seq-len 4096"), 1);
    ck_assert_msg(strstr(output, "exceeds the base model's context"), "%s", output);
    ck_assert_int_eq(run("eval --help"), 0);
    ck_assert_msg(strstr(output, "--kl-divergence-base BASE"), "--help does not describe it:\n%s", output);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("eval_kld");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, model_against_itself_is_zero);
    tcase_add_test(tc, kld_equals_compare);
    tcase_add_test(tc, statistics_match_reference);
    tcase_add_test(tc, llama_logits_file_base);
    tcase_add_test(tc, usage_and_bad_pairs);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
