/* analyze_html.c — `lmpress analyze --html FILE`: the analysis as one self-contained page
 * (report/html_page.h): the variant's and the float model's numbers, the bar chart of
 * lmp_analysis_svg inline, a heat map of the sensitivity per block and role (per-linear
 * analyses), the skip curves, and the ranked units as a sortable table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze.h"
#include "report/html_page.h"
#include "report/svg.h"
#include "model/tensor_names.h"

enum { N_ROLES = LMP_ROLE_COUNT };

/* Sensitivity per block (rows) and role (columns), colour on the range of the gains; a cell with
 * no unit (a linear the variant does not compress) is grey. */
static void gain_map(const lmp_analysis *a, FILE *f)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int u = 0; u < a->n_units; u++)
        if (isfinite(a->units[u].gain)) lo = fmin(lo, a->units[u].gain), hi = fmax(hi, a->units[u].gain);
    if (!isfinite(lo)) lo = 0, hi = 1;
    const double cw = 46, ch = a->n_layers > 40 ? 10 : 16, left = 60, top = 30;
    const double W = left + N_ROLES * cw + 260, H = top + (double)a->n_layers * ch + 60;
    fprintf(f, "<svg id=\"gain-map\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    for (int r = 0; r < N_ROLES; r++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", left + r * cw + cw / 2, top - 8, lmp_role_name(r));
    for (int64_t b = 0; b < a->n_layers; b++)
        if (ch >= 14 || b % 5 == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%lld</text>\n", left - 6,
                    top + (double)b * ch + ch - 4, (long long)b);
    fprintf(f, "<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\">block</text>\n",
            top + (double)a->n_layers * ch / 2);
    for (int64_t b = 0; b < a->n_layers; b++)
        for (int r = 0; r < N_ROLES; r++)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#dddddd\"/>", left + r * cw,
                    top + (double)b * ch, cw - 1, ch - 1);
    fputc('\n', f);
    for (int u = 0; u < a->n_units; u++) {
        const lmp_an_unit *un = &a->units[u];
        const int r = lmp_role_by_name(un->role);
        if (r < 0 || un->block < 0) continue;
        char colour[8];
        lmp_svg_scale_colour(hi > lo && isfinite(un->gain) ? (un->gain - lo) / (hi - lo) : 0, colour);
        fprintf(f, "<rect class=\"unit\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>", left + r * cw,
                top + un->block * ch, cw - 1, ch - 1, colour);
        lmp_xml_text(f, un->name);
        fprintf(f, ": rank %d, gain %.5g, proxy %.4g</title></rect>\n", un->rank, un->gain, un->proxy);
    }
    const double ly = top + (double)a->n_layers * ch + 16, lw = 240;
    fputs("<defs><linearGradient id=\"gain-map-scale\">", f);
    for (int k = 0; k <= 8; k++) {
        char c[8];
        lmp_svg_scale_colour(k / 8.0, c);
        fprintf(f, "<stop offset=\"%.3f\" stop-color=\"%s\"/>", k / 8.0, c);
    }
    fprintf(f, "</linearGradient></defs>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"12\" "
               "fill=\"url(#gain-map-scale)\"/>\n", left, ly, lw);
    for (int k = 0; k <= 2; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g</text>\n", left + lw * k / 2, ly + 26,
                lo + (hi - lo) * k / 2);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s gain; grey: not compressed</text>\n</svg>\n", left + lw + 10, ly + 10,
            lmp_an_metric_name(a->o.metric));
}

/* The metric against the number of units skipped, one line per order (measured, proxy, random
 * orders in grey). */
static void curve_chart(const lmp_analysis *a, FILE *f)
{
    double kmax = 1, lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < a->n_curve; i++) {
        kmax = fmax(kmax, a->curve[i].k);
        if (isfinite(a->curve[i].value)) lo = fmin(lo, a->curve[i].value), hi = fmax(hi, a->curve[i].value);
    }
    if (!isfinite(lo)) lo = 0, hi = 1;
    if (hi <= lo) hi = lo + fmax(fabs(lo) * 0.1, 1e-9);
    const double W = 760, H = 380, left = 80, right = 160, top = 20, bottom = 50, pw = W - left - right,
                 ph = H - top - bottom;
#define CX(k) (left + pw * (k) / kmax)
#define CY(v) (top + ph - ph * ((v) - lo) / (hi - lo))
    fprintf(f, "<svg id=\"curves\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    double ticks[16];
    int nt = lmp_svg_ticks(lo, hi, 6, ticks);
    for (int k = 0; k < nt; k++)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"end\">%g</text>\n", left, left + pw, CY(ticks[k]), CY(ticks[k]), left - 6,
                CY(ticks[k]) + 4, ticks[k]);
    nt = lmp_svg_ticks(0, kmax, 8, ticks);
    for (int k = 0; k < nt; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", CX(ticks[k]), top + ph + 16, ticks[k]);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", left, top, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">units skipped</text>\n", left + pw / 2, H - 12);
    fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", top + ph / 2,
            lmp_an_metric_name(a->o.metric));
    int legend = 0;
    for (int i = 0; i < a->n_curve;) {
        int j = i;
        while (j < a->n_curve && strcmp(a->curve[j].order, a->curve[i].order) == 0) j++;
        const char *name = a->curve[i].order;
        const int random = strncmp(name, "random", 6) == 0;
        const char *colour = strcmp(name, "measured") == 0 ? LMP_SVG_BLUE : strcmp(name, "proxy") == 0 ? LMP_SVG_ORANGE
                                                                                                       : "#aaaaaa";
        fputs("<polyline class=\"curve\" data-order=\"", f); /* read back from a file: escaped */
        lmp_xml_text(f, name);
        fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"", colour, random ? "1" : "2");
        for (int k = i; k < j; k++)
            if (isfinite(a->curve[k].value)) fprintf(f, "%s%.1f,%.1f", k > i ? " " : "", CX(a->curve[k].k), CY(a->curve[k].value));
        fputs("\"/>\n", f);
        if (!random || strcmp(name, "random-1") == 0) {
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\">", left + pw + 16, left + pw + 34, top + 12 + 20.0 * legend,
                    top + 12 + 20.0 * legend, colour, left + pw + 40, top + 16 + 20.0 * legend);
            lmp_xml_text(f, random ? "random orders" : name);
            fputs("</text>\n", f);
            legend++;
        }
        i = j;
    }
    fputs("</svg>\n", f);
#undef CX
#undef CY
}

static void result_line(const char *label, const lmp_analysis *a, const lmp_bcache_result *r, FILE *f)
{
    fprintf(f, "%s: ppl %.4f, kld %.5f, top1 %.2f %%", label, lmp_score_ppl(&r->score), lmp_score_kld(&r->score),
            100 * lmp_score_top1(&r->score));
    if (a->c->lambada) fprintf(f, ", lambada %.2f %%", 100 * lmp_lambada_acc(&r->lambada));
    fputs("<br>\n", f);
}

void lmp_analysis_charts_html(const lmp_analysis *a, FILE *f)
{
    fputs("<h2>Sensitivity per unit: ", f);
    lmp_xml_text(f, a->v->name);
    fputs("</h2>\n<p class=\"note\">A bar per unit in model order, coloured by role; hover a bar for its name "
          "and numbers.</p>\n", f);
    lmp_analysis_svg_inline(a, f);
    if (a->o.gran == LMP_AN_LINEAR) {
        fputs("<h2>Sensitivity per block and role: ", f);
        lmp_xml_text(f, a->v->name);
        fputs("</h2>\n", f);
        gain_map(a, f);
    }
    if (a->n_curve) {
        fputs("<h2>Skip curves: ", f);
        lmp_xml_text(f, a->v->name);
        fputs("</h2>\n<p class=\"note\">The metric with the first K units left in float (or at --keep-params), in "
              "measured order, proxy order and random orders.</p>\n", f);
        curve_chart(a, f);
    }
}

void lmp_analysis_html(const lmp_analysis *a, FILE *f)
{
    char title[600];
    snprintf(title, sizeof title, "lmpress analyze: %s", a->v->name);
    lmp_html_begin(f, title);
    fputs("<h1>lmpress analyze: ", f);
    lmp_xml_text(f, a->v->name);
    fputs("</h1>\n<p class=\"meta\">config ", f);
    lmp_xml_text(f, a->c->path);
    fprintf(f, "; %s per %s, metric %s (%s is better), %d units; lmpress %s<br>\n", lmp_an_mode_name(a->o.mode),
            lmp_an_gran_name(a->o.gran), lmp_an_metric_name(a->o.metric),
            lmp_an_lower_better(a->o.metric) ? "lower" : "higher", a->n_units, LMP_VERSION);
    result_line("variant", a, &a->variant_res, f);
    result_line("float (every compressed linear restored)", a, &a->float_res, f);
    fprintf(f, "proxy vs measured: Spearman rho = %.3f</p>\n", a->spearman);

    lmp_analysis_charts_html(a, f);
    fputs("<h2>Units</h2>\n<table id=\"units\" class=\"sortable\">\n<thead><tr>", f);
    lmp_html_th(f, "unit", "unit", 0);
    lmp_html_th(f, "rank", "rank", 1);
    lmp_html_th(f, "role", "role", 0);
    lmp_html_th(f, "block", "block", 1);
    lmp_html_th(f, "value", a->o.mode == LMP_AN_RESTORE_ONE ? "restored" : "quantized", 1);
    lmp_html_th(f, "gain", "gain", 1);
    lmp_html_th(f, "proxy", "proxy", 1);
    lmp_html_th(f, "proxy_rank", "proxy rank", 1);
    fputs("</tr></thead>\n<tbody>\n", f);
    for (int k = 0; k < a->n_units; k++) {
        const lmp_an_unit *u = &a->units[a->order[k]];
        fputs("<tr><td>", f);
        lmp_xml_text(f, u->name);
        fputs("</td>", f);
        lmp_html_num_cell(f, u->rank, "%.0f");
        fputs("<td class=\"t\">", f);
        lmp_xml_text(f, u->role);
        fputs("</td>", f);
        if (u->block >= 0) lmp_html_num_cell(f, u->block, "%.0f");
        else fputs("<td data-value=\"\">all</td>", f);
        lmp_html_num_cell(f, u->value, "%.6g");
        lmp_html_num_cell(f, u->gain, "%.5g");
        lmp_html_num_cell(f, u->proxy, "%.4g");
        lmp_html_num_cell(f, u->proxy_rank, "%.0f");
        fputs("</tr>\n", f);
    }
    fputs("</tbody>\n</table>\n", f);
    lmp_html_end(f);
}
