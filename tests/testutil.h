/* testutil.h — what every check suite shares: running a suite, and running the lmpress binary. */
#ifndef LMP_TESTUTIL_H
#define LMP_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* Runs the suite (forked tests, check's default) and turns the result into an exit code. */
static inline int lmp_test_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

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

#endif
