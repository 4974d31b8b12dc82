/* stream.c — see stream.h. */
#include "eval/stream.h"

#include "model/expert_pager.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "eval/kld_stats.h"
#include "model/forward.h"

int lmp_stream_begin(lmp_stream *s, lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, int n_texts,
                     int32_t *const *ids, const int64_t *n_windows, int64_t L, const lmp_lambada *lam,
                     const char *what)
{
    memset(s, 0, sizeof *s);
    s->lam_h.fd = -1;
    s->ctx = ctx;
    s->be = be;
    s->m = m;
    s->n_texts = n_texts;
    s->lam = lam;
    snprintf(s->label, sizeof s->label, "%s: block", what);
    snprintf(s->what, sizeof s->what, "%s", what);
    const int64_t d = m->arch.dim;
    int64_t max_T = L, lam_floats = 0;
    s->texts = calloc((size_t)n_texts + 1, sizeof *s->texts);
    if (lam) s->lam_off = calloc((size_t)lam->n + 1, sizeof *s->lam_off);
    if (!s->texts || (lam && !s->lam_off)) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int t = 0; t < n_texts; t++) s->texts[t].h.fd = -1;
    for (int64_t i = 0; lam && i < lam->n; i++) {
        int64_t start, T;
        lmp_lambada_span(m, &lam->items[i], &start, &T);
        s->lam_off[i] = lam_floats;
        lam_floats += T * d;
        if (T > max_T) max_T = T;
    }
    if (!(s->x = malloc((size_t)(max_T * d) * sizeof *s->x))) return lmp_fail(LMP_ENOMEM, "out of memory");
    int st = 0;
    for (int t = 0; t < n_texts && !st; t++) {
        lmp_stream_text *st_t = &s->texts[t];
        st_t->ids = ids[t];
        st_t->n_windows = n_windows[t];
        st_t->L = L;
        st = lmp_spill_init(ctx, &st_t->h, n_windows[t] * L * d, LMP_STREAM_MEMORY_BUDGET,
                            "evaluation windows' hidden states");
        for (int64_t w = 0; w < n_windows[t] && !st; w++) {
            lmp_embed(m, ids[t] + w * L, L, s->x);
            st = lmp_spill_write(&st_t->h, w * L * d, L * d, s->x);
        }
    }
    if (!st && lam) st = lmp_spill_init(ctx, &s->lam_h, lam_floats, LMP_STREAM_MEMORY_BUDGET, "LAMBADA passages' hidden states");
    for (int64_t i = 0; lam && i < lam->n && !st; i++) {
        int64_t start, T;
        lmp_lambada_span(m, &lam->items[i], &start, &T);
        lmp_embed(m, lam->items[i].ids + start, T, s->x);
        st = lmp_spill_write(&s->lam_h, s->lam_off[i], T * d, s->x);
    }
    return st;
}

/* One state of T tokens at off in store h through blk: in place when the store is in memory. */
static int advance(lmp_stream *s, lmp_spill *h, int64_t off, int64_t T, const lmp_block *blk,
                   lmp_expert_pager *pager)
{
    const int64_t n = T * s->m->arch.dim;
    float *x = lmp_spill_at(h, off);
    int st = x ? 0 : lmp_spill_read(h, off, n, x = s->x);
    if (!st) st = lmp_block_forward_paged(s->be, &s->m->arch, blk, pager, T, 0, x, NULL, s->observe, s->observe_ud);
    if (!st && x == s->x) st = lmp_spill_write(h, off, n, x);
    return st;
}

int lmp_stream_block(lmp_stream *s, const lmp_block *blk)
{
    return lmp_stream_block_paged(s, blk, NULL);
}

int lmp_stream_block_paged(lmp_stream *s, const lmp_block *blk, lmp_expert_pager *pager)
{
    const int64_t d = s->m->arch.dim;
    int st = lmp_host_stop_if_interrupted(s->ctx);
    for (int t = 0; t < s->n_texts && !st; t++) {
        lmp_stream_text *tx = &s->texts[t];
        for (int64_t w = 0; w < tx->n_windows && !st; w++) st = advance(s, &tx->h, w * tx->L * d, tx->L, blk, pager);
    }
    for (int64_t i = 0; s->lam && i < s->lam->n && !st; i++) {
        int64_t start, T;
        lmp_lambada_span(s->m, &s->lam->items[i], &start, &T);
        st = advance(s, &s->lam_h, s->lam_off[i], T, blk, pager);
    }
    if (!st) s->blocks_done++;
    return st;
}

int lmp_stream_finish(lmp_stream *s, lmp_ref_logprobs *refs, int is_ref, lmp_score *scores,
                      lmp_lambada_score *lam_out)
{
    const lmp_model *m = s->m;
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    if (s->blocks_done != m->arch.n_layers)
        return lmp_fail(LMP_EINVAL, "%s: %lld of %lld blocks were run", s->label, (long long)s->blocks_done,
                        (long long)m->arch.n_layers);
    int64_t L = 0, max_target = 1;
    for (int t = 0; t < s->n_texts; t++)
        if (s->texts[t].L > L) L = s->texts[t].L;
    for (int64_t i = 0; s->lam && i < s->lam->n; i++)
        if (s->lam->items[i].n_target > max_target) max_target = s->lam->items[i].n_target;
    float *var = malloc((size_t)(L * V) * sizeof *var + 1), *ref = is_ref ? var : malloc((size_t)(L * V) * sizeof *ref + 1);
    float *logits = malloc((size_t)(max_target * V) * sizeof *logits);
    int st = var && ref && logits ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for %lld x %lld log-probabilities",
                                                 (long long)L, (long long)V);
    /* the head over every window and passage: for a large vocabulary a good part of the time */
    const double t0 = lmp_now_s();
    char label[300];
    snprintf(label, sizeof label, "%s: head and scores, window", s->what);
    int64_t steps = s->lam ? s->lam->n : 0, step = 0;
    for (int t = 0; t < s->n_texts; t++) steps += s->texts[t].n_windows;
    for (int t = 0; t < s->n_texts && !st; t++) {
        lmp_stream_text *tx = &s->texts[t];
        memset(&scores[t], 0, sizeof scores[t]);
        const int64_t f = s->score_from > 0 && s->score_from < tx->L - 1 ? s->score_from : 0;
        if (f && refs && refs[t].have && refs[t].window_floats != (tx->L - f) * V)
            st = lmp_fail(LMP_EINVAL, "%s: the reference's cache holds whole windows, not the scored part", s->label);
        if (f && !is_ref && !(refs && refs[t].have))
            st = lmp_fail(LMP_EINVAL, "%s: a window's second half is scored against a cached reference only", s->label);
        for (int64_t w = 0; w < tx->n_windows && !st; w++) {
            lmp_progress(s->ctx, label, step++, steps);
            const int32_t *tok = tx->ids + w * tx->L;
            float *x = lmp_spill_at(&tx->h, w * tx->L * d); /* in place when in memory */
            if (!(st = lmp_host_stop_if_interrupted(s->ctx)) && !x) st = lmp_spill_read(&tx->h, w * tx->L * d, tx->L * d, x = s->x);
            if (!st) st = lmp_head(s->be, m, tx->L - f, x + f * d, 1, var);
            if (!st && is_ref && refs[t].have) st = lmp_ref_logprobs_put(&refs[t], w, var);
            if (!st && !is_ref) st = lmp_ref_window(s->be, m, NULL, &refs[t], w, tok, tx->L, ref);
            if (!st) lmp_score_window(ref, var, tok + f, tx->L - f, V, &scores[t]);
            if (!st && s->kld_stats && !is_ref) st = lmp_kld_stats_window(s->kld_stats, ref, var, tok + f, tx->L - f, V);
        }
    }
    if (s->lam && lam_out) memset(lam_out, 0, sizeof *lam_out);
    for (int64_t i = 0; s->lam && i < s->lam->n && !st; i++) {
        int64_t start, T;
        int ok = 0;
        lmp_progress(s->ctx, label, step++, steps);
        lmp_lambada_span(m, &s->lam->items[i], &start, &T);
        st = lmp_spill_read(&s->lam_h, s->lam_off[i], T * d, s->x);
        if (!st) st = lmp_lambada_judge_from(s->be, m, NULL, m->arch.n_layers, &s->lam->items[i], s->x, logits, &ok);
        if (!st && lam_out) {
            lam_out->passages++;
            lam_out->correct += ok;
        }
    }
    if (!st && steps) lmp_progress(s->ctx, label, steps, steps);
    s->finish_s = lmp_now_s() - t0;
    free(var);
    if (!is_ref) free(ref);
    free(logits);
    return st;
}

void lmp_stream_free(lmp_stream *s)
{
    for (int t = 0; s->texts && t < s->n_texts; t++) lmp_spill_free(&s->texts[t].h);
    free(s->texts);
    lmp_spill_free(&s->lam_h);
    free(s->lam_off);
    free(s->x);
    memset(s, 0, sizeof *s);
}

int lmp_stream_model(lmp_stream *s, const lmp_model *m, lmp_ref_logprobs *refs, int is_ref, lmp_score *scores,
                     lmp_lambada_score *lam_out)
{
    int st = 0, said = 0;
    for (int64_t b = 0; b < m->arch.n_layers && !st; b++) {
        lmp_block blk;
        lmp_progress(s->ctx, s->label, b, m->arch.n_layers);
        /* a mixture of experts' block above the budget: its routed experts a group at a time */
        const int64_t per = lmp_expert_group_size(&m->arch, b, s->ctx->expert_group_bytes);
        const char *why = !per ? NULL : !lmp_model_copies_experts(m) ? "its file format is read a block at a time"
                          : s->observe ? "every linear's input is observed" : NULL;
        if (why && !said++)
            lmp_log(s->ctx, LMP_LOG_WARN, "%s: block %lld's routed experts are held whole, above memory.expert_group_mb "
                    "= %.0f, because %s", s->what, (long long)b, (double)s->ctx->expert_group_bytes / 1048576.0, why);
        if (per && !why) {
            lmp_model_experts from_file = {.m = m, .block = b, .per_group = per};
            lmp_expert_pager pager;
            lmp_expert_pager_init(&pager, m->arch.n_experts, per, lmp_model_experts_load, &from_file);
            if ((st = lmp_model_block_copy_experts(m, b, 1, 0, 0, &blk))) break;
            st = lmp_stream_block_paged(s, &blk, &pager);
            lmp_expert_pager_drop(&pager);
            lmp_block_free(&blk);
            continue;
        }
        if ((st = lmp_model_block_copy(m, b, &blk))) break;
        st = lmp_stream_block(s, &blk);
        lmp_block_free(&blk);
    }
    if (!st) lmp_progress(s->ctx, s->label, m->arch.n_layers, m->arch.n_layers);
    return st ? st : lmp_stream_finish(s, refs, is_ref, scores, lam_out);
}
