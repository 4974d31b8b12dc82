/* kv_calib.h — a variant's KV-cache quantization put on a compressed block (issue 38;
 * model/kv_quant.h).  Static scales, as llm-compressor's kv_cache_scheme calibrates them: the
 * abs-max of K (after RoPE, as attention reads it) and of V over every calibration token, per
 * tensor or per KV head, taken on the block as its stages left it, with the inputs the earlier
 * (compressed, KV-quantized) blocks made; then scale = amax / 448 (FP8) or amax / 127.5 (int8). */
#ifndef LMP_CORE_KV_CALIB_H
#define LMP_CORE_KV_CALIB_H

#include <stdint.h>

#include "model/model.h"
#include "plugin/backend.h"

/* blk->kv <- spec, its static scales from the n calibration windows X[n, T, dim] (the block's
 * inputs; not changed).  A dynamic spec needs no window.  LMP_EINVAL (set, naming the block) for
 * per-head scales over more than LMP_KV_MAX_HEADS heads or a static spec without windows. */
int lmp_kv_calibrate(const lmp_backend *be, const lmp_arch *a, lmp_block *blk, const lmp_kvspec *spec, const float *X,
                     int64_t n, int64_t T);

#endif
