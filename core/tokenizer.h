/* tokenizer.h — llama2.c's SentencePiece-style BPE tokenizer (tok512.bin, tokenizer.bin).
 *
 * File format (llama2.c): int32 max_token_length; then vocab_size times
 * { float32 score; int32 len; len bytes of the piece }.  vocab_size comes from the model.
 *
 * encode() has exactly llama2.c's semantics: optional BOS (id 1); if the text is non-empty a
 * dummy-prefix " " token; then one token per UTF-8 codepoint when the codepoint is in the
 * vocabulary, else one token per byte with id = byte + 3 (byte fallback); then repeatedly merge
 * the adjacent pair whose concatenation is in the vocabulary with the highest score, leftmost on
 * ties.  Implemented with a heap over a linked list: O(n log n) rather than llama2.c's O(n^2). */
#ifndef LMP_CORE_TOKENIZER_H
#define LMP_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct lmp_tokenizer lmp_tokenizer;

/* Loads a llama2.c tokenizer file with vocab_size entries.  Errors name the file and problem. */
int lmp_tokenizer_load_llama2c(const char *path, int vocab_size, lmp_tokenizer **out);
void lmp_tokenizer_free(lmp_tokenizer *t);

int lmp_tokenizer_vocab_size(const lmp_tokenizer *t);
int lmp_tokenizer_bos(const lmp_tokenizer *t); /* 1 for llama2.c vocabularies */
int lmp_tokenizer_eos(const lmp_tokenizer *t); /* 2 */

/* Tokenizes text[0..len) (any bytes; NUL is an ordinary byte).  *ids is malloc'd; the caller
 * frees it.  Fails (naming the byte offset) only where a byte has no token and no fallback. */
int lmp_tokenize(const lmp_tokenizer *t, const char *text, size_t len, int add_bos,
                 int32_t **ids, int64_t *n_ids);

/* llama2.c decode(): the bytes to print for `token` following `prev`: a leading space is dropped
 * after BOS, and "<0xXX>" pieces become that single byte.  Returns a pointer valid until the
 * next call on this tokenizer; *len receives the length. */
const char *lmp_tokenizer_decode(lmp_tokenizer *t, int prev, int token, size_t *len);

#endif
