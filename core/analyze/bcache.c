/* bcache.c — see bcache.h. */
#include "analyze/bcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

/* Windows and passages: each is one block forward per block. */
static int64_t n_states(const lmp_bcache *bc)
{
    int64_t n = bc->lam ? bc->lam->n : 0;
    for (int t = 0; t < bc->n_texts; t++) n += bc->n_windows[t];
    return n;
}

/* count floats from one store to another through buf (one window or passage at a time). */
static int copy_floats(const lmp_spill *from, int64_t from_off, lmp_spill *to, int64_t to_off, int64_t count, float *buf)
{
    int st = lmp_spill_read(from, from_off, count, buf);
    return st ? st : lmp_spill_write(to, to_off, count, buf);
}

/* Boundary b saved from the stream's states (load 0), or loaded into them (load 1). */
static int sync_boundary(lmp_bcache *bc, lmp_stream *s, int64_t b, int load)
{
    const int64_t d = bc->m->arch.dim;
    int64_t off = b * bc->per;
    int st = 0;
    for (int t = 0; t < bc->n_texts && !st; t++) {
        lmp_spill *h = &s->texts[t].h;
        for (int64_t w = 0; w < bc->n_windows[t] && !st; w++, off += bc->L * d)
            st = load ? copy_floats(&bc->h, off, h, w * bc->L * d, bc->L * d, s->x)
                      : copy_floats(h, w * bc->L * d, &bc->h, off, bc->L * d, s->x);
    }
    for (int64_t i = 0; bc->lam && i < bc->lam->n && !st; i++) {
        int64_t start, T;
        lmp_lambada_span(bc->m, &bc->lam->items[i], &start, &T);
        st = load ? copy_floats(&bc->h, off, &s->lam_h, s->lam_off[i], T * d, s->x)
                  : copy_floats(&s->lam_h, s->lam_off[i], &bc->h, off, T * d, s->x);
        off += T * d;
    }
    return st;
}

/* The texts' scores pooled, in text order. */
static void pool(const lmp_score *scores, int n, lmp_score *out)
{
    memset(out, 0, sizeof *out);
    for (int t = 0; t < n; t++) {
        out->windows += scores[t].windows;
        out->scored += scores[t].scored;
        out->nll_sum += scores[t].nll_sum;
        out->kld_sum += scores[t].kld_sum;
        out->top1_hits += scores[t].top1_hits;
    }
}

/* Blocks first..n-1 of src through the stream s (its states at boundary `first`), each kept at
 * boundary b first when keep is set; then the scores. */
static int run_blocks(lmp_bcache *bc, lmp_stream *s, const lmp_block_source *src, int64_t first, int keep,
                      lmp_bcache_result *out)
{
    const int64_t NL = bc->m->arch.n_layers;
    lmp_score *scores = calloc((size_t)bc->n_texts + 1, sizeof *scores);
    int st = scores ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t b = first; b < NL && !st; b++) {
        lmp_progress(bc->ctx, s->label, b - first, NL - first);
        if (keep && (st = sync_boundary(bc, s, b, 0))) break;
        lmp_block blk;
        if ((st = src->get(src->self, b, &blk))) break;
        st = lmp_stream_block(s, &blk);
        lmp_block_free(&blk);
    }
    if (!st) st = lmp_stream_finish(s, bc->refs, 0, scores, &out->lambada);
    if (!st) pool(scores, bc->n_texts, &out->score);
    const int64_t n = n_states(bc);
    bc->forwards += (NL - first) * n;
    bc->naive_forwards += NL * n;
    free(scores);
    return st;
}

int lmp_bcache_build(lmp_bcache *bc, lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m,
                     const lmp_block_source *base, int n_texts, int32_t *const *ids, const int64_t *n_windows,
                     int64_t L, lmp_ref_logprobs *refs, const lmp_lambada *lam)
{
    *bc = (lmp_bcache){.ctx = ctx, .be = be, .m = m, .n_texts = n_texts, .ids = ids, .n_windows = n_windows,
                       .L = L, .refs = refs, .lam = lam, .h = {.fd = -1}};
    const int64_t d = m->arch.dim, NL = m->arch.n_layers;
    for (int t = 0; t < n_texts; t++) bc->per += n_windows[t] * L * d;
    for (int64_t i = 0; lam && i < lam->n; i++) {
        int64_t start, T;
        lmp_lambada_span(m, &lam->items[i], &start, &T);
        bc->per += T * d;
    }
    /* the reference pass that filled refs: one full forward of every window */
    for (int t = 0; t < n_texts; t++) bc->forwards += NL * n_windows[t];
    bc->naive_forwards = bc->forwards;
    int st = lmp_spill_init(ctx, &bc->h, NL * bc->per, LMP_STREAM_MEMORY_BUDGET, "the baseline's block boundaries");
    lmp_stream s;
    memset(&s, 0, sizeof s);
    if (!st) st = lmp_stream_begin(&s, ctx, be, m, n_texts, ids, n_windows, L, lam, "analyze: baseline");
    if (!st) st = run_blocks(bc, &s, base, 0, 1, &bc->base);
    lmp_stream_free(&s);
    return st;
}

int lmp_bcache_eval(lmp_bcache *bc, const lmp_block_source *blocks, int64_t first, const char *what,
                    lmp_bcache_result *out)
{
    memset(out, 0, sizeof *out);
    bc->evals++;
    if (first >= bc->m->arch.n_layers) { /* nothing changed */
        *out = bc->base;
        return 0;
    }
    if (first < 0) first = 0;
    lmp_stream s;
    /* the embedding it starts with is overwritten by boundary `first` (a small waste next to
     * the blocks) */
    int st = lmp_stream_begin(&s, bc->ctx, bc->be, bc->m, bc->n_texts, bc->ids, bc->n_windows, bc->L, bc->lam, what);
    if (!st) st = sync_boundary(bc, &s, first, 1);
    s.blocks_done = first;
    if (!st) st = run_blocks(bc, &s, blocks, first, 0, out);
    lmp_stream_free(&s);
    return st;
}

void lmp_bcache_free(lmp_bcache *bc)
{
    lmp_spill_free(&bc->h);
    memset(bc, 0, sizeof *bc);
    bc->h.fd = -1;
}
