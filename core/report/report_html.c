/* report_html.c — the comparison as one self-contained HTML page (compare --html FILE).
 *
 * The page holds, inline and with nothing fetched from anywhere (html_page.h):
 *   - the table of finished variants, sortable by any column;
 *   - bits per weight against KL divergence, one point per variant, the Pareto front (the
 *     variants no other beats on both) joined by a line, external files (another tool's
 *     quantization, `model = "x.gguf"`) in another colour than lmpress's pipelines;
 *   - two heat maps, a row per variant and a column per block linear: its storage bits, and its
 *     relative weight error against the unmodified model (lmp_linear_outcome.weight_err);
 *   - whatever the caller appends before the page ends (compare --analysis: analyze's charts).
 * Every string that comes from a config or a model file (variant names, paths, linear names) goes
 * through lmp_xml_text.  Like the other writers it writes only finished variants, so the page
 * rewritten after each variant is always complete. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/html_page.h"
#include "report/report.h"
#include "report/svg.h"

/* ---- per variant ------------------------------------------------------------------------------ */

typedef enum { KIND_PIPELINE = 0, KIND_EXTERNAL = 1, KIND_UNMODIFIED = 2 } variant_kind;

static variant_kind kind_of(const lmp_variant *v)
{
    return v->model_path ? KIND_EXTERNAL : v->n_stages ? KIND_PIPELINE : KIND_UNMODIFIED;
}

static const char *const kind_names[] = {"pipeline", "external", "unmodified"};
static const char *const kind_colours[] = {LMP_SVG_BLUE, LMP_SVG_VERMILLION, LMP_SVG_GREY};

/* KL divergence over every evaluation text together: the texts' sums over their scored tokens
 * (one text: that text's KLD). */
static double pooled_kld(const lmp_report *r, const lmp_variant_result *res)
{
    double sum = 0;
    int64_t n = 0;
    for (int t = 0; t < r->n_texts; t++) sum += res->scores[t].kld_sum, n += res->scores[t].scored;
    return n ? sum / (double)n : NAN;
}

static double base_ppl(const lmp_report *r, int t)
{
    for (int i = 0; i < r->n_results; i++)
        if (r->results[i].done && r->results[i].v->n_stages == 0 && !r->results[i].v->model_path)
            return lmp_score_ppl(&r->results[i].scores[t]);
    return NAN;
}

/* A number of a resumed variant's earlier entry (NaN when it has none). */
static double prior_number(const lmp_json *j, const char *key)
{
    const lmp_json *x = j ? lmp_json_get(j, key) : NULL;
    return x && x->type == LMP_JSON_NUMBER ? x->number : NAN;
}

/* Linear g of a finished variant: its bits and error, from this run's outcomes or, for a
 * variant taken from --resume, from its earlier entry (NaN where that has none). */
static void linear_at(const lmp_variant_result *res, int g, double *bits, double *err)
{
    *bits = *err = NAN;
    if (res->linears) {
        if (g < res->n_linears) *bits = res->linears[g].weight_bits, *err = res->linears[g].weight_err;
        return;
    }
    const lmp_json *lins = res->prior ? lmp_json_get(res->prior, "linears") : NULL;
    if (!lins || lins->type != LMP_JSON_ARRAY || (size_t)g >= lins->n) return;
    *bits = prior_number(&lins->items[g], "weight_bits");
    *err = prior_number(&lins->items[g], "weight_err");
}

/* ---- the table -------------------------------------------------------------------------------- */

static void html_table(const lmp_report *r, const uint8_t *front, FILE *f)
{
    fputs("<table id=\"variants\" class=\"sortable\">\n<thead><tr>", f);
    lmp_html_th(f, "variant", "variant", 0);
    lmp_html_th(f, "kind", "kind", 0);
    lmp_html_th(f, "bpw", "bits/w", 1);
    char key[4200], label[4200];
    for (int t = 0; t < r->n_texts; t++) {
        static const char *const cols[][2] = {{"ppl", "ppl"}, {"ppl_ratio", "ppl ratio"}, {"kld", "kld"},
                                              {"top1", "top1 %"}};
        for (int k = 0; k < 4; k++) {
            /* several texts: the text's key before each of its columns, as the other tables do */
            snprintf(key, sizeof key, "%s%s%s", r->n_texts > 1 ? r->texts[t].key : "", r->n_texts > 1 ? ":" : "",
                     cols[k][0]);
            snprintf(label, sizeof label, "%s%s%s", r->n_texts > 1 ? r->texts[t].key : "", r->n_texts > 1 ? " " : "",
                     cols[k][1]);
            lmp_html_th(f, key, label, 1);
        }
    }
    if (r->cfg->lambada) lmp_html_th(f, "lambada", "lambada %", 1);
    lmp_html_th(f, "seconds", "compress s", 1);
    lmp_html_th(f, "eval_seconds", "eval s", 1);
    lmp_html_th(f, "peak_mb", "peak MB", 1);
    fputs("</tr></thead>\n<tbody>\n", f);
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant_result *res = &r->results[i];
        if (!res->done) continue;
        const variant_kind kind = kind_of(res->v);
        fprintf(f, "<tr class=\"%s%s\" data-variant=\"", kind_names[kind], front[i] ? " front" : "");
        lmp_xml_text(f, res->v->name);
        fputs("\"><td>", f);
        lmp_xml_text(f, res->v->name);
        fprintf(f, "</td><td class=\"t\">%s", kind_names[kind]);
        const lmp_json *prior_format = res->prior ? lmp_json_get(res->prior, "format") : NULL;
        const char *format = prior_format && prior_format->type == LMP_JSON_STRING ? prior_format->str : res->format;
        if (kind == KIND_EXTERNAL && format[0]) { /* the file's format: "GGUF v3 Q8_0/F32 mix" */
            fputs(" (", f);
            lmp_xml_text(f, format);
            fputc(')', f);
        }
        fputs("</td>", f);
        lmp_html_num_cell(f, res->bits_per_weight, "%.2f");
        for (int t = 0; t < r->n_texts; t++) {
            const lmp_score *s = &res->scores[t];
            lmp_html_num_cell(f, lmp_score_ppl(s), "%.4f");
            lmp_html_num_cell(f, lmp_score_ppl(s) / base_ppl(r, t), "%.4f");
            lmp_html_num_cell(f, lmp_score_kld(s), "%.5f");
            lmp_html_num_cell(f, 100.0 * lmp_score_top1(s), "%.2f");
        }
        if (r->cfg->lambada) {
            const double acc = 100.0 * lmp_lambada_acc(&res->lambada), err = 100.0 * lmp_lambada_stderr(&res->lambada);
            fprintf(f, "<td data-value=\"%.17g\">%.2f &#177; %.2f</td>", acc, acc, err);
        }
        lmp_html_num_cell(f, res->seconds, "%.2f");
        lmp_html_num_cell(f, res->prior ? prior_number(res->prior, "eval_seconds") : res->eval_seconds, "%.2f");
        lmp_html_num_cell(f, res->peak_rss_mb, "%.1f");
        fputs("</tr>\n", f);
    }
    fputs("</tbody>\n</table>\n", f);
}

/* ---- the bits/weight vs KLD chart --------------------------------------------------------------- */

typedef struct chart_point {
    int i;                     /* index into r->results */
    double bpw, kld;
} chart_point;

static int by_bpw_then_kld(const void *a, const void *b)
{
    const chart_point *x = a, *y = b;
    if (x->bpw != y->bpw) return x->bpw < y->bpw ? -1 : 1;
    if (x->kld != y->kld) return x->kld < y->kld ? -1 : 1;
    return x->i - y->i;
}

/* front[i] = 1 for the finished variants no other has both fewer (or as few) bits and a lower
 * KLD: in order of bits, each one whose KLD is below every KLD before it. */
static int pareto_front(const lmp_report *r, chart_point *pts, uint8_t *front)
{
    int n = 0;
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant_result *res = &r->results[i];
        if (!res->done) continue;
        const double k = pooled_kld(r, res);
        if (isfinite(res->bits_per_weight) && isfinite(k)) pts[n++] = (chart_point){i, res->bits_per_weight, k};
    }
    qsort(pts, (size_t)n, sizeof *pts, by_bpw_then_kld);
    double best = INFINITY;
    for (int k = 0; k < n; k++)
        if (pts[k].kld < best) best = pts[k].kld, front[pts[k].i] = 1;
    return n;
}

/* An axis: linear, or logarithmic (base 2 for bits, 10 for KLD) where the values span enough
 * that a linear one would crowd them into a corner.  Zero on a log axis has its own band. */
typedef struct axis {
    int log;
    double lo, hi;             /* in axis units (log2 / log10 of the value when log) */
    double base;
} axis;

static double axis_unit(const axis *a, double v) { return a->log ? log(v) / log(a->base) : v; }

static void axis_fit(axis *a, double lo, double hi, double base, double log_ratio)
{
    a->base = base;
    a->log = lo > 0 && hi / lo >= log_ratio;
    if (a->log) {
        a->lo = log(lo) / log(base);
        a->hi = log(hi) / log(base);
        const double pad = fmax(0.05 * (a->hi - a->lo), 0.1);
        a->lo -= pad, a->hi += pad;
    } else {
        const double pad = hi > lo ? 0.06 * (hi - lo) : fmax(fabs(hi) * 0.1, 1e-6);
        a->lo = lo > 0 && lo - pad < 0 ? 0 : lo - pad;
        a->hi = hi + pad;
    }
}

/* Tick values of an axis (in value units). */
static int axis_ticks(const axis *a, double *ticks, int max)
{
    if (!a->log) return lmp_svg_ticks(a->lo, a->hi, 7, ticks);
    int n = 0;
    if (a->base == 2) { /* bits: the widths people quantize to */
        static const double nice[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64};
        for (size_t k = 0; k < sizeof nice / sizeof *nice && n < max; k++) {
            double u = log2(nice[k]);
            if (u >= a->lo && u <= a->hi) ticks[n++] = nice[k];
        }
        return n;
    }
    const double decades = a->hi - a->lo;
    for (int e = (int)floor(a->lo); e <= (int)ceil(a->hi) && n < max; e++)
        for (int m = 1; m <= 5 && n < max; m += m == 1 ? 1 : 3) { /* 1, 2, 5 (1 only over many decades) */
            if (m > 1 && decades > 4) break;
            double v = m * pow(10, e), u = log10(v);
            if (u >= a->lo && u <= a->hi) ticks[n++] = v;
        }
    return n;
}

/* Where a point's name goes: right of it, or above, below, left, whichever first overlaps no name
 * placed before (placed[n_placed] their boxes, x y w h); the first try when all overlap. */
static void place_label(double x, double y, const char *name, double (*placed)[4], int *n_placed, double *lx,
                        double *ly, const char **anchor)
{
    const double w = 6.2 * (double)strlen(name), h = 12;
    const double tries[][3] = {{x + 8, y - 6, 0}, {x + 8, y + 14, 0}, {x - 8, y - 6, 1}, {x - 8, y + 14, 1},
                               {x + 8, y - 18, 0}, {x + 8, y + 26, 0}};
    int pick = 0;
    for (int t = 0; t < 6; t++) {
        const double left = tries[t][2] ? tries[t][0] - w : tries[t][0], top = tries[t][1] - h + 2;
        int clash = 0;
        for (int k = 0; k < *n_placed && !clash; k++)
            clash = left < placed[k][0] + placed[k][2] && placed[k][0] < left + w && top < placed[k][1] + placed[k][3] &&
                    placed[k][1] < top + h;
        if (!clash) {
            pick = t;
            break;
        }
    }
    *lx = tries[pick][0], *ly = tries[pick][1], *anchor = tries[pick][2] ? "end" : "start";
    const double left = tries[pick][2] ? *lx - w : *lx;
    placed[*n_placed][0] = left, placed[*n_placed][1] = *ly - h + 2, placed[*n_placed][2] = w, placed[*n_placed][3] = h;
    (*n_placed)++;
}

static void html_chart(const lmp_report *r, const chart_point *pts, int n, const uint8_t *front, FILE *f)
{
    const double W = 900, H = 520, left = 80, right = 230, top = 24, bottom = 60, zero_band = 34;
    const double pw = W - left - right;
    double bmin = INFINITY, bmax = -INFINITY, kmin = INFINITY, kmax = -INFINITY;
    int zeros = 0;
    for (int k = 0; k < n; k++) {
        bmin = fmin(bmin, pts[k].bpw), bmax = fmax(bmax, pts[k].bpw);
        if (pts[k].kld > 0) kmin = fmin(kmin, pts[k].kld), kmax = fmax(kmax, pts[k].kld);
        else zeros++;
    }
    if (!n) bmin = 1, bmax = 32;
    if (!isfinite(kmin)) kmin = 1e-4, kmax = 1e-1;
    axis ax, ay;
    axis_fit(&ax, bmin, bmax, 2, 3);
    axis_fit(&ay, kmin, kmax, 10, 20);
    if (!ay.log) ay.lo = 0, zeros = 0; /* zero is on a linear axis */
    const double ph = H - top - bottom - (zeros ? zero_band : 0);
    const double y_zero = top + ph + zero_band / 2; /* a log axis: KLD 0 on its own band below */
#define PX(v) (left + pw * (axis_unit(&ax, (v)) - ax.lo) / (ax.hi - ax.lo))
#define PY(v) ((v) <= 0 && ay.log ? y_zero : top + ph - ph * (axis_unit(&ay, (v)) - ay.lo) / (ay.hi - ay.lo))
    fprintf(f, "<svg id=\"pareto\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\" role=\"img\" aria-label=\"bits per weight against KL divergence\">\n",
            W, H, W, H);
    fputs("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    double ticks[32];
    int nt = axis_ticks(&ax, ticks, 32);
    for (int k = 0; k < nt; k++) {
        double x = PX(ticks[k]);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                x, x, top, H - bottom, x, H - bottom + 16, ticks[k]);
    }
    nt = axis_ticks(&ay, ticks, 32);
    for (int k = 0; k < nt; k++) {
        if (ay.log && ticks[k] <= 0) continue;
        double y = PY(ticks[k]);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                left, left + pw, y, y, left - 6, y + 4, ticks[k]);
    }
    if (zeros) {
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\" stroke-dasharray=\"4 3\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n",
                left, left + pw, top + ph, top + ph, left - 6, y_zero + 4);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", left, top, pw,
            H - top - bottom);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">bits per weight (block linears%s)</text>\n",
            left + pw / 2, H - 18, ax.log ? ", log scale" : "");
    fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">KL divergence to the "
               "unmodified model%s%s</text>\n",
            top + ph / 2, r->n_texts > 1 ? ", all texts" : "", ay.log ? " (log scale)" : "");
    double(*placed)[4] = calloc((size_t)n + 1, sizeof *placed); /* the names' boxes so far */
    int n_placed = 0;
    if (!placed) n = 0; /* out of memory: the axes without points, rather than no page */
    /* the front, in order of bits */
    fputs("<polyline id=\"front\" fill=\"none\" stroke=\"#222\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\" points=\"", f);
    for (int k = 0, m = 0; k < n; k++)
        if (front[pts[k].i]) fprintf(f, "%s%.1f,%.1f", m++ ? " " : "", PX(pts[k].bpw), PY(pts[k].kld));
    fputs("\"/>\n", f);
    for (int k = 0; k < n; k++) {
        const lmp_variant_result *res = &r->results[pts[k].i];
        const variant_kind kind = kind_of(res->v);
        const double x = PX(pts[k].bpw), y = PY(pts[k].kld);
        fputs("<g class=\"variant\"><circle class=\"point\" data-variant=\"", f);
        lmp_xml_text(f, res->v->name);
        fprintf(f, "\" data-kind=\"%s\" data-bpw=\"%.17g\" data-kld=\"%.17g\" data-pareto=\"%d\" cx=\"%.1f\" cy=\"%.1f\" "
                   "r=\"%d\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%s\"><title>",
                kind_names[kind], pts[k].bpw, pts[k].kld, front[pts[k].i], x, y, front[pts[k].i] ? 6 : 5,
                kind_colours[kind], front[pts[k].i] ? "#000" : "white", front[pts[k].i] ? "2" : "1");
        lmp_xml_text(f, res->v->name);
        fprintf(f, ": %.3f bits/w, KLD %.5g%s</title></circle>", pts[k].bpw, pts[k].kld,
                front[pts[k].i] ? " (on the Pareto front)" : "");
        double lx, ly;
        const char *anchor;
        place_label(x, y, res->v->name, placed, &n_placed, &lx, &ly, &anchor);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"11\" fill=\"#333\">", lx, ly, anchor);
        lmp_xml_text(f, res->v->name);
        fputs("</text></g>\n", f);
    }
    /* legend */
    const double lx = left + pw + 20;
    const char *labels[] = {"lmpress pipeline", "external file", "unmodified model"};
    int present[3] = {0, 0, 0}, row = 0; /* the legend names the kinds the chart has */
    for (int k = 0; k < n; k++) present[kind_of(r->results[pts[k].i].v)] = 1;
    for (int k = 0; k < 3; k++) {
        if (!present[k]) continue;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                lx + 6, top + 14 + 20.0 * row, kind_colours[k], lx + 18, top + 18 + 20.0 * row, labels[k]);
        row++;
    }
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"6 3\"/><text x=\"%.1f\" y=\"%.1f\">Pareto front</text>\n",
            lx, lx + 14, top + 14 + 20.0 * row, top + 14 + 20.0 * row, lx + 18, top + 18 + 20.0 * row);
    row++;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"white\" stroke=\"#000\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">on the front</text>\n", lx + 6, top + 14 + 20.0 * row, lx + 18,
            top + 18 + 20.0 * row);
    fputs("</svg>\n", f);
    free(placed);
#undef PX
#undef PY
}

/* ---- per-linear heat maps --------------------------------------------------------------------- */

typedef enum { MAP_BITS = 0, MAP_ERROR = 1 } map_kind;

/* One heat map: a row per finished variant, a column per block linear in model order, blocks
 * apart by a gap; colour on a log scale (bits: base 2, error: base 10). */
static void html_heat_map(const lmp_report *r, map_kind what, FILE *f)
{
    /* blocks may differ in their linears (dense first layers, then experts): column g is linear
     * col_i[g] of block col_b[g], drawn at col_x[g] */
    const int n_cols = (int)lmp_blocks_linear_count(r->shape, r->n_shape);
    int64_t *col_b = malloc(((size_t)n_cols + 1) * sizeof *col_b);
    int *col_i = malloc(((size_t)n_cols + 1) * sizeof *col_i);
    if (!col_b || !col_i) {
        free(col_b);
        free(col_i);
        fputs("<p class=\"note\">Out of memory for the heat map.</p>\n", f);
        return;
    }
    for (int g = 0; g < n_cols; g++) lmp_blocks_linear_at(r->shape, r->n_shape, g, &col_b[g], &col_i[g]);
    const int n_lin = r->n_shape ? (int)(n_cols / r->n_shape) : 0; /* the mean, for the labels' spacing */
    int n_rows = 0;
    size_t longest = 8;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant_result *res = &r->results[i];
        if (!res->done) continue;
        n_rows++;
        if (strlen(res->v->name) > longest) longest = strlen(res->v->name);
        for (int g = 0; g < n_cols; g++) {
            double bits, err;
            linear_at(res, g, &bits, &err);
            double v = what == MAP_BITS ? bits : err;
            if (isfinite(v) && v > 0) lo = fmin(lo, v), hi = fmax(hi, v);
        }
    }
    if (!n_rows || !n_cols) {
        fputs("<p class=\"note\">No per-linear record (the variants were taken from a report without one).</p>\n", f);
        free(col_b);
        free(col_i);
        return;
    }
    if (!isfinite(lo)) lo = hi = what == MAP_BITS ? 32 : 1;
    const double base = what == MAP_BITS ? 2 : 10;
    const double llo = log(lo) / log(base), lhi = log(hi) / log(base);
    const double cw = n_cols > 300 ? 3 : n_cols > 150 ? 4 : n_cols > 60 ? 8 : 14, ch = 16, gap = cw >= 8 ? 3 : 2;
    const double left = 12 + 7.0 * (double)(longest > 40 ? 40 : longest), top = 34, legend_h = 54;
    const double mw = n_cols * cw + (double)(r->n_shape - 1) * gap;
    const double W = fmax(left + mw + 20, left + 320 + 7.0 * 70), H = top + n_rows * ch + legend_h; /* legend's text */
    const char *id = what == MAP_BITS ? "bits-map" : "error-map";
    fprintf(f, "<svg id=\"%s\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            id, W, H, W, H);
    /* block numbers above their groups (every block while they fit, else every fifth) */
    const int every = n_lin * cw >= 18 ? 1 : 5;
    for (int64_t b = 0, first = 0; b < r->n_shape; first += r->shape[b].n_linears, b++)
        if (b % every == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%lld</text>\n",
                    left + (double)b * gap + (double)first * cw + r->shape[b].n_linears * cw / 2, top - 8, (long long)b);
    fprintf(f, "<text x=\"%.1f\" y=\"12\" fill=\"#555\">block</text>\n", left);
    int row = 0;
    for (int i = 0; i < r->n_results; i++) {
        const lmp_variant_result *res = &r->results[i];
        if (!res->done) continue;
        const double y = top + row++ * ch;
        fprintf(f, "<g class=\"map-row\" data-variant=\"");
        lmp_xml_text(f, res->v->name);
        fprintf(f, "\"><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\"%s>", left - 6, y + ch - 4,
                kind_of(res->v) == KIND_EXTERNAL ? " fill=\"" LMP_SVG_VERMILLION "\"" : "");
        lmp_xml_text(f, res->v->name);
        fputs("</text>\n", f);
        for (int g = 0; g < n_cols; g++) {
            double bits, err;
            linear_at(res, g, &bits, &err);
            const double v = what == MAP_BITS ? bits : err;
            const double x = left + (double)col_b[g] * gap + (double)g * cw;
            char colour[8] = "#dddddd"; /* no number: not comparable, or not recorded */
            if (isfinite(v) && v > 0)
                lmp_svg_scale_colour(lhi > llo ? (log(v) / log(base) - llo) / (lhi - llo) : 1, colour);
            else if (v == 0) snprintf(colour, sizeof colour, "#ffffff"); /* error 0: untouched */
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>", x, y,
                    cw - (cw > 4 ? 1 : 0.5), ch - 1, colour);
            lmp_xml_text(f, r->shape[col_b[g]].linears[col_i[g]].name);
            if (what == MAP_BITS) fprintf(f, ": %.4g bits/w</title></rect>", bits);
            else if (isfinite(err)) fprintf(f, ": relative weight error %.3g</title></rect>", err);
            else fputs(": no weight error (not comparable)</title></rect>", f);
        }
        fputs("</g>\n", f);
    }
    /* the legend: the scale as a gradient with its ends and a few values between */
    const double ly = top + n_rows * ch + 14, lw = 300;
    fprintf(f, "<defs><linearGradient id=\"%s-scale\">", id);
    for (int k = 0; k <= 8; k++) {
        char c[8];
        lmp_svg_scale_colour(k / 8.0, c);
        fprintf(f, "<stop offset=\"%.3f\" stop-color=\"%s\"/>", k / 8.0, c);
    }
    fprintf(f, "</linearGradient></defs>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"12\" fill=\"url(#%s-scale)\"/>\n",
            left, ly, lw, id);
    for (int k = 0; k <= 4; k++) {
        const double u = llo + (lhi - llo) * k / 4, v = pow(base, u);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g</text>\n", left + lw * k / 4, ly + 26, v);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", left + lw + 12, ly + 10,
            what == MAP_BITS ? "bits per weight (log scale)"
                             : "||W'-W||²/||W||² (log scale); white: unchanged, grey: not comparable");
    fputs("</svg>\n", f);
    free(col_b);
    free(col_i);
}

/* ---- the page --------------------------------------------------------------------------------- */

void lmp_report_html(const lmp_report *r, FILE *f) { lmp_report_html_with(r, NULL, NULL, f); }

void lmp_report_html_with(const lmp_report *r, void (*more)(const void *arg, FILE *f), const void *arg, FILE *f)
{
    int done = 0, external = 0;
    for (int i = 0; i < r->n_results; i++) {
        done += r->results[i].done;
        external += r->results[i].done && r->results[i].v->model_path;
    }
    chart_point *pts = calloc((size_t)r->n_results + 1, sizeof *pts);
    uint8_t *front = calloc((size_t)r->n_results + 1, 1);
    if (!pts || !front) { /* the file is checked by its writer (ferror): an empty page says it */
        free(pts);
        free(front);
        fputs("<!DOCTYPE html><title>lmpress</title><p>out of memory writing this report</p>\n", f);
        return;
    }
    const int n = pareto_front(r, pts, front);
    char title[4400];
    snprintf(title, sizeof title, "lmpress compare: %s", r->cfg->path ? r->cfg->path : "");
    lmp_html_begin(f, title);
    fputs("<h1>lmpress compare: ", f);
    lmp_xml_text(f, r->cfg->path);
    fputs("</h1>\n<p class=\"meta\">model ", f);
    lmp_xml_text(f, r->model->path);
    fputs(" (", f);
    lmp_xml_text(f, r->model->format);
    fprintf(f, "): %lld linear weights in %lld blocks<br>\n", (long long)lmp_model_block_linear_params(r->model),
            (long long)r->model->arch.n_layers);
    for (int t = 0; t < r->n_texts; t++) {
        fputs("text ", f);
        lmp_xml_text(f, r->texts[t].path);
        fprintf(f, ": %lld tokens, %lld windows of %lld tokens, %lld scored<br>\n", (long long)r->texts[t].tokens,
                (long long)r->texts[t].windows, (long long)r->cfg->eval_seq_len, (long long)r->texts[t].scored);
    }
    fputs("backend ", f);
    lmp_xml_text(f, r->cfg->backend_name);
    fprintf(f, "; %d of %d variants finished%s; lmpress %s; run fingerprint %s</p>\n", done, r->n_results,
            done == r->n_results ? "" : " (this page is rewritten as the others finish)", LMP_VERSION, r->fingerprint);

    fputs("<h2>Variants</h2>\n<p class=\"note\">Click a column's header to sort by it (again for the other way). "
          "Bold: on the Pareto front of the chart below.</p>\n", f);
    html_table(r, front, f);

    fputs("<h2>Bits per weight against KL divergence</h2>\n", f);
    fprintf(f, "<p class=\"note\">One point per variant (%d). The dashed line joins the Pareto front: the variants no "
               "other one beats with both as few bits and a lower KL divergence.%s</p>\n",
            n, external ? " External files (another tool's quantization) are drawn in orange-red." : "");
    html_chart(r, pts, n, front, f);

    fputs("<h2>Per-linear storage bits</h2>\n<p class=\"note\">A row per variant, a column per block linear (in "
          "model order, blocks apart; hover a cell for its name).</p>\n", f);
    html_heat_map(r, MAP_BITS, f);
    fputs("<h2>Per-linear weight error</h2>\n<p class=\"note\">||W'&#8722;W||&#178;/||W||&#178; of each linear: W' "
          "its weights in the variant (divided by an input scale a stage added), W the unmodified model's. It "
          "measures how far the weights moved, not what that costs the output (the table does): a stage that "
          "moves a scale from one linear into another (smoothing between v and o) counts as error there, and "
          "a block whose norms a stage changed is left grey.</p>\n", f);
    html_heat_map(r, MAP_ERROR, f);
    if (more) more(arg, f); /* compare --analysis: analyze's charts (report/ sits below analyze/) */
    lmp_html_end(f);
    free(pts);
    free(front);
}
