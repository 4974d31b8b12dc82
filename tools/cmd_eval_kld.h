/* cmd_eval_kld.h — `lmpress eval MODEL --kl-divergence-base BASE`: MODEL against BASE on one
 * text, no config, with llama-perplexity --kl-divergence's statistics (core/eval/kld_stats.h).
 * lmpress.c's cmd_eval parses the options and hands them here. */
#ifndef LMP_TOOLS_CMD_EVAL_KLD_H
#define LMP_TOOLS_CMD_EVAL_KLD_H

#include <stdint.h>

#include "base/ctx.h"

typedef struct eval_kld_args {
    const char *model, *base, *tokenizer, *text, *backend;
    int64_t seq_len, max_windows; /* 0: the base's context; 0: every window */
    int second_half, json;
} eval_kld_args;

/* Runs the comparison and prints it; the exit status (0, or 1 after the error line). */
int cmd_eval_kld(lmp_ctx *ctx, const eval_kld_args *a);

#endif
