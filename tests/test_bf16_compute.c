/* test_bf16_compute.c — backend = { name = "cpu"; params = { compute = "bf16"; }; } end to end
 * (issue 42), through `lmpress compare --json`:
 *
 *  - refused: an unknown compute or eval.compute is refused naming the file, the line and the key;
 *  - stories260K (tests/backend-e2e-gptq.cfg): the rows that compress nothing or do not forward
 *    (fp32, RTN) are bit-identical to the f32 run, since evaluation stays f32; GPTQ W4's KLD is
 *    within KLD_REL of the f32 run's (measured here on a Xeon with AMX: 1.4 % and 2.2 %, bf16
 *    lower both times; the bound is 10 %, a few times the measured spread, and a wrong product
 *    moves the KLD by far more); with eval.compute = "backend" the RTN row moves (bf16 reached
 *    the evaluation) but stays within KLD_REL;
 *  - SmolLM2-135M (tests/bf16-smollm2-gptq.cfg, GPTQ W4 g64; skipped without the model): the
 *    same bound, measured in docs/backends.md "bf16 compute".  Minutes on 2 cores, so ctest runs
 *    the stories260K cases only; run this one with CK_RUN_CASE=smollm2.
 * Where the CPU has no bf16 (or DNNL_MAX_CPU_ISA hides it: ctest's test_bf16_compute_nobf16 runs
 * the stories260K cases so), the bf16 config must give exactly the f32 numbers, with the message. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu_bf16.h"
#include "formats/json.h"
#include "testutil.h"

#define KLD_REL 0.10

/* A copy of the source tree's config `name` in dir, its "../" paths made absolute and its
 * backend line replaced by `backend` (NULL: kept), with `extra_eval` added to the eval group. */
static const char *config_copy(const char *dir, const char *name, const char *backend, const char *extra_eval)
{
    static char out[1024];
    char src[1024];
    snprintf(src, sizeof src, "%s/tests/%s", LMP_SOURCE_DIR, name);
    size_t n;
    char *text = (char *)lmp_test_slurp(src, &n);
    size_t cap = 2 * n + 4096, len = 0;
    char *dst = malloc(cap);
    ck_assert_ptr_nonnull(dst);
    for (const char *p = text; *p;) {
        if (!strncmp(p, "\"../", 4)) {
            len += (size_t)snprintf(dst + len, cap - len, "\"%s/", LMP_SOURCE_DIR);
            p += 4;
        } else if (backend && !strncmp(p, "backend = { name = \"cpu\"; };", 28)) {
            len += (size_t)snprintf(dst + len, cap - len, "%s", backend);
            p += 28;
        } else if (extra_eval && !strncmp(p, "eval = {", 8)) {
            len += (size_t)snprintf(dst + len, cap - len, "eval = { %s", extra_eval);
            p += 8;
        } else {
            dst[len++] = *p++;
        }
    }
    dst[len] = 0;
    snprintf(out, sizeof out, "%s/%s", dir, name);
    lmp_test_spit(out, dst, len);
    free(dst);
    free(text);
    return out;
}

/* `lmpress compare CFG --json OUT` and the parsed report; the run must succeed. */
static lmp_json *compare(const char *dir, const char *cfg, const char *tag, char *log, size_t log_n)
{
    char json[1024], args[4096];
    snprintf(json, sizeof json, "%s/%s.json", dir, tag);
    snprintf(args, sizeof args, "compare '%s' --json '%s'", cfg, json);
    int rc = lmp_test_cli_all(args, log, log_n);
    ck_assert_msg(rc == 0, "lmpress %s: exit %d\n%s", args, rc, log);
    size_t n;
    char *text = (char *)lmp_test_slurp(json, &n);
    lmp_json *j = NULL;
    ck_assert_int_eq(lmp_json_parse(text, n, json, &j), 0);
    free(text);
    return j;
}

/* The KLD of variant `name` on the report's one evaluation text. */
static double kld_of(const lmp_json *j, const char *name)
{
    const lmp_json *ev = lmp_json_get(lmp_test_variant(j, name), "eval");
    ck_assert_msg(ev && ev->n == 1, "variant %s: one evaluation text expected", name);
    double kld = NAN;
    ck_assert_int_eq(lmp_json_get_number(&ev->items[0], "kld", "kld", &kld), 0);
    return kld;
}

static double ppl_of(const lmp_json *j, const char *name)
{
    const lmp_json *ev = lmp_json_get(lmp_test_variant(j, name), "eval");
    double ppl = NAN;
    ck_assert_int_eq(lmp_json_get_number(&ev->items[0], "ppl", "ppl", &ppl), 0);
    return ppl;
}

static const char *BF16_BACKEND = "backend = { name = \"cpu\"; params = { compute = \"bf16\"; }; };";

START_TEST(test_refused_by_name)
{
    char dir[512], out[1 << 14], args[2048];
    lmp_test_tmpdir(dir, sizeof dir, "bf16-refused");
    const char *cfg = config_copy(dir, "backend-e2e-gptq.cfg",
                                  "backend = { name = \"cpu\"; params = { compute = \"fp8\"; }; };", NULL);
    snprintf(args, sizeof args, "check '%s'", cfg);
    ck_assert_int_ne(lmp_test_cli_all(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "backend-e2e-gptq.cfg:") && strstr(out, "compute") && strstr(out, "fp8"), "%s", out);
    cfg = config_copy(dir, "backend-e2e-gptq.cfg", NULL, "compute = \"bf16\";");
    snprintf(args, sizeof args, "check '%s'", cfg);
    ck_assert_int_ne(lmp_test_cli_all(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "backend-e2e-gptq.cfg:") && strstr(out, "eval.compute") && strstr(out, "\"backend\""),
                  "%s", out);
    lmp_test_rmtree(dir);
}
END_TEST

START_TEST(test_stories260k)
{
    char dir[512], log[1 << 16];
    lmp_test_tmpdir(dir, sizeof dir, "bf16-s260k");
    const int have = lmp_bf16_available(NULL, 0);
    lmp_json *f32 = compare(dir, config_copy(dir, "backend-e2e-gptq.cfg", NULL, NULL), "f32", log, sizeof log);
    lmp_json *b16 = compare(dir, config_copy(dir, "backend-e2e-gptq.cfg", BF16_BACKEND, NULL), "bf16", log, sizeof log);
    ck_assert_msg(strstr(log, have ? "GEMMs in bf16 with f32 sums" : "the GEMMs run in f32"), "%s", log);
    /* evaluation stays f32: what compresses nothing, or without a forward, is the same to the bit */
    for (int i = 0; i < 2; i++) {
        const char *v = i ? "rtn-w4-channel" : "fp32";
        ck_assert_msg(kld_of(b16, v) == kld_of(f32, v) && ppl_of(b16, v) == ppl_of(f32, v), "%s moved", v);
    }
    const char *gptq[] = {"gptq-w4-channel", "gptq-w4-g32-act"};
    for (int i = 0; i < 2; i++) {
        const double a = kld_of(f32, gptq[i]), b = kld_of(b16, gptq[i]);
        printf("stories260K %s: KLD f32 %.5f, bf16 %.5f (%+.2f %%)\n", gptq[i], a, b, 100 * (b - a) / a);
        if (have) ck_assert_msg(fabs(b - a) <= KLD_REL * a, "%s: KLD %g vs f32 %g", gptq[i], b, a);
        else ck_assert_msg(a == b, "%s: the f32 fallback gave KLD %g, f32 %g", gptq[i], b, a);
    }
    /* eval.compute = "backend": the evaluation in bf16 too (the RTN row moves where bf16 runs) */
    lmp_json *all = compare(dir, config_copy(dir, "backend-e2e-gptq.cfg", BF16_BACKEND, "compute = \"backend\";"),
                            "bf16-eval", log, sizeof log);
    const double a = kld_of(f32, "rtn-w4-channel"), b = kld_of(all, "rtn-w4-channel");
    printf("stories260K rtn-w4-channel evaluated in bf16: KLD %.5f vs f32 %.5f (%+.2f %%)\n", b, a, 100 * (b - a) / a);
    if (have) ck_assert_msg(b != a && fabs(b - a) <= KLD_REL * a, "rtn-w4-channel: KLD %g vs f32 %g", b, a);
    else ck_assert_msg(b == a, "rtn-w4-channel: KLD %g vs f32 %g", b, a);
    ck_assert_msg(kld_of(all, "fp32") == 0.0, "the reference and fp32 run the same forward");
    lmp_json_free(f32), lmp_json_free(b16), lmp_json_free(all);
    lmp_test_rmtree(dir);
}
END_TEST

START_TEST(test_smollm2)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf", LMP_SOURCE_DIR);
    struct stat sb;
    if (stat(model, &sb) != 0) {
        lmp_test_skip("SKIPPED test_smollm2: %s is not there (tools/setup.sh fetches it)\n", model);
        return;
    }
    char dir[512], log[1 << 16];
    lmp_test_tmpdir(dir, sizeof dir, "bf16-smollm2");
    const int have = lmp_bf16_available(NULL, 0);
    lmp_json *f32 = compare(dir, config_copy(dir, "bf16-smollm2-gptq.cfg", NULL, NULL), "f32", log, sizeof log);
    lmp_json *b16 = compare(dir, config_copy(dir, "bf16-smollm2-gptq.cfg", BF16_BACKEND, NULL), "bf16", log, sizeof log);
    ck_assert_msg(kld_of(b16, "fp32") == kld_of(f32, "fp32"), "fp32 moved");
    const double a = kld_of(f32, "gptq-w4-g64"), b = kld_of(b16, "gptq-w4-g64");
    printf("SmolLM2 gptq-w4-g64: KLD f32 %.5f, bf16 %.5f (%+.2f %%)\n", a, b, 100 * (b - a) / a);
    if (have) ck_assert_msg(fabs(b - a) <= KLD_REL * a, "KLD %g vs f32 %g", b, a);
    else ck_assert_msg(a == b, "the f32 fallback gave KLD %g, f32 %g", b, a);
    lmp_json_free(f32), lmp_json_free(b16);
    lmp_test_rmtree(dir);
}
END_TEST

static Suite *bf16_suite(void)
{
    Suite *s = suite_create("bf16_compute");
    TCase *tc = tcase_create("stories260k");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_refused_by_name);
    tcase_add_test(tc, test_stories260k);
    suite_add_tcase(s, tc);
    TCase *sm = tcase_create("smollm2");
    tcase_set_timeout(sm, 1800);
    tcase_add_test(sm, test_smollm2);
    suite_add_tcase(s, sm);
    return s;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    return lmp_test_main(bf16_suite());
}
