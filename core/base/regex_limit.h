/* regex_limit.h — a PCRE2 search with a bound on its work.  A pattern such as ^(.+)+\d$
 * backtracks exponentially on a name it does not match; PCRE2's default limit (10 million steps
 * per name) let `check` spend 12.7 s on one config, then read the failure as "no match".  Here
 * each search stops after LMP_RE_MATCH_LIMIT steps (milliseconds) and says that it gave up. */
#ifndef LMP_CORE_REGEX_LIMIT_H
#define LMP_CORE_REGEX_LIMIT_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

/* Far above what a pattern over layer names needs (a few hundred steps). */
#define LMP_RE_MATCH_LIMIT 100000

/* 1: re matches somewhere in name; 0: it does not; -1: PCRE2 gave up (its match or depth limit,
 * or out of memory), so the answer is unknown. */
int lmp_re_search(const pcre2_code *re, const char *name);

#endif
