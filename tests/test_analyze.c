/* test_analyze.c — `lmpress analyze` on stories260K against the plain way.
 *
 * The plain way is done here, without analyze's code: for every linear the test writes a
 * variant that is the analyzed one with an override { match = "re:^<linear>$"; skip = true; }
 * in its stage, runs the whole config through `lmpress compare`, and reads each variant's
 * numbers from compare's JSON.  analyze's fast path (one compression, cached block boundaries,
 * only blocks b..n-1 rerun) must give the same KL, perplexity and top-1 to 1e-6 relative and the
 * same LAMBADA count, for every linear.  The variant is calibrated on the original inputs
 * (static activation scales) so that leaving one linear in float does not change how the others
 * are compressed: then both ways describe the same model.  Also: the SVG, CSV and HTML outputs,
 * the ranking is sorted the right way round (PaddleSlim's sign bug), the written skip config runs
 * through compare with analyze's numbers, mixed precision (--keep-params) likewise, the cost
 * line, and bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOKENIZER LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define CALIB LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"

static char tmpdir[256];
static char output[1 << 20];

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "analyze"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

/* The shared part of the configs: small windows so that 36 variants evaluate in seconds;
 * calibration on `inputs` ("original" unless a test says otherwise). */
static void write_head_inputs(FILE *f, const char *inputs)
{
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
               "backend = { name = \"cpu\"; params = { threads = 1; }; };\n"
               "calibration = { text = \"%s\"; samples = 8; seq_len = 128; inputs = \"%s\"; };\n"
               "eval = { texts = [ \"%s\" ]; seq_len = 128; max_windows = 4; lambada = \"%s\"; lambada_max = 40; };\n"
               "seed = 1234;\n",
            MODEL, TOKENIZER, CALIB, inputs, EVAL_TEXT, LAMBADA);
}

static void write_head(FILE *f) { write_head_inputs(f, "original"); }

#define STAGE "{ strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; act = \"static_tensor\"; act_bits = 8; }; "

static const char *const roles[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

static const char *write_analyzed_config_inputs(const char *inputs)
{
    const char *path = lmp_test_path(tmpdir, "an.cfg");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    write_head_inputs(f, inputs);
    fprintf(f, "variants = ( { name = \"fp32\"; },\n  { name = \"w4a8\"; pipeline = ( " STAGE "} ); } );\n");
    fclose(f);
    return path;
}

static const char *write_analyzed_config(void) { return write_analyzed_config_inputs("original"); }

static double num(const lmp_json *j, const char *key)
{
    double v = NAN;
    ck_assert_msg(lmp_json_get_number(j, key, key, &v) == 0, "no number %s", key);
    return v;
}

static const lmp_json *get(const lmp_json *j, const char *key)
{
    const lmp_json *v = lmp_json_get(j, key);
    ck_assert_msg(v != NULL, "no key %s", key);
    return v;
}

static lmp_json *read_json(const char *path)
{
    size_t n;
    unsigned char *text = lmp_test_slurp(path, &n);
    lmp_json *j = NULL;
    ck_assert_int_eq(lmp_json_parse((const char *)text, n, path, &j), 0);
    free(text);
    return j;
}

static void assert_rel(double a, double b, double tol, const char *what, const char *name)
{
    double scale = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    ck_assert_msg(fabs(a - b) <= tol * (scale > 0 ? scale : 1), "%s of %s: analyze %.17g, compare %.17g", what, name, a, b);
}

/* An analyze result ({"ppl", "kld", "top1", "lambada": {"correct"}}) against compare's entry. */
static void assert_same(const lmp_json *an, const lmp_json *variant, const char *name)
{
    const lmp_json *ev = get(get(variant, "eval"), "tinystories-synth-eval.txt");
    assert_rel(num(an, "ppl"), num(ev, "ppl"), 1e-6, "ppl", name);
    assert_rel(num(an, "kld"), num(ev, "kld"), 1e-6, "kld", name);
    assert_rel(num(an, "top1"), num(ev, "top1"), 1e-6, "top1", name);
    ck_assert_msg(num(get(an, "lambada"), "correct") == num(get(variant, "lambada"), "correct"), "LAMBADA of %s", name);
}

START_TEST(restore_one_matches_compare)
{
    const char *cfg = write_analyzed_config(), *json = lmp_test_path(tmpdir, "an.json");
    const char *skip_cfg = lmp_test_path(tmpdir, "skip.cfg"), *svg = lmp_test_path(tmpdir, "an.svg");
    const char *csv = lmp_test_path(tmpdir, "an.csv"), *html = lmp_test_path(tmpdir, "an.html");
    char args[4096];
    snprintf(args, sizeof args,
             "analyze %s --variant w4a8 --json %s --csv %s --svg %s --html %s --skip-top 4 --write-config %s 2>&1", cfg,
             json, csv, svg, html, skip_cfg);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    ck_assert_ptr_nonnull(strstr(output, "block-forwards against"));
    ck_assert_ptr_nonnull(strstr(output, "Spearman rho"));

    /* the plain way: one variant per linear, that linear skipped by the stage */
    const char *plain = lmp_test_path(tmpdir, "plain.cfg"), *plain_json = lmp_test_path(tmpdir, "plain.json");
    FILE *f = fopen(plain, "w");
    ck_assert_ptr_nonnull(f);
    write_head(f);
    fprintf(f, "variants = (\n  { name = \"w4a8\"; pipeline = ( " STAGE "} ); }");
    for (int b = 0; b < 5; b++)
        for (int r = 0; r < 7; r++)
            fprintf(f, ",\n  { name = \"model.layers.%d.%s\"; pipeline = ( " STAGE
                       "overrides = ( { match = \"re:^model\\\\.layers\\\\.%d\\\\.%s$\"; skip = true; } ); } ); }",
                    b, roles[r], b, roles[r]);
    fprintf(f, "\n);\n");
    fclose(f);
    snprintf(args, sizeof args, "--quiet compare %s --json %s 2>&1", plain, plain_json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);

    lmp_json *an = read_json(json), *pl = read_json(plain_json);
    assert_same(get(an, "compressed"), lmp_test_variant(pl, "w4a8"), "the variant");
    const lmp_json *units = get(an, "units");
    ck_assert_int_eq((int)units->n, 35);
    double prev_gain = INFINITY;
    for (size_t u = 0; u < units->n; u++) {
        const lmp_json *un = &units->items[u];
        const char *name = NULL;
        ck_assert_int_eq(lmp_json_get_string(un, "name", "name", &name), 0);
        assert_same(get(un, "result"), lmp_test_variant(pl, name), name);
        /* ranked by gain, largest first; the gain is the KL the restore removed */
        double gain = num(un, "gain");
        ck_assert_msg(gain <= prev_gain, "unit %zu is ranked above a larger gain", u);
        prev_gain = gain;
        ck_assert_int_eq((int)num(un, "rank"), (int)u + 1);
        assert_rel(gain, num(get(an, "compressed"), "kld") - num(get(un, "result"), "kld"), 1e-12, "gain", name);
    }
    /* restoring the most sensitive linear helps: PaddleSlim's sign bug ranks it last */
    ck_assert(num(&units->items[0], "gain") > 0);
    ck_assert(num(&units->items[0], "gain") > num(&units->items[units->n - 1], "gain"));
    /* the cost: cached evaluation reran fewer block-forwards than one full evaluation per unit */
    const lmp_json *cost = get(an, "cost");
    ck_assert(num(cost, "block_forwards") < num(cost, "naive_block_forwards"));
    ck_assert(num(cost, "share") < 0.8);

    /* the ready config runs through compare and gives analyze's skip-top number */
    const char *skip_json = lmp_test_path(tmpdir, "skip.json");
    snprintf(args, sizeof args, "--quiet compare %s --json %s 2>&1", skip_cfg, skip_json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    lmp_json *sk = read_json(skip_json);
    assert_same(get(get(an, "skip"), "result"), lmp_test_variant(sk, "w4a8-skip4"), "w4a8-skip4");
    ck_assert_int_eq((int)get(get(an, "skip"), "units")->n, 4);
    /* calibrated on the original inputs: analyze says compare reproduces it, and the written
     * config keeps the unmodified model's row */
    ck_assert(get(get(get(an, "skip"), "written_config"), "reproduces")->boolean);
    assert_same(get(get(get(an, "skip"), "written_config"), "result"), lmp_test_variant(sk, "w4a8-skip4"), "written");
    ck_assert(num(lmp_test_variant(sk, "fp32"), "bits_per_weight") == 32);

    /* the SVG is one complete document with a bar per unit; the CSV a header and a row per unit */
    size_t n;
    char *text = (char *)lmp_test_slurp(svg, &n);
    ck_assert_ptr_nonnull(strstr(text, "<svg"));
    ck_assert_ptr_nonnull(strstr(text, "</svg>"));
    int bars = 0;
    for (char *p = text; (p = strstr(p, "<title>")); p++) bars++;
    ck_assert_int_eq(bars, 35);
    free(text);
    /* the page: the same chart inline (a bar per unit), a heat-map cell and a table row per unit,
     * its own script only, and no address (the inline chart leaves out the SVG file's namespace) */
    text = (char *)lmp_test_slurp(html, &n);
    char *chart = strstr(text, "<svg id=\"sensitivity\""), *chart_end = chart ? strstr(chart, "</svg>") : NULL;
    ck_assert(chart && chart_end);
    *chart_end = 0;
    bars = 0;
    for (char *p = chart; (p = strstr(p, "<title>")); p++) bars++;
    *chart_end = '<';
    ck_assert_int_eq(bars, 35);
    int cells = 0, rows = 0;
    for (char *p = text; (p = strstr(p, "<rect class=\"unit\"")); p++) cells++;
    ck_assert_int_eq(cells, 35);
    for (char *p = strstr(text, "<tbody>"); p && (p = strstr(p, "<tr>")); p++) rows++;
    ck_assert_int_eq(rows, 35);
    ck_assert_ptr_null(strstr(text, "http"));
    ck_assert_ptr_nonnull(strstr(text, "<script>"));
    ck_assert_ptr_null(strstr(strstr(text, "<script>") + 1, "<script"));
    free(text);
    text = (char *)lmp_test_slurp(csv, &n);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    ck_assert_int_eq(lines, 36);
    free(text);
    lmp_json_free(an);
    lmp_json_free(pl);
    lmp_json_free(sk);
}
END_TEST

/* Calibrated on the compressed inputs (the default), compare re-compresses the written skip
 * variant and its later blocks re-adapt to the skipped linears: analyze says so, and gives the
 * number compare will give, which compare then gives (to 1e-6 relative: the same compression and
 * the same evaluation code, see assert_same).  The override is one short pattern. */
START_TEST(written_config_on_compressed_inputs)
{
    const char *cfg = write_analyzed_config_inputs("compressed"), *json = lmp_test_path(tmpdir, "c.json");
    const char *out_cfg = lmp_test_path(tmpdir, "c-skip.cfg"), *out_json = lmp_test_path(tmpdir, "c-skip.json");
    char args[4096];
    snprintf(args, sizeof args, "analyze %s --variant w4a8 --skip-top 4 --json %s --write-config %s 2>&1", cfg, json,
             out_cfg);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    ck_assert_msg(strstr(output, "written config: compare re-compresses the skip variant"), "%s", output);
    lmp_json *an = read_json(json);
    const lmp_json *skip = get(an, "skip"), *written = get(skip, "written_config");
    ck_assert(!get(written, "reproduces")->boolean);
    /* the case this is about: the two numbers differ well beyond the tolerance */
    const double k_an = num(get(skip, "result"), "kld"), k_written = num(get(written, "result"), "kld");
    ck_assert_msg(fabs(k_an - k_written) > 1e-3 * k_an, "analyze %.9g, written %.9g", k_an, k_written);
    snprintf(args, sizeof args, "--quiet compare %s --json %s 2>&1", out_cfg, out_json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    lmp_json *cmp = read_json(out_json);
    assert_same(get(written, "result"), lmp_test_variant(cmp, "w4a8-skip4"), "w4a8-skip4");
    assert_same(get(an, "compressed"), lmp_test_variant(cmp, "w4a8"), "w4a8");
    ck_assert(num(lmp_test_variant(cmp, "fp32"), "bits_per_weight") == 32); /* the unmodified model kept */
    /* the override: one pattern, shorter than the four names listed one by one (as the file
     * writes them: each dot escaped, the backslash doubled) */
    size_t n, listed = strlen("re:^()$") + 3;
    for (int k = 0; k < 4; k++)
        for (const char *c = get(skip, "units")->items[k].str; *c; c++) listed += *c == '.' ? 3 : 1;
    char *text = (char *)lmp_test_slurp(out_cfg, &n);
    const char *m = strstr(text, "match = \"re:^model");
    ck_assert_ptr_nonnull(m);
    m += strlen("match = \"");
    const char *end = strchr(m, '"');
    ck_assert_msg(end && (size_t)(end - m) < listed, "%zu chars, listed %zu: %.300s", (size_t)(end - m), listed, m);
    ck_assert_ptr_nonnull(strstr(text, "compare gives w4a8-skip4 kld"));
    free(text);
    lmp_json_free(an);
    lmp_json_free(cmp);
}
END_TEST

/* --rank proxy: no evaluation per unit; the units in proxy order, the skip list the proxy's top
 * four, and its written config reproduced by compare (original inputs). */
START_TEST(rank_by_proxy)
{
    const char *cfg = write_analyzed_config(), *json = lmp_test_path(tmpdir, "p.json");
    const char *full_json = lmp_test_path(tmpdir, "full.json");
    const char *out_cfg = lmp_test_path(tmpdir, "p-skip.cfg"), *out_json = lmp_test_path(tmpdir, "p-skip.json");
    char args[4096];
    snprintf(args, sizeof args, "analyze %s --variant w4a8 --rank proxy --skip-top 4 --json %s --write-config %s 2>&1",
             cfg, json, out_cfg);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    ck_assert_msg(strstr(output, "ranked per linear by the proxy"), "%s", output);
    snprintf(args, sizeof args, "analyze %s --variant w4a8 --json %s 2>&1", cfg, full_json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    lmp_json *an = read_json(json), *full = read_json(full_json);
    ck_assert_str_eq(get(an, "rank_by")->str, "proxy");
    const lmp_json *units = get(an, "units"), *full_units = get(full, "units");
    ck_assert_int_eq((int)units->n, 35);
    double prev = INFINITY;
    for (size_t u = 0; u < units->n; u++) {
        const double p = num(&units->items[u], "proxy");
        ck_assert_msg(p <= prev, "unit %zu ranked above a larger proxy", u);
        prev = p;
        ck_assert_int_eq(get(&units->items[u], "result")->type, LMP_JSON_NULL); /* not evaluated */
        /* the same proxy as the full run's for the same unit */
        const char *name = get(&units->items[u], "name")->str;
        for (size_t v = 0; v < full_units->n; v++)
            if (strcmp(get(&full_units->items[v], "name")->str, name) == 0)
                assert_rel(p, num(&full_units->items[v], "proxy"), 1e-12, "proxy", name);
    }
    /* cheap: the ranking spent the baseline and the other end, no unit's evaluation */
    const lmp_json *cost = get(an, "cost"), *full_cost = get(full, "cost");
    ck_assert(num(cost, "ranking_block_forwards") < num(full_cost, "ranking_block_forwards") / 4);
    /* the skip list is the proxy's top four; compare reproduces its number */
    const lmp_json *skip = get(an, "skip");
    for (int k = 0; k < 4; k++)
        ck_assert_str_eq(get(skip, "units")->items[k].str, get(&units->items[k], "name")->str);
    snprintf(args, sizeof args, "--quiet compare %s --json %s 2>&1", out_cfg, out_json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    lmp_json *cmp = read_json(out_json);
    assert_same(get(skip, "result"), lmp_test_variant(cmp, "w4a8-skip4"), "w4a8-skip4 (proxy)");
    lmp_json_free(an);
    lmp_json_free(full);
    lmp_json_free(cmp);
}
END_TEST

/* --target with --keep-params: the smallest skip list at 8 bits that reaches a KL between the
 * variant's and float's, written as a config whose mixed-precision variant compare agrees with. */
START_TEST(target_keep_params_matches_compare)
{
    const char *cfg = write_analyzed_config(), *json = lmp_test_path(tmpdir, "t.json");
    const char *out_cfg = lmp_test_path(tmpdir, "t.cfg"), *out_json = lmp_test_path(tmpdir, "t-out.json");
    char args[4096];
    snprintf(args, sizeof args, "analyze %s --per block --json %s 2>&1", cfg, json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    lmp_json *an = read_json(json);
    double target = 0.5 * num(get(an, "compressed"), "kld");
    ck_assert_int_eq((int)get(an, "units")->n, 5);
    lmp_json_free(an);
    snprintf(args, sizeof args, "analyze %s --per block --target kld=%.9g --keep-params 'bits = 8;' --json %s "
                                "--write-config %s 2>&1", cfg, target, json, out_cfg);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    ck_assert_ptr_nonnull(strstr(output, "reached"));
    an = read_json(json);
    const lmp_json *skip = get(an, "skip");
    int k = (int)num(skip, "k");
    ck_assert(k >= 1 && k <= 5);
    ck_assert(num(get(skip, "result"), "kld") <= target);
    snprintf(args, sizeof args, "--quiet compare %s --json %s 2>&1", out_cfg, out_json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    lmp_json *cmp = read_json(out_json);
    char name[64];
    snprintf(name, sizeof name, "w4a8-keep%d", k);
    assert_same(get(skip, "result"), lmp_test_variant(cmp, name), name);
    lmp_json_free(an);
    lmp_json_free(cmp);
}
END_TEST

START_TEST(bad_input)
{
    const char *cfg = write_analyzed_config();
    char args[4096];
    snprintf(args, sizeof args, "analyze %s --target kld 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 2);
    ck_assert_ptr_nonnull(strstr(output, "--target kld"));
    snprintf(args, sizeof args, "analyze %s --variant fp32 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 1);
    ck_assert_ptr_nonnull(strstr(output, "no pipeline"));
    snprintf(args, sizeof args, "analyze %s --variant nope 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 1);
    ck_assert_ptr_nonnull(strstr(output, "no variant named 'nope'"));
    snprintf(args, sizeof args, "analyze %s --write-config /tmp/x.cfg 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 2);
    snprintf(args, sizeof args, "analyze %s --skip-top 1 --keep-params 'bitz = 8;' 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 1);
    ck_assert_ptr_nonnull(strstr(output, "--keep-params"));
    ck_assert_ptr_nonnull(strstr(output, "bitz"));
    snprintf(args, sizeof args, "analyze %s --rank cheap 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 2);
    ck_assert_ptr_nonnull(strstr(output, "--rank cheap"));
    snprintf(args, sizeof args, "analyze %s --rank proxy --json /tmp/x.json --resume 2>&1", cfg);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 2);
    /* the proxy is measured on the calibration windows: a config without them is refused */
    const char *nocal = lmp_test_path(tmpdir, "nocal.cfg");
    FILE *f = fopen(nocal, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
               "eval = { texts = [ \"%s\" ]; seq_len = 128; max_windows = 2; };\n"
               "variants = ( { name = \"w4\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; }; } ); } );\n",
            MODEL, TOKENIZER, EVAL_TEXT);
    fclose(f);
    snprintf(args, sizeof args, "analyze %s --rank proxy 2>&1", nocal);
    ck_assert_int_eq(lmp_test_cli(args, output, sizeof output), 1);
    ck_assert_msg(strstr(output, "calibration.text"), "%s", output);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("analyze");
    TCase *tc = tcase_create("analyze");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, restore_one_matches_compare);
    tcase_add_test(tc, target_keep_params_matches_compare);
    tcase_add_test(tc, written_config_on_compressed_inputs);
    tcase_add_test(tc, rank_by_proxy);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_main(suite()); }
