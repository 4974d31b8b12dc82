/* test_report_html.c — `compare --html FILE`: one self-contained page (core/report/report_html.c).
 *
 * One compare of stories260K (the unmodified model, three RTN variants, one of them named with
 * markup, and, where the PyPI gguf package is unpacked, another tool's Q8_0 file written by
 * tools/ref/llama2c_to_gguf.py) is run once for the suite.  Its page must hold a table row and a
 * chart point per variant with the report's own numbers, mark exactly the variants no other beats
 * on both bits and KL divergence, draw the external file in its own colour, escape the name, and
 * reference nothing outside itself.  The per-linear weight errors are held to the reference
 * script's (gguf-py's Q8_0 dequantized, numpy float64).  A page written from --resume alone has
 * the same maps, and one given an analysis (--analysis) holds analyze's charts.  Then, where
 * Debian's chromium is installed, the page is opened headless: the DOM after its script ran has
 * the rows sorted as the address asks and every point, and a screenshot of it is a real picture
 * (skipped, saying so, without chromium). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/json.h"
#include "testutil.h"

#define SDIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL SDIR "/stories260K.bin"
#define TOK SDIR "/tok512.bin"
#define EVAL_TEXT SDIR "/tinystories-synth-eval.txt"

/* A variant name that would be markup (and break out of an attribute) if written as it is. */
#define EVIL_CFG "<script>alert(\\\"x\\\")</script> & 'q'"
#define EVIL_HTML "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;"
#define EVIL_RAW "<script>alert(\"x\")</script> & 'q'"

static char tmpdir[256];
static int have_external;      /* the Q8_0 GGUF could be written (PyPI gguf unpacked) */
static int n_variants;
static char output[1 << 20];

static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

static int run(const char *args)
{
    return lmp_test_cli_all(args, output, sizeof output);
}

/* Runs once for the suite (check's unchecked fixture runs in the parent process): the config,
 * the external file and its reference errors, and one compare writing report.json and
 * report.html. */
static void suite_setup(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "report-html");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' -c 'import numpy, gguf' >/dev/null 2>&1", LMP_TEST_PYDEPS,
             lmp_test_python());
    have_external = system(cmd) == 0;
    if (have_external) {
        snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s/tools/ref/llama2c_to_gguf.py' '%s' '%s' '%s' --type Q8_0 "
                 "--weight-err '%s'", LMP_TEST_PYDEPS, lmp_test_python(), LMP_SOURCE_DIR, MODEL, TOK, tmp("q8.gguf"),
                 tmp("q8-err.json"));
        ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    }
    char text[8192];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "backend = { name = \"cpu\"; params = { threads = 1; }; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 6; };\n"
             "variants = (\n"
             "  { name = \"fp32\"; },\n"
             "  { name = \"w8-channel\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; granularity = \"channel\"; }; } ); },\n"
             "  { name = \"w4-g32\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); },\n"
             "  { name = \"" EVIL_CFG "\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 3; granularity = \"group\"; group_size = 32; }; } ); }%s\n"
             ");\n",
             MODEL, TOK, EVAL_TEXT, have_external ? ",\n  { name = \"llamacpp-q8_0\"; model = \"q8.gguf\"; }" : "");
    lmp_test_spit(tmp("x.cfg"), text, strlen(text));
    n_variants = have_external ? 5 : 4;
    snprintf(cmd, sizeof cmd, "compare '%s' --json '%s' --html '%s'", tmp("x.cfg"), tmp("report.json"), tmp("report.html"));
    ck_assert_msg(run(cmd) == 0, "%s\n%s", cmd, output);
}

static void suite_teardown(void) { lmp_test_rmtree(tmpdir); }

static char *page(const char *name)
{
    size_t n;
    return (char *)lmp_test_slurp(tmp(name), &n);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* The value of attribute `name` in the tag that starts at tag (up to its '>'), into out. */
static int attr(const char *tag, const char *name, char *out, size_t n)
{
    const char *end = strchr(tag, '>');
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(tag, key);
    if (!p || (end && p > end)) return 0;
    p += strlen(key);
    const char *q = strchr(p, '"');
    snprintf(out, n, "%.*s", (int)(q - p), p);
    return 1;
}

static lmp_json *report(void)
{
    size_t n;
    char *text = (char *)lmp_test_slurp(tmp("report.json"), &n);
    lmp_json *j = NULL;
    ck_assert_int_eq(lmp_json_parse(text, n, "report.json", &j), 0);
    free(text);
    return j;
}

typedef struct point {
    char variant[256], kind[32];
    double bpw, kld;
    int pareto;
} point;

static int points(const char *html, point *pts, int max)
{
    int n = 0;
    for (const char *p = html; (p = strstr(p, "<circle class=\"point\"")) && n < max; p++, n++) {
        char v[64];
        ck_assert(attr(p, "data-variant", pts[n].variant, sizeof pts[n].variant));
        ck_assert(attr(p, "data-kind", pts[n].kind, sizeof pts[n].kind));
        ck_assert(attr(p, "data-bpw", v, sizeof v));
        pts[n].bpw = strtod(v, NULL);
        ck_assert(attr(p, "data-kld", v, sizeof v));
        pts[n].kld = strtod(v, NULL);
        ck_assert(attr(p, "data-pareto", v, sizeof v));
        pts[n].pareto = atoi(v);
    }
    return n;
}

/* A row and a point per variant, with the report's numbers. */
START_TEST(test_rows_and_points)
{
    char *html = page("report.html");
    lmp_json *j = report();
    const char *tbody = strstr(html, "<tbody>");
    ck_assert_ptr_nonnull(tbody);
    ck_assert_int_eq(count(tbody, "<tr class="), n_variants);
    point pts[16];
    ck_assert_int_eq(points(html, pts, 16), n_variants);
    ck_assert_int_eq(count(html, "<circle class=\"point\""), n_variants);
    const lmp_json *vs = lmp_json_get(j, "variants");
    ck_assert_int_eq((int)vs->n, n_variants);
    for (size_t i = 0; i < vs->n; i++) {
        const char *name;
        double bpw;
        ck_assert_int_eq(lmp_json_get_string(&vs->items[i], "name", "v", &name), 0);
        ck_assert_int_eq(lmp_json_get_number(&vs->items[i], "bits_per_weight", "v", &bpw), 0);
        const lmp_json *ev = lmp_json_get(&vs->items[i], "eval");
        const double kld = lmp_json_get(&ev->items[0], "kld")->number;
        int found = 0;
        for (int k = 0; k < n_variants; k++) {
            /* the page holds names escaped: compare the evil one by its escaped form */
            const char *want = strcmp(name, EVIL_RAW) == 0 ? EVIL_HTML : name;
            if (strcmp(pts[k].variant, want) != 0) continue;
            found++;
            ck_assert_msg(pts[k].bpw == bpw, "%s: bpw %.17g in the page, %.17g in the report", name, pts[k].bpw, bpw);
            ck_assert_msg(fabs(pts[k].kld - kld) <= 1e-12 * fmax(kld, 1e-300), "%s: kld %.17g vs %.17g", name, pts[k].kld, kld);
            const char *kind = lmp_json_get(&vs->items[i], "model") ? "external"
                               : strcmp(name, "fp32") == 0   ? "unmodified"
                                                             : "pipeline";
            ck_assert_str_eq(pts[k].kind, kind);
        }
        ck_assert_msg(found == 1, "variant %s: %d points", name, found);
    }
    /* every finished variant has a row in each heat map */
    ck_assert_int_eq(count(html, "<g class=\"map-row\""), 2 * n_variants);
    lmp_json_free(j);
    free(html);
}
END_TEST

/* The front: exactly the points no other point dominates (as few bits and a lower KLD, or fewer
 * bits and as low a KLD); the external file's point is drawn in its own colour. */
START_TEST(test_pareto_front)
{
    char *html = page("report.html");
    point pts[16];
    const int n = points(html, pts, 16);
    int on_front = 0;
    for (int i = 0; i < n; i++) {
        int dominated = 0;
        for (int k = 0; k < n; k++)
            dominated |= k != i && pts[k].bpw <= pts[i].bpw && pts[k].kld <= pts[i].kld &&
                         (pts[k].bpw < pts[i].bpw || pts[k].kld < pts[i].kld);
        ck_assert_msg(pts[i].pareto == !dominated, "%s: pareto %d, dominated %d", pts[i].variant, pts[i].pareto, dominated);
        on_front += pts[i].pareto;
    }
    ck_assert_int_ge(on_front, 2); /* fp32 (KLD 0) and the fewest bits at least */
    /* the front's line goes through as many points as are on it */
    const char *line = strstr(html, "<polyline id=\"front\"");
    ck_assert_ptr_nonnull(line);
    char pts_attr[4096];
    ck_assert(attr(line, "points", pts_attr, sizeof pts_attr));
    ck_assert_int_eq(count(pts_attr, ","), on_front);
    if (have_external) {
        const char *c = strstr(html, "data-kind=\"external\"");
        ck_assert_ptr_nonnull(c);
        char fill[16];
        ck_assert(attr(c, "fill", fill, sizeof fill));
        ck_assert_str_eq(fill, "#D55E00");
        const char *p = strstr(html, "data-kind=\"pipeline\"");
        ck_assert(attr(p, "fill", fill, sizeof fill));
        ck_assert_str_eq(fill, "#0072B2");
    } else
        lmp_test_skip("SKIPPED test_pareto_front's external colour: %s cannot import numpy and gguf with PYTHONPATH=%s "
                      "(tools/test.sh unpacks the PyPI gguf package there)", lmp_test_python(), LMP_TEST_PYDEPS);
    free(html);
}
END_TEST

/* The name with markup is text everywhere (table, attributes, chart, maps): escaped, never raw;
 * the page's only <script> is its own. */
START_TEST(test_names_escaped)
{
    char *html = page("report.html");
    ck_assert_ptr_null(strstr(html, "<script>alert"));
    ck_assert_ptr_null(strstr(html, "alert(\"x\")"));
    ck_assert_int_eq(count(html, "<script"), 1);
    ck_assert_int_eq(count(html, "</script>"), 1);
    /* table cell and row attribute, point attribute, tooltip and label, two map rows' attribute and label */
    ck_assert_int_ge(count(html, EVIL_HTML), 8);
    free(html);
}
END_TEST

/* Nothing outside the file: no address, no element or rule that loads one. */
START_TEST(test_self_contained)
{
    char *html = page("report.html");
    ck_assert_ptr_null(strstr(html, "http"));
    ck_assert_ptr_null(strstr(html, "src="));
    ck_assert_ptr_null(strstr(html, "href="));
    ck_assert_ptr_null(strstr(html, "<link"));
    ck_assert_ptr_null(strstr(html, "@import"));
    ck_assert_ptr_null(strstr(html, "<img"));
    ck_assert_ptr_null(strstr(html, "<iframe"));
    for (const char *p = html; (p = strstr(p, "url(")); p++) ck_assert_msg(p[4] == '#', "url( to something else: %.40s", p);
    free(html);
}
END_TEST

/* --html is an output like the others: the same file as another output, or as an input, is
 * refused before any work, naming the option. */
START_TEST(test_html_output_checked)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "compare '%s' --json '%s' --html '%s'", tmp("x.cfg"), tmp("same"), tmp("same"));
    ck_assert_int_ne(run(cmd), 0);
    ck_assert_msg(strstr(output, "--html") != NULL, "%s", output);
    snprintf(cmd, sizeof cmd, "compare '%s' --html '%s'", tmp("x.cfg"), tmp("x.cfg"));
    ck_assert_int_ne(run(cmd), 0);
    ck_assert_msg(strstr(output, "--html") != NULL, "%s", output);
    snprintf(cmd, sizeof cmd, "compare '%s' --md - --html -", tmp("x.cfg"));
    ck_assert_int_eq(run(cmd), 2);
    ck_assert_msg(strstr(output, "only one of") != NULL, "%s", output);
}
END_TEST

/* Per-linear weight errors: the unmodified model's are 0, 8-bit RTN's below 4-bit RTN's for
 * every linear, and another tool's Q8_0 file's equal to the reference script's (gguf-py's
 * dequantization of the same codes, numpy float64): the numbers of the error map. */
START_TEST(test_weight_errors)
{
    lmp_json *j = report();
    const lmp_json *fp = lmp_json_get(lmp_test_variant(j, "fp32"), "linears");
    const lmp_json *w8 = lmp_json_get(lmp_test_variant(j, "w8-channel"), "linears");
    const lmp_json *w4 = lmp_json_get(lmp_test_variant(j, "w4-g32"), "linears");
    ck_assert_int_eq((int)fp->n, 35); /* stories260K: 5 blocks of 7 */
    for (size_t i = 0; i < fp->n; i++) {
        ck_assert(lmp_json_get(&fp->items[i], "weight_err")->number == 0);
        const double e8 = lmp_json_get(&w8->items[i], "weight_err")->number;
        const double e4 = lmp_json_get(&w4->items[i], "weight_err")->number;
        ck_assert_msg(e8 > 0 && e8 < 1e-3 && e4 > e8 && e4 < 0.1, "linear %zu: w8 %g, w4 %g", i, e8, e4);
    }
    if (have_external) {
        size_t n;
        char *text = (char *)lmp_test_slurp(tmp("q8-err.json"), &n);
        lmp_json *ref = NULL;
        ck_assert_int_eq(lmp_json_parse(text, n, "q8-err.json", &ref), 0);
        const lmp_json *q8 = lmp_json_get(lmp_test_variant(j, "llamacpp-q8_0"), "linears");
        ck_assert_int_eq((int)ref->n, (int)q8->n);
        int zeros = 0;
        for (size_t i = 0; i < q8->n; i++) {
            const double got = lmp_json_get(&q8->items[i], "weight_err")->number, want = ref->items[i].number;
            ck_assert_msg(fabs(got - want) <= 1e-9 * want, "linear %zu: %.17g, reference %.17g", i, got, want);
            zeros += want == 0; /* ffn_down (172 inputs) stays F32 */
        }
        ck_assert_int_eq(zeros, 5);
        lmp_json_free(ref);
        free(text);
    } else
        lmp_test_skip("SKIPPED test_weight_errors' reference check: %s cannot import numpy and gguf with PYTHONPATH=%s "
                      "(tools/test.sh unpacks the PyPI gguf package there)", lmp_test_python(), LMP_TEST_PYDEPS);
    lmp_json_free(j);
}
END_TEST

/* Every variant taken from --resume: the page has the same rows and points, and its maps take
 * the per-linear numbers from the earlier report. */
START_TEST(test_resumed_page)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tmp("report.json"), tmp("resume.json"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "compare '%s' --resume --json '%s' --html '%s'", tmp("x.cfg"), tmp("resume.json"),
             tmp("resumed.html"));
    ck_assert_msg(run(cmd) == 0, "%s\n%s", cmd, output);
    char *a = page("report.html"), *b = page("resumed.html");
    ck_assert_int_eq(count(b, "<circle class=\"point\""), n_variants);
    ck_assert_int_eq(count(strstr(b, "<tbody>"), "<tr class="), n_variants);
    const char *ma = strstr(a, "<svg id=\"bits-map\""), *mb = strstr(b, "<svg id=\"bits-map\"");
    ck_assert(ma && mb);
    /* the maps (bits and error) are the same to the byte */
    ck_assert_msg(strcmp(ma, mb) == 0, "the resumed page's maps differ from the first run's");
    free(a);
    free(b);
}
END_TEST

/* --analysis A.json puts analyze's charts on the page: its bar chart with a bar per unit, its
 * block x role map with a cell per unit; an unfinished or foreign file is refused before any
 * work, naming it. */
START_TEST(test_analysis_charts)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "analyze '%s' --variant w4-g32 --per linear --json '%s'", tmp("x.cfg"), tmp("an.json"));
    ck_assert_msg(run(cmd) == 0, "%s\n%s", cmd, output);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tmp("report.json"), tmp("with-an.json"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "compare '%s' --resume --json '%s' --html '%s' --analysis '%s'", tmp("x.cfg"),
             tmp("with-an.json"), tmp("with-an.html"), tmp("an.json"));
    ck_assert_msg(run(cmd) == 0, "%s\n%s", cmd, output);
    char *html = page("with-an.html");
    char *chart = strstr(html, "<svg id=\"sensitivity\"");
    ck_assert_ptr_nonnull(chart);
    char *end = strstr(chart, "</svg>");
    ck_assert_ptr_nonnull(end);
    *end = 0;
    ck_assert_int_eq(count(chart, "<title>"), 35); /* stories260K: 5 blocks of 7 linears */
    *end = '<';
    ck_assert_int_eq(count(html, "<rect class=\"unit\""), 35);
    ck_assert_ptr_null(strstr(html, "http"));
    free(html);
    /* the report itself is no analysis; a missing file is refused too */
    snprintf(cmd, sizeof cmd, "compare '%s' --html '%s' --analysis '%s'", tmp("x.cfg"), tmp("bad.html"), tmp("report.json"));
    ck_assert_int_ne(run(cmd), 0);
    ck_assert_msg(strstr(output, "report.json") && strstr(output, "analyze"), "%s", output);
    ck_assert_int_ne(access(tmp("bad.html"), F_OK), 0);
    snprintf(cmd, sizeof cmd, "compare '%s' --analysis '%s'", tmp("x.cfg"), tmp("an.json"));
    ck_assert_int_eq(run(cmd), 2); /* without --html */
}
END_TEST

/* The page in a browser: Debian's chromium, headless.  The DOM after the page's script ran
 * (--dump-dom) holds every point, the script bound every header, and #sort=-bpw sorted the rows
 * by bits per weight, most first; the screenshot is a PNG of some size (a blank page of this size
 * compresses to a few KB). */
START_TEST(test_chromium_renders)
{
    if (system("command -v chromium >/dev/null 2>&1") != 0) {
        lmp_test_skip("SKIPPED test_chromium_renders: Debian's chromium is not installed (tools/setup.sh installs it)");
        return;
    }
    char cmd[4096], dom[] = "dom.html";
    /* its own profile folder: runs at the same time do not share one */
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 chromium --headless --disable-gpu --no-sandbox --user-data-dir='%s' "
             "--dump-dom 'file://%s#sort=-bpw' > '%s' 2>/dev/null", tmpdir, tmp("profile"), tmp("report.html"), tmp(dom));
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    char *html = page(dom);
    ck_assert_int_eq(count(html, "<circle class=\"point\""), n_variants);
    char th[16];
    const char *body = strstr(html, "<body");
    ck_assert_ptr_nonnull(body);
    ck_assert_msg(attr(body, "data-sortable-headers", th, sizeof th), "the page's script did not run");
    const char *thead = strstr(html, "<thead>");
    ck_assert_int_eq(atoi(th), count(thead ? thead : "", "<th "));
    ck_assert_ptr_nonnull(strstr(html, "data-key=\"bpw\" data-type=\"num\" aria-sort=\"descending\""));
    /* rows by bits per weight, most first: fp32 (32 bits) leads */
    const char *tbody = strstr(html, "<tbody>");
    double prev = INFINITY;
    int rows = 0;
    for (const char *p = tbody; (p = strstr(p, "<tr ")); p++, rows++) {
        const char *cell = strstr(p, "data-value=\""); /* bits/w: the first cell with a value */
        ck_assert_ptr_nonnull(cell);
        double bpw = strtod(cell + 12, NULL);
        ck_assert_msg(bpw <= prev, "row %d: %g bits after %g", rows, bpw, prev);
        prev = bpw;
    }
    ck_assert_int_eq(rows, n_variants);
    free(html);
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 chromium --headless --disable-gpu --no-sandbox --user-data-dir='%s' "
             "--hide-scrollbars --screenshot='%s' --window-size=1200,1600 'file://%s' >/dev/null 2>&1",
             tmpdir, tmp("profile"), tmp("shot.png"), tmp("report.html"));
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    size_t n;
    unsigned char *png = lmp_test_slurp(tmp("shot.png"), &n);
    ck_assert_msg(n > 40000, "screenshot of %zu bytes", n);
    ck_assert(memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);
    free(png);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("report_html");
    TCase *tc = tcase_create("html");
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, test_rows_and_points);
    tcase_add_test(tc, test_pareto_front);
    tcase_add_test(tc, test_names_escaped);
    tcase_add_test(tc, test_self_contained);
    tcase_add_test(tc, test_html_output_checked);
    tcase_add_test(tc, test_weight_errors);
    tcase_add_test(tc, test_resumed_page);
    tcase_add_test(tc, test_analysis_charts);
    tcase_add_test(tc, test_chromium_renders);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
