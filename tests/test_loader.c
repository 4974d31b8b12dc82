/* test_loader.c — the plugin loader refuses each kind of broken plugin with its own message
 * (tests/plugins/fake_plugin.c builds one broken plugin per rule), and loads the real ones. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "registry.h"

#include "testutil.h"

static lmp_registry reg;

static void setup(void) { ck_assert_int_eq(lmp_registry_init(&reg, NULL, 0), 0); }
static void teardown(void) { lmp_registry_free(&reg); }

static const char *fake(const char *variant)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/fake-%s.so", LMP_TEST_PLUGIN_DIR, variant);
    return path;
}

/* Loading `variant` as `kind` fails with a message containing every `needle`. */
static void expect_reject(const char *variant, int kind, const char *needle1, const char *needle2)
{
    lmp_clear_error();
    int st = lmp_registry_load_file(&reg, fake(variant), kind, 0, NULL);
    ck_assert_msg(st < 0, "%s was accepted", variant);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, fake(variant)), "message does not name the file: %s", msg);
    ck_assert_msg(strstr(msg, needle1), "'%s' not in: %s", needle1, msg);
    if (needle2) ck_assert_msg(strstr(msg, needle2), "'%s' not in: %s", needle2, msg);
    ck_assert_int_eq(reg.n, 0);
}

START_TEST(good_plugin_loads)
{
    const lmp_plugin *p;
    ck_assert_int_eq(lmp_registry_load_file(&reg, fake("good"), LMP_PLUGIN_STRATEGY, 0, &p), 0);
    ck_assert_str_eq(p->desc->name, "fake");
    ck_assert_int_eq(p->usable, 1);
    ck_assert_ptr_eq(lmp_registry_find(&reg, LMP_PLUGIN_STRATEGY, "fake"), p);
    ck_assert_ptr_null(lmp_registry_find(&reg, LMP_PLUGIN_BACKEND, "fake"));
}
END_TEST

START_TEST(file_that_does_not_open)
{
    ck_assert_int_lt(lmp_registry_load_file(&reg, "/nonexistent/lmp-strategy-x.so", 0, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "cannot load plugin"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "/nonexistent/lmp-strategy-x.so"));
    /* A file that exists but is not a shared object: dlerror's text is passed on. */
    char path[] = "/tmp/lmp-notso-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    char junk[200];
    memset(junk, 'x', sizeof junk); /* long enough for dlopen to read a whole ELF header */
    ck_assert_int_eq((int)write(fd, junk, sizeof junk), (int)sizeof junk);
    close(fd);
    ck_assert_int_lt(lmp_registry_load_file(&reg, path, 0, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "cannot load plugin"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "invalid ELF header"));
    unlink(path);
}
END_TEST

START_TEST(missing_entry_symbol) { expect_reject("no_entry", 0, "no exported symbol 'lmp_plugin_entry'", NULL); }
END_TEST
START_TEST(null_descriptor) { expect_reject("null_desc", 0, "returned no descriptor", NULL); }
END_TEST
/* The expected ABI text follows plugin.h's numbers (the fake plugins are built from them). */
START_TEST(abi_major_mismatch)
{
    char want[64];
    snprintf(want, sizeof want, "ABI %d.%d", LMP_ABI_MAJOR + 1, LMP_ABI_MINOR);
    expect_reject("wrong_major", 0, want, "major versions differ");
}
END_TEST
START_TEST(newer_minor)
{
    char want[64];
    snprintf(want, sizeof want, "needs plugin ABI %d.%d", LMP_ABI_MAJOR, LMP_ABI_MINOR + 1);
    expect_reject("newer_minor", 0, want, "newer than this lmpress");
}
END_TEST
START_TEST(struct_too_small) { expect_reject("small_struct", 0, "plugin descriptor is", "different plugin.h"); }
END_TEST
START_TEST(vtable_too_small) { expect_reject("small_vtable", 0, "strategy vtable of", "needs"); }
END_TEST
START_TEST(wrong_kind_for_slot)
{
    expect_reject("wrong_kind", LMP_PLUGIN_STRATEGY, "is a backend plugin", "used here as a strategy");
}
END_TEST

START_TEST(duplicate_name)
{
    ck_assert_int_eq(lmp_registry_load_file(&reg, fake("good"), 0, 0, NULL), 0);
    lmp_clear_error();
    ck_assert_int_lt(lmp_registry_load_file(&reg, fake("dup_name"), 0, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "already loaded from"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), fake("dup_name")));
    ck_assert_int_eq(reg.n, 1);
}
END_TEST

START_TEST(probe_says_not_here)
{
    expect_reject("probe_no", 0, "cannot run here", "no fake accelerator on this machine");
    /* Listing keeps it, marked unusable with the probe's reason; requiring it still fails. */
    const lmp_plugin *p;
    ck_assert_int_eq(lmp_registry_load_file(&reg, fake("probe_no"), 0, 1, &p), 0);
    ck_assert_int_eq(p->usable, 0);
    ck_assert_ptr_nonnull(strstr(p->reason, "no fake accelerator"));
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "fake-broken", NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "cannot run here"));
}
END_TEST

START_TEST(unknown_name_lists_search_path)
{
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "nosuch", NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "unknown strategy plugin 'nosuch'"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), LMP_BINARY_DIR "/plugins"));
}
END_TEST

START_TEST(real_plugins_by_name)
{
    const lmp_plugin *rtn, *cpu;
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "rtn", &rtn), 0);
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_BACKEND, "cpu", &cpu), 0);
    ck_assert_str_eq(rtn->desc->name, "rtn");
    ck_assert_int_eq(cpu->desc->kind, LMP_PLUGIN_BACKEND);
    /* Requiring again finds the loaded one instead of loading twice. */
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "rtn", NULL), 0);
    ck_assert_int_eq(reg.n, 2);
    /* rtn is not a backend. */
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_BACKEND, "rtn", NULL), 0);
}
END_TEST

START_TEST(scan_reports_bad_files)
{
    lmp_registry r2;
    const char *dirs[] = {LMP_TEST_PLUGIN_DIR};
    ck_assert_int_eq(lmp_registry_init(&r2, dirs, 1), 0);
    /* The fake plugins are not named lmp-*.so, so only the real ones are listed. */
    ck_assert_int_eq(lmp_registry_scan(&r2, NULL), 0);
    ck_assert_ptr_nonnull(lmp_registry_find(&r2, LMP_PLUGIN_STRATEGY, "rtn"));
    ck_assert_ptr_nonnull(lmp_registry_find(&r2, LMP_PLUGIN_BACKEND, "cpu"));
    lmp_registry_free(&r2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, good_plugin_loads);
    tcase_add_test(tc, file_that_does_not_open);
    tcase_add_test(tc, missing_entry_symbol);
    tcase_add_test(tc, null_descriptor);
    tcase_add_test(tc, abi_major_mismatch);
    tcase_add_test(tc, newer_minor);
    tcase_add_test(tc, struct_too_small);
    tcase_add_test(tc, vtable_too_small);
    tcase_add_test(tc, wrong_kind_for_slot);
    tcase_add_test(tc, duplicate_name);
    tcase_add_test(tc, probe_says_not_here);
    tcase_add_test(tc, unknown_name_lists_search_path);
    tcase_add_test(tc, real_plugins_by_name);
    tcase_add_test(tc, scan_reports_bad_files);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
