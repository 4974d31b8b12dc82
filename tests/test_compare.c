/* test_compare.c — what `lmpress compare` / `run` hand to people and scripts: only the requested
 * format on standard output, CSV that a CSV reader splits right, JSON that records the run and
 * keys texts uniquely, repeatable --variant globs, rows and files written as variants finish,
 * an interrupted run resumed to the same table, progress with the run's ETA, a Hugging Face
 * folder's own tokenizer.json, and the two calibration sources (calibration.inputs) side by
 * side.  Each case runs the real binary on stories260K. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "formats/json.h"
#include "testutil.h"

extern char **environ;

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define CALIB LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"

static char tmpdir[256];
static char output[1 << 20];

static void setup(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "compare");
}

static void teardown(void)
{
    lmp_test_rmtree(tmpdir);
}

static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

/* Runs `lmpress ARGS`, stdout only (stderr to `err` if given, else discarded). */
static int run(const char *args, const char *err)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s 2>%s", args, err ? err : "/dev/null");
    int rc = lmp_test_cli(cmd, output, sizeof output);
    ck_assert_msg(rc >= 0, "lmpress %s did not exit normally\n%s", args, output);
    return rc;
}

static char *slurp(const char *path)
{
    size_t n;
    return (char *)lmp_test_slurp(path, &n);
}

/* A config of stories260K with `variants` and small evaluation settings. */
static const char *config(const char *name, const char *eval, const char *variants)
{
    char text[8192];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; };\n"
             "calibration = { text = \"%s\"; samples = 4; seq_len = 64; };\n"
             "eval = { %s };\n"
             "variants = (\n%s\n);\n",
             MODEL, CALIB, eval, variants);
    const char *p = tmp(name);
    lmp_test_spit(p, text, strlen(text));
    return p;
}

#define EVAL_SMALL "texts = [ \"" EVAL_TEXT "\" ]; seq_len = 64; max_windows = 8;"
#define THREE_VARIANTS                                                                                \
    "{ name = \"fp32\"; },\n"                                                                         \
    "{ name = \"w4-g32\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); },\n" \
    "{ name = \"w8a8\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; act = \"static_tensor\"; }; } ); }"

static lmp_json *parse(const char *text, const char *what)
{
    lmp_json *j = NULL;
    int st = lmp_json_parse(text, strlen(text), what, &j);
    ck_assert_msg(st == 0, "%s does not parse as JSON:\n%.2000s", what, text);
    return j;
}

static const lmp_json *get(const lmp_json *j, const char *key)
{
    const lmp_json *v = lmp_json_get(j, key);
    ck_assert_msg(v != NULL, "JSON member '%s' missing", key);
    return v;
}

/* ---- standard output carries the requested format alone ------------------------------------ */
START_TEST(json_to_stdout_parses)
{
    const char *cfg = config("a.cfg", EVAL_SMALL, THREE_VARIANTS);
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json -", cfg);
    ck_assert_int_eq(run(args, tmp("err.txt")), 0);
    lmp_json *j = parse(output, "compare --json -");
    ck_assert_int_eq((int)get(j, "variants")->n, 3);
    lmp_json_free(j);
    /* the human table went to standard error instead */
    char *err = slurp(tmp("err.txt"));
    ck_assert_ptr_nonnull(strstr(err, "w4-g32"));
    free(err);
    snprintf(args, sizeof args, "compare %s --csv -", cfg);
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_msg(strncmp(output, "variant,bits_per_weight,", 24) == 0, "CSV does not start with its header:\n%s", output);
    int lines = 0;
    for (const char *p = output; *p; p++) lines += *p == '\n';
    ck_assert_int_eq(lines, 4);
    snprintf(args, sizeof args, "compare %s --csv - --json -", cfg);
    ck_assert_int_eq(run(args, NULL), 2);
}
END_TEST

/* ---- CSV: RFC 4180 quoting, full precision, LAMBADA accuracy and its error apart ------------- */

/* Splits one CSV record (RFC 4180) at *p into fields; returns the count. */
static int csv_record(const char **p, char fields[][256], int max)
{
    int n = 0;
    const char *s = *p;
    for (;;) {
        char *out = fields[n];
        int k = 0;
        if (*s == '"') {
            for (s++; *s && !(*s == '"' && s[1] != '"'); s++) {
                if (*s == '"') s++;
                if (k < 255) out[k++] = *s;
            }
            if (*s == '"') s++;
        } else {
            while (*s && *s != ',' && *s != '\n')
                if (k < 255) out[k++] = *s++;
        }
        out[k] = 0;
        n++;
        if (*s == ',' && n < max) {
            s++;
            continue;
        }
        if (*s == '\n') s++;
        break;
    }
    *p = s;
    return n;
}

START_TEST(csv_quotes_and_full_precision)
{
    const char *cfg = config("q.cfg", EVAL_SMALL " lambada = \"" LAMBADA "\"; lambada_max = 6;",
                             "{ name = \"fp32, \\\"the base\\\"\"; },\n"
                             "{ name = \"w4\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; }; } ); }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s --csv %s", cfg, tmp("out.csv"));
    ck_assert_int_eq(run(args, NULL), 0);
    char *csv = slurp(tmp("out.csv"));
    const char *p = csv;
    char head[32][256], row[32][256];
    int nh = csv_record(&p, head, 32);
    int nr = csv_record(&p, row, 32);
    ck_assert_int_eq(nh, nr);
    ck_assert_str_eq(row[0], "fp32, \"the base\"");
    int acc = -1, err = -1, ppl = -1;
    for (int c = 0; c < nh; c++) {
        if (strcmp(head[c], "lambada_acc") == 0) acc = c;
        if (strcmp(head[c], "lambada_stderr") == 0) err = c;
        if (strcmp(head[c], "ppl") == 0) ppl = c;
    }
    ck_assert_msg(acc > 0 && err == acc + 1 && ppl > 0, "columns: %s", csv);
    /* a fraction and a standard error, each a plain number */
    char *end;
    double a = strtod(row[acc], &end);
    ck_assert(*end == 0 && a >= 0 && a <= 1);
    double e = strtod(row[err], &end);
    ck_assert(*end == 0 && e >= 0 && e < 1);
    /* full precision: %.17g keeps at least 15 significant digits of a perplexity */
    int digits = 0;
    for (const char *d = row[ppl]; *d && *d != 'e'; d++) digits += *d >= '0' && *d <= '9';
    ck_assert_msg(digits >= 15, "ppl written as %s", row[ppl]);
    /* the second row is w4 */
    nr = csv_record(&p, row, 32);
    ck_assert_str_eq(row[0], "w4");
    free(csv);
}
END_TEST

/* ---- JSON: unique text keys, and what the run was ------------------------------------------- */

/* FNV-1a 64 of a file, written here from the algorithm's definition. */
static uint64_t fnv1a_file(const char *path)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(path, &n);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    free(b);
    return h;
}

START_TEST(json_records_the_run)
{
    /* two evaluation texts with one basename */
    mkdir(tmp("a"), 0700);
    mkdir(tmp("b"), 0700);
    size_t n;
    unsigned char *text = lmp_test_slurp(EVAL_TEXT, &n);
    lmp_test_spit(tmp("a/eval.txt"), text, n / 2);
    lmp_test_spit(tmp("b/eval.txt"), text + n / 2, n / 2);
    free(text);
    char eval[1024];
    snprintf(eval, sizeof eval, "texts = [ \"%s\", \"%s\" ]; seq_len = 64; max_windows = 4;", tmp("a/eval.txt"),
             tmp("b/eval.txt"));
    const char *cfg = config("j.cfg", eval,
                             "{ name = \"fp32\"; },\n"
                             "{ name = \"w4\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; };"
                             " ignore = [ \"model.layers.0.mlp.down_proj\" ]; } ); }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json %s", cfg, tmp("out.json"));
    ck_assert_int_eq(run(args, NULL), 0);
    char *doc = slurp(tmp("out.json"));
    lmp_json *j = parse(doc, "out.json");
    const lmp_json *v = get(j, "variants");
    const lmp_json *ev = get(&v->items[1], "eval");
    ck_assert_int_eq((int)ev->n, 2);
    ck_assert_str_ne(ev->keys[0], ev->keys[1]);
    ck_assert_ptr_nonnull(strstr(ev->keys[0], "a/eval.txt"));
    ck_assert_ptr_nonnull(strstr(ev->keys[1], "b/eval.txt"));
    /* the run */
    ck_assert_str_eq(get(get(j, "lmpress"), "version")->str, LMP_VERSION);
    const lmp_json *c = get(j, "config");
    ck_assert_str_eq(get(c, "path")->str, cfg);
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a_file(cfg));
    ck_assert_str_eq(get(c, "fnv1a64")->str, hash);
    ck_assert_int_eq((int)get(j, "seed")->integer, 1234);
    const lmp_json *cal = get(j, "calibration");
    ck_assert_str_eq(get(cal, "text")->str, CALIB);
    ck_assert_int_eq((int)get(cal, "samples")->integer, 4);
    ck_assert_int_eq((int)get(cal, "seq_len")->integer, 64);
    const lmp_json *e = get(j, "eval");
    ck_assert_int_eq((int)get(e, "seq_len")->integer, 64);
    ck_assert_int_eq((int)get(e, "max_windows")->integer, 4);
    ck_assert_int_eq((int)get(e, "texts")->n, 2);
    ck_assert_str_eq(get(get(j, "backend"), "name")->str, "cpu");
    const lmp_json *mach = get(j, "machine");
    ck_assert_int_eq((int)get(mach, "cores")->integer, (int)sysconf(_SC_NPROCESSORS_ONLN));
    ck_assert_ptr_nonnull(strstr(get(mach, "blas")->str, "blas"));
    /* what w4 did to each linear: 5 blocks x 7 linears, the ignored one skipped at 32 bits */
    const lmp_json *lin = get(&v->items[1], "linears");
    ck_assert_int_eq((int)lin->n, 35);
    int skipped = 0;
    for (size_t i = 0; i < lin->n; i++) {
        const lmp_json *l = &lin->items[i];
        int is_down0 = strcmp(get(l, "name")->str, "model.layers.0.mlp.down_proj") == 0;
        ck_assert_int_eq(get(l, "skipped")->boolean, is_down0);
        skipped += get(l, "skipped")->boolean;
        ck_assert(get(l, "weight_bits")->number == (is_down0 ? 32.0 : get(l, "weight_bits")->number));
        if (!is_down0) {
            const lmp_json *st = get(l, "stages");
            ck_assert_int_eq((int)st->n, 1);
            ck_assert_str_eq(get(&st->items[0], "strategy")->str, "rtn");
            ck_assert_int_eq((int)get(get(&st->items[0], "params"), "bits")->integer, 4);
            ck_assert(get(l, "weight_bits")->number > 4 && get(l, "weight_bits")->number < 5);
        }
    }
    ck_assert_int_eq(skipped, 1);
    lmp_json_free(j);
    free(doc);
}
END_TEST

/* ---- --variant: repeatable, globs, on compare and run ---------------------------------------- */
static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

START_TEST(variant_globs)
{
    const char *cfg = config("v.cfg", EVAL_SMALL, THREE_VARIANTS);
    char args[1024];
    snprintf(args, sizeof args, "compare %s --variant 'w*' --variant fp32", cfg);
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_int_eq(count(output, "\nfp32 "), 1);
    ck_assert_int_eq(count(output, "\nw4-g32 "), 1);
    ck_assert_int_eq(count(output, "\nw8a8 "), 1);
    snprintf(args, sizeof args, "run %s --variant 'w4*' --variant w8a8", cfg);
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_int_eq(count(output, "\nfp32 "), 0);
    ck_assert_int_eq(count(output, "\nw4-g32 "), 1);
    ck_assert_int_eq(count(output, "\nw8a8 "), 1);
    /* one variant alone: no reference log-probabilities are kept */
    snprintf(args, sizeof args, "run %s --variant w4-g32", cfg);
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_int_eq(count(output, "\nw4-g32 "), 1);
    snprintf(args, sizeof args, "compare %s --variant 'gptq*'", cfg);
    ck_assert_int_eq(run(args, tmp("err.txt")), 1);
    char *err = slurp(tmp("err.txt"));
    ck_assert_msg(strstr(err, "no variant named 'gptq*'") && strstr(err, "w4-g32"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run %s", cfg);
    ck_assert_int_eq(run(args, tmp("err.txt")), 1);
}
END_TEST

/* ---- progress: which variant of how many, and the whole run's ETA ---------------------------- */
START_TEST(progress_names_variant_and_eta)
{
    const char *cfg = config("p.cfg", EVAL_SMALL, THREE_VARIANTS);
    char args[1024];
    snprintf(args, sizeof args, "compare %s", cfg);
    ck_assert_int_eq(run(args, tmp("err.txt")), 0);
    char *err = slurp(tmp("err.txt"));
    ck_assert_msg(strstr(err, "variant 1/3: fp32"), "%s", err);
    ck_assert_msg(strstr(err, "variant 3/3: w8a8, run ~"), "%s", err);
    ck_assert_msg(strstr(err, " left"), "%s", err);
    free(err);
}
END_TEST

/* ---- compression and evaluation timed apart, in the table and in the CSV -------------------- */

/* Column `name` of the CSV header head[nh], or -1. */
static int column(char head[][256], int nh, const char *name)
{
    for (int c = 0; c < nh; c++)
        if (strcmp(head[c], name) == 0) return c;
    return -1;
}

START_TEST(compress_and_eval_times_apart)
{
    const char *cfg = config("t.cfg", EVAL_SMALL, THREE_VARIANTS);
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json %s --csv %s", cfg, tmp("t.json"), tmp("t.csv"));
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_msg(strstr(output, "compress s") && strstr(output, "eval s") && !strstr(output, "time s"), "%s", output);
    /* every variant is evaluated, so each has an evaluation time; the unmodified model's is the
     * reference pass and it compresses nothing (no claim on how long anything takes) */
    for (int pass = 0; pass < 2; pass++) {
        char *csv = slurp(tmp("t.csv"));
        const char *p = csv;
        char head[32][256], row[32][256];
        int nh = csv_record(&p, head, 32);
        const int cs = column(head, nh, "compress_seconds"), es = column(head, nh, "eval_seconds");
        ck_assert_msg(cs > 0 && es == cs + 1 && column(head, nh, "seconds") < 0, "columns: %s", csv);
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(csv_record(&p, row, 32), nh);
            ck_assert_msg(strtod(row[es], NULL) > 0, "pass %d: %s: eval_seconds %s", pass, row[0], row[es]);
            if (i == 0) ck_assert_msg(strtod(row[cs], NULL) == 0, "fp32: compress_seconds %s", row[cs]);
        }
        free(csv);
        /* resumed variants keep their times (the JSON's), not zeros */
        snprintf(args, sizeof args, "compare %s --json %s --csv %s --resume", cfg, tmp("t.json"), tmp("t.csv"));
        if (pass == 0) ck_assert_int_eq(run(args, NULL), 0);
    }
}
END_TEST

/* ---- an interrupted run keeps what it finished and resumes to the same table ----------------- */

/* Starts lmpress with argv (NULL-terminated) and stdout/stderr to files; returns its pid. */
static pid_t spawn(char *const argv[], const char *out, const char *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, LMP_CLI, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* The CSV without its time and memory columns (compress_seconds, eval_seconds, peak_rss_mb: the
 * only ones two runs may differ in). */
static char *numbers_of(const char *csv_path)
{
    char *csv = slurp(csv_path), *out = calloc(strlen(csv) + 1, 1);
    ck_assert_ptr_nonnull(out);
    const char *p = csv;
    char f[32][256];
    while (*p) {
        int n = csv_record(&p, f, 32);
        ck_assert(n > 3);
        for (int c = 0; c < n - 3; c++) {
            strcat(out, f[c]);
            strcat(out, c < n - 4 ? "," : "\n");
        }
    }
    free(csv);
    return out;
}

#define SIX_VARIANTS                                                                                   \
    THREE_VARIANTS ",\n"                                                                               \
    "{ name = \"w3-g32\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 3; granularity = \"group\"; group_size = 32; }; } ); },\n" \
    "{ name = \"w4-asym\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; sym = false; }; } ); },\n" \
    "{ name = \"w8-token\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; act = \"dynamic_token\"; }; } ); }"

START_TEST(sigterm_then_resume_equals_uninterrupted)
{
    const char *cfg = config("r.cfg", "texts = [ \"" EVAL_TEXT "\" ]; seq_len = 128; max_windows = 60;", SIX_VARIANTS);
    char json[512], csv[512];
    snprintf(json, sizeof json, "%s", tmp("r.json"));
    snprintf(csv, sizeof csv, "%s", tmp("r.csv"));
    char *argv[] = {"lmpress", "compare", (char *)cfg, "--json", json, "--csv", csv, NULL};
    pid_t pid = spawn(argv, tmp("r.out"), tmp("r.err"));
    /* Wait for the first finished variant (the JSON appears), then stop the run. */
    struct stat sb;
    for (int i = 0; i < 6000 && stat(json, &sb) != 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(stat(json, &sb) == 0, "no report after 60 s");
    kill(pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %d", status);
    char *err = slurp(tmp("r.err"));
    ck_assert_msg(strstr(err, "stopped by SIGTERM") && strstr(err, "--resume"), "%s", err);
    free(err);
    /* what is left is a complete document that says the run is not complete */
    char *doc = slurp(json);
    lmp_json *j = parse(doc, json);
    ck_assert_int_eq(get(j, "complete")->boolean, 0);
    int kept = (int)get(j, "variants")->n;
    ck_assert_msg(kept >= 1 && kept < 6, "%d variants kept", kept);
    lmp_json_free(j);
    free(doc);
    /* resume: only the others run */
    char args[2048];
    snprintf(args, sizeof args, "compare %s --json %s --csv %s --resume", cfg, json, csv);
    ck_assert_int_eq(run(args, tmp("resume.err")), 0);
    err = slurp(tmp("resume.err"));
    char expect[64];
    snprintf(expect, sizeof expect, "variant 1/%d:", 6 - kept);
    ck_assert_msg(strstr(err, expect), "resume ran more than the unfinished variants:\n%s", err);
    free(err);
    /* the same run uninterrupted */
    snprintf(args, sizeof args, "compare %s --csv %s", cfg, tmp("full.csv"));
    ck_assert_int_eq(run(args, NULL), 0);
    char *a = numbers_of(csv), *b = numbers_of(tmp("full.csv"));
    ck_assert_msg(strcmp(a, b) == 0, "resumed:\n%s\nuninterrupted:\n%s", a, b);
    free(a);
    free(b);
    doc = slurp(json);
    j = parse(doc, json);
    ck_assert_int_eq(get(j, "complete")->boolean, 1);
    ck_assert_int_eq((int)get(j, "variants")->n, 6);
    lmp_json_free(j);
    free(doc);
    /* another config cannot resume this report */
    FILE *f = fopen(cfg, "a");
    fputs("# edited\n", f);
    fclose(f);
    ck_assert_int_eq(run(args, NULL), 0); /* without --resume it just runs */
    snprintf(args, sizeof args, "compare %s --json %s --resume", cfg, json);
    ck_assert_int_eq(run(args, tmp("err.txt")), 1);
    err = slurp(tmp("err.txt"));
    ck_assert_msg(strstr(err, "written by another run"), "%s", err);
    free(err);
}
END_TEST

/* ---- output paths are checked before any work ---------------------------------------------- */
START_TEST(output_folder_checked_first)
{
    const char *cfg = config("o.cfg", EVAL_SMALL, THREE_VARIANTS);
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json /nonexistent/dir/x.json", cfg);
    ck_assert_int_eq(run(args, tmp("err.txt")), 1);
    char *err = slurp(tmp("err.txt"));
    ck_assert_msg(strstr(err, "/nonexistent/dir") && !strstr(err, "variant 1/"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "compare %s --resume", cfg);
    ck_assert_int_eq(run(args, NULL), 2);
}
END_TEST

/* ---- a failed write leaves the previous report whole, and says why ----------------------- */
START_TEST(failed_write_keeps_previous_report)
{
    const char *cfg = config("w.cfg", EVAL_SMALL, THREE_VARIANTS);
    const char *json = tmp("w.json");
    static const char previous[] = "{\"a previous report\": true}\n";
    lmp_test_spit(json, previous, sizeof previous - 1);
    char args[1024];
    /* 1 block of 512 bytes: the report (several KB) cannot be written */
    snprintf(args, sizeof args, "sh -c 'ulimit -f 1; exec %s compare %s --json %s'", LMP_CLI, cfg, json);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s 2>&1", args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(output, 1, sizeof output - 1, p);
    output[got] = 0;
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d\n%s", status, output);
    ck_assert_msg(strstr(output, json) && strstr(output, "File too large"), "%s", output);
    char *now = slurp(json);
    ck_assert_str_eq(now, previous);
    free(now);
}
END_TEST

/* ---- Markdown cells keep a variant name with '|' in one cell ------------------------------- */
START_TEST(markdown_escapes_pipes)
{
    const char *cfg = config("m.cfg", EVAL_SMALL, "{ name = \"fp32 | base\"; }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s --md -", cfg);
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_msg(strstr(output, "| fp32 \\| base |"), "%s", output);
}
END_TEST

/* ---- a pattern that matches no linear stops compare before any variant runs ---------------- */
START_TEST(unmatched_pattern_stops_before_work)
{
    const char *cfg = config("u.cfg", EVAL_SMALL,
                             "{ name = \"fp32\"; },\n"
                             "{ name = \"w4\"; pipeline = ( { strategy = \"rtn\"; ignore = [ \"model.layer.0.*\" ]; } ); }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s", cfg);
    ck_assert_int_eq(run(args, tmp("err.txt")), 1);
    char *err = slurp(tmp("err.txt"));
    ck_assert_msg(strstr(err, "u.cfg:6: variants[1].pipeline[0].ignore[0]") && strstr(err, "'model.layer.0.*' matches no linear"), "%s", err);
    ck_assert_msg(!strstr(err, "variant 1/"), "work started before the error:\n%s", err);
    free(err);
}
END_TEST

/* ---- calibration.inputs: statistics behind the compressed blocks, or the unmodified model's ---- */

/* Linear i's static activation scale in a report's variant entry (NAN: none); *block gets the
 * linear's block. */
static double act_scale(const lmp_json *variant, size_t i, int *block)
{
    const lmp_json *l = &get(variant, "linears")->items[i];
    ck_assert_int_eq(sscanf(get(l, "name")->str, "model.layers.%d.", block), 1);
    const lmp_json *act = get(l, "act");
    return act->type == LMP_JSON_NULL ? NAN : get(act, "scale")->number;
}

#define RTN_STATIC "{ strategy = \"rtn\"; params = { bits = 8; act = \"static_tensor\"; };"
#define SMOOTH "{ strategy = \"smoothquant\"; params = { alpha = 0.5; };"
#define BLOCK0_UNCHANGED " overrides = ( { match = \"model.layers.0.*\"; skip = true; } );"

/* Static scales (the abs-max of each linear's input) under both sources, for rtn W8A8 alone and
 * behind SmoothQuant.  Block 0 reads the embeddings either way; from block 1 on the scales
 * differ.  Independently of the new code path, "original" must give block 1 exactly what the
 * default gives when block 0 is left unmodified (its skip overrides): the unmodified model's
 * inputs to block 1. */
START_TEST(calibration_inputs_original_is_the_unmodified_models)
{
    const char *cfg = config("ci.cfg", EVAL_SMALL,
        "{ name = \"fp32\"; },\n"
        "{ name = \"w8a8\"; pipeline = ( " RTN_STATIC " } ); },\n"
        "{ name = \"w8a8-original\"; calibration = { inputs = \"original\"; }; pipeline = ( " RTN_STATIC " } ); },\n"
        "{ name = \"w8a8-block0-unchanged\"; pipeline = ( " RTN_STATIC BLOCK0_UNCHANGED " } ); },\n"
        "{ name = \"sq\"; pipeline = ( " SMOOTH " }, " RTN_STATIC " } ); },\n"
        "{ name = \"sq-original\"; calibration = { inputs = \"original\"; }; pipeline = ( " SMOOTH " }, " RTN_STATIC " } ); },\n"
        "{ name = \"sq-block0-unchanged\"; pipeline = ( " SMOOTH BLOCK0_UNCHANGED " }, " RTN_STATIC BLOCK0_UNCHANGED " } ); }");
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json %s", cfg, tmp("ci.json"));
    ck_assert_int_eq(run(args, NULL), 0);
    char *doc = slurp(tmp("ci.json"));
    lmp_json *j = parse(doc, "ci.json");
    ck_assert_str_eq(get(get(j, "calibration"), "inputs")->str, "compressed");
    ck_assert_ptr_null(lmp_json_get(lmp_test_variant(j, "fp32"), "calibration_inputs"));
    static const char *const pipelines[] = {"w8a8", "sq"};
    for (int p = 0; p < 2; p++) {
        char name[64];
        const lmp_json *compressed = lmp_test_variant(j, pipelines[p]);
        snprintf(name, sizeof name, "%s-original", pipelines[p]);
        const lmp_json *original = lmp_test_variant(j, name);
        snprintf(name, sizeof name, "%s-block0-unchanged", pipelines[p]);
        const lmp_json *unchanged = lmp_test_variant(j, name);
        ck_assert_str_eq(get(compressed, "calibration_inputs")->str, "compressed");
        ck_assert_str_eq(get(original, "calibration_inputs")->str, "original");
        const size_t n = get(original, "linears")->n;
        ck_assert_int_eq((int)n, 35);
        for (size_t i = 0; i < n; i++) {
            int b;
            const double sc = act_scale(compressed, i, &b), so = act_scale(original, i, &b),
                         su = act_scale(unchanged, i, &b);
            ck_assert(isfinite(sc) && isfinite(so));
            if (b == 0) {
                ck_assert_msg(sc == so, "%s: block 0 linear %zu: %.9g (compressed) vs %.9g (original)", pipelines[p], i,
                              sc, so);
                ck_assert(isnan(su)); /* skipped: no activation quantizer */
                continue;
            }
            ck_assert_msg(sc != so, "%s: block %d linear %zu: the same scale %.9g from both sources", pipelines[p], b, i,
                          sc);
            if (b == 1)
                ck_assert_msg(so == su, "%s: block 1 linear %zu: %.9g (original) vs %.9g (block 0 unchanged)",
                              pipelines[p], i, so, su);
        }
    }
    lmp_json_free(j);
    free(doc);
}
END_TEST

/* ---- a Hugging Face folder brings its tokenizer.json ----------------------------------------- */

/* A byte-level BPE tokenizer.json over the 96 tokens of the tiny GPT-2 fixture: the printable
 * ASCII characters (byte-level maps them to themselves), space (Ġ) and newline (Ċ). */
static void write_tiny_tokenizer(const char *path)
{
    char buf[8192];
    int n = snprintf(buf, sizeof buf,
                     "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
                     "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                     "\"use_regex\":true},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
                     "\"model\":{\"type\":\"BPE\",\"vocab\":{");
    int id = 0;
    for (int ch = '!'; ch <= '~'; ch++, id++) {
        if (ch == '"' || ch == '\\') n += snprintf(buf + n, sizeof buf - n, "\"\\%c\":%d,", ch, id);
        else n += snprintf(buf + n, sizeof buf - n, "\"%c\":%d,", ch, id);
    }
    n += snprintf(buf + n, sizeof buf - n, "\"\xc4\xa0\":%d,\"\xc4\x8a\":%d},\"merges\":[]}}", id, id + 1);
    lmp_test_spit(path, buf, (size_t)n);
}

START_TEST(hf_folder_uses_its_tokenizer_json)
{
    mkdir(tmp("hf"), 0700);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char src[512];
        size_t n;
        snprintf(src, sizeof src, LMP_SOURCE_DIR "/tests/golden/gpt2-tiny/%s", files[i]);
        unsigned char *b = lmp_test_slurp(src, &n);
        char dst[512];
        snprintf(dst, sizeof dst, "%s/%s", tmp("hf"), files[i]);
        lmp_test_spit(dst, b, n);
        free(b);
    }
    const char *text = "The cat sat on the mat. It was a sunny day, and the cat was happy!\n";
    char big[4096] = "";
    for (int i = 0; i < 20; i++) strcat(big, text);
    lmp_test_spit(tmp("t.txt"), big, strlen(big));
    char args[1024];
    snprintf(args, sizeof args, "eval %s --text %s --seq-len 32", tmp("hf"), tmp("t.txt"));
    ck_assert_int_eq(run(args, tmp("err.txt")), 1);
    char *err = slurp(tmp("err.txt"));
    ck_assert_msg(strstr(err, "tokenizer.json"), "the message should name the tokenizer.json it looked for:\n%s", err);
    free(err);
    char tj[512];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", tmp("hf"));
    write_tiny_tokenizer(tj);
    ck_assert_int_eq(run(args, tmp("err.txt")), 0);
    ck_assert_msg(strstr(output, "ppl "), "%s", output);
    /* the same through a config without model.tokenizer */
    char cfgtext[1024];
    snprintf(cfgtext, sizeof cfgtext,
             "model = { path = \"%s\"; };\neval = { texts = [ \"%s\" ]; seq_len = 32; };\n"
             "variants = ( { name = \"fp32\"; }, { name = \"w8\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; } ); } );\n",
             tmp("hf"), tmp("t.txt"));
    lmp_test_spit(tmp("hf.cfg"), cfgtext, strlen(cfgtext));
    snprintf(args, sizeof args, "compare %s", tmp("hf.cfg"));
    ck_assert_int_eq(run(args, NULL), 0);
    ck_assert_ptr_nonnull(strstr(output, "\nw8 "));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compare");
    TCase *tc = tcase_create("outputs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, json_to_stdout_parses);
    tcase_add_test(tc, csv_quotes_and_full_precision);
    tcase_add_test(tc, compress_and_eval_times_apart);
    tcase_add_test(tc, json_records_the_run);
    tcase_add_test(tc, variant_globs);
    tcase_add_test(tc, progress_names_variant_and_eta);
    tcase_add_test(tc, sigterm_then_resume_equals_uninterrupted);
    tcase_add_test(tc, output_folder_checked_first);
    tcase_add_test(tc, hf_folder_uses_its_tokenizer_json);
    tcase_add_test(tc, unmatched_pattern_stops_before_work);
    tcase_add_test(tc, failed_write_keeps_previous_report);
    tcase_add_test(tc, markdown_escapes_pipes);
    tcase_add_test(tc, calibration_inputs_original_is_the_unmodified_models);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
