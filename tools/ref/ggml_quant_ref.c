/* ggml_quant_ref.c — a command-line front for ggml's own reference quantizers, so the tests can
 * hold lmpress's quantization grids against ggml's output for the same input.
 *
 *   ggml_quant_ref TYPE NROWS NCOLS IN.f32 OUT.bin DEQ.f32 [IMATRIX.f32]
 *
 * IN.f32 holds NROWS * NCOLS little-endian floats, row-major.  TYPE is one of q8_0 q4_0 q4_1
 * q5_0 q5_1 iq4_nl iq4_xs q2_k q3_k q4_k q5_k q6_k mxfp4 nvfp4 q1_0 q2_0 (the last four need a
 * llama.cpp with GGML_TYPE_MXFP4 .. Q2_0: the pinned 0.3.36 sdist has them).  The matrix goes through ggml_quantize_chunk,
 * the call llama-quantize makes: with no IMATRIX.f32 it reaches the quantize_row_*_ref path (or
 * the type's default search) exactly as llama-quantize without an imatrix does; IMATRIX.f32
 * holds NCOLS floats, one per input column, as llama.cpp's imatrix does.  OUT.bin receives the
 * quantized blocks as ggml lays them out (the bytes of a GGUF tensor), DEQ.f32 their
 * dequantization by ggml's to_float (dequantize_row_*), little-endian.  Exit 0 on success, 2 on
 * bad arguments or input, 1 when a file cannot be written.
 *
 * tools/ref/ggml_quant_ref.sh builds it against ggml.c and ggml-quants.c from the llama.cpp
 * tree vendored in the llama-cpp-python sdist on PyPI; none of ggml's code is in this repo. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ggml.h"

/* The types the tests compare against; the IQ2/IQ1 families would also need an imatrix and a
 * grid setup, and nothing asks for them yet. */
static const char *const TYPES[] = {"q8_0", "q4_0", "q4_1",   "q5_0", "q5_1", "iq4_nl",
                                    "iq4_xs", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                                    "mxfp4", "nvfp4", "q1_0", "q2_0"};

static int usage(const char *msg, const char *arg)
{
    fprintf(stderr, "ggml_quant_ref: %s%s%s\nusage: ggml_quant_ref TYPE NROWS NCOLS IN.f32 OUT.bin DEQ.f32 [IMATRIX.f32]\n"
            "TYPE: q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl iq4_xs q2_k q3_k q4_k q5_k q6_k mxfp4 nvfp4 q1_0 q2_0\n", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

/* ggml's enum value for a name of TYPES, looked up by ggml's own names (which spell the K
 * types "q4_K"), so no enum value is restated here; -1 when the name is not one of TYPES. */
static int type_of(const char *name)
{
    int listed = 0;
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++) listed |= strcasecmp(name, TYPES[i]) == 0;
    if (!listed) return -1;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *n = ggml_type_name((enum ggml_type)t);
        if (n && strcasecmp(n, name) == 0) return t;
    }
    return -1;
}

/* A positive count that fits the arithmetic below, or -1. */
static int64_t count_of(const char *s)
{
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v <= 0 || v > (1LL << 31)) return -1;
    return v;
}

/* Exactly n little-endian floats from path into a new buffer (decoded bytewise, so the harness
 * reads the same numbers on any host); NULL with a message otherwise. */
static float *read_f32(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ggml_quant_ref: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    unsigned char *raw = malloc(n * 4 + 1);
    float *v = malloc(n * sizeof *v);
    const size_t got = raw && v ? fread(raw, 1, n * 4 + 1, f) : 0;
    fclose(f);
    if (!raw || !v || got != n * 4) {
        if (raw && v)
            fprintf(stderr, "ggml_quant_ref: %s holds %s%zu bytes, expected %zu (%zu floats)\n", path,
                    got > n * 4 ? "more than " : "", got > n * 4 ? n * 4 : got, n * 4, n);
        else fprintf(stderr, "ggml_quant_ref: out of memory for %zu floats\n", n);
        free(raw);
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                           (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&v[i], &u, sizeof u);
    }
    free(raw);
    return v;
}

static int write_all(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    if (!ok) fprintf(stderr, "ggml_quant_ref: cannot write %s: %s\n", path, strerror(errno));
    return ok ? 0 : 1;
}

/* n floats as little-endian bytes. */
static int write_f32(const char *path, const float *v, size_t n)
{
    unsigned char *raw = malloc(n * 4);
    if (!raw) return write_all(path, NULL, 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        for (int b = 0; b < 4; b++) raw[4 * i + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    const int st = write_all(path, raw, n * 4);
    free(raw);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) return usage("expected 6 or 7 arguments", NULL);
    const int t = type_of(argv[1]);
    if (t < 0) return usage("unknown TYPE", argv[1]);
    const enum ggml_type type = (enum ggml_type)t;
    const int64_t rows = count_of(argv[2]), cols = count_of(argv[3]);
    if (rows < 0) return usage("NROWS is not a positive count", argv[2]);
    if (cols < 0) return usage("NCOLS is not a positive count", argv[3]);
    /* ggml_quantize_chunk asserts (and aborts) on a row that is not whole blocks */
    if (cols % ggml_blck_size(type)) {
        fprintf(stderr, "ggml_quant_ref: %s needs NCOLS a multiple of %lld, got %lld\n", ggml_type_name(type),
                (long long)ggml_blck_size(type), (long long)cols);
        return 2;
    }
    const char *imatrix_path = argc == 8 ? argv[7] : NULL;
    if (!imatrix_path && ggml_quantize_requires_imatrix(type)) return usage("this TYPE needs an IMATRIX.f32", argv[1]);
    /* an unexpected GGML_ABORT should report and exit, not attach gdb for a backtrace */
    setenv("GGML_NO_BACKTRACE", "1", 1);

    const size_t n = (size_t)rows * (size_t)cols, row_size = ggml_row_size(type, cols), nbytes = (size_t)rows * row_size;
    float *w = read_f32(argv[4], n), *imatrix = imatrix_path ? read_f32(imatrix_path, (size_t)cols) : NULL;
    unsigned char *q = malloc(nbytes);
    float *deq = malloc(n * sizeof *deq);
    int st = 2;
    if (w && (imatrix || !imatrix_path) && q && deq) {
        /* the grid tables of the types that have them (a no-op for the types above; ggml_quantize_chunk
         * calls it too, as llama-quantize's path does) */
        ggml_quantize_init(type);
        const size_t got = ggml_quantize_chunk(type, w, q, 0, rows, cols, imatrix);
        if (got != nbytes) {
            fprintf(stderr, "ggml_quant_ref: ggml_quantize_chunk wrote %zu bytes, expected %zu\n", got, nbytes);
        } else {
            const struct ggml_type_traits *tr = ggml_get_type_traits(type);
            for (int64_t r = 0; r < rows; r++) tr->to_float(q + (size_t)r * row_size, deq + (size_t)r * (size_t)cols, cols);
            st = write_all(argv[5], q, nbytes) || write_f32(argv[6], deq, n);
        }
        ggml_quantize_free();
    } else if (!q || !deq) {
        fprintf(stderr, "ggml_quant_ref: out of memory for %lld x %lld\n", (long long)rows, (long long)cols);
    }
    free(w);
    free(imatrix);
    free(q);
    free(deq);
    return st;
}
