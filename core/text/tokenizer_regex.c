/* tokenizer_regex.c — see tokenizer_regex.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer_regex.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The match limit of one search: MATCH_LIMIT steps plus STEPS_PER_BYTE per byte of text left.
 * Tokenizer regexes are linear but may scan a whole run once more when an alternative fails
 * (Qwen2's \s*[\r\n]+ over a million spaces), so the limit grows with the text; a catastrophic
 * pattern (exponential) still stops within a fraction of a second.  (Oniguruma, which
 * `tokenizers` uses, stops at 10^7 retries per match by default.) */
#define MATCH_LIMIT 10000000u
#define STEPS_PER_BYTE 64u
#define DEPTH_LIMIT 10000u

struct lmp_tok_regex {
    pcre2_code *code;
    char *pattern;
    char *what;
};

struct lmp_tok_regex_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* this call's: the limit depends on the text */
};

void lmp_tok_regex_free(lmp_tok_regex *re)
{
    if (!re) return;
    pcre2_code_free(re->code);
    free(re->pattern);
    free(re->what);
    free(re);
}

int lmp_tok_regex_compile(const char *pattern, size_t len, int literal, const char *what, lmp_tok_regex **out)
{
    *out = NULL;
    lmp_tok_regex *re = calloc(1, sizeof *re);
    if (!re || !(re->pattern = malloc(len + 1)) || !(re->what = strdup(what))) {
        lmp_tok_regex_free(re);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory compiling a regex", what);
    }
    memcpy(re->pattern, pattern, len);
    re->pattern[len] = '\0';
    int err;
    PCRE2_SIZE off;
    /* (PCRE2_LITERAL takes no PCRE2_UCP: a literal has no classes to widen) */
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &off, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(err, msg, sizeof msg) < 0) snprintf((char *)msg, sizeof msg, "error %d", err);
        int rc = lmp_fail(LMP_EINVAL, "%s: regex \"%.80s\" does not compile at offset %zu: %s", what, re->pattern,
                          (size_t)off, (const char *)msg);
        lmp_tok_regex_free(re);
        return rc;
    }
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* faster where the JIT exists; optional */
    *out = re;
    return 0;
}

const char *lmp_tok_regex_pattern(const lmp_tok_regex *re) { return re->pattern; }

lmp_tok_regex_scratch *lmp_tok_regex_scratch_new(const lmp_tok_regex *re)
{
    lmp_tok_regex_scratch *m = malloc(sizeof *m);
    if (!m) return NULL;
    m->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    if (!m->md || !m->mctx) {
        lmp_tok_regex_scratch_free(m);
        return NULL;
    }
    pcre2_set_depth_limit(m->mctx, DEPTH_LIMIT);
    return m;
}

void lmp_tok_regex_scratch_free(lmp_tok_regex_scratch *m)
{
    if (!m) return;
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    free(m);
}

int lmp_tok_regex_find(const lmp_tok_regex *re, lmp_tok_regex_scratch *m, const unsigned char *s, size_t len,
                       size_t from, size_t *ms, size_t *me)
{
    uint64_t limit = MATCH_LIMIT + (uint64_t)STEPS_PER_BYTE * (len - from);
    pcre2_set_match_limit(m->mctx, limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit);
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, from, PCRE2_NOTEMPTY, m->md, m->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) snprintf((char *)msg, sizeof msg, "error %d", rc);
        return lmp_fail(LMP_EINVAL, "%s: regex \"%.80s\" on a piece of %zu bytes: %s (limits: %llu steps, depth %u)",
                        re->what, re->pattern, len, (const char *)msg,
                        (unsigned long long)(limit > UINT32_MAX ? UINT32_MAX : limit), DEPTH_LIMIT);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
