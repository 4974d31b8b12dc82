/* windows.h — token windows: the calibration (and training) text cut into n pieces of T tokens.
 * Its own header because compress/ (the pipeline) and train/ (learned rotations) both take them,
 * and neither may include the other (docs/architecture.md, Layering). */
#ifndef LMP_CORE_TEXT_WINDOWS_H
#define LMP_CORE_TEXT_WINDOWS_H

#include <stdint.h>

/* tokens[n_windows * T]: the calibration windows, one after the other. */
typedef struct lmp_windows {
    int32_t *tokens;
    int64_t n, T;
} lmp_windows;

#endif
