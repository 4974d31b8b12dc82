/* analyze_report.c — what `lmpress analyze` writes (analyze.h): the ranked table, JSON, CSV, an
 * SVG bar chart and the ready config of the skip answer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "analyze/name_pattern.h"
#include "config/config_write.h"
#include "formats/json_write.h"
#include "report/svg.h"
#include "model/tensor_names.h"

/* A result's numbers, sums at full precision (so a test can hold them to compare's). */
static void json_result(FILE *f, const lmp_analysis *a, const lmp_bcache_result *r)
{
    fprintf(f, "{\"windows\": %lld, \"scored\": %lld, \"nll_sum\": ", (long long)r->score.windows, (long long)r->score.scored);
    lmp_jw_double(f, r->score.nll_sum);
    fputs(", \"kld_sum\": ", f);
    lmp_jw_double(f, r->score.kld_sum);
    fprintf(f, ", \"top1_hits\": %lld, \"ppl\": ", (long long)r->score.top1_hits);
    lmp_jw_double(f, lmp_score_ppl(&r->score));
    fputs(", \"kld\": ", f);
    lmp_jw_double(f, lmp_score_kld(&r->score));
    fputs(", \"top1\": ", f);
    lmp_jw_double(f, lmp_score_top1(&r->score));
    if (a->c->lambada) {
        fprintf(f, ", \"lambada\": {\"passages\": %lld, \"correct\": %lld, \"acc\": ", (long long)r->lambada.passages,
                (long long)r->lambada.correct);
        lmp_jw_double(f, lmp_lambada_acc(&r->lambada));
        fputc('}', f);
    }
    fputc('}', f);
}

static double cost_share(const lmp_analysis *a)
{
    return a->naive_forwards ? (double)a->forwards / (double)a->naive_forwards : NAN;
}

void lmp_analysis_table(const lmp_analysis *a, FILE *f, int top)
{
    const char *m = lmp_an_metric_name(a->o.metric);
    if (a->o.rank_proxy)
        fprintf(f, "analyze %s: ranked per %s by the proxy (each linear's relative output error on the calibration "
                   "windows; no evaluation per unit), %d units\n",
                a->v->name, lmp_an_gran_name(a->o.gran), a->n_units);
    else
        fprintf(f, "analyze %s: %s per %s, metric %s (%s is better), %d units\n", a->v->name,
                lmp_an_mode_name(a->o.mode), lmp_an_gran_name(a->o.gran), m,
                lmp_an_lower_better(a->o.metric) ? "lower" : "higher", a->n_units);
    const lmp_bcache_result *rs[2] = {&a->variant_res, &a->float_res};
    const char *labels[2] = {"variant", "float (every compressed linear restored)"};
    for (int i = 0; i < 2; i++) {
        fprintf(f, "  %-42s ppl %.4f  kld %.5f  top1 %.2f %%", labels[i], lmp_score_ppl(&rs[i]->score),
                lmp_score_kld(&rs[i]->score), 100 * lmp_score_top1(&rs[i]->score));
        if (a->c->lambada) fprintf(f, "  lambada %.2f %%", 100 * lmp_lambada_acc(&rs[i]->lambada));
        fputc('\n', f);
    }
    if (a->o.rank_proxy)
        fprintf(f, "%4s  %-40s %-5s %5s %11s\n", "rank", "unit", "role", "block", "proxy");
    else
        fprintf(f, "%4s  %-40s %-5s %5s %12s %12s %11s %5s\n", "rank", "unit", "role", "block",
                a->o.mode == LMP_AN_RESTORE_ONE ? "restored" : "quantized", "gain", "proxy", "prank");
    int n = top > 0 && top < a->n_units ? top : a->n_units;
    for (int k = 0; k < n; k++) {
        const lmp_an_unit *u = &a->units[a->order[k]];
        char blk[16] = "all";
        if (u->block >= 0) snprintf(blk, sizeof blk, "%d", u->block);
        if (a->o.rank_proxy)
            fprintf(f, "%4d  %-40s %-5s %5s %11.4g\n", u->rank, u->name, u->role, blk, u->proxy);
        else
            fprintf(f, "%4d  %-40s %-5s %5s %12.6g %12.5g %11.4g %5d\n", u->rank, u->name, u->role, blk, u->value,
                    u->gain, u->proxy, u->proxy_rank);
    }
    if (n < a->n_units) fprintf(f, "  ... %d more (--top 0 prints all)\n", a->n_units - n);
    /* which roles dominate the top ten */
    int counts[LMP_ROLE_COUNT + 1] = {0};
    int top10 = a->n_units < 10 ? a->n_units : 10;
    for (int k = 0; k < top10; k++) {
        const int r = lmp_role_by_name(a->units[a->order[k]].role);
        if (r >= 0) counts[r]++;
    }
    fprintf(f, "top %d by role:", top10);
    for (int r = 0; r < LMP_ROLE_COUNT; r++)
        if (counts[r]) fprintf(f, " %s %d", lmp_role_name(r), counts[r]);
    fputc('\n', f);
    if (!a->o.rank_proxy) fprintf(f, "proxy vs measured: Spearman rho = %.3f\n", a->spearman);
    if (a->skip.k || a->o.have_target || a->o.skip_top) {
        const lmp_an_metric tm = a->o.have_target ? a->o.target_metric : a->o.metric;
        fprintf(f, "skip list: %d unit%s skipped%s -> %s %.6g", a->skip.k, a->skip.k == 1 ? "" : "s",
                a->o.keep_params ? " (kept at --keep-params)" : "", lmp_an_metric_name(tm), a->skip.value);
        if (a->o.have_target)
            fprintf(f, " (target %s %s %g: %s, %d evaluations)", lmp_an_metric_name(tm),
                    lmp_an_lower_better(tm) ? "<=" : ">=", a->o.target, a->skip_reached ? "reached" : "NOT reached",
                    a->target_evals);
        fputc('\n', f);
    }
    if (a->config_checked && a->config_reproduces)
        fprintf(f, "written config: compare gives the skip variant these numbers (its other linears' compression does "
                   "not depend on the skipped ones: %s)\n",
                a->v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL ? "calibration on the original inputs"
                                                                : "no stage reads calibration statistics, or none skipped");
    if (a->have_written) {
        const lmp_an_metric tm = a->o.have_target ? a->o.target_metric : a->o.metric;
        fprintf(f, "written config: compare re-compresses the skip variant and gives %s %.6g, not analyze's %.6g "
                   "(%+.3g): the variant calibrates on compressed inputs, so every block after a skipped linear "
                   "calibrates on its float output, where analyze kept the variant's own compression. For a config "
                   "whose numbers are analyze's, analyze the variant with calibration = { inputs = \"original\"; }\n",
                lmp_an_metric_name(tm), a->written_value, a->skip.value, a->written_value - a->skip.value);
    }
    for (int i = 0; i < a->n_curve; i++) {
        if (i == 0 || strcmp(a->curve[i].order, a->curve[i - 1].order) != 0)
            fprintf(f, "%scurve %-10s", i ? "\n" : "", a->curve[i].order);
        fprintf(f, "  %d:%.5g", a->curve[i].k, a->curve[i].value);
    }
    if (a->n_curve) fputc('\n', f);
    fprintf(f, "cost of the ranking: %d units, %lld block-forwards against %lld for one full evaluation each "
               "(%.1f %%)\n", a->n_units, (long long)a->rank_forwards, (long long)a->rank_naive_forwards,
            a->rank_naive_forwards ? 100.0 * (double)a->rank_forwards / (double)a->rank_naive_forwards : NAN);
    fprintf(f, "cost: %lld evaluations, %lld block-forwards against %lld for one full evaluation each (%.1f %%); "
               "%.1f s (compress %.1f, baseline %.1f, units %.1f, skip/curves %.1f)\n",
            (long long)a->evals, (long long)a->forwards, (long long)a->naive_forwards, 100 * cost_share(a), a->total_s,
            a->compress_s, a->build_s, a->units_s, a->search_s);
}

void lmp_analysis_json(const lmp_analysis *a, FILE *f)
{
    fprintf(f, "{\"lmpress\": \"%s\", \"fingerprint\": \"%s\", \"config\": ", LMP_VERSION, a->fingerprint);
    lmp_jw_string(f, a->c->path);
    fputs(", \"variant\": ", f);
    lmp_jw_string(f, a->v->name);
    fprintf(f, ", \"mode\": \"%s\", \"granularity\": \"%s\", \"metric\": \"%s\", \"lower_is_better\": %s, "
               "\"rank_by\": \"%s\",\n",
            lmp_an_mode_name(a->o.mode), lmp_an_gran_name(a->o.gran), lmp_an_metric_name(a->o.metric),
            lmp_an_lower_better(a->o.metric) ? "true" : "false", a->o.rank_proxy ? "proxy" : "measured");
    fputs(" \"baseline\": ", f);
    json_result(f, a, &a->base);
    fputs(",\n \"compressed\": ", f);
    json_result(f, a, &a->variant_res);
    fputs(",\n \"float\": ", f);
    json_result(f, a, &a->float_res);
    fputs(",\n \"spearman\": ", f);
    lmp_jw_double(f, a->spearman);
    fputs(",\n \"units\": [", f);
    for (int k = 0; k < a->n_units; k++) {
        const lmp_an_unit *u = &a->units[a->order[k]];
        fprintf(f, "%s\n  {\"rank\": %d, \"name\": ", k ? "," : "", u->rank);
        lmp_jw_string(f, u->name);
        fputs(", \"role\": ", f);
        lmp_jw_string(f, u->role);
        fprintf(f, ", \"block\": %d, \"first_block\": %d, \"linears\": [", u->block, u->first);
        for (int j = 0; j < u->n_lins; j++) {
            if (j) fputs(", ", f);
            lmp_jw_string(f, a->lin_names[u->lins[j]]);
        }
        fputs("], \"value\": ", f);
        lmp_jw_double(f, u->value);
        fputs(", \"gain\": ", f);
        lmp_jw_double(f, u->gain);
        fputs(", \"proxy\": ", f);
        lmp_jw_double(f, u->proxy);
        fprintf(f, ", \"proxy_rank\": %d, \"result\": ", u->proxy_rank);
        if (a->o.rank_proxy) fputs("null", f); /* not evaluated */
        else json_result(f, a, &u->res);
        fputc('}', f);
    }
    fputs("],\n \"skip\": ", f);
    if (a->skip_list) {
        fprintf(f, "{\"k\": %d, \"keep_params\": ", a->skip.k);
        if (a->o.keep_params) lmp_jw_string(f, a->o.keep_params);
        else fputs("null", f);
        if (a->o.have_target) {
            fprintf(f, ", \"target\": {\"metric\": \"%s\", \"value\": ", lmp_an_metric_name(a->o.target_metric));
            lmp_jw_double(f, a->o.target);
            fprintf(f, ", \"reached\": %s, \"evaluations\": %d}", a->skip_reached ? "true" : "false", a->target_evals);
        }
        fputs(", \"units\": [", f);
        for (int k = 0; k < a->skip.k; k++) {
            if (k) fputs(", ", f);
            lmp_jw_string(f, a->units[a->skip_list[k]].name);
        }
        fputs("], \"result\": ", f);
        json_result(f, a, &a->skip.res);
        if (a->config_checked) {
            /* what `lmpress compare` gives the written config's skip variant */
            fprintf(f, ", \"written_config\": {\"reproduces\": %s, \"result\": ", a->config_reproduces ? "true" : "false");
            json_result(f, a, a->have_written ? &a->written : &a->skip.res);
            fputc('}', f);
        }
        fputc('}', f);
    } else fputs("null", f);
    fputs(",\n \"curve\": [", f);
    for (int i = 0; i < a->n_curve; i++) {
        fprintf(f, "%s\n  {\"order\": \"%s\", \"k\": %d, \"value\": ", i ? "," : "", a->curve[i].order, a->curve[i].k);
        lmp_jw_double(f, a->curve[i].value);
        fputs(", \"result\": ", f);
        json_result(f, a, &a->curve[i].res);
        fputc('}', f);
    }
    fprintf(f, "],\n \"cost\": {\"evaluations\": %lld, \"block_forwards\": %lld, \"naive_block_forwards\": %lld, "
               "\"share\": ", (long long)a->evals, (long long)a->forwards, (long long)a->naive_forwards);
    lmp_jw_double(f, cost_share(a));
    fprintf(f, ", \"ranking_block_forwards\": %lld, \"ranking_naive_block_forwards\": %lld, \"ranking_share\": ",
            (long long)a->rank_forwards, (long long)a->rank_naive_forwards);
    lmp_jw_double(f, a->rank_naive_forwards ? (double)a->rank_forwards / (double)a->rank_naive_forwards : NAN);
    fputs(", \"seconds\": ", f);
    lmp_jw_double(f, a->total_s);
    fputs(", \"compress_seconds\": ", f);
    lmp_jw_double(f, a->compress_s);
    fputs(", \"baseline_seconds\": ", f);
    lmp_jw_double(f, a->build_s);
    fputs(", \"units_seconds\": ", f);
    lmp_jw_double(f, a->units_s);
    fputs(", \"skip_seconds\": ", f);
    lmp_jw_double(f, a->search_s);
    fputs("}}\n", f);
}

void lmp_analysis_csv(const lmp_analysis *a, FILE *f)
{
    if (a->o.rank_proxy) { /* no unit was evaluated: its proxy is all there is */
        fputs("rank,unit,role,block,proxy\r\n", f);
        for (int k = 0; k < a->n_units; k++) {
            const lmp_an_unit *u = &a->units[a->order[k]];
            fprintf(f, "%d,\"%s\",%s,%d,%.17g\r\n", u->rank, u->name, u->role, u->block, u->proxy);
        }
        return;
    }
    fputs("rank,unit,role,block,value,gain,proxy,proxy_rank,ppl,kld,top1", f);
    if (a->c->lambada) fputs(",lambada_acc", f);
    fputs("\r\n", f);
    for (int k = 0; k < a->n_units; k++) {
        const lmp_an_unit *u = &a->units[a->order[k]];
        fprintf(f, "%d,\"%s\",%s,%d,%.17g,%.17g,%.17g,%d,%.17g,%.17g,%.17g", u->rank, u->name, u->role, u->block,
                u->value, u->gain, u->proxy, u->proxy_rank, lmp_score_ppl(&u->res.score),
                lmp_score_kld(&u->res.score), lmp_score_top1(&u->res.score));
        if (a->c->lambada) fprintf(f, ",%.17g", lmp_lambada_acc(&u->res.lambada));
        fputs("\r\n", f);
    }
}

/* ---- SVG ---------------------------------------------------------------------------------------- */

/* A bar's height: the measured gain, or the proxy when that is what ranked the units. */
static double bar_value(const lmp_analysis *a, const lmp_an_unit *u) { return a->o.rank_proxy ? u->proxy : u->gain; }

/* One bar per unit in model order, blocks separated by a gap and labelled; height = the
 * sensitivity (gain), negative gains below the axis; colour = role.  Each bar has a <title>
 * (the browser's tooltip) with its name, rank and numbers. */
static void analysis_svg(const lmp_analysis *a, FILE *f, int standalone)
{
    const double bar = a->n_units > 120 ? 4 : a->n_units > 40 ? 8 : 14, gap = bar * 1.5;
    const double left = 80, right = 150, top = 50, plot_h = 320, bottom = 70;
    int n_gaps = 0;
    for (int u = 1; u < a->n_units; u++) n_gaps += a->units[u].block != a->units[u - 1].block;
    const double plot_w = a->n_units * bar + n_gaps * gap;
    const double W = left + plot_w + right, Hh = top + plot_h + bottom;
    double hi = 0, lo = 0;
    for (int u = 0; u < a->n_units; u++) {
        double g = bar_value(a, &a->units[u]);
        if (isfinite(g) && g > hi) hi = g;
        if (isfinite(g) && g < lo) lo = g;
    }
    if (hi == lo) hi = lo + 1;
    const double span = hi - lo, y0 = top + plot_h * hi / span; /* the zero line */
    /* an SVG file needs its namespace; inside an HTML page the parser gives it (and the page
     * then holds no address at all) */
    fprintf(f, "<svg %swidth=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n",
            standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "id=\"sensitivity\" ", W, Hh, W, Hh);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">", left);
    lmp_xml_text(f, a->v->name);
    if (a->o.rank_proxy)
        fprintf(f, ": proxy per %s (relative output error on the calibration windows)</text>\n",
                lmp_an_gran_name(a->o.gran));
    else
        fprintf(f, ": %s sensitivity per %s (%s %s)</text>\n", lmp_an_mode_name(a->o.mode), lmp_an_gran_name(a->o.gran),
                lmp_an_metric_name(a->o.metric),
                a->o.mode == LMP_AN_RESTORE_ONE ? "gained by restoring" : "lost by quantizing");
    /* y axis with 5 ticks */
    for (int t = 0; t <= 4; t++) {
        double v = lo + span * t / 4, y = y0 - plot_h * v / span;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", left, left + plot_w, y, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", left - 6, y + 4, v);
    }
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, left + plot_w, y0, y0);
    double x = left;
    int group_start = 0;
    double group_x = left;
    for (int u = 0; u < a->n_units; u++) {
        const lmp_an_unit *un = &a->units[u];
        if (u && un->block != a->units[u - 1].block) x += gap;
        if (u == 0 || un->block != a->units[u - 1].block) group_start = u, group_x = x;
        double g = isfinite(bar_value(a, un)) ? bar_value(a, un) : 0, h = plot_h * fabs(g) / span;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\"><title>", x,
                g >= 0 ? y0 - h : y0, bar - (bar > 4 ? 1 : 0.5), h, lmp_svg_role_colour(un->role));
        lmp_xml_text(f, un->name);
        fprintf(f, ": rank %d, gain %.5g, proxy %.4g</title></rect>\n", un->rank, un->gain, un->proxy);
        x += bar;
        int last = u + 1 == a->n_units || a->units[u + 1].block != un->block;
        if (last && un->block >= 0) /* the block's label under its group */
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%d</text>\n",
                    (group_x + x) / 2, top + plot_h + 14, un->block);
        (void)group_start;
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", left + plot_w / 2, top + plot_h + 34,
            a->o.gran == LMP_AN_ROLE ? "role" : "block");
    fprintf(f, "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">%s%s</text>\n",
            top + plot_h / 2, a->o.rank_proxy ? "proxy" : lmp_an_metric_name(a->o.metric), a->o.rank_proxy ? "" : " gain");
    for (int r = 0; r < LMP_ROLE_COUNT; r++) {
        double ly = top + 10 + r * 20, lx = left + plot_w + 20;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx, ly, lmp_svg_role_colour(lmp_role_name(r)));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 18, ly + 10, lmp_role_name(r));
    }
    if (a->o.rank_proxy)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">ranked by the proxy: no evaluation "
                   "per unit</text>\n", left, Hh - 12);
    else
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">Spearman rho (proxy vs measured) = %.3f; "
                   "ranking: %lld block-forwards, %.1f %% of one full evaluation per unit</text>\n",
                left, Hh - 12, a->spearman, (long long)a->rank_forwards,
                a->rank_naive_forwards ? 100.0 * (double)a->rank_forwards / (double)a->rank_naive_forwards : NAN);
    fputs("</svg>\n", f);
}

void lmp_analysis_svg(const lmp_analysis *a, FILE *f) { analysis_svg(a, f, 1); }

void lmp_analysis_svg_inline(const lmp_analysis *a, FILE *f) { analysis_svg(a, f, 0); }

/* ---- the ready config ------------------------------------------------------------------------- */

char *lmp_analysis_override(const lmp_analysis *a, const int *units, int k, int s)
{
    const int64_t n_total = a->n_layers * a->n_lin;
    uint8_t *sel = calloc((size_t)n_total + 1, 1);
    char *pattern = NULL, *out = NULL;
    size_t out_len = 0;
    int n = 0;
    for (int u = 0; sel && u < k; u++)
        for (int j = 0; j < a->units[units[u]].n_lins; j++) {
            int g = a->units[units[u]].lins[j];
            if (a->stage_mask[g] >> s & 1u) sel[g] = 1, n++;
        }
    /* the shortest pattern that selects these linears and no other (name_pattern.h) */
    if (n) pattern = lmp_name_pattern(a->lin_names, a->n_layers, a->n_lin, sel);
    free(sel);
    FILE *o = pattern ? open_memstream(&out, &out_len) : NULL;
    if (o) {
        fputs("{ match = ", o);
        lmp_config_write_string(o, pattern);
        if (a->o.keep_params) fprintf(o, "; params = { %s }; }", a->o.keep_params);
        else fputs("; skip = true; }", o);
        fclose(o);
    }
    free(pattern);
    return out;
}

void lmp_analysis_config(const lmp_analysis *a, FILE *f)
{
    char name[256];
    snprintf(name, sizeof name, "%s-%s%d", a->v->name, a->o.keep_params ? "keep" : "skip", a->skip.k);
    const lmp_an_metric tm = a->o.have_target ? a->o.target_metric : a->o.metric;
    char comment[2048], numbers[1024] = "";
    if (a->have_written)
        snprintf(numbers, sizeof numbers,
                 "\ncompare gives %s %s %.6g.  analyze measured %.6g with every other linear as the variant\n"
                 "compressed it; the variant calibrates on compressed inputs, so compare re-compresses and each block\n"
                 "after a skipped linear calibrates on its float output.  A variant with calibration = { inputs =\n"
                 "\"original\"; } gives a config whose numbers are analyze's.",
                 name, lmp_an_metric_name(tm), a->written_value, a->skip.value);
    else if (a->config_checked)
        snprintf(numbers, sizeof numbers, "\ncompare gives %s analyze's numbers (%s %.6g).", name, lmp_an_metric_name(tm),
                 a->skip.value);
    snprintf(comment, sizeof comment,
             "Written by lmpress analyze (%s, per %s, ranked by %s, metric %s): the unmodified model, variant '%s',\n"
             "and the same with its %d most sensitive unit%s %s.%s\nRun it with: lmpress compare THIS_FILE",
             lmp_an_mode_name(a->o.mode), lmp_an_gran_name(a->o.gran), a->o.rank_proxy ? "the proxy" : "measurement",
             lmp_an_metric_name(a->o.metric), a->v->name, a->skip.k, a->skip.k == 1 ? "" : "s",
             a->o.keep_params ? "kept at the --keep-params" : "left in float", numbers);
    lmp_config_write_head(f, a->c, comment);
    fputs("variants = (\n", f);
    /* the unmodified model first, as the config has it (its name), so the table has its row */
    const lmp_variant *unmodified = NULL;
    for (int i = 0; i < a->c->n_variants && !unmodified; i++)
        if (!a->c->variants[i].n_stages && !a->c->variants[i].model_path) unmodified = &a->c->variants[i];
    if (unmodified) lmp_config_write_variant(f, a->c, unmodified, NULL, NULL);
    else {
        /* a name none of the written variants has */
        const char *base = strcmp(a->v->name, "unmodified") && strcmp(name, "unmodified") ? "unmodified" : "unmodified-model";
        fputs("  { name = ", f);
        lmp_config_write_string(f, base);
        fputs("; }", f);
    }
    fputs(",\n", f);
    lmp_config_write_variant(f, a->c, a->v, NULL, NULL);
    fputs(",\n", f);
    char **extra = calloc((size_t)a->v->n_stages + 1, sizeof *extra);
    for (int s = 0; extra && s < a->v->n_stages; s++) extra[s] = lmp_analysis_override(a, a->skip_list, a->skip.k, s);
    lmp_config_write_variant(f, a->c, a->v, name, (const char *const *)extra);
    fputs("\n);\n", f);
    for (int s = 0; extra && s < a->v->n_stages; s++) free(extra[s]);
    free(extra);
}
