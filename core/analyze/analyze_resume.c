/* analyze_resume.c — keeping an analysis's finished units, and taking them back (--resume).
 *
 * The --json file is rewritten after every unit with the units finished so far ("partial":
 * true), and at the end with the whole analysis; either can be resumed.  A unit's numbers are
 * its sums (scored tokens, NLL and KL sums, top-1 hits, LAMBADA counts) at full precision, so a
 * resumed unit's metric is exactly the one it had. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze.h"
#include "base/error.h"
#include "formats/json_write.h"

int lmp_an_check_target(lmp_an_metric m, double target)
{
    if (!isfinite(target)) return lmp_fail(LMP_EINVAL, "--target %s=%g: not a number", lmp_an_metric_name(m), target);
    if (m == LMP_AN_KLD && target < 0)
        return lmp_fail(LMP_EINVAL, "--target kld=%g: a KL divergence is never negative: no skip list can reach it", target);
    if (m == LMP_AN_PPL && target < 1)
        return lmp_fail(LMP_EINVAL, "--target ppl=%g: a perplexity is at least 1: no skip list can reach it", target);
    if ((m == LMP_AN_TOP1 || m == LMP_AN_LAMBADA) && (target < 0 || target > 1))
        return lmp_fail(LMP_EINVAL, "--target %s=%g: a fraction between 0 and 1 (%s=%g for %g %%)", lmp_an_metric_name(m),
                        target, lmp_an_metric_name(m), target / 100, target);
    return 0;
}

/* What must match for a file's units to be this analysis's. */
static void write_identity(const lmp_analysis *a, FILE *f)
{
    fprintf(f, "{\"lmpress\": \"%s\", \"fingerprint\": \"%s\", \"config\": ", LMP_VERSION, a->fingerprint);
    lmp_jw_string(f, a->c->path);
    fputs(", \"variant\": ", f);
    lmp_jw_string(f, a->v->name);
    fprintf(f, ", \"mode\": \"%s\", \"granularity\": \"%s\", \"metric\": \"%s\"", lmp_an_mode_name(a->o.mode),
            lmp_an_gran_name(a->o.gran), lmp_an_metric_name(a->o.metric));
}

static void write_sums(const lmp_bcache_result *r, FILE *f)
{
    fprintf(f, "{\"windows\": %lld, \"scored\": %lld, \"nll_sum\": ", (long long)r->score.windows, (long long)r->score.scored);
    lmp_jw_double(f, r->score.nll_sum);
    fputs(", \"kld_sum\": ", f);
    lmp_jw_double(f, r->score.kld_sum);
    fprintf(f, ", \"top1_hits\": %lld, \"lambada\": {\"passages\": %lld, \"correct\": %lld}}", (long long)r->score.top1_hits,
            (long long)r->lambada.passages, (long long)r->lambada.correct);
}

void lmp_analysis_progress_json(const lmp_analysis *a, FILE *f)
{
    write_identity(a, f);
    fprintf(f, ", \"partial\": true, \"units_finished\": %d, \"units_total\": %d,\n \"units\": [", a->n_finished, a->n_units);
    int k = 0;
    for (int u = 0; u < a->n_units; u++) {
        if (!a->unit_finished || !a->unit_finished[u]) continue;
        fprintf(f, "%s\n  {\"name\": ", k++ ? "," : "");
        lmp_jw_string(f, a->units[u].name);
        fputs(", \"result\": ", f);
        write_sums(&a->units[u].res, f);
        fputc('}', f);
    }
    fputs("]}\n", f);
}

static int same_string(const lmp_json *doc, const char *key, const char *want, const char *path, const char *what)
{
    const char *got;
    int st = lmp_json_get_string(doc, key, path, &got);
    if (st) return st;
    if (strcmp(got, want) != 0)
        return lmp_fail(LMP_EINVAL, "%s: written by another analysis (%s \"%s\", this one's \"%s\"): remove it or run "
                        "without --resume", path, what, got, want);
    return 0;
}

static int read_count(const lmp_json *j, const char *key, const char *what, int64_t *out)
{
    double x;
    int st = lmp_json_get_number(j, key, what, &x);
    if (st) return st;
    if (!(x >= 0 && x <= 9e15 && x == floor(x))) return lmp_fail(LMP_EINVAL, "%s: %s: not a count: %g", what, key, x);
    *out = (int64_t)x;
    return 0;
}

static int read_sums(const lmp_json *r, const char *what, lmp_bcache_result *out)
{
    lmp_bcache_result x = {0};
    const lmp_json *lam = lmp_json_get(r, "lambada");
    int st = read_count(r, "windows", what, &x.score.windows);
    if (!st) st = read_count(r, "scored", what, &x.score.scored);
    if (!st) st = lmp_json_get_number(r, "nll_sum", what, &x.score.nll_sum);
    if (!st) st = lmp_json_get_number(r, "kld_sum", what, &x.score.kld_sum);
    if (!st) st = read_count(r, "top1_hits", what, &x.score.top1_hits);
    if (!st && lam) st = read_count(lam, "passages", what, &x.lambada.passages);
    if (!st && lam) st = read_count(lam, "correct", what, &x.lambada.correct);
    if (!st && (!isfinite(x.score.nll_sum) || !isfinite(x.score.kld_sum) || x.score.top1_hits > x.score.scored ||
                x.lambada.correct > x.lambada.passages))
        st = lmp_fail(LMP_EINVAL, "%s: sums that no evaluation gives", what);
    if (!st) *out = x;
    return st;
}

int lmp_analysis_resume(lmp_analysis *a, const lmp_json *doc, const char *path)
{
    int st = same_string(doc, "fingerprint", a->fingerprint, path, "fingerprint: the config, the backend or the lmpress version");
    if (!st) st = same_string(doc, "variant", a->v->name, path, "variant");
    if (!st) st = same_string(doc, "mode", lmp_an_mode_name(a->o.mode), path, "--mode");
    if (!st) st = same_string(doc, "granularity", lmp_an_gran_name(a->o.gran), path, "--per");
    if (!st) st = same_string(doc, "metric", lmp_an_metric_name(a->o.metric), path, "--metric");
    if (st) return st;
    const lmp_json *us = lmp_json_get(doc, "units");
    if (!us || us->type != LMP_JSON_ARRAY) return lmp_fail(LMP_EINVAL, "%s: no \"units\" array", path);
    for (size_t k = 0; k < us->n; k++) {
        const lmp_json *e = &us->items[k];
        const char *name;
        char what[600];
        snprintf(what, sizeof what, "%s: units[%zu]", path, k);
        if ((st = lmp_json_get_string(e, "name", what, &name))) return st;
        const lmp_json *r = lmp_json_get(e, "result");
        if (!r || r->type != LMP_JSON_OBJECT) return lmp_fail(LMP_EINVAL, "%s: no \"result\" object", what);
        int u = 0;
        while (u < a->n_units && strcmp(a->units[u].name, name) != 0) u++;
        if (u == a->n_units) return lmp_fail(LMP_EINVAL, "%s: unit \"%s\" is not a unit of this analysis", what, name);
        if (a->unit_finished[u]) return lmp_fail(LMP_EINVAL, "%s: unit \"%s\" appears twice", what, name);
        if ((st = read_sums(r, what, &a->units[u].res))) return st;
        a->unit_finished[u] = 1;
        a->n_finished++;
        a->n_resumed++;
    }
    return 0;
}
