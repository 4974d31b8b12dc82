/* imatrix_collect.c — see imatrix_collect.h. */
#include "compress/imatrix_collect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/stream.h"
#include "model/tensor_names.h"

int lmp_imatrix_chunks(const int32_t *ids, int64_t n, int64_t C, int64_t max_chunks, int32_t bos, int32_t **chunks,
                       int64_t *n_chunks)
{
    int64_t k = C > 0 ? n / C : 0;
    if (max_chunks > 0 && k > max_chunks) k = max_chunks;
    *n_chunks = k;
    *chunks = malloc((size_t)(k * C) * sizeof **chunks + 1);
    if (!*chunks) return lmp_fail(LMP_ENOMEM, "out of memory for %lld chunks of %lld tokens", (long long)k, (long long)C);
    memcpy(*chunks, ids, (size_t)(k * C) * sizeof **chunks);
    for (int64_t c = 0; c < k && bos >= 0; c++) (*chunks)[c * C] = bos;
    return 0;
}

/* What the observer needs: where each linear of each block sums. */
typedef struct collector {
    const lmp_stream *s;       /* its blocks_done is the block running */
    lmp_imatrix_sums *out;
    int n_linears;
    int *slot;                 /* [n_layers * n_linears]: the entry of each linear */
} collector;

static int observe(void *ud, const int *lins, int n_lins, const float *x, int64_t T, int64_t C)
{
    const collector *c = ud;
    const int64_t b = c->s->blocks_done;
    for (int k = 0; k < n_lins; k++) {
        const int e = c->slot[b * c->n_linears + lins[k]];
        int seen = 0; /* GPT-2's q, k, v: one fused entry, summed once */
        for (int j = 0; j < k; j++) seen |= c->slot[b * c->n_linears + lins[j]] == e;
        if (seen) continue;
        lmp_imatrix_sum *s = &c->out->entries[e];
        if (s->n != C)
            return lmp_fail(LMP_EINVAL, "imatrix: %s has %lld inputs, the forward gave %lld", s->name,
                            (long long)s->n, (long long)C);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < C; j++) s->sum2[j] += (double)x[t * C + j] * (double)x[t * C + j];
        s->count += T;
    }
    return 0;
}

/* One entry per distinct GGUF name of every block linear, and each linear's slot. */
static int make_entries(const lmp_model *m, collector *c)
{
    const int64_t L = m->arch.n_layers;
    lmp_imatrix_sums *o = c->out;
    int st = 0;
    for (int64_t b = 0; b < L && !st; b++) {
        lmp_block blk;
        if ((st = lmp_block_init(&blk, (int)b, &m->arch))) {
            lmp_block_free_tables(&blk);
            break;
        }
        if (b == 0) {
            c->n_linears = blk.n_linears;
            c->slot = calloc((size_t)(L * blk.n_linears) + 1, sizeof *c->slot);
            o->entries = calloc((size_t)(L * blk.n_linears) + 1, sizeof *o->entries);
            if (!c->slot || !o->entries) st = lmp_fail(LMP_ENOMEM, "out of memory");
        }
        for (int i = 0; i < blk.n_linears && !st; i++) {
            const lmp_linear *l = &blk.linears[i];
            char name[128];
            if (lmp_gguf_linear_name(m->arch.family, b, l->role, "weight", name, sizeof name)) {
                st = lmp_fail(LMP_EUNSUPPORTED, "%s: llama.cpp has no tensor name for %s", m->path, l->name);
                break;
            }
            int64_t e = 0;
            while (e < o->n_entries && strcmp(o->entries[e].name, name) != 0) e++;
            if (e == o->n_entries) {
                lmp_imatrix_sum *s = &o->entries[o->n_entries++];
                snprintf(s->name, sizeof s->name, "%s", name);
                s->n = l->in;
                if (!(s->sum2 = calloc((size_t)l->in, sizeof *s->sum2))) st = lmp_fail(LMP_ENOMEM, "out of memory");
            }
            c->slot[b * c->n_linears + i] = (int)e;
        }
        lmp_block_free_tables(&blk);
    }
    return st;
}

int lmp_imatrix_collect(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, int32_t *chunks, int64_t n_chunks,
                        int64_t C, lmp_imatrix_sums *out, lmp_score *ppl)
{
    memset(out, 0, sizeof *out);
    out->chunk_count = n_chunks;
    out->chunk_size = C;
    lmp_stream s;
    collector c = {.s = &s, .out = out};
    memset(&s, 0, sizeof s);
    int st = make_entries(m, &c), begun = 0;
    if (!st) begun = 1, st = lmp_stream_begin(&s, ctx, be, m, 1, &chunks, &n_chunks, C, NULL, "imatrix");
    s.observe = observe;
    s.observe_ud = &c;
    s.score_from = C / 2; /* the perplexity llama-imatrix prints: each chunk's second half */
    lmp_ref_logprobs no_cache = {.store.fd = -1};
    lmp_score score;
    if (!st) st = lmp_stream_model(&s, m, &no_cache, 1, &score, NULL);
    if (!st && ppl) *ppl = score;
    if (begun) lmp_stream_free(&s);
    free(c.slot);
    if (st) lmp_imatrix_sums_free(out);
    return st;
}
