/* cli.h — what the command files of the lmpress tool share with tools/lmpress.c, which defines
 * it: the one way a command reports a failure or a usage error, option parsing, and opening a
 * model without a config (eval, generate).  Each command that has its own file (tools/cmd_*.c)
 * is dispatched from lmpress.c's run_command. */
#ifndef LMP_TOOLS_CLI_H
#define LMP_TOOLS_CLI_H

#include <stdint.h>

#include "model/model.h"
#include "plugin/backend.h"
#include "base/ctx.h"
#include "plugin/registry.h"
#include "text/tokenizer.h"

/* Prints the core's last error as "lmpress: error: ..." and returns 1. */
int fail(void);
/* A usage error: one line (an unknown option with the nearest one `usage` names), then where
 * the full usage is; returns 2. */
int usage_error(const char *usage, const char *fmt, const char *arg);
/* 1 when --help or -h is among the arguments. */
int wants_help(int argc, char **argv);
/* The value of the option argv[*i] (consumed), or NULL with *bad set after a message. */
const char *opt_value(int argc, char **argv, int *i, int *bad);
/* --allow-plugin DIR / --plugin-path DIR: 1 when argv[*i] is one of them (see lmpress.c). */
int trust_option(lmp_ctx *ctx, int argc, char **argv, int *i, int *bad, int search_all);
/* An integer >= lo into *out; 2 after a message otherwise. */
int parse_count(const char *s, const char *opt, int64_t lo, int64_t *out);
/* s as a JSON string on standard output. */
void print_json_string(const char *s);

/* A model run without a config: the backend, the model and its tokenizer. */
typedef struct direct_run {
    lmp_ctx *ctx;
    lmp_registry reg;
    lmp_backend be;
    lmp_model *m;
    lmp_tokenizer *tok;
} direct_run;

int direct_open(lmp_ctx *ctx, direct_run *d, const char *model, const char *tokenizer, const char *backend);
void direct_close(direct_run *d);

#endif
