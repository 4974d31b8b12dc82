/* svg.h — the pieces the SVG charts share (analyze's bar chart, the HTML report's charts):
 * escaping text from configs and models, a colour scale, and "nice" axis ticks. */
#ifndef LMP_CORE_SVG_H
#define LMP_CORE_SVG_H

#include <stdio.h>

/* s as XML/HTML text or attribute value: & < > " ' escaped, and control characters other than
 * tab and newline (which XML 1.0 does not allow) written as spaces.  Variant names, paths and
 * linear names come from configs and model files: this is what keeps them from becoming markup. */
void lmp_xml_text(FILE *f, const char *s);

/* Okabe-Ito colours (distinguishable with the common colour-vision deficiencies). */
#define LMP_SVG_BLUE "#0072B2"
#define LMP_SVG_SKY "#56B4E9"
#define LMP_SVG_GREEN "#009E73"
#define LMP_SVG_YELLOW "#F0E442"
#define LMP_SVG_ORANGE "#E69F00"
#define LMP_SVG_VERMILLION "#D55E00"
#define LMP_SVG_PURPLE "#CC79A7"
#define LMP_SVG_GREY "#777777"

/* A role's colour in the charts ("q".."down"; anything else grey). */
const char *lmp_svg_role_colour(const char *role);

/* A sequential colour for t in [0, 1] (clamped): viridis, dark blue (0) to yellow (1), as
 * "#rrggbb" in out. */
void lmp_svg_scale_colour(double t, char out[8]);

/* Up to max_ticks round values (1, 2 or 5 times a power of ten) covering [lo, hi]; returns how
 * many were written to ticks. */
int lmp_svg_ticks(double lo, double hi, int max_ticks, double *ticks);

#endif
