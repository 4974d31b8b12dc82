/* config.c — see config.h.  Parsing, plugin loading, schema validation, pattern compilation and
 * file checks, in that order, so that a bad config is refused before the model is touched. */
#include "base/hash.h"
#include "base/suggest.h"
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/error.h"
#include "base/regex_limit.h"
#include "base/input_file.h"
#include "export/out_dir.h"
#include "model/kv_quant.h"

/* ---- error helpers: "file:line: path.to.key: message" ---------------------------------- */
/* The config file a setting was read from: lmp_config_load hangs its path on the root setting,
 * so that messages need no global and two configs can be loaded at once. */
static const char *file_of(const config_setting_t *s)
{
    /* A setting from an @included file names that file (libconfig keeps the name as written). */
    const char *inc = s ? config_setting_source_file(s) : NULL;
    if (inc) return inc;
    while (s && config_setting_parent(s)) s = config_setting_parent(s);
    const char *f = s ? config_setting_get_hook(s) : NULL;
    return f ? f : "(config)";
}

static void setting_path(const config_setting_t *s, char *buf, size_t n)
{
    const config_setting_t *chain[64];
    int depth = 0;
    for (; s && config_setting_parent(s) && depth < 64; s = config_setting_parent(s)) chain[depth++] = s;
    buf[0] = 0;
    for (int i = depth - 1; i >= 0; i--) {
        size_t used = strlen(buf);
        const char *name = config_setting_name(chain[i]);
        if (name) snprintf(buf + used, n - used, "%s%s", used ? "." : "", name);
        else snprintf(buf + used, n - used, "[%d]", config_setting_index(chain[i]));
    }
}

static int bad(const config_setting_t *s, const char *fmt, ...) LMP_PRINTF(2, 3);
static int bad(const config_setting_t *s, const char *fmt, ...)
{
    char where[512], msg[1024];
    setting_path(s, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lmp_fail(LMP_EINVAL, "%s:%d: %s: %s", file_of(s), config_setting_source_line(s),
                    where[0] ? where : "(top level)", msg);
}

/* A missing required setting: name the group it belongs in. */
static int missing(const config_setting_t *group, const char *key)
{
    return bad(group, "missing required setting '%s'", key);
}

/* Every member of `group` must be one of `allowed` (NULL-terminated). */
static int check_keys(const config_setting_t *group, const char *const *allowed)
{
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *m = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(m);
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, name) == 0;
        if (!ok) {
            char list[512] = "";
            size_t n = 0;
            for (const char *const *a = allowed; *a; a++, n++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         a == allowed ? "" : ", ", *a);
            const char *near = lmp_suggest(name, allowed, n);
            return bad(m, "unknown setting%s%s%s (expected one of: %s)", near ? " (did you mean '" : "",
                       near ? near : "", near ? "'?)" : "", list);
        }
    }
    return 0;
}

static int get_group(const config_setting_t *parent, const char *key, int required,
                     config_setting_t **out)
{
    *out = config_setting_get_member(parent, key);
    if (!*out) return required ? missing(parent, key) : 0;
    if (!config_setting_is_group(*out)) return bad(*out, "expected a group { ... }");
    return 0;
}

static int get_string(const config_setting_t *parent, const char *key, int required,
                      const char **out)
{
    const config_setting_t *s = config_setting_get_member(parent, key);
    if (!s) return required ? missing(parent, key) : 0;
    if (config_setting_type(s) != CONFIG_TYPE_STRING) return bad(s, "expected a string");
    *out = config_setting_get_string(s);
    if (!**out) return bad(s, "must not be empty");
    return 0;
}

/* A string that must be one of `choices` (NULL-terminated): *index gets its position, and keeps
 * its value when the setting is absent and not required. */
static int get_choice(const config_setting_t *parent, const char *key, int required, const char *const *choices,
                      int *index)
{
    const char *value = NULL;
    int st = get_string(parent, key, required, &value);
    if (st || !value) return st;
    int n = 0;
    while (choices[n] && strcmp(choices[n], value) != 0) n++;
    if (choices[n]) {
        *index = n;
        return 0;
    }
    char list[256] = ""; /* "a" or "b"; "a", "b" or "c" */
    for (int i = 0; choices[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                 i == 0 ? "" : choices[i + 1] ? ", " : " or ", choices[i]);
    return bad(config_setting_get_member(parent, key), "\"%s\" is not %s", value, list);
}

static int get_int(const config_setting_t *parent, const char *key, int64_t lo, int64_t hi,
                   int64_t *out)
{
    const config_setting_t *s = config_setting_get_member(parent, key);
    if (!s) return 0; /* keeps the default */
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) return bad(s, "expected an integer");
    long long v = config_setting_get_int64(s);
    if (v < lo || v > hi) return bad(s, "%lld is out of range [%lld, %lld]", v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

/* A number (an integer or a float) in [lo, hi]. */
static int get_number(const config_setting_t *parent, const char *key, double lo, double hi, double *out)
{
    const config_setting_t *s = config_setting_get_member(parent, key);
    if (!s) return 0; /* keeps the default */
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64 && t != CONFIG_TYPE_FLOAT) return bad(s, "expected a number");
    double v = t == CONFIG_TYPE_FLOAT ? config_setting_get_float(s) : (double)config_setting_get_int64(s);
    if (!(v >= lo && v <= hi)) return bad(s, "%g is out of range [%g, %g]", v, lo, hi);
    *out = v;
    return 0;
}

/* A string or an array of strings -> a vector of pointers into the config. */
static int get_strings(const config_setting_t *parent, const char *key, const char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    const config_setting_t *s = config_setting_get_member(parent, key);
    if (!s) return 0;
    if (config_setting_type(s) == CONFIG_TYPE_STRING) {
        if (!(*out = malloc(sizeof **out))) return lmp_fail(LMP_ENOMEM, "out of memory");
        (*out)[0] = config_setting_get_string(s);
        *n = 1;
        return 0;
    }
    if (!config_setting_is_array(s) && !config_setting_is_list(s))
        return bad(s, "expected a string or an array of strings [ \"...\", ... ]");
    int len = config_setting_length(s);
    if (!(*out = calloc((size_t)(len ? len : 1), sizeof **out))) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; i < len; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            free(*out); /* callers free only what they were given */
            *out = NULL;
            return bad(e, "expected a string");
        }
        (*out)[i] = config_setting_get_string(e);
    }
    *n = len;
    return 0;
}

/* The setting of item i of what get_strings read from parent.key (a lone string is item 0). */
static const config_setting_t *strings_item(const config_setting_t *parent, const char *key, int i)
{
    const config_setting_t *s = config_setting_get_member(parent, key);
    return config_setting_type(s) == CONFIG_TYPE_STRING ? s : config_setting_get_elem(s, (unsigned)i);
}

/* Relative paths are relative to the config file's folder; an existing file gets its canonical
 * name (reports then show "/src/models/x.bin", not "configs/../models/x.bin"). */
static char *resolve(const char *cfg_path, const char *p)
{
    const char *slash = strrchr(cfg_path, '/');
    char *out;
    if (p[0] == '/' || !slash) {
        out = strdup(p);
    } else {
        size_t n = (size_t)(slash - cfg_path) + 1 + strlen(p) + 1;
        if ((out = malloc(n))) snprintf(out, n, "%.*s/%s", (int)(slash - cfg_path), cfg_path, p);
    }
    char *canonical = out ? realpath(out, NULL) : NULL;
    if (canonical) {
        free(out);
        out = canonical;
    }
    return out;
}

/* Remembers where a setting was written, for messages made after loading. */
static int set_origin(const config_setting_t *s, lmp_config_origin *o)
{
    char where[512];
    setting_path(s, where, sizeof where);
    o->line = config_setting_source_line(s);
    if (!(o->key = strdup(where))) return lmp_fail(LMP_ENOMEM, "out of memory");
    return 0;
}

static void free_origin(lmp_config_origin *o)
{
    free(o->key);
    o->key = NULL;
}

/* ---- patterns ---------------------------------------------------------------------------- */
static const char OPTIONAL_PREFIX[] = "optional:";

/* Splits "optional:" and "re:" off a pattern's text. */
static const char *pattern_expr(const char *text, int *optional, int *is_re)
{
    *optional = strncmp(text, OPTIONAL_PREFIX, sizeof OPTIONAL_PREFIX - 1) == 0;
    if (*optional) text += sizeof OPTIONAL_PREFIX - 1;
    *is_re = strncmp(text, "re:", 3) == 0;
    return *is_re ? text + 3 : text;
}

/* No PCRE2 flags: a Perl/Python-style regex, case-sensitive, unanchored (searched). */
static pcre2_code *compile_re(const char *expr, char *msg, size_t n)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)expr, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
    if (!re && msg) {
        PCRE2_UCHAR text[256];
        if (pcre2_get_error_message(err, text, sizeof text) < 0) snprintf((char *)text, sizeof text, "error %d", err);
        snprintf(msg, n, "%s at offset %zu", (const char *)text, (size_t)off);
    }
    return re;
}

/* Whether re matches name; a search PCRE2 gave up on (regex_limit.h) is no match here: the
 * patterns are checked against the model's names before any work (check_one_pattern), where
 * that is refused. */
static int re_search(const pcre2_code *re, const char *name) { return lmp_re_search(re, name) == 1; }

static int glob_match(const char *glob, const char *name)
{
    if (fnmatch(glob, name, 0) == 0) return 1;
    char tail[512];
    snprintf(tail, sizeof tail, "*.%s", glob);
    return fnmatch(tail, name, 0) == 0;
}

/* Parses and compiles the pattern written at setting `where`. */
static int load_pattern(const config_setting_t *where, const char *text, lmp_pattern *p)
{
    int is_re;
    p->text = text;
    p->expr = pattern_expr(text, &p->optional, &is_re);
    int st = set_origin(where, &p->at);
    if (st || !is_re) return st;
    char msg[320];
    if (!(p->re = compile_re(p->expr, msg, sizeof msg)))
        return bad(where, "bad regular expression '%s': %s", p->expr, msg);
    return 0;
}

static void free_pattern(lmp_pattern *p)
{
    pcre2_code_free(p->re);
    p->re = NULL;
    free_origin(&p->at);
}

static int pattern_hit(const lmp_pattern *p, const char *name)
{
    return p->re ? re_search(p->re, name) : glob_match(p->expr, name);
}

int lmp_pattern_match(const char *pattern, const char *name)
{
    int optional, is_re;
    const char *expr = pattern_expr(pattern, &optional, &is_re);
    if (!is_re) return glob_match(expr, name);
    pcre2_code *re = compile_re(expr, NULL, 0);
    int hit = re && re_search(re, name);
    pcre2_code_free(re);
    return hit;
}

int lmp_pattern_match_all(const char *pattern, const char *const *names, int64_t n, uint8_t *hits)
{
    int optional, is_re;
    const char *expr = pattern_expr(pattern, &optional, &is_re);
    pcre2_code *re = is_re ? compile_re(expr, NULL, 0) : NULL;
    if (is_re && !re) return lmp_fail(LMP_EINVAL, "pattern \"%s\" does not compile", pattern);
    for (int64_t g = 0; g < n; g++) hits[g] = (uint8_t)(is_re ? re_search(re, names[g]) : glob_match(expr, names[g]));
    pcre2_code_free(re);
    return 0;
}

/* A loaded stage matches with its compiled patterns, one built by hand with its strings. */
static int target_hit(const lmp_stage *s, int i, const char *name)
{
    return s->target_patterns ? pattern_hit(&s->target_patterns[i], name) : lmp_pattern_match(s->targets[i], name);
}

static int ignore_hit(const lmp_stage *s, int i, const char *name)
{
    return s->ignore_patterns ? pattern_hit(&s->ignore_patterns[i], name) : lmp_pattern_match(s->ignore[i], name);
}

static int override_hit(const lmp_override *o, const char *name)
{
    return o->pattern.text ? pattern_hit(&o->pattern, name) : lmp_pattern_match(o->match, name);
}

const lmp_value *lmp_stage_params_for(const lmp_stage *s, const char *name)
{
    int targeted = s->n_targets == 0;
    for (int i = 0; i < s->n_targets && !targeted; i++) targeted = target_hit(s, i, name);
    for (int i = 0; i < s->n_ignore && targeted; i++) targeted = !ignore_hit(s, i, name);
    if (!targeted) return NULL;
    for (int i = 0; i < s->n_overrides; i++)
        if (override_hit(&s->overrides[i], name))
            return s->overrides[i].skip ? NULL : s->overrides[i].params;
    return s->params;
}

int lmp_stage_names_router(const lmp_stage *s, const char *name)
{
    const char *dot = strrchr(name, '.');
    const char *last = dot ? dot + 1 : name;
    for (int i = 0; i < s->n_targets; i++) {
        const char *text = s->target_patterns ? s->target_patterns[i].text : s->targets[i];
        if (text && strstr(text, last) && target_hit(s, i, name)) return 1;
    }
    return 0;
}

const lmp_value *lmp_stage_params_for_linear(const lmp_stage *s, const lmp_linear *l)
{
    const int router = l->role == LMP_ROLE_ROUTER || l->role == LMP_ROLE_SHARED_GATE;
    return router && !lmp_stage_names_router(s, l->name) ? NULL : lmp_stage_params_for(s, l->name);
}

/* ---- parameters against a plugin's schema ------------------------------------------------ */
static int set_param(const config_setting_t *s, const lmp_param_spec *p, lmp_value *v)
{
    int t = config_setting_type(s);
    switch (p->type) {
    case LMP_PARAM_BOOL:
        if (t != CONFIG_TYPE_BOOL) return bad(s, "expected true or false");
        v->num = config_setting_get_bool(s);
        return 0;
    case LMP_PARAM_INT:
    case LMP_PARAM_FLOAT: {
        double x;
        if (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64) x = (double)config_setting_get_int64(s);
        else if (t == CONFIG_TYPE_FLOAT && p->type == LMP_PARAM_FLOAT) x = config_setting_get_float(s);
        else return bad(s, "expected %s", p->type == LMP_PARAM_INT ? "an integer" : "a number");
        if (!isfinite(x) || x < p->min || x > p->max)
            return bad(s, "%g is out of range [%g, %g]", x, p->min, p->max);
        v->num = x;
        return 0;
    }
    case LMP_PARAM_ENUM: {
        const char *str = t == CONFIG_TYPE_STRING ? config_setting_get_string(s) : NULL;
        char list[512] = "";
        for (int i = 0; p->choices[i]; i++) {
            if (str && strcmp(str, p->choices[i]) == 0) {
                v->num = i;
                v->str = p->choices[i];
                return 0;
            }
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "",
                     p->choices[i]);
        }
        return str ? bad(s, "\"%s\" is not one of %s", str, list) : bad(s, "expected one of %s", list);
    }
    case LMP_PARAM_STRING:
        if (t != CONFIG_TYPE_STRING) return bad(s, "expected a string");
        v->str = config_setting_get_string(s);
        return 0;
    }
    return bad(s, "parameter has an unknown type in the plugin's schema");
}

/* Validates group `g` (may be NULL) against desc's schema on top of `base` values.
 * required: enforce LMP_PARAM_REQUIRED (not for overrides, which start from the stage). */
static int parse_params(const config_setting_t *g, const config_setting_t *owner,
                        const lmp_plugin_desc *desc, const lmp_value *base, int required,
                        lmp_value **out)
{
    int st = base ? 0 : lmp_params_defaults(desc, out);
    if (st) return st;
    if (base) {
        if (!(*out = calloc(desc->n_params ? desc->n_params : 1, sizeof **out)))
            return lmp_fail(LMP_ENOMEM, "out of memory");
        memcpy(*out, base, desc->n_params * sizeof **out);
    }
    for (int i = 0; g && i < config_setting_length(g); i++) {
        const config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        const char *name = config_setting_name(m);
        uint32_t k = 0;
        while (k < desc->n_params && strcmp(desc->params[k].name, name) != 0) k++;
        if (k == desc->n_params) {
            char list[512] = "";
            const char *names[256];
            size_t n_names = 0;
            for (uint32_t j = 0; j < desc->n_params; j++) {
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                         desc->params[j].name);
                if (n_names < 256) names[n_names++] = desc->params[j].name;
            }
            const char *near = lmp_suggest(name, names, n_names);
            return bad(m, "unknown parameter of %s '%s'%s%s%s (its parameters: %s)",
                       lmp_kind_name(desc->kind), desc->name, near ? " (did you mean '" : "", near ? near : "",
                       near ? "'?)" : "", desc->n_params ? list : "none");
        }
        if ((st = set_param(m, &desc->params[k], &(*out)[k]))) return st;
    }
    for (uint32_t k = 0; required && k < desc->n_params; k++)
        if ((desc->params[k].flags & LMP_PARAM_REQUIRED) &&
            !(g && config_setting_get_member(g, desc->params[k].name)))
            return bad(g ? g : owner, "%s '%s' needs parameter '%s'", lmp_kind_name(desc->kind),
                       desc->name, desc->params[k].name);
    return 0;
}

/* ---- sections ---------------------------------------------------------------------------- */
/* A plugin named by file rather than by name: a '/' or a ".so" ending.  It is relative to the
 * config's folder, like every path of a config: a bare "x.so" is the config's neighbour, never
 * a library of the system's search path. */
static int is_plugin_path(const char *s)
{
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 3 && strcmp(s + n - 3, ".so") == 0);
}

static int load_plugins(lmp_ctx *ctx, lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"search_path", "strategies", "backends", NULL};
    config_setting_t *g;
    const char **dirs = NULL, **list = NULL;
    int n_dirs = 0, n = 0, st;
    if ((st = get_group(root, "plugins", 0, &g))) return st;
    if (g && ((st = check_keys(g, keys)) || (st = get_strings(g, "search_path", &dirs, &n_dirs)))) return st;
    /* The config is not trusted: its folders must lie inside the user's trusted plugin folders
     * (registry.h), checked on their real paths before any file in them is opened. */
    st = lmp_registry_init(&c->reg, ctx, NULL, 0);
    for (int i = 0; i < n_dirs && !st; i++) {
        char *abs = resolve(c->path, dirs[i]);
        st = abs ? lmp_registry_add_search_dir(&c->reg, abs) : lmp_fail(LMP_ENOMEM, "out of memory");
        if (st) st = lmp_fail_prefix(st, "%s:%d: plugins.search_path[%d]", file_of(g),
                                     config_setting_source_line(config_setting_get_member(g, "search_path")), i);
        free(abs);
    }
    free(dirs);
    if (st || !g) return st;
    static const char *const slot_key[2] = {"strategies", "backends"};
    static const int slot_kind[2] = {LMP_PLUGIN_STRATEGY, LMP_PLUGIN_BACKEND};
    for (int k = 0; k < 2 && !st; k++) {
        if ((st = get_strings(g, slot_key[k], &list, &n))) return st;
        for (int i = 0; i < n && !st; i++) {
            char *p = is_plugin_path(list[i]) ? resolve(c->path, list[i]) : strdup(list[i]);
            st = p ? lmp_registry_require(&c->reg, slot_kind[k], p, NULL) : lmp_fail(LMP_ENOMEM, "out of memory");
            if (st) st = lmp_fail_prefix(st, "%s:%d: plugins.%s[%d]", file_of(g),
                                         config_setting_source_line(config_setting_get_member(g, slot_key[k])),
                                         slot_key[k], i);
            free(p);
        }
        free(list);
    }
    return st;
}

static int load_backend(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"name", "params", NULL};
    config_setting_t *g, *params = NULL;
    c->backend_name = "cpu";
    int st = get_group(root, "backend", 0, &g);
    if (st || (g && ((st = check_keys(g, keys)) || (st = get_string(g, "name", 0, &c->backend_name)) ||
                     (st = get_group(g, "params", 0, &params)))))
        return st;
    const lmp_plugin *p;
    st = lmp_registry_require(&c->reg, LMP_PLUGIN_BACKEND, c->backend_name, &p);
    if (st) return g ? lmp_fail_prefix(st, "%s:%d: backend.name", file_of(g), config_setting_source_line(g)) : st;
    return parse_params(params, g, p->desc, NULL, 1, &c->backend_params);
}

/* model.rotate.learn = { steps = 100; lr = 1.5; batch = 0; w_bits = 4; a_bits = 4; loss = "kl";
 * keep_best = false; }: how learned rotations are trained (train/rotation_learn.h). */
static int load_rotate_learn(const config_setting_t *g, lmp_rotate_learn_opts *o)
{
    static const char *const keys[] = {"steps", "lr", "batch", "w_bits", "a_bits", "loss", "keep_best", NULL};
    static const char *const losses[] = {"kl", "ce", NULL}; /* LMP_LOSS_KL, LMP_LOSS_CE */
    int64_t wb = o->w_bits, ab = o->a_bits;
    int loss = o->loss, st;
    if ((st = check_keys(g, keys)) || (st = get_int(g, "steps", 0, 1000000, &o->steps)) ||
        (st = get_int(g, "batch", 0, INT32_MAX, &o->batch)) || (st = get_int(g, "w_bits", 0, 8, &wb)) ||
        (st = get_int(g, "a_bits", 0, 8, &ab)) || (st = get_choice(g, "loss", 0, losses, &loss)))
        return st;
    for (int i = 0; i < 2; i++) {
        const config_setting_t *b = config_setting_get_member(g, i ? "a_bits" : "w_bits");
        if (b && (i ? ab : wb) == 1) return bad(b, "1 bit is not a grid: 0 (not quantized) or 2..8");
    }
    const config_setting_t *lr = config_setting_get_member(g, "lr");
    if (lr) {
        const int t = config_setting_type(lr);
        if (t != CONFIG_TYPE_FLOAT && t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) return bad(lr, "expected a number");
        o->lr = t == CONFIG_TYPE_FLOAT ? config_setting_get_float(lr) : (double)config_setting_get_int64(lr);
        if (!(o->lr > 0) || !isfinite(o->lr)) return bad(lr, "must be a number > 0");
    }
    const config_setting_t *kb = config_setting_get_member(g, "keep_best");
    if (kb) {
        if (config_setting_type(kb) != CONFIG_TYPE_BOOL) return bad(kb, "expected true or false");
        o->keep_best = config_setting_get_bool(kb);
    }
    o->w_bits = (int)wb, o->a_bits = (int)ab, o->loss = loss;
    return 0;
}

/* model.rotate = { r1 = "hadamard"; r2 = "hadamard"; r3 = true; r4 = true; seed = 0; learn = {...}; }:
 * fused and online rotations of the model (model/rotate.h), every variant's and the reference's;
 * "learned" r1/r2 start from "hadamard" and are trained once, before any variant. */
static int load_rotate(lmp_run_config *c, const config_setting_t *model)
{
    static const char *const keys[] = {"r1", "r2", "r3", "r4", "seed", "learn", NULL};
    static const char *const kinds[] = {"none", "hadamard", "orthogonal", "learned", "full_hadamard", NULL};
    config_setting_t *g, *learn = NULL;
    int r1 = LMP_ROT_NONE, r2 = LMP_ROT_NONE, online[2] = {0, 0}, st;
    int64_t seed = 0;
    lmp_rotate_learn_opts lo = {.steps = 100, .lr = 1.5, .w_bits = 4, .a_bits = 4, .loss = LMP_LOSS_KL};
    if ((st = get_group(model, "rotate", 0, &g)) || !g) return st;
    if ((st = check_keys(g, keys)) || (st = get_choice(g, "r1", 0, kinds, &r1)) ||
        (st = get_choice(g, "r2", 0, kinds, &r2)) || (st = get_int(g, "seed", 0, INT64_MAX, &seed)) ||
        (st = get_group(g, "learn", 0, &learn)) || (learn && (st = load_rotate_learn(learn, &lo))))
        return st;
    if (learn && r1 != LMP_ROT_LEARNED && r2 != LMP_ROT_LEARNED)
        return bad(learn, "r1 or r2 must be \"learned\" for learn { ... } to mean anything");
    for (int i = 0; i < 2; i++) {
        const config_setting_t *b = config_setting_get_member(g, i ? "r4" : "r3");
        if (!b) continue;
        if (config_setting_type(b) != CONFIG_TYPE_BOOL) return bad(b, "expected true or false");
        online[i] = config_setting_get_bool(b);
    }
    c->rotate = (lmp_rotate_opts){.r1 = (lmp_rot_kind)r1, .r2 = (lmp_rot_kind)r2, .r3 = online[0], .r4 = online[1],
                                  .seed = (uint64_t)seed, .learn = lo};
    return 0;
}

static int load_model_section(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"path", "tokenizer", "rotate", NULL};
    config_setting_t *g;
    const char *path = NULL, *tok = NULL;
    int st;
    if ((st = get_group(root, "model", 1, &g)) || (st = check_keys(g, keys)) ||
        (st = get_string(g, "path", 1, &path)) || (st = get_string(g, "tokenizer", 0, &tok)) ||
        (st = load_rotate(c, g)))
        return st;
    if (!(c->model_path = resolve(c->path, path))) return lmp_fail(LMP_ENOMEM, "out of memory");
    if ((st = set_origin(config_setting_get_member(g, "path"), &c->model_at))) return st;
    if (!tok) return 0;
    if (!(c->tokenizer_path = resolve(c->path, tok))) return lmp_fail(LMP_ENOMEM, "out of memory");
    return set_origin(config_setting_get_member(g, "tokenizer"), &c->tokenizer_at);
}

/* calibration.experts: "routed" (0) or "all" (1). */
static const char *const calib_experts_names[] = {"routed", "all", NULL};

/* calibration.inputs and a variant's calibration = { inputs = ...; }, in lmp_calib_inputs order. */
static const char *const calib_inputs_names[] = {"compressed", "original", NULL};

const char *lmp_calib_inputs_name(lmp_calib_inputs inputs)
{
    return inputs == LMP_CALIB_INPUTS_ORIGINAL ? calib_inputs_names[1] : calib_inputs_names[0];
}

/* Optional: only variants with a stage that observes statistics need it (checked when they run).
 * Read before the variants, which take calibration.inputs as their default. */
static int load_calibration(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"text", "samples", "seq_len", "sampling", "inputs", "experts",
                                       "expert_min_tokens", NULL};
    static const char *const modes[] = {"sequential", "random", NULL};
    config_setting_t *g;
    const char *text = NULL;
    int random = 0, inputs = LMP_CALIB_INPUTS_COMPRESSED;
    c->calib_samples = 32;
    c->calib_seq_len = 256;
    c->calib_inputs = LMP_CALIB_INPUTS_COMPRESSED;
    c->expert_min_tokens = 16;
    int st;
    if ((st = get_group(root, "calibration", 0, &g)) || !g) return st;
    if ((st = check_keys(g, keys)) || (st = get_string(g, "text", 1, &text)) ||
        (st = get_int(g, "samples", 1, 1 << 20, &c->calib_samples)) ||
        (st = get_int(g, "seq_len", 2, 1 << 20, &c->calib_seq_len)) ||
        (st = get_choice(g, "sampling", 0, modes, &random)) ||
        (st = get_choice(g, "inputs", 0, calib_inputs_names, &inputs)) ||
        (st = get_choice(g, "experts", 0, calib_experts_names, &c->calib_experts_all)) ||
        (st = get_int(g, "expert_min_tokens", 0, 1 << 30, &c->expert_min_tokens)))
        return st;
    c->calib_random = random;
    c->calib_inputs = (lmp_calib_inputs)inputs;
    if (!(c->calib_text = resolve(c->path, text))) return lmp_fail(LMP_ENOMEM, "out of memory");
    return set_origin(config_setting_get_member(g, "text"), &c->calib_at);
}

/* Optional: memory.expert_group_mb, the MiB of f32 routed-expert weights a mixture of experts'
 * block holds at a time (model/expert_pager.h); 0: every block whole. */
static int load_memory(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"expert_group_mb", NULL};
    config_setting_t *g;
    c->expert_group_mb = LMP_EXPERT_GROUP_MB_DEFAULT;
    int st;
    if ((st = get_group(root, "memory", 0, &g)) || !g) return st;
    if ((st = check_keys(g, keys))) return st;
    return get_number(g, "expert_group_mb", 0, 1 << 30, &c->expert_group_mb);
}

static int load_eval(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"texts", "seq_len", "max_windows", "lambada", "lambada_max", "compute", NULL};
    static const char *const computes[] = {"f32", "backend", NULL};
    config_setting_t *g;
    const char **texts = NULL, *lambada = NULL;
    c->eval_seq_len = 256;
    int st;
    /* Optional: a run that only writes its variant (run --output, quantize) measures nothing;
     * compare refuses a config without it unless the variants are exported (compare.c). */
    if ((st = get_group(root, "eval", 0, &g)) || !g) return st;
    c->has_eval = 1;
    if ((st = check_keys(g, keys)) ||
        (st = get_strings(g, "texts", &texts, &c->n_eval_texts)) ||
        (st = get_int(g, "seq_len", 2, 1 << 20, &c->eval_seq_len)) ||
        (st = get_int(g, "max_windows", 0, INT64_MAX, &c->eval_max_windows)) ||
        (st = get_string(g, "lambada", 0, &lambada)) ||
        (st = get_int(g, "lambada_max", 0, INT64_MAX, &c->lambada_max)) ||
        (st = get_choice(g, "compute", 0, computes, &c->eval_compute_backend))) {
        free(texts);
        return st;
    }
    if (c->n_eval_texts == 0 && !lambada) {
        free(texts);
        return bad(g, "'texts' must name at least one evaluation text (or set 'lambada')");
    }
    if (lambada && (!(c->lambada = resolve(c->path, lambada)) ||
                    (st = set_origin(config_setting_get_member(g, "lambada"), &c->lambada_at)))) {
        free(texts);
        return st ? st : lmp_fail(LMP_ENOMEM, "out of memory");
    }
    c->eval_texts = calloc((size_t)c->n_eval_texts + 1, sizeof *c->eval_texts);
    c->eval_text_at = calloc((size_t)c->n_eval_texts + 1, sizeof *c->eval_text_at);
    if (!c->eval_texts || !c->eval_text_at) st = lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; !st && i < c->n_eval_texts; i++) {
        if (!(c->eval_texts[i] = resolve(c->path, texts[i]))) st = lmp_fail(LMP_ENOMEM, "out of memory");
        else st = set_origin(strings_item(g, "texts", i), &c->eval_text_at[i]);
    }
    free(texts);
    return st;
}

/* Optional: what a GGUF export stores the token embedding and the output head as (lmpress
 * quantize writes llama-quantize's choice for its preset here).  Absent: the writer's default. */
static const char *const export_types[] = {"f32",  "f16",  "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl",
                                           "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", NULL};

static int load_export(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"embedding_type", "output_type", NULL};
    config_setting_t *g;
    int emb = -1, out = -1, st;
    if ((st = get_group(root, "export", 0, &g)) || !g) return st;
    if ((st = check_keys(g, keys)) || (st = get_choice(g, "embedding_type", 0, export_types, &emb)) ||
        (st = get_choice(g, "output_type", 0, export_types, &out)))
        return st;
    c->export_embedding_type = emb >= 0 ? export_types[emb] : NULL;
    c->export_output_type = out >= 0 ? export_types[out] : NULL;
    return 0;
}

static int load_stage(lmp_run_config *c, const config_setting_t *s, lmp_stage *stage)
{
    static const char *const keys[] = {"strategy", "params", "targets", "ignore", "overrides", NULL};
    static const char *const okeys[] = {"match", "params", "skip", NULL};
    const char *strategy = NULL;
    config_setting_t *params, *ovs;
    int st;
    if (!config_setting_is_group(s)) return bad(s, "a pipeline stage must be a group { strategy = ...; }");
    if ((st = check_keys(s, keys)) || (st = get_string(s, "strategy", 1, &strategy)) ||
        (st = get_group(s, "params", 0, &params)))
        return st;
    char *ref = is_plugin_path(strategy) ? resolve(c->path, strategy) : strdup(strategy);
    st = ref ? lmp_registry_require(&c->reg, LMP_PLUGIN_STRATEGY, ref, &stage->plugin) : lmp_fail(LMP_ENOMEM, "out of memory");
    free(ref);
    if (st) return lmp_fail_prefix(st, "%s:%d: strategy", file_of(s),
                                   config_setting_source_line(config_setting_get_member(s, "strategy")));
    if ((st = parse_params(params, s, stage->plugin->desc, NULL, 1, &stage->params)) ||
        (st = get_strings(s, "targets", &stage->targets, &stage->n_targets)) ||
        (st = get_strings(s, "ignore", &stage->ignore, &stage->n_ignore)))
        return st;
    stage->target_patterns = calloc((size_t)stage->n_targets + 1, sizeof *stage->target_patterns);
    stage->ignore_patterns = calloc((size_t)stage->n_ignore + 1, sizeof *stage->ignore_patterns);
    if (!stage->target_patterns || !stage->ignore_patterns) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; i < stage->n_targets && !st; i++)
        st = load_pattern(strings_item(s, "targets", i), stage->targets[i], &stage->target_patterns[i]);
    for (int i = 0; i < stage->n_ignore && !st; i++)
        st = load_pattern(strings_item(s, "ignore", i), stage->ignore[i], &stage->ignore_patterns[i]);
    if (st || !(ovs = config_setting_get_member(s, "overrides"))) return st;
    if (!config_setting_is_list(ovs)) return bad(ovs, "expected a list ( { match = ...; }, ... )");
    stage->n_overrides = config_setting_length(ovs);
    stage->overrides = calloc((size_t)stage->n_overrides + 1, sizeof *stage->overrides);
    if (!stage->overrides) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; i < stage->n_overrides; i++) {
        const config_setting_t *o = config_setting_get_elem(ovs, (unsigned)i);
        lmp_override *ov = &stage->overrides[i];
        const char *match = NULL;
        config_setting_t *op;
        if (!config_setting_is_group(o)) return bad(o, "an override must be a group { match = ...; }");
        if ((st = check_keys(o, okeys)) || (st = get_string(o, "match", 1, &match)) ||
            (st = load_pattern(config_setting_get_member(o, "match"), match, &ov->pattern)) ||
            (st = get_group(o, "params", 0, &op)))
            return st;
        ov->match = (char *)match;
        const config_setting_t *skip = config_setting_get_member(o, "skip");
        if (skip && config_setting_type(skip) != CONFIG_TYPE_BOOL) return bad(skip, "expected true or false");
        ov->skip = skip && config_setting_get_bool(skip);
        if (!ov->skip && !op) return bad(o, "an override needs 'params' or 'skip = true'");
        if ((st = parse_params(op, o, stage->plugin->desc, stage->params, 0, &ov->params))) return st;
    }
    return 0;
}

/* A variant's own calibration = { inputs = ...; } (else the config's calibration.inputs): so
 * that one table can compare the two sources.  Only the inputs: the windows are cut once for all
 * variants. */
static int load_variant_calibration(const lmp_run_config *c, const config_setting_t *v, int has_pipeline,
                                    lmp_variant *var)
{
    static const char *const keys[] = {"inputs", "experts", "expert_min_tokens", NULL};
    config_setting_t *g;
    int inputs = (int)c->calib_inputs, st;
    var->calib_inputs = c->calib_inputs;
    var->calib_experts_all = c->calib_experts_all;
    var->expert_min_tokens = c->expert_min_tokens;
    if ((st = get_group(v, "calibration", 0, &g)) || !g) return st;
    /* The unmodified model and another tool's file are not compressed here: the setting would
     * silently do nothing. */
    if (!has_pipeline) return bad(g, "only a variant with a pipeline is calibrated");
    if (config_setting_length(g) == 0)
        return bad(g, "an empty calibration group: set inputs, experts or expert_min_tokens");
    if ((st = check_keys(g, keys)) || (st = get_choice(g, "inputs", 0, calib_inputs_names, &inputs)) ||
        (st = get_choice(g, "experts", 0, calib_experts_names, &var->calib_experts_all)) ||
        (st = get_int(g, "expert_min_tokens", 0, 1 << 30, &var->expert_min_tokens)))
        return st;
    var->calib_inputs = (lmp_calib_inputs)inputs;
    return 0;
}

/* A variant's kv_cache = { format = ...; granularity = ...; scales = ...; }: the KV cache's
 * simulated quantization (lmp_variant.kv). */
static int load_variant_kv_cache(const config_setting_t *v, int has_pipeline, lmp_variant *var)
{
    static const char *const keys[] = {"format", "granularity", "scales", NULL};
    static const char *const scales[] = {"static", "dynamic", NULL};
    config_setting_t *g;
    int st, format = 0, gran = 0, dyn = -1;
    if ((st = get_group(v, "kv_cache", 0, &g)) || !g) return st;
    /* the unmodified model is the reference and another tool's file is evaluated as it is */
    if (!has_pipeline)
        return bad(g, "only a variant with a pipeline quantizes the KV cache (to keep the weights as they are, use "
                      "pipeline = ( { strategy = \"rtn\"; params = { weights = false; }; } ))");
    if ((st = check_keys(g, keys)) || (st = get_choice(g, "format", 1, lmp_kv_type_names + 1, &format)) ||
        (st = get_choice(g, "granularity", 0, lmp_kv_granularity_names, &gran)) || (st = get_choice(g, "scales", 0, scales, &dyn)))
        return st;
    /* per token: each token's head_dim slice, whose scale no calibration can hold */
    if (gran == LMP_KV_PER_TOKEN_HEAD && dyn == 0)
        return bad(config_setting_get_member(g, "scales"), "granularity \"token\" has dynamic scales only");
    var->kv.type = (lmp_kv_type)(LMP_KV_FP8_E4M3 + format);
    var->kv.per_head = gran; /* lmp_kv_granularity_names is in per_head's order */
    var->kv.dynamic = dyn == 1 || gran == LMP_KV_PER_TOKEN_HEAD;
    return set_origin(g, &var->kv_at);
}

/* The top-level imatrix = "file"; the default of every pipeline variant.  Read before the
 * variants. */
static int load_imatrix_key(lmp_run_config *c, const config_setting_t *root)
{
    const char *path = NULL;
    int st = get_string(root, "imatrix", 0, &path);
    if (st || !path) return st;
    if (!(c->imatrix_path = resolve(c->path, path))) return lmp_fail(LMP_ENOMEM, "out of memory");
    return set_origin(config_setting_get_member(root, "imatrix"), &c->imatrix_at);
}

/* A variant's own imatrix = "file"; (else the config's): so that one table can compare
 * importance matrices from different texts. */
static int load_variant_imatrix(const lmp_run_config *c, const config_setting_t *v, int has_pipeline,
                                lmp_variant *var)
{
    const config_setting_t *s = config_setting_get_member(v, "imatrix");
    const char *path = NULL;
    int st;
    if (s) {
        /* the unmodified model and another tool's file are not quantized here: it would do nothing */
        if (!has_pipeline) return bad(s, "only a variant with a pipeline is quantized with an importance matrix");
        if ((st = get_string(v, "imatrix", 1, &path))) return st;
        if (!(var->imatrix_path = resolve(c->path, path))) return lmp_fail(LMP_ENOMEM, "out of memory");
        return set_origin(s, &var->imatrix_at);
    }
    if (!has_pipeline || !c->imatrix_path) return 0;
    var->imatrix_at.line = c->imatrix_at.line;
    if (!(var->imatrix_path = strdup(c->imatrix_path)) || !(var->imatrix_at.key = strdup(c->imatrix_at.key)))
        return lmp_fail(LMP_ENOMEM, "out of memory");
    return 0;
}

/* Each distinct imatrix the variants name, read and checked once (after the files are known to
 * be there): a damaged file is refused with the setting that named it, before any model work. */
static int load_imatrices(lmp_run_config *c)
{
    if (!(c->imatrices = calloc((size_t)c->n_variants + 1, sizeof *c->imatrices)))
        return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; i < c->n_variants; i++) {
        lmp_variant *v = &c->variants[i];
        if (!v->imatrix_path) continue;
        for (int k = 0; k < c->n_imatrices && !v->imatrix; k++)
            if (strcmp(c->imatrices[k]->path, v->imatrix_path) == 0) v->imatrix = c->imatrices[k];
        if (v->imatrix) continue;
        int st = lmp_imatrix_load(v->imatrix_path, &c->imatrices[c->n_imatrices]);
        if (st) return lmp_fail_prefix(st, "%s:%d: %s", c->path, v->imatrix_at.line, v->imatrix_at.key);
        v->imatrix = c->imatrices[c->n_imatrices++];
    }
    return 0;
}

static int load_variants(lmp_run_config *c, const config_setting_t *root)
{
    static const char *const keys[] = {"name", "pipeline", "model", "calibration", "imatrix", "kv_cache", NULL};
    const config_setting_t *vs = config_setting_get_member(root, "variants");
    if (!vs) return missing(root, "variants");
    if (!config_setting_is_list(vs) || config_setting_length(vs) == 0)
        return bad(vs, "expected a non-empty list ( { name = ...; pipeline = (...); }, ... )");
    c->n_variants = config_setting_length(vs);
    c->variants = calloc((size_t)c->n_variants, sizeof *c->variants);
    if (!c->variants) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; i < c->n_variants; i++) {
        const config_setting_t *v = config_setting_get_elem(vs, (unsigned)i);
        lmp_variant *var = &c->variants[i];
        int st;
        if (!config_setting_is_group(v)) return bad(v, "a variant must be a group { name = ...; }");
        if ((st = check_keys(v, keys)) || (st = get_string(v, "name", 1, &var->name))) return st;
        char file[LMP_VARIANT_FILE_MAX + 1], other[LMP_VARIANT_FILE_MAX + 1];
        lmp_variant_file_name(var->name, file, sizeof file);
        for (int j = 0; j < i; j++) {
            if (strcmp(c->variants[j].name, var->name) == 0)
                return bad(config_setting_get_member(v, "name"), "variant name \"%s\" is used twice", var->name);
            /* an export under --output-dir is DIR/<file name>: one file for two variants would
             * have the second silently replace the first */
            if (strcmp(lmp_variant_file_name(c->variants[j].name, other, sizeof other), file) == 0)
                return bad(config_setting_get_member(v, "name"),
                           "variants \"%s\" and \"%s\" map to one export file name, \"%s\" (outside letters, digits "
                           "and . _ - + = , @ : every byte becomes '_', as does a leading '.'): rename one",
                           c->variants[j].name, var->name, file);
        }
        const config_setting_t *p = config_setting_get_member(v, "pipeline");
        const config_setting_t *mp = config_setting_get_member(v, "model");
        if ((st = load_variant_calibration(c, v, p != NULL, var)) || (st = load_variant_imatrix(c, v, p != NULL, var)) ||
            (st = load_variant_kv_cache(v, p != NULL, var)))
            return st;
        if (mp) {
            /* A fixed file made by another tool: there is nothing to compress, so a pipeline
             * beside it would be silently ignored or ambiguous. */
            const char *path = NULL;
            if (p) return bad(mp, "a variant has either 'pipeline' or 'model' (another tool's file), not both");
            if ((st = get_string(v, "model", 1, &path))) return st;
            if (!(var->model_path = resolve(c->path, path))) return lmp_fail(LMP_ENOMEM, "out of memory");
            if ((st = set_origin(mp, &var->model_at))) return st;
            continue;
        }
        if (!p) continue; /* the unmodified model */
        if (!config_setting_is_list(p)) return bad(p, "expected a list of stages ( { strategy = ...; }, ... )");
        var->n_stages = config_setting_length(p);
        var->stages = calloc((size_t)var->n_stages + 1, sizeof *var->stages);
        if (!var->stages) return lmp_fail(LMP_ENOMEM, "out of memory");
        for (int j = 0; j < var->n_stages; j++)
            if ((st = load_stage(c, config_setting_get_elem(p, (unsigned)j), &var->stages[j]))) return st;
        if (var->kv.type != LMP_KV_NONE && !var->n_stages) /* an empty pipeline is the unmodified model */
            return bad(config_setting_get_member(v, "kv_cache"), "needs a non-empty pipeline (to keep the weights as "
                       "they are: pipeline = ( { strategy = \"rtn\"; params = { weights = false; }; } ))");
    }
    return 0;
}

/* ---- checks of the files and of the patterns against the model ----------------------------- */
static int bad_at(const lmp_run_config *c, const lmp_config_origin *at, const char *fmt, ...) LMP_PRINTF(3, 4);
static int bad_at(const lmp_run_config *c, const lmp_config_origin *at, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lmp_fail(LMP_EINVAL, "%s:%d: %s: %s", c->path, at->line, at->key ? at->key : "(unknown setting)", msg);
}

/* "PATH: cannot open: REASON" for a file that cannot be reached, "PATH: is a FIFO, not a regular
 * file" for one of the wrong kind. */
static int check_input_file(const lmp_run_config *c, const char *path, const lmp_config_origin *at)
{
    char why[256];
    int rc = lmp_input_check_file(path, why, sizeof why);
    return rc == 0 ? 0 : bad_at(c, at, "%s: %s%s", path, rc == -1 ? "cannot open: " : "", why);
}

/* A regular file (llama2.c, GGUF, safetensors), or a Hugging Face folder with its config.json:
 * the main model or an external variant's. */
static int check_model_path(const lmp_run_config *c, const char *model_path, const lmp_config_origin *model_at)
{
    char why[256];
    struct stat sb;
    if (stat(model_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return check_input_file(c, model_path, model_at);
    int rc = lmp_input_check_dir(model_path, why, sizeof why);
    if (rc != 0) return bad_at(c, model_at, "%s: %s%s", model_path, rc == -1 ? "cannot open: " : "", why);
    size_t n = strlen(model_path) + sizeof "/config.json";
    char *cj = malloc(n);
    if (!cj) return lmp_fail(LMP_ENOMEM, "out of memory");
    snprintf(cj, n, "%s/config.json", model_path);
    int st = lmp_input_check_file(cj, why, sizeof why) == 0
                 ? 0
                 : bad_at(c, model_at, "%s: is a directory, but not a Hugging Face model folder (%s: %s)",
                          model_path, cj, why);
    free(cj);
    return st;
}

int lmp_config_check_files(const lmp_run_config *c)
{
    int st = check_model_path(c, c->model_path, &c->model_at);
    for (int i = 0; !st && i < c->n_variants; i++)
        if (c->variants[i].model_path) st = check_model_path(c, c->variants[i].model_path, &c->variants[i].model_at);
    if (!st && c->tokenizer_path) st = check_input_file(c, c->tokenizer_path, &c->tokenizer_at);
    if (!st && c->calib_text) st = check_input_file(c, c->calib_text, &c->calib_at);
    for (int i = 0; !st && i < c->n_eval_texts; i++) st = check_input_file(c, c->eval_texts[i], &c->eval_text_at[i]);
    if (!st && c->lambada) st = check_input_file(c, c->lambada, &c->lambada_at);
    if (!st && c->imatrix_path) st = check_input_file(c, c->imatrix_path, &c->imatrix_at);
    for (int i = 0; !st && i < c->n_variants; i++) {
        const lmp_variant *v = &c->variants[i];
        if (v->imatrix_path) st = check_input_file(c, v->imatrix_path, &v->imatrix_at);
    }
    return st;
}

/* The name sharing the longest prefix with the pattern: the likeliest intended one. */
static const char *nearest_name(const char *expr, const char *const *names, int n)
{
    const char *best = n ? names[0] : "none";
    size_t best_len = 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (expr[k] && expr[k] == names[i][k]) k++;
        if (k > best_len) {
            best_len = k;
            best = names[i];
        }
    }
    return best;
}

static int check_one_pattern(const lmp_run_config *c, const lmp_pattern *p, const char *const *names, int n)
{
    if (!p->text) return 0;
    int hit = 0;
    for (int i = 0; i < n; i++) {
        const int r = p->re ? lmp_re_search(p->re, names[i]) : glob_match(p->expr, names[i]);
        if (r < 0)
            return bad_at(c, &p->at,
                          "pattern '%s' gave up on %s: PCRE2's match limit (%d steps) was reached, so whether it "
                          "matches is unknown; a nested repetition such as (.+)+ backtracks exponentially: "
                          "simplify the pattern", p->text, names[i], LMP_RE_MATCH_LIMIT);
        hit = hit || r;
    }
    if (hit || p->optional) return 0;
    return bad_at(c, &p->at,
                  "pattern '%s' matches no linear of the model (e.g. %s); prefix it with '%s' if that is intended",
                  p->text, nearest_name(p->expr, names, n), OPTIONAL_PREFIX);
}

int lmp_config_check_patterns(const lmp_run_config *c, const char *const *linear_names, int n_linears)
{
    int st = 0;
    for (int v = 0; v < c->n_variants && !st; v++)
        for (int j = 0; j < c->variants[v].n_stages && !st; j++) {
            const lmp_stage *s = &c->variants[v].stages[j];
            for (int i = 0; s->target_patterns && i < s->n_targets && !st; i++)
                st = check_one_pattern(c, &s->target_patterns[i], linear_names, n_linears);
            for (int i = 0; s->ignore_patterns && i < s->n_ignore && !st; i++)
                st = check_one_pattern(c, &s->ignore_patterns[i], linear_names, n_linears);
            for (int i = 0; i < s->n_overrides && !st; i++)
                st = check_one_pattern(c, &s->overrides[i].pattern, linear_names, n_linears);
        }
    return st;
}

int lmp_config_check_model_patterns(const lmp_run_config *c, const lmp_model *m)
{
    /* The names come from the family's block layout (lmp_block_init), as compression sees them;
     * no weight is touched. */
    const int64_t n_blocks = m->arch.n_layers;
    lmp_block *blocks = calloc((size_t)n_blocks + 1, sizeof *blocks);
    const char **names = NULL;
    int n = 0, st = blocks ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t b = 0; b < n_blocks && !st; b++) st = lmp_block_init(&blocks[b], (int)b, &m->arch);
    if (!st) {
        int total = 0;
        for (int64_t b = 0; b < n_blocks; b++) total += blocks[b].n_linears;
        if (!(names = calloc((size_t)total + 1, sizeof *names))) st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (int64_t b = 0; names && b < n_blocks; b++)
            for (int i = 0; i < blocks[b].n_linears; i++) names[n++] = blocks[b].linears[i].name;
    }
    if (!st) st = lmp_config_check_patterns(c, names, n);
    free(names);
    for (int64_t b = 0; blocks && b < n_blocks; b++) lmp_block_free_tables(&blocks[b]);
    free(blocks);
    return st;
}

/* ---- reading the config file ------------------------------------------------------------- */
/* The config and every file it @includes are opened like every other input (input_file.h): a
 * FIFO, a device or a folder is refused without blocking, and a file over 16 MiB is refused.
 * libconfig opens @included files itself, so the text is scanned first with libconfig's own
 * lexical rules (comments, strings, `@include "file"` at the start of a line), and each included
 * file (relative names are relative to the current directory, as libconfig resolves them) is
 * checked the same way, up to libconfig's depth of 10.
 *
 * The scan also fixes what libconfig before 1.7 gets wrong: a decimal or hex integer without the
 * L suffix that does not fit 32 bits is wrapped silently (2147483648 reads as -2147483648,
 * 4294967304 as 8).  In the config's own text such a literal gets an L appended (the line numbers
 * do not change), so it is read as the 64-bit value that was written, as libconfig 1.7 reads it,
 * and the range checks report it as written; in an @included file (which libconfig reads
 * itself) it is refused.  A literal beyond 64 bits is refused everywhere. */
#define CONFIG_MAX_INCLUDE_DEPTH 10

typedef struct cfg_scan {
    const char *file;  /* for messages */
    char *patched;     /* the main text with L suffixes added (only for the main file) */
    size_t n_patched, cap_patched;
    int depth;
} cfg_scan;

static int scan_config_text(const char *file, const char *text, size_t len, char **patched, int depth);

static int patch_put(cfg_scan *s, const char *p, size_t n)
{
    if (s->n_patched + n + 1 > s->cap_patched) {
        size_t cap = (s->n_patched + n + 1) * 2;
        char *np = realloc(s->patched, cap);
        if (!np) return lmp_fail(LMP_ENOMEM, "out of memory");
        s->patched = np;
        s->cap_patched = cap;
    }
    memcpy(s->patched + s->n_patched, p, n);
    s->n_patched += n;
    s->patched[s->n_patched] = 0;
    return 0;
}

/* An @include: checked with the helper, then scanned for its own includes and literals. */
static int scan_include(const cfg_scan *s, int line, const char *name)
{
    if (s->depth + 1 > CONFIG_MAX_INCLUDE_DEPTH)
        return lmp_fail(LMP_EINVAL, "%s:%d: @include \"%s\": includes nested more than %d deep", s->file, line,
                        name, CONFIG_MAX_INCLUDE_DEPTH);
    /* libconfig opens it again with a blocking fopen(): a regular file only, whatever
     * LMP_ALLOW_SPECIAL_FILES says. */
    char why[256], *text;
    size_t len;
    int rc = lmp_input_check_file(name, why, sizeof why);
    if (rc) return lmp_fail(rc == -1 ? LMP_EIO : LMP_EINVAL, "%s:%d: @include \"%s\": %s%s", s->file, line, name,
                            rc == -1 ? "cannot open: " : "", why);
    int st = lmp_input_read(name, LMP_INPUT_CONFIG, &text, &len);
    if (st) return lmp_fail_prefix(st, "%s:%d: @include \"%s\"", s->file, line, name);
    st = scan_config_text(name, text, len, NULL, s->depth + 1);
    free(text);
    return st;
}

/* An integer literal text[0..n) (sign, digits or 0x hex, no L): 0 if it fits 32 bits; 1 if it
 * needs an L (fits 64 bits); -1 if it does not fit 64 bits either. */
static int int_literal_width(const char *text, size_t n)
{
    char buf[80];
    if (n >= sizeof buf) return -1;
    memcpy(buf, text, n);
    buf[n] = 0;
    const char *p = buf;
    int neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    int hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    errno = 0;
    unsigned long long u = strtoull(hex ? p + 2 : p, NULL, hex ? 16 : 10);
    if (errno == ERANGE) return -1;
    if (hex) return neg ? -1 : u <= 0x7fffffffull ? 0 : u <= (unsigned long long)INT64_MAX ? 1 : -1;
    if (neg) return u <= 0x80000000ull ? 0 : u <= (unsigned long long)INT64_MAX + 1 ? 1 : -1;
    return u <= 0x7fffffffull ? 0 : u <= (unsigned long long)INT64_MAX ? 1 : -1;
}

static int is_name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*'; }
static int is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* Scans text[0..len) (see above).  With patched != NULL, *patched gets the main text with its L
 * suffixes (malloc'd, NUL-terminated). */
static int scan_config_text(const char *file, const char *text, size_t len, char **patched, int depth)
{
    cfg_scan s = {.file = file, .depth = depth};
    size_t i = 0, copied = 0; /* text[copied..i) is still to be copied to the patched text */
    int line = 1, at_line_start = 1, st = 0;
    while (i < len && !st) {
        char c = text[i];
        if (c == '\n') {
            line++, i++, at_line_start = 1;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            i++;
            continue;
        }
        int line_start = at_line_start;
        at_line_start = 0;
        if (c == '#' || (c == '/' && i + 1 < len && text[i + 1] == '/')) {
            while (i < len && text[i] != '\n') i++;
        } else if (c == '/' && i + 1 < len && text[i + 1] == '*') {
            for (i += 2; i < len && !(text[i] == '*' && i + 1 < len && text[i + 1] == '/'); i++) line += text[i] == '\n';
            i = i < len ? i + 2 : len;
        } else if (c == '"') {
            for (i++; i < len && text[i] != '"'; i++) {
                if (text[i] == '\\' && i + 1 < len) i++;
                line += text[i] == '\n';
            }
            i = i < len ? i + 1 : len;
        } else if (c == '@' && line_start && len - i >= 8 && memcmp(text + i, "@include", 8) == 0 &&
                   i + 8 < len && (text[i + 8] == ' ' || text[i + 8] == '\t')) {
            size_t j = i + 8;
            while (j < len && (text[j] == ' ' || text[j] == '\t')) j++;
            if (j < len && text[j] == '"') {
                char name[4096];
                size_t n = 0;
                for (j++; j < len && text[j] != '"' && text[j] != '\n'; j++) {
                    if (text[j] == '\\' && j + 1 < len) j++;
                    if (n + 1 < sizeof name) name[n++] = text[j];
                }
                name[n] = 0;
                if (n + 1 >= sizeof name)
                    st = lmp_fail(LMP_EINVAL, "%s:%d: @include: file name too long", file, line);
                else
                    st = scan_include(&s, line, name);
                i = j < len ? j + 1 : len;
            } else {
                i = j; /* libconfig reports the syntax error */
            }
        } else if (is_name_start(c)) {
            while (i < len && is_name_char(text[i])) i++;
        } else if (is_digit(c) || ((c == '-' || c == '+' || c == '.') && i + 1 < len &&
                                   (is_digit(text[i + 1]) || text[i + 1] == '.'))) {
            size_t b = i;
            if (c == '-' || c == '+') i++;
            int hex = i + 1 < len && text[i] == '0' && (text[i + 1] == 'x' || text[i + 1] == 'X');
            if (hex) {
                for (i += 2; i < len && is_hex(text[i]); i++) continue;
            } else {
                while (i < len && is_digit(text[i])) i++;
            }
            int is_float = !hex && i < len && (text[i] == '.' || text[i] == 'e' || text[i] == 'E');
            if (is_float) {
                while (i < len && (is_digit(text[i]) || text[i] == '.' || text[i] == 'e' || text[i] == 'E' ||
                                   ((text[i] == '-' || text[i] == '+') && (text[i - 1] == 'e' || text[i - 1] == 'E'))))
                    i++;
                continue;
            }
            size_t e = i;
            int has_l = i < len && text[i] == 'L';
            while (i < len && text[i] == 'L') i++;
            int w = int_literal_width(text + b, e - b);
            if (w < 0)
                st = lmp_fail(LMP_EINVAL, "%s:%d: integer %.*s is out of range (it does not fit 64 bits)", file,
                              line, (int)(e - b > 64 ? 64 : e - b), text + b);
            else if (w == 1 && !has_l) {
                if (patched) {
                    if (!(st = patch_put(&s, text + copied, e - copied))) st = patch_put(&s, "L", 1);
                    copied = e;
                } else {
                    st = lmp_fail(LMP_EINVAL, "%s:%d: integer %.*s does not fit 32 bits: in an @included file "
                                  "write it as %.*sL", file, line, (int)(e - b), text + b, (int)(e - b), text + b);
                }
            }
        } else {
            i++;
        }
    }
    if (!st && patched) st = patch_put(&s, text + copied, len - copied);
    if (st || !patched) {
        free(s.patched);
        return st;
    }
    *patched = s.patched;
    return 0;
}

/* Does libconfig's parser stop on `line` when the text is cut after `cut` bytes and followed by
 * a few empty lines and a sentinel that can follow nothing ("= = ;")?  Yes when the cut is at or
 * after the token it cannot place; no when the tokens up to the cut are a viable start (it then
 * stops on the sentinel's line).  buf holds the text up to the end of `line` and 16 bytes more. */
static int stops_on_line(char *buf, const char *text, size_t cut, int line)
{
    memcpy(buf, text, cut);
    memcpy(buf + cut, "\n\n\n= = ;\n", 10);
    config_t probe;
    config_init(&probe);
    const int stops = !config_read_string(&probe, buf) && config_error_line(&probe) == line && !config_error_file(&probe);
    config_destroy(&probe);
    return stops;
}

/* The token of line `line` (1-based) of text where libconfig's parser stopped, quoted with its
 * column, into tok (or "the end of the file" when nothing follows that line): libconfig 1.5
 * says only "syntax error" and the line.  stops_on_line is false for a cut before that token and
 * true from it on, so a binary search over the line's tokens (the config scanner's: names,
 * numbers, strings, punctuation) finds it in a few parses.  0 when found, -1 otherwise (a token
 * spanning lines, an error in an @included file). */
static int syntax_error_token(const char *text, int line, char *tok, size_t size)
{
    const char *p = text;
    for (int l = 1; l < line && p; l++) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
    if (!p || !p[strspn(p, " \t\r\n")]) { /* past the last token: something is still open */
        snprintf(tok, size, "the end of the file (a string, group, list or array is not closed)");
        return 0;
    }
    const char *eol = strchr(p, '\n');
    if (!eol) eol = p + strlen(p);
    enum { MAX_TOKENS = 4096 };
    const char *starts[MAX_TOKENS], *ends[MAX_TOKENS];
    int n = 0;
    for (const char *t = p; t < eol && n < MAX_TOKENS;) {
        if (*t == ' ' || *t == '\t' || *t == '\r') {
            t++;
            continue;
        }
        if (*t == '#' || (*t == '/' && (t[1] == '/' || t[1] == '*'))) break; /* a comment: no token */
        const char *e = t + 1;
        if (*t == '"') {
            while (e < eol && *e != '"') e += *e == '\\' && e + 1 < eol ? 2 : 1;
            if (e >= eol) break; /* the string goes on past the line */
            e++;
        } else if (isalnum((unsigned char)*t) || *t == '_' || *t == '-' || *t == '+' || *t == '.' || *t == '*') {
            while (e < eol && (isalnum((unsigned char)*e) || strchr("_-+.*", *e))) e++;
        }
        starts[n] = t, ends[n++] = e;
        t = e;
    }
    const size_t head = (size_t)(p - text);
    char *buf = n ? malloc(head + (size_t)(eol - p) + 16) : NULL;
    if (!buf) return -1;
    /* The first token k with stops_on_line(after k), if the last one has it at all. */
    int lo = 0, hi = n - 1, found = -1;
    if (stops_on_line(buf, text, head + (size_t)(ends[hi] - p), line)) {
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            if (stops_on_line(buf, text, head + (size_t)(ends[mid] - p), line)) hi = mid;
            else lo = mid + 1;
        }
        snprintf(tok, size, "'%.*s' (column %d)", (int)(ends[lo] - starts[lo] > 60 ? 60 : ends[lo] - starts[lo]),
                 starts[lo], (int)(starts[lo] - p) + 1);
        found = 0;
    }
    free(buf);
    return found;
}

/* Reads and parses the config file (see above) into c->cfg. */
static int read_config_file(lmp_run_config *c, const char *path)
{
    char *text, *patched = NULL;
    size_t len;
    int st = lmp_input_read(path, LMP_INPUT_CONFIG, &text, &len);
    if (st) return st;
    if (memchr(text, 0, len)) {
        free(text);
        return lmp_fail(LMP_EINVAL, "%s: not a config file (it contains a NUL byte)", path);
    }
    c->text_fnv1a = lmp_fnv1a64(LMP_FNV1A64_INIT, text, len); /* read once: the path may be a pipe */
    st = scan_config_text(path, text, len, &patched, 0);
    if (st) {
        free(text);
        return st;
    }
    const char *parsed = patched ? patched : "";
    int ok = config_read_string(&c->cfg, parsed);
    /* libconfig's text is "syntax error" for almost everything: say so once, and name the token
     * it stopped at (syntax_error_token), e.g. "x.cfg:2: syntax error at ';' (column 13)". */
    const char *why = config_error_text(&c->cfg);
    char detail[256] = "", tok[128];
    if (!ok && why && strcmp(why, "syntax error") != 0) snprintf(detail, sizeof detail, ": %s", why);
    const char *in = ok ? NULL : config_error_file(&c->cfg);
    if (!ok && !(in && strcmp(in, path) != 0) && !syntax_error_token(parsed, config_error_line(&c->cfg), tok, sizeof tok))
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail), " at %s", tok);
    free(patched);
    free(text);
    if (ok) return 0;
    /* A syntax error in an @included file names that file. */
    if (in && strcmp(in, path) != 0)
        return lmp_fail(LMP_EINVAL, "%s:%d: syntax error%s (in a file @included by %s)", in,
                        config_error_line(&c->cfg), detail, path);
    return lmp_fail(LMP_EINVAL, "%s:%d: syntax error%s", path, config_error_line(&c->cfg), detail);
}

int lmp_config_load(lmp_ctx *ctx, const char *path, lmp_run_config **out)
{
    static const char *const keys[] = {"version", "plugins", "backend", "model", "calibration",
                                       "eval", "seed", "imatrix", "variants", "export", "memory", NULL};
    *out = NULL;
    lmp_run_config *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    config_init(&c->cfg);
    int rst = read_config_file(c, path);
    if (rst) {
        lmp_config_free(c);
        return rst;
    }
    config_setting_t *root = config_root_setting(&c->cfg);
    config_setting_set_hook(root, c->path); /* for file_of() */
    int64_t seed = 1234;
    int st = check_keys(root, keys);
    if (!st) st = get_int(root, "seed", 0, INT64_MAX, &seed);
    if (!st) st = load_plugins(ctx, c, root);
    if (!st) st = load_backend(c, root);
    if (!st) st = load_model_section(c, root);
    if (!st) st = load_memory(c, root);
    if (!st) st = load_eval(c, root);
    if (!st) st = load_calibration(c, root);
    if (!st && !c->calib_text && (c->rotate.r1 == LMP_ROT_LEARNED || c->rotate.r2 == LMP_ROT_LEARNED)) {
        const config_setting_t *rot = config_setting_lookup(root, "model.rotate");
        st = bad(rot, "learned rotations are trained on the calibration windows: the config needs calibration.text");
    }
    if (!st) st = load_export(c, root);
    if (!st) st = load_imatrix_key(c, root);
    if (!st) st = load_variants(c, root);
    if (!st) st = lmp_config_check_files(c);
    if (!st) st = load_imatrices(c);
    c->seed = (uint64_t)seed;
    if (st) {
        lmp_config_free(c);
        return st;
    }
    *out = c;
    return 0;
}

void lmp_config_free(lmp_run_config *c)
{
    if (!c) return;
    for (int i = 0; c->variants && i < c->n_variants; i++) {
        lmp_variant *v = &c->variants[i];
        for (int j = 0; v->stages && j < v->n_stages; j++) {
            lmp_stage *s = &v->stages[j];
            free(s->params);
            free(s->targets);
            free(s->ignore);
            for (int k = 0; s->target_patterns && k < s->n_targets; k++) free_pattern(&s->target_patterns[k]);
            for (int k = 0; s->ignore_patterns && k < s->n_ignore; k++) free_pattern(&s->ignore_patterns[k]);
            free(s->target_patterns);
            free(s->ignore_patterns);
            for (int k = 0; s->overrides && k < s->n_overrides; k++) {
                free(s->overrides[k].params);
                free_pattern(&s->overrides[k].pattern);
            }
            free(s->overrides);
        }
        free(v->stages);
        free(v->model_path);
        free_origin(&v->model_at);
        free(v->imatrix_path);
        free_origin(&v->imatrix_at);
        free_origin(&v->kv_at);
    }
    free(c->variants);
    for (int i = 0; c->imatrices && i < c->n_imatrices; i++) lmp_imatrix_free(c->imatrices[i]);
    free(c->imatrices);
    free(c->imatrix_path);
    free_origin(&c->imatrix_at);
    for (int i = 0; c->eval_texts && i < c->n_eval_texts; i++) free(c->eval_texts[i]);
    free(c->eval_texts);
    for (int i = 0; c->eval_text_at && i < c->n_eval_texts; i++) free_origin(&c->eval_text_at[i]);
    free(c->eval_text_at);
    free_origin(&c->model_at);
    free_origin(&c->tokenizer_at);
    free_origin(&c->calib_at);
    free_origin(&c->lambada_at);
    free(c->backend_params);
    free(c->calib_text);
    free(c->lambada);
    free(c->model_path);
    free(c->tokenizer_path);
    lmp_registry_free(&c->reg);
    config_destroy(&c->cfg);
    free(c->path);
    free(c);
}
