/* test_hostile_inputs.c — inputs that are not what they claim to be (issue 14, points 2, 5, 6):
 *
 *  - a FIFO given as the model, the tokenizer, an evaluation text, the LAMBADA file, the config,
 *    a file the config @includes, or an input of `lmpress diff` is refused at once (the CLI runs
 *    under `timeout`, so a hang fails the test instead of blocking it);
 *  - /dev/zero as the tokenizer is refused (and, when special files are allowed on purpose with
 *    LMP_ALLOW_SPECIAL_FILES=1, read no further than the tokenizer cap); a sparse 300 MiB
 *    tokenizer is refused by the cap before it is read; a text may come from a pipe on purpose;
 *  - a GGUF whose tensor type was changed (the span up to the next tensor no longer matches);
 *  - messages: a config that is a folder, integers that libconfig 1.5 would wrap, an @include of
 *    a file that is not a config, a GGUF with a broken magic (named .gguf and not), a GGUF given
 *    as --tokenizer, and the get_strings leak on a bad list (under valgrind, when it is there).
 * Each case runs the real `lmpress` binary or the core function, never a mock. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "formats/gguf.h"
#ifndef LMP_HOSTILE_OLD_API /* (built against the code before the fix only to show the CLI cases fail) */
#include "base/input_file.h"
#endif
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define FIXTURE LMP_SOURCE_DIR "/tests/golden/dequant_fixture.gguf"
#define GPT2_VOCAB LMP_SOURCE_DIR "/data/gpt2-tokenizer/ggml-vocab-gpt-2.gguf"

/* A hang fails instead of blocking: every CLI run is bounded, and limited to 4 GiB of address
 * space so that an unbounded read fails fast instead of exhausting the machine. */
#define LMP_ALLOW_ENV_ASSIGN "LMP_ALLOW_SPECIAL_FILES=1"

/* AddressSanitizer reserves terabytes of address space for its shadow memory, so under the
 * sanitizer build (LMP_SANITIZE) the address-space limit is left out; the caps under test are
 * lmpress's own, and ASan stops a runaway allocation by itself. */
#if defined(__SANITIZE_ADDRESS__)
#define ULIMIT_V ""
#else
#define ULIMIT_V "ulimit -v 4194304; "
#endif
#define LIMIT ULIMIT_V "exec timeout 20 "

static char tmpdir[256];
static char output[65536];
static char args[8192];
static char needle[1024];
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)
#define NEEDLE(...) (snprintf(needle, sizeof needle, __VA_ARGS__), needle)

static void setup(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "hostile");
}

static void teardown(void)
{
    lmp_test_rmtree(tmpdir);
}

/* tmpdir/name (testutil.h's lmp_test_path) */
static const char *tmp_path(const char *name) { return lmp_test_path(tmpdir, name); }

static const char *write_file(const char *name, const void *content, size_t len)
{
    const char *p = tmp_path(name);
    lmp_test_spit(p, content, len);
    return p;
}

static const char *make_fifo(const char *name)
{
    const char *p = tmp_path(name);
    ck_assert_msg(mkfifo(p, 0600) == 0, "mkfifo %s: %s", p, strerror(errno));
    return p;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Runs `lmpress ARGS` in a shell with the limits above (env: variable assignments or ""),
 * capturing stdout+stderr; returns the exit code (124: it was still running after 20 s).
 * With `pipe_from`, standard input is a pipe from that file. */
static int run_pipe_env(const char *pipe_from, const char *env, const char *a)
{
    static char cmd[16384];
    if (pipe_from)
        snprintf(cmd, sizeof cmd, "sh -c '" ULIMIT_V "cat %s | timeout 20 env %s %s %s' 2>&1", pipe_from, env,
                 LMP_CLI, a);
    else
        snprintf(cmd, sizeof cmd, "sh -c '" LIMIT "env %s %s %s' 2>&1", env, LMP_CLI, a);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(output, 1, sizeof output - 1, p);
    output[got] = 0;
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status), "lmpress %s did not exit normally\n%s", a, output);
    return WEXITSTATUS(status);
}

static int run_env(const char *env, const char *a) { return run_pipe_env(NULL, env, a); }

/* Exit 1 within the time limit, exactly one error line, naming needle1 (and needle2). */
static void expect_error_pipe_env(const char *pipe_from, const char *env, const char *a, const char *needle1,
                                  const char *needle2)
{
    time_t t0 = time(NULL);
    int rc = run_pipe_env(pipe_from, env, a);
    ck_assert_msg(rc != 124, "lmpress %s: still running after 20 s (blocked?)\n%s", a, output);
    ck_assert_msg(rc == 1, "lmpress %s: exit %d, expected 1\n%s", a, rc, output);
    ck_assert_msg(count(output, "lmpress: error:") == 1, "not exactly one error line:\n%s", output);
    ck_assert_msg(strstr(output, needle1), "'%s' missing from:\n%s", needle1, output);
    if (needle2) ck_assert_msg(strstr(output, needle2), "'%s' missing from:\n%s", needle2, output);
    ck_assert_msg(time(NULL) - t0 < 15, "lmpress %s: took %lld s", a, (long long)(time(NULL) - t0));
}

static void expect_error_env(const char *env, const char *a, const char *needle1, const char *needle2)
{
    expect_error_pipe_env(NULL, env, a, needle1, needle2);
}

static void expect_error(const char *a, const char *needle1, const char *needle2)
{
    expect_error_env("", a, needle1, needle2);
}

/* A valid config (absolute paths) with `extra` lines first and `calib_samples` as written. */
static const char *config(const char *name, const char *extra, const char *calib_samples)
{
    char text[8192];
    snprintf(text, sizeof text,
             "%s\n"
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s\"; samples = %s; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 2; };\n"
             "variants = ( { name = \"fp32\"; } );\n",
             extra, MODEL, TOK, EVAL_TEXT, calib_samples, EVAL_TEXT);
    return write_file(name, text, strlen(text));
}

/* ---- point 2: FIFOs, devices, sizes ------------------------------------------------------- */

START_TEST(fifo_as_model)
{
    const char *f = make_fifo("model.bin");
    expect_error(ARGS("eval %s --tokenizer %s --text %s", f, TOK, EVAL_TEXT), f, "FIFO");
    const char *g = make_fifo("model.gguf");
    expect_error(ARGS("eval %s --text %s", g, EVAL_TEXT), g, "FIFO");
}
END_TEST

START_TEST(fifo_as_tokenizer)
{
    const char *f = make_fifo("tok.bin");
    expect_error(ARGS("eval --tokenizer %s --text %s", f, EVAL_TEXT), f, "FIFO");
    const char *j = make_fifo("tokenizer.json");
    expect_error(ARGS("eval --tokenizer %s --text %s", j, EVAL_TEXT), j, "FIFO");
}
END_TEST

START_TEST(fifo_as_text_and_lambada)
{
    const char *f = make_fifo("eval.txt");
    expect_error(ARGS("eval --text %s", f), f, "FIFO");
    const char *l = make_fifo("lambada.jsonl");
    expect_error(ARGS("eval --lambada %s", l), l, "FIFO");
    /* with a text too: the LAMBADA file is read before the text is evaluated */
    expect_error(ARGS("eval --text %s --lambada %s", EVAL_TEXT, l), l, "FIFO");
}
END_TEST

START_TEST(fifo_as_config_and_include)
{
    const char *f = make_fifo("fifo.cfg");
    expect_error(ARGS("check %s", f), f, "FIFO");
    expect_error(ARGS("compare %s", f), f, "FIFO");
    char inc[600];
    snprintf(inc, sizeof inc, "@include \"%s\"", f);
    const char *c = config("inc-fifo.cfg", inc, "2");
    expect_error(ARGS("check %s", c), f, "FIFO");
    /* allowing special files on purpose does not let libconfig block on an @included FIFO */
    expect_error_env(LMP_ALLOW_ENV_ASSIGN, ARGS("check %s", c), f, "FIFO");
}
END_TEST

START_TEST(fifo_as_diff_input)
{
    const char *f = make_fifo("a.json");
    expect_error(ARGS("diff %s %s", f, f), f, "FIFO");
    const char *j = write_file("b.json", "{}", 2);
    expect_error(ARGS("diff %s %s", j, f), f, "FIFO");
}
END_TEST

START_TEST(dev_zero_as_tokenizer)
{
    expect_error(ARGS("eval --tokenizer /dev/zero --text %s", EVAL_TEXT), "/dev/zero", "character device");
    /* on purpose: read, but no further than the 256 MiB a tokenizer may have */
    expect_error_env(LMP_ALLOW_ENV_ASSIGN, ARGS("eval --tokenizer /dev/zero --text %s", EVAL_TEXT), "/dev/zero",
                     "256 MiB");
}
END_TEST

START_TEST(oversized_tokenizer)
{
    const char *p = tmp_path("huge-tok.bin");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)300 << 20), 0); /* sparse: takes no disk space */
    close(fd);
    expect_error(ARGS("eval --tokenizer %s --text %s", p, EVAL_TEXT), p, "larger than the 256 MiB");
}
END_TEST

/* Found by fuzz_tokenizer: a 600-byte tokenizer.json naming token id 87777772 made the loader
 * allocate tables for 87.8 M ids (2.3 GB). */
START_TEST(sparse_token_ids)
{
    const char *p = tmp_path("sparse.json");
    static const char json[] =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
        " \"decoder\": {\"type\": \"ByteLevel\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 87777772}, \"merges\": []}}";
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(json, f);
    fclose(f);
    expect_error(ARGS("eval --tokenizer %s --text %s", p, EVAL_TEXT), p, "token ids go up to 87777772 for only 2 tokens");
}
END_TEST

START_TEST(text_from_a_pipe_on_purpose)
{
    int rc = run_pipe_env(EVAL_TEXT, LMP_ALLOW_ENV_ASSIGN, "eval --text /dev/stdin --seq-len 64 --max-windows 1");
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, output);
    ck_assert_msg(strstr(output, "ppl "), "%s", output);
    /* without the switch it is refused, naming the switch */
    expect_error_pipe_env(EVAL_TEXT, "", "eval --text /dev/stdin --seq-len 64 --max-windows 1", "/dev/stdin",
                          "LMP_ALLOW_SPECIAL_FILES");
}
END_TEST

/* ---- point 5: a GGUF tensor whose type was changed ------------------------------------------ */

/* The fixture with tensor `name`'s ggml type (12 = Q4_K, 14 = Q6_K) replaced by `to`. */
static const char *retyped_fixture(const char *file, const char *name, uint32_t from, uint32_t to)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(FIXTURE, &n);
    unsigned char key[64];
    size_t nl = strlen(name);
    uint64_t len = nl;
    memcpy(key, &len, 8); /* the fixture is little-endian, and so is every machine this runs on */
    memcpy(key + 8, name, nl);
    size_t at = SIZE_MAX;
    for (size_t i = 0; i + 8 + nl + 4 + 16 + 4 <= n && at == SIZE_MAX; i++)
        if (memcmp(b + i, key, 8 + nl) == 0) {
            uint32_t dims;
            memcpy(&dims, b + i + 8 + nl, 4);
            if (dims == 2) at = i + 8 + nl + 4 + 16;
        }
    ck_assert_msg(at != SIZE_MAX, "tensor info of '%s' not found in the fixture", name);
    uint32_t type;
    memcpy(&type, b + at, 4);
    ck_assert_uint_eq(type, from);
    memcpy(b + at, &to, 4);
    const char *p = write_file(file, b, n);
    free(b);
    return p;
}

START_TEST(gguf_tensor_type_changed)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(FIXTURE, &g) == 0, "%s", lmp_last_error()); /* the original is fine */
    lmp_gguf_close(g);

    /* q4_k (256 x 2, 288 bytes) claimed to be Q6_K (420 bytes): it would read q6_k's bytes */
    const char *p = retyped_fixture("bigger.gguf", "q4_k", 12, 14);
    g = (lmp_gguf *)(uintptr_t)1;
    ck_assert_int_ne(lmp_gguf_open(p, &g), 0);
    ck_assert_ptr_null(g);
    const char *e = lmp_last_error();
    ck_assert_msg(strstr(e, p) && strstr(e, "'q4_k'") && strstr(e, "Q6_K") && strstr(e, "420 bytes") &&
                      strstr(e, "'q6_k'") && strstr(e, "288 bytes"),
                  "%s", e);

    /* the last tensor, q6_k (420 bytes), claimed to be Q4_K (288): a smaller type leaves most of
     * its span unread, which is as wrong */
    p = retyped_fixture("smaller.gguf", "q6_k", 14, 12);
    ck_assert_int_ne(lmp_gguf_open(p, &g), 0);
    e = lmp_last_error();
    ck_assert_msg(strstr(e, p) && strstr(e, "'q6_k'") && strstr(e, "Q4_K") && strstr(e, "288 bytes") &&
                      strstr(e, "end of the data"),
                  "%s", e);
}
END_TEST

/* ---- point 6: messages ---------------------------------------------------------------------- */

START_TEST(config_is_a_directory)
{
    const char *d = tmp_path("dir.cfg");
    ck_assert_int_eq(mkdir(d, 0700), 0);
    expect_error(ARGS("check %s", d), d, "directory");
    ck_assert_msg(!strstr(output, "flex scanner"), "%s", output);
}
END_TEST

START_TEST(config_large_integers)
{
    /* libconfig 1.5 read these as -2147483648 and 8 (the latter silently accepted) */
    const char *c = config("big.cfg", "", "2147483648");
    expect_error(ARGS("check %s", c), "calibration.samples: 2147483648 is out of range", NULL);
    ck_assert_msg(!strstr(output, "-2147483648"), "%s", output);
    c = config("wrap.cfg", "", "4294967304");
    expect_error(ARGS("check %s", c), "calibration.samples: 4294967304 is out of range", NULL);
    c = config("huge.cfg", "", "99999999999999999999");
    expect_error(ARGS("check %s", c), "99999999999999999999", "out of range");
    /* a large value where one is allowed is read as written */
    c = config("seed.cfg", "seed = 12345678901;", "2");
    int rc = run_env("", ARGS("check %s", c));
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, output);
}
END_TEST

START_TEST(config_include_of_a_non_config)
{
    const char *t = write_file("notes.txt", "root:x:0:0:root:/root:/bin/bash\n", 32);
    char inc[600];
    snprintf(inc, sizeof inc, "@include \"%s\"", t);
    const char *c = config("inc.cfg", inc, "2");
    expect_error(ARGS("check %s", c), NEEDLE("%s:1: syntax error", t), "inc.cfg");
    /* a setting of an included file is reported with that file's name */
    const char *v = write_file("vals.cfg", "\nseed = -5;\n", 12);
    snprintf(inc, sizeof inc, "@include \"%s\"", v);
    c = config("inc2.cfg", inc, "2");
    expect_error(ARGS("check %s", c), NEEDLE("%s:2: seed", v), NULL);
    /* a missing one names it */
    c = config("inc3.cfg", "@include \"/nonexistent/x.cfg\"", "2");
    expect_error(ARGS("check %s", c), "/nonexistent/x.cfg", "inc3.cfg:1");
}
END_TEST

START_TEST(gguf_broken_magic)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(FIXTURE, &n);
    b[0] = 'X';
    const char *p = write_file("broken.gguf", b, n);
    expect_error(ARGS("eval %s --text %s", p, EVAL_TEXT), NEEDLE("%s: not a GGUF file", p), "'GGUF'");
    ck_assert_msg(!strstr(output, "llama2.c"), "%s", output);
    /* under another name: every format tried is named */
    p = write_file("broken.bin", b, n);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", p, TOK, EVAL_TEXT), "not GGUF", "not a llama2.c checkpoint");
    free(b);
}
END_TEST

START_TEST(gguf_as_tokenizer)
{
    /* its vocabulary is read (and checked against the model's), not parsed as llama2.c's */
    expect_error(ARGS("eval --tokenizer %s --text %s", GPT2_VOCAB, EVAL_TEXT), GPT2_VOCAB,
                 "the GGUF's tokenizer has 50257 tokens, the model 512");
    /* a GGUF without a vocabulary says so */
    expect_error(ARGS("eval --tokenizer %s --text %s", FIXTURE, EVAL_TEXT), FIXTURE, "no tokenizer in this GGUF");
}
END_TEST

START_TEST(config_get_strings_leak)
{
    const char *c = config("leak.cfg", "plugins = { search_path = ( \"a\", 1 ); };", "2");
    char cmd[4096];
#if defined(__SANITIZE_ADDRESS__)
    /* the sanitizer build: LeakSanitizer checks at exit (and turns the exit code into 23) */
    snprintf(cmd, sizeof cmd, "%s check %s 2>&1", LMP_CLI, c);
#else
    if (system("valgrind --version > /dev/null 2>&1") != 0) {
        lmp_test_skip("SKIPPED config_get_strings_leak: no valgrind\n");
        return;
    }
    snprintf(cmd, sizeof cmd,
             "valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 %s check %s 2>&1",
             LMP_CLI, c);
#endif
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(output, 1, sizeof output - 1, p);
    output[got] = 0;
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "exit %d (99 or 23: a leak):\n%s",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1, output);
    ck_assert_msg(strstr(output, "plugins.search_path[1]: expected a string"), "%s", output);
}
END_TEST

/* ---- the helper itself ---------------------------------------------------------------------- */
#ifndef LMP_HOSTILE_OLD_API
START_TEST(helper_api)
{
    unsetenv(LMP_ALLOW_SPECIAL_FILES_ENV);
    const char *f = make_fifo("api.fifo");
    char *data = NULL;
    size_t len = 0;
    ck_assert_int_ne(lmp_input_read(f, LMP_INPUT_TEXT, &data, &len), 0); /* returns: no writer needed */
    ck_assert_ptr_null(data);
    ck_assert_msg(strstr(lmp_last_error(), f) && strstr(lmp_last_error(), "is a FIFO, not a regular file"), "%s",
                  lmp_last_error());
    /* allowed: a FIFO without a writer reads as empty instead of blocking */
    setenv(LMP_ALLOW_SPECIAL_FILES_ENV, "1", 1);
    ck_assert_int_eq(lmp_input_special_allowed(), 1);
    ck_assert_msg(lmp_input_read(f, LMP_INPUT_TEXT, &data, &len) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(len, 0);
    free(data);
    /* a model is mapped: never a FIFO; a folder is never a file */
    int fd;
    uint64_t size;
    ck_assert_int_ne(lmp_input_open_kind(f, LMP_INPUT_MODEL, &fd, &size), 0);
    ck_assert_int_ne(lmp_input_read(tmpdir, LMP_INPUT_CONFIG, &data, &len), 0);
    ck_assert_msg(strstr(lmp_last_error(), "is a directory"), "%s", lmp_last_error());
    unsetenv(LMP_ALLOW_SPECIAL_FILES_ENV);

    /* the caps */
    ck_assert_uint_eq(lmp_input_cap(LMP_INPUT_CONFIG), (uint64_t)16 << 20);
    ck_assert_uint_eq(lmp_input_cap(LMP_INPUT_TOKENIZER), (uint64_t)256 << 20);
    ck_assert_uint_eq(lmp_input_cap(LMP_INPUT_TEXT), (uint64_t)4 << 30);
    ck_assert_uint_eq(lmp_input_cap(LMP_INPUT_MODEL), UINT64_MAX);
    const char *big = tmp_path("big.cfg");
    fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, ((off_t)16 << 20) + 1), 0);
    close(fd);
    ck_assert_int_ne(lmp_input_read(big, LMP_INPUT_CONFIG, &data, &len), 0);
    ck_assert_msg(strstr(lmp_last_error(), big) && strstr(lmp_last_error(), "larger than the 16 MiB"), "%s",
                  lmp_last_error());
    ck_assert_msg(lmp_input_read(big, LMP_INPUT_TEXT, &data, &len) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(len, ((size_t)16 << 20) + 1);
    free(data);

    /* a regular file is read whole and NUL-terminated */
    const char *t = write_file("t.txt", "abc", 3);
    ck_assert_int_eq(lmp_input_read(t, LMP_INPUT_TEXT, &data, &len), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert_str_eq(data, "abc");
    free(data);
    ck_assert_int_ne(lmp_input_read("/nonexistent/t.txt", LMP_INPUT_TOKENIZER, &data, &len), 0);
    ck_assert_msg(strstr(lmp_last_error(), "/nonexistent/t.txt: cannot open tokenizer file: No such file"), "%s",
                  lmp_last_error());
}
END_TEST
#endif

static Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile_inputs");
    TCase *tc = tcase_create("hostile_inputs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, fifo_as_model);
    tcase_add_test(tc, fifo_as_tokenizer);
    tcase_add_test(tc, fifo_as_text_and_lambada);
    tcase_add_test(tc, fifo_as_config_and_include);
    tcase_add_test(tc, fifo_as_diff_input);
    tcase_add_test(tc, dev_zero_as_tokenizer);
    tcase_add_test(tc, oversized_tokenizer);
    tcase_add_test(tc, sparse_token_ids);
    tcase_add_test(tc, text_from_a_pipe_on_purpose);
    tcase_add_test(tc, gguf_tensor_type_changed);
    tcase_add_test(tc, config_is_a_directory);
    tcase_add_test(tc, config_large_integers);
    tcase_add_test(tc, config_include_of_a_non_config);
    tcase_add_test(tc, gguf_broken_magic);
    tcase_add_test(tc, gguf_as_tokenizer);
    tcase_add_test(tc, config_get_strings_leak);
#ifndef LMP_HOSTILE_OLD_API
    tcase_add_test(tc, helper_api);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_main(hostile_suite()); }
