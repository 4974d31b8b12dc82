/* test_suggest.c — core/base/suggest.c: the edit distance against textbook values worked by hand,
 * and which candidate "did you mean" offers (test_cli.c checks the messages of the binary). */
#include <check.h>
#include <stdint.h>

#include "base/suggest.h"
#include "testutil.h"

START_TEST(edit_distance_textbook)
{
    ck_assert_uint_eq(lmp_edit_distance("kitten", "sitting"), 3); /* k->s, e->i, +g */
    ck_assert_uint_eq(lmp_edit_distance("flaw", "lawn"), 2);      /* -f, +n */
    ck_assert_uint_eq(lmp_edit_distance("", "abc"), 3);
    ck_assert_uint_eq(lmp_edit_distance("same", "same"), 0);
    ck_assert_uint_eq(lmp_edit_distance("gtpq", "gptq"), 1);      /* one swap of neighbours */
    ck_assert_uint_eq(lmp_edit_distance("ca", "abc"), 3);         /* optimal string alignment, not Damerau's 2 */
    ck_assert_uint_eq(lmp_edit_distance("GPTQ", "gptq"), 0);      /* case-insensitive */
    char long_name[200];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    ck_assert(lmp_edit_distance(long_name, "a") == SIZE_MAX);
}
END_TEST

START_TEST(suggest_only_near_names)
{
    const char *const opts[] = {"--json", "--md", "--csv", "--output-dir", "-o", NULL};
    ck_assert_str_eq(lmp_suggest("--jsn", opts, 6), "--json");
    ck_assert_str_eq(lmp_suggest("--output-dri", opts, 6), "--output-dir");
    ck_assert_ptr_null(lmp_suggest("--zzzzzz", opts, 6));
    ck_assert_ptr_null(lmp_suggest("-x", opts, 6));   /* one letter is no typo of another */
    ck_assert_ptr_null(lmp_suggest("--ab", opts, 6)); /* the dashes do not make names near */
    ck_assert_ptr_null(lmp_suggest("--json", opts, 6)); /* a candidate itself */
    const char *const strategies[] = {"rtn", "rtn_mse", "gptq", "sparse24", "smoothquant"};
    ck_assert_str_eq(lmp_suggest("gtpq", strategies, 5), "gptq");
    ck_assert_str_eq(lmp_suggest("smothquant", strategies, 5), "smoothquant");
    ck_assert_str_eq(lmp_suggest("rtm", strategies, 5), "rtn");
    ck_assert_ptr_null(lmp_suggest("awq", strategies, 5));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("suggest");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, edit_distance_textbook);
    tcase_add_test(tc, suggest_only_near_names);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
