/* tokenizer.h — text <-> token ids.  One type, lmp_tokenizer, for two kinds of tokenizer:
 *
 * LMP_TOKENIZER_SENTENCEPIECE: llama2.c's SentencePiece-style BPE (tok512.bin, tokenizer.bin;
 *   also a GGUF "llama" vocabulary).  llama2.c file format: int32 max_token_length; then
 *   vocab_size times { float32 score; int32 len; len bytes of the piece }; vocab_size comes from
 *   the model.  encode() has exactly llama2.c's semantics: optional BOS (id 1); if the text is
 *   non-empty a dummy-prefix " " token; then one token per UTF-8 codepoint when the codepoint is
 *   in the vocabulary, else one token per byte with id = byte + 3 (byte fallback); then
 *   repeatedly merge the adjacent pair whose concatenation is in the vocabulary with the highest
 *   score, leftmost on ties.  Implemented with a heap over a linked list: O(n log n) rather than
 *   llama2.c's O(n^2).  (core/text/tokenizer_sp.c)
 *
 * LMP_TOKENIZER_BPE: merge-ranked BPE as Hugging Face `tokenizers` runs it, from a GGUF "gpt2"
 *   vocabulary, a tokenizer.json, or GPT-2's encoder.json + vocab.bpe.  Encoding is token for
 *   token what `tokenizers` produces: added tokens are split off first, each piece between them
 *   is normalized (NFC/NFKC, Replace, Prepend: tokenizer_norm.c), pre-tokenized (GPT-2's and
 *   Llama 3's regexes by hand-written matchers, any other Split regex by PCRE2
 *   (tokenizer_regex.c), digits isolated, or Metaspace) and merged by rank.  Byte-level models
 *   (GPT-2, SmolLM2, Llama 3, Qwen2) map each word's bytes to their byte-level characters;
 *   SentencePiece-style ones (Llama 2, Mistral, Gemma tokenizer.json: no ByteLevel step) start
 *   from UTF-8 characters with byte_fallback to <0xXX> tokens.  No BOS is added unless asked
 *   for.  (core/text/tokenizer_bpe.c; docs/tokenizers.md lists what is read and refused.)
 *
 * Added / special tokens (BPE): the tokens of tokenizer.json "added_tokens" and the GGUF tokens
 * of type CONTROL, USER_DEFINED or UNKNOWN are matched in the raw text before pre-tokenization
 * (leftmost, then longest; HF's lstrip/rstrip/single_word honoured).  Non-special ones (HF
 * "special": false, GGUF USER_DEFINED) are always matched, as both HF and llama.cpp do.  Special
 * ones (HF "special": true, GGUF CONTROL/UNKNOWN; GPT-2 files: <|endoftext|>) are matched only
 * with LMP_TOKENIZE_PARSE_SPECIAL: by default text is data, so a document containing the string
 * "<|endoftext|>" is tokenized as those characters (llama.cpp's parse_special=false, which its
 * perplexity tool and test-tokenizer-0 use; tiktoken refuses such text by default).  Pass the
 * flag to get HF `tokenizer.encode()`'s behaviour (chat templates, prompts with control tokens).
 *
 * Text is any bytes (NUL is ordinary).  For BPE, invalid UTF-8 bytes are pre-tokenized as
 * one-byte "other" characters (HF cannot take such text at all; llama.cpp substitutes U+FFFD). */
#ifndef LMP_CORE_TOKENIZER_H
#define LMP_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct lmp_tokenizer lmp_tokenizer;
typedef struct lmp_gguf lmp_gguf; /* gguf.h */

typedef enum {
    LMP_TOKENIZER_SENTENCEPIECE = 1, /* llama2.c / GGUF "llama" */
    LMP_TOKENIZER_BPE = 2,           /* byte-level BPE: GGUF "gpt2", tokenizer.json, GPT-2 files */
} lmp_tokenizer_kind;

/* Loads a llama2.c tokenizer file with vocab_size entries.  Errors name the file and problem. */
int lmp_tokenizer_load_llama2c(const char *path, int vocab_size, lmp_tokenizer **out);

/* The tokenizer stored in a GGUF file's metadata.  tokenizer.ggml.model "gpt2": byte-level BPE
 * from tokenizer.ggml.tokens / merges / token_type, pre-tokenizer tokenizer.ggml.pre ("gpt-2",
 * "smollm", "llama-bpe", "qwen2", ... as llama.cpp maps them (docs/tokenizers.md); missing =
 * GPT-2's regex; unknown = error naming it), bos/eos ids, add_bos_token (default no).  "llama":
 * sentencepiece's BPE on tokens + scores (llama2.c's algorithm; "\u2581" in pieces and text read
 * as " "; control/byte/unused tokens never produced from text; add_bos_token and
 * add_space_prefix default yes; remove_extra_whitespaces as sentencepiece).  Anything else is an "unsupported tokenizer model" error. */
int lmp_tokenizer_load_gguf(const lmp_gguf *g, lmp_tokenizer **out);

/* A Hugging Face tokenizer.json with model.type "BPE": byte-level (a ByteLevel pre-tokenizer,
 * alone or after Split/Digits steps, and a ByteLevel decoder) or SentencePiece-style
 * (Metaspace or no pre-tokenizer, byte_fallback), with the normalizers of tokenizer_norm.h.
 * Anything else (WordPiece, Unigram, an unknown normalizer, pre-tokenizer, decoder or model
 * option, ...) is an error naming the file and the key.
 * BOS: a TemplateProcessing post_processor that starts with a special token sets it and
 * lmp_tokenizer_adds_bos(); otherwise bos/eos come from a tokenizer_config.json in the same
 * folder ("bos_token"/"eos_token") if there is one, else from an "<|endoftext|>" added token. */
int lmp_tokenizer_load_hf(const char *tokenizer_json_path, lmp_tokenizer **out);

/* A SentencePiece tokenizer.model (BPE type; text/spm_model.c says what is refused), run with
 * the engine of GGUF "llama" vocabularies.  add_bos: the folder's convention
 * (tokenizer_config.json's add_bos_token; sentencepiece itself never adds BOS). */
int lmp_tokenizer_load_spm(const char *path, int add_bos, lmp_tokenizer **out);

/* GPT-2's original files: encoder.json ({"token": id}) and vocab.bpe ("#version" line, then one
 * "a b" merge per line).  <|endoftext|> (if present) is the special token, BOS and EOS. */
int lmp_tokenizer_load_gpt2_files(const char *encoder_json, const char *vocab_bpe,
                                  lmp_tokenizer **out);

void lmp_tokenizer_free(lmp_tokenizer *t);

lmp_tokenizer_kind lmp_tokenizer_get_kind(const lmp_tokenizer *t);
int lmp_tokenizer_vocab_size(const lmp_tokenizer *t);
int lmp_tokenizer_bos(const lmp_tokenizer *t); /* 1 for llama2.c vocabularies; -1 if none */
int lmp_tokenizer_eos(const lmp_tokenizer *t); /* 2 for llama2.c vocabularies; -1 if none */
/* Whether this tokenizer's convention prepends BOS: llama2.c yes; GGUF per
 * tokenizer.ggml.add_bos_token; tokenizer.json per its post_processor template; GPT-2 files no. */
int lmp_tokenizer_adds_bos(const lmp_tokenizer *t);

/* BPE: the name of this tokenizer's pre-tokenization as GGUF's tokenizer.ggml.pre gives it
 * ("gpt-2", "smollm", "llama-bpe", "dbrx", "qwen2"), one that llama.cpp and lmp_tokenizer_load_gguf
 * read back as the same pre-tokenization (Qwen2's NFC aside: GGUF has no normalizer, llama.cpp's
 * converter drops it too); NULL when none does (a ByteLevel add_prefix_space, another
 * normalizer or regex, ignore_merges without Llama 3's regex, a SentencePiece-style model). */
const char *lmp_tokenizer_gguf_pre(const lmp_tokenizer *t);

/* Tokenizes text[0..len) (any bytes; NUL is an ordinary byte).  add_bos: prepend BOS (pass
 * lmp_tokenizer_adds_bos(t) to follow the model's convention).  Special tokens are not parsed
 * (see the top of this file).  *ids is malloc'd; the caller frees it.  Fails (naming the byte
 * offset) only where a byte has no token and no fallback, or when BOS is asked for and the
 * vocabulary has none. */
int lmp_tokenize(const lmp_tokenizer *t, const char *text, size_t len, int add_bos,
                 int32_t **ids, int64_t *n_ids);

enum {
    LMP_TOKENIZE_ADD_BOS = 1u,       /* prepend BOS */
    LMP_TOKENIZE_PARSE_SPECIAL = 2u, /* BPE: also match special added tokens in the text */
};
/* lmp_tokenize with flags (LMP_TOKENIZE_*). */
int lmp_tokenize_ex(const lmp_tokenizer *t, const char *text, size_t len, unsigned flags,
                    int32_t **ids, int64_t *n_ids);

/* The bytes to print for `token` following `prev`.  SentencePiece kind: llama2.c's decode(): a
 * leading space is dropped after BOS, and "<0xXX>" pieces become that single byte.  BPE kind:
 * the token's bytes (byte-level characters mapped back to bytes; added tokens' text as is;
 * `prev` is unused).  Concatenating the pieces of a BPE tokenization gives back the text.
 * Returns a pointer valid until the next call on this tokenizer (or its free); *len receives the
 * length; an id out of range gives "". */
const char *lmp_tokenizer_decode(lmp_tokenizer *t, int prev, int token, size_t *len);

#endif
