/* html_page.h — the frame of lmpress's self-contained HTML pages (compare --html, analyze
 * --html): one file with its style and its few lines of script inline, charts as inline SVG,
 * nothing fetched from anywhere (no src, href or url() to another resource).
 *
 * A table whose class is "sortable" sorts by a column when its header is clicked (again: the
 * other way); a cell's data-value, when it has one, is what it sorts by, numerically in a column
 * whose header has data-type="num".  The page's address may ask for a sort on opening:
 * page.html#sort=COLUMN (the header's data-key), #sort=-COLUMN for descending. */
#ifndef LMP_CORE_HTML_PAGE_H
#define LMP_CORE_HTML_PAGE_H

#include <stdio.h>

/* <!DOCTYPE html> up to the opened <body>; title escaped. */
void lmp_html_begin(FILE *f, const char *title);
/* The script, then </body></html>. */
void lmp_html_end(FILE *f);

/* A number cell: data-value at full precision (empty for NaN, which sorts last), the shown text
 * printed with fmt. */
void lmp_html_num_cell(FILE *f, double x, const char *fmt);
/* A header cell of a sortable table: key (the #sort= name) and label escaped; a text column
 * (numeric 0) is left-aligned, as its cells are with class="t". */
void lmp_html_th(FILE *f, const char *key, const char *label, int numeric);

#endif
