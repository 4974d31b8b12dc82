/* compare.c — see compare.h. */
#include "compare/compare.h"

#include <math.h>
#include <stdio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/file_hash.h"
#include "base/hash.h"
#include "base/input_file.h"
#include "base/log.h"
#include "base/spill.h"
#include "base/textfile.h"
#include "compare/eta.h"
#include "compress/calib_states.h"
#include "compress/imatrix_map.h"
#include "compress/pipeline.h"
#include "formats/gguf.h"
#include "model/block_store.h"
#include "model/expert_pager.h"
#include "model/forward.h"
#include "plugin/backend.h"
#include "text/tokenizer_open.h"
#include "train/rotation_learn.h"

/* VmHWM of /proc/self/status: the peak that /proc/self/clear_refs resets (getrusage's
 * ru_maxrss is the process's whole-life peak on older kernels). */
double lmp_peak_rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb >= 0) return (double)kb / 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

void lmp_peak_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f); /* 5: reset the peak RSS to the current RSS (proc(5)) */
    fclose(f);
}

void lmp_run_fingerprint(const lmp_run_config *c, char config_hash[17], char fingerprint[17])
{
    uint64_t h = c->text_fnv1a;
    snprintf(config_hash, 17, "%016llx", (unsigned long long)h);
    /* The NULs keep "ab"+"c" apart from "a"+"bc". */
    h = lmp_fnv1a64(h, c->backend_name, strlen(c->backend_name) + 1);
    h = lmp_fnv1a64(h, LMP_VERSION, sizeof LMP_VERSION);
    snprintf(fingerprint, 17, "%016llx", (unsigned long long)h);
}

/* The run's fingerprint (hex) with the content of every file the run reads folded in: the
 * model, the tokenizer (given or found beside it), the evaluation, calibration and LAMBADA texts,
 * the importance matrices and the external variants' models.  A report of other inputs is then
 * not resumed (file_hash.h says what of a large file is read). */
static int fold_inputs(const lmp_run_state *run, char fingerprint[17])
{
    const lmp_run_config *c = run->c;
    uint64_t h = strtoull(fingerprint, NULL, 16);
    int st = lmp_file_hash_fold(c->model_path, &h);
    char beside[4096];
    const char *tok = c->tokenizer_path;
    if (!tok && strncmp(run->m->format, "GGUF", 4) != 0 && lmp_tokenizer_beside(run->m, beside, sizeof beside) == 0)
        tok = beside;
    if (!st) st = lmp_file_hash_fold(tok, &h);
    for (int t = 0; t < c->n_eval_texts && !st; t++) st = lmp_file_hash_fold(c->eval_texts[t], &h);
    if (!st) st = lmp_file_hash_fold(c->calib_text, &h);
    if (!st) st = lmp_file_hash_fold(c->lambada, &h);
    if (!st) st = lmp_file_hash_fold(c->imatrix_path, &h);
    for (int i = 0; i < c->n_variants && !st; i++) {
        st = lmp_file_hash_fold(c->variants[i].imatrix_path, &h);
        if (!st) st = lmp_file_hash_fold(c->variants[i].model_path, &h);
    }
    snprintf(fingerprint, 17, "%016llx", (unsigned long long)h);
    return st;
}

/* The temporary files the run will need, checked before any work: the reference's
 * log-probabilities beyond their memory budget, and for an export each variant's blocks (at most
 * their f32 size: codes take less).  An unusable $TMPDIR is refused here rather than after the
 * first variant. */
static int check_tmpdir(const lmp_run_state *run, const lmp_report *r)
{
    const lmp_model *m = run->m;
    double bytes = 0;
    for (int t = 0; t < r->n_texts; t++) {
        const double ref = (double)r->texts[t].windows * (double)run->c->eval_seq_len * (double)m->arch.vocab * 4.0;
        if (ref > (double)LMP_REF_MEMORY_BUDGET) bytes += ref;
    }
    double blocks = run->hooks->compressed ? (double)lmp_model_block_linear_params(m) * 4.0 : 0;
    if (bytes + blocks <= 0) return 0;
    return lmp_spill_check_dir(bytes + blocks, blocks > 0 ? "the blocks of each variant to export and the "
                                                              "reference's log-probabilities"
                                                            : "the reference's log-probabilities");
}

/* ---- stage 1: prepare ------------------------------------------------------------------------ */



/* A text's key: its basename, unless another text shares it; then its path (and "#k" for the
 * k-th copy of the same path), so JSON keys are unique. */
static int text_keys(const lmp_run_config *c, lmp_text_info *texts)
{
    for (int t = 0; t < c->n_eval_texts; t++) {
        const char *base = lmp_basename(c->eval_texts[t]);
        int clash = 0, copies = 0;
        for (int u = 0; u < c->n_eval_texts; u++) {
            if (u != t && strcmp(lmp_basename(c->eval_texts[u]), base) == 0) clash = 1;
            if (u < t && strcmp(c->eval_texts[u], c->eval_texts[t]) == 0) copies++;
        }
        char key[4200];
        if (!clash) snprintf(key, sizeof key, "%s", base);
        else if (!copies) snprintf(key, sizeof key, "%s", c->eval_texts[t]);
        else snprintf(key, sizeof key, "%s#%d", c->eval_texts[t], copies + 1);
        texts[t].path = c->eval_texts[t];
        if (!(texts[t].key = strdup(key))) return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    return 0;
}

/* An external variant runs as its own model (its embedding, blocks, final norm, head and
 * hyper-parameters) and is scored against the base's log-probabilities by token id, so the
 * vocabularies must be the same; the other shapes must agree too, so that its per-linear record
 * lines up with the base's linears and the row compares like with like. */
static int check_external_arch(const lmp_variant *v, const lmp_model *base, const lmp_model *x)
{
    const lmp_arch *a = &base->arch, *b = &x->arch;
    static const char *const names[] = {"vocab", "dim", "hidden", "n_layers", "n_heads", "n_kv_heads"};
    const int64_t av[] = {a->vocab, a->dim, a->hidden, a->n_layers, a->n_heads, a->n_kv_heads};
    const int64_t bv[] = {b->vocab, b->dim, b->hidden, b->n_layers, b->n_heads, b->n_kv_heads};
    if (a->family != b->family)
        return lmp_fail(LMP_EINVAL, "%s: another model family than the base model %s",
                        v->model_path, base->path);
    for (size_t i = 0; i < sizeof av / sizeof av[0]; i++)
        if (av[i] != bv[i])
            return lmp_fail(LMP_EINVAL, "%s: %s is %lld, the base model %s has %lld",
                            v->model_path, names[i], (long long)bv[i], base->path, (long long)av[i]);
    return 0;
}

/* See compare.h. */
int lmp_check_same_vocab(const char *path, lmp_tokenizer *base, lmp_tokenizer *x)
{
    int n = lmp_tokenizer_vocab_size(base), nx = lmp_tokenizer_vocab_size(x);
    if (n != nx)
        return lmp_fail(LMP_EINVAL, "%s: its vocabulary has %d tokens, the base model's %d",
                        path, nx, n);
    for (int id = 0; id < n; id++) {
        size_t la, lb;
        /* prev -1: no BOS before, so SentencePiece pieces keep their leading space; each piece
         * stays valid until the next call on its own tokenizer */
        const char *pa = lmp_tokenizer_decode(base, -1, id, &la);
        const char *pb = lmp_tokenizer_decode(x, -1, id, &lb);
        if (la != lb || memcmp(pa, pb, la) != 0)
            return lmp_fail(LMP_EINVAL,
                            "%s: its vocabulary differs from the base model's at token %d "
                            "(\"%.*s\" vs the base's \"%.*s\")",
                            path, id, (int)(lb < 200 ? lb : 200), pb, (int)(la < 200 ? la : 200), pa);
    }
    return 0;
}

/* Opens each external variant's model and tokenizer once, before any variant runs, so that an
 * incompatible file is refused up front; both are freed again (run_variant reopens it). */
static int check_externals(lmp_run_state *run, const lmp_report *r)
{
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant *v = r->results[i].v;
        if (!v->model_path) continue;
        lmp_model *x = NULL;
        lmp_tokenizer *tx = NULL;
        int st = lmp_model_load(v->model_path, &x);
        if (!st) st = check_external_arch(v, run->m, x);
        if (!st && run->c->eval_seq_len > x->arch.seq_len)
            st = lmp_fail(LMP_EINVAL, "%s: eval.seq_len %lld exceeds its context of %lld",
                          v->model_path, (long long)run->c->eval_seq_len, (long long)x->arch.seq_len);
        if (!st) st = lmp_open_tokenizer(x, NULL, &tx);
        if (!st) st = lmp_check_same_vocab(v->model_path, run->tok, tx);
        lmp_tokenizer_free(tx);
        lmp_model_free(x);
        if (st) return lmp_fail_prefix(st, "variant '%s'", v->name);
    }
    return 0;
}

/* The GGUF (or NF4) block format a stage's "format" parameter names for a linear, after
 * llama-quantize's fallback for a k-quant on a row it does not fit; LMP_WFORMAT_INT when the
 * stage has no such parameter. */
static lmp_wformat stage_block_format(const lmp_stage *stage, const lmp_value *p, int64_t cols)
{
    const lmp_plugin_desc *d = stage->plugin->desc;
    for (uint32_t k = 0; k < d->n_params; k++) {
        if (strcmp(d->params[k].name, "format") != 0 || !p[k].str) continue;
        for (int f = 1; f < 64; f++)
            if (lmp_wformat_name((lmp_wformat)f) && strcmp(lmp_wformat_name((lmp_wformat)f), p[k].str) == 0)
                return lmp_wformat_fallback((lmp_wformat)f, cols);
    }
    return LMP_WFORMAT_INT;
}

/* What a stage asks of every linear it targets that the model's shapes can tell now: a block
 * format's rows are whole blocks (32 inputs; 256 for a k-quant with no fallback), and a stage
 * that learns over calibration sequences (its "seq_len") cuts them from windows of
 * calibration.seq_len tokens. */
static int check_variant_stages(const lmp_run_config *c, const lmp_model *m, const lmp_variant *v)
{
    int st = 0;
    for (int s = 0; s < v->n_stages && !st; s++) {
        const lmp_stage *stage = &v->stages[s];
        const lmp_plugin_desc *d = stage->plugin->desc;
        for (uint32_t k = 0; k < d->n_params && !st; k++)
            if (strcmp(d->params[k].name, "seq_len") == 0 && d->params[k].type == LMP_PARAM_INT && stage->params &&
                c->calib_text && stage->params[k].num > (double)c->calib_seq_len)
                st = lmp_fail(LMP_EINVAL, "pipeline[%d] (%s): seq_len %.0f is longer than the calibration windows "
                              "(calibration.seq_len %lld) it is cut from", s, d->name, stage->params[k].num,
                              (long long)c->calib_seq_len);
    }
    for (int64_t b = 0; b < m->arch.n_layers && !st; b++) {
        lmp_block blk; /* names and shapes: no weight is read */
        if ((st = lmp_block_init(&blk, (int)b, &m->arch))) {
            lmp_block_free_tables(&blk);
            break;
        }
        for (int s = 0; s < v->n_stages && !st; s++)
            for (int i = 0; i < blk.n_linears && !st; i++) {
                const lmp_linear *l = &blk.linears[i];
                const lmp_value *p = lmp_stage_params_for(&v->stages[s], l->name);
                lmp_wformat f = p ? stage_block_format(&v->stages[s], p, l->in) : LMP_WFORMAT_INT;
                if (f != LMP_WFORMAT_INT && l->in % lmp_wformat_span(f))
                    st = lmp_fail(LMP_EINVAL, "pipeline[%d] (%s) quantizes %s to format %s, which stores rows in "
                                  "blocks of %lld inputs; its rows have %lld: leave it out (ignore = [...]) or "
                                  "override its format", s, v->stages[s].plugin->desc->name, l->name,
                                  lmp_wformat_name(f), (long long)lmp_wformat_span(f), (long long)l->in);
            }
        lmp_block_free_tables(&blk);
    }
    return st;
}

/* The calibration windows' block inputs X[n, T, dim] (and their tokens) stay in memory while a
 * variant compresses: n windows of T tokens must fit the budget, half of this machine's memory
 * unless LMPRESS_CALIB_MB says otherwise.  Refused before any work, naming the setting. */
static int check_calib_memory(const lmp_run_config *c, const lmp_model *m, int64_t n)
{
    const double need = (double)n * (double)c->calib_seq_len * ((double)m->arch.dim * 4.0 + 4.0);
    const char *env = getenv("LMPRESS_CALIB_MB");
    double budget = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 2.0;
    if (env && *env) budget = atof(env) * 1048576.0;
    if (budget <= 0 || need <= budget) return 0;
    return lmp_fail(LMP_EINVAL, "%s: calibration: %lld windows of %lld tokens keep %.0f MB of block inputs in memory, "
                    "more than the budget of %.0f MB (%s): lower calibration.samples or seq_len", c->path,
                    (long long)n, (long long)c->calib_seq_len, need / 1e6, budget / 1e6,
                    env && *env ? "LMPRESS_CALIB_MB" : "half of this machine's memory; LMPRESS_CALIB_MB sets it");
}

int lmp_run_check_model(lmp_ctx *ctx, const lmp_run_config *c, const lmp_model *m, const lmp_report *r)
{
    int st = lmp_config_check_model_patterns(c, m);
    if (!st && c->eval_seq_len > m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "%s: eval.seq_len %lld exceeds the model's context of %lld", c->path,
                      (long long)c->eval_seq_len, (long long)m->arch.seq_len);
    if (!st && c->calib_text && c->calib_seq_len > m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "%s: calibration.seq_len %lld exceeds the model's context of %lld", c->path,
                      (long long)c->calib_seq_len, (long long)m->arch.seq_len);
    /* random sampling cuts exactly `samples` windows (sequential: at most that many, as the text
     * allows: checked once it is tokenized) */
    if (!st && c->calib_text && c->calib_random) st = check_calib_memory(c, m, c->calib_samples);
    for (int i = 0; i < (r ? r->n_results : c->n_variants) && !st; i++) {
        const lmp_variant *v = r ? r->results[i].v : &c->variants[i];
        /* an importance matrix that does not fit a linear it is meant for */
        if ((st = lmp_compress_check_variant(ctx, m, v, c->calib_text != NULL)) || (st = check_variant_stages(c, m, v)))
            lmp_fail_prefix(st, "%s: variant '%s'", c->path, v->name);
    }
    return st;
}

int lmp_run_prepare(lmp_run_state *run, lmp_report *r)
{
    const lmp_run_config *c = run->c;
    run->ctx->expert_group_bytes = (int64_t)(c->expert_group_mb * 1048576.0); /* memory.expert_group_mb */
    int st = lmp_backend_open(run->ctx, (lmp_registry *)&c->reg, c->backend_name, c->backend_params, &run->be);
    if (st) return st;
    lmp_host_set_backend(run->ctx, &run->be);
    run->be_compress = lmp_backend_view(&run->be, 1);
    run->be_eval = lmp_backend_view(&run->be, c->eval_compute_backend);
    if (run->be.lowp_vt)
        lmp_log(run->ctx, LMP_LOG_INFO, "backend %s: its compute precision for compression's forwards; evaluation in %s",
                c->backend_name, c->eval_compute_backend ? "the same" : "f32 (eval.compute = \"backend\" changes that)");
    if ((st = lmp_model_load(c->model_path, &run->m))) return st;
    /* model.rotate: every variant and the reference read the rotated blocks (model/rotate.h) */
    if ((st = lmp_model_rotate(run->m, &c->rotate))) return st;
    r->model = run->m;
    if ((st = lmp_run_check_model(run->ctx, c, run->m, r))) return st; /* before any variant runs */
    if ((st = lmp_open_tokenizer(run->m, c->tokenizer_path, &run->tok))) return st;
    if ((st = check_externals(run, r))) return st;
    const lmp_model *m = run->m;
    if ((st = text_keys(c, r->texts))) return st;
    /* Every evaluation text is read and tokenized now, before any variant is compressed. */
    for (int t = 0; t < c->n_eval_texts; t++) {
        lmp_text_info *ti = &r->texts[t];
        if ((st = lmp_tokenize_file(run->tok, c->eval_texts[t], &run->text_ids[t], &ti->tokens))) return st;
        ti->windows = lmp_eval_windows(ti->tokens, c->eval_seq_len, c->eval_max_windows);
        if (ti->windows == 0)
            return lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one evaluation window of %lld",
                            c->eval_texts[t], (long long)ti->tokens, (long long)c->eval_seq_len);
        ti->scored = ti->windows * (c->eval_seq_len - 1);
    }
    if (c->lambada) {
        if ((st = lmp_lambada_load(c->lambada, run->tok, c->lambada_max, &run->lambada))) return st;
        run->have_lambada = 1;
    }
    if (c->calib_text) {
        int32_t *ids = NULL;
        int64_t n_ids = 0;
        st = lmp_tokenize_file(run->tok, c->calib_text, &ids, &n_ids);
        const int64_t fit = n_ids / c->calib_seq_len;
        if (!st && !c->calib_random) st = check_calib_memory(c, m, fit < c->calib_samples ? fit : c->calib_samples);
        if (!st)
            st = lmp_windows_cut(run->ctx, ids, n_ids, c->calib_samples, c->calib_seq_len, c->calib_random,
                                 c->calib_text, &run->calib);
        free(ids);
        if (st) return st;
        r->calib_windows = run->calib.n;
        /* model.rotate's learned rotations: trained once on these windows, before any variant, so
         * every variant and the reference start from the same rotated model */
        if ((st = lmp_rotation_learn(run->ctx, &run->be_compress, run->m, &run->calib, &c->rotate, NULL))) return st;
    }
    run->n_windows = calloc((size_t)c->n_eval_texts + 1, sizeof *run->n_windows);
    run->ref_scores = calloc((size_t)c->n_eval_texts + 1, sizeof *run->ref_scores);
    if (!run->n_windows || !run->ref_scores) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int t = 0; t < c->n_eval_texts; t++) run->n_windows[t] = r->texts[t].windows;
    if ((st = lmp_calib_cache_init(&run->calib_cache, run->ctx, m->arch.n_layers))) return st;
    if (!(r->shape = run->shape = calloc((size_t)m->arch.n_layers, sizeof *run->shape)))
        return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t b = 0; b < m->arch.n_layers; b++, r->n_shape++)
        if ((st = lmp_block_init(&run->shape[b], (int)b, &m->arch))) return st;
    return 0;
}

void lmp_run_release(lmp_run_state *run)
{
    for (int t = 0; t < run->c->n_eval_texts; t++) {
        if (run->text_ids) free(run->text_ids[t]);
        if (run->ref) lmp_ref_logprobs_free(&run->ref[t]);
    }
    free(run->text_ids);
    free(run->ref);
    free(run->n_windows);
    free(run->ref_scores);
    if (run->have_lambada) lmp_lambada_free(&run->lambada);
    lmp_windows_free(&run->calib);
    if (run->calib_cache.boundary) {
        lmp_log(run->ctx, LMP_LOG_DEBUG, "calibration: %lld block forwards taken from the shared cache",
                (long long)run->calib_cache.saved);
        lmp_calib_cache_free(&run->calib_cache);
    }
    lmp_tokenizer_free(run->tok);
    lmp_host_set_backend(run->ctx, NULL);
    if (run->be.vt) lmp_backend_close(&run->be);
}

/* ---- stage 2: one variant -------------------------------------------------------------------- */

/* What a variant's blocks leave behind as they stream past: each linear's outcome and the bits
 * summed in the order lmp_blocks_bits_per_weight sums them. */
typedef struct variant_tally {
    lmp_run_state *run;
    lmp_variant_result *res;
    lmp_stream *stream;
    const lmp_model *x;  /* an external variant's model: its linears' bits are the file's */
    lmp_block_store *kept; /* an export's copy of every block, as codes on disk; else NULL */
    double bits, count;
    double stream_s;     /* time spent evaluating the blocks as they pass */
    double error_s;      /* time spent on the linears' weight errors (neither compression nor evaluation) */
    double stage_t0;     /* when the running stage started */
    double stage_s[LMP_ETA_MAX_STAGES]; /* each stage's seconds over the blocks so far */
} variant_tally;

/* Whether the variant's block kept the model's norms: a stage that folds a smoothing scale into
 * a norm leaves the linears after it rescaled, and their weights no longer compare with the
 * model's. */
static int norms_unchanged(const lmp_block *blk, const lmp_block *orig)
{
    if (blk->n_norms != orig->n_norms) return 0;
    for (int n = 0; n < blk->n_norms; n++) {
        const lmp_norm *a = &blk->norms[n], *o = &orig->norms[n];
        if (a->dim != o->dim || (!a->b != !o->b) || memcmp(a->w, o->w, (size_t)a->dim * sizeof *a->w) ||
            (a->b && memcmp(a->b, o->b, (size_t)a->dim * sizeof *a->b)))
            return 0;
    }
    return 1;
}

/* ||W' - W||^2 / ||W||^2 of one linear (lmp_linear_outcome.weight_err), summed in double. */
static double weight_error(const lmp_linear *l, const lmp_linear *orig)
{
    if (l->out != orig->out || l->in != orig->in) return NAN;
    double diff = 0, norm = 0;
    for (int64_t r = 0; r < l->out; r++)
        for (int64_t c = 0; c < l->in; c++) {
            double w = orig->w[r * l->in + c], q = l->w[r * l->in + c];
            if (l->in_scale) q /= l->in_scale[c];
            diff += (q - w) * (q - w);
            norm += w * w;
        }
    return norm > 0 ? diff / norm : diff > 0 ? INFINITY : 0;
}

/* ---- the time left (eta.h) --------------------------------------------------------------------- */

/* A job per variant still to run, in run order; cur the running one. */
typedef struct run_eta {
    lmp_eta model;
    lmp_eta_job *jobs;
    int n, cur;
    double started;            /* when jobs[cur] started */
    char head[300];            /* "[variant 3/9 w4-g32" */
} run_eta;

/* What the estimate knows of v before it runs: its kind, whether and on which inputs it
 * calibrates, and each stage by strategy and parameters. */
static void eta_job_of(lmp_run_state *run, const lmp_variant *v, lmp_eta_job *job)
{
    memset(job, 0, sizeof *job);
    job->kind = v->model_path ? LMP_ETA_EXTERNAL : v->n_stages ? LMP_ETA_PIPELINE : LMP_ETA_UNMODIFIED;
    if (job->kind != LMP_ETA_PIPELINE) return;
    uint32_t observing = 0;
    /* prepare created every stage already; a failure here only costs the estimate its detail */
    if (lmp_compress_observing_stages(run->ctx, run->m, v, &observing)) observing = 0;
    job->observing = observing;
    if (observing && run->calib.n)
        job->calib = v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL ? LMP_ETA_CALIB_ORIGINAL : LMP_ETA_CALIB_COMPRESSED;
    job->n_stages = v->n_stages < LMP_ETA_MAX_STAGES ? v->n_stages : LMP_ETA_MAX_STAGES;
    for (int s = 0; s < job->n_stages; s++) {
        const lmp_stage *stage = &v->stages[s];
        const lmp_plugin_desc *d = stage->plugin->desc;
        const uint8_t reads = observing >> s & 1u;
        uint64_t h = lmp_fnv1a64(0xcbf29ce484222325ull, d->name, strlen(d->name) + 1);
        job->strategy_key[s] = lmp_fnv1a64(h, &reads, 1);
        for (uint32_t k = 0; stage->params && k < d->n_params; k++) {
            h = lmp_fnv1a64(h, &stage->params[k].num, sizeof stage->params[k].num);
            if (stage->params[k].str) h = lmp_fnv1a64(h, stage->params[k].str, strlen(stage->params[k].str) + 1);
        }
        job->stage_key[s] = h;
    }
}

/* The progress line's context: "[variant 3/9 w4-g32, run ~12 min left]", the running variant
 * having finished `blocks` of its blocks. */
static void eta_show(lmp_run_state *run, int64_t blocks)
{
    run_eta *e = run->eta;
    if (!e) return;
    int guessed = 0;
    char left[160], line[512];
    lmp_eta_format(lmp_eta_left(&e->model, e->jobs, e->n, e->cur, lmp_now_s() - e->started, blocks, &guessed),
                   guessed, left, sizeof left);
    snprintf(line, sizeof line, "%s%s%s]", e->head, *left ? ", " : "", left);
    lmp_progress_context(run->ctx, line);
}

static int stage_began(void *ud, int s, const lmp_block *blk)
{
    (void)s;
    (void)blk;
    ((variant_tally *)ud)->stage_t0 = lmp_now_s();
    return 0;
}

static int stage_ended(void *ud, int s, const lmp_block *blk)
{
    (void)blk;
    variant_tally *t = ud;
    if (s < LMP_ETA_MAX_STAGES) t->stage_s[s] += lmp_now_s() - t->stage_t0;
    return 0;
}

static int tally_block(void *ud, int64_t b, const lmp_block *blk)
{
    variant_tally *t = ud;
    lmp_variant_result *res = t->res;
    const lmp_block *names = &t->run->shape[b]; /* the variant's block is freed after this */
    const double t_err = lmp_now_s();
    lmp_block orig; /* the model's block, for each linear's weight error */
    int st = lmp_model_block_copy(t->run->m, b, &orig);
    if (st) return st;
    const int comparable = orig.n_linears == blk->n_linears && norms_unchanged(blk, &orig);
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = (lmp_linear *)&blk->linears[i];
        if (t->x) l->weight_bits = lmp_model_linear_bits(t->x, b, l);
        res->linears[res->n_linears++] = (lmp_linear_outcome){
            .name = names->linears[i].name, .weight_bits = l->weight_bits,
            .weight_err = comparable ? weight_error(l, &orig.linears[i]) : NAN, .act = l->act,
            .sparse_n = l->mask ? l->sparse_n : 0, .sparse_m = l->mask ? l->sparse_m : 0, .role = l->role,
            .expert_kind = l->expert_kind, .expert = l->expert, .calib_tokens = l->calib_tokens,
            .calib_fallback = l->calib_fallback};
    }
    lmp_block_free(&orig);
    t->error_s += lmp_now_s() - t_err;
    lmp_block_bits_accum(blk, &t->bits, &t->count);
    st = t->kept ? lmp_block_store_put(t->kept, blk) : 0;
    double t0 = lmp_now_s();
    /* the block is compressed: what runs now is its evaluation, and the line says so */
    char what[300];
    snprintf(what, sizeof what, "evaluate %s: block", t->res->v->name);
    lmp_progress(t->run->ctx, what, b, t->run->m->arch.n_layers);
    if (!st) st = lmp_stream_block(t->stream, blk);
    t->stream_s += lmp_now_s() - t0;
    eta_show(t->run, b + 1);
    return st;
}

/* tally_block for a block handled a group of experts at a time (model/expert_pager.h): the
 * linears' outcomes in the block's order (the report's tables), as tally_block gives them, each
 * routed expert's weight error against the model's group read beside the variant's; then the
 * evaluation, its experts read back a group at a time. */
static int tally_block_paged(void *ud, int64_t b, const lmp_block *skel, lmp_expert_pager *experts)
{
    variant_tally *t = ud;
    lmp_variant_result *res = t->res;
    const lmp_block *names = &t->run->shape[b];
    const double t_err = lmp_now_s();
    lmp_block orig, orig_part;
    int have_part = 0, k = 0;
    int64_t part_g = -1;
    lmp_model_experts from_file = {.m = t->run->m, .block = b, .per_group = experts->per_group};
    int st = lmp_model_block_copy_experts(t->run->m, b, 1, 0, 0, &orig);
    if (st) return st;
    const int comparable = orig.n_linears == skel->n_linears && norms_unchanged(skel, &orig);
    for (int i = 0; i < names->n_linears && !st; i++) {
        const lmp_linear *n = &names->linears[i], *l = NULL, *o = NULL;
        if (n->expert_kind != LMP_EXPERT_ROUTED) {
            if (k >= skel->n_linears) {
                st = lmp_fail(LMP_EINVAL, "block %lld: its skeleton lacks %s", (long long)b, n->name);
                break;
            }
            l = &skel->linears[k];
            o = &orig.linears[k++];
        } else {
            const lmp_linear *gud[3];
            const int64_t g = n->expert / experts->per_group;
            if ((st = lmp_expert_pager_expert(experts, n->expert, gud))) break;
            if (g != part_g) {
                if (have_part) lmp_block_free(&orig_part);
                have_part = !(st = lmp_model_experts_load(&from_file, g, &orig_part));
                part_g = g;
                if (st) break;
            }
            l = gud[n->role == LMP_ROLE_GATE ? 0 : n->role == LMP_ROLE_UP ? 1 : 2];
            const int oi = lmp_block_find_expert(&orig_part, n->role, LMP_EXPERT_ROUTED, n->expert);
            o = oi >= 0 ? &orig_part.linears[oi] : NULL;
        }
        res->linears[res->n_linears++] = (lmp_linear_outcome){
            .name = n->name, .weight_bits = l->weight_bits,
            .weight_err = comparable && o ? weight_error(l, o) : NAN, .act = l->act,
            .sparse_n = l->mask ? l->sparse_n : 0, .sparse_m = l->mask ? l->sparse_m : 0, .role = l->role,
            .expert_kind = l->expert_kind, .expert = l->expert, .calib_tokens = l->calib_tokens,
            .calib_fallback = l->calib_fallback};
        const lmp_block one = {.index = (int)b, .n_linears = 1, .linears = (lmp_linear *)l};
        lmp_block_bits_accum(&one, &t->bits, &t->count); /* in the block's order, as tally_block sums */
    }
    if (have_part) lmp_block_free(&orig_part);
    lmp_block_free(&orig);
    t->error_s += lmp_now_s() - t_err;
    if (st) return st;
    double t0 = lmp_now_s();
    char what[300];
    snprintf(what, sizeof what, "evaluate %s: block", t->res->v->name);
    lmp_progress(t->run->ctx, what, b, t->run->m->arch.n_layers);
    st = lmp_stream_block_paged(t->stream, skel, experts);
    t->stream_s += lmp_now_s() - t0;
    eta_show(t->run, b + 1);
    return st;
}

int lmp_run_reference(lmp_run_state *run, const lmp_report *r)
{
    if (run->ref_done) return 0;
    const lmp_run_config *c = run->c;
    lmp_stream s;
    const double t0 = lmp_now_s();
    int st = lmp_stream_begin(&s, run->ctx, &run->be_eval, run->m, c->n_eval_texts, run->text_ids, run->n_windows,
                              c->eval_seq_len, run->have_lambada ? &run->lambada : NULL, "evaluate the reference");
    for (int t = 0; t < c->n_eval_texts && !st; t++)
        st = lmp_ref_logprobs_init(run->ctx, &run->ref[t], r->texts[t].windows, c->eval_seq_len * run->m->arch.vocab);
    if (!st) st = lmp_stream_model(&s, run->m, run->ref, 1, run->ref_scores, &run->ref_lambada);
    for (int t = 0; t < c->n_eval_texts && !st; t++)
        if (!isfinite(run->ref_scores[t].nll_sum))
            st = lmp_fail(LMP_EINVAL, "%s: the unmodified model's evaluation on %s gave a non-finite negative "
                          "log-likelihood (%g): no reference to compare with", c->model_path, c->eval_texts[t],
                          run->ref_scores[t].nll_sum);
    run->ref_seconds = lmp_now_s() - t0;
    run->ref_tail_seconds = s.finish_s;
    lmp_stream_free(&s);
    if (!st) run->ref_done = 1;
    return st;
}

/* A NaN or an infinity in a variant's sums is no result: it is an error for that variant (a
 * row of "nan" would read as a number).  The scores' ppl, KL divergence and top-1 are all
 * worked out from these sums. */
static int check_scores_finite(const lmp_run_config *c, const lmp_report *r, const lmp_variant_result *res)
{
    for (int t = 0; t < c->n_eval_texts; t++)
        if (!isfinite(res->scores[t].nll_sum) || !isfinite(res->scores[t].kld_sum))
            return lmp_fail(LMP_EINVAL, "its evaluation on %s gave a non-finite %s (%g): no result to report",
                            r->texts[t].key ? r->texts[t].key : c->eval_texts[t],
                            isfinite(res->scores[t].nll_sum) ? "KL divergence" : "negative log-likelihood",
                            isfinite(res->scores[t].nll_sum) ? res->scores[t].kld_sum : res->scores[t].nll_sum);
    return 0;
}

/* Compresses (or reads an external file) and evaluates, one block at a time: a block is
 * evaluated as soon as it is finished and freed after it.  For an export (the `compressed`
 * hook) each block is also put in a block store, codes on disk, that the writer reads back. */
static int run_variant(lmp_run_state *run, const lmp_report *r, lmp_variant_result *res)
{
    const lmp_run_config *c = run->c;
    const lmp_variant *v = res->v;
    const int64_t n_layers = run->m->arch.n_layers;
    /* A variant's random draws depend on the seed and on it alone, not on which variants ran
     * before it in this process (--variant, --resume, another MPI rank). */
    lmp_host_seed(run->ctx, c->seed + 1 + (uint64_t)(v - c->variants));
    double t0 = lmp_now_s();
#ifdef __GLIBC__
    malloc_trim(0); /* what the last variant freed goes back to the system before its peak is reset */
#endif
    run->peak_rss_mb = fmax(run->peak_rss_mb, lmp_peak_rss_mb()); /* the run's, before the reset */
    lmp_peak_rss_reset();
    int st = lmp_run_reference(run, r); /* once per run: compare runs it before the first variant */
    const double ref_s = lmp_now_s() - t0;
    if (!st && !v->model_path && !v->n_stages) { /* the unmodified model: the reference's own numbers */
        res->bits_per_weight = 32.0;
        memcpy(res->scores, run->ref_scores, (size_t)c->n_eval_texts * sizeof *res->scores);
        res->lambada = run->ref_lambada;
        res->eval_seconds = run->ref_seconds; /* its evaluation is the reference pass */
        res->linears = calloc((size_t)lmp_blocks_linear_count(run->shape, n_layers) + 1, sizeof *res->linears);
        if (!res->linears) st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (int64_t b = 0; b < n_layers && !st; b++)
            for (int i = 0; i < run->shape[b].n_linears; i++)
                res->linears[res->n_linears++] = (lmp_linear_outcome){
                    .name = run->shape[b].linears[i].name, .weight_bits = 32.0, .weight_err = 0,
                    .role = run->shape[b].linears[i].role, .expert_kind = run->shape[b].linears[i].expert_kind,
                    .expert = run->shape[b].linears[i].expert, .calib_tokens = -1};
        if (!st && run->hooks->compressed) { /* an export of the unmodified model, read from its file */
            const lmp_block_source src = lmp_block_source_model(run->m);
            st = run->hooks->compressed(run->m, res, &src, run->hooks->ud);
        }
        res->peak_rss_mb = lmp_peak_rss_mb();
        return st ? lmp_fail_prefix(st, "variant '%s'", v->name) : 0;
    }
    lmp_model *x = NULL; /* an external variant's model (checked in prepare) */
    double calib_s = 0;  /* the calibration forwards of its compression */
    if (!st && v->model_path) st = lmp_model_load(v->model_path, &x);
    const lmp_model *vm = x ? x : run->m;
    lmp_stream s;
    memset(&s, 0, sizeof s);
    char what[300];
    snprintf(what, sizeof what, "evaluate %s", v->name);
    if (!st)
        st = lmp_stream_begin(&s, run->ctx, &run->be_eval, vm, c->n_eval_texts, run->text_ids, run->n_windows,
                              c->eval_seq_len, run->have_lambada ? &run->lambada : NULL, what);
    variant_tally tally = {.run = run, .res = res, .stream = &s, .x = x};
    if (!st && !(res->linears = calloc((size_t)lmp_blocks_linear_count(run->shape, n_layers) + 1, sizeof *res->linears)))
        st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st && !x && run->hooks->compressed) st = lmp_block_store_open(run->ctx, n_layers, "the blocks to export", &tally.kept);
    t0 = lmp_now_s();
    if (!st && x) {
        snprintf(res->format, sizeof res->format, "%s", x->format ? x->format : "unknown");
        int said = 0;
        for (int64_t b = 0; b < n_layers && !st; b++) {
            lmp_block blk;
            if (!said && lmp_expert_group_size(&x->arch, b, run->ctx->expert_group_bytes) > 0)
                said = 1, lmp_log(run->ctx, LMP_LOG_WARN, "variant %s: %s's blocks are read whole, their routed experts "
                                  "above memory.expert_group_mb = %.0f (an external model is not streamed)", v->name,
                                  v->model_path, (double)run->ctx->expert_group_bytes / 1048576.0);
            if ((st = lmp_model_block_copy(x, b, &blk))) break;
            st = tally_block(&tally, b, &blk);
            lmp_block_free(&blk);
        }
    } else if (!st) {
        lmp_compress_watch watch = {.before_stage = stage_began, .after_stage = stage_ended, .block_done = tally_block,
                                    .calib_cache = &run->calib_cache, .ud = &tally};
        /* an export keeps every block whole (the block store): then no block is streamed */
        if (!tally.kept) watch.block_done_paged = tally_block_paged;
        const double propagate0 = lmp_compress_times_get(run->ctx)->propagate;
        st = lmp_compress_watched(run->ctx, &run->be_compress, run->m, v, &run->calib, &watch, NULL);
        /* the blocks' evaluation (and their weight errors) is not compression */
        res->seconds = lmp_now_s() - t0 - tally.stream_s - tally.error_s;
        calib_s = lmp_compress_times_get(run->ctx)->propagate - propagate0;
        lmp_log(run->ctx, LMP_LOG_DEBUG, "variant %s: compressed in %.2f s", v->name, res->seconds);
    }
    res->bits_per_weight = tally.count > 0 ? tally.bits / tally.count : 0;
    if (!st && tally.kept) {
        lmp_log(run->ctx, LMP_LOG_INFO, "variant %s: its blocks kept for the export as %.1f MB of codes (%.1f MB in f32)",
                v->name, (double)lmp_block_store_bytes(tally.kept) / 1e6, (double)lmp_block_store_f32_bytes(tally.kept) / 1e6);
        const lmp_block_source src = lmp_block_store_source(tally.kept);
        st = run->hooks->compressed(run->m, res, &src, run->hooks->ud);
    }
    lmp_block_store_free(tally.kept);
    double t1 = lmp_now_s();
    if (!st) st = lmp_stream_finish(&s, run->ref, 0, res->scores, &res->lambada);
    if (!st) st = check_scores_finite(c, r, res);
    /* an external variant's blocks are read, not compressed: all of its time is evaluation */
    res->eval_seconds = ref_s + (x ? t1 - t0 : tally.stream_s) + (lmp_now_s() - t1);
    res->peak_rss_mb = lmp_peak_rss_mb();
    if (!st && run->eta && run->eta->cur >= 0) { /* what it cost, for the variants still to run */
        lmp_eta_measured m = {.blocks = n_layers, .calib_s = calib_s, .eval_blocks_s = x ? t1 - t0 : tally.stream_s,
                              .eval_tail_s = s.finish_s};
        double staged = 0;
        for (int k = 0; k < v->n_stages && k < LMP_ETA_MAX_STAGES; k++) {
            m.stage_s[k] = tally.stage_s[k];
            staged += tally.stage_s[k];
        }
        m.other_s = fmax(res->seconds - staged - calib_s, 0); /* reading blocks, checks, a whole-model finish */
        lmp_eta_learn(&run->eta->model, &run->eta->jobs[run->eta->cur], &m);
    }
    lmp_stream_free(&s);
    lmp_model_free(x);
    return st ? lmp_fail_prefix(st, "variant '%s'", v->name) : 0;
}

/* "[variant 3/9 w4-g32, run ~1 min left]": the whole run's time left, each variant still to run
 * at its expected cost (eta.h); resumed variants cost nothing. */
static void announce(lmp_ctx *ctx, lmp_run_state *run, const lmp_report *r, const lmp_variant_result *res, int k, int n)
{
    run_eta *e = run->eta;
    char left[160] = "";
    if (e) {
        e->cur = k - 1;
        e->started = lmp_now_s();
        snprintf(e->head, sizeof e->head, "[variant %d/%d %s", k, n, res->v->name);
        int guessed = 0;
        lmp_eta_format(lmp_eta_left(&e->model, e->jobs, e->n, e->cur, 0, 0, &guessed), guessed, left, sizeof left);
        eta_show(run, 0);
    }
    lmp_log(ctx, LMP_LOG_INFO, "variant %d/%d: %s%s%s (%.0f s so far)", k, n, res->v->name, *left ? ", " : "", left,
            lmp_now_s() - r->started);
}

/* ---- a run spread over MPI ranks (core/distrib/distrib.h) --------------------------------------
 *
 * Every rank prepares (tokenizes the texts, cuts the calibration windows: cheap and the same
 * everywhere).  Rank 0 runs the reference pass and broadcasts its log-probabilities and numbers;
 * when a variant calibrates on the original inputs, rank 0 also runs the unmodified model over
 * the calibration windows and broadcasts every block boundary (the run's calibration cache).
 * Then each variant is a job, and its result (numbers and per-linear record) comes back to
 * rank 0 as bytes, which fills in the report exactly as if it had run there. */

int lmp_run_share_reference(lmp_run_state *run, const lmp_report *r)
{
    lmp_dist *d = lmp_host_dist(run->ctx);
    if (!d) return lmp_run_reference(run, r);
    const lmp_run_config *c = run->c;
    const int lead = lmp_dist_rank(d) == 0;
    const int64_t L = c->eval_seq_len, wf = L * run->m->arch.vocab;
    int st = lead ? lmp_run_reference(run, r) : 0;
    for (int t = 0; t < c->n_eval_texts && !st && !lead; t++)
        st = lmp_ref_logprobs_init(run->ctx, &run->ref[t], r->texts[t].windows, wf);
    float *buf = st ? NULL : malloc((size_t)wf * sizeof *buf);
    if (!st && !buf) st = lmp_fail(LMP_ENOMEM, "out of memory for a window's log-probabilities");
    if ((st = lmp_dist_agree(d, st))) {
        free(buf);
        return st;
    }
    /* from here every rank takes part in every broadcast; a local failure waits for the end */
    int local = 0;
    st = lmp_dist_bcast(d, run->ref_scores, (int64_t)c->n_eval_texts * (int64_t)sizeof *run->ref_scores);
    if (!st) st = lmp_dist_bcast(d, &run->ref_lambada, sizeof run->ref_lambada);
    for (int t = 0; t < c->n_eval_texts && !st; t++)
        for (int64_t w = 0; w < r->texts[t].windows && !st; w++) {
            if (lead && !local) local = lmp_ref_window(&run->be_eval, run->m, NULL, &run->ref[t], w, NULL, L, buf);
            st = lmp_dist_bcast(d, buf, wf * (int64_t)sizeof *buf);
            if (!st && !lead && !local) local = lmp_ref_logprobs_put(&run->ref[t], w, buf);
        }
    free(buf);
    st = lmp_dist_agree(d, st ? st : local);
    if (!st) run->ref_done = 1;
    return st;
}

/* The unmodified model's calibration activations at every block boundary, computed on rank 0
 * and broadcast into every rank's calibration cache: what a variant calibrating on the original
 * inputs reads (compress/calib_cache.h).  Variants on compressed inputs share none. */
static int share_calibration(lmp_run_state *run, const int *todo, int n, lmp_dist *d)
{
    const lmp_run_config *c = run->c;
    int wanted = 0;
    for (int j = 0; j < n; j++) {
        const lmp_variant *v = &c->variants[todo[j]];
        wanted |= !v->model_path && v->n_stages && v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL;
    }
    if (!wanted || !run->calib.n) return 0;
    const lmp_model *m = run->m;
    const int lead = lmp_dist_rank(d) == 0;
    const int64_t per = run->calib.T * m->arch.dim, floats = run->calib.n * per;
    float *X = malloc((size_t)floats * sizeof *X);
    int st = lmp_dist_agree(d, X ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for %lld calibration windows",
                                                 (long long)run->calib.n));
    if (st) {
        free(X);
        return st;
    }
    int local = 0;
    for (int64_t w = 0; w < run->calib.n && lead; w++) lmp_embed(m, run->calib.tokens + w * run->calib.T, run->calib.T, X + w * per);
    for (int64_t b = 0; b + 1 < m->arch.n_layers && !st; b++) {
        lmp_progress(run->ctx, "calibration activations", b, m->arch.n_layers - 1);
        if (lead && !local) {
            lmp_block blk;
            double share = 0;
            if (!(local = lmp_model_block_copy(m, b, &blk))) {
                local = lmp_calib_pass(run->ctx, NULL, &run->be_compress, &m->arch, &blk, X, X, 4, 4, NULL, NULL, run->calib.n,
                                       run->calib.T, &share);
                lmp_block_free(&blk);
            }
        }
        st = lmp_dist_bcast(d, X, floats * (int64_t)sizeof *X);
        if (!st && !local) local = lmp_calib_cache_put(&run->calib_cache, b + 1, X, floats);
    }
    free(X);
    return lmp_dist_agree(d, st ? st : local);
}

/* A variant's result as bytes: the fixed fields, the scores [n_texts], then the per-linear
 * outcomes [n_linears] with their names left out (rank 0 takes them from its own block tables).
 * Every rank runs the same lmpress build, so the structs have one layout. */
typedef struct result_wire {
    double bits_per_weight, seconds, eval_seconds, peak_rss_mb;
    lmp_lambada_score lambada;
    int32_t n_texts, n_linears;
    char format[96];
} result_wire;

static int result_pack(const lmp_report *r, const lmp_variant_result *res, void **out, size_t *bytes)
{
    result_wire h = {res->bits_per_weight, res->seconds, res->eval_seconds, res->peak_rss_mb, res->lambada,
                     r->n_texts, res->n_linears, ""};
    memcpy(h.format, res->format, sizeof h.format);
    const size_t ns = (size_t)r->n_texts * sizeof *res->scores, nl = (size_t)res->n_linears * sizeof *res->linears;
    char *p = malloc(sizeof h + ns + nl);
    if (!p) return lmp_fail(LMP_ENOMEM, "out of memory");
    memcpy(p, &h, sizeof h);
    memcpy(p + sizeof h, res->scores, ns);
    lmp_linear_outcome *l = (lmp_linear_outcome *)(p + sizeof h + ns);
    for (int i = 0; i < res->n_linears; i++) {
        l[i] = res->linears[i];
        l[i].name = NULL;
    }
    *out = p;
    *bytes = sizeof h + ns + nl;
    return 0;
}

static int result_unpack(const lmp_run_state *run, const lmp_report *r, lmp_variant_result *res, const void *in,
                         size_t bytes)
{
    result_wire h;
    const int64_t all = lmp_blocks_linear_count(run->shape, run->m->arch.n_layers); /* blocks may differ */
    if (bytes < sizeof h) return lmp_fail(LMP_EIO, "MPI: variant '%s': a result of %zu bytes", res->v->name, bytes);
    memcpy(&h, in, sizeof h);
    const size_t ns = (size_t)r->n_texts * sizeof *res->scores, nl = (size_t)h.n_linears * sizeof *res->linears;
    if (h.n_texts != r->n_texts || h.n_linears < 0 || h.n_linears > all || bytes != sizeof h + ns + nl)
        return lmp_fail(LMP_EIO, "MPI: variant '%s': its result does not fit this run (%d texts, %d linears, "
                        "%zu bytes): are all ranks the same lmpress build?", res->v->name, h.n_texts, h.n_linears, bytes);
    free(res->linears);
    if (!(res->linears = calloc((size_t)all + 1, sizeof *res->linears))) return lmp_fail(LMP_ENOMEM, "out of memory");
    res->bits_per_weight = h.bits_per_weight;
    res->seconds = h.seconds;
    res->eval_seconds = h.eval_seconds;
    res->peak_rss_mb = h.peak_rss_mb;
    res->lambada = h.lambada;
    memcpy(res->format, h.format, sizeof res->format);
    res->format[sizeof res->format - 1] = 0;
    memcpy(res->scores, (const char *)in + sizeof h, ns);
    memcpy(res->linears, (const char *)in + sizeof h + ns, nl);
    res->n_linears = h.n_linears;
    for (int g = 0; g < h.n_linears; g++) {
        int64_t b;
        int i;
        lmp_blocks_linear_at(run->shape, run->m->arch.n_layers, g, &b, &i);
        res->linears[g].name = run->shape[b].linears[i].name;
    }
    return 0;
}

typedef struct compare_jobs {
    lmp_run_state *run;
    lmp_report *r;
    const lmp_compare_opts *o;
    const int *todo;           /* job j is results[todo[j]] */
    int n, finished;
    int rank;                  /* this process's */
} compare_jobs;

static int job_run(void *ud, int j, void **out, size_t *bytes)
{
    compare_jobs *cj = ud;
    lmp_variant_result *res = &cj->r->results[cj->todo[j]];
    char line[512];
    snprintf(line, sizeof line, "[variant %s, job %d/%d, rank %d]", res->v->name, j + 1, cj->n,
             cj->rank);
    lmp_progress_context(cj->run->ctx, line);
    lmp_log(cj->run->ctx, LMP_LOG_INFO, "variant %s: job %d of %d, on rank %d", res->v->name, j + 1, cj->n,
            cj->rank);
    int st = run_variant(cj->run, cj->r, res);
    if (!st && cj->rank != 0) st = result_pack(cj->r, res, out, bytes);
    return st;
}

/* Rank 0, under the scheduler's lock, possibly on its answering thread: so no lmp_log on the
 * run's context, which rank 0's own job is using; the line below goes to stderr directly. */
static int job_take(void *ud, int j, int rank, int st, const char *msg, const void *in, size_t bytes)
{
    compare_jobs *cj = ud;
    const int i = cj->todo[j];
    lmp_variant_result *res = &cj->r->results[i];
    if (st) return 0; /* the scheduler keeps the first failure and hands out no more jobs */
    if (res->done) return lmp_fail(LMP_EINVAL, "MPI: variant '%s' came back twice (now from rank %d)", res->v->name, rank);
    if (rank != 0 && (st = result_unpack(cj->run, cj->r, res, in, bytes))) return st;
    res->done = 1;
    cj->finished++;
    if (lmp_host_verbosity(cj->run->ctx) >= LMP_LOG_INFO)
        fprintf(stderr, "lmpress: info: variant %s: done on rank %d (%d of %d)\n", res->v->name, rank, cj->finished, cj->n);
    return cj->o->hooks.finished ? cj->o->hooks.finished(cj->r, i, cj->o->hooks.ud) : 0;
}

static int run_distributed(lmp_run_state *run, lmp_report *r, const lmp_compare_opts *o)
{
    lmp_dist *d = lmp_host_dist(run->ctx);
    const int n = r->n_results;
    /* which variants are left: rank 0 knows (it read --resume) */
    uint8_t *done = calloc((size_t)n + 1, 1);
    int *todo = calloc((size_t)n + 1, sizeof *todo);
    int st = lmp_dist_agree(d, done && todo ? 0 : lmp_fail(LMP_ENOMEM, "out of memory"));
    for (int i = 0; i < n && !st; i++) done[i] = (uint8_t)r->results[i].done;
    if (!st) st = lmp_dist_bcast(d, done, n);
    compare_jobs cj = {.run = run, .r = r, .o = o, .todo = todo, .rank = lmp_dist_rank(d)};
    for (int i = 0; i < n && !st; i++)
        if (!done[i]) todo[cj.n++] = i;
    if (!st) st = lmp_run_share_reference(run, r);
    if (!st) st = share_calibration(run, todo, cj.n, d);
    if (!st) {
        const lmp_dist_jobs jobs = {.n = cj.n, .run = job_run, .take = job_take, .ud = &cj};
        st = lmp_dist_run_jobs(d, &jobs);
    }
    if (!st && lmp_dist_rank(d) == 0 && cj.finished != cj.n)
        st = lmp_fail(LMP_EINVAL, "MPI: %d of %d variants came back", cj.finished, cj.n);
    free(done);
    free(todo);
    return st;
}

/* ---- the run ---------------------------------------------------------------------------------- */

int lmp_run_compare(lmp_ctx *ctx, const lmp_run_config *c, const lmp_compare_opts *o, lmp_report **out)
{
    *out = NULL;
    if (!c->has_eval && !o->hooks.compressed) /* before anything is loaded */
        return lmp_fail(LMP_EINVAL, "%s: no eval section, so there is nothing to measure: add eval = { texts = "
                        "[ ... ]; }, or write the variant (lmpress run CONFIG --output PATH)", c->path);
    int n = o->which ? o->n_which : c->n_variants;
    lmp_run_state run = {.ctx = ctx, .c = c, .hooks = &o->hooks};
    lmp_report *r = calloc(1, sizeof *r);
    if (!r) return lmp_fail(LMP_ENOMEM, "out of memory");
    r->cfg = c;
    r->started = lmp_now_s();
    r->n_results = n;
    r->n_texts = c->n_eval_texts;
    r->results = calloc((size_t)n, sizeof *r->results);
    r->texts = calloc((size_t)c->n_eval_texts + 1, sizeof *r->texts);
    run.text_ids = calloc((size_t)c->n_eval_texts + 1, sizeof *run.text_ids);
    run.ref = calloc((size_t)c->n_eval_texts + 1, sizeof *run.ref);
    int st = r->results && r->texts && run.text_ids && run.ref ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int t = 0; t < c->n_eval_texts && run.ref; t++) run.ref[t].store.fd = -1;
    for (int i = 0; i < n && !st; i++) {
        r->results[i].v = &c->variants[o->which ? o->which[i] : i];
        r->results[i].scores = calloc((size_t)c->n_eval_texts + 1, sizeof *r->results[i].scores);
        if (!r->results[i].scores) st = lmp_fail(LMP_ENOMEM, "out of memory");
    }
    lmp_host_seed(ctx, c->seed);
    lmp_run_fingerprint(c, r->config_hash, r->fingerprint);
    /* In an MPI run every rank prepares; rank 0 alone resumes, reports and writes. */
    lmp_dist *dist = lmp_host_dist(ctx);
    const int lead = lmp_dist_rank(dist) == 0;
    if (!st) st = lmp_run_prepare(&run, r);
    if (!st) st = check_tmpdir(&run, r);
    if (!st && lead) st = fold_inputs(&run, r->fingerprint);
    if (!st && lead && o->resume) st = lmp_report_resume(r, o->resume, o->resume_path);
    for (int i = 0; i < n && !st && lead && o->rerun; i++)
        if (o->rerun[i] && r->results[i].done) r->results[i].done = 0, r->results[i].prior = NULL;
    if (!st && lead && o->hooks.prepared) st = o->hooks.prepared(r, o->hooks.ud);
    int to_run = 0;
    for (int i = 0; i < n && !st && lead; i++) {
        if (r->results[i].done) {
            if (o->hooks.finished) st = o->hooks.finished(r, i, o->hooks.ud);
        } else {
            to_run++;
        }
    }
    if (dist) {
        st = lmp_dist_agree(dist, st);
        if (!st) st = run_distributed(&run, r, o);
    }
    /* One process: the reference first (every variant is scored against it), timed, so that the
     * time left can be estimated from the first variant on. */
    run_eta eta = {.cur = -1};
    if (!st && !dist && to_run) {
        int64_t calib_tokens = run.calib.n * run.calib.T, eval_tokens = 0;
        for (int t = 0; t < c->n_eval_texts; t++) eval_tokens += r->texts[t].windows * c->eval_seq_len;
        lmp_eta_init(&eta.model, run.m->arch.n_layers, (double)calib_tokens, (double)eval_tokens);
        if (!(eta.jobs = calloc((size_t)to_run, sizeof *eta.jobs))) st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (int i = 0; i < n && !st; i++)
            if (!r->results[i].done) eta_job_of(&run, r->results[i].v, &eta.jobs[eta.n++]);
        if (!st) {
            lmp_progress_context(ctx, "[reference]");
            st = lmp_run_reference(&run, r);
        }
        if (!st) {
            lmp_eta_reference(&eta.model, run.ref_seconds - run.ref_tail_seconds, run.ref_tail_seconds);
            run.eta = &eta;
        }
    }
    int k = 0;
    for (int i = 0; i < n && !st && !dist; i++) {
        lmp_variant_result *res = &r->results[i];
        if (res->done) continue;
        announce(ctx, &run, r, res, ++k, to_run);
        st = run_variant(&run, r, res);
        /* A variant that fails is reported and the others still run (the exit status says it):
         * unless the run itself cannot go on (no reference, or an interrupt). */
        if (st && run.ref_done && !lmp_host_interrupted(ctx)) {
            lmp_log(ctx, LMP_LOG_ERROR, "%s", lmp_last_error());
            r->n_failed++;
            st = 0;
            continue;
        }
        if (st) break;
        res->done = 1;
        if (o->hooks.finished) st = o->hooks.finished(r, i, o->hooks.ud);
    }
    lmp_progress_context(ctx, NULL);
    run.eta = NULL;
    free(eta.jobs);
    if (!st)
        lmp_log(ctx, LMP_LOG_INFO, "peak RSS of the run: %.1f MB (the peak MB column: each variant's own)",
                fmax(run.peak_rss_mb, lmp_peak_rss_mb()));
    lmp_run_release(&run);
    if (st) {
        lmp_report_free(r);
        return st;
    }
    *out = r;
    return 0;
}
