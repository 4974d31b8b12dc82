/* test_outputs_safety.c — files the user did not ask to lose (issue 34, items 5-10): what may be
 * at an output path, variant names as file names, outputs that are inputs or each other, one
 * writer per report, the temporary names a killed run leaves, and --resume with exports.
 * Each case runs either the core function or the real `lmpress` binary on stories260K. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "formats/json.h"
#include "base/outfile.h"
#include "base/outlock.h"
#include "base/tmpname.h"
#include "export/out_dir.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define CALIB_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"

static char tmpdir[256];
static char out[65536];

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "outsafe"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

/* `lmpress ARGS 2>&1` (printf-style), its output in out[]; the exit code (a crash fails). */
static int cli(const char *fmt, ...) LMP_PRINTF(1, 2);
static int cli(const char *fmt, ...)
{
    char args[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return lmp_test_cli_all(args, out, sizeof out);
}

/* A small config (two windows of 64) with `variants` inside variants = ( ... ); into tmp(name). */
static const char *config(const char *name, const char *variants)
{
    char text[8192];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s\"; samples = 2; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 2; };\n"
             "variants = (\n%s\n);\n",
             MODEL, TOK, CALIB_TEXT, EVAL_TEXT, variants);
    const char *p = tmp(name);
    lmp_test_spit(p, text, strlen(text));
    return p;
}

#define W8 "{ name = \"w8\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; } ); }"

static void put(const char *path, const char *text) { lmp_test_spit(path, text, strlen(text)); }

static void expect_content(const char *path, const char *text)
{
    size_t n;
    unsigned char *got = lmp_test_slurp(path, &n);
    ck_assert_msg(n == strlen(text) && memcmp(got, text, n) == 0, "%s was changed: %s", path, got);
    free(got);
}

/* ---- item 5: what may be at an output path ------------------------------------------------ */

START_TEST(special_outputs_refused_by_the_check)
{
    ck_assert_int_ne(lmp_outfile_check_kind("/dev/null", "--json"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "character device"), "%s", lmp_last_error());
    ck_assert_int_ne(lmp_outfile_check("/dev/null", "--json"), 0);
    ck_assert_int_eq(mkfifo(tmp("fifo"), 0600), 0);
    ck_assert_int_ne(lmp_outfile_check(tmp("fifo"), "--md"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "FIFO") && strstr(lmp_last_error(), "--md"), "%s", lmp_last_error());
    put(tmp("target"), "keep");
    ck_assert_int_eq(symlink(tmp("target"), tmp("link")), 0);
    ck_assert_int_ne(lmp_outfile_check(tmp("link"), "--csv"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "symbolic link"), "%s", lmp_last_error());
    /* nothing, or a regular file: fine */
    ck_assert_int_eq(lmp_outfile_check(tmp("target"), "--csv"), 0);
    ck_assert_int_eq(lmp_outfile_check(tmp("new"), "--csv"), 0);
}
END_TEST

static void w(const void *arg, FILE *f) { fputs(arg, f); }

START_TEST(write_does_not_replace_a_link_put_there_later)
{
    put(tmp("target"), "keep");
    ck_assert_int_eq(symlink(tmp("target"), tmp("link")), 0);
    ck_assert_int_ne(lmp_outfile_write(tmp("link"), w, "new"), 0);
    struct stat sb;
    ck_assert_int_eq(lstat(tmp("link"), &sb), 0);
    ck_assert(S_ISLNK(sb.st_mode));
    expect_content(tmp("target"), "keep");
    ck_assert_int_eq(lmp_outfile_write(tmp("plain"), w, "new"), 0);
    expect_content(tmp("plain"), "new");
}
END_TEST

START_TEST(cli_fifo_and_link_outputs_refused)
{
    const char *cfg = config("c.cfg", W8);
    ck_assert_int_eq(mkfifo(tmp("fifo"), 0600), 0);
    ck_assert_int_eq(cli("compare %s --json %s", cfg, tmp("fifo")), 1);
    ck_assert_msg(strstr(out, "is a FIFO"), "%s", out);
    struct stat sb;
    ck_assert_int_eq(lstat(tmp("fifo"), &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    put(tmp("target.md"), "keep");
    ck_assert_int_eq(symlink(tmp("target.md"), tmp("link.md")), 0);
    ck_assert_int_eq(cli("compare %s --md %s", cfg, tmp("link.md")), 1);
    ck_assert_msg(strstr(out, "symbolic link"), "%s", out);
    expect_content(tmp("target.md"), "keep");
    /* --output: a link to a GGUF, a FIFO, and "-" */
    put(tmp("real.gguf"), "keep");
    ck_assert_int_eq(symlink(tmp("real.gguf"), tmp("link.gguf")), 0);
    ck_assert_int_eq(cli("run %s --output %s", cfg, tmp("link.gguf")), 1);
    ck_assert_msg(strstr(out, "symbolic link"), "%s", out);
    expect_content(tmp("real.gguf"), "keep");
    ck_assert_int_eq(mkfifo(tmp("fifo.gguf"), 0600), 0);
    ck_assert_int_eq(cli("run %s --output %s", cfg, tmp("fifo.gguf")), 1);
    ck_assert_msg(strstr(out, "FIFO"), "%s", out);
    ck_assert_int_eq(cli("run %s --output -", cfg), 1);
    ck_assert_msg(strstr(out, "standard output"), "%s", out);
    /* analyze: the same check */
    ck_assert_int_eq(cli("analyze %s --per block --svg %s", cfg, tmp("fifo")), 1);
    ck_assert_msg(strstr(out, "is a FIFO"), "%s", out);
}
END_TEST

/* analyze --csv -: the CSV on standard output, no file named "-" */
START_TEST(cli_analyze_dash_is_stdout)
{
    const char *cfg = config("c.cfg", W8);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && %s analyze %s --per block --csv - 2>/dev/null", tmpdir, LMP_CLI, cfg);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(strncmp(out, "rank,unit,", 10) == 0, "not the CSV:\n%s", out);
    ck_assert_msg(!strstr(out, "Spearman"), "the table went to stdout too:\n%s", out);
    ck_assert_int_ne(access(tmp("-"), F_OK), 0);
    ck_assert_int_eq(cli("analyze %s --json - --csv -", cfg), 2);
}
END_TEST

/* ---- item 6: variant names as file names -------------------------------------------------- */

START_TEST(variant_file_names_stay_in_the_folder)
{
    char b[256];
    ck_assert_str_eq(lmp_variant_file_name("w8", b, sizeof b), "w8");
    ck_assert_str_eq(lmp_variant_file_name("sparsegpt-2:4+gptq-w4", b, sizeof b), "sparsegpt-2:4+gptq-w4");
    ck_assert_str_eq(lmp_variant_file_name("../escaped", b, sizeof b), "_._escaped");
    ck_assert_str_eq(lmp_variant_file_name("./w8", b, sizeof b), "__w8");
    ck_assert_str_eq(lmp_variant_file_name("h/", b, sizeof b), "h_");
    ck_assert_str_eq(lmp_variant_file_name("..", b, sizeof b), "_.");
    ck_assert_str_eq(lmp_variant_file_name("", b, sizeof b), "_");
    ck_assert_str_eq(lmp_variant_file_name("a b\n\xc3\xa9", b, sizeof b), "a_b___");
    char longname[400];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    ck_assert_uint_eq(strlen(lmp_variant_file_name(longname, b, sizeof b)), LMP_VARIANT_FILE_MAX);
}
END_TEST

START_TEST(cli_variant_names_mapping_to_one_file_refused)
{
    const char *cfg = config("c.cfg", "{ name = \"a/b\"; }, { name = \"a_b\"; }");
    ck_assert_int_eq(cli("check %s", cfg), 1);
    ck_assert_msg(strstr(out, "map to one export file name") && strstr(out, "c.cfg:"), "%s", out);
    cfg = config("d.cfg", "{ name = \"h\"; }, { name = \"h/\"; }, { name = \"w8\"; }, { name = \"./w8\"; }");
    ck_assert_int_eq(cli("check %s", cfg), 0);
}
END_TEST

START_TEST(cli_output_dir_keeps_escaping_names_inside)
{
    const char *cfg = config("c.cfg", "{ name = \"../escaped\"; }");
    ck_assert_int_eq(mkdir(tmp("out"), 0755), 0);
    ck_assert_int_eq(cli("compare %s --output-dir %s", cfg, tmp("out")), 0);
    ck_assert_int_ne(access(tmp("escaped.gguf"), F_OK), 0);
    ck_assert_msg(access(tmp("out/_._escaped.gguf"), F_OK) == 0, "%s", out);
}
END_TEST

/* ---- item 7: outputs that are inputs or each other ---------------------------------------- */

START_TEST(distinct_paths)
{
    put(tmp("a"), "a");
    ck_assert_int_eq(link(tmp("a"), tmp("hard")), 0);
    lmp_named_path in[1] = {{tmp("a"), "the config"}};
    lmp_named_path o1[1] = {{tmp("hard"), "--json"}};
    ck_assert_int_ne(lmp_outfile_distinct(o1, 1, in, 1), 0); /* same inode under another name */
    ck_assert_msg(strstr(lmp_last_error(), "the config"), "%s", lmp_last_error());
    char dotted[600];
    snprintf(dotted, sizeof dotted, "%s/./sub/../new", tmpdir);
    ck_assert_int_eq(mkdir(tmp("sub"), 0755), 0);
    lmp_named_path o2[3] = {{tmp("new"), "--json"}, {"-", "--csv"}, {dotted, "--md"}};
    ck_assert_int_ne(lmp_outfile_distinct(o2, 3, in, 1), 0); /* neither exists: the resolved paths */
    ck_assert_msg(strstr(lmp_last_error(), "same file"), "%s", lmp_last_error());
    lmp_named_path o3[2] = {{tmp("new"), "--json"}, {"-", "--csv"}};
    lmp_named_path in2[2] = {{tmp("a"), "the config"}, {"-", "x"}};
    ck_assert_int_eq(lmp_outfile_distinct(o3, 2, in2, 2), 0);
}
END_TEST

START_TEST(cli_outputs_onto_inputs_or_each_other_refused)
{
    const char *cfg = config("c.cfg", W8);
    size_t n0;
    unsigned char *before = lmp_test_slurp(cfg, &n0);
    ck_assert_int_eq(cli("compare %s --json %s", cfg, cfg), 1);
    ck_assert_msg(strstr(out, "the config") && strstr(out, "refusing to overwrite"), "%s", out);
    size_t n1;
    unsigned char *after = lmp_test_slurp(cfg, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    ck_assert_int_eq(cli("compare %s --json %s --md %s/./x", cfg, tmp("x"), tmpdir), 1);
    ck_assert_msg(strstr(out, "same file"), "%s", out);
    ck_assert_int_eq(cli("compare %s --csv %s", cfg, EVAL_TEXT), 1);
    ck_assert_msg(strstr(out, "evaluation text"), "%s", out);
    ck_assert_int_eq(cli("analyze %s --per block --csv %s --svg %s", cfg, tmp("y"), tmp("y")), 1);
    ck_assert_msg(strstr(out, "same file"), "%s", out);
    /* the model as --output: a GGUF copy of stories260K made by lmpress, then named as both */
    const char *base = config("b.cfg", "{ name = \"fp32\"; }");
    ck_assert_int_eq(cli("run %s --output %s", base, tmp("m.gguf")), 0);
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; };\neval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 2; };\n"
             "variants = ( { name = \"fp32\"; } );\n", tmp("m.gguf"), EVAL_TEXT);
    put(tmp("g.cfg"), text);
    ck_assert_int_eq(cli("run %s --output %s", tmp("g.cfg"), tmp("m.gguf")), 1);
    ck_assert_msg(strstr(out, "the model"), "%s", out);
}
END_TEST

/* ---- item 8: one writer per report -------------------------------------------------------- */

START_TEST(second_writer_refused)
{
    lmp_outlock a = {.fd = -1}, b = {.fd = -1};
    ck_assert_int_eq(lmp_outlock_take(&a, tmp("r.json"), "--json"), 0);
    ck_assert_int_ne(lmp_outlock_take(&b, tmp("r.json"), "--json"), 0);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    ck_assert_msg(strstr(lmp_last_error(), "another lmpress run") && strstr(lmp_last_error(), pid), "%s", lmp_last_error());
    /* the CLI too, before any work; the report is not touched */
    put(tmp("r.json"), "keep");
    const char *cfg = config("c.cfg", W8);
    ck_assert_int_eq(cli("compare %s --json %s", cfg, tmp("r.json")), 1);
    ck_assert_msg(strstr(out, "another lmpress run"), "%s", out);
    expect_content(tmp("r.json"), "keep");
    lmp_outlock_release(&a);
    ck_assert_int_ne(access(tmp("r.json.lock"), F_OK), 0);
    ck_assert_int_eq(lmp_outlock_take(&b, tmp("r.json"), "--json"), 0);
    lmp_outlock_release(&b);
    /* a lock file left by a killed run holds no lock */
    put(tmp("r.json.lock"), "999999\n");
    ck_assert_int_eq(cli("compare %s --json %s", cfg, tmp("r.json")), 0);
    ck_assert_int_ne(access(tmp("r.json.lock"), F_OK), 0);
}
END_TEST

/* ---- item 9: temporary names and the folder swap ------------------------------------------ */

/* A temporary name of dest as a killed process of this machine would have left it. */
static void dead_leftover(const char *dest, const char *kind, int folder, char *path, size_t n)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
    host[64] = 0;
    snprintf(path, n, "%s.%s-%s-%d-abcdef", dest, kind, host, 99999999); /* above any pid_max: not running */
    if (folder) {
        ck_assert_int_eq(mkdir(path, 0755), 0);
        char inner[700];
        snprintf(inner, sizeof inner, "%s/model.safetensors", path);
        put(inner, "half");
    } else {
        put(path, "half");
    }
}

START_TEST(stale_leftovers_swept)
{
    char dead_file[600], dead_dir[600], dead_old[600], live[600], other[600];
    dead_leftover(tmp("x.gguf"), "tmp", 0, dead_file, sizeof dead_file);
    dead_leftover(tmp("hf"), "tmp", 1, dead_dir, sizeof dead_dir);
    dead_leftover(tmp("hf"), "old", 1, dead_old, sizeof dead_old);
    /* a live process's (this one's parent, by pid) and another machine's stay */
    ck_assert_int_ge(lmp_tmpname_create(tmp("x.gguf"), "tmp", 0, live, sizeof live), 0);
    snprintf(other, sizeof other, "%s.tmp-someotherhost-99999999-abcdef", tmp("x.gguf"));
    put(other, "theirs");
    long pid;
    ck_assert(lmp_tmpname_is_stale("x.gguf", strrchr(dead_file, '/') + 1, &pid) && pid == 99999999);
    ck_assert(!lmp_tmpname_is_stale("x.gguf", strrchr(live, '/') + 1, &pid));
    ck_assert(!lmp_tmpname_is_stale("x.gguf", strrchr(other, '/') + 1, &pid));
    ck_assert(!lmp_tmpname_is_stale("x.gguf", "x.gguf", &pid));
    ck_assert_int_eq(lmp_tmpname_sweep(tmp("x.gguf")), 1);
    ck_assert_int_eq(lmp_tmpname_sweep(tmp("hf/")), 2);
    ck_assert_int_ne(access(dead_file, F_OK), 0);
    ck_assert_int_ne(access(dead_dir, F_OK), 0);
    ck_assert_int_ne(access(dead_old, F_OK), 0);
    ck_assert_int_eq(access(live, F_OK), 0);
    ck_assert_int_eq(access(other, F_OK), 0);
}
END_TEST

START_TEST(cli_export_sweeps_a_killed_runs_leftovers)
{
    char dead[600];
    dead_leftover(tmp("m.gguf"), "tmp", 0, dead, sizeof dead);
    const char *cfg = config("c.cfg", "{ name = \"fp32\"; }");
    ck_assert_int_eq(cli("run %s --output %s", cfg, tmp("m.gguf")), 0);
    ck_assert_int_eq(access(tmp("m.gguf"), F_OK), 0);
    ck_assert_msg(access(dead, F_OK) != 0, "%s left in place", dead);
    /* a folder export, and the report's own temporary names */
    dead_leftover(tmp("hf"), "tmp", 1, dead, sizeof dead);
    ck_assert_int_eq(cli("run %s --output %s", cfg, tmp("hf")), 0);
    ck_assert_msg(access(dead, F_OK) != 0, "%s left in place", dead);
    dead_leftover(tmp("r.json"), "tmp", 0, dead, sizeof dead);
    ck_assert_int_eq(cli("compare %s --json %s", cfg, tmp("r.json")), 0);
    ck_assert_msg(access(dead, F_OK) != 0, "%s left in place", dead);
}
END_TEST

/* Replacing a full folder, with RENAME_EXCHANGE and with the two-rename fallback: the new
 * content is in place, the old is gone, and nothing is left beside it. */
static void replace_folder(int fallback)
{
    if (fallback) setenv("LMP_TEST_NO_RENAME_EXCHANGE", "1", 1);
    else unsetenv("LMP_TEST_NO_RENAME_EXCHANGE");
    for (int round = 0; round < 2; round++) {
        lmp_outdir od;
        ck_assert_int_eq(lmp_outdir_begin(&od, tmp("d")), 0);
        FILE *f;
        ck_assert_int_eq(lmp_outdir_create(&od, "f", &f), 0);
        fputs(round ? "second" : "first", f);
        ck_assert_int_eq(lmp_outdir_close(&od, "f", f), 0);
        ck_assert_int_eq(lmp_outdir_commit(&od), 0);
        expect_content(tmp("d/f"), round ? "second" : "first");
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c 'd\\.' > %s/count", tmpdir, tmpdir);
    ck_assert_int_ne(system(cmd), -1);
    expect_content(tmp("count"), "0\n");
    unsetenv("LMP_TEST_NO_RENAME_EXCHANGE");
}

START_TEST(folder_replace_exchange) { replace_folder(0); }
END_TEST

START_TEST(folder_replace_fallback) { replace_folder(1); }
END_TEST

/* While a full folder is replaced over and over, another thread looks at the path: with
 * RENAME_EXCHANGE it always finds a folder (the swap is one step).  The two-rename fallback
 * leaves the path empty between its renames, which a kill there would make permanent; the
 * looker usually sees that window (counted, printed, not asserted: it is a race). */
typedef struct looker {
    const char *path;
    volatile int stop;
    long absent, looks;
} looker;

static void *look(void *arg)
{
    looker *l = arg;
    struct stat sb;
    while (!l->stop) {
        l->looks++;
        if (lstat(l->path, &sb) != 0) l->absent++;
    }
    return NULL;
}

static long replace_watched(int fallback, long *looks)
{
    if (fallback) setenv("LMP_TEST_NO_RENAME_EXCHANGE", "1", 1);
    else unsetenv("LMP_TEST_NO_RENAME_EXCHANGE");
    lmp_outdir od;
    FILE *f;
    ck_assert_int_eq(lmp_outdir_begin(&od, tmp("w")), 0);
    ck_assert_int_eq(lmp_outdir_create(&od, "f", &f), 0);
    ck_assert_int_eq(lmp_outdir_close(&od, "f", f), 0);
    ck_assert_int_eq(lmp_outdir_commit(&od), 0);
    looker l = {.path = tmp("w")};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, look, &l), 0);
    for (int round = 0; round < 200; round++) {
        ck_assert_int_eq(lmp_outdir_begin(&od, tmp("w")), 0);
        ck_assert_int_eq(lmp_outdir_create(&od, "f", &f), 0);
        ck_assert_int_eq(lmp_outdir_close(&od, "f", f), 0);
        ck_assert_msg(lmp_outdir_commit(&od) == 0, "%s", lmp_last_error());
    }
    l.stop = 1;
    pthread_join(t, NULL);
    unsetenv("LMP_TEST_NO_RENAME_EXCHANGE");
    *looks = l.looks;
    return l.absent;
}

START_TEST(folder_replace_never_leaves_the_path_empty)
{
    /* a filesystem without RENAME_EXCHANGE takes the fallback: nothing to check here then */
    ck_assert_int_eq(mkdir(tmp("x1"), 0755), 0);
    ck_assert_int_eq(mkdir(tmp("x2"), 0755), 0);
    if (renameat2(AT_FDCWD, tmp("x1"), AT_FDCWD, tmp("x2"), RENAME_EXCHANGE) != 0) {
        lmp_test_skip("SKIPPED folder_replace_never_leaves_the_path_empty: %s has no RENAME_EXCHANGE", tmpdir);
        return;
    }
    long looks, absent = replace_watched(0, &looks);
    ck_assert_msg(looks > 0, "the looker never ran");
    ck_assert_msg(absent == 0, "the path was absent %ld times of %ld looks", absent, looks);
    long looks2, absent2 = replace_watched(1, &looks2);
    printf("folder replace: absent %ld of %ld looks with RENAME_EXCHANGE, %ld of %ld with two renames\n", absent,
           looks, absent2, looks2);
}
END_TEST

/* ---- item 10: --resume with exports ------------------------------------------------------- */

START_TEST(cli_resume_exports_the_resumed_variants)
{
    const char *cfg = config("c.cfg", "{ name = \"fp32\"; }, " W8);
    ck_assert_int_eq(cli("compare %s --json %s", cfg, tmp("r.json")), 0);
    ck_assert_int_eq(cli("--verbose compare %s --json %s --resume --output-dir %s", cfg, tmp("r.json"), tmp("out")), 0);
    ck_assert_msg(access(tmp("out/fp32.gguf"), F_OK) == 0 && access(tmp("out/w8.gguf"), F_OK) == 0, "%s", out);
    ck_assert_msg(strstr(out, "compressed again to export it"), "%s", out);
    /* now every export is there: the report's rows are taken as they are */
    ck_assert_int_eq(cli("--verbose compare %s --json %s --resume --output-dir %s", cfg, tmp("r.json"), tmp("out")), 0);
    ck_assert_msg(!strstr(out, "compressed again"), "%s", out);
    /* run --output with --resume writes the file */
    ck_assert_int_eq(cli("run %s --variant w8 --json %s --resume --output %s", cfg, tmp("r.json"), tmp("one.gguf")), 0);
    ck_assert_msg(access(tmp("one.gguf"), F_OK) == 0, "%s", out);
}
END_TEST

/* ---- issue 34 item 15: analyze keeps finished units; targets checked up front --------------- */

#define W4 "{ name = \"w4\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; }; } ); }"

START_TEST(cli_analyze_impossible_targets_refused)
{
    const char *cfg = config("c.cfg", W4);
    ck_assert_int_eq(cli("analyze %s --target kld=-1", cfg), 2);
    ck_assert_msg(strstr(out, "never negative"), "%s", out);
    ck_assert_int_eq(cli("analyze %s --target top1=50", cfg), 2);
    ck_assert_msg(strstr(out, "fraction between 0 and 1"), "%s", out);
    ck_assert_int_eq(cli("analyze %s --target ppl=0.5", cfg), 2);
    ck_assert_msg(strstr(out, "at least 1"), "%s", out);
    ck_assert_int_eq(cli("analyze %s --target lambada=-0.1", cfg), 2);
}
END_TEST

static lmp_json *read_json(const char *path)
{
    size_t n;
    unsigned char *text = lmp_test_slurp(path, &n);
    lmp_json *j = NULL;
    ck_assert_msg(lmp_json_parse((char *)text, n, path, &j) == 0, "%s", lmp_last_error());
    free(text);
    return j;
}

START_TEST(cli_analyze_target_already_met_is_zero_units)
{
    const char *cfg = config("c.cfg", W4);
    ck_assert_int_eq(cli("analyze %s --per block --target kld=1000 --json %s", cfg, tmp("a.json")), 0);
    ck_assert_msg(strstr(out, "0 units skipped"), "%s", out);
    lmp_json *j = read_json(tmp("a.json"));
    int64_t k = -1;
    ck_assert_int_eq(lmp_json_get_int(lmp_json_get(j, "skip"), "k", "skip", &k), 0);
    ck_assert_int_eq(k, 0);
    lmp_json_free(j);
}
END_TEST

/* The unit `name`'s kld sum in an analysis JSON (complete or partial). */
static double unit_kld_sum(const lmp_json *j, const char *name)
{
    const lmp_json *us = lmp_json_get(j, "units");
    ck_assert_ptr_nonnull(us);
    for (size_t i = 0; i < us->n; i++) {
        const char *n;
        ck_assert_int_eq(lmp_json_get_string(&us->items[i], "name", "unit", &n), 0);
        if (strcmp(n, name) != 0) continue;
        double x;
        ck_assert_int_eq(lmp_json_get_number(lmp_json_get(&us->items[i], "result"), "kld_sum", "unit", &x), 0);
        return x;
    }
    ck_abort_msg("unit %s missing", name);
    return NAN;
}

/* SIGTERM in the middle of the unit scan: the finished units are in --json already, and
 * --resume evaluates only the others, ending with the numbers of an uninterrupted run. */
START_TEST(cli_analyze_interrupted_scan_resumes)
{
    char cfg[512], part[512]; /* own copies: tmp()'s buffers are reused by the polling below */
    snprintf(cfg, sizeof cfg, "%s", config("c.cfg", W4));
    snprintf(part, sizeof part, "%s", tmp("part.json"));
    ck_assert_int_eq(cli("analyze %s --json %s", cfg, tmp("full.json")), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec %s analyze %s --json %s > %s 2>&1", LMP_CLI, cfg, part, tmp("log"));
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* wait for the first finished unit in the file, then stop the run */
    int seen = 0;
    for (int i = 0; i < 60000 && !seen; i++) {
        FILE *f = fopen(part, "r");
        if (f) {
            char buf[256] = "";
            size_t got = fread(buf, 1, sizeof buf - 1, f);
            buf[got] = 0;
            fclose(f);
            seen = strstr(buf, "\"partial\": true") != NULL;
        }
        if (!seen) usleep(1000);
    }
    ck_assert_msg(seen, "no partial --json file appeared");
    kill(pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    size_t n;
    char *log = (char *)lmp_test_slurp(tmp("log"), &n);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %d: %s", status, log);
    ck_assert_msg(strstr(log, "finished units are kept in") && strstr(log, "--resume"), "%s", log);
    free(log);
    lmp_json *pj = read_json(part);
    int64_t done = 0, total = 0;
    ck_assert_int_eq(lmp_json_get_int(pj, "units_finished", "partial", &done), 0);
    ck_assert_int_eq(lmp_json_get_int(pj, "units_total", "partial", &total), 0);
    ck_assert_msg(done >= 1 && done < total, "%lld of %lld units", (long long)done, (long long)total);
    lmp_json_free(pj);
    ck_assert_msg(cli("--verbose analyze %s --json %s --resume", cfg, part) == 0, "%s", out);
    char taken[64];
    snprintf(taken, sizeof taken, "%lld of %lld units taken", (long long)done, (long long)total);
    ck_assert_msg(strstr(out, taken), "'%s' missing:\n%s", taken, out);
    lmp_json *full = read_json(tmp("full.json")), *resumed = read_json(part);
    const lmp_json *us = lmp_json_get(full, "units");
    ck_assert_int_eq((int)us->n, (int)total);
    for (size_t i = 0; i < us->n; i++) {
        const char *name;
        ck_assert_int_eq(lmp_json_get_string(&us->items[i], "name", "unit", &name), 0);
        double a = unit_kld_sum(full, name), b = unit_kld_sum(resumed, name);
        ck_assert_msg(fabs(a - b) <= 1e-9 * fabs(a), "%s: %.17g vs %.17g", name, a, b);
    }
    lmp_json_free(full);
    lmp_json_free(resumed);
    /* another metric is another analysis: refused */
    ck_assert_int_eq(cli("analyze %s --metric ppl --json %s --resume", cfg, part), 1);
    ck_assert_msg(strstr(out, "--metric"), "%s", out);
    ck_assert_int_eq(cli("analyze %s --resume", cfg), 2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("outputs_safety");
    TCase *t = tcase_create("outputs");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 300);
    tcase_add_test(t, special_outputs_refused_by_the_check);
    tcase_add_test(t, write_does_not_replace_a_link_put_there_later);
    tcase_add_test(t, cli_fifo_and_link_outputs_refused);
    tcase_add_test(t, cli_analyze_dash_is_stdout);
    tcase_add_test(t, variant_file_names_stay_in_the_folder);
    tcase_add_test(t, cli_variant_names_mapping_to_one_file_refused);
    tcase_add_test(t, cli_output_dir_keeps_escaping_names_inside);
    tcase_add_test(t, distinct_paths);
    tcase_add_test(t, cli_outputs_onto_inputs_or_each_other_refused);
    tcase_add_test(t, second_writer_refused);
    tcase_add_test(t, stale_leftovers_swept);
    tcase_add_test(t, cli_export_sweeps_a_killed_runs_leftovers);
    tcase_add_test(t, folder_replace_exchange);
    tcase_add_test(t, folder_replace_fallback);
    tcase_add_test(t, folder_replace_never_leaves_the_path_empty);
    tcase_add_test(t, cli_resume_exports_the_resumed_variants);
    suite_add_tcase(s, t);
    TCase *an = tcase_create("analyze");
    tcase_add_checked_fixture(an, setup, teardown);
    tcase_set_timeout(an, 300);
    tcase_add_test(an, cli_analyze_impossible_targets_refused);
    tcase_add_test(an, cli_analyze_target_already_met_is_zero_units);
    tcase_add_test(an, cli_analyze_interrupted_scan_resumes);
    suite_add_tcase(s, an);
    return s;
}

int main(void) { return lmp_test_main(suite()); }
