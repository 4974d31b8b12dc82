/* tokenizer_regex.c — see tokenizer_regex.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer_regex.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Enough for every tokenizer regex on any text (each match is short), small enough that a
 * catastrophic pattern stops within a fraction of a second. */
#define MATCH_LIMIT 1000000u
#define DEPTH_LIMIT 10000u

struct lmp_tok_regex {
    pcre2_code *code;
    pcre2_match_context *mctx;
    char *pattern;
    char *what;
};

struct lmp_tok_regex_scratch {
    pcre2_match_data *md;
};

void lmp_tok_regex_free(lmp_tok_regex *re)
{
    if (!re) return;
    pcre2_code_free(re->code);
    pcre2_match_context_free(re->mctx);
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
    re->mctx = pcre2_match_context_create(NULL);
    if (!re->mctx) {
        lmp_tok_regex_free(re);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory compiling a regex", what);
    }
    pcre2_set_match_limit(re->mctx, MATCH_LIMIT);
    pcre2_set_depth_limit(re->mctx, DEPTH_LIMIT);
    *out = re;
    return 0;
}

const char *lmp_tok_regex_pattern(const lmp_tok_regex *re) { return re->pattern; }

lmp_tok_regex_scratch *lmp_tok_regex_scratch_new(const lmp_tok_regex *re)
{
    lmp_tok_regex_scratch *m = malloc(sizeof *m);
    if (!m) return NULL;
    m->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    if (!m->md) {
        free(m);
        return NULL;
    }
    return m;
}

void lmp_tok_regex_scratch_free(lmp_tok_regex_scratch *m)
{
    if (!m) return;
    pcre2_match_data_free(m->md);
    free(m);
}

int lmp_tok_regex_find(const lmp_tok_regex *re, lmp_tok_regex_scratch *m, const unsigned char *s, size_t len,
                       size_t from, size_t *ms, size_t *me)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, from, PCRE2_NOTEMPTY, m->md, re->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) snprintf((char *)msg, sizeof msg, "error %d", rc);
        return lmp_fail(LMP_EINVAL, "%s: regex \"%.80s\" on a piece of %zu bytes: %s (limits: %u steps, depth %u)",
                        re->what, re->pattern, len, (const char *)msg, MATCH_LIMIT, DEPTH_LIMIT);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
