/* suggest.h — "did you mean ...?" for a mistyped name (an option, a command, a plugin, a
 * variant): the closest of a list of candidates by edit distance, when it is close enough to be
 * a typo rather than another word. */
#ifndef LMP_BASE_SUGGEST_H
#define LMP_BASE_SUGGEST_H

#include <stddef.h>

/* Optimal string alignment distance (Levenshtein plus the swap of two neighbours, "gtpq" ->
 * "gptq" costing 1), case-insensitive; SIZE_MAX when either string is longer than 127 bytes. */
size_t lmp_edit_distance(const char *a, const char *b);

/* The candidate nearest `word` (ties: the first) if its distance is at most a third of the
 * longer length without leading dashes, rounded up (so "--jsn" finds "--json", "compre"
 * "compare", "gtpq" "gptq") and less than the shorter length (no one-letter guesses), and the
 * word is not itself a candidate; else NULL.  cands holds n strings (NULLs are skipped). */
const char *lmp_suggest(const char *word, const char *const *cands, size_t n);

#endif
