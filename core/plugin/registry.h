/* registry.h — loading plugins and keeping the loaded ones.
 *
 * Trust.  Loading a shared object runs its code (its constructors run inside dlopen, before any
 * check), so a file is only opened when its real path (realpath(): no "..", no symlink leads
 * out) lies inside a trusted folder:
 *   - <directory of the lmpress binary>/plugins, and either the install's plugin folder
 *     <directory of the binary>/../lib/lmpress/plugins when it exists (an installed lmpress,
 *     `cmake --install`), or else the build's plugin folder (LMP_PLUGIN_DIR);
 *   - the folders of $LMP_PLUGIN_PATH (colon-separated: the user's own environment);
 *   - the folders the caller passes to lmp_registry_init (the command line's --plugin-path), to
 *     lmp_registry_trust_dir, or for the whole run to lmp_registry_allow_dir (the command
 *     line's --allow-plugin, kept in the run's context).
 * A config is not trusted: its plugins.search_path folders (lmp_registry_add_search_dir) and the
 * plugin paths it names must lie inside a trusted folder, or are refused before any dlopen with
 * a message saying "pass --allow-plugin DIR to trust it".  A bare file name ("libz.so") is never
 * handed to dlopen, which would look it up in the system's library path.  Before dlopen, a file
 * must also pass lmp_elf_check_plugin (elf_check.h): an ELF shared object that exports
 * lmp_plugin_entry; anything else is refused without running a line of it.
 *
 * A plugin is found by path (any string with a '/' or ending in ".so") or by name, as the file
 * lmp-<kind>-<name>.so in the search path: the config's plugins.search_path, then the caller's
 * folders, then $LMP_PLUGIN_PATH, then <directory of the lmpress binary>/plugins, then the
 * install's or the build's plugin folder.  Loading checks, each failure with its own message (see plugin.h):
 * the file is trusted, it is an ELF plugin, it opens, the entry symbol exists and returns a
 * descriptor, ABI major equal, minor not newer, descriptor and vtable sizes, the kind, a unique
 * name, and the probe.  Every lookup checks the kind: a backend is never handed out as a
 * strategy, nor the reverse, even when it is already loaded. */
#ifndef LMP_CORE_REGISTRY_H
#define LMP_CORE_REGISTRY_H

#include "base/ctx.h"
#include "lmpress/plugin.h"

typedef struct lmp_plugin {
    char *path;          /* the real path (realpath) it was loaded from */
    void *handle;
    const lmp_plugin_desc *desc;
    int usable;          /* probe said yes */
    char reason[256];    /* probe's reason when not usable */
} lmp_plugin;

typedef struct lmp_registry {
    lmp_plugin **items;  /* each allocated on its own: stages keep pointers to them while the
                          * list grows */
    int n, cap;
    char **search;       /* directories, in order */
    int n_search;
    int n_front;         /* how many of them lmp_registry_add_search_dir put in front */
    char **trusted;      /* real paths of the folders plugins may be loaded from */
    int n_trusted;
    lmp_ctx *ctx;        /* the run's (borrowed): its trusted folders, and the hctx of probes */
} lmp_registry;

/* ctx: the run's context, which must outlive the registry: probes run on it, and the folders
 * lmp_registry_allow_dir gave it are trusted (and searched, when asked).  extra: folders the
 * caller trusts (e.g. the command line's --plugin-path), searched before the environment's and
 * the defaults; may be NULL.  Never a config's folders: those go through
 * lmp_registry_add_search_dir. */
int lmp_registry_init(lmp_registry *reg, lmp_ctx *ctx, const char *const *extra, int n_extra);
void lmp_registry_free(lmp_registry *reg);

/* Trusts `dir` (and everything under it) for this registry, without searching it by name. */
int lmp_registry_trust_dir(lmp_registry *reg, const char *dir);
/* A folder from an untrusted source (a config's plugins.search_path): searched first (in the
 * order of the calls), but only when its real path lies inside a trusted folder; otherwise an
 * error naming the resolved path and "pass --allow-plugin DIR to trust it". */
int lmp_registry_add_search_dir(lmp_registry *reg, const char *dir);
/* 0 when `path` resolves (realpath) inside a trusted folder, with *real (malloc'd; may be NULL
 * when not wanted) set; otherwise an error naming `path` and its resolved path. */
int lmp_registry_check_trusted(const lmp_registry *reg, const char *path, char **real);

/* The run's own trusted folders: what the user says on the command line (--allow-plugin DIR,
 * --plugin-path DIR), like $LMP_PLUGIN_PATH and never from a config.  Kept in the run's context
 * (lmp_ctx_clear forgets them): every registry initialised on that context after the call
 * trusts `dir`, registries of other contexts do not; search = 1 also searches it for plugins by
 * name.  Fails when `dir` is not an existing folder. */
int lmp_registry_allow_dir(lmp_ctx *ctx, const char *dir, int search);

/* Loads one file: a path with a '/' inside a trusted folder (a bare name is refused, never
 * looked up by dlopen), an ELF plugin (checked before dlopen).  A file already loaded (same
 * real path) is returned again, after the same kind check.  kind = 0 accepts either kind;
 * otherwise a plugin of the other kind is an error.  keep_unusable = 1 registers a plugin
 * whose probe says no (for listing). */
int lmp_registry_load_file(lmp_registry *reg, const char *path, int kind, int keep_unusable,
                           const lmp_plugin **out);
/* Makes sure a usable plugin of this kind with this name (or at this path) is loaded. */
int lmp_registry_require(lmp_registry *reg, int kind, const char *name_or_path,
                         const lmp_plugin **out);
const lmp_plugin *lmp_registry_find(const lmp_registry *reg, int kind, const char *name);
/* Loads every lmp-*.so in the search path; a failing file (an untrusted symlink, a file that is
 * not an lmpress plugin: checked before dlopen, so it runs nothing) is reported through report()
 * and skipped.  Returns the number of failures. */
int lmp_registry_scan(lmp_registry *reg, void (*report)(const char *path, const char *msg));

const char *lmp_kind_name(int kind);

/* Schema defaults, one lmp_value per parameter (free() them; strings point into the schema). */
int lmp_params_defaults(const lmp_plugin_desc *desc, lmp_value **out);

#endif
