/* test_table_diff.c — core/report/table_diff.c and `lmpress diff`: the class of each kind of variant,
 * and that a difference just beyond its class's tolerance is caught while one just inside is not. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "report/table_diff.h"
#include "testutil.h"

static lmp_json *parse(const char *text)
{
    lmp_json *j = NULL;
    ck_assert_msg(lmp_json_parse(text, strlen(text), "test", &j) == 0, "%s", lmp_last_error());
    return j;
}

static lmp_variant_class class_of(const char *stages)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"name\": \"v\", \"stages\": [%s]}", stages);
    lmp_json *j = parse(text);
    lmp_variant_class c = lmp_variant_classify(j);
    lmp_json_free(j);
    return c;
}

START_TEST(test_classes)
{
    ck_assert_int_eq(class_of(""), LMP_CLASS_EXACT);
    ck_assert_int_eq(class_of("{\"strategy\": \"rtn\", \"params\": {\"bits\": 4, \"act\": \"none\"}}"), LMP_CLASS_EXACT);
    ck_assert_int_eq(class_of("{\"strategy\": \"rtn\", \"params\": {\"bits\": 8, \"act\": \"static\"}}"), LMP_CLASS_ROUNDING);
    ck_assert_int_eq(class_of("{\"strategy\": \"sparse24\", \"params\": {\"method\": \"magnitude\"}}"), LMP_CLASS_EXACT);
    ck_assert_int_eq(class_of("{\"strategy\": \"sparse24\", \"params\": {\"method\": \"wanda\"}}"), LMP_CLASS_ROUNDING);
    ck_assert_int_eq(class_of("{\"strategy\": \"sparse24\", \"params\": {\"method\": \"sparsegpt\"}}"), LMP_CLASS_SOLVER);
    ck_assert_int_eq(class_of("{\"strategy\": \"gptq\", \"params\": {\"bits\": 4}}"), LMP_CLASS_SOLVER);
    ck_assert_int_eq(class_of("{\"strategy\": \"gptq\", \"params\": {\"bits\": 16}}"), LMP_CLASS_EXACT);
    ck_assert_int_eq(class_of("{\"strategy\": \"smoothquant\", \"params\": {}}, "
                              "{\"strategy\": \"rtn\", \"params\": {\"act\": \"none\"}}"), LMP_CLASS_ROUNDING);
    ck_assert_int_eq(class_of("{\"strategy\": \"sparse24\", \"params\": {\"method\": \"magnitude\"}}, "
                              "{\"strategy\": \"gptq\", \"params\": {\"bits\": 4}}"), LMP_CLASS_SOLVER);
    ck_assert_int_eq(class_of("{\"strategy\": \"a-users-plugin\", \"params\": {}}"), LMP_CLASS_ROUNDING);
}
END_TEST

/* A one-variant table: the variant's stages, its numbers and LAMBADA (correct of 100). */
static lmp_json *table(const char *name, const char *stages, double bits, const char *ppl, double kld, double top1,
                       int correct)
{
    char text[2048];
    const double acc = correct / 100.0;
    snprintf(text, sizeof text,
             "{\"variants\": [{\"name\": \"%s\", \"stages\": [%s], \"bits_per_weight\": %.10g, "
             "\"eval\": {\"a.txt\": {\"ppl\": %s, \"kld\": %.10g, \"top1\": %.10g}}, "
             "\"lambada\": {\"passages\": 100, \"correct\": %d, \"acc\": %.10g, \"stderr\": %.10g}}]}",
             name, stages, bits, ppl, kld, top1, correct, acc, sqrt(acc * (1 - acc) / 100));
    return parse(text);
}

static const char *const RTN_W4 = "{\"strategy\": \"rtn\", \"params\": {\"act\": \"none\"}}";
static const char *const W8A8 = "{\"strategy\": \"rtn\", \"params\": {\"act\": \"token\"}}";

/* Numbers beyond tolerance of b against a, with an optional noise table (asserting the tables
 * can be compared). */
static int beyond_noise(lmp_json *a, lmp_json *b, lmp_json *noise)
{
    lmp_diff_summary sum;
    const lmp_table ta = {a, "a"}, tb = {b, "b"}, tn = {noise, "noise"};
    ck_assert_msg(lmp_table_diff(&ta, &tb, &tn, noise ? 1 : 0, NULL, &sum) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(sum.variants, 1);
    ck_assert_int_eq(sum.numbers, 5); /* bits, ppl, kld, top1, lambada */
    lmp_json_free(a);
    lmp_json_free(b);
    lmp_json_free(noise);
    return sum.beyond;
}

static int beyond(lmp_json *a, lmp_json *b) { return beyond_noise(a, b, NULL); }

START_TEST(test_tolerances)
{
    /* equal tables, and differences just inside each tolerance of the exact class */
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50)), 0);
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50),
                            table("w4", RTN_W4, 4.5, "10.00009", 0.100009, 0.9004, 51)), 0);
    /* each number just beyond its exact-class tolerance is caught, alone */
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), table("w4", RTN_W4, 4.5, "10.00011", 0.1, 0.9, 50)), 1);
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), table("w4", RTN_W4, 4.5, "10", 0.10002, 0.9, 50)), 1);
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), table("w4", RTN_W4, 4.5, "10", 0.1, 0.9006, 50)), 1);
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 52)), 1);
    ck_assert_int_eq(beyond(table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), table("w4", RTN_W4, 4.51, "10", 0.1, 0.9, 50)), 1);
    /* the same ppl difference is within the rounding class; 20 % of kld is not */
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10.04", 0.11, 0.905, 55)), 0);
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10", 0.12, 0.9, 50)), 1);
    /* LAMBADA within 2 standard errors of the difference of two accuracies (50 % and 63 % of
     * 100: sqrt(.25/100 + .2331/100) = 6.95 %, twice that 13.9 %) in the rounding class */
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10", 0.1, 0.9, 63)), 0);
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10", 0.1, 0.9, 64)), 1);
    /* a noise table allows 3x its spread where that exceeds the floor: ppl 2 % apart is beyond
     * the 0.5 % floor, within 3x a 1 % spread, beyond 3x a 0.5 % spread */
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10.2", 0.1, 0.9, 50)), 1);
    ck_assert_int_eq(beyond_noise(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10.2", 0.1, 0.9, 50),
                                  table("q", W8A8, 8, "9.9", 0.1, 0.9, 50)), 0);
    ck_assert_int_eq(beyond_noise(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "10.2", 0.1, 0.9, 50),
                                  table("q", W8A8, 8, "10.05", 0.1, 0.9, 50)), 1);
    /* a non-finite perplexity (JSON null) matches only another */
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "null", 0.1, 0.9, 50), table("q", W8A8, 8, "null", 0.1, 0.9, 50)), 0);
    ck_assert_int_eq(beyond(table("q", W8A8, 8, "10", 0.1, 0.9, 50), table("q", W8A8, 8, "null", 0.1, 0.9, 50)), 1);
}
END_TEST

/* --class: a W8A8 variant 0.4 % apart in ppl is within its own (rounding) class, beyond the exact
 * floors when judged as exact; and an exact-class variant judged as rounding gets the looser floor. */
START_TEST(test_forced_class)
{
    lmp_diff_summary sum;
    lmp_json *a = table("q", W8A8, 8, "10", 0.1, 0.9, 50), *b = table("q", W8A8, 8, "10.04", 0.1, 0.9, 50);
    const lmp_table ta = {a, "a"}, tb = {b, "b"};
    ck_assert_int_eq(lmp_table_diff_as(&ta, &tb, NULL, 0, -1, NULL, &sum), 0);
    ck_assert_int_eq(sum.beyond, 0);
    ck_assert_int_eq(lmp_table_diff_as(&ta, &tb, NULL, 0, LMP_CLASS_EXACT, NULL, &sum), 0);
    ck_assert_int_eq(sum.beyond, 1);
    ck_assert_double_gt(sum.worst[LMP_CLASS_EXACT][0], 3e-3); /* counted under the forced class */
    lmp_json *c = table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), *d = table("w4", RTN_W4, 4.5, "10.04", 0.1, 0.9, 50);
    const lmp_table tc = {c, "c"}, td = {d, "d"};
    ck_assert_int_eq(lmp_table_diff_as(&tc, &td, NULL, 0, -1, NULL, &sum), 0);
    ck_assert_int_eq(sum.beyond, 1);
    ck_assert_int_eq(lmp_table_diff_as(&tc, &td, NULL, 0, LMP_CLASS_ROUNDING, NULL, &sum), 0);
    ck_assert_int_eq(sum.beyond, 0);
    ck_assert_int_eq(lmp_class_by_name("exact"), LMP_CLASS_EXACT);
    ck_assert_int_eq(lmp_class_by_name("solver"), LMP_CLASS_SOLVER);
    ck_assert_int_eq(lmp_class_by_name("bitwise"), -1);
    lmp_json_free(a);
    lmp_json_free(b);
    lmp_json_free(c);
    lmp_json_free(d);
}
END_TEST

START_TEST(test_incomparable)
{
    lmp_diff_summary sum;
    lmp_json *a = table("w4", RTN_W4, 4.5, "10", 0.1, 0.9, 50), *b = table("w3", RTN_W4, 4.5, "10", 0.1, 0.9, 50);
    const lmp_table ta = {a, "cpu.json"}, tb = {b, "gpu.json"};
    ck_assert_int_eq(lmp_table_diff(&ta, &tb, NULL, 0, NULL, &sum), LMP_EINVAL);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "gpu.json: variant 1 is 'w3', in cpu.json it is 'w4'"));
    ck_assert_int_eq(lmp_table_diff(&ta, &ta, &tb, 1, NULL, &sum), LMP_EINVAL); /* noise tables too */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "gpu.json: variant 1 is 'w3'"));
    lmp_json *c = parse("{\"variants\": []}");
    const lmp_table tc = {c, "gpu.json"};
    ck_assert_int_eq(lmp_table_diff(&ta, &tc, NULL, 0, NULL, &sum), LMP_EINVAL);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "cpu.json has 1 variants, gpu.json has 0"));
    lmp_json *d = parse("{\"variants\": [{\"name\": \"w4\", \"bits_per_weight\": 4.5, \"eval\": {\"a.txt\": {\"ppl\": 1}}}]}");
    const lmp_table td = {d, "gpu.json"};
    ck_assert_int_ne(lmp_table_diff(&ta, &td, NULL, 0, NULL, &sum), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "kld"));
    lmp_json_free(a);
    lmp_json_free(b);
    lmp_json_free(c);
    lmp_json_free(d);
}
END_TEST

/* `lmpress diff`: exit 0 within tolerance, 1 beyond it or on a bad file (named), 2 on usage. */
START_TEST(test_cli)
{
    char a[512], b[512], bad[512], args[2048], out[16384];
    snprintf(a, sizeof a, "%s/table-diff-a-%d.json", LMP_BINARY_DIR, (int)getpid());
    snprintf(b, sizeof b, "%s/table-diff-b-%d.json", LMP_BINARY_DIR, (int)getpid());
    snprintf(bad, sizeof bad, "%s/table-diff-bad-%d.json", LMP_BINARY_DIR, (int)getpid());
    const char *ta = "{\"variants\": [{\"name\": \"fp32\", \"stages\": [], \"bits_per_weight\": 32, "
                     "\"eval\": {\"t\": {\"ppl\": 4.5, \"kld\": 0, \"top1\": 1}}}]}";
    const char *tb = "{\"variants\": [{\"name\": \"fp32\", \"stages\": [], \"bits_per_weight\": 32, "
                     "\"eval\": {\"t\": {\"ppl\": 4.6, \"kld\": 0, \"top1\": 1}}}]}";
    lmp_test_spit(a, ta, strlen(ta));
    lmp_test_spit(b, tb, strlen(tb));
    lmp_test_spit(bad, "{\"variants\": [", 14);
    snprintf(args, sizeof args, "diff %s %s 2>&1", a, a);
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "1 variants, 4 numbers, 0 noise tables: 0 beyond tolerance"));
    snprintf(args, sizeof args, "diff %s %s --noise %s 2>&1", a, b, b); /* b's own spread allows b */
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "diff %s %s 2>&1", a, b);
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "BEYOND"));
    ck_assert_ptr_nonnull(strstr(out, "differ beyond tolerance in 1 numbers"));
    snprintf(args, sizeof args, "diff %s %s 2>&1", a, bad);
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "error: ") && strstr(out, bad), "%s", out);
    snprintf(args, sizeof args, "diff %s /nonexistent/t.json 2>&1", a);
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "/nonexistent/t.json"));
    snprintf(args, sizeof args, "diff %s 2>&1", a);
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 2);
    unlink(a);
    unlink(b);
    unlink(bad);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("table_diff");
    TCase *tc = tcase_create("diff");
    tcase_add_test(tc, test_classes);
    tcase_add_test(tc, test_tolerances);
    tcase_add_test(tc, test_incomparable);
    tcase_add_test(tc, test_forced_class);
    tcase_add_test(tc, test_cli);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
