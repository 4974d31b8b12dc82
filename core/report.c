/* report.c — the comparison as a terminal table, JSON, Markdown and CSV (compare.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "textfile.h"

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void json_number(FILE *f, double x)
{
    if (isfinite(x)) fprintf(f, "%.10g", x);
    else fputs("null", f);
}

static void json_params(FILE *f, const lmp_plugin_desc *d, const lmp_value *v)
{
    fputc('{', f);
    for (uint32_t i = 0; i < d->n_params; i++) {
        if (i) fputs(", ", f);
        json_string(f, d->params[i].name);
        fputs(": ", f);
        switch (d->params[i].type) {
        case LMP_PARAM_BOOL: fputs(v[i].num ? "true" : "false", f); break;
        case LMP_PARAM_INT: fprintf(f, "%lld", (long long)v[i].num); break;
        case LMP_PARAM_FLOAT: json_number(f, v[i].num); break;
        default: json_string(f, v[i].str ? v[i].str : ""); break;
        }
    }
    fputc('}', f);
}

static void json_strings(FILE *f, const char *const *s, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        json_string(f, s[i]);
    }
    fputc(']', f);
}

void lmp_report_json(const lmp_report *r, FILE *f)
{
    const lmp_model *m = r->model;
    fputs("{\"model\": {\"path\": ", f);
    json_string(f, m->path);
    fputs(", \"format\": ", f);
    json_string(f, m->format);
    fprintf(f, ", \"dim\": %lld, \"layers\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"hidden\": %lld, "
               "\"vocab\": %lld, \"block_linear_params\": %lld}",
            (long long)m->arch.dim, (long long)m->arch.n_layers, (long long)m->arch.n_heads,
            (long long)m->arch.n_kv_heads, (long long)m->arch.hidden, (long long)m->arch.vocab,
            (long long)lmp_model_block_linear_params(m));
    fprintf(f, ",\n \"eval_seq_len\": %lld, \"eval_seconds\": ", (long long)r->cfg->eval_seq_len);
    json_number(f, r->eval_seconds);
    fputs(",\n \"variants\": [", f);
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant_result *res = &r->results[i];
        fputs(i ? ",\n  {" : "\n  {", f);
        fputs("\"name\": ", f);
        json_string(f, res->v->name);
        fputs(", \"stages\": [", f);
        for (int s = 0; s < res->v->n_stages; s++) {
            const lmp_stage *st = &res->v->stages[s];
            fputs(s ? ", {\"strategy\": " : "{\"strategy\": ", f);
            json_string(f, st->plugin->desc->name);
            fputs(", \"params\": ", f);
            json_params(f, st->plugin->desc, st->params);
            fputs(", \"targets\": ", f);
            json_strings(f, st->targets, st->n_targets);
            fputs(", \"ignore\": ", f);
            json_strings(f, st->ignore, st->n_ignore);
            fprintf(f, ", \"overrides\": %d}", st->n_overrides);
        }
        fputs("], \"bits_per_weight\": ", f);
        json_number(f, res->bits_per_weight);
        fputs(", \"seconds\": ", f);
        json_number(f, res->seconds);
        fputs(", \"peak_rss_mb\": ", f);
        json_number(f, res->peak_rss_mb);
        fputs(", \"eval\": {", f);
        for (int t = 0; t < r->n_texts; t++) {
            const lmp_score *sc = &res->scores[t];
            if (t) fputs(", ", f);
            json_string(f, lmp_basename(r->cfg->eval_texts[t]));
            fprintf(f, ": {\"tokens\": %lld, \"windows\": %lld, \"scored\": %lld, \"ppl\": ",
                    (long long)r->text_tokens[t], (long long)sc->windows, (long long)sc->scored);
            json_number(f, lmp_score_ppl(sc));
            fputs(", \"kld\": ", f);
            json_number(f, lmp_score_kld(sc));
            fputs(", \"top1\": ", f);
            json_number(f, lmp_score_top1(sc));
            fputc('}', f);
        }
        fputc('}', f);
        if (r->cfg->lambada) {
            const lmp_lambada_score *ls = &res->lambada;
            fprintf(f, ", \"lambada\": {\"passages\": %lld, \"correct\": %lld, \"acc\": ", (long long)ls->passages,
                    (long long)ls->correct);
            json_number(f, lmp_lambada_acc(ls));
            fputs(", \"stderr\": ", f);
            json_number(f, lmp_lambada_stderr(ls));
            fputc('}', f);
        }
        fputc('}', f);
    }
    fputs("\n]}\n", f);
}

/* One row of cells per variant, shared by the three tabular formats. */
enum { MAX_CELLS = 64, CELL = 48 };

static int header_cells(const lmp_report *r, char cells[][CELL])
{
    int n = 0;
    snprintf(cells[n++], CELL, "variant");
    snprintf(cells[n++], CELL, "bits/w");
    for (int t = 0; t < r->n_texts && n + 4 < MAX_CELLS - 2; t++) {
        const char *name = lmp_basename(r->cfg->eval_texts[t]);
        const char *prefix = r->n_texts > 1 ? name : "";
        const char *sep = r->n_texts > 1 ? " " : "";
        snprintf(cells[n++], CELL, "%.30s%sppl", prefix, sep);
        snprintf(cells[n++], CELL, "%.30s%sppl ratio", prefix, sep);
        snprintf(cells[n++], CELL, "%.30s%skld", prefix, sep);
        snprintf(cells[n++], CELL, "%.30s%stop1 %%", prefix, sep);
    }
    if (r->cfg->lambada) snprintf(cells[n++], CELL, "lambada %%");
    snprintf(cells[n++], CELL, "time s");
    snprintf(cells[n++], CELL, "peak MB");
    return n;
}

/* The unmodified model's perplexity on text t (the scores' reference), from any result. */
static double base_ppl(const lmp_report *r, int t)
{
    for (int i = 0; i < r->n_results; i++)
        if (r->results[i].v->n_stages == 0) return lmp_score_ppl(&r->results[i].scores[t]);
    return NAN;
}

static int row_cells(const lmp_report *r, int i, char cells[][CELL])
{
    const lmp_variant_result *res = &r->results[i];
    int n = 0;
    snprintf(cells[n++], CELL, "%s", res->v->name);
    snprintf(cells[n++], CELL, "%.2f", res->bits_per_weight);
    for (int t = 0; t < r->n_texts && n + 4 < MAX_CELLS - 2; t++) {
        const lmp_score *s = &res->scores[t];
        double base = base_ppl(r, t);
        snprintf(cells[n++], CELL, "%.4f", lmp_score_ppl(s));
        if (isfinite(base)) snprintf(cells[n++], CELL, "%.4f", lmp_score_ppl(s) / base);
        else snprintf(cells[n++], CELL, "-");
        snprintf(cells[n++], CELL, "%.5f", lmp_score_kld(s));
        snprintf(cells[n++], CELL, "%.2f", 100.0 * lmp_score_top1(s));
    }
    if (r->cfg->lambada)
        snprintf(cells[n++], CELL, "%.2f ± %.2f", 100.0 * lmp_lambada_acc(&res->lambada),
                 100.0 * lmp_lambada_stderr(&res->lambada));
    snprintf(cells[n++], CELL, "%.2f", res->seconds);
    snprintf(cells[n++], CELL, "%.1f", res->peak_rss_mb);
    return n;
}

void lmp_report_table(const lmp_report *r, FILE *f)
{
    char head[MAX_CELLS][CELL], row[MAX_CELLS][CELL];
    int width[MAX_CELLS], n = header_cells(r, head);
    for (int c = 0; c < n; c++) width[c] = (int)strlen(head[c]);
    for (int i = 0; i < r->n_results; i++) {
        row_cells(r, i, row);
        for (int c = 0; c < n; c++)
            if ((int)strlen(row[c]) > width[c]) width[c] = (int)strlen(row[c]);
    }
    fprintf(f, "model %s (%s): %lld linear weights in %lld blocks; eval windows of %lld tokens\n",
            r->model->path, r->model->format, (long long)lmp_model_block_linear_params(r->model),
            (long long)r->model->arch.n_layers, (long long)r->cfg->eval_seq_len);
    for (int t = 0; t < r->n_texts; t++)
        fprintf(f, "text %s: %lld tokens, %lld windows, %lld scored\n", r->cfg->eval_texts[t],
                (long long)r->text_tokens[t], (long long)r->results[0].scores[t].windows,
                (long long)r->results[0].scores[t].scored);
    fputc('\n', f);
    for (int c = 0; c < n; c++) fprintf(f, c ? "  %*s" : "%-*s", width[c], head[c]);
    fputc('\n', f);
    for (int i = 0; i < r->n_results; i++) {
        row_cells(r, i, row);
        for (int c = 0; c < n; c++) fprintf(f, c ? "  %*s" : "%-*s", width[c], row[c]);
        fputc('\n', f);
    }
}

void lmp_report_markdown(const lmp_report *r, FILE *f)
{
    char cells[MAX_CELLS][CELL];
    int n = header_cells(r, cells);
    for (int c = 0; c < n; c++) fprintf(f, "| %s ", cells[c]);
    fputs("|\n", f);
    for (int c = 0; c < n; c++) fputs(c ? "|---:" : "|:---", f);
    fputs("|\n", f);
    for (int i = 0; i < r->n_results; i++) {
        row_cells(r, i, cells);
        for (int c = 0; c < n; c++) fprintf(f, "| %s ", cells[c]);
        fputs("|\n", f);
    }
}

void lmp_report_csv(const lmp_report *r, FILE *f)
{
    char cells[MAX_CELLS][CELL];
    int n = header_cells(r, cells);
    for (int c = 0; c < n; c++) fprintf(f, "%s\"%s\"", c ? "," : "", cells[c]);
    fputc('\n', f);
    for (int i = 0; i < r->n_results; i++) {
        row_cells(r, i, cells);
        for (int c = 0; c < n; c++) fprintf(f, c ? ",%s" : "\"%s\"", cells[c]);
        fputc('\n', f);
    }
}
