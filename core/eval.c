/* eval.c — see eval.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "eval.h"
#include "forward.h"
#include "host.h"

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Adds one window's scores: ref/var are [L, V] log-probabilities, tok the window's ids. */
static void score_window(const float *ref, const float *var, const int32_t *tok, int64_t L,
                         int64_t V, lmp_score *s)
{
    for (int64_t t = 0; t + 1 < L; t++) {
        const float *r = ref + t * V, *q = var + t * V;
        s->nll_sum -= q[tok[t + 1]];
        if (r != q) {
            double kl = 0;
            for (int64_t v = 0; v < V; v++) kl += exp((double)r[v]) * ((double)r[v] - (double)q[v]);
            s->kld_sum += kl;
            s->top1_hits += argmax(r, V) == argmax(q, V);
        } else {
            s->top1_hits++;
        }
        s->scored++;
    }
    s->windows++;
}

int lmp_eval_text(const lmp_backend *be, const lmp_model *m, const lmp_block *ref_blocks,
                  lmp_block *const *variants, int n_var,
                  const int32_t *ids, int64_t n_ids, int64_t L, int64_t max_windows,
                  const char *what, lmp_score *out)
{
    const int64_t V = m->arch.vocab;
    int64_t n_win = n_ids / L;
    if (max_windows > 0 && n_win > max_windows) n_win = max_windows;
    if (n_win == 0)
        return lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one evaluation window of %lld",
                        what, (long long)n_ids, (long long)L);
    memset(out, 0, (size_t)n_var * sizeof *out);
    float *ref = malloc((size_t)(L * V) * sizeof *ref), *var = malloc((size_t)(L * V) * sizeof *var);
    int st = ref && var ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for %lld x %lld log-probabilities", (long long)L, (long long)V);
    char label[512];
    snprintf(label, sizeof label, "eval %s: window", what);
    for (int64_t w = 0; w < n_win && !st; w++) {
        lmp_progress(label, w, n_win);
        const int32_t *tok = ids + w * L;
        st = lmp_forward(be, m, ref_blocks, tok, L, 1, ref);
        for (int i = 0; i < n_var && !st; i++) {
            int same = variants[i] == ref_blocks;
            if (!same) st = lmp_forward(be, m, variants[i], tok, L, 1, var);
            if (!st) score_window(ref, same ? ref : var, tok, L, V, &out[i]);
        }
    }
    if (!st) lmp_progress(label, n_win, n_win);
    free(ref);
    free(var);
    return st;
}
