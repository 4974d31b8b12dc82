/* llama_logits.c — see llama_logits.h. */
#include "formats/llama_logits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/input_file.h"
#include "formats/gguf_le.h"

#define MAGIC "_logits_"

/* Reads exactly n bytes at off; an error names the file and what was being read. */
static int read_at(const lmp_llama_logits *f, int64_t off, void *buf, size_t n, const char *what)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t k = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + (int64_t)done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return lmp_fail(LMP_EIO, "%s: cannot read %s: %s", f->path, what, k < 0 ? strerror(errno) : "truncated");
        done += (size_t)k;
    }
    return 0;
}

int lmp_llama_logits_is(const char *path)
{
    char why[128], magic[8];
    const int fd = lmp_input_open(path, why, sizeof why);
    if (fd < 0) return 0;
    const int is = pread(fd, magic, 8, 0) == 8 && memcmp(magic, MAGIC, 8) == 0;
    close(fd);
    return is;
}

void lmp_llama_logits_close(lmp_llama_logits *f)
{
    if (f->fd >= 0) close(f->fd);
    free(f->tokens);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

int lmp_llama_logits_open(const char *path, lmp_llama_logits *f)
{
    memset(f, 0, sizeof *f);
    char why[128];
    f->fd = lmp_input_open(path, why, sizeof why);
    if (f->fd < 0) return lmp_fail(LMP_EIO, "%s: cannot open llama-perplexity logits file: %s", path, why);
    if (!(f->path = strdup(path))) return lmp_fail(LMP_ENOMEM, "out of memory");
    unsigned char head[20];
    int st = read_at(f, 0, head, sizeof head, "the header");
    if (st) return st;
    if (memcmp(head, MAGIC, 8) != 0) return lmp_fail(LMP_EINVAL, "%s: not a llama-perplexity logits file", path);
    f->n_ctx = ld32(head + 8);
    f->n_vocab = (int32_t)ld32(head + 12);
    f->n_chunk = (int32_t)ld32(head + 16);
    if (f->n_ctx < 4 || f->n_ctx > (1 << 24) || f->n_vocab < 2 || f->n_vocab > (1 << 24) || f->n_chunk < 1 ||
        f->n_chunk > (1 << 24))
        return lmp_fail(LMP_EINVAL, "%s: n_ctx %lld, n_vocab %lld, n_chunk %lld: not a logits file llama-perplexity "
                        "writes", path, (long long)f->n_ctx, (long long)f->n_vocab, (long long)f->n_chunk);
    f->rows = f->n_ctx - 1 - f->n_ctx / 2;
    f->row_u16 = 2 * ((f->n_vocab + 1) / 2) + 4;
    f->data_offset = 20 + 4 * f->n_ctx * f->n_chunk;
    const int64_t want = f->data_offset + 2 * f->row_u16 * f->rows * f->n_chunk;
    struct stat sb;
    if (fstat(f->fd, &sb) != 0 || (int64_t)sb.st_size != want)
        return lmp_fail(LMP_EINVAL, "%s: %lld bytes, but its header (n_ctx %lld, n_vocab %lld, n_chunk %lld) says %lld",
                        path, (long long)sb.st_size, (long long)f->n_ctx, (long long)f->n_vocab,
                        (long long)f->n_chunk, (long long)want);
    const size_t n_tok = (size_t)(f->n_ctx * f->n_chunk);
    unsigned char *raw = malloc(4 * n_tok);
    f->tokens = malloc(n_tok * sizeof *f->tokens);
    if (!raw || !f->tokens) st = lmp_fail(LMP_ENOMEM, "out of memory for %zu tokens", n_tok);
    if (!st) st = read_at(f, 20, raw, 4 * n_tok, "the tokens");
    for (size_t i = 0; i < n_tok && !st; i++) {
        f->tokens[i] = (int32_t)ld32(raw + 4 * i);
        if (f->tokens[i] < 0 || f->tokens[i] >= f->n_vocab)
            st = lmp_fail(LMP_EINVAL, "%s: token %zu is %d, outside its vocabulary of %lld", path, i,
                          (int)f->tokens[i], (long long)f->n_vocab);
    }
    free(raw);
    return st;
}

int lmp_llama_logits_chunk(const lmp_llama_logits *f, int64_t c, float *out)
{
    const size_t bytes = (size_t)(2 * f->row_u16 * f->rows);
    unsigned char *raw = malloc(bytes);
    if (!raw) return lmp_fail(LMP_ENOMEM, "out of memory");
    int st = read_at(f, f->data_offset + (int64_t)bytes * c, raw, bytes, "the log-probabilities");
    for (int64_t r = 0; r < f->rows && !st; r++) {
        const unsigned char *row = raw + 2 * f->row_u16 * r;
        const float scale = bits_to_f32(ld32(row)), min_log_prob = bits_to_f32(ld32(row + 4));
        if (!(scale >= 0.0f && scale < 1.0f) || !(min_log_prob <= 0.0f && min_log_prob > -1e4f))
            st = lmp_fail(LMP_EINVAL, "%s: chunk %lld, position %lld: scale %g and minimum %g are not llama-perplexity's",
                          f->path, (long long)c, (long long)r, (double)scale, (double)min_log_prob);
        for (int64_t v = 0; v < f->n_vocab && !st; v++)
            out[r * f->n_vocab + v] = scale * (float)ld16(row + 8 + 2 * v) + min_log_prob;
    }
    free(raw);
    return st;
}
