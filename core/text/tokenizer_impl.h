/* tokenizer_impl.h — private to core/tokenizer*.c: the two engines behind tokenizer.h.
 *
 *   tokenizer_sp.c   lmp_sp:  SentencePiece-style BPE with llama2.c's semantics (score-ranked
 *                             merges of codepoint pieces, dummy " " prefix, byte fallback)
 *   tokenizer_bpe.c  lmp_bpe: merge-ranked BPE as Hugging Face tokenizers and llama.cpp run it:
 *                             byte-level (regex pre-tokenizer, byte-to-unicode map) or
 *                             SentencePiece-style (Metaspace, characters, byte fallback), with
 *                             tokenizer_norm.c's normalizers and tokenizer_regex.c's regexes
 *
 * tokenizer.c holds `struct lmp_tokenizer` (a kind tag and one engine) and forwards every public
 * call.  Engine functions get valid, non-NULL arguments; tokenizer.c checks them. */
#ifndef LMP_CORE_TOKENIZER_IMPL_H
#define LMP_CORE_TOKENIZER_IMPL_H

#include "text/sp_vocab.h"
#include "text/tokenizer.h"

typedef struct lmp_sp lmp_sp;
typedef struct lmp_bpe lmp_bpe;

/* ---- tokenizer_sp.c ---- */
/* Reads a whole file into malloc'd *data; errors name the path ("cannot open tokenizer file"). */
int lmp_tok_read_file(const char *path, unsigned char **data, size_t *size);
int lmp_sp_load_llama2c(const char *path, int vocab_size, lmp_sp **out);
/* Builds the engine from a vocabulary; `path` names it in messages. */
int lmp_sp_from_vocab(const char *path, const lmp_sp_vocab *v, lmp_sp **out);
/* tokenizer.ggml.model "llama": tokens + scores (+ token_type, bos/eos, add_bos_token,
 * add_space_prefix, remove_extra_whitespaces). */
int lmp_sp_load_gguf(const lmp_gguf *g, lmp_sp **out);

void lmp_sp_free(lmp_sp *t);
int lmp_sp_vocab_size(const lmp_sp *t);
int lmp_sp_bos(const lmp_sp *t);
int lmp_sp_eos(const lmp_sp *t);
int lmp_sp_adds_bos(const lmp_sp *t);
int lmp_sp_encode(const lmp_sp *t, const char *text, size_t len, int add_bos, int32_t **ids,
                  int64_t *n_ids);
const char *lmp_sp_decode(lmp_sp *t, int prev, int token, size_t *len);

/* ---- tokenizer_bpe.c ---- */
/* tokenizer.ggml.model "gpt2". */
int lmp_bpe_load_gguf(const lmp_gguf *g, lmp_bpe **out);
int lmp_bpe_load_hf(const char *tokenizer_json_path, lmp_bpe **out);
int lmp_bpe_load_gpt2_files(const char *encoder_json, const char *vocab_bpe, lmp_bpe **out);
void lmp_bpe_free(lmp_bpe *t);
int lmp_bpe_vocab_size(const lmp_bpe *t);
int lmp_bpe_bos(const lmp_bpe *t);
int lmp_bpe_eos(const lmp_bpe *t);
int lmp_bpe_adds_bos(const lmp_bpe *t);
const char *lmp_bpe_gguf_pre(const lmp_bpe *t);
int lmp_bpe_encode(const lmp_bpe *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                   int64_t *n_ids);
const char *lmp_bpe_decode(const lmp_bpe *t, int prev, int token, size_t *len);

#endif
