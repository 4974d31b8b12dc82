/* regex_limit.c — see regex_limit.h. */
#include "base/regex_limit.h"

int lmp_re_search(const pcre2_code *re, const char *name)
{
    /* Match data and context per call (one pair is enough for a yes/no answer): a pattern may
     * be matched from several threads at once. */
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    int rc = PCRE2_ERROR_NOMEMORY;
    if (md && mc) {
        pcre2_set_match_limit(mc, LMP_RE_MATCH_LIMIT);
        pcre2_set_depth_limit(mc, LMP_RE_MATCH_LIMIT);
        rc = pcre2_match(re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, mc);
    }
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    return rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}
