/* registry.h — loading plugins and keeping the loaded ones.
 *
 * A plugin is found by path (any string with a '/' or ending in ".so") or by name, as the file
 * lmp-<kind>-<name>.so in the search path: the config's plugins.search_path, then
 * $LMP_PLUGIN_PATH (colon-separated), then <directory of the lmpress binary>/plugins, then the
 * build's plugin folder.  Loading checks, each failure with its own message (see plugin.h):
 * the file opens, the entry symbol exists and returns a descriptor, ABI major equal, minor not
 * newer, descriptor and vtable sizes, the kind, a unique name, and the probe. */
#ifndef LMP_CORE_REGISTRY_H
#define LMP_CORE_REGISTRY_H

#include "lmpress/plugin.h"

typedef struct lmp_plugin {
    char *path;
    void *handle;
    const lmp_plugin_desc *desc;
    int usable;          /* probe said yes */
    char reason[256];    /* probe's reason when not usable */
} lmp_plugin;

typedef struct lmp_registry {
    lmp_plugin *items;
    int n, cap;
    char **search;       /* directories, in order */
    int n_search;
} lmp_registry;

/* extra: directories searched first (e.g. from a config), may be NULL. */
int lmp_registry_init(lmp_registry *reg, const char *const *extra, int n_extra);
void lmp_registry_free(lmp_registry *reg);

/* Loads one file.  kind = 0 accepts either kind; otherwise a plugin of the other kind is an
 * error.  keep_unusable = 1 registers a plugin whose probe says no (for listing). */
int lmp_registry_load_file(lmp_registry *reg, const char *path, int kind, int keep_unusable,
                           const lmp_plugin **out);
/* Makes sure a usable plugin of this kind with this name (or at this path) is loaded. */
int lmp_registry_require(lmp_registry *reg, int kind, const char *name_or_path,
                         const lmp_plugin **out);
const lmp_plugin *lmp_registry_find(const lmp_registry *reg, int kind, const char *name);
/* Loads every lmp-*.so in the search path; a failing file is reported through report() and
 * skipped.  Returns the number of failures. */
int lmp_registry_scan(lmp_registry *reg, void (*report)(const char *path, const char *msg));

const char *lmp_kind_name(int kind);

/* Schema defaults, one lmp_value per parameter (free() them; strings point into the schema). */
int lmp_params_defaults(const lmp_plugin_desc *desc, lmp_value **out);

#endif
