/* archfix.h — reading the architecture fixtures (tests/fixtures/arch/NAME/: tokens.txt and the
 * golden float64 log-probabilities, tools/ref/arch_fixtures.py) and comparing against them, for
 * the suites that use them (test_arch_fixtures, test_export_arch). */
#ifndef LMP_TEST_ARCHFIX_H
#define LMP_TEST_ARCHFIX_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FIXTURES LMP_SOURCE_DIR "/tests/fixtures/arch"

/* The fixture's token ids (tokens.txt, one line); *T gets their count. */
static inline int32_t *archfix_tokens(const char *fixture, int64_t *T)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s/tokens.txt", FIXTURES, fixture);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    int32_t *tok = malloc(4096 * sizeof *tok);
    int64_t n = 0;
    while (n < 4096 && fscanf(f, "%d", &tok[n]) == 1) n++;
    fclose(f);
    ck_assert_msg(n > 0, "%s holds no token", path);
    *T = n;
    return tok;
}

/* The golden [rows, V] float64 file `name` of the fixture; rows = its size / (8 V). */
static inline double *archfix_golden(const char *fixture, const char *name, int64_t V, int64_t *rows)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s/%s", FIXTURES, fixture, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    ck_assert_msg(size > 0 && size % (long)(8 * V) == 0, "%s: %ld bytes is not rows of %lld doubles", path, size,
                  (long long)V);
    double *g = malloc((size_t)size);
    ck_assert_int_eq(fread(g, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *rows = size / (8 * V);
    return g;
}

/* max |a - ref| / max |ref| over n values (a NaN in a propagates). */
static inline double archfix_rel_diff(const float *a, const double *ref, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / mr;
}

#endif
