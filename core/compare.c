/* compare.c — see compare.h. */
#include "compare.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "error.h"
#include "host.h"
#include "pipeline.h"
#include "textfile.h"

double lmp_peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

/* An explicit path: a Hugging Face tokenizer.json, or a llama2.c tokenizer file.  Without one:
 * the GGUF file's own vocabulary, else tokenizer.bin or tok<vocab>.bin beside the model. */
int lmp_open_tokenizer(const lmp_model *m, const char *path, lmp_tokenizer **out)
{
    size_t n = path ? strlen(path) : 0;
    if (path && n > 5 && strcmp(path + n - 5, ".json") == 0) return lmp_tokenizer_load_hf(path, out);
    if (path) return lmp_tokenizer_load_llama2c(path, (int)m->arch.vocab, out);
    if (m->src_data && strncmp(m->format, "GGUF", 4) == 0) {
        int st = lmp_tokenizer_load_gguf(m->src_data, out);
        if (!st && lmp_tokenizer_vocab_size(*out) != m->arch.vocab)
            st = lmp_fail(LMP_EINVAL, "%s: the tokenizer has %d tokens, the model %lld", m->path,
                          lmp_tokenizer_vocab_size(*out), (long long)m->arch.vocab);
        return st;
    }
    const char *slash = strrchr(m->path, '/');
    int dirlen = slash ? (int)(slash - m->path) : 1;
    const char *dir = slash ? m->path : ".";
    char cand[2][4096];
    snprintf(cand[0], sizeof cand[0], "%.*s/tokenizer.bin", dirlen, dir);
    snprintf(cand[1], sizeof cand[1], "%.*s/tok%lld.bin", dirlen, dir, (long long)m->arch.vocab);
    for (int i = 0; i < 2; i++)
        if (access(cand[i], R_OK) == 0) return lmp_tokenizer_load_llama2c(cand[i], (int)m->arch.vocab, out);
    return lmp_fail(LMP_EINVAL, "%s: no tokenizer given and none found beside the model (%s, %s): "
                    "pass --tokenizer FILE or set model.tokenizer", m->path, cand[0], cand[1]);
}

int lmp_tokenize_file(const lmp_tokenizer *t, const char *path, int32_t **ids, int64_t *n)
{
    char *text;
    size_t len;
    int st = lmp_read_file(path, &text, &len);
    if (st) return st;
    st = lmp_tokenize(t, text, len, lmp_tokenizer_adds_bos(t), ids, n);
    free(text);
    return st ? lmp_fail_prefix(st, "%s", path) : 0;
}

void lmp_report_free(lmp_report *r)
{
    if (!r) return;
    for (int i = 0; r->results && i < r->n_results; i++) free(r->results[i].scores);
    free(r->results);
    free(r->text_tokens);
    lmp_model_free(r->model);
    free(r);
}

int lmp_run_compare(const lmp_run_config *c, const int *which, int n_which, lmp_report **out)
{
    *out = NULL;
    int n = which ? n_which : c->n_variants;
    lmp_model *m = NULL;
    lmp_tokenizer *tok = NULL;
    lmp_backend be = {0};
    lmp_windows calib = {0};
    lmp_block **blocks = NULL;
    lmp_report *r = calloc(1, sizeof *r);
    if (!r) return lmp_fail(LMP_ENOMEM, "out of memory");
    r->cfg = c;
    r->n_results = n;
    r->n_texts = c->n_eval_texts;
    r->results = calloc((size_t)n, sizeof *r->results);
    r->text_tokens = calloc((size_t)c->n_eval_texts + 1, sizeof *r->text_tokens);
    blocks = calloc((size_t)n, sizeof *blocks);
    int st = r->results && r->text_tokens && blocks ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    lmp_host_seed(c->seed);
    if (!st) st = lmp_backend_open((lmp_registry *)&c->reg, c->backend_name, c->backend_params, &be);
    if (!st) lmp_host_set_backend(&be);
    if (!st) st = lmp_model_load(c->model_path, &m);
    if (!st) st = lmp_open_tokenizer(m, c->tokenizer_path, &tok);
    r->model = m;
    if (!st && c->eval_seq_len > m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "%s: eval.seq_len %lld exceeds the model's context of %lld", c->path,
                      (long long)c->eval_seq_len, (long long)m->arch.seq_len);
    if (!st && c->calib_text && c->calib_seq_len > m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "%s: calibration.seq_len %lld exceeds the model's context of %lld",
                      c->path, (long long)c->calib_seq_len, (long long)m->arch.seq_len);
    if (!st && c->calib_text) {
        int32_t *ids = NULL;
        int64_t n_ids = 0;
        st = lmp_tokenize_file(tok, c->calib_text, &ids, &n_ids);
        if (!st) st = lmp_windows_cut(ids, n_ids, c->calib_samples, c->calib_seq_len, c->calib_random,
                                      c->calib_text, &calib);
        free(ids);
    }
    lmp_block *base = st ? NULL : lmp_model_blocks(m);
    if (!st && !base) st = lmp_fail_prefix(LMP_EIO, "%s", m->path);
    for (int i = 0; i < n && !st; i++) {
        lmp_variant_result *res = &r->results[i];
        res->v = &c->variants[which ? which[i] : i];
        res->scores = calloc((size_t)c->n_eval_texts + 1, sizeof *res->scores);
        if (!res->scores) {
            st = lmp_fail(LMP_ENOMEM, "out of memory");
            break;
        }
        double t0 = lmp_now_s();
        if (res->v->n_stages == 0) {
            blocks[i] = base; /* the unmodified model: evaluated without a copy */
            res->bits_per_weight = lmp_blocks_bits_per_weight(base, m->arch.n_layers);
        } else {
            st = lmp_compress(&be, m, res->v, &calib, &blocks[i]);
            if (!st) res->bits_per_weight = lmp_blocks_bits_per_weight(blocks[i], m->arch.n_layers);
        }
        res->seconds = lmp_now_s() - t0;
        res->peak_rss_mb = lmp_peak_rss_mb();
        if (!st) lmp_log(LMP_LOG_INFO, "variant %s: compressed in %.2f s", res->v->name, res->seconds);
    }
    double t0 = lmp_now_s();
    lmp_score *scores = calloc((size_t)n, sizeof *scores);
    if (!st && !scores) st = lmp_fail(LMP_ENOMEM, "out of memory");
    for (int t = 0; t < c->n_eval_texts && !st; t++) {
        int32_t *ids = NULL;
        int64_t n_ids = 0;
        st = lmp_tokenize_file(tok, c->eval_texts[t], &ids, &n_ids);
        r->text_tokens[t] = n_ids;
        if (!st) st = lmp_eval_text(&be, m, base, blocks, n, ids, n_ids, c->eval_seq_len, c->eval_max_windows,
                                    lmp_basename(c->eval_texts[t]), scores);
        for (int i = 0; i < n && !st; i++) r->results[i].scores[t] = scores[i];
        free(ids);
    }
    free(scores);
    if (!st && c->lambada) {
        lmp_lambada lam;
        lmp_lambada_score *ls = calloc((size_t)n, sizeof *ls);
        st = ls ? lmp_lambada_load(c->lambada, tok, c->lambada_max, &lam) : lmp_fail(LMP_ENOMEM, "out of memory");
        if (!st) {
            st = lmp_lambada_eval(&be, m, blocks, n, &lam, ls);
            lmp_lambada_free(&lam);
        }
        for (int i = 0; i < n && !st; i++) r->results[i].lambada = ls[i];
        free(ls);
    }
    r->eval_seconds = lmp_now_s() - t0;
    for (int i = 0; i < n; i++)
        if (m && blocks && blocks[i] && blocks[i] != base) lmp_blocks_free(blocks[i], m->arch.n_layers);
    free(blocks);
    lmp_windows_free(&calib);
    lmp_tokenizer_free(tok);
    lmp_host_set_backend(NULL);
    lmp_backend_close(&be);
    if (st) {
        lmp_report_free(r);
        return st;
    }
    *out = r;
    return 0;
}
