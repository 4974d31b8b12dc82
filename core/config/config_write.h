/* config_write.h — writing a loaded config back as a libconfig file, so that a command can hand
 * the user (or itself) a ready config: `lmpress analyze --write-config` writes a variant with
 * its skip list as extra overrides, which `lmpress compare` then runs like any config.
 *
 * Paths are written absolute (the real path of each file the config named), so the file can go
 * anywhere.  Stage parameters are written in full (every schema key, defaults included), so the
 * file does not depend on a plugin's defaults.  A stage's strategy is written by name, or by its
 * file's path when it was loaded from a path (plugins.strategies). */
#ifndef LMP_CORE_CONFIG_WRITE_H
#define LMP_CORE_CONFIG_WRITE_H

#include <stdio.h>

#include "config/config.h"

/* model, backend, calibration, eval and seed of c.  `comment` (may be NULL) goes first, each
 * line prefixed with "# ". */
void lmp_config_write_head(FILE *f, const lmp_run_config *c, const char *comment);

/* One variant `{ name = ...; pipeline = ( ... ); }` (no separator after it), named `name` (NULL:
 * v's own).  first_overrides[s] (NULL, or NULL entries: none) is the text of overrides written
 * before stage s's own, e.g. { match = "re:^(a|b)$"; skip = true; }: the first match wins, so
 * they take precedence. */
void lmp_config_write_variant(FILE *f, const lmp_run_config *c, const lmp_variant *v, const char *name,
                              const char *const *first_overrides);

/* s as a libconfig string literal, quotes included. */
void lmp_config_write_string(FILE *f, const char *s);

#endif
