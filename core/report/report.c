/* report.c — the comparison as a terminal table, JSON, Markdown and CSV (compare.h).  Only
 * finished variants are written, so a report written after each variant is always complete. */
#include <link.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/textfile.h"
#include "model/kv_quant.h"
#include "plugin/registry.h"
#include "report/report.h"

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
    if (isfinite(x)) fprintf(f, "%.17g", x); /* round-trips: --resume reads the sums back exactly */
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

/* A JSON tree written back as it was read (a resumed variant's entry). */
static void json_tree(FILE *f, const lmp_json *j)
{
    switch (j->type) {
    case LMP_JSON_NULL: fputs("null", f); break;
    case LMP_JSON_BOOL: fputs(j->boolean ? "true" : "false", f); break;
    case LMP_JSON_NUMBER:
        if (j->is_integer) fprintf(f, "%lld", (long long)j->integer);
        else json_number(f, j->number);
        break;
    case LMP_JSON_STRING: json_string(f, j->str); break;
    case LMP_JSON_ARRAY:
    case LMP_JSON_OBJECT:
        fputc(j->type == LMP_JSON_ARRAY ? '[' : '{', f);
        for (size_t i = 0; i < j->n; i++) {
            if (i) fputs(", ", f);
            if (j->type == LMP_JSON_OBJECT) {
                json_string(f, j->keys[i]);
                fputs(": ", f);
            }
            json_tree(f, &j->items[i]);
        }
        fputc(j->type == LMP_JSON_ARRAY ? ']' : '}', f);
        break;
    }
}

/* The BLAS library the process has loaded (the cpu backend's), by its file name. */
static int find_blas(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *base = lmp_basename(info->dlpi_name);
    if (!strstr(base, "blas")) return 0;
    snprintf(data, 512, "%s", info->dlpi_name);
    return 1;
}

static void json_machine(FILE *f)
{
    char cpu[256] = "", blas[512] = "", line[512];
    FILE *ci = fopen("/proc/cpuinfo", "r");
    while (ci && !cpu[0] && fgets(line, sizeof line, ci))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':'))
            snprintf(cpu, sizeof cpu, "%.*s", (int)strcspn(strchr(line, ':') + 2, "\n"), strchr(line, ':') + 2);
    if (ci) fclose(ci);
    dl_iterate_phdr(find_blas, blas);
    fprintf(f, "{\"cores\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
    json_string(f, cpu);
    fputs(", \"blas\": ", f);
    json_string(f, blas);
    fputc('}', f);
}

void lmp_report_json_stages(const lmp_variant *v, FILE *f)
{
    fputc('[', f);
    for (int s = 0; s < v->n_stages; s++) {
        const lmp_stage *st = &v->stages[s];
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
    fputc(']', f);
}

/* What the variant did to each linear: the stages that touched it with the parameters they used
 * for it (overrides applied), and the result: storage bits, activation quantization, sparsity. */
static void json_linears(FILE *f, const lmp_variant_result *res)
{
    static const char *const act_modes[] = {"none", "static-tensor", "dynamic-tensor", "dynamic-token"};
    fputc('[', f);
    for (int i = 0; i < res->n_linears; i++) {
        const lmp_linear_outcome *l = &res->linears[i];
        fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", f);
        json_string(f, l->name);
        fputs(", \"stages\": [", f);
        int touched = 0;
        for (int s = 0; s < res->v->n_stages; s++) {
            const lmp_stage *st = &res->v->stages[s];
            const int router = l->role == LMP_ROLE_ROUTER || l->role == LMP_ROLE_SHARED_GATE;
            const lmp_value *p = router && !lmp_stage_names_router(st, l->name) ? NULL : lmp_stage_params_for(st, l->name);
            if (!p) continue;
            fputs(touched++ ? ", {\"strategy\": " : "{\"strategy\": ", f);
            json_string(f, st->plugin->desc->name);
            fputs(", \"params\": ", f);
            json_params(f, st->plugin->desc, p);
            fputc('}', f);
        }
        fprintf(f, "], \"skipped\": %s, \"weight_bits\": ", touched ? "false" : "true");
        json_number(f, l->weight_bits);
        fputs(", \"weight_err\": ", f);
        json_number(f, l->weight_err);
        fputs(", \"act\": ", f);
        if (l->act.mode == LMP_ACT_NONE) fputs("null", f);
        else {
            fprintf(f, "{\"mode\": \"%s\", \"bits\": %d", act_modes[l->act.mode & 3], l->act.bits);
            if (l->act.mode == LMP_ACT_STATIC_TENSOR) {
                fputs(", \"scale\": ", f);
                json_number(f, l->act.scale);
            }
            fputc('}', f);
        }
        if (l->sparse_m) fprintf(f, ", \"sparsity\": \"%d:%d\"", l->sparse_n, l->sparse_m);
        else fputs(", \"sparsity\": null", f);
        if (l->expert_kind == LMP_EXPERT_ROUTED) { /* the calibration each expert had (issue 37) */
            fprintf(f, ", \"expert\": %d, \"calib_tokens\": ", l->expert);
            if (l->calib_tokens >= 0) fprintf(f, "%lld", (long long)l->calib_tokens);
            else fputs("null", f);
            fputs(l->calib_fallback ? ", \"calib_fallback\": \"identity Hessian (RTN on the stage's grid)\"" :
                                      ", \"calib_fallback\": null", f);
        } else if (l->role == LMP_ROLE_ROUTER) {
            fputs(", \"router\": true", f);
        }
        fputc('}', f);
    }
    fputs("]", f);
}

static void json_variant(FILE *f, const lmp_report *r, const lmp_variant_result *res)
{
    if (res->prior) {
        json_tree(f, res->prior);
        return;
    }
    fputs("{\"name\": ", f);
    json_string(f, res->v->name);
    fputs(", \"stages\": ", f);
    lmp_report_json_stages(res->v, f);
    /* per variant: a variant may override calibration.inputs, and two otherwise equal pipelines
     * then differ only here */
    if (res->v->n_stages) fprintf(f, ", \"calibration_inputs\": \"%s\"", lmp_calib_inputs_name(res->v->calib_inputs));
    if (res->v->n_stages && res->linears) { /* a mixture of experts' calibration (issue 37) */
        int experts = 0;
        for (int i = 0; i < res->n_linears && !experts; i++) experts = res->linears[i].expert_kind == LMP_EXPERT_ROUTED;
        if (experts)
            fprintf(f, ", \"calibration_experts\": \"%s\", \"expert_min_tokens\": %lld",
                    res->v->calib_experts_all ? "all" : "routed", (long long)res->v->expert_min_tokens);
    }
    if (res->v->kv.type != LMP_KV_NONE) { /* the KV cache's simulated quantization (issue 38) */
        char kv[64];
        fputs(", \"kv_cache\": ", f);
        json_string(f, lmp_kv_describe(&res->v->kv, kv, sizeof kv));
    }
    if (res->v->n_stages && res->v->imatrix_path) { /* the importance matrix its stages could ask for */
        fputs(", \"imatrix\": ", f);
        json_string(f, res->v->imatrix_path);
    }
    if (res->v->model_path) { /* an external variant: the file stands in for the stages */
        fputs(", \"model\": ", f);
        json_string(f, res->v->model_path);
        fputs(", \"format\": ", f);
        json_string(f, res->format);
    }
    fputs(", \"bits_per_weight\": ", f);
    json_number(f, res->bits_per_weight);
    fputs(", \"seconds\": ", f);
    json_number(f, res->seconds);
    fputs(", \"eval_seconds\": ", f);
    json_number(f, res->eval_seconds);
    fputs(", \"peak_rss_mb\": ", f);
    json_number(f, res->peak_rss_mb);
    fputs(", \"eval\": {", f);
    for (int t = 0; t < r->n_texts; t++) {
        const lmp_score *sc = &res->scores[t];
        if (t) fputs(", ", f);
        json_string(f, r->texts[t].key);
        fprintf(f, ": {\"tokens\": %lld, \"windows\": %lld, \"scored\": %lld, \"nll_sum\": ",
                (long long)r->texts[t].tokens, (long long)sc->windows, (long long)sc->scored);
        json_number(f, sc->nll_sum);
        fputs(", \"kld_sum\": ", f);
        json_number(f, sc->kld_sum);
        fprintf(f, ", \"top1_hits\": %lld, \"ppl\": ", (long long)sc->top1_hits);
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
    fputs(", \"linears\": ", f);
    json_linears(f, res);
    fputc('}', f);
}

static int n_done(const lmp_report *r)
{
    int n = 0;
    for (int i = 0; i < r->n_results; i++) n += r->results[i].done;
    return n;
}

void lmp_report_json(const lmp_report *r, FILE *f)
{
    const lmp_run_config *c = r->cfg;
    const lmp_model *m = r->model;
    fprintf(f, "{\"lmpress\": {\"version\": \"%s\", \"plugin_abi\": \"%d.%d\"},\n", LMP_VERSION, LMP_ABI_MAJOR,
            LMP_ABI_MINOR);
    fprintf(f, " \"fingerprint\": \"%s\", \"complete\": %s, \"variants_done\": %d, \"variants_chosen\": %d,\n",
            r->fingerprint, n_done(r) == r->n_results ? "true" : "false", n_done(r), r->n_results);
    fputs(" \"config\": {\"path\": ", f);
    json_string(f, c->path);
    fprintf(f, ", \"fnv1a64\": \"%s\"}, \"seed\": %llu,\n", r->config_hash, (unsigned long long)c->seed);
    fputs(" \"backend\": {\"name\": ", f);
    json_string(f, c->backend_name);
    const lmp_plugin *bp = lmp_registry_find(&c->reg, LMP_PLUGIN_BACKEND, c->backend_name);
    if (bp && c->backend_params) {
        fputs(", \"params\": ", f);
        json_params(f, bp->desc, c->backend_params);
    }
    fputs("},\n \"machine\": ", f);
    json_machine(f);
    fputs(",\n \"calibration\": ", f);
    if (c->calib_text) {
        fputs("{\"text\": ", f);
        json_string(f, c->calib_text);
        /* samples: the windows used (a text shorter than asked for gives fewer), beside the
         * number the config asked for */
        fprintf(f, ", \"samples\": %lld, \"samples_requested\": %lld, \"seq_len\": %lld, \"sampling\": \"%s\", "
                "\"inputs\": \"%s\"}",
                (long long)r->calib_windows, (long long)c->calib_samples, (long long)c->calib_seq_len,
                c->calib_random ? "random" : "sequential",
                lmp_calib_inputs_name(c->calib_inputs));
    } else fputs("null", f);
    fprintf(f, ",\n \"eval\": {\"seq_len\": %lld, \"max_windows\": %lld, \"texts\": [", (long long)c->eval_seq_len,
            (long long)c->eval_max_windows);
    for (int t = 0; t < r->n_texts; t++) {
        fputs(t ? ", {\"key\": " : "{\"key\": ", f);
        json_string(f, r->texts[t].key);
        fputs(", \"path\": ", f);
        json_string(f, r->texts[t].path);
        fprintf(f, ", \"tokens\": %lld, \"windows\": %lld, \"scored\": %lld}", (long long)r->texts[t].tokens,
                (long long)r->texts[t].windows, (long long)r->texts[t].scored);
    }
    fputs("], \"lambada\": ", f);
    if (c->lambada) json_string(f, c->lambada);
    else fputs("null", f);
    /* "f32": the evaluation ran in f32 whatever the backend's compute; "backend": at it */
    fprintf(f, ", \"lambada_max\": %lld, \"compute\": \"%s\"},\n", (long long)c->lambada_max,
            c->eval_compute_backend ? "backend" : "f32");
    fputs(" \"model\": {\"path\": ", f);
    json_string(f, m->path);
    fputs(", \"format\": ", f);
    json_string(f, m->format);
    fprintf(f, ", \"dim\": %lld, \"layers\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"hidden\": %lld, "
               "\"vocab\": %lld, \"block_linear_params\": %lld},\n",
            (long long)m->arch.dim, (long long)m->arch.n_layers, (long long)m->arch.n_heads,
            (long long)m->arch.n_kv_heads, (long long)m->arch.hidden, (long long)m->arch.vocab,
            (long long)lmp_model_block_linear_params(m));
    fprintf(f, " \"eval_seq_len\": %lld,\n \"variants\": [", (long long)c->eval_seq_len);
    int k = 0;
    for (int i = 0; i < r->n_results; i++) {
        if (!r->results[i].done) continue;
        fputs(k++ ? ",\n  " : "\n  ", f);
        json_variant(f, r, &r->results[i]);
    }
    fputs("\n]}\n", f);
}

/* ---- tables: one row of cells per variant ------------------------------------------------------ */
enum { MAX_CELLS = 64, CELL = 64 };

/* Text t's column label prefix: empty for a single text. */
static void text_prefix(const lmp_report *r, int t, char *out, size_t n)
{
    if (r->n_texts > 1) snprintf(out, n, "%.40s ", r->texts[t].key);
    else out[0] = 0;
}

static int header_cells(const lmp_report *r, char cells[][CELL])
{
    int n = 0;
    snprintf(cells[n++], CELL, "variant");
    snprintf(cells[n++], CELL, "bits/w");
    for (int t = 0; t < r->n_texts && n + 4 < MAX_CELLS - 4; t++) {
        char pre[48];
        text_prefix(r, t, pre, sizeof pre);
        snprintf(cells[n++], CELL, "%sppl", pre);
        snprintf(cells[n++], CELL, "%sppl ratio", pre);
        snprintf(cells[n++], CELL, "%skld", pre);
        snprintf(cells[n++], CELL, "%stop1 %%", pre);
    }
    if (r->cfg->lambada) snprintf(cells[n++], CELL, "lambada %%");
    snprintf(cells[n++], CELL, "compress s");
    snprintf(cells[n++], CELL, "eval s");
    snprintf(cells[n++], CELL, "peak MB");
    return n;
}

/* The unmodified model's perplexity on text t (the ratios' reference), if it is finished. */
static double base_ppl(const lmp_report *r, int t)
{
    for (int i = 0; i < r->n_results; i++)
        if (r->results[i].done && r->results[i].v->n_stages == 0) return lmp_score_ppl(&r->results[i].scores[t]);
    return NAN;
}

static int row_cells(const lmp_report *r, int i, char cells[][CELL])
{
    const lmp_variant_result *res = &r->results[i];
    int n = 0;
    snprintf(cells[n++], CELL, "%s", res->v->name);
    snprintf(cells[n++], CELL, "%.2f", res->bits_per_weight);
    for (int t = 0; t < r->n_texts && n + 4 < MAX_CELLS - 4; t++) {
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
    snprintf(cells[n++], CELL, "%.2f", res->eval_seconds);
    snprintf(cells[n++], CELL, "%.1f", res->peak_rss_mb);
    return n;
}

/* Column widths fixed before any row is known (rows are printed as variants finish): the
 * header's, at least 8 (14 for "acc ± err"), and the longest chosen variant name. */
static int table_widths(const lmp_report *r, int width[MAX_CELLS])
{
    char head[MAX_CELLS][CELL];
    int n = header_cells(r, head);
    for (int c = 0; c < n; c++) {
        width[c] = (int)strlen(head[c]);
        int least = strcmp(head[c], "lambada %") == 0 ? 14 : 8;
        if (c > 0 && width[c] < least) width[c] = least;
    }
    for (int i = 0; i < r->n_results; i++)
        if ((int)strlen(r->results[i].v->name) > width[0]) width[0] = (int)strlen(r->results[i].v->name);
    return n;
}

static void print_cells(FILE *f, char cells[][CELL], const int *width, int n)
{
    for (int c = 0; c < n; c++) fprintf(f, c ? "  %*s" : "%-*s", width[c], cells[c]);
    fputc('\n', f);
}

void lmp_report_table_head(const lmp_report *r, FILE *f)
{
    char head[MAX_CELLS][CELL];
    int width[MAX_CELLS], n = table_widths(r, width);
    header_cells(r, head);
    fprintf(f, "model %s (%s): %lld linear weights in %lld blocks; ", r->model->path, r->model->format,
            (long long)lmp_model_block_linear_params(r->model), (long long)r->model->arch.n_layers);
    if (r->cfg->has_eval) fprintf(f, "eval windows of %lld tokens\n", (long long)r->cfg->eval_seq_len);
    else fputs("no evaluation (the config has no eval section)\n", f);
    for (int t = 0; t < r->n_texts; t++)
        fprintf(f, "text %s: %lld tokens, %lld windows, %lld scored\n", r->texts[t].path,
                (long long)r->texts[t].tokens, (long long)r->texts[t].windows, (long long)r->texts[t].scored);
    fputc('\n', f);
    print_cells(f, head, width, n);
    fflush(f);
}

void lmp_report_table_row(const lmp_report *r, int i, FILE *f)
{
    char row[MAX_CELLS][CELL];
    int width[MAX_CELLS], n = table_widths(r, width);
    row_cells(r, i, row);
    print_cells(f, row, width, n);
    fflush(f);
}

/* A Markdown cell: '|' would end the cell, a newline the row. */
static void md_cell(FILE *f, const char *s)
{
    fputs("| ", f);
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (*s == '\n' || *s == '\r') fputc(' ', f);
        else fputc(*s, f);
    }
    fputc(' ', f);
}

void lmp_report_markdown(const lmp_report *r, FILE *f)
{
    char cells[MAX_CELLS][CELL];
    int n = header_cells(r, cells);
    for (int c = 0; c < n; c++) md_cell(f, cells[c]);
    fputs("|\n", f);
    for (int c = 0; c < n; c++) fputs(c ? "|---:" : "|:---", f);
    fputs("|\n", f);
    for (int i = 0; i < r->n_results; i++) {
        if (!r->results[i].done) continue;
        row_cells(r, i, cells);
        for (int c = 0; c < n; c++) md_cell(f, cells[c]);
        fputs("|\n", f);
    }
}

/* ---- CSV (RFC 4180): one header line, one line per finished variant, numbers at full
 * precision; text columns are prefixed "KEY:" when there are several texts. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_number(FILE *f, double x)
{
    fputc(',', f);
    if (isfinite(x)) fprintf(f, "%.17g", x);
}

void lmp_report_csv(const lmp_report *r, FILE *f)
{
    static const char *const per_text[] = {"ppl", "ppl_ratio", "kld", "top1"};
    fputs("variant,bits_per_weight", f);
    for (int t = 0; t < r->n_texts; t++)
        for (int k = 0; k < 4; k++) {
            char name[4200];
            if (r->n_texts > 1) snprintf(name, sizeof name, "%s:%s", r->texts[t].key, per_text[k]);
            else snprintf(name, sizeof name, "%s", per_text[k]);
            fputc(',', f);
            csv_field(f, name);
        }
    if (r->cfg->lambada) fputs(",lambada_acc,lambada_stderr", f);
    fputs(",compress_seconds,eval_seconds,peak_rss_mb\n", f);
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant_result *res = &r->results[i];
        if (!res->done) continue;
        csv_field(f, res->v->name);
        csv_number(f, res->bits_per_weight);
        for (int t = 0; t < r->n_texts; t++) {
            const lmp_score *s = &res->scores[t];
            csv_number(f, lmp_score_ppl(s));
            csv_number(f, lmp_score_ppl(s) / base_ppl(r, t));
            csv_number(f, lmp_score_kld(s));
            csv_number(f, lmp_score_top1(s));
        }
        if (r->cfg->lambada) {
            csv_number(f, lmp_lambada_acc(&res->lambada));
            csv_number(f, lmp_lambada_stderr(&res->lambada));
        }
        csv_number(f, res->seconds);
        csv_number(f, res->eval_seconds);
        csv_number(f, res->peak_rss_mb);
        fputc('\n', f);
    }
}

void lmp_report_free(lmp_report *r)
{
    if (!r) return;
    for (int i = 0; r->results && i < r->n_results; i++) {
        free(r->results[i].scores);
        free(r->results[i].linears);
    }
    free(r->results);
    for (int t = 0; r->texts && t < r->n_texts; t++) free(r->texts[t].key);
    free(r->texts);
    for (int64_t b = 0; r->shape && b < r->n_shape; b++) lmp_block_free_tables(&r->shape[b]);
    free(r->shape);
    lmp_model_free(r->model);
    free(r);
}
