/* test_plugin_trust.c — a config cannot make lmpress run code (issue 14).  Each route by which a
 * config names a shared object is tried with the real `lmpress` binary on a plugin whose
 * constructor creates a marker file the moment it is loaded (tests/plugins/ctor_plugin.c): a
 * plugin outside the trusted folders is refused with a message that says how to trust it, and
 * the marker proves none of its code ran.  The user's own word (LMP_PLUGIN_PATH,
 * --allow-plugin, --plugin-path) does load it, which also proves the marker works.  A file
 * without lmp_plugin_entry is refused from its ELF symbol table, never dlopen'd, even in a
 * trusted folder; a backend named as a strategy is refused even when it is already loaded. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define CPU_BACKEND LMP_BINARY_DIR "/plugins/lmp-backend-cpu.so"

static char tmpdir[256], marker[300];
static char output[65536];
static char args[4000];
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

static int run(const char *a)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s 2>&1", a);
    int rc = lmp_test_cli(cmd, output, sizeof output);
    ck_assert_msg(rc >= 0, "lmpress %s did not exit normally (crash?)\n%s", a, output);
    return rc;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void marker_absent(const char *a)
{
    ck_assert_msg(access(marker, F_OK) != 0, "lmpress %s ran the plugin's code (its constructor left %s)\n%s", a,
                  marker, output);
}

static void marker_present(const char *a)
{
    ck_assert_msg(access(marker, F_OK) == 0, "lmpress %s did not load the trusted plugin\n%s", a, output);
    unlink(marker);
}

/* Refused: exit 1, one error line holding every needle (NULL-terminated), and no code ran. */
static void expect_refused(const char *a, ...)
{
    int rc = run(a);
    ck_assert_msg(rc == 1, "lmpress %s: exit %d, expected 1\n%s", a, rc, output);
    ck_assert_msg(count(output, "lmpress: error:") == 1, "not exactly one error line:\n%s", output);
    va_list ap;
    va_start(ap, a);
    for (const char *n; (n = va_arg(ap, const char *));)
        ck_assert_msg(strstr(output, n), "lmpress %s: '%s' missing from:\n%s", a, n, output);
    va_end(ap);
    marker_absent(a);
}

static void expect_ok(const char *a)
{
    int rc = run(a);
    ck_assert_msg(rc == 0, "lmpress %s: exit %d, expected 0\n%s", a, rc, output);
}

static const char *in_tmp(const char *rel)
{
    static char path[8][512];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, rel);
    return p;
}

static void copy(const char *from, const char *rel)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(from, &n);
    lmp_test_spit(in_tmp(rel), b, n);
    free(b);
}

/* tmpdir/test.cfg: a valid config with `variant` as its one variant, `extra` on line 4. */
static const char *config(const char *variant, const char *extra)
{
    char text[8192];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s\"; samples = 2; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 2; };\n"
             "%s\n"
             "variants = (\n%s\n);\n",
             MODEL, TOK, EVAL_TEXT, EVAL_TEXT, extra, variant);
    const char *p = in_tmp("test.cfg");
    lmp_test_spit(p, text, strlen(text));
    return p;
}

#define PLAIN "{ name = \"a\"; }"
#define STAGE(s) "{ name = \"a\"; pipeline = ( { strategy = \"" s "\"; } ); }"

/* tmpdir/evil/{evil.so, lmp-strategy-evil.so}: a valid strategy with a marking constructor;
 * tmpdir/noentry/lmp-strategy-noentry.so: the same constructor, no lmp_plugin_entry;
 * tmpdir/trusted/lmp-strategy-evil.so: a link to ../evil/evil.so. */
static void setup(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "trust");
    snprintf(marker, sizeof marker, "%s/marker", tmpdir);
    setenv("LMP_TEST_CTOR_MARKER", marker, 1);
    unsetenv("LMP_PLUGIN_PATH");
    unsetenv("LD_LIBRARY_PATH");
    ck_assert_int_eq(mkdir(in_tmp("evil"), 0755), 0);
    ck_assert_int_eq(mkdir(in_tmp("noentry"), 0755), 0);
    ck_assert_int_eq(mkdir(in_tmp("trusted"), 0755), 0);
    copy(LMP_TEST_PLUGIN_DIR "/ctor-entry.so", "evil/evil.so");
    copy(LMP_TEST_PLUGIN_DIR "/ctor-entry.so", "evil/lmp-strategy-evil.so");
    copy(LMP_TEST_PLUGIN_DIR "/ctor-noentry.so", "noentry/lmp-strategy-noentry.so");
    ck_assert_int_eq(symlink("../evil/evil.so", in_tmp("trusted/lmp-strategy-evil.so")), 0);
}

static void teardown(void)
{
    lmp_test_rmtree(tmpdir);
}

/* plugins.strategies = [ "evil/evil.so" ]: relative to the config, outside the trusted folders. */
START_TEST(route_plugins_strategies)
{
    const char *cfg = config(PLAIN, "plugins = { strategies = [ \"evil/evil.so\" ]; };");
    const char *cmds[] = {"check", "compare", "run"};
    for (int i = 0; i < 3; i++)
        expect_refused(ARGS("%s %s", cmds[i], cfg), "test.cfg:4: plugins.strategies[0]", in_tmp("evil/evil.so"),
                       "outside the trusted plugin folders", "pass --allow-plugin DIR to trust it", NULL);
    cfg = config(PLAIN, "plugins = { backends = [ \"evil/evil.so\" ]; };");
    expect_refused(ARGS("check %s", cfg), "plugins.backends[0]", "pass --allow-plugin DIR", NULL);
}
END_TEST

/* A stage's strategy = "/abs/path.so". */
START_TEST(route_stage_strategy_path)
{
    char stage[1024];
    snprintf(stage, sizeof stage, "{ name = \"a\"; pipeline = ( { strategy = \"%s\"; } ); }", in_tmp("evil/evil.so"));
    const char *cfg = config(stage, "");
    expect_refused(ARGS("check %s", cfg), "test.cfg:", "strategy", in_tmp("evil/evil.so"),
                   "pass --allow-plugin DIR to trust it", NULL);
    expect_refused(ARGS("compare %s", cfg), "pass --allow-plugin DIR to trust it", NULL);
    /* Relative, from the config's folder. */
    cfg = config(STAGE("evil/lmp-strategy-evil.so"), "");
    expect_refused(ARGS("check %s", cfg), in_tmp("evil/lmp-strategy-evil.so"), "pass --allow-plugin DIR", NULL);
}
END_TEST

/* plugins.search_path = [ "evil" ], then the plugin by name. */
START_TEST(route_search_path)
{
    const char *cfg = config(STAGE("evil"), "plugins = { search_path = [ \"evil\" ]; };");
    expect_refused(ARGS("check %s", cfg), "test.cfg:4: plugins.search_path[0]", in_tmp("evil"),
                   "plugin folder is outside the trusted plugin folders", "pass --allow-plugin DIR to trust it", NULL);
    expect_refused(ARGS("compare %s", cfg), "plugins.search_path[0]", NULL);
    /* Trusted, the same config loads the plugin by name. */
    expect_ok(ARGS("check %s --allow-plugin %s", cfg, in_tmp("evil")));
    marker_present("check --allow-plugin (search_path)");
}
END_TEST

/* $LMP_PLUGIN_PATH is the user's own environment: trusted, searched. */
START_TEST(route_env_trusted)
{
    setenv("LMP_PLUGIN_PATH", in_tmp("evil"), 1);
    const char *cfg = config(PLAIN, "plugins = { strategies = [ \"evil/evil.so\" ]; };");
    expect_ok(ARGS("check %s", cfg));
    marker_present("check with LMP_PLUGIN_PATH");
    cfg = config(STAGE("evil"), "");
    expect_ok(ARGS("check %s", cfg));
    marker_present("check with LMP_PLUGIN_PATH, by name");
    cfg = config(STAGE("evil"), "plugins = { search_path = [ \"evil\" ]; };");
    expect_ok(ARGS("check %s", cfg));
    marker_present("check with LMP_PLUGIN_PATH, search_path");
    /* A folder next to it is still refused. */
    cfg = config(PLAIN, "plugins = { strategies = [ \"noentry/lmp-strategy-noentry.so\" ]; };");
    expect_refused(ARGS("check %s", cfg), "outside the trusted plugin folders", NULL);
}
END_TEST

/* --allow-plugin DIR trusts DIR (and what is under it); --plugin-path DIR also searches it. */
START_TEST(route_allow_plugin)
{
    const char *cfg = config(PLAIN, "plugins = { strategies = [ \"evil/evil.so\" ]; };");
    expect_ok(ARGS("check %s --allow-plugin %s", cfg, in_tmp("evil")));
    marker_present("check --allow-plugin");
    expect_ok(ARGS("check --allow-plugin %s %s", tmpdir, cfg)); /* a parent folder */
    marker_present("check --allow-plugin parent");
    cfg = config("{ name = \"fp32\"; }, " STAGE("evil/evil.so"), "");
    expect_ok(ARGS("compare %s --allow-plugin %s", cfg, in_tmp("evil")));
    marker_present("compare --allow-plugin");
    ck_assert_msg(strstr(output, "\na "), "no row for the variant:\n%s", output);
    /* By name: --allow-plugin does not search, --plugin-path does. */
    cfg = config(STAGE("evil"), "");
    expect_refused(ARGS("check %s --allow-plugin %s", cfg, in_tmp("evil")), "unknown strategy plugin 'evil'", NULL);
    expect_ok(ARGS("check %s --plugin-path %s", cfg, in_tmp("evil")));
    marker_present("check --plugin-path");
    /* plugins lists an allowed folder. */
    expect_ok(ARGS("plugins --allow-plugin %s", in_tmp("evil")));
    ck_assert_msg(strstr(output, "strategy evil 0.0.1"), "%s", output);
    marker_present("plugins --allow-plugin");
    /* A folder that does not exist is a usage error, not silently ignored. */
    int rc = run(ARGS("check %s --allow-plugin /nonexistent/plugins", cfg));
    ck_assert_msg(rc == 2 && strstr(output, "/nonexistent/plugins: cannot trust plugin folder"), "%d %s", rc, output);
    ck_assert_int_eq(run("check --help"), 0);
    ck_assert_ptr_nonnull(strstr(output, "--allow-plugin DIR"));
}
END_TEST

/* "libz.so" / "evil.so": never looked up in the system's library path.  With LD_LIBRARY_PATH
 * pointing at the evil folder, dlopen("evil.so") would have found and run it. */
START_TEST(route_bare_name)
{
    const char *cfg = config(PLAIN, "plugins = { strategies = [ \"libz.so\" ]; };");
    expect_refused(ARGS("check %s", cfg), "plugins.strategies[0]", "libz.so", "cannot load plugin", NULL);
    ck_assert_msg(!strstr(output, "/usr/lib") && !strstr(output, "/lib/"), "%s", output);
    setenv("LD_LIBRARY_PATH", in_tmp("evil"), 1);
    cfg = config(PLAIN, "plugins = { strategies = [ \"evil.so\" ]; };");
    expect_refused(ARGS("check %s", cfg), "plugins.strategies[0]", NULL);
    cfg = config(PLAIN, "plugins = { backends = [ \"evil.so\" ]; };");
    expect_refused(ARGS("check %s", cfg), "plugins.backends[0]", NULL);
    cfg = config(STAGE("evil.so"), "");
    expect_refused(ARGS("check %s", cfg), "strategy", NULL);
    cfg = config(PLAIN, "backend = { name = \"evil.so\"; };");
    expect_refused(ARGS("check %s", cfg), "backend.name", "bare file name is never looked up", NULL);
    expect_refused(ARGS("eval --backend evil.so --text %s", EVAL_TEXT), "bare file name is never looked up", NULL);
    expect_refused(ARGS("compare %s --backend libz.so", config(PLAIN, "")), "libz.so", NULL);
}
END_TEST

/* A link in a trusted folder that leads out of it, and "trusted/../evil". */
START_TEST(route_symlink_escape)
{
    const char *trusted = in_tmp("trusted");
    const char *cfg = config(PLAIN, "plugins = { strategies = [ \"trusted/lmp-strategy-evil.so\" ]; };");
    /* (the config's paths are resolved when read, so the message names the link's target) */
    expect_refused(ARGS("check %s --allow-plugin %s", cfg, trusted), "plugins.strategies[0]", in_tmp("evil/evil.so"),
                   "outside the trusted plugin folders", NULL);
    cfg = config(PLAIN, "plugins = { strategies = [ \"trusted/../evil/evil.so\" ]; };");
    expect_refused(ARGS("check %s --allow-plugin %s", cfg, trusted), "outside the trusted plugin folders", NULL);
    cfg = config(STAGE("evil"), "plugins = { search_path = [ \"trusted\" ]; };");
    expect_refused(ARGS("check %s --allow-plugin %s", cfg, trusted), "resolves to", NULL);
    cfg = config(STAGE("evil"), "");
    expect_refused(ARGS("check %s --plugin-path %s", cfg, trusted), "resolves to", NULL);
    /* plugins reports the link without loading it. */
    int rc = run(ARGS("plugins --plugin-path %s", trusted));
    ck_assert_msg(rc == 1 && strstr(output, "[not loaded]") && strstr(output, "resolves to"), "%d %s", rc, output);
    marker_absent("plugins --plugin-path trusted");
}
END_TEST

/* A file without lmp_plugin_entry, in a trusted folder: refused from its symbol table, its
 * constructor never runs (check, compare, plugins). */
START_TEST(no_entry_never_loaded)
{
    const char *dir = in_tmp("noentry");
    const char *cfg = config(PLAIN, "plugins = { strategies = [ \"noentry/lmp-strategy-noentry.so\" ]; };");
    expect_refused(ARGS("check %s --allow-plugin %s", cfg, dir), "plugins.strategies[0]",
                   "not an lmpress plugin: no exported symbol 'lmp_plugin_entry'", NULL);
    expect_refused(ARGS("compare %s --allow-plugin %s", cfg, dir), "not an lmpress plugin", NULL);
    cfg = config(STAGE("noentry"), "");
    expect_refused(ARGS("check %s --plugin-path %s", cfg, dir), "not an lmpress plugin", NULL);
    int rc = run(ARGS("plugins --plugin-path %s", dir));
    ck_assert_msg(rc == 1 && strstr(output, "[not loaded]") && strstr(output, "not an lmpress plugin"), "%d %s", rc,
                  output);
    marker_absent("plugins --plugin-path noentry");
    setenv("LMP_PLUGIN_PATH", dir, 1);
    rc = run("plugins");
    ck_assert_msg(rc == 1 && strstr(output, "not an lmpress plugin"), "%d %s", rc, output);
    marker_absent("plugins with LMP_PLUGIN_PATH");
}
END_TEST

/* Issue 14 point 4: the cpu backend, loaded for the run, named as a strategy. */
START_TEST(backend_named_as_strategy)
{
    const char *cfg = config(STAGE(CPU_BACKEND), "");
    expect_refused(ARGS("check %s", cfg), "strategy", "is a backend plugin, not a strategy", NULL);
    expect_refused(ARGS("compare %s", cfg), "is a backend plugin, not a strategy", NULL);
    cfg = config(PLAIN, "plugins = { strategies = [ \"" CPU_BACKEND "\" ]; };");
    expect_refused(ARGS("check %s", cfg), "plugins.strategies[0]", "is a backend plugin", NULL);
    /* A strategy as a backend. */
    cfg = config(PLAIN, "plugins = { strategies = [ \"" LMP_BINARY_DIR "/plugins/lmp-strategy-rtn.so\" ]; };\n"
                        "backend = { name = \"" LMP_BINARY_DIR "/plugins/lmp-strategy-rtn.so\"; };");
    expect_refused(ARGS("check %s", cfg), "is a strategy plugin, not a backend", NULL);
    /* by name: --backend rtn names the strategy, not an unknown backend */
    cfg = config(PLAIN, "");
    expect_refused(ARGS("compare %s --backend rtn", cfg), "'rtn' is a strategy plugin", "not a backend", NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plugin trust");
    TCase *tc = tcase_create("routes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, route_plugins_strategies);
    tcase_add_test(tc, route_stage_strategy_path);
    tcase_add_test(tc, route_search_path);
    tcase_add_test(tc, route_env_trusted);
    tcase_add_test(tc, route_allow_plugin);
    tcase_add_test(tc, route_bare_name);
    tcase_add_test(tc, route_symlink_escape);
    tcase_add_test(tc, no_entry_never_loaded);
    tcase_add_test(tc, backend_named_as_strategy);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
