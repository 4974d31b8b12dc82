/* registry.c — see registry.h. */
#include "plugin/registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/suggest.h"
#include "plugin/elf_check.h"
#include "plugin/host_services.h"

/* Set by CMake from the install layout (GNUInstallDirs); this default for other builds
 * (tests/fuzz/README.md's). */
#ifndef LMP_INSTALLED_PLUGIN_RELDIR
#define LMP_INSTALLED_PLUGIN_RELDIR "../lib/lmpress/plugins"
#endif

const char *lmp_kind_name(int kind)
{
    return kind == LMP_PLUGIN_STRATEGY ? "strategy" : kind == LMP_PLUGIN_BACKEND ? "backend" : "?";
}

/* ---- trusted folders ---------------------------------------------------------------------- */

static int push_str(char ***v, int *n, int at, const char *s)
{
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return lmp_fail(LMP_ENOMEM, "out of memory");
    *v = nv;
    char *copy = strdup(s);
    if (!copy) return lmp_fail(LMP_ENOMEM, "out of memory");
    memmove(nv + at + 1, nv + at, (size_t)(*n - at) * sizeof *nv);
    nv[at] = copy;
    (*n)++;
    return 0;
}

static int add_search_at(lmp_registry *reg, int at, const char *dir)
{
    if (!dir || !*dir) return 0;
    for (int i = 0; i < reg->n_search; i++)
        if (strcmp(reg->search[i], dir) == 0) return 0; /* already searched */
    return push_str(&reg->search, &reg->n_search, at, dir);
}

static int add_dir(lmp_registry *reg, const char *dir) { return add_search_at(reg, reg->n_search, dir); }

/* Trusts the real path of `dir`; a folder that does not exist (yet) holds nothing to trust. */
static int add_trusted(lmp_registry *reg, const char *dir)
{
    if (!dir || !*dir) return 0;
    char *real = realpath(dir, NULL);
    if (!real) return 0;
    int st = 0, seen = 0;
    for (int i = 0; i < reg->n_trusted && !seen; i++) seen = strcmp(reg->trusted[i], real) == 0;
    if (!seen) st = push_str(&reg->trusted, &reg->n_trusted, reg->n_trusted, real);
    free(real);
    return st;
}

/* Searched and trusted. */
static int add_user_dir(lmp_registry *reg, const char *dir)
{
    int st = add_dir(reg, dir);
    return st ? st : add_trusted(reg, dir);
}

int lmp_registry_trust_dir(lmp_registry *reg, const char *dir)
{
    char *real = realpath(dir, NULL);
    if (!real) return lmp_fail(LMP_EIO, "%s: cannot trust plugin folder: %s", dir, strerror(errno));
    free(real);
    return add_trusted(reg, dir);
}

/* The run's --allow-plugin / --plugin-path folders live in its context (host.h): the user's word
 * for that run, not for every registry the process ever makes. */
int lmp_registry_allow_dir(lmp_ctx *ctx, const char *dir, int search)
{
    struct stat sb;
    char *real = realpath(dir, NULL);
    if (!real) return lmp_fail(LMP_EIO, "%s: cannot trust plugin folder: %s", dir, strerror(errno));
    if (stat(real, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        free(real);
        return lmp_fail(LMP_EINVAL, "%s: cannot trust plugin folder: not a folder", dir);
    }
    for (int i = 0; i < ctx->n_allowed; i++)
        if (strcmp(ctx->allowed[i].dir, real) == 0) {
            ctx->allowed[i].search |= search;
            free(real);
            return 0;
        }
    if (ctx->n_allowed == LMP_MAX_ALLOWED_DIRS) {
        free(real);
        return lmp_fail(LMP_EINVAL, "%s: more than %d trusted plugin folders", dir, LMP_MAX_ALLOWED_DIRS);
    }
    ctx->allowed[ctx->n_allowed].dir = real;
    ctx->allowed[ctx->n_allowed++].search = search;
    return 0;
}

/* Is the real path `real` the folder `dir` (a real path) or inside it? */
static int inside(const char *real, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/') return real[0] == '/';
    return strncmp(real, dir, n) == 0 && (real[n] == '/' || real[n] == 0);
}

static void trusted_list(const lmp_registry *reg, char *buf, size_t size)
{
    buf[0] = 0;
    for (int i = 0; i < reg->n_trusted; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", used ? ", " : "", reg->trusted[i]);
    }
    if (!buf[0]) snprintf(buf, size, "none");
}

/* The folder to suggest for --allow-plugin: the file's own folder, or the folder itself. */
static int untrusted(const lmp_registry *reg, const char *what, const char *given, const char *real, int is_dir)
{
    char list[2048], dir[PATH_MAX];
    trusted_list(reg, list, sizeof list);
    snprintf(dir, sizeof dir, "%s", real);
    char *slash = strrchr(dir, '/');
    if (!is_dir && slash) slash == dir ? (void)(dir[1] = 0) : (void)(*slash = 0);
    char resolved[PATH_MAX + 32] = "";
    if (strcmp(given, real) != 0) snprintf(resolved, sizeof resolved, " (resolves to %s)", real);
    return lmp_fail(LMP_EINVAL,
                    "%s%s: %s is outside the trusted plugin folders (%s), so it is not loaded: a plugin "
                    "runs code as soon as it is opened; pass --allow-plugin DIR to trust it "
                    "(DIR = %s), or add DIR to LMP_PLUGIN_PATH",
                    given, resolved, what, list, dir);
}

static int check_trusted(const lmp_registry *reg, const char *path, int is_dir, char **real_out)
{
    if (real_out) *real_out = NULL;
    char *real = realpath(path, NULL);
    if (!real)
        return lmp_fail(LMP_EIO, "%s: cannot load %s: %s", path, is_dir ? "plugins from this folder" : "plugin",
                        strerror(errno));
    int ok = 0;
    for (int i = 0; i < reg->n_trusted && !ok; i++) ok = inside(real, reg->trusted[i]);
    if (!ok) {
        int st = untrusted(reg, is_dir ? "the plugin folder" : "the plugin", path, real, is_dir);
        free(real);
        return st;
    }
    if (real_out) *real_out = real;
    else free(real);
    return 0;
}

int lmp_registry_check_trusted(const lmp_registry *reg, const char *path, char **real)
{
    return check_trusted(reg, path, 0, real);
}

int lmp_registry_add_search_dir(lmp_registry *reg, const char *dir)
{
    char *real;
    int st = check_trusted(reg, dir, 1, &real);
    if (st) return st;
    int before = reg->n_search;
    st = add_search_at(reg, reg->n_front, real);
    if (!st && reg->n_search > before) reg->n_front++;
    free(real);
    return st;
}

int lmp_registry_init(lmp_registry *reg, lmp_ctx *ctx, const char *const *extra, int n_extra)
{
    /* Before the first plugin loads OpenBLAS, which reads it once: its idle threads then sleep at
     * once instead of spinning for 2^28 cycles (~0.1 s) after every call, which took a core from
     * the kernels between the GEMMs (the cpu backend's own threads; measured on SmolLM2's
     * evaluation, 2 cores: 15.95 s -> 14.55 s, system time 5.6 s -> 1.3 s).  A value the user
     * set is kept. */
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    memset(reg, 0, sizeof *reg);
    reg->ctx = ctx;
    int st = 0;
    for (int i = 0; i < n_extra && !st; i++) st = add_user_dir(reg, extra[i]);
    for (int i = 0; i < ctx->n_allowed && !st; i++)
        st = ctx->allowed[i].search ? add_user_dir(reg, ctx->allowed[i].dir)
                                    : add_trusted(reg, ctx->allowed[i].dir);
    const char *env = getenv("LMP_PLUGIN_PATH");
    if (env && !st) {
        char *copy = strdup(env), *save = NULL;
        if (!copy) st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && !st; d = strtok_r(NULL, ":", &save))
            st = add_user_dir(reg, d);
        free(copy);
    }
    /* <exe dir>/plugins, then: an installed lmpress (`cmake --install`, any --prefix) finds its
     * plugins at <exe dir>/LMP_INSTALLED_PLUGIN_RELDIR (../lib/lmpress/plugins) and leaves the
     * build tree's folder alone (it may be gone, or rebuilt with another ABI); a binary run from
     * the build tree has no such folder next to it and uses the build's (LMP_PLUGIN_DIR). */
    int installed = 0;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - sizeof LMP_INSTALLED_PLUGIN_RELDIR - 16);
    if (n > 0 && !st) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash, "/plugins");
            st = add_user_dir(reg, exe);
            strcpy(slash + 1, LMP_INSTALLED_PLUGIN_RELDIR);
            char real[PATH_MAX]; /* listed as <prefix>/lib/lmpress/plugins, not .../bin/../lib/... */
            struct stat sb;
            installed = realpath(exe, real) && stat(real, &sb) == 0 && S_ISDIR(sb.st_mode);
            if (installed && !st) st = add_user_dir(reg, real);
        }
    }
    if (!st && !installed) st = add_user_dir(reg, LMP_PLUGIN_DIR);
    if (st) lmp_registry_free(reg);
    return st;
}

void lmp_registry_free(lmp_registry *reg)
{
    for (int i = 0; i < reg->n; i++) {
        free(reg->items[i]->path);
        free(reg->items[i]);
    }
    /* Plugins are not dlclose'd: descriptors and vtables may still be referenced. */
    free(reg->items);
    for (int i = 0; i < reg->n_search; i++) free(reg->search[i]);
    free(reg->search);
    for (int i = 0; i < reg->n_trusted; i++) free(reg->trusted[i]);
    free(reg->trusted);
    memset(reg, 0, sizeof *reg);
}

const lmp_plugin *lmp_registry_find(const lmp_registry *reg, int kind, const char *name)
{
    for (int i = 0; i < reg->n; i++)
        if ((!kind || reg->items[i]->desc->kind == (lmp_plugin_kind)kind) &&
            strcmp(reg->items[i]->desc->name, name) == 0)
            return reg->items[i];
    return NULL;
}

/* Checks a descriptor against this host; the message names the file. */
static int check_desc(const lmp_registry *reg, const char *path, const lmp_plugin_desc *d,
                      int kind)
{
    if (d->abi_major != LMP_ABI_MAJOR)
        return lmp_fail(LMP_EINVAL,
                        "%s: plugin built for lmpress plugin ABI %u.%u, this lmpress has ABI %d.%d "
                        "(major versions differ): rebuild the plugin against this plugin.h",
                        path, d->abi_major, d->abi_minor, LMP_ABI_MAJOR, LMP_ABI_MINOR);
    if (d->abi_minor > LMP_ABI_MINOR)
        return lmp_fail(LMP_EINVAL,
                        "%s: plugin needs plugin ABI %u.%u, newer than this lmpress (%d.%d): "
                        "update lmpress",
                        path, d->abi_major, d->abi_minor, LMP_ABI_MAJOR, LMP_ABI_MINOR);
    if (d->struct_size < sizeof(lmp_plugin_desc))
        return lmp_fail(LMP_EINVAL,
                        "%s: plugin descriptor is %u bytes, ABI %d.%d needs %zu: the plugin was "
                        "built against a different plugin.h",
                        path, d->struct_size, LMP_ABI_MAJOR, LMP_ABI_MINOR, sizeof(lmp_plugin_desc));
    if (!d->name || !*d->name || !d->version)
        return lmp_fail(LMP_EINVAL, "%s: plugin descriptor has no name or version", path);
    if (d->kind != LMP_PLUGIN_STRATEGY && d->kind != LMP_PLUGIN_BACKEND)
        return lmp_fail(LMP_EINVAL, "%s: plugin '%s' declares unknown kind %d", path, d->name,
                        (int)d->kind);
    if (kind && d->kind != (lmp_plugin_kind)kind)
        return lmp_fail(LMP_EINVAL, "%s: plugin '%s' is a %s plugin, but is used here as a %s",
                        path, d->name, lmp_kind_name(d->kind), lmp_kind_name(kind));
    if (!d->vtable) return lmp_fail(LMP_EINVAL, "%s: plugin '%s' has no vtable", path, d->name);
    uint32_t vt_size = *(const uint32_t *)d->vtable; /* every vtable starts with struct_size */
    size_t need = d->kind == LMP_PLUGIN_STRATEGY ? LMP_STRATEGY_I_MIN_SIZE : LMP_BACKEND_I_MIN_SIZE;
    if (vt_size < need)
        return lmp_fail(LMP_EINVAL, "%s: plugin '%s' has a %s vtable of %u bytes, ABI %d.%d needs %zu",
                        path, d->name, lmp_kind_name(d->kind), vt_size, LMP_ABI_MAJOR,
                        LMP_ABI_MINOR, need);
    if (d->kind == LMP_PLUGIN_STRATEGY) {
        const lmp_strategy_i *s = d->vtable;
        if (!s->apply || !s->needs)
            return lmp_fail(LMP_EINVAL, "%s: strategy '%s' lacks needs() or apply()", path, d->name);
    } else {
        const lmp_backend_i *b = d->vtable;
        if (strcmp(d->name, "cpu") == 0 && (!b->gemm || !b->rmsnorm || !b->rope || !b->attention ||
                                            !b->swiglu || !b->log_softmax || !b->reduce_cols ||
                                            !b->choose_weight_grid || !b->apply_weight_grid ||
                                            !b->quantize_act || !b->layernorm || !b->gelu ||
                                            !LMP_BACKEND_I_HAS(b, attention_backward) || !LMP_BACKEND_I_HAS(b, rope_table) ||
                                            !LMP_BACKEND_I_HAS(b, attention_window) || !LMP_BACKEND_I_HAS(b, hadamard) ||
                                            !LMP_BACKEND_I_HAS(b, attention_alibi)))
            return lmp_fail(LMP_EINVAL, "%s: the cpu backend must implement every operation", path);
    }
    for (uint32_t i = 0; i < d->n_params; i++) {
        const lmp_param_spec *p = &d->params[i];
        if (!p->name || (p->type == LMP_PARAM_ENUM && !p->choices))
            return lmp_fail(LMP_EINVAL, "%s: plugin '%s' has a malformed parameter #%u", path,
                            d->name, i);
    }
    const lmp_plugin *dup = lmp_registry_find(reg, d->kind, d->name);
    if (dup)
        return lmp_fail(LMP_EINVAL, "%s: a %s plugin named '%s' is already loaded from %s",
                        path, lmp_kind_name(d->kind), d->name, dup->path);
    return 0;
}

static int load_checked(lmp_registry *reg, const char *path, int kind, int keep_unusable,
                        const lmp_plugin **out);

/* A plugin found again (or by name) is handed out only for the kind it is. */
static int kind_ok(const lmp_plugin *p, int kind)
{
    if (!kind || p->desc->kind == (lmp_plugin_kind)kind) return 0;
    return lmp_fail(LMP_EINVAL, "%s: plugin '%s' is a %s plugin, not a %s", p->path, p->desc->name,
                    lmp_kind_name(p->desc->kind), lmp_kind_name(kind));
}

int lmp_registry_load_file(lmp_registry *reg, const char *given, int kind, int keep_unusable,
                           const lmp_plugin **out)
{
    /* dlopen would look a bare name up in the system's library path: never. */
    if (!strchr(given, '/'))
        return lmp_fail(LMP_EINVAL,
                        "%s: a plugin file is named by its path (./%s in the current folder, or relative to the "
                        "config): a bare file name is never looked up in the system's library path",
                        given, given);
    char *path;
    int st = check_trusted(reg, given, 0, &path);
    if (st) return st;
    for (int i = 0; i < reg->n; i++)
        if (strcmp(reg->items[i]->path, path) == 0) {
            free(path);
            if ((st = kind_ok(reg->items[i], kind))) return st;
            if (out) *out = reg->items[i];
            return 0;
        }
    /* Nothing of the file runs before this says it is a plugin (dlopen runs constructors). */
    if ((st = lmp_elf_check_plugin(path, LMP_ENTRY_SYMBOL))) {
        free(path);
        return st;
    }
    st = load_checked(reg, path, kind, keep_unusable, out);
    free(path);
    return st;
}

/* dlopen, then the descriptor's checks: `path` is a trusted real path that passed the ELF check. */
static int load_checked(lmp_registry *reg, const char *path, int kind, int keep_unusable,
                        const lmp_plugin **out)
{
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return lmp_fail(LMP_EIO, "%s: cannot load plugin: %s", path, dlerror());
    lmp_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, LMP_ENTRY_SYMBOL);
    if (!entry) {
        dlclose(h);
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: no exported symbol '%s'", path,
                        LMP_ENTRY_SYMBOL); /* the ELF check saw one: dlsym should too */
    }
    const lmp_plugin_desc *d = entry();
    int st = d ? check_desc(reg, path, d, kind)
               : lmp_fail(LMP_EINVAL, "%s: %s() returned no descriptor", path, LMP_ENTRY_SYMBOL);
    if (st) {
        dlclose(h);
        return st;
    }
    lmp_plugin p = {.handle = h, .desc = d, .usable = 1};
    if (d->probe) {
        /* The probe's reason comes back through the run's context (host->set_error). */
        lmp_host_clear_error(reg->ctx);
        if (d->probe(lmp_host_services(), reg->ctx) <= 0) {
            p.usable = 0;
            snprintf(p.reason, sizeof p.reason, "%s", lmp_host_error(reg->ctx));
            if (!keep_unusable) {
                st = lmp_fail(LMP_EUNSUPPORTED, "%s: %s plugin '%s' cannot run here: %s", path,
                              lmp_kind_name(d->kind), d->name, p.reason);
                dlclose(h); /* after the message: d lives in the plugin */
                return st;
            }
        }
    }
    if (reg->n == reg->cap) {
        int cap = reg->cap ? 2 * reg->cap : 8;
        lmp_plugin **items = realloc(reg->items, (size_t)cap * sizeof *items);
        if (!items) {
            dlclose(h);
            return lmp_fail(LMP_ENOMEM, "out of memory");
        }
        reg->items = items;
        reg->cap = cap;
    }
    lmp_plugin *node = malloc(sizeof *node);
    if (!node || !(p.path = strdup(path))) {
        free(node);
        dlclose(h);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    *node = p;
    reg->items[reg->n] = node;
    if (out) *out = node;
    reg->n++;
    return 0;
}

static int is_path(const char *s)
{
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 3 && strcmp(s + n - 3, ".so") == 0);
}

/* " (did you mean 'gptq'?)" into hint when a plugin of this kind in the search path has a name
 * close to `name` (base/suggest.h); the names are the files' (lmp-<kind>-<name>.so), so nothing
 * is opened.  Empty otherwise. */
static void suggest_name(const lmp_registry *reg, int kind, const char *name, char *hint, size_t size)
{
    enum { MAX_NAMES = 256 };
    char prefix[32], *names[MAX_NAMES];
    size_t n = 0;
    snprintf(prefix, sizeof prefix, "lmp-%s-", lmp_kind_name(kind));
    const size_t plen = strlen(prefix);
    for (int i = 0; i < reg->n_search && n < MAX_NAMES; i++) {
        DIR *d = opendir(reg->search[i]);
        for (struct dirent *e = d ? readdir(d) : NULL; e && n < MAX_NAMES; e = readdir(d)) {
            const size_t len = strlen(e->d_name);
            if (len > plen + 3 && strncmp(e->d_name, prefix, plen) == 0 && strcmp(e->d_name + len - 3, ".so") == 0 &&
                (names[n] = strndup(e->d_name + plen, len - plen - 3)))
                n++;
        }
        if (d) closedir(d);
    }
    for (int i = 0; i < reg->n; i++) /* loaded by path under another file name */
        if (n < MAX_NAMES && reg->items[i]->desc->kind == (lmp_plugin_kind)kind &&
            (names[n] = strdup(reg->items[i]->desc->name)))
            n++;
    const char *best = lmp_suggest(name, (const char *const *)names, n);
    hint[0] = 0;
    if (best) snprintf(hint, size, " (did you mean '%s'?)", best);
    for (size_t i = 0; i < n; i++) free(names[i]);
}

int lmp_registry_require(lmp_registry *reg, int kind, const char *name_or_path,
                         const lmp_plugin **out)
{
    const lmp_plugin *p;
    if (is_path(name_or_path)) {
        int st = lmp_registry_load_file(reg, name_or_path, kind, 0, &p);
        if (!st) st = kind_ok(p, kind);
        if (st) return st;
        if (!p->usable)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s plugin '%s' cannot run here: %s",
                            p->path, lmp_kind_name(kind), p->desc->name, p->reason);
        if (out) *out = p;
        return 0;
    }
    p = lmp_registry_find(reg, kind, name_or_path);
    if (p) {
        int st = kind_ok(p, kind);
        if (st) return st;
        if (!p->usable)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s plugin '%s' cannot run here: %s", p->path,
                            lmp_kind_name(kind), p->desc->name, p->reason);
        if (out) *out = p;
        return 0;
    }
    char tried[1024] = "";
    for (int i = 0; i < reg->n_search; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/lmp-%s-%s.so", reg->search[i], lmp_kind_name(kind),
                 name_or_path);
        if (access(path, F_OK) == 0) return lmp_registry_require(reg, kind, path, out);
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", reg->search[i]);
    }
    /* The name of a plugin of the other kind (`--backend rtn`): say so rather than "unknown". */
    const char *other = kind == LMP_PLUGIN_BACKEND ? "strategy" : "backend";
    for (int i = 0; i < reg->n_search; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/lmp-%s-%s.so", reg->search[i], other, name_or_path);
        if (access(path, F_OK) == 0)
            return lmp_fail(LMP_EINVAL, "'%s' is a %s plugin (%s), not a %s", name_or_path, other, path,
                            lmp_kind_name(kind));
    }
    char hint[256] = "";
    suggest_name(reg, kind, name_or_path, hint, sizeof hint);
    return lmp_fail(LMP_EINVAL, "unknown %s plugin '%s'%s: no lmp-%s-%s.so in %s",
                    lmp_kind_name(kind), name_or_path, hint, lmp_kind_name(kind), name_or_path,
                    tried[0] ? tried : "(empty search path)");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int lmp_registry_scan(lmp_registry *reg, void (*report)(const char *path, const char *msg))
{
    int failures = 0;
    for (int i = 0; i < reg->n_search; i++) {
        DIR *dir = opendir(reg->search[i]);
        if (!dir) continue;
        char *names[256];
        int n = 0;
        for (struct dirent *e; (e = readdir(dir)) && n < 256;) {
            size_t len = strlen(e->d_name);
            if (strncmp(e->d_name, "lmp-", 4) == 0 && len > 3 && strcmp(e->d_name + len - 3, ".so") == 0)
                names[n++] = strdup(e->d_name);
        }
        closedir(dir);
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (int j = 0; j < n; j++) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", reg->search[i], names[j]);
            free(names[j]);
            /* The same plugin found again further down the search path is shadowed, not an error. */
            char *real = realpath(path, NULL);
            int seen = 0;
            for (int k = 0; k < reg->n && real; k++) {
                char *r2 = realpath(reg->items[k]->path, NULL);
                seen |= r2 && strcmp(r2, real) == 0;
                free(r2);
            }
            free(real);
            if (seen) continue;
            if (lmp_registry_load_file(reg, path, 0, 1, NULL)) {
                failures++;
                if (report) report(path, lmp_last_error());
            }
        }
    }
    return failures;
}

int lmp_params_defaults(const lmp_plugin_desc *desc, lmp_value **out)
{
    *out = NULL;
    if (!desc->n_params) return 0;
    lmp_value *v = calloc(desc->n_params, sizeof *v);
    if (!v) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < desc->n_params; i++) {
        const lmp_param_spec *p = &desc->params[i];
        v[i].num = p->def_num;
        if (p->type == LMP_PARAM_ENUM) v[i].str = p->choices[(int)p->def_num];
        else if (p->type == LMP_PARAM_STRING) v[i].str = p->def_str;
    }
    *out = v;
    return 0;
}
