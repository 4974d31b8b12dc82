/* st_write.c — see st_write.h. */
#include "export/st_write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json_write.h"
#include "lmpress/plugin.h"

uint64_t lmp_stw_nbytes(const lmp_stw_tensor *t)
{
    uint64_t n = lmp_st_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n;
}

int lmp_stw_header(FILE *f, const lmp_stw_tensor *t, size_t n)
{
    /* The JSON is made in memory first: its length comes before it in the file. */
    char *json = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&json, &len);
    if (!m) return LMP_ENOMEM;
    uint64_t off = 0;
    fputs("{\"__metadata__\":{\"format\":\"pt\"}", m);
    for (size_t i = 0; i < n; i++) {
        const uint64_t nb = lmp_stw_nbytes(&t[i]);
        fputc(',', m);
        lmp_jw_string(m, t[i].name);
        fprintf(m, ":{\"dtype\":\"%s\",\"shape\":[", lmp_st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++) fprintf(m, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        fprintf(m, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    fputc('}', m);
    if (fclose(m) != 0 || !json) {
        free(json);
        return LMP_ENOMEM;
    }
    const uint64_t padded = (len + 7) / 8 * 8; /* the data section starts 8-aligned */
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(padded >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(json, 1, len, f);
    for (uint64_t i = len; i < padded; i++) fputc(' ', f);
    free(json);
    return 0;
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

uint16_t lmp_stw_f16(float x, int *changed)
{
    const uint32_t sign = (bits_of(x) >> 16) & 0x8000u;
    if (x != x) return (uint16_t)(sign | 0x7E00u);
    const float r = lmp_fp16_round(x);
    if (changed && bits_of(r) != bits_of(x)) *changed = 1;
    if (isinf(r)) return (uint16_t)(sign | 0x7C00u);
    const uint32_t u = bits_of(r), e = (u >> 23) & 0xFFu;
    if (e == 0) return (uint16_t)sign; /* r is a half, so an f32 subnormal can only be 0 */
    if ((int)e - 127 >= -14) return (uint16_t)(sign | ((e - 112u) << 10) | ((u & 0x7FFFFFu) >> 13));
    /* a half subnormal: |r| = m * 2^-24 exactly */
    return (uint16_t)(sign | (uint32_t)(fabsf(r) * 16777216.0f));
}

uint16_t lmp_stw_bf16(float x, int *changed)
{
    const float r = lmp_bf16_round(x);
    if (x != x) return (uint16_t)((bits_of(x) >> 16) | 0x0040u); /* stays a (quiet) NaN */
    if (changed && bits_of(r) != bits_of(x)) *changed = 1;
    return (uint16_t)(bits_of(r) >> 16);
}
