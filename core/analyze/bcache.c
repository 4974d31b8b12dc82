/* bcache.c — see bcache.h. */
#include "analyze/bcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/forward.h"

static float *state_at(const lmp_bcache *bc, const lmp_bcache_text *t, int64_t b, int64_t w)
{
    const int64_t per = t->L * bc->m->arch.dim;
    return t->h + (b * t->n_windows + w) * per;
}

/* The reference's log-probabilities of window w; a window fetched for the first time is a full
 * forward of the unmodified model, which the naive way pays too. */
static int reference(lmp_bcache *bc, lmp_bcache_text *t, int64_t w, const int32_t *tok)
{
    if (!t->ref->have[w]) {
        bc->forwards += bc->m->arch.n_layers;
        bc->naive_forwards += bc->m->arch.n_layers;
    }
    return lmp_ref_window(bc->be, bc->m, bc->ref_blocks, t->ref, w, tok, t->L, bc->refp);
}

static int stop_if_interrupted(lmp_ctx *ctx)
{
    return lmp_host_interrupted(ctx) ? lmp_fail(LMP_EABORTED, "interrupted") : 0;
}

int lmp_bcache_build(lmp_bcache *bc, lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m,
                     const lmp_block *ref_blocks, const lmp_block *base, int n_texts, int32_t *const *ids,
                     const int64_t *n_ids, int64_t L, int64_t max_windows, lmp_ref_logprobs *refs,
                     const lmp_lambada *lam)
{
    memset(bc, 0, sizeof *bc);
    bc->ctx = ctx;
    bc->be = be;
    bc->m = m;
    bc->ref_blocks = ref_blocks;
    bc->n_texts = n_texts;
    bc->lam = lam;
    const int64_t d = m->arch.dim, V = m->arch.vocab, NL = m->arch.n_layers;
    int64_t max_T = L;
    for (int64_t i = 0; lam && i < lam->n; i++) {
        int64_t start, T;
        lmp_lambada_span(m, &lam->items[i], &start, &T);
        if (T > max_T) max_T = T;
    }
    bc->texts = calloc((size_t)n_texts + 1, sizeof *bc->texts);
    bc->x = malloc((size_t)(max_T * d) * sizeof *bc->x);
    bc->var = malloc((size_t)(L * V) * sizeof *bc->var);
    bc->refp = malloc((size_t)(L * V) * sizeof *bc->refp);
    bc->logits = malloc((size_t)(max_T * V) * sizeof *bc->logits);
    bc->lam_h = lam ? calloc((size_t)lam->n + 1, sizeof *bc->lam_h) : NULL;
    if (!bc->texts || !bc->x || !bc->var || !bc->refp || !bc->logits || (lam && !bc->lam_h))
        return lmp_fail(LMP_ENOMEM, "out of memory for the analysis cache");
    const int same = base == ref_blocks;
    int st = 0;
    for (int t = 0; t < n_texts && !st; t++) {
        lmp_bcache_text *bt = &bc->texts[t];
        bt->ids = ids[t];
        bt->L = L;
        bt->n_windows = lmp_eval_windows(n_ids[t], L, max_windows);
        bt->ref = &refs[t];
        bt->h = malloc((size_t)(NL * bt->n_windows * L * d) * sizeof *bt->h + 1);
        if (!bt->h) return lmp_fail(LMP_ENOMEM, "out of memory for %lld cached hidden states",
                                    (long long)(NL * bt->n_windows * L));
        for (int64_t w = 0; w < bt->n_windows && !st; w++) {
            lmp_progress(ctx, "analyze: baseline window", w, bt->n_windows);
            if ((st = stop_if_interrupted(ctx))) break;
            const int32_t *tok = bt->ids + w * L;
            lmp_embed(m, tok, L, bc->x);
            for (int64_t b = 0; b < NL && !st; b++) {
                memcpy(state_at(bc, bt, b, w), bc->x, (size_t)(L * d) * sizeof *bc->x);
                st = lmp_block_forward(be, &m->arch, &base[b], L, bc->x, NULL, NULL);
            }
            if (!st) st = lmp_head(be, m, L, bc->x, 1, bc->var);
            bc->forwards += NL;
            bc->naive_forwards += NL;
            if (!st && !same) st = reference(bc, bt, w, tok);
            if (!st) lmp_score_window(same ? bc->var : bc->refp, bc->var, tok, L, V, &bc->base.score);
        }
    }
    for (int64_t i = 0; lam && i < lam->n && !st; i++) {
        lmp_progress(ctx, "analyze: baseline LAMBADA passage", i, lam->n);
        if ((st = stop_if_interrupted(ctx))) break;
        const lmp_lambada_item *it = &lam->items[i];
        int64_t start, T;
        lmp_lambada_span(m, it, &start, &T);
        if (!(bc->lam_h[i] = malloc((size_t)(NL * T * d) * sizeof *bc->lam_h[i])))
            return lmp_fail(LMP_ENOMEM, "out of memory for cached LAMBADA hidden states");
        lmp_embed(m, it->ids + start, T, bc->x);
        /* Block by block, keeping each boundary; the last block and the judging are the shared
         * code's, started from the last boundary. */
        for (int64_t b = 0; b < NL - 1 && !st; b++) {
            memcpy(bc->lam_h[i] + b * T * d, bc->x, (size_t)(T * d) * sizeof *bc->x);
            st = lmp_block_forward(be, &m->arch, &base[b], T, bc->x, NULL, NULL);
        }
        if (st) break;
        memcpy(bc->lam_h[i] + (NL - 1) * T * d, bc->x, (size_t)(T * d) * sizeof *bc->x);
        int ok;
        st = lmp_lambada_judge_from(be, m, base, NL - 1, it, bc->x, bc->logits, &ok);
        bc->forwards += NL;
        bc->naive_forwards += NL;
        bc->base.lambada.passages++;
        bc->base.lambada.correct += ok;
    }
    return st;
}

int lmp_bcache_eval(lmp_bcache *bc, const lmp_block *blocks, int64_t first, const char *what,
                    lmp_bcache_result *out)
{
    const lmp_model *m = bc->m;
    const int64_t d = m->arch.dim, V = m->arch.vocab, NL = m->arch.n_layers;
    memset(out, 0, sizeof *out);
    bc->evals++;
    if (first >= NL) { /* nothing changed */
        *out = bc->base;
        return 0;
    }
    if (first < 0) first = 0;
    int st = 0;
    char label[512];
    snprintf(label, sizeof label, "%s: window", what);
    for (int t = 0; t < bc->n_texts && !st; t++) {
        lmp_bcache_text *bt = &bc->texts[t];
        for (int64_t w = 0; w < bt->n_windows && !st; w++) {
            lmp_progress(bc->ctx, label, w, bt->n_windows);
            if ((st = stop_if_interrupted(bc->ctx))) break;
            const int32_t *tok = bt->ids + w * bt->L;
            memcpy(bc->x, state_at(bc, bt, first, w), (size_t)(bt->L * d) * sizeof *bc->x);
            for (int64_t b = first; b < NL && !st; b++)
                st = lmp_block_forward(bc->be, &m->arch, &blocks[b], bt->L, bc->x, NULL, NULL);
            if (!st) st = lmp_head(bc->be, m, bt->L, bc->x, 1, bc->var);
            bc->forwards += NL - first;
            bc->naive_forwards += NL;
            if (!st) st = reference(bc, bt, w, tok);
            if (!st) lmp_score_window(bc->refp, bc->var, tok, bt->L, V, &out->score);
        }
    }
    snprintf(label, sizeof label, "%s: LAMBADA passage", what);
    for (int64_t i = 0; bc->lam && i < bc->lam->n && !st; i++) {
        lmp_progress(bc->ctx, label, i, bc->lam->n);
        if ((st = stop_if_interrupted(bc->ctx))) break;
        const lmp_lambada_item *it = &bc->lam->items[i];
        int64_t start, T;
        lmp_lambada_span(m, it, &start, &T);
        memcpy(bc->x, bc->lam_h[i] + first * T * d, (size_t)(T * d) * sizeof *bc->x);
        int ok;
        st = lmp_lambada_judge_from(bc->be, m, blocks, first, it, bc->x, bc->logits, &ok);
        bc->forwards += NL - first;
        bc->naive_forwards += NL;
        out->lambada.passages++;
        out->lambada.correct += ok;
    }
    return st;
}

void lmp_bcache_free(lmp_bcache *bc)
{
    for (int t = 0; bc->texts && t < bc->n_texts; t++) free(bc->texts[t].h);
    for (int64_t i = 0; bc->lam_h && i < bc->lam->n; i++) free(bc->lam_h[i]);
    free(bc->lam_h);
    free(bc->texts);
    free(bc->x);
    free(bc->var);
    free(bc->refp);
    free(bc->logits);
    memset(bc, 0, sizeof *bc);
}
