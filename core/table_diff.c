/* table_diff.c — see table_diff.h. */
#include "table_diff.h"

#include <math.h>
#include <string.h>

#include "error.h"

/* Why these numbers: docs/backends.md, "Tolerances".  In short:
 *  - exact: the forward differs by f32 rounding only (measured ppl rel <= 7e-8 on stories260K,
 *    4e-6 on SmolLM2 where CLBlast's GEMMs and 49 152-wide log-softmax rows sum in other orders);
 *  - rounding: a last-bit difference moves an activation across a rounding boundary with
 *    probability ~|x/s| u and a flip is a whole grid step; 4x the worst measured difference;
 *  - solver: GPTQ's codes are a discontinuous function of H and each flip is propagated into
 *    the columns after it; the bound is 2x the widest spread measured on one backend when only
 *    the order of H's f32 sums changes (calibration.hessian_rows). */
const lmp_tolerance lmp_class_tolerance[LMP_N_CLASSES] = {
    [LMP_CLASS_EXACT] = {.ppl_rel = 1e-5, .kld_abs = 1e-5, .kld_rel = 1e-4, .top1_abs = 5e-4, .lambada_se = 0},
    [LMP_CLASS_ROUNDING] = {.ppl_rel = 5e-3, .kld_abs = 1e-4, .kld_rel = 0.15, .top1_abs = 1e-2, .lambada_se = 2},
    [LMP_CLASS_SOLVER] = {.ppl_rel = 0.1, .kld_abs = 1e-4, .kld_rel = 0.15, .top1_abs = 2e-2, .lambada_se = 2},
};

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
    lmp_variant_class c = LMP_CLASS_EXACT;
    for (size_t i = 0; stages && stages->type == LMP_JSON_ARRAY && i < stages->n; i++) {
        lmp_variant_class s = stage_class(&stages->items[i]);
        if (s > c) c = s;
    }
    return c;
}

/* A number of the table; JSON null (a non-finite value) reads as NaN. */
static int number(const lmp_json *j, const char *key, const char *what, double *out)
{
    const lmp_json *v = lmp_json_get(j, key);
    if (v && v->type == LMP_JSON_NULL) {
        *out = NAN;
        return 0;
    }
    return lmp_json_get_number(j, key, what, out);
}

/* |b - a|, 0 when both are non-finite, infinite when only one is. */
static double diff(double a, double b)
{
    if (!isfinite(a) || !isfinite(b)) return isfinite(a) == isfinite(b) ? 0 : INFINITY;
    return fabs(b - a);
}

static void note_worst(double *worst, int k, double d)
{
    if (d > worst[k]) worst[k] = d;
}

int lmp_table_diff(const lmp_json *a, const lmp_json *b, const char *name_a, const char *name_b, FILE *out,
                   lmp_diff_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    const lmp_json *va = lmp_json_get(a, "variants"), *vb = lmp_json_get(b, "variants");
    if (!va || va->type != LMP_JSON_ARRAY) return lmp_fail(LMP_EINVAL, "%s: no \"variants\" array", name_a);
    if (!vb || vb->type != LMP_JSON_ARRAY) return lmp_fail(LMP_EINVAL, "%s: no \"variants\" array", name_b);
    if (va->n != vb->n)
        return lmp_fail(LMP_EINVAL, "%s has %zu variants, %s has %zu: not tables of one config", name_a, va->n,
                        name_b, vb->n);
    for (size_t i = 0; i < va->n; i++) {
        const lmp_json *x = &va->items[i], *y = &vb->items[i];
        const char *nx, *ny;
        int st;
        if ((st = lmp_json_get_string(x, "name", name_a, &nx)) || (st = lmp_json_get_string(y, "name", name_b, &ny)))
            return st;
        if (strcmp(nx, ny) != 0)
            return lmp_fail(LMP_EINVAL, "%s: variant %zu is '%s', in %s it is '%s'", name_b, i + 1, ny, name_a, nx);
        const lmp_variant_class cls = lmp_variant_classify(x);
        const lmp_tolerance *tol = &lmp_class_tolerance[cls];
        double *worst = sum->worst[cls];
        double bx, by;
        if ((st = number(x, "bits_per_weight", name_a, &bx)) || (st = number(y, "bits_per_weight", name_b, &by)))
            return st;
        sum->numbers++;
        if (diff(bx, by) != 0) {
            sum->beyond++;
            if (out) fprintf(out, "%-28s %-8s bits/weight %.6g vs %.6g  BEYOND\n", nx, lmp_class_name(cls), by, bx);
        }
        const lmp_json *ex = lmp_json_get(x, "eval"), *ey = lmp_json_get(y, "eval");
        if (!ex || !ey || ex->type != LMP_JSON_OBJECT || ey->type != LMP_JSON_OBJECT || ex->n != ey->n)
            return lmp_fail(LMP_EINVAL, "%s: variant '%s' is not evaluated on the texts of %s", name_b, nx, name_a);
        for (size_t t = 0; t < ex->n; t++) {
            const lmp_json *sx = &ex->items[t], *sy = lmp_json_get(ey, ex->keys[t]);
            if (!sy) return lmp_fail(LMP_EINVAL, "%s: variant '%s' has no text '%s'", name_b, nx, ex->keys[t]);
            double px, py, kx, ky, tx, ty;
            if ((st = number(sx, "ppl", name_a, &px)) || (st = number(sy, "ppl", name_b, &py)) ||
                (st = number(sx, "kld", name_a, &kx)) || (st = number(sy, "kld", name_b, &ky)) ||
                (st = number(sx, "top1", name_a, &tx)) || (st = number(sy, "top1", name_b, &ty)))
                return st;
            double dp = diff(px, py);
            if (dp > 0) dp /= fabs(px); /* relative; 0 for two non-finite values */
            const double dk = diff(kx, ky), dt = diff(tx, ty);
            const int bad_p = !(dp <= tol->ppl_rel), bad_k = !(dk <= tol->kld_abs || dk <= tol->kld_rel * fabs(kx)),
                      bad_t = !(dt <= tol->top1_abs);
            sum->numbers += 3;
            sum->beyond += bad_p + bad_k + bad_t;
            note_worst(worst, 0, dp);
            note_worst(worst, 1, dk);
            note_worst(worst, 2, dt);
            if (out)
                fprintf(out, "%-28s %-8s %s: ppl %.6f vs %.6f (rel %.1e)  kld %.5f vs %.5f (%.1e)  top1 %.4f vs %.4f (%.1e)  %s%s%s%s\n",
                        nx, lmp_class_name(cls), ex->keys[t], py, px, dp, ky, kx, dk, ty, tx, dt,
                        bad_p || bad_k || bad_t ? "BEYOND" : "ok", bad_p ? " ppl" : "", bad_k ? " kld" : "",
                        bad_t ? " top1" : "");
        }
        const lmp_json *lx = lmp_json_get(x, "lambada"), *ly = lmp_json_get(y, "lambada");
        if (!lx != !ly) return lmp_fail(LMP_EINVAL, "%s: variant '%s': LAMBADA in only one table", name_b, nx);
        if (lx) {
            double ax, ay, se, n;
            if ((st = number(lx, "acc", name_a, &ax)) || (st = number(ly, "acc", name_b, &ay)) ||
                (st = number(lx, "stderr", name_a, &se)) || (st = number(lx, "passages", name_a, &n)))
                return st;
            const double da = diff(ax, ay), allowed = fmax(tol->lambada_se * se, 1.0 / fmax(n, 1.0));
            const int bad = !(da <= allowed + 1e-12);
            sum->numbers++;
            sum->beyond += bad;
            note_worst(worst, 3, da);
            if (out)
                fprintf(out, "%-28s %-8s lambada: acc %.4f vs %.4f (%.1e, allowed %.1e)  %s\n", nx, lmp_class_name(cls),
                        ay, ax, da, allowed, bad ? "BEYOND" : "ok");
        }
        sum->variants++;
    }
    return 0;
}
