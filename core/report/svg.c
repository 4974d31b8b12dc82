/* svg.c — shared pieces of the SVG charts (svg.h). */
#include "report/svg.h"
#include "model/tensor_names.h"

#include <math.h>
#include <string.h>

void lmp_xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        switch (ch) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(ch < 0x20 && ch != '\t' && ch != '\n' ? ' ' : ch, f); break;
        }
    }
}

const char *lmp_svg_role_colour(const char *role)
{
    static const char *const colours[LMP_ROLE_COUNT] = {LMP_SVG_BLUE, LMP_SVG_SKY, LMP_SVG_GREEN, LMP_SVG_YELLOW,
                                                        LMP_SVG_ORANGE, LMP_SVG_VERMILLION, LMP_SVG_PURPLE};
    const int r = lmp_role_by_name(role);
    return r >= 0 && colours[r] ? colours[r] : LMP_SVG_GREY;
}

void lmp_svg_scale_colour(double t, char out[8])
{
    /* viridis at nine even stops, linearly interpolated */
    static const unsigned char stops[9][3] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                                              {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                                              {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};
    if (!(t >= 0)) t = 0; /* NaN too */
    if (t > 1) t = 1;
    double x = t * 8;
    int i = (int)x;
    if (i > 7) i = 7;
    double u = x - i;
    unsigned c[3];
    for (int k = 0; k < 3; k++) c[k] = (unsigned)lround(stops[i][k] + u * (stops[i + 1][k] - stops[i][k]));
    snprintf(out, 8, "#%02x%02x%02x", c[0] & 255u, c[1] & 255u, c[2] & 255u);
}

int lmp_svg_ticks(double lo, double hi, int max_ticks, double *ticks)
{
    if (!isfinite(lo) || !isfinite(hi) || max_ticks < 2) return 0;
    if (hi <= lo) {
        ticks[0] = lo;
        return 1;
    }
    double raw = (hi - lo) / (max_ticks - 1), p = pow(10, floor(log10(raw))), step = p;
    if (raw / p > 5) step = 10 * p;
    else if (raw / p > 2) step = 5 * p;
    else if (raw / p > 1) step = 2 * p;
    int n = 0;
    for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9 && n < max_ticks; v += step)
        ticks[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}
