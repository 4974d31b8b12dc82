/* analyze_doc.c — an analysis read back from its --json file (analyze.h), so that another page
 * can draw its charts: `compare --html FILE --analysis A.json` puts analyze's charts beside the
 * comparison.  Only what the charts use is filled in (units, ranks, gains, proxies, curves,
 * Spearman's rho, the ranking's cost); strings point into the parsed document, which must
 * outlive the result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "base/error.h"
#include "model/tensor_names.h"

/* A unit's place in model order: by block, then by role (q .. down), a block's unit ("mixed")
 * after them; a role's units (block -1) in role order. */
static int model_position(const lmp_an_unit *u)
{
    int r = lmp_role_by_name(u->role);
    if (r < 0) r = LMP_ROLE_COUNT; /* "mixed" */
    return u->block < 0 ? r : (u->block + 1) * (LMP_ROLE_COUNT + 1) + r;
}

static int by_model_order(const void *x, const void *y)
{
    const lmp_an_unit *a = x, *b = y;
    int pa = model_position(a), pb = model_position(b);
    return pa != pb ? (pa < pb ? -1 : 1) : strcmp(a->name, b->name);
}

static double number_or_nan(const lmp_json *j, const char *key)
{
    const lmp_json *x = lmp_json_get(j, key);
    return x && x->type == LMP_JSON_NUMBER ? x->number : NAN;
}

int lmp_analysis_doc_read(const lmp_json *doc, const char *path, lmp_analysis_doc **out)
{
    *out = NULL;
    const char *variant, *mode, *gran, *metric;
    int st = lmp_json_get_string(doc, "variant", path, &variant);
    if (!st) st = lmp_json_get_string(doc, "mode", path, &mode);
    if (!st) st = lmp_json_get_string(doc, "granularity", path, &gran);
    if (!st) st = lmp_json_get_string(doc, "metric", path, &metric);
    if (st) return lmp_fail_prefix(st, "%s: not the --json of `lmpress analyze`", path);
    const lmp_json *partial = lmp_json_get(doc, "partial");
    if (partial && partial->type == LMP_JSON_BOOL && partial->boolean)
        return lmp_fail(LMP_EINVAL, "%s: an unfinished analysis (\"partial\": true): finish it with `lmpress analyze "
                        "... --json %s --resume`", path, path);
    const lmp_json *units = lmp_json_get(doc, "units");
    if (!units || units->type != LMP_JSON_ARRAY || units->n == 0 || units->n > 1000000)
        return lmp_fail(LMP_EINVAL, "%s: no \"units\" array", path);
    if (lmp_an_mode_by_name(mode) < 0 || lmp_an_gran_by_name(gran) < 0 || lmp_an_metric_by_name(metric) < 0)
        return lmp_fail(LMP_EINVAL, "%s: mode \"%s\", granularity \"%s\", metric \"%s\": not analyze's", path, mode, gran,
                        metric);
    lmp_analysis_doc *d = calloc(1, sizeof *d);
    if (!d || !(d->a.units = calloc(units->n, sizeof *d->a.units)) || !(d->a.order = calloc(units->n, sizeof *d->a.order))) {
        lmp_analysis_doc_free(d);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    lmp_analysis *a = &d->a;
    d->v.name = variant;
    a->v = &d->v;
    a->o.mode = (lmp_an_mode)lmp_an_mode_by_name(mode);
    a->o.gran = (lmp_an_gran)lmp_an_gran_by_name(gran);
    a->o.metric = (lmp_an_metric)lmp_an_metric_by_name(metric);
    a->spearman = number_or_nan(doc, "spearman");
    const lmp_json *cost = lmp_json_get(doc, "cost");
    a->rank_forwards = cost ? (int64_t)number_or_nan(cost, "ranking_block_forwards") : 0;
    a->rank_naive_forwards = cost ? (int64_t)number_or_nan(cost, "ranking_naive_block_forwards") : 0;
    for (size_t k = 0; k < units->n && !st; k++) {
        const lmp_json *u = &units->items[k];
        lmp_an_unit *un = &a->units[k];
        const char *name, *role;
        double rank, block;
        char what[600];
        snprintf(what, sizeof what, "%s: unit %zu", path, k);
        st = lmp_json_get_string(u, "name", what, &name);
        if (!st) st = lmp_json_get_string(u, "role", what, &role);
        if (!st) st = lmp_json_get_number(u, "rank", what, &rank);
        if (!st) st = lmp_json_get_number(u, "block", what, &block);
        if (!st && (!(block >= -1 && block < 1e6) || !(rank >= 1 && rank <= (double)units->n)))
            st = lmp_fail(LMP_EINVAL, "%s: block %g or rank %g out of range", what, block, rank);
        if (st) break;
        snprintf(un->name, sizeof un->name, "%s", name);
        un->role = role;
        un->block = (int)block;
        un->rank = (int)rank;
        un->value = number_or_nan(u, "value");
        un->gain = number_or_nan(u, "gain");
        un->proxy = number_or_nan(u, "proxy");
        un->proxy_rank = (int)number_or_nan(u, "proxy_rank");
        if (un->block + 1 > a->n_layers) a->n_layers = un->block + 1;
    }
    if (st) {
        lmp_analysis_doc_free(d);
        return st;
    }
    a->n_units = (int)units->n;
    qsort(a->units, units->n, sizeof *a->units, by_model_order);
    for (int u = 0; u < a->n_units; u++) a->order[a->units[u].rank - 1] = u; /* rank order, as analyze keeps it */
    const lmp_json *curve = lmp_json_get(doc, "curve");
    if (curve && curve->type == LMP_JSON_ARRAY && curve->n) {
        if (!(a->curve = calloc(curve->n, sizeof *a->curve))) {
            lmp_analysis_doc_free(d);
            return lmp_fail(LMP_ENOMEM, "out of memory");
        }
        for (size_t k = 0; k < curve->n; k++) {
            const lmp_json *order = lmp_json_get(&curve->items[k], "order");
            if (!order || order->type != LMP_JSON_STRING) continue;
            a->curve[a->n_curve++] = (lmp_an_point){.order = order->str, .k = (int)number_or_nan(&curve->items[k], "k"),
                                                    .value = number_or_nan(&curve->items[k], "value")};
        }
    }
    *out = d;
    return 0;
}

void lmp_analysis_doc_free(lmp_analysis_doc *d)
{
    if (!d) return;
    free(d->a.units);
    free(d->a.order);
    free(d->a.curve);
    free(d);
}
