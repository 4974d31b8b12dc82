/* tokenizer_regex.h — the regexes of pre-tokenizers (tokenizer.json "Split" patterns, llama.cpp's
 * tokenizer.ggml.pre regexes), matched with PCRE2 in UTF mode with Unicode properties (\p{L},
 * \s, (?i:...) as `tokenizers`' Oniguruma reads them), text with invalid UTF-8 allowed (such bytes
 * never match), and match and depth limits so that a pathological pattern fails with a message
 * instead of running for minutes. */
#ifndef LMP_CORE_TOKENIZER_REGEX_H
#define LMP_CORE_TOKENIZER_REGEX_H

#include <stddef.h>

typedef struct lmp_tok_regex lmp_tok_regex;
typedef struct lmp_tok_regex_scratch lmp_tok_regex_scratch;

/* Compiles pattern[0..len) (literal: match the text as is, tokenizer.json's {"String": ...}).
 * `what` names the place for messages ("x/tokenizer.json: pre_tokenizer Split"). */
int lmp_tok_regex_compile(const char *pattern, size_t len, int literal, const char *what, lmp_tok_regex **out);
void lmp_tok_regex_free(lmp_tok_regex *re);
/* The pattern's text, for comparisons and messages. */
const char *lmp_tok_regex_pattern(const lmp_tok_regex *re);

/* Per-call match state (one per thread and call; the compiled regex is shared read-only). */
lmp_tok_regex_scratch *lmp_tok_regex_scratch_new(const lmp_tok_regex *re);
void lmp_tok_regex_scratch_free(lmp_tok_regex_scratch *m);

/* The first non-empty match in s[0..len) at or after `from`: returns 1 with [*ms, *me), 0 for
 * none, or a negative status (the match limit hit, with a message naming the pattern). */
int lmp_tok_regex_find(const lmp_tok_regex *re, lmp_tok_regex_scratch *m, const unsigned char *s, size_t len,
                       size_t from, size_t *ms, size_t *me);

#endif
