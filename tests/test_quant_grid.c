/* test_quant_grid.c — the CPU backend's fake quantization against an independent reference.
 *
 * tests/golden/quant_grid.txt is written by tools/ref/quant_grid_ref.py (numpy, from the
 * formulas of docs/algorithms.md §1; its docstring has the file format and how to rerun it).  For
 * every weight case (bits 2/3/4/8, sym/asym, tensor/channel/group 32 with a ragged last group,
 * half-even/half-away) and activation case (static, dynamic per tensor, dynamic per token) this
 * test runs the plugin's choose_weight_grid + apply_weight_grid / quantize_act on the stored
 * input and compares:
 *   - outputs and scales to 1e-6 relative.  Both sides do the same f32 operations, so they
 *     agree exactly in practice; a tie rounded the other way, or any other grid error, is off
 *     by a whole step (>= 1/256 relative), far outside the tolerance;
 *   - zero-points exactly.
 * It also checks that the golden cases exercise ties: the same cases with the other rounding
 * must differ somewhere. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lmpress/plugin.h"

#include "testutil.h"

#define PLUGIN_PATH LMP_BINARY_DIR "/plugins/lmp-backend-cpu.so"
#define GOLDEN_PATH LMP_SOURCE_DIR "/tests/golden/quant_grid.txt"
#define REL_TOL 1e-6

/* ---- stub host ---------------------------------------------------------------------------- */

static char g_err[1024];

static void h_log(void *ctx, int level, const char *fmt, ...) { (void)ctx, (void)level, (void)fmt; }

static int h_set_error(void *ctx, int status, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return status;
}

static void *h_alloc(void *ctx, size_t n)
{
    (void)ctx;
    size_t sz = n == 0 ? 64 : (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, sz);
    if (p) memset(p, 0, sz);
    return p;
}

static void h_free(void *ctx, void *p) { (void)ctx, free(p); }

static void h_progress(void *ctx, const char *what, int64_t done, int64_t total)
{
    (void)ctx, (void)what, (void)done, (void)total;
}

static uint64_t h_rng_u64(void *ctx) { (void)ctx; return 42; }

static const lmp_backend_i *h_backend(void *ctx, void **self)
{
    (void)ctx;
    *self = NULL;
    return NULL;
}

static const lmp_host g_host = {
    .struct_size = sizeof(lmp_host),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .log = h_log,
    .set_error = h_set_error,
    .alloc = h_alloc,
    .free = h_free,
    .progress = h_progress,
    .rng_u64 = h_rng_u64,
    .backend = h_backend,
    .fold_norm_scale = NULL,
};

/* ---- golden file reader: whitespace tokens, lines starting with '#' skipped ---------------- */

typedef struct {
    FILE *f;
    int line;
} reader;

/* Next token into buf; 0 at end of file. */
static int next_tok(reader *r, char *buf, size_t n)
{
    int c;
    for (;;) {
        c = fgetc(r->f);
        if (c == EOF) return 0;
        if (c == '\n') r->line++;
        if (c == '#') { /* comment to end of line */
            while ((c = fgetc(r->f)) != EOF && c != '\n') {}
            if (c == EOF) return 0;
            r->line++;
            continue;
        }
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    }
    size_t len = 0;
    while (c != EOF && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        ck_assert_msg(len + 1 < n, "golden line %d: token too long", r->line);
        buf[len++] = (char)c;
        c = fgetc(r->f);
    }
    buf[len] = 0;
    if (c == '\n') r->line++;
    return 1;
}

static void expect_tok(reader *r, const char *want)
{
    char buf[64];
    ck_assert_msg(next_tok(r, buf, sizeof buf), "golden line %d: end of file, wanted %s", r->line, want);
    ck_assert_msg(strcmp(buf, want) == 0, "golden line %d: '%s', wanted '%s'", r->line, buf, want);
}

static void read_word(reader *r, char *buf, size_t n)
{
    ck_assert_msg(next_tok(r, buf, n), "golden line %d: unexpected end of file", r->line);
}

static long read_int(reader *r)
{
    char buf[64], *end;
    read_word(r, buf, sizeof buf);
    long v = strtol(buf, &end, 10);
    ck_assert_msg(*end == 0, "golden line %d: '%s' is not an integer", r->line, buf);
    return v;
}

/* strtof rounds correctly, so numpy's shortest round-trip strings come back bit-exact. */
static float read_float(reader *r)
{
    char buf[64], *end;
    read_word(r, buf, sizeof buf);
    errno = 0;
    float v = strtof(buf, &end);
    ck_assert_msg(*end == 0, "golden line %d: '%s' is not a number", r->line, buf);
    return v;
}

static float *read_floats(reader *r, long n)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (long i = 0; i < n; i++) v[i] = read_float(r);
    return v;
}

typedef struct {
    char name[32];
    long rows, cols;
    float *v;
} matrix;

#define MAX_MATRICES 32
static matrix g_mats[MAX_MATRICES];
static int g_nmats;

static const matrix *find_matrix(const char *name)
{
    for (int i = 0; i < g_nmats; i++)
        if (strcmp(g_mats[i].name, name) == 0) return &g_mats[i];
    ck_abort_msg("golden: unknown matrix '%s'", name);
    return NULL;
}

/* ---- comparison --------------------------------------------------------------------------- */

static int close_rel(float got, float want)
{
    return fabs((double)got - want) <= REL_TOL * fabs((double)want); /* want == 0: exact */
}

/* Counts mismatches and prints the first few of a case. */
static int compare(const char *what, const char *kind, const float *got, const float *want, long n)
{
    int bad = 0;
    for (long i = 0; i < n; i++) {
        if (close_rel(got[i], want[i])) continue;
        if (bad++ < 3)
            fprintf(stderr, "%s: %s[%ld] = %.9g, golden %.9g\n", what, kind, i, (double)got[i],
                    (double)want[i]);
    }
    return bad;
}

static long count_diff(const float *a, const float *b, long n)
{
    long d = 0;
    for (long i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

/* ---- the test ----------------------------------------------------------------------------- */

static void *g_dl;
static const lmp_backend_i *g_vt;
static void *g_be;

static void setup(void)
{
    g_dl = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(g_dl != NULL, "dlopen %s: %s", PLUGIN_PATH, dlerror());
    lmp_plugin_entry_fn entry;
    *(void **)&entry = dlsym(g_dl, LMP_ENTRY_SYMBOL);
    ck_assert_ptr_nonnull(*(void **)&entry);
    g_vt = entry()->vtable;
    ck_assert_int_eq(g_vt->create(&g_host, NULL, NULL, &g_be), LMP_OK);
}

static void teardown(void)
{
    if (g_be) g_vt->destroy(g_be);
    g_be = NULL;
    for (int i = 0; i < g_nmats; i++) free(g_mats[i].v);
    g_nmats = 0;
}

/* RTN through the plugin: choose_weight_grid into scales/zeros, then apply_weight_grid. */
static int quantize(const lmp_wspec *s, int64_t rows, int64_t cols, float *W, float *scales, float *zeros)
{
    int st = g_vt->choose_weight_grid(g_be, s, rows, cols, W, scales, zeros);
    return st ? st : g_vt->apply_weight_grid(g_be, s, rows, cols, W, scales, zeros, NULL);
}

static lmp_granularity parse_gran(const char *s)
{
    if (strcmp(s, "tensor") == 0) return LMP_GRAN_TENSOR;
    if (strcmp(s, "channel") == 0) return LMP_GRAN_CHANNEL;
    ck_assert_msg(strcmp(s, "group") == 0, "golden: granularity '%s'", s);
    return LMP_GRAN_GROUP;
}

static lmp_rounding parse_rounding(const char *s)
{
    if (strcmp(s, "even") == 0) return LMP_ROUND_HALF_EVEN;
    ck_assert_msg(strcmp(s, "away") == 0, "golden: rounding '%s'", s);
    return LMP_ROUND_HALF_AWAY;
}

static lmp_act_mode parse_mode(const char *s)
{
    if (strcmp(s, "static") == 0) return LMP_ACT_STATIC_TENSOR;
    if (strcmp(s, "dyn_tensor") == 0) return LMP_ACT_DYN_TENSOR;
    ck_assert_msg(strcmp(s, "dyn_token") == 0, "golden: act mode '%s'", s);
    return LMP_ACT_DYN_TOKEN;
}

/* One "weight" record; returns its mismatches, adds to *tie_diff the elements that the other
 * rounding mode quantizes differently. */
static int weight_case(reader *r, long *tie_diff)
{
    char name[32], gran[16], rounding[16], what[128];
    int line = r->line;
    read_word(r, name, sizeof name);
    const matrix *m = find_matrix(name);
    lmp_wspec s = {0};
    s.bits = (int)read_int(r);
    s.sym = (int)read_int(r);
    read_word(r, gran, sizeof gran);
    s.gran = parse_gran(gran);
    s.group = read_int(r);
    read_word(r, rounding, sizeof rounding);
    s.rounding = parse_rounding(rounding);
    snprintf(what, sizeof what, "weight %s bits=%d sym=%d %s %lld %s (line %d)", name, s.bits,
             s.sym, gran, (long long)s.group, rounding, line);

    expect_tok(r, "scales");
    long ns = read_int(r);
    ck_assert_int_eq(ns, lmp_wspec_n_scales(&s, m->rows, m->cols));
    float *want_s = read_floats(r, ns);
    expect_tok(r, "zeros");
    long nz = read_int(r);
    ck_assert_int_eq(nz, s.sym ? 0 : ns);
    float *want_z = read_floats(r, nz);
    expect_tok(r, "out");
    long n = m->rows * m->cols;
    float *want = read_floats(r, n);

    float *W = malloc((size_t)n * sizeof *W), *sc = calloc((size_t)ns, sizeof *sc);
    float *zp = calloc((size_t)ns, sizeof *zp);
    memcpy(W, m->v, (size_t)n * sizeof *W);
    int st = quantize(&s, m->rows, m->cols, W, sc, zp);
    ck_assert_msg(st == LMP_OK, "%s: status %d %s", what, st, g_err);
    int bad = compare(what, "out", W, want, n) + compare(what, "scale", sc, want_s, ns);
    for (long i = 0; i < nz; i++) /* zero-points are integers: exact */
        if (zp[i] != want_z[i]) {
            fprintf(stderr, "%s: zero[%ld] = %g, golden %g\n", what, i, (double)zp[i],
                    (double)want_z[i]);
            bad++;
        }

    lmp_wspec other = s;
    other.rounding = s.rounding == LMP_ROUND_HALF_EVEN ? LMP_ROUND_HALF_AWAY : LMP_ROUND_HALF_EVEN;
    memcpy(W, m->v, (size_t)n * sizeof *W);
    ck_assert_int_eq(quantize(&other, m->rows, m->cols, W, sc, zp), LMP_OK);
    *tie_diff += count_diff(W, want, n);

    free(W);
    free(sc);
    free(zp);
    free(want);
    free(want_s);
    free(want_z);
    return bad;
}

static int act_case(reader *r, long *tie_diff)
{
    char name[32], mode[16], rounding[16], what[128];
    int line = r->line;
    read_word(r, name, sizeof name);
    const matrix *m = find_matrix(name);
    lmp_aspec s;
    read_word(r, mode, sizeof mode);
    s.mode = parse_mode(mode);
    s.bits = (int)read_int(r);
    read_word(r, rounding, sizeof rounding);
    s.rounding = parse_rounding(rounding);
    s.scale = read_float(r);
    snprintf(what, sizeof what, "act %s %s bits=%d %s scale=%g (line %d)", name, mode, s.bits,
             rounding, (double)s.scale, line);
    expect_tok(r, "out");
    long n = m->rows * m->cols;
    float *want = read_floats(r, n);

    float *X = malloc((size_t)n * sizeof *X);
    memcpy(X, m->v, (size_t)n * sizeof *X);
    int st = g_vt->quantize_act(g_be, &s, m->rows, m->cols, X);
    ck_assert_msg(st == LMP_OK, "%s: status %d %s", what, st, g_err);
    int bad = compare(what, "out", X, want, n);

    lmp_aspec other = s;
    other.rounding = s.rounding == LMP_ROUND_HALF_EVEN ? LMP_ROUND_HALF_AWAY : LMP_ROUND_HALF_EVEN;
    memcpy(X, m->v, (size_t)n * sizeof *X);
    ck_assert_int_eq(g_vt->quantize_act(g_be, &other, m->rows, m->cols, X), LMP_OK);
    *tie_diff += count_diff(X, want, n);
    free(X);
    free(want);
    return bad;
}

START_TEST(test_golden)
{
    reader r = {fopen(GOLDEN_PATH, "r"), 1};
    ck_assert_msg(r.f != NULL, "cannot open %s: %s", GOLDEN_PATH, strerror(errno));
    int n_weight = 0, n_act = 0, bad = 0, bad_cases = 0;
    long tie_diff = 0;
    char tok[64] = "";
    while (next_tok(&r, tok, sizeof tok)) {
        if (strcmp(tok, "end") == 0) break;
        if (strcmp(tok, "matrix") == 0) {
            ck_assert_int_lt(g_nmats, MAX_MATRICES);
            matrix *m = &g_mats[g_nmats++];
            read_word(&r, m->name, sizeof m->name);
            m->rows = read_int(&r);
            m->cols = read_int(&r);
            ck_assert(m->rows > 0 && m->cols > 0);
            m->v = read_floats(&r, m->rows * m->cols);
            continue;
        }
        int b;
        if (strcmp(tok, "weight") == 0) {
            b = weight_case(&r, &tie_diff);
            n_weight++;
        } else {
            ck_assert_msg(strcmp(tok, "act") == 0, "golden line %d: unknown record '%s'", r.line, tok);
            b = act_case(&r, &tie_diff);
            n_act++;
        }
        bad += b;
        bad_cases += b != 0;
    }
    ck_assert_msg(strcmp(tok, "end") == 0, "golden: truncated (no 'end')");
    fclose(r.f);
    ck_assert_msg(bad == 0, "%d mismatching values in %d of %d cases (details on stderr)", bad,
                  bad_cases, n_weight + n_act);
    /* the file must really cover the grid: 4 bit widths x 3 sym scales and asym x 3 granularities x 2
     * roundings on two matrices, plus the activation modes, and ties that tell roundings apart */
    ck_assert_int_ge(n_weight, 192);
    ck_assert_int_ge(n_act, 24);
    ck_assert_msg(tie_diff > 100, "only %ld values depend on the rounding mode", tie_diff);
}
END_TEST

/* clip = 0.5 on a known row, worked by hand: abs-max 1.75 -> T = 0.875, 4-bit sym scale
 * 0.875 / 7 = 0.125 exactly; the values beyond T saturate at codes 7 and -8 (the extra negative
 * code), the others land on multiples of 0.125 as without clip.  Asymmetric: [-1, 2] -> lo -0.5,
 * hi 1, 2 bits: scale 1.5 / 3 = 0.5, zero 1.  clip = 1 gives the plain grid. */
START_TEST(test_clip)
{
    const float row[8] = {0.5f, -1.75f, 0.125f, 1.0f, -0.4375f, 0.9f, 0.0f, -1.0f};
    lmp_wspec s = {.bits = 4, .sym = 1, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN, .clip = 0.5f};
    float w[8], sc = 0.0f;
    int32_t codes[8];
    memcpy(w, row, sizeof w);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &s, 1, 8, w, &sc, NULL), LMP_OK);
    ck_assert_msg(sc == 0.125f, "clip 0.5: scale %a, expected 0.125", (double)sc);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &s, 1, 8, w, &sc, NULL, codes), LMP_OK);
    /* -0.4375 / 0.125 = -3.5: a tie, half to even -4 */
    const float want[8] = {0.5f, -1.0f, 0.125f, 0.875f, -0.5f, 0.875f, 0.0f, -1.0f};
    const int32_t want_codes[8] = {4, -8, 1, 7, -4, 7, 0, -8};
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(w[i] == want[i], "clip 0.5: w[%d] = %g, expected %g", i, (double)w[i], (double)want[i]);
        ck_assert_msg(codes[i] == want_codes[i], "clip 0.5: code[%d] = %d, expected %d", i, codes[i], want_codes[i]);
    }
    s.clip = 1.0f; /* and 0, which means 1 */
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &s, 1, 8, row, &sc, NULL), LMP_OK);
    ck_assert(sc == 0.25f);
    s.clip = 0.0f;
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &s, 1, 8, row, &sc, NULL), LMP_OK);
    ck_assert(sc == 0.25f);
    lmp_wspec a = {.bits = 2, .sym = 0, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN, .clip = 0.5f};
    float y[4] = {-1.0f, 2.0f, 0.5f, 0.25f}, zp = -7.0f;
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &a, 1, 4, y, &sc, &zp), LMP_OK);
    ck_assert(sc == 0.5f && zp == 1.0f);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &a, 1, 4, y, &sc, &zp, codes), LMP_OK);
    /* 0.25 / 0.5 = 0.5: half to even 0, + zero = code 1 -> 0 */
    ck_assert(y[0] == -0.5f && y[1] == 1.0f && y[2] == 0.5f && y[3] == 0.0f);
    ck_assert(codes[0] == 0 && codes[1] == 3 && codes[2] == 2 && codes[3] == 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant_grid");
    TCase *tc = tcase_create("golden");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_golden);
    tcase_add_test(tc, test_clip);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
