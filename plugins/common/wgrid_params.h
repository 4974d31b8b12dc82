/* wgrid_params.h — the weight-grid parameters gptq and sparse24 share (the same grid as rtn,
 * plugin.h's lmp_wspec, per channel or per group), as lmp_param_spec initialisers plus the
 * reader.  Include once per plugin; WGRID_PARAMS(first) expands to five entries in this order. */
#ifndef LMP_PLUGIN_WGRID_PARAMS_H
#define LMP_PLUGIN_WGRID_PARAMS_H

#include "lmpress/plugin.h"

enum { WGRID_BITS, WGRID_SYM, WGRID_GRAN, WGRID_GROUP, WGRID_ROUND, WGRID_COUNT };

static const char *const wgrid_gran_choices[] = {"channel", "group", NULL};
static const char *const wgrid_round_choices[] = {"half_even", "half_away", NULL};

#define WGRID_PARAMS(default_bits)                                                                  \
    {"bits", LMP_PARAM_INT, "weight bits, 2..8; 16 = no quantization", default_bits, NULL, 2, 16, NULL, 0}, \
    {"sym", LMP_PARAM_BOOL,                                                                         \
     "symmetric abs-max grid (levels -2^(b-1)..2^(b-1)-1); false: asymmetric min-max grid with a "  \
     "zero-point (levels 0..2^b-1), the GPTQ reference's default", 0, NULL, 0, 1, NULL, 0},         \
    {"granularity", LMP_PARAM_ENUM, "one grid per output channel, or per group of group_size inputs", \
     0, NULL, 0, 0, wgrid_gran_choices, 0},                                                         \
    {"group_size", LMP_PARAM_INT, "inputs per group when granularity = \"group\"", 128, NULL, 1,      \
     1 << 20, NULL, 0},                                                                             \
    {"rounding", LMP_PARAM_ENUM, "half_even (torch.round, the reference) or half_away (paddle.round)", \
     0, NULL, 0, 0, wgrid_round_choices, 0}

/* p points at the first of the five values.  Returns 0 when bits is 16 (no grid). */
static inline int wgrid_spec(const lmp_value *p, lmp_wspec *spec)
{
    *spec = (lmp_wspec){.bits = (int)p[WGRID_BITS].num,
                        .sym = p[WGRID_SYM].num != 0,
                        .gran = (int)p[WGRID_GRAN].num == 0 ? LMP_GRAN_CHANNEL : LMP_GRAN_GROUP,
                        .group = (int64_t)p[WGRID_GROUP].num,
                        .rounding = (lmp_rounding)(int)p[WGRID_ROUND].num};
    return spec->bits != 16;
}

/* bits must be 2..8 or 16. */
static inline int wgrid_bits_ok(const lmp_value *p)
{
    int b = (int)p[WGRID_BITS].num;
    return (b >= 2 && b <= 8) || b == 16;
}

/* Storage bits per weight, as rtn counts them: the codes, an fp16 scale per slice, and for an
 * asymmetric grid a zero-point of `bits` bits. */
static inline double wgrid_weight_bits(const lmp_wspec *s, int64_t out, int64_t in)
{
    double n_scales = (double)lmp_wspec_n_scales(s, out, in);
    return ((double)s->bits * (double)(out * in) + n_scales * (16.0 + (s->sym ? 0 : s->bits))) / (double)(out * in);
}

#endif
