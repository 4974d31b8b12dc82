/* eval.c — see eval.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "eval/eval.h"
#include "model/forward.h"

int64_t lmp_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double lmp_kl_position(const float *ref, const float *var, int64_t V)
{
    double kl = 0;
    for (int64_t v = 0; v < V; v++) kl += exp((double)ref[v]) * ((double)ref[v] - (double)var[v]);
    return kl;
}

void lmp_score_window(const float *ref, const float *var, const int32_t *tok, int64_t L, int64_t V,
                      lmp_score *s)
{
    for (int64_t t = 0; t + 1 < L; t++) {
        const float *r = ref + t * V, *q = var + t * V;
        s->nll_sum -= q[tok[t + 1]];
        if (r != q) {
            s->kld_sum += lmp_kl_position(r, q, V);
            s->top1_hits += lmp_argmax(r, V) == lmp_argmax(q, V);
        } else {
            s->top1_hits++;
        }
        s->scored++;
    }
    s->windows++;
}

int lmp_ref_logprobs_init(lmp_ctx *ctx, lmp_ref_logprobs *c, int64_t n_windows, int64_t window_floats)
{
    memset(c, 0, sizeof *c);
    c->store.fd = -1;
    c->n_windows = n_windows;
    c->window_floats = window_floats;
    c->have = calloc((size_t)n_windows + 1, 1);
    if (!c->have) return lmp_fail(LMP_ENOMEM, "out of memory");
    return lmp_spill_init(ctx, &c->store, n_windows * window_floats, LMP_REF_MEMORY_BUDGET,
                          "reference log-probabilities");
}

void lmp_ref_logprobs_free(lmp_ref_logprobs *c)
{
    free(c->have);
    lmp_spill_free(&c->store);
    memset(c, 0, sizeof *c);
    c->store.fd = -1;
}

int lmp_ref_logprobs_put(lmp_ref_logprobs *c, int64_t w, const float *ref)
{
    int st = lmp_spill_write(&c->store, w * c->window_floats, c->window_floats, ref);
    if (!st) c->have[w] = 1;
    return st;
}

int lmp_ref_window(const lmp_backend *be, const lmp_model *m, const lmp_block *ref_blocks,
                   lmp_ref_logprobs *c, int64_t w, const int32_t *tok, int64_t L, float *ref)
{
    if (c && c->have && c->have[w]) return lmp_spill_read(&c->store, w * c->window_floats, c->window_floats, ref);
    if (!ref_blocks) return lmp_fail(LMP_EINVAL, "window %lld: the reference log-probabilities are not cached", (long long)w);
    int st = lmp_forward(be, m, ref_blocks, tok, L, 1, ref);
    if (st || !c || !c->have) return st;
    return lmp_ref_logprobs_put(c, w, ref);
}

int64_t lmp_eval_windows(int64_t n_ids, int64_t L, int64_t max_windows)
{
    int64_t n_win = n_ids / L;
    return max_windows > 0 && n_win > max_windows ? max_windows : n_win;
}

int lmp_eval_text(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_block *ref_blocks,
                  const lmp_model *vm, const lmp_block *var_blocks, lmp_ref_logprobs *cache, const int32_t *ids,
                  int64_t n_ids, int64_t L, int64_t max_windows, const char *what, lmp_score *out)
{
    const int64_t V = m->arch.vocab;
    int64_t n_win = lmp_eval_windows(n_ids, L, max_windows);
    if (n_win == 0)
        return lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one evaluation window of %lld",
                        what, (long long)n_ids, (long long)L);
    if (vm->arch.vocab != V)
        return lmp_fail(LMP_EINVAL, "%s: the variant's model %s has %lld tokens, the reference %s %lld", what,
                        vm->path, (long long)vm->arch.vocab, m->path, (long long)V);
    memset(out, 0, sizeof *out);
    const int same = var_blocks == ref_blocks && vm == m;
    float *ref = malloc((size_t)(L * V) * sizeof *ref), *var = same ? NULL : malloc((size_t)(L * V) * sizeof *var);
    int st = ref && (same || var) ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for %lld x %lld log-probabilities", (long long)L, (long long)V);
    char label[512];
    snprintf(label, sizeof label, "eval %s: window", what);
    for (int64_t w = 0; w < n_win && !st; w++) {
        lmp_progress(ctx, label, w, n_win);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        const int32_t *tok = ids + w * L;
        st = lmp_ref_window(be, m, ref_blocks, cache, w, tok, L, ref);
        if (!st && !same) st = lmp_forward(be, vm, var_blocks, tok, L, 1, var);
        if (!st) lmp_score_window(ref, same ? ref : var, tok, L, V, out);
    }
    if (!st) lmp_progress(ctx, label, n_win, n_win);
    free(ref);
    free(var);
    return st;
}
