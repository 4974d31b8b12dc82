/* test_loader.c — the plugin loader refuses each kind of broken plugin with its own message
 * (tests/plugins/fake_plugin.c builds one broken plugin per rule), and loads the real ones.
 * The fake plugins' folder is trusted explicitly (lmp_registry_init's folders), as the command
 * line's --plugin-path would; the trust rule itself is tested below and in test_plugin_trust.c. */
#include <check.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin/elf_check.h"
#include "base/error.h"
#include "plugin/registry.h"

#include "testutil.h"

static lmp_ctx ctx; /* the fixture's run: the registries' context (check's fixtures take no arguments) */
static lmp_registry reg;
static char tmpdir[256];

static void setup(void)
{
    const char *dirs[] = {LMP_TEST_PLUGIN_DIR};
    lmp_ctx_init(&ctx);
    ck_assert_int_eq(lmp_registry_init(&reg, &ctx, dirs, 1), 0);
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "loader");
}

static void teardown(void)
{
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
    lmp_test_rmtree(tmpdir);
}

/* tmpdir/name, made of the bytes of `from` (or of n bytes at data). */
static const char *tmp_file(const char *name, const char *from, const void *data, size_t n)
{
    static char path[4][512];
    static int slot;
    char *p = path[slot++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    char *dir = strrchr(p, '/');
    *dir = 0;
    mkdir(p, 0755); /* one level of subfolder, if name has one */
    *dir = '/';
    if (from) {
        size_t size;
        unsigned char *bytes = lmp_test_slurp(from, &size);
        lmp_test_spit(p, bytes, size);
        free(bytes);
    } else lmp_test_spit(p, data, n);
    return p;
}

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
    /* A file that exists, in a trusted folder, but is not a shared object: refused by the ELF
     * check, before dlopen. */
    char junk[200];
    memset(junk, 'x', sizeof junk); /* long enough for a whole ELF header */
    const char *path = tmp_file("lmp-notso.so", NULL, junk, sizeof junk);
    ck_assert_int_eq(lmp_registry_trust_dir(&reg, tmpdir), 0);
    ck_assert_int_lt(lmp_registry_load_file(&reg, path, 0, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "not a shared object"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "invalid ELF header"));
    /* A folder is not a plugin file either. */
    ck_assert_int_lt(lmp_registry_load_file(&reg, LMP_TEST_PLUGIN_DIR "/", 0, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "not a regular file"));
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
    ck_assert_int_eq(lmp_registry_init(&r2, &ctx, dirs, 1), 0);
    /* The fake plugins are not named lmp-*.so, so only the real ones are listed. */
    ck_assert_int_eq(lmp_registry_scan(&r2, NULL), 0);
    ck_assert_ptr_nonnull(lmp_registry_find(&r2, LMP_PLUGIN_STRATEGY, "rtn"));
    ck_assert_ptr_nonnull(lmp_registry_find(&r2, LMP_PLUGIN_BACKEND, "cpu"));
    lmp_registry_free(&r2);
}
END_TEST

/* ---- trust: where a plugin may be loaded from ----------------------------------------------- */

START_TEST(untrusted_folder_refused_until_trusted)
{
    const char *copy = tmp_file("elsewhere/fake-good.so", fake("good"), NULL, 0);
    lmp_clear_error();
    ck_assert_int_lt(lmp_registry_load_file(&reg, copy, LMP_PLUGIN_STRATEGY, 0, NULL), 0);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, "outside the trusted plugin folders"), "%s", msg);
    ck_assert_msg(strstr(msg, "pass --allow-plugin DIR to trust it"), "%s", msg);
    ck_assert_msg(strstr(msg, LMP_TEST_PLUGIN_DIR), "the trusted folders are not listed: %s", msg);
    ck_assert_int_eq(reg.n, 0);
    /* The same through require (a config's path), then trusted: it loads. */
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, copy, NULL), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/elsewhere", tmpdir);
    ck_assert_int_eq(lmp_registry_trust_dir(&reg, dir), 0);
    const lmp_plugin *p;
    ck_assert_int_eq(lmp_registry_load_file(&reg, copy, LMP_PLUGIN_STRATEGY, 0, &p), 0);
    ck_assert_str_eq(p->desc->name, "fake");
    ck_assert_int_lt(lmp_registry_trust_dir(&reg, "/nonexistent/folder"), 0);
}
END_TEST

START_TEST(process_allow_list)
{
    tmp_file("allowed/lmp-strategy-fake.so", fake("good"), NULL, 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/allowed", tmpdir);
    lmp_registry r2;
    /* Trusted but not searched: found by path, not by name. */
    ck_assert_int_eq(lmp_registry_allow_dir(&ctx, dir, 0), 0);
    ck_assert_int_eq(lmp_registry_init(&r2, &ctx, NULL, 0), 0);
    ck_assert_int_lt(lmp_registry_require(&r2, LMP_PLUGIN_STRATEGY, "fake", NULL), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/lmp-strategy-fake.so", dir);
    ck_assert_int_eq(lmp_registry_require(&r2, LMP_PLUGIN_STRATEGY, path, NULL), 0);
    lmp_registry_free(&r2);
    /* Searched too: found by name. */
    ck_assert_int_eq(lmp_registry_allow_dir(&ctx, dir, 1), 0);
    ck_assert_int_eq(lmp_registry_init(&r2, &ctx, NULL, 0), 0);
    ck_assert_int_eq(lmp_registry_require(&r2, LMP_PLUGIN_STRATEGY, "fake", NULL), 0);
    lmp_registry_free(&r2);
    /* Another run's context does not trust it: the folders belong to the run that was told. */
    lmp_ctx other;
    lmp_ctx_init(&other);
    ck_assert_int_eq(lmp_registry_init(&r2, &other, NULL, 0), 0);
    ck_assert_int_lt(lmp_registry_require(&r2, LMP_PLUGIN_STRATEGY, path, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "outside the trusted plugin folders"));
    lmp_registry_free(&r2);
    lmp_ctx_clear(&other);
    /* Forgotten with the context: refused again. */
    lmp_ctx_clear(&ctx);
    lmp_ctx_init(&ctx);
    ck_assert_int_eq(lmp_registry_init(&r2, &ctx, NULL, 0), 0);
    ck_assert_int_lt(lmp_registry_require(&r2, LMP_PLUGIN_STRATEGY, path, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "outside the trusted plugin folders"));
    lmp_registry_free(&r2);
    ck_assert_int_lt(lmp_registry_allow_dir(&ctx, "/nonexistent/folder", 0), 0);
    ck_assert_int_lt(lmp_registry_allow_dir(&ctx, fake("good"), 0), 0); /* a file, not a folder */
}
END_TEST

START_TEST(search_dir_must_be_trusted)
{
    tmp_file("sub/lmp-strategy-fake.so", fake("good"), NULL, 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sub", tmpdir);
    ck_assert_int_lt(lmp_registry_add_search_dir(&reg, dir), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "the plugin folder is outside the trusted plugin folders"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "pass --allow-plugin DIR"));
    /* "trusted/../elsewhere" resolves outside: refused. */
    char escape[1024];
    snprintf(escape, sizeof escape, "%s/../../../../../../%s", LMP_TEST_PLUGIN_DIR, dir);
    ck_assert_int_lt(lmp_registry_add_search_dir(&reg, escape), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "resolves to"));
    /* A folder inside a trusted one is fine, and searched first. */
    ck_assert_int_eq(lmp_registry_trust_dir(&reg, tmpdir), 0);
    ck_assert_int_eq(lmp_registry_add_search_dir(&reg, dir), 0);
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "fake", NULL), 0);
}
END_TEST

START_TEST(symlink_out_of_trusted_folder)
{
    const char *outside = tmp_file("outside/fake-good.so", fake("good"), NULL, 0);
    char trusted[512], link[600];
    snprintf(trusted, sizeof trusted, "%s/trusted", tmpdir);
    ck_assert_int_eq(mkdir(trusted, 0755), 0);
    snprintf(link, sizeof link, "%s/lmp-strategy-fake.so", trusted);
    ck_assert_int_eq(symlink(outside, link), 0);
    ck_assert_int_eq(lmp_registry_trust_dir(&reg, trusted), 0);
    ck_assert_int_lt(lmp_registry_load_file(&reg, link, 0, 0, NULL), 0);
    ck_assert_msg(strstr(lmp_last_error(), "resolves to") && strstr(lmp_last_error(), outside), "%s",
                  lmp_last_error());
    ck_assert_int_eq(lmp_registry_add_search_dir(&reg, trusted), 0); /* the folder itself is fine */
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "fake", NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "outside the trusted plugin folders"));
    /* A scan reports the link and loads nothing. */
    lmp_registry r2;
    const char *dirs[] = {trusted};
    ck_assert_int_eq(lmp_registry_init(&r2, &ctx, dirs, 1), 0);
    ck_assert_int_eq(lmp_registry_scan(&r2, NULL), 1);
    ck_assert_ptr_null(lmp_registry_find(&r2, LMP_PLUGIN_STRATEGY, "fake"));
    lmp_registry_free(&r2);
    ck_assert_int_eq(reg.n, 0);
}
END_TEST

START_TEST(bare_name_never_searched)
{
    /* dlopen("libz.so") would load the system's libz; "fake-good.so" would be searched in
     * LD_LIBRARY_PATH and the system folders.  Neither is ever handed to dlopen (the CLI test
     * in test_plugin_trust.c shows no code runs). */
    const char *names[] = {"libz.so", "libc.so.6", "fake-good.so"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_lt(lmp_registry_load_file(&reg, names[i], 0, 0, NULL), 0);
        ck_assert_msg(strstr(lmp_last_error(), "bare file name is never looked up"), "%s", lmp_last_error());
    }
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "libz.so", NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "bare file name"));
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_BACKEND, "fake-good.so", NULL), 0);
    ck_assert_int_eq(reg.n, 0);
}
END_TEST

START_TEST(no_entry_constructor_never_runs)
{
    char marker[512];
    snprintf(marker, sizeof marker, "%s/marker", tmpdir);
    setenv("LMP_TEST_CTOR_MARKER", marker, 1);
    ck_assert_int_lt(lmp_registry_load_file(&reg, LMP_TEST_PLUGIN_DIR "/ctor-noentry.so", 0, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "not an lmpress plugin: no exported symbol 'lmp_plugin_entry'"));
    ck_assert_msg(access(marker, F_OK) != 0, "the constructor of a file that is not a plugin ran");
    /* The check works: a trusted plugin with the same constructor does leave the mark. */
    ck_assert_int_eq(lmp_registry_load_file(&reg, LMP_TEST_PLUGIN_DIR "/ctor-entry.so", 0, 0, NULL), 0);
    ck_assert_msg(access(marker, F_OK) == 0, "the marker plugin's constructor did not run");
}
END_TEST

/* Point 4 of issue 14: a loaded backend named again as a strategy used to be handed out, its
 * vtable then called as a strategy's. */
START_TEST(loaded_backend_never_a_strategy)
{
    const char *cpu = LMP_BINARY_DIR "/plugins/lmp-backend-cpu.so";
    const lmp_plugin *p;
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_BACKEND, "cpu", &p), 0);
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, cpu, NULL), 0);
    ck_assert_msg(strstr(lmp_last_error(), "is a backend plugin, not a strategy"), "%s", lmp_last_error());
    ck_assert_int_lt(lmp_registry_load_file(&reg, cpu, LMP_PLUGIN_STRATEGY, 0, NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "is a backend plugin, not a strategy"));
    /* And the reverse. */
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, fake("good"), NULL), 0);
    ck_assert_int_lt(lmp_registry_require(&reg, LMP_PLUGIN_BACKEND, fake("good"), NULL), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "is a strategy plugin, not a backend"));
    /* As the kind it is, and kind 0, it is found again. */
    ck_assert_int_eq(lmp_registry_load_file(&reg, cpu, LMP_PLUGIN_BACKEND, 0, NULL), 0);
    ck_assert_int_eq(lmp_registry_load_file(&reg, cpu, 0, 0, NULL), 0);
    ck_assert_int_eq(reg.n, 2);
}
END_TEST

/* ---- the ELF check: a hostile file never makes it read out of bounds ------------------------ */

static unsigned char *good_bytes(size_t *n) { return lmp_test_slurp(fake("good"), n); }

static void expect_elf_reject(const char *name, const unsigned char *bytes, size_t n, const char *needle)
{
    const char *path = tmp_file(name, NULL, bytes, n);
    lmp_clear_error();
    ck_assert_msg(lmp_elf_check_plugin(path, "lmp_plugin_entry") < 0, "%s accepted", name);
    ck_assert_msg(strstr(lmp_last_error(), needle), "%s: '%s' not in: %s", name, needle, lmp_last_error());
    ck_assert_msg(strstr(lmp_last_error(), path), "the file is not named: %s", lmp_last_error());
}

START_TEST(elf_check_refuses_malformed_files)
{
    size_t n;
    unsigned char *b = good_bytes(&n);
    ck_assert_int_eq(lmp_elf_check_plugin(fake("good"), "lmp_plugin_entry"), 0);
    ck_assert_int_lt(lmp_elf_check_plugin(fake("good"), "fake_apply"), 0); /* static: not exported */
    ck_assert_int_lt(lmp_elf_check_plugin(fake("no_entry"), "lmp_plugin_entry"), 0);
    ck_assert_int_eq(lmp_elf_check_plugin(fake("no_entry"), "some_other_symbol"), 0);
    Elf64_Ehdr eh;
    memcpy(&eh, b, sizeof eh);
    unsigned char *m = malloc(n);
    expect_elf_reject("empty.so", b, 0, "invalid ELF header");
    expect_elf_reject("short.so", b, 30, "truncated ELF header");
#define MUTATE(name, stmt, needle)                                                                        \
    do {                                                                                                  \
        memcpy(m, b, n);                                                                                  \
        Elf64_Ehdr *h = (Elf64_Ehdr *)m;                                                                  \
        (void)h;                                                                                          \
        stmt;                                                                                             \
        expect_elf_reject(name, m, n, needle);                                                            \
    } while (0)
    MUTATE("class32.so", m[EI_CLASS] = ELFCLASS32, "32-bit");
    MUTATE("bigendian.so", m[EI_DATA] = ELFDATA2MSB, "big-endian");
    MUTATE("exec.so", h->e_type = ET_EXEC, "not a shared object");
    MUTATE("machine.so", h->e_machine = (Elf64_Half)(h->e_machine + 1), "ELF machine");
    MUTATE("noshdr.so", h->e_shoff = 0, "no section headers");
    MUTATE("shentsize.so", h->e_shentsize = 10, "section header size");
    MUTATE("shoff_far.so", h->e_shoff = (Elf64_Off)n - 8, "beyond the end");
    MUTATE("shoff_huge.so", h->e_shoff = ~(Elf64_Off)0 - 100, "beyond the end");
    MUTATE("shnum_huge.so", h->e_shnum = 0xffff, "section headers");
    /* Section-level damage: find .dynsym and its string table in the copy. */
    Elf64_Shdr *sh = (Elf64_Shdr *)(b + eh.e_shoff);
    int ds = -1;
    for (int i = 0; i < eh.e_shnum; i++)
        if (sh[i].sh_type == SHT_DYNSYM) ds = i;
    ck_assert_int_ge(ds, 0);
    size_t ds_at = eh.e_shoff + (size_t)ds * sizeof(Elf64_Shdr);
    size_t str_at = eh.e_shoff + (size_t)sh[ds].sh_link * sizeof(Elf64_Shdr);
#define SHDR(at) ((Elf64_Shdr *)(m + (at)))
    MUTATE("link_out.so", SHDR(ds_at)->sh_link = 0xfffff, "malformed ELF dynamic symbol table");
    MUTATE("link_notstr.so", SHDR(ds_at)->sh_link = (Elf64_Word)ds, "malformed ELF dynamic symbol table");
    MUTATE("entsize.so", SHDR(ds_at)->sh_entsize = 7, "malformed ELF dynamic symbol table");
    MUTATE("symoff.so", SHDR(ds_at)->sh_offset = (Elf64_Off)n, "beyond the end");
    MUTATE("symsize.so", SHDR(ds_at)->sh_size = ~(Elf64_Xword)0 / sizeof(Elf64_Sym) * sizeof(Elf64_Sym), "beyond the end");
    MUTATE("stroff.so", SHDR(str_at)->sh_offset = ~(Elf64_Off)0, "beyond the end");
    MUTATE("strsize.so", SHDR(str_at)->sh_size = 3, "no exported symbol");
    MUTATE("nodynsym.so", SHDR(ds_at)->sh_type = SHT_PROGBITS, "no dynamic symbol table");
    /* Every symbol's name pointing past the string table: read nothing, find nothing. */
    Elf64_Sym *syms = (Elf64_Sym *)(b + sh[ds].sh_offset);
    size_t n_syms = sh[ds].sh_size / sizeof *syms;
    MUTATE("names_out.so", for (size_t k = 0; k < n_syms; k++)((Elf64_Sym *)(m + sh[ds].sh_offset))[k].st_name = 0xfffffff0u,
           "no exported symbol");
    /* The entry symbol made undefined, local, data or hidden. */
    const char *strtab = (const char *)b + sh[sh[ds].sh_link].sh_offset;
    size_t entry = n_syms;
    for (size_t k = 0; k < n_syms; k++)
        if (strcmp(strtab + syms[k].st_name, "lmp_plugin_entry") == 0) entry = k;
    ck_assert_uint_lt(entry, n_syms);
#define ENTRY ((Elf64_Sym *)(m + sh[ds].sh_offset) + entry)
    MUTATE("undef.so", ENTRY->st_shndx = SHN_UNDEF, "is undefined");
    MUTATE("local.so", ENTRY->st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC), "not a global symbol");
    MUTATE("object.so", ENTRY->st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), "not a function");
    MUTATE("hidden.so", ENTRY->st_other = STV_HIDDEN, "hidden");
    /* Random damage anywhere: never a crash (the ASan build would catch any stray read). */
    srand(14);
    for (int round = 0; round < 300; round++) {
        memcpy(m, b, n);
        for (int k = 0; k < 8; k++) {
            size_t at = (size_t)rand() % (n < 4096 ? n : 4096); /* the headers live up front... */
            if (k & 1) at = eh.e_shoff + (size_t)rand() % (n - eh.e_shoff); /* ...and at the end */
            m[at] = (unsigned char)rand();
        }
        const char *path = tmp_file("random.so", NULL, m, n);
        (void)lmp_elf_check_plugin(path, "lmp_plugin_entry");
    }
#undef ENTRY
#undef SHDR
#undef MUTATE
    free(m);
    free(b);
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
    tcase_add_test(tc, untrusted_folder_refused_until_trusted);
    tcase_add_test(tc, process_allow_list);
    tcase_add_test(tc, search_dir_must_be_trusted);
    tcase_add_test(tc, symlink_out_of_trusted_folder);
    tcase_add_test(tc, bare_name_never_searched);
    tcase_add_test(tc, no_entry_constructor_never_runs);
    tcase_add_test(tc, loaded_backend_never_a_strategy);
    tcase_add_test(tc, elf_check_refuses_malformed_files);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
