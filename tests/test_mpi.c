/* test_mpi.c — `mpirun -n 2 lmpress compare|analyze` against the same command in one process.
 *
 * Every job runs the same code on the same inputs wherever it runs (each rank's BLAS on one
 * thread, as the config asks), so only a fault in the distribution can change a number: the
 * reports must agree to 1e-12 relative in every number but the times and memory.  Also: each
 * variant comes back exactly once (rank 0's "done on rank" lines), analyze's block-forward
 * counters equal one process's (a unit evaluated twice or never would change them), and a rank
 * whose job fails makes the run exit non-zero naming that rank while the finished variants stay
 * in the report, which --resume then completes.
 *
 * Skipped (exit 77, which ctest reports as skipped) when lmpress was built without MPI. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/json.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOKENIZER LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define CALIB LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"
/* --allow-run-as-root: CI runs as root; the option changes nothing for anyone else.  Under
 * AddressSanitizer, Open MPI's own allocations that it never frees (at MPI_Finalize, in its
 * unloaded components) would fail every rank, so leak detection is off for the ranks; the same
 * code in one process keeps it (the single-process runs here and in the other suites). */
#ifdef LMP_SANITIZED
#define MPIRUN LMP_MPIEXEC " --oversubscribe --allow-run-as-root -x ASAN_OPTIONS=detect_leaks=0"
#else
#define MPIRUN LMP_MPIEXEC " --oversubscribe --allow-run-as-root"
#endif

static char tmpdir[256];
static char output[1 << 20];

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "mpi"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

/* Small windows; GPTQ on compressed and on original inputs (the second reads the calibration
 * activations rank 0 broadcasts); LAMBADA, so its count travels too. */
static const char *write_config(const char *name, const char *stage_before)
{
    const char *path = lmp_test_path(tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
               "backend = { name = \"cpu\"; params = { threads = 1; }; };\n"
               "calibration = { text = \"%s\"; samples = 8; seq_len = 128; };\n"
               "eval = { texts = [ \"%s\" ]; seq_len = 128; max_windows = 16; lambada = \"%s\"; lambada_max = 40; };\n"
               "seed = 1234;\n"
               "variants = (\n  { name = \"fp32\"; },\n"
               "  { name = \"w8-channel\"; pipeline = ( %s{ strategy = \"rtn\"; params = { bits = 8; granularity = \"channel\"; }; } ); },\n"
               "  { name = \"w4-g32\"; pipeline = ( %s{ strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); },\n"
               "  { name = \"gptq-w4\"; pipeline = ( %s{ strategy = \"gptq\"; params = { bits = 4; }; } ); },\n"
               "  { name = \"gptq-w4-original\"; calibration = { inputs = \"original\"; }; pipeline = ( %s{ strategy = \"gptq\"; params = { bits = 4; }; } ); },\n"
               "  { name = \"w8a8-static\"; pipeline = ( %s{ strategy = \"rtn\"; params = { bits = 8; granularity = \"channel\"; act = \"static_tensor\"; act_bits = 8; }; } ); }\n"
               ");\n",
            MODEL, TOKENIZER, CALIB, EVAL_TEXT, LAMBADA, stage_before, stage_before, stage_before, stage_before,
            stage_before);
    fclose(f);
    return path;
}

static lmp_json *read_json(const char *path)
{
    size_t n;
    unsigned char *text = lmp_test_slurp(path, &n);
    lmp_json *j = NULL;
    ck_assert_msg(lmp_json_parse((const char *)text, n, path, &j) == 0, "%s does not parse", path);
    free(text);
    return j;
}

/* What differs between runs of the same work: clocks and memory. */
static int is_measured(const char *key)
{
    static const char *const keys[] = {"seconds", "eval_seconds", "peak_rss_mb", "machine", "compress_seconds",
                                       "baseline_seconds", "units_seconds", "skip_seconds", NULL};
    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0) return 1;
    return 0;
}

/* a and b the same tree: same keys, strings and sizes, numbers within 1e-12 relative. */
static void same_tree(const lmp_json *a, const lmp_json *b, const char *where)
{
    ck_assert_msg(a->type == b->type, "%s: types differ", where);
    char sub[512];
    switch (a->type) {
    case LMP_JSON_NUMBER: {
        const double scale = fmax(1.0, fmax(fabs(a->number), fabs(b->number)));
        ck_assert_msg(fabs(a->number - b->number) <= 1e-12 * scale || (isnan(a->number) && isnan(b->number)),
                      "%s: %.17g vs %.17g", where, a->number, b->number);
        break;
    }
    case LMP_JSON_STRING:
        ck_assert_msg(strcmp(a->str, b->str) == 0, "%s: \"%s\" vs \"%s\"", where, a->str, b->str);
        break;
    case LMP_JSON_BOOL:
        ck_assert_msg(a->boolean == b->boolean, "%s: booleans differ", where);
        break;
    case LMP_JSON_ARRAY:
        ck_assert_msg(a->n == b->n, "%s: %zu vs %zu items", where, a->n, b->n);
        for (size_t i = 0; i < a->n; i++) {
            snprintf(sub, sizeof sub, "%s[%zu]", where, i);
            same_tree(&a->items[i], &b->items[i], sub);
        }
        break;
    case LMP_JSON_OBJECT:
        ck_assert_msg(a->n == b->n, "%s: %zu vs %zu keys", where, a->n, b->n);
        for (size_t i = 0; i < a->n; i++) {
            if (is_measured(a->keys[i])) continue;
            const lmp_json *other = lmp_json_get(b, a->keys[i]);
            ck_assert_msg(other != NULL, "%s: key %s missing", where, a->keys[i]);
            snprintf(sub, sizeof sub, "%s.%s", where, a->keys[i]);
            same_tree(&a->items[i], other, sub);
        }
        break;
    default:
        break;
    }
}

static void same_reports(const char *one, const char *two, const char *part)
{
    lmp_json *a = read_json(one), *b = read_json(two);
    const lmp_json *pa = part ? lmp_json_get(a, part) : a, *pb = part ? lmp_json_get(b, part) : b;
    ck_assert_ptr_nonnull(pa);
    ck_assert_ptr_nonnull(pb);
    same_tree(pa, pb, part ? part : "report");
    lmp_json_free(a);
    lmp_json_free(b);
}

/* Runs a shell command, its output (add 2>&1 for stderr) into output[]; returns its status. */
static int shell(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(output, 1, sizeof output - 1, p);
    output[got] = 0;
    return pclose(p);
}

/* How many "variant NAME: done on rank R" lines rank 0 printed for NAME. */
static int times_done(const char *log, const char *name)
{
    char needle[256];
    snprintf(needle, sizeof needle, "variant %s: done on rank ", name);
    int n = 0;
    for (const char *p = log; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static const char *const names[] = {"fp32", "w8-channel", "w4-g32", "gptq-w4", "gptq-w4-original", "w8a8-static"};
enum { N_NAMES = sizeof names / sizeof names[0] };

START_TEST(compare_on_two_ranks_equals_one_process)
{
    const char *cfg = write_config("c.cfg", "");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "compare %s --json %s >/dev/null 2>&1", cfg, lmp_test_path(tmpdir, "one.json"));
    ck_assert_int_eq(lmp_test_cli(cmd, output, sizeof output), 0);
    snprintf(cmd, sizeof cmd, MPIRUN " -n 2 %s compare %s --json %s 2>&1 >/dev/null", LMP_CLI, cfg,
             lmp_test_path(tmpdir, "two.json"));
    ck_assert_msg(shell(cmd) == 0, "mpirun failed:\n%s", output);
    for (int i = 0; i < N_NAMES; i++)
        ck_assert_msg(times_done(output, names[i]) == 1, "variant %s came back %d times:\n%s", names[i],
                      times_done(output, names[i]), output);
    same_reports(lmp_test_path(tmpdir, "one.json"), lmp_test_path(tmpdir, "two.json"), "variants");
}
END_TEST

START_TEST(analyze_on_two_ranks_equals_one_process)
{
    const char *cfg = write_config("a.cfg", "");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "analyze %s --variant w4-g32 --skip-top 2 --json %s >/dev/null 2>&1", cfg,
             lmp_test_path(tmpdir, "one.json"));
    ck_assert_int_eq(lmp_test_cli(cmd, output, sizeof output), 0);
    snprintf(cmd, sizeof cmd, MPIRUN " -n 2 %s analyze %s --variant w4-g32 --skip-top 2 --json %s 2>&1", LMP_CLI, cfg,
             lmp_test_path(tmpdir, "two.json"));
    ck_assert_msg(shell(cmd) == 0, "mpirun failed:\n%s", output);
    /* the whole report: every unit's numbers, the ranks, the skip answer and the counters */
    same_reports(lmp_test_path(tmpdir, "one.json"), lmp_test_path(tmpdir, "two.json"), NULL);
}
END_TEST

/* Rank 1's every pipeline fails (fail-on-request sees LMP_TEST_FAIL_HERE there only). */
START_TEST(a_failing_rank_is_named_and_finished_variants_kept)
{
    const char *cfg = write_config("f.cfg", "{ strategy = \"fail-on-request\"; }, ");
    const char *json = lmp_test_path(tmpdir, "f.json");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             MPIRUN " -n 1 %s compare %s --plugin-path %s --json %s : -n 1 env LMP_TEST_FAIL_HERE=1 %s compare %s "
                    "--plugin-path %s --json %s 2>&1",
             LMP_CLI, cfg, LMP_TEST_FAIL_PLUGIN_DIR, json, LMP_CLI, cfg, LMP_TEST_FAIL_PLUGIN_DIR, json);
    ck_assert_msg(shell(cmd) != 0, "the run should fail:\n%s", output);
    ck_assert_msg(strstr(output, "lmpress: error: rank 1, job ") && strstr(output, "LMP_TEST_FAIL_HERE is set"),
                  "no error naming rank 1:\n%s", output);
    /* what finished is in the report, marked incomplete */
    lmp_json *j = read_json(json);
    const lmp_json *vs = lmp_json_get(j, "variants"), *complete = lmp_json_get(j, "complete");
    ck_assert_ptr_nonnull(vs);
    ck_assert_ptr_nonnull(complete);
    ck_assert_int_eq(complete->boolean, 0);
    ck_assert_msg(vs->n >= 1 && vs->n < N_NAMES, "%zu variants kept:\n%s", vs->n, output);
    for (size_t i = 0; i < vs->n; i++) {
        const char *name = NULL;
        ck_assert_int_eq(lmp_json_get_string(&vs->items[i], "name", "variant", &name), 0);
        ck_assert_msg(times_done(output, name) == 1, "%s is in the report but was not done:\n%s", name, output);
    }
    const size_t kept = vs->n;
    lmp_json_free(j);
    /* --resume in one process runs only what is missing */
    char args[4096];
    snprintf(args, sizeof args, "compare %s --plugin-path %s --json %s --resume 2>&1", cfg, LMP_TEST_FAIL_PLUGIN_DIR, json);
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    j = read_json(json);
    ck_assert_uint_eq(lmp_json_get(j, "variants")->n, N_NAMES);
    ck_assert_int_eq(lmp_json_get(j, "complete")->boolean, 1);
    lmp_json_free(j);
    ck_assert_uint_lt(kept, N_NAMES);
}
END_TEST

/* Rank 1 stops (SIGSTOP, from fail-on-request) in its first job: with LMP_MPI_TIMEOUT=3, rank 0
 * names it and ends the job instead of waiting forever; the variants finished by then are in
 * the report.  Before the heartbeat this hung until the suite's timeout. */
START_TEST(a_silent_rank_is_named_and_the_job_ends)
{
    const char *cfg = write_config("s.cfg", "{ strategy = \"fail-on-request\"; }, ");
    const char *json = lmp_test_path(tmpdir, "s.json");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "timeout -s KILL 240 " MPIRUN " -x LMP_MPI_TIMEOUT=3 -n 1 %s compare %s --plugin-path %s --json %s : -n 1 env "
             "LMP_TEST_STOP_HERE=1 %s compare %s --plugin-path %s --json %s 2>&1",
             LMP_CLI, cfg, LMP_TEST_FAIL_PLUGIN_DIR, json, LMP_CLI, cfg, LMP_TEST_FAIL_PLUGIN_DIR, json);
    const int status = shell(cmd), rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    ck_assert_msg(rc != 0 && rc != 137, "the run should end with an error, not hang (exit %d):\n%s", rc, output);
    ck_assert_msg(strstr(output, "rank 1 has not answered for") && strstr(output, "LMP_MPI_TIMEOUT=3"),
                  "no message naming rank 1:\n%s", output);
    /* what rank 0 finished is kept: the report, if one was written, is a complete document */
    if (access(json, F_OK) == 0) {
        lmp_json *j = read_json(json);
        ck_assert_ptr_nonnull(lmp_json_get(j, "variants"));
        ck_assert_int_eq(lmp_json_get(j, "complete")->boolean, 0);
        lmp_json_free(j);
    }
}
END_TEST

/* Runs `mpirun -n 2 lmpress ARGS`, expecting a failure whose message (containing `says`) is
 * printed once, by rank 0; a hang would end in the suite's timeout. */
static void refused_on_two_ranks(const char *args, const char *says)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, MPIRUN " -n 2 %s %s 2>&1", LMP_CLI, args);
    ck_assert_int_ne(shell(cmd), 0);
    const char *first = strstr(output, says);
    ck_assert_msg(first && !strstr(first + 1, says), "the message is not there once:\n%s", output);
}

START_TEST(refusals_end_every_rank_with_one_message)
{
    char args[4096];
    /* a command that does not spread */
    refused_on_two_ranks("eval " MODEL, "only compare and analyze run over MPI ranks");
    /* an output only rank 0 checks: the other rank must not wait for it forever */
    snprintf(args, sizeof args, "compare %s --json %s/no/such/folder/x.json", write_config("r.cfg", ""), tmpdir);
    refused_on_two_ranks(args, "no/such/folder/x.json");
    snprintf(args, sizeof args, "analyze %s --variant w4-g32 --json %s/no/such/folder/x.json", write_config("r.cfg", ""), tmpdir);
    refused_on_two_ranks(args, "no/such/folder/x.json");
    /* a config error, found by every rank */
    const char *bad = lmp_test_path(tmpdir, "bad.cfg");
    lmp_test_spit(bad, "model = { path = \"" MODEL "\"; };\nvariants = ( { name = \"x\"; pipeline = ( { strategy = \"nope\"; } ); } );\n", 95 + strlen(MODEL));
    snprintf(args, sizeof args, "compare %s", bad);
    refused_on_two_ranks(args, "unknown strategy plugin 'nope'");
}
END_TEST

int main(void)
{
    if (!LMP_MPIEXEC[0]) {
        printf("test_mpi: skipped: this lmpress was built without MPI (install libopenmpi-dev and openmpi-bin, "
               "then rebuild: tools/setup.sh does both)\n");
        return 77;
    }
    Suite *s = suite_create("mpi");
    TCase *tc = tcase_create("two ranks");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, compare_on_two_ranks_equals_one_process);
    tcase_add_test(tc, analyze_on_two_ranks_equals_one_process);
    tcase_add_test(tc, a_failing_rank_is_named_and_finished_variants_kept);
    tcase_add_test(tc, refusals_end_every_rank_with_one_message);
    tcase_add_test(tc, a_silent_rank_is_named_and_the_job_ends);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
