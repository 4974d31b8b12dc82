/* sp_vocab.h — a SentencePiece vocabulary, wherever it was read from (a GGUF "llama" vocabulary,
 * a tokenizer.model): what the SentencePiece engine (tokenizer_sp.c) is built from, and what the
 * GGUF exporter writes back. */
#ifndef LMP_CORE_SP_VOCAB_H
#define LMP_CORE_SP_VOCAB_H

#include <stdint.h>

/* Token types are sentencepiece's (GGUF's token_type uses the same numbers). */
enum { LMP_SP_NORMAL = 1, LMP_SP_UNKNOWN = 2, LMP_SP_CONTROL = 3, LMP_SP_USER_DEFINED = 4,
       LMP_SP_UNUSED = 5, LMP_SP_BYTE = 6 };
typedef struct {
    int n;                        /* pieces, > 0 */
    const char *const *piece;     /* [n] UTF-8, not NUL-terminated, "\u2581" for a space ... */
    const uint64_t *piece_len;    /* ... [n] their lengths in bytes */
    const float *score;           /* [n] merge priority */
    const int32_t *type;          /* [n] LMP_SP_*; NULL: all normal */
    int bos_id, eos_id, unk_id;   /* -1: none */
    int adds_bos;                 /* the model's convention: prepend BOS */
    int dummy_prefix;             /* sentencepiece add_dummy_prefix */
    int remove_extra_ws;          /* sentencepiece remove_extra_whitespaces */
} lmp_sp_vocab;

#endif
