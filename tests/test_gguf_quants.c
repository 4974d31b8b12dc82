/* test_gguf_quants.c — every ggml type lmpress dequantizes (core/formats/gguf_quants.c), bit for
 * bit against the PyPI gguf package's numpy dequantizers, and GGUF models that use them.
 *
 * tools/ref/gguf_dequant_ref.py (see its header) writes, once for the suite, a GGUF with one
 * tensor of 65536 values per type from random valid blocks, the values gguf.quants.dequantize
 * gives for them, and a tiny Llama model whose seven linears are seven of these types, once as is
 * and once with a Q8_K linear (a type lmpress does not read).  Then:
 *   - each tensor dequantizes to exactly gguf's values (the float bits compared), as a whole and
 *     from a block in its middle, and every type lmpress claims to read is among them;
 *   - the model loads, names its storage types, and a block copy holds the dequantized weights;
 *   - the Q8_K model is refused at load, by the library and by `lmpress eval`, in one message
 *     naming the file, the tensor (once) and the type.
 * The Python side runs with lmp_test_python() (LMP_PYTHON to try another numpy) and
 * PYTHONPATH=build/pydeps; without gguf the tests print SKIPPED. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "testutil.h"

#define REF LMP_SOURCE_DIR "/tools/ref/gguf_dequant_ref.py"

/* Set by the unchecked fixture, before the tests fork. */
static char tmpdir[256];
static int have_ref;

static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

static void make_files(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "gguf-quants");
    if (!(have_ref = lmp_test_have_gguf("test_gguf_quants"))) return;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' '%s' > '%s'", LMP_TEST_PYDEPS, lmp_test_python(), REF, tmpdir,
             tmp("manifest.txt"));
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

static void remove_files(void) { lmp_test_rmtree(tmpdir); }

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

START_TEST(every_type_matches_gguf_py)
{
    if (!have_ref) return;
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(tmp("quants.gguf"), &g) == 0, "%s", lmp_last_error());
    FILE *manifest = fopen(tmp("manifest.txt"), "r"), *want_f = fopen(tmp("quants.f32"), "rb");
    ck_assert(manifest && want_f);
    char name[64], type[32];
    long long nel;
    unsigned char seen[64] = {0};
    int n_types = 0;
    while (fscanf(manifest, "tensor %63s %31s %lld\n", name, type, &nel) == 3) {
        const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, name);
        ck_assert_msg(t != NULL, "tensor %s missing", name);
        ck_assert_str_eq(lmp_ggml_type_name(t->type), type);
        ck_assert_int_eq(t->ne[0] * t->ne[1], nel);
        float *got = malloc((size_t)nel * sizeof *got), *want = malloc((size_t)nel * sizeof *want);
        ck_assert(got && want);
        ck_assert_uint_eq(fread(want, sizeof *want, (size_t)nel, want_f), (size_t)nel);
        ck_assert_msg(lmp_gguf_dequantize(t, 0, nel, got) == 0, "%s", lmp_last_error());
        for (long long k = 0; k < nel; k++)
            ck_assert_msg(f32_bits(got[k]) == f32_bits(want[k]), "%s[%lld] = %08x (%.9g), gguf-py %08x (%.9g)", type, k,
                          f32_bits(got[k]), (double)got[k], f32_bits(want[k]), (double)want[k]);
        /* one block from the middle: the offset arithmetic of a partial read */
        const int blck = lmp_ggml_type_block(t->type);
        const long long mid = nel / 2 - blck;
        ck_assert_int_eq(lmp_gguf_dequantize(t, mid, blck, got), 0);
        ck_assert(memcmp(got, want + mid, (size_t)blck * sizeof *got) == 0);
        printf("test_gguf_quants: %-8s %lld values bit-identical to gguf-py\n", type, nel);
        seen[t->type % 64] = 1;
        n_types++;
        free(got);
        free(want);
    }
    ck_assert(feof(manifest));
    fclose(manifest);
    fclose(want_f);
    lmp_gguf_close(g);
    /* every type lmpress reads was compared (Q1_0 and Q2_0, which gguf-py cannot decode, against
     * ggml's own dequantizers: tests/test_ggml_fp4.c) */
    for (int ty = 0; ty < 64; ty++) {
        lmp_gguf_tensor probe = {.name = "probe", .type = (lmp_ggml_type)ty};
        if (ty == LMP_GGML_Q1_0 || ty == LMP_GGML_Q2_0) continue;
        if (lmp_gguf_check_dequantize(&probe) == 0)
            ck_assert_msg(seen[ty], "type %s is read by lmpress but not compared", lmp_ggml_type_name((lmp_ggml_type)ty));
    }
    printf("test_gguf_quants: %d types compared\n", n_types);
    fflush(stdout);
}
END_TEST

START_TEST(model_of_new_types_loads)
{
    if (!have_ref) return;
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(tmp("model.gguf"), &m) == 0, "%s", lmp_last_error());
    static const char *const types[] = {"Q5_0", "Q3_K", "IQ4_NL", "Q2_K", "IQ2_XXS", "IQ4_XS", "Q5_K"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        ck_assert_msg(strstr(m->format, types[i]), "format '%s' lacks %s", m->format, types[i]);
    lmp_block blk;
    ck_assert_msg(lmp_model_block_copy(m, 0, &blk) == 0, "%s", lmp_last_error());
    lmp_gguf *g = NULL;
    ck_assert_int_eq(lmp_gguf_open(tmp("model.gguf"), &g), 0);
    static const char *const gguf_name[LMP_ROLE_COUNT] = {
        [LMP_ROLE_Q] = "attn_q", [LMP_ROLE_K] = "attn_k", [LMP_ROLE_V] = "attn_v", [LMP_ROLE_O] = "attn_output",
        [LMP_ROLE_GATE] = "ffn_gate", [LMP_ROLE_UP] = "ffn_up", [LMP_ROLE_DOWN] = "ffn_down"};
    for (int i = 0; i < blk.n_linears; i++) {
        const lmp_linear *l = &blk.linears[i];
        char name[64];
        snprintf(name, sizeof name, "blk.0.%s.weight", gguf_name[l->role]);
        const int64_t n = l->out * l->in;
        float *w = malloc((size_t)n * sizeof *w);
        ck_assert_int_eq(lmp_gguf_dequantize(lmp_gguf_find_tensor(g, name), 0, n, w), 0);
        ck_assert_msg(memcmp(w, l->w, (size_t)n * sizeof *w) == 0, "%s differs from its dequantized tensor", name);
        free(w);
    }
    lmp_gguf_close(g);
    lmp_block_free(&blk);
    lmp_model_free(m);
}
END_TEST

/* How many times needle occurs in s. */
static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

START_TEST(unsupported_type_refused_naming_the_tensor_once)
{
    if (!have_ref) return;
    const char *path = tmp("refused.gguf");
    lmp_model *m = NULL;
    ck_assert_int_eq(lmp_model_load(path, &m), LMP_EUNSUPPORTED);
    ck_assert_ptr_null(m);
    const char *e = lmp_last_error();
    ck_assert_msg(strstr(e, path) && strstr(e, "dequantizing Q8_K is not supported"), "%s", e);
    ck_assert_msg(count(e, "blk.0.ffn_up.weight") == 1, "%s", e);
    char args[1024], out[4096];
    lmp_test_spit(tmp("text.txt"), "Once upon a time.", 17);
    snprintf(args, sizeof args, "eval '%s' --text '%s' 2>&1", path, tmp("text.txt"));
    ck_assert_int_ne(lmp_test_cli(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "dequantizing Q8_K is not supported") && count(out, "blk.0.ffn_up.weight") == 1, "%s", out);
    ck_assert_msg(count(out, path) == 1, "%s", out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gguf_quants");
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, make_files, remove_files);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_type_matches_gguf_py);
    tcase_add_test(tc, model_of_new_types_loads);
    tcase_add_test(tc, unsupported_type_refused_naming_the_tensor_once);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
