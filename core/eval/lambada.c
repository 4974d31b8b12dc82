/* lambada.c — see lambada.h. */
#include "eval/lambada.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "base/textfile.h"
#include "formats/json.h"
#include "model/forward.h"

/* Splits `text` as the harness does: ctx_len bytes of context, the rest (with its leading
 * space, and any trailing spaces of the context) is the target. */
static size_t split_point(const char *text, size_t len)
{
    size_t cut = len;
    while (cut > 0 && text[cut - 1] != ' ') cut--;
    if (cut == 0) return 0;  /* one word: empty context, the target is the whole text */
    cut--;                   /* the target starts with the space */
    while (cut > 0 && text[cut - 1] == ' ') cut--; /* trailing spaces move to the target */
    return cut;
}

static int tokenize_item(const lmp_tokenizer *t, const char *text, size_t len, lmp_lambada_item *it)
{
    const int bos = lmp_tokenizer_adds_bos(t);
    size_t cut = split_point(text, len);
    int32_t *ctx = NULL, *whole = NULL;
    int64_t n_ctx = 0, n_whole = 0;
    int st;
    if (cut == 0) { /* no context: the harness uses the prefix token (BOS, else EOS) as context */
        st = lmp_tokenize(t, text, len, 0, &ctx, &n_ctx);
        whole = st ? NULL : malloc((size_t)(n_ctx + 1) * sizeof *whole);
        if (!st && !whole) st = lmp_fail(LMP_ENOMEM, "out of memory");
        if (!st) {
            whole[0] = lmp_tokenizer_bos(t) >= 0 ? lmp_tokenizer_bos(t) : lmp_tokenizer_eos(t);
            memcpy(whole + 1, ctx, (size_t)n_ctx * sizeof *ctx);
            n_whole = n_ctx + 1;
            n_ctx = 1;
        }
    } else {
        st = lmp_tokenize(t, text, cut, bos, &ctx, &n_ctx);
        if (!st) st = lmp_tokenize(t, text, len, bos, &whole, &n_whole);
    }
    free(ctx);
    if (st) {
        free(whole);
        return st;
    }
    it->ids = whole;
    it->n_ids = n_whole;
    it->n_target = n_whole - n_ctx;
    return 0;
}

int lmp_lambada_load(const char *path, const lmp_tokenizer *t, int64_t max, lmp_lambada *out)
{
    memset(out, 0, sizeof *out);
    char *data;
    size_t len;
    int st = lmp_read_file(path, &data, &len);
    if (st) return st;
    int64_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += data[i] == '\n';
    out->items = calloc((size_t)lines + 1, sizeof *out->items);
    if (!out->items) st = lmp_fail(LMP_ENOMEM, "out of memory");
    char *line = data;
    for (int64_t no = 1; !st && line < data + len && (max <= 0 || out->n < max); no++) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        if (!end) end = data + len;
        if (end > line) {
            lmp_json *j;
            const char *text;
            char what[4096];
            snprintf(what, sizeof what, "%s:%lld", path, (long long)no);
            st = lmp_json_parse(line, (size_t)(end - line), what, &j);
            if (!st) {
                st = lmp_json_get_string(j, "text", what, &text);
                const lmp_json *tj = lmp_json_get(j, "text");
                if (!st && (st = tokenize_item(t, text, tj->str_len, &out->items[out->n])))
                    st = lmp_fail_prefix(st, "%s", what);
                if (!st && out->items[out->n].n_target == 0) { /* not counted yet: free it here */
                    free(out->items[out->n].ids);
                    st = lmp_fail(LMP_EINVAL, "%s: the passage has no target word", what);
                }
                if (!st) out->n++;
                lmp_json_free(j);
            }
        }
        line = end + 1;
    }
    free(data);
    if (!st && out->n == 0) st = lmp_fail(LMP_EINVAL, "%s: no passages", path);
    if (st) lmp_lambada_free(out);
    return st;
}

void lmp_lambada_free(lmp_lambada *l)
{
    for (int64_t i = 0; l->items && i < l->n; i++) free(l->items[i].ids);
    free(l->items);
    memset(l, 0, sizeof *l);
}

void lmp_lambada_span(const lmp_model *m, const lmp_lambada_item *it, int64_t *start, int64_t *T)
{
    *T = it->n_ids - 1;
    *start = 0;
    if (*T > m->arch.seq_len) { /* keep the last seq_len tokens */
        *start = *T - m->arch.seq_len;
        *T = m->arch.seq_len;
    }
}

int lmp_lambada_judge_from(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks, int64_t first_block,
                           const lmp_lambada_item *it, float *x, float *logits, int *correct)
{
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    int64_t T, start;
    lmp_lambada_span(m, it, &start, &T);
    int st = 0;
    for (int64_t l = first_block; l < m->arch.n_layers && !st; l++)
        st = lmp_block_forward(be, &m->arch, &blocks[l], T, x, NULL, NULL);
    const int64_t first = T - it->n_target; /* position predicting the first target token */
    if (!st) st = lmp_head(be, m, it->n_target, x + first * d, 0, logits);
    *correct = 1;
    for (int64_t j = 0; j < it->n_target && !st && *correct; j++) {
        const float *row = logits + j * V;
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        *correct = best == it->ids[start + first + j + 1];
    }
    return st;
}

/* Is every target token the argmax?  Runs the blocks on the input (all ids but the last) and
 * the head only on the positions that predict target tokens. */
static int passage_correct(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks,
                           const lmp_lambada_item *it, float *x, float *logits, int *correct)
{
    int64_t T, start;
    lmp_lambada_span(m, it, &start, &T);
    lmp_embed(m, it->ids + start, T, x);
    return lmp_lambada_judge_from(be, m, blocks, 0, it, x, logits, correct);
}

int lmp_lambada_eval(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, lmp_block *const *variants,
                     int n_var, const lmp_lambada *l, lmp_lambada_score *out)
{
    int64_t max_T = 0, max_target = 0;
    for (int64_t i = 0; i < l->n; i++) {
        if (l->items[i].n_ids > max_T) max_T = l->items[i].n_ids;
        if (l->items[i].n_target > max_target) max_target = l->items[i].n_target;
    }
    if (max_T > m->arch.seq_len) max_T = m->arch.seq_len;
    memset(out, 0, (size_t)n_var * sizeof *out);
    float *x = malloc((size_t)(max_T * m->arch.dim) * sizeof *x);
    float *logits = malloc((size_t)(max_target * m->arch.vocab) * sizeof *logits);
    int st = x && logits ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for LAMBADA");
    for (int64_t i = 0; i < l->n && !st; i++) {
        lmp_progress(ctx, "eval LAMBADA: passage", i, l->n);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        for (int v = 0; v < n_var && !st; v++) {
            int ok;
            st = passage_correct(be, m, variants[v], &l->items[i], x, logits, &ok);
            out[v].passages++;
            out[v].correct += ok;
        }
    }
    if (!st) lmp_progress(ctx, "eval LAMBADA: passage", l->n, l->n);
    free(x);
    free(logits);
    return st;
}

double lmp_lambada_acc(const lmp_lambada_score *s)
{
    return s->passages ? (double)s->correct / (double)s->passages : NAN;
}

double lmp_lambada_stderr(const lmp_lambada_score *s)
{
    if (s->passages < 2) return NAN;
    double p = lmp_lambada_acc(s);
    return sqrt(p * (1.0 - p) / (double)(s->passages - 1));
}
