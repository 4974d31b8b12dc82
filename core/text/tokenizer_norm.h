/* tokenizer_norm.h — the normalizers of a Hugging Face tokenizer.json ("normalizer"), applied to
 * each piece of text between added tokens before pre-tokenization, as `tokenizers` does:
 *
 *   NFC, NFD, NFKC, NFKD   Unicode normalization forms (libutf8proc; see the .c for why)
 *   Replace                every occurrence of a {"String": s} pattern by "content", left to right
 *   Prepend                "prepend" before a non-empty piece (Llama 2's "▁")
 *   Sequence               the "normalizers" in order (nested sequences too)
 *
 * Anything else (Lowercase, Strip, BertNormalizer, Precompiled, a Regex pattern, ...) is refused
 * naming the file and the key, since a normalizer left out silently changes the ids. */
#ifndef LMP_CORE_TOKENIZER_NORM_H
#define LMP_CORE_TOKENIZER_NORM_H

#include <stddef.h>

#include "formats/json.h"

typedef struct lmp_tok_norm lmp_tok_norm;

/* Parses tokenizer.json's "normalizer" value j (NULL or JSON null: no normalizer, *out = NULL).
 * path names the file in messages. */
int lmp_tok_norm_parse(const lmp_json *j, const char *path, lmp_tok_norm **out);
void lmp_tok_norm_free(lmp_tok_norm *n);

/* Normalizes s[0..len) into *out (malloc'd, *out_len bytes; never NULL on success).  Invalid
 * UTF-8 bytes pass through unchanged (HF cannot take such text; the valid runs around them are
 * normalized on their own).  Returns 0, or -1 when out of memory. */
int lmp_tok_norm_apply(const lmp_tok_norm *n, const unsigned char *s, size_t len, unsigned char **out,
                       size_t *out_len);

/* Whether the chain is exactly one NFC step (Qwen2's normalizer). */
int lmp_tok_norm_is_nfc_only(const lmp_tok_norm *n);

#endif
