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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "model.h"

static const char *const linear_names[LMP_ROLE_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

static char *fmt_name(int layer, const char *leaf)
{
    char buf[128];
    snprintf(buf, sizeof buf, "model.layers.%d.%s", layer, leaf);
    return strdup(buf);
}

/* Fills the block's tables; weight pointers are set by the caller. */
static int init_llama_block(lmp_block *b, int index, const lmp_arch *a)
{
    memset(b, 0, sizeof *b);
    b->index = index;
    b->n_blocks = (int)a->n_layers;
    b->n_linears = LMP_ROLE_COUNT;
    b->n_norms = 2;
    b->linears = calloc(LMP_ROLE_COUNT, sizeof *b->linears);
    b->norms = calloc(2, sizeof *b->norms);
    if (!b->linears || !b->norms) return lmp_fail(LMP_ENOMEM, "out of memory");
    int64_t kv = a->n_kv_heads * a->head_dim;
    const int64_t shape[LMP_ROLE_COUNT][2] = {
        {a->dim, a->dim}, {kv, a->dim},        {kv, a->dim},       {a->dim, a->dim},
        {a->hidden, a->dim}, {a->hidden, a->dim}, {a->dim, a->hidden}};
    for (int r = 0; r < LMP_ROLE_COUNT; r++) {
        lmp_linear *l = &b->linears[r];
        l->name = fmt_name(index, linear_names[r]);
        l->role = (lmp_role)r;
        l->out = shape[r][0];
        l->in = shape[r][1];
        l->weight_bits = 32.0;
        if (!l->name) return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    b->norms[0] = (lmp_norm){.name = fmt_name(index, "input_layernorm"), .dim = a->dim, .n_fed = 3,
                             .fed = {LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V}};
    b->norms[1] = (lmp_norm){.name = fmt_name(index, "post_attention_layernorm"), .dim = a->dim,
                             .n_fed = 2, .fed = {LMP_ROLE_GATE, LMP_ROLE_UP}};
    if (!b->norms[0].name || !b->norms[1].name) return lmp_fail(LMP_ENOMEM, "out of memory");
    return 0;
}

static void free_block_tables(lmp_block *b)
{
    for (int i = 0; b->linears && i < b->n_linears; i++) free((char *)b->linears[i].name);
    for (int i = 0; b->norms && i < b->n_norms; i++) free((char *)b->norms[i].name);
    free(b->linears);
    free(b->norms);
}

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
    *a = (lmp_arch){.dim = h[0], .hidden = h[1], .n_layers = h[2], .n_heads = h[3],
                    .n_kv_heads = h[4], .vocab = h[5] < 0 ? -(int64_t)h[5] : h[5],
                    .seq_len = h[6], .norm_eps = 1e-5f, .rope_theta = 10000.0f};
    if (a->dim % a->n_heads || a->n_heads % a->n_kv_heads || (a->dim / a->n_heads) % 2)
        return lmp_fail(LMP_EINVAL,
                        "%s: inconsistent llama2.c header: dim %lld, n_heads %lld, n_kv_heads %lld",
                        path, (long long)a->dim, (long long)a->n_heads, (long long)a->n_kv_heads);
    a->head_dim = a->dim / a->n_heads;
    return 0;
}

static int load_llama2c(const char *path, int fd, size_t size, lmp_model *m)
{
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
    m->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return lmp_fail(LMP_EIO, "%s: mmap failed: %s", path, strerror(errno));
    }
    m->map_size = size;
    float *p = (float *)((char *)m->map + sizeof h);
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
    m->final_norm = p; p += d;
    p += a->seq_len * a->head_dim; /* freq_cis_real and _imag */
    m->lm_head = shared ? m->tok_emb : p;
    m->format = "llama2.c v0";

    m->blocks = calloc((size_t)L, sizeof *m->blocks);
    if (!m->blocks) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t l = 0; l < L; l++) {
        lmp_block *b = &m->blocks[l];
        if ((st = init_llama_block(b, (int)l, a))) return st;
        float *w[LMP_ROLE_COUNT] = {wq + l * d * d, wk + l * kv * d, wv + l * kv * d,
                                    wo + l * d * d, w1 + l * f * d,  w3 + l * f * d,
                                    w2 + l * d * f};
        for (int r = 0; r < LMP_ROLE_COUNT; r++) b->linears[r].w = w[r];
        b->norms[0].w = rms_att + l * d;
        b->norms[1].w = rms_ffn + l * d;
    }
    return 0;
}

int lmp_model_load(const char *path, lmp_model **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: cannot open model: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return lmp_fail(LMP_EIO, "%s: not a regular file", path);
    }
    char magic[4] = {0};
    if (pread(fd, magic, 4, 0) == 4) {
        const char *other = memcmp(magic, "GGUF", 4) == 0   ? "GGUF"
                            : memcmp(magic, "ak42", 4) == 0 ? "llama2.c version-1 export"
                                                            : NULL;
        if (other) {
            close(fd);
            return lmp_fail(LMP_EINVAL, "%s: %s files are not supported yet", path, other);
        }
    }
    lmp_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        close(fd);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    int st = load_llama2c(path, fd, (size_t)sb.st_size, m);
    close(fd);
    if (st) {
        lmp_model_free(m);
        return st;
    }
    *out = m;
    return 0;
}

void lmp_model_free(lmp_model *m)
{
    if (!m) return;
    for (int64_t l = 0; m->blocks && l < m->arch.n_layers; l++) free_block_tables(&m->blocks[l]);
    free(m->blocks);
    if (m->map) munmap(m->map, m->map_size);
    free(m->path);
    free(m);
}

int64_t lmp_model_block_linear_params(const lmp_model *m)
{
    int64_t n = 0;
    for (int64_t l = 0; l < m->arch.n_layers; l++)
        for (int i = 0; i < m->blocks[l].n_linears; i++)
            n += m->blocks[l].linears[i].out * m->blocks[l].linears[i].in;
    return n;
}

static float *dup_floats(const float *src, int64_t n)
{
    if (!src) return NULL;
    float *p = malloc((size_t)n * sizeof *p);
    if (p) memcpy(p, src, (size_t)n * sizeof *p);
    return p;
}

int lmp_block_clone(const lmp_block *src, lmp_block *dst)
{
    *dst = *src;
    dst->linears = calloc((size_t)src->n_linears, sizeof *dst->linears);
    dst->norms = calloc((size_t)src->n_norms, sizeof *dst->norms);
    if (!dst->linears || !dst->norms) goto oom;
    for (int i = 0; i < src->n_linears; i++) {
        const lmp_linear *s = &src->linears[i];
        lmp_linear *d = &dst->linears[i];
        *d = *s;
        d->name = strdup(s->name);
        d->w = dup_floats(s->w, s->out * s->in);
        d->b = dup_floats(s->b, s->out);
        d->params = NULL;
        d->stats = NULL;
        if (!d->name || !d->w || (s->b && !d->b)) goto oom;
    }
    for (int i = 0; i < src->n_norms; i++) {
        const lmp_norm *s = &src->norms[i];
        lmp_norm *d = &dst->norms[i];
        *d = *s;
        d->name = strdup(s->name);
        d->w = dup_floats(s->w, s->dim);
        d->b = dup_floats(s->b, s->dim);
        if (!d->name || !d->w || (s->b && !d->b)) goto oom;
    }
    return 0;
oom:
    lmp_block_free(dst);
    return lmp_fail(LMP_ENOMEM, "out of memory cloning block %d", src->index);
}

void lmp_block_free(lmp_block *b)
{
    for (int i = 0; b->linears && i < b->n_linears; i++) {
        free(b->linears[i].w);
        free(b->linears[i].b);
    }
    for (int i = 0; b->norms && i < b->n_norms; i++) {
        free(b->norms[i].w);
        free(b->norms[i].b);
    }
    free_block_tables(b);
    memset(b, 0, sizeof *b);
}
