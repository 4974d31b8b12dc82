/* fuzz_gguf.c — libFuzzer entry for core/formats/gguf.c (see README.md in this folder).
 *
 * Parses the input as a GGUF image; when it parses, exercises what a loader would do next:
 * look every key and tensor up by name, read scalars through the typed getters, walk string
 * arrays, and dequantize the first and last block of every tensor (the bytes must be in
 * bounds; ASan checks that).  The fuzzer's copy of the input is exactly `size` bytes, so any
 * read past the image is reported. */
#include "base/error.h"
#include "formats/gguf.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lmp_gguf *g = NULL;
    if (lmp_gguf_parse(data, size, "fuzz.gguf", &g) != 0) {
        /* a failure must leave a message naming the input */
        if (g != NULL || strstr(lmp_last_error(), "fuzz.gguf") == NULL) __builtin_trap();
        return 0;
    }
    volatile float sink = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const lmp_gguf_kv *kv = &g->kv[i];
        if (lmp_gguf_find_kv(g, kv->key) != kv) __builtin_trap();
        int64_t iv;
        double dv;
        const char *s;
        size_t len;
        (void)lmp_gguf_get_int(g, kv->key, &iv);
        (void)lmp_gguf_get_float(g, kv->key, &dv);
        if (lmp_gguf_get_string(g, kv->key, &s, &len) == 0 && len) sink += (float)s[len - 1];
        if (kv->strs)
            for (uint64_t j = 0; j < kv->n; j++)
                if (kv->str_lens[j]) sink += (float)kv->strs[j][kv->str_lens[j] - 1];
    }
    float out[256]; /* the largest block (K-quants) */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const lmp_gguf_tensor *t = &g->tensors[i];
        if (lmp_gguf_find_tensor(g, t->name) != t) __builtin_trap();
        int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; /* checked by the parser */
        const int64_t blck = lmp_ggml_type_block(t->type); /* the parser knows the type */
        if (blck < 1 || blck > 256) __builtin_trap();
        if (lmp_gguf_check_dequantize(t) != 0) {
            /* parsed, but dequantizing must fail cleanly */
            if (nel >= blck && lmp_gguf_dequantize(t, 0, blck, out) == 0) __builtin_trap();
            continue;
        }
        if (nel < blck) continue; /* an empty tensor */
        /* the parser accepted the tensor, so its first and last blocks must dequantize */
        if (lmp_gguf_dequantize(t, 0, blck, out) != 0) __builtin_trap();
        if (lmp_gguf_dequantize(t, nel - blck, blck, out) != 0) __builtin_trap();
        sink += out[0] + out[blck - 1];
    }
    (void)sink;
    lmp_gguf_close(g);
    return 0;
}
