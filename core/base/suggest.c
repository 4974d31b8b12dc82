/* suggest.c — edit distance and the nearest candidate (suggest.h). */
#include "base/suggest.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

enum { MAX_LEN = 127 };

size_t lmp_edit_distance(const char *a, const char *b)
{
    const size_t n = strlen(a), m = strlen(b);
    if (n > MAX_LEN || m > MAX_LEN) return SIZE_MAX;
    /* Three rows of the table: two back for the transposition. */
    size_t rows[3][MAX_LEN + 1];
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= m; j++) prev[j] = j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            const int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            size_t d = prev[j - 1] + (ai != bj);
            if (prev[j] + 1 < d) d = prev[j] + 1;
            if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == bj &&
                prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
        }
        size_t *t = prev2;
        prev2 = prev, prev = cur, cur = t;
    }
    return prev[m];
}

const char *lmp_suggest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!cands[i]) continue;
        if (strcmp(cands[i], word) == 0) return NULL;
        const size_t d = lmp_edit_distance(word, cands[i]);
        /* Lengths without an option's leading dashes: "--ab" is not near "--cd". */
        const size_t la = strlen(word + strspn(word, "-")), lb = strlen(cands[i] + strspn(cands[i], "-"));
        const size_t longer = la > lb ? la : lb, shorter = la < lb ? la : lb;
        /* d < shorter: one letter is not a typo of another ("-x" is not "-o"). */
        if (d <= (longer + 2) / 3 && d < shorter && d < best_d) best = cands[i], best_d = d;
    }
    return best;
}
