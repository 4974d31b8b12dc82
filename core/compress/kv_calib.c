/* kv_calib.c — see kv_calib.h. */
#include "compress/kv_calib.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/kv_quant.h"

/* Ends the block's forward at o's input: attention has read K and V by then. */
static int stop_at_o(void *ud, const int *lins, int n_lins, const float *x, int64_t T, int64_t C)
{
    (void)x, (void)T, (void)C;
    const lmp_block *blk = ud;
    return n_lins > 0 && blk->linears[lins[0]].role == LMP_ROLE_O ? LMP_FORWARD_STOP : 0;
}

int lmp_kv_calibrate(const lmp_backend *be, const lmp_arch *a, lmp_block *blk, const lmp_kvspec *spec, const float *X,
                     int64_t n, int64_t T)
{
    const int64_t H = a->n_kv_heads, hd = a->head_dim, d = a->dim;
    if (spec->per_head && H > LMP_KV_MAX_HEADS)
        return lmp_fail(LMP_EINVAL, "block %d: kv_cache: per-head scales for %lld KV heads, more than the %d lmpress "
                        "keeps: use granularity = \"tensor\"", blk->index, (long long)H, LMP_KV_MAX_HEADS);
    if (spec->dynamic) {
        blk->kv = *spec;
        return 0;
    }
    if (n <= 0 || !X)
        return lmp_fail(LMP_EINVAL, "block %d: kv_cache with static scales needs calibration windows (set "
                        "calibration.text, or scales = \"dynamic\")", blk->index);
    lmp_block plain = *blk; /* the block without KV quantization: K and V as the cache receives them */
    plain.kv.type = LMP_KV_NONE;
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    float *buf = malloc((size_t)(T * (d + 2 * H * hd)) * sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory calibrating block %d's KV cache", blk->index);
    float *x = buf, *k = x + T * d, *v = k + T * H * hd;
    float *given[LMP_SLOT_COUNT] = {0};
    given[LMP_SLOT_K] = k;
    given[LMP_SLOT_V] = v;
    float amax_k[LMP_KV_MAX_HEADS] = {0}, amax_v[LMP_KV_MAX_HEADS] = {0};
    int st = 0;
    for (int64_t w = 0; w < n && !st; w++) {
        memcpy(x, X + w * T * d, (size_t)(T * d) * sizeof *x);
        st = lmp_block_run(be, a, &plain, &p, T, 0, x, given, stop_at_o, &plain);
        if (st == LMP_FORWARD_STOP) st = 0;
        else if (!st) st = lmp_fail(LMP_EINVAL, "block %d: its forward never reached o's input", blk->index);
        if (!st) {
            lmp_kv_absmax(k, T, H, hd, spec->per_head, amax_k);
            lmp_kv_absmax(v, T, H, hd, spec->per_head, amax_v);
        }
    }
    free(buf);
    if (st) return lmp_fail_prefix(st, "block %d: calibrating the KV cache's scales", blk->index);
    blk->kv = *spec;
    for (int64_t h = 0; h < (spec->per_head ? H : 1); h++) {
        blk->kv.k_scale[h] = lmp_kv_scale_of(spec->type, amax_k[h]);
        blk->kv.v_scale[h] = lmp_kv_scale_of(spec->type, amax_v[h]);
    }
    return 0;
}
