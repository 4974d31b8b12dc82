/* name_pattern.c — see name_pattern.h. */
#include "analyze/name_pattern.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "config/config.h"

/* The shape PREFIX<block>.<suffix> with one PREFIX and, for each linear i, one suffix in every
 * block: *plen, the prefix's length; 0 when the names do not have it. */
static int split_names(const char *const *names, int64_t NB, int n_lin, size_t *plen)
{
    const char *first = names[0];
    for (size_t pos = 0; first[pos]; pos++) {
        if (first[pos] != '0' || first[pos + 1] != '.' || (pos && isdigit((unsigned char)first[pos - 1]))) continue;
        int ok = 1;
        for (int64_t b = 0; b < NB && ok; b++)
            for (int i = 0; i < n_lin && ok; i++) {
                const char *name = names[b * n_lin + i];
                char num[32];
                int k = snprintf(num, sizeof num, "%lld.", (long long)b);
                ok = strncmp(name, first, pos) == 0 && strncmp(name + pos, num, (size_t)k) == 0 &&
                     strcmp(name + pos + k, names[i] + pos + 2) == 0;
            }
        if (ok) {
            *plen = pos;
            return 1;
        }
    }
    return 0;
}

static void put_escaped(FILE *m, const char *s, size_t n)
{
    for (size_t k = 0; k < n && s[k]; k++) {
        if (strchr(".^$|()[]{}*+?\\", s[k])) fputc('\\', m);
        fputc(s[k], m);
    }
}

/* The digits d[0..k) (ascending) as a character class: runs of three or more as a range. */
static void put_class(FILE *m, const int *d, int k)
{
    fputc('[', m);
    for (int j = 0; j < k;) {
        int e = j;
        while (e + 1 < k && d[e + 1] == d[e] + 1) e++;
        if (e - j >= 2) fprintf(m, "%d-%d", d[j], d[e]);
        else
            for (int x = j; x <= e; x++) fprintf(m, "%d", d[x]);
        j = e + 1;
    }
    fputc(']', m);
}

/* The block numbers in[0..NB) that are set, as an alternation that matches exactly those
 * numbers (followed by the caller's "\."): "\d+" for every block, "7", "(2|9|11)", "(1[0-4]|3)". */
static void put_blocks(FILE *m, const uint8_t *in, int64_t NB)
{
    int64_t n = 0;
    for (int64_t b = 0; b < NB; b++) n += in[b] != 0;
    if (n == NB) {
        fputs("\\d+", m);
        return;
    }
    /* items: numbers grouped by their stem (all digits but the last) */
    char *items = NULL;
    size_t items_len = 0;
    FILE *t = open_memstream(&items, &items_len);
    if (!t) return;
    int n_items = 0;
    for (int64_t stem = 0; stem * 10 < NB; stem++) {
        int d[10], k = 0;
        for (int x = 0; x < 10; x++) {
            const int64_t b = stem * 10 + x;
            if (b < NB && in[b]) d[k++] = x;
        }
        if (!k) continue;
        char stem_text[32] = "";
        if (stem) snprintf(stem_text, sizeof stem_text, "%lld", (long long)stem);
        /* the class form when it is shorter than the numbers one by one */
        int class_len = 2;
        for (int j = 0; j < k;) {
            int e = j;
            while (e + 1 < k && d[e + 1] == d[e] + 1) e++;
            class_len += e - j >= 2 ? 3 : e - j + 1;
            j = e + 1;
        }
        const size_t explicit_len = (size_t)k * (strlen(stem_text) + 1) + (size_t)(k - 1);
        if (k > 1 && strlen(stem_text) + (size_t)class_len < explicit_len) {
            fprintf(t, "%s%s", n_items++ ? "|" : "", stem_text);
            put_class(t, d, k);
        } else {
            for (int j = 0; j < k; j++) fprintf(t, "%s%s%d", n_items++ ? "|" : "", stem_text, d[j]);
        }
    }
    fclose(t);
    if (n_items > 1) fprintf(m, "(%s)", items);
    else fputs(items, m);
    free(items);
}

/* The suffixes of the linears set in lin[0..n_lin), then "$": "mlp\.down_proj$",
 * "(self_attn\.q_proj|mlp\.up_proj)$". */
static void put_suffixes(FILE *m, const char *const *names, size_t skip, const uint8_t *lin, int n_lin)
{
    int n = 0;
    for (int i = 0; i < n_lin; i++) n += lin[i] != 0;
    if (n > 1) fputc('(', m);
    for (int i = 0, k = 0; i < n_lin; i++) {
        if (!lin[i]) continue;
        if (k++) fputc('|', m);
        put_escaped(m, names[i] + skip, (size_t)-1);
    }
    fputs(n > 1 ? ")$" : "$", m);
}

/* One of the two shapes: by_block groups blocks with the same set of linears, else linears with
 * the same set of blocks.  Returns the pattern (malloc'd) or NULL. */
static char *shaped(const char *const *names, int64_t NB, int n_lin, const uint8_t *sel, size_t plen, int by_block)
{
    const int64_t n_rows = by_block ? NB : n_lin, n_cols = by_block ? n_lin : NB;
    uint8_t *done = calloc((size_t)n_rows + 1, 1), *cols = malloc((size_t)n_cols + 1), *rows = malloc((size_t)n_rows + 1);
    char *terms = NULL, *out = NULL;
    size_t terms_len = 0, out_len = 0;
    FILE *t = done && cols && rows ? open_memstream(&terms, &terms_len) : NULL;
    int n_terms = 0;
    /* sel as a matrix [row][col]: rows are blocks (by_block) or linears */
#define AT(r, c) (by_block ? sel[(r) * n_lin + (c)] : sel[(c) * n_lin + (r)])
    for (int64_t r = 0; t && r < n_rows; r++) {
        if (done[r]) continue;
        int any = 0;
        for (int64_t c = 0; c < n_cols; c++) any |= (cols[c] = AT(r, c) != 0);
        if (!any) continue;
        /* every row with the same columns joins this term */
        for (int64_t q = r; q < n_rows; q++) {
            int same = !done[q];
            for (int64_t c = 0; c < n_cols && same; c++) same = (AT(q, c) != 0) == cols[c];
            rows[q] = (uint8_t)same;
            if (same) done[q] = 1;
        }
        for (int64_t q = 0; q < r; q++) rows[q] = 0;
        if (n_terms++) fputc('|', t);
        const size_t skip = plen + 2; /* a block-0 name's suffix starts after PREFIX "0." */
        if (by_block) {
            put_blocks(t, rows, NB);
            fputs("\\.", t);
            int full = 1;
            for (int c = 0; c < n_lin; c++) full &= cols[c];
            if (!full) put_suffixes(t, names, skip, cols, n_lin);
        } else {
            put_blocks(t, cols, NB);
            fputs("\\.", t);
            put_suffixes(t, names, skip, rows, n_lin);
        }
    }
#undef AT
    if (t) fclose(t);
    FILE *o = terms ? open_memstream(&out, &out_len) : NULL;
    if (o) {
        fputs("re:^", o);
        put_escaped(o, names[0], plen);
        if (n_terms > 1) fprintf(o, "(%s)", terms);
        else fputs(terms, o);
        fclose(o);
    }
    free(terms);
    free(done);
    free(cols);
    free(rows);
    return out;
}

/* Every selected name, one by one. */
static char *listed(const char *const *names, int64_t n, const uint8_t *sel)
{
    char *out = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    if (!o) return NULL;
    fputs("re:^(", o);
    for (int64_t g = 0, k = 0; g < n; g++) {
        if (!sel[g]) continue;
        if (k++) fputc('|', o);
        put_escaped(o, names[g], (size_t)-1);
    }
    fputs(")$", o);
    fclose(o);
    return out;
}

/* The pattern selects exactly the set. */
static int exact(const char *pattern, const char *const *names, int64_t n, const uint8_t *sel)
{
    uint8_t *hits = malloc((size_t)n + 1);
    int ok = hits && lmp_pattern_match_all(pattern, names, n, hits) == 0;
    for (int64_t g = 0; g < n && ok; g++) ok = hits[g] == (sel[g] != 0);
    free(hits);
    return ok;
}

char *lmp_name_pattern(const char *const *names, int64_t n_blocks, int n_lin, const uint8_t *selected)
{
    const int64_t n = n_blocks * n_lin;
    int64_t k = 0;
    for (int64_t g = 0; g < n; g++) k += selected[g] != 0;
    if (!k) {
        lmp_fail(LMP_EINVAL, "no linear selected");
        return NULL;
    }
    char *best = listed(names, n, selected);
    size_t plen;
    if (best && split_names(names, n_blocks, n_lin, &plen))
        for (int by_block = 1; by_block >= 0; by_block--) {
            char *p = shaped(names, n_blocks, n_lin, selected, plen, by_block);
            if (p && strlen(p) < strlen(best) && exact(p, names, n, selected)) {
                free(best);
                best = p;
            } else {
                free(p);
            }
        }
    if (!best) lmp_fail(LMP_ENOMEM, "out of memory for an override pattern");
    return best;
}
