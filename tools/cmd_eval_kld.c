/* cmd_eval_kld.c — `lmpress eval MODEL --kl-divergence-base BASE` (cmd_eval_kld.h).
 *
 * The pair runs exactly as compare runs an external variant against its base model: the text
 * tokenized with BASE's tokenizer, cut into eval.h's windows, BASE streamed block by block with
 * its log-probabilities kept (eval.h's cache), then MODEL streamed and scored against them
 * (eval/stream.h), so the KLD printed here is compare's KLD column for the same two files, text,
 * seq_len and max_windows.  The per-position statistics come from eval/kld_stats.h.  BASE may
 * instead be llama-perplexity's logits file (formats/llama_logits.h): against_logits_file. */
#include "cmd_eval_kld.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli.h"
#include "compare/compare.h"
#include "eval/kld_stats.h"
#include "eval/stream.h"
#include "formats/llama_logits.h"
#include "text/tokenizer_open.h"

/* MODEL and BASE must score the same token ids: the same vocabulary, string by string, and a
 * context that holds the windows. */
static int check_pair(const eval_kld_args *a, const direct_run *base, const lmp_model *q, lmp_tokenizer **q_tok,
                      int64_t L)
{
    if (q->arch.vocab != base->m->arch.vocab)
        return lmp_fail(LMP_EINVAL, "%s: %lld tokens in its head, the base %s %lld: the two cannot be compared",
                        a->model, (long long)q->arch.vocab, a->base, (long long)base->m->arch.vocab);
    if (L > q->arch.seq_len)
        return lmp_fail(LMP_EINVAL, "%s: windows of %lld tokens exceed its context of %lld (--seq-len)", a->model,
                        (long long)L, (long long)q->arch.seq_len);
    int st = lmp_open_tokenizer(q, a->tokenizer, q_tok);
    return st ? st : lmp_check_same_vocab(a->model, base->tok, *q_tok);
}

/* One model streamed over the windows: the base (is_ref: its log-probabilities into refs) or Q
 * (scored against refs, its per-position statistics into kld). */
static int stream_one(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, int32_t **ids, int64_t *windows,
                      int64_t L, int64_t from, lmp_ref_logprobs *refs, int is_ref, lmp_kld_stats *kld,
                      lmp_score *score, const char *what)
{
    lmp_stream s;
    int st = lmp_stream_begin(&s, ctx, be, m, 1, ids, windows, L, NULL, what);
    s.score_from = from;
    s.kld_stats = kld;
    if (!st) st = lmp_stream_model(&s, m, refs, is_ref, score, NULL);
    lmp_stream_free(&s);
    return st;
}

static void print_me(const char *label, lmp_mean_err v, double scale, const char *unit)
{
    printf("%-30s: %10.6f ± %10.6f%s\n", label, scale * v.mean, scale * v.err, unit);
}

static void print_text(const eval_kld_args *a, int64_t n, int64_t L, const lmp_score *sb, const lmp_score *sq,
                       const lmp_kld_summary *k)
{
    printf("model %s\nbase  %s\n", a->model, a->base);
    printf("text %s: %lld tokens, %lld windows of %lld, %lld scored%s\n", a->text, (long long)n,
           (long long)sq->windows, (long long)L, (long long)sq->scored, a->second_half ? " (second halves)" : "");
    printf("ppl %.6f (base %.6f), kld %.6f, top1 %.4f\n\n", lmp_score_ppl(sq), lmp_score_ppl(sb), lmp_score_kld(sq),
           lmp_score_top1(sq));
    printf("====== Perplexity statistics ======\n");
    print_me("Mean PPL(Q)", k->ppl, 1, "");
    print_me("Mean PPL(base)", k->ppl_base, 1, "");
    printf("%-30s: %6.2f%%\n", "Cor(ln(PPL(Q)), ln(PPL(base)))", 100.0 * k->ln_ppl_cor);
    print_me("Mean ln(PPL(Q)/PPL(base))", k->ln_ppl_ratio, 1, "");
    print_me("Mean PPL(Q)/PPL(base)", k->ppl_ratio, 1, "");
    print_me("Mean PPL(Q)-PPL(base)", k->ppl_diff, 1, "");
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", k->kld.mean, k->kld.err);
    for (int i = 0; i < LMP_KLD_N_PCT; i++) {
        const double f = lmp_kld_pct[i];
        if (f == 1) printf("Maximum KLD: %10.6f\n", k->kld_pct[i]);
        else if (f == 0) printf("Minimum KLD: %10.6f\n", k->kld_pct[i]);
        else if (f == 0.5) printf("Median  KLD: %10.6f\n", k->kld_pct[i]);
        else printf("%4.1f%%   KLD: %10.6f\n", 100 * f, k->kld_pct[i]);
    }
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * k->dp.mean, 100 * k->dp.err);
    for (int i = 0; i < LMP_DP_N_PCT; i++) {
        const double f = lmp_dp_pct[i];
        if (f == 1) printf("Maximum Δp: %6.3f%%\n", 100 * k->dp_pct[i]);
        else if (f == 0) printf("Minimum Δp: %6.3f%%\n", 100 * k->dp_pct[i]);
        else if (f == 0.5) printf("Median  Δp: %6.3f%%\n", 100 * k->dp_pct[i]);
        else printf("%4.1f%%   Δp: %6.3f%%\n", 100 * f, 100 * k->dp_pct[i]);
    }
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * k->dp_rms.mean, 100 * k->dp_rms.err);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * k->same_top.mean, 100 * k->same_top.err);
}

static void json_me(const char *key, lmp_mean_err v)
{
    printf(", \"%s\": %.17g, \"%s_err\": %.17g", key, v.mean, key, v.err);
}

static void print_json(const eval_kld_args *a, int64_t n, int64_t L, const lmp_score *sb, const lmp_score *sq,
                       const lmp_kld_summary *k)
{
    printf("{\"model\": ");
    print_json_string(a->model);
    printf(", \"base\": ");
    print_json_string(a->base);
    printf(", \"text\": ");
    print_json_string(a->text);
    printf(", \"seq_len\": %lld, \"tokens\": %lld, \"windows\": %lld, \"scored\": %lld, \"second_half\": %s",
           (long long)L, (long long)n, (long long)sq->windows, (long long)sq->scored, a->second_half ? "true" : "false");
    /* the numbers compare prints for the pair, then llama-perplexity's statistics */
    printf(", \"ppl\": %.17g, \"ppl_base\": %.17g, \"kld\": %.17g, \"top1\": %.17g", lmp_score_ppl(sq),
           lmp_score_ppl(sb), lmp_score_kld(sq), lmp_score_top1(sq));
    printf(", \"stats\": {\"count\": %lld", (long long)k->count);
    json_me("ppl", k->ppl);
    json_me("ppl_base", k->ppl_base);
    printf(", \"ln_ppl_cor\": %.17g", k->ln_ppl_cor);
    json_me("ln_ppl_ratio", k->ln_ppl_ratio);
    json_me("ppl_ratio", k->ppl_ratio);
    json_me("ppl_diff", k->ppl_diff);
    json_me("kld", k->kld);
    json_me("dp", k->dp);
    json_me("dp_rms", k->dp_rms);
    json_me("same_top", k->same_top);
    printf(", \"kld_percentiles\": {");
    for (int i = 0; i < LMP_KLD_N_PCT; i++) printf("%s\"%g\": %.9g", i ? ", " : "", 100 * lmp_kld_pct[i], k->kld_pct[i]);
    printf("}, \"dp_percentiles\": {");
    for (int i = 0; i < LMP_DP_N_PCT; i++) printf("%s\"%g\": %.9g", i ? ", " : "", 100 * lmp_dp_pct[i], k->dp_pct[i]);
    printf("}}}\n");
}

static int print_all(const eval_kld_args *a, int64_t n, int64_t L, const lmp_score *sb, const lmp_score *sq,
                     lmp_kld_stats *kld)
{
    lmp_kld_summary k;
    lmp_kld_summarize(kld, &k);
    if (a->json) print_json(a, n, L, sb, sq, &k);
    else print_text(a, n, L, sb, sq, &k);
    return fflush(stdout) || ferror(stdout) ? lmp_fail(LMP_EIO, "cannot write to standard output") : 0;
}

/* BASE is llama-perplexity's logits file (formats/llama_logits.h): its chunks are the windows (BOS
 * put at each chunk's start when MODEL's tokenizer adds one, as llama-perplexity does), and its
 * stored log-probabilities of each chunk's second half are the reference MODEL is scored against. */
static int against_logits_file(lmp_ctx *ctx, const eval_kld_args *a, lmp_kld_stats *kld, lmp_score *sb,
                               lmp_score *sq, int64_t *n_tokens, int64_t *L_out)
{
    lmp_llama_logits f;
    direct_run d;
    memset(&d, 0, sizeof d);
    lmp_ref_logprobs refs = {.store.fd = -1};
    int32_t *ids = NULL;
    float *rows = NULL;
    int st = lmp_llama_logits_open(a->base, &f);
    const int64_t L = f.n_ctx, V = f.n_vocab, from = L / 2;
    int64_t windows = st ? 0 : lmp_eval_windows(f.n_chunk * L, L, a->max_windows);
    if (!st && a->text)
        st = lmp_fail(LMP_EINVAL, "--kl-divergence-base %s is llama-perplexity's logits file: it holds its own tokens "
                      "(leave out --text)", a->base);
    if (!st && a->seq_len && a->seq_len != L)
        st = lmp_fail(LMP_EINVAL, "--seq-len %lld: the logits file %s was computed with chunks of %lld",
                      (long long)a->seq_len, a->base, (long long)L);
    const int opened = !st;
    if (!st) st = direct_open(ctx, &d, a->model, a->tokenizer, a->backend);
    if (!st && d.m->arch.vocab != V)
        st = lmp_fail(LMP_EINVAL, "%s: %lld tokens in its head, the logits file %s %lld", a->model,
                      (long long)d.m->arch.vocab, a->base, (long long)V);
    if (!st && L > d.m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "%s: the logits file's chunks of %lld tokens exceed its context of %lld", a->model,
                      (long long)L, (long long)d.m->arch.seq_len);
    if (!st && !(ids = malloc((size_t)(windows * L) * sizeof *ids)))
        st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st) {
        memcpy(ids, f.tokens, (size_t)(windows * L) * sizeof *ids);
        const int bos = lmp_tokenizer_adds_bos(d.tok) ? lmp_tokenizer_bos(d.tok) : -1;
        for (int64_t w = 0; w < windows && bos >= 0; w++) ids[w * L] = bos;
    }
    /* the cache holds rows from..L-1 of each window; the file the scored ones, from..L-2 */
    if (!st) st = lmp_ref_logprobs_init(ctx, &refs, windows, (L - from) * V);
    if (!st && !(rows = calloc((size_t)((L - from) * V), sizeof *rows))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t w = 0; w < windows && !st; w++) {
        st = lmp_llama_logits_chunk(&f, w, rows);
        if (!st) st = lmp_ref_logprobs_put(&refs, w, rows);
    }
    kld->llama_cut = 1; /* the file's values below -16 are clamped: llama-perplexity leaves them out */
    if (!st) st = stream_one(ctx, &d.be, d.m, &ids, &windows, L, from, &refs, 0, kld, sq, "eval model");
    if (!st) { /* the base's own numbers, from the file's log-probabilities of the next tokens */
        *sb = (lmp_score){.windows = windows, .scored = kld->count, .nll_sum = kld->sum_nll_base};
        sq->kld_sum = kld->sum_kld; /* llama-perplexity's KL, not the whole vocabulary's */
        *n_tokens = f.n_chunk * L;
        *L_out = L;
    }
    free(rows);
    free(ids);
    lmp_ref_logprobs_free(&refs);
    if (opened) direct_close(&d);
    lmp_llama_logits_close(&f);
    return st;
}

int cmd_eval_kld(lmp_ctx *ctx, const eval_kld_args *a)
{
    if (lmp_llama_logits_is(a->base)) {
        lmp_kld_stats kld = {0};
        lmp_score sb = {0}, sq = {0};
        int64_t n = 0, L = 0;
        eval_kld_args shown = *a;
        shown.second_half = 1;
        shown.text = a->base;
        int st = against_logits_file(ctx, a, &kld, &sb, &sq, &n, &L);
        if (!st) st = print_all(&shown, n, L, &sb, &sq, &kld);
        lmp_kld_stats_free(&kld);
        return st ? fail() : 0;
    }
    if (!a->text) { /* lmpress.c refuses it as a usage error first; kept for any other caller */
        lmp_fail(LMP_EINVAL, "--kl-divergence-base %s is a model: compare on --text FILE", a->base);
        return fail();
    }

    direct_run base;
    lmp_model *q = NULL;
    lmp_tokenizer *q_tok = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, windows = 0, L = a->seq_len;
    lmp_ref_logprobs refs = {.store.fd = -1};
    lmp_kld_stats kld = {0};
    lmp_score sb = {0}, sq = {0};
    /* Both files and the text are read and checked before any forward, so a bad one fails at once. */
    int st = direct_open(ctx, &base, a->base, a->tokenizer, a->backend);
    if (st) lmp_fail_prefix(st, "--kl-divergence-base");
    if (!st && L == 0) L = base.m->arch.seq_len;
    if (!st && L > base.m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "--seq-len %lld exceeds the base model's context of %lld", (long long)L,
                      (long long)base.m->arch.seq_len);
    if (!st) st = lmp_model_load(a->model, &q);
    if (!st) st = check_pair(a, &base, q, &q_tok, L);
    if (!st) st = lmp_tokenize_file(base.tok, a->text, &ids, &n);
    if (!st) windows = lmp_eval_windows(n, L, a->max_windows);
    if (!st && windows == 0)
        st = lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one evaluation window of %lld", a->text,
                      (long long)n, (long long)L);
    /* --score-second-half: llama-perplexity scores positions L/2 .. L-2 of each chunk; the
     * base's cache then holds those rows alone */
    const int64_t from = a->second_half ? L / 2 : 0;
    if (!st) st = lmp_ref_logprobs_init(ctx, &refs, windows, (L - from) * base.m->arch.vocab);
    if (!st) st = stream_one(ctx, &base.be, base.m, &ids, &windows, L, from, &refs, 1, NULL, &sb, "eval base");
    if (!st && !isfinite(sb.nll_sum))
        st = lmp_fail(LMP_EINVAL, "%s: a non-finite negative log-likelihood on %s: no base to compare with", a->base,
                      a->text);
    if (!st) st = stream_one(ctx, &base.be, q, &ids, &windows, L, from, &refs, 0, &kld, &sq, "eval model");
    if (!st && (!isfinite(sq.nll_sum) || !isfinite(sq.kld_sum)))
        st = lmp_fail(LMP_EINVAL, "%s: a non-finite %s on %s", a->model, isfinite(sq.nll_sum) ? "KL divergence" :
                      "negative log-likelihood", a->text);
    if (!st) st = print_all(a, n, L, &sb, &sq, &kld);
    lmp_kld_stats_free(&kld);
    lmp_ref_logprobs_free(&refs);
    free(ids);
    lmp_tokenizer_free(q_tok);
    lmp_model_free(q);
    direct_close(&base);
    return st ? fail() : 0;
}
