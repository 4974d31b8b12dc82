/* testutil.h — what every check suite shares: running a suite, and running the lmpress binary. */
#ifndef LMP_TESTUTIL_H
#define LMP_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/json.h"

/* The interpreter that runs the numpy reference scripts in tools/ref: $LMP_PYTHON if set (e.g. a
 * venv's python, to check that a verdict does not depend on which numpy or BLAS runs them), else
 * Debian's /usr/bin/python3 with python3-numpy (tools/setup.sh installs it). */
static inline const char *lmp_test_python(void)
{
    const char *p = getenv("LMP_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}

/* Where tools/test.sh unpacks the PyPI gguf and tokenizers packages: the reference scripts'
 * PYTHONPATH. */
#define LMP_TEST_PYDEPS LMP_BINARY_DIR "/pydeps"

static inline void lmp_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 1 when lmp_test_python() imports numpy and gguf from LMP_TEST_PYDEPS; otherwise prints why
 * the test `test` skips (a line starting "SKIPPED") and returns 0. */
static inline int lmp_test_have_gguf(const char *test)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' -c 'import numpy, gguf' >/dev/null 2>&1", LMP_TEST_PYDEPS,
             lmp_test_python());
    if (system(cmd) == 0) return 1;
    lmp_test_skip("SKIPPED %s: %s cannot import numpy and gguf with PYTHONPATH=%s (tools/test.sh unpacks the PyPI gguf "
                  "package there)", test, lmp_test_python(), LMP_TEST_PYDEPS);
    return 0;
}

/* The suite's scratch folder: a fresh /tmp/lmpress-<what>-XXXXXX into dir[n]. */
static inline void lmp_test_tmpdir(char *dir, size_t n, const char *what)
{
    snprintf(dir, n, "/tmp/lmpress-%s-XXXXXX", what);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Removes a scratch folder and everything in it. */
static inline void lmp_test_rmtree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* dir/name; each call gets its own buffer (a test makes far fewer than 256). */
static inline const char *lmp_test_path(const char *dir, const char *name)
{
    static char path[256][512];
    static int slot;
    char *p = path[slot++ % 256];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

/* A small deterministic generator (xorshift64*), its state the caller's: uniform in [0, 1), and a
 * standard normal by Box-Muller. */
static inline double lmp_test_uniform(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

static inline float lmp_test_normal(uint64_t *s)
{
    const double u = lmp_test_uniform(s), v = lmp_test_uniform(s);
    return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v));
}

/* Skips: a test that cannot run here (a model not fetched, a Python package or a harness
 * missing, a backend this machine lacks, a bound AddressSanitizer makes meaningless) calls
 * lmp_test_skip("SKIPPED what: why") and returns.  The line is printed and also appended to the
 * suite's skip file, $LMP_TEST_SKIP_FILE (check forks each test, so a flag in memory would not
 * reach the suite's main); lmp_test_main then exits 77 when no test failed and one skipped, so
 * ctest (SKIP_RETURN_CODE 77, tests/CMakeLists.txt) shows the suite as Skipped, not Passed. */
#define LMP_TEST_SKIP_EXIT 77
#define LMP_TEST_SKIP_ENV "LMP_TEST_SKIP_FILE"

static inline void lmp_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void lmp_test_skip(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    printf("%s\n", line);
    fflush(stdout);
    const char *path = getenv(LMP_TEST_SKIP_ENV);
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
}

/* Runs the suite (forked tests, check's default) and turns the result into an exit code:
 * EXIT_FAILURE when a test failed, else 77 when one skipped (its lines are repeated at the end),
 * else EXIT_SUCCESS. */
static inline int lmp_test_run(SRunner *sr)
{
    char path[] = "/tmp/lmpress-skips-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        setenv(LMP_TEST_SKIP_ENV, path, 1);
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    int skipped = 0;
    FILE *f = fd >= 0 ? fopen(path, "r") : NULL;
    if (f) {
        char line[2048];
        while (fgets(line, sizeof line, f)) {
            if (!skipped++) printf("this suite skipped some of its checks (ctest: Skipped):\n");
            printf("  %s", line);
        }
        fclose(f);
    }
    if (fd >= 0) unlink(path);
    if (failed) return EXIT_FAILURE;
    return skipped ? LMP_TEST_SKIP_EXIT : EXIT_SUCCESS;
}

static inline int lmp_test_main(Suite *s) { return lmp_test_run(srunner_create(s)); }

/* Runs `lmpress ARGS` (a shell fragment: add "2>&1" to capture stderr) into out[n];
 * returns the exit code, or -1 if it did not exit normally (a crash). */
static inline int lmp_test_cli(const char *args, char *out, size_t n)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", LMP_CLI, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* `lmpress ARGS` with stdout and stderr into out[n]; the exit code.  A crash (no normal exit)
 * fails the test, with what it printed. */
static inline int lmp_test_cli_all(const char *args, char *out, size_t n)
{
    char cmd[7168]; /* lmp_test_cli prefixes LMP_CLI within its 8192 */
    snprintf(cmd, sizeof cmd, "%s 2>&1", args);
    int rc = lmp_test_cli(cmd, out, n);
    ck_assert_msg(rc >= 0, "lmpress %s did not exit normally\n%s", args, out);
    return rc;
}

/* The whole file, NUL-terminated (not counted in *size); fails the test if it cannot be read. */
static inline unsigned char *lmp_test_slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t cap = 1 << 16, n = 0, got;
    unsigned char *buf = malloc(cap + 1);
    ck_assert_ptr_nonnull(buf);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            ck_assert_ptr_nonnull(buf);
        }
    }
    fclose(f);
    buf[n] = 0;
    *size = n;
    return buf;
}

/* Writes data[0..n) to path; fails the test if it cannot. */
static inline void lmp_test_spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* The entry of the variant `name` in a JSON report's "variants"; the test fails without one. */
/* The Hugging Face folders of tests/fixtures/arch (each fixture's hf5/, else hf/), sorted by
 * name: up to max into out[]; how many. */
typedef struct lmp_test_fixture {
    char name[256], path[1024];
} lmp_test_fixture;

static inline int lmp_test_arch_folders(lmp_test_fixture *out, int max)
{
    struct dirent **list;
    const int n = scandir(LMP_SOURCE_DIR "/tests/fixtures/arch", &list, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        for (int form = 0; name[0] != '.' && form < 2 && k < max; form++) {
            snprintf(out[k].path, sizeof out[k].path, "%s/tests/fixtures/arch/%s/%s", LMP_SOURCE_DIR, name,
                     form ? "hf" : "hf5");
            if (access(out[k].path, R_OK) == 0) {
                snprintf(out[k].name, sizeof out[k].name, "%s", name);
                k++;
                break;
            }
        }
        free(list[i]);
    }
    free(list);
    return k;
}

static inline const lmp_json *lmp_test_variant(const lmp_json *j, const char *name)
{
    const lmp_json *vs = lmp_json_get(j, "variants");
    ck_assert_ptr_nonnull(vs);
    for (size_t i = 0; i < vs->n; i++) {
        const char *n = NULL;
        if (lmp_json_get_string(&vs->items[i], "name", "variant", &n) == 0 && strcmp(n, name) == 0) return &vs->items[i];
    }
    ck_abort_msg("variant %s missing from the report", name);
    return NULL;
}

#endif
