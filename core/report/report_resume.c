/* report_resume.c — taking an earlier report's finished variants back (compare --resume).
 *
 * The JSON report holds each variant's sums (nll_sum, kld_sum, top1_hits, LAMBADA counts) at
 * full precision, so the numbers recomputed from them equal the ones the earlier run printed. */
#include <string.h>

#include "base/error.h"
#include "report/report.h"

static int read_scores(const lmp_report *r, const lmp_json *entry, const char *what, lmp_variant_result *res)
{
    const lmp_json *ev = lmp_json_get(entry, "eval");
    int st = 0;
    for (int t = 0; t < r->n_texts && !st; t++) {
        const lmp_json *e = lmp_json_get(ev, r->texts[t].key);
        if (!e) return lmp_fail(LMP_EINVAL, "%s: no evaluation of text '%s'", what, r->texts[t].key);
        lmp_score *s = &res->scores[t];
        st = lmp_json_get_int(e, "windows", what, &s->windows);
        if (!st) st = lmp_json_get_int(e, "scored", what, &s->scored);
        if (!st) st = lmp_json_get_number(e, "nll_sum", what, &s->nll_sum);
        if (!st) st = lmp_json_get_number(e, "kld_sum", what, &s->kld_sum);
        if (!st) st = lmp_json_get_int(e, "top1_hits", what, &s->top1_hits);
        if (!st && (s->windows != r->texts[t].windows || s->scored != r->texts[t].scored))
            st = lmp_fail(LMP_EINVAL, "%s: text '%s' was scored on %lld windows, this run takes %lld", what,
                          r->texts[t].key, (long long)s->windows, (long long)r->texts[t].windows);
    }
    if (!st && r->cfg->lambada) {
        const lmp_json *l = lmp_json_get(entry, "lambada");
        if (!l) return lmp_fail(LMP_EINVAL, "%s: no LAMBADA result", what);
        st = lmp_json_get_int(l, "passages", what, &res->lambada.passages);
        if (!st) st = lmp_json_get_int(l, "correct", what, &res->lambada.correct);
    }
    return st;
}

int lmp_report_resume(lmp_report *r, const lmp_json *doc, const char *path)
{
    const char *fp;
    int st = lmp_json_get_string(doc, "fingerprint", path, &fp);
    if (st) return st;
    if (strcmp(fp, r->fingerprint) != 0)
        return lmp_fail(LMP_EINVAL, "%s: written by another run (fingerprint %s, this run's %s): the config, the "
                        "backend, the lmpress version or an input file (the model, a text, the tokenizer, an "
                        "imatrix) differ; remove it or run without --resume",
                        path, fp, r->fingerprint);
    const lmp_json *vs = lmp_json_get(doc, "variants");
    if (!vs || vs->type != LMP_JSON_ARRAY) return lmp_fail(LMP_EINVAL, "%s: no \"variants\" array", path);
    for (size_t k = 0; k < vs->n; k++) {
        const lmp_json *e = &vs->items[k];
        const char *name;
        if ((st = lmp_json_get_string(e, "name", path, &name))) return st;
        for (int i = 0; i < r->n_results; i++) {
            lmp_variant_result *res = &r->results[i];
            if (res->done || strcmp(res->v->name, name) != 0) continue;
            char what[4400];
            snprintf(what, sizeof what, "%s: variant '%s'", path, name);
            st = lmp_json_get_number(e, "bits_per_weight", what, &res->bits_per_weight);
            if (!st) st = lmp_json_get_number(e, "seconds", what, &res->seconds);
            /* an evaluation time is kept when the report has it (reports before it did not) */
            if (!st && lmp_json_get(e, "eval_seconds")) st = lmp_json_get_number(e, "eval_seconds", what, &res->eval_seconds);
            if (!st) st = lmp_json_get_number(e, "peak_rss_mb", what, &res->peak_rss_mb);
            if (!st) st = read_scores(r, e, what, res);
            if (st) return st;
            res->prior = e;
            res->done = 1;
        }
    }
    return 0;
}
