/* test_safetensors.c — core/formats/safetensors.c: (a) the fixtures written by the independent Python
 * writer tools/ref/safetensors_ref.py (tests/golden/safetensors/): every tensor's dtype, shape,
 * shard and f32 values, compared bit for bit with expected.txt, through a directory, a file and
 * an index path; (b) the f16/bf16 converters over all 65536 inputs against an ldexp formula;
 * (c) malformed single files built here (each must fail with a message naming the file, the
 * tensor where there is one, and the problem); (d) broken sharded checkpoints in a temporary
 * directory (missing shard, tensor not in its shard, in the wrong shard, unlisted, unsafe shard
 * name, duplicates across shards). */
#include "base/error.h"
#include "formats/safetensors.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"

#ifndef LMP_SOURCE_DIR
#error "LMP_SOURCE_DIR must be defined"
#endif

#define GOLDEN LMP_SOURCE_DIR "/tests/golden/safetensors"

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- (a) golden fixtures --------------------------------------------------------------------- */

/* Checks checkpoint `ckpt` (opened as st) against expected.txt's entries for it. */
static void check_against_expected(const lmp_safetensors *st, const char *ckpt)
{
    FILE *f = fopen(GOLDEN "/expected.txt", "r");
    ck_assert_msg(f != NULL, "cannot open expected.txt");
    char line[512], tok[8][128];
    int n_checked = 0;
    long want_count = -1, count;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (sscanf(line, "checkpoint %127s %ld", tok[0], &count) == 2) {
            if (!strcmp(tok[0], ckpt)) ck_assert_uint_eq(st->n_tensors, (size_t)(want_count = count));
            continue;
        }
        int ndim, pos;
        if (sscanf(line, "tensor %127s %127s %127s %127s %d%n", tok[0], tok[1], tok[2], tok[3], &ndim, &pos) != 5)
            continue; /* a value line of a tensor we skip */
        if (strcmp(tok[0], ckpt)) continue;
        const lmp_st_tensor *t = lmp_st_find(st, tok[1]);
        ck_assert_msg(t != NULL, "%s: tensor %s not found", ckpt, tok[1]);
        ck_assert_str_eq(t->name, tok[1]);
        ck_assert_str_eq(lmp_st_dtype_name(t->dtype), tok[2]);
        const char *base = strrchr(t->file, '/');
        ck_assert_str_eq(base ? base + 1 : t->file, tok[3]);
        ck_assert_str_eq(st->shards[t->shard].path, t->file);
        ck_assert_int_eq(t->ndim, ndim);
        const char *p = line + pos;
        for (int d = 0; d < ndim; d++) {
            int k;
            long long dim;
            ck_assert_int_eq(sscanf(p, "%lld%n", &dim, &k), 1);
            ck_assert_int_eq(t->shape[d], dim);
            p += k;
        }
        long long numel;
        ck_assert_int_eq(sscanf(p, "%lld", &numel), 1);
        ck_assert_int_eq(t->numel, numel);
        ck_assert_uint_eq(t->nbytes, (size_t)numel * lmp_st_dtype_size(t->dtype));

        float *out = malloc(((size_t)numel + 1) * sizeof *out);
        int rc = lmp_st_to_f32(t, 0, numel, out);
        if (t->dtype != LMP_ST_F32 && t->dtype != LMP_ST_F16 && t->dtype != LMP_ST_BF16) {
            ck_assert_int_eq(rc, LMP_EUNSUPPORTED);
            ck_assert_msg(strstr(lmp_last_error(), "unsupported dtype") && strstr(lmp_last_error(), t->name) &&
                              strstr(lmp_last_error(), t->file),
                          "%s", lmp_last_error());
            free(out);
            n_checked++;
            continue;
        }
        ck_assert_msg(rc == 0, "%s", lmp_last_error());
        for (long long i = 0; i < numel; i++) {
            unsigned want;
            ck_assert(fgets(line, sizeof line, f) != NULL);
            ck_assert_int_eq(sscanf(line, "%x", &want), 1);
            ck_assert_msg(bits_of(out[i]) == want, "%s %s[%lld]: got %08x, want %08x", ckpt, t->name, i,
                          bits_of(out[i]), want);
        }
        /* any sub-range converts to the same values */
        for (int64_t first = 0; first < numel; first += 3) {
            float part[8];
            int64_t n = numel - first < 5 ? numel - first : 5;
            ck_assert_int_eq(lmp_st_to_f32(t, first, n, part), 0);
            for (int64_t i = 0; i < n; i++) ck_assert_uint_eq(bits_of(part[i]), bits_of(out[first + i]));
        }
        free(out);
        n_checked++;
    }
    fclose(f);
    ck_assert_int_eq(n_checked, (int)want_count);
    /* within each shard the tensors come in data-offset order and tile the data section */
    for (size_t i = 1; i < st->n_tensors; i++) {
        const lmp_st_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];
        if (a->shard == b->shard) ck_assert_uint_eq(a->offset + a->nbytes, b->offset);
        else ck_assert_int_lt(a->shard, b->shard);
    }
}

START_TEST(test_golden_single)
{
    const char *paths[] = {GOLDEN "/single", GOLDEN "/single/", GOLDEN "/single/model.safetensors"};
    for (int k = 0; k < 3; k++) {
        lmp_safetensors *st = NULL;
        int rc = lmp_st_open(paths[k], &st);
        ck_assert_msg(rc == 0, "%s", lmp_last_error());
        ck_assert_str_eq(st->path, paths[k]);
        ck_assert_int_eq(st->n_shards, 1);
        ck_assert_ptr_null(st->index);
        ck_assert_str_eq(st->shards[0].path, GOLDEN "/single/model.safetensors");
        check_against_expected(st, "single");

        /* metadata, the scalar, the empty tensor */
        const lmp_json *md = st->shards[0].metadata;
        ck_assert_ptr_nonnull(md);
        ck_assert_str_eq(lmp_json_get(md, "format")->str, "pt");
        const lmp_st_tensor *t = lmp_st_find(st, "scalar");
        ck_assert_int_eq(t->ndim, 0);
        ck_assert_int_eq(t->numel, 1);
        t = lmp_st_find(st, "empty");
        ck_assert_int_eq(t->numel, 0);
        ck_assert_uint_eq(t->nbytes, 0);
        float dummy;
        ck_assert_int_eq(lmp_st_to_f32(t, 0, 0, &dummy), 0);
        ck_assert_ptr_null(lmp_st_find(st, "nope"));
        ck_assert_ptr_null(lmp_st_find(st, "h.f1"));
        ck_assert_ptr_null(lmp_st_find(NULL, "h.f16"));

        /* conversions outside the tensor */
        t = lmp_st_find(st, "w.f32");
        float out[16];
        ck_assert_int_eq(lmp_st_to_f32(t, 7, 2, out), LMP_EINVAL);
        ck_assert_msg(strstr(lmp_last_error(), "model.safetensors: tensor \"w.f32\": cannot convert"), "%s",
                      lmp_last_error());
        ck_assert_int_eq(lmp_st_to_f32(t, -1, 1, out), LMP_EINVAL);
        ck_assert_int_eq(lmp_st_to_f32(t, 0, -1, out), LMP_EINVAL);
        ck_assert_int_eq(lmp_st_to_f32(t, 8, 0, out), 0);
        ck_assert_int_eq(lmp_st_to_f32(t, INT64_MAX, INT64_MAX, out), LMP_EINVAL);
        lmp_st_close(st);
    }
}
END_TEST

START_TEST(test_golden_sharded)
{
    const char *paths[] = {GOLDEN "/sharded", GOLDEN "/sharded/model.safetensors.index.json"};
    for (int k = 0; k < 2; k++) {
        lmp_safetensors *st = NULL;
        int rc = lmp_st_open(paths[k], &st);
        ck_assert_msg(rc == 0, "%s", lmp_last_error());
        ck_assert_int_eq(st->n_shards, 2);
        ck_assert_ptr_nonnull(st->index);
        ck_assert_int_eq(lmp_json_get(lmp_json_get(st->index, "metadata"), "total_size")->integer, 92);
        ck_assert_str_eq(st->shards[0].path, GOLDEN "/sharded/model-00002-of-00002.safetensors"); /* first mentioned */
        ck_assert_str_eq(st->shards[1].path, GOLDEN "/sharded/model-00001-of-00002.safetensors");
        check_against_expected(st, "sharded");
        /* the second shard's header is not padded, so its data is at an odd address */
        const lmp_st_tensor *t = lmp_st_find(st, "lm_head.weight");
        ck_assert_ptr_nonnull(t);
        lmp_st_close(st);
    }
    /* a shard opened on its own is a valid single file */
    lmp_safetensors *st;
    ck_assert_int_eq(lmp_st_open(GOLDEN "/sharded/model-00001-of-00002.safetensors", &st), 0);
    ck_assert_uint_eq(st->n_tensors, 2);
    lmp_st_close(st);
}
END_TEST

/* ---- (b) converters -------------------------------------------------------------------------- */

START_TEST(test_half_converters)
{
    /* binary16: value = (-1)^s * 2^(e-15) * (1 + m/1024), or 2^-14 * m/1024 when e == 0 */
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        float got = lmp_st_f16_to_f32((uint16_t)h);
        if (e == 31 && m) {
            ck_assert(isnan(got));
            ck_assert_uint_eq(bits_of(got), (s << 31) | 0x7F800000u | (m << 13)); /* payload kept */
            continue;
        }
        double want = e == 31 ? INFINITY : e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
        if (s) want = -want;
        ck_assert_msg((double)got == want && !signbit(got) == !signbit(want), "f16 %04x: got %a want %a", h, got, want);
    }
    /* bfloat16: the same formula with 8 exponent bits and 7 mantissa bits */
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t s = b >> 15, e = (b >> 7) & 255, m = b & 127;
        float got = lmp_st_bf16_to_f32((uint16_t)b);
        if (e == 255 && m) {
            ck_assert(isnan(got));
            ck_assert_uint_eq(bits_of(got), b << 16);
            continue;
        }
        double want = e == 255 ? INFINITY : e ? ldexp(1.0 + m / 128.0, (int)e - 127) : ldexp(m / 128.0, -126);
        if (s) want = -want;
        ck_assert_msg((double)got == want && !signbit(got) == !signbit(want), "bf16 %04x: got %a want %a", b, got, want);
    }
    /* signaling NaNs stay signaling (the quiet bit stays clear) */
    ck_assert_uint_eq(bits_of(lmp_st_f16_to_f32(0x7C01)), 0x7F802000u);
    ck_assert_uint_eq(bits_of(lmp_st_bf16_to_f32(0x7F81)), 0x7F810000u);
    ck_assert_str_eq(lmp_st_dtype_name(LMP_ST_BF16), "BF16");
    ck_assert_str_eq(lmp_st_dtype_name((lmp_st_dtype)99), "?");
    ck_assert_uint_eq(lmp_st_dtype_size(LMP_ST_F64), 8);
    ck_assert_uint_eq(lmp_st_dtype_size((lmp_st_dtype)-1), 0);
}
END_TEST

/* ---- (c) malformed single files -------------------------------------------------------------- */

/* An image: 8-byte length of `header`, the header, then data_len bytes. */
static unsigned char *image(const char *header, size_t data_len, size_t *size)
{
    size_t n = strlen(header);
    *size = 8 + n + data_len;
    unsigned char *b = malloc(*size + 1);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)n >> (8 * k));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (unsigned char)(i * 7 + 1);
    return b;
}

static void expect_ok(const char *header, size_t data_len, size_t n_tensors)
{
    size_t size;
    unsigned char *b = image(header, data_len, &size);
    lmp_safetensors *st = NULL;
    int rc = lmp_st_parse(b, size, "ok.safetensors", &st);
    ck_assert_msg(rc == 0, "%s: %s", header, lmp_last_error());
    ck_assert_uint_eq(st->n_tensors, n_tensors);
    lmp_st_close(st);
    free(b);
}

/* Parses the image in memory; the message must name the image and contain each of the
 * (up to three) fragments. */
static void expect_bad_image(const unsigned char *b, size_t size, const char *m1, const char *m2, const char *m3)
{
    lmp_safetensors *st = (lmp_safetensors *)(uintptr_t)1;
    lmp_clear_error();
    int rc = lmp_st_parse(b, size, "bad.safetensors", &st);
    const char *m = lmp_last_error();
    if (getenv("LMP_TEST_VERBOSE")) fprintf(stderr, "  %s\n", m);
    ck_assert_msg(rc < 0, "accepted; expected an error with '%s'", m1);
    ck_assert_ptr_null(st);
    ck_assert_msg(strncmp(m, "bad.safetensors", 15) == 0, "message does not name the file: %s", m);
    const char *want[3] = {m1, m2, m3};
    for (int k = 0; k < 3; k++)
        ck_assert_msg(!want[k] || strstr(m, want[k]), "message '%s' lacks '%s'", m, want[k]);
}

static void expect_bad(const char *header, size_t data_len, const char *m1, const char *m2, const char *m3)
{
    size_t size;
    unsigned char *b = image(header, data_len, &size);
    expect_bad_image(b, size, m1, m2, m3);
    free(b);
}

#define T(name, dtype, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

START_TEST(test_malformed)
{
    /* valid edge cases first, so the bad ones below fail for the reason they name */
    expect_ok("{}", 0, 0);
    expect_ok("{\"__metadata__\":{}}", 0, 0);
    expect_ok("{" T("a", "F32", "[2]", 0, 8) "}        ", 8, 1); /* space padding */
    expect_ok("{" T("z", "F32", "[0, 3]", 0, 0) "," T("a", "F32", "[2]", 0, 8) "}", 8, 2);
    expect_ok("{" T("a", "F32", "[2]", 0, 8) "," T("z", "F32", "[0]", 8, 8) "}", 8, 2);
    expect_ok("{" T("z", "I64", "[0, 9223372036854775807]", 0, 0) "}", 0, 1);
    expect_ok("{" T("a", "F64", "[1,1,1,1,1,1,1,1]", 0, 8) "}", 8, 1);
    expect_ok("{" T("a", "BOOL", "[3]", 0, 3) "," T("b", "C64", "[1]", 3, 11) "," T("c", "F8_E4M3", "[1]", 11, 12)
              "}", 12, 3);

    /* the file itself */
    unsigned char tiny[7] = {2, 0, 0, 0, 0, 0, 0};
    expect_bad_image(tiny, 7, "file too small (7 bytes)", NULL, NULL);
    expect_bad_image(NULL, 0, "file too small (0 bytes)", NULL, NULL);
    unsigned char past[12] = {0xE8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    expect_bad_image(past, sizeof past, "header length 1000 runs past the end of the file (12 bytes)", NULL, NULL);
    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    expect_bad_image(huge, sizeof huge, "header length 9223372036854775808 exceeds the limit", NULL, NULL);
    unsigned char over[16] = {0x01, 0xE1, 0xF5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
    expect_bad_image(over, sizeof over, "header length 100000001 exceeds the limit of 100000000", NULL, NULL);

    /* the header */
    expect_bad("", 0, "header does not start with '{'", NULL, NULL);
    expect_bad("[]", 0, "header does not start with '{'", NULL, NULL);
    expect_bad(" {}", 0, "header does not start with '{'", NULL, NULL);
    expect_bad("{not json}", 0, "bad.safetensors header:1:2: expected a string key", NULL, NULL);
    expect_bad("{\"a\":1", 0, "bad.safetensors header:1:1: unterminated object", NULL, NULL);
    expect_bad("{} x", 0, "header:1:4: trailing characters", NULL, NULL);
    unsigned char nulpad[12] = {4, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, 0}; /* padding must be spaces */
    expect_bad_image(nulpad, sizeof nulpad, "bad.safetensors header:1:3: trailing characters", NULL, NULL);
    expect_bad("{\"__metadata__\":{\"format\":1}}", 0, "\"__metadata__\" value of \"format\" is not a string", NULL,
               NULL);
    expect_bad("{\"__metadata__\":[]}", 0, "\"__metadata__\" is not an object", NULL, NULL);
    expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "\"__metadata__\" appears twice", NULL, NULL);
    expect_bad("{\"a\":5}", 0, "tensor \"a\": entry is not an object", NULL, NULL);
    expect_bad("{\"a\\u0000b\":{}}", 0, "NUL character", NULL, NULL);

    /* tensor entries */
    expect_bad("{" T("w", "F17", "[2]", 0, 8) "}", 8, "tensor \"w\": unknown dtype \"F17\"", NULL, NULL);
    expect_bad("{" T("w", "F4", "[2]", 0, 1) "}", 1, "tensor \"w\": unknown dtype \"F4\"", NULL, NULL);
    expect_bad("{" T("w", "f32", "[2]", 0, 8) "}", 8, "unknown dtype \"f32\"", NULL, NULL);
    expect_bad("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor \"w\": missing \"dtype\"", NULL, NULL);
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "tensor \"w\": missing \"shape\"", NULL, NULL);
    expect_bad("{" T("w", "F32", "[-1, 2]", 0, 8) "}", 8, "tensor \"w\": negative dimension -1 in shape", NULL, NULL);
    expect_bad("{" T("w", "F32", "[1.5]", 0, 8) "}", 8, "tensor \"w\": shape entry 0 is not an integer", NULL, NULL);
    expect_bad("{" T("w", "F32", "[2, \"3\"]", 0, 8) "}", 8, "shape entry 1 is not an integer", NULL, NULL);
    expect_bad("{" T("w", "F32", "[99999999999999999999]", 0, 8) "}", 8, "shape entry 0 is not an integer", NULL, NULL);
    expect_bad("{" T("w", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, "tensor \"w\": shape has 9 dimensions", NULL,
               NULL);
    expect_bad("{" T("w", "F32", "[4294967296, 4294967296]", 0, 8) "}", 8, "tensor \"w\": shape [4294967296, "
               "4294967296] is too large", NULL, NULL);
    expect_bad("{" T("w", "U8", "[4294967296, 4294967296, 2]", 0, 8) "}", 8, "is too large", NULL, NULL);
    expect_bad("{" T("w", "F32", "[2305843009213693952]", 0, 8) "}", 8, "is too large", NULL, NULL); /* 2^61*4 */
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor \"w\": \"data_offsets\" must be", NULL, NULL);
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8, "\"data_offsets\" must be",
               NULL, NULL);
    expect_bad("{" T("w", "F32", "[2]", -8, 0) "}", 8, "\"data_offsets\" must be two non-negative", NULL, NULL);
    expect_bad("{" T("w", "F32", "[2]", 0, 8.0) "}", 8, "\"data_offsets\" must be", NULL, NULL);
    expect_bad("{" T("w", "F32", "[0]", 8, 4) "}", 8, "tensor \"w\": data_offsets [8, 4] end before they begin", NULL,
               NULL);
    /* a header that lies about sizes: file, tensor, declared and actual sizes */
    expect_bad("{" T("w", "F32", "[2, 3]", 0, 20) "}", 20, "tensor \"w\": data_offsets [0, 20] hold 20 bytes",
               "dtype F32 with shape [2, 3] needs 24 bytes", NULL);
    expect_bad("{" T("w", "BF16", "[4]", 0, 16) "}", 16, "hold 16 bytes but dtype BF16 with shape [4] needs 8 bytes",
               NULL, NULL);
    expect_bad("{" T("s", "F32", "[]", 0, 8) "}", 8, "tensor \"s\"", "shape [] needs 4 bytes", NULL);
    /* offsets past the end of the data section */
    expect_bad("{" T("w", "F32", "[2]", 0, 8) "}", 4, "tensor \"w\": data_offsets [0, 8] run past the end of the data "
               "section (4 bytes)", NULL, NULL);
    expect_bad("{" T("w", "F32", "[1]", 18446744073709551612, 18446744073709551616) "}", 4, "\"data_offsets\" must be",
               NULL, NULL);
    /* overlapping, gaps, uncovered tail */
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12,
               "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap", NULL, NULL);
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0, 8) "}", 8, "overlap", NULL, NULL);
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "," T("z", "F32", "[0]", 4, 4) "}", 8,
               "\"a\" [0, 8) and \"z\" [4, 4) overlap", NULL, NULL);
    expect_bad("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12,
               "bytes [4, 8) of the data section belong to no tensor (before \"b\")", NULL, NULL);
    expect_bad("{" T("b", "F32", "[1]", 4, 8) "}", 8, "bytes [0, 4) of the data section belong to no tensor", NULL,
               NULL);
    expect_bad("{" T("a", "F32", "[1]", 0, 4) "}", 8, "the data section has 8 bytes but its tensors cover only the "
               "first 4", NULL, NULL);
    expect_bad("{}", 3, "the data section has 3 bytes", NULL, NULL);
    /* duplicate names (JSON allows duplicate keys; a checkpoint must not) */
    expect_bad("{" T("a", "F32", "[1]", 0, 4) "," T("a", "F32", "[1]", 4, 8) "}", 8,
               "tensor \"a\" appears twice in the header", NULL, NULL);
}
END_TEST

static char g_dir[64];

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

START_TEST(test_malformed_file)
{
    /* the same checks through lmp_st_open name the file by its path */
    char path[256];
    path_in(path, sizeof path, "lies.safetensors");
    size_t size;
    unsigned char *b = image("{" T("model.w", "F16", "[3, 3]", 0, 16) "}", 16, &size);
    lmp_test_spit(path, b, size);
    free(b);
    lmp_safetensors *st = (lmp_safetensors *)(uintptr_t)1;
    ck_assert_int_eq(lmp_st_open(path, &st), LMP_EINVAL);
    ck_assert_ptr_null(st);
    char want[512];
    snprintf(want, sizeof want, "%s: tensor \"model.w\": data_offsets [0, 16] hold 16 bytes but dtype F16 with shape "
             "[3, 3] needs 18 bytes", path);
    ck_assert_msg(strstr(lmp_last_error(), want), "%s", lmp_last_error());

    path_in(path, sizeof path, "empty.safetensors");
    lmp_test_spit(path, "", 0);
    ck_assert_int_eq(lmp_st_open(path, &st), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "empty.safetensors: file too small (0 bytes)"), "%s", lmp_last_error());

    path_in(path, sizeof path, "nothing-here");
    ck_assert_int_eq(lmp_st_open(path, &st), LMP_EIO);
    ck_assert_msg(strstr(lmp_last_error(), "nothing-here: cannot open"), "%s", lmp_last_error());

    path_in(path, sizeof path, "emptydir");
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(lmp_st_open(path, &st), LMP_EIO);
    ck_assert_msg(strstr(lmp_last_error(), "emptydir: no model.safetensors.index.json or model.safetensors"), "%s",
                  lmp_last_error());
    rmdir(path);
}
END_TEST

/* ---- (d) broken sharded checkpoints ------------------------------------------------------------ */

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static void copy_in(const char *src, const char *name)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(src, &n);
    char dst[256];
    path_in(dst, sizeof dst, name);
    lmp_test_spit(dst, b, n);
    free(b);
}

/* Writes index.json with the given weight_map body and expects lmp_st_open to fail with a message
 * naming the index and containing the fragments. */
static void expect_bad_index(const char *weight_map_json, const char *m1, const char *m2)
{
    char idx[256];
    path_in(idx, sizeof idx, "model.safetensors.index.json");
    FILE *f = fopen(idx, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s", weight_map_json);
    fclose(f);
    lmp_safetensors *st = (lmp_safetensors *)(uintptr_t)1;
    lmp_clear_error();
    int rc = lmp_st_open(g_dir, &st);
    const char *m = lmp_last_error();
    if (getenv("LMP_TEST_VERBOSE")) fprintf(stderr, "  %s\n", m);
    ck_assert_msg(rc < 0, "accepted index %s", weight_map_json);
    ck_assert_ptr_null(st);
    ck_assert_msg(strncmp(m, idx, strlen(idx)) == 0, "message does not start with the index path: %s", m);
    ck_assert_msg(!m1 || strstr(m, m1), "message '%s' lacks '%s'", m, m1);
    ck_assert_msg(!m2 || strstr(m, m2), "message '%s' lacks '%s'", m, m2);
}

START_TEST(test_bad_index)
{
    copy_in(GOLDEN "/sharded/" SHARD1, SHARD1);
    copy_in(GOLDEN "/sharded/" SHARD2, SHARD2);
    copy_in(GOLDEN "/single/model.safetensors", "a.safetensors");
    copy_in(GOLDEN "/single/model.safetensors", "b.safetensors");
    const char *good = "{\"weight_map\": {\"lm_head.weight\": \"" SHARD2 "\", \"model.embed.weight\": \"" SHARD1
                       "\", \"model.layers.0.w\": \"" SHARD1 "\", \"model.layers.1.w\": \"" SHARD2 "\"}}";
    char idx[256];
    path_in(idx, sizeof idx, "model.safetensors.index.json");
    lmp_test_spit(idx, good, strlen(good));
    lmp_safetensors *st;
    ck_assert_msg(lmp_st_open(g_dir, &st) == 0, "%s", lmp_last_error());
    ck_assert_uint_eq(st->n_tensors, 4);
    lmp_st_close(st);

    /* a shard that does not exist */
    expect_bad_index("{\"weight_map\": {\"lm_head.weight\": \"" SHARD2 "\", \"model.embed.weight\": \"" SHARD1
                     "\", \"model.layers.0.w\": \"" SHARD1 "\", \"model.layers.1.w\": \"model-00003-of-00002.safetensors\"}}",
                     "shard \"model-00003-of-00002.safetensors\" (listed for tensor \"model.layers.1.w\")",
                     "model-00003-of-00002.safetensors: cannot open: No such file");
    /* a tensor not in its shard */
    expect_bad_index("{\"weight_map\": {\"lm_head.weight\": \"" SHARD2 "\", \"model.embed.weight\": \"" SHARD1
                     "\", \"model.layers.0.w\": \"" SHARD1 "\", \"model.layers.1.w\": \"" SHARD2
                     "\", \"ghost.weight\": \"" SHARD1 "\"}}",
                     "tensor \"ghost.weight\" is listed in shard \"" SHARD1 "\"", "has no such tensor");
    /* listed in the wrong shard */
    expect_bad_index("{\"weight_map\": {\"lm_head.weight\": \"" SHARD1 "\", \"model.embed.weight\": \"" SHARD1
                     "\", \"model.layers.0.w\": \"" SHARD1 "\", \"model.layers.1.w\": \"" SHARD2 "\"}}",
                     "tensor \"lm_head.weight\" is listed in shard \"" SHARD1 "\" but is stored in", SHARD2);
    /* stored but not listed */
    expect_bad_index("{\"weight_map\": {\"lm_head.weight\": \"" SHARD2 "\", \"model.embed.weight\": \"" SHARD1
                     "\", \"model.layers.1.w\": \"" SHARD2 "\"}}",
                     "tensor \"model.layers.0.w\" in", "is not listed in weight_map");
    /* shard names must stay in the directory */
    expect_bad_index("{\"weight_map\": {\"a\": \"../" SHARD1 "\"}}", "weight_map entry for tensor \"a\" is not a "
                     "plain shard file name", NULL);
    expect_bad_index("{\"weight_map\": {\"a\": \"/etc/passwd\"}}", "not a plain shard file name", NULL);
    expect_bad_index("{\"weight_map\": {\"a\": \"..\"}}", "not a plain shard file name", NULL);
    expect_bad_index("{\"weight_map\": {\"a\": \"\"}}", "not a plain shard file name", NULL);
    expect_bad_index("{\"weight_map\": {\"a\": 3}}", "not a plain shard file name", NULL);
    /* the same tensor in two shards */
    expect_bad_index("{\"weight_map\": {\"h.f16\": \"a.safetensors\", \"w.f32\": \"b.safetensors\"}}",
                     "tensor \"b.bf16\" is in both", "a.safetensors and");
    /* not an index */
    expect_bad_index("{\"weightmap\": {}}", "missing \"weight_map\" object", NULL);
    expect_bad_index("[]", "missing \"weight_map\" object", NULL);
    expect_bad_index("{\"weight_map\": {\"a\": \"x\",}}", ":1:26: trailing comma before '}'", NULL);
    /* a broken shard is reported with the shard's own path */
    char bad[256];
    path_in(bad, sizeof bad, "broken.safetensors");
    lmp_test_spit(bad, "\x02\0\0\0\0\0\0\0[]", 10);
    char idxmsg[300];
    snprintf(idxmsg, sizeof idxmsg, "{\"weight_map\": {\"a\": \"broken.safetensors\"}}");
    lmp_safetensors *st2;
    lmp_test_spit(idx, idxmsg, strlen(idxmsg));
    ck_assert_int_eq(lmp_st_open(g_dir, &st2), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "broken.safetensors: header does not start with '{'"), "%s",
                  lmp_last_error());
    /* an empty weight_map is an empty checkpoint */
    lmp_test_spit(idx, "{\"weight_map\": {}}", 18);
    ck_assert_int_eq(lmp_st_open(idx, &st2), 0);
    ck_assert_uint_eq(st2->n_tensors, 0);
    ck_assert_int_eq(st2->n_shards, 0);
    lmp_st_close(st2);
}
END_TEST

static void make_dir(void)
{
    strcpy(g_dir, "/tmp/lmp_st_testXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void remove_dir(void)
{
    const char *names[] = {"lies.safetensors", "empty.safetensors", SHARD1, SHARD2, "a.safetensors", "b.safetensors",
                           "broken.safetensors", "model.safetensors.index.json"};
    char p[256];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        path_in(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("golden");
    tcase_add_test(tc, test_golden_single);
    tcase_add_test(tc, test_golden_sharded);
    tcase_add_test(tc, test_half_converters);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_malformed_file);
    tcase_add_test(tc, test_bad_index);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(safetensors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
