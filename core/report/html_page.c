/* html_page.c — the frame of the HTML pages (html_page.h). */
#include "report/html_page.h"

#include <math.h>

#include "report/svg.h"

static const char style[] =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\n"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}\n"
    ".meta{color:#555;font-size:13px;line-height:1.5}\n"
    "table{border-collapse:collapse;font-size:13px}\n"
    "th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}\n"
    "th:first-child,td:first-child,th.t,td.t{text-align:left}\n"
    "table.sortable th{cursor:pointer;background:#f3f3f3;user-select:none}\n"
    "table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}\n"
    "table.sortable th[aria-sort=descending]::after{content:' \\25BC'}\n"
    "tr.external td:first-child{color:" LMP_SVG_VERMILLION "}\n"
    "tr.front td:first-child{font-weight:bold}\n"
    ".note{color:#555;font-size:12px;max-width:900px}\n"
    "svg{display:block;margin:8px 0}\n";

/* Sorting (click a header; #sort=KEY or #sort=-KEY on opening).  Plain ES5 DOM calls: any
 * browser of the last ten years, no library. */
static const char script[] =
    "(function(){\n"
    "function key(td,num){var v=td.hasAttribute('data-value')?td.getAttribute('data-value'):td.textContent;\n"
    " if(!num)return v;var x=parseFloat(v);return isNaN(x)?null:x;}\n"
    "function sortBy(th,dir){var table=th.parentNode.parentNode.parentNode,tb=table.tBodies[0];\n"
    " var col=th.cellIndex,num=th.getAttribute('data-type')==='num';\n"
    " var rows=Array.prototype.slice.call(tb.rows);\n"
    " rows.sort(function(a,b){var x=key(a.cells[col],num),y=key(b.cells[col],num);\n"
    "  if(x===y)return 0;if(x===null)return 1;if(y===null)return -1;return (x<y?-1:1)*dir;});\n"
    " rows.forEach(function(r){tb.appendChild(r);});\n"
    " Array.prototype.forEach.call(th.parentNode.cells,function(h){h.removeAttribute('aria-sort');});\n"
    " th.setAttribute('aria-sort',dir>0?'ascending':'descending');}\n"
    "var ths=document.querySelectorAll('table.sortable th');\n"
    "Array.prototype.forEach.call(ths,function(th){th.addEventListener('click',function(){\n"
    " sortBy(th,th.getAttribute('aria-sort')==='ascending'?-1:1);});});\n"
    "var m=/[#&]sort=(-?)([^&]+)/.exec(location.hash);\n"
    "if(m)Array.prototype.forEach.call(ths,function(th){\n"
    " if(th.getAttribute('data-key')===decodeURIComponent(m[2]))sortBy(th,m[1]?-1:1);});\n"
    "document.body.setAttribute('data-sortable-headers',String(ths.length));\n"
    "})();\n";

void lmp_html_begin(FILE *f, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
          f);
    lmp_xml_text(f, title);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", style);
}

void lmp_html_end(FILE *f)
{
    fprintf(f, "<script>\n%s</script>\n</body>\n</html>\n", script);
}

void lmp_html_num_cell(FILE *f, double x, const char *fmt)
{
    if (!isfinite(x)) {
        fputs("<td data-value=\"\">-</td>", f);
        return;
    }
    fprintf(f, "<td data-value=\"%.17g\">", x);
    fprintf(f, fmt, x);
    fputs("</td>", f);
}

void lmp_html_th(FILE *f, const char *key, const char *label, int numeric)
{
    fputs("<th data-key=\"", f);
    lmp_xml_text(f, key);
    fprintf(f, "\"%s>", numeric ? " data-type=\"num\"" : " class=\"t\"");
    lmp_xml_text(f, label);
    fputs("</th>", f);
}
