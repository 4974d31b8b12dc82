/* rope.c — see rope.h.  The tables follow transformers' modeling_rope_utils.py (v5), computed in
 * double and rounded to f32 once (transformers computes them in f32: the two differ by an ulp). */
#include "arch/rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "formats/json.h"

void lmp_rope_default(lmp_rope *r, float theta, int64_t n_rot, int64_t head_dim)
{
    memset(r, 0, sizeof *r);
    snprintf(r->type, sizeof r->type, "default");
    r->theta = theta;
    r->n_rot = n_rot;
    r->mscale = 1.0f;
    r->plain = n_rot == head_dim;
    for (int64_t i = 0; i < n_rot / 2 && i < LMP_ROPE_MAX_PAIRS; i++)
        r->inv_freq[i] = (float)pow((double)theta, -2.0 * (double)i / (double)n_rot);
}

void lmp_rope_linear(lmp_rope *r, double factor)
{
    snprintf(r->type, sizeof r->type, "linear");
    r->plain = 0;
    r->factor = factor;
    for (int64_t i = 0; i < r->n_rot / 2; i++) r->inv_freq[i] = (float)((double)r->inv_freq[i] / factor);
}

int lmp_rope_with_factors(lmp_rope *r, const char *what, const float *factors, int64_t n)
{
    if (n != r->n_rot / 2)
        return lmp_fail(LMP_EINVAL, "%s: rope_freqs has %lld entries, expected %lld (one per rotated pair)", what,
                        (long long)n, (long long)(r->n_rot / 2));
    for (int64_t i = 0; i < n; i++)
        if (!(factors[i] > 0) || !isfinite(factors[i]))
            return lmp_fail(LMP_EINVAL, "%s: rope_freqs[%lld] = %g is not a positive number", what, (long long)i,
                            (double)factors[i]);
    snprintf(r->type, sizeof r->type, "llama3");
    r->plain = 0;
    for (int64_t i = 0; i < n; i++) r->inv_freq[i] = (float)((double)r->inv_freq[i] / (double)factors[i]);
    return 0;
}

/* ---- config.json -------------------------------------------------------------------------- */
static const lmp_json *member(const lmp_json *o, const char *key)
{
    const lmp_json *v = lmp_json_get(o, key);
    return v && v->type != LMP_JSON_NULL ? v : NULL;
}

/* o[key] as a positive number; def when absent (def < 0: required). */
static int number(const lmp_json *o, const char *what, const char *where, const char *key, double def, double *out)
{
    const lmp_json *v = member(o, key);
    if (!v) {
        if (def < 0) return lmp_fail(LMP_EINVAL, "%s: %s needs \"%s\"", what, where, key);
        *out = def;
        return 0;
    }
    if (v->type != LMP_JSON_NUMBER || !(v->number > 0) || !isfinite(v->number))
        return lmp_fail(LMP_EINVAL, "%s: %s.%s must be a positive number", what, where, key);
    *out = v->number;
    return 0;
}

/* The keys each type reads (besides rope_type/type, and rope_theta in rope_parameters). */
typedef struct rope_type_keys {
    const char *type;
    const char *keys[9];
} rope_type_keys;
static const rope_type_keys known_types[] = {
    {"default", {NULL}},
    {"linear", {"factor", NULL}},
    {"dynamic", {"factor", "original_max_position_embeddings", NULL}},
    {"llama3", {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", NULL}},
    {"yarn", {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
              "original_max_position_embeddings", "truncate", NULL}},
    {"longrope", {"factor", "short_factor", "long_factor", "attention_factor", "original_max_position_embeddings",
                  NULL}},
};

static int check_keys(const lmp_json *p, const char *what, const char *where, const rope_type_keys *t)
{
    for (size_t k = 0; k < p->n; k++) {
        const char *key = p->keys[k];
        int ok = !strcmp(key, "rope_type") || !strcmp(key, "type") || !strcmp(key, "rope_theta") ||
                 !strcmp(key, "partial_rotary_factor");
        for (int i = 0; !ok && t->keys[i]; i++) ok = !strcmp(key, t->keys[i]);
        if (!ok && p->items[k].type != LMP_JSON_NULL)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.%s is not read for rope type \"%s\" (it may change the "
                            "rotation, so the model is refused rather than run without it)", what, where, key, t->type);
    }
    return 0;
}

static void llama3_table(lmp_rope *r, double factor, double low, double high, double old_ctx)
{
    const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (int64_t i = 0; i < r->n_rot / 2; i++) {
        const double f = r->inv_freq[i], wavelen = 2 * M_PI / f;
        double v = wavelen > low_wavelen ? f / factor : f;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            const double smooth = (old_ctx / wavelen - low) / (high - low);
            v = (1 - smooth) * v / factor + smooth * v;
        }
        r->inv_freq[i] = (float)v;
    }
}

static double yarn_get_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

static int yarn_table(lmp_rope *r, const lmp_json *p, const char *what, const char *where, int64_t max_pos)
{
    double factor = 1, att = 0, mscale = 0, mscale_all = 0, beta_fast = 32, beta_slow = 1, orig = (double)max_pos;
    int st;
    if ((st = number(p, what, where, "factor", -1, &factor)) || (st = number(p, what, where, "beta_fast", 32, &beta_fast)) ||
        (st = number(p, what, where, "beta_slow", 1, &beta_slow)) ||
        (st = number(p, what, where, "attention_factor", 0, &att)) || (st = number(p, what, where, "mscale", 0, &mscale)) ||
        (st = number(p, what, where, "mscale_all_dim", 0, &mscale_all)))
        return st;
    if (member(p, "original_max_position_embeddings")) {
        if ((st = number(p, what, where, "original_max_position_embeddings", -1, &orig))) return st;
        factor = (double)max_pos / orig; /* as transformers: the ratio replaces `factor` */
    }
    const lmp_json *tr = member(p, "truncate");
    if (tr && tr->type != LMP_JSON_BOOL) return lmp_fail(LMP_EINVAL, "%s: %s.truncate must be true or false", what, where);
    const int truncate = tr ? tr->boolean : 1;
    if (att == 0)
        att = mscale && mscale_all ? yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all)
                                   : yarn_get_mscale(factor, 1);
    lmp_rope_yarn(r, factor, orig, beta_fast, beta_slow, truncate);
    r->mscale = (float)att;
    return 0;
}

double lmp_rope_yarn_mscale(double factor) { return yarn_get_mscale(factor, 1); }

void lmp_rope_yarn(lmp_rope *r, double factor, double orig, double beta_fast, double beta_slow, int truncate)
{
    const double dim = (double)r->n_rot, base = r->theta;
    double low = dim * log(orig / (beta_fast * 2 * M_PI)) / (2 * log(base));
    double high = dim * log(orig / (beta_slow * 2 * M_PI)) / (2 * log(base));
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < r->n_rot / 2; i++) {
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const double extra = 1 - ramp, f = r->inv_freq[i];
        r->inv_freq[i] = (float)(f / factor * (1 - extra) + f * extra);
    }
    snprintf(r->type, sizeof r->type, "yarn");
    r->plain = 0;
    r->factor = factor;
    r->orig_ctx = orig;
}

/* table[i] /= the n_rot/2 positive numbers of p[key]. */
static int divide_by_factors(lmp_rope *r, float *table, const lmp_json *p, const char *key, const char *what,
                             const char *where)
{
    const lmp_json *f = member(p, key);
    if (!f || f->type != LMP_JSON_ARRAY || (int64_t)f->n != r->n_rot / 2)
        return lmp_fail(LMP_EINVAL, "%s: %s.%s must be a list of %lld numbers", what, where, key,
                        (long long)(r->n_rot / 2));
    for (int64_t i = 0; i < r->n_rot / 2; i++) {
        const lmp_json *v = &f->items[i];
        if (v->type != LMP_JSON_NUMBER || !(v->number > 0))
            return lmp_fail(LMP_EINVAL, "%s: %s.%s[%lld] must be a positive number", what, where, key, (long long)i);
        table[i] = (float)((double)table[i] / v->number);
    }
    return 0;
}

static int longrope_table(lmp_rope *r, const lmp_json *cfg, const lmp_json *p, const char *what, const char *where,
                          int64_t max_pos)
{
    /* Phi-3 keeps original_max_position_embeddings at the top of config.json. */
    double orig = 0, att = 0;
    int st;
    if ((st = number(cfg, what, "config.json", "original_max_position_embeddings", 0, &orig)) ||
        (!orig && (st = number(p, what, where, "original_max_position_embeddings", 0, &orig))) ||
        (st = number(p, what, where, "attention_factor", 0, &att)))
        return st;
    double factor = 1;
    if (orig) {
        factor = (double)max_pos / orig;
    } else {
        orig = (double)max_pos;
        if ((st = number(p, what, where, "factor", 1, &factor))) return st;
    }
    if (att == 0) att = factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig));
    memcpy(r->inv_freq_long, r->inv_freq, sizeof r->inv_freq);
    if ((st = divide_by_factors(r, r->inv_freq, p, "short_factor", what, where)) ||
        (st = divide_by_factors(r, r->inv_freq_long, p, "long_factor", what, where)))
        return st;
    r->long_after = (int64_t)orig;
    r->mscale = (float)att;
    return 0;
}

/* One set of RoPE parameters: p (rope_parameters, or one layer type's entry of it, with its own
 * rope_theta: has_theta; or transformers 4's rope_scaling, the base then being config.json's
 * rope_theta), named `where` in messages; p may be NULL (the default rotation). */
static int rope_from_params(const lmp_json *cfg, const lmp_json *p, int has_theta, const char *where, const char *what,
                            int64_t head_dim, int64_t max_pos, const lmp_rope_hf_names *names, lmp_rope *r,
                            int64_t *ctx)
{
    if (p && p->type != LMP_JSON_OBJECT) return lmp_fail(LMP_EINVAL, "%s: %s must be an object", what, where);
    double theta = 10000, prf = names->partial_default > 0 ? names->partial_default : 1, rot = 0;
    int st;
    if ((st = number(cfg, what, "config.json", names->theta, 10000, &theta)) ||
        (has_theta && (st = number(p, what, where, "rope_theta", theta, &theta))) ||
        (st = number(cfg, what, "config.json", names->partial, prf, &prf)) ||
        (p && (st = number(p, what, where, "partial_rotary_factor", prf, &prf))) ||
        (names->rotary_dim && (st = number(cfg, what, "config.json", names->rotary_dim, 0, &rot))))
        return st;
    if (rot > 0) prf = rot / (double)head_dim; /* GPT-J: rotary_dim of the head's dims */
    const int64_t n_rot = (int64_t)((double)head_dim * prf);
    if (prf > 1 || n_rot % 2 || n_rot <= 0 || n_rot / 2 > LMP_ROPE_MAX_PAIRS)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: partial_rotary_factor %g of head_dim %lld gives %lld rotated dims "
                        "(must be even, at least 2 and at most head_dim and %d)", what, prf, (long long)head_dim,
                        (long long)n_rot, 2 * LMP_ROPE_MAX_PAIRS);
    lmp_rope_default(r, (float)theta, n_rot, head_dim);
    const lmp_json *type = p ? member(p, "rope_type") : NULL;
    if (p && !type) type = member(p, "type");
    if (type && type->type != LMP_JSON_STRING)
        return lmp_fail(LMP_EINVAL, "%s: %s.rope_type must be a string", what, where);
    const char *name = type ? type->str : "default";
    const rope_type_keys *t = NULL;
    for (size_t i = 0; i < sizeof known_types / sizeof *known_types; i++)
        if (!strcmp(name, known_types[i].type)) t = &known_types[i];
    if (!t)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s rope_type \"%s\" is not supported (lmpress implements default, "
                        "linear, dynamic, llama3, yarn and longrope)", what, where, name);
    if (p && (st = check_keys(p, what, where, t))) return st;
    snprintf(r->type, sizeof r->type, "%s", name);
    double factor = 1, low = 0, high = 0, orig = 0;
    if (!strcmp(name, "default")) return 0;
    r->plain = 0;
    if (!strcmp(name, "linear")) {
        if ((st = number(p, what, where, "factor", -1, &factor))) return st;
        lmp_rope_linear(r, factor);
    } else if (!strcmp(name, "dynamic")) {
        /* Dynamic NTK changes the base only for sequences past max_position_embeddings. */
        if ((st = number(p, what, where, "factor", -1, &factor))) return st;
        if (max_pos < *ctx) *ctx = max_pos;
    } else if (!strcmp(name, "llama3")) {
        if ((st = number(p, what, where, "factor", -1, &factor)) ||
            (st = number(p, what, where, "low_freq_factor", -1, &low)) ||
            (st = number(p, what, where, "high_freq_factor", -1, &high)) ||
            (st = number(p, what, where, "original_max_position_embeddings", -1, &orig)))
            return st;
        if (!(high > low))
            return lmp_fail(LMP_EINVAL, "%s: %s.high_freq_factor must exceed low_freq_factor", what, where);
        llama3_table(r, factor, low, high, orig);
    } else if (!strcmp(name, "yarn")) {
        if ((st = yarn_table(r, p, what, where, max_pos))) return st;
    } else if ((st = longrope_table(r, cfg, p, what, where, max_pos))) {
        return st;
    }
    snprintf(r->type, sizeof r->type, "%s", name);
    return 0;
}

int lmp_rope_from_hf(const lmp_json *cfg, const char *what, int64_t head_dim, int64_t max_pos,
                     const lmp_rope_hf_names *family, lmp_rope *r, lmp_rope *local, int64_t *ctx)
{
    static const lmp_rope_hf_names llama = {"rope_theta", "partial_rotary_factor", 0, NULL};
    const lmp_rope_hf_names *names = family ? family : &llama;
    const lmp_json *rp = member(cfg, "rope_parameters"), *rs = member(cfg, "rope_scaling");
    if (rp && rs)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: has both rope_parameters and rope_scaling (which one applies is "
                        "ambiguous)", what);
    memset(local, 0, sizeof *local);
    int per_type = 0;
    for (size_t k = 0; rp && rp->type == LMP_JSON_OBJECT && k < rp->n; k++)
        per_type |= rp->items[k].type == LMP_JSON_OBJECT;
    if (!per_type) {
        int st = rope_from_params(cfg, rp ? rp : rs, rp != NULL, rp ? "rope_parameters" : "rope_scaling", what,
                                  head_dim, max_pos, names, r, ctx);
        /* transformers 4's Gemma 3: the sliding layers' base beside the global one */
        double local_base = 0;
        if (!st && (st = number(cfg, what, "config.json", "rope_local_base_freq", 0, &local_base)) == 0 && local_base)
            lmp_rope_default(local, (float)local_base, r->n_rot, head_dim);
        return st;
    }
    /* transformers 5: one set per layer type (Gemma 3's global and local bases) */
    for (size_t k = 0; k < rp->n; k++) {
        const int full = !strcmp(rp->keys[k], "full_attention"), sliding = !strcmp(rp->keys[k], "sliding_attention");
        if ((!full && !sliding) || rp->items[k].type != LMP_JSON_OBJECT)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: rope_parameters.%s: only full_attention and sliding_attention "
                            "entries are read", what, rp->keys[k]);
        char where[64];
        snprintf(where, sizeof where, "rope_parameters.%s", rp->keys[k]);
        int st = rope_from_params(cfg, &rp->items[k], 1, where, what, head_dim, max_pos, names, full ? r : local, ctx);
        if (st) return st;
    }
    if (!member(rp, "full_attention"))
        return lmp_fail(LMP_EINVAL, "%s: rope_parameters has no full_attention entry", what);
    return 0;
}
