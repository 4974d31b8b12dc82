/* grid_codes.h — the integer codes of a linear's weights on the grid a strategy recorded.
 *
 * A strategy leaves W holding dequantized values and records the grid (lmp_linear.grid: spec,
 * scales, zeros, g_idx).  A file stores codes and scales, so a writer needs each weight's code:
 * it is recomputed here with the grid's own coding step (plugin.h's lmp_wgrid_code), then
 * checked to dequantize (lmp_wgrid_value) to the weight bit for bit, trying the neighbouring
 * codes when the coding step lands one off (a GGUF code is taken with the f32 d, the value with
 * the fp16 d).  One sign of zero is let through: a weight -0 (a symmetric INT grid's code -0
 * times its scale, which is how the backends leave a small negative weight) gets code 0, whose
 * value in a file is +0, the same number.  Codes are as plugin.h numbers them: INT sym
 * -2^(b-1)..2^(b-1)-1, asym 0..2^b-1; Q8_0 -127..127; Q4_0 and Q4_1 0..15. */
#ifndef LMP_CORE_GRID_CODES_H
#define LMP_CORE_GRID_CODES_H

#include <stdint.h>

#include "lmpress/plugin.h"

/* The lowest and highest code of the grid (the numbering above). */
void lmp_grid_code_range(const lmp_wspec *s, float *lo, float *hi);

/* codes[in] <- the codes of row r of l's weights on l->grid (which must be set).  A weight no
 * code reproduces exactly is an error naming the linear, the row and column, the weight and the
 * nearest value on the grid. */
int lmp_grid_codes_row(const lmp_linear *l, int64_t r, int32_t *codes);

#endif
