/* llama_logits.h — the base log-probabilities llama-perplexity --kl-divergence-base FILE saves
 * (llama.cpp tools/perplexity/perplexity.cpp: perplexity() with a logits file), read for
 * `lmpress eval MODEL --kl-divergence-base FILE`.
 *
 * Layout, little-endian: "_logits_"; uint32 n_ctx; int32 n_vocab; int32 n_chunk; int32
 * tokens[n_chunk * n_ctx] (the text's ids as tokenized, before llama.cpp puts BOS at each chunk's
 * start); then per chunk, per scored position r = 0 .. n_ctx - 2 - n_ctx/2 (position n_ctx/2 + r,
 * predicting token n_ctx/2 + r + 1), nv = 2 * ((n_vocab + 1) / 2) + 4 uint16: float32 scale, float32
 * min_log_prob, then n_vocab codes q with log p = scale * q + min_log_prob (padded to even).
 * The file's size must be exactly what its header says. */
#ifndef LMP_CORE_LLAMA_LOGITS_H
#define LMP_CORE_LLAMA_LOGITS_H

#include <stdint.h>

typedef struct lmp_llama_logits {
    char *path;
    int fd;
    int64_t n_ctx, n_vocab, n_chunk;
    int32_t *tokens;           /* [n_chunk * n_ctx] */
    int64_t rows;              /* scored positions per chunk: n_ctx - 1 - n_ctx/2 */
    int64_t row_u16;           /* nv */
    int64_t data_offset;       /* of chunk 0's first row */
} lmp_llama_logits;

/* 1 when the file at path starts with "_logits_" (0 when it does not or cannot be read). */
int lmp_llama_logits_is(const char *path);
int lmp_llama_logits_open(const char *path, lmp_llama_logits *out);
/* out[rows, n_vocab] <- chunk c's decoded log-probabilities. */
int lmp_llama_logits_chunk(const lmp_llama_logits *f, int64_t c, float *out);
void lmp_llama_logits_close(lmp_llama_logits *f);

#endif
