/* table_diff.c — see table_diff.h. */
#include "report/table_diff.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

/* The floors; why these numbers: docs/backends.md, "Tolerances".  In short:
 *  - exact: the forward differs by f32 rounding only (measured ppl rel <= 7e-8 on stories260K,
 *    2.4e-6 on SmolLM2, where CLBlast's GEMMs and 49 152-wide log-softmax rows sum in other orders);
 *  - rounding and solver: a last-bit difference moves a value across a rounding boundary now and
 *    then, a flip is a whole grid step, and it propagates (GPTQ's into every later column); the
 *    floor is 4x the worst difference measured on stories260K's W8A8 configs, and where rounding
 *    alone moves a variant further (the noise tables) that measured spread, times
 *    LMP_NOISE_FACTOR, is allowed instead. */
const lmp_tolerance lmp_class_tolerance[LMP_N_CLASSES] = {
    [LMP_CLASS_EXACT] = {.ppl_rel = 1e-5, .kld_abs = 1e-5, .kld_rel = 1e-4, .top1_abs = 5e-4, .lambada_se = 0},
    [LMP_CLASS_ROUNDING] = {.ppl_rel = 5e-3, .kld_abs = 1e-4, .kld_rel = 0.15, .top1_abs = 1e-2, .lambada_se = 2},
    [LMP_CLASS_SOLVER] = {.ppl_rel = 5e-3, .kld_abs = 1e-4, .kld_rel = 0.15, .top1_abs = 1e-2, .lambada_se = 2},
};

int lmp_class_by_name(const char *name)
{
    for (int c = 0; c < LMP_N_CLASSES; c++)
        if (strcmp(name, lmp_class_name((lmp_variant_class)c)) == 0) return c;
    return -1;
}

const char *lmp_class_name(lmp_variant_class c)
{
    static const char *const names[] = {"exact", "rounding", "solver"};
    return c < LMP_N_CLASSES ? names[c] : "?";
}

static const char *param_string(const lmp_json *params, const char *key, const char *dflt)
{
    const lmp_json *v = params ? lmp_json_get(params, key) : NULL;
    return v && v->type == LMP_JSON_STRING ? v->str : dflt;
}

static lmp_variant_class stage_class(const lmp_json *stage)
{
    const lmp_json *s = lmp_json_get(stage, "strategy"), *params = lmp_json_get(stage, "params");
    const char *name = s && s->type == LMP_JSON_STRING ? s->str : "";
    if (strcmp(name, "rtn") == 0)
        return strcmp(param_string(params, "act", "none"), "none") == 0 ? LMP_CLASS_EXACT : LMP_CLASS_ROUNDING;
    if (strcmp(name, "sparse24") == 0) {
        const char *method = param_string(params, "method", "");
        return strcmp(method, "magnitude") == 0   ? LMP_CLASS_EXACT
               : strcmp(method, "sparsegpt") == 0 ? LMP_CLASS_SOLVER
                                                  : LMP_CLASS_ROUNDING;
    }
    if (strcmp(name, "gptq") == 0) {
        const lmp_json *bits = params ? lmp_json_get(params, "bits") : NULL;
        return bits && bits->type == LMP_JSON_NUMBER && bits->number >= 16 ? LMP_CLASS_EXACT : LMP_CLASS_SOLVER;
    }
    return LMP_CLASS_ROUNDING; /* smoothquant, shift, shift_smoothquant, anything else */
}

lmp_variant_class lmp_variant_classify(const lmp_json *variant)
{
    const lmp_json *stages = lmp_json_get(variant, "stages");
    /* No stage (the unmodified model, or an external variant's fixed file, whose "stages" is
     * empty): nothing random or solver-dependent made it, so its numbers must repeat exactly. */
    lmp_variant_class c = LMP_CLASS_EXACT;
    for (size_t i = 0; stages && stages->type == LMP_JSON_ARRAY && i < stages->n; i++) {
        lmp_variant_class s = stage_class(&stages->items[i]);
        if (s > c) c = s;
    }
    return c;
}

/* ---- the numbers of one variant, in a fixed order ------------------------------------------ */

enum { PPL, KLD, TOP1, LAMBADA, N_KINDS };
static const char *const kind_names[N_KINDS] = {"ppl", "kld", "top1", "lambada"};
enum { MAX_NUMBERS = 3 * 32 + 1 };

/* A variant's numbers: bits per weight, then ppl, kld, top1 of each text of `texts` (the first
 * table's evaluation object, so every table is read in its order), then LAMBADA accuracy with
 * its standard error and passages.  JSON null (a non-finite value) reads as NaN. */
typedef struct numbers {
    double bits, v[MAX_NUMBERS];
    int kind[MAX_NUMBERS], n;
    double lambada_se, lambada_n;
} numbers;

static int number(const lmp_json *j, const char *key, const char *what, double *out)
{
    const lmp_json *v = j ? lmp_json_get(j, key) : NULL;
    if (v && v->type == LMP_JSON_NULL) {
        *out = NAN;
        return 0;
    }
    return lmp_json_get_number(j, key, what, out);
}

static int read_numbers(const lmp_json *variant, const lmp_json *texts, const char *table, const char *name,
                        numbers *out)
{
    memset(out, 0, sizeof *out);
    int st = number(variant, "bits_per_weight", table, &out->bits);
    const lmp_json *ev = lmp_json_get(variant, "eval");
    if (!st && texts->n > 32) return lmp_fail(LMP_EINVAL, "%s: more than 32 evaluation texts", table);
    if (!st && (!ev || ev->type != LMP_JSON_OBJECT || ev->n != texts->n))
        return lmp_fail(LMP_EINVAL, "%s: variant '%s' is not evaluated on the same texts", table, name);
    for (size_t t = 0; !st && t < texts->n; t++) {
        const lmp_json *e = lmp_json_get(ev, texts->keys[t]);
        if (!e) return lmp_fail(LMP_EINVAL, "%s: variant '%s' has no text '%s'", table, name, texts->keys[t]);
        for (int k = PPL; !st && k <= TOP1; k++) {
            out->kind[out->n] = k;
            st = number(e, kind_names[k], table, &out->v[out->n++]);
        }
    }
    const lmp_json *l = lmp_json_get(variant, "lambada");
    if (!st && l) {
        out->kind[out->n] = LAMBADA;
        if (!(st = number(l, "acc", table, &out->v[out->n++])) && !(st = number(l, "stderr", table, &out->lambada_se)))
            st = number(l, "passages", table, &out->lambada_n);
    }
    return st;
}

/* How far y is from x: relative for perplexity; 0 when both are non-finite, inf when one is. */
static double distance(int kind, double x, double y)
{
    if (!isfinite(x) || !isfinite(y)) return isfinite(x) == isfinite(y) ? 0 : INFINITY;
    double d = fabs(y - x);
    return kind == PPL && d > 0 ? d / fabs(x) : d;
}

/* The class's floor for number k of a (b's LAMBADA standard error joins a's). */
static double floor_of(const lmp_tolerance *tol, const numbers *a, const numbers *b, int k)
{
    switch (a->kind[k]) {
    case PPL: return tol->ppl_rel;
    case KLD: return fmax(tol->kld_abs, tol->kld_rel * fabs(a->v[k]));
    case TOP1: return tol->top1_abs;
    default: /* one passage, or lambada_se standard errors of the difference of two accuracies */
        return fmax(1.0 / fmax(a->lambada_n, 1.0),
                    tol->lambada_se * sqrt(a->lambada_se * a->lambada_se + b->lambada_se * b->lambada_se)) + 1e-12;
    }
}

static int variant_name(const lmp_table *t, size_t i, const char **name)
{
    return lmp_json_get_string(&lmp_json_get(t->json, "variants")->items[i], "name", t->name, name);
}

static int check_shape(const lmp_table *a, const lmp_table *t)
{
    const lmp_json *va = lmp_json_get(a->json, "variants"), *vt = lmp_json_get(t->json, "variants");
    if (!vt || vt->type != LMP_JSON_ARRAY) return lmp_fail(LMP_EINVAL, "%s: no \"variants\" array", t->name);
    if (va->n != vt->n)
        return lmp_fail(LMP_EINVAL, "%s has %zu variants, %s has %zu: not tables of one config", a->name, va->n,
                        t->name, vt->n);
    for (size_t i = 0; i < va->n; i++) {
        const char *na, *nt;
        int st;
        if ((st = variant_name(a, i, &na)) || (st = variant_name(t, i, &nt))) return st;
        if (strcmp(na, nt) != 0)
            return lmp_fail(LMP_EINVAL, "%s: variant %zu is '%s', in %s it is '%s'", t->name, i + 1, nt, a->name, na);
    }
    return 0;
}

int lmp_table_diff(const lmp_table *a, const lmp_table *b, const lmp_table *noise, int n_noise, FILE *out,
                   lmp_diff_summary *sum)
{
    return lmp_table_diff_as(a, b, noise, n_noise, -1, out, sum);
}

int lmp_table_diff_as(const lmp_table *a, const lmp_table *b, const lmp_table *noise, int n_noise, int as_class,
                      FILE *out, lmp_diff_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    const lmp_json *va = lmp_json_get(a->json, "variants");
    if (!va || va->type != LMP_JSON_ARRAY) return lmp_fail(LMP_EINVAL, "%s: no \"variants\" array", a->name);
    int st = check_shape(a, b);
    for (int j = 0; !st && j < n_noise; j++) st = check_shape(a, &noise[j]);
    for (size_t i = 0; !st && i < va->n; i++) {
        const lmp_json *x = &va->items[i], *texts = lmp_json_get(x, "eval");
        const char *name;
        if ((st = variant_name(a, i, &name))) break;
        if (!texts || texts->type != LMP_JSON_OBJECT)
            return lmp_fail(LMP_EINVAL, "%s: variant '%s' has no \"eval\" object", a->name, name);
        numbers na, nb, nn;
        if ((st = read_numbers(x, texts, a->name, name, &na)) ||
            (st = read_numbers(&lmp_json_get(b->json, "variants")->items[i], texts, b->name, name, &nb)))
            break;
        if (na.n != nb.n) return lmp_fail(LMP_EINVAL, "%s: variant '%s': LAMBADA in only one table", b->name, name);
        double spread[MAX_NUMBERS] = {0};
        for (int j = 0; j < n_noise; j++) {
            if ((st = read_numbers(&lmp_json_get(noise[j].json, "variants")->items[i], texts, noise[j].name, name, &nn)))
                return st;
            if (nn.n != na.n) return lmp_fail(LMP_EINVAL, "%s: variant '%s': LAMBADA in only one table", noise[j].name, name);
            for (int k = 0; k < na.n; k++) spread[k] = fmax(spread[k], distance(na.kind[k], na.v[k], nn.v[k]));
        }
        const lmp_variant_class cls = as_class >= 0 ? (lmp_variant_class)as_class : lmp_variant_classify(x);
        const int bad_bits = distance(TOP1, na.bits, nb.bits) != 0;
        int bad = bad_bits;
        sum->numbers += 1 + na.n;
        if (out) fprintf(out, "%-26s %-8s", name, lmp_class_name(cls));
        for (int k = 0; k < na.n; k++) {
            const double d = distance(na.kind[k], na.v[k], nb.v[k]);
            const double allowed = fmax(floor_of(&lmp_class_tolerance[cls], &na, &nb, k), LMP_NOISE_FACTOR * spread[k]);
            const int beyond = !(d <= allowed);
            bad += beyond;
            if (d > sum->worst[cls][na.kind[k]]) sum->worst[cls][na.kind[k]] = d;
            if (out && na.kind[k] == PPL && texts->n > 1) fprintf(out, "  [%s]", texts->keys[k / 3]);
            if (out)
                fprintf(out, "  %s %.6g vs %.6g (%.1e%s%.1e)%s", kind_names[na.kind[k]], nb.v[k], na.v[k], d,
                        beyond ? " > " : " <= ", allowed, beyond ? " BEYOND" : "");
        }
        if (out) fprintf(out, "%s\n", bad_bits ? "  bits/weight BEYOND" : "");
        sum->beyond += bad;
        sum->variants++;
    }
    return st;
}
