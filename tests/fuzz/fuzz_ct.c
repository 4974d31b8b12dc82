/* fuzz_ct.c — libFuzzer entry for the compressed-tensors reader (core/model/model_hf_quant.c):
 * its quantization_config parser and its tensor checks and dequantization.  An input is
 *     4 bytes: n, little-endian    then n bytes: the quantization_config JSON object
 *     the rest: a safetensors image (its tensors: X.weight / X.weight_packed, X.weight_scale, ...)
 * The config is parsed (lmp_ct_parse); then for every module the image names (a tensor name up
 * to ".weight"), with the shape its X.weight or X.weight_shape gives (each side at most 4096),
 * lmp_ct_find must accept or refuse with a message, and an accepted quantized weight is
 * dequantized in full, so ASan sees every byte read.  Nothing may crash, leak or hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/json.h"
#include "formats/safetensors.h"
#include "model/model_hf_quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The [out, in] of module (name[0..len)): X.weight's 2-D shape, else X.weight_shape's two values. */
static int module_shape(const lmp_safetensors *st, const char *module, int64_t *out, int64_t *in)
{
    char name[600];
    snprintf(name, sizeof name, "%s.weight", module);
    const lmp_st_tensor *t = lmp_st_find(st, name);
    if (t && t->ndim == 2) {
        *out = t->shape[0], *in = t->shape[1];
        return 0;
    }
    snprintf(name, sizeof name, "%s.weight_shape", module);
    t = lmp_st_find(st, name);
    if (!t || t->ndim != 1 || t->shape[0] != 2) return -1;
    const uint8_t *p = t->data;
    int64_t v[2] = {0, 0};
    if (t->dtype == LMP_ST_I64) memcpy(v, p, 16);
    else if (t->dtype == LMP_ST_I32) {
        int32_t w[2];
        memcpy(w, p, 8);
        v[0] = w[0], v[1] = w[1];
    } else return -1;
    *out = v[0], *in = v[1];
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    uint32_t n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (n > size - 4) return 0;
    lmp_json *qc = NULL;
    if (lmp_json_parse((const char *)data + 4, n, "fuzz config.json", &qc) != 0) return 0;
    lmp_ct *ct = NULL;
    if (lmp_ct_parse(qc, "fuzz config.json", &ct) != 0) {
        if (ct || !lmp_last_error()[0]) __builtin_trap();
        lmp_json_free(qc);
        return 0;
    }
    lmp_safetensors *st = NULL;
    if (lmp_st_parse(data + 4 + n, size - 4 - n, "fuzz.safetensors", &st) == 0) {
        for (size_t i = 0; i < st->n_tensors; i++) {
            const char *name = st->tensors[i].name, *dot = strstr(name, ".weight");
            if (!dot || dot == name || (size_t)(dot - name) > 500) continue;
            char module[512];
            snprintf(module, sizeof module, "%.*s", (int)(dot - name), name);
            int64_t out = 0, in = 0;
            if (module_shape(st, module, &out, &in) || out <= 0 || in <= 0 || out > 4096 || in > 4096) continue;
            lmp_ct_weight w;
            memset(&w, 0, sizeof w);
            if (lmp_ct_find(ct, st, "fuzz.safetensors", module, "Linear", out, in, &w) != 0) {
                if (!lmp_last_error()[0]) __builtin_trap();
                continue;
            }
            if (!w.quantized) continue;
            float *x = malloc((size_t)(out * in) * sizeof *x);
            if (!x) abort();
            if (lmp_ct_dequantize(&w, x) != 0 && !lmp_last_error()[0]) __builtin_trap();
            free(x);
        }
        lmp_st_close(st);
    }
    lmp_ct_free(ct);
    lmp_json_free(qc);
    return 0;
}
