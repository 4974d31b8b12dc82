/* model_llama2c.c — llama2.c version-0 checkpoints (stories*.bin), memory-mapped.
 *
 * Layout: int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len}
 * (vocab_size < 0: an unshared classifier follows), then f32 arrays:
 *   token_embedding [vocab, dim]
 *   rms_att [L, dim]
 *   wq [L, dim, dim]  wk [L, kv_dim, dim]  wv [L, kv_dim, dim]  wo [L, dim, dim]
 *   rms_ffn [L, dim]
 *   w1 [L, hidden, dim]  w2 [L, dim, hidden]  w3 [L, hidden, dim]
 *   rms_final [dim]
 *   freq_cis_real, freq_cis_imag [seq_len, head_dim/2]   (unused: RoPE is recomputed)
 *   wcls [vocab, dim]   only when vocab_size < 0
 * Every weight is [out, in].  The file size must match the header exactly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "model/model.h"

typedef struct llama2c_file {
    void *map;
    size_t size;
} llama2c_file;

static int check_arch(const char *path, const int32_t h[7], lmp_arch *a)
{
    static const char *const field[7] = {"dim", "hidden_dim", "n_layers", "n_heads",
                                         "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++) {
        int64_t v = i == 5 ? (h[i] < 0 ? -(int64_t)h[i] : h[i]) : h[i];
        if (v <= 0 || v > (1 << 24))
            return lmp_fail(LMP_EINVAL, "%s: not a llama2.c checkpoint: header field %s = %d",
                            path, field[i], h[i]);
    }
    *a = (lmp_arch){.family = LMP_FAMILY_LLAMA, .desc = lmp_arch_by_name("llama"), .dim = h[0], .hidden = h[1], .n_layers = h[2],
                    .n_heads = h[3], .n_kv_heads = h[4], .vocab = h[5] < 0 ? -(int64_t)h[5] : h[5],
                    .seq_len = h[6], .norm_eps = 1e-5f, .rope_theta = 10000.0f};
    if (a->dim % a->n_heads || a->n_heads % a->n_kv_heads || (a->dim / a->n_heads) % 2)
        return lmp_fail(LMP_EINVAL,
                        "%s: inconsistent llama2.c header: dim %lld, n_heads %lld, n_kv_heads %lld",
                        path, (long long)a->dim, (long long)a->n_heads, (long long)a->n_kv_heads);
    a->head_dim = a->dim / a->n_heads;
    return 0;
}

static int llama2c_block_copy(const lmp_model *m, int64_t b, lmp_block *out)
{
    return lmp_block_clone(&m->blocks[b], out);
}

static void llama2c_close(lmp_model *m)
{
    llama2c_file *f = m->src_data;
    if (f && f->map) munmap(f->map, f->size);
    free(f);
}

static void llama2c_release_pages(const lmp_model *m)
{
    const llama2c_file *f = m->src_data;
    if (f && f->map) madvise(f->map, f->size, MADV_DONTNEED);
}

static const lmp_model_source llama2c_source = {
    .block_copy = llama2c_block_copy, .close = llama2c_close, .release_pages = llama2c_release_pages};

int lmp_model_open_llama2c(lmp_model *m, int fd, size_t size)
{
    const char *path = m->path;
    int32_t h[7];
    if (size < sizeof h || pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        return lmp_fail(LMP_EINVAL, "%s: file too short for a llama2.c header (%zu bytes)", path,
                        size);
    lmp_arch *a = &m->arch;
    int st = check_arch(path, h, a);
    if (st) return st;
    int shared = h[5] > 0;
    int64_t L = a->n_layers, d = a->dim, kv = a->n_kv_heads * a->head_dim, f = a->hidden;
    int64_t floats = a->vocab * d + L * d + L * d * d + 2 * L * kv * d + L * d * d + L * d +
                     3 * L * f * d + d + a->seq_len * a->head_dim + (shared ? 0 : a->vocab * d);
    int64_t expect = (int64_t)sizeof h + 4 * floats;
    if ((int64_t)size != expect)
        return lmp_fail(LMP_EINVAL,
                        "%s: %s: the header (dim %lld, layers %lld, vocab %lld) needs %lld bytes, "
                        "the file has %zu",
                        path, (int64_t)size < expect ? "truncated llama2.c checkpoint"
                                                     : "not a llama2.c v0 checkpoint",
                        (long long)d, (long long)L, (long long)a->vocab, (long long)expect, size);
    llama2c_file *file = calloc(1, sizeof *file);
    if (!file) return lmp_fail(LMP_ENOMEM, "out of memory");
    m->src = &llama2c_source;
    m->src_data = file;
    file->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (file->map == MAP_FAILED) {
        file->map = NULL;
        return lmp_fail(LMP_EIO, "%s: mmap failed: %s", path, strerror(errno));
    }
    file->size = size;
    float *p = (float *)((char *)file->map + sizeof h);
    m->tok_emb = p;
    p += a->vocab * d;
    float *rms_att = p; p += L * d;
    float *wq = p; p += L * d * d;
    float *wk = p; p += L * kv * d;
    float *wv = p; p += L * kv * d;
    float *wo = p; p += L * d * d;
    float *rms_ffn = p; p += L * d;
    float *w1 = p; p += L * f * d;
    float *w2 = p; p += L * d * f;
    float *w3 = p; p += L * f * d;
    m->final_norm_w = p; p += d;
    p += a->seq_len * a->head_dim; /* freq_cis_real and _imag */
    m->lm_head = shared ? m->tok_emb : p;
    m->format = "llama2.c v0";

    /* The blocks are views into the (read-only) mapping: the file is already f32. */
    m->blocks = calloc((size_t)L, sizeof *m->blocks);
    if (!m->blocks) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t l = 0; l < L; l++) {
        lmp_block *b = &m->blocks[l];
        if ((st = lmp_block_init(b, (int)l, a))) return st;
        float *w[LMP_ROLE_COUNT] = {wq + l * d * d, wk + l * kv * d, wv + l * kv * d,
                                    wo + l * d * d, w1 + l * f * d,  w3 + l * f * d,
                                    w2 + l * d * f};
        for (int i = 0; i < b->n_linears; i++) b->linears[i].w = w[b->linears[i].role];
        b->norms[0].w = rms_att + l * d;
        b->norms[1].w = rms_ffn + l * d;
    }
    return 0;
}
