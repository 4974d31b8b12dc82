/* test_imatrix_write.c — `lmpress imatrix MODEL --calib TEXT -o F.gguf` (tools/cmd_imatrix.c,
 * core/compress/imatrix_collect.c, core/export/imatrix_write.c), against references that are not
 * lmpress:
 *  - tools/ref/llama2c_ref.py imatrix restates llama-imatrix's chunking and sums on its own
 *    float64 numpy forward of stories260K; the file lmpress writes, read back with lmpress's reader
 *    (formats/imatrix.h: what importance = "imatrix" uses), holds those values per input
 *    (in_sum2 / counts) within float32 forward error, the right counts, chunk count and dataset;
 *  - the same script's --check reads the file with the PyPI gguf package (llama.cpp's gguf-py):
 *    metadata, names, shapes, F32 types and values as llama-imatrix writes them (skipped without
 *    the package);
 *  - the file serves a config's imatrix = "F.gguf" (check finds an entry for every linear);
 *  - llama-imatrix's chunking (BOS replacing each chunk's first token, --chunks) in
 *    lmp_imatrix_chunks;
 *  - usage errors and bad inputs: one line each, and no file left behind. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "compress/imatrix_collect.h"
#include "formats/imatrix.h"
#include "formats/json.h"
#include "testutil.h"

#define MODEL_DIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL MODEL_DIR "/stories260K.bin"
#define TOK MODEL_DIR "/tok512.bin"
#define CALIB MODEL_DIR "/tinystories-synth-calib.txt"
#define REF LMP_SOURCE_DIR "/tools/ref/llama2c_ref.py"
#define CHUNKS "-c 64 --chunks 8"

static char tmpdir[256];
static char output[1 << 20];

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "imatwrite"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

static int run(const char *args)
{
    return lmp_test_cli_all(args, output, sizeof output);
}

/* Writes the stories260K imatrix of CALIB (64-token chunks, the first 8) to tmpdir/im.gguf. */
static const char *write_imatrix(void)
{
    const char *out = lmp_test_path(tmpdir, "im.gguf");
    char args[1024];
    snprintf(args, sizeof args, "imatrix " MODEL " --calib " CALIB " " CHUNKS " -o %s", out);
    ck_assert_msg(run(args) == 0, "lmpress %s:\n%s", args, output);
    ck_assert_msg(strstr(output, "35 entries from 8 chunks of 64 tokens"), "%s", output);
    return out;
}

START_TEST(values_match_reference)
{
    const char *path = write_imatrix();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' imatrix --calib '%s' %s", lmp_test_python(), REF, CALIB, CHUNKS);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(output, 1, sizeof output - 1, p);
    output[n] = 0;
    ck_assert_msg(pclose(p) == 0, "%s failed", cmd);
    lmp_json *ref;
    ck_assert_int_eq(lmp_json_parse(output, n, "llama2c_ref.py imatrix", &ref), 0);
    lmp_imatrix *im = NULL;
    ck_assert_msg(lmp_imatrix_load(path, &im) == 0, "lmpress's reader refuses its own file: %s", lmp_last_error());
    ck_assert_int_eq(im->legacy, 0);
    ck_assert_int_eq((int)im->chunk_count, 8);
    ck_assert_msg(im->dataset && strcmp(im->dataset, CALIB) == 0, "dataset %s", im->dataset ? im->dataset : "(none)");
    const lmp_json *entries = lmp_json_get(ref, "entries");
    ck_assert_ptr_nonnull(entries);
    ck_assert_int_eq((int)im->n_entries, (int)entries->n);
    ck_assert_int_eq((int)entries->n, 5 * 7); /* 5 blocks of q, k, v, o, gate, up, down */
    double worst = 0;
    for (size_t i = 0; i < entries->n; i++) {
        const lmp_imatrix_entry *e = lmp_imatrix_find(im, entries->keys[i]);
        ck_assert_msg(e != NULL, "no entry %s", entries->keys[i]);
        const lmp_json *sums = lmp_json_get(&entries->items[i], "in_sum2");
        double count;
        ck_assert_int_eq(lmp_json_get_number(&entries->items[i], "count", "ref", &count), 0);
        ck_assert_int_eq((int)count, 8 * 64); /* every token of every chunk */
        ck_assert_int_eq((int)e->n, (int)sums->n);
        ck_assert_int_eq((int)e->rows, 1);
        for (size_t j = 0; j < sums->n; j++) {
            const double want = sums->items[j].number / count, got = e->values[j];
            const double rel = fabs(got - want) / fmax(fabs(want), 1e-30);
            worst = fmax(worst, rel);
            ck_assert_msg(rel < 1e-4, "%s[%zu]: %.9g, reference %.9g", entries->keys[i], j, got, want);
        }
    }
    printf("test_imatrix_write: 35 entries within %.2g (relative) of the float64 reference\n", worst);
    lmp_imatrix_free(im);
    lmp_json_free(ref);
}
END_TEST

START_TEST(gguf_py_reads_it)
{
    if (!lmp_test_have_gguf("gguf_py_reads_it")) return;
    const char *path = write_imatrix();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' imatrix --calib '%s' %s --check '%s' 2>&1", LMP_TEST_PYDEPS,
             lmp_test_python(), REF, CALIB, CHUNKS, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(output, 1, sizeof output - 1, p);
    output[n] = 0;
    ck_assert_msg(pclose(p) == 0, "%s:\n%s", cmd, output);
    ck_assert_msg(strstr(output, "35 entries read by gguf-py match the reference"), "%s", output);
}
END_TEST

/* The file is what a config's imatrix = "..." takes: check finds a fitting entry for every
 * linear of an rtn q4_0 variant with importance = "imatrix" (down_proj's 172 inputs are not whole
 * blocks of 32: left out). */
START_TEST(serves_a_config)
{
    const char *path = write_imatrix();
    char text[2048];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 2; };\n"
             "imatrix = \"%s\";\n"
             "variants = ( { name = \"q4-imat\"; pipeline = ( { strategy = \"rtn\";\n"
             "  params = { format = \"q4_0\"; importance = \"imatrix\"; };\n"
             "  targets = \"re:\\\\.(q|k|v|o|gate|up)_proj$\"; } ); } );\n",
             MODEL, TOK, CALIB, path);
    const char *cfg = lmp_test_path(tmpdir, "imat.cfg");
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    char args[1024];
    snprintf(args, sizeof args, "check %s", cfg);
    ck_assert_msg(run(args) == 0, "%s", output);
    ck_assert_msg(strstr(output, "im.gguf: 35 entries)"), "%s", output);
}
END_TEST

START_TEST(chunks_as_llama_imatrix)
{
    int32_t ids[23];
    for (int i = 0; i < 23; i++) ids[i] = 100 + i;
    int32_t *c;
    int64_t k;
    ck_assert_int_eq(lmp_imatrix_chunks(ids, 23, 5, 0, 1, &c, &k), 0);
    ck_assert_int_eq((int)k, 4); /* floor(23 / 5), the tail dropped */
    for (int i = 0; i < 20; i++) ck_assert_int_eq(c[i], i % 5 == 0 ? 1 : 100 + i);
    free(c);
    ck_assert_int_eq(lmp_imatrix_chunks(ids, 23, 5, 2, -1, &c, &k), 0); /* --chunks 2, no BOS */
    ck_assert_int_eq((int)k, 2);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(c[i], 100 + i);
    free(c);
}
END_TEST

START_TEST(usage_and_bad_inputs)
{
    const char *out = lmp_test_path(tmpdir, "x.gguf");
    char args[1024];
    struct {
        const char *args;
        int code;
        const char *needle;
    } cases[] = {
        {"imatrix " MODEL " -o %s", 2, "--calib TEXT is required"},
        {"imatrix " MODEL " --calib " CALIB, 2, "-o F.gguf is required"},
        {"imatrix " MODEL " --calib " CALIB " -o %s --chunk 3", 2, "unknown option --chunk (did you mean --chunks?)"},
        {"imatrix " MODEL " --calib " CALIB " -o %s -c 1", 2, "-c wants an integer >= 2"},
        {"imatrix " MODEL " --calib " CALIB " -o %s -c 100000", 1, "exceeds the model's context"},
        {"imatrix " MODEL " --calib /nonexistent/calib.txt -o %s", 1, "/nonexistent/calib.txt"},
        {"imatrix " MODEL " --calib " CALIB " -o /nonexistent/dir/x.gguf", 1, "/nonexistent/dir"},
        {"imatrix " MODEL " --calib " CALIB " -o " CALIB, 1, "--calib"},
        {"imatricks " MODEL, 2, "(did you mean imatrix?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(args, sizeof args, cases[i].args, out);
        const int rc = run(args);
        ck_assert_msg(rc == cases[i].code, "lmpress %s: exit %d, expected %d\n%s", args, rc, cases[i].code, output);
        ck_assert_msg(strstr(output, cases[i].needle), "lmpress %s: '%s' missing:\n%s", args, cases[i].needle, output);
        const char *nl = strchr(output, '\n');
        ck_assert_msg(nl && nl[1] == 0, "lmpress %s: not one line:\n%s", args, output);
    }
    /* a text too short for one chunk */
    const char *tiny = lmp_test_path(tmpdir, "tiny.txt");
    FILE *f = fopen(tiny, "w");
    ck_assert_ptr_nonnull(f);
    fputs("Once upon a time.\n", f);
    fclose(f);
    snprintf(args, sizeof args, "imatrix " MODEL " --calib %s -o %s", tiny, out);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(output, "too short for one chunk of 512"), "%s", output);
    struct stat sb;
    ck_assert_msg(stat(out, &sb) != 0, "a failed run left %s", out);
    ck_assert_int_eq(run("imatrix --help"), 0);
    ck_assert_msg(strstr(output, "usage: lmpress imatrix"), "%s", output);
    ck_assert_int_eq(run("--help"), 0);
    ck_assert_msg(strstr(output, "imatrix [MODEL] --calib TEXT -o F.gguf"), "the main usage does not list it:\n%s",
                  output);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("imatrix_write");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, values_match_reference);
    tcase_add_test(tc, gguf_py_reads_it);
    tcase_add_test(tc, serves_a_config);
    tcase_add_test(tc, chunks_as_llama_imatrix);
    tcase_add_test(tc, usage_and_bad_inputs);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
