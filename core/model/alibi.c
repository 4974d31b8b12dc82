/* alibi.c — see alibi.h. */
#include "model/alibi.h"

#include <math.h>

void lmp_alibi_slopes(int64_t n_heads, float *slopes)
{
    int64_t p2 = 1; /* the largest power of 2 not above n_heads */
    while (p2 * 2 <= n_heads) p2 *= 2;
    /* base = 2^(-2^-(log2(p2) - 3)) = 2^(-8 / p2); slope_i = base^(i + 1); the rest from 2 p2's base,
     * odd powers 1, 3, 5, ... */
    const float base = (float)pow(2.0, -8.0 / (double)p2), extra = (float)pow(2.0, -8.0 / (double)(2 * p2));
    for (int64_t h = 0; h < n_heads; h++)
        slopes[h] = h < p2 ? (float)pow((double)base, (double)(h + 1))
                           : (float)pow((double)extra, (double)(2 * (h - p2) + 1));
}
