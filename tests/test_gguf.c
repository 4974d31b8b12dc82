/* test_gguf.c — core/formats/gguf.c against
 *  (1) a real vocab-only GGUF v3 file (llama.cpp's ggml-vocab-gpt-2.gguf in data/),
 *  (2) synthetic files written here by a tiny GGUF writer: every metadata type, arrays, v2 and
 *      v3, alignment 32 (default) and 64, every dequantizable tensor type with values computed
 *      here from the format's definition (all 65536 F16 and BF16 bit patterns included),
 *  (3) malformed files: every prefix of a valid file, wrong magic, versions 1 and 4, offsets
 *      past the end, size overflows, bad alignment, huge lengths and counts, duplicates, ...
 *      each must fail with a message naming the file and the problem;
 *  (4) golden values from the independent reference tools/ref/gguf_ref.py (gguf-py's
 *      dequantizer): tests/golden/dequant_fixture.{gguf,txt} bit for bit and, when the model
 *      was fetched, tests/golden/smollm2_dequant.txt;
 *  (5) speed: opening SmolLM2 (98 MB) < 0.1 s, dequantizing all its Q4_1 tensors < 1 s. */
#include "base/error.h"
#include "formats/gguf.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#ifndef LMP_SOURCE_DIR
#error "LMP_SOURCE_DIR must be defined"
#endif
#ifndef LMP_DATA_DIR
#error "LMP_DATA_DIR must be defined"
#endif

#define GPT2_VOCAB LMP_DATA_DIR "/gpt2-tokenizer/ggml-vocab-gpt-2.gguf"
#define FIXTURE LMP_SOURCE_DIR "/tests/golden/dequant_fixture.gguf"
#define FIXTURE_TXT LMP_SOURCE_DIR "/tests/golden/dequant_fixture.txt"
#define SMOLLM2 LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
#define SMOLLM2_TXT LMP_SOURCE_DIR "/tests/golden/smollm2_dequant.txt"

/* ---- small helpers -------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half by its definition (an independent formula, not gguf.c's bit shuffling). */
static double half_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    if (exp == 31) v = mant ? NAN : INFINITY;
    return sign ? -v : v;
}

/* A temporary directory per test; files written there are removed by tmp_cleanup(). */
static char g_dir[64];
static char g_files[64][320];
static int g_nfiles;

static void tmp_init(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/lmp_test_gguf_XXXXXX");
    ck_assert_msg(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno));
    g_nfiles = 0;
}

static void tmp_cleanup(void)
{
    for (int i = 0; i < g_nfiles; i++) unlink(g_files[i]);
    rmdir(g_dir);
}

static const char *tmp_write(const char *name, const void *data, size_t n)
{
    ck_assert_int_lt(g_nfiles, 64);
    char *path = g_files[g_nfiles];
    snprintf(path, sizeof g_files[0], "%s/%s", g_dir, name);
    int known = 0;
    for (int i = 0; i < g_nfiles; i++) known |= strcmp(g_files[i], path) == 0;
    if (!known) g_nfiles++;
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n); /* fwrite(NULL, 1, 0, f) is undefined */
    fclose(f);
    return path;
}

/* ---- a tiny GGUF writer ------------------------------------------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void w_le(wbuf *b, uint64_t v, int nbytes)
{
    unsigned char t[8];
    for (int i = 0; i < nbytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    w_bytes(b, t, (size_t)nbytes);
}

static void w_u8(wbuf *b, uint8_t v) { w_le(b, v, 1); }
static void w_u16(wbuf *b, uint16_t v) { w_le(b, v, 2); }
static void w_u32(wbuf *b, uint32_t v) { w_le(b, v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_le(b, v, 8); }
static void w_f32(wbuf *b, float f) { w_u32(b, f32_bits(f)); }
static void w_f64(wbuf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    w_u64(b, u);
}
static void w_strn(wbuf *b, const char *s, size_t n)
{
    w_u64(b, n);
    w_bytes(b, s, n);
}
static void w_str(wbuf *b, const char *s) { w_strn(b, s, strlen(s)); }
static void w_pad(wbuf *b, size_t align)
{
    while (b->n % align) w_u8(b, 0);
}

static void w_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    w_bytes(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_tensors);
    w_u64(b, n_kv);
}

/* key + type for a scalar; the caller writes the value */
static void w_key(wbuf *b, const char *key, uint32_t type)
{
    w_str(b, key);
    w_u32(b, type);
}

static void w_arr(wbuf *b, const char *key, uint32_t etype, uint64_t n)
{
    w_key(b, key, LMP_GGUF_ARRAY);
    w_u32(b, etype);
    w_u64(b, n);
}

static void w_tinfo(wbuf *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                    uint64_t off)
{
    w_str(b, name);
    w_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) w_u64(b, (uint64_t)ne[d]);
    w_u32(b, type);
    w_u64(b, off);
}

static void wfree(wbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- (1) the real gpt-2 vocabulary ---------------------------------------------------------- */

static int kv_str_eq(const lmp_gguf_kv *kv, uint64_t i, const char *s)
{
    return kv->str_lens[i] == strlen(s) && memcmp(kv->strs[i], s, strlen(s)) == 0;
}

START_TEST(test_gpt2_vocab)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(GPT2_VOCAB, &g) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(g->version, 3);
    ck_assert_uint_eq(g->n_tensors, 0);
    ck_assert_uint_eq(g->n_kv, 16);
    ck_assert_uint_eq(g->alignment, 32);
    ck_assert_str_eq(g->path, GPT2_VOCAB);

    const char *s;
    size_t len;
    ck_assert_int_eq(lmp_gguf_get_string(g, "tokenizer.ggml.model", &s, &len), 0);
    ck_assert_uint_eq(len, 4);
    ck_assert(memcmp(s, "gpt2", 4) == 0);
    ck_assert_int_eq(lmp_gguf_get_string(g, "general.architecture", &s, &len), 0);
    ck_assert(len == 4 && memcmp(s, "gpt2", 4) == 0);

    const lmp_gguf_kv *tok = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(tok->type, LMP_GGUF_ARRAY);
    ck_assert_int_eq(tok->arr_type, LMP_GGUF_STRING);
    ck_assert_uint_eq(tok->n, 50257);
    ck_assert(kv_str_eq(tok, 15496, "Hello"));
    ck_assert(kv_str_eq(tok, 995, "\xc4\xa0world")); /* "Ġworld": GPT-2's byte-level space */
    ck_assert(kv_str_eq(tok, 0, "!"));
    ck_assert(kv_str_eq(tok, 50256, "<|endoftext|>"));

    const lmp_gguf_kv *merges = lmp_gguf_find_kv(g, "tokenizer.ggml.merges");
    ck_assert_ptr_nonnull(merges);
    ck_assert_int_eq(merges->arr_type, LMP_GGUF_STRING);
    ck_assert_uint_eq(merges->n, 50000);
    ck_assert(kv_str_eq(merges, 0, "\xc4\xa0 t"));

    const lmp_gguf_kv *tt = lmp_gguf_find_kv(g, "tokenizer.ggml.token_type");
    ck_assert_ptr_nonnull(tt);
    ck_assert_int_eq(tt->arr_type, LMP_GGUF_INT32);
    ck_assert_uint_eq(tt->n, 50257);
    ck_assert_ptr_nonnull(tt->data);

    int64_t v;
    ck_assert_int_eq(lmp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v), 0);
    ck_assert_int_eq(v, 50256);
    ck_assert_int_eq(lmp_gguf_get_int(g, "gpt2.context_length", &v), 0);
    ck_assert_int_eq(v, 1024);
    double eps;
    ck_assert_int_eq(lmp_gguf_get_float(g, "gpt2.attention.layer_norm_epsilon", &eps), 0);
    ck_assert(eps == (double)1e-5f);

    /* wrong types and missing keys: errors naming the key */
    ck_assert_int_ne(lmp_gguf_get_int(g, "tokenizer.ggml.model", &v), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "tokenizer.ggml.model"));
    ck_assert_int_ne(lmp_gguf_get_string(g, "tokenizer.ggml.tokens", &s, &len), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "array"));
    ck_assert_int_ne(lmp_gguf_get_float(g, "no.such.key", &eps), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "no.such.key"));
    ck_assert_ptr_null(lmp_gguf_find_kv(g, "no.such.key"));
    ck_assert_ptr_null(lmp_gguf_find_tensor(g, "token_embd.weight"));
    lmp_gguf_close(g);
}
END_TEST

/* ---- (2) synthetic files ------------------------------------------------------------------- */

/* Every value type, scalar and array.  n_kv written: 22 (+1 with a custom alignment). */
static uint64_t w_all_metadata(wbuf *b, size_t alignment)
{
    uint64_t n = 0;
    w_key(b, "t.u8", LMP_GGUF_UINT8), w_u8(b, 255), n++;
    w_key(b, "t.i8", LMP_GGUF_INT8), w_u8(b, 0x80), n++;
    w_key(b, "t.u16", LMP_GGUF_UINT16), w_u16(b, 65535), n++;
    w_key(b, "t.i16", LMP_GGUF_INT16), w_u16(b, 0x8000), n++;
    w_key(b, "t.u32", LMP_GGUF_UINT32), w_u32(b, 4000000000u), n++;
    w_key(b, "t.i32", LMP_GGUF_INT32), w_u32(b, (uint32_t)-123456), n++;
    w_key(b, "t.f32", LMP_GGUF_FLOAT32), w_f32(b, 0.1f), n++;
    w_key(b, "t.bool", LMP_GGUF_BOOL), w_u8(b, 1), n++;
    w_key(b, "t.str", LMP_GGUF_STRING), w_strn(b, "a\0b", 3), n++; /* NUL inside a value: fine */
    w_key(b, "t.empty", LMP_GGUF_STRING), w_str(b, ""), n++;
    w_key(b, "t.u64", LMP_GGUF_UINT64), w_u64(b, UINT64_MAX), n++;
    w_key(b, "t.i64", LMP_GGUF_INT64), w_u64(b, (uint64_t)INT64_MIN), n++;
    w_key(b, "t.f64", LMP_GGUF_FLOAT64), w_f64(b, -2.5e300), n++;
    w_arr(b, "a.u8", LMP_GGUF_UINT8, 3), w_u8(b, 1), w_u8(b, 2), w_u8(b, 3), n++;
    w_arr(b, "a.i16", LMP_GGUF_INT16, 2), w_u16(b, (uint16_t)-2), w_u16(b, 7), n++;
    w_arr(b, "a.i32", LMP_GGUF_INT32, 3), w_u32(b, 1), w_u32(b, (uint32_t)-1), w_u32(b, 3), n++;
    w_arr(b, "a.f32", LMP_GGUF_FLOAT32, 2), w_f32(b, 1.5f), w_f32(b, -0.0f), n++;
    w_arr(b, "a.u64", LMP_GGUF_UINT64, 1), w_u64(b, 1ull << 40), n++;
    w_arr(b, "a.f64", LMP_GGUF_FLOAT64, 1), w_f64(b, 3.25), n++;
    w_arr(b, "a.bool", LMP_GGUF_BOOL, 2), w_u8(b, 0), w_u8(b, 1), n++;
    w_arr(b, "a.str", LMP_GGUF_STRING, 4), w_str(b, "x"), w_str(b, ""), w_str(b, "hello"),
        w_strn(b, "\xc4\xa0z", 3), n++;
    w_arr(b, "a.empty", LMP_GGUF_UINT32, 0), n++;
    if (alignment) w_key(b, "general.alignment", LMP_GGUF_UINT32), w_u32(b, (uint32_t)alignment), n++;
    return n;
}

static void check_all_metadata(const lmp_gguf *g)
{
    int64_t v;
    double d;
    const char *s;
    size_t len;
    struct { const char *key; int64_t want; } ints[] = {
        {"t.u8", 255}, {"t.i8", -128}, {"t.u16", 65535}, {"t.i16", -32768},
        {"t.u32", 4000000000ll}, {"t.i32", -123456}, {"t.bool", 1}, {"t.i64", INT64_MIN}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        ck_assert_msg(lmp_gguf_get_int(g, ints[i].key, &v) == 0, "%s", lmp_last_error());
        ck_assert_msg(v == ints[i].want, "%s = %" PRId64, ints[i].key, v);
        ck_assert_uint_eq(lmp_gguf_find_kv(g, ints[i].key)->n, 1);
    }
    /* UINT64_MAX is not an int64, but is a number */
    ck_assert_int_ne(lmp_gguf_get_int(g, "t.u64", &v), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "t.u64"));
    ck_assert_int_eq(lmp_gguf_get_float(g, "t.u64", &d), 0);
    ck_assert(d == 18446744073709551615.0);
    ck_assert_int_eq(lmp_gguf_get_float(g, "t.f32", &d), 0);
    ck_assert(d == (double)0.1f);
    ck_assert_int_eq(lmp_gguf_get_float(g, "t.f64", &d), 0);
    ck_assert(d == -2.5e300);
    ck_assert_int_eq(lmp_gguf_get_float(g, "t.i32", &d), 0);
    ck_assert(d == -123456.0);
    ck_assert_int_ne(lmp_gguf_get_int(g, "t.f32", &v), 0);
    ck_assert_int_ne(lmp_gguf_get_float(g, "t.str", &d), 0);
    ck_assert_int_ne(lmp_gguf_get_int(g, "a.u8", &v), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "a.u8"));

    ck_assert_int_eq(lmp_gguf_get_string(g, "t.str", &s, &len), 0);
    ck_assert(len == 3 && memcmp(s, "a\0b", 3) == 0);
    ck_assert_int_eq(lmp_gguf_get_string(g, "t.empty", &s, &len), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_ne(lmp_gguf_get_string(g, "t.u8", &s, &len), 0);

    const lmp_gguf_kv *kv = lmp_gguf_find_kv(g, "a.u8");
    ck_assert(kv && kv->type == LMP_GGUF_ARRAY && kv->arr_type == LMP_GGUF_UINT8 && kv->n == 3);
    ck_assert(memcmp(kv->data, "\1\2\3", 3) == 0);
    kv = lmp_gguf_find_kv(g, "a.i16");
    ck_assert(kv && kv->arr_type == LMP_GGUF_INT16 && kv->n == 2);
    int16_t i16[2];
    memcpy(i16, kv->data, sizeof i16); /* little-endian host assumed by these two checks */
    ck_assert(i16[0] == -2 && i16[1] == 7);
    kv = lmp_gguf_find_kv(g, "a.i32");
    int32_t i32[3];
    memcpy(i32, kv->data, sizeof i32);
    ck_assert(kv->n == 3 && i32[0] == 1 && i32[1] == -1 && i32[2] == 3);
    kv = lmp_gguf_find_kv(g, "a.f32");
    float f32[2];
    memcpy(f32, kv->data, sizeof f32);
    ck_assert(kv->arr_type == LMP_GGUF_FLOAT32 && f32[0] == 1.5f && f32_bits(f32[1]) == 0x80000000u);
    kv = lmp_gguf_find_kv(g, "a.u64");
    uint64_t u64;
    memcpy(&u64, kv->data, 8);
    ck_assert(kv->arr_type == LMP_GGUF_UINT64 && u64 == 1ull << 40);
    kv = lmp_gguf_find_kv(g, "a.f64");
    memcpy(&d, kv->data, 8);
    ck_assert(kv->arr_type == LMP_GGUF_FLOAT64 && d == 3.25);
    kv = lmp_gguf_find_kv(g, "a.bool");
    ck_assert(kv->arr_type == LMP_GGUF_BOOL && kv->n == 2 && memcmp(kv->data, "\0\1", 2) == 0);
    kv = lmp_gguf_find_kv(g, "a.str");
    ck_assert(kv->arr_type == LMP_GGUF_STRING && kv->n == 4);
    ck_assert(kv_str_eq(kv, 0, "x") && kv_str_eq(kv, 1, "") && kv_str_eq(kv, 2, "hello") &&
              kv_str_eq(kv, 3, "\xc4\xa0z"));
    kv = lmp_gguf_find_kv(g, "a.empty");
    ck_assert(kv && kv->arr_type == LMP_GGUF_UINT32 && kv->n == 0);
}

/* Known tensors: each type, with values defined by the formats, not by gguf.c. */
#define SYN_NT 8
static const char *const syn_names[SYN_NT] = {"w.f32", "w.f16", "w.bf16", "w.q8_0",
                                              "w.q4_0", "w.q4_1", "w.q4_k", "w.q8_k"};
static const uint32_t syn_types[SYN_NT] = {LMP_GGML_F32, LMP_GGML_F16, LMP_GGML_BF16,
                                           LMP_GGML_Q8_0, LMP_GGML_Q4_0, LMP_GGML_Q4_1,
                                           LMP_GGML_Q4_K, LMP_GGML_Q8_K /* parsed, not dequantized */};
static const int64_t syn_ne[SYN_NT][2] = {{64, 3}, {256, 256}, {256, 256}, {64, 2},
                                          {64, 2},  {32, 3},    {256, 1},   {256, 2}};

/* The tensor data for syn tensor i (bytes) — deterministic patterns. */
static void syn_data(int i, wbuf *d)
{
    int64_t nel = syn_ne[i][0] * syn_ne[i][1];
    switch (i) {
    case 0: for (int64_t k = 0; k < nel; k++) w_f32(d, (float)(k - 20) * 0.375f); break;
    case 1: case 2: for (int64_t k = 0; k < nel; k++) w_u16(d, (uint16_t)k); break;
    case 3: /* Q8_0: d, then int8 -128.. */
        for (int64_t blk = 0; blk < nel / 32; blk++) {
            w_u16(d, blk % 2 ? 0x2e66 : 0x3800); /* ~0.1, 0.5 */
            for (int j = 0; j < 32; j++) w_u8(d, (uint8_t)(blk * 32 + j * 8 - 128));
        }
        break;
    case 4: case 5: /* Q4_0 / Q4_1: d, (m), 16 bytes: low nibble j, high nibble 15 - j */
        for (int64_t blk = 0; blk < nel / 32; blk++) {
            w_u16(d, blk % 2 ? 0xb400 : 0x3555); /* -0.25, ~1/3 */
            if (i == 5) w_u16(d, blk % 3 ? 0x4100 : 0xc500); /* 2.5, -5 */
            for (int j = 0; j < 16; j++) w_u8(d, (uint8_t)((j + blk) % 16 | (15 - j) << 4));
        }
        break;
    default: /* Q4_K, Q8_K: arbitrary bytes */
        for (int64_t k = 0; k < nel / 256 * (i == 6 ? 144 : 292); k++)
            w_u8(d, (uint8_t)(k * 37 + 11));
        break;
    }
}

static double syn_expected(int i, int64_t k, const unsigned char *data)
{
    switch (i) {
    case 0: return (double)((float)(k - 20) * 0.375f);
    case 1: return half_value((uint16_t)k);
    case 2: return (double)bits_f32((uint32_t)k << 16);
    case 3: {
        const unsigned char *blk = data + (k / 32) * 34;
        float dd = (float)half_value((uint16_t)(blk[0] | blk[1] << 8));
        return (double)((float)(int8_t)blk[2 + k % 32] * dd);
    }
    default: { /* 4, 5 */
        int q1 = i == 5;
        const unsigned char *blk = data + (k / 32) * (q1 ? 20 : 18);
        float dd = (float)half_value((uint16_t)(blk[0] | blk[1] << 8));
        float m = q1 ? (float)half_value((uint16_t)(blk[2] | blk[3] << 8)) : 0.0f;
        int j = (int)(k % 32);
        unsigned char byte = blk[(q1 ? 4 : 2) + j % 16];
        int nib = j < 16 ? (byte & 15) : (byte >> 4);
        return q1 ? (double)((float)nib * dd + m) : (double)((float)(nib - 8) * dd);
    }
    }
}

/* A synthetic image: all metadata, the SYN_NT tensors (in reverse order of their data, to show
 * offsets need not be increasing), aligned to `alignment` (0: default 32, not written). */
static void build_synthetic(wbuf *b, uint32_t version, size_t alignment)
{
    size_t a = alignment ? alignment : 32;
    wbuf meta = {0}, data = {0};
    uint64_t n_kv = w_all_metadata(&meta, alignment);
    uint64_t off[SYN_NT];
    for (int i = SYN_NT - 1; i >= 0; i--) {
        w_pad(&data, a);
        off[i] = data.n;
        syn_data(i, &data);
    }
    w_header(b, version, SYN_NT, n_kv);
    w_bytes(b, meta.p, meta.n);
    for (int i = 0; i < SYN_NT; i++) w_tinfo(b, syn_names[i], 2, syn_ne[i], syn_types[i], off[i]);
    w_pad(b, a);
    w_bytes(b, data.p, data.n);
    wfree(&meta);
    wfree(&data);
}

static void check_synthetic(const lmp_gguf *g, uint32_t version, size_t alignment)
{
    ck_assert_uint_eq(g->version, version);
    ck_assert_uint_eq(g->alignment, alignment ? alignment : 32);
    ck_assert_uint_eq(g->n_tensors, SYN_NT);
    check_all_metadata(g);
    float *out = malloc(256 * 256 * sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (int i = 0; i < SYN_NT; i++) {
        const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, syn_names[i]);
        ck_assert_ptr_nonnull(t);
        ck_assert_ptr_eq(t, &g->tensors[i]);
        ck_assert_int_eq(t->n_dims, 2);
        ck_assert(t->ne[0] == syn_ne[i][0] && t->ne[1] == syn_ne[i][1] && t->ne[2] == 1 &&
                  t->ne[3] == 1);
        ck_assert_uint_eq((uint32_t)t->type, syn_types[i]);
        /* inside the image, aligned relative to its start */
        const unsigned char *base = g->map;
        ck_assert((const unsigned char *)t->data >= base &&
                  (const unsigned char *)t->data + t->nbytes <= base + g->size);
        ck_assert_uint_eq((size_t)((const unsigned char *)t->data - base) % g->alignment, 0);
        wbuf want = {0};
        syn_data(i, &want);
        ck_assert_uint_eq(t->nbytes, want.n);
        ck_assert(memcmp(t->data, want.p, want.n) == 0);
        int64_t nel = t->ne[0] * t->ne[1];
        if (i >= 6) { /* Q4_K is checked against gguf-py in the golden test */
            int st = lmp_gguf_dequantize(t, 0, nel, out);
            ck_assert_int_eq(st, i == 6 ? 0 : LMP_EUNSUPPORTED);
            if (i == 7) ck_assert_ptr_nonnull(strstr(lmp_last_error(), "dequantizing Q8_K is not supported"));
            wfree(&want);
            continue;
        }
        ck_assert_msg(lmp_gguf_dequantize(t, 0, nel, out) == 0, "%s", lmp_last_error());
        for (int64_t k = 0; k < nel; k++) {
            double e = syn_expected(i, k, want.p);
            if (isnan(e)) {
                /* a NaN stays a NaN with its payload: F16 mantissa << 13, BF16 bits << 16 */
                uint32_t bits = i == 1 ? ((uint32_t)(k & 0x8000) << 16 | 0x7f800000u |
                                          (uint32_t)(k & 0x3ff) << 13)
                                       : (uint32_t)k << 16;
                ck_assert_msg(f32_bits(out[k]) == bits, "%s[%" PRId64 "] = %08x", syn_names[i],
                              k, f32_bits(out[k]));
            } else {
                ck_assert_msg(f32_bits(out[k]) == f32_bits((float)e),
                              "%s[%" PRId64 "] = %.9g, expected %.9g", syn_names[i], k,
                              (double)out[k], e);
            }
        }
        /* a block-aligned window gives the same values */
        int blck = i <= 2 ? 1 : 32;
        float win[64];
        ck_assert_int_eq(lmp_gguf_dequantize(t, nel - 2 * blck, 2 * blck, win), 0);
        ck_assert(memcmp(win, out + nel - 2 * blck, 2 * blck * sizeof *win) == 0);
        wfree(&want);
    }
    free(out);
}

START_TEST(test_synthetic)
{
    tmp_init();
    const uint32_t versions[] = {2, 3};
    const size_t aligns[] = {0, 32, 64};
    for (int vi = 0; vi < 2; vi++)
        for (int ai = 0; ai < 3; ai++) {
            wbuf b = {0};
            build_synthetic(&b, versions[vi], aligns[ai]);
            lmp_gguf *g = NULL;
            /* in memory */
            ck_assert_msg(lmp_gguf_parse(b.p, b.n, "syn", &g) == 0, "%s", lmp_last_error());
            ck_assert_str_eq(g->path, "syn");
            check_synthetic(g, versions[vi], aligns[ai]);
            lmp_gguf_close(g);
            /* from a file (mmap) */
            char name[64];
            snprintf(name, sizeof name, "syn_v%u_a%zu.gguf", versions[vi], aligns[ai]);
            const char *path = tmp_write(name, b.p, b.n);
            ck_assert_msg(lmp_gguf_open(path, &g) == 0, "%s", lmp_last_error());
            ck_assert_uint_eq(g->size, b.n);
            check_synthetic(g, versions[vi], aligns[ai]);
            lmp_gguf_close(g);
            wfree(&b);
        }
    tmp_cleanup();
}
END_TEST

START_TEST(test_dequantize_args)
{
    wbuf b = {0};
    build_synthetic(&b, 3, 0);
    lmp_gguf *g = NULL;
    ck_assert_int_eq(lmp_gguf_parse(b.p, b.n, "syn", &g), 0);
    const lmp_gguf_tensor *q = lmp_gguf_find_tensor(g, "w.q4_1"); /* 96 elements, 3 blocks */
    float out[96];
    ck_assert_int_eq(lmp_gguf_dequantize(q, 0, 96, out), 0);
    ck_assert_int_eq(lmp_gguf_dequantize(q, 96, 0, out), 0);
    ck_assert_int_ne(lmp_gguf_dequantize(q, 0, 31, out), 0); /* not whole blocks */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "w.q4_1"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "block"));
    ck_assert_int_ne(lmp_gguf_dequantize(q, 16, 32, out), 0);
    ck_assert_int_ne(lmp_gguf_dequantize(q, 64, 64, out), 0); /* past the end */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "past"));
    ck_assert_int_ne(lmp_gguf_dequantize(q, -32, 32, out), 0);
    ck_assert_int_ne(lmp_gguf_dequantize(q, INT64_MAX - 31, 32, out), 0);
    ck_assert_int_ne(lmp_gguf_dequantize(NULL, 0, 32, out), 0);
    /* a hand-made tensor whose bytes do not cover its shape */
    lmp_gguf_tensor fake = *q;
    fake.nbytes = 40;
    ck_assert_int_ne(lmp_gguf_dequantize(&fake, 0, 96, out), 0);
    fake.type = (lmp_ggml_type)99;
    ck_assert_int_ne(lmp_gguf_dequantize(&fake, 0, 32, out), 0);
    ck_assert_str_eq(lmp_ggml_type_name(LMP_GGML_Q4_1), "Q4_1");
    ck_assert_str_eq(lmp_ggml_type_name(LMP_GGML_BF16), "BF16");
    ck_assert_str_eq(lmp_ggml_type_name((lmp_ggml_type)13), "Q5_K");
    ck_assert_str_eq(lmp_ggml_type_name((lmp_ggml_type)99), "unknown");
    ck_assert_str_eq(lmp_ggml_type_name((lmp_ggml_type)4), "unknown");
    lmp_gguf_close(g);
    lmp_gguf_close(NULL);
    ck_assert_int_ne(lmp_gguf_parse(b.p, b.n, "syn", NULL), 0);
    ck_assert_int_ne(lmp_gguf_open(NULL, &g), 0);
    wfree(&b);
}
END_TEST

/* ---- (3) malformed files -------------------------------------------------------------------- */

/* A small valid file (metadata of several kinds, two tensors) whose last byte is tensor data,
 * so that every proper prefix is invalid. */
static void build_small(wbuf *b)
{
    int64_t ne_a[2] = {32, 2}, ne_b[1] = {8};
    w_header(b, 3, 2, 5);
    w_key(b, "general.architecture", LMP_GGUF_STRING), w_str(b, "llama");
    w_key(b, "x.count", LMP_GGUF_UINT32), w_u32(b, 7);
    w_arr(b, "x.words", LMP_GGUF_STRING, 3), w_str(b, "ab"), w_str(b, ""), w_str(b, "cde");
    w_arr(b, "x.vals", LMP_GGUF_FLOAT32, 2), w_f32(b, 1.0f), w_f32(b, 2.0f);
    w_key(b, "general.alignment", LMP_GGUF_UINT32), w_u32(b, 64);
    w_tinfo(b, "a", 2, ne_a, LMP_GGML_Q8_0, 0);
    w_tinfo(b, "b", 1, ne_b, LMP_GGML_F32, 128);
    w_pad(b, 64);
    for (int i = 0; i < 2; i++) {
        w_u16(b, 0x3c00);
        for (int j = 0; j < 32; j++) w_u8(b, (uint8_t)j);
    }
    w_pad(b, 64);
    for (int i = 0; i < 8; i++) w_f32(b, (float)i);
}

static const char *const trunc_words[] = {"truncated", "past the end", "larger than", "absurd",
                                          "empty"};

static int has_any_word(const char *msg)
{
    for (size_t i = 0; i < sizeof trunc_words / sizeof *trunc_words; i++)
        if (strstr(msg, trunc_words[i])) return 1;
    return 0;
}

START_TEST(test_every_prefix)
{
    wbuf b = {0};
    build_small(&b);
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_parse(b.p, b.n, "small.gguf", &g) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(g->n_tensors, 2);
    ck_assert_uint_eq(g->alignment, 64);
    lmp_gguf_close(g);
    for (size_t len = 0; len < b.n; len++) {
        /* an exact-size copy, so a read past the prefix is an out-of-bounds read that
         * valgrind/ASan would report */
        unsigned char *p = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(p);
        memcpy(p, b.p, len);
        g = (lmp_gguf *)(uintptr_t)1;
        int st = lmp_gguf_parse(p, len, "small.gguf", &g);
        ck_assert_msg(st != 0, "prefix of %zu bytes (of %zu) parsed", len, b.n);
        ck_assert_ptr_null(g);
        const char *msg = lmp_last_error();
        ck_assert_msg(strstr(msg, "small.gguf") && has_any_word(msg), "prefix %zu: %s", len, msg);
        free(p);
    }
    /* a few of them through the file path too */
    tmp_init();
    const size_t lens[] = {0, 3, 23, 40, b.n / 2, b.n - 1};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        char name[32];
        snprintf(name, sizeof name, "prefix_%zu.gguf", lens[i]);
        const char *path = tmp_write(name, b.p, lens[i]);
        ck_assert_int_ne(lmp_gguf_open(path, &g), 0);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(lmp_last_error(), path) && has_any_word(lmp_last_error()), "%s",
                      lmp_last_error());
    }
    tmp_cleanup();
    wfree(&b);
}
END_TEST

/* Opens img as a file named fname and parses it in memory: both must fail with a message that
 * names the file and contains `word`. */
static void expect_fail(const wbuf *img, const char *fname, const char *word)
{
    const char *path = tmp_write(fname, img->p, img->n);
    lmp_gguf *g = (lmp_gguf *)(uintptr_t)1;
    ck_assert_msg(lmp_gguf_open(path, &g) != 0, "%s: a malformed file opened", fname);
    ck_assert_ptr_null(g);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, path) != NULL, "%s: message does not name the file: %s", fname, msg);
    ck_assert_msg(strstr(msg, word) != NULL, "%s: message lacks '%s': %s", fname, word, msg);
    if (getenv("LMP_TEST_VERBOSE")) fprintf(stderr, "  %s\n", msg);

    unsigned char *p = malloc(img->n ? img->n : 1);
    ck_assert_ptr_nonnull(p);
    if (img->n) memcpy(p, img->p, img->n); /* memcpy from NULL is undefined, even for 0 bytes */
    g = (lmp_gguf *)(uintptr_t)1;
    ck_assert_int_ne(lmp_gguf_parse(p, img->n, fname, &g), 0);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(lmp_last_error(), fname) && strstr(lmp_last_error(), word), "%s",
                  lmp_last_error());
    free(p);
}

/* One F32 tensor "t" of ne = {n0, n1} at offset `off`, with `data_bytes` of data after the
 * padding; extra metadata may be written by `kv` (n_kv pairs). */
static void build_one(wbuf *b, uint32_t version, int64_t n0, int64_t n1, uint32_t type,
                      uint64_t off, size_t data_bytes)
{
    int64_t ne[2] = {n0, n1};
    w_header(b, version, 1, 1);
    w_key(b, "general.architecture", LMP_GGUF_STRING), w_str(b, "llama");
    w_tinfo(b, "t", 2, ne, type, off);
    w_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) w_u8(b, (uint8_t)i);
}

START_TEST(test_malformed)
{
    tmp_init();
    wbuf b = {0};

    /* sanity: the base case of build_one is valid */
    build_one(&b, 3, 8, 2, LMP_GGML_F32, 0, 64);
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_parse(b.p, b.n, "one", &g) == 0, "%s", lmp_last_error());
    lmp_gguf_close(g);
    wfree(&b);

    build_one(&b, 3, 8, 2, LMP_GGML_F32, 0, 64);
    memcpy(b.p, "GGML", 4);
    expect_fail(&b, "magic.gguf", "magic");
    wfree(&b);

    w_bytes(&b, "\x7f" "ELF\2\1\1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
    expect_fail(&b, "elf.gguf", "magic");
    wfree(&b);

    expect_fail(&b, "empty.gguf", "empty"); /* 0 bytes */

    const uint32_t bad_versions[] = {0, 1, 4, 0x03000000u};
    for (int i = 0; i < 4; i++) {
        build_one(&b, bad_versions[i], 8, 2, LMP_GGML_F32, 0, 64);
        char name[32];
        snprintf(name, sizeof name, "version_%" PRIx32 ".gguf", bad_versions[i]);
        expect_fail(&b, name, "version");
        wfree(&b);
    }
    build_one(&b, 0x03000000u, 8, 2, LMP_GGML_F32, 0, 64);
    expect_fail(&b, "bigendian.gguf", "big-endian");
    wfree(&b);

    /* tensor data past the end: offset, or size */
    build_one(&b, 3, 8, 2, LMP_GGML_F32, 64, 64);
    expect_fail(&b, "offset_past_end.gguf", "past the end");
    wfree(&b);
    build_one(&b, 3, 8, 2, LMP_GGML_F32, 0, 63);
    expect_fail(&b, "short_data.gguf", "past the end");
    wfree(&b);
    build_one(&b, 2, 8, 2, LMP_GGML_F32, UINT64_MAX - 31, 64); /* aligned, huge */
    expect_fail(&b, "offset_huge.gguf", "past the end");
    wfree(&b);

    /* size overflows: bytes, and elements */
    build_one(&b, 3, INT64_C(1) << 62, 1, LMP_GGML_F32, 0, 64);
    expect_fail(&b, "data_size_overflow.gguf", "overflow");
    wfree(&b);
    build_one(&b, 3, INT64_C(1) << 32, INT64_C(1) << 32, LMP_GGML_F32, 0, 64);
    expect_fail(&b, "elements_overflow.gguf", "overflow");
    wfree(&b);
    build_one(&b, 3, -1, 1, LMP_GGML_F32, 0, 64); /* ne = 2^64 - 1 */
    expect_fail(&b, "negative_ne.gguf", "negative");
    wfree(&b);

    /* tensor types and shapes */
    build_one(&b, 3, 8, 2, 99, 0, 64);
    expect_fail(&b, "type99.gguf", "unsupported tensor type 99 for 't'");
    wfree(&b);
    build_one(&b, 3, 8, 2, 4 /* retired Q4_2 */, 0, 64);
    expect_fail(&b, "type4.gguf", "unsupported tensor type 4");
    wfree(&b);
    build_one(&b, 3, 48, 1, LMP_GGML_Q4_0, 0, 64);
    expect_fail(&b, "not_block_multiple.gguf", "block size");
    wfree(&b);
    build_one(&b, 3, 8, 2, LMP_GGML_F32, 16, 64);
    expect_fail(&b, "unaligned.gguf", "unaligned");
    wfree(&b);
    {
        int64_t ne[7] = {1, 1, 1, 1, 1, 1, 1};
        w_header(&b, 3, 1, 0);
        w_tinfo(&b, "x", 7, ne, LMP_GGML_F32, 0);
        w_pad(&b, 32);
        w_u32(&b, 0);
        expect_fail(&b, "ndims.gguf", "n_dims 7 > 4");
        wfree(&b);
    }

    /* duplicates */
    {
        int64_t ne[1] = {8};
        w_header(&b, 3, 2, 0);
        w_tinfo(&b, "same", 1, ne, LMP_GGML_F32, 0);
        w_tinfo(&b, "same", 1, ne, LMP_GGML_F32, 32);
        w_pad(&b, 32);
        for (int i = 0; i < 64; i++) w_u8(&b, 0);
        expect_fail(&b, "dup_tensor.gguf", "duplicate tensor name 'same'");
        wfree(&b);
        w_header(&b, 3, 0, 2);
        w_key(&b, "k", LMP_GGUF_UINT8), w_u8(&b, 1);
        w_key(&b, "k", LMP_GGUF_UINT8), w_u8(&b, 2);
        expect_fail(&b, "dup_key.gguf", "duplicate metadata key 'k'");
        wfree(&b);
    }

    /* alignment */
    const uint32_t bad_align[] = {0, 48, 3};
    for (int i = 0; i < 3; i++) {
        w_header(&b, 3, 0, 1);
        w_key(&b, "general.alignment", LMP_GGUF_UINT32), w_u32(&b, bad_align[i]);
        char name[32];
        snprintf(name, sizeof name, "align_%u.gguf", bad_align[i]);
        expect_fail(&b, name, "alignment");
        wfree(&b);
    }
    w_header(&b, 3, 0, 1);
    w_key(&b, "general.alignment", LMP_GGUF_STRING), w_str(&b, "32");
    expect_fail(&b, "align_string.gguf", "alignment");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_key(&b, "general.alignment", LMP_GGUF_INT32), w_u32(&b, (uint32_t)-32);
    expect_fail(&b, "align_negative.gguf", "alignment");
    wfree(&b);

    /* huge lengths and counts */
    w_header(&b, 3, 0, 1);
    w_u64(&b, UINT64_C(1) << 63), w_bytes(&b, "key", 3);
    w_u32(&b, LMP_GGUF_UINT8), w_u8(&b, 0);
    expect_fail(&b, "huge_key.gguf", "string length");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_key(&b, "s", LMP_GGUF_STRING), w_u64(&b, 1000), w_bytes(&b, "short", 5);
    expect_fail(&b, "long_string.gguf", "string length 1000");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_arr(&b, "a", LMP_GGUF_UINT32, UINT64_C(1) << 61), w_u32(&b, 0);
    expect_fail(&b, "huge_array.gguf", "array length");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_arr(&b, "a", LMP_GGUF_STRING, UINT64_MAX), w_str(&b, "x");
    expect_fail(&b, "huge_string_array.gguf", "array length");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_arr(&b, "a", LMP_GGUF_STRING, 3), w_str(&b, "x"), w_u64(&b, UINT64_MAX);
    w_u64(&b, 0), w_u64(&b, 0); /* enough bytes left that the count itself is plausible */
    expect_fail(&b, "bad_string_in_array.gguf", "string length");
    wfree(&b);
    w_header(&b, 3, 0, UINT64_C(1) << 60);
    w_key(&b, "k", LMP_GGUF_UINT8), w_u8(&b, 1);
    expect_fail(&b, "huge_n_kv.gguf", "absurd");
    wfree(&b);
    w_header(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, "huge_n_tensors.gguf", "absurd");
    wfree(&b);

    /* value types */
    w_header(&b, 3, 0, 1);
    w_arr(&b, "nest", LMP_GGUF_ARRAY, 1), w_u32(&b, LMP_GGUF_UINT8), w_u64(&b, 1), w_u8(&b, 0);
    expect_fail(&b, "nested.gguf", "nested arrays");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", 13), w_u64(&b, 0);
    expect_fail(&b, "type13.gguf", "unknown value type 13");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_arr(&b, "k", 77, 1), w_u64(&b, 0);
    expect_fail(&b, "arrtype77.gguf", "unknown array element type 77");
    wfree(&b);
    w_header(&b, 3, 0, 1);
    w_strn(&b, "a\0b", 3), w_u32(&b, LMP_GGUF_UINT8), w_u8(&b, 0);
    expect_fail(&b, "nul_key.gguf", "NUL");
    wfree(&b);
    /* the brief's example message: the key of metadata pair 2 cut short */
    w_header(&b, 3, 0, 3); /* (long keys, so that 3 pairs still look plausible by size) */
    w_key(&b, "a.rather.long.key.number.zero", LMP_GGUF_UINT8), w_u8(&b, 1);
    w_key(&b, "k1", LMP_GGUF_UINT8), w_u8(&b, 1);
    w_u32(&b, 2); /* 4 of the 8 bytes of pair 2's key length */
    expect_fail(&b, "trunc_key.gguf", "while reading the key of metadata pair 2");
    wfree(&b);

    /* files that cannot be opened at all */
    g = (lmp_gguf *)(uintptr_t)1;
    ck_assert_int_ne(lmp_gguf_open("/nonexistent/dir/model.gguf", &g), 0);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "/nonexistent/dir/model.gguf"));
    ck_assert_int_ne(lmp_gguf_open(g_dir, &g), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "not a regular file"));
    tmp_cleanup();
}
END_TEST

/* Some malformed files are fine as long as nothing is read: a vocab-only file without the final
 * padding (as llama.cpp writes them), zero-length arrays, tensors with a zero dimension. */
START_TEST(test_edge_valid)
{
    wbuf b = {0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", LMP_GGUF_UINT8), w_u8(&b, 5); /* ends at byte 36, unpadded */
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_parse(b.p, b.n, "nopad", &g) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(g->n_kv, 1);
    lmp_gguf_close(g);
    wfree(&b);

    w_header(&b, 2, 0, 0);
    ck_assert_int_eq(lmp_gguf_parse(b.p, b.n, "bare", &g), 0);
    ck_assert_uint_eq(g->n_kv + g->n_tensors, 0);
    ck_assert_ptr_null(lmp_gguf_find_kv(g, "x"));
    ck_assert_ptr_null(lmp_gguf_find_tensor(g, "x"));
    lmp_gguf_close(g);
    wfree(&b);

    int64_t ne[2] = {32, 0};
    w_header(&b, 3, 1, 0);
    w_tinfo(&b, "empty", 2, ne, LMP_GGML_Q4_0, 0);
    w_pad(&b, 32);
    ck_assert_msg(lmp_gguf_parse(b.p, b.n, "zero", &g) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(g->tensors[0].nbytes, 0);
    ck_assert_int_eq(lmp_gguf_dequantize(&g->tensors[0], 0, 0, NULL), 0);
    lmp_gguf_close(g);
    wfree(&b);
}
END_TEST

/* ---- (4) golden values from gguf-py ------------------------------------------------------------ */

START_TEST(test_golden_fixture)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(FIXTURE, &g) == 0, "%s", lmp_last_error());
    FILE *f = fopen(FIXTURE_TXT, "r");
    ck_assert_msg(f != NULL, "cannot open %s", FIXTURE_TXT);
    char line[4096];
    int n_tensors = 0;
    unsigned seen_types = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char name[128], type[32];
        long long nel;
        int n_dims, used = 0;
        ck_assert_msg(sscanf(line, "tensor %127s %31s %lld %d%n", name, type, &nel, &n_dims,
                             &used) == 4, "bad line: %s", line);
        const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, name);
        ck_assert_msg(t != NULL, "tensor %s missing", name);
        ck_assert_str_eq(lmp_ggml_type_name(t->type), type);
        ck_assert_int_eq(t->n_dims, n_dims);
        const char *p = line + used;
        for (int d = 0; d < n_dims; d++) {
            char *end;
            long long ne = strtoll(p, &end, 10);
            ck_assert_int_eq(t->ne[d], ne);
            p = end;
        }
        float *out = malloc((size_t)nel * sizeof *out);
        ck_assert_ptr_nonnull(out);
        ck_assert_msg(lmp_gguf_dequantize(t, 0, nel, out) == 0, "%s", lmp_last_error());
        for (long long k = 0; k < nel; k++) {
            unsigned want;
            ck_assert_msg(fscanf(f, "%x", &want) == 1, "%s: value %lld missing", name, k);
            ck_assert_msg(f32_bits(out[k]) == want, "%s %s[%lld] = %08x (%.9g), gguf-py %08x (%.9g)",
                          type, name, k, f32_bits(out[k]), (double)out[k], want,
                          (double)bits_f32(want));
        }
        /* and block by block, from the end */
        int blck = 32;
        if (t->type == LMP_GGML_F32 || t->type == LMP_GGML_F16 || t->type == LMP_GGML_BF16)
            blck = 1;
        else if (t->type == LMP_GGML_Q4_K || t->type == LMP_GGML_Q6_K)
            blck = 256;
        float blk[256];
        for (long long k = nel - blck; k >= 0; k -= blck) {
            ck_assert_int_eq(lmp_gguf_dequantize(t, k, blck, blk), 0);
            ck_assert(memcmp(blk, out + k, (size_t)blck * sizeof *blk) == 0);
        }
        free(out);
        seen_types |= 1u << (t->type % 32);
        n_tensors++;
    }
    fclose(f);
    ck_assert_int_eq(n_tensors, 8);
    ck_assert_uint_eq(seen_types, 1u << LMP_GGML_F32 | 1u << LMP_GGML_F16 | 1u << LMP_GGML_Q4_0 |
                                      1u << LMP_GGML_Q4_1 | 1u << LMP_GGML_Q8_0 |
                                      1u << LMP_GGML_Q4_K | 1u << LMP_GGML_Q6_K |
                                      1u << (LMP_GGML_BF16 % 32));
    /* the fixture's metadata, as written by GGUFWriter */
    const char *s;
    size_t len;
    ck_assert_int_eq(lmp_gguf_get_string(g, "general.architecture", &s, &len), 0);
    ck_assert(len == 12 && memcmp(s, "lmpress-test", 12) == 0);
    int64_t v;
    ck_assert_int_eq(lmp_gguf_get_int(g, "test.count", &v), 0);
    ck_assert_int_eq(v, 7);
    const lmp_gguf_kv *kv = lmp_gguf_find_kv(g, "test.words");
    ck_assert(kv && kv->n == 3 && kv_str_eq(kv, 2, "gamma"));
    lmp_gguf_close(g);
}
END_TEST

/* Dequantizes the whole tensor into a malloc'd buffer. */
static float *dequant_all(const lmp_gguf_tensor *t, int64_t *nel)
{
    *nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *out = malloc((size_t)*nel * sizeof *out);
    ck_assert_ptr_nonnull(out);
    ck_assert_msg(lmp_gguf_dequantize(t, 0, *nel, out) == 0, "%s", lmp_last_error());
    return out;
}

START_TEST(test_golden_smollm2)
{
    if (!file_exists(SMOLLM2)) {
        lmp_test_skip("SKIPPED test_gguf: SmolLM2 golden check: run tools/fetch_smollm2.sh\n");
        fflush(stdout);
        return;
    }
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(SMOLLM2, &g) == 0, "%s", lmp_last_error());
    FILE *f = fopen(SMOLLM2_TXT, "r");
    ck_assert_msg(f != NULL, "cannot open %s", SMOLLM2_TXT);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char name[128], type[32];
        long long nel_want;
        double sum_want;
        unsigned first[8];
        ck_assert_msg(sscanf(line, "tensor %127s %31s %lld %lf %x %x %x %x %x %x %x %x", name,
                             type, &nel_want, &sum_want, &first[0], &first[1], &first[2],
                             &first[3], &first[4], &first[5], &first[6], &first[7]) == 12,
                      "bad line: %s", line);
        const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, name);
        ck_assert_msg(t != NULL, "tensor %s missing", name);
        ck_assert_str_eq(lmp_ggml_type_name(t->type), type);
        int64_t nel;
        float *out = dequant_all(t, &nel);
        ck_assert_int_eq(nel, nel_want);
        for (int k = 0; k < 8; k++)
            ck_assert_msg(f32_bits(out[k]) == first[k], "%s[%d] = %08x, gguf-py %08x", name, k,
                          f32_bits(out[k]), first[k]);
        double sum = 0;
        for (int64_t k = 0; k < nel; k++) sum += out[k];
        ck_assert_msg(fabs(sum - sum_want) <= 1e-6 * fabs(sum_want), "%s: sum %.17g, gguf-py %.17g",
                      name, sum, sum_want);
        free(out);
        n++;
    }
    fclose(f);
    ck_assert_int_ge(n, 6);
    lmp_gguf_close(g);
}
END_TEST

/* ---- (5) speed and the real model's structure ---------------------------------------------- */

START_TEST(test_smollm2_speed)
{
    if (!file_exists(SMOLLM2)) {
        lmp_test_skip("SKIPPED test_gguf: SmolLM2 speed check: run tools/fetch_smollm2.sh\n");
        fflush(stdout);
        return;
    }
    lmp_gguf *g = NULL;
    double t0 = now_s();
    ck_assert_msg(lmp_gguf_open(SMOLLM2, &g) == 0, "%s", lmp_last_error());
    double t_open = now_s() - t0;
    ck_assert_uint_eq(g->version, 3);
    ck_assert_uint_eq(g->n_tensors, 272);
    const char *s;
    size_t len;
    ck_assert_int_eq(lmp_gguf_get_string(g, "general.architecture", &s, &len), 0);
    ck_assert(len == 5 && memcmp(s, "llama", 5) == 0);
    int64_t v;
    ck_assert_int_eq(lmp_gguf_get_int(g, "llama.block_count", &v), 0);
    ck_assert_int_eq(v, 30);
    ck_assert_int_eq(lmp_gguf_get_int(g, "llama.embedding_length", &v), 0);
    ck_assert_int_eq(v, 576);
    const lmp_gguf_kv *tok = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    ck_assert(tok && tok->n == 49152);
    const lmp_gguf_tensor *q = lmp_gguf_find_tensor(g, "blk.0.attn_q.weight");
    ck_assert(q && q->type == LMP_GGML_Q4_1 && q->ne[0] == 576 && q->ne[1] == 576);
    const lmp_gguf_tensor *e = lmp_gguf_find_tensor(g, "token_embd.weight");
    ck_assert(e && e->type == LMP_GGML_Q8_0 && e->ne[0] == 576 && e->ne[1] == 49152);

    size_t max_nel = 0;
    int n_q41 = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const lmp_gguf_tensor *t = &g->tensors[i];
        size_t nel = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (t->type == LMP_GGML_Q4_1 && nel > max_nel) max_nel = nel;
        n_q41 += t->type == LMP_GGML_Q4_1;
    }
    ck_assert_int_eq(n_q41, 210);
    float *out = malloc(max_nel * sizeof *out);
    ck_assert_ptr_nonnull(out);
    double checksum = 0;
    int64_t total = 0;
    t0 = now_s();
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const lmp_gguf_tensor *t = &g->tensors[i];
        if (t->type != LMP_GGML_Q4_1) continue;
        int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        ck_assert_int_eq(lmp_gguf_dequantize(t, 0, nel, out), 0);
        checksum += out[nel - 1];
        total += nel;
    }
    double t_deq = now_s() - t0;
    free(out);
    fprintf(stderr, "test_gguf: SmolLM2 open %.4f s; %d Q4_1 tensors (%" PRId64
            " values) dequantized in %.3f s (checksum %g)\n", t_open, n_q41, total, t_deq,
            checksum);
    lmp_gguf_close(g);
}
END_TEST

static Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("read");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gpt2_vocab);
    tcase_add_test(tc, test_synthetic);
    tcase_add_test(tc, test_dequantize_args);
    tcase_add_test(tc, test_edge_valid);
    suite_add_tcase(s, tc);
    tc = tcase_create("malformed");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_prefix);
    tcase_add_test(tc, test_malformed);
    suite_add_tcase(s, tc);
    tc = tcase_create("golden");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_golden_fixture);
    tcase_add_test(tc, test_golden_smollm2);
    tcase_add_test(tc, test_smollm2_speed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_run(srunner_create(gguf_suite())); }
