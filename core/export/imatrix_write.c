/* imatrix_write.c — see imatrix_write.h.  The layout follows llama.cpp's IMatrixCollector::
 * save_imatrix (tools/imatrix/imatrix.cpp) and gguf_write_to_file: the header, every tensor
 * info, padding to 32, then each tensor's data padded to 32. */
#include "export/imatrix_write.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/outfile.h"
#include "export/gguf_meta.h"

#define ALIGNMENT 32 /* GGUF's default; llama-imatrix sets no general.alignment */

void lmp_imatrix_sums_free(lmp_imatrix_sums *s)
{
    for (int64_t i = 0; s->entries && i < s->n_entries; i++) free(s->entries[i].sum2);
    free(s->entries);
    memset(s, 0, sizeof *s);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const lmp_imatrix_sum *)a)->name, ((const lmp_imatrix_sum *)b)->name);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void pad(lmp_gguf_meta *b)
{
    static const unsigned char zeros[ALIGNMENT];
    lmp_gguf_put_bytes(b, zeros, (ALIGNMENT - b->len % ALIGNMENT) % ALIGNMENT);
}

static void tensor_info(lmp_gguf_meta *b, const char *name, const char *suffix, int64_t n, uint64_t offset)
{
    char full[160];
    const int len = snprintf(full, sizeof full, "%s%s", name, suffix);
    lmp_gguf_put_str(b, full, (size_t)len);
    lmp_gguf_put_u32(b, 1); /* n_dims */
    lmp_gguf_put_u64(b, (uint64_t)n);
    lmp_gguf_put_u32(b, 0); /* GGML_TYPE_F32 */
    lmp_gguf_put_u64(b, offset);
}

static uint64_t padded(uint64_t n) { return (n + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

/* The whole file in memory: a few MB even for a large model (one float per input per weight). */
static int build(const lmp_imatrix_sums *s, lmp_gguf_meta *b)
{
    lmp_gguf_meta kv = {0};
    lmp_gguf_kv_str(&kv, "general.type", "imatrix", 7);
    const char *ds = s->dataset ? s->dataset : "";
    const size_t ds_len = strlen(ds);
    lmp_gguf_kv_strs(&kv, "imatrix.datasets", 1, &ds, &ds_len);
    lmp_gguf_kv_u32(&kv, "imatrix.chunk_count", (uint32_t)s->chunk_count);
    lmp_gguf_kv_u32(&kv, "imatrix.chunk_size", (uint32_t)s->chunk_size);
    lmp_gguf_put_bytes(b, "GGUF", 4);
    lmp_gguf_put_u32(b, 3);
    lmp_gguf_put_u64(b, (uint64_t)(2 * s->n_entries));
    lmp_gguf_put_u64(b, kv.n);
    lmp_gguf_put_bytes(b, kv.data, kv.len);
    int st = lmp_gguf_meta_status(&kv, "imatrix");
    lmp_gguf_meta_free(&kv);
    uint64_t off = 0;
    for (int64_t i = 0; i < s->n_entries; i++) {
        const lmp_imatrix_sum *e = &s->entries[i];
        tensor_info(b, e->name, ".in_sum2", e->n, off);
        off += padded((uint64_t)e->n * 4);
        tensor_info(b, e->name, ".counts", 1, off);
        off += padded(4);
    }
    pad(b);
    for (int64_t i = 0; i < s->n_entries; i++) {
        const lmp_imatrix_sum *e = &s->entries[i];
        for (int64_t j = 0; j < e->n; j++) lmp_gguf_put_u32(b, f32_bits((float)e->sum2[j]));
        pad(b);
        lmp_gguf_put_u32(b, f32_bits((float)e->count));
        pad(b);
    }
    return st ? st : lmp_gguf_meta_status(b, "imatrix");
}

static void write_image(const void *arg, FILE *f)
{
    const lmp_gguf_meta *b = arg;
    fwrite(b->data, 1, b->len, f); /* a short write sets the error flag lmp_outfile_write checks */
}

int lmp_imatrix_write(const char *path, lmp_imatrix_sums *s)
{
    if (s->chunk_count < 0 || s->chunk_count > UINT32_MAX || s->chunk_size < 1 || s->chunk_size > UINT32_MAX)
        return lmp_fail(LMP_EINVAL, "%s: %lld chunks of %lld tokens do not fit the file's uint32 fields", path,
                        (long long)s->chunk_count, (long long)s->chunk_size);
    qsort(s->entries, (size_t)s->n_entries, sizeof *s->entries, by_name);
    for (int64_t i = 0; i < s->n_entries; i++) {
        if (s->entries[i].n < 1 || !s->entries[i].sum2)
            return lmp_fail(LMP_EINVAL, "%s: entry '%s' has no input", path, s->entries[i].name);
        if (i && strcmp(s->entries[i - 1].name, s->entries[i].name) == 0)
            return lmp_fail(LMP_EINVAL, "%s: entry '%s' twice", path, s->entries[i].name);
    }
    lmp_gguf_meta b = {0};
    int st = build(s, &b);
    if (!st) st = lmp_outfile_write(path, write_image, &b);
    lmp_gguf_meta_free(&b);
    return st;
}
