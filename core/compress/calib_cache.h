/* calib_cache.h — the unmodified model's calibration activations at every block boundary,
 * computed once per run and shared by the variants.
 *
 * Boundary b is block b's input over every calibration window, [n_windows, T, dim].  A variant
 * whose blocks 0..b-1 equal the model's (its stages left them unchanged, or it calibrates on the
 * original inputs, which follow the model's own blocks) has exactly these inputs at block b: it
 * reads them instead of running the forward, and the first variant to need a boundary computes
 * and stores it.  Each boundary lives in a base/spill.h store: in memory up to
 * LMP_CALIB_CACHE_BUDGET bytes, else in an unlinked file, so the cache costs disk, not memory, on
 * a large model.  The floats read back are those the forward wrote: the statistics and results
 * are the same as without the cache. */
#ifndef LMP_CORE_CALIB_CACHE_H
#define LMP_CORE_CALIB_CACHE_H

#include "base/spill.h"
#include "model/model.h"

#define LMP_CALIB_CACHE_BUDGET ((int64_t)64 << 20)

typedef struct lmp_calib_cache {
    lmp_ctx *ctx;
    int64_t n_layers, floats; /* floats per boundary: n_windows * T * dim */
    lmp_spill *boundary;      /* [n_layers]: boundary b, or .n == 0 while not computed */
    int64_t saved;            /* block forwards over the calibration windows not run thanks to it */
} lmp_calib_cache;

int lmp_calib_cache_init(lmp_calib_cache *cc, lmp_ctx *ctx, int64_t n_layers);
void lmp_calib_cache_free(lmp_calib_cache *cc);

/* Whether boundary b is stored (for windows of `floats` floats in all). */
int lmp_calib_cache_has(const lmp_calib_cache *cc, int64_t b, int64_t floats);
int lmp_calib_cache_get(lmp_calib_cache *cc, int64_t b, float *X, int64_t floats);
int lmp_calib_cache_put(lmp_calib_cache *cc, int64_t b, const float *X, int64_t floats);

/* Whether two blocks compute the same function: the same weights, biases, input affines,
 * activation quantization and norms, bit for bit. */
int lmp_block_same(const lmp_block *a, const lmp_block *b);

#endif
