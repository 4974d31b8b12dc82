/* config_write.c — see config_write.h. */
#include "config/config_write.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/kv_quant.h"
#include "plugin/registry.h"

void lmp_config_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20) fprintf(f, "\\x%02x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* The real path when the file exists (it was checked when the config was loaded), else as is. */
static void write_path(FILE *f, const char *path)
{
    char real[PATH_MAX];
    lmp_config_write_string(f, realpath(path, real) ? real : path);
}

static void write_params(FILE *f, const lmp_plugin_desc *d, const lmp_value *v)
{
    fputs("{ ", f);
    for (uint32_t i = 0; i < d->n_params; i++) {
        fprintf(f, "%s = ", d->params[i].name);
        switch (d->params[i].type) {
        case LMP_PARAM_BOOL: fputs(v[i].num ? "true" : "false", f); break;
        case LMP_PARAM_INT: fprintf(f, "%lld", (long long)v[i].num); break;
        case LMP_PARAM_FLOAT: {
            /* libconfig reads a number without '.' or 'e' as an integer */
            char num[64];
            snprintf(num, sizeof num, "%.17g", v[i].num);
            if (!strpbrk(num, ".eEn")) strcat(num, ".0");
            fputs(num, f);
            break;
        }
        default: lmp_config_write_string(f, v[i].str ? v[i].str : ""); break;
        }
        fputs("; ", f);
    }
    fputc('}', f);
}

static void write_strings(FILE *f, const char *key, const char *const *s, int n)
{
    if (!n) return;
    fprintf(f, " %s = [ ", key);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        lmp_config_write_string(f, s[i]);
    }
    fputs(" ];", f);
}

void lmp_config_write_head(FILE *f, const lmp_run_config *c, const char *comment)
{
    for (const char *p = comment; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "# %.*s\n", (int)n, p);
        p += n + (nl != NULL);
    }
    fputs("model = { path = ", f);
    write_path(f, c->model_path);
    if (c->tokenizer_path) {
        fputs("; tokenizer = ", f);
        write_path(f, c->tokenizer_path);
    }
    fputs("; };\n", f);
    const lmp_plugin *be = lmp_registry_find(&c->reg, LMP_PLUGIN_BACKEND, c->backend_name);
    fputs("backend = { name = ", f);
    lmp_config_write_string(f, c->backend_name);
    if (be && c->backend_params) {
        fputs("; params = ", f);
        write_params(f, be->desc, c->backend_params);
    }
    fputs("; };\n", f);
    if (c->calib_text) {
        fputs("calibration = { text = ", f);
        write_path(f, c->calib_text);
        fprintf(f, "; samples = %lld; seq_len = %lld; sampling = \"%s\"; inputs = \"%s\"; };\n",
                (long long)c->calib_samples, (long long)c->calib_seq_len, c->calib_random ? "random" : "sequential",
                lmp_calib_inputs_name(c->calib_inputs));
    }
    if (c->export_embedding_type || c->export_output_type) {
        fputs("export = {", f);
        if (c->export_embedding_type) fprintf(f, " embedding_type = \"%s\";", c->export_embedding_type);
        if (c->export_output_type) fprintf(f, " output_type = \"%s\";", c->export_output_type);
        fputs(" };\n", f);
    }
    if (!c->has_eval) {
        fprintf(f, "seed = %llu;\n", (unsigned long long)c->seed);
        return;
    }
    fputs("eval = { texts = [ ", f);
    for (int t = 0; t < c->n_eval_texts; t++) {
        if (t) fputs(", ", f);
        write_path(f, c->eval_texts[t]);
    }
    fprintf(f, " ]; seq_len = %lld; max_windows = %lld;", (long long)c->eval_seq_len, (long long)c->eval_max_windows);
    if (c->eval_compute_backend) fputs(" compute = \"backend\";", f);
    if (c->lambada) {
        fputs(" lambada = ", f);
        write_path(f, c->lambada);
        fprintf(f, "; lambada_max = %lld;", (long long)c->lambada_max);
    }
    fputs(" };\n", f);
    fprintf(f, "seed = %llu;\n", (unsigned long long)c->seed);
}

/* A plugin found by name in the search path is written by name; one a config named by path
 * keeps its path (it must then be trusted, as it was for the original config). */
static void write_strategy(FILE *f, const lmp_run_config *c, const lmp_plugin *p)
{
    const lmp_plugin *by_name = lmp_registry_find(&c->reg, LMP_PLUGIN_STRATEGY, p->desc->name);
    lmp_config_write_string(f, by_name == p ? p->desc->name : p->path);
}

void lmp_config_write_variant(FILE *f, const lmp_run_config *c, const lmp_variant *v, const char *name,
                              const char *const *first_overrides)
{
    fputs("  { name = ", f);
    lmp_config_write_string(f, name ? name : v->name);
    fputs(";\n", f);
    if (v->model_path) {
        fputs("    model = ", f);
        write_path(f, v->model_path);
        fputs("; }", f);
        return;
    }
    if (v->n_stages && v->calib_inputs != c->calib_inputs)
        fprintf(f, "    calibration = { inputs = \"%s\"; };\n", lmp_calib_inputs_name(v->calib_inputs));
    if (v->n_stages && v->kv.type != LMP_KV_NONE) {
        fprintf(f, "    kv_cache = { format = \"%s\"; granularity = \"%s\"; scales = \"%s\"; };\n",
                lmp_kv_type_names[v->kv.type], lmp_kv_granularity_names[v->kv.per_head],
                v->kv.dynamic ? "dynamic" : "static");
    }
    if (v->n_stages) fputs("    pipeline = (\n", f);
    for (int s = 0; s < v->n_stages; s++) {
        const lmp_stage *st = &v->stages[s];
        const lmp_plugin_desc *d = st->plugin->desc;
        fputs("      { strategy = ", f);
        write_strategy(f, c, st->plugin);
        fputs(";\n        params = ", f);
        write_params(f, d, st->params);
        fputc(';', f);
        write_strings(f, "targets", st->targets, st->n_targets);
        write_strings(f, "ignore", st->ignore, st->n_ignore);
        const char *extra = first_overrides ? first_overrides[s] : NULL;
        if (extra || st->n_overrides) {
            fputs("\n        overrides = (", f);
            int k = 0;
            if (extra) fprintf(f, "\n          %s", extra), k++;
            for (int o = 0; o < st->n_overrides; o++, k++) {
                fputs(k ? ",\n          { match = " : "\n          { match = ", f);
                lmp_config_write_string(f, st->overrides[o].match);
                if (st->overrides[o].skip) fputs("; skip = true; }", f);
                else {
                    fputs("; params = ", f);
                    write_params(f, d, st->overrides[o].params);
                    fputs("; }", f);
                }
            }
            fputs(" );", f);
        }
        fputs(s + 1 < v->n_stages ? " },\n" : " }\n", f);
    }
    fputs(v->n_stages ? "    ); }" : "  }", f);
}
