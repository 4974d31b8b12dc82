/* name_pattern.h — a short override pattern that selects exactly a set of a model's linears
 * (`lmpress analyze --write-config` writes its skip list with it).
 *
 * A model's linears are named PREFIX<block>.<suffix> ("model.layers.11.mlp.down_proj"), with
 * the same n_lin suffixes in every block.  A set of them is written in one of two shapes,
 * whichever is shorter:
 *   - block by block: the blocks whose every linear is in the set by number alone,
 *     re:^model\.layers\.(2|9|11|28|29)\.  and the others as (blocks)\.(suffixes)$;
 *   - suffix by suffix: re:^model\.layers\.\d+\.mlp\.down_proj$ for a role in every block,
 *     (blocks)\.(suffixes)$ for the rest.
 * Numbers that share all but their last digit may be written as a class (2[0-4]).  Names that
 * do not have that shape are listed one by one, re:^(name1|name2)$.  Whatever the shape, the
 * pattern is checked with the configs' own matcher (lmp_pattern_match) against every name
 * before it is returned: it selects the set and nothing else. */
#ifndef LMP_CORE_NAME_PATTERN_H
#define LMP_CORE_NAME_PATTERN_H

#include <stdint.h>

/* names[n_blocks * n_lin] in model order (block b's linear i at b * n_lin + i), selected[] 1 for
 * the linears to select.  Returns "re:..." (malloc'd), or NULL when nothing is selected or
 * memory runs out (lmp_fail says which). */
char *lmp_name_pattern(const char *const *names, int64_t n_blocks, int n_lin, const uint8_t *selected);

#endif
